//! The response body: a whole message, or an SSE stream fed from a channel.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

/// The SSE comment sent on a stream that has been quiet for the keep-alive period: clients
/// ignore it, and proxies with idle timeouts see traffic.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// A stream's keep-alive timer: it fires after `every` with nothing sent.
#[derive(Debug)]
pub(crate) struct KeepAlive {
    every: Duration,
    quiet: Pin<Box<Sleep>>,
}

impl KeepAlive {
    /// A timer for a stream (made on the runtime); `None` when keep-alives are off.
    pub(crate) fn new(every: Option<Duration>) -> Option<KeepAlive> {
        every.map(|every| KeepAlive {
            every,
            quiet: Box::pin(tokio::time::sleep(every)),
        })
    }

    fn restart(&mut self) {
        let next = Instant::now() + self.every;
        self.quiet.as_mut().reset(next);
    }
}

/// A response body the front sends.
#[derive(Debug)]
pub(crate) enum Body {
    /// All of it at once (or nothing).
    Full(Option<Bytes>),
    /// SSE chunks as they are sent; ends when the sender is dropped.
    Stream {
        rx: mpsc::Receiver<Bytes>,
        keep_alive: Option<KeepAlive>,
    },
    /// An SSE stream with something dropped when hyper drops the body (its end, or the
    /// client gone): how the front notices a client that stopped waiting.
    Watched {
        rx: mpsc::Receiver<Bytes>,
        keep_alive: Option<KeepAlive>,
        _keep: Box<dyn std::any::Any + Send + Sync>,
    },
}

impl Body {
    pub(crate) fn empty() -> Body {
        Body::Full(None)
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Body {
        Body::Full(Some(bytes))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream { rx, keep_alive } | Body::Watched { rx, keep_alive, .. } => {
                match rx.poll_recv(cx) {
                    Poll::Ready(chunk) => {
                        if let Some(timer) = keep_alive {
                            timer.restart();
                        }
                        Poll::Ready(chunk.map(|b| Ok(Frame::data(b))))
                    }
                    Poll::Pending => match keep_alive {
                        Some(timer) => match timer.quiet.as_mut().poll(cx) {
                            Poll::Ready(()) => {
                                timer.restart();
                                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))))
                            }
                            Poll::Pending => Poll::Pending,
                        },
                        None => Poll::Pending,
                    },
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Stream { .. } | Body::Watched { .. } => SizeHint::default(),
        }
    }
}
