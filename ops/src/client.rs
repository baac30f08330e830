//! Client commands: workbenches, drafts, jobs, over NATS request/reply and JetStream. Moving files
//! lives in `transfer`, following a job in `watch`.

use atelier_messages::budget::{Budget, Usd};
use atelier_messages::provider::Priority;
use std::time::Duration;

use anyhow::bail;
use async_nats::jetstream;
use atelier_messages::approval::{ActionClass, ApprovalMode, ApprovalPolicy};
use atelier_messages::job::{
    ApproveCall, CancelJob, CoordinatorStats, GetJob, GetStats, JobState, JobSubmit, JobView,
    ListJobs, MAX_LISTED_JOBS, ResumeJob,
};
use atelier_messages::store::{
    CreateWorkbench, DiffDraft, DiscardDraft, Done, DraftDiff, FileBytes, ListFiles,
    ListWorkbenches, Listing, PublishDraft, Published, ReadFile, SetApprovals, View, WorkbenchInfo,
};
use atelier_messages::verb::Verb;
use atelier_messages::{ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, encode, subjects};
use atelier_transport::Policy;

use crate::follow;

mod transfer;
mod watch;

pub use watch::WatchOutput;

const TIMEOUT: Duration = Duration::from_secs(60);

/// How long after a job's end is announced its record is looked for.
const END_RECORDED_WITHIN: Duration = Duration::from_secs(5);

/// A verb that may work for minutes (a garbage collection over every host and a large bucket):
/// waited for while the coordinator says it is at it.
pub(crate) const LONG: Policy = Policy {
    attempts: 1,
    idle_timeout: Duration::from_secs(30),
    max_duration: Duration::from_secs(3600),
    backoff: Duration::ZERO,
    progress: true,
};

/// A message to submit as a job.
#[derive(Debug)]
pub struct Submission<'a> {
    pub workbench: &'a str,
    pub message: &'a str,
    pub model: Option<String>,
    pub job_id: Option<String>,
    pub auto_approve: bool,
    pub continue_draft: bool,
    /// Which action classes ask in this job (none: the workbench's policy).
    pub approvals: Option<ApprovalPolicy>,
    /// Tool calls to run instead of an agent (`atelier run`).
    pub workflow: Option<atelier_messages::workflow::Workflow>,
    /// The job's wall-clock limit in seconds (none: the operator's default).
    pub time_limit_secs: Option<u64>,
    /// How soon its model calls go when their profile's limits are saturated.
    pub priority: Option<Priority>,
    /// What it may spend (none: the operator's default).
    pub budget: Budget,
}

/// A new job's id for `workbench`: a UUID v7 carrying the workbench's shard key, so that its
/// verbs are asked of its shard alone (docs/protocol.md, "Subjects").
pub fn new_job_id(workbench: &str) -> String {
    atelier_messages::shard::job_id_for(&uuid::Uuid::now_v7().simple().to_string(), workbench)
}

/// Tells on stderr what a listing left out (its shards without an owner now).
fn warn_left_out(left_out: Option<&ErrorBody>) {
    if let Some(left_out) = left_out {
        eprintln!("warning: {}: {}", left_out.code, left_out.message);
    }
}

/// `--priority`: `high`, `normal` or `low`.
pub fn parse_priority(text: &str) -> Result<Priority, String> {
    Priority::parse(text).ok_or_else(|| {
        format!("VALIDATION_FAILED: `{text}` is no priority; use high, normal or low")
    })
}

/// `--budget-tokens` and `--budget-usd`: what a job (or a batch's targets together) may
/// spend on model calls.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct BudgetArgs {
    /// Stop with BUDGET_EXCEEDED at the first model call once this many tokens (prompt and
    /// reply) are spent (default: the operator's budget for the workbench or model, if any).
    #[arg(long, value_name = "N", value_parser = parse_budget_tokens, allow_hyphen_values = true)]
    pub budget_tokens: Option<u64>,
    /// The same in US dollars, at the model profile's prices (refused for a model without).
    #[arg(long, value_name = "USD", value_parser = parse_budget_usd, allow_hyphen_values = true)]
    pub budget_usd: Option<Usd>,
}

impl BudgetArgs {
    pub fn budget(self) -> Budget {
        Budget {
            tokens: self.budget_tokens,
            usd: self.budget_usd,
        }
    }
}

fn parse_budget_tokens(text: &str) -> Result<u64, String> {
    let tokens = text.trim().parse::<u64>().map_err(|_| {
        format!("VALIDATION_FAILED: --budget-tokens {text} must be a whole number of tokens")
    })?;
    Budget::parse(Some(tokens), None, "--budget-").map_err(|error| error.to_string())?;
    Ok(tokens)
}

fn parse_budget_usd(text: &str) -> Result<Usd, String> {
    let dollars = text
        .trim()
        .trim_start_matches('$')
        .parse::<f64>()
        .map_err(|_| {
            format!("VALIDATION_FAILED: --budget-usd {text} must be an amount of dollars (`2.50`)")
        })?;
    let budget = Budget::parse(None, Some(dollars), "--budget-").map_err(|e| e.to_string())?;
    Ok(budget.usd.unwrap_or_default())
}

/// A connected client.
pub struct Client {
    pub nats: async_nats::Client,
}

/// Publishes a checked submission to the JOBS stream, de-duplicated by its job id (a job id
/// published again within the stream's window, or already recorded, starts nothing more).
pub async fn publish_job(nats: &async_nats::Client, submit: &JobSubmit) -> Result<(), ErrorBody> {
    submit.validate()?;
    let unavailable = |reason: String| {
        ErrorBody::new(
            ErrorCode::ToolWorkerUnavailable,
            format!("the job could not be submitted ({reason}); is a coordinator running?"),
        )
    };
    let payload = encode(submit, Format::MessagePack)?;
    atelier_messages::limits::check_depth(&payload, Format::MessagePack)?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", submit.job_id.as_str());
    jetstream::new(nats.clone())
        .publish_with_headers(subjects::JOB_SUBMIT, headers, payload.into())
        .await
        .map_err(|error| unavailable(error.to_string()))?
        .await
        .map_err(|error| unavailable(error.to_string()))?;
    Ok(())
}

pub(crate) fn coded(error: ErrorBody) -> anyhow::Error {
    anyhow::anyhow!("{}: {}", error.code, error.message)
}

impl Client {
    pub(crate) async fn call<V: Verb>(&self, request: &V) -> anyhow::Result<V::Reply> {
        self.call_with(request, Policy::once(TIMEOUT)).await
    }

    pub(crate) async fn call_with<V: Verb>(
        &self,
        request: &V,
        policy: Policy,
    ) -> anyhow::Result<V::Reply> {
        atelier_transport::request(&self.nats, request, policy)
            .await
            .map_err(coded)
    }

    /// A listing over every shard: what the shards that have an owner hold, and what is left
    /// out (the shards with none now).
    async fn listing<V: Verb>(&self, request: &V) -> anyhow::Result<(V::Reply, Option<ErrorBody>)> {
        atelier_transport::request_partial(&self.nats, request, Policy::once(TIMEOUT))
            .await
            .map_err(coded)
    }

    /// [`Client::listing`], telling on stderr what it leaves out.
    pub(crate) async fn call_listing<V: Verb>(&self, request: &V) -> anyhow::Result<V::Reply> {
        let (reply, left_out) = self.listing(request).await?;
        warn_left_out(left_out.as_ref());
        Ok(reply)
    }

    pub async fn create(&self, workbench: &str) -> anyhow::Result<WorkbenchInfo> {
        self.call(&CreateWorkbench {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
        })
        .await
    }

    pub async fn workbenches(&self) -> anyhow::Result<Vec<WorkbenchInfo>> {
        self.call_listing(&ListWorkbenches {
            v: PROTOCOL_VERSION,
        })
        .await
    }

    pub async fn ls(&self, workbench: &str, draft: bool) -> anyhow::Result<Listing> {
        let view = if draft { View::Draft } else { View::Published };
        self.call(&ListFiles {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            view,
        })
        .await
    }

    pub async fn cat(&self, workbench: &str, path: &str, draft: bool) -> anyhow::Result<FileBytes> {
        let view = if draft { View::Draft } else { View::Published };
        self.call(&ReadFile {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            path: path.into(),
            view,
        })
        .await
    }

    pub async fn diff(&self, workbench: &str) -> anyhow::Result<DraftDiff> {
        self.call(&DiffDraft {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
        })
        .await
    }

    pub async fn publish(&self, workbench: &str) -> anyhow::Result<Published> {
        self.call(&PublishDraft {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
        })
        .await
    }

    pub async fn discard(&self, workbench: &str) -> anyhow::Result<Done> {
        self.call(&DiscardDraft {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
        })
        .await
    }

    /// Publishes a job to the JOBS stream (de-duplicated by job id) and returns its id.
    pub async fn submit(&self, submission: Submission<'_>) -> anyhow::Result<String> {
        if let Some(existing) = &submission.job_id
            && let Ok(view) = self.job(existing).await
        {
            bail!(
                "VALIDATION_FAILED: job `{existing}` already exists ({}); JetStream would drop \
                 this submission as a duplicate. Choose another --job-id or leave it out",
                view.state
            );
        }
        let job_id = submission
            .job_id
            .unwrap_or_else(|| new_job_id(submission.workbench));
        let submit = JobSubmit {
            model: submission.model,
            auto_approve: submission.auto_approve,
            continue_draft: submission.continue_draft,
            approvals: submission.approvals,
            workflow: submission.workflow,
            time_limit_secs: submission.time_limit_secs,
            priority: submission.priority,
            budget: submission.budget,
            ..JobSubmit::new(
                job_id.clone(),
                submission.workbench.into(),
                submission.message.into(),
            )
        };
        publish_job(&self.nats, &submit).await.map_err(coded)?;
        Ok(job_id)
    }

    pub async fn jobs(
        &self,
        state: Option<JobState>,
        workbench: Option<String>,
    ) -> anyhow::Result<Vec<JobView>> {
        // Page by page: each reply is bounded, whatever the number of jobs.
        let mut jobs = Vec::new();
        loop {
            let (page, left_out) = self
                .listing(&ListJobs {
                    v: PROTOCOL_VERSION,
                    state,
                    workbench: workbench.clone(),
                    offset: jobs.len() as u64,
                    limit: Some(MAX_LISTED_JOBS),
                })
                .await?;
            let last = page.len() < MAX_LISTED_JOBS as usize;
            jobs.extend(page);
            if last {
                warn_left_out(left_out.as_ref());
                return Ok(jobs);
            }
        }
    }

    pub async fn cancel(&self, job_id: &str) -> anyhow::Result<JobView> {
        self.call(&CancelJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.into(),
        })
        .await
    }

    pub async fn approve(&self, job_id: &str, decision: Decision) -> anyhow::Result<JobView> {
        self.call(&ApproveCall {
            v: PROTOCOL_VERSION,
            job_id: job_id.into(),
            reject: decision.reject,
            reason: decision.reason,
            call_id: decision.call_id,
        })
        .await
    }

    pub async fn set_approvals(
        &self,
        workbench: &str,
        approvals: ApprovalPolicy,
    ) -> anyhow::Result<WorkbenchInfo> {
        self.call(&SetApprovals {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            approvals,
        })
        .await
    }

    /// Continues a failed or cancelled job; `budget`'s limits replace the job's own.
    pub async fn resume(&self, job_id: &str, budget: Budget) -> anyhow::Result<JobView> {
        self.call(&ResumeJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.into(),
            budget,
        })
        .await
    }

    pub async fn stats(&self) -> anyhow::Result<CoordinatorStats> {
        self.call_listing(&GetStats {
            v: PROTOCOL_VERSION,
        })
        .await
    }

    pub async fn job(&self, job_id: &str) -> anyhow::Result<JobView> {
        self.call(&GetJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.into(),
        })
        .await
    }

    /// The job once its end is recorded (the end is announced just before it is recorded),
    /// looked for up to [`END_RECORDED_WITHIN`]; then the job as it is.
    pub async fn finished_job(&self, job_id: &str) -> anyhow::Result<JobView> {
        let read = || async move {
            let request = GetJob {
                v: PROTOCOL_VERSION,
                job_id: job_id.into(),
            };
            atelier_transport::request(&self.nats, &request, Policy::once(TIMEOUT)).await
        };
        let every = Duration::from_millis(50);
        match follow::until_ended(read, every, Some(END_RECORDED_WITHIN), |_| async {}).await {
            Ok(Some(view)) => Ok(view),
            Ok(None) | Err(_) => self.job(job_id).await,
        }
    }
}

/// A person's decision on a job's pending call.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub reject: bool,
    pub reason: Option<String>,
    /// The call decided on; a decision for another call than the pending one is refused.
    pub call_id: Option<String>,
}

/// An approval policy from `CLASS=MODE` pairs (e.g. `destructive=auto`), over the default.
pub fn parse_approvals(pairs: &[String]) -> anyhow::Result<Option<ApprovalPolicy>> {
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut policy = ApprovalPolicy::default();
    for pair in pairs {
        let parsed = pair.split_once('=').and_then(|(class, mode)| {
            Some((ActionClass::parse(class)?, ApprovalMode::parse(mode)?))
        });
        let Some((class, mode)) = parsed else {
            bail!(
                "VALIDATION_FAILED: --approve takes CLASS=MODE with CLASS additive or destructive \
                 and MODE ask or auto, e.g. `--approve destructive=auto`; got {pair:?}"
            );
        };
        policy = policy.with(class, mode);
    }
    Ok(Some(policy))
}
