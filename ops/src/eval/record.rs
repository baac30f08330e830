//! The results file of `atelier eval --results FILE`: one JSON line per run, appended and synced
//! as the run ends, so an eval that is cut off keeps every run it finished; run again with the
//! same file, it runs only the runs the file lacks and reports them all together.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::RunOutcome;
use super::task::Task;

/// One line of the file.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    model: String,
    split: String,
    task: String,
    #[serde(flatten)]
    outcome: RunOutcome,
}

/// Which run of which task.
type RunKey = (String, String, u32);

/// The runs a results file holds, and where new ones go.
#[derive(Debug, Default)]
pub(crate) struct Results {
    file: Option<(PathBuf, File)>,
    recorded: HashMap<RunKey, RunOutcome>,
}

impl Results {
    /// No file: nothing recorded, nothing kept.
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Opens (or creates) `path` for runs of `model`. A last line cut off while it was written
    /// is dropped; any other line that is not a run's result, or a run of another model, is an
    /// error that names the line.
    pub(crate) fn open(path: &Path, model: &str) -> anyhow::Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error).context(format!("reading {}", path.display())),
        };
        let complete = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        let mut recorded = HashMap::new();
        for (index, line) in complete.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let line: Line = serde_json::from_str(line).with_context(|| {
                format!(
                    "{} line {} is not a run's result: remove it or give another --results file",
                    path.display(),
                    index + 1
                )
            })?;
            if line.model != model {
                bail!(
                    "{} holds runs of model `{}`, not `{model}`: give another --results file",
                    path.display(),
                    line.model
                );
            }
            recorded.insert((line.split, line.task, line.outcome.run), line.outcome);
        }
        let file = rewrite_complete(path, complete)?;
        Ok(Self {
            file: Some((path.to_path_buf(), file)),
            recorded,
        })
    }

    /// The run recorded for `task`, if the file has it.
    pub(crate) fn recorded(&self, task: &Task, run: u32) -> Option<RunOutcome> {
        self.recorded
            .get(&(task.split.clone(), task.name.clone(), run))
            .cloned()
    }

    /// How many runs the file already has.
    pub(crate) fn len(&self) -> usize {
        self.recorded.len()
    }

    /// Appends `outcome` and syncs it to disk (nothing without a file).
    pub(crate) fn append(
        &mut self,
        model: &str,
        task: &Task,
        outcome: &RunOutcome,
    ) -> anyhow::Result<()> {
        let Some((path, file)) = &mut self.file else {
            return Ok(());
        };
        let line = Line {
            model: model.to_string(),
            split: task.split.clone(),
            task: task.name.clone(),
            outcome: outcome.clone(),
        };
        let mut bytes = serde_json::to_vec(&line)?;
        bytes.push(b'\n');
        file.write_all(&bytes)
            .and_then(|()| file.sync_data())
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// `path` holding only its `complete` lines (a cut-off last line gone), open for appending.
fn rewrite_complete(path: &Path, complete: &str) -> anyhow::Result<File> {
    let context = || format!("opening {} for the eval's results", path.display());
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(context)?;
    file.set_len(complete.len() as u64).with_context(context)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(name: &str) -> Task {
        Task {
            name: name.to_string(),
            split: "dev".to_string(),
            spec: super::super::task::TaskSpec {
                message: "Hi.".to_string(),
                files: Vec::new(),
                checks: Vec::new(),
            },
            inputs: Vec::new(),
        }
    }

    fn outcome(run: u32, passed: bool) -> RunOutcome {
        RunOutcome {
            run,
            workbench: format!("eval-t-{run}"),
            job_id: format!("job-{run}"),
            state: "succeeded".to_string(),
            error: None,
            passed,
            false_success: !passed,
            checks: Vec::new(),
            model_turns: 3,
            tool_calls: 2,
            prompt_tokens: 100,
            completion_tokens: 20,
            cost_usd: None,
            wall_ms: 1_000,
        }
    }

    #[test]
    fn runs_appended_are_read_back_and_a_cut_off_line_is_dropped() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("results.jsonl");
        let mut results = Results::open(&path, "m")?;
        results.append("m", &task("a"), &outcome(1, true))?;
        results.append("m", &task("a"), &outcome(2, false))?;
        let mut file = OpenOptions::new().append(true).open(&path)?;
        file.write_all(b"{\"model\":\"m\",\"split\":\"dev\",\"ta")?;

        let mut again = Results::open(&path, "m")?;
        assert_eq!(again.len(), 2);
        let second = again.recorded(&task("a"), 2).context("run 2")?;
        assert!(second.false_success && !second.passed);
        assert!(again.recorded(&task("a"), 3).is_none());
        assert!(again.recorded(&task("b"), 1).is_none());
        again.append("m", &task("b"), &outcome(1, true))?;
        assert_eq!(Results::open(&path, "m")?.len(), 3, "the fragment is gone");
        Ok(())
    }

    #[test]
    fn another_models_file_and_a_garbled_line_are_refused_by_name() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("results.jsonl");
        Results::open(&path, "m")?.append("m", &task("a"), &outcome(1, true))?;
        let other = Results::open(&path, "n").expect_err("another model");
        assert!(
            other
                .to_string()
                .contains("holds runs of model `m`, not `n`"),
            "{other}"
        );

        std::fs::write(&path, "not json\n")?;
        let garbled = Results::open(&path, "m").expect_err("a garbled line");
        assert!(
            garbled.to_string().contains("line 1 is not a run's result"),
            "{garbled}"
        );
        Ok(())
    }
}
