//! Turning a panicking hook into an ordinary failure, so the boundary fails closed.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A boxed future as `async_trait` returns it.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Starts a hook call and polls it, converting a panic at the call or at any poll into
/// `Err(message)`.
pub(crate) fn guarded<'a, T>(start: impl FnOnce() -> BoxFuture<'a, T>) -> CatchPanic<'a, T> {
    match catch_unwind(AssertUnwindSafe(start)) {
        Ok(fut) => CatchPanic(Some(fut), None),
        Err(payload) => CatchPanic(None, Some(panic_message(payload.as_ref()))),
    }
}

/// See [`guarded`].
pub(crate) struct CatchPanic<'a, T>(Option<BoxFuture<'a, T>>, Option<String>);

impl<T> Future for CatchPanic<'_, T> {
    type Output = Result<T, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(fut) = self.0.as_mut() else {
            let message = self
                .1
                .take()
                .unwrap_or_else(|| "polled after completion".to_owned());
            return Poll::Ready(Err(message));
        };
        match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => {
                self.0 = None;
                Poll::Ready(Ok(v))
            }
            Err(payload) => {
                self.0 = None;
                Poll::Ready(Err(panic_message(payload.as_ref())))
            }
        }
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload");
    format!("panicked: {text}")
}

/// An error's message followed by each of its causes (`message: cause: cause`), so a
/// receipt's detail says why, not only what.
pub(crate) fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Errors that already print their cause would repeat it.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
