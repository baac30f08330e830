//! Text others chose, as a terminal may show it: every control character written as an
//! escape, so a workbench named `\x1b]0;…` or a model's answer cannot retitle, recolour or
//! clear the terminal of whoever reads it.

use std::borrow::Cow;
use std::fmt;

/// A text as a terminal may show it: every control character (C0 and DEL, C1) and the
/// bidirectional overrides written as an escape (`\x1b`, `\x9b`, `\u{202e}`), so the text can
/// neither move the cursor, recolour or retitle the terminal, nor hide or reorder what follows.
/// Pads as a `&str` does (`{:<16}`).
pub struct Shown<'a> {
    text: &'a str,
    /// Newline and tab kept (a summary, a message); else escaped too (a table cell, a field).
    multiline: bool,
}

/// One line (a table cell, a field): every control character escaped, newline and tab too.
pub fn shown(text: &str) -> Shown<'_> {
    Shown {
        text,
        multiline: false,
    }
}

/// Lines of text (a summary, an answer): newline and tab kept, every other control escaped.
pub fn shown_lines(text: &str) -> Shown<'_> {
    Shown {
        text,
        multiline: true,
    }
}

impl Shown<'_> {
    fn is_escaped(&self, c: char) -> bool {
        if self.multiline && matches!(c, '\n' | '\t') {
            return false;
        }
        c.is_control()
            || matches!(
                c,
                '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            )
    }

    /// The text with its control characters escaped (borrowed when it has none).
    pub fn escaped(&self) -> Cow<'_, str> {
        if !self.text.chars().any(|c| self.is_escaped(c)) {
            return Cow::Borrowed(self.text);
        }
        let mut out = String::with_capacity(self.text.len() + 8);
        for c in self.text.chars() {
            match (self.is_escaped(c), u32::from(c)) {
                (false, _) => out.push(c),
                (true, code) if code <= 0xff => out.push_str(&format!("\\x{code:02x}")),
                (true, code) => out.push_str(&format!("\\u{{{code:x}}}")),
            }
        }
        Cow::Owned(out)
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.escaped())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_escaped_never_raw() {
        let name = "q3\u{1b}[31m\u{1b}]0;owned\u{7}\r\u{9b}2J\u{202e}x";
        let cell = format!("{:<8}|", shown(name));
        assert!(!cell.chars().any(|c| c.is_control()), "{cell:?}");
        assert_eq!(cell, "q3\\x1b[31m\\x1b]0;owned\\x07\\x0d\\x9b2J\\u{202e}x|");
        // Clean text is borrowed and padded as it is.
        assert!(matches!(shown("q3").escaped(), Cow::Borrowed("q3")));
        assert_eq!(format!("{:<4}|", shown("q3")), "q3  |");
        // A table cell escapes newlines and tabs; lines of text keep them.
        assert_eq!(shown("a\nb\tc").to_string(), "a\\x0ab\\x09c");
        assert_eq!(shown_lines("a\nb\tc\u{1b}").to_string(), "a\nb\tc\\x1b");
    }
}
