//! Task folders: `DIR/NAME/task.toml` with the message, the input files and the checks.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use figment::Figment;
use figment::providers::{Format, Toml};
use serde::Deserialize;

/// One task as written in its `task.toml`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TaskSpec {
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) files: Vec<InputFile>,
    #[serde(default, rename = "check")]
    pub(crate) checks: Vec<Check>,
}

/// An input file: a path, or `{ from = PATH, as = NAME }` to give it another workbench path.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum InputFile {
    Path(String),
    Renamed {
        from: String,
        #[serde(rename = "as")]
        as_path: String,
    },
}

/// What a cell should hold: a number (compared numerically) or text (compared as displayed).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(untagged)]
pub(crate) enum Expected {
    Number(f64),
    Text(String),
}

/// One check on the job's draft (docs/eval.md defines each kind).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Check {
    FileLines {
        path: String,
        equals: Vec<String>,
    },
    FileContains {
        path: String,
        text: String,
    },
    CsvRows {
        path: String,
        count: usize,
    },
    XlsxCell {
        path: String,
        #[serde(default)]
        sheet: Option<String>,
        cell: String,
        equals: Expected,
    },
    DocxParagraph {
        path: String,
        contains: String,
    },
    FileAbsent {
        path: String,
    },
    FileUnchanged {
        path: String,
    },
}

impl Check {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Check::FileLines { .. } => "file_lines",
            Check::FileContains { .. } => "file_contains",
            Check::CsvRows { .. } => "csv_rows",
            Check::XlsxCell { .. } => "xlsx_cell",
            Check::DocxParagraph { .. } => "docx_paragraph",
            Check::FileAbsent { .. } => "file_absent",
            Check::FileUnchanged { .. } => "file_unchanged",
        }
    }

    pub(crate) fn path(&self) -> &str {
        match self {
            Check::FileLines { path, .. }
            | Check::FileContains { path, .. }
            | Check::CsvRows { path, .. }
            | Check::XlsxCell { path, .. }
            | Check::DocxParagraph { path, .. }
            | Check::FileAbsent { path }
            | Check::FileUnchanged { path } => path,
        }
    }
}

/// A loaded task: its name (the folder's), spec and resolved input files.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) name: String,
    pub(crate) spec: TaskSpec,
    /// (file on disk, path in the workbench)
    pub(crate) inputs: Vec<(PathBuf, String)>,
}

/// The tasks under `dir` (folders holding a `task.toml`, by name), or only those `wanted`.
pub(crate) fn load_tasks(dir: &Path, wanted: &[String]) -> anyhow::Result<Vec<Task>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let mut folders = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.join("task.toml").is_file() {
            folders.push(path);
        }
    }
    folders.sort();
    let mut tasks = Vec::new();
    for folder in folders {
        let name = folder_name(&folder)?;
        if wanted.is_empty() || wanted.contains(&name) {
            tasks.push(load_task(dir, &folder, name)?);
        }
    }
    if let Some(missing) = wanted.iter().find(|w| !tasks.iter().any(|t| &t.name == *w)) {
        bail!("no task named `{missing}` under {}", dir.display());
    }
    if tasks.is_empty() {
        bail!(
            "no task under {} (a task is a folder with a task.toml)",
            dir.display()
        );
    }
    Ok(tasks)
}

fn folder_name(folder: &Path) -> anyhow::Result<String> {
    folder
        .file_name()
        .and_then(|name| name.to_str())
        .map(str::to_string)
        .with_context(|| format!("{} has no usable name", folder.display()))
}

fn load_task(dir: &Path, folder: &Path, name: String) -> anyhow::Result<Task> {
    let file = folder.join("task.toml");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let spec: TaskSpec = Figment::from(Toml::string(&text))
        .extract()
        .with_context(|| format!("{} is not a valid task", file.display()))?;
    if spec.checks.is_empty() {
        bail!("{} has no [[check]]", file.display());
    }
    let mut inputs = Vec::new();
    for input in &spec.files {
        inputs.push(resolve_input(dir, folder, input)?);
    }
    Ok(Task { name, spec, inputs })
}

/// An input's file on disk (the task folder first, then the eval dir's `files/`) and its
/// workbench path (its file name unless renamed).
fn resolve_input(
    dir: &Path,
    folder: &Path,
    input: &InputFile,
) -> anyhow::Result<(PathBuf, String)> {
    let (from, as_path) = match input {
        InputFile::Path(path) => (path, None),
        InputFile::Renamed { from, as_path } => (from, Some(as_path.clone())),
    };
    let candidates = [folder.join(from), dir.join("files").join(from)];
    let Some(found) = candidates.into_iter().find(|c| c.is_file()) else {
        bail!(
            "input {from:?} of {} is neither in the task folder nor in {}",
            folder.display(),
            dir.join("files").display()
        );
    };
    let target = match as_path {
        Some(path) => path,
        None => found
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .with_context(|| format!("{} has no usable file name", found.display()))?,
    };
    Ok((found, target))
}
