//! The dashboard's OpenAI-compatible endpoint on `atelier up`, driven by the official OpenAI SDKs
//! for Node (`tests/browser/openai.mjs`) and Python (`tests/python/openai_client.py`): the workbenches as models, a completion that is a job
//! on the workbench (its own model, conversation and draft), `DRAFT_EXISTS` as an OpenAI error
//! with the code, and a streamed answer.

use std::process::Command;

use anyhow::Context;
use atelier_tests::scripted::ScriptedModel;
use atelier_tests::up::Up;
use serde_json::{Value, json};

const TOKEN: &str = "compat-token";

/// Runs the SDK script at `step`; its result.
fn sdk(up: &Up, step: &str) -> anyhow::Result<Value> {
    let browser = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("browser");
    anyhow::ensure!(
        browser.join("node_modules/openai").exists(),
        "the OpenAI SDK is missing: `npm ci --prefix tests/browser`"
    );
    let output = Command::new("node")
        .arg(browser.join("openai.mjs"))
        .env("BASE_URL", format!("http://{}/v1", up.dashboard_addr()?))
        .env("TOKEN", TOKEN)
        .env("WORKBENCH", "q3")
        .env("STEP", step)
        .output()
        .context("node is missing")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result = stdout
        .lines()
        .find_map(|line| line.strip_prefix("RESULT "))
        .with_context(|| format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)))?;
    Ok(serde_json::from_str(result)?)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openai_sdk_runs_jobs_on_workbenches_as_models() -> anyhow::Result<()> {
    let model = ScriptedModel::start(serde_json::from_value(json!({
        "research": [{"content": "The plan has five milestones."}],
        "plan": [{"content": "- [ ] 1. Notes — write notes.md"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "# Notes\n"}}]},
            {"content": "Written."}
        ]},
        "summary": [{"content": "notes.md is in the draft."}]
    }))?)
    .await?;
    let up = Up::start_with(&[], &[("ATELIER_DASHBOARD_TOKEN", TOKEN)])?;
    up.cli_ok(&["wb", "create", "q3"])?;
    up.cli_ok(&["wb", "set-model", "q3", &model.model_spec()])?;

    let answered = sdk(&up, "answer")?;
    assert_eq!(answered.get("error"), None, "{answered}");
    assert_eq!(answered["models"], json!(["q3"]));
    let answer = answered["answer"].as_str().unwrap_or_default();
    assert!(
        answer.starts_with("notes.md is in the draft.") && answer.contains("added: notes.md"),
        "{answer}"
    );
    assert_eq!(answered["finish"], "stop");
    assert_eq!(
        answered["conflict"],
        json!({"status": 409, "code": "DRAFT_EXISTS"})
    );
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "notes.md", "--draft"])?,
        "# Notes\n"
    );

    up.cli_ok(&["draft", "discard", "q3"])?;
    let streamed = sdk(&up, "stream")?;
    assert_eq!(streamed.get("error"), None, "{streamed}");
    let text = streamed["streamed"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("notes.md is in the draft.") && text.contains("added: notes.md"),
        "{streamed}"
    );
    assert!(streamed["chunks"].as_u64() >= Some(3), "{streamed}");
    // Without the key: the SDK's request is refused.
    let refused = reqwest_status(&up).await?;
    assert_eq!(refused, 401);

    // The official Python SDK, the same two ways.
    up.cli_ok(&["draft", "discard", "q3"])?;
    let python = |step: &str| -> anyhow::Result<Value> {
        let base_url = format!("http://{}/v1", up.dashboard_addr()?);
        let env = [
            ("BASE_URL", base_url.as_str()),
            ("TOKEN", TOKEN),
            ("WORKBENCH", "q3"),
            ("STEP", step),
        ];
        atelier_tests::python::run("openai_client.py", &env)
    };
    let answered = python("answer")?;
    assert_eq!(answered["models"], json!(["q3"]), "{answered}");
    let answer = answered["answer"].as_str().unwrap_or_default();
    assert!(
        answer.starts_with("notes.md is in the draft.") && answer.contains("added: notes.md"),
        "{answered}"
    );
    assert_eq!(answered["finish"], "stop");
    assert!(answered["usage"].as_u64() > Some(0), "{answered}");
    assert_eq!(
        answered["conflict"],
        json!({"status": 409, "code": "DRAFT_EXISTS"})
    );
    up.cli_ok(&["draft", "discard", "q3"])?;
    let streamed = python("stream")?;
    let text = streamed["streamed"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("notes.md is in the draft.") && text.contains("added: notes.md"),
        "{streamed}"
    );
    assert_eq!(streamed["finish"], "stop", "{streamed}");
    assert!(streamed["chunks"].as_u64() >= Some(3), "{streamed}");
    Ok(())
}

async fn reqwest_status(up: &Up) -> anyhow::Result<u16> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("http://{}/v1/models", up.dashboard_addr()?);
    Ok(reqwest::Client::new()
        .get(url)
        .send()
        .await?
        .status()
        .as_u16())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_no_workbench_can_be_named_is_refused_at_v1_with_400() -> anyhow::Result<()> {
    let up = Up::start()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let url = format!("http://{}/v1/chat/completions", up.dashboard_addr()?);
    let long = "x".repeat(300);
    for model in ["\u{1b}[31mred", "q3\u{7}", "q3\u{9b}2J", long.as_str(), ""] {
        let request = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        let response = http.post(&url).json(&request).send().await?;
        assert_eq!(response.status(), 400, "{model:?}");
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], "VALIDATION_FAILED", "{body}");
        assert_eq!(body["error"]["param"], "model", "{body}");
    }
    // Not a chat request at all: 400 in the same shape.
    let response = http.post(&url).json(&json!({"model": "q3"})).send().await?;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], "VALIDATION_FAILED", "{body}");
    let jobs: Vec<Value> = serde_json::from_str(&up.cli_ok(&["jobs", "--json"])?)?;
    assert!(jobs.is_empty(), "a refused request starts no job: {jobs:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn names_with_control_characters_are_printed_escaped_by_the_cli() -> anyhow::Result<()> {
    let up = Up::start()?;
    // A client that skips every check can still get such a name recorded (its job fails
    // NOT_FOUND): the CLI's tables and fields show it escaped, never raw.
    let evil = "red\u{1b}[31m\u{1b}]0;pwned\u{7}";
    let mut submit = atelier_messages::job::JobSubmit::new(
        "escaped-names".into(),
        evil.into(),
        "hi\u{1b}[2J".into(),
    );
    submit.model = Some("\u{1b}[5mmodel".into());
    let nats = up.connect_as(atelier_tests::up::Role::Client).await?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", submit.job_id.as_str());
    let payload = atelier_messages::encode(&submit, atelier_messages::Format::MessagePack)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    async_nats::jetstream::new(nats)
        .publish_with_headers(
            atelier_messages::subjects::JOB_SUBMIT,
            headers,
            payload.into(),
        )
        .await?
        .await?;
    atelier_tests::wait_until(std::time::Duration::from_secs(30), || {
        up.cli_ok(&["jobs", "--json"])
            .is_ok_and(|listed| listed.contains("escaped-names"))
    })?;
    let raw = |bytes: &[u8]| bytes.iter().any(|b| matches!(b, 0x1b | 0x07));
    let table = up.cli(&["jobs"])?;
    assert!(table.status.success());
    assert!(
        !raw(&table.stdout),
        "{:?}",
        String::from_utf8_lossy(&table.stdout)
    );
    let shown = String::from_utf8_lossy(&table.stdout);
    assert!(shown.contains("red\\x1b[31m\\x1b]0;pwned\\x07"), "{shown}");
    let job = up.cli(&["job", "escaped-names"])?;
    assert!(job.status.success());
    assert!(
        !raw(&job.stdout),
        "{:?}",
        String::from_utf8_lossy(&job.stdout)
    );
    assert!(
        String::from_utf8_lossy(&job.stdout).contains("red\\x1b[31m"),
        "{}",
        String::from_utf8_lossy(&job.stdout)
    );
    // An error text naming it, on stderr, too.
    let refused = up.cli(&["draft", "diff", evil])?;
    assert!(!refused.status.success());
    assert!(
        !raw(&refused.stderr),
        "{:?}",
        String::from_utf8_lossy(&refused.stderr)
    );
    Ok(())
}
