//! `atelier chat WB`: a terminal session over the workshop verbs. A line of text is a message
//! (submitted as a job; tool progress and the streamed answer follow); a line starting with `/`
//! is a command: `/publish`, `/discard`, `/rewind ID`, `/regenerate`, `/model SPEC`, `/diff`,
//! `/history`, `/continue` (toggle working on an existing draft), `/help`, `/quit`. Errors are
//! printed with their code and the session goes on.

use std::process::ExitCode;

use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::workshop::Regenerate;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::client::{Client, Submission, WatchOutput};
use crate::output::print_review;
use crate::workshop::print_history;

const HELP: &str = "type a message, or: /publish /discard /rewind ID /regenerate /model SPEC /diff /history /continue /help /quit";

/// One session until `/quit` or the end of input.
pub async fn run(client: &Client, workbench: &str) -> anyhow::Result<ExitCode> {
    let history = client.history(workbench).await?;
    print_history(&history);
    println!("chat on {workbench}; {HELP}");
    let mut session = Session {
        client,
        workbench,
        continue_draft: false,
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/quit" {
            break;
        }
        if let Err(error) = session.handle(line).await {
            println!("error: {error:#}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

struct Session<'a> {
    client: &'a Client,
    workbench: &'a str,
    continue_draft: bool,
}

impl Session<'_> {
    async fn handle(&mut self, line: &str) -> anyhow::Result<()> {
        let (command, argument) = match line.split_once(' ') {
            Some((command, rest)) => (command, rest.trim()),
            None => (line, ""),
        };
        let (client, workbench) = (self.client, self.workbench);
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
                let rewound = client.rewind(workbench, argument, false).await?;
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
                    job_id: None,
                    model: None,
                    auto_approve: false,
                };
                let regenerated = client.regenerate(request).await?;
                client
                    .watch(&regenerated.job_id, WatchOutput::Lines)
                    .await?;
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
            _ => self.send(line).await?,
        }
        Ok(())
    }

    /// Submits `message` and follows its job to the end.
    async fn send(&self, message: &str) -> anyhow::Result<()> {
        self.client
            .check_message(self.workbench, self.continue_draft)
            .await?;
        let job_id = self
            .client
            .submit(Submission {
                workbench: self.workbench,
                message,
                model: None,
                job_id: None,
                auto_approve: false,
                continue_draft: self.continue_draft,
            })
            .await?;
        self.client.watch(&job_id, WatchOutput::Lines).await?;
        Ok(())
    }
}
