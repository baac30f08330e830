//! Runs the shell blocks of a Markdown document, the way mdBook's and `trycmd`'s runners do, so
//! that a command the docs show is a command the tests ran.
//!
//! # Which blocks run
//! A fenced block whose info string starts with `sh`, `bash`, `shell` or `console` runs. Other
//! blocks (`toml`, `json`, diagrams) do not, unless they look like commands (a line starting with
//! `atelier `, `cargo ` or `$ `): that is an error, so commands cannot hide in a block the runner
//! would skip. Words after the language are tags:
//!
//! - `no-run`: the block is not run. Its first line must say why, as a comment:
//!   `# not run by tests/tests/docs.rs: REASON` (a reader sees it; the runner checks it).
//! - `requires=TOOL[,TOOL]`: run only where every TOOL is on `PATH` (tools that
//!   `scripts/setup.sh --tests` does not install); skipped, and reported, elsewhere.
//!
//! An unknown tag is an error.
//!
//! # How they run
//! The blocks of one document run in order, in one fresh directory, as one terminal session:
//! each block is `bash -euo pipefail`, and its exported variables and current directory carry
//! over to the next block. `PATH` starts with the directory of the freshly built `atelier`
//! (`cargo run --bin atelier --` in a block is that binary too). The directory holds the sample
//! files the caller provides and whatever links it asks for (e.g. `docs`, `eval`, so commands
//! given from the repository root work).
//!
//! A line that runs `atelier [global flags] up …` is not handed to bash: the runner starts it in
//! the background, with the session's environment, and waits until it has printed its dashboard
//! address (after its URL files are written). Every `up` is stopped with Ctrl-C (SIGINT) when the
//! document ends; anything else a block started in the background is killed, with the block's
//! process group, when the block ends. While an `up` runs, the dashboard address `localhost:7474`
//! (or `127.0.0.1:7474`) in a block stands for the address it printed, since the tests run it on
//! a free port.
//!
//! # Checked output
//! `# prints: TEXT` at the end of a line (or on a line of its own) says that the block's standard
//! output contains TEXT; several must appear in order. On the line of an `atelier up` it is
//! checked against that `up`'s output. In a `console` block, lines starting with `$ ` are
//! commands and the other non-empty lines their expected output (each must appear, in order,
//! anything else around them; a `...` line is only for the reader).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Languages whose blocks run.
pub const SHELLS: [&str; 4] = ["sh", "bash", "shell", "console"];

/// The comment that gives a `no-run` block's reason (its first line).
pub const NO_RUN_REASON: &str = "# not run by tests/tests/docs.rs:";

/// The marker of expected output.
const PRINTS: &str = "# prints:";

/// How long one block may run.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// How long `atelier up` may take to come up.
const UP_TIMEOUT: Duration = Duration::from_secs(90);

/// One fenced block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The line of the opening fence (1-based).
    pub line: usize,
    /// The first word of the info string (empty when there is none).
    pub lang: String,
    /// The other words of the info string.
    pub tags: Vec<String>,
    pub body: String,
}

/// What the runner does with a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Not a shell block.
    Other,
    Run,
    /// Tagged `no-run`, with the reason its first line states.
    NoRun(String),
    /// Tagged `requires=`, and these tools are missing here.
    Missing(Vec<String>),
}

/// Every fenced block of `markdown` (backtick or tilde fences).
pub fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                let fence: String = trimmed
                    .chars()
                    .take_while(|c| *c == '`' || *c == '~')
                    .collect();
                if fence.len() >= 3 && fence.chars().all(|c| c == fence.as_bytes()[0] as char) {
                    let mut words = trimmed[fence.len()..].split_whitespace();
                    let lang = words.next().unwrap_or_default().to_string();
                    let block = Block {
                        line: index + 1,
                        lang,
                        tags: words.map(str::to_string).collect(),
                        body: String::new(),
                    };
                    open = Some((fence, block));
                }
            }
            Some((fence, block)) => {
                if trimmed.starts_with(fence.as_str())
                    && trimmed.trim_matches(|c| c == '`' || c == '~').is_empty()
                {
                    if let Some((_, block)) = open.take() {
                        found.push(block);
                    }
                } else {
                    block.body.push_str(line);
                    block.body.push('\n');
                }
            }
        }
    }
    found
}

impl Block {
    /// What to do with the block, or why it is not acceptable as written.
    pub fn plan(&self) -> anyhow::Result<Plan> {
        if !SHELLS.contains(&self.lang.as_str()) {
            let looks_like_commands = self.body.lines().any(|line| {
                ["atelier ", "cargo ", "$ "]
                    .iter()
                    .any(|start| line.starts_with(start))
            });
            if looks_like_commands {
                bail!(
                    "a ```{} block holds commands (a line starts with `atelier `, `cargo ` or `$ `): make it ```sh",
                    self.lang
                );
            }
            return Ok(Plan::Other);
        }
        let mut missing = Vec::new();
        let mut no_run = false;
        for tag in &self.tags {
            match tag.split_once('=') {
                None if tag == "no-run" => no_run = true,
                Some(("requires", tools)) => missing.extend(
                    tools
                        .split(',')
                        .filter(|tool| !on_path(tool))
                        .map(str::to_string),
                ),
                _ => bail!("unknown tag `{tag}` (known: no-run, requires=TOOL,...)"),
            }
        }
        if no_run {
            let first = self.body.lines().next().unwrap_or_default();
            let reason = first.strip_prefix(NO_RUN_REASON).map(str::trim);
            return match reason {
                Some(reason) if !reason.is_empty() => Ok(Plan::NoRun(reason.to_string())),
                _ => {
                    bail!("a no-run block must say why on its first line: `{NO_RUN_REASON} REASON`")
                }
            };
        }
        if !missing.is_empty() {
            return Ok(Plan::Missing(missing));
        }
        Ok(Plan::Run)
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// A block that ran.
#[derive(Debug)]
pub struct Ran {
    /// The line of its opening fence.
    pub line: usize,
    /// What it printed on standard output.
    pub stdout: String,
    pub elapsed: Duration,
}

/// What a document's run did.
#[derive(Debug, Default)]
pub struct Report {
    /// The blocks that ran, in order.
    pub ran: Vec<Ran>,
    /// Lines of the `no-run` blocks, with their reasons.
    pub not_run: Vec<(usize, String)>,
    /// Lines of the blocks skipped for missing tools, with the tools.
    pub skipped: Vec<(usize, Vec<String>)>,
}

/// A document's session: its directory, its environment and the processes it started.
pub struct Session {
    root: tempfile::TempDir,
    env: Vec<(String, String)>,
    ups: Vec<Up>,
    runs: usize,
}

/// An `atelier up` a block started.
struct Up {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    dashboard: String,
}

impl Session {
    /// A fresh directory (`work()`) and the environment every block gets on top of this
    /// process's (minus every `ATELIER_*` variable and model keys): `PATH` with the `atelier`
    /// binary first, then `env`.
    pub fn new(env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let root = tempfile::tempdir()?;
        std::fs::create_dir_all(root.path().join("work"))?;
        std::fs::create_dir_all(root.path().join("state"))?;
        let bin = crate::atelier_bin();
        let bin_dir = bin.parent().context("the binary has no directory")?;
        let path = std::env::var("PATH").unwrap_or_default();
        let mut vars = vec![
            ("PATH".to_string(), format!("{}:{path}", bin_dir.display())),
            (
                "DOCS_RUNNER_STATE".to_string(),
                root.path().join("state").display().to_string(),
            ),
        ];
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let session = Self {
            root,
            env: vars,
            ups: Vec::new(),
            runs: 0,
        };
        std::fs::write(session.state("pwd"), session.work().display().to_string())?;
        std::fs::write(session.state("env"), "")?;
        Ok(session)
    }

    /// The directory the blocks run in.
    pub fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    fn state(&self, name: &str) -> PathBuf {
        self.root.path().join("state").join(name)
    }

    /// Copies `from` into the working directory as `name`.
    pub fn provide(&self, from: &Path, name: &str) -> anyhow::Result<()> {
        let to = self.work().join(name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(from, &to).with_context(|| format!("cannot copy {}", from.display()))?;
        Ok(())
    }

    /// Writes `text` into the working directory as `name`.
    pub fn write(&self, name: &str, text: &str) -> anyhow::Result<()> {
        Ok(std::fs::write(self.work().join(name), text)?)
    }

    /// Links `name` in the working directory to `to`.
    pub fn link(&self, to: &Path, name: &str) -> anyhow::Result<()> {
        Ok(std::os::unix::fs::symlink(to, self.work().join(name))?)
    }

    /// Runs every shell block of the document at `path` (named `name` in messages), in order.
    pub fn run_document(&mut self, path: &Path, name: &str) -> anyhow::Result<Report> {
        let markdown = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut report = Report::default();
        for block in blocks(&markdown) {
            let at = format!("{name}:{}", block.line);
            match block.plan().with_context(|| at.clone())? {
                Plan::Other => {}
                Plan::NoRun(reason) => report.not_run.push((block.line, reason)),
                Plan::Missing(tools) => report.skipped.push((block.line, tools)),
                Plan::Run => {
                    let started = Instant::now();
                    let stdout = self
                        .run_block(&block)
                        .with_context(|| format!("{at}: the block failed:\n{}", block.body))?;
                    report.ran.push(Ran {
                        line: block.line,
                        stdout,
                        elapsed: started.elapsed(),
                    });
                }
            }
        }
        Ok(report)
    }

    /// Runs one block; returns its standard output.
    fn run_block(&mut self, block: &Block) -> anyhow::Result<String> {
        let script = match block.lang.as_str() {
            "console" => console_to_script(&block.body),
            _ => block.body.clone(),
        };
        let script = script.replace("cargo run --bin atelier -- ", "atelier ");
        let mut stdout = String::new();
        let mut expected = Vec::new();
        let mut segment = String::new();
        for line in script.lines() {
            match up_command(line) {
                Some(command) => {
                    stdout.push_str(&self.run_segment(&segment)?);
                    segment.clear();
                    self.start_up(&command, &prints(line))?;
                }
                None => {
                    expected.extend(prints(line));
                    segment.push_str(&self.with_dashboard(line));
                    segment.push('\n');
                }
            }
        }
        stdout.push_str(&self.run_segment(&segment)?);
        check_prints(&stdout, &expected)?;
        Ok(stdout)
    }

    /// `line` with the default dashboard address replaced by the running `up`'s.
    fn with_dashboard(&self, line: &str) -> String {
        match self.ups.last() {
            Some(up) => line
                .replace("localhost:7474", &up.dashboard)
                .replace("127.0.0.1:7474", &up.dashboard),
            None => line.to_string(),
        }
    }

    /// The shell text that restores the session before a block's own text.
    fn prelude(&self) -> String {
        "source \"$DOCS_RUNNER_STATE/env\"\ncd \"$(cat \"$DOCS_RUNNER_STATE/pwd\")\"\n".to_string()
    }

    fn command(&self, script: &str) -> Command {
        let mut command = Command::new("bash");
        command.args(["-euo", "pipefail", "-c", script]);
        for (key, _) in std::env::vars() {
            let model_key = key == "OPENAI_API_KEY" || key == "ANTHROPIC_API_KEY";
            if key.starts_with("ATELIER_") || model_key || key == "NATS_URL" {
                command.env_remove(key);
            }
        }
        command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.work())
            .stdin(Stdio::null())
            .process_group(0);
        command
    }

    /// Runs `text` as a bash script in the session; returns its standard output.
    fn run_segment(&mut self, text: &str) -> anyhow::Result<String> {
        if text.trim().is_empty() {
            return Ok(String::new());
        }
        self.runs += 1;
        let out = self.state(&format!("{}.out", self.runs));
        let err = self.state(&format!("{}.err", self.runs));
        let save = "trap 'status=$?; export -p | grep -Ev \"^declare -x (SHELLOPTS|BASHOPTS|PWD|OLDPWD|SHLVL|_)(=|$)\" > \"$DOCS_RUNNER_STATE/env\"; pwd > \"$DOCS_RUNNER_STATE/pwd\"; exit $status' EXIT\n";
        let script = format!("{}{save}{text}", self.prelude());
        let mut child = self
            .command(&script)
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?)
            .spawn()
            .context("bash not found")?;
        let deadline = Instant::now() + BLOCK_TIMEOUT;
        let mut timed_out = false;
        while running(child.id()) {
            if Instant::now() > deadline {
                timed_out = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever the block left running in the background ends with it.
        kill_group(child.id());
        let status = child.wait()?;
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err).unwrap_or_default();
        if timed_out {
            bail!(
                "still running after {BLOCK_TIMEOUT:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}{}",
                self.up_logs()
            );
        }
        if !status.success() {
            bail!(
                "{status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}{}",
                self.up_logs()
            );
        }
        Ok(stdout)
    }

    /// Starts `command` (an `atelier up` line) in the background and waits for its dashboard.
    fn start_up(&mut self, command: &str, expected: &[String]) -> anyhow::Result<()> {
        self.runs += 1;
        let out = self.state(&format!("up-{}.out", self.runs));
        let err = self.state(&format!("up-{}.err", self.runs));
        let script = format!("{}exec {command}", self.prelude());
        let child = self
            .command(&script)
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?)
            .spawn()?;
        let mut up = Up {
            child,
            out,
            err,
            dashboard: String::new(),
        };
        let deadline = Instant::now() + UP_TIMEOUT;
        loop {
            let printed = std::fs::read_to_string(&up.out).unwrap_or_default();
            let address = printed
                .lines()
                .find_map(|line| line.strip_prefix("dashboard at http://"));
            if let Some(address) = address {
                up.dashboard = address.trim().to_string();
                break;
            }
            if !running(up.child.id()) || Instant::now() > deadline {
                kill_group(up.child.id());
                let exited = up.child.wait();
                let log = std::fs::read_to_string(&up.err).unwrap_or_default();
                bail!("`{command}` did not come up ({exited:?}):\n{printed}\n{log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let printed = std::fs::read_to_string(&up.out).unwrap_or_default();
        self.ups.push(up);
        check_prints(&printed, expected)
    }

    /// The logs of the running `up`s, for a failure's message.
    fn up_logs(&self) -> String {
        let mut logs = String::new();
        for up in &self.ups {
            let err = std::fs::read_to_string(&up.err).unwrap_or_default();
            let tail: Vec<&str> = err.lines().rev().take(40).collect();
            logs.push_str("\n--- atelier up (last lines)\n");
            for line in tail.into_iter().rev() {
                logs.push_str(line);
                logs.push('\n');
            }
        }
        logs
    }
}

impl Drop for Session {
    /// Stops every `up` with Ctrl-C and waits for it (its group is killed only once it has
    /// exited, or after 20 s, and before it is reaped, so the group id is still its own).
    fn drop(&mut self) {
        for up in &mut self.ups {
            let _ = Command::new("kill")
                .args(["-INT", &up.child.id().to_string()])
                .status();
        }
        for up in &mut self.ups {
            let deadline = Instant::now() + Duration::from_secs(20);
            while running(up.child.id()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            kill_group(up.child.id());
            let _ = up.child.wait();
        }
    }
}

/// Whether the child `pid` (not yet reaped) still runs, rather than being a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        !matches!(state, Some(Some('Z' | 'X')))
    })
}

/// SIGKILLs the process group `group` (a block's leftovers, or an `up` that did not stop). Its
/// leader is our child, not yet reaped, so the id cannot belong to anyone else.
fn kill_group(group: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
}

/// The command of a line that runs `atelier [global flags] up …` (without a trailing `&` or
/// comment), if it is one.
pub fn up_command(line: &str) -> Option<String> {
    let command = line.split(" #").next().unwrap_or_default().trim();
    let command = command.strip_suffix('&').unwrap_or(command).trim();
    let mut words = command.split_whitespace();
    if words.next() != Some("atelier") {
        return None;
    }
    const VALUED: [&str; 5] = ["--data", "--config", "--nats", "--creds", "--http"];
    while let Some(word) = words.next() {
        if VALUED.contains(&word) {
            words.next();
        } else if word.starts_with("--") {
            continue;
        } else {
            return (word == "up").then(|| command.to_string());
        }
    }
    None
}

/// The expected output a line declares.
fn prints(line: &str) -> Vec<String> {
    line.split_once(PRINTS)
        .map(|(_, text)| text.trim().to_string())
        .filter(|text| !text.is_empty())
        .into_iter()
        .collect()
}

/// Checks that `expected` appear in `output`, in order.
fn check_prints(output: &str, expected: &[String]) -> anyhow::Result<()> {
    let mut rest = output;
    for text in expected {
        match rest.find(text.as_str()) {
            Some(at) => rest = &rest[at + text.len()..],
            None => bail!(
                "expected output `{text}` (in this order) is not in what the block printed:\n{output}"
            ),
        }
    }
    Ok(())
}

/// A `console` block as a script: its `$ ` commands, each followed by `# prints:` lines for its
/// expected output.
fn console_to_script(body: &str) -> String {
    let mut script = String::new();
    for line in body.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            script.push_str(command);
            script.push('\n');
        } else if let Some(continued) = line.strip_prefix("> ") {
            script.push_str(continued);
            script.push('\n');
        } else if !line.trim().is_empty() && line.trim() != "..." {
            script.push_str(&format!("{PRINTS} {}\n", line.trim()));
        }
    }
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_their_plans() {
        let doc = "text\n```sh\natelier wb list\n```\n\n```sh no-run\n# not run by tests/tests/docs.rs: needs a cluster\nkubectl apply\n```\n```toml\na = 1\n```\n```sh no-run\nls\n```\n```\natelier up\n```\n";
        let found = blocks(doc);
        assert_eq!(found.len(), 5);
        assert_eq!(found[0].line, 2);
        assert_eq!(found[0].plan().ok(), Some(Plan::Run));
        assert_eq!(
            found[1].plan().ok(),
            Some(Plan::NoRun("needs a cluster".into()))
        );
        assert_eq!(found[2].plan().ok(), Some(Plan::Other));
        assert!(
            found[3].plan().is_err(),
            "a no-run block without its reason"
        );
        assert!(
            found[4].plan().is_err(),
            "commands in a block without a language"
        );
    }

    #[test]
    fn up_lines_are_recognised_with_global_flags() {
        assert_eq!(
            up_command("atelier up   # the system").as_deref(),
            Some("atelier up")
        );
        assert_eq!(
            up_command("atelier --config x.toml --data /tmp/d up &").as_deref(),
            Some("atelier --config x.toml --data /tmp/d up")
        );
        assert_eq!(up_command("atelier wb create up"), None);
        assert_eq!(up_command("atelier --data d wb list"), None);
    }

    #[test]
    fn expected_output_is_checked_in_order() {
        assert!(check_prints("a\nb\nc\n", &["a".into(), "c".into()]).is_ok());
        assert!(check_prints("a\nb\nc\n", &["c".into(), "a".into()]).is_err());
        let script = console_to_script("$ atelier wb create q3\ncreated workbench q3\n...\n");
        assert_eq!(
            script,
            "atelier wb create q3\n# prints: created workbench q3\n"
        );
    }
}
