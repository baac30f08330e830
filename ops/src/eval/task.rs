//! Task folders: `DIR/NAME/task.toml` with the message, the input files and the checks; or
//! splits of them, `DIR/SPLIT/NAME/task.toml` (docs/eval.md, "Splits").

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
        /// Compare the lines as a multiset: any order, each as often as in `equals`.
        #[serde(default)]
        any_order: bool,
    },
    FileContains {
        path: String,
        text: String,
    },
    CsvRows {
        path: String,
        count: usize,
    },
    CsvCell {
        path: String,
        /// The data row, 1-based (the header row is not counted).
        row: usize,
        /// The column's name in the header row.
        column: String,
        equals: Expected,
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
    DocxNoParagraph {
        path: String,
        contains: String,
    },
    PptxTitle {
        path: String,
        /// The slide, 1-based, in the presentation's order.
        slide: usize,
        equals: String,
    },
    FileAbsent {
        path: String,
    },
    FileUnchanged {
        path: String,
    },
    /// The draft holds exactly the published files: nothing written, changed or removed.
    DraftUnchanged,
}

impl Check {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Check::FileLines { .. } => "file_lines",
            Check::FileContains { .. } => "file_contains",
            Check::CsvRows { .. } => "csv_rows",
            Check::CsvCell { .. } => "csv_cell",
            Check::XlsxCell { .. } => "xlsx_cell",
            Check::DocxParagraph { .. } => "docx_paragraph",
            Check::DocxNoParagraph { .. } => "docx_no_paragraph",
            Check::PptxTitle { .. } => "pptx_title",
            Check::FileAbsent { .. } => "file_absent",
            Check::FileUnchanged { .. } => "file_unchanged",
            Check::DraftUnchanged => "draft_unchanged",
        }
    }

    /// The workbench path the check reads; empty for a check on the whole draft.
    pub(crate) fn path(&self) -> &str {
        match self {
            Check::FileLines { path, .. }
            | Check::FileContains { path, .. }
            | Check::CsvRows { path, .. }
            | Check::CsvCell { path, .. }
            | Check::XlsxCell { path, .. }
            | Check::DocxParagraph { path, .. }
            | Check::DocxNoParagraph { path, .. }
            | Check::PptxTitle { path, .. }
            | Check::FileAbsent { path }
            | Check::FileUnchanged { path } => path,
            Check::DraftUnchanged => "",
        }
    }
}

/// A loaded task: its name (the folder's), its split (the name of the folder holding it), spec
/// and resolved input files.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) name: String,
    pub(crate) split: String,
    pub(crate) spec: TaskSpec,
    /// (file on disk, path in the workbench)
    pub(crate) inputs: Vec<(PathBuf, String)>,
}

/// The tasks under `dir`, or only those `wanted`, by split then name: the task folders (holding
/// a `task.toml`) of `dir` itself, whose split is `dir`'s own name, and those of each folder of
/// `dir` that is not a task and holds tasks (a split: `eval/tasks/dev`, `eval/tasks/holdout`).
/// A task name must be unique across the splits.
pub(crate) fn load_tasks(dir: &Path, wanted: &[String]) -> anyhow::Result<Vec<Task>> {
    let mut splits = vec![(dir_name(dir)?, dir.to_path_buf(), task_folders(dir)?)];
    for sub in sub_folders(dir)? {
        let folders = task_folders(&sub)?;
        if !sub.join("task.toml").is_file() && !folders.is_empty() {
            splits.push((folder_name(&sub)?, sub, folders));
        }
    }
    splits.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tasks: Vec<Task> = Vec::new();
    // (task, split) of every task seen, wanted or not.
    let mut seen: Vec<(String, String)> = Vec::new();
    for (split, split_dir, folders) in splits {
        for folder in folders {
            let name = folder_name(&folder)?;
            if let Some((_, twin)) = seen.iter().find(|(task, _)| *task == name) {
                bail!(
                    "task `{name}` is in split `{twin}` and in split `{split}` under {}: task names must be unique",
                    dir.display()
                );
            }
            seen.push((name.clone(), split.clone()));
            if wanted.is_empty() || wanted.contains(&name) {
                tasks.push(load_task(&split_dir, &folder, name, &split)?);
            }
        }
    }
    if let Some(missing) = wanted.iter().find(|w| !tasks.iter().any(|t| &t.name == *w)) {
        bail!("no task named `{missing}` under {}", dir.display());
    }
    if tasks.is_empty() {
        bail!(
            "no task under {} (a task is a folder with a task.toml; a split, a folder of tasks)",
            dir.display()
        );
    }
    Ok(tasks)
}

/// The folders of `dir`, by name.
fn sub_folders(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let mut folders = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            folders.push(path);
        }
    }
    folders.sort();
    Ok(folders)
}

/// The folders of `dir` that hold a `task.toml`, by name.
fn task_folders(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    Ok(sub_folders(dir)?
        .into_iter()
        .filter(|folder| folder.join("task.toml").is_file())
        .collect())
}

/// `dir`'s own name, also when given as `.` or `..`.
fn dir_name(dir: &Path) -> anyhow::Result<String> {
    match folder_name(dir) {
        Ok(name) => Ok(name),
        Err(_) => folder_name(
            &std::fs::canonicalize(dir)
                .with_context(|| format!("cannot read {}", dir.display()))?,
        ),
    }
}

fn folder_name(folder: &Path) -> anyhow::Result<String> {
    folder
        .file_name()
        .and_then(|name| name.to_str())
        .map(str::to_string)
        .with_context(|| format!("{} has no usable name", folder.display()))
}

/// The task of `folder`, in the split `split` whose folder is `dir`.
fn load_task(dir: &Path, folder: &Path, name: String, split: &str) -> anyhow::Result<Task> {
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
    Ok(Task {
        name,
        split: split.to_string(),
        spec,
        inputs,
    })
}

/// An input's file on disk (the task folder first, then `files/` of the split's folder `dir`)
/// and its workbench path (its file name unless renamed).
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

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: &str =
        "message = \"m\"\nfiles = [\"in.txt\"]\n[[check]]\nkind = \"draft_unchanged\"\n";

    /// `root/SPLIT/NAME/task.toml` for each (split, name); inputs in the split's `files/`.
    fn tree(tasks: &[(&str, &str)]) -> anyhow::Result<tempfile::TempDir> {
        let root = tempfile::tempdir()?;
        for (split, name) in tasks {
            let folder = root.path().join(split).join(name);
            std::fs::create_dir_all(&folder)?;
            std::fs::write(folder.join("task.toml"), TASK)?;
            std::fs::create_dir_all(root.path().join(split).join("files"))?;
            std::fs::write(root.path().join(split).join("files/in.txt"), "x")?;
        }
        Ok(root)
    }

    fn names(tasks: &[Task]) -> Vec<String> {
        tasks
            .iter()
            .map(|t| format!("{}/{}", t.split, t.name))
            .collect()
    }

    #[test]
    fn a_parent_folder_runs_every_split_and_a_split_runs_alone() -> anyhow::Result<()> {
        let root = tree(&[("holdout", "c"), ("dev", "b"), ("dev", "a")])?;
        let all = load_tasks(root.path(), &[])?;
        assert_eq!(names(&all), ["dev/a", "dev/b", "holdout/c"]);
        assert!(matches!(all[2].spec.checks[..], [Check::DraftUnchanged]));
        assert_eq!(all[2].inputs[0].0, root.path().join("holdout/files/in.txt"));
        let holdout = load_tasks(&root.path().join("holdout/"), &[])?;
        assert_eq!(names(&holdout), ["holdout/c"]);
        let picked = load_tasks(root.path(), &["c".to_string(), "a".to_string()])?;
        assert_eq!(names(&picked), ["dev/a", "holdout/c"]);
        assert!(load_tasks(root.path(), &["z".to_string()]).is_err());
        Ok(())
    }

    #[test]
    fn a_task_name_is_unique_across_splits() -> anyhow::Result<()> {
        let root = tree(&[("dev", "a"), ("holdout", "a")])?;
        let error = load_tasks(root.path(), &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("task `a` is in split `dev` and in split `holdout`"),
            "{error}"
        );
        Ok(())
    }

    #[test]
    fn check_kinds_parse_from_toml() -> anyhow::Result<()> {
        let text = r#"
message = "m"
[[check]]
kind = "file_lines"
path = "a.txt"
equals = ["x", "y"]
any_order = true
[[check]]
kind = "csv_cell"
path = "t.csv"
row = 2
column = "birds"
equals = 68
[[check]]
kind = "pptx_title"
path = "d.pptx"
slide = 3
equals = "Lösung"
[[check]]
kind = "docx_no_paragraph"
path = "d.docx"
contains = "early-stage"
[[check]]
kind = "draft_unchanged"
"#;
        let spec: TaskSpec = Figment::from(Toml::string(text)).extract()?;
        let kinds: Vec<&str> = spec.checks.iter().map(Check::kind).collect();
        assert_eq!(
            kinds,
            [
                "file_lines",
                "csv_cell",
                "pptx_title",
                "docx_no_paragraph",
                "draft_unchanged"
            ]
        );
        assert!(matches!(
            spec.checks[0],
            Check::FileLines {
                any_order: true,
                ..
            }
        ));
        assert!(
            matches!(&spec.checks[1], Check::CsvCell { row: 2, equals: Expected::Number(n), .. } if *n == 68.0)
        );
        assert_eq!(spec.checks[4].path(), "");
        Ok(())
    }
}
