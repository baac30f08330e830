//! The user's journey: every CLI verb family a user meets, driven as the README says, on the
//! embedded default (`atelier up` with its roles, clients finding it through `--data`) and on a
//! distributed set-up (coordinator and worker processes on a NATS server configured with the
//! accounts docs/operations.md documents, clients given `--nats`). Both run the same journey,
//! asserting what the user sees, and end with no permission the server refused.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::up::Up;
use atelier_tests::{
    CliOutput, NatsServer, Process, atelier_bin, documented_accounts, fixtures, wait_until,
};
use serde_json::{Value, json};

/// Where the journey runs.
enum System {
    Embedded(Up),
    Distributed(Distributed),
}

/// nats-server with the documented accounts, a coordinator and one worker per pool, each
/// process with its own user.
struct Distributed {
    dir: tempfile::TempDir,
    nats: NatsServer,
    client_url: String,
    _processes: Vec<Process>,
}

const PASSWORD: &str = "journey-secret";

impl Distributed {
    fn start() -> anyhow::Result<Self> {
        Self::start_with(&["coordinator"], &[])
    }

    /// The set-up with one coordinator process per name, each with its own data directory
    /// and `env` (the workers share the first's).
    fn start_with(coordinators: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let nats =
            NatsServer::start_with_extra_config(dir.path(), &documented_accounts(PASSWORD)?)?;
        let host_port = nats.url.trim_start_matches("nats://").to_string();
        let url = |user: &str| format!("nats://{user}:{PASSWORD}@{host_port}");
        let data_of = |name: &str| dir.path().join(name).to_string_lossy().to_string();
        let data = data_of("data");
        let logs = dir.path();
        let coordinator_url = url("coordinator");
        let worker_url = url("worker");
        let mut processes = Vec::new();
        for (n, name) in coordinators.iter().enumerate() {
            let data = if n == 0 { data.clone() } else { data_of(name) };
            processes.push(Process::spawn_with_env(
                name,
                &["coordinator", "--nats", &coordinator_url, "--data", &data],
                logs,
                env,
            )?);
        }
        for pool in ["tabular", "office"] {
            processes.push(Process::spawn(
                pool,
                &[
                    "worker",
                    "--pool",
                    pool,
                    "--nats",
                    &worker_url,
                    "--data",
                    &data,
                ],
                logs,
            )?);
        }
        let system = Self {
            client_url: url("client"),
            dir,
            nats,
            _processes: processes,
        };
        wait_until(Duration::from_secs(30), || {
            system
                .run(&["workers", "--json"])
                .ok()
                .and_then(|out| out.json::<Value>().ok())
                .and_then(|pools| pools.as_array().map(|pools| pools.len()))
                == Some(2)
        })?;
        Ok(system)
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let mut all = args.to_vec();
        all.extend(["--nats", &self.client_url]);
        run_in(self.dir.path(), &all)
    }
}

fn run_in(dir: &Path, args: &[&str]) -> anyhow::Result<CliOutput> {
    let output = Command::new(atelier_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("ATELIER_NATS_URL")
        .env_remove("ATELIER_DEFAULT_MODEL")
        .output()?;
    Ok(output.into())
}

impl System {
    /// The flags that point a client at this system, as the README says.
    fn target(&self) -> Vec<String> {
        match self {
            System::Embedded(up) => vec!["--data".into(), up.data().to_string_lossy().into()],
            System::Distributed(system) => vec!["--nats".into(), system.client_url.clone()],
        }
    }

    fn workdir(&self) -> &Path {
        match self {
            System::Embedded(up) => up.workdir(),
            System::Distributed(system) => system.dir.path(),
        }
    }

    fn cli(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let target = self.target();
        let mut all = args.to_vec();
        all.extend(target.iter().map(String::as_str));
        run_in(self.workdir(), &all)
    }

    /// Runs a command that must succeed.
    fn ok(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let out = self.cli(args)?;
        anyhow::ensure!(
            out.success,
            "`atelier {}` failed: {}",
            args.join(" "),
            out.stderr
        );
        Ok(out)
    }

    fn json(&self, args: &[&str]) -> anyhow::Result<Value> {
        self.ok(args)?.json()
    }

    /// The command line that runs `atelier ARGS` against this system, for a shell.
    fn command_line(&self, args: &str) -> String {
        format!(
            "{} {args} {}",
            atelier_bin().display(),
            self.target().join(" ")
        )
    }

    /// Runs a shell line (pipes, a pseudo-terminal) in the scratch directory.
    fn shell(&self, line: &str) -> anyhow::Result<std::process::Output> {
        Ok(Command::new("bash")
            .args(["-c", line])
            .current_dir(self.workdir())
            .env_remove("ATELIER_NATS_URL")
            .stdin(Stdio::null())
            .output()?)
    }

    fn permission_violations(&self) -> Vec<String> {
        match self {
            System::Embedded(up) => up.permission_violations(),
            System::Distributed(system) => system
                .nats
                .log()
                .lines()
                .filter(|line| line.contains(" Violation"))
                .map(str::to_string)
                .collect(),
        }
    }
}

/// Every job writes notes.md (its research answered after `delay_ms`, to leave room for a
/// cancel).
fn notes_script(delay_ms: u64) -> Script {
    serde_json::from_value(json!({
        "research": [{"content": "sales.csv has three regions.", "delay_ms": delay_ms}],
        "plan": [{"content": "- [ ] 1. Notes — write notes.md"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "North leads.\n"}}]},
            {"content": "Written."}
        ]},
        "summary": [{"content": "notes.md is in the draft."}]
    }))
    .unwrap_or_default()
}

fn job_state(system: &System, job: &str) -> anyhow::Result<Value> {
    system.json(&["job", job, "--json"])
}

fn wait_state(system: &System, job: &str, state: &str) -> anyhow::Result<Value> {
    let mut view = Value::Null;
    wait_until(Duration::from_secs(60), || {
        view = job_state(system, job).unwrap_or_default();
        view["state"] == state
    })
    .with_context(|| format!("job {job} never reached {state}: {view}"))?;
    Ok(view)
}

fn paths(listing: &Value) -> Vec<String> {
    listing["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|file| file["path"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn the_journey(
    system: &System,
    model: &ScriptedModel,
    slow_model: &ScriptedModel,
) -> anyhow::Result<()> {
    let spec = model.model_spec();
    let work = system.workdir();
    std::fs::write(
        work.join("sales.csv"),
        "region,revenue\nNorth,120\nSouth,80\nWest,95\n",
    )?;
    std::fs::copy(
        fixtures().join("keenbench/synthetic/invoice_template.docx"),
        work.join("invoice_template.docx"),
    )?;
    std::fs::write(
        work.join("situation.txt"),
        "We report to the board quarterly.\n",
    )?;

    // Workbenches.
    system.ok(&["wb", "create", "q3"])?;
    system.ok(&["wb", "add", "q3", "sales.csv", "invoice_template.docx"])?;
    let listing = system.json(&["wb", "ls", "q3", "--json"])?;
    assert_eq!(paths(&listing), ["invoice_template.docx", "sales.csv"]);
    let cat = system.ok(&["wb", "cat", "q3", "sales.csv"])?;
    assert!(
        cat.stdout.starts_with("region,revenue\nNorth,120"),
        "{}",
        cat.stdout
    );
    let names = system.json(&["wb", "list", "--json"])?;
    assert_eq!(names[0]["name"], "q3");

    // A tool run: `{{company}}` in --args is the document's own placeholder, sent as written.
    let args = json!({"path": "invoice_template.docx", "operations": [
        {"op": "replace_text", "search": "{{company}}", "replace": "Acme Ltd"}]})
    .to_string();
    let run = system.ok(&["run", "q3", "docx_operations", "--args", &args, "--wait"])?;
    assert!(run.stdout.contains("succeeded"), "{}", run.stdout);
    // --set belongs to workflow files.
    let refused = system.cli(&["run", "q3", "list_files", "--set", "a=b"])?;
    assert!(refused.failed_with("VALIDATION_FAILED"), "{refused:?}");

    // Content review by the office pool: the paragraph, old and new.
    let diff = system.ok(&["draft", "diff", "q3"])?;
    assert!(
        diff.stdout.contains("Acme Ltd") && diff.stdout.contains("{{company}}"),
        "{}",
        diff.stdout
    );
    assert!(
        !diff.stdout.contains("could not compare"),
        "{}",
        diff.stdout
    );
    let review = system.json(&["draft", "diff", "q3", "--json"])?;
    assert_eq!(review["modified"], json!(["invoice_template.docx"]));
    assert!(review["files"].to_string().contains("Acme Ltd"), "{review}");
    system.ok(&["draft", "discard", "q3"])?;
    assert!(
        system
            .cli(&["wb", "ls", "q3", "--draft"])?
            .failed_with("NO_DRAFT")
    );

    // A workflow file, with an escaped placeholder left for the document; its second step edits
    // what the first wrote (a worker reads that write back from the store, under its account).
    std::fs::write(
        work.join("fill.toml"),
        "name = \"fill\"\n[[steps]]\ntool = \"docx_operations\"\nargs = { path = \"invoice_template.docx\", \
         operations = [{ op = \"replace_text\", search = '\\{{company}}', replace = \"{{who}}\" }] }\n\
         [[steps]]\ntool = \"docx_operations\"\nargs = { path = \"invoice_template.docx\", \
         operations = [{ op = \"append_paragraph\", text = \"Checked for {{who}}\" }] }\n",
    )?;
    system.ok(&[
        "run",
        "q3",
        "--workflow",
        "fill.toml",
        "--set",
        "who=Globex",
        "--wait",
    ])?;
    let review = system.json(&["draft", "diff", "q3", "--json"])?;
    let changes = review["files"].to_string();
    assert!(
        changes.contains("Globex") && changes.contains("Checked for Globex"),
        "{review}"
    );
    let typo = system.cli(&["run", "q3", "--workflow", "fill.toml", "--set", "whom=x"])?;
    assert!(
        typo.failed_with("VALIDATION_FAILED") && typo.stderr.contains("{{who}}"),
        "{typo:?}"
    );
    system.ok(&["draft", "publish", "q3"])?;
    let checkpoints = system.json(&["checkpoints", "q3", "--json"])?;
    assert_eq!(
        checkpoints.as_array().map(Vec::len),
        Some(1),
        "{checkpoints}"
    );

    // Context, then a message answered by the (scripted) model.
    system.ok(&["context", "add", "q3", "--situation", "situation.txt"])?;
    let context = system.json(&["context", "ls", "q3", "--json"])?;
    assert!(context.to_string().contains("board quarterly"), "{context}");
    let submitted = system.ok(&[
        "submit",
        "q3",
        "Write notes on sales",
        "--model",
        &spec,
        "--wait",
    ])?;
    assert!(
        submitted.stdout.contains("succeeded"),
        "{}",
        submitted.stdout
    );
    // What the job did, as the store saw it: the one file it wrote.
    assert!(
        submitted
            .stdout
            .lines()
            .any(|line| line == "outcome    changed 1 file: notes.md"),
        "{}",
        submitted.stdout
    );
    let jobs = system.json(&["jobs", "--json"])?;
    let job = jobs
        .as_array()
        .and_then(|jobs| {
            jobs.iter()
                .find(|job| job["message"] == "Write notes on sales")
        })
        .and_then(|job| job["job_id"].as_str())
        .context("the job is listed")?
        .to_string();
    assert_eq!(job_state(system, &job)?["state"], "succeeded");
    let events = system.ok(&["watch", &job, "--json"])?;
    assert!(events.stdout.contains("job_finished"), "{}", events.stdout);
    let draft = system.json(&["wb", "ls", "q3", "--draft", "--json"])?;
    assert!(paths(&draft).contains(&"notes.md".to_string()));
    // The draft's age and source, in the listing and pointed out by history.
    assert_eq!(draft["draft"]["job_id"], json!(job), "{draft}");
    let started_by = draft["draft"]["message_id"]
        .as_str()
        .context("by a message")?;
    let told = system.ok(&["history", "q3"])?;
    assert!(
        told.stdout.contains("(the draft started ")
            && told
                .stdout
                .contains(&format!(" s ago by message {started_by} (job {job}))")),
        "{}",
        told.stdout
    );
    let diff = system.ok(&["draft", "diff", "q3"])?;
    assert!(diff.stdout.contains("+North leads."), "{}", diff.stdout);
    let context_sent = model.requests().iter().any(|request| {
        request.body["messages"][0]["content"]
            .as_str()
            .is_some_and(|prompt| prompt.contains("board quarterly"))
    });
    assert!(context_sent, "the situation reaches the model");

    // The conversation: history, a closed pipe, rewind and regenerate.
    let history = system.json(&["history", "q3", "--json"])?;
    let user_message = history
        .as_array()
        .and_then(|messages| {
            messages
                .iter()
                .find(|m| m["text"] == "Write notes on sales")
        })
        .and_then(|message| message["id"].as_str())
        .context("the message is in the history")?
        .to_string();
    let piped = system.shell(&format!(
        "{} | head -c 5",
        system.command_line("history q3 --json")
    ))?;
    assert_eq!(String::from_utf8_lossy(&piped.stdout), "[\n  {");
    assert!(
        piped.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    system.ok(&["rewind", "q3", &user_message])?;
    assert!(
        system
            .cli(&["wb", "ls", "q3", "--draft"])?
            .failed_with("NO_DRAFT")
    );
    let regenerated = system.ok(&["regenerate", "q3", "--wait", "--model", &spec])?;
    assert!(
        regenerated.stdout.contains("succeeded"),
        "{}",
        regenerated.stdout
    );
    let draft = system.json(&["wb", "ls", "q3", "--draft", "--json"])?;
    assert!(paths(&draft).contains(&"notes.md".to_string()));
    // Regenerating from an earlier message says first what it discards, and without a
    // terminal goes on only with --yes.
    let unasked = system.cli(&["regenerate", "q3", "--from", &user_message])?;
    let told = format!("regenerating the answer to {user_message} discards m");
    assert!(
        unasked.failed_with("VALIDATION_FAILED") && unasked.stderr.contains(&told),
        "{unasked:?}"
    );
    let again = system.cli(&[
        "regenerate",
        "q3",
        "--from",
        &user_message,
        "--yes",
        "--wait",
        "--model",
        &spec,
    ])?;
    assert!(
        again.success && again.stderr.contains(&told) && again.stdout.contains("succeeded"),
        "{again:?}"
    );
    system.ok(&["draft", "publish", "q3"])?;
    // The draft's state at that message went with the publish: rewinding there discards the
    // draft when asked to.
    system.ok(&[
        "run",
        "q3",
        "write_text_file",
        "--args",
        r#"{"path": "scratch.txt", "content": "x"}"#,
        "--wait",
    ])?;
    let pruned = system.cli(&["rewind", "q3", &user_message])?;
    assert!(
        pruned.failed_with("REVISION_PRUNED") && pruned.stderr.contains("--discard-draft"),
        "{pruned:?}"
    );
    system.ok(&["rewind", "q3", &user_message, "--discard-draft"])?;
    assert!(
        system
            .cli(&["wb", "ls", "q3", "--draft"])?
            .failed_with("NO_DRAFT")
    );

    // Checkpoints: make one, restore the first published state.
    system.ok(&["checkpoint", "q3", "--note", "with notes"])?;
    let checkpoints = system.json(&["checkpoints", "q3", "--json"])?;
    let first = checkpoints
        .as_array()
        .and_then(|all| all.iter().map(|c| c["id"].as_str()).min())
        .flatten()
        .context("a checkpoint id")?
        .to_string();
    system.ok(&["restore", "q3", &first])?;
    let listing = system.json(&["wb", "ls", "q3", "--json"])?;
    assert!(
        !paths(&listing).contains(&"notes.md".to_string()),
        "{listing}"
    );

    // Approvals: a destructive call waits; reject one, approve the next.
    system.ok(&["wb", "approvals", "q3", "destructive=ask"])?;
    let delete = json!({"path": "sales.csv"}).to_string();
    for (decision, state) in [(Some("--reject"), "failed"), (None, "succeeded")] {
        let job = system
            .ok(&[
                "run",
                "q3",
                "delete_file",
                "--args",
                &delete,
                "--continue-draft",
            ])?
            .stdout
            .trim()
            .to_string();
        wait_state(system, &job, "awaiting_approval")?;
        let mut args = vec!["approve", job.as_str()];
        args.extend(decision);
        system.ok(&args)?;
        let view = wait_state(system, &job, state)?;
        if decision.is_some() {
            assert_eq!(view["error"]["code"], "APPROVAL_REJECTED", "{view}");
        }
    }
    let draft = system.json(&["wb", "ls", "q3", "--draft", "--json"])?;
    assert!(!paths(&draft).contains(&"sales.csv".to_string()), "{draft}");
    system.ok(&["draft", "discard", "q3"])?;

    // Batches: one target fails until its file is added, then retry and publish.
    let letter = work.join("letter.txt");
    std::fs::write(&letter, "Dear customer,\n")?;
    for name in ["b1", "b2", "b3"] {
        system.ok(&["wb", "create", name])?;
        if name != "b3" {
            system.ok(&["wb", "add", name, "letter.txt"])?;
        }
    }
    let tool_args = json!({"path": "letter.txt", "max_lines": 5}).to_string();
    let batch = system.cli(&[
        "batch",
        "submit",
        "--workbenches",
        "b*",
        "--tool",
        "read_file",
        "--args",
        &tool_args,
        "--tolerate-failures",
        "1",
        "--wait",
        "--json",
    ])?;
    let batch: Value = batch.json()?;
    let batch_id = batch["batch_id"]
        .as_str()
        .context("a batch id")?
        .to_string();
    let status = system.json(&["batch", "status", &batch_id, "--json"])?;
    assert_eq!(status["succeeded"], 2, "{status}");
    assert_eq!(status["failed"], 1, "{status}");
    system.ok(&["wb", "add", "b3", "letter.txt"])?;
    system.ok(&["batch", "retry", &batch_id])?;
    system.ok(&["batch", "watch", &batch_id])?;
    let status = system.json(&["batch", "status", &batch_id, "--json"])?;
    assert_eq!(status["succeeded"], 3, "{status}");
    let write_args = json!({"path": "hello.txt", "content": "hello {{workbench}}\n"}).to_string();
    let writes: Value = system
        .ok(&[
            "batch",
            "submit",
            "--workbenches",
            "b1,b2",
            "--tool",
            "write_text_file",
            "--args",
            &write_args,
            "--time-limit",
            "600",
            "--wait",
            "--json",
        ])?
        .json()?;
    let writes_id = writes["batch_id"]
        .as_str()
        .context("a batch id")?
        .to_string();
    system.ok(&["batch", "publish", &writes_id])?;
    let hello = system.ok(&["wb", "cat", "b2", "hello.txt"])?;
    assert_eq!(hello.stdout, "hello b2\n");
    // Each target's job got the batch's time limit; more than the operator allows is refused.
    let jobs = system.json(&["jobs", "--json"])?;
    let child = jobs
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["workbench"] == "b2"))
        .context("b2's job is listed")?;
    assert_eq!(child["time_limit_secs"], 600, "{child}");
    let too_long = system.cli(&[
        "batch",
        "submit",
        "--workbenches",
        "b1",
        "--tool",
        "list_files",
        "--args",
        "{}",
        "--time-limit",
        "99999999",
    ])?;
    assert!(too_long.failed_with("VALIDATION_FAILED"), "{too_long:?}");

    // Cancel a slow job, then resume it to its end.
    let slow = system
        .ok(&[
            "submit",
            "q3",
            "Write notes again",
            "--model",
            &slow_model.model_spec(),
        ])?
        .stdout
        .trim()
        .to_string();
    wait_state(system, &slow, "running")?;
    system.ok(&["cancel", &slow])?;
    let view = wait_state(system, &slow, "cancelled")?;
    assert_eq!(view["error"]["code"], "USER_CANCELED", "{view}");
    system.ok(&["resume", &slow])?;
    wait_state(system, &slow, "succeeded")?;
    let draft = system.json(&["wb", "ls", "q3", "--draft", "--json"])?;
    assert!(paths(&draft).contains(&"notes.md".to_string()), "{draft}");

    // A time limit ends a job whose model is still silent, the draft as it was.
    let limited = system.cli(&[
        "submit",
        "q3",
        "Write notes once more",
        "--model",
        &slow_model.model_spec(),
        "--continue-draft",
        "--time-limit",
        "1",
        "--wait",
    ])?;
    assert!(!limited.success, "{limited:?}");
    let limited_id = limited
        .stdout
        .split_whitespace()
        .nth(2)
        .context("the submitted job's id")?;
    let view = job_state(system, limited_id)?;
    assert_eq!(
        (
            &view["state"],
            &view["error"]["code"],
            &view["time_limit_secs"]
        ),
        (&json!("failed"), &json!("JOB_TIME_LIMIT"), &json!(1)),
        "{view}"
    );
    assert_eq!(
        view["model_turns"], 0,
        "the silent turn is not waited for: {view}"
    );
    assert_eq!(
        system.json(&["wb", "ls", "q3", "--draft", "--json"])?,
        draft
    );
    let too_long = system.cli(&[
        "submit",
        "q3",
        "Write notes",
        "--continue-draft",
        "--time-limit",
        "99999999",
        "--wait",
    ])?;
    assert!(
        !too_long.success && too_long.stdout.contains("VALIDATION_FAILED: a time limit"),
        "{too_long:?}"
    );

    // Pools, storage, and the eval of one task.
    let pools = system.json(&["workers", "--json"])?;
    for pool in ["tabular", "office"] {
        let found = pools
            .as_array()
            .and_then(|pools| pools.iter().find(|p| p["pool"] == pool));
        assert!(
            found.is_some_and(|p| p["slots"].as_u64() > Some(0)),
            "{pools}"
        );
    }
    let gc = system.ok(&["gc"])?;
    assert!(
        gc.stdout.contains("removed") && gc.stdout.contains("kept"),
        "{}",
        gc.stdout
    );

    // The terminal session, under a pseudo-terminal.
    let chat = system.shell(&format!(
        "printf '/history\\n/quit\\n' | script -qec '{}' /dev/null",
        system.command_line("chat q3")
    ))?;
    let screen = String::from_utf8_lossy(&chat.stdout);
    assert!(screen.contains("Write notes on sales"), "{screen}");
    Ok(())
}

fn eval_one_task(system: &System) -> anyhow::Result<()> {
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../eval/tasks/dev");
    let oracle: Script = serde_json::from_str(&std::fs::read_to_string(
        tasks.join("launch-count/oracle.json"),
    )?)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let model = runtime.block_on(ScriptedModel::start(oracle))?;
    let tasks = tasks.to_string_lossy().to_string();
    let report = system.json(&[
        "eval",
        &tasks,
        "--task",
        "launch-count",
        "--model",
        &model.model_spec(),
        "--json",
    ])?;
    assert_eq!(report["overall"]["passed"], 1, "{report}");
    Ok(())
}

fn journey(system: &System) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let model = runtime.block_on(ScriptedModel::start(notes_script(0)))?;
    let slow_model = runtime.block_on(ScriptedModel::start(notes_script(3_000)))?;
    the_journey(system, &model, &slow_model)?;
    eval_one_task(system)?;
    let violations = system.permission_violations();
    assert!(violations.is_empty(), "{violations:#?}");
    Ok(())
}

#[test]
fn the_users_journey_on_the_embedded_default() -> anyhow::Result<()> {
    let system = System::Embedded(Up::start()?);
    journey(&system)
}

#[test]
fn the_users_journey_on_a_distributed_set_up_with_the_documented_accounts() -> anyhow::Result<()> {
    let system = System::Distributed(Distributed::start()?);
    journey(&system)
}

/// Two coordinators, each with its own data directory, sharing a replicated store of four
/// shards (docs/operations.md, "Coordinators that fail over") under the documented accounts:
/// every verb of the journey reaches its shard's owner whichever coordinator a request lands
/// on, and neither coordinator is refused a permission (leases, members, changelog,
/// snapshots, the shard subjects).
#[test]
fn the_users_journey_on_two_coordinators_sharing_a_replicated_store_with_the_documented_accounts()
-> anyhow::Result<()> {
    let replicated = [
        ("ATELIER_REPLICATED_STORE", "true"),
        ("ATELIER_STORE_SHARDS", "4"),
    ];
    let coordinators = ["coordinator", "coordinator-b"];
    let system = Distributed::start_with(&coordinators, &replicated)?;
    // Both serve shards before the journey starts.
    wait_until(Duration::from_secs(30), || {
        coordinators.iter().all(|name| {
            std::fs::read_to_string(system.dir.path().join(format!("{name}.log")))
                .is_ok_and(|log| log.contains("serving the shard"))
        })
    })
    .context("both coordinators serve shards")?;
    journey(&System::Distributed(system))
}
