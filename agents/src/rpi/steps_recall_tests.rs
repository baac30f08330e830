//! The driver's side of receipts: a large result is shown as a receipt, `recall_tool_result`
//! is answered from the journal without a worker, journaled, and limited to this job.

use std::collections::HashMap;
use std::sync::Mutex;

use atelier_messages::approval::{ActionClass, ApprovalDecision, ApprovalMode};
use atelier_messages::job::{EventKind, PendingApproval, Phase};
use atelier_messages::store::{DraftDiff, ManifestEntry};
use atelier_messages::{ErrorBody, ErrorCode, journal};
use serde_json::{Value, json};

use super::{Outcome, Scope, render};
use crate::AgentError;
use crate::catalog;
use crate::provider::{DeltaSink, ModelProvider, ModelRequest, ModelResponse, ToolCall};
use crate::rpi::driver::Driver;
use crate::rpi::types::{AgentHost, Budgets, JobInput, RpiState};

/// A journal in memory; every worker call answers `answer` and is counted.
struct FakeHost {
    journal: Mutex<HashMap<String, Value>>,
    answer: Value,
    worker_calls: Mutex<u32>,
    events: Mutex<Vec<EventKind>>,
}

fn unused() -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, "not used by these tests")
}

#[async_trait::async_trait]
impl AgentHost for FakeHost {
    async fn call_tool(
        &self,
        _: &str,
        _: &catalog::ToolSpec,
        _: Value,
    ) -> Result<Value, ErrorBody> {
        *self.worker_calls.lock().map_err(|_| unused())? += 1;
        Ok(self.answer.clone())
    }
    async fn files(&self) -> Result<Vec<ManifestEntry>, ErrorBody> {
        Ok(Vec::new())
    }
    async fn draft_changes(&self) -> Result<DraftDiff, ErrorBody> {
        Err(unused())
    }
    async fn save(&self, _: &RpiState) -> Result<(), ErrorBody> {
        Ok(())
    }
    async fn recall(&self, key: &str) -> Result<Option<Value>, ErrorBody> {
        Ok(self.journal.lock().map_err(|_| unused())?.get(key).cloned())
    }
    async fn record(&self, key: &str, value: &Value) -> Result<(), ErrorBody> {
        self.journal
            .lock()
            .map_err(|_| unused())?
            .insert(key.to_string(), value.clone());
        Ok(())
    }
    async fn checkpoint(&self) -> Result<(), ErrorBody> {
        Ok(())
    }
    fn approval_mode(&self, _: ActionClass) -> ApprovalMode {
        ApprovalMode::Auto
    }
    async fn already_applied(&self, _: &str) -> Result<bool, ErrorBody> {
        Ok(false)
    }
    async fn approval(&self, _: PendingApproval) -> Result<ApprovalDecision, ErrorBody> {
        Err(unused())
    }
    fn emit(&self, kind: EventKind) {
        if let Ok(mut events) = self.events.lock() {
            events.push(kind);
        }
    }
}

struct NoModel;

#[async_trait::async_trait]
impl ModelProvider for NoModel {
    fn label(&self) -> String {
        "none".into()
    }
    async fn complete(
        &self,
        _: &ModelRequest,
        _: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        Err(AgentError::Job(unused()))
    }
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: "model-call".into(),
        name: name.into(),
        arguments: arguments.to_string(),
    }
}

/// Runs `calls` in order (call ids `job.research.0.1.<turn>.0`), returning what the model saw
/// of each and whether it succeeded.
async fn run(
    host: &FakeHost,
    calls: &[(u32, ToolCall)],
) -> Result<Vec<(String, bool, bool)>, AgentError> {
    let job = JobInput {
        job_id: "job".into(),
        workbench: "w".into(),
        message: "m".into(),
        context: Default::default(),
    };
    let driver = Driver {
        job: &job,
        provider: &NoModel,
        host,
        budgets: Budgets::default(),
    };
    let scope = Scope::single(Phase::Research);
    let tools = catalog::research_tools();
    let mut state = RpiState::default();
    let mut seen = Vec::new();
    for (turn, call) in calls {
        let call_id = scope.call_id("job", *turn, 0);
        seen.push(
            driver
                .execute(&mut state, scope, &call_id, call, &tools)
                .await?,
        );
    }
    Ok(seen)
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_large_result_is_a_receipt_and_recall_reads_the_journal_not_a_worker()
-> Result<(), AgentError> {
    let host = FakeHost {
        journal: Mutex::default(),
        answer: json!({"text": "é€".repeat(10_000)}),
        worker_calls: Mutex::default(),
        events: Mutex::default(),
    };
    let full = render(&Outcome::Ok(host.answer.clone()));
    let recall = |arguments: Value| call("recall_tool_result", arguments);
    let seen = run(
        &host,
        &[
            (0, call("read_file", json!({"path": "a.txt"}))),
            (
                1,
                recall(json!({"call_id": "job.research.0.1.0.0", "offset": 5, "length": 7})),
            ),
            (2, recall(json!({"call_id": "other.research.0.1.0.0"}))),
            (3, recall(json!({"call_id": "job.research.0.1.9.0"}))),
            (
                4,
                recall(json!({"call_id": "job.research.0.1.0.0", "length": 0})),
            ),
        ],
    )
    .await?;
    let receipt = parsed(&seen[0].0);
    assert_eq!(receipt["receipt"]["call_id"], "job.research.0.1.0.0");
    assert_eq!(receipt["receipt"]["chars"], full.chars().count());
    assert!(seen[0].1);
    let slice = parsed(&seen[1].0);
    let expected: String = full.chars().skip(5).take(7).collect();
    assert_eq!(slice["text"], expected.as_str());
    assert_eq!(slice["next_offset"], 12);
    assert!(seen[1].1, "a recall is a successful call");
    assert_eq!(parsed(&seen[2].0)["error"]["code"], "NOT_FOUND");
    assert_eq!(parsed(&seen[3].0)["error"]["code"], "NOT_FOUND");
    assert_eq!(parsed(&seen[4].0)["error"]["code"], "VALIDATION_FAILED");
    assert!(!seen[2].1 && !seen[3].1 && !seen[4].1);
    assert_eq!(
        *host.worker_calls.lock().map_err(|_| unused())?,
        1,
        "recalls reach no worker"
    );
    // Each recall is journaled under its own call id and its completion published.
    let journaled = host.journal.lock().map_err(|_| unused())?.clone();
    assert!(journaled.contains_key(&journal::tool_result("job.research.0.1.1.0")));
    let completed = host
        .events
        .lock()
        .map_err(|_| unused())?
        .iter()
        .filter(|event| matches!(event, EventKind::ToolComplete { tool, .. } if tool == "recall_tool_result"))
        .count();
    assert_eq!(completed, 4);

    // A resumed run takes the journaled recall, even if the recalled entry were gone.
    host.journal
        .lock()
        .map_err(|_| unused())?
        .remove(&journal::tool_result("job.research.0.1.0.0"));
    let again = run(
        &host,
        &[(
            1,
            recall(json!({"call_id": "job.research.0.1.0.0", "offset": 5, "length": 7})),
        )],
    )
    .await?;
    assert_eq!(again[0], seen[1]);
    Ok(())
}
