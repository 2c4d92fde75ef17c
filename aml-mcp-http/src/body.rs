//! The response body: a whole message, or an SSE stream fed from a channel.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::sync::mpsc;

/// A response body the front sends.
#[derive(Debug)]
pub(crate) enum Body {
    /// All of it at once (or nothing).
    Full(Option<Bytes>),
    /// Chunks as they are sent; ends when the sender is dropped.
    Stream(mpsc::Receiver<Bytes>),
    /// A stream with something dropped when hyper drops the body (its end, or the client
    /// gone): how the front notices a client that stopped waiting.
    Watched {
        rx: mpsc::Receiver<Bytes>,
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
            Body::Stream(rx) | Body::Watched { rx, .. } => {
                rx.poll_recv(cx).map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
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
            Body::Stream(_) | Body::Watched { .. } => SizeHint::default(),
        }
    }
}
