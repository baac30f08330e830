//! How an attempt at a plan item ends, from its final answer: done, or failed and whether
//! it is tried again.
//!
//! A stated failure fails it; a reason that no change is needed counts only when nothing was
//! done, and never for a request that asks for an artefact ([`crate::request`]); an item that
//! names targets (`→ path`) is done only when the draft changed each of them during the item
//! (its files before its first attempt are journaled, so this holds across attempts and
//! restarts), unless its answer appends the items that write them; a done item's targets are
//! then checked against their contracts ([`super::contracts`]).

use std::collections::BTreeMap;

use atelier_messages::ErrorCode;
use atelier_messages::outcome::JobOutcome;
use atelier_messages::store::ManifestEntry;

use super::prompts::{self, item_failure};
use super::steps::Calls;

/// How an item ended: done, or failed.
pub(super) type ItemOutcome = Result<Done, Failure>;

/// A done item: the model's reason when it changed nothing, its final answer (which may
/// append plan items), and whether a write call of its last attempt succeeded.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Done {
    pub(super) no_change: Option<String>,
    pub(super) answer: String,
    pub(super) wrote: bool,
}

/// How one failed attempt at a plan item ended.
#[derive(Debug)]
pub(super) struct Failure {
    /// The stable code, when the failure has one (a model's own `ITEM_FAILED` has none).
    pub(super) code: Option<ErrorCode>,
    pub(super) reason: String,
    pub(super) retry: bool,
}

/// What an attempt's final answer is judged with.
pub(super) struct Answered<'a> {
    pub(super) text: &'a str,
    /// The attempt's successful tool calls.
    pub(super) successful_calls: u32,
    /// The attempt's calls the user rejected.
    pub(super) rejected_calls: u32,
    /// The item's targets (`→ path`).
    pub(super) targets: &'a [String],
    /// The paths the draft changed since the item's first attempt began.
    pub(super) changed: &'a [String],
    /// Why the request asks for an artefact, when it does.
    pub(super) asks_for: Option<&'a str>,
    /// The targets of the items the answer appends to the plan: the item hands them on.
    pub(super) handed_on: &'a [String],
}

pub(super) fn not_done(reason: String) -> Failure {
    Failure {
        code: Some(ErrorCode::ItemNotDone),
        reason,
        retry: true,
    }
}

/// How an item ends on the model's final answer: failed when it says so; failed
/// (`ITEM_NOT_DONE`) when a target was not written during the item, or when it changed
/// nothing and says no change is needed for a request that asks for an artefact; done
/// otherwise, with its reason when it changed nothing. A retry of an item the model itself
/// declared failed cannot be closed as needing no change: that contradicts the failure, and
/// would let a job succeed without its work.
pub(super) fn answered_item(answered: &Answered<'_>, previous: Option<&Failure>) -> ItemOutcome {
    let text = answered.text;
    if let Some(reason) = item_failure(text) {
        return Err(Failure {
            code: None,
            reason,
            retry: true,
        });
    }
    // The reason that nothing changed counts only when nothing was done.
    let no_change = prompts::no_change(text).filter(|_| answered.successful_calls == 0);
    if let (Some(reason), Some(declared)) = (&no_change, previous)
        && declared.code.is_none()
    {
        return Err(Failure {
            code: Some(ErrorCode::ItemNotDone),
            reason: format!(
                "the previous attempt declared the item failed ({}); this one changed nothing \
                 and answered that no change is needed ({reason})",
                declared.reason
            ),
            retry: false,
        });
    }
    let missing: Vec<&str> = answered
        .targets
        .iter()
        .filter(|target| !answered.changed.contains(target))
        .filter(|target| !answered.handed_on.contains(target))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        let claim = match &no_change {
            Some(reason) => format!("it answered that no change is needed ({reason})"),
            None => format!("it answered \"{}\"", first_line(text)),
        };
        let wrote = if answered.changed.is_empty() {
            "nothing".to_string()
        } else {
            answered.changed.join(", ")
        };
        return Err(not_done(format!(
            "the item names {} but did not write {} during the item (it changed {wrote}; {claim})",
            answered.targets.join(", "),
            missing.join(", ")
        )));
    }
    // The user's own refusal of a change is a fact the engine saw: then no change stands.
    if let (Some(reason), Some(why)) = (&no_change, answered.asks_for)
        && answered.changed.is_empty()
        && answered.rejected_calls == 0
    {
        return Err(not_done(format!(
            "it answered that no change is needed ({reason}), but the request asks for an \
             artefact ({why}) and the item changed nothing"
        )));
    }
    Ok(Done {
        no_change,
        answer: text.to_string(),
        wrote: false,
    })
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    line.trim().chars().take(120).collect()
}

/// The files as path → digest.
pub(super) fn digests(files: &[ManifestEntry]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|file| (file.path.clone(), file.digest.clone()))
        .collect()
}

/// The paths whose digest differs between `before` and `after` (added, modified or deleted),
/// sorted.
pub(super) fn changed_paths(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    JobOutcome::between(before, after).files().to_vec()
}
/// True when the attempt before failed for the reason that starts with `reason`: the model
/// was told it once already.
pub(super) fn told_before(previous: Option<&Failure>, reason: &str) -> bool {
    previous.is_some_and(|failure| failure.reason.starts_with(reason))
}

/// The start of the reason an item that wrote after its every query failed is tried again.
pub(super) const NO_QUERY_WORKED: &str = "every query of the workbench's data the item ran failed";

/// An item that queried the workbench's data, got only errors, and wrote anyway: what it wrote
/// comes from none of the data (a failed query's message, an example's value, a guess). Told
/// once; a retry that does the same fails.
pub(super) fn wrote_without_data(calls: &Calls, previous: Option<&Failure>) -> Option<Failure> {
    if calls.writes == 0 || calls.queries > 0 || calls.failed_queries == 0 {
        return None;
    }
    Some(Failure {
        code: Some(ErrorCode::ItemNotDone),
        reason: format!(
            "{NO_QUERY_WORKED} ({} of them), so what it wrote comes from none of it: correct \
             the query as its error says, and write what its result gives",
            calls.failed_queries
        ),
        retry: !told_before(previous, NO_QUERY_WORKED),
    })
}

/// The start of the reason an item that left a copy is tried again.
pub(super) const LEFT_A_COPY: &str = "the item left a copy";

/// A file the item added whose bytes are those of a file it found and left in place, as
/// `(copy, original)`: a copy asked for, or a move that forgot the original.
pub(super) fn copy_left(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Option<(String, String)> {
    after
        .iter()
        .filter(|(path, _)| !before.contains_key(*path))
        .find_map(|(path, digest)| {
            before
                .iter()
                .find(|(original, was)| *was == digest && after.get(*original) == Some(*was))
                .map(|(original, _)| (path.clone(), original.clone()))
        })
}

/// How an item that left `copy` beside `original` ends: told once (a move removes its
/// original; a copy asked for answers that no change is needed, `done.no_change`); after that,
/// done only on that answer, else not done for good. `None`: done.
pub(super) fn copy_kept(
    copy: &str,
    original: &str,
    told_before: bool,
    done: &Done,
) -> Option<Failure> {
    let marker = prompts::NO_CHANGE_MARKER;
    if !told_before {
        return Some(not_done(format!(
            "{LEFT_A_COPY}: {copy} holds what {original} holds, and the draft still has \
             {original}. If the task moves or renames {original}, delete it (`delete_file`); if \
             the task asks for a copy, answer `{marker}` and why"
        )));
    }
    done.no_change.is_none().then(|| Failure {
        code: Some(ErrorCode::ItemNotDone),
        reason: format!(
            "{LEFT_A_COPY} again: {copy} holds what {original} holds, and the retry neither \
             removed {original} nor answered `{marker}` that the task asks for a copy"
        ),
        retry: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_left_beside_its_original_is_found() {
        let files = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(path, digest)| (path.to_string(), digest.to_string()))
                .collect()
        };
        let before = files(&[("notes.txt", "d1"), ("a.csv", "d2")]);
        let copied = files(&[
            ("notes.txt", "d1"),
            ("a.csv", "d2"),
            ("new/notes.txt", "d1"),
        ]);
        assert_eq!(
            copy_left(&before, &copied),
            Some(("new/notes.txt".into(), "notes.txt".into()))
        );
        let moved = files(&[("a.csv", "d2"), ("new/notes.txt", "d1")]);
        assert_eq!(copy_left(&before, &moved), None);
        let written = files(&[("notes.txt", "d1"), ("a.csv", "d2"), ("b.txt", "d3")]);
        assert_eq!(copy_left(&before, &written), None);
    }

    fn declared(reason: &str) -> Failure {
        Failure {
            code: None,
            reason: reason.into(),
            retry: true,
        }
    }

    /// An answer after `successful_calls`, for an item without targets that changed nothing,
    /// in a job whose request asks only for an answer.
    fn plain(text: &str, successful_calls: u32) -> Answered<'_> {
        Answered {
            text,
            successful_calls,
            rejected_calls: 0,
            targets: &[],
            changed: &[],
            asks_for: None,
            handed_on: &[],
        }
    }

    /// The reason an item stayed undone (or `None` when it is done).
    fn no_change_of(outcome: ItemOutcome) -> Option<Option<String>> {
        outcome.ok().map(|done| done.no_change)
    }

    #[test]
    fn a_retry_after_a_declared_failure_cannot_end_as_no_change() {
        // As the 0.5B model answered launch-count: "ITEM_FAILED: Tool not found.", then
        // "NO_CHANGE_NEEDED: Plan item 1: 5 —" on the retry, with no call in either.
        let previous = declared("Tool not found.");
        let outcome = answered_item(
            &plain("NO_CHANGE_NEEDED: Plan item 1: 5 —", 0),
            Some(&previous),
        );
        let failure = outcome.expect_err("failed");
        assert_eq!(failure.code, Some(ErrorCode::ItemNotDone));
        assert!(!failure.retry);
        assert!(
            failure.reason.contains("Tool not found."),
            "{}",
            failure.reason
        );
        // Without a declared failure before it, the stated reason stands.
        assert_eq!(
            no_change_of(answered_item(
                &plain("NO_CHANGE_NEEDED: already sorted", 0),
                None
            )),
            Some(Some("already sorted".to_string()))
        );
        // After a failure with a code (a budget, unusable replies) the first attempt may have
        // done the work: the retry may say so.
        let budget = Failure {
            code: Some(ErrorCode::BudgetExceeded),
            reason: "turn budget of 30 exhausted".into(),
            retry: true,
        };
        assert_eq!(
            no_change_of(answered_item(
                &plain("NO_CHANGE_NEEDED: count.txt is written", 0),
                Some(&budget)
            )),
            Some(Some("count.txt is written".to_string()))
        );
        // A retry that did the work is done, whatever it adds.
        assert_eq!(
            no_change_of(answered_item(
                &plain("Wrote count.txt. NO_CHANGE_NEEDED: x", 1),
                Some(&previous)
            )),
            Some(None)
        );
        assert!(answered_item(&plain("ITEM_FAILED: no such column", 0), None).is_err());
    }

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|path| path.to_string()).collect()
    }

    #[test]
    fn an_item_naming_targets_is_done_only_when_it_wrote_each() {
        let targets = paths(&["count.txt", "notes.txt"]);
        let answered = |text, changed| Answered {
            text,
            successful_calls: 1,
            rejected_calls: 0,
            targets: &targets,
            changed,
            asks_for: None,
            handed_on: &[],
        };
        let only_notes = paths(&["notes.txt"]);
        let failure = answered_item(&answered("Wrote count.txt.", &only_notes), None)
            .expect_err("count.txt was not written");
        assert_eq!(failure.code, Some(ErrorCode::ItemNotDone));
        assert!(failure.retry);
        assert!(
            failure.reason.contains("did not write count.txt")
                && failure.reason.contains("it changed notes.txt"),
            "{}",
            failure.reason
        );
        let nothing = answered_item(&answered("NO_CHANGE_NEEDED: already there", &[]), None)
            .expect_err("nothing was written");
        assert!(
            nothing.reason.contains("it changed nothing"),
            "{}",
            nothing.reason
        );
        let all = paths(&["count.txt", "extra.md", "notes.txt"]);
        let done = answered_item(&answered("Wrote both.", &all), None).expect("done");
        assert_eq!(done.no_change, None);
    }

    #[test]
    fn no_change_is_refused_for_a_request_that_asks_for_an_artefact() {
        let why = "it names count.txt, which the workbench does not have";
        let answered = |changed, rejected_calls| Answered {
            text: "NO_CHANGE_NEEDED: the research answers it",
            successful_calls: 0,
            rejected_calls,
            targets: &[],
            changed,
            asks_for: Some(why),
            handed_on: &[],
        };
        let failure = answered_item(&answered(&[], 0), None).expect_err("refused");
        assert_eq!(failure.code, Some(ErrorCode::ItemNotDone));
        assert!(failure.retry, "the retry is told why");
        assert!(failure.reason.contains(why), "{}", failure.reason);
        // An earlier attempt of the item wrote the file: the retry may say so.
        let written = paths(&["count.txt"]);
        assert!(answered_item(&answered(&written, 0), None).is_ok());
        // The user rejected the change the item tried: no change stands, as the user's.
        assert!(answered_item(&answered(&[], 1), None).is_ok());
    }

    #[test]
    fn changed_paths_are_added_modified_and_deleted_ones() {
        let files = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(p, d)| (p.to_string(), d.to_string()))
                .collect()
        };
        let before = files(&[("a.csv", "1"), ("b.txt", "2"), ("gone.bin", "3")]);
        let after = files(&[("a.csv", "1"), ("b.txt", "9"), ("new.txt", "4")]);
        assert_eq!(
            changed_paths(&before, &after),
            ["b.txt", "gone.bin", "new.txt"]
        );
        assert!(changed_paths(&before, &before).is_empty());
    }
}
