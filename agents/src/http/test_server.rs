//! A local stand-in for a model server, for the providers' tests: it records each request's
//! headers and JSON body and answers with whatever the test says.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;

use crate::AgentError;
use crate::provider::{ModelProvider, ModelRequest, ModelResponse};

/// What the test server received.
#[derive(Clone, Default)]
pub(crate) struct Received {
    bodies: Arc<Mutex<Vec<Value>>>,
    headers: Arc<Mutex<Vec<HeaderMap>>>,
}

impl Received {
    pub(crate) fn count(&self) -> usize {
        self.bodies.lock().expect("lock").len()
    }

    pub(crate) fn body(&self, n: usize) -> Value {
        self.bodies.lock().expect("lock")[n].clone()
    }

    /// Header `name` of the n-th request.
    pub(crate) fn header(&self, n: usize, name: &str) -> Option<String> {
        self.headers.lock().expect("lock")[n]
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// Starts a stand-in answering `POST path`; `respond(n)` answers the n-th request (0-based).
/// Returns its base address (`http://127.0.0.1:PORT`).
pub(crate) async fn serve<F>(path: &str, respond: F) -> (String, Received)
where
    F: Fn(usize) -> Response + Clone + Send + Sync + 'static,
{
    let received = Received::default();
    let recorder = received.clone();
    let handler = move |headers: HeaderMap, Json(body): Json<Value>| {
        let recorder = recorder.clone();
        let respond = respond.clone();
        async move {
            recorder.headers.lock().expect("lock").push(headers);
            let mut bodies = recorder.bodies.lock().expect("lock");
            bodies.push(body);
            respond(bodies.len() - 1)
        }
    };
    let app = Router::new().route(path, post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), received)
}

/// An SSE answer sent as the given body chunks.
pub(crate) fn sse(chunks: Vec<String>) -> Response {
    let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("response")
}

/// An answer with `code`, `headers` and `body`.
pub(crate) fn status(code: u16, headers: &[(&str, &str)], body: &str) -> Response {
    let mut builder = Response::builder().status(code);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Body::from(body.to_string()))
        .expect("response")
}

/// Runs a call and returns the result with the concatenated deltas.
pub(crate) async fn run(
    provider: &dyn ModelProvider,
    request: &ModelRequest,
) -> (Result<ModelResponse, AgentError>, String) {
    let deltas = Mutex::new(String::new());
    let sink = |text: &str| deltas.lock().expect("lock").push_str(text);
    let result = provider.complete(request, &sink).await;
    let text = deltas.lock().expect("lock").clone();
    (result, text)
}

/// A one-message request without tools.
pub(crate) fn simple_request() -> crate::provider::ModelRequest {
    use crate::provider::{ChatMessage, ModelRequest, ToolChoice};
    ModelRequest {
        resample: false,
        phase: "research".into(),
        item_index: None,
        messages: vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi")],
        tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
        answer: crate::answer::AnswerShape::Text,
    }
}
