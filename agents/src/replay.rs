//! A deterministic scripted provider for demos and tests (`replay:FILE`).
//!
//! The answer depends on the request alone: the key is the phase, the plan item (implement
//! phase) and the turn, which is the number of assistant messages already in the conversation.
//! A restarted coordinator therefore gets the same answer for the same turn. A turn the script
//! does not cover is answered with "Done." and no tool calls, which ends the phase.
//! The file format is described in `docs/replay.md`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::AgentError;
use crate::provider::{
    DeltaSink, ModelProvider, ModelRequest, ModelResponse, Role, ToolCall, Usage,
};

/// The answer to a turn the script does not cover.
const FALLBACK_CONTENT: &str = "Done.";

/// The scripted answers, per phase and turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayScript {
    #[serde(default)]
    pub research: Vec<ReplayTurn>,
    #[serde(default)]
    pub plan: Vec<ReplayTurn>,
    /// Turns per plan item (1-based item number).
    #[serde(default)]
    pub implement: BTreeMap<u32, Vec<ReplayTurn>>,
    #[serde(default)]
    pub summary: Vec<ReplayTurn>,
}

impl ReplayScript {
    /// The scripted turns of a phase (and item, in the implement phase).
    fn turns(&self, phase: &str, item_index: Option<u32>) -> &[ReplayTurn] {
        match phase {
            "research" => &self.research,
            "plan" => &self.plan,
            "implement" => item_index
                .and_then(|item| self.implement.get(&item))
                .map_or(&[], Vec::as_slice),
            "summary" => &self.summary,
            _ => &[],
        }
    }
}

/// One scripted model answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayTurn {
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tool_calls: Vec<ReplayToolCall>,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayToolCall {
    pub name: String,
    /// The arguments object (sent to the tool as its JSON text).
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

/// Plays a [`ReplayScript`] back, turn by turn.
#[derive(Debug, Clone)]
pub struct ReplayProvider {
    label: String,
    script: ReplayScript,
}

impl ReplayProvider {
    /// Reads a script from a JSON file.
    pub fn load(path: &Path) -> Result<Self, AgentError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AgentError::Replay(format!("cannot read {}: {e}", path.display())))?;
        let script = serde_json::from_str(&text).map_err(|e| {
            AgentError::Replay(format!(
                "{} is not a valid replay script (see docs/replay.md): {e}",
                path.display()
            ))
        })?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(Self {
            label: format!("replay:{name}"),
            script,
        })
    }

    /// Plays a script built in code.
    pub fn from_script(script: ReplayScript) -> Self {
        Self {
            label: "replay:inline".to_string(),
            script,
        }
    }

    /// The answer for a request, without side effects.
    fn answer(&self, request: &ModelRequest) -> ModelResponse {
        let turn = request
            .messages
            .iter()
            .filter(|message| message.role == Role::Assistant)
            .count();
        let Some(scripted) = self
            .script
            .turns(&request.phase, request.item_index)
            .get(turn)
        else {
            return ModelResponse {
                content: FALLBACK_CONTENT.to_string(),
                tool_calls: Vec::new(),
                finish_reason: Some("stop".to_string()),
                usage: Usage::default(),
            };
        };
        let tool_calls: Vec<ToolCall> = scripted
            .tool_calls
            .iter()
            .enumerate()
            .map(|(k, call)| ToolCall {
                id: call_id(request, turn, k),
                name: call.name.clone(),
                arguments: Value::Object(call.arguments.clone()).to_string(),
            })
            .collect();
        let finish_reason = if tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        ModelResponse {
            content: scripted.content.clone(),
            tool_calls,
            finish_reason: Some(finish_reason.to_string()),
            usage: Usage::default(),
        }
    }
}

/// `replay-{phase}-{item or 0}-{turn}-{k}`.
fn call_id(request: &ModelRequest, turn: usize, k: usize) -> String {
    format!(
        "replay-{}-{}-{turn}-{k}",
        request.phase,
        request.item_index.unwrap_or(0)
    )
}

#[async_trait::async_trait]
impl ModelProvider for ReplayProvider {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let response = self.answer(request);
        // Word by word, whitespace kept, so the pieces add up to the content.
        for word in response.content.split_inclusive(char::is_whitespace) {
            on_delta(word);
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::provider::{ChatMessage, ToolChoice};

    fn script() -> ReplayScript {
        serde_json::from_value(json!({
            "research": [
                {"content": "Let me look.", "tool_calls": [
                    {"name": "table_get_map", "arguments": {"path": "sales.csv"}},
                    {"name": "list_files"}
                ]},
                {"content": "Findings: sales.csv has 3 regions."}
            ],
            "plan": [{"content": "- [ ] 1. Summarize — export totals by region to summary.xlsx"}],
            "implement": {
                "1": [
                    {"tool_calls": [{"name": "table_export", "arguments": {"path": "summary.xlsx"}}]},
                    {"content": "Exported."}
                ],
                "2": [{"content": "Item two."}]
            },
            "summary": [{"content": "I exported the totals."}]
        }))
        .expect("script")
    }

    /// A request in `phase` with `assistant_turns` earlier assistant messages.
    fn request(phase: &str, item_index: Option<u32>, assistant_turns: usize) -> ModelRequest {
        let mut messages = vec![ChatMessage::system("sys"), ChatMessage::user("task")];
        for turn in 0..assistant_turns {
            messages.push(ChatMessage::assistant(format!("turn {turn}"), Vec::new()));
            messages.push(ChatMessage::user("go on"));
        }
        ModelRequest {
            resample: false,
            phase: phase.into(),
            item_index,
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            answer: crate::answer::AnswerShape::Text,
        }
    }

    async fn run(provider: &ReplayProvider, request: &ModelRequest) -> (ModelResponse, String) {
        let deltas = Mutex::new(String::new());
        let sink = |text: &str| deltas.lock().expect("lock").push_str(text);
        let response = provider.complete(request, &sink).await.expect("replay");
        let text = deltas.lock().expect("lock").clone();
        (response, text)
    }

    #[tokio::test]
    async fn replay_research_turns_follow_the_assistant_message_count() {
        let provider = ReplayProvider::from_script(script());
        let (first, deltas) = run(&provider, &request("research", None, 0)).await;
        assert_eq!(first.content, "Let me look.");
        assert_eq!(deltas, "Let me look.");
        assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            first.tool_calls,
            vec![
                ToolCall {
                    id: "replay-research-0-0-0".into(),
                    name: "table_get_map".into(),
                    arguments: r#"{"path":"sales.csv"}"#.into(),
                },
                ToolCall {
                    id: "replay-research-0-0-1".into(),
                    name: "list_files".into(),
                    arguments: "{}".into(),
                },
            ]
        );
        assert_eq!(first.usage, Usage::default());

        let (second, _) = run(&provider, &request("research", None, 1)).await;
        assert_eq!(second.content, "Findings: sales.csv has 3 regions.");
        assert!(second.tool_calls.is_empty());
        assert_eq!(second.finish_reason.as_deref(), Some("stop"));
    }

    #[tokio::test]
    async fn replay_answers_are_deterministic_for_the_same_request() {
        let provider = ReplayProvider::from_script(script());
        let request = request("research", None, 0);
        let (first, _) = run(&provider, &request).await;
        let (again, _) = run(&ReplayProvider::from_script(script()), &request).await;
        assert_eq!(first, again);
    }

    #[tokio::test]
    async fn replay_implement_is_keyed_by_item() {
        let provider = ReplayProvider::from_script(script());
        let (item1, _) = run(&provider, &request("implement", Some(1), 0)).await;
        assert_eq!(item1.tool_calls.len(), 1);
        assert_eq!(item1.tool_calls[0].id, "replay-implement-1-0-0");
        assert_eq!(item1.tool_calls[0].name, "table_export");
        let (item1_done, _) = run(&provider, &request("implement", Some(1), 1)).await;
        assert_eq!(item1_done.content, "Exported.");
        let (item2, _) = run(&provider, &request("implement", Some(2), 0)).await;
        assert_eq!(item2.content, "Item two.");
    }

    #[tokio::test]
    async fn replay_missing_turns_answer_done_without_tool_calls() {
        let provider = ReplayProvider::from_script(script());
        for request in [
            request("research", None, 2),
            request("implement", Some(3), 0),
            request("implement", None, 0),
            request("summary", None, 1),
            request("unknown", None, 0),
        ] {
            let (response, deltas) = run(&provider, &request).await;
            assert_eq!(response.content, "Done.", "{}", request.phase);
            assert_eq!(deltas, "Done.");
            assert!(response.tool_calls.is_empty());
            assert_eq!(response.finish_reason.as_deref(), Some("stop"));
        }
    }

    #[tokio::test]
    async fn replay_streams_content_word_by_word() {
        let provider = ReplayProvider::from_script(script());
        let pieces = Mutex::new(Vec::new());
        let sink = |text: &str| pieces.lock().expect("lock").push(text.to_string());
        let response = provider
            .complete(&request("plan", None, 0), &sink)
            .await
            .expect("replay");
        let pieces = pieces.lock().expect("lock").clone();
        assert!(pieces.len() > 5);
        assert_eq!(pieces.concat(), response.content);
    }

    #[tokio::test]
    async fn replay_loads_a_file_and_labels_it_by_name() {
        let path = temp_path("ok.json");
        let text = serde_json::to_string(&script()).expect("json");
        std::fs::write(&path, text).expect("write");
        let provider = ReplayProvider::load(&path).expect("load");
        let _ = std::fs::remove_file(&path);
        let name = path.file_name().expect("name").to_string_lossy();
        assert_eq!(provider.label(), format!("replay:{name}"));
        let (summary, _) = run(&provider, &request("summary", None, 0)).await;
        assert_eq!(summary.content, "I exported the totals.");
    }

    #[test]
    fn replay_bad_files_are_replay_errors_naming_the_path() {
        let missing = temp_path("missing.json");
        let error = ReplayProvider::load(&missing).expect_err("missing");
        assert!(
            matches!(error, AgentError::Replay(ref m) if m.contains(&missing.display().to_string())),
            "{error}"
        );

        for (name, text) in [
            ("invalid.json", "{ not json"),
            ("typo.json", r#"{"reserch": []}"#),
            (
                "args.json",
                r#"{"plan": [{"tool_calls": [{"name": "x", "arguments": "[1]"}]}]}"#,
            ),
        ] {
            let path = temp_path(name);
            std::fs::write(&path, text).expect("write");
            let error = ReplayProvider::load(&path).expect_err(name);
            let _ = std::fs::remove_file(&path);
            assert!(
                matches!(error, AgentError::Replay(ref m) if m.contains(&path.display().to_string())),
                "{error}"
            );
        }
    }

    #[test]
    fn replay_docs_example_is_a_valid_script() {
        let docs = include_str!("../../docs/replay.md");
        let example = docs
            .split("```json\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a json block in docs/replay.md");
        let script: ReplayScript = serde_json::from_str(example).expect("example parses");
        assert_eq!(script.research.len(), 2);
        assert_eq!(script.implement.len(), 2);
        assert_eq!(script.summary.len(), 1);
    }

    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("atelier-replay-{}-{name}", std::process::id()))
    }
}
