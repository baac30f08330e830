//! Budgets and cost for model calls, as the README runs them: a job given `--budget-tokens`
//! stops with `BUDGET_EXCEEDED` at its next model call, keeps its draft, and `atelier resume
//! --budget-tokens` continues it without repeating a call; a batch given `--budget-usd` starts
//! no target past it and ends `budget_exhausted`, its spending intact across a coordinator
//! SIGKILL; cost shows beside tokens (job, jobs, batch, `/metrics`) and is `unknown`, never 0,
//! for a profile without prices. Against a scripted OpenAI-protocol server whose every reply
//! reports 1,000 prompt and 200 completion tokens.

use std::time::Duration;

use anyhow::Context;
use atelier_messages::batch::{BatchState, BatchView, child_job_id};
use atelier_messages::budget::Usd;
use atelier_messages::job::{JobState, JobView};
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::up::Up;
use atelier_tests::{Cluster, wait_until};
use serde_json::json;

/// Prices of the `priced` profile: a reply of 1,000 prompt and 200 completion tokens costs
/// 1,000 × $2.50/M + 200 × $10/M = $0.0045.
const PRICES: &str = "input_usd_per_mtok = 2.5\noutput_usd_per_mtok = 10.0";
const TURN_COST_MICROS: u64 = 4_500;
const TURN_TOKENS: u64 = 1_200;

/// Each job: research, plan, a write and its answer, a summary (five calls of 1,200 tokens).
fn script(delay_ms: u64) -> anyhow::Result<Script> {
    let usage = json!({"prompt_tokens": 1000, "completion_tokens": 200});
    let turn = |content: &str| json!({"content": content, "delay_ms": delay_ms, "usage": usage});
    Ok(serde_json::from_value(json!({
        "research": [turn("The workbench is empty.")],
        "plan": [turn("- [ ] 1. Note — write the note → note.txt")],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "note.txt", "content": "noted\n"}}],
             "delay_ms": delay_ms, "usage": usage},
            turn("Wrote note.txt.")
        ]},
        "summary": [turn("note.txt holds the note.")]
    }))?)
}

/// `model`'s profiles: `priced` with [`PRICES`], `unpriced` without.
fn profiles(model: &ScriptedModel) -> String {
    model.profile_toml("priced", PRICES) + &model.profile_toml("unpriced", "")
}

fn job_view(up: &Up, job_id: &str) -> anyhow::Result<JobView> {
    Ok(serde_json::from_str(
        &up.cli_ok(&["job", job_id, "--json"])?,
    )?)
}

fn wait_ended(up: &Up, job_id: &str) -> anyhow::Result<JobView> {
    wait_until(Duration::from_secs(60), || {
        job_view(up, job_id).is_ok_and(|view| view.state.is_terminal())
    })?;
    job_view(up, job_id)
}

/// The combined output of a CLI run expected to fail.
fn refused(up: &Up, args: &[&str]) -> anyhow::Result<String> {
    let out = up.cli(args)?;
    anyhow::ensure!(!out.status.success(), "`{}` succeeded", args.join(" "));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_past_its_token_budget_stops_keeps_its_draft_and_resumes_with_a_larger_one()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(script(0)?).await?;
    let config_dir = tempfile::tempdir()?;
    let config = config_dir.path().join("atelier.toml");
    std::fs::write(&config, profiles(&model))?;
    let config = config.to_string_lossy().to_string();
    let up = Up::start_with(
        &["--config", &config],
        &[("ATELIER_DASHBOARD_TOKEN", "budget-token")],
    )?;
    up.cli_ok(&["wb", "create", "notes"])?;
    up.cli_ok(&["wb", "create", "other"])?;
    up.cli_ok(&["wb", "create", "third"])?;
    let submit = |workbench: &str, extra: &[&str]| -> anyhow::Result<String> {
        let mut args = vec![
            "--config",
            &config,
            "submit",
            workbench,
            "Write a note into note.txt.",
        ];
        args.extend_from_slice(extra);
        Ok(up.cli_ok(&args)?.trim().to_string())
    };

    // 3,000 tokens: three calls of 1,200 are made, the fourth is refused before it is sent.
    let job_id = submit("notes", &["--model", "priced", "--budget-tokens", "3000"])?;
    let stopped = wait_ended(&up, &job_id)?;
    assert_eq!(stopped.state, JobState::Failed, "{stopped:?}");
    let error = stopped.error.clone().context("no error")?;
    assert_eq!(error.code.as_str(), "BUDGET_EXCEEDED", "{error:?}");
    assert!(error.message.contains("--budget-tokens"), "{error:?}");
    assert_eq!(model.requests().len(), 3, "three model calls, no fourth");
    assert_eq!(
        stopped.prompt_tokens + stopped.completion_tokens,
        3 * TURN_TOKENS
    );
    assert_eq!(stopped.budget.tokens, Some(3_000));
    // The draft keeps what the job wrote before it stopped.
    let note = up.cli_ok(&["wb", "cat", "notes", "note.txt", "--draft"])?;
    assert_eq!(note, "noted\n");

    // A larger budget for the whole job: it goes on from its journal, no call repeated.
    let resumed: JobView = serde_json::from_str(&up.cli_ok(&[
        "resume",
        &job_id,
        "--budget-tokens",
        "10000",
        "--json",
    ])?)?;
    assert_eq!(resumed.budget.tokens, Some(10_000));
    let done = wait_ended(&up, &job_id)?;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert_eq!(
        model.requests().len(),
        5,
        "the two calls left, and only those"
    );
    assert_eq!(done.prompt_tokens, 5_000);
    assert_eq!(done.completion_tokens, 1_000);
    assert_eq!(done.cost_usd, Some(Usd::from_micros(5 * TURN_COST_MICROS)));
    let shown = up.cli_ok(&["job", &job_id])?;
    assert!(
        shown.contains("spent      6000 tokens (5000 prompt, 1000 reply), cost $0.0225"),
        "{shown}"
    );
    assert!(shown.contains("budget     10000 tokens"), "{shown}");

    // A profile without prices: tokens, and a cost that is unknown, never $0.
    let unpriced_id = submit("other", &["--model", "unpriced"])?;
    let unpriced = wait_ended(&up, &unpriced_id)?;
    assert_eq!(unpriced.state, JobState::Succeeded, "{unpriced:?}");
    assert_eq!(unpriced.cost_usd, None);
    let json = up.cli_ok(&["job", &unpriced_id, "--json"])?;
    assert!(!json.contains("cost_usd"), "{json}");
    let shown = up.cli_ok(&["job", &unpriced_id])?;
    assert!(
        shown.contains("cost unknown (the model profile has no prices)"),
        "{shown}"
    );
    let listed = up.cli_ok(&["jobs"])?;
    let row = |id: &str| {
        listed
            .lines()
            .find(|line| line.starts_with(id))
            .map(str::to_string)
    };
    let priced_row = row(&job_id).context("the priced job is not listed")?;
    assert!(
        priced_row.contains(" 6000 ") && priced_row.contains("$0.0225"),
        "{listed}"
    );
    let unpriced_row = row(&unpriced_id).context("the unpriced job is not listed")?;
    assert!(unpriced_row.contains(" unknown "), "{listed}");

    // `/metrics`: the priced profile's dollars; the unpriced one has none to add.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", up.dashboard_addr()?))
        .bearer_auth("budget-token")
        .send()
        .await?
        .text()
        .await?;
    let sample = |name: &str| {
        metrics
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
    };
    let priced_cost = sample("atelier_model_cost_usd_total{model=\"priced\"}");
    assert!(
        priced_cost.is_some_and(|cost| (cost - 0.0225).abs() < 1e-9),
        "{metrics}"
    );
    assert_eq!(
        sample("atelier_model_cost_usd_total{model=\"unpriced\"}"),
        None
    );

    // A budget in dollars for a model without prices cannot be kept: refused.
    let out = refused(
        &up,
        &[
            "--config",
            &config,
            "submit",
            "third",
            "Write a note.",
            "--model",
            "unpriced",
            "--budget-usd",
            "1",
            "--wait",
        ],
    )?;
    assert!(
        out.contains("VALIDATION_FAILED") && out.contains("prices"),
        "{out}"
    );
    Ok(())
}

#[test]
fn absurd_budgets_are_refused_by_name_before_anything_is_sent() -> anyhow::Result<()> {
    let up = Up::start()?;
    up.cli_ok(&["wb", "create", "w"])?;
    for (flag, value) in [
        ("--budget-tokens", "-5"),
        ("--budget-tokens", "0"),
        ("--budget-tokens", "many"),
        ("--budget-usd", "-1"),
        ("--budget-usd", "0"),
        ("--budget-usd", "NaN"),
        ("--budget-usd", "5000000"),
    ] {
        for command in [
            vec!["submit", "w", "Write a note.", flag, value],
            vec![
                "batch",
                "submit",
                "--workbenches",
                "w",
                "--message",
                "m",
                flag,
                value,
            ],
            vec!["resume", "some-job", flag, value],
        ] {
            let out = refused(&up, &command)?;
            assert!(
                out.contains("VALIDATION_FAILED") && out.contains(flag),
                "{command:?}: {out}"
            );
        }
    }
    Ok(())
}

fn batch_status(cluster: &Cluster, id: &str) -> anyhow::Result<BatchView> {
    cluster.cli_ok(&["batch", "status", id, "--json"])?.json()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_stops_starting_targets_at_its_dollar_budget_and_a_sigkill_loses_no_spending()
-> anyhow::Result<()> {
    // Each call takes a while, so that the coordinator dies with a target part-way.
    let model = ScriptedModel::start(script(250)?).await?;
    let mut cluster = Cluster::start()?;
    let toml = profiles(&model);
    cluster.restart_coordinator_with_config(&toml, &[])?;
    for index in 0..6 {
        cluster.cli_ok(&["wb", "create", &format!("bud-{index}")])?;
    }
    // $0.05: two whole jobs ($0.0225 each), then a third given the $0.005 left, which it
    // spends in two calls before its third is refused.
    cluster.cli_ok(&[
        "batch",
        "submit",
        "--batch-id",
        "spend",
        "--workbenches",
        "bud-*",
        "--message",
        "Write a note into note.txt.",
        "--model",
        "priced",
        "--concurrency",
        "1",
        "--budget-usd",
        "0.05",
    ])?;
    wait_until(Duration::from_secs(60), || {
        batch_status(&cluster, "spend").is_ok_and(|view| view.counts.succeeded >= 1)
    })?;
    cluster.restart_coordinator_with_config(&toml, &[])?;
    wait_until(Duration::from_secs(90), || {
        batch_status(&cluster, "spend").is_ok_and(|view| view.state.is_terminal())
    })?;
    let view = batch_status(&cluster, "spend")?;
    assert_eq!(view.state, BatchState::BudgetExhausted, "{view:?}");
    assert_eq!(
        view.error.as_ref().map(|error| error.code.as_str()),
        Some("BUDGET_EXCEEDED")
    );
    let counts = view.counts;
    assert_eq!(
        (counts.succeeded, counts.failed, counts.cancelled),
        (2, 1, 3),
        "{view:?}"
    );
    // The batch's spending is its children's, each counted once across the kill.
    let mut tokens = 0;
    let mut micros = 0;
    for index in 0..3 {
        let child: JobView = cluster
            .cli_ok(&["job", &child_job_id("spend", index, 0), "--json"])?
            .json()?;
        tokens += child.prompt_tokens + child.completion_tokens;
        micros += child
            .cost_usd
            .context("a priced child has a cost")?
            .micros();
        if index == 2 {
            assert_eq!(
                child.error.as_ref().map(|error| error.code.as_str()),
                Some("BUDGET_EXCEEDED"),
                "{child:?}"
            );
            assert_eq!(child.budget.usd, Some(Usd::from_micros(5_000)));
        }
    }
    assert_eq!(micros, 12 * TURN_COST_MICROS, "5 + 5 + 2 calls");
    assert_eq!(view.spent.tokens, tokens);
    assert_eq!(view.spent.cost_usd, Some(Usd::from_micros(micros)));
    let shown = cluster.cli_ok(&["batch", "status", "spend"])?.stdout;
    assert!(
        shown.contains("spent        14400 tokens, cost $0.0540")
            && shown.contains("budget       $0.0500; remaining $0.0000"),
        "{shown}"
    );
    // No call for the targets never started (a call cut by the kill may be asked again).
    let calls = model.requests().len();
    assert!((12..=13).contains(&calls), "{calls} calls");
    Ok(())
}
