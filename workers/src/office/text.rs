//! Text and CSV files as lines: decoding, line windows, and a light CSV dialect sniff.

use serde::Serialize;

const UTF8_BOM: &str = "\u{FEFF}";
/// Delimiters tried by [`sniff_delimiter`], in order of preference on ties.
const DELIMITERS: [char; 4] = [',', ';', '\t', '|'];

/// A file's bytes as text.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The text, without a UTF-8 byte-order mark.
    pub(crate) text: String,
    /// `utf-8`, or `unknown` when invalid bytes were replaced.
    pub(crate) encoding: &'static str,
    pub(crate) lossy: bool,
}

/// Decodes UTF-8 (BOM stripped), replacing invalid bytes with U+FFFD.
pub(crate) fn decode(bytes: &[u8]) -> Decoded {
    let (text, lossy) = match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), false),
        Err(_) => (String::from_utf8_lossy(bytes).into_owned(), true),
    };
    let text = text
        .strip_prefix(UTF8_BOM)
        .map(str::to_string)
        .unwrap_or(text);
    Decoded {
        text,
        encoding: if lossy { "unknown" } else { "utf-8" },
        lossy,
    }
}

/// One window of lines.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub(crate) struct LineWindow {
    pub(crate) line_start: usize,
    pub(crate) line_count: usize,
    pub(crate) total_lines: usize,
    pub(crate) has_more: bool,
    pub(crate) content: String,
}

/// Lines `start..start+count` (1-based) of `text`, joined with `\n`.
pub(crate) fn line_window(text: &str, start: usize, count: usize) -> LineWindow {
    let total_lines = text.lines().count();
    let selected: Vec<&str> = text
        .lines()
        .skip(start.saturating_sub(1))
        .take(count)
        .collect();
    let line_count = selected.len();
    LineWindow {
        line_start: start,
        line_count,
        total_lines,
        has_more: start.saturating_sub(1) + line_count < total_lines,
        content: selected.join("\n"),
    }
}

/// The delimiter that splits the first line into the most fields (quotes respected).
pub(crate) fn sniff_delimiter(first_line: &str) -> char {
    DELIMITERS
        .into_iter()
        .max_by_key(|d| {
            (
                split_record(first_line, *d).len(),
                std::cmp::Reverse(delimiter_rank(*d)),
            )
        })
        .unwrap_or(',')
}

fn delimiter_rank(delimiter: char) -> usize {
    DELIMITERS
        .iter()
        .position(|d| *d == delimiter)
        .unwrap_or(DELIMITERS.len())
}

/// The fields of one CSV line: `"` quotes fields, `""` is a literal quote.
pub(crate) fn split_record(line: &str, delimiter: char) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            c if c == delimiter && !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN: &str = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\n";

    #[test]
    fn windows_are_one_based_and_report_more() {
        let first = line_window(TEN, 1, 3);
        assert_eq!(first.content, "l1\nl2\nl3");
        assert_eq!(
            (first.line_count, first.total_lines, first.has_more),
            (3, 10, true)
        );
        let tail = line_window(TEN, 9, 5);
        assert_eq!(tail.content, "l9\nl10");
        assert_eq!((tail.line_count, tail.has_more), (2, false));
        let past = line_window(TEN, 11, 5);
        assert_eq!(
            (past.line_count, past.has_more, past.content.as_str()),
            (0, false, "")
        );
        let crlf = line_window("a\r\nb\r\n", 1, 10);
        assert_eq!((crlf.content.as_str(), crlf.total_lines), ("a\nb", 2));
    }

    #[test]
    fn decodes_bom_and_invalid_bytes() {
        let bom = decode(b"\xEF\xBB\xBFhi");
        assert_eq!(
            (bom.text.as_str(), bom.encoding, bom.lossy),
            ("hi", "utf-8", false)
        );
        let bad = decode(b"caf\xE9");
        assert_eq!(
            (bad.text.as_str(), bad.encoding, bad.lossy),
            ("caf\u{FFFD}", "unknown", true)
        );
    }

    #[test]
    fn sniffs_delimiters_and_splits_quoted_headers() {
        assert_eq!(sniff_delimiter("a,b,c"), ',');
        assert_eq!(sniff_delimiter("a;b;\"c,d\""), ';');
        assert_eq!(sniff_delimiter("a\tb"), '\t');
        assert_eq!(sniff_delimiter("single"), ',');
        assert_eq!(
            split_record("id,\"Name, full\",\"say \"\"x\"\"\"", ','),
            vec!["id", "Name, full", "say \"x\""]
        );
    }
}
