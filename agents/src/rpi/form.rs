//! The form a request gives the text it asks for — "just the number", "with two decimals",
//! "one per line" — checked on a small model's `write_text_file` before it runs.
//!
//! The phrases are English and few, on purpose: each is a rule a user can read in the request
//! and the engine can check on the written text without judging its meaning. With a compact
//! prompt (a small model), a write that breaks one is not run and the model is told which
//! rule it broke; a larger model is trusted with the form.

use atelier_messages::contract::{Contract, Holds};

use super::grounding;

/// One rule about the form of the written text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FormRule {
    /// "just the number", "only the number": the text is one number.
    JustNumber,
    /// "with two decimals", "2 decimal places": every number has this many decimals.
    Decimals(usize),
    /// "one per line", "each on its own line": values are not listed on one line.
    OnePerLine,
    /// "distinct", "unique", "without duplicates": no line is written twice.
    Distinct,
    /// "sorted alphabetically", "in alphabetical order": the lines are in order (any case).
    Alphabetical,
}

/// The rules `request` states.
pub(super) fn rules(request: &str) -> Vec<FormRule> {
    let text = request.to_lowercase();
    let mut rules = Vec::new();
    if ["just the number", "only the number", "just a number"]
        .iter()
        .any(|phrase| text.contains(phrase))
    {
        rules.push(FormRule::JustNumber);
    }
    if let Some(decimals) = decimals(&text) {
        rules.push(FormRule::Decimals(decimals));
    }
    let phrases = [
        (
            &["one per line", "each on its own line", "one on each line"][..],
            FormRule::OnePerLine,
        ),
        (
            &["distinct", "unique", "without duplicates"][..],
            FormRule::Distinct,
        ),
        (
            &["alphabetical", "sorted alphabetically"][..],
            FormRule::Alphabetical,
        ),
    ];
    for (said, rule) in phrases {
        if said.iter().any(|phrase| text.contains(phrase)) {
            rules.push(rule);
        }
    }
    rules
}

/// The rules for a write to `paths` (one file, or any of an item's targets): the request's
/// `rules`, and the form the plan's contracts give every one of them, in any language: a
/// `number` is just the number, a `list` one value per line. A request's rule that the
/// contract's kind contradicts (a list's rules on a number, just the number on a list) gives
/// way to the contract, which the engine checks when the item ends.
pub(super) fn with_contracts(
    rules: &[FormRule],
    contracts: &[Contract],
    paths: &[String],
) -> Vec<FormRule> {
    let holds = |path: &String| {
        let path = crate::contract::clean_path(path);
        (contracts.iter())
            .find(|contract| contract.path == path)
            .map(|contract| contract.holds)
    };
    let mut kinds = paths.iter().map(holds);
    let Some(Some(kind)) = kinds.next() else {
        return rules.to_vec();
    };
    if kinds.any(|other| other != Some(kind)) {
        return rules.to_vec();
    }
    let (rule, contradicts): (FormRule, fn(&FormRule) -> bool) = match kind {
        Holds::Number => (FormRule::JustNumber, |rule| {
            matches!(
                rule,
                FormRule::OnePerLine | FormRule::Distinct | FormRule::Alphabetical
            )
        }),
        Holds::List => (FormRule::OnePerLine, |rule| *rule == FormRule::JustNumber),
        Holds::Table | Holds::Text | Holds::Edit | Holds::Absent => return rules.to_vec(),
    };
    let mut rules: Vec<FormRule> = rules.iter().copied().filter(|r| !contradicts(r)).collect();
    if !rules.contains(&rule) {
        rules.insert(0, rule);
    }
    rules
}

/// The count of "N decimals" / "N decimal places" in `text` (lower case), N a digit or a
/// number word up to four.
fn decimals(text: &str) -> Option<usize> {
    let words: Vec<&str> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    words.windows(2).find_map(|pair| {
        if !pair[1].starts_with("decimal") {
            return None;
        }
        match pair[0] {
            "0" | "zero" | "no" => Some(0),
            "1" | "one" => Some(1),
            "2" | "two" => Some(2),
            "3" | "three" => Some(3),
            "4" | "four" => Some(4),
            _ => None,
        }
    })
}

/// Why `content` breaks one of `rules`, if it does; `shown` are the values the tools showed
/// (two of them on one line are a list on one line).
pub(super) fn broken(rules: &[FormRule], content: &str, shown: &[String]) -> Option<String> {
    let why = broken_rule(rules, content, shown)?;
    let lists = rules.iter().any(|rule| {
        matches!(
            rule,
            FormRule::OnePerLine | FormRule::Distinct | FormRule::Alphabetical
        )
    });
    if !lists {
        return Some(why);
    }
    // Real line breaks: the message reaches the model inside a JSON text, where they read
    // `\n` as the model is to write them (a quoted `"a\nb"` reached it as `a\\nb` and was
    // copied so, a backslash and an `n` in the file).
    Some(format!(
        "{why}; in the form the request asks, the content is these lines:\n{}",
        listed(rules, content, shown)
    ))
}

/// `content`'s values as the list rules among `rules` want them: one per line (a line listing
/// several split at the text `\n`, its commas or semicolons, or the shown values it holds),
/// each once, in alphabetical order — the model's own values in the form the request states.
fn listed(rules: &[FormRule], content: &str, shown: &[String]) -> String {
    let mut values: Vec<String> = lines(content.trim())
        .into_iter()
        .flat_map(|line| line.split("\\n"))
        .flat_map(|part| values_of(part.trim(), shown))
        .collect();
    if rules.contains(&FormRule::Distinct) {
        let mut seen = Vec::new();
        values.retain(|value| {
            let first = !seen.contains(value);
            seen.push(value.clone());
            first
        });
    }
    if rules.contains(&FormRule::Alphabetical) {
        values.sort_by_key(|value| value.to_lowercase());
    }
    values.join("\n")
}

/// The values one line lists: itself, unless it lists several (split at its commas or
/// semicolons, else the shown values it holds, in its order).
fn values_of(line: &str, shown: &[String]) -> Vec<String> {
    if line.is_empty() {
        return Vec::new();
    }
    if !listed_on_one_line(line, shown) {
        return vec![line.to_string()];
    }
    if separated(line) {
        return line
            .split([',', ';'])
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(str::to_string)
            .collect();
    }
    let mut found: Vec<(usize, &String)> = shown
        .iter()
        .filter_map(|value| line.find(value.as_str()).map(|at| (at, value)))
        .collect();
    found.sort();
    found.into_iter().map(|(_, value)| value.clone()).collect()
}

/// Why `content` breaks one of `rules`, the first it breaks.
fn broken_rule(rules: &[FormRule], content: &str, shown: &[String]) -> Option<String> {
    let text = content.trim();
    let numbers = grounding::numbers(text);
    rules.iter().find_map(|rule| match rule {
        FormRule::JustNumber
            if numbers.len() != 1 || numbers[0].0 != text.strip_prefix('-').unwrap_or(text) =>
        {
            Some(format!(
                "the file is to hold just the number, and the content is {text:?}; write the \
                 number alone"
            ))
        }
        FormRule::Decimals(count) if numbers.is_empty() => Some(format!(
            "the request asks for a number with {count} decimals, and the content {text:?} holds \
             none; write the number"
        )),
        FormRule::Decimals(count) => numbers
            .iter()
            .find(|(number, _)| decimals_of(number) != *count)
            .map(|(number, _)| {
                format!(
                    "the request asks for {count} decimals, and {number} has {}; write it with \
                     {count}",
                    decimals_of(number)
                )
            }),
        FormRule::Distinct => repeated_line(text).map(|line| {
            format!("the request asks for distinct values, and {line:?} is written twice")
        }),
        FormRule::Alphabetical => out_of_order(text).map(|(before, after)| {
            format!(
                "the request asks for alphabetical order, and {after:?} comes after {before:?}; \
                 sort the lines"
            )
        }),
        FormRule::OnePerLine => lines(text)
            .into_iter()
            .find(|line| line.contains("\\n") || listed_on_one_line(line, shown))
            .map(|line| {
                format!(
                    "the values are to be written one per line, and a line lists several \
                     ({line:?}); put each on its own line, with line breaks, not the text \\n"
                )
            })
            .or_else(|| unshown_line(rules, text, shown)),
        _ => None,
    })
}

/// A regular expression (JSON-schema `pattern`) the written text must match under `rules`,
/// for constrained decoding; `None` when they state no form a pattern can hold. Just the
/// number, with its decimals when they are stated; else, for stated decimals, a label, the
/// number and a unit (`Total: 1249.50 EUR`). Only positive character classes: llama.cpp turns
/// a pattern into a grammar over the JSON text itself, where a negated class would let the
/// string's closing quote through. Lines, order and repeats are checked, not bound.
pub(super) fn pattern(rules: &[FormRule]) -> Option<String> {
    let decimals = rules.iter().find_map(|rule| match rule {
        FormRule::Decimals(count) => Some(*count),
        _ => None,
    });
    // Bounded: sampled after a refusal, a small model ran a number out to a degenerate
    // `00000000000000000000…`.
    let number = match decimals {
        Some(0) => "-?[0-9]{1,15}".to_string(),
        Some(count) => format!("-?[0-9]{{1,15}}\\.[0-9]{{{count}}}"),
        None => "-?[0-9]{1,15}(\\.[0-9]{1,6})?".to_string(),
    };
    if rules.contains(&FormRule::JustNumber) {
        return Some(format!("^{number}$"));
    }
    decimals.map(|_| format!("^([A-Za-z ]{{1,40}}: ?)?{number}( [A-Za-z]{{1,10}})?$"))
}

/// For a list of values (the request asks for them distinct or sorted), the first line of
/// `text` that holds none of the values the tools showed, when they showed any: a small model
/// misspells a value it copies (`Mirira Kwon`).
fn unshown_line(rules: &[FormRule], text: &str, shown: &[String]) -> Option<String> {
    let lists_values = rules
        .iter()
        .any(|rule| matches!(rule, FormRule::Distinct | FormRule::Alphabetical));
    if !lists_values || shown.is_empty() {
        return None;
    }
    let shown: Vec<String> = shown.iter().map(|value| value.to_lowercase()).collect();
    let line = lines(text).into_iter().find(|line| {
        let line = line.to_lowercase();
        !shown.iter().any(|value| line.contains(value.as_str()))
    })?;
    Some(format!(
        "{line:?} is none of the values the tools showed; write each value as the result \
         gives it"
    ))
}

/// The lines of `text` that hold something, trimmed.
fn lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect()
}

fn repeated_line(text: &str) -> Option<&str> {
    let lines = lines(text);
    lines
        .iter()
        .enumerate()
        .find(|(index, line)| lines[..*index].contains(line))
        .map(|(_, line)| *line)
}

/// The first pair of neighbouring lines out of alphabetical order (ignoring case).
fn out_of_order(text: &str) -> Option<(&str, &str)> {
    lines(text)
        .windows(2)
        .find(|pair| pair[0].to_lowercase() > pair[1].to_lowercase())
        .map(|pair| (pair[0], pair[1]))
}

fn decimals_of(number: &str) -> usize {
    number
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len())
}

/// True when a single line holds several values: separated by commas or semicolons, or two
/// of the values the tools showed.
fn listed_on_one_line(line: &str, shown: &[String]) -> bool {
    separated(line)
        || shown
            .iter()
            .filter(|value| value.chars().count() >= 2 && line.contains(value.as_str()))
            .count()
            >= 2
}

/// True when `line` holds several parts separated by commas or semicolons (not a number's
/// thousands).
fn separated(line: &str) -> bool {
    line.split([',', ';'])
        .filter(|part| !part.trim().is_empty())
        .count()
        >= 2
        && grounding::numbers(line).len() <= 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broken_(rules: &[FormRule], content: &str) -> Option<String> {
        broken(rules, content, &[])
    }

    #[test]
    fn the_forms_a_request_states_are_checked_on_the_text() {
        let count = rules("Write the number of milestones into count.txt, just the number.");
        assert_eq!(count, [FormRule::JustNumber]);
        assert_eq!(broken_(&count, "5\n"), None);
        assert!(broken_(&count, "5 milestones").is_some_and(|why| why.contains("just the number")));
        let total = rules("Write its total (Quantity times Unit Price) with two decimals.");
        assert_eq!(total, [FormRule::Decimals(2)]);
        assert_eq!(broken_(&total, "1249.50"), None);
        assert!(broken_(&total, "1249.5").is_some_and(|why| why.contains("1249.5 has 1")));
        let owners = rules("List the owners, sorted, one per line, in owners.txt.");
        assert_eq!(owners, [FormRule::OnePerLine]);
        assert_eq!(broken_(&owners, "Ethan Park\nLuis Alvarez\n"), None);
        assert!(
            broken_(&owners, "Ethan Park, Luis Alvarez, Mira Kwon")
                .is_some_and(|why| why.contains("one per line"))
        );
        // A single value is one per line; a request stating no form checks nothing.
        assert_eq!(broken_(&owners, "Ethan Park"), None);
        assert!(rules("Summarize the notes into summary.txt").is_empty());
        assert!(broken_(&total, "Total: ${Total}").is_some_and(|why| why.contains("holds none")));
        // As the 0.5B model listed the owners: out of order, one twice.
        let listed = rules(
            "List the distinct owners in launch_plan.csv, sorted alphabetically, one per line",
        );
        assert_eq!(
            listed,
            [
                FormRule::OnePerLine,
                FormRule::Distinct,
                FormRule::Alphabetical
            ]
        );
        let written = "Mira Kwon\nEthan Park\nLuis Alvarez\nEthan Park";
        assert!(
            broken_(&listed, written)
                .is_some_and(|why| why.contains("\"Ethan Park\" is written twice"))
        );
        assert!(
            broken_(&listed[2..], written)
                .is_some_and(|why| why.contains("\"Ethan Park\" comes after \"Mira Kwon\""))
        );
        assert_eq!(
            broken_(&listed, "Ethan Park\nluis Alvarez\nMira Kwon\n"),
            None
        );
        // As it wrote them next: the query's values on one line, without commas.
        let values = ["Luis Alvarez".to_string(), "Ethan Park".to_string()];
        assert!(
            broken(&listed, "Luis Alvarez Priya Desai Ethan Park", &values)
                .is_some_and(|why| why.contains("a line lists several"))
        );
        assert_eq!(broken(&listed, "Ethan Park", &values), None);
        // The model is told its own values in the stated form, on lines of their own.
        let owners = ["Luis Alvarez", "Priya Desai", "Mira Kwon", "Ethan Park"].map(String::from);
        for written in [
            "Luis Alvarez,Priya Desai,Mira Kwon,Ethan Park",
            "Luis Alvarez Priya Desai Mira Kwon Ethan Park",
            "Luis Alvarez\nPriya Desai\nMira Kwon\nEthan Park\nLuis Alvarez",
        ] {
            let why = broken(&listed, written, &owners);
            assert!(
                why.as_deref().is_some_and(|why| why.ends_with(
                    "asks, the content is these lines:\nEthan Park\nLuis Alvarez\nMira Kwon\nPriya Desai"
                )),
                "{written:?}: {why:?}"
            );
        }
        // As it wrote them in constrained mode: a value misspelled, two values joined by the
        // text `\n` instead of a line break.
        let owners_rules = rules("List the distinct owners, sorted alphabetically, one per line");
        let misspelled = broken(
            &owners_rules,
            "Ethan Park\nLuis Alvarez\nMirira Kwon",
            &owners,
        );
        assert!(
            misspelled.as_deref().is_some_and(
                |why| why.starts_with("\"Mirira Kwon\" is none of the values the tools showed")
            ),
            "{misspelled:?}"
        );
        let joined = broken(
            &owners_rules,
            "Ethan Park\nLuis Alvarez\nMira Kwon\\nPriya Desai",
            &owners,
        );
        assert!(
            joined
                .as_deref()
                .is_some_and(|why| why.contains("a line lists several")
                    && why.ends_with("lines:\nEthan Park\nLuis Alvarez\nMira Kwon\nPriya Desai")),
            "{joined:?}"
        );
        assert_eq!(
            broken(
                &owners_rules,
                "Ethan Park (2)\nLuis Alvarez\nMira Kwon\nPriya Desai",
                &owners
            ),
            None
        );
        // A form that is no list is not rewritten.
        let why = broken_(&count, "5 rows");
        assert!(
            why.as_deref()
                .is_some_and(|why| !why.contains("in the form the request asks")),
            "{why:?}"
        );
        assert_eq!(rules("round to 2 decimal places"), [FormRule::Decimals(2)]);
    }

    #[test]
    fn the_forms_become_the_pattern_constrained_decoding_holds_the_text_to() {
        assert_eq!(
            pattern(&[FormRule::JustNumber]).as_deref(),
            Some(r"^-?[0-9]{1,15}(\.[0-9]{1,6})?$")
        );
        assert_eq!(
            pattern(&[FormRule::JustNumber, FormRule::Decimals(2)]).as_deref(),
            Some(r"^-?[0-9]{1,15}\.[0-9]{2}$")
        );
        assert_eq!(
            pattern(&[FormRule::Decimals(2)]).as_deref(),
            Some(r"^([A-Za-z ]{1,40}: ?)?-?[0-9]{1,15}\.[0-9]{2}( [A-Za-z]{1,10})?$")
        );
        assert_eq!(
            pattern(&[FormRule::OnePerLine, FormRule::Alphabetical]),
            None
        );
    }

    #[test]
    fn a_contracts_kind_gives_the_form_in_any_language() {
        use atelier_messages::contract::{Contract, Holds};
        let contracts = [
            Contract::new("moyenne.txt", Holds::Number),
            Contract::new("iles.txt", Holds::List),
            Contract::new("resume.md", Holds::Text),
        ];
        let paths =
            |paths: &[&str]| -> Vec<String> { paths.iter().map(|p| p.to_string()).collect() };
        let french =
            rules("Écris la longueur moyenne du bec dans moyenne.txt, avec deux décimales");
        assert!(french.is_empty());
        let number = with_contracts(&french, &contracts, &paths(&["moyenne.txt"]));
        assert_eq!(number, [FormRule::JustNumber]);
        assert!(broken_(&number, "43.92\n").is_none());
        assert!(broken_(&number, "-3").is_none());
        assert!(
            broken_(&number, "La moyenne est 43.92")
                .is_some_and(|why| why.contains("just the number"))
        );
        assert_eq!(
            pattern(&number).as_deref(),
            Some("^-?[0-9]{1,15}(\\.[0-9]{1,6})?$")
        );
        let list = with_contracts(&[], &contracts, &paths(&["./iles.txt"]));
        assert_eq!(list, [FormRule::OnePerLine]);
        assert!(
            broken_(&list, "Biscoe, Dream, Torgersen")
                .is_some_and(|why| why.contains("one per line"))
        );
        assert!(broken_(&list, "Biscoe\nDream\nTorgersen\n").is_none());
        // The contract's kind wins over a request's rule it contradicts; others stay.
        let stated = [FormRule::JustNumber, FormRule::Distinct];
        assert_eq!(
            with_contracts(&stated, &contracts, &paths(&["iles.txt"])),
            [FormRule::OnePerLine, FormRule::Distinct]
        );
        assert_eq!(
            with_contracts(
                &[FormRule::Decimals(2), FormRule::OnePerLine],
                &contracts,
                &paths(&["moyenne.txt"])
            ),
            [FormRule::JustNumber, FormRule::Decimals(2)]
        );
        // Text, no contract, or targets of different kinds: the request's rules alone.
        assert_eq!(
            with_contracts(&stated, &contracts, &paths(&["resume.md"])),
            stated
        );
        assert_eq!(
            with_contracts(&stated, &contracts, &paths(&["other.txt"])),
            stated
        );
        assert_eq!(
            with_contracts(&[], &contracts, &paths(&["moyenne.txt", "iles.txt"])),
            []
        );
        assert_eq!(
            with_contracts(&[], &contracts, &paths(&["moyenne.txt", "notes.txt"])),
            []
        );
    }
}
