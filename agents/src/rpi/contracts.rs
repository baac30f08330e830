//! Checking a done item's targets against their contracts ([`crate::contract`]).
//!
//! When an item's final answer is accepted, the engine reads back each target that has a
//! contract and, for a contract with a source, runs the source query — both through the
//! workbench's own read-only tools (`read_file`, `table_query`), so the check sees the draft
//! exactly as a user will. A broken contract fails the attempt with `ITEM_NOT_DONE` saying what
//! differs; the model is told once (its retry), then the item fails. A source query that
//! fails does not fail the item: the check falls back to the contract's kind, and the query's
//! error is logged and named in the reason the model is told when the kind is broken too.
//! Office files (xlsx, docx, pptx, pdf) are held to
//! being changed; the kinds are checked on text files (txt, md, csv, tsv, json, …).

use atelier_messages::contract::{Contract, Holds};
use atelier_messages::path::kind_of;
use serde_json::{Value, json};

use super::driver::Driver;
use crate::AgentError;
use crate::catalog;
use crate::contract::{self, Rows};

/// The start of every reason a broken contract gives (a retry after one is the last).
pub(super) const BROKEN_CONTRACT: &str = "the written content breaks the plan's contract";

/// The most lines of a target read back for its check.
const READ_LINES: usize = 2000;
/// The most rows of a source query compared.
const SOURCE_ROWS: u64 = 10_000;

/// What checking an item's contracts found.
#[derive(Debug, Default)]
pub(super) struct Checked {
    /// What differs, per broken contract.
    pub broken: Vec<String>,
    /// The source queries that failed, with their errors.
    pub failed_sources: Vec<String>,
}

impl Checked {
    /// The failure reason when a contract is broken.
    pub(super) fn reason(&self) -> Option<String> {
        if self.broken.is_empty() {
            return None;
        }
        let mut reason = format!("{BROKEN_CONTRACT}: {}", self.broken.join("; "));
        if !self.failed_sources.is_empty() {
            reason.push_str(&format!(
                " (checked without their sources: {})",
                self.failed_sources.join("; ")
            ));
        }
        Some(reason)
    }
}

impl Driver<'_> {
    /// Checks the contracts of an item whose final answer was accepted; `changed` are the paths
    /// the item changed.
    pub(super) async fn check_contracts(
        &self,
        contracts: &[Contract],
        call_prefix: &str,
        changed: &[String],
    ) -> Result<Checked, AgentError> {
        let mut checked = Checked::default();
        for (index, contract) in contracts.iter().enumerate() {
            let prefix = format!("{call_prefix}.{index}");
            if let Some(broken) = self
                .check_one(contract, &prefix, changed, &mut checked)
                .await?
            {
                checked.broken.push(format!("{}: {broken}", contract.path));
            }
        }
        Ok(checked)
    }

    async fn check_one(
        &self,
        contract: &Contract,
        prefix: &str,
        changed: &[String],
        checked: &mut Checked,
    ) -> Result<Option<String>, AgentError> {
        if !changed.contains(&contract.path) {
            return Ok(Some("the item did not change it".to_string()));
        }
        if contract.holds == Holds::Edit || !is_text(&contract.path) {
            return Ok(None);
        }
        let Some(content) = self.read_back(&contract.path, prefix).await? else {
            return Ok(Some("it is not in the draft".to_string()));
        };
        let source = match &contract.source {
            Some(source) => match self.query_source(source, prefix).await? {
                Ok(rows) => Some(rows),
                Err(error) => {
                    tracing::warn!(path = %contract.path, %error, "a contract's source query failed");
                    checked
                        .failed_sources
                        .push(format!("{} ({error})", contract.path));
                    None
                }
            },
            None => None,
        };
        Ok(contract::check(contract, &content, source.as_ref()).err())
    }

    /// The target's text in the draft, by `read_file`; `None` when it is not there.
    async fn read_back(&self, path: &str, prefix: &str) -> Result<Option<String>, AgentError> {
        let Some(spec) = catalog::find("read_file") else {
            return Ok(None);
        };
        let args = json!({"path": path, "line_start": 1, "line_count": READ_LINES});
        match self
            .host
            .call_tool(&format!("{prefix}.read"), &spec, args)
            .await
        {
            Ok(result) => Ok(result
                .get("content")
                .and_then(Value::as_str)
                .map(str::to_string)),
            Err(error) if error.code == atelier_messages::ErrorCode::UserCanceled => {
                Err(AgentError::Job(error))
            }
            Err(_) => Ok(None),
        }
    }

    /// The rows of a contract's source query, or the error the model is told.
    async fn query_source(
        &self,
        source: &atelier_messages::contract::Source,
        prefix: &str,
    ) -> Result<Result<Rows, String>, AgentError> {
        let Some(spec) = catalog::find("table_query") else {
            return Ok(Err("table_query is not available".to_string()));
        };
        let args = json!({"path": source.path, "query": source.query, "window_rows": SOURCE_ROWS});
        match self
            .host
            .call_tool(&format!("{prefix}.source"), &spec, args)
            .await
        {
            Ok(result) => Ok(Rows::of_result(&result)
                .ok_or_else(|| "the query returned no rows object".to_string())),
            Err(error) if error.code == atelier_messages::ErrorCode::UserCanceled => {
                Err(AgentError::Job(error))
            }
            Err(error) => Ok(Err(format!("{}: {}", error.code, error.message))),
        }
    }
}

/// True for a target whose text `read_file` gives as it is: a text or delimited file.
fn is_text(path: &str) -> bool {
    matches!(kind_of(path), "text" | "csv")
}
