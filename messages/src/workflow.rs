//! Workflows: tool calls a user runs without a model (`atelier run`), one step after another,
//! as a journaled job on the workbench's draft.
//!
//! A submitted workflow is concrete: its `{{variables}}` were filled by whoever built it (the
//! CLI from `--set` and CSV rows, a batch from its target).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::ToolName;
use crate::{ErrorBody, ErrorCode};

/// Most steps one workflow job may hold (steps × CSV rows).
pub const MAX_WORKFLOW_STEPS: usize = 10_000;

/// One tool call of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowStep {
    /// A tool name from the catalog (`table_export`, `docx_operations`, …).
    pub tool: String,
    /// The tool's arguments, a JSON object.
    #[serde(default = "empty_object")]
    pub args: Value,
    /// What the step is for, shown in the job's checklist.
    #[serde(default)]
    pub name: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Steps run in order; the first failing step ends the job with its error code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    /// The workflow's name (from its file), shown in the job's message.
    #[serde(default)]
    pub name: Option<String>,
    pub steps: Vec<WorkflowStep>,
}

impl Workflow {
    /// One call of `tool` (a `--tool` run or batch).
    pub fn single(tool: impl Into<String>, args: Value) -> Self {
        Workflow {
            name: None,
            steps: vec![WorkflowStep {
                tool: tool.into(),
                args,
                name: None,
            }],
        }
    }

    /// Checks the shape: 1 to [`MAX_WORKFLOW_STEPS`] steps, each naming a worker tool with an
    /// object of arguments.
    pub fn validate(&self) -> Result<(), ErrorBody> {
        if self.steps.is_empty() {
            return Err(invalid("the workflow has no steps"));
        }
        if self.steps.len() > MAX_WORKFLOW_STEPS {
            return Err(invalid(format!(
                "the workflow has {} steps; at most {MAX_WORKFLOW_STEPS} run in one job (split the rows \
                 into several runs or use a batch)",
                self.steps.len()
            )));
        }
        for (index, step) in self.steps.iter().enumerate() {
            step.validate()
                .map_err(|error| invalid(format!("step {}: {}", index + 1, error.message)))?;
        }
        Ok(())
    }

    /// The job message that stands for this workflow in the conversation.
    pub fn describe(&self) -> String {
        let tools: Vec<&str> = self.steps.iter().map(|step| step.tool.as_str()).collect();
        let shown = tools.iter().take(3).copied().collect::<Vec<_>>().join(", ");
        let more = if tools.len() > 3 {
            format!(", … ({} steps)", tools.len())
        } else {
            String::new()
        };
        match &self.name {
            Some(name) => format!("[workflow {name}] {shown}{more}"),
            None => format!("[run] {shown}{more}"),
        }
    }
}

impl WorkflowStep {
    /// The step's tool, when it is one a worker runs.
    pub fn tool_name(&self) -> Result<ToolName, ErrorBody> {
        match ToolName::parse(&self.tool) {
            Some(tool) if !tool.is_local() => Ok(tool),
            Some(tool) => Err(invalid(format!(
                "`{tool}` reads the job's own journal and has no meaning outside an agent job"
            ))),
            None => Err(invalid(format!(
                "unknown tool `{}`; the tools are listed in docs/tools.md",
                self.tool
            ))),
        }
    }

    fn validate(&self) -> Result<(), ErrorBody> {
        self.tool_name()?;
        if !self.args.is_object() {
            return Err(invalid(format!(
                "the arguments of `{}` must be a JSON object",
                self.tool
            )));
        }
        Ok(())
    }

    /// The checklist label: the step's name, else the tool and the file it names.
    pub fn label(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        match self.args.get("path").and_then(Value::as_str) {
            Some(path) => format!("{} {path}", self.tool),
            None => self.tool.clone(),
        }
    }
}

fn invalid(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(tool: &str, args: Value) -> WorkflowStep {
        WorkflowStep {
            tool: tool.into(),
            args,
            name: None,
        }
    }

    #[test]
    fn a_workflow_names_worker_tools_with_object_arguments() {
        let good = Workflow {
            name: None,
            steps: vec![step("table_export", serde_json::json!({"path": "a.csv"}))],
        };
        assert!(good.validate().is_ok());
        assert_eq!(good.steps[0].label(), "table_export a.csv");
        for bad in [
            Workflow {
                name: None,
                steps: vec![],
            },
            Workflow {
                name: None,
                steps: vec![step("rm_rf", serde_json::json!({}))],
            },
            Workflow {
                name: None,
                steps: vec![step("recall_tool_result", serde_json::json!({}))],
            },
            Workflow {
                name: None,
                steps: vec![step("table_export", serde_json::json!([1]))],
            },
        ] {
            assert_eq!(
                bad.validate().err().map(|error| error.code),
                Some(ErrorCode::ValidationFailed)
            );
        }
    }

    #[test]
    fn the_description_names_the_first_tools() {
        let workflow = Workflow {
            name: Some("invoice".into()),
            steps: vec![step("docx_operations", Value::Null); 5],
        };
        assert_eq!(
            workflow.describe(),
            "[workflow invoice] docx_operations, docx_operations, docx_operations, … (5 steps)"
        );
    }
}
