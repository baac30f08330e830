//! `atelier context add|ls|rm`: a workbench's situation text and skills (a `SKILL.md` plus the
//! files it references), injected into every model call of its jobs.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::store::Done;
use atelier_messages::workshop::{
    AddContextItem, ContextFile, ContextItem, ContextKind, ListContextItems, RemoveContextItem,
};
use clap::Subcommand;

use crate::client::Client;
use crate::output::print_json;

/// The skill file every skill directory has.
const SKILL_FILE: &str = "SKILL.md";
/// How deep a skill's referenced files may sit below its directory.
const MAX_SKILL_DEPTH: usize = 4;

#[derive(Subcommand)]
pub enum ContextCommand {
    /// Set the situation text (--situation FILE) or add a skill (--skill DIR with a SKILL.md).
    Add {
        workbench: String,
        #[arg(long, conflicts_with = "skill", required_unless_present = "skill")]
        situation: Option<PathBuf>,
        #[arg(long)]
        skill: Option<PathBuf>,
    },
    /// List the context items.
    Ls {
        workbench: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a context item by name (`situation`, or a skill's name).
    Rm { workbench: String, name: String },
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {} as text", path.display()))
}

/// Files below `dir` (relative paths with `/`), at most [`MAX_SKILL_DEPTH`] levels deep.
fn files_below(
    dir: &Path,
    prefix: &str,
    depth: usize,
    out: &mut Vec<String>,
) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        let relative = format!("{prefix}{name}");
        if entry.file_type()?.is_dir() {
            if depth < MAX_SKILL_DEPTH {
                files_below(&entry.path(), &format!("{relative}/"), depth + 1, out)?;
            }
        } else if entry.file_type()?.is_file() {
            out.push(relative);
        }
    }
    Ok(())
}

/// A skill directory as a context item: `SKILL.md` and every file below the directory whose
/// relative path `SKILL.md` mentions.
pub fn skill_item(dir: &Path) -> anyhow::Result<ContextItem> {
    let skill = read_text(&dir.join(SKILL_FILE)).with_context(|| {
        format!(
            "{} is not a skill directory (no {SKILL_FILE})",
            dir.display()
        )
    })?;
    let name = dir
        .canonicalize()?
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .context("the skill directory has no name")?;
    let mut paths = Vec::new();
    files_below(dir, "", 0, &mut paths)?;
    paths.sort();
    let mut files = vec![ContextFile {
        path: SKILL_FILE.into(),
        text: skill.clone(),
    }];
    for path in paths
        .into_iter()
        .filter(|p| p != SKILL_FILE && skill.contains(p.as_str()))
    {
        files.push(ContextFile {
            text: read_text(&dir.join(&path))?,
            path,
        });
    }
    Ok(ContextItem {
        name,
        kind: ContextKind::Skill,
        files,
    })
}

fn situation_item(file: &Path) -> anyhow::Result<ContextItem> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "situation.txt".into());
    Ok(ContextItem {
        name: "situation".into(),
        kind: ContextKind::Situation,
        files: vec![ContextFile {
            path: name,
            text: read_text(file)?,
        }],
    })
}

pub async fn run(client: &Client, command: ContextCommand) -> anyhow::Result<()> {
    match command {
        ContextCommand::Add {
            workbench,
            situation,
            skill,
        } => {
            let item = match (situation, skill) {
                (Some(file), None) => situation_item(&file)?,
                (None, Some(dir)) => skill_item(&dir)?,
                _ => bail!("give --situation FILE or --skill DIR"),
            };
            let added: ContextItem = client
                .call(&AddContextItem {
                    v: PROTOCOL_VERSION,
                    workbench: workbench.clone(),
                    item,
                })
                .await?;
            println!(
                "{workbench}: context item {} ({} file(s))",
                added.name,
                added.files.len()
            );
        }
        ContextCommand::Ls { workbench, json } => {
            let items: Vec<ContextItem> = client
                .call(&ListContextItems {
                    v: PROTOCOL_VERSION,
                    workbench,
                })
                .await?;
            if json {
                return print_json(&items);
            }
            for item in items {
                let paths: Vec<_> = item.files.iter().map(|f| f.path.as_str()).collect();
                println!(
                    "{:<24} {:<10} {}",
                    item.name,
                    format!("{:?}", item.kind).to_lowercase(),
                    paths.join(", ")
                );
            }
        }
        ContextCommand::Rm { workbench, name } => {
            let _: Done = client
                .call(&RemoveContextItem {
                    v: PROTOCOL_VERSION,
                    workbench: workbench.clone(),
                    name: name.clone(),
                })
                .await?;
            println!("{workbench}: removed context item {name}");
        }
    }
    Ok(())
}
