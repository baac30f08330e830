//! A plan's contracts reviewed before any item runs: each one must be checkable.
//!
//! A contract the engine could not check is a promise nobody holds the model to: `at B2` on a
//! text file, `of 10` on a number, a number computed from the workbench's data without the
//! query it comes from, an `edit` of a file that does not exist. [`problem`] names what is
//! wrong with one contract from its form and the workbench's files; the driver also runs each
//! source query, and a source that fails or cannot give the kind's values is a problem too
//! ([`source_problem`]). The model is told every problem once, and answers with a new plan.

use atelier_messages::contract::{Contract, Holds};
use atelier_messages::path::kind_of;

use super::Rows;
use crate::catalog;

/// The workbench's files as a contract is reviewed against them.
#[derive(Debug, Clone, Copy)]
pub struct Workbench<'a> {
    /// Every file's path.
    pub files: &'a [String],
    /// The files a source names.
    pub sources: &'a Sources,
}

/// The files a contract's source can name: tables, whose rows a source query reads as `data`,
/// and text files, whose figures it reads as `figures` (every number in the text, one row
/// each: line, label, value, unit). A number taken from prose is then checked like one
/// computed from a table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sources {
    pub tables: Vec<String>,
    pub texts: Vec<String>,
}

impl Sources {
    /// The sources among a workbench's `paths`.
    pub fn of(paths: &[String]) -> Self {
        Self {
            tables: catalog::tables(paths),
            texts: catalog::texts(paths),
        }
    }

    /// Every source's path: the tables, then the text files.
    pub fn paths(&self) -> Vec<String> {
        self.iter().cloned().collect()
    }

    fn iter(&self) -> impl Iterator<Item = &String> {
        self.tables.iter().chain(&self.texts)
    }

    fn contains(&self, path: &str) -> bool {
        self.iter().any(|source| source == path)
    }

    /// True when a file other than `target` is a source (a file is not its own).
    pub fn besides(&self, target: &str) -> bool {
        self.iter().any(|source| source != target)
    }

    /// How a contract line names its source from these files.
    fn forms(&self) -> String {
        let table = format!(
            "`from TABLE = SELECT … FROM data`, TABLE one of {}",
            self.tables.join(", ")
        );
        let text = format!(
            "`from FILE = SELECT … FROM figures`, FILE one of {} (the text's numbers, one row \
             each: line, label, value, unit)",
            self.texts.join(", ")
        );
        match (self.tables.is_empty(), self.texts.is_empty()) {
            (false, true) => table,
            (true, false) => text,
            _ => format!("{table}, or {text}"),
        }
    }
}

/// What is wrong with `contract`'s form, when something is; its source query is run
/// separately.
pub fn problem(contract: &Contract, workbench: Workbench<'_>) -> Option<String> {
    let holds = contract.holds;
    let exists = workbench.files.contains(&contract.path);
    if matches!(holds, Holds::Edit | Holds::Absent) && !exists {
        return Some(format!(
            "`{holds}` is for a file the workbench has, and it has no {}; a new file holds a \
             number, a list, a table or text",
            contract.path
        ));
    }
    if !contract.touches.is_empty() && holds != Holds::Edit {
        return Some(format!(
            "`at {}` names what an edit touches; a {holds} says where its values come from with \
             `from FILE = SELECT …`",
            contract.touches.join(", ")
        ));
    }
    if contract.count.is_some() && !matches!(holds, Holds::List | Holds::Table) {
        return Some(format!(
            "`of N` counts a list's values or a table's rows, not a {holds}'s"
        ));
    }
    if !contract.columns.is_empty() && holds != Holds::Table {
        return Some(format!(
            "`({})` is a table's header; a {holds} has none",
            contract.columns.join(", ")
        ));
    }
    if let Some(problem) = unchecked(contract, workbench.sources, exists) {
        return Some(problem);
    }
    if let Some(source) = &contract.source {
        if !holds.computed() {
            return Some(format!(
                "a {holds} has no source; a number, a list or a table does"
            ));
        }
        if !workbench.sources.contains(&source.path) {
            return Some(format!(
                "its source {} is not a table or text file of the workbench ({})",
                source.path,
                shown_list(&workbench.sources.paths())
            ));
        }
    }
    None
}

/// Whether `contract` declares a change to a document, deck or workbook the workbench has
/// (`existed`) without the parts it touches: `text`, or an `edit` naming none.
pub fn changes_without_parts(contract: &Contract, existed: bool) -> bool {
    let holds = contract.holds;
    let whole = holds == Holds::Text || (holds == Holds::Edit && contract.touches.is_empty());
    existed && whole && matches!(kind_of(&contract.path), "docx" | "pptx" | "xlsx")
}

/// Why the content `contract` promises could not be checked, whatever is written: a number,
/// list or table computed from the workbench's `sources` without the query it comes from, one
/// in a document, a deck or a binary file (only text files and workbooks are read back as
/// values), a delimited table (`.csv`, `.tsv`) or a workbook declared as text, or a change to a
/// document, deck or workbook the workbench has (`existed`) that does not name the parts it
/// touches (only an edit `at` its parts is compared, part by part). The plan's review tells the
/// model; when the item ends such a target is not done.
pub fn unchecked(contract: &Contract, sources: &Sources, existed: bool) -> Option<String> {
    let holds = contract.holds;
    if holds == Holds::Text && kind_of(&contract.path) == "csv" {
        return Some(format!(
            "{} is a delimited table, not text: declare it a `table` with its columns{}",
            contract.path,
            if sources.tables.is_empty() {
                String::new()
            } else {
                " and the query its rows come from".to_string()
            }
        ));
    }
    if holds == Holds::Text && kind_of(&contract.path) == "xlsx" {
        return Some(format!(
            "{} is a workbook: it holds cells, not text — a new sheet of values is a `table` \
             (or a `number`, a `list`) with the query its values come from, a change to cells \
             an `edit` at the cells it sets (`at Travel!A1, Travel!B1`)",
            contract.path
        ));
    }
    if changes_without_parts(contract, existed) {
        return Some(format!(
            "{} is in the workbench: a change to it is an `edit` at the parts it touches (`at \
             slide 2`, `at paragraph 5`, `at Sheet1!B2`; slides, paragraphs and tables numbered \
             from 0 as read_file numbers them) — the engine compares those and checks that \
             nothing else changed",
            contract.path
        ));
    }
    if holds.computed() && matches!(kind_of(&contract.path), "docx" | "pptx" | "pdf" | "binary") {
        return Some(format!(
            "a {holds} in {} cannot be checked: the engine compares numbers, lists and tables \
             in text files and workbooks; a document or a deck is `text` when new, `edit` when \
             the workbench has it",
            contract.path
        ));
    }
    if holds.computed() && contract.source.is_none() && sources.besides(&contract.path) {
        return Some(format!(
            "a {holds} computed from the workbench's data names the query it comes from: end \
             the line with {}",
            sources.forms()
        ));
    }
    None
}

/// What is wrong with a contract's source, given what its query returned: its error, or rows
/// that cannot give the kind's values (a number's source gives one value, a list's one
/// column).
pub fn source_problem(contract: &Contract, result: &Result<Rows, String>) -> Option<String> {
    let query = contract
        .source
        .as_ref()
        .map_or("", |source| source.query.as_str());
    let rows = match result {
        Ok(rows) => rows,
        Err(error) => return Some(format!("its source query `{query}` fails: {error}")),
    };
    match contract.holds {
        Holds::Number if rows.rows.len() != 1 || rows.columns.len() != 1 => Some(format!(
            "its source query `{query}` gives {} and {}; a number's source gives one value \
             (one row, one column: an aggregate such as count, sum or avg)",
            plural(rows.rows.len(), "row", rows.complete),
            plural(rows.columns.len(), "column", true)
        )),
        Holds::List if rows.columns.len() != 1 => Some(format!(
            "its source query `{query}` gives {}; a list's source gives one column, its values",
            plural(rows.columns.len(), "column", true)
        )),
        _ => None,
    }
}

fn plural(count: usize, noun: &str, exact: bool) -> String {
    let more = if exact { "" } else { " or more" };
    let s = if count == 1 && exact { "" } else { "s" };
    format!("{count}{more} {noun}{s}")
}

fn shown_list(paths: &[String]) -> String {
    if paths.is_empty() {
        return "it has none".to_string();
    }
    paths.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::parse_line;

    fn review(line: &str) -> Option<String> {
        review_in(&["penguins.csv", "notes.txt"], line)
    }

    /// The problem with the contract `line` in a workbench of `paths`.
    fn review_in(paths: &[&str], line: &str) -> Option<String> {
        let files: Vec<String> = paths.iter().map(|path| path.to_string()).collect();
        let contract = parse_line(line).expect("a contract line");
        problem(
            &contract,
            Workbench {
                files: &files,
                sources: &Sources::of(&files),
            },
        )
    }

    #[test]
    fn a_checkable_contract_has_no_problem() {
        for line in [
            "islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data",
            "names.txt: list of 3 from penguins.csv = SELECT DISTINCT island FROM data",
            "summary.csv: table (island, n) from penguins.csv = SELECT island, count(*) FROM data GROUP BY 1",
            "report.md: text",
            "notes.txt: edit",
            "notes.txt: absent",
        ] {
            assert_eq!(review(line), None, "{line}");
        }
    }

    #[test]
    fn each_uncheckable_form_is_named() {
        let cases = [
            ("total.txt: text at data", "names what an edit touches"),
            (
                "total.txt: number at Quantity, Unit Price",
                "names what an edit touches",
            ),
            (
                "total.txt: number of 10 from penguins.csv = SELECT 1",
                "`of N` counts",
            ),
            (
                "remarks.txt: list (Comment) from penguins.csv = SELECT 1",
                "a table's header",
            ),
            ("total.txt: number", "names the query it comes from"),
            ("rows.csv: table", "names the query it comes from"),
            ("new.xlsx: edit at B2", "a file the workbench has"),
            ("gone.txt: absent", "a file the workbench has"),
            (
                "total.txt: number from other.csv = SELECT 1",
                "not a table or text file of the workbench (penguins.csv, notes.txt)",
            ),
            (
                "total.txt: number",
                "or `from FILE = SELECT … FROM figures`, FILE one of notes.txt",
            ),
            (
                "report.md: text from penguins.csv = SELECT 1",
                "a text has no source",
            ),
            ("stats.csv: text", "is a delimited table, not text"),
            (
                "book.xlsx: text",
                "book.xlsx is a workbook: it holds cells, not text",
            ),
            (
                "report.docx: table from penguins.csv = SELECT island FROM data",
                "a table in report.docx cannot be checked",
            ),
        ];
        for (line, expected) in cases {
            let found = review(line).unwrap_or_default();
            assert!(found.contains(expected), "{line}: {found}");
        }
    }

    #[test]
    fn a_change_to_an_office_file_the_workbench_has_names_its_parts() {
        let reviewed = |line: &str| review_in(&["deck.pptx", "report.docx", "book.xlsx"], line);
        for line in [
            "deck.pptx: text",
            "deck.pptx: edit",
            "report.docx: edit",
            "book.xlsx: edit",
        ] {
            let found = reviewed(line).unwrap_or_default();
            let path = line.split(':').next().unwrap_or_default();
            assert!(
                found.contains(&format!("{path} is in the workbench: a change to it is an `edit` at the parts it touches")),
                "{line}: {found}"
            );
        }
        for line in [
            "deck.pptx: edit at slide 2",
            "report.docx: edit at paragraph 5",
            "book.xlsx: edit at Sheet1!B2",
            "new.pptx: text",
            "new.docx: text",
        ] {
            assert_eq!(reviewed(line), None, "{line}");
        }
    }

    #[test]
    fn a_number_needs_a_source_when_a_file_other_than_its_own_can_give_one() {
        let contract = parse_line("total.txt: number").expect("a contract line");
        let reviewed = |paths: &[&str]| {
            let files: Vec<String> = paths.iter().map(|path| path.to_string()).collect();
            problem(
                &contract,
                Workbench {
                    files: &files,
                    sources: &Sources::of(&files),
                },
            )
        };
        assert_eq!(reviewed(&[]), None);
        assert_eq!(reviewed(&["total.txt", "deck.pptx"]), None);
        let from_prose = reviewed(&["budget_notes.txt"]).unwrap_or_default();
        assert!(
            from_prose
                .contains("`from FILE = SELECT … FROM figures`, FILE one of budget_notes.txt")
                && !from_prose.contains("FROM data"),
            "{from_prose}"
        );
        let sourced =
            parse_line("total.txt: number from budget_notes.txt = SELECT sum(value) FROM figures")
                .expect("a contract line");
        let files = ["budget_notes.txt".to_string()];
        let workbench = Workbench {
            files: &files,
            sources: &Sources::of(&files),
        };
        assert_eq!(problem(&sourced, workbench), None);
    }

    #[test]
    fn a_source_must_run_and_give_the_kinds_values() {
        let number = parse_line("t.txt: number from p.csv = SELECT x FROM data").expect("line");
        let rows = |columns: usize, count: usize| Rows {
            columns: (0..columns).map(|c| format!("c{c}")).collect(),
            rows: vec![vec![serde_json::json!(1); columns]; count],
            complete: true,
        };
        assert_eq!(source_problem(&number, &Ok(rows(1, 1))), None);
        let many = source_problem(&number, &Ok(rows(1, 344))).unwrap_or_default();
        assert!(many.contains("gives 344 rows and 1 column"), "{many}");
        let failed = source_problem(&number, &Err("SQL_ERROR: no column x".into()));
        assert!(failed.unwrap_or_default().contains("fails: SQL_ERROR"));
        let list = parse_line("l.txt: list from p.csv = SELECT a, b FROM data").expect("line");
        assert!(
            source_problem(&list, &Ok(rows(2, 3)))
                .unwrap_or_default()
                .contains("gives 2 columns")
        );
        assert_eq!(source_problem(&list, &Ok(rows(1, 3))), None);
    }
}
