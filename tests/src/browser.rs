//! Headless Chromium on the dashboard: the scripts in `tests/browser` (playwright-core), run
//! with `node` until they print `RESULT {json}`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde_json::Value;

/// Set to skip the browser tests (where Chromium cannot run).
pub const SKIP: &str = "ATELIER_SKIP_BROWSER_TEST";

/// Whether the browser tests are skipped here.
pub fn skipped() -> bool {
    std::env::var_os(SKIP).is_some()
}

/// `tests/browser`: the scripts and their Node dependencies.
pub fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// Chromium and the Node test's dependencies, or why they are missing.
pub fn browser_setup() -> anyhow::Result<PathBuf> {
    let chromium = std::env::var_os("CHROMIUM_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    ensure!(
        chromium.exists(),
        "{} is missing: `apt-get install -y chromium chromium-driver` (or set CHROMIUM_PATH); \
         {SKIP}=1 skips this test",
        chromium.display()
    );
    ensure!(
        browser_dir().join("node_modules/playwright-core").exists(),
        "playwright-core is missing: `npm ci --prefix tests/browser` ({SKIP}=1 skips this test)"
    );
    Ok(chromium)
}

/// Runs a browser script with `env` until it prints `RESULT {json}` (150 s at most), handing
/// every other line of its output to `on_line`; returns the result. `logs` tells, when it does
/// not finish, what the system under test logged.
pub fn run_browser_script(
    script: &str,
    env: &[(&str, &str)],
    logs: &dyn Fn() -> String,
    mut on_line: impl FnMut(&str) -> anyhow::Result<()>,
) -> anyhow::Result<Value> {
    let mut node = Command::new("node")
        .arg(browser_dir().join(script))
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("node is missing")?;
    let stdout = node.stdout.take().context("no stdout")?;
    let (lines, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut result = None;
    let deadline = Instant::now() + Duration::from_secs(150);
    while result.is_none() && Instant::now() < deadline {
        let Ok(line) = receive.recv_timeout(Duration::from_millis(200)) else {
            if node.try_wait()?.is_some() {
                break;
            }
            continue;
        };
        match line.strip_prefix("RESULT ") {
            Some(json) => result = Some(serde_json::from_str::<Value>(json)?),
            None => on_line(&line)?,
        }
    }
    let _ = node.kill();
    let output = node.wait_with_output()?;
    result.with_context(|| {
        format!(
            "the browser test {script} did not finish: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            logs()
        )
    })
}

/// A browser script on one page of a running dashboard, with a fresh artifacts folder.
pub struct PageScript<'a> {
    pub script: &'a str,
    pub artifacts: &'a str,
    pub chromium: &'a Path,
    /// The dashboard's base URL (`http://127.0.0.1:PORT`).
    pub url: &'a str,
    /// What the page is about, as an environment variable (e.g. `WORKBENCH`).
    pub subject: (&'a str, &'a str),
    /// More environment variables the script reads (paths of files to upload, …).
    pub env: &'a [(&'a str, &'a str)],
}

impl PageScript<'_> {
    /// Runs the script to its result; also returns the artifacts folder.
    pub fn run(&self, logs: &dyn Fn() -> String) -> anyhow::Result<(Value, PathBuf)> {
        let artifacts = browser_dir().join(self.artifacts);
        let _ = std::fs::remove_dir_all(&artifacts);
        std::fs::create_dir_all(&artifacts)?;
        let chromium_path = self.chromium.to_string_lossy().to_string();
        let artifacts_path = artifacts.to_string_lossy().to_string();
        let mut env = vec![
            ("DASHBOARD_URL", self.url),
            self.subject,
            ("CHROMIUM_PATH", chromium_path.as_str()),
            ("ARTIFACTS", artifacts_path.as_str()),
        ];
        env.extend_from_slice(self.env);
        let result = run_browser_script(self.script, &env, logs, |_| Ok(()))?;
        Ok((result, artifacts))
    }
}

/// Fails unless every screenshot `NAME.png` in `artifacts` holds an image.
pub fn assert_screenshots(artifacts: &Path, names: &[&str]) -> anyhow::Result<()> {
    for shot in names {
        let size = std::fs::metadata(artifacts.join(format!("{shot}.png")))?.len();
        ensure!(size > 1000, "screenshot {shot} is empty");
    }
    Ok(())
}
