//! What a succeeded job did to its workbench: the files it changed, or none (it answered).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// How many paths [`JobOutcome`]'s text names before it says how many more there are.
pub const FILES_NAMED: usize = 10;

/// How a job that ended `succeeded` left its workbench: a fact the coordinator computed from
/// the store, never the model's text.
///
/// The files are the paths whose digest in the workbench's current files (the draft, else the
/// published ones) differs between the job's first start and its end: added, modified or
/// deleted. The coordinator journals the files the first time the job starts (`files/job`, see
/// [`journal::job_files`](crate::journal::job_files)), so a restarted or resumed job is
/// compared with where it began, and an agent job and a workflow (`atelier run`, a batch
/// target) are judged by the same rule — the one the RPI driver applies to each plan item
/// ([`PlanItem::changed`](crate::job::PlanItem::changed)); a workflow's steps record no
/// `changed` of their own. The draft diff is not the measure: a draft the job continued
/// (`--continue-draft`, a workbench's later batch targets) also holds earlier jobs' changes.
/// A file written again with the content it had is no change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobOutcome {
    /// The job changed these workbench paths (sorted, each once).
    Changed { files: Vec<String> },
    /// The job changed no file: what it gives is its answer (the summary).
    Answered,
}

impl JobOutcome {
    /// The outcome of a job that started with the files `before` and ended with `after`
    /// (path → digest).
    pub fn between(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Self {
        let added_or_modified = after
            .iter()
            .filter(|&(path, digest)| before.get(path) != Some(digest))
            .map(|(path, _)| path);
        let deleted = before.keys().filter(|path| !after.contains_key(*path));
        let mut files: Vec<String> = added_or_modified.chain(deleted).cloned().collect();
        if files.is_empty() {
            return JobOutcome::Answered;
        }
        files.sort();
        JobOutcome::Changed { files }
    }

    /// The paths the job changed (none when it answered).
    pub fn files(&self) -> &[String] {
        match self {
            JobOutcome::Changed { files } => files,
            JobOutcome::Answered => &[],
        }
    }

    /// True when the job changed no file.
    pub fn is_answered(&self) -> bool {
        matches!(self, JobOutcome::Answered)
    }
}

/// `changed 2 files: count.txt, notes.txt` (at most [`FILES_NAMED`] paths, then `and N more`)
/// or `answered without changes`.
impl fmt::Display for JobOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files = match self {
            JobOutcome::Answered => return f.write_str("answered without changes"),
            JobOutcome::Changed { files } => files,
        };
        let noun = if files.len() == 1 { "file" } else { "files" };
        let named = files[..files.len().min(FILES_NAMED)].join(", ");
        write!(f, "changed {} {noun}: {named}", files.len())?;
        if files.len() > FILES_NAMED {
            write!(f, " and {} more", files.len() - FILES_NAMED)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(path, digest)| (path.to_string(), digest.to_string()))
            .collect()
    }

    #[test]
    fn added_modified_and_deleted_paths_are_changes_and_the_same_digest_is_none() {
        let before = files(&[("a.csv", "1"), ("b.txt", "2"), ("gone.txt", "3")]);
        let after = files(&[("a.csv", "1"), ("b.txt", "9"), ("new.txt", "4")]);
        let outcome = JobOutcome::between(&before, &after);
        assert_eq!(outcome.files(), ["b.txt", "gone.txt", "new.txt"]);
        assert_eq!(
            outcome.to_string(),
            "changed 3 files: b.txt, gone.txt, new.txt"
        );
        let same = JobOutcome::between(&before, &before);
        assert_eq!(same, JobOutcome::Answered);
        assert!(same.is_answered() && same.files().is_empty());
        assert_eq!(same.to_string(), "answered without changes");
    }

    #[test]
    fn the_text_names_one_file_and_cuts_long_lists() {
        let one = JobOutcome::Changed {
            files: vec!["count.txt".into()],
        };
        assert_eq!(one.to_string(), "changed 1 file: count.txt");
        let many = JobOutcome::Changed {
            files: (0..13).map(|n| format!("f{n:02}")).collect(),
        };
        assert_eq!(
            many.to_string(),
            "changed 13 files: f00, f01, f02, f03, f04, f05, f06, f07, f08, f09 and 3 more"
        );
    }

    #[test]
    fn outcomes_read_as_tagged_json_and_round_trip_through_messagepack() {
        let changed = JobOutcome::Changed {
            files: vec!["count.txt".into()],
        };
        assert_eq!(
            serde_json::to_value(&changed).ok(),
            Some(serde_json::json!({"kind": "changed", "files": ["count.txt"]}))
        );
        assert_eq!(
            serde_json::to_value(JobOutcome::Answered).ok(),
            Some(serde_json::json!({"kind": "answered"}))
        );
        for outcome in [changed, JobOutcome::Answered] {
            let bytes = rmp_serde::to_vec_named(&outcome).unwrap_or_default();
            let back: Result<JobOutcome, _> = rmp_serde::from_slice(&bytes);
            assert_eq!(back.ok(), Some(outcome));
        }
    }
}
