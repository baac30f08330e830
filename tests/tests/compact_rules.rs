//! A small model's write-time rules agree with the request and the plan's contracts: a text the
//! request quotes to be written is no restating of the request, and a number whose target's
//! contract has a source query is checked against that source when the item ends instead of
//! being refused at write time as made up (right, the job succeeds; wrong, the item is not
//! done). Real nats-server, coordinator, workers and DuckDB; the model is a scripted
//! OpenAI-protocol server under a compact text-mode profile.

use atelier_messages::ErrorCode;
use atelier_messages::job::{ItemStatus, JobState, JobView};
use atelier_tests::Cluster;
use atelier_tests::scripted::{Script, ScriptedModel};
use serde_json::{Value, json};

fn script(value: Value) -> anyhow::Result<Script> {
    Ok(serde_json::from_value(value)?)
}

/// A compact text-mode profile `small` (a small model's settings) with `fixture` in workbench
/// `w`.
async fn compact_with(script: Script, fixture: &str) -> anyhow::Result<(ScriptedModel, Cluster)> {
    let model = ScriptedModel::start(script).await?;
    let mut cluster = Cluster::start()?;
    cluster.restart_coordinator_with_config(
        &model.profile_toml("small", "tool_mode = \"text\"\nprompt = \"compact\""),
        &[],
    )?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    let file = atelier_tests::fixtures().join(fixture);
    cluster.cli_ok(&["wb", "add", "w", &file.to_string_lossy()])?;
    Ok((model, cluster))
}

/// A text-mode call of `tool` with `parameters`, as a small model writes it.
fn text_call(tool: &str, parameters: Value) -> Value {
    json!({"content": json!({"tool": tool, "parameters": parameters, "terminate": false}).to_string()})
}

fn write(path: &str, content: &str) -> Value {
    text_call("write_text_file", json!({"path": path, "content": content}))
}

fn draft_text(cluster: &Cluster, path: &str) -> anyhow::Result<String> {
    Ok(cluster.cli_ok(&["wb", "cat", "w", path, "--draft"])?.stdout)
}

/// Every message text of the requests `model` received in the implement phase, joined.
fn implement_prompts(model: &ScriptedModel) -> String {
    model
        .requests()
        .iter()
        .filter(|request| request.phase == "implement")
        .map(|request| request.body["messages"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quoted_sentence_the_request_asks_to_write_is_written() -> anyhow::Result<()> {
    const SENTENCE: &str = "Revenue grew by 15% and three major releases shipped.";
    let request = format!("Write \"{SENTENCE}\" into notes.txt");
    let read = text_call("read_file", json!({"path": "simple.docx"}));
    let (model, cluster) = compact_with(
        script(json!({
            "research": [read.clone(), {"content": "simple.docx is a quarterly review."}],
            "plan": [{"content": "- [ ] 1. Write — write the sentence the request quotes → notes.txt"}],
            "implement": {"1": [read, write("notes.txt", SENTENCE), {"content": "Wrote notes.txt."}]},
            "summary": [{"content": "notes.txt holds the sentence."}]
        }))?,
        "keenbench/office/simple.docx",
    )
    .await?;
    let view = cluster.run_job("w", &request, "small", &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(draft_text(&cluster, "notes.txt")?.trim_end(), SENTENCE);
    assert!(
        !implement_prompts(&model).contains("repeats the request"),
        "the write was refused as a restated request"
    );
    Ok(())
}

/// The plan: one item writing moyenne.txt, held to the mean bill length of penguins.csv.
const MEAN_PLAN: &str = "- [ ] 1. Moyenne — la longueur moyenne du bec → moyenne.txt\n  \
    - moyenne.txt: number from penguins.csv = SELECT avg(bill_length_mm) FROM data";

/// A request in French: the form the written number must have comes from the contract.
const MEAN_REQUEST: &str = "Quelle est la longueur moyenne du bec (bill_length_mm) des manchots \
                            de penguins.csv ? Mets-la dans moyenne.txt.";

/// A small model that counts the rows, then writes the mean it computed itself: `first` (and
/// `retried`, when the item is tried again).
async fn mean_job(
    first: &[&str],
    retried: &[&str],
) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    let count = text_call(
        "table_query",
        json!({"path": "penguins.csv", "query": "SELECT count(*) AS n FROM data"}),
    );
    let turns = |contents: &[&str]| -> Vec<Value> {
        std::iter::once(count.clone())
            .chain(contents.iter().map(|content| write("moyenne.txt", content)))
            .chain(std::iter::once(
                json!({"content": "moyenne.txt est écrit."}),
            ))
            .collect()
    };
    let (model, cluster) = compact_with(
        script(json!({
            "research": [
                text_call("table_describe", json!({"path": "penguins.csv"})),
                {"content": "penguins.csv a une colonne bill_length_mm."}
            ],
            "plan": [{"content": MEAN_PLAN}],
            "implement": {"1": turns(first), "1@retry": turns(retried)},
            "summary": [{"content": "La moyenne est dans moyenne.txt."}]
        }))?,
        "palmerpenguins/penguins.csv",
    )
    .await?;
    let view = cluster.run_job("w", MEAN_REQUEST, "small", &[])?;
    Ok((model, cluster, view))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mean_the_model_computed_is_checked_against_its_contracts_source() -> anyhow::Result<()> {
    // Right: the mean no tool showed is written (after a sentence the number contract refuses)
    // and the item's end finds it is the source's.
    let (model, cluster, view) = mean_job(&["La moyenne est 43.92", "43.92"], &[]).await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(draft_text(&cluster, "moyenne.txt")?.trim(), "43.92");
    assert_eq!(view.items[0].attempts, 1);
    let prompts = implement_prompts(&model);
    assert!(prompts.contains("just the number"), "{prompts}");
    assert!(!prompts.contains("which no tool result"), "{prompts}");

    // Wrong: not refused at write time, but the item is not done, told once, then failed.
    let (_model, cluster, view) = mean_job(&["45.10"], &["44.50"]).await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(
        view.error.as_ref().map(|error| error.code),
        Some(ErrorCode::ItemsFailed)
    );
    let item = &view.items[0];
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::ItemNotDone));
    assert_eq!(item.attempts, 2, "told once, then failed");
    let failure = item.failure.clone().unwrap_or_default();
    assert!(
        failure.contains("it holds 44.50, and its source query gives 43.9"),
        "{failure}"
    );
    assert_eq!(draft_text(&cluster, "moyenne.txt")?.trim(), "44.50");
    Ok(())
}
