//! A caller's deadline: how long the boundary may wait for an approval.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// The point after which the boundary stops waiting for approval and claims no grant.
///
/// The adapter supplies the timer (the core has no runtime of its own), e.g. with tokio:
///
/// ```
/// # async fn f() {
/// use std::time::{Duration, Instant};
/// use aml_core::Deadline;
/// let at = Instant::now() + Duration::from_secs(30);
/// let deadline = Deadline::new(at, tokio::time::sleep_until(at.into()));
/// assert!(!deadline.passed());
/// # }
/// ```
///
/// A deadline that passes while approval is pending, or before the one-use claim, blocks
/// with `approval_error` and [`crate::DispatchOutcome::deadline_passed`] set; nothing is
/// claimed or dispatched.
pub struct Deadline {
    at: Instant,
    timer: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl core::fmt::Debug for Deadline {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Deadline")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl Deadline {
    /// A deadline at `at`; `timer` must complete at (or after) `at`.
    pub fn new(at: Instant, timer: impl Future<Output = ()> + Send + 'static) -> Self {
        Deadline {
            at,
            timer: Box::pin(timer),
        }
    }

    /// When it passes.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// Runs `work` until it completes (`Some`) or the deadline passes first (`None`).
    pub(crate) async fn bound<F: Future + Unpin>(&mut self, mut work: F) -> Option<F::Output> {
        std::future::poll_fn(|cx: &mut Context<'_>| {
            if let Poll::Ready(v) = Pin::new(&mut work).poll(cx) {
                return Poll::Ready(Some(v));
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }
}
