//! Whether a `text` target holds something the files the request names hold.
//!
//! A text the request asks to take from a workbench file (the address a deck gives, the name
//! a report states) shares words with that file. A text none of whose own words (not the
//! request's, not numbers) is in any file the request names comes from nowhere the engine can
//! see: a request for information written as the answer, a sentence of the engine's own
//! instructions, a guess. A summary or a translation keeps some of its source's words (names,
//! terms, figures' labels) and holds.

use std::collections::BTreeSet;

use serde_json::Value;

/// The fewest characters a word has to count: shorter ones (`Q4`, `for`, `the`) say too
/// little.
const SHORTEST_WORD: usize = 4;
/// How many of the text's own words a failed check names.
const NAMED_WORDS: usize = 6;

/// A workbench file the request names and its text, as the engine read it.
pub struct NamedSource {
    pub path: String,
    pub text: String,
}

/// Why `content`, written under a `text` contract, comes from none of `sources` (the files
/// the request names, other than the target): it has words of its own — in neither the
/// request nor a number — and none of them is a word of any source (a compound such as
/// `example.com` may be part of one). `None` when one is, when there
/// is no source, or when the content has no words of its own to look for.
pub fn ungrounded_text(content: &str, request: &str, sources: &[NamedSource]) -> Option<String> {
    if sources.is_empty() {
        return None;
    }
    let request_words: BTreeSet<String> = words(request).collect();
    let own: BTreeSet<String> = words(content)
        .filter(|word| !request_words.contains(word))
        .collect();
    if own.is_empty() {
        return None;
    }
    let source_words: BTreeSet<String> = sources
        .iter()
        .flat_map(|source| words(&source.text))
        .collect();
    let found = own.iter().any(|word| {
        source_words.contains(word)
            || (!word.chars().all(char::is_alphanumeric)
                && source_words
                    .iter()
                    .any(|source| source.contains(word.as_str())))
    });
    if found {
        return None;
    }
    let names: Vec<&str> = sources.iter().map(|source| source.path.as_str()).collect();
    let shown: Vec<&str> = own.iter().take(NAMED_WORDS).map(String::as_str).collect();
    Some(format!(
        "none of its own words ({}) is in {}, which the request names: write what the file \
         says, as read_file shows it",
        shown.join(", "),
        names.join(", ")
    ))
}

/// Every string value of a tool's JSON result (not its keys), one per line: the text it shows.
pub fn shown_text(result: &Value) -> String {
    let mut text = String::new();
    push_strings(result, &mut text);
    text
}

fn push_strings(value: &Value, text: &mut String) {
    match value {
        Value::String(string) => {
            text.push_str(string);
            text.push('\n');
        }
        Value::Array(values) => values.iter().for_each(|value| push_strings(value, text)),
        Value::Object(fields) => fields.values().for_each(|value| push_strings(value, text)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The words of `text` that can ground it, lowercased: runs of letters, digits and the
/// characters of addresses and names (`@ . _ - '`), trimmed of those at their ends, with a
/// letter and at least [`SHORTEST_WORD`] characters.
pub(super) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    let joins = |c: char| matches!(c, '@' | '.' | '_' | '-' | '\'' | '\u{2019}');
    text.split(move |c: char| !(c.is_alphanumeric() || joins(c)))
        .map(move |word| word.trim_matches(joins))
        .filter(|word| {
            word.chars().count() >= SHORTEST_WORD && word.chars().any(char::is_alphabetic)
        })
        .map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: &str = "Write the contact email address given in slides.pptx into contact.txt, \
                           and the number of slides into slide_count.txt.";
    const DECK: &str = "Q4 Review\nKey Highlights\nRevenue increased 15% quarter-over-quarter\n\
                        Thank you for reviewing. For questions, contact the analytics team at \
                        analytics@example.com.";

    fn deck() -> Vec<NamedSource> {
        vec![NamedSource {
            path: "slides.pptx".to_string(),
            text: DECK.to_string(),
        }]
    }

    #[test]
    fn a_text_from_a_named_file_holds_when_its_own_words_are_in_it() {
        assert_eq!(
            ungrounded_text("analytics@example.com\n", REQUEST, &deck()),
            None
        );
        assert_eq!(
            ungrounded_text("The contact is analytics@example.com.", REQUEST, &deck()),
            None
        );
        assert_eq!(ungrounded_text("example.com", REQUEST, &deck()), None);
        // Numbers and the request's own words ground nothing and break nothing.
        assert_eq!(ungrounded_text("3", REQUEST, &deck()), None);
        assert_eq!(ungrounded_text("Contact email: 3", REQUEST, &deck()), None);
        // No named file: nothing to hold the text to.
        assert_eq!(ungrounded_text("Anything at all", REQUEST, &[]), None);
    }

    #[test]
    fn a_text_none_of_whose_words_the_named_file_holds_breaks_it() {
        for written in [
            "Contact information is missing; please provide the contact email address.",
            "the text the request asks for",
            "Kontaktadresse nicht gefunden",
        ] {
            let why = ungrounded_text(written, REQUEST, &deck())
                .unwrap_or_else(|| panic!("{written:?} should break the contract"));
            assert!(why.contains("slides.pptx"), "{why}");
        }
    }

    #[test]
    fn a_results_text_is_its_string_values_not_its_keys() {
        let result = serde_json::json!({
            "path": "slides.pptx",
            "slides": [{"index": 1, "text": "Q4 Review"}, {"index": 2, "text": "Thanks"}],
        });
        assert_eq!(shown_text(&result), "slides.pptx\nQ4 Review\nThanks\n");
    }
}
