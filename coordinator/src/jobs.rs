//! Job records and RPI checkpoints in sled. Their operations read and write; async code calls
//! them through a [`Store`](crate::storage::Store), which says how durable each one is.

use std::collections::HashSet;

use atelier_agents::rpi::RpiState;
use atelier_messages::budget::Budget;
use atelier_messages::job::{CoordinatorStats, JobState, JobView, Phase};
use atelier_messages::limits::LISTED_MESSAGE_CHARS;
use atelier_messages::{ErrorBody, ErrorCode, now_ms};

use crate::error::CoordinatorError;
use crate::lifecycle::{self, Transition};
use crate::storage::{self, Records, Storage, trees};

pub(crate) mod record;

pub use record::JobRecord;

/// The model a workflow job records: it runs without one.
pub const NO_MODEL: &str = "none";

/// Start-ups in a row that may adopt a job with no step journaled in between before it is set
/// aside with `CRASH_LOOP` (a job that kills the coordinator would otherwise do so forever).
pub const CRASH_LOOP_ADOPTIONS: u32 = 3;

/// The journal key that counts a job's adoptions (not a step: it is not counted as progress).
const ADOPTIONS_KEY: &str = "adoptions";

/// How often in a row a job was adopted, and how many journal entries it had at the last one.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Adoptions {
    count: u32,
    steps: usize,
}

/// What a job's run starts from, read (and its start written) in one storage call.
#[derive(Debug)]
pub struct RunStart {
    /// The job's record as the start left it.
    pub record: JobRecord,
    /// The RPI state checkpointed by earlier runs (default: none yet).
    pub rpi: RpiState,
    /// Whether start-ups kept dying while running the job ([`Jobs::crash_looping`]).
    pub crash_looping: bool,
    /// The keys of the job's journal entries when the run started.
    pub journaled: HashSet<String>,
}

/// Job records and their RPI state.
#[derive(Debug, Clone)]
pub struct Jobs {
    storage: Storage,
}

impl Records for Jobs {
    fn storage(&self) -> &Storage {
        &self.storage
    }
}

impl Jobs {
    pub fn new(storage: Storage) -> Self {
        Self { storage }
    }

    pub fn get(&self, job_id: &str) -> Result<Option<JobRecord>, CoordinatorError> {
        storage::get(&self.storage.tree(trees::JOBS)?, job_id.as_bytes())
    }

    /// Records a job refused before it was accepted (a submission the intake could not take),
    /// unless a job with its id is recorded already; returns the record kept.
    pub fn record_refused(&self, record: &JobRecord) -> Result<JobRecord, CoordinatorError> {
        let key = record.job_id.as_bytes();
        let new = storage::encode(record)?;
        if self
            .storage
            .tree(trees::JOBS)?
            .compare_and_swap(key, None::<&[u8]>, Some(new))?
        {
            return Ok(record.clone());
        }
        self.get(&record.job_id)?.ok_or_else(|| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("job `{}` vanished while it was recorded", record.job_id),
            )
            .into()
        })
    }

    /// Changes a job's lifecycle state (see [`lifecycle`](crate::lifecycle)).
    pub fn transition(
        &self,
        job_id: &str,
        transition: Transition,
    ) -> Result<JobRecord, CoordinatorError> {
        self.update(job_id, |record| {
            lifecycle::apply(record, transition.clone())
        })
    }

    /// Starts a run of the job and reads what the run starts from. A start may be staged: one
    /// lost in a crash leaves the job unfinished, so it is run again.
    pub fn start_run(&self, job_id: &str) -> Result<RunStart, CoordinatorError> {
        let record = self.transition(job_id, Transition::Start)?;
        Ok(RunStart {
            record,
            rpi: self.load_rpi(job_id)?.unwrap_or_default(),
            crash_looping: self.crash_looping(job_id)?,
            journaled: self.journal_keys(job_id)?,
        })
    }

    /// The keys of a job's journal entries (the adoption count is not a step, so not one).
    fn journal_keys(&self, job_id: &str) -> Result<HashSet<String>, CoordinatorError> {
        let prefix = journal_key(job_id, "");
        let mut keys = HashSet::new();
        for entry in self.storage.tree(trees::JOURNAL)?.scan_prefix(&prefix) {
            let (key, _) = entry?;
            let Some(step) = key.strip_prefix(prefix.as_slice()) else {
                continue;
            };
            let step = String::from_utf8_lossy(step).into_owned();
            if step != ADOPTIONS_KEY {
                keys.insert(step);
            }
        }
        Ok(keys)
    }

    /// Applies `change` to a job's record; `change` may refuse with an error.
    fn update(
        &self,
        job_id: &str,
        change: impl Fn(&mut JobRecord) -> Result<(), ErrorBody>,
    ) -> Result<JobRecord, CoordinatorError> {
        let missing = || {
            ErrorBody::new(
                ErrorCode::NotFound,
                format!("no job `{job_id}`; list jobs with `atelier jobs`"),
            )
        };
        self.storage.update(
            trees::JOBS,
            job_id.as_bytes(),
            missing,
            |record: &mut JobRecord| {
                change(record)?;
                record.updated_at_ms = now_ms();
                Ok(())
            },
        )
    }

    /// A journaled step of a job.
    pub fn recall(
        &self,
        job_id: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, CoordinatorError> {
        storage::get(
            &self.storage.tree(trees::JOURNAL)?,
            &journal_key(job_id, key),
        )
    }

    /// Journals a step.
    pub fn record(
        &self,
        job_id: &str,
        key: &str,
        value: &serde_json::Value,
    ) -> Result<(), CoordinatorError> {
        self.storage
            .tree(trees::JOURNAL)?
            .insert(journal_key(job_id, key), storage::encode(value)?)?;
        Ok(())
    }

    /// Counts a start-up's adoption of an unfinished job: one more when nothing was
    /// journaled since the previous adoption, else the first of a new series. Returns the count.
    pub fn count_adoption(&self, job_id: &str) -> Result<u32, CoordinatorError> {
        let journal = self.storage.tree(trees::JOURNAL)?;
        let key = journal_key(job_id, ADOPTIONS_KEY);
        let previous: Option<Adoptions> = storage::get(&journal, &key)?;
        let entries = journal.scan_prefix(journal_key(job_id, "")).count();
        let steps = entries - usize::from(previous.is_some());
        let count = match previous {
            Some(previous) if previous.steps == steps => previous.count + 1,
            _ => 1,
        };
        journal.insert(key, storage::encode(&Adoptions { count, steps })?)?;
        Ok(count)
    }

    /// Whether the job was adopted [`CRASH_LOOP_ADOPTIONS`] times in a row without progress.
    pub fn crash_looping(&self, job_id: &str) -> Result<bool, CoordinatorError> {
        let journal = self.storage.tree(trees::JOURNAL)?;
        let adoptions: Option<Adoptions> =
            storage::get(&journal, &journal_key(job_id, ADOPTIONS_KEY))?;
        Ok(adoptions.is_some_and(|adoptions| adoptions.count >= CRASH_LOOP_ADOPTIONS))
    }

    /// Forgets a job's adoptions (a person resumes it: it gets a fresh series).
    pub fn forget_adoptions(&self, job_id: &str) -> Result<(), CoordinatorError> {
        self.storage
            .tree(trees::JOURNAL)?
            .remove(journal_key(job_id, ADOPTIONS_KEY))?;
        Ok(())
    }

    /// Removes the journal of every finished job last updated before `cutoff_ms`; returns how
    /// many entries went.
    pub fn prune_journal(&self, cutoff_ms: u64) -> Result<u64, CoordinatorError> {
        let journal = self.storage.tree(trees::JOURNAL)?;
        let mut removed = 0;
        for record in self.records()? {
            if !record.state.is_terminal() || record.updated_at_ms >= cutoff_ms {
                continue;
            }
            let prefix = journal_key(&record.job_id, "");
            for entry in journal.scan_prefix(&prefix) {
                let (key, _) = entry?;
                journal.remove(key)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Storage size and counts.
    pub fn stats(&self, coordinator: &str) -> Result<CoordinatorStats, CoordinatorError> {
        let mut stats = CoordinatorStats {
            coordinator: coordinator.to_string(),
            storage_bytes: self.storage.size_on_disk(),
            journal_entries: self.storage.tree(trees::JOURNAL)?.len() as u64,
            ..CoordinatorStats::default()
        };
        for record in self.records()? {
            *stats
                .jobs_by_state
                .entry(record.state.as_str().to_string())
                .or_insert(0) += 1;
        }
        Ok(stats)
    }

    /// Checkpoints the RPI state and the record's update time (a workflow's states follow from
    /// its journal, so they may be staged). The record is touched by compare-and-swap: a cancel
    /// requested meanwhile is kept.
    pub fn save_rpi(&self, job_id: &str, state: &RpiState) -> Result<(), CoordinatorError> {
        self.storage
            .tree(trees::RPI)?
            .insert(job_id.as_bytes(), storage::encode(state)?)?;
        self.storage
            .swap(trees::JOBS, job_id.as_bytes(), |record: &mut JobRecord| {
                record.updated_at_ms = now_ms();
                Ok(())
            })?;
        Ok(())
    }

    pub fn load_rpi(&self, job_id: &str) -> Result<Option<RpiState>, CoordinatorError> {
        storage::get(&self.storage.tree(trees::RPI)?, job_id.as_bytes())
    }

    pub fn view(&self, job_id: &str) -> Result<Option<JobView>, CoordinatorError> {
        let Some(record) = self.get(job_id)? else {
            return Ok(None);
        };
        let rpi = self.load_rpi(job_id)?.unwrap_or_default();
        Ok(Some(to_view(record, rpi)))
    }

    /// One page of jobs, newest first, optionally filtered, as list views: a message and a
    /// summary cut at [`LISTED_MESSAGE_CHARS`], no plan. A record that cannot be read is listed
    /// as a failed job whose error says so, so it is seen and the rest still lists.
    pub fn list(
        &self,
        state: Option<JobState>,
        workbench: Option<&str>,
        page: Page,
    ) -> Result<Vec<JobView>, CoordinatorError> {
        let (records, unreadable) = self.records_and_unreadable()?;
        let mut views = Vec::new();
        for record in records {
            if state.is_some_and(|wanted| wanted != record.state) {
                continue;
            }
            if workbench.is_some_and(|wanted| wanted != record.workbench) {
                continue;
            }
            let rpi = self
                .load_rpi(&record.job_id)
                .ok()
                .flatten()
                .unwrap_or_default();
            views.push(listed(to_view(record, rpi)));
        }
        if state.is_none_or(|wanted| wanted == JobState::Failed) && workbench.is_none() {
            views.extend(unreadable.into_iter().map(unreadable_view));
        }
        newest_first(&mut views, |view| (view.created_at_ms, &view.job_id));
        Ok(views
            .into_iter()
            .skip(page.offset)
            .take(page.limit)
            .collect())
    }

    /// Jobs that were queued or running when the coordinator stopped.
    pub fn unfinished(&self) -> Result<Vec<JobRecord>, CoordinatorError> {
        Ok(self
            .records()?
            .into_iter()
            .filter(|record| !record.state.is_terminal())
            .collect())
    }

    /// The records that read back (the others are logged, see [`storage::readable`]).
    fn records(&self) -> Result<Vec<JobRecord>, CoordinatorError> {
        Ok(self.records_and_unreadable()?.0)
    }

    fn records_and_unreadable(&self) -> Result<(Vec<JobRecord>, Vec<String>), CoordinatorError> {
        storage::readable(&self.storage.tree(trees::JOBS)?)
    }
}

/// Which slice of a listing to answer.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub offset: usize,
    pub limit: usize,
}

/// A job's view as a listing carries it.
fn listed(mut view: JobView) -> JobView {
    view.message = cut(&view.message);
    view.summary = view.summary.as_deref().map(cut);
    view.plan_md = None;
    view
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(LISTED_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The listing's entry for a record that cannot be read.
fn unreadable_view(job_id: String) -> JobView {
    JobView {
        job_id,
        workbench: String::new(),
        message: String::new(),
        model: String::new(),
        state: JobState::Failed,
        phase: Phase::Done,
        items: Vec::new(),
        error: Some(ErrorBody::new(
            ErrorCode::Internal,
            "the stored record of this job cannot be read; it is kept for inspection",
        )),
        created_at_ms: 0,
        updated_at_ms: 0,
        summary: None,
        model_turns: 0,
        tool_calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        pending_approval: None,
        plan_md: None,
        run: 0,
        outcome: None,
        time_limit_secs: 0,
        started_at_ms: None,
        priority: None,
        budget: Budget::default(),
        cost_usd: None,
    }
}

/// The sled key of a job's journal entry: `<job>\0<step key>`.
fn journal_key(job_id: &str, key: &str) -> Vec<u8> {
    format!("{job_id}\u{0}{key}").into_bytes()
}

fn to_view(record: JobRecord, rpi: RpiState) -> JobView {
    let spent = record.spent(rpi.prompt_tokens, rpi.completion_tokens);
    JobView {
        job_id: record.job_id,
        workbench: record.workbench,
        message: record.message,
        model: record.model,
        state: record.state,
        phase: rpi.phase,
        items: rpi.items,
        error: record.error,
        created_at_ms: record.created_at_ms,
        updated_at_ms: record.updated_at_ms,
        summary: rpi.summary,
        model_turns: rpi.model_turns,
        tool_calls: rpi.tool_calls,
        prompt_tokens: rpi.prompt_tokens,
        completion_tokens: rpi.completion_tokens,
        pending_approval: record.pending_approval,
        plan_md: rpi.plan_md,
        run: record.run,
        outcome: record.outcome,
        time_limit_secs: record.time_limit_secs,
        started_at_ms: record.started_at_ms,
        priority: record.priority,
        budget: record.budget,
        cost_usd: spent.cost_usd,
    }
}

/// Sorts `items` newest first by `(created_at_ms, id)`, the later id first among equals: the
/// order of every listing of jobs and batches, a shard's or one merged from all.
pub(crate) fn newest_first<T>(items: &mut [T], key: impl Fn(&T) -> (u64, &str)) {
    items.sort_by(|a, b| key(b).cmp(&key(a)));
}

#[cfg(test)]
mod tests {
    use atelier_messages::job::JobSubmit;
    use atelier_messages::journal;
    use serde_json::json;

    use super::*;

    fn queued(jobs: &Jobs, job_id: &str) -> Result<(), CoordinatorError> {
        let submit = JobSubmit::new(job_id.into(), "w".into(), "go".into());
        let record = JobRecord::queued(&submit, NO_MODEL, None);
        jobs.storage
            .tree(trees::JOBS)?
            .insert(job_id.as_bytes(), storage::encode(&record)?)?;
        Ok(())
    }

    /// A store holding a queued job `j`.
    fn with_job(dir: &std::path::Path) -> Result<Jobs, CoordinatorError> {
        let jobs = Jobs::new(Storage::open(&dir.join("db"))?);
        queued(&jobs, "j")?;
        Ok(jobs)
    }

    #[test]
    fn a_run_starts_with_its_jobs_journal_keys_and_not_another_jobs()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let jobs = with_job(dir.path())?;
        queued(&jobs, "j2")?;
        jobs.record("j", &journal::tool_result("j.w1"), &json!({"ok": 1}))?;
        jobs.record("j2", &journal::tool_result("j2.w1"), &json!({"ok": 2}))?;
        assert_eq!(jobs.count_adoption("j")?, 1);

        let started = jobs.start_run("j")?;

        assert_eq!(started.record.state, JobState::Running);
        assert_eq!(
            started.journaled,
            HashSet::from([journal::tool_result("j.w1")]),
            "the adoption count is not a step, and j2's steps are not j's"
        );
        assert!(!started.crash_looping);
        assert_eq!(started.rpi.items.len(), 0);
        Ok(())
    }

    #[test]
    fn a_cancel_racing_the_steps_checkpoints_is_never_lost()
    -> Result<(), Box<dyn std::error::Error>> {
        // A step's checkpoint touches the job's record while a cancel is requested from
        // another thread: read-then-write without compare-and-swap lost the cancel.
        let dir = tempfile::tempdir()?;
        let jobs = with_job(dir.path())?;
        for round in 0..200 {
            let job_id = format!("race-{round}");
            queued(&jobs, &job_id)?;
            let steps = {
                let (jobs, job_id) = (jobs.clone(), job_id.clone());
                std::thread::spawn(move || -> Result<(), CoordinatorError> {
                    for _ in 0..20 {
                        jobs.save_rpi(&job_id, &RpiState::default())?;
                    }
                    Ok(())
                })
            };
            jobs.transition(&job_id, Transition::RequestCancel)?;
            steps.join().map_err(|_| "the steps' thread panicked")??;
            let record = jobs.get(&job_id)?.ok_or("no record")?;
            assert!(
                record.cancel_requested,
                "round {round}: the cancel was lost"
            );
        }
        Ok(())
    }

    #[test]
    fn a_run_of_a_job_adopted_again_and_again_knows_it_loops()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let jobs = with_job(dir.path())?;
        for _ in 0..CRASH_LOOP_ADOPTIONS {
            jobs.count_adoption("j")?;
        }
        assert!(jobs.start_run("j")?.crash_looping);
        Ok(())
    }
}
