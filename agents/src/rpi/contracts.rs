//! Checking a done item's targets against their contracts ([`crate::contract`]).
//!
//! When an item's final answer is accepted, the engine reads back each target that has a
//! contract and, for a contract with a source, runs the source query — both through the
//! workbench's own read-only tools (`read_file`, `table_query`), so the check sees the draft
//! exactly as a user will. A broken contract fails the attempt with `ITEM_NOT_DONE` saying what
//! differs; the model is told once (its retry), then the item fails. An `absent` target holds
//! when it is no longer in the draft. The plan's review told the model of a source query that
//! fails ([`super::plan_review`]); one that still fails when the item ends leaves its target
//! unchecked, which breaks the contract: the engine does not vouch for what it cannot check.
//! Before the item's first attempt each working source's result is read (journaled) and told
//! to the model in the item's prompt ([`Driver::sources_told`]).
//! A `text` target without a source is held to the files the request names: some word of its
//! own is in one of them ([`contract::ungrounded_text`]), read through the same tools.
//! Office files (xlsx, docx, pptx, pdf) are held to
//! being changed; the kinds are checked on text files (txt, md, csv, tsv, json, …). An
//! `edit … at REFS` on a workbook compares its cells before the item's first attempt
//! (journaled) with its cells at the end: every named cell changed, and nothing else did
//! ([`crate::contract::cells`]); each sheet is compared over the window `read_file` reads
//! by default. On a deck or a document the parts are its slides, paragraphs and tables
//! ([`crate::contract::parts`]).

use std::collections::BTreeMap;

use atelier_messages::contract::{Contract, Holds};
use atelier_messages::job::{ItemStatus, PlanItem};
use atelier_messages::journal;
use atelier_messages::path::kind_of;
use atelier_messages::tool::ToolName;
use atelier_messages::{ErrorBody, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::driver::Driver;
use crate::AgentError;
use crate::catalog;
use crate::contract::cells::{self, Cells};
use crate::contract::parts::{self, Parts};
use crate::contract::review::{self, Sources};
use crate::contract::{self, NamedSource, Rows};
use crate::request;

/// The start of every reason a broken contract gives (a retry after one is the last).
pub(super) const BROKEN_CONTRACT: &str = "the written content breaks the plan's contract";

/// The most lines of a target read back for its check.
const READ_LINES: usize = 2000;
/// The most rows of a source query compared.
const SOURCE_ROWS: u64 = 10_000;

/// A workbook's cells as an edit contract compares them: its first sheet's name and every
/// sheet's cells.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Workbook {
    first_sheet: String,
    cells: Cells,
}

impl Workbook {
    /// Its sheets' names and cells' values, one per line.
    fn text(&self) -> String {
        let mut text = String::new();
        for (sheet, cells) in &self.cells {
            text.push_str(sheet);
            text.push('\n');
            for value in cells.values() {
                text.push_str(value);
                text.push('\n');
            }
        }
        text
    }
}

/// An office file an edit contract names, as the edit compares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum Edited {
    /// A workbook's cells.
    Workbook(Workbook),
    /// A document's or a deck's parts.
    Parts { parts: Parts },
}

/// The office files an item's edit contracts name, by path, before its first attempt.
pub(super) type EditsBefore = BTreeMap<String, Edited>;

/// The workbench as an item's first attempt found it, for checking the item's contracts.
pub(super) struct ItemBefore<'a> {
    /// Every file's path.
    pub files: &'a [String],
    /// The office files its edit contracts name.
    pub edits: &'a EditsBefore,
    /// The files a contract's source names.
    pub sources: &'a Sources,
}

/// What checking an item's contracts found.
#[derive(Debug, Default)]
pub(super) struct Checked {
    /// What differs, per broken contract.
    pub broken: Vec<String>,
    /// A broken contract cannot be checked whatever the item writes (its source fails, its
    /// kind cannot hold what the target is): trying the item again cannot mend it.
    pub uncheckable: bool,
}

impl Checked {
    /// The failure reason when a contract is broken.
    pub(super) fn reason(&self) -> Option<String> {
        (!self.broken.is_empty()).then(|| format!("{BROKEN_CONTRACT}: {}", self.broken.join("; ")))
    }
}

/// The contracts of the done items before `item` on the files it changed, with the item that
/// declared each, so that `item` is checked against them too: a later item that rewrites an
/// earlier one's target must leave it holding what the earlier item promised (else a weaker
/// contract on the rewrite, or none, would end the job with content no check held). Left out:
/// an `edit` (it compares one item's change to the file, and a later item may change other
/// parts of it); a document, deck or workbook declared as new `text` (held to being written,
/// its words not read back, and once the file exists the same line reads as a change naming
/// no parts, [`review::changes_without_parts`]); and one the item itself declares.
pub(super) fn earlier_contracts(
    item: &PlanItem,
    items: &[PlanItem],
    changed: &[String],
) -> Vec<(u32, Contract)> {
    items
        .iter()
        .filter(|earlier| earlier.index != item.index && earlier.status == ItemStatus::Done)
        .flat_map(|earlier| {
            earlier
                .contracts
                .iter()
                .map(move |contract| (earlier.index, contract))
        })
        .filter(|(_, contract)| {
            contract.holds != Holds::Edit
                && !review::changes_without_parts(contract, true)
                && changed.contains(&contract.path)
                && !item.contracts.contains(contract)
        })
        .map(|(index, contract)| (index, contract.clone()))
        .collect()
}

/// How one contract is broken.
enum Broken {
    /// The content differs from what the contract promises.
    Differs(String),
    /// What the target holds cannot be checked against the contract.
    Uncheckable(String),
}

impl Broken {
    fn uncheckable(problem: impl std::fmt::Display) -> Self {
        Broken::Uncheckable(format!("{problem}, so what it holds cannot be checked"))
    }
}

impl Driver<'_> {
    /// The office files the item's `edit … at REFS` contracts name, as they are before its
    /// first attempt: read and journaled the first time, recalled by every later attempt or run
    /// (nothing is journaled for an item without such a contract).
    pub(super) async fn edits_before(&self, item: &PlanItem) -> Result<EditsBefore, AgentError> {
        if !item.contracts.iter().any(compares_edit) {
            return Ok(EditsBefore::new());
        }
        let key = journal::item_cells(item.index);
        if let Some(before) = self.recall::<EditsBefore>(&key).await? {
            return Ok(before);
        }
        let mut before = EditsBefore::new();
        for contract in item
            .contracts
            .iter()
            .filter(|contract| compares_edit(contract))
        {
            let prefix = format!("{}.contract.{}.before", self.job.job_id, item.index);
            if let Some(edited) = self.edited(&contract.path, &prefix).await? {
                before.insert(contract.path.clone(), edited);
            }
        }
        self.record(&key, &before).await?;
        Ok(before)
    }

    /// The office file at `path` in the draft as an edit compares it; `None` when it is not
    /// there or not readable.
    async fn edited(&self, path: &str, prefix: &str) -> Result<Option<Edited>, AgentError> {
        if kind_of(path) == "xlsx" {
            return Ok(self.workbook(path, prefix).await?.map(Edited::Workbook));
        }
        let read = self.read(json!({"path": path}), prefix).await?;
        Ok(read
            .as_ref()
            .and_then(parts::read_parts)
            .map(|parts| Edited::Parts { parts }))
    }

    /// Checks the contracts of an item whose final answer was accepted — its own, then
    /// `earlier` ones ([`earlier_contracts`]) — `changed` are the paths the item changed,
    /// `start` the workbench as the item's first attempt found it.
    pub(super) async fn check_contracts(
        &self,
        contracts: &[Contract],
        earlier: &[(u32, Contract)],
        call_prefix: &str,
        changed: &[String],
        start: &ItemBefore<'_>,
    ) -> Result<Checked, AgentError> {
        let mut checked = Checked::default();
        let declared = contracts.iter().map(|contract| (None, contract)).chain(
            earlier
                .iter()
                .map(|(item, contract)| (Some(*item), contract)),
        );
        for (index, (by_earlier_item, contract)) in declared.enumerate() {
            let prefix = format!("{call_prefix}.{index}");
            let broken = if compares_edit(contract) && changed.contains(&contract.path) {
                self.check_edit(contract, &prefix, start.edits.get(&contract.path))
                    .await?
                    .map(Broken::Differs)
            } else {
                self.check_one(contract, &prefix, changed, start).await?
            };
            let why = match broken {
                None => continue,
                Some(Broken::Differs(why)) => why,
                Some(Broken::Uncheckable(why)) => {
                    tracing::warn!(path = %contract.path, %why, "a contract cannot be checked");
                    checked.uncheckable = true;
                    why
                }
            };
            checked.broken.push(match by_earlier_item {
                None => format!("{}: {why}", contract.path),
                Some(item) => format!(
                    "{} (as item {item} declared it, and this item rewrote it): {why}",
                    contract.path
                ),
            });
        }
        Ok(checked)
    }

    async fn check_one(
        &self,
        contract: &Contract,
        prefix: &str,
        changed: &[String],
        start: &ItemBefore<'_>,
    ) -> Result<Option<Broken>, AgentError> {
        let sources = start.sources;
        let existed = start.files.contains(&contract.path);
        let differs = |why: &str| Ok(Some(Broken::Differs(why.to_string())));
        if !changed.contains(&contract.path) {
            return differs("the item did not change it");
        }
        if contract.holds == Holds::Absent {
            let files = self.host.files().await?;
            let present = files.iter().any(|file| file.path == contract.path);
            return if present {
                differs("it is still in the draft")
            } else {
                Ok(None)
            };
        }
        if let Some(problem) = review::unchecked(contract, sources, existed) {
            return Ok(Some(Broken::uncheckable(problem)));
        }
        if contract.holds.computed() && kind_of(&contract.path) == "xlsx" {
            return self.check_workbook(contract, prefix).await;
        }
        if contract.holds == Holds::Edit || !is_text(&contract.path) {
            return Ok(None);
        }
        let Some(content) = self.read_back(&contract.path, prefix).await? else {
            return differs("it is not in the draft");
        };
        if sources.besides(&contract.path)
            && let Some(problem) = contract::figures_as_text(contract, &content)
        {
            return Ok(Some(Broken::uncheckable(problem)));
        }
        let source = match self.source_rows(contract, prefix).await? {
            Ok(source) => source,
            Err(broken) => return Ok(Some(broken)),
        };
        if let Err(why) = contract::check(contract, &content, source.as_ref()) {
            return Ok(Some(Broken::Differs(why)));
        }
        if contract.holds != Holds::Text || contract.source.is_some() {
            return Ok(None);
        }
        let sources = self.named_sources(&contract.path, prefix).await?;
        Ok(contract::ungrounded_text(&content, &self.job.message, &sources).map(Broken::Differs))
    }

    /// A number, list or table in a workbook, against its sheets as `read_file` reads them.
    async fn check_workbook(
        &self,
        contract: &Contract,
        prefix: &str,
    ) -> Result<Option<Broken>, AgentError> {
        let Some(reads) = self
            .read_sheets(&contract.path, &format!("{prefix}.read"))
            .await?
        else {
            return Ok(Some(Broken::Differs(
                "it is not a workbook the engine can read".to_string(),
            )));
        };
        let sheets: Vec<cells::SheetRows> = reads.iter().filter_map(cells::sheet_rows).collect();
        let source = match self.source_rows(contract, prefix).await? {
            Ok(source) => source,
            Err(broken) => return Ok(Some(broken)),
        };
        Ok(contract::check_sheets(contract, &sheets, source.as_ref())
            .err()
            .map(Broken::Differs))
    }

    /// The rows of the contract's source (`None` without one), or why the target cannot be
    /// checked: a source that fails, or cannot give the kind's values, leaves it unchecked.
    async fn source_rows(
        &self,
        contract: &Contract,
        prefix: &str,
    ) -> Result<Result<Option<Rows>, Broken>, AgentError> {
        let Some(source) = &contract.source else {
            return Ok(Ok(None));
        };
        let result = self.query_source(source, prefix).await?;
        if let Some(problem) = review::source_problem(contract, &result) {
            return Ok(Err(Broken::uncheckable(problem)));
        }
        Ok(Ok(result.ok()))
    }

    /// The workbench files the request names other than `target`, with their text as the
    /// read-only tools show it (every sheet of a workbook); a file that cannot be read is left
    /// out.
    async fn named_sources(
        &self,
        target: &str,
        prefix: &str,
    ) -> Result<Vec<NamedSource>, AgentError> {
        let files: Vec<String> = self
            .host
            .files()
            .await?
            .into_iter()
            .map(|file| file.path)
            .collect();
        let mut sources = Vec::new();
        let named = request::named_files(&self.job.message, &files);
        for (index, path) in named.into_iter().filter(|path| path != target).enumerate() {
            let prefix = format!("{prefix}.named{index}");
            let text = if kind_of(&path) == "xlsx" {
                self.workbook(&path, &prefix)
                    .await?
                    .map(|workbook| workbook.text())
            } else {
                let read = self.read(json!({"path": path}), &prefix).await?;
                read.as_ref().map(contract::shown_text)
            };
            if let Some(text) = text {
                sources.push(NamedSource { path, text });
            }
        }
        Ok(sources)
    }

    /// The target's text in the draft, by `read_file`; `None` when it is not there.
    pub(super) async fn read_back(
        &self,
        path: &str,
        prefix: &str,
    ) -> Result<Option<String>, AgentError> {
        let args = json!({"path": path, "line_start": 1, "line_count": READ_LINES});
        let read = self.read(args, &format!("{prefix}.read")).await?;
        Ok(read
            .as_ref()
            .and_then(|result| result.get("content"))
            .and_then(Value::as_str)
            .map(str::to_string))
    }

    /// The rows of a contract's source query, or the error the model is told.
    pub(super) async fn query_source(
        &self,
        source: &atelier_messages::contract::Source,
        prefix: &str,
    ) -> Result<Result<Rows, String>, AgentError> {
        let args = json!({"path": source.path, "query": source.query, "window_rows": SOURCE_ROWS});
        let call_id = format!("{prefix}.source");
        Ok(
            match self.call(ToolName::TableQuery, args, &call_id).await? {
                Ok(result) => Rows::of_result(&result)
                    .ok_or_else(|| "the query returned no rows object".to_string()),
                Err(error) => Err(format!("{}: {}", error.code, error.message)),
            },
        )
    }
}

impl Driver<'_> {
    /// What each of the item's working contract sources gives, as its prompt tells the model
    /// (`None` when none runs): read before its first attempt, journaled like any tool call,
    /// so every attempt and a resumed run are told the same.
    pub(super) async fn sources_told(&self, item: &PlanItem) -> Result<Option<String>, AgentError> {
        let mut lines = Vec::new();
        for (index, contract) in item.contracts.iter().enumerate() {
            let Some(source) = &contract.source else {
                continue;
            };
            let prefix = format!("{}.implement.{}.{index}", self.job.job_id, item.index);
            let result = self.query_source(source, &prefix).await?;
            if let (Ok(rows), None) = (&result, review::source_problem(contract, &result)) {
                lines.push(format!(
                    "- {}: {}",
                    contract.path,
                    contract::told(contract, rows)
                ));
            }
        }
        Ok((!lines.is_empty()).then(|| lines.join("\n")))
    }

    /// Why the cells, slides or paragraphs an edit changed are not the ones it names.
    async fn check_edit(
        &self,
        contract: &Contract,
        prefix: &str,
        before: Option<&Edited>,
    ) -> Result<Option<String>, AgentError> {
        let Some(after) = self.edited(&contract.path, prefix).await? else {
            return Ok(Some("it is not a file the engine can read".to_string()));
        };
        // A path is read as one kind before and after: a `before` of another kind is none.
        let report = match &after {
            Edited::Workbook(after) => {
                let before = match before {
                    Some(Edited::Workbook(before)) => Some(before),
                    _ => None,
                };
                let empty = Cells::new();
                let changed = cells::changed_cells(
                    before.map_or(&empty, |before| &before.cells),
                    &after.cells,
                );
                let first_sheet = before.map_or(&after.first_sheet, |before| &before.first_sheet);
                cells::check_touches(&contract.touches, &changed, first_sheet)
            }
            Edited::Parts { parts: after } => {
                let empty = Parts::new();
                let before = match before {
                    Some(Edited::Parts { parts }) => parts,
                    _ => &empty,
                };
                let changed = parts::changed_parts(before, after);
                parts::check_part_touches(&contract.touches, &changed).and_then(|()| {
                    parts::words_from_nowhere(before, after, &changed, &self.job.message)
                })
            }
        };
        Ok(report.err())
    }

    /// Every sheet's cells of the workbook at `path` in the draft, by `read_file` (one call
    /// per sheet); `None` when it is not there or not readable.
    async fn workbook(&self, path: &str, prefix: &str) -> Result<Option<Workbook>, AgentError> {
        let Some(reads) = self.read_sheets(path, prefix).await? else {
            return Ok(None);
        };
        let mut sheets = reads.iter().filter_map(cells::read_cells);
        let Some((first_sheet, first_cells)) = sheets.next() else {
            return Ok(None);
        };
        let mut workbook = Workbook {
            first_sheet: first_sheet.clone(),
            cells: Cells::from([(first_sheet, first_cells)]),
        };
        workbook.cells.extend(sheets);
        Ok(Some(workbook))
    }

    /// Every sheet of the workbook at `path` in the draft as `read_file` gives it (its default
    /// window), the first sheet first; `None` when it is not there or not readable.
    async fn read_sheets(
        &self,
        path: &str,
        prefix: &str,
    ) -> Result<Option<Vec<Value>>, AgentError> {
        let Some(first) = self
            .read(json!({"path": path}), &format!("{prefix}.sheet0"))
            .await?
        else {
            return Ok(None);
        };
        let first_sheet = first
            .get("sheet")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let others: Vec<String> = first
            .get("sheets")
            .and_then(Value::as_array)
            .map(|sheets| {
                sheets
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|sheet| *sheet != first_sheet)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let mut reads = vec![first];
        for (index, sheet) in others.iter().enumerate() {
            let call = format!("{prefix}.sheet{}", index + 1);
            if let Some(read) = self
                .read(json!({"path": path, "sheet": sheet}), &call)
                .await?
            {
                reads.push(read);
            }
        }
        Ok(Some(reads))
    }

    /// One `read_file` call's result; `None` when it failed.
    pub(super) async fn read(
        &self,
        args: Value,
        call_id: &str,
    ) -> Result<Option<Value>, AgentError> {
        Ok(self.call(ToolName::ReadFile, args, call_id).await?.ok())
    }

    /// One call of a read-only workbench tool: its result or its error; only a cancel ends the
    /// check.
    async fn call(
        &self,
        tool: ToolName,
        args: Value,
        call_id: &str,
    ) -> Result<Result<Value, ErrorBody>, AgentError> {
        let Some(spec) = catalog::find(tool.as_str()) else {
            return Ok(Err(ErrorBody::new(
                ErrorCode::Internal,
                format!("{tool} is not in the catalog"),
            )));
        };
        match self.host.call_tool(call_id, &spec, args).await {
            Err(error) if error.code == ErrorCode::UserCanceled => Err(AgentError::Job(error)),
            result => Ok(result),
        }
    }
}

/// True for an `edit` contract that names what it touches on a workbook, a document or a
/// deck.
fn compares_edit(contract: &Contract) -> bool {
    contract.holds == Holds::Edit
        && !contract.touches.is_empty()
        && matches!(kind_of(&contract.path), "xlsx" | "docx" | "pptx")
}

/// True for a target whose text `read_file` gives as it is: a text or delimited file.
fn is_text(path: &str) -> bool {
    matches!(kind_of(path), "text" | "csv")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(index: u32, status: ItemStatus, contracts: Vec<Contract>) -> PlanItem {
        let mut item = PlanItem::pending(index, format!("item {index}"), String::new());
        item.status = status;
        item.contracts = contracts;
        item
    }

    #[test]
    fn a_later_item_is_held_to_the_earlier_done_items_content_contracts_on_what_it_changed() {
        let number = Contract::new("n.txt", Holds::Number);
        let edit = Contract::new("book.xlsx", Holds::Edit);
        let list = Contract::new("names.txt", Holds::List);
        let items = vec![
            item(1, ItemStatus::Done, vec![number.clone(), edit.clone()]),
            item(2, ItemStatus::Failed, vec![list.clone()]),
            item(
                3,
                ItemStatus::Done,
                vec![Contract::new("other.txt", Holds::Text)],
            ),
            item(
                4,
                ItemStatus::Pending,
                vec![Contract::new("n.txt", Holds::Text)],
            ),
        ];
        let changed: Vec<String> = ["n.txt", "book.xlsx", "names.txt"]
            .map(String::from)
            .to_vec();
        // The number is kept; the edit (a comparison of item 1's own change), the failed
        // item's list and a file item 4 did not change are not.
        assert_eq!(
            earlier_contracts(&items[3], &items, &changed),
            vec![(1, number.clone())]
        );
        // A document an earlier item wrote as new `text` is held to being written, not read
        // back; once it exists, the same line would read as a change declaring no parts, and
        // a later item's edit of its paragraphs would fail for it.
        let created = item(
            1,
            ItemStatus::Done,
            vec![Contract::new("notes.docx", Holds::Text)],
        );
        let edits = item(2, ItemStatus::Pending, Vec::new());
        let written = vec!["notes.docx".to_string()];
        assert!(earlier_contracts(&edits, &[created, edits.clone()], &written).is_empty());
        // A contract the item declares itself is checked once, as its own.
        let same = item(4, ItemStatus::Pending, vec![number]);
        assert!(earlier_contracts(&same, &items, &changed).is_empty());
    }
}
