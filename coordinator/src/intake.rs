//! Job intake: the JetStream work queue of submitted jobs.
//!
//! A job is recorded in sled (fsynced) before its message is acknowledged, so a crash before
//! the record leaves the message to be redelivered, and a duplicate submit is a no-op.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer, stream};
use atelier_messages::codec::CONTENT_TYPE_HEADER;
use atelier_messages::job::JobSubmit;
use atelier_messages::{Format, decode, subjects};
use futures::StreamExt;

use crate::error::CoordinatorError;
use crate::jobs::{self, JobRecord};
use crate::orchestrator::{self, OrchestratorConfig};
use crate::service::blocking;

/// Creates (or updates) the JOBS and EVENTS streams.
pub async fn ensure_streams(js: &jetstream::Context) -> Result<(), CoordinatorError> {
    let nats = |error: String| CoordinatorError::Nats(error);
    js.get_or_create_stream(stream::Config {
        name: subjects::JOBS_STREAM.to_string(),
        subjects: vec![subjects::JOB_SUBMIT.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        duplicate_window: Duration::from_secs(600),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| nats(e.to_string()))?;
    js.get_or_create_stream(stream::Config {
        name: subjects::EVENTS_STREAM.to_string(),
        subjects: vec![subjects::EVENTS_ALL.to_string()],
        retention: stream::RetentionPolicy::Limits,
        max_age: Duration::from_secs(7 * 24 * 3600),
        max_bytes: 1 << 30,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| nats(e.to_string()))?;
    Ok(())
}

/// Starts jobs, at most one orchestrator per job in this process.
#[derive(Clone)]
pub struct JobStarter {
    pub template: OrchestratorTemplate,
    active: Arc<Mutex<HashSet<String>>>,
}

/// Everything an orchestrator needs except the job record.
#[derive(Clone)]
pub struct OrchestratorTemplate {
    pub client: async_nats::Client,
    pub jetstream: jetstream::Context,
    pub jobs: jobs::Jobs,
    pub provider_settings: atelier_agents::provider::ProviderSettings,
    pub budgets: atelier_agents::rpi::Budgets,
    pub running: Arc<std::sync::atomic::AtomicU64>,
}

impl JobStarter {
    pub fn new(template: OrchestratorTemplate) -> Self {
        Self {
            template,
            active: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Starts the job unless it is finished or already running here.
    pub async fn start(&self, record: JobRecord) -> Result<(), CoordinatorError> {
        if record.state.is_terminal() {
            return Ok(());
        }
        {
            let mut active = self
                .active
                .lock()
                .map_err(|_| CoordinatorError::Actor("job registry poisoned".into()))?;
            if !active.insert(record.job_id.clone()) {
                return Ok(());
            }
        }
        let template = &self.template;
        let config = OrchestratorConfig {
            record,
            client: template.client.clone(),
            jetstream: template.jetstream.clone(),
            jobs: template.jobs.clone(),
            provider_settings: template.provider_settings.clone(),
            budgets: template.budgets,
            running: Arc::clone(&template.running),
        };
        orchestrator::spawn(config).await
    }
}

/// Consumes submitted jobs until the stream ends.
pub async fn run_intake(
    js: jetstream::Context,
    starter: JobStarter,
    default_model: Option<String>,
) -> Result<tokio::task::JoinHandle<()>, CoordinatorError> {
    let stream = js
        .get_stream(subjects::JOBS_STREAM)
        .await
        .map_err(|e| CoordinatorError::Nats(e.to_string()))?;
    let consumer = stream
        .get_or_create_consumer(
            subjects::JOBS_CONSUMER,
            consumer::pull::Config {
                durable_name: Some(subjects::JOBS_CONSUMER.to_string()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| CoordinatorError::Nats(e.to_string()))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| CoordinatorError::Nats(e.to_string()))?;
    Ok(tokio::spawn(async move {
        while let Some(next) = messages.next().await {
            match next {
                Ok(message) => accept(&starter, default_model.as_deref(), message).await,
                Err(error) => tracing::warn!(%error, "job intake stream error"),
            }
        }
    }))
}

async fn accept(starter: &JobStarter, default_model: Option<&str>, message: jetstream::Message) {
    let content_type = message
        .headers
        .as_ref()
        .and_then(|headers| headers.get(CONTENT_TYPE_HEADER))
        .map(|value| value.as_str().to_string());
    let format = Format::from_content_type(content_type.as_deref());
    let submit = decode::<JobSubmit>(&message.payload, format).and_then(|submit| {
        jobs::validate_submit(&submit)?;
        Ok(submit)
    });
    let submit = match submit {
        Ok(submit) => submit,
        Err(error) => {
            tracing::warn!(code = %error.code, %error, "rejected job submission");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
    };
    let model = submit
        .model
        .clone()
        .or_else(|| default_model.map(str::to_string))
        .unwrap_or_default();
    let jobs = starter.template.jobs.clone();
    let recorded = blocking(move || jobs.record_if_new(&submit, &model)).await;
    let record = match recorded {
        Ok((record, _is_new)) => record,
        Err(error) => {
            tracing::error!(%error, "could not record job; leaving it for redelivery");
            let _ = message
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    };
    if let Err(error) = message.double_ack().await {
        tracing::warn!(%error, job_id = %record.job_id, "job ack not confirmed; a redelivery will be a no-op");
    }
    if let Err(error) = starter.start(record).await {
        tracing::error!(%error, "could not start job");
    }
}
