//! What a request asks for: an artefact (a file written, changed or removed) or only an answer.
//!
//! A job whose request asks for an artefact cannot succeed without changing the draft, so the
//! engine refuses a plan or an item that answers that nothing needs to change for it. The
//! rule, on the request's text and the workbench's file list:
//!
//! 1. The request **names a file the workbench does not have** — a word ending in a known
//!    file extension (`count.txt`, `notes/2026-02-10.txt`, `summary.xlsx`) that is not one of
//!    the workbench's paths (nor the file name of one): something must create it.
//! 2. Or a sentence of it **asks to make or change something**: it contains one of
//!    [`ARTEFACT_VERBS`] (the bare word, any case: `Write …`, `… and add a sheet`). A
//!    question (a sentence ending in `?`) counts only when it is a request put as a question
//!    (`Can you write …?`, `Could you …`, `Would you …`, `Will you …`, `Please …`).
//!
//! Anything else asks only for an answer (`How many rows does penguins.csv have?`,
//! `What is the total?`, `Summarize the notes.`). The word lists are English; a request in
//! another language is read as asking for an answer unless it names a missing file.

/// Verbs that, in a sentence that is not a plain question, ask for a file to be made or
/// changed (bare forms only: `updated` in `the file was updated` is a statement).
pub const ARTEFACT_VERBS: &[&str] = &[
    "add",
    "append",
    "convert",
    "copy",
    "create",
    "delete",
    "edit",
    "export",
    "fill",
    "generate",
    "insert",
    "make",
    "modify",
    "move",
    "overwrite",
    "populate",
    "produce",
    "put",
    "remove",
    "rename",
    "replace",
    "rewrite",
    "save",
    "sort",
    "translate",
    "update",
    "write",
];

/// The file extensions a word must end with to be read as a file name.
const EXTENSIONS: &[&str] = &[
    "bin", "csv", "doc", "docx", "htm", "html", "json", "md", "ods", "odt", "pdf", "ppt", "pptx",
    "tsv", "txt", "xls", "xlsm", "xlsx", "xml", "yaml", "yml", "zip",
];

/// How a question that is really a request begins.
const REQUEST_OPENINGS: &[&str] = &[
    "can you",
    "could you",
    "would you",
    "will you",
    "please",
    "can we",
    "could we",
];

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Only an answer: a job may end with no change.
    Answer,
    /// An artefact; why the engine reads it so (e.g. "it names count.txt, which the
    /// workbench does not have").
    Artefact(String),
}

impl Ask {
    /// Why the request asks for an artefact, if it does.
    pub fn artefact(&self) -> Option<&str> {
        match self {
            Ask::Answer => None,
            Ask::Artefact(why) => Some(why),
        }
    }
}

/// Classifies `request` against the workbench's `files` (their paths).
pub fn classify<S: AsRef<str>>(request: &str, files: &[S]) -> Ask {
    let missing = missing_files(request, files);
    if !missing.is_empty() {
        return Ask::Artefact(format!(
            "it names {}, which the workbench does not have",
            missing.join(", ")
        ));
    }
    for sentence in sentences(request) {
        let lower = sentence.to_lowercase();
        let question = lower.trim_end().ends_with('?');
        if question
            && !REQUEST_OPENINGS
                .iter()
                .any(|opening| lower.trim_start().starts_with(opening))
        {
            continue;
        }
        if let Some(verb) = words(&lower).find(|word| ARTEFACT_VERBS.contains(word)) {
            return Ask::Artefact(format!("it asks to {verb} (\"{}\")", sentence.trim()));
        }
    }
    Ask::Answer
}

/// True when `request` asks to delete, remove, rename or move something (any sentence, any
/// case).
pub fn asks_to_remove(request: &str) -> bool {
    const VERBS: &[&str] = &["delete", "remove", "rename", "move"];
    let lower = request.to_lowercase();
    words(&lower).any(|word| VERBS.contains(&word))
}

/// True when `request` uses the verb of the office operation `op` (`append` of
/// `append_paragraph`, `replace` of `replace_text`), or a word meaning it: *fill* replaces
/// text or sets cells, *add* appends, *write* sets cells, *change* and *update* replace or
/// set. A small model offered every operation picks the first one, or the example's.
pub fn names_operation(request: &str, op: &str) -> bool {
    const MEANING: &[(&str, &[&str])] = &[
        ("fill", &["replace", "set"]),
        ("add", &["append", "add"]),
        ("write", &["set"]),
        ("change", &["replace", "set"]),
        ("update", &["replace", "set"]),
    ];
    let Some((verb, _)) = op.split_once('_') else {
        return false;
    };
    let lower = request.to_lowercase();
    words(&lower).any(|word| {
        word == verb
            || MEANING
                .iter()
                .any(|(said, verbs)| *said == word && verbs.contains(&verb))
    })
}

/// The texts `request` puts in double quotes (straight or curly), in order, once each: what a
/// request such as `Append a paragraph "Conclusion"` asks to be written word for word.
pub fn quoted_texts(request: &str) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    let mut rest = request;
    while let Some(open) = rest.find(['"', '\u{201c}']) {
        let after = &rest[open..];
        let opener = after.chars().next().unwrap_or('"');
        let after = &after[opener.len_utf8()..];
        let Some(close) = after.find(['"', '\u{201d}']) else {
            break;
        };
        let text = after[..close].trim();
        if !text.is_empty() && !texts.iter().any(|seen| seen == text) {
            texts.push(text.to_string());
        }
        let closer = after[close..].chars().next().map_or(1, char::len_utf8);
        rest = &after[close + closer..];
    }
    texts
}

/// The texts `request` quotes to be added word for word: its [`quoted_texts`] but file names,
/// when it asks to append, add, insert or write and not to replace, fill, delete, remove or
/// rename (where a quoted text may be what is to go).
pub fn quoted_additions(request: &str) -> Vec<String> {
    const ADDING: &[&str] = &["append", "add", "insert", "write"];
    const OTHER: &[&str] = &["replace", "fill", "delete", "remove", "rename"];
    let lower = request.to_lowercase();
    let adds = words(&lower).any(|word| ADDING.contains(&word));
    if !adds || words(&lower).any(|word| OTHER.contains(&word)) {
        return Vec::new();
    }
    quoted_texts(request)
        .into_iter()
        .filter(|text| file_names(text).next().as_deref() != Some(text.as_str()))
        .collect()
}

/// The template placeholders `request` names (`{{company}}`, `${total}`), in order, once each:
/// what a request such as `Fill the invoice (replace the {{company}} placeholder)` asks to be
/// replaced.
pub fn named_placeholders(request: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for (open, close) in [("{{", "}}"), ("${", "}")] {
        let mut rest = request;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len()..];
            let Some(end) = after.find(close) else { break };
            let name = &after[..end];
            let placeholder = format!("{open}{name}{close}");
            let plain = !name.is_empty() && name.len() <= 40 && !name.contains(['\n', '{', '}']);
            if plain && !found.contains(&placeholder) {
                found.push(placeholder);
            }
            rest = &after[end + close.len()..];
        }
    }
    found
}

/// The file names `request` mentions that are not among `files`, in order, once each.
pub fn missing_files<S: AsRef<str>>(request: &str, files: &[S]) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    for name in file_names(request) {
        let known = files.iter().any(|file| {
            let file = file.as_ref();
            file == name || file.rsplit('/').next() == Some(name.as_str())
        });
        if !known && !missing.contains(&name) {
            missing.push(name);
        }
    }
    missing
}

/// The words of `text` that look like file names (`name.ext` with a known extension).
fn file_names(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '[' | ']'))
        .map(|word| {
            let quote = |c: char| matches!(c, '"' | '\'' | '`' | '*' | ':' | '!' | '?');
            word.trim_start_matches(quote)
                .trim_end_matches(|c: char| quote(c) || c == '.')
                .trim_start_matches("./")
        })
        .filter(|word| {
            let Some((stem, extension)) = word.rsplit_once('.') else {
                return false;
            };
            let name = stem.rsplit('/').next().unwrap_or(stem);
            !name.is_empty()
                && !word.contains("://")
                && EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str())
        })
        .map(str::to_string)
}

/// The sentences of `text`: split after `.`, `!`, `?` or `;` followed by white space (or at
/// the end), and at line breaks, so a file name's dot does not split.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let next = chars.peek().map(|(_, next)| *next);
        let ends = match c {
            '\n' => true,
            '.' | '!' | '?' | ';' => next.is_none_or(char::is_whitespace),
            _ => false,
        };
        if ends {
            let end = at + c.len_utf8();
            out.push(&text[start..end]);
            start = end;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out.retain(|sentence| !sentence.trim().is_empty());
    out
}

/// The lowercase words of `text` (letters only).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphabetic())
        .filter(|word| !word.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILES: &[&str] = &["penguins.csv", "launch_plan.csv", "docs/simple.docx"];

    #[test]
    fn a_request_quotes_the_texts_it_wants_written() {
        let request = "Append to simple.docx a paragraph \"Conclusion\" followed by the paragraph \
                       \"Revenue grew by 15% and three major releases shipped.\"";
        assert_eq!(
            quoted_texts(request),
            [
                "Conclusion",
                "Revenue grew by 15% and three major releases shipped."
            ]
        );
        assert_eq!(
            quoted_texts("Add \u{201c}Summary\u{201d} and \"Summary\" and an open \" quote"),
            ["Summary"]
        );
        assert!(quoted_texts("Fill invoice_template.docx: company Acme Ltd").is_empty());
        assert_eq!(
            named_placeholders(
                "Fill invoice_template.docx (replace the {{company}}, {{date}} and {{total}} \
                 placeholders, and ${total} once, {{company}} again)"
            ),
            ["{{company}}", "{{date}}", "{{total}}", "${total}"]
        );
        assert!(named_placeholders("Sum the {braces} and a lone {{").is_empty());
        assert_eq!(quoted_additions(request).len(), 2);
        assert!(quoted_additions("Replace \"Draft\" with \"Final\" in notes.md").is_empty());
        assert!(quoted_additions("What does \"EBITDA\" mean?").is_empty());
        assert_eq!(
            quoted_additions("Append \"Done\" to \"notes.md\""),
            ["Done"]
        );
    }

    #[test]
    fn a_request_names_the_operations_of_its_verbs() {
        let append = "Append to simple.docx a paragraph \"Conclusion\"";
        assert!(names_operation(append, "append_paragraph"));
        assert!(!names_operation(append, "replace_text"));
        let fill = "Fill invoice_template.docx: company Acme Ltd";
        assert!(names_operation(fill, "replace_text"));
        assert!(names_operation(fill, "set_cells"));
        assert!(!names_operation(fill, "append_paragraph"));
        assert!(names_operation("Add a slide", "add_slide"));
        assert!(!names_operation("Summarize the notes.", "delete_paragraph"));
    }

    fn why(request: &str) -> Option<String> {
        classify(request, FILES).artefact().map(str::to_string)
    }

    #[test]
    fn requests_for_a_file_ask_for_an_artefact() {
        // The request: a write verb and a file the workbench does not have.
        let count = why("Write the number of rows in penguins.csv into count.txt");
        assert_eq!(
            count.as_deref(),
            Some("it names count.txt, which the workbench does not have")
        );
        // A verb anywhere in a statement, however the request is put.
        for request in [
            "In quarterly_data.xlsx add a sheet named Summary",
            "budget_notes.txt lists a budget. Write the total.",
            "Fill invoice_template.docx: company Acme Ltd",
            "Delete the file unknown.bin from the workbench; keep everything else.",
            "Export the milestones per department",
            "Sort the plan by date",
            "please update the totals",
            "Can you convert penguins.csv to a spreadsheet?",
            "Could you save the answer?",
        ] {
            assert!(why(request).is_some(), "{request}");
        }
        assert_eq!(
            why("Sort penguins.csv by species.").as_deref(),
            Some("it asks to sort (\"Sort penguins.csv by species.\")")
        );
        // A file the workbench has in a folder is known by its path or its name.
        assert!(why("Summarize docs/simple.docx").is_none());
        assert!(why("Summarize simple.docx").is_none());
        // A missing file in a folder, and in quotes or backticks.
        assert!(why("Move weekly_notes.txt to notes/2026-02-10.txt.").is_some());
        assert_eq!(
            missing_files("Put it in `total.txt`, or \"b.md\".", FILES),
            vec!["total.txt".to_string(), "b.md".to_string()]
        );
    }

    #[test]
    fn questions_ask_for_an_answer() {
        for request in [
            "How many rows does penguins.csv have?",
            "How many rows are in penguins.csv?",
            "What is the total of the Amount column?",
            "How many milestones?",
            "Which owner has the most milestones in launch_plan.csv?",
            "How do I add a column to penguins.csv?",
            "Summarize launch_plan.csv.",
            "The file was updated yesterday. What changed in penguins.csv?",
            "",
        ] {
            assert_eq!(classify(request, FILES), Ask::Answer, "{request}");
        }
        // Words that only contain a verb, and extensions that are not file names.
        assert_eq!(
            classify(
                "Is the address list written well? See e.g. penguins.csv.",
                FILES
            ),
            Ask::Answer
        );
        assert!(classify("What is in 1.txt?", FILES).artefact().is_some());
        assert_eq!(
            classify("Read https://example.com/a.csv?", FILES),
            Ask::Answer
        );
    }

    #[test]
    fn sentences_split_on_their_ends_not_on_file_names() {
        let split: Vec<&str> = sentences("Read a.csv. Then write b.txt!\nDone? yes")
            .into_iter()
            .map(str::trim)
            .collect();
        assert_eq!(split, ["Read a.csv.", "Then write b.txt!", "Done?", "yes"]);
    }
}
