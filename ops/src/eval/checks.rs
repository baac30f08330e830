//! Scoring a draft: each check reads files through the store and parses them here, apart
//! from the tools the agent used (calamine for xlsx, zip + quick-xml for docx and pptx, text
//! and CSV by hand).

use std::io::{Cursor, Read};

use anyhow::{Context, bail};
use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::store::{ListFiles, ReadFile, View};
use calamine::{Data, Reader, Xlsx, open_workbook_from_rs};
use quick_xml::Reader as XmlReader;
use quick_xml::events::Event;
use serde::{Deserialize, Serialize};

use super::parse;
use super::task::{Check, Expected};
use crate::client::Client;

/// How one check came out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CheckResult {
    pub(crate) kind: String,
    /// The workbench path the check read (none for `draft_unchanged`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) path: String,
    pub(crate) passed: bool,
    /// Why it failed (empty when it passed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) detail: String,
}

/// Scores `check` against the workbench's draft (its published state when the job left no
/// draft).
pub(crate) async fn evaluate(client: &Client, workbench: &str, check: &Check) -> CheckResult {
    let outcome = match check {
        Check::FileAbsent { path } => file_absent(client, workbench, path).await,
        Check::FileUnchanged { path } => file_unchanged(client, workbench, path).await,
        Check::DraftUnchanged => draft_unchanged(client, workbench).await,
        _ => match read(client, workbench, check.path(), View::Current).await {
            Ok(Some(bytes)) => content_check(check, &bytes),
            Ok(None) => Err(anyhow::anyhow!("{} is not in the draft", check.path())),
            Err(error) => Err(error),
        },
    };
    CheckResult {
        kind: check.kind().to_string(),
        path: check.path().to_string(),
        passed: outcome.is_ok(),
        detail: outcome.err().map(|e| format!("{e:#}")).unwrap_or_default(),
    }
}

/// A file's bytes in `view`, `None` when the view has no such file.
async fn read(
    client: &Client,
    workbench: &str,
    path: &str,
    view: View,
) -> anyhow::Result<Option<Vec<u8>>> {
    let listed = digest_of(client, workbench, path, view).await?;
    if listed.is_none() {
        return Ok(None);
    }
    let file = client
        .call(&ReadFile {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            path: path.into(),
            view,
        })
        .await?;
    Ok(Some(file.content.into_vec()))
}

async fn digest_of(
    client: &Client,
    workbench: &str,
    path: &str,
    view: View,
) -> anyhow::Result<Option<String>> {
    Ok(listing(client, workbench, view)
        .await?
        .into_iter()
        .find(|(listed, _)| listed == path)
        .map(|(_, digest)| digest))
}

/// Every file of `view` as (path, content digest), by path.
async fn listing(
    client: &Client,
    workbench: &str,
    view: View,
) -> anyhow::Result<Vec<(String, String)>> {
    let listing = client
        .call(&ListFiles {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            view,
        })
        .await?;
    let mut files: Vec<(String, String)> = listing
        .files
        .into_iter()
        .map(|entry| (entry.path, entry.digest))
        .collect();
    files.sort();
    Ok(files)
}

async fn file_absent(client: &Client, workbench: &str, path: &str) -> anyhow::Result<()> {
    match digest_of(client, workbench, path, View::Current).await? {
        None => Ok(()),
        Some(_) => bail!("{path} is still in the draft"),
    }
}

async fn file_unchanged(client: &Client, workbench: &str, path: &str) -> anyhow::Result<()> {
    let before = digest_of(client, workbench, path, View::Published).await?;
    let after = digest_of(client, workbench, path, View::Current).await?;
    match (before, after) {
        (Some(before), Some(after)) if before == after => Ok(()),
        (Some(_), Some(_)) => bail!("{path} was changed"),
        (None, _) => bail!("{path} is not an input of the task"),
        (Some(_), None) => bail!("{path} was removed"),
    }
}

/// The draft (the published state when the job left none) holds the published files, each with
/// its content: nothing written, changed, added or removed.
async fn draft_unchanged(client: &Client, workbench: &str) -> anyhow::Result<()> {
    let before = listing(client, workbench, View::Published).await?;
    let after = listing(client, workbench, View::Current).await?;
    let changes = draft_changes(&before, &after);
    if !changes.is_empty() {
        bail!("the draft differs from the inputs: {}", changes.join(", "));
    }
    Ok(())
}

/// What differs between two listings of (path, digest), by path: `added x`, `changed x`,
/// `removed x`.
fn draft_changes(before: &[(String, String)], after: &[(String, String)]) -> Vec<String> {
    let mut changes = Vec::new();
    for (path, digest) in after {
        match before.iter().find(|(p, _)| p == path) {
            None => changes.push(format!("added {path}")),
            Some((_, old)) if old != digest => changes.push(format!("changed {path}")),
            Some(_) => {}
        }
    }
    for (path, _) in before {
        if !after.iter().any(|(p, _)| p == path) {
            changes.push(format!("removed {path}"));
        }
    }
    changes
}

/// The checks that look inside a file.
fn content_check(check: &Check, bytes: &[u8]) -> anyhow::Result<()> {
    match check {
        Check::FileLines {
            equals, any_order, ..
        } => {
            let found = text_lines(bytes);
            let same = if *any_order {
                sorted(&found) == sorted(equals)
            } else {
                &found == equals
            };
            if !same {
                let order = if *any_order { " (in any order)" } else { "" };
                bail!("expected lines {equals:?}{order}, found {found:?}");
            }
        }
        Check::FileContains { text, .. } => {
            if !String::from_utf8_lossy(bytes).contains(text.as_str()) {
                bail!("does not contain {text:?}");
            }
        }
        Check::CsvRows { count, .. } => {
            let found = csv_data_rows(bytes);
            if found != *count {
                bail!("expected {count} data rows, found {found}");
            }
        }
        Check::CsvCell {
            row,
            column,
            equals,
            ..
        } => {
            let found = parse::csv_cell(bytes, *row, column)?;
            if !cell_matches(&Data::String(found.clone()), equals) {
                bail!(
                    "row {row}, column {column:?}: expected {}, found {found:?}",
                    expected_text(equals)
                );
            }
        }
        Check::XlsxCell {
            sheet,
            cell,
            equals,
            ..
        } => {
            let found = xlsx_cell(bytes, sheet.as_deref(), cell)?;
            if !cell_matches(&found, equals) {
                bail!(
                    "{cell}: expected {}, found {found:?}",
                    expected_text(equals)
                );
            }
        }
        Check::DocxParagraph { contains, .. } => {
            let paragraphs = docx_paragraphs(bytes)?;
            if !paragraphs.iter().any(|p| p.contains(contains.as_str())) {
                bail!("no paragraph of {} contains {contains:?}", paragraphs.len());
            }
        }
        Check::DocxNoParagraph { contains, .. } => {
            let paragraphs = docx_paragraphs(bytes)?;
            if let Some(found) = paragraphs.iter().find(|p| p.contains(contains.as_str())) {
                bail!("a paragraph still contains {contains:?}: {found:?}");
            }
        }
        Check::PptxTitle { slide, equals, .. } => {
            let titles = parse::pptx_titles(bytes)?;
            let Some(title) = slide.checked_sub(1).and_then(|at| titles.get(at)) else {
                bail!("no slide {slide} (the presentation has {})", titles.len());
            };
            let found = title.as_deref().unwrap_or_default();
            if found.trim() != equals.trim() {
                match title {
                    Some(_) => {
                        bail!("slide {slide}: expected the title {equals:?}, found {found:?}")
                    }
                    None => bail!("slide {slide} has no title placeholder"),
                }
            }
        }
        Check::FileAbsent { .. } | Check::FileUnchanged { .. } | Check::DraftUnchanged => {}
    }
    Ok(())
}

fn sorted(lines: &[String]) -> Vec<&str> {
    let mut lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    lines.sort_unstable();
    lines
}

fn expected_text(expected: &Expected) -> String {
    match expected {
        Expected::Number(n) => display_number(*n),
        Expected::Text(t) => format!("{t:?}"),
    }
}

/// The lines of a text file: UTF-8 (lossy, a BOM dropped), split at `\n`, each line without a
/// trailing `\r` and trailing whitespace, trailing empty lines dropped.
pub(crate) fn text_lines(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut lines: Vec<String> = text.split('\n').map(|l| l.trim_end().to_string()).collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines
}

/// CSV records after the header (RFC 4180 quoting: a quoted field may hold commas and line
/// breaks); blank lines are not records.
pub(crate) fn csv_data_rows(bytes: &[u8]) -> usize {
    let text = String::from_utf8_lossy(bytes);
    let mut records = 0usize;
    let mut quoted = false;
    let mut record_has_content = false;
    for ch in text.chars() {
        match ch {
            '"' => {
                quoted = !quoted;
                record_has_content = true;
            }
            '\n' if !quoted => {
                if record_has_content {
                    records += 1;
                }
                record_has_content = false;
            }
            '\r' => {}
            _ => record_has_content |= !ch.is_whitespace() || quoted,
        }
    }
    if record_has_content {
        records += 1;
    }
    records.saturating_sub(1)
}

/// A cell's value (sheet by name, else the first sheet), `Data::Empty` past the used range.
pub(crate) fn xlsx_cell(bytes: &[u8], sheet: Option<&str>, cell: &str) -> anyhow::Result<Data> {
    let mut workbook: Xlsx<_> =
        open_workbook_from_rs(Cursor::new(bytes)).context("not an xlsx workbook")?;
    let names = workbook.sheet_names();
    let name = match sheet {
        Some(sheet) => names.iter().find(|n| n.as_str() == sheet).cloned(),
        None => names.first().cloned(),
    };
    let Some(name) = name else {
        bail!("no sheet {:?} (sheets: {names:?})", sheet.unwrap_or(""));
    };
    let range = workbook
        .worksheet_range(&name)
        .with_context(|| format!("cannot read sheet {name}"))?;
    let position = cell_position(cell)?;
    Ok(range.get_value(position).cloned().unwrap_or(Data::Empty))
}

/// `B3` → (row 2, column 1), zero-based.
pub(crate) fn cell_position(cell: &str) -> anyhow::Result<(u32, u32)> {
    let split = cell
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(cell.len());
    let (letters, digits) = cell.split_at(split);
    let valid = !letters.is_empty()
        && letters.len() <= 3
        && letters.chars().all(|c| c.is_ascii_alphabetic());
    let row: u32 = digits.parse().unwrap_or(0);
    if !valid || row == 0 {
        bail!("{cell:?} is not a cell reference like B3");
    }
    let column = letters
        .to_ascii_uppercase()
        .bytes()
        .fold(0u32, |acc, b| acc * 26 + u32::from(b - b'A' + 1));
    Ok((row - 1, column - 1))
}

/// Whether a cell holds `expected`: a number equal within 1e-9 (relative; numeric text counts),
/// or text equal to the cell's displayed value (trimmed).
pub(crate) fn cell_matches(cell: &Data, expected: &Expected) -> bool {
    match expected {
        Expected::Number(n) => {
            cell_number(cell).is_some_and(|value| (value - n).abs() <= 1e-9 * n.abs().max(1.0))
        }
        Expected::Text(text) => cell_display(cell).trim() == text.trim(),
    }
}

fn cell_number(cell: &Data) -> Option<f64> {
    match cell {
        Data::Int(i) => Some(*i as f64),
        Data::Float(f) => Some(*f),
        Data::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A cell as a spreadsheet shows it without number formats: integral numbers without `.0`,
/// booleans `TRUE`/`FALSE`, dates as their ISO text or serial number.
pub(crate) fn cell_display(cell: &Data) -> String {
    match cell {
        Data::Int(i) => i.to_string(),
        Data::Float(f) => display_number(*f),
        Data::String(s) | Data::DateTimeIso(s) | Data::DurationIso(s) => s.clone(),
        Data::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        Data::DateTime(dt) => display_number(dt.as_f64()),
        Data::Error(e) => e.to_string(),
        Data::Empty => String::new(),
    }
}

fn display_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// The text of every paragraph (`w:p`) in `word/document.xml`, table cells included: `w:t`
/// text, `w:tab` as a tab, `w:br`/`w:cr` as a line break.
pub(crate) fn docx_paragraphs(bytes: &[u8]) -> anyhow::Result<Vec<String>> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).context("not a docx (zip)")?;
    let mut xml = String::new();
    archive
        .by_name("word/document.xml")
        .context("no word/document.xml")?
        .read_to_string(&mut xml)
        .context("word/document.xml is not UTF-8")?;
    paragraphs_of(&xml)
}

fn paragraphs_of(xml: &str) -> anyhow::Result<Vec<String>> {
    let mut reader = XmlReader::from_str(xml);
    let mut paragraphs = Vec::new();
    let mut current: Option<String> = None;
    let mut in_text = false;
    loop {
        match reader
            .read_event()
            .context("word/document.xml is not well-formed")?
        {
            Event::Start(e) => match e.name().into_inner() {
                "w:p" => current = Some(String::new()),
                "w:t" => in_text = true,
                _ => {}
            },
            Event::Empty(e) => match (e.name().into_inner(), current.as_mut()) {
                ("w:tab", Some(text)) => text.push('\t'),
                ("w:br" | "w:cr", Some(text)) => text.push('\n'),
                ("w:p", _) => paragraphs.push(String::new()),
                _ => {}
            },
            Event::End(e) => match e.name().into_inner() {
                "w:p" => paragraphs.extend(current.take()),
                "w:t" => in_text = false,
                _ => {}
            },
            Event::Text(t) if in_text => {
                if let Some(text) = current.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::GeneralRef(r) if in_text => {
                if let Some(text) = current.as_mut() {
                    text.push_str(&parse::resolve_reference(&r));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(paragraphs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_ignore_line_endings_and_trailing_blanks() {
        assert_eq!(text_lines(b"5\r\n\n"), vec!["5"]);
        assert_eq!(text_lines(b"\xef\xbb\xbfa \nb"), vec!["a", "b"]);
        assert!(text_lines(b"").is_empty());
    }

    #[test]
    fn csv_rows_count_records_not_lines() {
        assert_eq!(csv_data_rows(b"a,b\n1,2\n3,4\n"), 2);
        assert_eq!(csv_data_rows(b"a,b\r\n\"x\ny\",2\r\n\r\n"), 1);
        assert_eq!(csv_data_rows(b"a,b"), 0);
        assert_eq!(csv_data_rows(b""), 0);
    }

    #[test]
    fn cell_references() {
        assert_eq!(cell_position("A1").ok(), Some((0, 0)));
        assert_eq!(cell_position("b3").ok(), Some((2, 1)));
        assert_eq!(cell_position("AA10").ok(), Some((9, 26)));
        assert!(cell_position("3B").is_err());
        assert!(cell_position("A0").is_err());
    }

    #[test]
    fn cells_compare_as_numbers_or_displayed_text() {
        assert!(cell_matches(
            &Data::Float(4460.99),
            &Expected::Number(4460.99)
        ));
        assert!(cell_matches(&Data::Int(5), &Expected::Text("5".into())));
        assert!(cell_matches(&Data::Float(3.0), &Expected::Text("3".into())));
        assert!(cell_matches(
            &Data::String("12".into()),
            &Expected::Number(12.0)
        ));
        assert!(!cell_matches(
            &Data::String("x".into()),
            &Expected::Number(1.0)
        ));
        assert!(!cell_matches(&Data::Empty, &Expected::Text("a".into())));
    }

    #[test]
    fn docx_paragraph_text_spans_runs() -> anyhow::Result<()> {
        let xml = r#"<w:document><w:body><w:p><w:r><w:t>Acme </w:t></w:r><w:r><w:t>&amp; Co</w:t><w:tab/></w:r></w:p><w:p/><w:tbl><w:tr><w:tc><w:p><w:r><w:t xml:space="preserve">cell</w:t></w:r></w:p></w:tc></w:tr></w:tbl></w:body></w:document>"#;
        assert_eq!(paragraphs_of(xml)?, vec!["Acme & Co\t", "", "cell"]);
        Ok(())
    }

    #[test]
    fn an_unchanged_draft_lists_the_same_files_with_the_same_digests() {
        let file = |path: &str, digest: &str| (path.to_string(), digest.to_string());
        let published = [file("a.csv", "1"), file("b.txt", "2")];
        assert!(draft_changes(&published, &published).is_empty());
        let draft = [file("a.csv", "9"), file("c.txt", "3")];
        assert_eq!(
            draft_changes(&published, &draft),
            ["changed a.csv", "added c.txt", "removed b.txt"]
        );
    }

    #[test]
    fn lines_in_any_order_and_csv_cells_by_column_name() {
        let lines = |equals: &[&str], any_order| Check::FileLines {
            path: "r.txt".into(),
            equals: equals.iter().map(|l| l.to_string()).collect(),
            any_order,
        };
        let file = b"b\na\n";
        assert!(content_check(&lines(&["a", "b"], true), file).is_ok());
        assert!(content_check(&lines(&["a", "b"], false), file).is_err());
        assert!(content_check(&lines(&["a", "b", "b"], true), file).is_err());
        let cell = |column: &str, equals| Check::CsvCell {
            path: "t.csv".into(),
            row: 1,
            column: column.into(),
            equals,
        };
        let csv = b"species,mean_flipper_mm\n\"Adelie\",190.0\n";
        assert!(content_check(&cell("mean_flipper_mm", Expected::Number(190.0)), csv).is_ok());
        assert!(content_check(&cell("species", Expected::Text("Adelie".into())), csv).is_ok());
        assert!(content_check(&cell("mean_flipper_mm", Expected::Number(189.9)), csv).is_err());
        assert!(content_check(&cell("flipper", Expected::Number(190.0)), csv).is_err());
    }
}
