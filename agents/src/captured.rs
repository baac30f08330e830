//! Replies captured from a real model (Qwen2.5-Coder-0.5B-Instruct on llama-server; see
//! `tests/fixtures/qwen0.5b/README.md`), read by the parsers, judges and the provider exactly
//! as they arrived. Each fixture holds the request sent, the HTTP status and the raw body.

use serde_json::Value;

use crate::provider::Usage;

/// A captured exchange: the request and the raw answer (SSE text).
pub(crate) struct Captured {
    pub request: Value,
    pub body: String,
}

/// What a captured answer said: its text, finish reason and usage.
pub(crate) struct Reply {
    pub text: String,
    pub finish_reason: Option<String>,
    pub usage: Usage,
    /// Streamed native tool-call fragments.
    pub tool_call_deltas: usize,
}

/// The fixture `name` (a file of `tests/fixtures/qwen0.5b/`).
pub(crate) fn captured(name: &str) -> Captured {
    let path = format!(
        "{}/tests/fixtures/qwen0.5b/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(value["status"], 200, "{path}");
    let body = value["response"].as_str().unwrap_or_default().to_string();
    Captured {
        request: value["request"].take(),
        body,
    }
}

impl Captured {
    /// The streamed answer put together.
    pub(crate) fn reply(&self) -> Reply {
        let mut reply = Reply {
            text: String::new(),
            finish_reason: None,
            usage: Usage::default(),
            tool_call_deltas: 0,
        };
        let events = self
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .filter_map(|data| serde_json::from_str::<Value>(data).ok());
        for event in events {
            if let Some(usage) = event.get("usage").filter(|usage| !usage.is_null()) {
                reply.usage = Usage {
                    prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or_default(),
                    completion_tokens: usage["completion_tokens"].as_u64().unwrap_or_default(),
                };
            }
            for choice in event["choices"].as_array().into_iter().flatten() {
                let delta = &choice["delta"];
                reply
                    .text
                    .push_str(delta["content"].as_str().unwrap_or_default());
                reply.tool_call_deltas += delta["tool_calls"].as_array().map_or(0, Vec::len);
                if let Some(finish) = choice["finish_reason"].as_str() {
                    reply.finish_reason = Some(finish.to_string());
                }
            }
        }
        reply
    }

    /// The system prompt the request carried.
    pub(crate) fn system_prompt(&self) -> &str {
        self.request["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
    }
}

mod tests {
    use std::time::Duration;

    use super::*;
    use crate::catalog;
    use crate::degenerate::{self, Degenerate};
    use crate::http::test_server::{self, sse};
    use crate::openai::{ClientOptions, Flavor, OpenAiProvider, RetryPolicy};
    use crate::plan;
    use crate::provider::{ChatMessage, ModelProvider, ModelRequest, ToolChoice};
    use crate::text_tools::{Reading, ToolMode, read_reply};

    #[test]
    fn a_fenced_call_naming_a_file_as_its_tool_is_invalid_with_the_reason() {
        // Text mode, research: the model called the file `budget_notes` instead of a tool.
        let captured = captured("text-research-fenced-unknown-tool.json");
        let reply = captured.reply();
        assert!(
            reply
                .text
                .starts_with("```json\n{\n  \"tool\": \"budget_notes\"")
        );
        assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
        assert_eq!(reply.usage.prompt_tokens, 1659);
        let problem = research_problem(&reply.text);
        assert!(
            problem.starts_with("unknown tool `budget_notes`"),
            "{problem}"
        );
        assert_eq!(degenerate::repetition(&reply.text, false), None);
    }

    #[test]
    fn a_bare_made_up_object_is_an_answer_that_text_mode_corrects_when_a_call_is_required() {
        // Text mode, research's first turn (a call required): `{"count": 591}`, no call.
        let reply = captured("text-research-bare-object.json").reply();
        assert_eq!(reply.text, "{\"count\": 591}");
        let tools = catalog::research_tools();
        assert_eq!(
            read_reply(&reply.text, &tools),
            Reading::Answer("{\"count\": 591}".into())
        );
        let request = ModelRequest {
            resample: false,
            phase: "research".into(),
            item_index: None,
            messages: vec![ChatMessage::system("Research."), ChatMessage::user("Count")],
            tools,
            tool_choice: ToolChoice::Required,
            answer: crate::answer::AnswerShape::Text,
        };
        let mut turn =
            crate::turn::Turn::new(&request, ToolMode::Text, crate::provider::PromptStyle::Full);
        let response = crate::provider::ModelResponse {
            content: reply.text,
            finish_reason: reply.finish_reason,
            usage: reply.usage,
            ..Default::default()
        };
        assert!(matches!(turn.judge(response), Ok(None)), "corrected");
        let correction = &turn.messages()[turn.messages().len() - 1].content;
        assert!(
            correction.contains("this reply must call a tool"),
            "{correction}"
        );
        assert!(turn.is_retry());
    }

    #[test]
    fn garbled_plans_in_constrained_answers_are_not_checklists() {
        // Constrained mode: the answer object holds `12345` as the plan.
        let reply = captured("constrained-plan-number.json").reply();
        let tools = catalog::plan_tools();
        let Reading::Answer(answer) = read_reply(&reply.text, &tools) else {
            panic!("{}", reply.text)
        };
        assert_eq!(answer, "12345");
        assert!(plan::parse(&answer).is_empty());

        // After the format reminder it copied the reminder's example (data.csv is not a file
        // of this workbench): a numbered line, read as a one-item plan. The reminder now shows
        // placeholders instead of a concrete step.
        let copied = captured("constrained-plan-copied-example.json");
        let messages = copied.request["messages"].as_array().expect("messages");
        let reminder = messages[messages.len() - 1]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(
            reminder.contains("count the rows of data.csv"),
            "{reminder}"
        );
        let Reading::Answer(answer) = read_reply(&copied.reply().text, &tools) else {
            panic!("not an answer")
        };
        let items = plan::parse(&answer);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].label, "Count rows");
        assert!(items[0].description.contains("data.csv"));
    }

    #[test]
    fn runaway_fenced_calls_in_native_content_are_repetition_and_the_first_is_a_call() {
        // Native mode: no native call; fenced Hermes-style calls written as text until
        // `max_tokens` (512) cut the reply.
        let reply = captured("native-research-runaway-fenced-calls.json").reply();
        assert_eq!(reply.tool_call_deltas, 0);
        assert_eq!(reply.finish_reason.as_deref(), Some("length"));
        assert_eq!(reply.usage.completion_tokens, 512);
        assert_eq!(reply.text.matches("```json").count(), 16);
        let Some(Degenerate::Repetitive { repeats, .. }) =
            degenerate::repetition(&reply.text, true)
        else {
            panic!("not judged repetitive")
        };
        assert!(repeats >= 8, "{repeats}");
        // Read as text (auto mode), its first call is a valid one.
        match read_reply(&reply.text, &catalog::research_tools()) {
            Reading::Call {
                name,
                arguments,
                note,
            } => {
                assert_eq!(name, "get_file_info");
                assert_eq!(arguments["path"], "budget_notes.txt");
                assert!(note.is_some_and(|note| note.contains("tool calls")));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn growing_calls_to_an_unknown_tool_are_invalid() {
        // Native tools, a call required, the server's call parsing off: Hermes objects naming
        // `count_milestones`, each one a clause longer than the last, until `max_tokens`.
        let reply = captured("native-required-growing-calls.json").reply();
        assert_eq!(reply.finish_reason.as_deref(), Some("length"));
        assert!(reply.text.starts_with("{\"name\": \"count_milestones\""));
        // Not one line or tail repeats exactly, so it is not called repetition; text and auto
        // modes still refuse it, as a call to a tool that does not exist.
        assert_eq!(degenerate::repetition(&reply.text, true), None);
        let problem = research_problem(&reply.text);
        assert!(
            problem.contains("unknown tool `count_milestones`"),
            "{problem}"
        );
    }

    #[test]
    fn an_unparsed_bare_hermes_call_is_read_as_the_call() {
        let captured = captured("native-unparsed-bare-call.json");
        assert_eq!(captured.request["parse_tool_calls"], false);
        let reply = captured.reply();
        match read_reply(&reply.text, &catalog::research_tools()) {
            Reading::Call {
                name,
                arguments,
                note,
            } => {
                assert_eq!(name, "table_query");
                assert_eq!(arguments["query"], "SELECT count(*) FROM data");
                assert_eq!(note, None);
            }
            other => panic!("{other:?}"),
        }
    }

    /// The problem a research reply's call has, as text mode tells the model.
    fn research_problem(text: &str) -> String {
        match read_reply(text, &catalog::research_tools()) {
            Reading::Invalid(problem) => problem,
            other => panic!("{other:?}"),
        }
    }

    fn qwen(base: &str, mode: ToolMode) -> OpenAiProvider {
        OpenAiProvider::new(
            Flavor::Compatible,
            base,
            "qwen2.5-coder-0.5b-instruct",
            ClientOptions {
                tool_mode: mode,
                idle_timeout: Duration::from_secs(10),
                ..ClientOptions::new(RetryPolicy::new(0))
            },
        )
        .expect("provider")
    }

    fn research_request() -> ModelRequest {
        ModelRequest {
            resample: false,
            phase: "research".into(),
            item_index: None,
            messages: vec![
                ChatMessage::system("Research."),
                ChatMessage::user("Total the budget."),
            ],
            tools: catalog::research_tools(),
            tool_choice: ToolChoice::Auto,
            answer: crate::answer::AnswerShape::Text,
        }
    }

    #[tokio::test]
    async fn the_captured_stream_fails_native_mode_as_degenerate_with_its_tokens_counted() {
        let body = captured("native-research-runaway-fenced-calls.json").body;
        let (address, received) =
            test_server::serve("/v1/chat/completions", move |_| sse(vec![body.clone()])).await;
        let provider = qwen(&format!("{address}/v1"), ToolMode::Native);
        let error = provider
            .complete(&research_request(), &|_: &str| {})
            .await
            .expect_err("degenerate");
        assert_eq!(
            error.code(),
            atelier_messages::ErrorCode::ModelOutputDegenerate
        );
        assert_eq!(received.count(), 2, "the reply, then once after a nudge");
        assert_eq!(
            error.spent(),
            Some(Usage {
                prompt_tokens: 2 * 2079,
                completion_tokens: 2 * 512
            })
        );
    }

    #[tokio::test]
    async fn the_captured_stream_gives_auto_mode_its_first_call() {
        let captured = captured("native-research-runaway-fenced-calls.json");
        assert!(captured.system_prompt().contains("Research phase"));
        let body = captured.body;
        let (address, received) =
            test_server::serve("/v1/chat/completions", move |_| sse(vec![body.clone()])).await;
        let provider = qwen(&format!("{address}/v1"), ToolMode::Auto);
        let response = provider
            .complete(&research_request(), &|_: &str| {})
            .await
            .expect("a call");
        assert_eq!(received.count(), 1);
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].name, "get_file_info");
        assert_eq!(
            response.tool_calls[0].arguments,
            "{\"path\":\"budget_notes.txt\"}"
        );
    }

    #[test]
    fn a_schema_bound_plan_can_still_run_away_inside_a_field_and_is_not_taken_as_a_plan() {
        // Constrained, compact, launch-count's plan: the object is right, then the description
        // repeats `.0` until max_tokens cuts it.
        let reply = captured("constrained-plan-object.json").reply();
        assert_eq!(reply.finish_reason.as_deref(), Some("length"));
        assert!(
            reply
                .text
                .starts_with("{\n  \"tool\": null,\n  \"answer\": {\"items\"")
        );
        assert!(
            degenerate::repetition(&reply.text, true).is_some(),
            "a runaway cut by the length limit is degenerate: the turn is nudged"
        );
        assert!(!matches!(
            read_reply(&reply.text, &[]),
            Reading::Answer(ref text) if !plan::parse(text).is_empty()
        ));
    }

    /// The tool call a captured implement-phase reply makes (its name and arguments).
    fn implement_call(captured: &Captured) -> (String, serde_json::Map<String, Value>) {
        let reply = captured.reply();
        match read_reply(&reply.text, &catalog::implement_tools()) {
            Reading::Call {
                name, arguments, ..
            } => (name, arguments),
            other => panic!("{other:?}: {}", reply.text),
        }
    }

    #[test]
    fn a_written_count_is_grounded_in_the_map_the_prompt_showed() {
        // Constrained, compact, launch-count's writing turn: `write_text_file count.txt "5"`,
        // the number the one-line map shows (`5 data rows …`).
        let captured = captured("constrained-write-count.json");
        let (name, arguments) = implement_call(&captured);
        assert_eq!(name, "write_text_file");
        assert_eq!(arguments["path"], "count.txt");
        assert_eq!(arguments["content"], "5");
        let system = captured.system_prompt();
        assert!(
            system.contains("5 data rows (the header row not counted)"),
            "{system}"
        );
        // The schema the server decoded under offered only write_text_file, bound to count.txt.
        let shapes = captured.request["response_format"]["json_schema"]["schema"]["anyOf"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(shapes.len(), 1);
        assert_eq!(
            shapes[0]["properties"]["parameters"]["properties"]["path"]["enum"],
            serde_json::json!(["count.txt"])
        );
    }

    #[test]
    fn a_schema_bound_replacement_can_still_replace_a_placeholder_with_itself() {
        // Constrained, compact, invoice-fill's writing turn: every field the schema asks for,
        // and `{{company}}` replaced by `{{company}}`: valid, and useless. The item's target
        // check and eval's checks are what catch it.
        let (name, arguments) =
            implement_call(&captured("constrained-docx-replace-with-itself.json"));
        assert_eq!(name, "docx_operations");
        let operations = arguments["operations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(operations.len(), 3);
        assert!(operations.iter().all(|op| op["search"] == op["replace"]));
    }
}
