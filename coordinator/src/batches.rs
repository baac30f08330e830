//! Batch records and their targets in sled.
//!
//! A batch is one record (tree `batches`) holding its action, settings, state and the counts
//! of its targets per state; each target is a record of its own (tree `batch_targets`, keyed
//! by batch id and big-endian index, so a scan visits targets in order). A target changes state
//! in one transaction with the batch's counts, so the counts always add up. Creation writes the
//! targets first and the batch record last: the record is the commit point, and a batch whose
//! creation was cut short by a crash does not exist (re-submitting it writes it whole).

use std::collections::HashSet;

use atelier_messages::batch::{
    BatchAction, BatchCounts, BatchState, BatchView, FAILURES_SHOWN, FailureTolerance, SubmitBatch,
    TargetSet, TargetState, TargetView,
};
use atelier_messages::budget::{Budget, Spent};
use atelier_messages::job::JobOutcome;
use atelier_messages::{ErrorBody, ErrorCode, now_ms};
use serde::{Deserialize, Serialize};

use crate::error::CoordinatorError;
use crate::storage::{self, Records, Storage, trees};

mod transitions;

pub use transitions::TargetEnd;

/// The durable record of a batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchRecord {
    pub batch_id: String,
    pub targets: TargetSet,
    pub action: BatchAction,
    pub state: BatchState,
    pub counts: BatchCounts,
    pub concurrency: u32,
    #[serde(default)]
    pub tolerate_failures: Option<FailureTolerance>,
    #[serde(default)]
    pub auto_approve: bool,
    #[serde(default)]
    pub continue_draft: bool,
    /// Each target's time limit (the operator's default when absent).
    #[serde(default)]
    pub time_limit_secs: Option<u64>,
    /// The targets' priority with the model provider (`low` when absent).
    #[serde(default)]
    pub priority: Option<atelier_messages::provider::Priority>,
    /// What all its targets together may spend.
    #[serde(default)]
    pub budget: Budget,
    /// What its ended targets spent, added in the write that records each end (so a target
    /// settled again after a crash is counted once).
    #[serde(default)]
    pub spent: Spent,
    #[serde(default)]
    pub cancel_requested: bool,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
}

impl BatchRecord {
    /// The view without its failures.
    pub fn view(&self) -> BatchView {
        BatchView {
            batch_id: self.batch_id.clone(),
            state: self.state,
            action: self.action.describe(),
            counts: self.counts,
            concurrency: self.concurrency,
            tolerate_failures: self.tolerate_failures,
            error: self.error.clone(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            finished_at_ms: self.finished_at_ms,
            cancel_requested: self.cancel_requested,
            failures: Vec::new(),
            budget: self.budget,
            spent: self.spent,
        }
    }

    /// True while new targets may start: not cancelled, within its failure tolerance and its
    /// budget.
    pub fn dispatches(&self) -> bool {
        !self.cancel_requested && !self.beyond_tolerance() && !self.budget_reached()
    }

    /// True when its targets spent its budget.
    pub fn budget_reached(&self) -> bool {
        self.budget.reached_by(&self.spent).is_some()
    }

    /// True when more targets failed than the batch tolerates.
    pub fn beyond_tolerance(&self) -> bool {
        self.tolerate_failures
            .is_some_and(|tolerance| tolerance.exceeded(self.counts.failed, self.counts.total))
    }
}

/// The durable record of one target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetRecord {
    pub index: u64,
    pub workbench: String,
    #[serde(default)]
    pub file: Option<String>,
    pub state: TargetState,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// Whether the child works on a draft it finds (true for a workbench's later targets).
    #[serde(default)]
    pub continue_draft: bool,
    /// What the child did, once it succeeded (counted as changed or answered with it).
    #[serde(default)]
    pub outcome: Option<JobOutcome>,
    /// What its child spent, once it ended.
    #[serde(default)]
    pub spent: Spent,
}

impl TargetRecord {
    pub fn view(&self) -> TargetView {
        TargetView {
            index: self.index,
            workbench: self.workbench.clone(),
            file: self.file.clone(),
            state: self.state,
            job_id: self.job_id.clone(),
            attempt: self.attempt,
            error: self.error.clone(),
            outcome: self.outcome.clone(),
        }
    }
}

/// Batch records and targets.
#[derive(Debug, Clone)]
pub struct Batches {
    storage: Storage,
}

fn not_found(batch_id: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::NotFound,
        format!("no batch `{batch_id}`; list batches with `atelier batch list`"),
    )
}

/// The key of a target: `<batch>\0<index, big-endian>`.
fn target_key(batch_id: &str, index: u64) -> Vec<u8> {
    let mut key = target_prefix(batch_id);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

fn target_prefix(batch_id: &str) -> Vec<u8> {
    let mut key = batch_id.as_bytes().to_vec();
    key.push(0);
    key
}

impl Records for Batches {
    fn storage(&self) -> &Storage {
        &self.storage
    }
}

impl Batches {
    pub fn new(storage: Storage) -> Self {
        Self { storage }
    }

    fn batches(&self) -> Result<storage::Tree, CoordinatorError> {
        self.storage.tree(trees::BATCHES)
    }

    fn targets(&self) -> Result<storage::Tree, CoordinatorError> {
        self.storage.tree(trees::BATCH_TARGETS)
    }

    pub fn get(&self, batch_id: &str) -> Result<Option<BatchRecord>, CoordinatorError> {
        storage::get(&self.batches()?, batch_id.as_bytes())
    }

    /// The batch, or `NOT_FOUND`.
    pub fn require(&self, batch_id: &str) -> Result<BatchRecord, CoordinatorError> {
        self.get(batch_id)?
            .ok_or_else(|| not_found(batch_id).into())
    }

    /// Records a new batch with its targets (`(workbench, file)` in order); an existing id
    /// answers the existing batch unchanged.
    pub fn create(
        &self,
        submit: &SubmitBatch,
        concurrency: u32,
        targets: &[(String, Option<String>)],
    ) -> Result<BatchRecord, CoordinatorError> {
        if let Some(existing) = self.get(&submit.batch_id)? {
            return Ok(existing);
        }
        let tree = self.targets()?;
        let mut writes = storage::Batch::default();
        // Targets of a creation a crash cut short (its record was never written) go first.
        for leftover in tree.scan_prefix(target_prefix(&submit.batch_id)).keys() {
            writes.remove(leftover?);
        }
        let mut seen = HashSet::new();
        for (index, (workbench, file)) in targets.iter().enumerate() {
            let index = index as u64;
            // A workbench's first target meets whatever draft is there; its later targets
            // continue the draft the earlier ones made.
            let first_of_workbench = seen.insert(workbench.clone());
            let target = TargetRecord {
                index,
                workbench: workbench.clone(),
                file: file.clone(),
                state: TargetState::Queued,
                attempt: 0,
                job_id: None,
                error: None,
                continue_draft: submit.continue_draft || !first_of_workbench,
                outcome: None,
                spent: Spent::default(),
            };
            writes.insert(
                target_key(&submit.batch_id, index),
                storage::encode(&target)?,
            );
        }
        tree.apply_batch(writes)?;
        let now = now_ms();
        let total = targets.len() as u64;
        let record = BatchRecord {
            batch_id: submit.batch_id.clone(),
            targets: submit.targets.clone(),
            action: submit.action.clone(),
            state: BatchState::Running,
            counts: BatchCounts {
                total,
                queued: total,
                ..BatchCounts::default()
            },
            concurrency,
            tolerate_failures: submit.tolerate_failures,
            auto_approve: submit.auto_approve,
            continue_draft: submit.continue_draft,
            time_limit_secs: submit.time_limit_secs,
            priority: submit.priority,
            budget: submit.budget,
            spent: Spent::NOTHING,
            cancel_requested: false,
            error: None,
            created_at_ms: now,
            updated_at_ms: now,
            finished_at_ms: None,
        };
        self.batches()?
            .insert(submit.batch_id.as_bytes(), storage::encode(&record)?)?;
        Ok(record)
    }

    /// Every batch, newest first.
    pub fn list(&self) -> Result<Vec<BatchRecord>, CoordinatorError> {
        let (mut records, _unreadable) = storage::readable::<BatchRecord>(&self.batches()?)?;
        crate::jobs::newest_first(&mut records, |record| {
            (record.created_at_ms, &record.batch_id)
        });
        Ok(records)
    }

    /// Up to `limit` targets from index `from`, optionally of one state.
    pub fn page(
        &self,
        batch_id: &str,
        state: Option<TargetState>,
        from: u64,
        limit: usize,
    ) -> Result<Vec<TargetRecord>, CoordinatorError> {
        let tree = self.targets()?;
        let start = target_key(batch_id, from);
        let prefix = target_prefix(batch_id);
        let mut found = Vec::new();
        for entry in tree.range(start..) {
            let (key, bytes) = entry?;
            if !key.starts_with(&prefix) || found.len() >= limit {
                break;
            }
            let target: TargetRecord = storage::decode(&bytes)?;
            if state.is_none_or(|wanted| wanted == target.state) {
                found.push(target);
            }
        }
        Ok(found)
    }

    /// The batch's view with its first failures.
    pub fn view(&self, batch_id: &str) -> Result<BatchView, CoordinatorError> {
        let record = self.require(batch_id)?;
        let mut view = record.view();
        if record.counts.failed > 0 {
            view.failures = self
                .page(batch_id, Some(TargetState::Failed), 0, FAILURES_SHOWN)?
                .iter()
                .map(TargetRecord::view)
                .collect();
        }
        Ok(view)
    }

    /// Queued targets from index `from` whose workbench is not `busy`, at most `want`, looking
    /// at no more than `scan` targets; also the lowest index still queued (where the next
    /// scan may start).
    pub fn next_queued(
        &self,
        batch_id: &str,
        from: u64,
        busy: &HashSet<String>,
        want: usize,
        scan: usize,
    ) -> Result<(Vec<TargetRecord>, u64), CoordinatorError> {
        let tree = self.targets()?;
        let prefix = target_prefix(batch_id);
        let mut picked = Vec::new();
        let mut claimed: HashSet<String> = HashSet::new();
        let mut lowest_queued = None;
        let mut last_seen = from;
        for entry in tree.range(target_key(batch_id, from)..).take(scan) {
            let (key, bytes) = entry?;
            if !key.starts_with(&prefix) {
                break;
            }
            let target: TargetRecord = storage::decode(&bytes)?;
            last_seen = target.index + 1;
            if target.state != TargetState::Queued {
                continue;
            }
            lowest_queued.get_or_insert(target.index);
            if picked.len() >= want {
                break;
            }
            if busy.contains(&target.workbench) || claimed.contains(&target.workbench) {
                continue;
            }
            claimed.insert(target.workbench.clone());
            picked.push(target);
        }
        Ok((picked, lowest_queued.unwrap_or(last_seen)))
    }

    /// Targets in state `running` (adopted after a restart).
    pub fn running(&self, batch_id: &str) -> Result<Vec<TargetRecord>, CoordinatorError> {
        self.page(batch_id, Some(TargetState::Running), 0, usize::MAX)
    }

    /// Batches still running (adopted after a restart).
    pub fn unfinished(&self) -> Result<Vec<BatchRecord>, CoordinatorError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|record| !record.state.is_terminal())
            .collect())
    }

    /// Applies `change` to the batch record.
    pub fn update(
        &self,
        batch_id: &str,
        change: impl Fn(&mut BatchRecord) -> Result<(), ErrorBody>,
    ) -> Result<BatchRecord, CoordinatorError> {
        let missing = || not_found(batch_id);
        self.storage.update(
            trees::BATCHES,
            batch_id.as_bytes(),
            missing,
            |record: &mut BatchRecord| {
                change(record)?;
                record.updated_at_ms = now_ms();
                Ok(())
            },
        )
    }

    /// Like [`Batches::update`], refused with `VALIDATION_FAILED` once the batch has ended.
    pub fn update_running(
        &self,
        batch_id: &str,
        change: impl Fn(&mut BatchRecord),
    ) -> Result<BatchRecord, CoordinatorError> {
        self.update(batch_id, |record| {
            if record.state.is_terminal() {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!("batch `{batch_id}` already ended ({})", record.state),
                ));
            }
            change(record);
            Ok(())
        })
    }

    /// Moves every queued target to `cancelled` (a cancel, or a batch beyond its tolerance).
    pub fn cancel_queued(&self, batch_id: &str) -> Result<BatchRecord, CoordinatorError> {
        self.change_all(batch_id, TargetState::Queued, |_| TargetState::Cancelled)
    }

    /// Changes every target in state `from`, a page at a time, each in its own transaction
    /// with the counts (`change` sees a target still in `from` and returns its new state);
    /// returns the batch as it is afterwards.
    fn change_all(
        &self,
        batch_id: &str,
        from: TargetState,
        change: impl Fn(&mut TargetRecord) -> TargetState,
    ) -> Result<BatchRecord, CoordinatorError> {
        let mut record = self.require(batch_id)?;
        let mut next = 0;
        loop {
            let page = self.page(batch_id, Some(from), next, 1_000)?;
            let Some(last) = page.last() else {
                return Ok(record);
            };
            next = last.index + 1;
            for target in &page {
                let (batch, _) = self.change_target(batch_id, target.index, |target| {
                    (target.state == from).then(|| change(target))
                })?;
                record = batch;
            }
        }
    }

    /// Queues every failed target again as a new attempt (a new child job id) and sets the
    /// batch running; refused while it runs or when nothing failed.
    pub fn retry(&self, batch_id: &str) -> Result<BatchRecord, CoordinatorError> {
        let record = self.require(batch_id)?;
        if !record.state.is_terminal() {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "batch `{batch_id}` is still running; wait for it (`atelier batch watch`) or cancel it first"
                ),
            )
            .into());
        }
        if record.counts.failed == 0 {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("batch `{batch_id}` has no failed targets to retry"),
            )
            .into());
        }
        let succeeded: HashSet<String> = self
            .page(batch_id, Some(TargetState::Succeeded), 0, usize::MAX)?
            .into_iter()
            .map(|target| target.workbench)
            .collect();
        self.change_all(batch_id, TargetState::Failed, |target| {
            target.attempt += 1;
            target.job_id = None;
            target.error = None;
            target.continue_draft |= record.continue_draft || succeeded.contains(&target.workbench);
            TargetState::Queued
        })?;
        self.update(batch_id, |record| {
            record.state = BatchState::Running;
            record.error = None;
            record.finished_at_ms = None;
            record.cancel_requested = false;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use atelier_messages::PROTOCOL_VERSION;
    use atelier_messages::batch::FailureTolerance;

    use super::*;

    fn submit(batch_id: &str) -> SubmitBatch {
        SubmitBatch {
            v: PROTOCOL_VERSION,
            batch_id: batch_id.into(),
            targets: TargetSet::Workbenches {
                names: vec![],
                glob: Some("*".into()),
            },
            action: BatchAction::Message {
                message: "m".into(),
                model: None,
            },
            concurrency: None,
            tolerate_failures: Some(FailureTolerance::Percent(10)),
            auto_approve: false,
            continue_draft: false,
            time_limit_secs: None,
            priority: None,
            budget: Budget::default(),
        }
    }

    fn changed() -> Option<JobOutcome> {
        Some(JobOutcome::Changed {
            files: vec!["report.docx".into()],
        })
    }

    fn answered() -> Option<JobOutcome> {
        Some(JobOutcome::Answered)
    }

    fn end(
        index: u64,
        job_id: &str,
        state: TargetState,
        error: Option<ErrorBody>,
        outcome: Option<JobOutcome>,
    ) -> TargetEnd {
        TargetEnd {
            index,
            job_id: job_id.into(),
            state,
            error,
            outcome,
            spent: Spent {
                tokens: 1_200,
                cost_usd: None,
            },
        }
    }

    fn batches() -> (tempfile::TempDir, Batches) {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = Storage::open(&dir.path().join("db")).expect("storage");
        (dir, Batches::new(storage))
    }

    #[test]
    fn ten_thousand_targets_are_read_a_page_at_a_time_and_counts_add_up() {
        let (_dir, batches) = batches();
        // 5,000 workbenches with two targets each: a workbench's second target continues the
        // draft its first one made.
        let targets: Vec<(String, Option<String>)> = (0..10_000)
            .map(|n| (format!("w{}", n % 5_000), Some(format!("f{n}"))))
            .collect();
        let record = batches.create(&submit("b"), 8, &targets).expect("create");
        assert_eq!(
            (record.counts.total, record.counts.queued),
            (10_000, 10_000)
        );
        let first = batches.page("b", None, 0, 1).expect("page");
        let second = batches.page("b", None, 5_000, 1).expect("page");
        assert!(!first[0].continue_draft && second[0].continue_draft);

        let busy: HashSet<String> = ["w1".to_string()].into();
        let (picked, cursor) = batches.next_queued("b", 0, &busy, 8, 4_096).expect("next");
        let indexes: Vec<u64> = picked.iter().map(|target| target.index).collect();
        assert_eq!(indexes, vec![0, 2, 3, 4, 5, 6, 7, 8], "w1 is busy");
        assert_eq!(cursor, 0);

        for target in &picked {
            let (_, running) = batches.dispatch("b", target.index).expect("dispatch");
            assert_eq!(
                running.job_id.as_deref(),
                Some(format!("b-t{}-a0", target.index).as_str())
            );
        }
        // A second dispatch of a running target changes nothing.
        let (record, _) = batches.dispatch("b", 0).expect("dispatch again");
        assert_eq!(record.counts.running, 8);
        batches
            .finish_target(
                "b",
                &end(0, "b-t0-a0", TargetState::Succeeded, None, changed()),
            )
            .expect("finish");
        // Another attempt's job id does not end the target.
        let (record, _) = batches
            .finish_target("b", &end(2, "b-t2-a9", TargetState::Failed, None, None))
            .expect("stale finish");
        assert_eq!(record.counts.running, 7);
        let error = ErrorBody::new(ErrorCode::FileReadFailed, "broken");
        let (record, _) = batches
            .finish_target(
                "b",
                &end(2, "b-t2-a0", TargetState::Failed, Some(error), None),
            )
            .expect("finish");
        let counts = record.counts;
        assert_eq!(
            (
                counts.queued,
                counts.running,
                counts.succeeded,
                counts.failed
            ),
            (9_992, 6, 1, 1)
        );
        assert_eq!((counts.changed, counts.answered), (1, 0));
        assert!(!record.beyond_tolerance());
        let (_, cursor) = batches
            .next_queued("b", 0, &HashSet::new(), 1, 4_096)
            .expect("next");
        assert_eq!(cursor, 1, "target 1 is the lowest still queued");

        let record = batches.cancel_queued("b").expect("cancel");
        assert_eq!((record.counts.queued, record.counts.cancelled), (0, 9_992));
        assert_eq!(
            batches.view("b").expect("view").failures[0]
                .error
                .as_ref()
                .map(|e| e.code),
            Some(ErrorCode::FileReadFailed)
        );
    }

    #[test]
    fn retry_queues_failed_targets_as_new_attempts_once_the_batch_ended() {
        let (_dir, batches) = batches();
        let targets = vec![("a".to_string(), None), ("b".to_string(), None)];
        batches.create(&submit("r"), 2, &targets).expect("create");
        for index in 0..2 {
            batches.dispatch("r", index).expect("dispatch");
        }
        batches
            .finish_target(
                "r",
                &end(0, "r-t0-a0", TargetState::Succeeded, None, answered()),
            )
            .expect("finish");
        batches
            .finish_target(
                "r",
                &end(1, "r-t1-a0", TargetState::Failed, None, answered()),
            )
            .expect("finish");
        let running = batches.retry("r").expect_err("still running");
        assert_eq!(running.to_body().code, ErrorCode::ValidationFailed);
        batches
            .update("r", |record| {
                record.state = BatchState::CompletedWithFailures;
                Ok(())
            })
            .expect("end");
        let record = batches.retry("r").expect("retry");
        assert_eq!(record.state, BatchState::Running);
        assert_eq!((record.counts.queued, record.counts.failed), (1, 0));
        let (_, target) = batches.dispatch("r", 1).expect("dispatch");
        assert_eq!(target.job_id.as_deref(), Some("r-t1-a1"));
        // The retried target counts once it succeeds, as what its new child did.
        let (record, target) = batches
            .finish_target(
                "r",
                &end(1, "r-t1-a1", TargetState::Succeeded, None, changed()),
            )
            .expect("finish the retry");
        assert_eq!(target.view().outcome, changed());
        let counts = record.counts;
        assert_eq!(
            (counts.succeeded, counts.changed, counts.answered),
            (2, 1, 1)
        );
        // Creating the same id again answers the existing batch.
        let again = batches.create(&submit("r"), 9, &[]).expect("create again");
        assert_eq!(again.counts.total, 2);
    }

    #[test]
    fn an_end_dispatches_the_next_target_in_its_write_until_the_batch_stops_dispatching() {
        let (_dir, batches) = batches();
        let targets: Vec<(String, Option<String>)> =
            (0..10).map(|n| (format!("w{n}"), None)).collect();
        batches.create(&submit("d"), 2, &targets).expect("create");
        for index in 0..2 {
            batches.dispatch("d", index).expect("dispatch");
        }
        // One failure of ten is within the batch's 10 %: target 2 starts in the same write.
        let failed = || Some(ErrorBody::new(ErrorCode::FileReadFailed, "broken"));
        let first = end(0, "d-t0-a0", TargetState::Failed, failed(), None);
        let (record, next) = batches
            .finish_then_dispatch("d", &first, 2)
            .expect("finish then dispatch");
        assert_eq!(next.and_then(|t| t.job_id).as_deref(), Some("d-t2-a0"));
        let counts = record.counts;
        assert_eq!((counts.queued, counts.running, counts.failed), (7, 2, 1));
        // A second is beyond it: the end is recorded, target 3 stays queued.
        let second = end(1, "d-t1-a0", TargetState::Failed, failed(), None);
        let (record, next) = batches
            .finish_then_dispatch("d", &second, 3)
            .expect("finish, no dispatch");
        assert!(next.is_none() && record.beyond_tolerance());
        let counts = record.counts;
        assert_eq!((counts.queued, counts.running, counts.failed), (7, 1, 2));
        let target = &batches.page("d", None, 3, 1).expect("page")[0];
        assert_eq!(
            (target.state, target.job_id.as_ref()),
            (TargetState::Queued, None)
        );
    }

    #[test]
    fn a_childs_spending_is_added_once_and_a_reached_budget_stops_dispatching() {
        let (_dir, batches) = batches();
        let targets: Vec<(String, Option<String>)> =
            (0..4).map(|n| (format!("w{n}"), None)).collect();
        let mut asked = submit("b");
        asked.budget = Budget {
            tokens: Some(2_000),
            usd: None,
        };
        batches.create(&asked, 1, &targets).expect("create");
        batches.dispatch("b", 0).expect("dispatch");
        let first = end(0, "b-t0-a0", TargetState::Succeeded, None, None);
        let (record, next) = batches
            .finish_then_dispatch("b", &first, 1)
            .expect("finish then dispatch");
        assert_eq!(record.spent.tokens, 1_200);
        // 1,200 of 2,000 spent: the next target starts.
        assert!(next.is_some() && record.dispatches());
        // The same end again (a crash, a second look) changes nothing.
        let (record, _) = batches.finish_target("b", &first).expect("again");
        assert_eq!(record.spent.tokens, 1_200);
        // The second child's end reaches the budget: no third target starts.
        let second = end(1, "b-t1-a0", TargetState::Succeeded, None, None);
        let (record, next) = batches
            .finish_then_dispatch("b", &second, 2)
            .expect("finish, no dispatch");
        assert_eq!(record.spent.tokens, 2_400);
        assert!(next.is_none() && record.budget_reached() && !record.dispatches());
        // A cost unknown to one child makes the batch's unknown, never 0.
        assert_eq!(record.spent.cost_usd, None);
    }

    #[test]
    fn a_target_whose_child_was_not_recorded_goes_back_to_the_queue() {
        let (_dir, batches) = batches();
        let targets = vec![("a".to_string(), None)];
        batches.create(&submit("u"), 1, &targets).expect("create");
        batches.dispatch("u", 0).expect("dispatch");
        // Another child's id changes nothing.
        let (record, _) = batches.undispatch("u", 0, "u-t0-a9").expect("stale");
        assert_eq!(record.counts.running, 1);
        let (record, target) = batches.undispatch("u", 0, "u-t0-a0").expect("undispatch");
        assert_eq!((record.counts.queued, record.counts.running), (1, 0));
        assert_eq!((target.state, target.job_id), (TargetState::Queued, None));
        // Dispatched again, it names the same child: the first was never recorded.
        let (_, target) = batches.dispatch("u", 0).expect("dispatch again");
        assert_eq!(target.job_id.as_deref(), Some("u-t0-a0"));
    }

    #[test]
    fn targets_left_by_a_creation_cut_short_are_replaced() {
        let (_dir, batches) = batches();
        let three: Vec<(String, Option<String>)> = ["a", "b", "c"]
            .iter()
            .map(|name| (name.to_string(), None))
            .collect();
        batches.create(&submit("c"), 2, &three).expect("create");
        // As if the crash came before the record: only the targets are there.
        batches
            .batches()
            .expect("tree")
            .remove("c".as_bytes())
            .expect("remove");
        let record = batches.create(&submit("c"), 2, &three[..2]).expect("again");
        assert_eq!(record.counts.total, 2);
        assert_eq!(batches.page("c", None, 0, 10).expect("page").len(), 2);
    }
}
