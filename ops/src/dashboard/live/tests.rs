//! The trace and the throughput counters, fed events as the stream delivers them.

use super::trace::{CallRecord, CallStatus, IoEntry};
use super::*;
use atelier_messages::job::Phase;
use atelier_messages::{ErrorCode, PROTOCOL_VERSION};

fn event(at_ms: u64, kind: EventKind) -> JobEvent {
    JobEvent {
        v: PROTOCOL_VERSION,
        job_id: "j1".into(),
        at_ms,
        kind,
    }
}

fn script() -> Vec<JobEvent> {
    vec![
        event(1, EventKind::JobAccepted),
        event(
            2,
            EventKind::PhaseStarted {
                phase: Phase::Implement,
            },
        ),
        event(
            3,
            EventKind::ItemStarted {
                index: 1,
                total: 2,
                label: "Export".into(),
                attempt: 1,
            },
        ),
        event(
            4,
            EventKind::ToolExecuting {
                call_id: "c1".into(),
                tool: "table_export".into(),
                path: Some("a.csv".into()),
            },
        ),
        event(
            9,
            EventKind::ToolComplete {
                call_id: "c1".into(),
                tool: "table_export".into(),
                ok: false,
                error: Some(ErrorBody::new(ErrorCode::SandboxViolation, "no")),
                elapsed_ms: 5,
                worker: Some("tabular-h-1".into()),
                elapsed_us: 5_000,
            },
        ),
        event(
            10,
            EventKind::ItemFinished {
                index: 1,
                status: ItemStatus::Failed,
            },
        ),
        event(
            11,
            EventKind::JobFinished {
                state: JobState::Failed,
                error: None,
                run: 0,
                outcome: None,
                spent: None,
            },
        ),
    ]
}

#[test]
fn trace_joins_calls_with_their_phase_item_and_outcome() {
    let trace = JobTrace::from_events("j1", &script());
    assert_eq!(trace.state, Some(JobState::Failed));
    assert_eq!(trace.phases.len(), 1);
    assert_eq!(trace.phases[0].ended_ms, Some(11));
    assert_eq!(trace.items[0].status, Some(ItemStatus::Failed));
    let calls: Vec<&CallRecord> = trace
        .log
        .iter()
        .filter_map(|entry| match entry {
            IoEntry::Call(record) => Some(record.as_ref()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, CallStatus::Failed);
    assert_eq!(calls[0].item, Some(1));
    assert_eq!(calls[0].pool.as_deref(), Some("tabular"));
    assert_eq!(calls[0].worker.as_deref(), Some("tabular-h-1"));
}

#[test]
fn live_counts_errors_and_ignores_replayed_sequences() {
    let live = Live::new();
    for (sequence, event) in script().iter().enumerate() {
        live.apply(sequence as u64 + 1, event);
    }
    live.apply(5, &script()[4]);
    let text = live.metrics().render();
    assert!(text.contains("atelier_errors_total{code=\"SANDBOX_VIOLATION\",source=\"tool\"} 1\n"));
    assert!(text.contains(
        "atelier_tool_calls_total{tool=\"table_export\",pool=\"tabular\",outcome=\"error\"} 1\n"
    ));
    let throughput = live.throughput(60_000);
    assert_eq!(throughput.hour.failed, 1);
    assert_eq!(throughput.hour.tool_calls, 1);
    assert_eq!(throughput.hour.p50_ms, Some(5));
}

#[test]
fn percentiles_use_nearest_rank() {
    let samples: Vec<u64> = (1..=100).collect();
    assert_eq!(percentiles(&samples), (Some(50), Some(90), Some(99)));
    assert_eq!(percentiles(&[]), (None, None, None));
}
