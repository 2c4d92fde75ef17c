//! Time and tasks, from the host's runtime: the core has none of its own (ADR 019).

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

/// A boxed, sendable future.
pub type BoxedFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the gate needs of an async runtime to keep deadlines and to let a call that spent
/// its grant finish after its caller has gone.
///
/// With the `tokio` feature, `TokioRuntime` is one. Another runtime's is as short:
///
/// ```
/// use std::time::Instant;
/// use aml_core::{BoxedFuture, CallRuntime};
///
/// /// Tokio, written by hand (what `aml_core::TokioRuntime` does).
/// #[derive(Debug)]
/// struct MyRuntime(tokio::runtime::Handle);
///
/// impl CallRuntime for MyRuntime {
///     fn sleep_until(&self, at: Instant) -> BoxedFuture<()> {
///         Box::pin(tokio::time::sleep_until(at.into()))
///     }
///     fn spawn(&self, task: BoxedFuture<()>) {
///         self.0.spawn(task);
///     }
/// }
/// ```
pub trait CallRuntime: Send + Sync + core::fmt::Debug {
    /// The runtime's clock now (a test runtime's clock may be paused).
    fn now(&self) -> Instant {
        Instant::now()
    }
    /// A future that completes at (or after) `at`.
    fn sleep_until(&self, at: Instant) -> BoxedFuture<()>;
    /// Runs `task` to completion on its own, without anyone awaiting it.
    fn spawn(&self, task: BoxedFuture<()>);
}

/// The tokio runtime current when a call is made (feature `tokio`).
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioRuntime;

#[cfg(feature = "tokio")]
impl CallRuntime for TokioRuntime {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep_until(&self, at: Instant) -> BoxedFuture<()> {
        Box::pin(tokio::time::sleep_until(at.into()))
    }

    fn spawn(&self, task: BoxedFuture<()>) {
        // Outside a runtime (one shutting down) the task is dropped: the call is then
        // recorded `unknown`, as cut off while the tool ran.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(task);
        }
    }
}
