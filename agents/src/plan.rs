//! The plan checklist: `- [ ] N. label — description`, parsed from the model's text and
//! rendered back with `[x]` (done) and `[!]` (failed) marks.

use atelier_messages::job::{ItemStatus, PlanItem};

/// Parses every checklist line of `text`; other lines are ignored. A text without checklist
/// lines is read as a numbered list (`1. label — description`, `2) …`), as small models write
/// plans. Items are renumbered 1..=n in order of appearance so a sloppy model's numbering
/// cannot confuse resumption.
pub fn parse(text: &str) -> Vec<PlanItem> {
    let checklist: Vec<_> = text.lines().filter_map(parse_line).collect();
    let lines = if checklist.is_empty() {
        text.lines().filter_map(parse_numbered_line).collect()
    } else {
        checklist
    };
    lines
        .into_iter()
        .enumerate()
        .map(|(position, (status, label, description))| PlanItem {
            index: u32::try_from(position + 1).unwrap_or(u32::MAX),
            label,
            description,
            status,
            attempts: 0,
            failure: None,
            failure_code: None,
            no_change: None,
        })
        .collect()
}

fn parse_line(line: &str) -> Option<(ItemStatus, String, String)> {
    let rest = line.trim_start().strip_prefix(['-', '*'])?.trim_start();
    let (mark, rest) = rest.strip_prefix('[')?.split_once(']')?;
    let status = match mark.trim() {
        "" => ItemStatus::Pending,
        "x" | "X" => ItemStatus::Done,
        "!" => ItemStatus::Failed,
        _ => return None,
    };
    let rest = strip_number(rest.trim_start());
    let rest = strip_failure_note(rest);
    let (label, description) = split_label(rest);
    if label.is_empty() {
        return None;
    }
    Some((status, label, description))
}

/// A numbered line, `N. label — description` or `N) …`: a pending item.
fn parse_numbered_line(line: &str) -> Option<(ItemStatus, String, String)> {
    let line = line.trim_start();
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    let rest = line[digits..].strip_prefix(['.', ')'])?;
    if digits == 0 || !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let (label, description) = split_label(rest.trim_start());
    if label.is_empty() {
        return None;
    }
    Some((ItemStatus::Pending, label, description))
}

fn strip_number(text: &str) -> &str {
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return text;
    }
    text[digits..]
        .strip_prefix(['.', ')'])
        .map_or(text, str::trim_start)
}

fn strip_failure_note(text: &str) -> &str {
    [" [Failed:", " [No change:"]
        .iter()
        .filter_map(|note| text.find(note))
        .min()
        .map_or(text, |at| &text[..at])
}

fn split_label(text: &str) -> (String, String) {
    for separator in [" — ", " – ", " - ", ": "] {
        if let Some((label, description)) = text.split_once(separator) {
            return (label.trim().to_string(), description.trim().to_string());
        }
    }
    (text.trim().to_string(), String::new())
}

/// Renders the plan as markdown with status marks and the original-count marker.
pub fn render(items: &[PlanItem], original_count: usize) -> String {
    let mut out = format!("<!-- original_count: {original_count} -->\n");
    for item in items {
        let mark = match item.status {
            ItemStatus::Pending => ' ',
            ItemStatus::Done => 'x',
            ItemStatus::Failed => '!',
        };
        out.push_str(&format!("- [{mark}] {}. {}", item.index, item.label));
        if !item.description.is_empty() {
            out.push_str(&format!(" — {}", item.description));
        }
        if let (ItemStatus::Failed, Some(reason)) = (item.status, &item.failure) {
            out.push_str(&format!(" [Failed: {reason}]"));
        }
        if let (ItemStatus::Done, Some(reason)) = (item.status, &item.no_change) {
            out.push_str(&format!(" [No change: {reason}]"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_checklist_lines_and_ignores_prose() {
        let text = "Here is the plan:\n- [ ] 1. Inspect — look at the columns\n\
                    - [ ] 2. Export: write summary.xlsx\n* [x] 7) Done already\nNot an item\n- [?] 3. odd";
        let items = parse(text);
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].label, "Inspect");
        assert_eq!(items[0].description, "look at the columns");
        assert_eq!(items[1].label, "Export");
        assert_eq!(items[1].description, "write summary.xlsx");
        assert_eq!(items[2].index, 3);
        assert_eq!(items[2].status, ItemStatus::Done);
    }

    #[test]
    fn a_numbered_list_is_a_plan_only_without_checklist_lines() {
        // As a small model answered, copying the example of the format reminder.
        let numbered =
            "1. Count rows — count the rows of data.csv and write the number to count.txt";
        let items = parse(numbered);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].label, "Count rows");
        assert_eq!(items[0].status, ItemStatus::Pending);
        let two = parse("Steps:\n1) Read notes.txt\n2. Write total.txt: the sum\nDone.");
        assert_eq!(two.len(), 2);
        assert_eq!(
            (two[1].index, two[1].label.as_str()),
            (2, "Write total.txt")
        );
        // With checklist lines, numbered lines are prose.
        assert_eq!(parse("1. Intro\n- [ ] 1. A — first").len(), 1);
        // Not numbered items: a number alone, a number without its point, a bare "12345".
        for garbled in [
            "12345",
            "41 N. Count the number of rows",
            "2.",
            "3.5 percent",
        ] {
            assert!(parse(garbled).is_empty(), "{garbled}");
        }
    }

    #[test]
    fn render_then_parse_keeps_labels_and_statuses() {
        let mut items = parse("- [ ] 1. A — first\n- [ ] 2. B — second");
        items[0].status = ItemStatus::Done;
        items[1].status = ItemStatus::Failed;
        items[1].failure = Some("tool failed".into());
        items[0].no_change = Some("already right".into());
        let rendered = render(&items, 2);
        assert!(rendered.contains("- [x] 1. A — first [No change: already right]"));
        assert!(rendered.contains("- [!] 2. B — second [Failed: tool failed]"));
        let back = parse(&rendered);
        assert_eq!(back[0].description, "first");
        assert_eq!(back[1].label, "B");
        assert_eq!(back[1].description, "second");
        assert_eq!(back[1].status, ItemStatus::Failed);
    }
}
