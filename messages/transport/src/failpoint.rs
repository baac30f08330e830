//! Named kill points for crash tests, in every Atelier process:
//! `ATELIER_FAILPOINTS=name[@n][,name[@n]...]` makes the process SIGKILL itself the n-th time
//! (default: first) it passes `name`.
//!
//! Points: `after_submit_record` (job recorded, message not yet acked), `after_model_turn`
//! (model answer journaled), `before_tool_result` (tool answered, result not yet journaled),
//! `after_tool_result` (tool result journaled), `after_checkpoint` (phase/item state saved),
//! `after_rebuildable_save` (a workflow's state written, not yet flushed),
//! `store_before_flush` (a draft write or publish committed but not yet flushed) in the
//! coordinator; `worker_before_reply` (a tool call computed, its reply not yet sent) in workers.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the armed points.
pub const ENV: &str = "ATELIER_FAILPOINTS";

struct Armed {
    /// Point name → (hit that kills, hits so far).
    points: HashMap<String, (u64, AtomicU64)>,
}

fn armed() -> &'static Armed {
    static ARMED: OnceLock<Armed> = OnceLock::new();
    ARMED.get_or_init(|| Armed {
        points: parse(&std::env::var(ENV).unwrap_or_default()),
    })
}

fn parse(spec: &str) -> HashMap<String, (u64, AtomicU64)> {
    spec.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (name, nth) = entry.split_once('@').unwrap_or((entry, "1"));
            (
                name.to_string(),
                (nth.parse().unwrap_or(1), AtomicU64::new(0)),
            )
        })
        .collect()
}

/// Passes the point `name`; kills the process if it is armed for this hit.
pub fn hit(name: &str) {
    let Some((target, count)) = armed().points.get(name) else {
        return;
    };
    if count.fetch_add(1, Ordering::SeqCst) + 1 == *target {
        tracing::warn!(
            failpoint = name,
            hit = target,
            "failpoint reached: killing this process"
        );
        kill_self();
    }
}

fn kill_self() {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    // SIGKILL is asynchronous; never continue past a failpoint.
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_hit_numbers() {
        let points = parse("after_model_turn@3, after_tool_result ,,");
        assert_eq!(points.get("after_model_turn").map(|p| p.0), Some(3));
        assert_eq!(points.get("after_tool_result").map(|p| p.0), Some(1));
        assert_eq!(points.len(), 2);
    }
}
