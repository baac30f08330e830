//! The tool catalog: what the model may call, where it runs, and what it may touch.
//!
//! Names, parameters and descriptions follow the seed contracts (docs/tools.md).

mod office;
mod tabular;

use atelier_messages::tool::Pool;
use serde::Serialize;
use serde_json::{Value, json};

/// What a tool may do to the workbench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Read,
    Write,
    Create,
}

/// How consequential a call is (destructive calls need approval).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    Navigational,
    Additive,
    Destructive,
}

/// One tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON schema of the arguments object.
    pub parameters: Value,
    pub pool: Pool,
    pub capability: Capability,
    pub action_class: ActionClass,
}

impl ToolSpec {
    pub fn is_read_only(&self) -> bool {
        self.capability == Capability::Read
    }
}

fn path_param() -> Value {
    json!({"type": "string", "description": "Workbench file path"})
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// Every tool, in a stable order.
pub fn catalog() -> Vec<ToolSpec> {
    let mut tools = office::tools();
    tools.extend(tabular::tools());
    tools
}

/// Looks a tool up by name.
pub fn find(name: &str) -> Option<ToolSpec> {
    catalog().into_iter().find(|spec| spec.name == name)
}

/// Tools the Research phase may use (read-only).
pub fn research_tools() -> Vec<ToolSpec> {
    catalog()
        .into_iter()
        .filter(ToolSpec::is_read_only)
        .collect()
}

/// Tools the Plan phase may use.
pub fn plan_tools() -> Vec<ToolSpec> {
    catalog()
        .into_iter()
        .filter(|spec| spec.name == "read_file")
        .collect()
}

/// Tools the Implement phase may use (all of them).
pub fn implement_tools() -> Vec<ToolSpec> {
    catalog()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn research_tools_are_read_only_and_include_table_map() {
        let names: Vec<_> = research_tools().iter().map(|spec| spec.name).collect();
        assert!(names.contains(&"table_get_map"));
        assert!(!names.contains(&"table_export"));
        assert!(!names.contains(&"write_text_file"));
    }

    #[test]
    fn every_schema_is_an_object_with_known_required_fields() {
        for spec in catalog() {
            let properties = spec.parameters["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for required in spec.parameters["required"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let key = required.as_str().unwrap_or_default();
                assert!(properties.contains_key(key), "{}: {key}", spec.name);
            }
        }
    }
}
