//! Peak memory of a call, measured in a child process (this test binary, filtered to one
//! test) so that no other test's allocations count: the child resets its peak RSS
//! (`/proc/self/clear_refs`), runs the call and prints a tagged JSON report for the parent.

use std::process::Command;

use serde_json::Value;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Runs `call` and returns how many bytes the process's peak RSS rose above its RSS before it.
pub(super) fn peak_growth<T>(call: impl FnOnce() -> T) -> (T, u64) {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");
    let out = call();
    let peak = status_kib("VmHWM:");
    (out, peak.saturating_sub(before) * 1024)
}

/// Runs the test `child` of this binary with `variable` set to `scenario`, and returns the JSON
/// it printed after `tag` (`TAG {…}`).
pub(super) fn child_report(child: &str, variable: &str, scenario: &str, tag: &str) -> Value {
    // The running binary itself, even if a build has replaced the file since it started.
    let output = Command::new("/proc/self/exe")
        .args([child, "--exact", "--nocapture", "--test-threads=1"])
        .env(variable, scenario)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{scenario}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let prefix = format!("{tag} ");
    let line = stdout
        .lines()
        .find_map(|line| line.split_once(&prefix).map(|(_, report)| report))
        .unwrap_or_else(|| panic!("{scenario}: no report in {stdout}"));
    serde_json::from_str(line).unwrap()
}
