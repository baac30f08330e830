//! Questions are questions in any wording: a plan that answers without changing anything is
//! accepted unless the request names a file the workbench does not have. Negation ("do not
//! write any file"), "make sure", and requests in other languages, each as a real job on a
//! real nats-server, coordinator and workers; the model is a scripted OpenAI-protocol server.

use atelier_messages::ErrorCode;
use atelier_messages::job::{JobOutcome, JobState};
use atelier_tests::Cluster;
use atelier_tests::scripted::{Script, ScriptedModel};
use serde_json::json;

const QUESTIONS: &[&str] = &[
    "How many penguins are listed in penguins.csv? Just tell me; do not write or change any file.",
    "Make sure you count every row: how many penguins does penguins.csv list?",
    "Don't create anything, just tell me how many penguins penguins.csv has.",
    "Without writing a file: how many birds are in penguins.csv?",
    "Please count the penguins in penguins.csv and tell me the number.",
    "Wie viele Pinguine stehen in penguins.csv? Bitte keine Datei ändern.",
    "Combien de manchots compte penguins.csv ? Ne modifie aucun fichier.",
    "¿Cuántos pingüinos hay en penguins.csv? No escribas ningún archivo.",
    "Quanti pinguini ci sono in penguins.csv? Non creare file.",
    "penguins.csv にペンギンは何羽いますか？ファイルは変更しないでください。",
];

const WRITE_REQUESTS: &[&str] = &[
    "Write the number of penguins in penguins.csv into result.txt.",
    "Don't just tell me: put the penguin count of penguins.csv in result.txt.",
    "result.txt should hold how many penguins penguins.csv lists.",
    "Could you save the number of rows of penguins.csv as result.txt?",
    "Make sure result.txt ends up with the penguin count.",
    "Schreibe die Anzahl der Pinguine aus penguins.csv in result.txt.",
    "Écris le nombre de manchots de penguins.csv dans result.txt.",
    "Escribe cuántos pingüinos hay en penguins.csv en result.txt.",
    "Scrivi il numero di pinguini di penguins.csv in result.txt.",
    "penguins.csv のペンギンの数を result.txt に書いてください。",
];

fn script(value: serde_json::Value) -> anyhow::Result<Script> {
    Ok(serde_json::from_value(value)?)
}

/// A cluster with penguins.csv in workbenches `w0`…`w{count-1}`.
fn cluster_with_penguins(count: usize) -> anyhow::Result<Cluster> {
    let cluster = Cluster::start()?;
    let penguins = atelier_tests::fixtures().join("palmerpenguins/penguins.csv");
    for index in 0..count {
        let name = format!("w{index}");
        cluster.cli_ok(&["wb", "create", &name])?;
        cluster.cli_ok(&["wb", "add", &name, &penguins.to_string_lossy()])?;
    }
    Ok(cluster)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_in_any_wording_or_language_is_answered_without_a_change() -> anyhow::Result<()>
{
    let model = ScriptedModel::start(script(json!({
        "research": [{"content": "penguins.csv lists 344 penguins."}],
        "plan": [{"content": "NO_CHANGE_NEEDED: penguins.csv lists 344 penguins."}],
        "summary": [{"content": "penguins.csv lists 344 penguins."}]
    }))?)
    .await?;
    let cluster = cluster_with_penguins(QUESTIONS.len())?;
    for (index, question) in QUESTIONS.iter().enumerate() {
        let workbench = format!("w{index}");
        let view = cluster.run_job(&workbench, question, &model.model_spec(), &[])?;
        assert_eq!(view.state, JobState::Succeeded, "{question}: {view:?}");
        assert_eq!(view.outcome, Some(JobOutcome::Answered), "{question}");
        let summary = view.summary.unwrap_or_default();
        assert!(summary.contains("344 penguins"), "{question}: {summary}");
        let listing = cluster.cli(&["wb", "ls", &workbench, "--draft"])?;
        assert!(
            listing.failed_with("NO_DRAFT"),
            "{question}: a draft exists"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_request_in_any_wording_or_language_writes_its_file_and_cannot_end_unchanged()
-> anyhow::Result<()> {
    let writes = ScriptedModel::start(script(json!({
        "research": [{"content": "penguins.csv lists 344 penguins."}],
        "plan": [{"content": "- [ ] 1. Count — write the number of penguins → result.txt\n  \
            - result.txt: number from penguins.csv = SELECT count(*) FROM data"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "result.txt", "content": "344\n"}}]},
            {"content": "Wrote 344 to result.txt."}
        ]},
        "summary": [{"content": "result.txt holds 344."}]
    }))?)
    .await?;
    // A model that answers instead: every write request names result.txt, which the workbench
    // lacks, so the plan is refused.
    let escape = json!({"content": "NO_CHANGE_NEEDED: penguins.csv lists 344 penguins."});
    let answers = ScriptedModel::start(script(json!({
        "research": [{"content": "penguins.csv lists 344 penguins."}],
        "plan": [escape.clone(), escape],
        "summary": [{"content": "344."}]
    }))?)
    .await?;
    let cluster = cluster_with_penguins(WRITE_REQUESTS.len() + 1)?;
    for (index, request) in WRITE_REQUESTS.iter().enumerate() {
        let workbench = format!("w{index}");
        let view = cluster.run_job(&workbench, request, &writes.model_spec(), &[])?;
        assert_eq!(view.state, JobState::Succeeded, "{request}: {view:?}");
        let written = cluster.cli_ok(&["wb", "cat", &workbench, "result.txt", "--draft"])?;
        assert_eq!(written.stdout, "344\n", "{request}");
    }
    let last = format!("w{}", WRITE_REQUESTS.len());
    for request in [WRITE_REQUESTS[1], WRITE_REQUESTS[6]] {
        let view = cluster.run_job(&last, request, &answers.model_spec(), &[])?;
        assert_eq!(view.state, JobState::Failed, "{request}: {view:?}");
        assert_eq!(
            view.error.map(|error| error.code),
            Some(ErrorCode::PlanInvalid),
            "{request}"
        );
    }
    Ok(())
}
