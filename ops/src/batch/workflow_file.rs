//! The workflow a command runs: a workflow file (TOML: `name`, `[vars]`, `[[steps]]`) or one
//! tool call, with its variables, and its steps rendered once per row of variables.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use atelier_coordinator::templates::{self, Vars};
use atelier_messages::workflow::{Workflow, WorkflowStep};
use figment::Figment;
use figment::providers::{Format as _, Toml};
use serde::Deserialize;

use super::WorkflowArgs;
use crate::client;

/// A workflow file.
#[derive(Deserialize)]
struct WorkflowFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    steps: Vec<WorkflowStep>,
}

/// The workflow of a file (or one tool call) and its variables (file defaults, then --set).
pub(super) fn load_workflow(
    tool: Option<&str>,
    args: &str,
    workflow: &WorkflowArgs,
) -> anyhow::Result<(Workflow, Vars)> {
    let mut vars = Vars::new();
    let workflow_value = match (&workflow.workflow, tool) {
        (Some(path), _) => {
            let file: WorkflowFile = Figment::from(Toml::file_exact(path))
                .extract()
                .with_context(|| {
                    format!(
                        "VALIDATION_FAILED: cannot read the workflow {}",
                        path.display()
                    )
                })?;
            vars.extend(file.vars);
            Workflow {
                name: file.name,
                steps: file.steps,
            }
        }
        (None, Some(tool)) => Workflow::single(
            tool,
            serde_json::from_str(args)
                .with_context(|| format!("VALIDATION_FAILED: --args is not JSON: {args}"))?,
        ),
        (None, None) => bail!("VALIDATION_FAILED: name a tool or pass --workflow FILE"),
    };
    for set in &workflow.sets {
        let Some((name, value)) = set.split_once('=') else {
            bail!("VALIDATION_FAILED: --set {set:?} must be NAME=VALUE");
        };
        vars.insert(name.trim().to_string(), value.to_string());
    }
    Ok((workflow_value, vars))
}

/// The workflow's steps rendered once per row (each row's values over `vars`), in row order.
pub(super) fn render_rows(
    workflow: &Workflow,
    vars: &Vars,
    rows: &[Vars],
) -> anyhow::Result<Workflow> {
    let mut steps = Vec::new();
    for row in rows {
        let mut row_vars = vars.clone();
        row_vars.extend(row.clone());
        let rendered = templates::render_workflow(workflow, &row_vars).map_err(client::coded)?;
        steps.extend(rendered.steps);
    }
    Ok(Workflow {
        name: workflow.name.clone(),
        steps,
    })
}
