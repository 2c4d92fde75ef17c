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
    fn restart(&mut self) {
        let next = Instant::now() + self.every;
        self.quiet.as_mut().reset(next);
    }

    /// Whether the stream has been quiet for the period (the timer then starts again).
    fn fired(&mut self, cx: &mut Context<'_>) -> bool {
        let fired = self.quiet.as_mut().poll(cx).is_ready();
        if fired {
            self.restart();
        }
        fired
    }
}

/// A response body the front sends.
#[derive(Debug)]
pub(crate) enum Body {
    /// All of it at once (or nothing).
    Full(Option<Bytes>),
    /// SSE chunks as they are sent; ends when the sender is dropped.
    Sse {
        rx: mpsc::Receiver<Bytes>,
        keep_alive: Option<KeepAlive>,
        /// Dropped when hyper drops the body (its end, or the client gone): how the front
        /// notices a client that stopped waiting.
        _guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    },
}

impl Body {
    pub(crate) fn empty() -> Body {
        Body::Full(None)
    }

    /// An SSE stream of what `rx` receives, with a keep-alive comment after each
    /// `keep_alive` of quiet (none when `None`); made on the runtime.
    pub(crate) fn sse(rx: mpsc::Receiver<Bytes>, keep_alive: Option<Duration>) -> Body {
        Body::sse_holding(rx, keep_alive, None)
    }

    /// [`Body::sse`], holding `guard` until hyper drops the body.
    pub(crate) fn watched_sse(
        rx: mpsc::Receiver<Bytes>,
        keep_alive: Option<Duration>,
        guard: Box<dyn std::any::Any + Send + Sync>,
    ) -> Body {
        Body::sse_holding(rx, keep_alive, Some(guard))
    }

    fn sse_holding(
        rx: mpsc::Receiver<Bytes>,
        keep_alive: Option<Duration>,
        _guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Body {
        let keep_alive = keep_alive.map(|every| KeepAlive {
            every,
            quiet: Box::pin(tokio::time::sleep(every)),
        });
        Body::Sse {
            rx,
            keep_alive,
            _guard,
        }
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
            Body::Sse { rx, keep_alive, .. } => match rx.poll_recv(cx) {
                Poll::Ready(chunk) => {
                    if let Some(timer) = keep_alive {
                        timer.restart();
                    }
                    Poll::Ready(chunk.map(|b| Ok(Frame::data(b))))
                }
                Poll::Pending if keep_alive.as_mut().is_some_and(|t| t.fired(cx)) => {
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Sse { .. } => SizeHint::default(),
        }
    }
}
