//! Degenerate model output: an empty reply where a tool call was required, or runaway
//! repetition. Small local models produce both; a provider retries such a turn once with a
//! nudge and then fails it with `MODEL_OUTPUT_DEGENERATE`.
//!
//! Repetition is judged on the text alone:
//! - the same line of at least [`MIN_SEGMENT_CHARS`] characters appearing [`MIN_REPEATS`]
//!   times or more;
//! - the text ending in [`MIN_REPEATS`] or more back-to-back copies of one segment of
//!   [`MIN_SEGMENT_CHARS`]–[`MAX_SEGMENT_CHARS`] characters (runaway output with no newlines);
//! - a reply cut by `finish_reason: length` whose repeating tail (any segment length, at least
//!   four copies) is at least half of the text.

use std::collections::HashMap;

/// The shortest line or segment whose repetition counts.
pub const MIN_SEGMENT_CHARS: usize = 20;
/// The longest segment looked for at the end of the text.
pub const MAX_SEGMENT_CHARS: usize = 200;
/// How many copies make a repetition.
pub const MIN_REPEATS: usize = 8;

/// Why a reply is degenerate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Degenerate {
    /// No text and no tool call, though a tool call was required.
    Empty,
    /// Runaway repetition; the repeated text (cut to 80 characters) and how often.
    Repetitive { segment: String, repeats: usize },
}

impl Degenerate {
    /// A sentence for errors and logs.
    pub fn describe(&self) -> String {
        match self {
            Degenerate::Empty => "the reply was empty though a tool call was required".into(),
            Degenerate::Repetitive { segment, repeats } => {
                format!("the reply repeated {segment:?} {repeats} times")
            }
        }
    }

    /// The nudge sent to the model before the one retry; `expected` says what to answer with.
    pub fn nudge(&self, expected: &str) -> String {
        let what = match self {
            Degenerate::Empty => "empty",
            Degenerate::Repetitive { .. } => "repetitive",
        };
        format!("Your last reply was {what}; answer with {expected}, without repeating yourself.")
    }
}

/// The repetition in `text`, if any (see the module docs); `cut_by_length` is a reply that
/// ended with `finish_reason: length`.
pub fn repetition(text: &str, cut_by_length: bool) -> Option<Degenerate> {
    let chars: Vec<char> = text.chars().collect();
    repeated_line(text)
        .or_else(|| repeating_tail(&chars, MIN_SEGMENT_CHARS, MIN_REPEATS, 0))
        .or_else(|| {
            cut_by_length
                .then(|| repeating_tail(&chars, 1, 4, chars.len() / 2))
                .flatten()
        })
}

fn repeated_line(text: &str) -> Option<Degenerate> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for line in text.lines().map(str::trim) {
        if line.chars().count() >= MIN_SEGMENT_CHARS {
            *counts.entry(line).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .filter(|(_, repeats)| *repeats >= MIN_REPEATS)
        .max_by_key(|(_, repeats)| *repeats)
        .map(|(line, repeats)| repetitive(line, repeats))
}

/// The shortest period `p` (at least `min_period`) such that the end of `chars` is at least
/// `min_repeats` copies of a `p`-character segment and at least `min_chars` long.
fn repeating_tail(
    chars: &[char],
    min_period: usize,
    min_repeats: usize,
    min_chars: usize,
) -> Option<Degenerate> {
    let max_period = MAX_SEGMENT_CHARS.min(chars.len() / min_repeats.max(1));
    (min_period..=max_period).find_map(|period| {
        let tail = periodic_tail(chars, period);
        let repeats = tail / period;
        (repeats >= min_repeats && tail >= min_chars.max(1)).then(|| {
            let segment: String = chars[chars.len() - period..].iter().collect();
            repetitive(&segment, repeats)
        })
    })
}

/// How many characters at the end of `chars` repeat with period `period`.
fn periodic_tail(chars: &[char], period: usize) -> usize {
    let mut length = period;
    while length < chars.len()
        && chars[chars.len() - 1 - length] == chars[chars.len() - 1 - length + period]
    {
        length += 1;
    }
    length.min(chars.len())
}

fn repetitive(segment: &str, repeats: usize) -> Degenerate {
    Degenerate::Repetitive {
        segment: segment.chars().take(80).collect(),
        repeats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degenerate_repeated_lines_are_found() {
        let line = "| North | 2024-01 | 1200 | 1200 | 1200 |";
        let text = format!("Here is the table:\n{}", format!("{line}\n").repeat(9));
        assert_eq!(
            repetition(&text, false),
            Some(Degenerate::Repetitive {
                segment: line.into(),
                repeats: 9
            })
        );
        // Seven copies, or short lines, are not runaway output.
        let seven = format!("{line}\n").repeat(7);
        assert_eq!(repetition(&seven, false), None);
        assert_eq!(repetition(&"- ok\n".repeat(30), false), None);
    }

    #[test]
    fn degenerate_runaway_segments_without_newlines_are_found() {
        let text = format!(
            "The answer is {}",
            "the total of the column is 42, ".repeat(10)
        );
        let found = repetition(&text, false).expect("repetitive");
        assert_eq!(
            found,
            Degenerate::Repetitive {
                segment: "the total of the column is 42, ".into(),
                repeats: 10
            }
        );
        assert_eq!(
            found.describe(),
            "the reply repeated \"the total of the column is 42, \" 10 times"
        );
    }

    #[test]
    fn degenerate_length_cut_replies_that_are_mostly_repetition_are_found() {
        let text = format!("Summary of sales. {}", "ok ok ".repeat(6));
        assert_eq!(repetition(&text, false), None);
        assert_eq!(
            repetition(&text, true),
            Some(Degenerate::Repetitive {
                segment: "ok ".into(),
                repeats: 12
            })
        );
        let mostly_prose = format!(
            "{}{}",
            "A real paragraph about the data. ".repeat(3),
            "ab".repeat(5)
        );
        assert_eq!(repetition(&mostly_prose, true), None);
    }

    #[test]
    fn degenerate_ordinary_text_is_not_flagged() {
        let text =
            "The workbook has three sheets.\nSales grew 12% in March.\nNo errors were found.";
        assert_eq!(repetition(text, true), None);
        assert_eq!(repetition("", true), None);
        assert_eq!(
            Degenerate::Empty.nudge("a tool call"),
            "Your last reply was empty; answer with a tool call, without repeating yourself."
        );
    }
}
