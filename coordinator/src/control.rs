//! The control plane behind NATS: `atelier.ctl.*` verbs (jobs, job, ping, stats, cancel,
//! approve, resume). State changes go through [`Transition`]s; cancel and approval decisions
//! reach a running job as messages to its orchestrator.

use atelier_messages::approval::ApprovalDecision;
use atelier_messages::budget::Budget;
use atelier_messages::job::{
    ApproveCall, CancelJob, CoordinatorStats, GetJob, GetStats, JobState, JobView, ListJobs,
    MAX_LISTED_JOBS, Ping, Pong, ResumeJob,
};
use atelier_messages::journal;
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use atelier_transport::{Router, Routes};

use crate::jobs::{Jobs, Page};
use crate::lifecycle::{self, Transition};
use crate::orchestrator::{OrchestratorMsg, Orchestrators};
use crate::storage::Store;

/// What the control plane acts on.
#[derive(Clone)]
pub(crate) struct Control {
    pub coordinator_id: String,
    pub orchestrators: Orchestrators,
}

/// Every control verb.
pub(crate) fn routes(control: Control) -> Routes {
    Router::new(control)
        .route(|control, request: ListJobs| async move {
            let jobs = control.jobs();
            let page = Page {
                offset: usize::try_from(request.offset).unwrap_or(usize::MAX),
                limit: request
                    .limit
                    .unwrap_or(MAX_LISTED_JOBS)
                    .min(MAX_LISTED_JOBS) as usize,
            };
            jobs.read(move |jobs| jobs.list(request.state, request.workbench.as_deref(), page))
                .await
        })
        .route(|control, request: GetJob| async move { control.view(&request.job_id).await })
        .route(|control, _: Ping| async move {
            Ok(Pong {
                coordinator: control.coordinator_id.clone(),
                protocol_version: PROTOCOL_VERSION,
                running_jobs: control.orchestrators.running(),
            })
        })
        .route(|control, _: GetStats| async move { control.stats().await })
        .route(|control, request: CancelJob| async move { control.cancel(&request.job_id).await })
        .route(|control, request: ApproveCall| async move { control.approve(request).await })
        .route(|control, request: ResumeJob| async move {
            control.resume(&request.job_id, request.budget).await
        })
        .into_routes()
}

impl Control {
    fn jobs(&self) -> &Store<Jobs> {
        self.orchestrators.jobs()
    }

    async fn view(&self, job_id: &str) -> Result<JobView, ErrorBody> {
        let id = job_id.to_string();
        self.jobs()
            .read(move |jobs| jobs.view(&id))
            .await?
            .ok_or_else(|| {
                ErrorBody::new(
                    ErrorCode::NotFound,
                    format!("no job `{job_id}`; list jobs with `atelier jobs`"),
                )
            })
    }

    async fn stats(&self) -> Result<CoordinatorStats, ErrorBody> {
        let coordinator = self.coordinator_id.clone();
        self.jobs().read(move |jobs| jobs.stats(&coordinator)).await
    }

    /// Marks the job cancelled; a running job stops at its next step boundary, one that runs
    /// nowhere here ends at once.
    async fn cancel(&self, job_id: &str) -> Result<JobView, ErrorBody> {
        self.orchestrators.cancel(job_id).await?;
        self.view(job_id).await
    }

    /// Journals the decision on the job's pending destructive call and tells the job.
    async fn approve(&self, request: ApproveCall) -> Result<JobView, ErrorBody> {
        let view = self.view(&request.job_id).await?;
        let Some(pending) = view
            .pending_approval
            .filter(|_| view.state == JobState::AwaitingApproval)
        else {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "job `{}` is {} and has no call awaiting approval",
                    request.job_id, view.state
                ),
            ));
        };
        if let Some(call_id) = request.call_id.as_deref()
            && call_id != pending.call_id
        {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "job `{}` waits for call `{}`, not `{call_id}`: this decision is stale; look \
                     at the job again (`atelier job {}`) and decide on the call it shows",
                    request.job_id, pending.call_id, request.job_id
                ),
            ));
        }
        let decision = ApprovalDecision {
            approved: !request.reject,
            reason: request.reason.clone(),
        };
        let approved = decision.approved;
        let value = serde_json::to_value(&decision)
            .map_err(|error| ErrorBody::new(ErrorCode::Internal, error.to_string()))?;
        let job_id = request.job_id.clone();
        let key = journal::approval(&pending.call_id);
        self.jobs()
            .commit(move |jobs| jobs.record(&job_id, &key, &value))
            .await?;
        self.orchestrators
            .tell(&request.job_id, OrchestratorMsg::ApprovalDecided);
        tracing::info!(job_id = %request.job_id, call_id = %pending.call_id, approved, "approval decided");
        self.view(&request.job_id).await
    }

    /// Continues a failed or cancelled job from its journal: it is `queued` at once and runs
    /// when a slot is free (a queued job is adopted again after a restart).
    async fn resume(&self, job_id: &str, budget: Budget) -> Result<JobView, ErrorBody> {
        let view = self.view(job_id).await?;
        budget.validate("--budget-")?;
        if budget.usd.is_some() {
            let id = job_id.to_string();
            let record = self.jobs().read(move |jobs| jobs.get(&id)).await?;
            if record.is_some_and(|record| record.prices.is_none()) {
                return Err(lifecycle::unpriced(job_id));
            }
        }
        if matches!(view.state, JobState::Failed | JobState::Cancelled) {
            // The resumed job holds its workbench again (refused while another job does).
            self.orchestrators
                .store()
                .resume_turn(view.workbench, job_id.to_string())
                .await?;
        }
        let id = job_id.to_string();
        let record = self
            .jobs()
            .commit(move |jobs| {
                // A person's resume starts a fresh series of adoptions (a job set aside runs
                // again).
                jobs.forget_adoptions(&id)?;
                jobs.transition(&id, Transition::Resume { budget })
            })
            .await?;
        let orchestrators = self.orchestrators.clone();
        tokio::spawn(async move {
            let job_id = record.job_id.clone();
            if let Err(error) = orchestrators.start_resumed(record).await {
                tracing::error!(%job_id, %error, "could not start the resumed job");
            }
        });
        self.view(job_id).await
    }
}
