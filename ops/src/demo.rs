//! `atelier demo`: the whole system on the embedded default, one job on a sample workbench.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use atelier_messages::job::JobState;
use atelier_messages::store::DraftDiff;

use crate::client::{Client, Submission, WatchOutput};
use crate::config::Settings;
use crate::nats_roles::Role;
use crate::system::{self, System};

const SAMPLE_CSV: &[u8] = include_bytes!("../demo/sales.csv");
const REPLAY_SCRIPT: &[u8] = include_bytes!("../demo/replay.json");
const WORKBENCH: &str = "demo";
const MESSAGE: &str = "Summarize July revenue by region into summary.xlsx and write a short note.";

pub async fn run(settings: &Settings, keep: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let system = System::start(settings, true).await?;
    println!("atelier is up; NATS at {}", system.display_url());
    let outcome = run_job(settings, &system).await;
    if keep && outcome.is_ok() {
        println!(
            "\nthe system keeps running (NATS at {}); Ctrl-C to stop",
            system.display_url()
        );
        system::shutdown_signal().await;
    }
    system.stop().await;
    let succeeded = outcome?;
    println!("demo finished in {:.1} s", started.elapsed().as_secs_f64());
    Ok(if succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn run_job(settings: &Settings, system: &System) -> anyhow::Result<bool> {
    let client = Client {
        nats: system::connect(system.client_url(), system.client_creds(), Role::Client).await?,
    };
    prepare_workbench(&client).await?;
    let model = match &settings.default_model {
        Some(model) => {
            println!("model: {model}");
            model.clone()
        }
        None => {
            let script = system::absolute(&settings.replay_dir())?.join("demo-replay.json");
            std::fs::write(&script, REPLAY_SCRIPT)
                .with_context(|| format!("cannot write {}", script.display()))?;
            println!(
                "no model configured: using the scripted replay model ({}).\n\
                 To use a real one: OPENAI_API_KEY=... ATELIER_DEFAULT_MODEL=openai:gpt-4o-mini atelier demo",
                script.display()
            );
            format!("replay:{}", script.display())
        }
    };
    println!("job: {MESSAGE:?} on workbench `{WORKBENCH}`");
    let started = Instant::now();
    let job_id = client
        .submit(Submission {
            workbench: WORKBENCH,
            message: MESSAGE,
            model: Some(model),
            job_id: None,
            auto_approve: false,
            // A second demo on the same data directory works on the first one's draft.
            continue_draft: true,
            approvals: None,
            workflow: None,
            time_limit_secs: None,
            priority: None,
            budget: atelier_messages::budget::Budget::default(),
        })
        .await?;
    let state = client.watch(&job_id, WatchOutput::Human).await?;
    println!(
        "\njob {job_id} {state} in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let view = client.finished_job(&job_id).await?;
    if let Some(error) = &view.error {
        println!("error: {error}");
    }
    println!("\ndraft of `{WORKBENCH}`:");
    print_diff(&client.diff(WORKBENCH).await?);
    println!(
        "\nnext: `atelier demo --keep` keeps the system up; then `atelier wb cat {WORKBENCH} notes/summary.md --draft`, \
         `atelier draft publish {WORKBENCH}`"
    );
    Ok(state == JobState::Succeeded)
}

/// Creates the sample workbench, or resets an existing one to a clean published state.
async fn prepare_workbench(client: &Client) -> anyhow::Result<()> {
    let exists = client
        .workbenches()
        .await?
        .iter()
        .any(|wb| wb.name == WORKBENCH);
    if !exists {
        client.create(WORKBENCH).await?;
    } else if client.diff(WORKBENCH).await?.has_draft {
        client.discard(WORKBENCH).await?;
    }
    let sample =
        std::env::temp_dir().join(format!("atelier-demo-{}-sales.csv", std::process::id()));
    std::fs::write(&sample, SAMPLE_CSV)?;
    let added = client
        .add(WORKBENCH, std::slice::from_ref(&sample), Some("sales.csv"))
        .await;
    let _ = std::fs::remove_file(&sample);
    added?;
    Ok(())
}

pub fn print_diff(diff: &DraftDiff) {
    if !diff.has_draft {
        println!("  (no draft)");
        return;
    }
    for path in &diff.added {
        println!("  A {path}");
    }
    for path in &diff.modified {
        println!("  M {path}");
    }
    for path in &diff.deleted {
        println!("  D {path}");
    }
    if diff.added.is_empty() && diff.modified.is_empty() && diff.deleted.is_empty() {
        println!("  (draft has no changes)");
    }
}
