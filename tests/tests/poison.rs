//! Poison calls: a call every worker dies on ends with `TOOL_CRASHED` after the configured
//! number of deaths, while `atelier up` (coordinator, dashboard) stays up and other work goes on.

use std::time::{Duration, Instant};

use atelier_tests::up::Up;
use serde_json::Value;

#[test]
fn a_call_every_worker_dies_on_fails_with_tool_crashed_and_up_stays_up() -> anyhow::Result<()> {
    // Every worker process SIGKILLs itself on its first write call, after computing it: each
    // one the supervisor starts dies holding the call.
    let up = Up::start_with(&[], &[("ATELIER_FAILPOINTS", "worker_before_reply")])?;
    std::fs::write(up.workdir().join("notes.txt"), "hello\n")?;
    up.cli_ok(&["wb", "create", "w"])?;
    up.cli_ok(&["wb", "add", "w", "notes.txt"])?;

    let started = Instant::now();
    let run = up.cli(&[
        "run",
        "w",
        "write_text_file",
        "--args",
        r#"{"path":"out.txt","content":"never"}"#,
        "--wait",
        "--json",
    ])?;
    assert!(!run.status.success());
    let view: Value = serde_json::from_slice(&run.stdout)?;
    assert_eq!(view["state"], "failed", "{view}");
    assert_eq!(view["error"]["code"], "TOOL_CRASHED", "{view}");
    assert!(
        view["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("2 times")),
        "{view}"
    );
    // Two deaths, each found by the silence after the call was taken (10 s), not by the try's
    // 10-minute limit.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );

    // The coordinator never restarted: the same process answers, the journal holds the count.
    let jobs: Value = serde_json::from_str(&up.cli_ok(&["jobs", "--json"])?)?;
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");
    let listing = up.cli_ok(&["wb", "ls", "w", "--json"])?;
    assert!(listing.contains("notes.txt"), "{listing}");
    assert!(
        up.cli(&["wb", "ls", "w", "--draft"])?.status.code() != Some(0),
        "nothing applied"
    );
    let log = up.log();
    assert_eq!(
        log.matches("a worker died holding the call").count(),
        2,
        "{log}"
    );
    Ok(())
}

#[test]
fn a_crafted_workbook_fails_its_call_with_a_code_and_everything_else_goes_on() -> anyhow::Result<()>
{
    let up = Up::start()?;
    // A1 and XFD1048576: calamine would make the whole grid dense (512 GiB).
    let crafted = up.workdir().join("crafted.xlsx");
    let mut workbook = rust_xlsxwriter::Workbook::new();
    let sheet = workbook.add_worksheet();
    sheet.write_string(0, 0, "first")?;
    sheet.write_string(1_048_575, 16_383, "last")?;
    workbook.save(&crafted)?;
    std::fs::write(up.workdir().join("notes.txt"), "hello\n")?;
    up.cli_ok(&["wb", "create", "w"])?;
    up.cli_ok(&["wb", "add", "w", "crafted.xlsx", "notes.txt"])?;

    let started = Instant::now();
    let run = up.cli(&[
        "run",
        "w",
        "get_file_info",
        "--args",
        r#"{"path":"crafted.xlsx"}"#,
        "--wait",
        "--json",
    ])?;
    let view: Value = serde_json::from_slice(&run.stdout)?;
    assert_eq!(view["error"]["code"], "FILE_TOO_COMPLEX", "{view}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // The same process serves the next call, and no worker died.
    let read = up.cli_ok(&[
        "run",
        "w",
        "read_file",
        "--args",
        r#"{"path":"notes.txt"}"#,
        "--wait",
    ])?;
    assert!(read.contains("hello"), "{read}");
    assert!(!up.log().contains("exited on its own"), "{}", up.log());
    Ok(())
}
