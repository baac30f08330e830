//! Written content against its contract: a number is one number (the source's value, to the
//! precision written), a list has its count and the source's values, a table its header and
//! the source's rows, a text is not empty.

use atelier_messages::contract::{Contract, Holds};
use serde_json::Value;

use super::Rows;
use super::cells::SheetRows;

/// How many differing values a failed check names.
const NAMED: usize = 5;

/// Why `content` (the target's text, as read back from the draft) breaks `contract`, given
/// the rows its source query returned (`None` without a source); `Ok` when it holds. An
/// `edit` is checked on what the item changed and `absent` on the draft's files, not on text:
/// they hold here.
pub fn check(contract: &Contract, content: &str, source: Option<&Rows>) -> Result<(), String> {
    match contract.holds {
        Holds::Number => number(content, source),
        Holds::List => list(contract, content, source),
        Holds::Table => table(contract, content, source),
        Holds::Text if content.trim().is_empty() => Err("it is empty".to_string()),
        Holds::Text | Holds::Edit | Holds::Absent => Ok(()),
    }
}

/// Why a workbook target's `sheets` break `contract`, given its source's rows; `Ok` when one
/// sheet holds it: a number is a cell of any sheet, a list a sheet's one column (under a
/// header or not), a table a sheet's rows under its header row. A sheet `read_file` read only
/// in part is held to its header and the rows read, not to the source's row count.
pub fn check_sheets(
    contract: &Contract,
    sheets: &[SheetRows],
    source: Option<&Rows>,
) -> Result<(), String> {
    if !contract.holds.computed() {
        return Ok(());
    }
    if contract.holds == Holds::Number {
        return sheets_number(sheets, source);
    }
    let mut why = Vec::new();
    for sheet in sheets {
        let source = source.filter(|_| sheet.complete);
        let held = match contract.holds {
            Holds::List => sheet_list(contract, sheet, source),
            _ => match sheet.rows.split_first() {
                Some((header, rows)) => compare_table(contract, header, rows, source),
                None => Err("it is empty".to_string()),
            },
        };
        match held {
            Ok(()) => return Ok(()),
            Err(reason) => why.push(format!("sheet {}: {reason}", sheet.name)),
        }
    }
    if why.is_empty() {
        return Err("it has no sheet the engine can read".to_string());
    }
    Err(format!("no sheet holds it ({})", why.join("; ")))
}

/// A list on a sheet: its rows of one cell, with or without the first as a header.
fn sheet_list(contract: &Contract, sheet: &SheetRows, source: Option<&Rows>) -> Result<(), String> {
    if let Some(row) = sheet.rows.iter().find(|row| row.len() > 1) {
        return Err(format!(
            "it should hold one value per row, and a row holds {}",
            named(row)
        ));
    }
    let values: Vec<&str> = sheet
        .rows
        .iter()
        .filter_map(|row| row.first())
        .map(|value| value.trim())
        .collect();
    let held = compare_list(contract, &values, source);
    match values.split_first() {
        Some((_, under_header)) if held.is_err() && !under_header.is_empty() => {
            compare_list(contract, under_header, source).or(held)
        }
        _ => held,
    }
}

/// A number in a workbook: a cell of one of its sheets holds the source's value (or any number
/// without a source).
fn sheets_number(sheets: &[SheetRows], source: Option<&Rows>) -> Result<(), String> {
    let values = || sheets.iter().flat_map(|sheet| sheet.rows.iter().flatten());
    let Some(rows) = source else {
        return match values().any(|value| parse_number(value.trim()).is_some()) {
            true => Ok(()),
            false => Err("it should hold a number, and no cell of it is one".to_string()),
        };
    };
    let Some(expected) = rows.rows.first().and_then(|row| row.first()) else {
        return Err("its source query returned no row".to_string());
    };
    let wanted = shown(expected);
    if values().any(|value| same_value(value, &wanted)) {
        return Ok(());
    }
    Err(format!(
        "no cell of it holds {wanted}, which its source query gives"
    ))
}

/// The most words besides its figure a line of a `text` target has and still be a figure:
/// a unit and a label (`5076 grams`, `Gentoo: 5076 g`, `Total 3,500 EUR`).
const FIGURE_WORDS: usize = 3;

/// Why a `text` target's `content` is figures the engine cannot check: every line of it is a
/// figure — one number, alone or with at most [`FIGURE_WORDS`] words of label or unit. Asked
/// of a workbench with tables, where a figure is computed from the data: such a target is a
/// `number` or a `list` with the query it comes from, which the engine compares; a text
/// contract would vouch for any figure. A figure the request itself shows is no exception: a
/// request shows a figure as often to give the form of the answer ("like 12.30") as to give
/// the answer, and only a query tells the two apart.
pub fn figures_as_text(contract: &Contract, content: &str) -> Option<String> {
    if contract.holds != Holds::Text {
        return None;
    }
    let lines: Vec<&str> = content
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let all_figures = lines.iter().all(|line| line_figure(line).is_some());
    (!lines.is_empty() && all_figures).then(|| {
        format!(
            "it holds {} under a `text` contract; a figure computed from the workbench's data \
             is a `number` (or a `list`) with the query it comes from, which the engine compares",
            named(&lines)
        )
    })
}

/// The figure a line is: its one number, when it has at most [`FIGURE_WORDS`] other words.
fn line_figure(line: &str) -> Option<f64> {
    if let Some((value, _)) = parse_number(line) {
        return Some(value);
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let numbers: Vec<f64> = words.iter().copied().filter_map(token_number).collect();
    match numbers.as_slice() {
        [value] if words.len() <= FIGURE_WORDS + 1 => Some(*value),
        _ => None,
    }
}

/// A whitespace-separated word as a number, once the punctuation around it is trimmed
/// (`6300.` `(12)` `[3]` `3,5;`); a sign or a currency before it and a percent or euro sign
/// after it are kept for [`parse_number`].
fn token_number(word: &str) -> Option<f64> {
    let trimmed = word
        .trim_start_matches(|c: char| {
            !(c.is_alphanumeric() || matches!(c, '-' | '+' | '$' | '€' | '£'))
        })
        .trim_end_matches(|c: char| !(c.is_alphanumeric() || matches!(c, '%' | '€')));
    parse_number(trimmed).map(|(value, _)| value)
}

/// The most values or rows of a source [`told`] names.
const TOLD_ROWS: usize = 20;

/// What `rows` (a source query's result) give `contract`'s target, as an item's prompt tells
/// the model: the number, the values one per line, or the header and rows (the first
/// [`TOLD_ROWS`]).
pub fn told(contract: &Contract, rows: &Rows) -> String {
    let row_text = |row: &Vec<Value>| row.iter().map(shown).collect::<Vec<_>>().join(", ");
    let first: Vec<String> = rows.rows.iter().take(TOLD_ROWS).map(row_text).collect();
    let more = rows.rows.len().saturating_sub(TOLD_ROWS);
    let more = match (more, rows.complete) {
        (0, true) => String::new(),
        (more, true) => format!(" (and {more} more)"),
        (more, false) => format!(" (and {more} or more beyond)"),
    };
    match contract.holds {
        Holds::Number => format!(
            "the number {}",
            first.first().map_or("(no row)", String::as_str)
        ),
        Holds::List => format!(
            "{} values, one per line: {}{more}",
            rows.rows.len(),
            first.join(" | ")
        ),
        _ => format!(
            "the header {} and {} rows: {}{more}",
            rows.columns.join(","),
            rows.rows.len(),
            first.join(" | ")
        ),
    }
}

fn number(content: &str, source: Option<&Rows>) -> Result<(), String> {
    let text = content.trim();
    let Some((written, decimals)) = parse_number(text) else {
        return Err(format!(
            "it should hold one number alone, and it holds {}",
            quoted(text)
        ));
    };
    let Some(rows) = source else {
        return Ok(());
    };
    let Some(expected) = rows.rows.first().and_then(|row| row.first()) else {
        return Err("its source query returned no row".to_string());
    };
    let Some(expected_value) = value_number(expected) else {
        return Err(format!(
            "its source query returned {}, which is not a number",
            shown(expected)
        ));
    };
    if rounds_to(expected_value, written, decimals) {
        return Ok(());
    }
    Err(format!(
        "it holds {text}, and its source query gives {}",
        shown(expected)
    ))
}

fn list(contract: &Contract, content: &str, source: Option<&Rows>) -> Result<(), String> {
    let written: Vec<&str> = content
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    compare_list(contract, &written, source)
}

/// The values of a list (one per line, or one per row of a sheet) against the contract.
fn compare_list(
    contract: &Contract,
    written: &[&str],
    source: Option<&Rows>,
) -> Result<(), String> {
    if written.is_empty() {
        return Err("it should hold a list, one value per line, and it is empty".to_string());
    }
    if let Some(count) = contract.count
        && written.len() as u64 != count
    {
        return Err(format!(
            "it should hold {count} values, one per line, and it holds {} lines",
            written.len()
        ));
    }
    let Some(rows) = source.filter(|rows| rows.complete) else {
        return Ok(());
    };
    let expected: Vec<String> = rows
        .rows
        .iter()
        .filter_map(|row| row.first())
        .map(shown)
        .collect();
    let ordered = contract
        .source
        .as_ref()
        .is_some_and(|source| source.query.to_lowercase().contains("order by"));
    compare_values(written, &expected, ordered)
}

/// The written values against the source's: the same values (the same order when the query
/// orders them), each as many times.
fn compare_values(written: &[&str], expected: &[String], ordered: bool) -> Result<(), String> {
    let matches = |a: &str, b: &str| same_value(a, b);
    let mut unmatched: Vec<&String> = expected.iter().collect();
    let mut extra: Vec<&str> = Vec::new();
    for value in written {
        match unmatched.iter().position(|wanted| matches(value, wanted)) {
            Some(at) => {
                unmatched.remove(at);
            }
            None => extra.push(value),
        }
    }
    if !extra.is_empty() || !unmatched.is_empty() {
        let mut why = format!(
            "it holds {} values and its source query gives {}",
            written.len(),
            expected.len()
        );
        if !unmatched.is_empty() {
            why.push_str(&format!("; missing: {}", named(&unmatched)));
        }
        if !extra.is_empty() {
            why.push_str(&format!("; not in the source: {}", named(&extra)));
        }
        return Err(why);
    }
    if ordered && let Some(at) = (0..written.len()).find(|&at| !matches(written[at], &expected[at]))
    {
        return Err(format!(
            "its source query orders the values, and line {} is {} where the source gives {}",
            at + 1,
            quoted(written[at]),
            quoted(&expected[at])
        ));
    }
    Ok(())
}

fn table(contract: &Contract, content: &str, source: Option<&Rows>) -> Result<(), String> {
    let mut lines = content.lines().filter(|line| !line.trim().is_empty());
    let Some(header) = lines.next() else {
        return Err("it should hold a table, and it is empty".to_string());
    };
    let delimiter = delimiter(header);
    let header = cells(header, delimiter);
    let rows: Vec<Vec<String>> = lines.map(|line| cells(line, delimiter)).collect();
    compare_table(contract, &header, &rows, source)
}

/// A table's header and rows (of a delimited file, or of a sheet) against the contract.
fn compare_table(
    contract: &Contract,
    header: &[String],
    rows: &[Vec<String>],
    source: Option<&Rows>,
) -> Result<(), String> {
    if !contract.columns.is_empty() {
        let same = header.len() == contract.columns.len()
            && header
                .iter()
                .zip(&contract.columns)
                .all(|(have, want)| have.eq_ignore_ascii_case(want.trim()));
        if !same {
            return Err(format!(
                "its header should be {}, and it is {}",
                contract.columns.join(", "),
                header.join(", ")
            ));
        }
    }
    let Some(source) = source.filter(|rows| rows.complete) else {
        return Ok(());
    };
    if rows.len() != source.rows.len() {
        return Err(format!(
            "it holds {} rows under its header, and its source query gives {}",
            rows.len(),
            source.rows.len()
        ));
    }
    let mut unmatched: Vec<&Vec<Value>> = source.rows.iter().collect();
    for row in rows {
        let found = unmatched.iter().position(|wanted| {
            wanted.len() == row.len()
                && wanted
                    .iter()
                    .zip(row)
                    .all(|(want, have)| same_value(have, &shown(want)))
        });
        match found {
            Some(at) => {
                unmatched.remove(at);
            }
            None => {
                return Err(format!(
                    "its row {} is not a row of its source query",
                    quoted(&row.join(", "))
                ));
            }
        }
    }
    Ok(())
}

/// The delimiter of a table's header line: tab, semicolon or comma, the most frequent.
fn delimiter(header: &str) -> char {
    ['\t', ';', ',']
        .into_iter()
        .max_by_key(|delimiter| header.matches(*delimiter).count())
        .unwrap_or(',')
}

/// The cells of one delimited line, trimmed, quotes taken off (`"a, b"` is one cell).
fn cells(line: &str, delimiter: char) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c == delimiter && !quoted => cells.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    cells.push(cell);
    cells.iter().map(|cell| cell.trim().to_string()).collect()
}

/// True when two values are the same: equal text (trimmed), or the same number to the
/// precision `written` has.
fn same_value(written: &str, expected: &str) -> bool {
    if written.trim() == expected.trim() {
        return true;
    }
    match (parse_number(written.trim()), parse_number(expected.trim())) {
        (Some((value, decimals)), Some((wanted, _))) => rounds_to(wanted, value, decimals),
        _ => false,
    }
}

/// True when `expected` rounded to `decimals` places is `written`.
fn rounds_to(expected: f64, written: f64, decimals: u32) -> bool {
    let scale = 10f64.powi(i32::try_from(decimals).unwrap_or(i32::MAX));
    let tolerance = 0.5 / scale + 1e-9 * expected.abs().max(1.0);
    (expected - written).abs() <= tolerance
}

/// The number `text` is, alone, with its count of decimals: `1249.5`, `-3`, `1,249.50`,
/// `$3,500`, `12 %`, `3,5` (a decimal comma); `None` for anything else.
pub fn parse_number(text: &str) -> Option<(f64, u32)> {
    let text = text.trim();
    let text = text
        .strip_prefix(['$', '€', '£'])
        .or_else(|| text.strip_suffix(['€', '%']))
        .map_or(text, str::trim);
    let text = text
        .strip_suffix(" EUR")
        .or(text.strip_suffix(" USD"))
        .unwrap_or(text);
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty()
        || !digits
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == ',')
    {
        return None;
    }
    let normalized = normalize_separators(digits)?;
    let decimals = normalized.split_once('.').map_or(0, |(_, fraction)| {
        u32::try_from(fraction.len()).unwrap_or(0)
    });
    normalized
        .parse::<f64>()
        .ok()
        .filter(|value| value.is_finite())
        .map(|value| (sign * value, decimals))
}

/// `1,249.50` → `1249.50`; `3,5` → `3.5`; `1,249` → `1249`; `None` when the commas and points
/// are not thousands groups and one decimal mark.
fn normalize_separators(digits: &str) -> Option<String> {
    if !digits.contains(',') {
        return (digits.matches('.').count() <= 1).then(|| digits.to_string());
    }
    let (whole, fraction) = match digits.split_once('.') {
        Some((whole, fraction)) if !fraction.contains([',', '.']) => (whole, Some(fraction)),
        Some(_) => return None,
        None => (digits, None),
    };
    let groups: Vec<&str> = whole.split(',').collect();
    let thousands = groups[0].len() <= 3
        && !groups[0].is_empty()
        && groups[1..].iter().all(|group| group.len() == 3);
    match (thousands, fraction) {
        (true, Some(fraction)) => Some(format!("{}.{fraction}", groups.concat())),
        (true, None) => Some(groups.concat()),
        // A decimal comma: one comma, no point.
        (false, None) if groups.len() == 2 => Some(format!("{}.{}", groups[0], groups[1])),
        _ => None,
    }
}

fn value_number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => parse_number(text).map(|(value, _)| value),
        _ => None,
    }
}

/// A source value as text: a string as it is, a whole number without `.0`.
fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.trim().to_string(),
        Value::Null => String::new(),
        Value::Number(number) => match number.as_f64() {
            Some(float) if float.fract() == 0.0 && float.abs() < 1e15 => format!("{float:.0}"),
            _ => number.to_string(),
        },
        other => other.to_string(),
    }
}

fn quoted(text: &str) -> String {
    let cut: String = text.chars().take(120).collect();
    format!("{cut:?}")
}

fn named<S: AsRef<str>>(values: &[S]) -> String {
    let mut list: Vec<String> = values
        .iter()
        .take(NAMED)
        .map(|value| quoted(value.as_ref()))
        .collect();
    if values.len() > NAMED {
        list.push(format!("and {} more", values.len() - NAMED));
    }
    list.join(", ")
}
