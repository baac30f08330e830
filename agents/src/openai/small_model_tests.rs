//! The client against a llama.cpp-like stand-in (`/props`, `/tokenize`, Chat Completions):
//! schema-bound plans and item results in constrained mode, the fallback when a server refuses
//! `response_format`, and the context window kept or refused as `CONTEXT_OVERFLOW`.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::*;
use crate::AgentError;
use crate::answer::AnswerShape;
use crate::catalog;
use crate::http::test_server::{run, sse, status};
use crate::provider::{ChatMessage, ModelRequest, ToolChoice};
use crate::text_tools::ToolMode;
use atelier_messages::ErrorCode;

/// What the stand-in's chat endpoint received.
type Bodies = Arc<Mutex<Vec<Value>>>;

/// A llama.cpp-like server: `GET /props` tells a window of `n_ctx` tokens, `POST /tokenize`
/// counts a token per 4 bytes, and the chat endpoint answers the n-th request with
/// `respond(n)`. Returns its `/v1` base URL and the chat bodies.
async fn llama_cpp<F>(n_ctx: u64, respond: F) -> (String, Bodies)
where
    F: Fn(usize) -> Response + Clone + Send + Sync + 'static,
{
    let bodies: Bodies = Arc::default();
    let recorder = bodies.clone();
    let chat = move |Json(body): Json<Value>| {
        let recorder = recorder.clone();
        let respond = respond.clone();
        async move {
            let mut bodies = recorder.lock().expect("lock");
            bodies.push(body);
            respond(bodies.len() - 1)
        }
    };
    let props =
        move || async move { Json(json!({"default_generation_settings": {"n_ctx": n_ctx}})) };
    let tokenize = |Json(body): Json<Value>| async move {
        let text = body["content"].as_str().unwrap_or_default();
        Json(json!({"tokens": vec![0; text.len() / 4]}))
    };
    let app = Router::new()
        .route("/props", get(props))
        .route("/tokenize", post(tokenize))
        .route("/v1/chat/completions", post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), bodies)
}

/// A streamed reply whose text is `content`.
fn reply(content: &str) -> Response {
    let chunk =
        json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": "stop"}]});
    sse(vec![
        format!("data: {chunk}\n\n"),
        "data: [DONE]\n\n".into(),
    ])
}

fn provider(base: &str, mode: ToolMode, context_tokens: Option<u32>) -> OpenAiProvider {
    let options = ClientOptions {
        tool_mode: mode,
        max_tokens: Some(256),
        context_tokens,
        ..ClientOptions::new(RetryPolicy::new(0))
    };
    OpenAiProvider::new(Flavor::Compatible, base, "qwen", options).expect("provider")
}

fn plan_request() -> ModelRequest {
    ModelRequest {
        resample: false,
        phase: "plan".into(),
        item_index: None,
        messages: vec![
            ChatMessage::system("You are in the Plan phase."),
            ChatMessage::user("Write the number of rows in penguins.csv into count.txt"),
        ],
        tools: catalog::plan_tools(),
        tool_choice: ToolChoice::Auto,
        answer: AnswerShape::Plan {
            no_change: false,
            targets: Vec::new(),
            sources: Vec::new(),
        },
    }
}

#[tokio::test]
async fn a_constrained_plan_is_bound_to_the_plan_schema_and_read_as_a_checklist() {
    let answer = r#"{"tool": null, "answer": {"items": [{"label": "Count", "description": "table_query on penguins.csv, then write_text_file", "targets": ["count.txt"]}]}, "terminate": true}"#;
    let (base, bodies) = llama_cpp(16_384, move |_| reply(answer)).await;
    let provider = provider(&base, ToolMode::Constrained, None);
    let (result, _) = run(&provider, &plan_request()).await;
    let response = result.expect("plan");
    assert_eq!(
        response.content,
        "- [ ] 1. Count — table_query on penguins.csv, then write_text_file → count.txt"
    );
    let body = bodies.lock().expect("lock")[0].clone();
    let shapes = body["response_format"]["json_schema"]["schema"]["anyOf"]
        .as_array()
        .cloned()
        .expect("anyOf");
    // read_file, recall_tool_result, and the plan answer: items, at least one, no way out.
    assert_eq!(shapes.len(), 3);
    let plan = &shapes[2]["properties"]["answer"];
    assert_eq!(plan["properties"]["items"]["minItems"], 1);
    assert!(!plan.to_string().contains("no_change"), "{plan}");
    // The catalog shows the structured answer, not a free-text one.
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(
        system.contains(r#""answer": {"items": [{"label""#),
        "{system}"
    );
}

#[tokio::test]
async fn a_server_that_refuses_response_format_gets_text_mode_from_then_on() {
    let (base, bodies) = llama_cpp(16_384, |n| match n {
        0 => status(
            400,
            &[("content-type", "application/json")],
            r#"{"error": {"code": 400, "message": "response_format is not supported", "type": "invalid_request_error"}}"#,
        ),
        _ => reply("- [ ] 1. Count — rows → count.txt"),
    })
    .await;
    let provider = provider(&base, ToolMode::Constrained, None);
    let (result, _) = run(&provider, &plan_request()).await;
    assert_eq!(
        result.expect("answered in text mode").content,
        "- [ ] 1. Count — rows → count.txt"
    );
    let (again, _) = run(&provider, &plan_request()).await;
    assert!(again.is_ok());
    let bodies = bodies.lock().expect("lock").clone();
    assert_eq!(
        bodies.len(),
        3,
        "refused, retried without the schema, next turn"
    );
    assert!(bodies[0].get("response_format").is_some());
    assert!(bodies[1].get("response_format").is_none());
    assert!(bodies[2].get("response_format").is_none());
    assert_eq!(crate::turn::SendTurn::tool_mode(&provider), ToolMode::Text);
}

/// A text-mode implement request with two large tool results and a system prompt of
/// `system_bytes`.
fn long_request(system_bytes: usize) -> ModelRequest {
    let call = |id: &str| crate::provider::ToolCall {
        id: id.into(),
        name: "read_file".into(),
        arguments: r#"{"path": "penguins.csv"}"#.into(),
    };
    ModelRequest {
        resample: false,
        phase: "implement".into(),
        item_index: Some(1),
        messages: vec![
            ChatMessage::system("s".repeat(system_bytes)),
            ChatMessage::user("Do plan item 1: Count — rows → count.txt"),
            ChatMessage::assistant("", vec![call("call_t1")]),
            ChatMessage::tool_result("call_t1", "a".repeat(8_000)),
            ChatMessage::assistant("", vec![call("call_t2")]),
            ChatMessage::tool_result("call_t2", "b".repeat(2_000)),
        ],
        tools: catalog::plan_tools(),
        tool_choice: ToolChoice::Auto,
        answer: AnswerShape::Text,
    }
}

#[tokio::test]
async fn a_request_over_the_servers_window_is_cut_down_before_it_is_sent() {
    // 4,096 tokens, 256 for the reply: the 8,000-character result does not fit beside the rest.
    let (base, bodies) = llama_cpp(4_096, |_| reply("Wrote count.txt.")).await;
    let provider = provider(&base, ToolMode::Text, None);
    let (result, _) = run(&provider, &long_request(4_000)).await;
    assert_eq!(result.expect("answered").content, "Wrote count.txt.");
    let body = bodies.lock().expect("lock")[0].clone();
    let messages = body["messages"].as_array().cloned().expect("messages");
    let older = messages[3]["content"].as_str().unwrap_or_default();
    assert!(
        older.starts_with(
            "Tool result for read_file:\n[this earlier result (8000 characters) was dropped"
        ),
        "{older}"
    );
    let newest = messages[5]["content"].as_str().unwrap_or_default();
    assert!(newest.ends_with(&"b".repeat(2_000)));
}

#[tokio::test]
async fn what_cannot_fit_is_context_overflow_and_never_sent() {
    let (base, bodies) = llama_cpp(2_048, |_| reply("never")).await;
    let provider = provider(&base, ToolMode::Text, None);
    // A system prompt of about 5,000 tokens cannot be dropped.
    let (result, _) = run(&provider, &long_request(20_000)).await;
    let error = result.expect_err("overflow");
    assert_eq!(error.code(), ErrorCode::ContextOverflow);
    assert!(
        error.to_string().contains("2048 tokens (the server's)"),
        "{error}"
    );
    assert!(bodies.lock().expect("lock").is_empty());
    // The profile's context_tokens wins over the server's figure.
    let roomy = provider_with_window(&base, 64_000);
    let (result, _) = run(&roomy, &long_request(20_000)).await;
    assert_eq!(result.expect("fits").content, "never");
}

fn provider_with_window(base: &str, tokens: u32) -> OpenAiProvider {
    provider(base, ToolMode::Text, Some(tokens))
}

#[tokio::test]
async fn a_servers_context_answer_is_context_overflow_and_not_retried() {
    // As llama.cpp answered a 17,188-token request to a 16,384-token context.
    let (base, bodies) = llama_cpp(1_000_000, |_| {
        status(
            400,
            &[("content-type", "application/json")],
            r#"{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 17188, "n_ctx": 16384}}"#,
        )
    })
    .await;
    let provider = provider(&base, ToolMode::Text, None);
    let (result, _) = run(&provider, &plan_request()).await;
    let error = result.expect_err("overflow");
    assert_eq!(error.code(), ErrorCode::ContextOverflow);
    assert!(matches!(error, AgentError::ContextOverflow(_)), "{error:?}");
    assert_eq!(bodies.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn an_item_result_in_constrained_mode_is_read_as_its_line() {
    let answer = r#"{"tool": null, "answer": {"status": "failed", "result": "no such column"}, "terminate": true}"#;
    let (base, _) = llama_cpp(16_384, move |_| reply(answer)).await;
    let provider = provider(&base, ToolMode::Constrained, None);
    let request = ModelRequest {
        resample: false,
        phase: "implement".into(),
        answer: AnswerShape::ItemResult { no_change: false },
        ..plan_request()
    };
    let (result, _) = run(&provider, &request).await;
    assert_eq!(
        result.expect("answer").content,
        "ITEM_FAILED: no such column"
    );
}
