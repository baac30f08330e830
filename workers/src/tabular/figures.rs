//! The figures of a text file: every number its prose holds, one row each, as table `figures`.
//!
//! A number taken from a text file ("Entertainment 500 EUR, Groceries 800 EUR") has a source a
//! query can name like any table's: `SELECT sum(value) FROM figures`. Each figure keeps the
//! line it is on, its label (the words of its clause before it: after the last `,` `;` `:` `|`
//! `(` `)` or sentence end, or the clause before when that is empty) and its unit (the word,
//! `%` or currency sign right after it, or a currency sign right before it).
//!
//! A number is digits with `.` or `,` between digit groups: `1,234.5` and `1.234,5` are
//! 1234.5, `2,000` is 2000, `12,30` is 12.3; a `-` or `−` right before it makes it negative
//! unless it follows a digit (`2024-10-31` is three figures). Digits joined to a letter before
//! them (`Q1`, `ES12`) are part of a name, not a figure.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use duckdb::{Connection, params};

/// The most characters of a line kept in the `text` column.
const LINE_CHARS: usize = 300;
/// The most characters of a label or a unit.
const LABEL_CHARS: usize = 120;
const UNIT_CHARS: usize = 16;
const CURRENCY_SIGNS: &[char] = &['€', '$', '£', '¥', '₹', '₽', '₩', '₺', '₴', '₱', '฿'];

/// One number of the text.
#[derive(Debug, Clone, PartialEq)]
struct Figure {
    /// 1-based line number.
    line: u64,
    label: String,
    value: f64,
    unit: String,
    /// The line it is on (cut at [`LINE_CHARS`]).
    text: String,
}

/// Creates table `figures` in `conn` from the UTF-8 text file at `path`.
pub(super) fn load(conn: &Connection, path: &Path) -> Result<(), duckdb::Error> {
    let file = File::open(path).map_err(|e| duckdb::Error::ToSqlConversionFailure(Box::new(e)))?;
    create(conn, BufReader::new(file))
}

/// Creates table `figures (line, label, value, unit, text)` in `conn` from the UTF-8 text
/// `reader` gives, a line at a time.
fn create(conn: &Connection, reader: impl BufRead) -> Result<(), duckdb::Error> {
    conn.execute_batch(
        "CREATE TABLE figures (line BIGINT, label VARCHAR, value DOUBLE, unit VARCHAR, text VARCHAR)",
    )?;
    let mut appender = conn.appender("figures")?;
    for (bytes, number) in reader.split(b'\n').zip(1..) {
        let bytes = bytes.map_err(|e| duckdb::Error::ToSqlConversionFailure(Box::new(e)))?;
        let text = String::from_utf8_lossy(&bytes);
        for figure in of_line(text.trim_end_matches('\r'), number) {
            append(&mut appender, figure)?;
        }
    }
    appender.flush()
}

fn append(appender: &mut duckdb::Appender<'_>, figure: Figure) -> Result<(), duckdb::Error> {
    let line = i64::try_from(figure.line).unwrap_or(i64::MAX);
    appender.append_row(params![
        line,
        figure.label,
        figure.value,
        figure.unit,
        figure.text
    ])
}

fn of_line(line: &str, number: u64) -> Vec<Figure> {
    let chars: Vec<char> = line.chars().collect();
    let shown: String = line.trim().chars().take(LINE_CHARS).collect();
    let mut found = Vec::new();
    // Where the text a label is taken from starts: the line's start, then each figure's end.
    let mut after_previous = 0;
    let mut at = 0;
    while at < chars.len() {
        let Some(token) = number_at(&chars, at) else {
            at += 1;
            continue;
        };
        // A currency sign before the number is its unit; otherwise what follows it.
        let (unit, end) = match currency_before(&chars, token.start) {
            Some(sign) => (Some(sign), token.end),
            None => unit_after(&chars, token.end),
        };
        found.push(Figure {
            line: number,
            label: label(&chars[after_previous..token.start]),
            value: token.value,
            unit: unit.unwrap_or_default(),
            text: shown.clone(),
        });
        after_previous = end;
        at = end;
    }
    found
}

/// A number found in a line: its value and where it starts (its sign included) and ends.
struct Token {
    start: usize,
    end: usize,
    value: f64,
}

fn number_at(chars: &[char], at: usize) -> Option<Token> {
    let signed = matches!(chars[at], '-' | '−')
        && chars.get(at + 1).is_some_and(char::is_ascii_digit)
        && (at == 0 || !chars[at - 1].is_alphanumeric());
    let digits_start = if signed { at + 1 } else { at };
    if !chars.get(digits_start).is_some_and(char::is_ascii_digit) {
        return None;
    }
    // Digits joined to a word before them name something (`Q1`, `ES12`).
    if digits_start > 0 && chars[digits_start - 1].is_alphanumeric() && !signed {
        return None;
    }
    let mut end = digits_start;
    while end < chars.len() {
        let c = chars[end];
        let separated =
            matches!(c, '.' | ',') && chars.get(end + 1).is_some_and(char::is_ascii_digit);
        if c.is_ascii_digit() || separated {
            end += 1;
        } else {
            break;
        }
    }
    let body: String = chars[digits_start..end].iter().collect();
    let magnitude = parse_number(&body)?;
    Some(Token {
        start: at,
        end,
        value: if signed { -magnitude } else { magnitude },
    })
}

/// The value of digits with `.`/`,` separators (see the module's documentation).
fn parse_number(body: &str) -> Option<f64> {
    let commas = body.matches(',').count();
    let dots = body.matches('.').count();
    let normalized = match (commas, dots) {
        (0, 0 | 1) => body.to_string(),
        (0, _) if thousands_groups(body, '.') => body.replace('.', ""),
        (_, 0) if thousands_groups(body, ',') => body.replace(',', ""),
        (1, 0) => body.replace(',', "."),
        (_, _) if commas > 0 && dots > 0 => {
            let comma_last = body.rfind(',') > body.rfind('.');
            if comma_last {
                body.replace('.', "").replace(',', ".")
            } else {
                body.replace(',', "")
            }
        }
        _ => return None,
    };
    normalized.parse().ok()
}

/// True when `body` is digit groups of three after a first group of one to three, joined by
/// `separator`.
fn thousands_groups(body: &str, separator: char) -> bool {
    let mut groups = body.split(separator);
    let first = groups.next().unwrap_or_default();
    (1..=3).contains(&first.len()) && groups.all(|group| group.len() == 3)
}

/// The unit right after a number ending at `end` and where the figure ends with it.
fn unit_after(chars: &[char], end: usize) -> (Option<String>, usize) {
    let mut at = end;
    if chars.get(at) == Some(&' ') {
        at += 1;
    }
    match chars.get(at) {
        Some('%') => return (Some("%".to_string()), at + 1),
        Some(sign) if CURRENCY_SIGNS.contains(sign) => return (Some(sign.to_string()), at + 1),
        _ => {}
    }
    let word_end = chars[at.min(chars.len())..]
        .iter()
        .position(|c| !c.is_alphabetic())
        .map_or(chars.len(), |length| at + length);
    if word_end == at || word_end - at > UNIT_CHARS {
        return (None, end);
    }
    (Some(chars[at..word_end].iter().collect()), word_end)
}

fn currency_before(chars: &[char], start: usize) -> Option<String> {
    let before = chars[..start].iter().rev().find(|c| **c != ' ')?;
    CURRENCY_SIGNS.contains(before).then(|| before.to_string())
}

/// The label in the text between the previous figure and this one: its last clause, or the
/// clause before when the last is empty (`Total: 12`).
fn label(between: &[char]) -> String {
    let text: String = between.iter().collect();
    let clauses: Vec<&str> = text
        .split([',', ';', ':', '|', '(', ')', '=', '\t'])
        .flat_map(|clause| clause.split(". "))
        .map(|clause| clause.trim_matches(|c: char| c.is_whitespace() || is_filler(c)))
        .collect();
    let chosen = clauses
        .iter()
        .rev()
        .take(2)
        .find(|clause| !clause.is_empty())
        .copied()
        .unwrap_or_default();
    chosen.chars().take(LABEL_CHARS).collect()
}

fn is_filler(c: char) -> bool {
    matches!(c, '-' | '–' | '—' | '*' | '#' | '>' | '.' | '"' | '\'') || CURRENCY_SIGNS.contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(text: &str) -> Vec<Figure> {
        text.lines()
            .zip(1..)
            .flat_map(|(line, number)| of_line(line, number))
            .collect()
    }

    fn seen(text: &str) -> Vec<(String, f64, String)> {
        figures(text)
            .into_iter()
            .map(|figure| (figure.label, figure.value, figure.unit))
            .collect()
    }

    fn figure(label: &str, value: f64, unit: &str) -> (String, f64, String) {
        (label.to_string(), value, unit.to_string())
    }

    #[test]
    fn a_sentence_of_amounts_gives_each_with_its_label_and_unit() {
        assert_eq!(
            seen(
                "Monthly budget: Entertainment 500 EUR, Groceries 800 EUR, Transport 200 EUR, \
                 Bills 2000 EUR."
            ),
            vec![
                figure("Entertainment", 500.0, "EUR"),
                figure("Groceries", 800.0, "EUR"),
                figure("Transport", 200.0, "EUR"),
                figure("Bills", 2000.0, "EUR"),
            ]
        );
    }

    #[test]
    fn separators_signs_and_currency_read_as_written() {
        assert_eq!(
            seen("Total: €1,234.50 and -3.5%; saldo 1.234,5 — 12,30 euros (2,000 kg)"),
            vec![
                figure("Total", 1234.5, "€"),
                figure("and", -3.5, "%"),
                figure("saldo", 1234.5, ""),
                figure("", 12.3, "euros"),
                figure("", 2000.0, "kg"),
            ]
        );
    }

    #[test]
    fn names_with_digits_are_not_figures_and_dates_are_their_parts() {
        let found = seen("Q1 revenue 40 | ES12 account, due 2024-10-31");
        let values: Vec<f64> = found.iter().map(|(_, value, _)| *value).collect();
        assert_eq!(values, vec![40.0, 2024.0, 10.0, 31.0]);
        assert_eq!(found[0].0, "Q1 revenue");
    }

    #[test]
    fn each_figure_keeps_its_line() {
        let lines: Vec<u64> = figures("a 1\n\nb 2 c 3\n")
            .iter()
            .map(|figure| figure.line)
            .collect();
        assert_eq!(lines, vec![1, 3, 3]);
    }

    #[test]
    fn the_table_sums_as_the_text_reads() {
        let conn = Connection::open_in_memory().expect("duckdb");
        let text = "Rent 1,500 EUR\r\nFood 320.25 EUR\nnothing here\n";
        create(&conn, text.as_bytes()).expect("figures");
        let (rows, total): (i64, f64) = conn
            .query_row("SELECT count(*), sum(value) FROM figures", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .expect("query");
        assert_eq!((rows, total), (2, 1820.25));
    }
}
