//! Client commands: workbenches, drafts, jobs, over NATS request/reply and JetStream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use async_nats::jetstream::{self, consumer};
use atelier_messages::approval::{ActionClass, ApprovalMode, ApprovalPolicy};
use atelier_messages::job::{
    ApproveCall, CancelJob, CoordinatorStats, EventKind, GetJob, GetStats, JobEvent, JobState,
    JobSubmit, JobView, ListJobs, ResumeJob,
};
use atelier_messages::store::{
    AddFiles, BlobRef, CreateWorkbench, DiffDraft, DiscardDraft, Done, DraftDiff, FileBytes,
    FileContent, ListFiles, ListWorkbenches, Listing, PublishDraft, Published, ReadFile,
    SetApprovals, View, WorkbenchInfo,
};
use atelier_messages::verb::Verb;
use atelier_messages::{ErrorBody, Format, PROTOCOL_VERSION, decode, encode, now_ms, subjects};
use atelier_transport::blobs::{blob_of_file, inline_budget};
use atelier_transport::{BlobBucket, Policy};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How long `wb add` waits for the store to import files staged in the blob bucket.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(900);

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
}

/// A connected client.
pub struct Client {
    pub nats: async_nats::Client,
}

pub(crate) fn coded(error: ErrorBody) -> anyhow::Error {
    anyhow::anyhow!("{}: {}", error.code, error.message)
}

impl Client {
    pub(crate) async fn call<V: Verb>(&self, request: &V) -> anyhow::Result<V::Reply> {
        atelier_transport::request(&self.nats, request, Policy::once(TIMEOUT))
            .await
            .map_err(coded)
    }

    pub async fn create(&self, workbench: &str) -> anyhow::Result<WorkbenchInfo> {
        self.call(&CreateWorkbench {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
        })
        .await
    }

    pub async fn workbenches(&self) -> anyhow::Result<Vec<WorkbenchInfo>> {
        self.call(&ListWorkbenches {
            v: PROTOCOL_VERSION,
        })
        .await
    }

    pub async fn add(
        &self,
        workbench: &str,
        files: &[PathBuf],
        rename: Option<&str>,
    ) -> anyhow::Result<Listing> {
        if rename.is_some() && files.len() != 1 {
            bail!("--as names one file; give exactly one FILE with it");
        }
        let mut contents = Vec::with_capacity(files.len());
        let budget = inline_budget(&self.nats);
        let mut inline_bytes = 0;
        for file in files {
            let path = match rename {
                Some(name) => name.to_string(),
                None => file_name(file)?,
            };
            let size = std::fs::metadata(file)
                .with_context(|| format!("cannot read {}", file.display()))?
                .len();
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            if inline_bytes + size <= budget {
                inline_bytes += size;
                let content = std::fs::read(file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                contents.push(FileContent::inline(path, content));
                continue;
            }
            contents.push(FileContent::staged(path, self.upload(file).await?));
        }
        let add = AddFiles {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            files: contents,
        };
        // The store imports staged files before it answers.
        atelier_transport::request(&self.nats, &add, Policy::once(IMPORT_TIMEOUT))
            .await
            .map_err(coded)
    }

    /// Uploads a file to the blob bucket in chunks (streamed from disk, with a progress bar on a
    /// terminal) and names it by digest.
    async fn upload(&self, file: &Path) -> anyhow::Result<BlobRef> {
        let blob = blob_of_file(file).await.map_err(coded)?;
        let bucket = BlobBucket::open(&self.nats).await.map_err(coded)?;
        let opened = tokio::fs::File::open(file)
            .await
            .with_context(|| format!("cannot read {}", file.display()))?;
        let bar = ProgressBar::new(blob.size).with_style(bytes_style());
        bar.set_message(format!("uploading {}", file.display()));
        let mut reader = Counted {
            inner: tokio::io::BufReader::with_capacity(256 * 1024, opened),
            bar: bar.clone(),
        };
        let uploaded = bucket.put_reader(&mut reader, &blob).await;
        bar.finish_and_clear();
        uploaded.map_err(coded)?;
        Ok(blob)
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

    /// Writes a file read with [`Client::cat`] to `target` (a large one streamed from the blob
    /// bucket, digest-verified).
    pub async fn save(&self, file: &FileBytes, target: &Path) -> anyhow::Result<()> {
        let Some(blob) = &file.blob else {
            return std::fs::write(target, &file.content)
                .with_context(|| format!("cannot write {}", target.display()));
        };
        let bucket = BlobBucket::open(&self.nats).await.map_err(coded)?;
        bucket.fetch_to(blob, target, false).await.map_err(coded)
    }

    /// Writes every file of a view under `dir`; returns the paths written.
    pub async fn export(
        &self,
        workbench: &str,
        dir: &Path,
        draft: bool,
    ) -> anyhow::Result<Vec<PathBuf>> {
        let listing = self.ls(workbench, draft).await?;
        let mut written = Vec::new();
        for entry in listing.files {
            let target = export_target(dir, &entry.path)?;
            let file = self.cat(workbench, &entry.path, draft).await?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            self.save(&file, &target).await?;
            written.push(target);
        }
        Ok(written)
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
            .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string());
        let submit = JobSubmit {
            v: PROTOCOL_VERSION,
            job_id: job_id.clone(),
            workbench: submission.workbench.into(),
            message: submission.message.into(),
            model: submission.model,
            submitted_at_ms: now_ms(),
            auto_approve: submission.auto_approve,
            continue_draft: submission.continue_draft,
            approvals: submission.approvals,
            workflow: submission.workflow,
            batch_id: None,
        };
        submit.validate().map_err(coded)?;
        let payload = encode(&submit, Format::MessagePack).map_err(coded)?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", job_id.as_str());
        let js = jetstream::new(self.nats.clone());
        js.publish_with_headers(subjects::JOB_SUBMIT, headers, payload.into())
            .await
            .context("cannot submit the job (is `atelier up` or a coordinator running?)")?
            .await
            .context("JetStream did not confirm the submission")?;
        Ok(job_id)
    }

    pub async fn jobs(
        &self,
        state: Option<JobState>,
        workbench: Option<String>,
    ) -> anyhow::Result<Vec<JobView>> {
        self.call(&ListJobs {
            v: PROTOCOL_VERSION,
            state,
            workbench,
        })
        .await
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

    pub async fn resume(&self, job_id: &str) -> anyhow::Result<JobView> {
        self.call(&ResumeJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.into(),
        })
        .await
    }

    pub async fn stats(&self) -> anyhow::Result<CoordinatorStats> {
        self.call(&GetStats {
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

    /// The job once its end is recorded (the end is announced just before it is recorded).
    pub async fn finished_job(&self, job_id: &str) -> anyhow::Result<JobView> {
        for _ in 0..100 {
            let view = self.job(job_id).await?;
            if view.state.is_terminal() {
                return Ok(view);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.job(job_id).await
    }

    /// Follows a job's events from the start until its current run finishes (the ends of
    /// earlier runs of a resumed job are shown, not stopped at); returns its final state.
    pub async fn watch(&self, job_id: &str, output: WatchOutput) -> anyhow::Result<JobState> {
        // Not recorded yet (just submitted): its first run.
        let current_run = self.job(job_id).await.map(|view| view.run).unwrap_or(0);
        let js = jetstream::new(self.nats.clone());
        let stream = js
            .get_stream(subjects::EVENTS_STREAM)
            .await
            .context("no EVENTS stream: is a coordinator running?")?;
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: subjects::job_events(job_id),
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .context("cannot follow the job's events")?;
        let mut messages = consumer
            .messages()
            .await
            .context("cannot follow the job's events")?;
        let progress = Progress::new(output);
        while let Some(message) = messages.next().await {
            let message = message.context("event stream interrupted")?;
            let event: JobEvent = match decode(&message.payload, Format::MessagePack) {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(%error, "skipping an undecodable event");
                    continue;
                }
            };
            progress.show(&event);
            if let EventKind::JobFinished { state, run, .. } = event.kind
                && run >= current_run
            {
                progress.finish();
                return Ok(state);
            }
        }
        bail!("the event stream ended before the job finished")
    }
}

/// Where `path` goes under `dir`, refusing anything that could land outside it whatever the
/// server sent: a path that is not already normalized (`..`, absolute, …) or a symbolic link on
/// the way (an attacker's `dir/reports -> /etc`).
fn export_target(dir: &Path, path: &str) -> anyhow::Result<PathBuf> {
    let safe = atelier_messages::path::normalize(path)
        .ok()
        .filter(|normal| normal == path);
    let Some(safe) = safe else {
        bail!(
            "SANDBOX_VIOLATION: the server listed the unsafe path {path:?}; nothing was written for it"
        );
    };
    let mut target = dir.to_path_buf();
    for segment in safe.split('/') {
        target.push(segment);
        let is_link = std::fs::symlink_metadata(&target)
            .map(|meta| meta.file_type().is_symlink())
            .unwrap_or(false);
        if is_link {
            bail!(
                "SANDBOX_VIOLATION: {} is a symbolic link; export into a folder without links",
                target.display()
            );
        }
    }
    Ok(target)
}

fn file_name(path: &Path) -> anyhow::Result<String> {
    path.file_name()
        .and_then(|name| name.to_str())
        .map(str::to_string)
        .with_context(|| format!("{} has no usable file name; use --as PATH", path.display()))
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

/// How `watch` shows events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchOutput {
    /// A progress line (phase, item, tool) and the streamed summary.
    Human,
    /// One JSON event per line.
    Json,
    /// Nothing.
    Quiet,
    /// Plain lines for a terminal session: tool progress, then the streamed answer.
    Lines,
}

/// `WatchOutput::Lines`: a line per phase and tool call, the answer as it streams.
#[allow(clippy::print_stdout)]
fn show_line(event: &JobEvent) {
    use std::io::Write;
    match &event.kind {
        EventKind::PhaseStarted { phase } => println!("  · {phase}"),
        EventKind::ToolExecuting { tool, path, .. } => {
            println!("  · {tool} {}", path.as_deref().unwrap_or(""))
        }
        EventKind::AssistantDelta { text } => {
            print!("{text}");
            let _ = std::io::stdout().flush();
        }
        EventKind::ApprovalRequested {
            tool,
            arguments,
            action_class,
            why,
            ..
        } => {
            let why = why.as_deref().map(|w| format!(": {w}")).unwrap_or_default();
            println!(
                "  ? {tool} {arguments} waits for approval ({action_class}{why}); \
                 /approve or /reject [REASON]"
            );
        }
        EventKind::ApprovalResolved {
            approved, reason, ..
        } => {
            let verdict = if *approved { "approved" } else { "rejected" };
            let reason = reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            println!("  · {verdict}{reason}");
        }
        EventKind::JobFinished { state, error, .. } => {
            let reason = error
                .as_ref()
                .map(|e| format!(" — {e}"))
                .unwrap_or_default();
            println!("\n[{state}{reason}]");
        }
        _ => {}
    }
}

/// The watch line once the plan is known: a bar over its items.
fn bytes_style() -> ProgressStyle {
    ProgressStyle::with_template("[{elapsed_precise}] {bar:24} {bytes}/{total_bytes} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// A reader that advances a progress bar by the bytes read through it.
struct Counted<R> {
    inner: R,
    bar: ProgressBar,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            self.bar.inc((buf.filled().len() - before) as u64);
        }
        polled
    }
}

fn items_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("█▉▊▋▌▍▎▏ ")
}

struct Progress {
    output: WatchOutput,
    bar: Option<ProgressBar>,
}

impl Progress {
    fn new(output: WatchOutput) -> Self {
        let bar = (output == WatchOutput::Human).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self { output, bar }
    }

    #[allow(clippy::print_stdout)]
    fn show(&self, event: &JobEvent) {
        match self.output {
            WatchOutput::Quiet => {}
            WatchOutput::Lines => show_line(event),
            WatchOutput::Json => {
                if let Ok(line) = serde_json::to_string(event) {
                    println!("{line}");
                }
            }
            WatchOutput::Human => {
                let Some(bar) = &self.bar else { return };
                match &event.kind {
                    EventKind::PhaseStarted { phase } => bar.set_message(format!("{phase}")),
                    EventKind::ItemStarted {
                        index,
                        total,
                        label,
                        attempt,
                    } => {
                        let retry = if *attempt > 1 {
                            format!(" (attempt {attempt})")
                        } else {
                            String::new()
                        };
                        if bar.length() != Some(u64::from(*total)) {
                            bar.set_length(u64::from(*total));
                            bar.set_style(items_style());
                        }
                        bar.set_position(u64::from(index.saturating_sub(1)));
                        bar.set_message(format!("implement: item {index}/{total} {label}{retry}"));
                    }
                    EventKind::ToolExecuting { tool, path, .. } => {
                        bar.set_message(format!(
                            "{} · {tool} {}",
                            bar.message().split(" · ").next().unwrap_or(""),
                            path.as_deref().unwrap_or("")
                        ));
                    }
                    EventKind::ToolComplete {
                        tool,
                        ok: false,
                        error,
                        ..
                    } => {
                        let reason = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
                        bar.println(format!("  ! {tool} failed: {reason}"));
                    }
                    EventKind::ItemFinished { index, status } => {
                        bar.set_position(u64::from(*index));
                        bar.println(format!("  item {index}: {status:?}"))
                    }
                    EventKind::AssistantDelta { text } => bar.suspend(|| {
                        use std::io::Write;
                        let mut out = std::io::stdout();
                        let _ = write!(out, "{text}");
                        let _ = out.flush();
                    }),
                    EventKind::JobFinished { state, error, .. } => {
                        let reason = error
                            .as_ref()
                            .map(|e| format!(" — {e}"))
                            .unwrap_or_default();
                        bar.println(format!("\njob {}: {state}{reason}", event.job_id));
                    }
                    _ => {}
                }
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_stays_inside_its_folder() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let inside = export_target(dir.path(), "reports/q3.csv").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inside, dir.path().join("reports").join("q3.csv"));
        for unsafe_path in ["../evil", "/etc/passwd", "a/../../b", "a//b", "./a"] {
            assert!(
                export_target(dir.path(), unsafe_path).is_err(),
                "{unsafe_path}"
            );
        }
        let elsewhere = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link"))
            .unwrap_or_else(|e| panic!("{e}"));
        let through_link = export_target(dir.path(), "link/x.txt");
        assert!(
            through_link.is_err_and(|e| e.to_string().contains("SANDBOX_VIOLATION")),
            "a link on the way is refused"
        );
    }
}
