//! `atelier chat WB`: a terminal session over the workshop verbs. A line of text is a message
//! (submitted as a job; tool progress and the streamed answer follow); a line starting with `/`
//! is a command: `/publish`, `/discard`, `/rewind ID`, `/regenerate`, `/model SPEC`, `/diff`,
//! `/history`, `/continue` (toggle working on an existing draft), `/help`, `/quit`. While a job
//! runs the session keeps reading: `/approve [REASON]` and `/reject [REASON]` decide the call it
//! waits on, `/cancel` stops it. Errors are printed with their code and the session goes on.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;

use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::job::JobState;
use atelier_messages::workshop::Regenerate;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::client::{Client, Decision, Submission, WatchOutput};
use crate::output::print_review;
use crate::workshop::{discards, print_history};

const HELP: &str = "type a message, or: /publish /discard /rewind ID /regenerate [ID] /model SPEC /diff /history /continue /help /quit; while a job runs: /approve /reject [REASON] /cancel";

/// One session until `/quit` or the end of input.
pub async fn run(client: &Client, workbench: &str) -> anyhow::Result<ExitCode> {
    let history = client.history(workbench).await?;
    print_history(&history);
    println!("chat on {workbench}; {HELP}");
    let mut session = Session {
        client,
        workbench,
        continue_draft: false,
        regenerating_from: None,
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    // The job being followed, if any: its watch runs beside the input.
    let mut running: Option<Running<'_>> = None;
    loop {
        let line = match running.as_mut() {
            None => lines.next_line().await?,
            Some(job) => tokio::select! {
                _ = &mut job.watch => {
                    running = None;
                    continue;
                }
                line = lines.next_line() => line?,
            },
        };
        let Some(line) = line else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/quit" {
            break;
        }
        let outcome = match &running {
            Some(job) => session.while_running(&job.job_id, line).await,
            None => session.handle(line).await.map(|started| {
                running = started.map(|job_id| Running {
                    watch: Box::pin(follow(client, job_id.clone())),
                    job_id,
                });
            }),
        };
        if let Err(error) = outcome {
            println!("error: {error:#}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

type Watch<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// A job the session follows.
struct Running<'a> {
    job_id: String,
    watch: Watch<'a>,
}

/// Prints a job's progress and answer until it ends.
async fn follow(client: &Client, job_id: String) {
    let ended: anyhow::Result<JobState> = client.watch(&job_id, WatchOutput::Lines).await;
    if let Err(error) = ended {
        println!("error: {error:#}");
    }
}

struct Session<'a> {
    client: &'a Client,
    workbench: &'a str,
    continue_draft: bool,
    /// `/regenerate ID` told what it would discard; the same line again goes on.
    regenerating_from: Option<String>,
}

impl Session<'_> {
    /// Runs a line; returns the job it started, to be followed.
    async fn handle(&mut self, line: &str) -> anyhow::Result<Option<String>> {
        let (command, argument) = match line.split_once(' ') {
            Some((command, rest)) => (command, rest.trim()),
            None => (line, ""),
        };
        let (client, workbench) = (self.client, self.workbench);
        let regenerating_from = self.regenerating_from.take();
        match command {
            "/publish" => {
                let published = client.publish(workbench).await?;
                println!(
                    "published; the previous state is checkpoint {}",
                    published.checkpoint_id
                );
            }
            "/discard" => {
                client.discard(workbench).await?;
                println!("discarded the draft");
            }
            "/rewind" => {
                let rewound = client.rewind(workbench, argument, false, false).await?;
                println!(
                    "rewound to {}; discarded {}",
                    rewound.head,
                    rewound.removed.join(", ")
                );
            }
            "/regenerate" => {
                let request = Regenerate {
                    v: PROTOCOL_VERSION,
                    workbench: workbench.to_string(),
                    from_message_id: (!argument.is_empty()).then(|| argument.to_string()),
                    dry_run: false,
                    job_id: None,
                    model: None,
                    auto_approve: false,
                };
                let told = regenerating_from.as_deref() == Some(argument);
                if !argument.is_empty() && !told {
                    let preview = Regenerate {
                        dry_run: true,
                        ..request
                    };
                    println!("{}", discards(&client.regenerate(preview).await?));
                    println!("type /regenerate {argument} again to go on");
                    self.regenerating_from = Some(argument.to_string());
                    return Ok(None);
                }
                return Ok(Some(client.regenerate(request).await?.job_id));
            }
            "/model" => {
                let set = client.set_model(workbench, argument).await?;
                println!("model: {}", set.model);
            }
            "/diff" => print_review(&client.review(workbench).await?),
            "/history" => print_history(&client.history(workbench).await?),
            "/continue" => {
                self.continue_draft = !self.continue_draft;
                println!("continue on the draft: {}", self.continue_draft);
            }
            "/help" => println!("{HELP}"),
            other if other.starts_with('/') => println!("unknown command {other}; {HELP}"),
            _ => return self.send(line).await.map(Some),
        }
        Ok(None)
    }

    /// A line while `job_id` runs: decide its pending call, cancel it, or wait.
    async fn while_running(&self, job_id: &str, line: &str) -> anyhow::Result<()> {
        let (command, argument) = match line.split_once(' ') {
            Some((command, rest)) => (command, rest.trim()),
            None => (line, ""),
        };
        let reason = (!argument.is_empty()).then(|| argument.to_string());
        match command {
            "/approve" | "/reject" => {
                let decision = Decision {
                    reject: command == "/reject",
                    reason,
                    call_id: None,
                };
                self.client.approve(job_id, decision).await?;
            }
            "/cancel" => {
                self.client.cancel(job_id).await?;
            }
            _ => println!(
                "job {job_id} is running: wait for it, /approve or /reject its pending call, or /cancel it"
            ),
        }
        Ok(())
    }

    /// Submits `message`; returns its job.
    async fn send(&self, message: &str) -> anyhow::Result<String> {
        self.client
            .check_message(self.workbench, self.continue_draft, None)
            .await?;
        self.client
            .submit(Submission {
                workbench: self.workbench,
                message,
                model: None,
                job_id: None,
                auto_approve: false,
                continue_draft: self.continue_draft,
                approvals: None,
                workflow: None,
                time_limit_secs: None,
                priority: None,
                budget: atelier_messages::budget::Budget::default(),
            })
            .await
    }
}
