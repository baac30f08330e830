//! Waiting for a job's end by reading its record: the one loop behind the CLI's last look
//! once a job's end is announced, MCP's `submit_job` and writing tools, and the OpenAI
//! endpoint's answer that is not streamed (the CLI's `watch` and the streamed answer follow
//! the job's events instead).
//!
//! A job not recorded yet (just submitted, still in its queue) is waited for; every view read
//! while the job runs is handed to the caller (MCP tells its client what changed); a bound ends
//! the wait. A caller that stops waiting (a cancelled MCP call) drops
//! the wait: the job goes on.

use std::future::Future;
use std::time::Duration;

use atelier_messages::job::JobView;
use atelier_messages::{ErrorBody, ErrorCode};

/// How often the record is read.
pub const POLL: Duration = Duration::from_millis(200);

/// Reads the job's record with `read` every `every` until the job ends, or until `bound` (when
/// given) runs out: the ended job's view, or `None` at the bound. `seen` is given every view
/// read while the job runs. An error other than `NOT_FOUND` (not recorded yet) ends the wait.
pub async fn until_ended<Read, ReadFut, Seen, SeenFut>(
    mut read: Read,
    every: Duration,
    bound: Option<Duration>,
    mut seen: Seen,
) -> Result<Option<JobView>, ErrorBody>
where
    Read: FnMut() -> ReadFut,
    ReadFut: Future<Output = Result<JobView, ErrorBody>>,
    Seen: FnMut(JobView) -> SeenFut,
    SeenFut: Future<Output = ()>,
{
    let deadline = bound.map(|bound| tokio::time::Instant::now() + bound);
    loop {
        match read().await {
            Ok(view) if view.state.is_terminal() => return Ok(Some(view)),
            Ok(view) => seen(view).await,
            Err(error) if error.code == ErrorCode::NotFound => {}
            Err(error) => return Err(error),
        }
        if deadline.is_some_and(|deadline| tokio::time::Instant::now() >= deadline) {
            return Ok(None);
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use atelier_messages::job::JobState;

    use super::*;

    fn view(state: JobState) -> JobView {
        let mut view: JobView = serde_json::from_value(serde_json::json!({
            "job_id": "j", "workbench": "w", "message": "go", "model": "m", "state": "queued",
            "phase": "research", "items": [], "created_at_ms": 0, "updated_at_ms": 0
        }))
        .expect("a job view");
        view.state = state;
        view
    }

    #[tokio::test]
    async fn a_job_not_recorded_yet_is_waited_for_and_its_views_are_seen() {
        let reads = Cell::new(0);
        let seen = Cell::new(0);
        let followed = until_ended(
            || {
                reads.set(reads.get() + 1);
                let answer = match reads.get() {
                    1 => Err(ErrorBody::new(ErrorCode::NotFound, "not yet")),
                    2 | 3 => Ok(view(JobState::Running)),
                    _ => Ok(view(JobState::Succeeded)),
                };
                async move { answer }
            },
            Duration::from_millis(1),
            None,
            |_| {
                seen.set(seen.get() + 1);
                async {}
            },
        )
        .await;
        assert!(matches!(followed, Ok(Some(view)) if view.state == JobState::Succeeded));
        assert_eq!((reads.get(), seen.get()), (4, 2));
    }

    #[tokio::test]
    async fn a_bound_ends_the_wait_and_an_error_ends_it_at_once() {
        let running = until_ended(
            || async { Ok(view(JobState::Running)) },
            Duration::from_millis(1),
            Some(Duration::from_millis(20)),
            |_| async {},
        )
        .await;
        assert!(matches!(running, Ok(None)));
        let refused = until_ended(
            || async { Err(ErrorBody::new(ErrorCode::Internal, "down")) },
            Duration::from_millis(1),
            None,
            |_| async {},
        )
        .await;
        assert!(matches!(refused, Err(error) if error.code == ErrorCode::Internal));
    }
}
