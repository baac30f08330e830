//! The dashboard's composer on `atelier up`, in headless Chromium (`tests/browser/composer.test.mjs`):
//! a message sent from the workbench page with a model among the allowed ones, its run followed
//! live and its destructive call approved inline; the models a message may name (`atelier models`,
//! `/api/models`) and the send's refusals as stable codes.

use atelier_messages::job::{JobState, JobView};
use atelier_messages::workshop::{ModelChoice, ModelChoices};
use atelier_tests::browser::{self, PageScript, browser_setup};
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::up::Up;
use serde_json::{Value, json};

/// Rewrites notes.md (a destructive call: the file is published), then answers slowly enough
/// for the page to show the answer growing.
fn rewrite_script() -> anyhow::Result<Script> {
    Ok(serde_json::from_value(json!({
        "research": [{"content": "notes.md holds one line."}],
        "plan": [{"content": "- [ ] 1. Notes — rewrite notes.md"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "# Notes\nRewritten.\n"}}]},
            {"content": "Written."}
        ]},
        "summary": [{"content": "notes.md now says it was rewritten.", "chunk_delay_ms": 400}]
    }))?)
}

/// `up` with three profiles: the scripted model, a spare one, and one without a base URL.
fn up_with_profiles(model: &ScriptedModel) -> anyhow::Result<(Up, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("atelier.toml");
    let profiles = format!(
        "{}[models.spare]\nkind = \"openai-compat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         model = \"spare-model\"\n[models.broken]\nkind = \"openai-compat\"\nmodel = \"m\"\n",
        model.profile_toml("scripted", "")
    );
    std::fs::write(&config, profiles)?;
    let up = Up::start_with(&[], &[("ATELIER_CONFIG", &config.to_string_lossy())])?;
    Ok((up, dir))
}

async fn post(up: &Up, path: &str, body: &str) -> anyhow::Result<(u16, Value)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", up.dashboard_addr()?))
        .header("X-Atelier-Csrf", "1")
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    Ok((response.status().as_u16(), response.json().await?))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_models_a_message_may_name_and_the_sends_refusals() -> anyhow::Result<()> {
    let model = ScriptedModel::start(rewrite_script()?).await?;
    let (up, _config) = up_with_profiles(&model)?;
    up.cli_ok(&["wb", "create", "q3"])?;

    let choices: ModelChoices = serde_json::from_str(&up.cli_ok(&["models", "--json"])?)?;
    let profile = |name: &str, model: &str| ModelChoice {
        name: name.into(),
        kind: "openai-compat".into(),
        model: model.into(),
    };
    assert_eq!(
        choices,
        ModelChoices {
            default_model: None,
            profiles: vec![
                profile("scripted", "scripted-model"),
                profile("spare", "spare-model")
            ],
        },
        "the profile without a base URL is not offered"
    );
    let text = up.cli_ok(&["models"])?;
    assert!(text.starts_with("default: none"), "{text}");
    assert!(text.contains("spare\topenai-compat\tspare-model"), "{text}");

    let code = |(status, body): (u16, Value)| (status, body["error"]["code"].clone());
    let unknown = post(
        &up,
        "/api/workbenches/q3/messages",
        r#"{"message": "x", "model": "nope"}"#,
    );
    assert_eq!(code(unknown.await?), (400, json!("MODEL_NOT_ALLOWED")));
    let misspelt = post(&up, "/api/workbenches/q3/messages", r#"{"mesage": "x"}"#);
    assert_eq!(code(misspelt.await?), (400, json!("VALIDATION_FAILED")));
    let empty = post(
        &up,
        "/api/workbenches/q3/messages",
        r#"{"message": " ", "model": "scripted"}"#,
    );
    assert_eq!(code(empty.await?), (400, json!("VALIDATION_FAILED")));
    let missing = post(&up, "/api/workbenches/nope/messages", r#"{"message": "x"}"#);
    assert_eq!(code(missing.await?), (404, json!("NOT_FOUND")));
    let jobs: Vec<JobView> = serde_json::from_str(&up.cli_ok(&["jobs", "--json"])?)?;
    assert!(jobs.is_empty(), "a refused message starts no job: {jobs:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_message_is_413_content_too_large_and_starts_no_job() -> anyhow::Result<()> {
    let up = Up::start()?;
    up.cli_ok(&["wb", "create", "q3"])?;
    let code = |(status, body): (u16, Value)| (status, body["error"]["code"].clone());
    // A body over the server's limit (2 MiB).
    let body = json!({"message": "x".repeat(3 << 20)}).to_string();
    let huge = post(&up, "/api/workbenches/q3/messages", &body);
    assert_eq!(code(huge.await?), (413, json!("VALIDATION_FAILED")));
    // A body within it whose message is over a job's (256 KiB).
    let body = json!({"message": "x".repeat(300 << 10)}).to_string();
    let long = post(&up, "/api/workbenches/q3/messages", &body);
    assert_eq!(code(long.await?), (413, json!("VALIDATION_FAILED")));
    let jobs: Vec<JobView> = serde_json::from_str(&up.cli_ok(&["jobs", "--json"])?)?;
    assert!(jobs.is_empty(), "a refused message starts no job: {jobs:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_composer_in_chromium_sends_a_message_follows_its_run_and_approves_inline()
-> anyhow::Result<()> {
    if browser::skipped() {
        return Ok(());
    }
    let chromium = browser_setup()?;
    let model = ScriptedModel::start(rewrite_script()?).await?;
    let (up, _config) = up_with_profiles(&model)?;
    up.cli_ok(&["wb", "create", "q3"])?;
    let notes = up.workdir().join("notes.md");
    std::fs::write(&notes, "# Notes\nOne line.\n")?;
    up.cli_ok(&["wb", "add", "q3", &notes.to_string_lossy()])?;

    let url = format!("http://{}", up.dashboard_addr()?);
    let page = PageScript {
        script: "composer.test.mjs",
        artifacts: "artifacts-composer",
        chromium: &chromium,
        url: &url,
        subject: ("WORKBENCH", "q3"),
        env: &[],
    };
    let (result, artifacts) = page.run(&|| up.log())?;

    assert_eq!(result.get("error"), None, "{result}");
    assert_eq!(result["models"], json!(["", "scripted", "spare"]));
    let approval = result["approval"].as_str().unwrap_or_default();
    assert!(
        approval.contains("write_text_file") && approval.contains("overwrites notes.md"),
        "{result}"
    );
    assert_eq!(
        result["phasesAtApproval"],
        json!(["research:yes", "plan:yes", "implement:no"])
    );
    assert_eq!(result["sendDisabledWhileRunning"], true);
    // The answer grew on the page while the run was still going: every text seen then is a
    // start of the final answer (which may show whole before the run's state says succeeded).
    let summary = "notes.md now says it was rewritten.";
    let answer = result["answer"].as_str().unwrap_or_default();
    let partial: Vec<&str> = result["partialAnswers"]
        .as_array()
        .map(|texts| texts.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(
        partial.iter().all(|text| answer.starts_with(text)),
        "{result}"
    );
    let growing = partial.iter().filter(|text| text.len() < summary.len());
    assert!(growing.count() >= 2, "{result}");
    assert_eq!(
        result["phases"],
        json!(["research:yes", "plan:yes", "implement:yes", "summary:yes"])
    );
    assert_eq!(result["tools"], json!(["write_text_file:ok"]));
    assert_eq!(result["outcome"], "changed 1 file: notes.md");
    assert!(
        answer.starts_with(summary) && answer.contains("modified: notes.md"),
        "{answer}"
    );
    assert_eq!(result["conversation"], json!(["m1:user", "m2:assistant"]));
    let diff = result["diffText"].as_str().unwrap_or_default();
    assert!(
        diff.contains("-One line.") && diff.contains("+Rewritten."),
        "{diff}"
    );
    assert_eq!(result["continueShown"], true);
    assert_eq!(result["refused"]["code"], "DRAFT_EXISTS", "{result}");
    let refusal = result["refused"]["text"].as_str().unwrap_or_default();
    assert!(
        refusal.contains("Publish or discard it"),
        "the refusal says what to do: {refusal}"
    );
    assert_eq!(
        result["keptText"], "And once more",
        "a refused message is kept"
    );

    // What the browser did is what the CLI sees: one job, on the chosen model, published.
    let jobs: Vec<JobView> = serde_json::from_str(&up.cli_ok(&["jobs", "--json"])?)?;
    let summary_of = |job: &JobView| (job.state, job.model.clone(), job.tool_calls);
    assert_eq!(
        jobs.iter().map(summary_of).collect::<Vec<_>>(),
        [(JobState::Succeeded, "scripted".to_string(), 1)]
    );
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "notes.md"])?,
        "# Notes\nRewritten.\n"
    );
    browser::assert_screenshots(&artifacts, &["c1-approval", "c2-answered", "c3-published"])?;
    Ok(())
}
