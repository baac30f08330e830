//! `{{variables}}` in workflows and batch messages, and the globs that pick batch targets.
//!
//! A variable is `{{name}}` (spaces inside the braces allowed) in any string of a step's
//! arguments or name; every variable must have a value, or the whole workflow is refused with
//! `VALIDATION_FAILED` naming the missing ones. A batch adds `workbench`, `file`, `file_stem`
//! and `index` for each target. `\{{` is a literal `{{` (for placeholders that belong to a
//! document, such as a template's `{{company}}`): `\{{company}}` renders as `{{company}}`.
//! Only workflow files and batch actions are templates: a single tool's `--args` is sent as
//! written.

use std::collections::{BTreeMap, BTreeSet};

use atelier_messages::batch::BatchAction;
use atelier_messages::workflow::Workflow;
use atelier_messages::{ErrorBody, ErrorCode};
use serde_json::Value;

/// Variable values by name.
pub type Vars = BTreeMap<String, String>;

/// The workflow with every `{{variable}}` replaced by its value.
pub fn render_workflow(workflow: &Workflow, vars: &Vars) -> Result<Workflow, ErrorBody> {
    let mut missing = BTreeSet::new();
    let mut rendered = workflow.clone();
    for step in &mut rendered.steps {
        render_value(&mut step.args, vars, &mut missing);
        if let Some(name) = &mut step.name {
            *name = fill(name, vars, &mut missing);
        }
    }
    refuse_missing(missing)?;
    Ok(rendered)
}

/// `text` with every `{{variable}}` replaced by its value.
pub fn render_text(text: &str, vars: &Vars) -> Result<String, ErrorBody> {
    let mut missing = BTreeSet::new();
    let rendered = fill(text, vars, &mut missing);
    refuse_missing(missing)?;
    Ok(rendered)
}

/// What one batch target's child job runs: its message, its model and, without a model, its
/// workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildAction {
    pub message: String,
    pub model: Option<String>,
    pub workflow: Option<Workflow>,
}

/// The batch's action for the target at `index` (`workbench`, and `file` for a batch over the
/// files of one workbench), with every variable filled.
pub fn render_action(
    action: &BatchAction,
    workbench: &str,
    file: Option<&str>,
    index: u64,
) -> Result<ChildAction, ErrorBody> {
    let model_free = |workflow: &Workflow, vars: &Vars| {
        let rendered = render_workflow(workflow, &target_vars(vars, workbench, file, index))?;
        rendered.validate()?;
        Ok::<_, ErrorBody>(ChildAction {
            message: rendered.describe(),
            model: None,
            workflow: Some(rendered),
        })
    };
    match action {
        BatchAction::Message { message, model } => Ok(ChildAction {
            message: render_text(message, &target_vars(&Vars::new(), workbench, file, index))?,
            model: model.clone(),
            workflow: None,
        }),
        BatchAction::Tool { tool, args } => {
            model_free(&Workflow::single(tool, args.clone()), &Vars::new())
        }
        BatchAction::Workflow { workflow, vars } => model_free(workflow, vars),
    }
}

/// The variables a batch gives each target.
pub fn target_vars(base: &Vars, workbench: &str, file: Option<&str>, index: u64) -> Vars {
    let mut vars = base.clone();
    vars.insert("workbench".into(), workbench.into());
    vars.insert("index".into(), index.to_string());
    if let Some(file) = file {
        let name = file.rsplit('/').next().unwrap_or(file);
        let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
        vars.insert("file".into(), file.into());
        vars.insert("file_stem".into(), stem.into());
    }
    vars
}

fn refuse_missing(missing: BTreeSet<String>) -> Result<(), ErrorBody> {
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = missing.into_iter().collect();
    let hint: Vec<String> = names.iter().map(|name| format!("--set {name}=…")).collect();
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "no value for {}; pass {} (or a CSV column of that name with --rows)",
            names
                .iter()
                .map(|name| format!("{{{{{name}}}}}"))
                .collect::<Vec<_>>()
                .join(", "),
            hint.join(" ")
        ),
    ))
}

fn render_value(value: &mut Value, vars: &Vars, missing: &mut BTreeSet<String>) {
    match value {
        Value::String(text) => *text = fill(text, vars, missing),
        Value::Array(items) => {
            for item in items {
                render_value(item, vars, missing);
            }
        }
        Value::Object(map) => {
            for item in map.values_mut() {
                render_value(item, vars, missing);
            }
        }
        _ => {}
    }
}

/// Replaces `{{name}}` occurrences and turns `\{{` into a literal `{{`; unknown names are
/// collected and left as they were.
fn fill(text: &str, vars: &Vars, missing: &mut BTreeSet<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        if rest[..open].ends_with('\\') {
            out.push_str(&rest[..open - 1]);
            out.push_str("{{");
            rest = &rest[open + 2..];
            continue;
        }
        let Some(close) = rest[open + 2..].find("}}") else {
            break;
        };
        let name = rest[open + 2..open + 2 + close].trim();
        out.push_str(&rest[..open]);
        match vars.get(name) {
            Some(value) => out.push_str(value),
            None => {
                missing.insert(name.to_string());
                out.push_str(&rest[open..open + 4 + close]);
            }
        }
        rest = &rest[open + 4 + close..];
    }
    out.push_str(rest);
    out
}

/// True when `path` matches `pattern`: `*` matches within one path segment, `**` across
/// segments (`**/` also matches no folder), `?` one character; everything else literally.
pub fn glob_matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let path: Vec<char> = path.chars().collect();
    matches_from(&pattern, &path)
}

fn matches_from(pattern: &[char], path: &[char]) -> bool {
    match pattern {
        [] => path.is_empty(),
        ['*', '*', '/', rest @ ..] => {
            matches_from(rest, path)
                || (0..path.len())
                    .filter(|&at| path[at] == '/')
                    .any(|at| matches_from(rest, &path[at + 1..]))
        }
        ['*', '*', rest @ ..] => (0..=path.len()).any(|at| matches_from(rest, &path[at..])),
        ['*', rest @ ..] => (0..=path.len())
            .take_while(|&at| at == 0 || path[at - 1] != '/')
            .any(|at| matches_from(rest, &path[at..])),
        ['?', rest @ ..] => path
            .split_first()
            .is_some_and(|(first, tail)| *first != '/' && matches_from(rest, tail)),
        [literal, rest @ ..] => path
            .split_first()
            .is_some_and(|(first, tail)| first == literal && matches_from(rest, tail)),
    }
}

#[cfg(test)]
mod tests {
    use atelier_messages::workflow::WorkflowStep;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn variables_are_filled_in_every_string_of_the_arguments() {
        let workflow = Workflow {
            name: None,
            steps: vec![WorkflowStep {
                tool: "docx_operations".into(),
                args: serde_json::json!({
                    "path": "{{ file }}",
                    "operations": [{"op": "replace_text", "search": "{{CUSTOMER}}", "replace": "{{customer}}"}],
                    "count": 3
                }),
                name: Some("fill {{file}}".into()),
            }],
        };
        let mut values = vars(&[("file", "a.docx"), ("customer", "ACME")]);
        values.insert("CUSTOMER".into(), "{{CUSTOMER}}".into());
        let rendered = render_workflow(&workflow, &values).expect("rendered");
        assert_eq!(rendered.steps[0].args["path"], "a.docx");
        assert_eq!(rendered.steps[0].args["operations"][0]["replace"], "ACME");
        assert_eq!(
            rendered.steps[0].args["operations"][0]["search"],
            "{{CUSTOMER}}"
        );
        assert_eq!(rendered.steps[0].args["count"], 3);
        assert_eq!(rendered.steps[0].name.as_deref(), Some("fill a.docx"));
    }

    #[test]
    fn a_missing_variable_is_refused_by_name() {
        let error = render_text("Dear {{name}}, {{ total }} due", &vars(&[("name", "x")]))
            .expect_err("missing");
        assert_eq!(error.code, ErrorCode::ValidationFailed);
        assert!(error.message.contains("{{total}}"), "{}", error.message);
        assert!(error.message.contains("--set total="), "{}", error.message);
        assert_eq!(
            render_text("no braces {{ here", &Vars::new())
                .ok()
                .as_deref(),
            Some("no braces {{ here")
        );
    }

    #[test]
    fn targets_get_their_workbench_file_and_stem() {
        let vars = target_vars(&Vars::new(), "q3", Some("in/report.v2.docx"), 7);
        assert_eq!(vars["workbench"], "q3");
        assert_eq!(vars["file"], "in/report.v2.docx");
        assert_eq!(vars["file_stem"], "report.v2");
        assert_eq!(vars["index"], "7");
    }

    #[test]
    fn an_escaped_placeholder_is_literal_and_a_typo_is_still_refused_by_name() {
        let values = vars(&[("company", "Acme Ltd")]);
        assert_eq!(
            render_text(r"replace \{{company}} with {{company}}", &values).ok(),
            Some("replace {{company}} with Acme Ltd".to_string())
        );
        assert_eq!(
            render_text(r"\{{ unknown }} stays", &Vars::new()).ok(),
            Some("{{ unknown }} stays".to_string())
        );
        let error = render_text(r"\{{company}} {{compnay}}", &values)
            .expect_err("a typo'd variable is refused");
        assert_eq!(error.code, ErrorCode::ValidationFailed);
        assert!(error.message.contains("{{compnay}}"), "{}", error.message);
    }

    #[test]
    fn each_action_renders_per_target_and_a_missing_variable_is_refused() {
        let tool = BatchAction::Tool {
            tool: "docx_operations".into(),
            args: serde_json::json!({"path": "{{file}}", "operations": []}),
        };
        let child = render_action(&tool, "w", Some("a/b.docx"), 3).expect("rendered");
        assert_eq!(child.model, None);
        let workflow = child.workflow.expect("model-free");
        assert_eq!(workflow.steps[0].args["path"], "a/b.docx");
        assert_eq!(child.message, workflow.describe());

        let message = BatchAction::Message {
            message: "Summarize {{workbench}}".into(),
            model: Some("local".into()),
        };
        let child = render_action(&message, "q3", None, 0).expect("rendered");
        assert_eq!(
            (child.message.as_str(), child.model.as_deref()),
            ("Summarize q3", Some("local"))
        );
        assert!(child.workflow.is_none());

        let missing = BatchAction::Tool {
            tool: "table_query".into(),
            args: serde_json::json!({"path": "{{nope}}"}),
        };
        let error = render_action(&missing, "w", None, 0).expect_err("missing");
        assert_eq!(error.code, ErrorCode::ValidationFailed);
    }

    #[test]
    fn globs_match_within_and_across_folders() {
        assert!(glob_matches("*.docx", "a.docx"));
        assert!(!glob_matches("*.docx", "in/a.docx"));
        assert!(glob_matches("**/*.docx", "a.docx"));
        assert!(glob_matches("**/*.docx", "in/deep/a.docx"));
        assert!(glob_matches("in/*.csv", "in/x.csv"));
        assert!(!glob_matches("in/*.csv", "in/x.csvx"));
        assert!(glob_matches("client-??", "client-07"));
        assert!(!glob_matches("client-??", "client-7"));
        assert!(glob_matches("**", "any/thing"));
        assert!(glob_matches("client-*", "client-"));
    }
}
