//! Clients this project did not write, in Python: the official MCP and OpenAI SDKs (PyPI, pinned
//! in `tests/python/requirements.txt`, installed into `tests/python/.venv` by
//! `scripts/setup.sh --tests`), each script printing `RESULT {json}`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};
use serde_json::Value;

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// Runs `tests/python/SCRIPT` with `env` in the test clients' virtualenv; its result.
pub fn run(script: &str, env: &[(&str, &str)]) -> anyhow::Result<Value> {
    let python = python_dir().join(".venv/bin/python");
    ensure!(
        python.exists(),
        "the Python test clients are missing: `bash scripts/setup.sh --tests` installs them \
         into tests/python/.venv"
    );
    let output = Command::new(python)
        .arg(python_dir().join(script))
        .envs(env.iter().copied())
        .output()
        .context("the virtualenv's python did not start")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result = stdout
        .lines()
        .find_map(|line| line.strip_prefix("RESULT "))
        .with_context(|| {
            format!(
                "{script} printed no result:\n{stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    Ok(serde_json::from_str(result)?)
}
