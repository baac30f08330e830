//! How a batch's targets and the batch itself end: each child's end recorded on its target
//! (with the next queued target dispatched in the same write), the children cancelled, the
//! batch's own end and its events.

use std::time::Instant;

use atelier_messages::batch::{BatchEvent, BatchEventKind, BatchState, TargetState};
use atelier_messages::job::JobState;
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, encode, now_ms, subjects};

use super::{BatchRunnerState, PROGRESS_EVERY};
use crate::batches::{BatchRecord, TargetEnd};
use crate::children::ChildEnd;

impl BatchRunnerState {
    /// Looks at every child in flight and records the ends found. A child whose shard does
    /// not answer now is looked at again at the next reconcile, and holds up none of the others.
    pub(super) async fn settle_all(&mut self) -> Result<(), ErrorBody> {
        let children: Vec<(String, String)> = (self.in_flight.iter())
            .map(|(job_id, (_, workbench))| (job_id.clone(), workbench.clone()))
            .collect();
        for (job_id, workbench) in children {
            match self.config.children.end_now(&job_id, &workbench).await {
                Ok(Some(end)) => self.end_target(end).await?,
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(%job_id, %error, "child not looked at; again at the next reconcile");
                }
            }
        }
        Ok(())
    }

    /// Records the end of a child in flight on its target.
    pub(super) async fn end_target(&mut self, end: ChildEnd) -> Result<(), ErrorBody> {
        match self.take(end) {
            Some(end) => self.finish(end).await,
            None => Ok(()),
        }
    }

    /// Records the end of a child in flight on its target and, in the same write, dispatches
    /// the next queued target if the batch still dispatches (a write per target, not two).
    pub(super) async fn end_target_and_go_on(&mut self, end: ChildEnd) -> Result<(), ErrorBody> {
        let Some(end) = self.take(end) else {
            return Ok(());
        };
        // A workbench waited for is looked at first: its target is left to `fill`.
        let next = match self.room() {
            0 => None,
            _ => (self.queued(1).await?.into_iter())
                .find(|target| !self.waited_for.contains(&target.workbench)),
        };
        let Some(next) = next else {
            return self.finish(end).await;
        };
        let batches = &self.config.batches;
        let batch_id = self.batch_id().to_string();
        let (record, dispatched) = batches
            .commit(move |batches| batches.finish_then_dispatch(&batch_id, &end, next.index))
            .await?;
        self.ended(record).await;
        match dispatched {
            Some(target) => self.follow(target).await,
            None => Ok(()),
        }
    }

    /// Records a child's end on its target (dispatching nothing).
    async fn finish(&mut self, end: TargetEnd) -> Result<(), ErrorBody> {
        let batches = &self.config.batches;
        let batch_id = self.batch_id().to_string();
        let (record, _) = batches
            .stage(move |batches| batches.finish_target(&batch_id, &end))
            .await?;
        self.ended(record).await;
        Ok(())
    }

    /// A child's end as its target records it, once the child is no longer in flight; `None`
    /// for a job that is not one of ours in flight.
    fn take(&mut self, end: ChildEnd) -> Option<TargetEnd> {
        let (index, workbench) = self.in_flight.remove(&end.job_id)?;
        self.busy.remove(&workbench);
        let state = match end.state {
            JobState::Succeeded => TargetState::Succeeded,
            JobState::Cancelled => TargetState::Cancelled,
            _ => TargetState::Failed,
        };
        Some(TargetEnd {
            index,
            job_id: end.job_id,
            state,
            error: end.error,
            outcome: end.outcome,
            spent: end.spent,
        })
    }

    /// Takes the batch's record after a target ended; tells of its progress now and then.
    async fn ended(&mut self, record: BatchRecord) {
        let crossed = !self.record.beyond_tolerance() && record.beyond_tolerance();
        let spent = !self.record.budget_reached() && record.budget_reached();
        self.record = record;
        if crossed {
            tracing::warn!(batch_id = %self.batch_id(), failed = self.record.counts.failed, "failures beyond the batch's tolerance; no more targets are dispatched");
        }
        if spent {
            tracing::warn!(batch_id = %self.batch_id(), tokens = self.record.spent.tokens, "the batch reached its budget; no more targets are dispatched");
        }
        if self.last_progress.elapsed() >= PROGRESS_EVERY {
            self.emit(BatchEventKind::BatchProgress).await;
        }
    }

    /// Cancels every child in flight (they end at their next step boundary).
    pub(super) async fn cancel_children(&self) {
        for (job_id, (_, workbench)) in &self.in_flight {
            if let Err(error) = self.config.children.cancel(job_id, workbench).await {
                tracing::debug!(%job_id, %error, "child not cancelled (it may have ended)");
            }
        }
    }

    /// Ends the batch once nothing runs and nothing more will be dispatched; true when ended.
    pub(super) async fn finish_if_done(&mut self) -> Result<bool, ErrorBody> {
        if !self.in_flight.is_empty() {
            return Ok(false);
        }
        if self.dispatching() && self.record.counts.queued > 0 {
            return Ok(false);
        }
        let batches = &self.config.batches;
        let batch_id = self.batch_id().to_string();
        let record = batches
            .commit(move |batches| {
                batches.cancel_queued(&batch_id)?;
                batches.update(&batch_id, |record| {
                    let (state, error) = outcome(record);
                    record.state = state;
                    record.error = error;
                    record.finished_at_ms = Some(now_ms());
                    Ok(())
                })
            })
            .await?;
        self.record = record;
        tracing::info!(batch_id = %self.batch_id(), state = %self.record.state, succeeded = self.record.counts.succeeded, failed = self.record.counts.failed, "batch finished");
        self.emit(BatchEventKind::BatchFinished).await;
        Ok(true)
    }

    /// Publishes a batch event (lost events are logged: the record is the truth).
    pub(super) async fn emit(&mut self, kind: BatchEventKind) {
        self.last_progress = Instant::now();
        let event = BatchEvent {
            v: PROTOCOL_VERSION,
            batch_id: self.record.batch_id.clone(),
            at_ms: now_ms(),
            kind,
            state: self.record.state,
            counts: self.record.counts,
            error: self.record.error.clone(),
        };
        let subject = subjects::batch::event(&event.batch_id, kind.as_str());
        let format = self.config.events_format;
        let published = match encode(&event, format) {
            Ok(payload) => self
                .config
                .jetstream
                .publish_with_headers(
                    subject,
                    atelier_transport::headers::with_format(format),
                    payload.into(),
                )
                .await
                .map(|_| ())
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = published {
            tracing::warn!(%error, kind = kind.as_str(), "batch event not published");
        }
    }
}

/// How a batch with nothing left to run ended.
fn outcome(record: &BatchRecord) -> (BatchState, Option<ErrorBody>) {
    let counts = record.counts;
    if record.cancel_requested {
        let error = ErrorBody::new(ErrorCode::UserCanceled, "the batch was cancelled");
        return (BatchState::Cancelled, Some(error));
    }
    if record.beyond_tolerance() {
        let tolerance = record
            .tolerate_failures
            .map(|tolerance| tolerance.to_string())
            .unwrap_or_default();
        let error = ErrorBody::new(
            ErrorCode::FailureThresholdExceeded,
            format!(
                "{} of {} targets failed, beyond the tolerated {tolerance}; {} were not run",
                counts.failed, counts.total, counts.cancelled
            ),
        );
        return (BatchState::Failed, Some(error));
    }
    // Reached with targets left unstarted (a budget reached by the last target is no stop).
    if let Some(reached) = record.budget.reached_by(&record.spent)
        && counts.cancelled > 0
    {
        let error = ErrorBody::new(
            ErrorCode::BudgetExceeded,
            format!(
                "the batch reached its budget ({reached}): {} of {} targets ran, {} were not \
                 started",
                counts.total - counts.cancelled,
                counts.total,
                counts.cancelled
            ),
        );
        return (BatchState::BudgetExhausted, Some(error));
    }
    if counts.failed == 0 && counts.cancelled == 0 {
        return (BatchState::Succeeded, None);
    }
    let error = ErrorBody::new(
        ErrorCode::TargetsFailed,
        format!(
            "{} of {} targets failed (`atelier batch status {}` names them; `atelier batch retry` runs them again)",
            counts.failed, counts.total, record.batch_id
        ),
    );
    (BatchState::CompletedWithFailures, Some(error))
}
