//! What a request asks for: an artefact (a file written, changed or removed) or only an answer.
//!
//! A job whose request asks for an artefact cannot succeed without changing the draft, so the
//! engine refuses a plan or an item that answers that nothing needs to change for it. The
//! engine reads that from the request only where it can without judging its meaning: the
//! request **names a file the workbench does not have** — a word ending in a known file
//! extension (`count.txt`, `notes/2026-02-10.txt`, `summary.xlsx`) that is not one of the
//! workbench's paths (nor the file name of one): something must create it. Whatever the
//! wording or language of the rest, the plan says whether the job only answers (with its
//! reason) or which files its items write, and its items are held to their targets and
//! contracts ([`crate::contract`]). No verb list is read: `do not write any file`, `make sure
//! you count every row` and a question in any language are questions when the plan says so.

/// The file extensions a word must end with to be read as a file name.
const EXTENSIONS: &[&str] = &[
    "bin", "csv", "doc", "docx", "htm", "html", "json", "md", "ods", "odt", "pdf", "ppt", "pptx",
    "tsv", "txt", "xls", "xlsm", "xlsx", "xml", "yaml", "yml", "zip",
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
    if missing.is_empty() {
        return Ask::Answer;
    }
    Ask::Artefact(format!(
        "it names {}, which the workbench does not have",
        missing.join(", ")
    ))
}

/// The question marks of the scripts a request may be written in: Latin (`?`), full-width
/// (`？`, Chinese and Japanese) and Arabic (`؟`). Greek's `;` is not one: it is a semicolon
/// everywhere else.
const QUESTION_MARKS: &[char] = &['?', '\u{ff1f}', '\u{061f}'];

/// True when `request` asks a question: a question mark ends one of its sentences (a `?` followed
/// by white space or the end; `a.csv?x=1` in an address is not one). How it is worded, and in
/// which language, does not matter. Only a question is offered the plan's answer-only way out;
/// a request without one may still be answered when its plan says so.
pub fn asks_a_question(request: &str) -> bool {
    let mut chars = request.chars().peekable();
    while let Some(c) = chars.next() {
        // A script without spaces between sentences (Chinese, Japanese) needs none after it.
        let ends_sentence = c != '?' || chars.peek().is_none_or(|next| next.is_whitespace());
        if QUESTION_MARKS.contains(&c) && ends_sentence {
            return true;
        }
    }
    false
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

/// The paths of `files` that `request` names (by path or by file name), in order, once each.
pub fn named_files<S: AsRef<str>>(request: &str, files: &[S]) -> Vec<String> {
    let mut named: Vec<String> = Vec::new();
    for name in file_names(request) {
        let found = files
            .iter()
            .map(AsRef::as_ref)
            .find(|file| is_named(file, &name));
        if let Some(file) = found.filter(|file| !named.iter().any(|known| known == file)) {
            named.push(file.to_string());
        }
    }
    named
}

/// The file names `request` mentions that are not among `files`, in order, once each.
pub fn missing_files<S: AsRef<str>>(request: &str, files: &[S]) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    for name in file_names(request) {
        let known = files.iter().any(|file| is_named(file.as_ref(), &name));
        if !known && !missing.contains(&name) {
            missing.push(name);
        }
    }
    missing
}

/// True when the workbench path `file` is the file `name` (a path or a file name) names.
fn is_named(file: &str, name: &str) -> bool {
    file == name || file.rsplit('/').next() == Some(name)
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
    fn a_request_naming_a_file_the_workbench_lacks_asks_for_an_artefact_in_any_language() {
        let count = why("Write the number of rows in penguins.csv into count.txt");
        assert_eq!(
            count.as_deref(),
            Some("it names count.txt, which the workbench does not have")
        );
        for request in [
            "Put the number of penguins in count.txt",
            "Save the owners of launch_plan.csv, one per line, as owners.md",
            "Make a summary.xlsx of penguins.csv",
            "I need the species of penguins.csv in species.txt please",
            "count.txt should hold the row count of penguins.csv",
            "Schreibe die Anzahl der Pinguine aus penguins.csv in anzahl.txt.",
            "Écris le nombre de manchots de penguins.csv dans nombre.txt.",
            "Escribe el total en total.txt, por favor.",
            "Zapisz liczbę wierszy do wynik.txt",
            "把企鹅的数量写入 count.txt",
        ] {
            assert!(why(request).is_some(), "{request}");
        }
        // A file the workbench has in a folder is known by its path or its name.
        assert!(why("Summarize docs/simple.docx").is_none());
        assert!(why("Summarize simple.docx").is_none());
        // A missing file in a folder, and in quotes or backticks.
        assert!(why("Move weekly_notes.txt to notes/2026-02-10.txt.").is_some());
        assert_eq!(
            missing_files("Put it in `total.txt`, or \"b.md\".", FILES),
            vec!["total.txt".to_string(), "b.md".to_string()]
        );
        assert_eq!(
            named_files(
                "Copy simple.docx, `penguins.csv` and penguins.csv again into b.md.",
                FILES
            ),
            vec!["docs/simple.docx".to_string(), "penguins.csv".to_string()]
        );
    }

    #[test]
    fn questions_ask_for_an_answer_in_any_wording_or_language() {
        for request in [
            "How many penguins are listed in penguins.csv? Just tell me; do not write or change any file.",
            "Make sure you count every row: how many penguins does penguins.csv list?",
            "Don't create anything, just tell me which owner has the most milestones in launch_plan.csv.",
            "Without writing a file: what is the heaviest penguin in penguins.csv?",
            "Summarize launch_plan.csv.",
            "Wie viele Pinguine stehen in penguins.csv? Bitte keine Datei ändern.",
            "Combien de manchots compte penguins.csv ? Ne modifie aucun fichier.",
            "¿Cuántos pingüinos hay en penguins.csv? No escribas ningún archivo.",
            "Quante righe ha launch_plan.csv? Non creare file.",
            "penguins.csv にペンギンは何羽いますか？",
            "",
        ] {
            assert_eq!(classify(request, FILES), Ask::Answer, "{request}");
        }
        // An extension in a web address is not a file name.
        assert_eq!(
            classify("Read https://example.com/a.csv?", FILES),
            Ask::Answer
        );
        assert!(classify("What is in 1.txt?", FILES).artefact().is_some());
    }

    #[test]
    fn a_question_mark_in_any_script_makes_a_question() {
        for question in [
            "How many penguins are listed in penguins.csv? Just tell me; do not write any file.",
            "Make sure you count every row: how many penguins are there?",
            "¿Cuántos pingüinos hay?",
            "penguins.csv にペンギンは何羽いますか？ファイルは変更しないでください。",
            "كم عدد البطاريق؟",
        ] {
            assert!(asks_a_question(question), "{question}");
        }
        for request in [
            "Ändere den Titel der dritten Folie in „Lösung“.",
            "Delete unknown.bin; keep everything else.",
            "Summarize launch_plan.csv.",
            "Read https://example.com/a.csv?x=1 and save it",
        ] {
            assert!(!asks_a_question(request), "{request}");
        }
    }
}
