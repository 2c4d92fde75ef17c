//! What may cut a call short before its one-use claim: the caller's deadline, and a signal
//! that the caller has gone.

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

    #[cfg(feature = "catalog")]
    pub(crate) fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.timer.as_mut().poll(cx)
    }
}

/// A signal that the caller has gone (its connection closed, its input ended): any future
/// that completes then. Until the one-use claim it stops the call like a deadline does;
/// from the claim on, the call finishes regardless (ADR 019).
pub struct CallerGone(Pin<Box<dyn Future<Output = ()> + Send>>);

impl core::fmt::Debug for CallerGone {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CallerGone")
    }
}

impl CallerGone {
    /// The caller is gone once `signal` completes.
    pub fn new(signal: impl Future<Output = ()> + Send + 'static) -> Self {
        CallerGone(Box::pin(signal))
    }
}

/// Why the wait before the claim was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupted {
    DeadlinePassed,
    CallerGone,
}

/// The deadline and the caller-gone signal of one call, watched until the claim.
#[derive(Debug)]
pub(crate) struct Watch {
    pub(crate) deadline: Option<Deadline>,
    pub(crate) gone: Option<CallerGone>,
    /// What completed already: neither future is polled again after it completes.
    fired: Option<Interrupted>,
}

impl Watch {
    #[cfg(feature = "catalog")]
    pub(crate) fn new(deadline: Option<Deadline>, gone: Option<CallerGone>) -> Self {
        Watch {
            deadline,
            gone,
            fired: None,
        }
    }

    pub(crate) fn until(deadline: Option<Deadline>) -> Self {
        Watch {
            deadline,
            gone: None,
            fired: None,
        }
    }

    /// Runs `work` until it completes, or the deadline passes or the caller goes first.
    pub(crate) async fn bound<F: Future + Unpin>(&mut self, mut work: F) -> Result<F::Output, Interrupted> {
        std::future::poll_fn(|cx: &mut Context<'_>| {
            if let Poll::Ready(v) = Pin::new(&mut work).poll(cx) {
                return Poll::Ready(Ok(v));
            }
            self.poll_interrupt(cx).map(Err)
        })
        .await
    }

    /// Whether the deadline has passed or the caller has gone, now.
    pub(crate) fn interrupted(&mut self) -> Option<Interrupted> {
        if self.deadline.as_ref().is_some_and(Deadline::passed) {
            return Some(Interrupted::DeadlinePassed);
        }
        match self.poll_interrupt(&mut Context::from_waker(std::task::Waker::noop())) {
            Poll::Ready(why) => Some(why),
            Poll::Pending => None,
        }
    }

    fn poll_interrupt(&mut self, cx: &mut Context<'_>) -> Poll<Interrupted> {
        if let Some(fired) = self.fired {
            return Poll::Ready(fired);
        }
        if let Some(deadline) = &mut self.deadline {
            if deadline.timer.as_mut().poll(cx).is_ready() {
                self.fired = Some(Interrupted::DeadlinePassed);
            }
        }
        if self.fired.is_none() {
            if let Some(CallerGone(gone)) = &mut self.gone {
                if gone.as_mut().poll(cx).is_ready() {
                    self.fired = Some(Interrupted::CallerGone);
                }
            }
        }
        match self.fired {
            Some(fired) => Poll::Ready(fired),
            None => Poll::Pending,
        }
    }
}
