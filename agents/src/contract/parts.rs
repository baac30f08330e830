//! An `edit` contract on a document or a deck: the parts it names (`touches`) against the parts
//! the item changed. A deck's parts are its slides (`slide 2`), a document's its paragraphs
//! (`paragraph 3`) and tables (`table 0`), numbered as `read_file` numbers them (its `index`,
//! from 0, the numbering `pptx_operations` and `docx_operations` take). A part is compared as
//! `read_file` shows it: a slide's title, body, other text, tables and notes; a paragraph's
//! style and text; a table's rows. A slide inserted before others moves them, so each of those
//! changed too.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::cells::touches_report;
use super::grounded::words;

/// A document's or a deck's parts as read: name (`slide 2`, `paragraph 3`) → what it shows.
pub type Parts = BTreeMap<String, String>;

/// The parts of a `read_file` result of a deck (`{"slides": [...]}` or `{"slide": {...}}`)
/// or a document (`{"blocks": [...]}`); `None` for any other result.
pub fn read_parts(result: &Value) -> Option<Parts> {
    if let Some(blocks) = result.get("blocks").and_then(Value::as_array) {
        return Some(blocks.iter().filter_map(block_part).collect());
    }
    let slides: Vec<&Value> = match (result.get("slides"), result.get("slide")) {
        (Some(Value::Array(slides)), _) => slides.iter().collect(),
        (_, Some(slide @ Value::Object(_))) => vec![slide],
        _ => return None,
    };
    Some(
        slides
            .into_iter()
            .enumerate()
            .map(|(position, slide)| {
                let index = slide
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(position as u64);
                (format!("slide {index}"), shown_without_index(slide))
            })
            .collect(),
    )
}

/// A document block as a part: `paragraph N` or `table N`.
fn block_part(block: &Value) -> Option<(String, String)> {
    let kind = block.get("type")?.as_str()?;
    let index = block.get("index")?.as_u64()?;
    Some((format!("{kind} {index}"), shown_without_index(block)))
}

/// What a part shows, its own number left out (a part moved is compared by what it holds at
/// its number, not by the number it carries).
fn shown_without_index(part: &Value) -> String {
    let mut part = part.clone();
    if let Some(fields) = part.as_object_mut() {
        fields.remove("index");
    }
    part.to_string()
}

/// The parts that differ between `before` and `after`: changed, added or removed.
pub fn changed_parts(before: &Parts, after: &Parts) -> Vec<String> {
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort_by_key(|name| part_order(name));
    names.dedup();
    names
        .into_iter()
        .filter(|name| before.get(*name) != after.get(*name))
        .cloned()
        .collect()
}

/// Why the `changed` parts are not exactly what `touches` names; `Ok` when every named part
/// changed and nothing else did. A touch is `slide N`, `paragraph N` or `table N` (any case,
/// `#` before the number allowed); one of another form names nothing, so it did not change.
pub fn check_part_touches(touches: &[String], changed: &[String]) -> Result<(), String> {
    let named: Vec<(String, &str)> = touches
        .iter()
        .map(|touch| (part_name(touch).unwrap_or_default(), touch.trim()))
        .collect();
    let untouched: Vec<&str> = named
        .iter()
        .filter(|(name, _)| !changed.contains(name))
        .map(|(_, touch)| *touch)
        .collect();
    let outside: Vec<&str> = changed
        .iter()
        .filter(|part| !named.iter().any(|(name, _)| name == *part))
        .map(String::as_str)
        .collect();
    touches_report(&untouched, &outside)
}

/// The part a touch names, as [`read_parts`] names it (`Slide #2` → `slide 2`).
fn part_name(touch: &str) -> Option<String> {
    let lower = touch.trim().to_lowercase();
    let (kind, number) = lower.split_once(char::is_whitespace)?;
    let kind = match kind {
        "slide" | "paragraph" | "table" => kind,
        _ => return None,
    };
    let number: u64 = number.trim().trim_start_matches('#').trim().parse().ok()?;
    Some(format!("{kind} {number}"))
}

/// Why the parts an edit changed hold words from nowhere: a changed or added part whose text
/// has words of its own — in neither the request nor that part before — none of which the
/// file had anywhere before (a value the request gives written as another, a name guessed).
/// A part's text is its string values but its kind and style; a rewrite keeps some of the
/// file's words and holds.
pub fn words_from_nowhere(
    before: &Parts,
    after: &Parts,
    changed: &[String],
    request: &str,
) -> Result<(), String> {
    let request_words: BTreeSet<String> = words(request).collect();
    let file_words: BTreeSet<String> = before
        .values()
        .flat_map(|shown| text_words(shown))
        .collect();
    for name in changed {
        let Some(now) = after.get(name) else { continue };
        let was: BTreeSet<String> = before
            .get(name)
            .map(|shown| text_words(shown))
            .unwrap_or_default();
        let own: BTreeSet<String> = text_words(now)
            .into_iter()
            .filter(|word| !request_words.contains(word) && !was.contains(word))
            .collect();
        if own.is_empty() || own.iter().any(|word| file_words.contains(word)) {
            continue;
        }
        let shown: Vec<&str> = own.iter().take(6).map(String::as_str).collect();
        return Err(format!(
            "{name} now holds words that are in neither the request nor the file ({}): write \
             what the request gives",
            shown.join(", ")
        ));
    }
    Ok(())
}

/// The words of a part's text: its string values, but for what says its kind and its look.
fn text_words(shown: &str) -> BTreeSet<String> {
    let Ok(mut part) = serde_json::from_str::<Value>(shown) else {
        return BTreeSet::new();
    };
    if let Some(fields) = part.as_object_mut() {
        for field in ["type", "style", "layout", "level"] {
            fields.remove(field);
        }
    }
    words(&super::shown_text(&part)).collect()
}

/// Where a request points in the document or deck it asks to change, as a plan review tells a
/// model that declared the change without its parts: the parts that hold a text the request
/// quotes (`"…"`, `“…”`, `«…»`, `„…“`, `` `…` ``) or a placeholder it names (`{{total}}`), and
/// the parts there are, with the number a part added after the last of its kind takes.
pub fn where_the_request_points(request: &str, parts: &Parts) -> String {
    let literals = quoted(request);
    let mut names: Vec<&String> = parts.keys().collect();
    names.sort_by_key(|name| part_order(name));
    let holding: Vec<String> = names
        .iter()
        .filter(|name| {
            let shown = parts[name.as_str()].to_lowercase();
            literals.iter().any(|literal| shown.contains(literal))
        })
        .map(|name| name.to_string())
        .collect();
    let extent = extent(&names);
    match holding.as_slice() {
        [] => extent,
        _ => format!(
            "the text the request quotes is in {}; {extent}",
            holding.join(", ")
        ),
    }
}

/// The parts there are, by kind: `paragraphs 0–11 (one added after them is paragraph 12)`.
fn extent(names: &[&String]) -> String {
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for name in names {
        let (kind, number) = part_order(name);
        let kind = name.get(..kind.len()).unwrap_or_default();
        let next = number.saturating_add(1);
        let count = counts.entry(kind).or_default();
        *count = (*count).max(next);
    }
    let kinds: Vec<String> = counts
        .into_iter()
        .map(|(kind, count)| match count {
            1 => format!("{kind} 0 (one added after it is {kind} 1)"),
            _ => format!(
                "{kind}s 0–{} (one added after them is {kind} {count})",
                count - 1
            ),
        })
        .collect();
    match kinds.is_empty() {
        true => "it has no parts yet (the first added is number 0)".to_string(),
        false => format!("it has {}", kinds.join(", ")),
    }
}

/// The texts a request quotes and the placeholders it names, lowercased.
fn quoted(request: &str) -> Vec<String> {
    const PAIRS: [(&str, &str); 6] = [
        ("{{", "}}"),
        ("\"", "\""),
        ("“", "”"),
        ("«", "»"),
        ("„", "“"),
        ("`", "`"),
    ];
    let mut found = Vec::new();
    for (open, close) in PAIRS {
        let mut rest = request;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len()..];
            let Some(end) = after.find(close) else { break };
            let inner = after[..end].trim();
            if (1..=200).contains(&inner.chars().count()) {
                let literal = match open {
                    "{{" => format!("{{{{{inner}}}}}"),
                    _ => inner.to_string(),
                };
                found.push(literal.to_lowercase());
            }
            rest = &after[end + close.len()..];
        }
    }
    found
}

/// Parts in document order: by kind, then by number (`slide 10` after `slide 9`).
fn part_order(name: &str) -> (String, u64) {
    let (kind, number) = name.split_once(' ').unwrap_or((name, ""));
    (kind.to_string(), number.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deck(titles: &[&str]) -> Value {
        let slides: Vec<Value> = titles
            .iter()
            .enumerate()
            .map(|(index, title)| json!({"index": index, "title": title, "body": []}))
            .collect();
        json!({"slide_count": titles.len(), "slides": slides})
    }

    fn touches(list: &[&str]) -> Vec<String> {
        list.iter().map(|touch| touch.to_string()).collect()
    }

    #[test]
    fn a_retitled_slide_is_the_one_part_changed() {
        let before = read_parts(&deck(&["Intro", "Plan", "Market", "Team"])).unwrap();
        let after = read_parts(&deck(&["Intro", "Plan", "Markt", "Team"])).unwrap();
        let changed = changed_parts(&before, &after);
        assert_eq!(changed, ["slide 2"]);
        assert_eq!(check_part_touches(&touches(&["slide 2"]), &changed), Ok(()));
        assert_eq!(
            check_part_touches(&touches(&["Slide #2"]), &changed),
            Ok(())
        );
        let wrong = check_part_touches(&touches(&["slide 3"]), &changed).unwrap_err();
        assert_eq!(
            wrong,
            "it did not change slide 3; it also changed slide 2, which the contract does not name"
        );
    }

    #[test]
    fn a_slide_inserted_before_others_moves_them() {
        let before = read_parts(&deck(&["Intro", "Plan", "Market"])).unwrap();
        let after = read_parts(&deck(&["Intro", "Plan", "Markt", "Market"])).unwrap();
        let changed = changed_parts(&before, &after);
        assert_eq!(changed, ["slide 2", "slide 3"]);
        let why = check_part_touches(&touches(&["slide 2"]), &changed).unwrap_err();
        assert!(why.contains("also changed slide 3"), "{why}");
        // Appending a slide changes only the new one.
        let appended = read_parts(&deck(&["Intro", "Plan", "Market", "Thanks"])).unwrap();
        let changed = changed_parts(&before, &appended);
        assert_eq!(check_part_touches(&touches(&["slide 3"]), &changed), Ok(()));
    }

    #[test]
    fn a_documents_parts_are_its_paragraphs_and_tables() {
        let read = |second: &str| {
            json!({"section": null, "section_count": 1, "blocks": [
                {"type": "paragraph", "index": 0, "style": "Title", "text": "Invoice"},
                {"type": "paragraph", "index": 1, "text": second},
                {"type": "table", "index": 0, "rows": [["a", "b"]]},
            ]})
        };
        let before = read_parts(&read("Company: {{company}}")).unwrap();
        let after = read_parts(&read("Company: Acme Ltd")).unwrap();
        assert_eq!(before.len(), 3);
        let changed = changed_parts(&before, &after);
        assert_eq!(changed, ["paragraph 1"]);
        assert_eq!(
            check_part_touches(&touches(&["paragraph 1"]), &changed),
            Ok(())
        );
        // A touch of another form names nothing.
        let why = check_part_touches(&touches(&["B2"]), &changed).unwrap_err();
        assert!(why.starts_with("it did not change B2"), "{why}");
        // A sheet's read is not a document's or a deck's.
        assert_eq!(read_parts(&json!({"sheet": "Q1", "rows": []})), None);
    }

    #[test]
    fn parts_are_ordered_by_number() {
        let names = |count: usize| -> Parts {
            (0..count)
                .map(|index| (format!("slide {index}"), String::new()))
                .collect()
        };
        let changed = changed_parts(&names(0), &names(11));
        assert_eq!(changed.first().map(String::as_str), Some("slide 0"));
        assert_eq!(changed.last().map(String::as_str), Some("slide 10"));
    }

    #[test]
    fn a_request_points_at_the_parts_holding_what_it_quotes() {
        let document = json!({"blocks": [
            {"type": "paragraph", "index": 0, "text": "INVOICE"},
            {"type": "paragraph", "index": 1, "text": "Company: {{company}}"},
            {"type": "table", "index": 0, "rows": [["Item", "Unit Price"]]},
            {"type": "paragraph", "index": 2, "text": "Total: {{total}}"},
        ]});
        let parts = read_parts(&document).expect("a document's parts");
        assert_eq!(
            where_the_request_points(
                "Fill it: Acme Ltd for {{company}}, 9 for {{total}}.",
                &parts
            ),
            "the text the request quotes is in paragraph 1, paragraph 2; it has paragraphs 0–2 \
             (one added after them is paragraph 3), table 0 (one added after it is table 1)"
        );
        // Nothing quoted, or quoted and not there (a paragraph to append): the parts there are.
        for request in ["Append a closing line.", "Append \"Conclusion\"."] {
            assert_eq!(
                where_the_request_points(request, &parts),
                "it has paragraphs 0–2 (one added after them is paragraph 3), table 0 (one \
                 added after it is table 1)"
            );
        }
        let deck = read_parts(&deck(&["Q4 Review", "Highlights"])).expect("a deck's parts");
        assert_eq!(
            where_the_request_points(
                "Retitle the slide “Highlights” to “Highlights 2026”.",
                &deck
            ),
            "the text the request quotes is in slide 1; it has slides 0–1 (one added after them \
             is slide 2)"
        );
    }

    #[test]
    fn an_edited_part_holds_words_from_the_request_or_the_file() {
        let document = |company: &str| {
            read_parts(&json!({"blocks": [
                {"type": "paragraph", "index": 0, "style": "Title", "text": "INVOICE"},
                {"type": "paragraph", "index": 1, "style": "Normal", "text": company},
                {"type": "paragraph", "index": 2, "style": "Normal", "text": "Due in 30 days"},
            ]}))
            .expect("a document's parts")
        };
        let before = document("Company: {{company}}");
        let request = "Fill invoice.docx: company Acme Ltd (replace the {{company}} placeholder).";
        let checked = |written: &str| {
            let after = document(written);
            let changed = changed_parts(&before, &after);
            words_from_nowhere(&before, &after, &changed, request)
        };
        // The value the request gives, or the file's own words kept: it holds.
        assert_eq!(checked("Company: Acme Ltd"), Ok(()));
        assert_eq!(checked("Company: Acme Ltd, invoice due in 30 days"), Ok(()));
        // A value from nowhere: not what the request gives.
        let why = checked("Company: Globex Corporation").expect_err("a guessed name");
        assert!(
            why.starts_with("paragraph 1 now holds words that are in neither")
                && why.contains("globex"),
            "{why}"
        );
        // A paragraph added with the request's words holds; one of its own words does not.
        let appended = |text: &str| {
            let mut after = before.clone();
            after.insert(
                "paragraph 3".into(),
                json!({"type": "paragraph", "style": "Normal", "text": text}).to_string(),
            );
            let changed = changed_parts(&before, &after);
            words_from_nowhere(&before, &after, &changed, "Append \"Conclusion\" to it.")
        };
        assert_eq!(appended("Conclusion"), Ok(()));
        assert!(appended("Summary").is_err());
    }
}
