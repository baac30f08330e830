//! What a tool is: its name, description and argument schema, what it may touch and how
//! consequential a call is; with the schema helpers the tool lists share.

use atelier_messages::approval::ActionClass;
use atelier_messages::tool::{Pool, ToolName};
use serde_json::{Value, json};

/// What a tool may do to the workbench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    Read,
    Write,
    Create,
}

/// One tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: ToolName,
    pub description: &'static str,
    /// JSON schema of the arguments object.
    pub parameters: Value,
    pub capability: Capability,
    /// The class of a typical call; [`classify`](super::classify) decides each call's own.
    pub action_class: ActionClass,
}

impl ToolSpec {
    pub(super) fn new(
        name: ToolName,
        description: &'static str,
        parameters: Value,
        capability: Capability,
        action_class: ActionClass,
    ) -> Self {
        Self {
            name,
            description,
            parameters,
            capability,
            action_class,
        }
    }

    /// A tool that only reads (navigational).
    pub(super) fn read_only(name: ToolName, description: &'static str, parameters: Value) -> Self {
        Self::new(
            name,
            description,
            parameters,
            Capability::Read,
            ActionClass::Navigational,
        )
    }

    /// The pool whose workers run this tool; `None` for a local tool (answered by the driver).
    pub fn pool(&self) -> Option<Pool> {
        self.name.pool()
    }

    pub fn is_read_only(&self) -> bool {
        self.capability == Capability::Read
    }

    /// This tool with only the parameters it requires (at the top level; an operation's own
    /// fields stay): a small model fills every optional field it is offered, with made-up
    /// values (`range: "1:1249.50"` on a document, `copy_from` set to a sentence).
    pub fn required_only(&self) -> Self {
        let mut spec = self.clone();
        let required: Vec<String> = spec.parameters["required"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(|name| name.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if required.is_empty() {
            return spec;
        }
        if let Some(properties) = spec
            .parameters
            .get_mut("properties")
            .and_then(Value::as_object_mut)
        {
            properties.retain(|name, _| required.contains(name));
        }
        spec
    }
}

/// The `path` argument most tools take.
pub(super) fn path_param() -> Value {
    json!({"type": "string", "description": "Workbench file path"})
}

/// The arguments of a tool that takes only a `path`.
pub(super) fn path_only() -> Value {
    object(json!({"path": path_param()}), &["path"])
}

/// An object schema with these properties, of which `required` must be given.
pub(super) fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}
