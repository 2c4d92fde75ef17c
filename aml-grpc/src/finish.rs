//! A future that, if its owner drops it before it completes, is handed to the runtime to
//! finish: the dispatch of an authorized call runs on the handler's own task (no spawn, no
//! cross-task wake-up per call) and still completes when the caller goes away.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Polls `future` in place; dropped while pending, it spawns the rest on the current tokio
/// runtime. Without a runtime (it is shutting down) the rest is dropped, which the gate
/// records as `unknown`.
pub(crate) struct FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    future: Option<Pin<Box<F>>>,
}

impl<F> FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    pub(crate) fn new(future: F) -> Self {
        FinishOnDrop {
            future: Some(Box::pin(future)),
        }
    }
}

impl<F> Future for FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(future) = self.future.as_mut() else {
            // Polled after completion: a caller bug; stay pending rather than panic.
            return Poll::Pending;
        };
        let output = std::task::ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(output)
    }
}

impl<F> Drop for FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let (Some(rest), Ok(runtime)) = (self.future.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_dropped_future_still_completes() {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let work = FinishOnDrop::new(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            flag.store(true, Ordering::SeqCst);
        });
        assert!(tokio::time::timeout(Duration::from_millis(10), work)
            .await
            .is_err());
        assert!(!done.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(done.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_completed_future_returns_its_output() {
        assert_eq!(FinishOnDrop::new(async { 7 }).await, 7);
    }
}
