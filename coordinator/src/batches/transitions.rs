//! A target's moves between states (dispatched, put back, ended), each in one transaction with
//! the batch's counts; an end and the next dispatch may share one.

use atelier_messages::batch::{TargetState, child_job_id};
use atelier_messages::budget::Spent;
use atelier_messages::job::JobOutcome;
use atelier_messages::{ErrorBody, ErrorCode, now_ms};

use super::{BatchRecord, Batches, TargetRecord, not_found, target_key};
use crate::error::CoordinatorError;
use crate::storage;
use crate::storage::txn::{TxResult, abort, flatten, get, put};

/// How a target's child ended, to be recorded on the target.
#[derive(Debug, Clone)]
pub struct TargetEnd {
    pub index: u64,
    pub job_id: String,
    pub state: TargetState,
    pub error: Option<ErrorBody>,
    pub outcome: Option<JobOutcome>,
    /// What the child spent.
    pub spent: Spent,
}

/// One change in a transaction over targets: the target's index and what becomes of it,
/// given the batch as the changes before it left it (its new state, or `None` to leave it).
type TargetChange<'a> = (
    u64,
    &'a dyn Fn(&BatchRecord, &mut TargetRecord) -> Option<TargetState>,
);

/// A queued target running its child (named by the batch, the target and the attempt).
fn dispatched(batch_id: &str, target: &mut TargetRecord) -> Option<TargetState> {
    if target.state != TargetState::Queued {
        return None;
    }
    target.job_id = Some(child_job_id(batch_id, target.index, target.attempt));
    target.error = None;
    target.outcome = None;
    Some(TargetState::Running)
}

/// A target running this child ended as the child did.
fn finished(target: &mut TargetRecord, end: &TargetEnd) -> Option<TargetState> {
    let ours = target.job_id.as_deref() == Some(end.job_id.as_str());
    if target.state != TargetState::Running || !ours {
        return None;
    }
    target.error = end.error.clone();
    target.outcome = (end.outcome.clone()).filter(|_| end.state == TargetState::Succeeded);
    target.spent = end.spent;
    Some(end.state)
}

impl Batches {
    /// Changes one target and the batch's counts together. `change` sees the target and
    /// returns its new state, or `None` to leave everything as it was.
    pub(super) fn change_target(
        &self,
        batch_id: &str,
        index: u64,
        change: impl Fn(&mut TargetRecord) -> Option<TargetState>,
    ) -> Result<(BatchRecord, TargetRecord), CoordinatorError> {
        let change = |_: &BatchRecord, target: &mut TargetRecord| change(target);
        let (batch, mut targets) = self.change_targets(batch_id, &[(index, &change)])?;
        let (target, _) = targets.pop().ok_or_else(|| {
            CoordinatorError::from(ErrorBody::new(
                ErrorCode::Internal,
                "a target change returned no target",
            ))
        })?;
        Ok((batch, target))
    }

    /// Applies each change, in order, to its target and the batch's counts in one
    /// transaction; each sees the batch as the changes before it left it. Every target comes
    /// back with whether it changed.
    fn change_targets(
        &self,
        batch_id: &str,
        changes: &[TargetChange<'_>],
    ) -> Result<(BatchRecord, Vec<(TargetRecord, bool)>), CoordinatorError> {
        let batches = self.batches()?;
        let targets = self.targets()?;
        let result =
            storage::transaction([&batches, &targets], |[batches, targets]| -> TxResult<_> {
                let mut batch: BatchRecord = get(&batches, batch_id.as_bytes())?
                    .ok_or_else(|| abort(not_found(batch_id).into()))?;
                let mut changed = Vec::with_capacity(changes.len());
                for (index, change) in changes {
                    let key = target_key(batch_id, *index);
                    let mut target: TargetRecord = get(&targets, &key)?.ok_or_else(|| {
                        abort(
                            ErrorBody::new(
                                ErrorCode::NotFound,
                                format!("batch `{batch_id}` has no target {index}"),
                            )
                            .into(),
                        )
                    })?;
                    let before = target.state;
                    let Some(after) = change(&batch, &mut target) else {
                        changed.push((target, false));
                        continue;
                    };
                    target.state = after;
                    batch.counts.shift(before, after);
                    let succeeded_now = after == TargetState::Succeeded && before != after;
                    if succeeded_now && let Some(outcome) = &target.outcome {
                        batch.counts.count_outcome(outcome);
                    }
                    if before == TargetState::Running && after != TargetState::Queued {
                        batch.spent = batch.spent.plus(target.spent);
                    }
                    put(&targets, &key, &target)?;
                    changed.push((target, true));
                }
                if changed.iter().any(|(_, changed)| *changed) {
                    batch.updated_at_ms = now_ms();
                    put(&batches, batch_id.as_bytes(), &batch)?;
                }
                Ok((batch, changed))
            });
        result.map_err(flatten)
    }

    /// Marks a queued target running as the child job of its attempt, before that job is
    /// submitted; returns the target with its job id.
    pub fn dispatch(
        &self,
        batch_id: &str,
        index: u64,
    ) -> Result<(BatchRecord, TargetRecord), CoordinatorError> {
        self.change_target(batch_id, index, |target| dispatched(batch_id, target))
    }

    /// Puts a running target back in the queue, its child never recorded (its workbench was
    /// answering another job); a no-op for a target not running that child.
    pub fn undispatch(
        &self,
        batch_id: &str,
        index: u64,
        job_id: &str,
    ) -> Result<(BatchRecord, TargetRecord), CoordinatorError> {
        self.change_target(batch_id, index, |target| {
            let ours = target.job_id.as_deref() == Some(job_id);
            if target.state != TargetState::Running || !ours {
                return None;
            }
            target.job_id = None;
            Some(TargetState::Queued)
        })
    }

    /// Records how a running target's child ended, with what a succeeded child did (a no-op
    /// for a target already ended or whose job is another attempt's). It may be staged: a
    /// target found running after a crash is settled again from its child's record, and the
    /// batch's end is committed.
    pub fn finish_target(
        &self,
        batch_id: &str,
        end: &TargetEnd,
    ) -> Result<(BatchRecord, TargetRecord), CoordinatorError> {
        self.change_target(batch_id, end.index, |target| finished(target, end))
    }

    /// [`Batches::finish_target`] and [`Batches::dispatch`] of target `next` in one
    /// transaction, the next target dispatched only if the batch still dispatches
    /// once the end is counted (not cancelled, within its failure tolerance and budget): the target
    /// dispatched, if it was.
    pub fn finish_then_dispatch(
        &self,
        batch_id: &str,
        end: &TargetEnd,
        next: u64,
    ) -> Result<(BatchRecord, Option<TargetRecord>), CoordinatorError> {
        let finish = |_: &BatchRecord, target: &mut TargetRecord| finished(target, end);
        let dispatch = |batch: &BatchRecord, target: &mut TargetRecord| {
            if !batch.dispatches() {
                return None;
            }
            dispatched(batch_id, target)
        };
        let changes: [TargetChange<'_>; 2] = [(end.index, &finish), (next, &dispatch)];
        let (batch, mut targets) = self.change_targets(batch_id, &changes)?;
        let dispatched = targets
            .pop()
            .and_then(|(target, changed)| changed.then_some(target));
        Ok((batch, dispatched))
    }
}
