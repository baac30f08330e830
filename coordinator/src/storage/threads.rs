//! Where storage work runs. sled's reads and writes, fsyncs, blob files and the waits a commit
//! makes on NATS (a changelog append, a blob brought from the bucket) run on Tokio's blocking
//! threads ([`blocking`], [`run_blocking`]), never on a runtime worker: there they would stall
//! every task the worker holds, and a wait on the runtime itself could deadlock it.
//!
//! A blocking thread is marked while it runs storage work, and [`wait_for`] — the one place
//! storage code waits on a future from blocking code — refuses on any other thread that has a
//! runtime entered ([`CoordinatorError::WaitOnRuntimeThread`]) instead of blocking it. A plain
//! thread with no runtime (a test, a tool) may wait. Clippy's `disallowed-methods`
//! (`clippy.toml`) refuses `block_in_place` and `Handle::block_on` everywhere else.

use std::cell::Cell;
use std::future::Future;

use atelier_messages::ErrorBody;

use crate::error::CoordinatorError;

thread_local! {
    /// Whether this thread is running storage work on a blocking thread.
    static STORAGE_WORK: Cell<bool> = const { Cell::new(false) };
}

/// Marks its thread as running storage work until dropped.
struct Marked {
    was: bool,
}

impl Marked {
    fn new() -> Self {
        Self {
            was: STORAGE_WORK.with(|marked| marked.replace(true)),
        }
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        STORAGE_WORK.with(|marked| marked.set(self.was));
    }
}

/// Runs blocking storage work on Tokio's blocking threads, its error as a coordinator error.
pub(crate) async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CoordinatorError> + Send + 'static,
) -> Result<T, CoordinatorError> {
    tokio::task::spawn_blocking(move || {
        let _marked = Marked::new();
        work()
    })
    .await
    .map_err(|join| CoordinatorError::Actor(join.to_string()))?
}

/// Runs blocking storage work on Tokio's blocking threads, its error as the wire's.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CoordinatorError> + Send + 'static,
) -> Result<T, ErrorBody> {
    run_blocking(work).await.map_err(ErrorBody::from)
}

/// Waits for `work` on `runtime` from blocking storage code; refused, without blocking, on a
/// thread that has a runtime entered and is not running storage work (a runtime worker).
pub(crate) fn wait_for<F: Future>(
    runtime: &tokio::runtime::Handle,
    what: &'static str,
    work: F,
) -> Result<F::Output, CoordinatorError> {
    let on_runtime = tokio::runtime::Handle::try_current().is_ok();
    if on_runtime && !STORAGE_WORK.with(Cell::get) {
        return Err(CoordinatorError::WaitOnRuntimeThread(what));
    }
    #[allow(clippy::disallowed_methods)] // the one checked wait: off the runtime's workers
    Ok(runtime.block_on(work))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer() -> u32 {
        tokio::task::yield_now().await;
        42
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_on_a_runtime_worker_is_refused_and_on_a_storage_thread_answers() {
        let runtime = tokio::runtime::Handle::current();
        let refused = wait_for(&runtime, "an answer", answer());
        assert!(
            matches!(
                refused,
                Err(CoordinatorError::WaitOnRuntimeThread("an answer"))
            ),
            "{refused:?}"
        );
        let answered = run_blocking(move || wait_for(&runtime, "an answer", answer())).await;
        assert_eq!(answered.ok(), Some(42));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unmarked_blocking_thread_is_refused_too() {
        let runtime = tokio::runtime::Handle::current();
        let refused =
            tokio::task::spawn_blocking(move || wait_for(&runtime, "an answer", answer()).is_err())
                .await;
        assert_eq!(refused.ok(), Some(true));
    }

    #[test]
    fn a_thread_with_no_runtime_may_wait() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let answered = wait_for(runtime.handle(), "an answer", answer());
        assert_eq!(answered.ok(), Some(42));
    }
}
