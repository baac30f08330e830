//! The plan checklist: `- [ ] N. label — description → target[, target]`, parsed from the
//! model's text and rendered back with `[x]` (done) and `[!]` (failed) marks; the targets
//! (`→ path`) are the workbench files the item writes, and are optional. Under an item, one
//! line per target may say what it must hold (`  - count.txt: number`, [`crate::contract`]).
//! An Implement item's final answer may append items ([`amendments`]).

use atelier_messages::contract::Contract;
use atelier_messages::job::{ItemStatus, PlanItem};

use crate::contract;

/// One checklist line, read: its status, the number it was written with, label, description
/// and targets.
struct Line {
    status: ItemStatus,
    number: Option<u32>,
    label: String,
    description: String,
    targets: Vec<String>,
    contracts: Vec<Contract>,
}

impl Line {
    fn into_item(self, index: u32) -> PlanItem {
        let mut item = PlanItem::pending(index, self.label, self.description);
        item.status = self.status;
        item.targets = self.targets;
        item.contracts = self.contracts;
        item
    }

    /// A contract line under the item: its path becomes a target when it is not one. A second
    /// contract for a path is kept beside the first and both are checked (were it to replace
    /// the first, a weaker line after a checked one would undo the check); the same line twice
    /// is kept once.
    fn add_contract(&mut self, contract: Contract) {
        if !self.targets.contains(&contract.path) {
            self.targets.push(contract.path.clone());
        }
        if !self.contracts.contains(&contract) {
            self.contracts.push(contract);
        }
    }
}

/// Parses every checklist line of `text`, with the contract lines under each
/// ([`crate::contract`]); other lines are ignored. A text without checklist lines is read as a
/// numbered list (`1. label — description`, `2) …`), as small models write plans. Items are
/// renumbered 1..=n in order of appearance so a sloppy model's numbering cannot confuse
/// resumption.
pub fn parse(text: &str) -> Vec<PlanItem> {
    let checklist = read_lines(text, parse_line);
    let lines = if checklist.is_empty() {
        read_lines(text, parse_numbered_line)
    } else {
        checklist
    };
    lines
        .into_iter()
        .enumerate()
        .map(|(position, line)| line.into_item(u32::try_from(position + 1).unwrap_or(u32::MAX)))
        .collect()
}

/// The item lines of `text` read by `item`, each with the contract lines that follow it.
fn read_lines(text: &str, item: fn(&str) -> Option<Line>) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for raw in text.lines() {
        if let Some(line) = item(raw) {
            lines.push(line);
            continue;
        }
        if let (Some(last), Some(contract)) = (lines.last_mut(), contract::parse_line(raw)) {
            last.add_contract(contract);
        }
    }
    lines
}

fn parse_line(line: &str) -> Option<Line> {
    let rest = line.trim_start().strip_prefix(['-', '*'])?.trim_start();
    let (mark, rest) = rest.strip_prefix('[')?.split_once(']')?;
    let status = match mark.trim() {
        "" => ItemStatus::Pending,
        "x" | "X" => ItemStatus::Done,
        "!" => ItemStatus::Failed,
        _ => return None,
    };
    let (number, rest) = strip_number(rest.trim_start());
    let rest = strip_failure_note(rest);
    let (rest, targets) = split_targets(rest);
    let (label, description) = split_label(rest);
    if label.is_empty() {
        return None;
    }
    Some(Line {
        status,
        number,
        label,
        description,
        targets,
        contracts: Vec::new(),
    })
}

/// A numbered line, `N. label — description` or `N) …`: a pending item.
fn parse_numbered_line(line: &str) -> Option<Line> {
    let line = line.trim_start();
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    let rest = line[digits..].strip_prefix(['.', ')'])?;
    if digits == 0 || !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let (rest, targets) = split_targets(rest.trim_start());
    let (label, description) = split_label(rest);
    if label.is_empty() {
        return None;
    }
    Some(Line {
        status: ItemStatus::Pending,
        number: line[..digits].parse().ok(),
        label,
        description,
        targets,
        contracts: Vec::new(),
    })
}

fn strip_number(text: &str) -> (Option<u32>, &str) {
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return (None, text);
    }
    match text[digits..].strip_prefix(['.', ')']) {
        Some(rest) => (text[..digits].parse().ok(), rest.trim_start()),
        None => (None, text),
    }
}

fn strip_failure_note(text: &str) -> &str {
    [" [Failed:", " [No change:", " [Also changed:"]
        .iter()
        .filter_map(|note| text.find(note))
        .min()
        .map_or(text, |at| &text[..at])
}

/// Splits `text → a.txt, b.csv` (or `->`) into the text and its targets; paths are trimmed of
/// quotes, backticks and a leading `./`.
fn split_targets(text: &str) -> (&str, Vec<String>) {
    let at = [text.rfind('→'), text.rfind("->")]
        .into_iter()
        .flatten()
        .max();
    let Some(at) = at else {
        return (text, Vec::new());
    };
    let arrow = if text[at..].starts_with('→') {
        '→'.len_utf8()
    } else {
        2
    };
    let targets: Vec<String> = text[at + arrow..]
        .split(',')
        .map(|target| {
            target
                .trim()
                .trim_matches(|c: char| matches!(c, '`' | '"' | '\'' | '*'))
                .trim_end_matches('.')
                .trim_start_matches("./")
                .to_string()
        })
        .filter(|target| !target.is_empty())
        .collect();
    if targets.is_empty() {
        return (text, Vec::new());
    }
    (text[..at].trim_end(), targets)
}

fn split_label(text: &str) -> (String, String) {
    for separator in [" — ", " – ", " - ", ": "] {
        if let Some((label, description)) = text.split_once(separator) {
            return (label.trim().to_string(), description.trim().to_string());
        }
    }
    (text.trim().to_string(), String::new())
}

/// The files of `requested` that no item of `items` names as a target (a target matches by
/// its whole path or, for a bare name, by file name).
pub fn unplanned(items: &[PlanItem], requested: &[String]) -> Vec<String> {
    requested
        .iter()
        .filter(|file| {
            !items
                .iter()
                .flat_map(|item| &item.targets)
                .any(|target| same_file(target, file))
        })
        .cloned()
        .collect()
}

/// A one-item plan takes the files the request names that it does not name as targets (then
/// the item is held to writing them); a longer plan is left as it is (the job's own check
/// still requires them written).
pub fn assign_requested(items: &mut [PlanItem], requested: &[String]) {
    let unplanned = unplanned(items, requested);
    if let [only] = items {
        only.targets.extend(unplanned);
    }
}

/// True when `path` is `named`, or `named` is a bare file name and `path` ends with it.
pub fn same_file(path: &str, named: &str) -> bool {
    path == named || (!named.contains('/') && path.rsplit('/').next() == Some(named))
}

/// The first target of `items`, or file a contract's source reads, that lies outside the
/// workbench (an absolute path, a drive, a home directory, or a `..` component), with its
/// item's index.
pub fn target_outside(items: &[PlanItem]) -> Option<(u32, &str)> {
    items.iter().find_map(|item| {
        let sources = item
            .contracts
            .iter()
            .filter_map(|contract| contract.source.as_ref())
            .map(|source| &source.path);
        item.targets
            .iter()
            .chain(sources)
            .find(|path| is_outside(path))
            .map(|path| (item.index, path.as_str()))
    })
}

fn is_outside(target: &str) -> bool {
    let drive = target.as_bytes().get(1) == Some(&b':');
    target.starts_with(['/', '\\', '~'])
        || drive
        || target.contains('\0')
        || target.split(['/', '\\']).any(|part| part == "..")
}

/// How an item's final answer amends the plan: the items it appends, and how many it wrote
/// beyond the cap.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Amendment {
    pub items: Vec<PlanItem>,
    pub dropped: usize,
}

/// The items an Implement item's final `answer` appends to the plan `items` (append-only):
/// its pending checklist lines numbered after the plan's last item whose label is not
/// already in the plan, renumbered in order, at most up to `2 × original_count` items in all
/// (the `<!-- original_count: N -->` of the plan; an answer cannot change it). Lines that
/// restate or renumber existing items change nothing.
pub fn amendments(answer: &str, items: &[PlanItem], original_count: usize) -> Amendment {
    let cap = original_count.saturating_mul(2);
    let mut amendment = Amendment::default();
    for line in read_lines(answer, parse_line) {
        let after_last = line
            .number
            .is_some_and(|number| number as usize > items.len());
        let known = items
            .iter()
            .chain(&amendment.items)
            .any(|item| item.label.eq_ignore_ascii_case(&line.label));
        if line.status != ItemStatus::Pending || !after_last || known {
            continue;
        }
        let total = items.len() + amendment.items.len();
        if total >= cap {
            amendment.dropped += 1;
            continue;
        }
        let mut item = line.into_item(u32::try_from(total + 1).unwrap_or(u32::MAX));
        item.amended = true;
        amendment.items.push(item);
    }
    amendment
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
        if !item.targets.is_empty() {
            out.push_str(&format!(" → {}", item.targets.join(", ")));
        }
        if let (ItemStatus::Failed, Some(reason)) = (item.status, &item.failure) {
            out.push_str(&format!(" [Failed: {reason}]"));
        }
        if let (ItemStatus::Done, Some(reason)) = (item.status, &item.no_change) {
            out.push_str(&format!(" [No change: {reason}]"));
        }
        let unnamed = item.unnamed_changes();
        if item.status != ItemStatus::Pending && !item.targets.is_empty() && !unnamed.is_empty() {
            out.push_str(&format!(" [Also changed: {}]", unnamed.join(", ")));
        }
        out.push('\n');
        for contract in &item.contracts {
            out.push_str(&format!("  - {}\n", contract::render(contract)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_item_plan_takes_the_files_the_request_names_as_targets() {
        let requested = vec!["count.txt".to_string()];
        // As the 0.5B model planned launch-count: the file it reads as the one it writes.
        let mut one = parse("- [ ] 1. Milestone — count the rows → launch_plan.csv");
        assert_eq!(unplanned(&one, &requested), ["count.txt"]);
        assign_requested(&mut one, &requested);
        assert_eq!(one[0].targets, ["launch_plan.csv", "count.txt"]);
        assert!(unplanned(&one, &requested).is_empty());
        // A longer plan is left to the job's own check.
        let mut two = parse("- [ ] 1. Count — rows\n- [ ] 2. Write — the number");
        assign_requested(&mut two, &requested);
        assert!(two.iter().all(|item| item.targets.is_empty()));
        // A bare name matches a target in a folder; a path must match whole.
        assert!(same_file("out/count.txt", "count.txt"));
        assert!(!same_file("out/count.txt", "in/count.txt"));
        assert!(!same_file("recount.txt", "count.txt"));
    }

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

    #[test]
    fn items_name_their_targets_after_an_arrow() {
        let items = parse(
            "- [ ] 1. Write the row count — count the rows → count.txt\n\
             - [ ] 2. Export -> `summary.xlsx`, ./notes/a.md\n\
             - [ ] 3. Check — look at the columns\n\
             - [ ] 4. Arrow alone — x →",
        );
        assert_eq!(items.len(), 4);
        assert_eq!(items[0].label, "Write the row count");
        assert_eq!(items[0].description, "count the rows");
        assert_eq!(items[0].targets, ["count.txt"]);
        assert_eq!(items[1].label, "Export");
        assert_eq!(items[1].targets, ["summary.xlsx", "notes/a.md"]);
        // Old plans without targets keep working.
        assert!(items[2].targets.is_empty());
        assert_eq!(items[2].description, "look at the columns");
        assert!(items[3].targets.is_empty());
        // A numbered list may name targets too.
        let numbered = parse("1. Count rows — count them → count.txt");
        assert_eq!(numbered[0].targets, ["count.txt"]);
        assert_eq!(numbered[0].description, "count them");
        // Rendered and parsed back, with the files an item changed without naming them.
        let mut done = items.clone();
        done[0].status = ItemStatus::Done;
        done[0].changed = vec!["count.txt".into(), "notes.txt".into()];
        let rendered = render(&done, 4);
        assert!(
            rendered.contains(
                "- [x] 1. Write the row count — count the rows → count.txt [Also changed: notes.txt]"
            ),
            "{rendered}"
        );
        let back = parse(&rendered);
        assert_eq!(back[0].targets, ["count.txt"]);
        assert_eq!(back[1].targets, ["summary.xlsx", "notes/a.md"]);
        assert_eq!(back[0].description, "count the rows");
    }

    #[test]
    fn contract_lines_belong_to_the_item_above_them() {
        let text = "- [ ] 1. Count — the distinct islands → islands.txt\n  \
                    - islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data\n  \
                    - names.txt: list of 3\n\
                    Some prose: not a contract.\n\
                    - [ ] 2. Note — write a note → notes.txt";
        let items = parse(text);
        assert_eq!(items.len(), 2);
        // A contract's path is a target of its item.
        assert_eq!(items[0].targets, ["islands.txt", "names.txt"]);
        assert_eq!(items[0].contracts.len(), 2);
        assert!(items[1].contracts.is_empty());
        let rendered = render(&items, 2);
        assert!(
            rendered.contains(
                "→ islands.txt, names.txt\n  - islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data\n  - names.txt: list of 3\n- [ ] 2."
            ),
            "{rendered}"
        );
        assert_eq!(parse(&rendered), items);
        // An amendment keeps its contract.
        let amendment = amendments(
            "Done.\n- [ ] 3. Sum — the masses → mass.txt\n  - mass.txt: number",
            &items,
            2,
        );
        assert_eq!(amendment.items[0].contracts[0].path, "mass.txt");
        // A second contract for a path is kept beside the first, the same one once.
        let twice = parse(
            "- [ ] 1. Count → n.txt\n  - n.txt: number from t.csv = SELECT count(*) FROM data\n  \
             - n.txt: text\n  - n.txt: text",
        );
        let kinds: Vec<String> = twice[0]
            .contracts
            .iter()
            .map(|contract| contract.holds.to_string())
            .collect();
        assert_eq!(kinds, ["number", "text"]);
        assert_eq!(twice[0].targets, ["n.txt"]);
        // A source outside the workbench is found like a target.
        let outside =
            parse("- [ ] 1. Count → n.txt\n  - n.txt: number from ../secret.csv = SELECT 1");
        assert_eq!(target_outside(&outside), Some((1, "../secret.csv")));
    }

    #[test]
    fn targets_outside_the_workbench_are_found() {
        for outside in [
            "/etc/passwd",
            "../up.txt",
            "a/../../b.txt",
            "C:\\x.txt",
            "~/x",
            "a\\..\\b",
        ] {
            let items = parse(&format!(
                "- [ ] 1. A — b → ok.txt\n- [ ] 2. B — c → ok.txt, {outside}"
            ));
            assert_eq!(target_outside(&items), Some((2, outside)), "{outside}");
        }
        let inside = parse("- [ ] 1. A — b → out/count.txt, a..b.txt, .hidden");
        assert_eq!(target_outside(&inside), None);
    }

    #[test]
    fn an_answer_appends_items_after_the_last_up_to_twice_the_original_count() {
        let plan = parse(
            "- [ ] 1. Count — count rows → count.txt\n- [ ] 2. Notes — write notes → notes.md",
        );
        // Appended items are numbered after the last; restated or renumbered ones are not
        // amendments, nor are done items or the count marker.
        let answer = "Wrote count.txt.\n<!-- original_count: 9 -->\n\
                      - [x] 1. Count — count rows\n- [ ] 2. Notes — write notes\n\
                      - [ ] 1. Again — restated\n\
                      - [ ] 3. Check — check the count → check.txt\n\
                      - [ ] 7. Chart — draw it\n- [ ] 4. count — same label";
        let amendment = amendments(answer, &plan, 2);
        let added: Vec<_> = amendment
            .items
            .iter()
            .map(|item| (item.index, item.label.as_str(), item.amended))
            .collect();
        assert_eq!(added, [(3, "Check", true), (4, "Chart", true)]);
        assert_eq!(amendment.items[0].targets, ["check.txt"]);
        assert_eq!(amendment.dropped, 0);
        // Capped at twice the original count: the plan of two may grow to four.
        let mut grown = plan.clone();
        grown.extend(amendment.items);
        let more = amendments("- [ ] 5. More — x\n- [ ] 6. Even more — y", &grown, 2);
        assert!(more.items.is_empty());
        assert_eq!(more.dropped, 2);
        let one_left = amendments(
            "- [ ] 3. A — x\n- [ ] 4. B — y\n- [ ] 5. C — z",
            &plan[..1],
            1,
        );
        assert_eq!(one_left.items.len(), 1);
        assert_eq!(one_left.items[0].index, 2);
        assert_eq!(one_left.dropped, 2);
        assert!(amendments("Done.", &plan, 2).items.is_empty());
    }
}
