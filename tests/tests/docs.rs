//! Docs that run: every shell block of README.md and docs/*.md is executed here, in order, on a
//! real `atelier up` started as the blocks start it (see `atelier_tests::docs_runner` for the
//! rules: which blocks run, `no-run` and its stated reason, `# prints:`). The one stand-in is the
//! model: `openai:` models and the `local` profile are answered by the scripted OpenAI-protocol
//! server, serving the demo's own script (`ops/demo/replay.json`) unless a document needs
//! another. The sample files a reader is assumed to have (`sales.csv`, `notes.txt`,
//! `report.docx`) are in each document's directory, with `docs/` and `eval/` linked so commands
//! given from the repository root work. Each test prints which blocks ran, and why the others
//! did not (`--nocapture`).
#![allow(clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use atelier_tests::docs_runner::{Report, Session};
use atelier_tests::scripted::{Script, ScriptedModel};
use calamine::Reader;

/// The documents with a test of their own below.
const WITH_A_TEST: [&str; 6] = [
    "README.md",
    "docs/batches.md",
    "docs/dashboard.md",
    "docs/eval.md",
    "docs/operations.md",
    "docs/workshop.md",
];

/// The documents without a block that runs: every block is either not a shell block or tagged
/// `no-run` with its reason.
const DESCRIBING: [&str; 7] = [
    "docs/architecture.md",
    "docs/benchmarks.md",
    "docs/guarantees.md",
    "docs/mcp.md",
    "docs/protocol.md",
    "docs/replay.md",
    "docs/tools.md",
];

/// The OpenAI key a reader has in their environment (it only ever reaches the scripted server).
const READERS_KEY: &str = "sk-readers-key";

/// The reader's `notes.txt`.
const NOTES: &str = "Q3 notes\n\n- The West region ran a promotion in the second half of July.\n\
                     - Gadget prices went up on 1 July.\n";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The demo's scripted job: research maps and queries `sales.csv`, the plan exports revenue by
/// region to `summary.xlsx` and writes `notes/summary.md`.
fn demo_script() -> anyhow::Result<Script> {
    let text = std::fs::read_to_string(repo().join("ops/demo/replay.json"))?;
    Ok(serde_json::from_str(&text)?)
}

/// A document run: the session (its directory and processes) and the model it talked to.
struct Run {
    report: Report,
    session: Session,
    model: ScriptedModel,
}

/// Runs `document`'s blocks with `script` as the model.
async fn run(document: &'static str, script: Script) -> anyhow::Result<Run> {
    let model = ScriptedModel::start(script).await?;
    let base_url = model.base_url.clone();
    let (report, session) = tokio::task::spawn_blocking(move || {
        let mut session = Session::new(&[
            ("ATELIER_NATS_PORT", "0"),
            ("ATELIER_HTTP_ADDR", "127.0.0.1:0"),
            ("ATELIER_OPENAI_BASE_URL", &base_url),
            ("OPENAI_API_KEY", READERS_KEY),
        ])?;
        prepare(&session, &base_url)?;
        let report = session.run_document(&repo().join(document), document)?;
        print_report(document, &report);
        anyhow::Ok((report, session))
    })
    .await??;
    Ok(Run {
        report,
        session,
        model,
    })
}

/// The sample files, the links into the repository and the operator's `local` model profile.
fn prepare(session: &Session, base_url: &str) -> anyhow::Result<()> {
    session.provide(&repo().join("ops/demo/sales.csv"), "sales.csv")?;
    session.write("notes.txt", NOTES)?;
    session.provide(&atelier_tests::simple_docx(), "report.docx")?;
    session.link(&repo().join("docs"), "docs")?;
    session.link(&repo().join("eval"), "eval")?;
    session.write(
        "atelier.toml",
        &format!(
            "[models.local]\nkind = \"openai-compat\"\nbase_url = \"{base_url}\"\n\
             model = \"scripted-model\"\n"
        ),
    )
}

fn print_report(document: &str, report: &Report) {
    eprintln!(
        "{document}: {} block(s) run, {} not run, {} skipped",
        report.ran.len(),
        report.not_run.len(),
        report.skipped.len()
    );
    for ran in &report.ran {
        let secs = ran.elapsed.as_secs_f64();
        eprintln!("  {document}:{} ran in {secs:.1} s", ran.line);
    }
    for (line, reason) in &report.not_run {
        eprintln!("  {document}:{line} not run: {reason}");
    }
    for (line, tools) in &report.skipped {
        eprintln!(
            "  {document}:{line} skipped: {} not installed",
            tools.join(", ")
        );
    }
}

#[test]
fn every_document_is_run_here() -> anyhow::Result<()> {
    let mut found = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(repo().join("docs"))? {
        let name = entry?.file_name().to_string_lossy().to_string();
        if name.ends_with(".md") {
            found.push(format!("docs/{name}"));
        }
    }
    found.sort();
    let mut listed: Vec<String> = WITH_A_TEST
        .iter()
        .chain(&DESCRIBING)
        .map(|doc| doc.to_string())
        .collect();
    listed.sort();
    assert_eq!(
        listed, found,
        "README.md and every docs/*.md must be run here"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn readme() -> anyhow::Result<()> {
    let run = run("README.md", demo_script()?).await?;
    assert!(run.report.ran.len() >= 3, "{:?}", run.report);
    // `export OPENAI_API_KEY=sk-...` went, with `openai:` jobs, to the configured endpoint only.
    let keyed = run
        .model
        .requests()
        .iter()
        .filter(|request| request.authorization.as_deref() == Some("Bearer sk-..."))
        .count();
    assert!(keyed > 0, "no request carried the exported key");
    // `atelier wb cat q3 summary.xlsx --draft > summary.xlsx` wrote the real workbook.
    let path = run.session.work().join("summary.xlsx");
    let mut workbook = calamine::open_workbook_auto(&path).context("summary.xlsx")?;
    let sheet = workbook.worksheet_range("By region")?;
    let regions: Vec<String> = sheet.rows().skip(1).map(|row| row[0].to_string()).collect();
    assert_eq!(regions, ["East", "North", "South", "West"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn batches() -> anyhow::Result<()> {
    let run = run("docs/batches.md", demo_script()?).await?;
    assert!(!run.report.ran.is_empty(), "{:?}", run.report);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboard() -> anyhow::Result<()> {
    let run = run("docs/dashboard.md", demo_script()?).await?;
    assert!(!run.report.ran.is_empty(), "{:?}", run.report);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn eval() -> anyhow::Result<()> {
    let oracle = std::fs::read_to_string(repo().join("eval/tasks/dev/launch-count/oracle.json"))?;
    let run = run("docs/eval.md", serde_json::from_str(&oracle)?).await?;
    assert!(!run.report.ran.is_empty(), "{:?}", run.report);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn operations() -> anyhow::Result<()> {
    let run = run("docs/operations.md", demo_script()?).await?;
    assert!(!run.report.ran.is_empty(), "{:?}", run.report);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn workshop() -> anyhow::Result<()> {
    let run = run("docs/workshop.md", demo_script()?).await?;
    assert!(!run.report.ran.is_empty(), "{:?}", run.report);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn documents_that_only_describe() -> anyhow::Result<()> {
    for document in DESCRIBING {
        let run = run(document, Script::default()).await?;
        assert!(run.report.ran.is_empty(), "{document}: {:?}", run.report);
    }
    Ok(())
}

/// The runner itself: a failing block is reported with its line and output, expected output is
/// checked, and what a block leaves running in the background does not outlive it.
#[test]
fn a_failing_block_is_named_and_nothing_it_started_survives() -> anyhow::Result<()> {
    let mut session = Session::new(&[])?;
    let doc = session.work().join("doc.md");
    std::fs::write(
        &doc,
        "```sh\nsleep 300 &\necho $! > sleeper.pid\nexport GREETING=hello\n```\n\n\
         ```sh\necho \"$GREETING\"   # prints: hello\n```\n\n\
         ```sh\necho goodbye   # prints: hello again\n```\n",
    )?;
    let error = session
        .run_document(&doc, "doc.md")
        .err()
        .context("the last block should fail")?;
    let message = format!("{error:#}");
    assert!(message.contains("doc.md:11"), "{message}");
    assert!(message.contains("`hello again`"), "{message}");
    let pid = std::fs::read_to_string(session.work().join("sleeper.pid"))?;
    let alive = Path::new("/proc").join(pid.trim()).join("stat");
    let state = std::fs::read_to_string(alive).unwrap_or_default();
    assert!(
        state.is_empty() || state.contains(") Z"),
        "the background sleep outlived its block: {state}"
    );
    Ok(())
}

/// Per user: the subjects it may publish to, those it may subscribe to, and its reply allowance
/// (`max expires`).
type Rights = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>, Option<String>)>;

/// docs/operations.md's `nsc` users, a block that needs an operator-mode cluster to run, carry
/// exactly the rights of its `accounts` example (which is the code's roles, checked elsewhere).
#[test]
fn the_nsc_users_of_operations_md_have_the_rights_of_its_accounts_example() -> anyhow::Result<()> {
    let guide = std::fs::read_to_string(repo().join("docs/operations.md"))?;
    let block = |fence: &str, holding: &str| {
        guide
            .split(fence)
            .skip(1)
            .filter_map(|rest| rest.split("```").next())
            .find(|block| block.contains(holding))
            .map(str::to_string)
            .with_context(|| format!("docs/operations.md has no {fence} block with {holding}"))
    };
    let accounts = accounts_rights(&block("```conf\n", "accounts {")?);
    let nsc = nsc_rights(&block("```sh no-run\n", "nsc add user")?);
    assert_eq!(accounts.len(), 3, "{accounts:?}");
    assert_eq!(nsc, accounts);
    Ok(())
}

/// The text between `start` and the next `end` after it, for every occurrence of `start`.
fn all_between<'a>(text: &'a str, start: &str, end: &str) -> Vec<&'a str> {
    text.split(start)
        .skip(1)
        .filter_map(|rest| rest.split(end).next())
        .collect()
}

fn subjects(list: &str) -> BTreeSet<String> {
    list.split(',')
        .map(|subject| subject.trim().trim_matches('"').replace("\\$", "$"))
        .filter(|subject| !subject.is_empty())
        .collect()
}

/// The users of the `accounts { … }` example, one per line.
fn accounts_rights(block: &str) -> Rights {
    let mut rights = Rights::new();
    for line in block.lines().filter(|line| line.contains("{ user: \"")) {
        let name = all_between(line, "user: \"", "\"").concat();
        let publish = all_between(line, "publish: { allow: [", "]").concat();
        let subscribe = all_between(line, "subscribe: { allow: [", "]").concat();
        let responses = all_between(line, "allow_responses: { max: ", ",")
            .first()
            .map(|max| format!("{max} {}", all_between(line, "expires: \"", "\"").concat()));
        rights.insert(name, (subjects(&publish), subjects(&subscribe), responses));
    }
    rights
}

/// The users of the `nsc add user` commands (continuation lines joined).
fn nsc_rights(block: &str) -> Rights {
    let mut rights = Rights::new();
    let joined = block.replace("\\\n", " ");
    for line in joined
        .lines()
        .filter(|line| line.starts_with("nsc add user"))
    {
        let name = all_between(line, "--name ", " ").concat();
        let publish = all_between(line, "--allow-pub \"", "\"").join(",");
        let subscribe = all_between(line, "--allow-sub \"", "\"").join(",");
        let responses = all_between(line, "--allow-pub-response=", " ")
            .first()
            .map(|max| {
                format!(
                    "{max} {}",
                    all_between(line, "--response-ttl ", " ").concat()
                )
            });
        rights.insert(name, (subjects(&publish), subjects(&subscribe), responses));
    }
    rights
}

/// The `key = value` lines of a TOML table's text, comments and blank lines left out.
fn settings(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| line.contains(" = "))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_local_model_profile_printed_is_the_best_measured_one_and_the_docs_show_it()
-> anyhow::Result<()> {
    let script = std::fs::read_to_string(repo().join("scripts/local-model.sh"))?;
    let function = script
        .split("print_profile() {")
        .nth(1)
        .context("print_profile in the script")?;
    let printed = all_between(function, "cat <<EOF\n", "\nEOF")
        .first()
        .context("the profile's here-document")?
        .replace("${port}", "8080")
        .replace("${MODEL_NAME}", "qwen2.5-coder-0.5b-instruct");
    let profiles = std::fs::read_to_string(repo().join("eval/local-model.toml"))?;
    let best = profiles
        .split("[models.local-constrained]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .context("the local-constrained profile")?;
    assert_eq!(settings(&printed), settings(best), "{printed}");
    assert!(settings(best).contains("tool_mode = \"constrained\""));
    assert!(settings(best).contains("prompt = \"compact\""));
    let eval_md = std::fs::read_to_string(repo().join("docs/eval.md"))?;
    assert!(
        eval_md.contains(printed.trim()),
        "docs/eval.md shows:\n{printed}"
    );
    Ok(())
}
