//! The client against a Chat Completions stand-in: streaming, tool calls, plain JSON answers,
//! retries, failures that must not leak the API key; tool modes, in-turn corrections and
//! nudges, and the idle timeout.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;

use serde_json::{Value, json};

use super::*;
use crate::AgentError;
use crate::catalog::catalog;
use crate::http::ReasoningEffort;
use crate::http::test_server::{self, Received, run, simple_request, sse, status};
use crate::provider::{ChatMessage, ModelRequest, ToolCall, ToolChoice, Usage};
use crate::text_tools::ToolMode;
use crate::turn::REPLAYED_CUT_CHARS;

const KEY: &str = "sk-test-secret-123";

/// Starts a Chat Completions stand-in; `respond(n)` answers the n-th request (0-based).
async fn serve<F>(respond: F) -> (String, Received)
where
    F: Fn(usize) -> Response + Clone + Send + Sync + 'static,
{
    let (address, received) = test_server::serve("/v1/chat/completions", respond).await;
    (format!("{address}/v1"), received)
}

fn event(value: Value) -> String {
    format!("data: {value}\n\n")
}

fn text_stream() -> Response {
    sse(vec![
        ": keep-alive\n\n".to_string(),
        event(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})),
        event(json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})),
        // One event split over two chunks, with CRLF line ends.
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"con".to_string(),
        "tent\": \"lo \"}}]}\r\n\r\n".to_string(),
        event(
            json!({"choices": [{"index": 0, "delta": {"content": "world"}, "finish_reason": null}]}),
        ),
        event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
        event(json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})),
        "data: [DONE]\n\n".to_string(),
    ])
}

/// Options with a short timeout and millisecond backoffs.
fn options(api_key: Option<&str>, max_retries: u32) -> ClientOptions {
    ClientOptions {
        api_key: api_key.map(str::to_string),
        idle_timeout: Duration::from_secs(10),
        ..ClientOptions::new(RetryPolicy {
            max_retries,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
        })
    }
}

fn provider(base: &str, max_retries: u32) -> OpenAiProvider {
    OpenAiProvider::new(
        Flavor::OpenAi,
        base,
        "gpt-4o-mini",
        options(Some(KEY), max_retries),
    )
    .expect("provider")
}

#[tokio::test]
async fn openai_streams_text_deltas_usage_and_finish_reason() {
    let (base, received) = serve(|_| text_stream()).await;
    let provider = provider(&base, 0);
    let (result, deltas) = run(&provider, &simple_request()).await;
    let response = result.expect("completion");
    assert_eq!(response.content, "Hello world");
    assert_eq!(deltas, response.content);
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 12,
            completion_tokens: 3
        }
    );
    assert!(response.tool_calls.is_empty());

    let body = received.body(0);
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["top_p"], 1.0);
    assert!(body.get("reasoning_effort").is_none());
    // A turn after the loop's calls failed samples as a retry does.
    let resample = ModelRequest {
        resample: true,
        ..simple_request()
    };
    let (result, _) = run(&provider, &resample).await;
    result.expect("completion");
    assert_eq!(received.body(1)["temperature"], 0.6);
    assert!(body.get("tools").is_none());
    assert!(body.get("tool_choice").is_none());
    assert!(body.get("parallel_tool_calls").is_none());
    assert_eq!(
        received.header(0, "authorization").as_deref(),
        Some("Bearer sk-test-secret-123")
    );
}

#[tokio::test]
async fn openai_assembles_tool_calls_and_sends_the_openai_request_shape() {
    let (base, received) = serve(|_| {
        sse(vec![
            event(
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null,
                "tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                    "function": {"name": "table_get_map", "arguments": ""}}]}}]}),
            ),
            event(json!({"choices": [{"index": 0, "delta": {
                "tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": "}}]}}]})),
            event(json!({"choices": [{"index": 0, "delta": {
                "tool_calls": [{"index": 0, "function": {"arguments": "\"sales.csv\"}"}}]}}]})),
            event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            // No [DONE]: a finish reason is enough.
        ])
    })
    .await;
    let provider = provider(&base, 0);
    let earlier = ToolCall {
        id: "call_1".into(),
        name: "list_files".into(),
        arguments: "{}".into(),
    };
    let request = ModelRequest {
        resample: false,
        phase: "research".into(),
        item_index: None,
        messages: vec![
            ChatMessage::system("Research."),
            ChatMessage::user("Summarize sales.csv"),
            ChatMessage::assistant("", vec![earlier]),
            ChatMessage::tool_result("call_1", "[\"sales.csv\"]"),
        ],
        tools: catalog().into_iter().take(3).collect(),
        tool_choice: ToolChoice::Required,
        answer: crate::answer::AnswerShape::Text,
    };
    let (result, deltas) = run(&provider, &request).await;
    let response = result.expect("completion");
    assert_eq!(deltas, "");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "call_abc".into(),
            name: "table_get_map".into(),
            arguments: "{\"path\": \"sales.csv\"}".into(),
        }]
    );

    let body = received.body(0);
    assert_eq!(body["stream"], true);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["parallel_tool_calls"], false);
    let tools = body["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "list_files");
    assert!(tools[0]["function"]["description"].is_string());
    assert_eq!(tools[0]["function"]["parameters"]["type"], "object");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "Research."})
    );
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "list_files", "arguments": "{}"}}]})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "content": "[\"sales.csv\"]", "tool_call_id": "call_1"})
    );
}

#[tokio::test]
async fn a_reasoning_model_gets_its_effort_and_no_sampling_parameters() {
    let (base, received) = serve(|_| text_stream()).await;
    let options = ClientOptions {
        reasoning_effort: Some(ReasoningEffort::Low),
        ..options(Some(KEY), 0)
    };
    let provider =
        OpenAiProvider::new(Flavor::OpenAi, &base, "o4-mini", options).expect("provider");
    let (result, _) = run(&provider, &simple_request()).await;
    assert!(result.is_ok(), "{result:?}");
    let body = received.body(0);
    assert_eq!(body["reasoning_effort"], "low");
    assert!(body.get("temperature").is_none() && body.get("top_p").is_none());
}

#[tokio::test]
async fn openai_accepts_a_non_streaming_json_answer() {
    let (base, _) = serve(|_| {
        let body = json!({
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Looking.",
                "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "list_files", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}
        });
        status(
            200,
            &[("content-type", "application/json")],
            &body.to_string(),
        )
    })
    .await;
    let (result, deltas) = run(&provider(&base, 0), &simple_request()).await;
    let response = result.expect("completion");
    assert_eq!(response.content, "Looking.");
    assert_eq!(deltas, "Looking.");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "list_files");
    assert_eq!(response.usage.completion_tokens, 2);
}

/// The first request refused for the rate (429, `Retry-After: 0`), the others answered.
fn refused_once_then_streams(n: usize) -> Response {
    if n == 0 {
        status(
            429,
            &[("retry-after", "0")],
            r#"{"error":{"message":"slow down"}}"#,
        )
    } else {
        text_stream()
    }
}

#[tokio::test]
async fn openai_retries_429_honouring_retry_after() {
    let (base, received) = serve(refused_once_then_streams).await;
    let (result, _) = run(&provider(&base, 3), &simple_request()).await;
    assert_eq!(result.expect("completion").content, "Hello world");
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn openai_gives_up_on_persistent_429_as_rate_limited() {
    let (base, received) = serve(|_| {
        status(
            429,
            &[("retry-after", "0")],
            r#"{"error":{"message":"quota"}}"#,
        )
    })
    .await;
    let (result, _) = run(&provider(&base, 1), &simple_request()).await;
    let error = result.expect_err("rate limited");
    assert!(
        matches!(error, AgentError::RateLimited(ref m) if m.contains("quota")),
        "{error}"
    );
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn openai_gives_up_on_500_after_max_retries() {
    let (base, received) = serve(|_| status(500, &[], "upstream broke")).await;
    let (result, _) = run(&provider(&base, 2), &simple_request()).await;
    let error = result.expect_err("unavailable");
    assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
    assert_eq!(received.count(), 3);
}

#[tokio::test]
async fn openai_does_not_retry_401_and_keeps_the_key_out_of_errors() {
    let (base, received) = serve(|_| {
        let body = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#);
        status(401, &[("content-type", "application/json")], &body)
    })
    .await;
    let provider = provider(&base, 3);
    let (result, _) = run(&provider, &simple_request()).await;
    let error = result.expect_err("auth failed");
    assert!(matches!(error, AgentError::AuthFailed(_)), "{error}");
    assert!(error.to_string().contains("Incorrect API key"), "{error}");
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(!format!("{provider:?}").contains(KEY));
    assert_eq!(received.count(), 1);
}

#[tokio::test]
async fn openai_reports_other_4xx_with_the_server_message() {
    let (base, received) = serve(|_| {
        status(
            400,
            &[],
            r#"{"error":{"message":"Invalid schema for function"}}"#,
        )
    })
    .await;
    let (result, _) = run(&provider(&base, 3), &simple_request()).await;
    let error = result.expect_err("bad request");
    assert!(
        matches!(error, AgentError::RequestRefused { status: 400, ref message } if message.contains("Invalid schema for function")),
        "{error}"
    );
    assert_eq!(received.count(), 1);
}

#[tokio::test]
async fn openai_treats_an_empty_stream_as_unavailable() {
    let (base, received) = serve(|_| sse(vec![": keep-alive\n\n".to_string()])).await;
    let (result, _) = run(&provider(&base, 1), &simple_request()).await;
    let error = result.expect_err("unavailable");
    assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn openai_connection_errors_are_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let (result, _) = run(
        &provider(&format!("http://{addr}/v1"), 1),
        &simple_request(),
    )
    .await;
    let error = result.expect_err("unavailable");
    assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
}

// ---------------------------------------------------------------------------------------------
// Tool modes, turn limits

/// A compatible-server provider in `mode` with `idle` as its idle timeout.
fn provider_in(base: &str, mode: ToolMode, idle: Duration, max_retries: u32) -> OpenAiProvider {
    OpenAiProvider::new(
        Flavor::Compatible,
        base,
        "qwen2.5-coder-0.5b-instruct",
        ClientOptions {
            idle_timeout: idle,
            tool_mode: mode,
            ..options(None, max_retries)
        },
    )
    .expect("provider")
}

/// A streamed text reply with its usage.
fn text_reply(content: &str, finish: &str, prompt_tokens: u64, completion_tokens: u64) -> Response {
    sse(vec![
        event(
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}]}),
        ),
        event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})),
        event(
            json!({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}),
        ),
        "data: [DONE]\n\n".to_string(),
    ])
}

fn tool_request(tool_choice: ToolChoice) -> ModelRequest {
    ModelRequest {
        resample: false,
        phase: "research".into(),
        item_index: None,
        messages: vec![
            ChatMessage::system("Research the workbench."),
            ChatMessage::user("How many rows has sales.csv?"),
        ],
        tools: crate::catalog::research_tools(),
        tool_choice,
        answer: crate::answer::AnswerShape::Text,
    }
}

const SEED_CALL: &str = "```json\n{\"tool\": \"table_get_map\", \"parameters\": {\"path\": \"sales.csv\"}, \"terminate\": false}\n```";

#[tokio::test]
async fn text_mode_reads_a_seed_call_and_sends_the_catalog_instead_of_tools() {
    let (base, received) = serve(|_| text_reply(SEED_CALL, "stop", 300, 20)).await;
    let provider = provider_in(&base, ToolMode::Text, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &tool_request(ToolChoice::Required)).await;
    let response = result.expect("completion");
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "call_t1".into(),
            name: "table_get_map".into(),
            arguments: "{\"path\":\"sales.csv\"}".into(),
        }]
    );
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 300,
            completion_tokens: 20
        }
    );
    let body = received.body(0);
    assert!(body.get("tools").is_none(), "{body}");
    assert!(body.get("tool_choice").is_none(), "{body}");
    assert!(body.get("response_format").is_none(), "{body}");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().expect("system text");
    assert!(
        system.starts_with("Research the workbench.\n\n# Tools"),
        "{system}"
    );
    assert!(system.contains("\n## table_query\n"), "{system}");
    assert!(
        system.contains(r#"{"tool": "TOOL_NAME", "parameters": {...}, "terminate": false}"#),
        "{system}"
    );
}

#[tokio::test]
async fn text_mode_tells_the_model_what_was_wrong_and_counts_both_requests() {
    let (base, received) = serve(|n| {
        if n == 0 {
            text_reply(
                "{\"tool\": \"table_query\", \"parameters\": {\"query\": \"SELECT COUNT(*) FROM data\"}, \"terminate\": false}",
                "stop",
                300,
                25,
            )
        } else {
            text_reply(SEED_CALL, "stop", 380, 20)
        }
    })
    .await;
    let provider = provider_in(&base, ToolMode::Text, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &tool_request(ToolChoice::Auto)).await;
    let response = result.expect("completion");
    assert_eq!(response.tool_calls[0].name, "table_get_map");
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 680,
            completion_tokens: 45
        }
    );
    assert_eq!(received.count(), 2);
    assert_eq!(received.body(0)["temperature"], 0.0);
    let retry = received.body(1);
    assert_eq!(
        retry["temperature"], 0.6,
        "a retry is sampled, not the same greedy reply"
    );
    let messages = retry["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[3]["role"], "user");
    let names = crate::catalog::research_tools()
        .iter()
        .map(|spec| spec.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    assert_eq!(
        messages[3]["content"],
        format!(
            "Your last reply could not be used: `table_query` is missing the required parameter(s) `path`.\n\
             Answer again with exactly one JSON object: \
             {{\"tool\": \"TOOL_NAME\", \"parameters\": {{...}}, \"terminate\": false}}, \
             or {{\"tool\": null, \"answer\": \"YOUR ANSWER\", \"terminate\": true}}, and nothing else.\n\
             TOOL_NAME is one of: {names}."
        )
    );
}

#[tokio::test]
async fn text_mode_fails_with_tool_call_invalid_after_three_corrections() {
    let (base, received) = serve(|_| {
        text_reply(
            "{\"tool\": \"drop_table\", \"parameters\": {}}",
            "stop",
            10,
            5,
        )
    })
    .await;
    let provider = provider_in(&base, ToolMode::Text, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &tool_request(ToolChoice::Auto)).await;
    let error = result.expect_err("invalid");
    assert_eq!(error.code(), atelier_messages::ErrorCode::ToolCallInvalid);
    assert!(
        error.to_string().contains("unknown tool `drop_table`"),
        "{error}"
    );
    assert_eq!(received.count(), 4);
    assert_eq!(
        error.spent(),
        Some(Usage {
            prompt_tokens: 40,
            completion_tokens: 20
        }),
        "the failed turn carries the tokens of its four replies"
    );
}

#[tokio::test]
async fn text_mode_replays_calls_as_json_and_results_as_user_messages() {
    let (base, received) = serve(|_| text_reply("sales.csv has 120 rows.", "stop", 10, 5)).await;
    let provider = provider_in(&base, ToolMode::Text, Duration::from_secs(10), 0);
    let mut request = tool_request(ToolChoice::Auto);
    request.messages.push(ChatMessage::assistant(
        SEED_CALL,
        vec![ToolCall {
            id: "call_t1".into(),
            name: "table_get_map".into(),
            arguments: "{\"path\":\"sales.csv\"}".into(),
        }],
    ));
    request
        .messages
        .push(ChatMessage::tool_result("call_t1", "{\"rows\":120}"));
    let (result, _) = run(&provider, &request).await;
    let response = result.expect("completion");
    assert_eq!(response.content, "sales.csv has 120 rows.");
    assert!(response.tool_calls.is_empty());
    let body = received.body(0);
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "{\"tool\": \"table_get_map\", \"parameters\": {\"path\":\"sales.csv\"}, \"terminate\": false}"})
    );
    assert_eq!(
        messages[3],
        json!({"role": "user", "content": "Tool result for table_get_map:\n{\"rows\":120}"})
    );
}

#[tokio::test]
async fn auto_mode_sends_tools_and_reads_a_hermes_call_from_the_text() {
    let hermes = "<tool_call>\n{\"name\": \"table_get_map\", \"arguments\": \"{\\\"path\\\": \\\"sales.csv\\\"}\"}\n</tool_call>";
    let (base, received) = serve(move |_| text_reply(hermes, "stop", 10, 5)).await;
    let provider = provider_in(&base, ToolMode::Auto, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &tool_request(ToolChoice::Auto)).await;
    let response = result.expect("completion");
    assert_eq!(response.tool_calls[0].name, "table_get_map");
    assert_eq!(response.tool_calls[0].arguments, "{\"path\":\"sales.csv\"}");
    let body = received.body(0);
    assert!(
        body["tools"]
            .as_array()
            .is_some_and(|tools| !tools.is_empty())
    );
    assert_eq!(body["messages"][0]["content"], "Research the workbench.");
}

#[tokio::test]
async fn constrained_mode_sends_a_json_schema_response_format() {
    let (base, received) = serve(|_| {
        text_reply(
            "{\"tool\": null, \"answer\": \"120 rows\", \"terminate\": true}",
            "stop",
            10,
            5,
        )
    })
    .await;
    let provider = provider_in(&base, ToolMode::Constrained, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &tool_request(ToolChoice::Auto)).await;
    let response = result.expect("completion");
    assert_eq!(response.content, "120 rows");
    assert!(response.tool_calls.is_empty());
    let body = received.body(0);
    assert!(body.get("tools").is_none());
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    let shapes = body["response_format"]["json_schema"]["schema"]["anyOf"]
        .as_array()
        .expect("anyOf");
    assert_eq!(shapes.len(), crate::catalog::research_tools().len() + 1);
}

/// The plan phase in constrained mode: plan tools offered, the answer bound to a plan.
fn plan_request() -> ModelRequest {
    ModelRequest {
        phase: "plan".into(),
        tools: crate::catalog::plan_tools(),
        answer: crate::answer::AnswerShape::Plan {
            no_change: false,
            targets: Vec::new(),
            sources: vec!["penguins.csv".into()],
        },
        ..tool_request(ToolChoice::Auto)
    }
}

/// A plan answer that a length limit cut inside its description (a long one, not a repeated
/// one: a runaway repetition is nudged instead).
fn cut_plan() -> String {
    let columns: Vec<String> = (1..=120).map(|n| format!("column {n}")).collect();
    format!(
        r#"{{"tool": null, "answer": {{"items": [{{"label": "Count the nests", "description": "read {}"#,
        columns.join(", ")
    )
}

#[tokio::test]
async fn a_reply_cut_by_the_length_limit_is_asked_again_shorter_with_only_its_start_replayed() {
    let (base, received) = serve(|n| {
        if n == 0 {
            text_reply(&cut_plan(), "length", 900, 256)
        } else {
            text_reply(
                r#"{"tool": null, "answer": {"items": [{"label": "Count", "description": "count the rows", "targets": [{"path": "count.txt", "holds": "number"}]}]}, "terminate": true}"#,
                "stop",
                1000,
                40,
            )
        }
    })
    .await;
    let provider = provider_in(&base, ToolMode::Constrained, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &plan_request()).await;
    let response = result.expect("a plan on the second reply");
    assert!(
        response
            .content
            .starts_with("- [ ] 1. Count — count the rows → count.txt"),
        "{}",
        response.content
    );
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 1900,
            completion_tokens: 296
        }
    );
    assert_eq!(received.count(), 2);
    let retry = received.body(1);
    let messages = retry["messages"].as_array().expect("messages");
    let replayed = messages[messages.len() - 2]["content"]
        .as_str()
        .expect("the replayed start");
    let start: String = cut_plan().chars().take(REPLAYED_CUT_CHARS).collect();
    assert_eq!(replayed, format!("{start} …"));
    let asked = messages[messages.len() - 1]["content"]
        .as_str()
        .expect("the correction");
    assert!(asked.contains("cut off before it ended"), "{asked}");
    assert!(
        asked.contains(r#"{"tool": null, "answer": {"items": [{"label": "<what to do>""#),
        "the plan's own shape is asked for: {asked}"
    );
}

#[tokio::test]
async fn replies_cut_by_the_length_limit_every_time_fail_naming_max_tokens() {
    let (base, received) = serve(|_| text_reply(&cut_plan(), "length", 900, 256)).await;
    let provider = provider_in(&base, ToolMode::Constrained, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &plan_request()).await;
    let error = result.expect_err("cut every time");
    assert_eq!(error.code(), atelier_messages::ErrorCode::ToolCallInvalid);
    assert!(error.to_string().contains("`max_tokens`"), "{error}");
    assert_eq!(received.count(), 4);
    assert_eq!(
        error.spent(),
        Some(Usage {
            prompt_tokens: 3600,
            completion_tokens: 1024
        })
    );
}

#[tokio::test]
async fn degenerate_empty_replies_are_nudged_once_then_fail() {
    let (base, received) = serve(|_| text_reply("", "stop", 50, 0)).await;
    let provider = provider_in(&base, ToolMode::Native, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &tool_request(ToolChoice::Required)).await;
    let error = result.expect_err("degenerate");
    assert_eq!(
        error.code(),
        atelier_messages::ErrorCode::ModelOutputDegenerate
    );
    assert_eq!(received.count(), 2);
    assert_eq!(received.body(0)["temperature"], 0.0);
    let retry = received.body(1);
    assert_eq!(
        retry["temperature"], 0.6,
        "a retry is sampled, not the same greedy reply"
    );
    let messages = retry["messages"].as_array().expect("messages");
    assert_eq!(
        messages.last().expect("nudge")["content"],
        "Your last reply was empty; answer with a call to one of the offered tools, without repeating yourself."
    );
}

#[tokio::test]
async fn degenerate_repetition_recovers_after_the_nudge_with_usage_counted() {
    let runaway = "| North | 2024-01 | 1200 | 1200 |\n".repeat(40);
    let (base, received) = serve(move |n| {
        if n == 0 {
            text_reply(&runaway, "length", 100, 4096)
        } else {
            text_reply("sales.csv has 120 rows.", "stop", 150, 8)
        }
    })
    .await;
    let provider = provider_in(&base, ToolMode::Native, Duration::from_secs(10), 0);
    let (result, _) = run(&provider, &tool_request(ToolChoice::Auto)).await;
    let response = result.expect("completion");
    assert_eq!(response.content, "sales.csv has 120 rows.");
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 250,
            completion_tokens: 4104
        }
    );
    assert_eq!(received.count(), 2);
}

/// An SSE answer of `chunks` text deltas sent `gap` apart, after `silence` before the first.
fn slow_stream(chunks: usize, gap: Duration, silence: Duration) -> Response {
    let stream = futures::stream::unfold(0usize, move |sent| async move {
        let wait = if sent == 0 { silence.max(gap) } else { gap };
        if sent > chunks {
            return None;
        }
        tokio::time::sleep(wait).await;
        let data = if sent == chunks {
            event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        } else {
            event(json!({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
        };
        Some((Ok::<_, Infallible>(data), sent + 1))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("response")
}

#[tokio::test]
async fn idle_timeout_lets_a_long_live_stream_finish() {
    let (base, _) = serve(|_| slow_stream(15, Duration::from_millis(200), Duration::ZERO)).await;
    let provider = provider_in(&base, ToolMode::Native, Duration::from_secs(1), 0);
    let started = std::time::Instant::now();
    let (result, deltas) = run(&provider, &simple_request()).await;
    let response = result.expect("a live stream is not cut");
    assert_eq!(response.content, "x".repeat(15));
    assert_eq!(deltas, "x".repeat(15));
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[tokio::test]
async fn idle_timeout_fails_a_silent_stream_as_unavailable() {
    let (base, received) =
        serve(|_| slow_stream(2, Duration::from_millis(100), Duration::from_secs(2))).await;
    let provider = provider_in(&base, ToolMode::Native, Duration::from_secs(1), 0);
    let started = std::time::Instant::now();
    let (result, _) = run(&provider, &simple_request()).await;
    let error = result.expect_err("silent");
    assert!(
        matches!(error, AgentError::Unavailable(ref m) if m.contains("idle timeout")),
        "{error}"
    );
    assert_eq!(
        error.code(),
        atelier_messages::ErrorCode::ProviderUnavailable
    );
    assert!(started.elapsed() < Duration::from_millis(1900));
    assert_eq!(received.count(), 1);
}

/// A one-call stream: `name` with `arguments` (a JSON text).
fn call_stream(name: &str, arguments: &str) -> Response {
    sse(vec![
        event(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "id": "call_1", "type": "function",
            "function": {"name": name, "arguments": arguments}}]}}]}),
        ),
        event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        "data: [DONE]\n\n".to_string(),
    ])
}

fn strict_request() -> ModelRequest {
    let wanted = ["table_query", "xlsx_operations"];
    ModelRequest {
        resample: false,
        phase: "implement".into(),
        item_index: Some(1),
        messages: vec![ChatMessage::system("Work."), ChatMessage::user("Count")],
        tools: catalog()
            .into_iter()
            .filter(|tool| wanted.contains(&tool.name.as_str()))
            .collect(),
        tool_choice: ToolChoice::Auto,
        answer: crate::answer::AnswerShape::Text,
    }
}

#[tokio::test]
async fn strict_tools_send_strict_schemas_and_drop_the_nulls_of_optional_arguments() {
    let arguments = r#"{"path": "plan.csv", "query": "SELECT COUNT(*) FROM data", "window_rows": null, "window_offset": null}"#;
    let (base, received) = serve(move |_| call_stream("table_query", arguments)).await;
    let provider = OpenAiProvider::new(
        Flavor::Compatible,
        &base,
        "m",
        ClientOptions {
            strict_tools: true,
            ..options(None, 0)
        },
    )
    .expect("provider");
    let (result, _) = run(&provider, &strict_request()).await;
    let response = result.expect("completion");
    let read: Value = serde_json::from_str(&response.tool_calls[0].arguments).expect("json");
    assert_eq!(
        read,
        json!({"path": "plan.csv", "query": "SELECT COUNT(*) FROM data"}),
        "the tool gets the call it would have got without strict mode"
    );

    let body = received.body(0);
    let tool = |name: &str| {
        body["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|tool| tool["function"]["name"] == name))
            .map(|tool| tool["function"].clone())
            .unwrap_or_default()
    };
    let query = tool("table_query");
    assert_eq!(query["strict"], true);
    let parameters = &query["parameters"];
    assert_eq!(parameters["additionalProperties"], false);
    assert_eq!(
        parameters["required"],
        json!(["path", "query", "window_offset", "window_rows"])
    );
    assert_eq!(parameters["properties"]["query"]["type"], "string");
    assert_eq!(
        parameters["properties"]["window_rows"]["type"],
        json!(["integer", "null"])
    );
    // Free-form cell objects cannot be strict: that tool goes out as it is.
    let xlsx = tool("xlsx_operations");
    assert!(xlsx.get("strict").is_none(), "{xlsx}");
    let original = strict_request()
        .tools
        .into_iter()
        .find(|tool| tool.name.as_str() == "xlsx_operations")
        .map(|tool| tool.parameters);
    assert_eq!(Some(xlsx["parameters"].clone()), original);
}

#[tokio::test]
async fn without_strict_tools_schemas_go_out_as_they_are_and_arguments_untouched() {
    let arguments = r#"{"path": "plan.csv", "query": "SELECT 1", "window_rows": null}"#;
    let (base, received) = serve(move |_| call_stream("table_query", arguments)).await;
    let provider =
        OpenAiProvider::new(Flavor::Compatible, &base, "m", options(None, 0)).expect("provider");
    let (result, _) = run(&provider, &strict_request()).await;
    assert_eq!(
        result.expect("completion").tool_calls[0].arguments,
        arguments
    );
    let body = received.body(0);
    let query = &body["tools"][1]["function"];
    assert_eq!(query["name"], "table_query");
    assert!(query.get("strict").is_none(), "{query}");
    assert_eq!(query["parameters"], strict_request().tools[1].parameters);
}

/// A gate that records what it was asked, in order.
#[derive(Default)]
struct RecordingGate {
    asked: std::sync::Mutex<Vec<String>>,
}

impl RecordingGate {
    fn note(&self, what: String) {
        self.asked.lock().expect("lock").push(what);
    }
}

#[async_trait::async_trait]
impl crate::http::ProviderGate for RecordingGate {
    async fn acquire(&self, estimate: u64) -> Result<crate::http::Permit, AgentError> {
        self.note(format!("acquire {estimate}"));
        Ok(crate::http::Permit {
            id: "lease".into(),
            estimate,
        })
    }

    async fn release(&self, permit: crate::http::Permit, used: Option<u64>) {
        self.note(format!("release {} {used:?}", permit.id));
    }

    async fn rate_limited(&self, retry_after: Duration) {
        self.note(format!("paused {} ms", retry_after.as_millis()));
    }
}

#[tokio::test]
async fn every_attempt_passes_the_gate_and_a_429_pauses_it() {
    let (base, _received) = serve(refused_once_then_streams).await;
    let gate = std::sync::Arc::new(RecordingGate::default());
    let options = ClientOptions {
        gate: Some(crate::http::Gate(gate.clone())),
        ..options(Some(KEY), 3)
    };
    let provider =
        OpenAiProvider::new(Flavor::OpenAi, &base, "gpt-4o-mini", options).expect("provider");
    let (result, _) = run(&provider, &simple_request()).await;
    assert_eq!(result.expect("completion").content, "Hello world");
    let asked = gate.asked.lock().expect("lock").clone();
    // The estimate: the body's bytes over four, and 1,024 for a reply without `max_tokens`.
    let estimate: u64 = asked[0]
        .strip_prefix("acquire ")
        .and_then(|n| n.parse().ok())
        .expect("an estimate");
    assert!(estimate > 1024, "{asked:?}");
    assert_eq!(
        asked,
        [
            format!("acquire {estimate}"),
            "release lease None".to_string(),
            "paused 0 ms".to_string(),
            format!("acquire {estimate}"),
            "release lease Some(15)".to_string(),
        ]
    );
}
