//! The workshop conversation: one linear list of messages per workbench, one job at a time,
//! draft revisions per message, rewind, regenerate and model switches.
//!
//! Every change here is one transaction (see [`Tx`]), committed by the DraftStore before it
//! answers, so a message,
//! its job record, its draft revision and the events that accompany them survive a crash
//! together or not at all.

use atelier_agents::spec::ModelSpec;
use atelier_messages::budget::Budget;
use atelier_messages::job::{JobState, JobSubmit};
use atelier_messages::workshop::{
    ConversationMessage, History, ModelSet, Regenerate, Regenerated, Rewound, Role, SystemEvent,
};
use atelier_messages::{ErrorBody, ErrorCode};

use super::refusals::{ensure_idle, refusal, refusal_of};
use super::tx::{
    NewMessage, Tx, TxResult, WorkshopState, get, message_id, parse_message_id, put, state_key,
};
use super::{Workbenches, abort, key};
use crate::JobDefaults;
use crate::defaults::JobSpending;
use crate::error::CoordinatorError;
use crate::jobs::{JobRecord, NO_MODEL};
use crate::storage::{self, trees};

/// What intake made of a submitted message.
#[derive(Debug, Clone)]
pub enum Accepted {
    /// Recorded and queued: start it.
    New(JobRecord),
    /// The id was seen before (a redelivery or a re-submit): nothing changed.
    Existing(JobRecord),
    /// Refused (`DRAFT_EXISTS`, `WORKBENCH_BUSY`, `NOT_FOUND`): recorded as failed with the code.
    Refused(JobRecord),
}

/// How a job's turn ended, for the conversation.
#[derive(Debug, Clone)]
pub struct TurnEnd {
    pub job_id: String,
    pub state: JobState,
    pub answer: Option<String>,
    pub error: Option<ErrorBody>,
    pub model: String,
}

fn model_switch_text(model: &str, message_only: bool) -> String {
    if message_only {
        format!("model {model} for this message")
    } else {
        format!("switched the model to {model}")
    }
}

impl Workbenches {
    pub(super) fn workshop_state(
        &self,
        workbench: &str,
    ) -> Result<WorkshopState, CoordinatorError> {
        let tree = self.storage.tree(trees::WORKSHOP)?;
        Ok(storage::get(&tree, &state_key(workbench))?.unwrap_or_default())
    }

    /// Every message of the conversation, oldest first.
    pub fn messages(&self, workbench: &str) -> Result<Vec<ConversationMessage>, CoordinatorError> {
        let tree = self.storage.tree(trees::WORKSHOP)?;
        tree.scan_prefix(key(workbench, "msg\u{0}"))
            .map(|entry| storage::decode(&entry?.1))
            .collect()
    }

    pub fn history(&self, workbench: &str) -> Result<History, CoordinatorError> {
        let info = self.info(workbench)?;
        let state = self.workshop_state(workbench)?;
        Ok(History {
            workbench: info.name,
            model: state.model,
            has_draft: info.has_draft,
            draft: info.draft,
            running_job: state.running_job,
            head: state.head.map(message_id),
            messages: self.messages(workbench)?,
        })
    }

    /// Answers as a submission would be answered now (without recording anything). Read
    /// outside a transaction: the answer is advice (a submission is checked again, in the
    /// transaction that records it), and even a read-only sled transaction writes sled's log
    /// buffer out twice.
    pub fn check_message(
        &self,
        workbench: &str,
        continue_draft: bool,
    ) -> Result<(), CoordinatorError> {
        self.record(workbench)?;
        let running = self.workshop_state(workbench)?.running_job;
        let has_draft = self.manifest(workbench, "draft")?.is_some();
        match refusal_of(workbench, running, has_draft, continue_draft) {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    /// Records a submitted message: the user message, its job (queued) and the running job, in
    /// one transaction; or the job as refused with its code. A known job id changes nothing.
    pub fn accept_message(
        &self,
        submit: &JobSubmit,
        defaults: &JobDefaults,
    ) -> Result<Accepted, CoordinatorError> {
        self.accept(submit, defaults, false)
    }

    /// [`Workbenches::accept_message`], except that a workbench answering another job records
    /// nothing: `WORKBENCH_BUSY` (a batch's child waits for its workbench).
    pub fn accept_message_if_idle(
        &self,
        submit: &JobSubmit,
        defaults: &JobDefaults,
    ) -> Result<Accepted, CoordinatorError> {
        self.accept(submit, defaults, true)
    }

    fn accept(
        &self,
        submit: &JobSubmit,
        defaults: &JobDefaults,
        only_if_idle: bool,
    ) -> Result<Accepted, CoordinatorError> {
        let workbench = submit.workbench.as_str();
        let accepted = self.transact(|tx| {
            if let Some(existing) = get::<JobRecord>(tx.jobs, submit.job_id.as_bytes())? {
                return Ok(Accepted::Existing(existing));
            }
            let time_limit = defaults.time_limits.of(submit.time_limit_secs);
            let refused = match &time_limit {
                Err(error) => Some(error.clone()),
                Ok(_) => refusal(tx, workbench, submit.continue_draft)?,
            };
            if let Some(error) = refused {
                if only_if_idle && error.code == ErrorCode::WorkbenchBusy {
                    return Err(abort(error.into()));
                }
                let record = JobRecord::refused(submit, error);
                put(tx.jobs, submit.job_id.as_bytes(), &record)?;
                return Ok(Accepted::Refused(record));
            }
            let mut state = tx.state(workbench)?;
            let workflow = submit.workflow.is_some();
            let model = if workflow {
                NO_MODEL.to_string()
            } else {
                submit
                    .model
                    .clone()
                    .or_else(|| state.model.clone())
                    .or_else(|| defaults.model.clone())
                    .unwrap_or_default()
            };
            let spending = match workflow {
                true => Ok(JobSpending::default()),
                false => (defaults.spending).of(workbench, &model, submit.budget),
            };
            let spending = match spending {
                Ok(spending) => spending,
                Err(error) => {
                    let record = JobRecord::refused(submit, error);
                    put(tx.jobs, submit.job_id.as_bytes(), &record)?;
                    return Ok(Accepted::Refused(record));
                }
            };
            // A message asked with another model than the one before it is a switch.
            if let (false, Some(chosen), Some(last)) = (workflow, &submit.model, &state.last_model)
                && chosen != last
            {
                let event = SystemEvent::ModelSwitched {
                    model: chosen.clone(),
                    message_only: true,
                };
                tx.append(
                    workbench,
                    &mut state,
                    NewMessage::system(event, model_switch_text(chosen, true)),
                )?;
            }
            let message = tx.append(
                workbench,
                &mut state,
                NewMessage {
                    role: Role::User,
                    text: submit.message.clone(),
                    job_id: Some(submit.job_id.clone()),
                    model: Some(model.clone()),
                    event: None,
                },
            )?;
            let mut record = JobRecord::queued(submit, &model, Some(message.id));
            record.time_limit_secs = time_limit.unwrap_or_default();
            record.budget = spending.budget;
            record.prices = spending.prices;
            if submit.approvals.is_none() {
                record.approvals = tx.approvals(workbench)?.unwrap_or_default();
            }
            put(tx.jobs, submit.job_id.as_bytes(), &record)?;
            state.running_job = Some(submit.job_id.clone());
            if !workflow {
                state.last_model = Some(model);
            }
            tx.set_state(workbench, &state)?;
            Ok(Accepted::New(record))
        })?;
        Ok(accepted)
    }

    /// Records the end of a job's turn: its answer (or a system event when it failed), and the
    /// workbench is free again. A job that no longer holds the workbench changes nothing.
    pub fn finish_turn(
        &self,
        workbench: &str,
        end: &TurnEnd,
    ) -> Result<Option<ConversationMessage>, CoordinatorError> {
        let appended = self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            if state.running_job.as_deref() != Some(end.job_id.as_str()) {
                return Ok(None);
            }
            state.running_job = None;
            let message = match (&end.answer, end.state) {
                (Some(answer), JobState::Succeeded) => NewMessage {
                    role: Role::Assistant,
                    text: answer.clone(),
                    job_id: Some(end.job_id.clone()),
                    model: Some(end.model.clone()),
                    event: None,
                },
                _ => {
                    let reason = end
                        .error
                        .as_ref()
                        .map(|error| format!(": {error}"))
                        .unwrap_or_default();
                    let event = SystemEvent::JobEnded {
                        job_id: end.job_id.clone(),
                        state: end.state,
                        error: end.error.clone(),
                    };
                    let text = format!(
                        "job {} {}{reason}; `atelier regenerate` asks again",
                        end.job_id, end.state
                    );
                    NewMessage::system(event, text)
                }
            };
            tx.append(workbench, &mut state, message).map(Some)
        })?;
        Ok(appended)
    }

    /// A resumed job holds the workbench again (refused while another job does).
    pub fn resume_turn(&self, workbench: &str, job_id: &str) -> Result<(), CoordinatorError> {
        self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            if state.running_job.as_deref() == Some(job_id) {
                return Ok(());
            }
            ensure_idle(&state, workbench)?;
            state.running_job = Some(job_id.to_string());
            tx.set_state(workbench, &state)
        })?;
        Ok(())
    }

    /// Discards every message after `message_id` and restores the draft to its revision at that
    /// message (unless `chat_only`); records the rewind as a system event.
    pub fn rewind(
        &self,
        workbench: &str,
        target_id: &str,
        how: RewindDraft,
    ) -> Result<Rewound, CoordinatorError> {
        self.record(workbench)?;
        let rewound = self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            ensure_idle(&state, workbench)?;
            let seq = target_seq(tx, workbench, target_id)?;
            match (tx.revision(workbench, seq)?, how) {
                (_, RewindDraft::Keep) => {}
                (Some(revision), _) => tx.set_draft(workbench, revision.draft.as_ref())?,
                (None, RewindDraft::DiscardWhenGone) => tx.set_draft(workbench, None)?,
                (None, RewindDraft::Restore) => {
                    return Err(abort(pruned(workbench, target_id).into()));
                }
            }
            let removed = tx.truncate_after(workbench, &mut state, seq)?;
            let event = SystemEvent::Rewound {
                to_message_id: target_id.to_string(),
                removed: removed.clone(),
            };
            let text = format!(
                "rewound to {target_id}; {} later message(s) discarded",
                removed.len()
            );
            let recorded = tx.append(workbench, &mut state, NewMessage::system(event, text))?;
            Ok(Rewound {
                workbench: workbench.to_string(),
                head: target_id.to_string(),
                removed,
                has_draft: tx.draft(workbench)?.is_some(),
                event_id: recorded.id,
            })
        })?;
        Ok(rewound)
    }

    /// The user message a regenerate answers: `from` (which must be one), else the last.
    fn to_answer(
        &self,
        workbench: &str,
        from: Option<&str>,
    ) -> Result<ConversationMessage, CoordinatorError> {
        self.record(workbench)?;
        let messages = self.messages(workbench)?;
        let Some(from) = from else {
            let last = messages.into_iter().rev().find(|m| m.role == Role::User);
            return last.ok_or_else(|| {
                ErrorBody::new(
                    ErrorCode::NotFound,
                    format!("workbench `{workbench}` has no user message to answer; send one with `atelier submit`"),
                )
                .into()
            });
        };
        let Some(message) = messages.into_iter().find(|m| m.id == from) else {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!("no message `{from}` in workbench `{workbench}`; list them with `atelier history {workbench}`"),
            )
            .into());
        };
        if message.role != Role::User {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("{from} is not a user message; regenerate answers a user message again (see `atelier history {workbench}`)"),
            )
            .into());
        }
        Ok(message)
    }

    /// What regenerating the answer to a user message would discard, changing nothing.
    pub fn regenerate_preview(
        &self,
        request: &Regenerate,
    ) -> Result<Regenerated, CoordinatorError> {
        let workbench = request.workbench.as_str();
        let user = self.to_answer(workbench, request.from_message_id.as_deref())?;
        let after = parse_message_id(&user.id).unwrap_or_default();
        let replaced = self
            .messages(workbench)?
            .into_iter()
            .filter(|message| parse_message_id(&message.id).is_some_and(|seq| seq > after))
            .map(|message| message.id)
            .collect();
        Ok(Regenerated {
            job_id: String::new(),
            from_message_id: user.id,
            replaced,
            dry_run: true,
        })
    }

    /// Starts a fresh answer to a user message: later messages are discarded, the draft goes
    /// back to its revision at that message, and a queued job is recorded, all at once.
    pub fn regenerate(
        &self,
        request: &Regenerate,
        job_id: &str,
        defaults: &JobDefaults,
    ) -> Result<(JobRecord, Regenerated), CoordinatorError> {
        let workbench = request.workbench.as_str();
        let user = self.to_answer(workbench, request.from_message_id.as_deref())?;
        let result = self.transact(|tx| {
            if get::<JobRecord>(tx.jobs, job_id.as_bytes())?.is_some() {
                return Err(abort(
                    ErrorBody::new(
                        ErrorCode::ValidationFailed,
                        format!("job id `{job_id}` is taken"),
                    )
                    .into(),
                ));
            }
            let mut state = tx.state(workbench)?;
            ensure_idle(&state, workbench)?;
            let seq = target_seq(tx, workbench, &user.id)?;
            if let Some(revision) = tx.revision(workbench, seq)? {
                tx.set_draft(workbench, revision.draft.as_ref())?;
            }
            let replaced = tx.truncate_after(workbench, &mut state, seq)?;
            // A workflow's message is answered by running the same steps again.
            let answered = match &user.job_id {
                Some(answered) => get::<JobRecord>(tx.jobs, answered.as_bytes())?,
                None => None,
            };
            // The new answer runs under the limit the one it replaces had.
            let time_limit_secs = answered.as_ref().map(|answered| answered.time_limit_secs);
            let budget =
                (answered.as_ref()).map_or_else(Budget::default, |answered| answered.budget);
            let workflow = answered.and_then(|answered| answered.workflow);
            let model = request
                .model
                .clone()
                .or_else(|| state.model.clone())
                .or_else(|| user.model.clone())
                .or_else(|| defaults.model.clone())
                .unwrap_or_default();
            let submit = JobSubmit {
                v: request.v,
                job_id: job_id.to_string(),
                workbench: workbench.to_string(),
                message: user.text.clone(),
                model: Some(model.clone()),
                submitted_at_ms: atelier_messages::now_ms(),
                auto_approve: request.auto_approve,
                continue_draft: true,
                approvals: tx.approvals(workbench)?,
                workflow,
                batch_id: None,
                time_limit_secs: time_limit_secs
                    .filter(|secs| *secs > 0)
                    .or(Some(defaults.time_limits.of(None).unwrap_or_default())),
                priority: None,
                budget: Budget::default(),
            };
            let model = if submit.workflow.is_some() {
                NO_MODEL.to_string()
            } else {
                model
            };
            let mut record = JobRecord::queued(&submit, &model, Some(user.id.clone()));
            // …and within the budget it had (without one in dollars the new model cannot price).
            if submit.workflow.is_none() {
                let spending = (defaults.spending.of(workbench, &model, budget))
                    .or_else(|_| defaults.spending.of(workbench, &model, Budget::default()))
                    .map_err(|error| abort(error.into()))?;
                record.budget = spending.budget;
                record.prices = spending.prices;
            }
            put(tx.jobs, job_id.as_bytes(), &record)?;
            let event = SystemEvent::Regenerated {
                from_message_id: user.id.clone(),
                job_id: job_id.to_string(),
                replaced: replaced.clone(),
            };
            let text = format!("regenerating the answer to {} (job {job_id})", user.id);
            tx.append(workbench, &mut state, NewMessage::system(event, text))?;
            state.running_job = Some(job_id.to_string());
            tx.set_state(workbench, &state)?;
            Ok((
                record,
                Regenerated {
                    job_id: job_id.to_string(),
                    from_message_id: user.id.clone(),
                    replaced,
                    dry_run: false,
                },
            ))
        })?;
        Ok(result)
    }

    /// Sets the workbench's default model and records the switch in the conversation.
    pub fn set_model(&self, workbench: &str, model: &str) -> Result<ModelSet, CoordinatorError> {
        self.record(workbench)?;
        ModelSpec::parse(model).map_err(|error| CoordinatorError::from(error.to_body()))?;
        let set = self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            state.model = Some(model.to_string());
            let event = SystemEvent::ModelSwitched {
                model: model.to_string(),
                message_only: false,
            };
            let recorded = tx.append(
                workbench,
                &mut state,
                NewMessage::system(event, model_switch_text(model, false)),
            )?;
            Ok(ModelSet {
                workbench: workbench.to_string(),
                model: model.to_string(),
                event_id: recorded.id,
            })
        })?;
        Ok(set)
    }

    /// The messages before `message_id` (all of them when it is none or unknown).
    /// Keeps the model's summary of the conversation through `through` as a system message.
    pub fn record_summary(
        &self,
        workbench: &str,
        through: &str,
        summarized: Vec<String>,
        summary: &str,
    ) -> Result<ConversationMessage, CoordinatorError> {
        self.record(workbench)?;
        let recorded = self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            let event = SystemEvent::ContextCompressed {
                through_message_id: through.to_string(),
                summarized: summarized.clone(),
            };
            tx.append(workbench, &mut state, NewMessage::system(event, summary))
        })?;
        Ok(recorded)
    }

    pub fn messages_before(
        &self,
        workbench: &str,
        message_id: Option<&str>,
    ) -> Result<Vec<ConversationMessage>, CoordinatorError> {
        let limit = message_id.and_then(parse_message_id).unwrap_or(u64::MAX);
        Ok(self
            .messages(workbench)?
            .into_iter()
            .filter(|message| parse_message_id(&message.id).is_some_and(|seq| seq < limit))
            .collect())
    }
}

fn pruned(workbench: &str, message_id: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::RevisionPruned,
        format!(
            "the draft state at {message_id} in `{workbench}` is gone (a publish, discard or restore came after it); rewind the conversation only with --chat-only, or discard the draft and rewind with --discard-draft"
        ),
    )
}

/// What a rewind does to the draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindDraft {
    /// Back to its state at the message (`REVISION_PRUNED` when that is gone).
    Restore,
    /// Back to its state at the message, or discarded when that is gone.
    DiscardWhenGone,
    /// Left as it is (`--chat-only`).
    Keep,
}

impl RewindDraft {
    pub fn of(request: &atelier_messages::workshop::Rewind) -> Self {
        match (request.chat_only, request.discard_draft) {
            (true, _) => Self::Keep,
            (false, true) => Self::DiscardWhenGone,
            (false, false) => Self::Restore,
        }
    }
}

/// The number of an existing message, or `NOT_FOUND`.
fn target_seq(tx: &Tx<'_>, workbench: &str, id: &str) -> TxResult<u64> {
    let seq = parse_message_id(id);
    match seq {
        Some(seq) if tx.message(workbench, seq)?.is_some() => Ok(seq),
        _ => Err(abort(
            ErrorBody::new(
                ErrorCode::NotFound,
                format!(
                    "no message `{id}` in workbench `{workbench}`; list them with `atelier history {workbench}`"
                ),
            )
            .into(),
        )),
    }
}
