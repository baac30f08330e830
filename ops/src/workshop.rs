//! Workshop commands: `history`, `rewind`, `regenerate`, `checkpoints`, `checkpoint`,
//! `restore`, `models`, `gc` and `wb set-model`, over the `atelier.workshop.*` verbs.

use std::io::IsTerminal;
use std::process::ExitCode;

use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::review::{Review, ReviewDraft};
use atelier_messages::store::Done;
use atelier_messages::workshop::{
    CheckMessage, CheckpointInfo, CollectGarbage, Collected, ConversationMessage, CreateCheckpoint,
    GetHistory, History, ListCheckpoints, ListModels, ModelChoices, ModelSet, Regenerate,
    Regenerated, RestoreCheckpoint, Restored, Rewind, Rewound, SetModel,
};
use clap::Subcommand;

use crate::client::{Client, WatchOutput};
use crate::output::{print_job, print_json};
use crate::shown::{shown, shown_lines};

/// The workshop's top-level commands.
#[derive(Subcommand)]
pub enum WorkshopCommand {
    /// The conversation of a workbench: user messages, answers and system events, with ids.
    History {
        workbench: String,
        #[arg(long)]
        json: bool,
    },
    /// Discard every message after MESSAGE_ID and restore the draft to its state at it.
    Rewind {
        workbench: String,
        message_id: String,
        /// Rewind the conversation only; leave the draft as it is.
        #[arg(long, conflicts_with = "discard_draft")]
        chat_only: bool,
        /// When the draft's state at MESSAGE_ID is gone (REVISION_PRUNED: a publish, discard
        /// or restore came after it), discard the draft and rewind.
        #[arg(long)]
        discard_draft: bool,
        #[arg(long)]
        json: bool,
    },
    /// A fresh answer to the last user message (discards the answer after it, if any), or with
    /// --from to an earlier one (discards everything after it, once you agree).
    Regenerate {
        workbench: String,
        /// The user message to answer again; what follows it is shown, then discarded.
        #[arg(long, value_name = "MESSAGE_ID")]
        from: Option<String>,
        /// Go on without asking (required with --from when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
        /// Model for this answer only.
        #[arg(long)]
        model: Option<String>,
        #[arg(long)]
        job_id: Option<String>,
        #[arg(long)]
        auto_approve: bool,
        /// Follow the job and exit non-zero unless it succeeds.
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
    },
    /// List a workbench's checkpoints (saved published states).
    Checkpoints {
        workbench: String,
        #[arg(long)]
        json: bool,
    },
    /// Checkpoint the published state now.
    Checkpoint {
        workbench: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Make a checkpoint the published state (refused while a draft exists).
    Restore {
        workbench: String,
        checkpoint_id: String,
        #[arg(long)]
        json: bool,
    },
    /// The models a message may name: the operator's profiles and the default.
    Models {
        #[arg(long)]
        json: bool,
    },
    /// Remove blobs that no manifest, checkpoint or draft revision references.
    Gc {
        #[arg(long)]
        json: bool,
    },
}

impl Client {
    pub async fn models(&self) -> anyhow::Result<ModelChoices> {
        self.call(&ListModels {
            v: PROTOCOL_VERSION,
        })
        .await
    }

    pub async fn history(&self, workbench: &str) -> anyhow::Result<History> {
        self.call(&GetHistory {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
        })
        .await
    }

    /// Answers as a submission would be answered now (`DRAFT_EXISTS`, `WORKBENCH_BUSY`, ...).
    pub async fn check_message(
        &self,
        workbench: &str,
        continue_draft: bool,
        model: Option<&str>,
    ) -> anyhow::Result<Done> {
        self.call(&CheckMessage {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            continue_draft,
            model: model.map(str::to_string),
        })
        .await
    }

    pub async fn rewind(
        &self,
        workbench: &str,
        message_id: &str,
        chat_only: bool,
        discard_draft: bool,
    ) -> anyhow::Result<Rewound> {
        self.call(&Rewind {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            message_id: message_id.into(),
            chat_only,
            discard_draft,
        })
        .await
    }

    pub async fn regenerate(&self, request: Regenerate) -> anyhow::Result<Regenerated> {
        self.call(&request).await
    }

    pub async fn set_model(&self, workbench: &str, model: &str) -> anyhow::Result<ModelSet> {
        self.call(&SetModel {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            model: model.into(),
        })
        .await
    }

    pub async fn checkpoints(&self, workbench: &str) -> anyhow::Result<Vec<CheckpointInfo>> {
        self.call(&ListCheckpoints {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
        })
        .await
    }

    pub async fn checkpoint(
        &self,
        workbench: &str,
        note: Option<String>,
    ) -> anyhow::Result<CheckpointInfo> {
        self.call(&CreateCheckpoint {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            note,
        })
        .await
    }

    pub async fn restore(&self, workbench: &str, checkpoint_id: &str) -> anyhow::Result<Restored> {
        self.call(&RestoreCheckpoint {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            checkpoint_id: checkpoint_id.into(),
        })
        .await
    }

    /// The draft's content review.
    pub async fn review(&self, workbench: &str) -> anyhow::Result<Review> {
        self.call(&ReviewDraft {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            sample: None,
        })
        .await
    }

    pub async fn collect_garbage(&self) -> anyhow::Result<Collected> {
        let request = CollectGarbage {
            v: PROTOCOL_VERSION,
        };
        self.call_with(&request, crate::client::LONG).await
    }

    /// Follows a job to its end, printing progress (or the final view as JSON).
    pub async fn follow(&self, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
        let output = if json {
            WatchOutput::Quiet
        } else {
            WatchOutput::Human
        };
        let state = self.watch(job_id, output).await?;
        let view = self.finished_job(job_id).await?;
        if json {
            print_json(&view)?;
        } else {
            print_job(&view);
        }
        Ok(if state == atelier_messages::job::JobState::Succeeded {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

/// Runs one workshop command.
pub async fn run(client: &Client, command: WorkshopCommand) -> anyhow::Result<ExitCode> {
    match command {
        WorkshopCommand::History { workbench, json } => {
            let history = client.history(&workbench).await?;
            if json {
                print_json(&history.messages)?;
            } else {
                print_history(&history);
            }
        }
        WorkshopCommand::Rewind {
            workbench,
            message_id,
            chat_only,
            discard_draft,
            json,
        } => {
            let rewound = client
                .rewind(&workbench, &message_id, chat_only, discard_draft)
                .await?;
            print_rewound(&workbench, &rewound, json)?;
        }
        WorkshopCommand::Regenerate {
            workbench,
            from,
            yes,
            model,
            job_id,
            auto_approve,
            wait,
            json,
        } => {
            let request = Regenerate {
                v: PROTOCOL_VERSION,
                workbench,
                from_message_id: from,
                dry_run: false,
                job_id,
                model,
                auto_approve,
            };
            return regenerate(client, request, yes, wait, json).await;
        }
        WorkshopCommand::Checkpoints { workbench, json } => {
            let checkpoints = client.checkpoints(&workbench).await?;
            if json {
                print_json(&checkpoints)?;
            } else {
                print_checkpoints(&checkpoints);
            }
        }
        WorkshopCommand::Checkpoint {
            workbench,
            note,
            json,
        } => {
            let checkpoint = client.checkpoint(&workbench, note).await?;
            if json {
                print_json(&checkpoint)?;
            } else {
                println!(
                    "checkpoint {} of {workbench} ({} file(s))",
                    checkpoint.id,
                    checkpoint.files.len()
                );
            }
        }
        WorkshopCommand::Restore {
            workbench,
            checkpoint_id,
            json,
        } => {
            let restored = client.restore(&workbench, &checkpoint_id).await?;
            print_restored(&workbench, &restored, json)?;
        }
        WorkshopCommand::Models { json } => {
            let choices = client.models().await?;
            if json {
                print_json(&choices)?;
            } else {
                print_models(&choices);
            }
        }
        WorkshopCommand::Gc { json } => {
            let collected = client.collect_garbage().await?;
            if json {
                print_json(&collected)?;
            } else {
                print_collected(&collected);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `atelier regenerate`: the new job's id, or with `wait` its run followed to the end. Going
/// back to an earlier message (`--from`) asks first, unless `yes`.
async fn regenerate(
    client: &Client,
    request: Regenerate,
    yes: bool,
    wait: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if request.from_message_id.is_some() && !agreed(client, &request, yes).await? {
        println!("nothing was changed");
        return Ok(ExitCode::FAILURE);
    }
    let regenerated = client.regenerate(request).await?;
    if wait {
        if !json {
            println!(
                "regenerating the answer to {} as job {}",
                regenerated.from_message_id, regenerated.job_id
            );
        }
        return client.follow(&regenerated.job_id, json).await;
    }
    if json {
        print_json(&regenerated)?;
    } else {
        println!("{}", regenerated.job_id);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_rewound(workbench: &str, rewound: &Rewound, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(rewound);
    }
    println!(
        "rewound {workbench} to {}; discarded {} message(s); draft: {}",
        rewound.head,
        rewound.removed.len(),
        if rewound.has_draft {
            "restored"
        } else {
            "none"
        }
    );
    Ok(())
}

fn print_restored(workbench: &str, restored: &Restored, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(restored);
    }
    println!(
        "restored checkpoint {} of {workbench} ({} file(s)); the replaced state is checkpoint {}",
        restored.checkpoint_id,
        restored.files.len(),
        restored.safety_checkpoint_id
    );
    Ok(())
}

/// What a garbage collection removed and kept, for people.
fn print_collected(collected: &Collected) {
    println!(
        "removed {} blob(s) and {} cached table(s) ({} bytes); {} blob(s) kept{}",
        collected.removed_blobs,
        collected.removed_tables,
        collected.freed_bytes,
        collected.kept_blobs,
        match collected.hosts {
            0 | 1 => String::new(),
            hosts => format!(", on {hosts} hosts"),
        }
    );
    if collected.removed_stored_blobs + collected.kept_stored_blobs > 0 {
        println!(
            "the replicated store's bucket: removed {} blob(s) ({} bytes); {} kept",
            collected.removed_stored_blobs,
            collected.freed_stored_bytes,
            collected.kept_stored_blobs
        );
    }
    if collected.hosts_unanswered > 0 {
        eprintln!(
            "{} coordinator(s) did not answer in time: their hosts were not swept; run `atelier gc` again",
            collected.hosts_unanswered
        );
    }
}

/// Says what regenerating `request` would discard and whether to go on: `yes`, or the person
/// at the terminal says so; without a terminal, `--yes` is required.
async fn agreed(client: &Client, request: &Regenerate, yes: bool) -> anyhow::Result<bool> {
    let preview = client
        .regenerate(Regenerate {
            dry_run: true,
            ..request.clone()
        })
        .await?;
    eprintln!("{}", discards(&preview));
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "VALIDATION_FAILED: regenerating from {} discards what follows it; pass --yes to go on",
            preview.from_message_id
        );
    }
    eprint!("go on? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// `regenerating the answer to m3 discards m4, m5 and puts the draft back as it was at m3`.
pub fn discards(preview: &Regenerated) -> String {
    let from = &preview.from_message_id;
    match preview.replaced.is_empty() {
        true => format!("regenerating the answer to {from} discards no message"),
        false => format!(
            "regenerating the answer to {from} discards {} and puts the draft back as it was at {from}",
            preview.replaced.join(", ")
        ),
    }
}

/// One line per message: id, role, text (system events in brackets).
pub fn print_history(history: &History) {
    if let Some(model) = &history.model {
        println!("model {}", shown(model));
    }
    for message in &history.messages {
        print_message(message);
    }
    if let Some(job) = &history.running_job {
        println!("(job {} is answering)", shown(job));
    } else if let Some(origin) = &history.draft {
        println!(
            "({})",
            crate::output::draft_note(origin, &history.workbench)
        );
        if !origin.stale {
            println!(
                "(it is waiting: `atelier draft diff|publish|discard {}`)",
                history.workbench
            );
        }
    } else if history.has_draft {
        println!(
            "(a draft is waiting: `atelier draft diff|publish|discard {}`)",
            history.workbench
        );
    }
}

pub fn print_message(message: &ConversationMessage) {
    match message.role {
        atelier_messages::workshop::Role::System => {
            println!(
                "{:>5}  [{}]",
                shown(&message.id),
                shown_lines(&message.text)
            )
        }
        role => println!(
            "{:>5}  {}: {}",
            shown(&message.id),
            role.as_str(),
            shown_lines(&message.text)
        ),
    }
}

fn print_checkpoints(checkpoints: &[CheckpointInfo]) {
    println!(
        "{:>6}  {:<16} {:>6}  {:<14} NOTE",
        "ID", "TIME (ms)", "FILES", "REASON"
    );
    for checkpoint in checkpoints {
        println!(
            "{:>6}  {:<16} {:>6}  {:<14} {}",
            checkpoint.id,
            checkpoint.at_ms,
            checkpoint.files.len(),
            checkpoint.reason.as_str(),
            shown(checkpoint.note.as_deref().unwrap_or(""))
        );
    }
}

fn print_models(choices: &ModelChoices) {
    match &choices.default_model {
        Some(model) => println!("default: {}", shown(model)),
        None => {
            println!("default: none (set default_model in atelier.toml, or --model per message)")
        }
    }
    if choices.profiles.is_empty() {
        println!("no model profiles ([models.NAME] in atelier.toml)");
    }
    for profile in &choices.profiles {
        println!(
            "{}\t{}\t{}",
            shown(&profile.name),
            profile.kind,
            shown(&profile.model)
        );
    }
}
