//! A plan's contracts reviewed before it is accepted ([`crate::contract::review`]).
//!
//! Each contract's form is checked against the workbench's files, and each source query is
//! run with `table_query` (journaled like any tool call, so a resumed job sees the same
//! results). The problems are told to the model once, with the plan it gave; its next plan is
//! accepted as it is (a target whose source still fails when its item ends is not done,
//! [`super::contracts`]).

use atelier_messages::contract::Contract;
use atelier_messages::job::PlanItem;
use atelier_messages::path::kind_of;
use serde_json::json;

use super::driver::Driver;
use crate::AgentError;
use crate::contract::parts;
use crate::contract::review::{self, Sources, Workbench};
use crate::plan;

impl Driver<'_> {
    /// What the model is told about the contracts of the plan `text` (given at plan `turn`);
    /// `None` when each one is checkable.
    pub(super) async fn review_plan(
        &self,
        text: &str,
        turn: u32,
    ) -> Result<Option<String>, AgentError> {
        let items = plan::parse(text);
        // A plan naming a path outside the workbench is refused as it is, after the loop.
        if items.iter().all(|item| item.contracts.is_empty())
            || plan::target_outside(&items).is_some()
        {
            return Ok(None);
        }
        let in_workbench = self.paths().await?;
        let mut files = in_workbench.clone();
        let sources = Sources::of(&files);
        let mut problems = Vec::new();
        for item in &items {
            // A file an earlier item makes is there for this one, as when the item runs.
            let workbench = Workbench {
                files: &files,
                sources: &sources,
            };
            for (index, contract) in item.contracts.iter().enumerate() {
                let prefix = format!("{}.plan.{turn}.{}.{index}", self.job.job_id, item.index);
                let present = in_workbench.contains(&contract.path);
                if let Some(problem) = self
                    .contract_problem(contract, workbench, present, &prefix)
                    .await?
                {
                    problems.push(format!(
                        "- item {}, {}: {problem}",
                        item.index, contract.path
                    ));
                }
            }
            files.extend(item.targets.iter().cloned());
        }
        Ok((!problems.is_empty()).then(|| told(&items, &problems)))
    }

    /// What is wrong with `contract`, if anything; `present` when its file is in the workbench
    /// now (not only made by an earlier item), so that it can be read for where the request
    /// points in it.
    async fn contract_problem(
        &self,
        contract: &Contract,
        workbench: Workbench<'_>,
        present: bool,
        prefix: &str,
    ) -> Result<Option<String>, AgentError> {
        if let Some(problem) = review::problem(contract, workbench) {
            if !review::changes_without_parts(contract, present) {
                return Ok(Some(problem));
            }
            return Ok(Some(
                match self.where_the_request_points(contract, prefix).await? {
                    Some(hint) => format!("{problem}; {hint}"),
                    None => problem,
                },
            ));
        }
        let Some(source) = &contract.source else {
            return Ok(None);
        };
        let result = self.query_source(source, prefix).await?;
        Ok(review::source_problem(contract, &result))
    }

    /// For a change to a document or a deck declared without its parts: where the request
    /// points in it ([`parts::where_the_request_points`]), from the file as `read_file` reads
    /// it; `None` for a workbook or a file that does not read as parts.
    async fn where_the_request_points(
        &self,
        contract: &Contract,
        prefix: &str,
    ) -> Result<Option<String>, AgentError> {
        if !matches!(kind_of(&contract.path), "docx" | "pptx") {
            return Ok(None);
        }
        let read = self
            .read(json!({"path": contract.path}), &format!("{prefix}.parts"))
            .await?;
        Ok(read
            .as_ref()
            .and_then(parts::read_parts)
            .map(|parts| parts::where_the_request_points(&self.job.message, &parts)))
    }
}

/// The review as the model is told it: what is wrong, and to answer with the whole plan again.
fn told(items: &[PlanItem], problems: &[String]) -> String {
    format!(
        "The engine cannot check this plan's contracts (the lines under the items that say \
         what each file holds):\n{}\nAnswer with the whole plan again ({} item{}), with each \
         contract line corrected: `  - file: KIND`, KIND one of number, list, table, text, \
         edit, absent; a number, list or table computed from a workbench table ends with \
         `from TABLE = SELECT … FROM data`, from a text file with `from FILE = SELECT … FROM \
         figures`.",
        problems.join("\n"),
        items.len(),
        if items.len() == 1 { "" } else { "s" },
    )
}
