//! The number format of a delimited file: DuckDB's sniffer finds delimiter, quoting, header,
//! rows to skip and types, but reads `1.234,56` and `"1,234.50"` as text and, told about a
//! thousands separator, accepts any grouping (`1.5` with `thousands='.'` becomes 15). So the
//! grouping is checked here, on sampled values, before DuckDB is told.

/// How numbers are written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumberFormat {
    /// `1234.5` (DuckDB's default).
    Plain,
    /// `1,234.5`: comma groups thousands.
    CommaThousands,
    /// `1.234,5` or `1234,5`: comma is the decimal mark, dot groups thousands.
    DecimalComma,
}

impl NumberFormat {
    /// The `read_csv` options for this format.
    pub(crate) fn read_options(self) -> &'static str {
        match self {
            NumberFormat::Plain => "",
            NumberFormat::CommaThousands => ", thousands = ','",
            NumberFormat::DecimalComma => ", decimal_separator = ',', thousands = '.'",
        }
    }

    pub(crate) fn decimal_separator(self) -> &'static str {
        match self {
            NumberFormat::DecimalComma => ",",
            _ => ".",
        }
    }

    pub(crate) fn thousands_separator(self) -> Option<&'static str> {
        match self {
            NumberFormat::Plain => None,
            NumberFormat::CommaThousands => Some(","),
            NumberFormat::DecimalComma => Some("."),
        }
    }
}

/// What one value says about the number format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    /// Not a number at all.
    Text,
    /// Digits only: fits every format.
    Integer,
    /// Only a dot-decimal reading works (`1.5`, `1,234.5`).
    DotDecimal,
    /// Comma grouping with no decimals (`1,234`): thousands, or a decimal comma with 3 decimals.
    CommaGrouped,
    /// Dot grouping with no decimals (`1.234`): thousands, or a dot decimal with 3 decimals.
    DotGrouped,
    /// Only a comma-decimal reading works (`1,5`, `1.234,56`).
    CommaDecimal,
}

/// Digits in groups of three after a 1-3 digit lead, separated by `sep`.
fn grouped(digits: &str, sep: char) -> bool {
    let mut groups = digits.split(sep);
    let lead = groups.next().unwrap_or_default();
    let mut rest = groups.peekable();
    rest.peek().is_some()
        && (1..=3).contains(&lead.len())
        && lead.bytes().all(|b| b.is_ascii_digit())
        && rest.all(|g| g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit()))
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

fn classify(raw: &str) -> Evidence {
    let text = raw.trim();
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if all_digits(unsigned) {
        return Evidence::Integer;
    }
    match (unsigned.rfind('.'), unsigned.rfind(',')) {
        (Some(dot), Some(comma)) if dot > comma => {
            let (int, frac) = (&unsigned[..dot], &unsigned[dot + 1..]);
            match grouped(int, ',') && all_digits(frac) {
                true => Evidence::DotDecimal,
                false => Evidence::Text,
            }
        }
        (Some(dot), Some(comma)) if comma > dot => {
            let (int, frac) = (&unsigned[..comma], &unsigned[comma + 1..]);
            match grouped(int, '.') && all_digits(frac) {
                true => Evidence::CommaDecimal,
                false => Evidence::Text,
            }
        }
        (Some(_), None) if grouped(unsigned, '.') => Evidence::DotGrouped,
        (None, Some(_)) if grouped(unsigned, ',') => Evidence::CommaGrouped,
        (Some(dot), None) if all_digits(&unsigned[dot + 1..]) && single_mark(unsigned, '.') => {
            Evidence::DotDecimal
        }
        (None, Some(comma)) if all_digits(&unsigned[comma + 1..]) && single_mark(unsigned, ',') => {
            Evidence::CommaDecimal
        }
        _ => Evidence::Text,
    }
}

/// `12.5`-like: one mark between digits.
fn single_mark(text: &str, mark: char) -> bool {
    text.split(mark).count() == 2 && text.split(mark).all(all_digits)
}

/// The number format of sampled columns (`columns[i]` holds column i's sampled values, as text).
///
/// A format is chosen only when some column is numeric under it and under no other, and no
/// column anywhere contradicts it; otherwise numbers stay as DuckDB reads them.
pub(crate) fn detect_number_format(columns: &[Vec<String>], delimiter: &str) -> NumberFormat {
    let mut decimal_comma = false;
    let mut comma_thousands = false;
    let mut dot_decimal_seen = false;
    let mut comma_decimal_seen = false;
    for values in columns {
        let evidence: Vec<Evidence> = values
            .iter()
            .filter(|v| !v.trim().is_empty())
            .map(|v| classify(v))
            .collect();
        if evidence.is_empty() || evidence.contains(&Evidence::Text) {
            continue;
        }
        let has = |e: Evidence| evidence.contains(&e);
        dot_decimal_seen |= has(Evidence::DotDecimal);
        comma_decimal_seen |= has(Evidence::CommaDecimal);
        let euro = !has(Evidence::DotDecimal) && !has(Evidence::CommaGrouped);
        let us = !has(Evidence::CommaDecimal) && !has(Evidence::DotGrouped);
        decimal_comma |= euro && has(Evidence::CommaDecimal);
        comma_thousands |= us && has(Evidence::CommaGrouped);
    }
    if decimal_comma && !dot_decimal_seen && delimiter != "," {
        NumberFormat::DecimalComma
    } else if comma_thousands && !comma_decimal_seen {
        NumberFormat::CommaThousands
    } else {
        NumberFormat::Plain
    }
}

/// Spellings of "no value" that some exporters (R, Excel, databases) write.
const NULL_MARKERS: [&str; 5] = ["NA", "N/A", "#N/A", "NULL", "null"];

/// The null markers to read as NULL: those found in a column whose other values are all numbers
/// (so the markers, not the data, keep it from being numeric).
pub(crate) fn detect_null_markers(columns: &[Vec<String>]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for values in columns {
        let (markers, rest): (Vec<&String>, Vec<&String>) = values
            .iter()
            .filter(|v| !v.trim().is_empty())
            .partition(|v| NULL_MARKERS.contains(&v.trim()));
        let numeric = !rest.is_empty() && rest.iter().all(|v| classify(v) != Evidence::Text);
        if numeric {
            for marker in markers {
                let marker = marker.trim().to_string();
                if !found.contains(&marker) {
                    found.push(marker);
                }
            }
        }
    }
    found.sort();
    found
}

/// The values of the first `max_rows` complete records of delimited `text`, by column, after
/// `skip` leading lines and the header (when there is one). Quotes (`quote`, doubled to escape)
/// may hold delimiters and line breaks; a record cut off at the end of `text` is left out.
pub(crate) fn sample_values(
    text: &str,
    delimiter: &str,
    quote: Option<char>,
    skip: usize,
    header: bool,
    max_rows: usize,
) -> Vec<Vec<String>> {
    let mut rest = text.trim_start_matches('\u{FEFF}');
    for _ in 0..skip {
        rest = rest.split_once('\n').map_or("", |(_, after)| after);
    }
    let mut columns: Vec<Vec<String>> = Vec::new();
    let mut records = 0;
    let mut first = true;
    while records < max_rows {
        let Some((fields, after)) = next_record(rest, delimiter, quote) else {
            break;
        };
        rest = after;
        let blank = fields.len() == 1 && fields[0].is_empty();
        if std::mem::take(&mut first) && header || blank {
            continue;
        }
        if columns.len() < fields.len() {
            columns.resize_with(fields.len(), Vec::new);
        }
        for (column, field) in columns.iter_mut().zip(fields) {
            column.push(field);
        }
        records += 1;
    }
    columns
}

/// One record and the text after it; `None` when no complete record remains.
fn next_record<'a>(
    text: &'a str,
    delimiter: &str,
    quote: Option<char>,
) -> Option<(Vec<String>, &'a str)> {
    if text.is_empty() || delimiter.is_empty() {
        return None;
    }
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let ch = rest.chars().next()?;
        if quoted {
            if Some(ch) == quote {
                if rest[ch.len_utf8()..].starts_with(ch) {
                    field.push(ch);
                    at += 2 * ch.len_utf8();
                    continue;
                }
                quoted = false;
            } else {
                field.push(ch);
            }
            at += ch.len_utf8();
        } else if Some(ch) == quote {
            quoted = true;
            at += ch.len_utf8();
        } else if rest.starts_with(delimiter) {
            fields.push(std::mem::take(&mut field));
            at += delimiter.len();
        } else if ch == '\n' {
            fields.push(field.trim_end_matches('\r').to_string());
            return Some((fields, &text[at + 1..]));
        } else {
            field.push(ch);
            at += ch.len_utf8();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn classifies_number_shapes() {
        let cases = [
            ("42", Evidence::Integer),
            ("-1.234,56", Evidence::CommaDecimal),
            ("12,5", Evidence::CommaDecimal),
            ("1.234", Evidence::DotGrouped),
            ("1,234", Evidence::CommaGrouped),
            ("1,234.50", Evidence::DotDecimal),
            ("1.5", Evidence::DotDecimal),
            ("12.34.5", Evidence::Text),
            ("1,23,456", Evidence::Text),
            ("abc", Evidence::Text),
            ("2024-01-05", Evidence::Text),
            ("€ 1.250,00", Evidence::Text),
        ];
        for (value, expected) in cases {
            assert_eq!(classify(value), expected, "{value}");
        }
    }

    #[test]
    fn european_exports_use_decimal_comma() {
        let columns = [
            column(&["BIZUM", "NOMINA"]),
            column(&["-25,00", "-1.150,00", "2.500,50"]),
            column(&["31.768,85", "30.618,85"]),
        ];
        assert_eq!(
            detect_number_format(&columns, ";"),
            NumberFormat::DecimalComma
        );
        assert_eq!(detect_number_format(&columns, ","), NumberFormat::Plain);
    }

    #[test]
    fn dot_decimals_anywhere_veto_decimal_comma() {
        let columns = [column(&["1.5", "2.25"]), column(&["2,5", "3,5"])];
        assert_eq!(detect_number_format(&columns, ";"), NumberFormat::Plain);
    }

    #[test]
    fn null_markers_count_only_in_numeric_columns() {
        let columns = [
            column(&["12", "NA", "-3"]),
            column(&["NA", "Namibia"]),
            column(&["1.5", "N/A", "NA"]),
        ];
        assert_eq!(detect_null_markers(&columns), vec!["N/A", "NA"]);
        assert!(detect_null_markers(&[column(&["NA", "NULL"])]).is_empty());
    }

    #[test]
    fn samples_quoted_records_and_drops_a_cut_one() {
        let text = "meta line\na;b\n\"x;1\";\"2,5\"\r\n\"multi\nline \"\"q\"\"\";3\n\nlast;\"cut";
        let columns = sample_values(text, ";", Some('"'), 1, true, 10);
        assert_eq!(
            columns,
            vec![column(&["x;1", "multi\nline \"q\""]), column(&["2,5", "3"])]
        );
        assert_eq!(
            sample_values("a\tb\n1\t2\n", "\t", None, 0, false, 1),
            vec![column(&["a"]), column(&["b"])]
        );
    }

    #[test]
    fn us_thousands_need_a_grouped_value() {
        let grouped = [column(&["1,234.50", "12,000", "7"])];
        assert_eq!(
            detect_number_format(&grouped, ","),
            NumberFormat::CommaThousands
        );
        let plain = [column(&["1.5", "7"]), column(&["x", "y"])];
        assert_eq!(detect_number_format(&plain, ","), NumberFormat::Plain);
    }
}
