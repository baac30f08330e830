//! The worker's memory budget bounds the process, not each table: heavy calls on different
//! tables at once stay within one budget (see [`crate::tabular::budget`]).
//!
//! Measured in a child process (this test binary, filtered to [`budget_child`]) so no other
//! test's allocations count: the child resets its peak RSS (`/proc/self/clear_refs`), runs the
//! calls at once and reports how far `VmHWM` rose above `VmRSS`.

use super::peak::{child_report, peak_growth};
use super::*;

/// The scenario a child runs: `<slots>:<budget bytes>` (unset: the test is a no-op).
const CHILD: &str = "ATELIER_TABULAR_BUDGET_SCENARIO";
/// The worker budget of the test.
const BUDGET: u64 = 512 << 20;
/// What the process may add beyond the budget: DuckDB's own bookkeeping, the threads' stacks,
/// the allocator's slack.
const SLACK: u64 = 128 << 20;
/// An aggregate state DuckDB accounts for, far past any budget here (2 GB of text).
const HEAVY: &str = "SELECT length(string_agg(repeat('x', 1000000), '')) FROM range(2000)";

/// Three heavy calls at once, each on its own table; prints `BUDGET {"codes", "growth"}`.
#[test]
#[allow(clippy::print_stdout, reason = "the child's report to the parent test")]
fn budget_child() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    let (slots, memory) = scenario.split_once(':').unwrap();
    let mut fixture = Fixture::new();
    let limits = Limits {
        slots: slots.parse().unwrap(),
        memory_bytes: memory.parse().unwrap(),
        ..Limits::default()
    };
    fixture.engine = TabularEngine::with_limits(&fixture.dir.path().join("cache"), limits);
    let tables: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| fixture.csv(&format!("{name}.csv"), format!("{name}\n1\n").as_bytes()))
        .collect();
    for table in &tables {
        fixture.query(table, "SELECT 1", 1, 0).unwrap();
    }
    let (codes, growth) = peak_growth(|| {
        std::thread::scope(|scope| {
            let calls: Vec<_> = tables
                .iter()
                .map(|table| {
                    let fixture = &fixture;
                    scope.spawn(move || match fixture.query(table, HEAVY, 1, 0) {
                        Ok(_) => json!("ok"),
                        Err(error) => json!(error.code.as_str()),
                    })
                })
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().unwrap())
                .collect::<Vec<Value>>()
        })
    });
    println!("BUDGET {}", json!({"codes": codes, "growth": growth}));
}

/// Runs the child with `slots` and the budget; returns its report.
#[allow(
    clippy::print_stderr,
    reason = "the measurement, shown with --nocapture"
)]
fn measured(slots: usize, budget: u64) -> Value {
    let report = child_report(
        "tabular::tests::budget::budget_child",
        CHILD,
        &format!("{slots}:{budget}"),
        "BUDGET",
    );
    eprintln!(
        "{slots} slots, budget {} MiB: peak RSS +{} MiB",
        budget >> 20,
        report["growth"].as_u64().unwrap_or(0) >> 20
    );
    report
}

#[test]
fn three_heavy_calls_on_three_tables_stay_within_one_worker_budget() {
    let report = measured(Limits::default().slots, BUDGET);
    assert_eq!(
        report["codes"],
        json!(vec!["QUERY_OUT_OF_MEMORY"; 3]),
        "{report}"
    );
    let growth = report["growth"].as_u64().unwrap();
    assert!(
        growth < BUDGET + SLACK,
        "peak RSS grew by {} MiB for a {} MiB budget",
        growth >> 20,
        BUDGET >> 20
    );
}
