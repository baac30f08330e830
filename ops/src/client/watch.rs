//! Following a job: `Client::watch` reads its events (`atelier.ctl.events`) until its current
//! run finishes, and shows them as the caller asked ([`WatchOutput`]).

use std::time::Duration;

use atelier_messages::feed::EventStream;
use atelier_messages::job::{EventKind, JobEvent, JobOutcome, JobState};
use atelier_messages::{ErrorBody, subjects};
use atelier_transport::feed::EventFeed;
use indicatif::{ProgressBar, ProgressStyle};

use super::Client;
use crate::shown::{shown, shown_lines};

impl Client {
    /// Follows a job's events from the start until its current run finishes (the ends of
    /// earlier runs of a resumed job are shown, not stopped at); returns its final state.
    pub async fn watch(&self, job_id: &str, output: WatchOutput) -> anyhow::Result<JobState> {
        // Not recorded yet (just submitted): its first run.
        let current_run = self.job(job_id).await.map(|view| view.run).unwrap_or(0);
        let mut feed = EventFeed::new(
            self.nats.clone(),
            EventStream::Jobs,
            Some(subjects::job_events(job_id)),
            0,
        );
        let progress = Progress::new(output);
        loop {
            let next = feed
                .next_within(LOOK_AT_THE_RECORD_EVERY)
                .await
                .map_err(|error| anyhow::anyhow!("cannot follow the job's events: {error}"))?;
            let Some(stored) = next else {
                // Quiet for a while: the run may have ended with its `finished` event lost
                // (a server crash before it reached the disk, a stream trimmed by its limits).
                if let Some(state) = self.ended(job_id, current_run).await {
                    progress.finish();
                    return Ok(state);
                }
                continue;
            };
            let event: JobEvent = match stored.decode() {
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
    }

    /// The final state of the job's run `run` (or a later one), when its record shows it ended.
    async fn ended(&self, job_id: &str, run: u32) -> Option<JobState> {
        let view = self.job(job_id).await.ok()?;
        (view.state.is_terminal() && view.run >= run).then_some(view.state)
    }
}

/// How long a watch waits for the job's next event before it looks at the job's record.
const LOOK_AT_THE_RECORD_EVERY: Duration = Duration::from_secs(5);

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
            println!(
                "  · {} {}",
                shown(tool),
                shown(path.as_deref().unwrap_or(""))
            )
        }
        EventKind::AssistantDelta { text } => {
            print!("{}", shown_lines(text));
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
                "  ? {} {} waits for approval ({action_class}{}); /approve or /reject [REASON]",
                shown(tool),
                shown(&arguments.to_string()),
                shown(&why)
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
            println!("  · {verdict}{}", shown(&reason));
        }
        EventKind::JobFinished {
            state,
            error,
            outcome,
            ..
        } => {
            // The bracket holds the state and any error; what the job did follows as a line
            // of the session's own.
            println!("\n[{state}{}]", shown(&ending(error, &None)));
            if let Some(outcome) = outcome {
                println!("  · {}", shown(&outcome.to_string()));
            }
        }
        _ => {}
    }
}

/// What follows a finished job's state: why it did not succeed, or what it did
/// (` — changed 1 file: count.txt`).
fn ending(error: &Option<ErrorBody>, outcome: &Option<JobOutcome>) -> String {
    match (error, outcome) {
        (Some(error), _) => format!(" — {error}"),
        (None, Some(outcome)) => format!(" — {outcome}"),
        (None, None) => String::new(),
    }
}

/// The watch line once the plan is known: a bar over its items.
fn items_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("█▉▊▋▌▍▎▏ ")
}

/// How a watched job's events are shown, with the spinner or bar of `WatchOutput::Human`.
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
                        bar.set_message(format!(
                            "implement: item {index}/{total} {}{retry}",
                            shown(label)
                        ));
                    }
                    EventKind::ToolExecuting { tool, path, .. } => {
                        bar.set_message(format!(
                            "{} · {} {}",
                            bar.message().split(" · ").next().unwrap_or(""),
                            shown(tool),
                            shown(path.as_deref().unwrap_or(""))
                        ));
                    }
                    EventKind::ToolComplete {
                        tool,
                        ok: false,
                        error,
                        ..
                    } => {
                        let reason = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
                        bar.println(format!("  ! {} failed: {}", shown(tool), shown(&reason)));
                    }
                    EventKind::ItemFinished { index, status } => {
                        bar.set_position(u64::from(*index));
                        bar.println(format!("  item {index}: {status:?}"))
                    }
                    EventKind::AssistantDelta { text } => bar.suspend(|| {
                        use std::io::Write;
                        let mut out = std::io::stdout();
                        let _ = write!(out, "{}", shown_lines(text));
                        let _ = out.flush();
                    }),
                    EventKind::JobFinished {
                        state,
                        error,
                        outcome,
                        ..
                    } => {
                        let ending = ending(error, outcome);
                        // On stdout, after the streamed answer: it ends that line even where the
                        // bar is hidden (output not to a terminal).
                        bar.suspend(|| {
                            println!("\njob {}: {state}{}", shown(&event.job_id), shown(&ending))
                        });
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
