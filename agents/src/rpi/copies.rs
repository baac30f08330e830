//! An item that leaves a copy of a file it found beside the original: a copy asked for, or a
//! move that forgot to remove the original (a small model reads the file and writes its text
//! to the new path). The engine cannot tell which from the draft, so the item is told once
//! ([`super::item_end::copy_kept`]): a move deletes the original, a copy answers that no
//! change is needed.
//!
//! A copy is a file the item added whose bytes are those of a file it found unchanged, or,
//! for text files of about the same size, whose text is the same once line ends and trailing
//! blanks are set aside (read through `read_file`, journaled like any call).

use std::collections::BTreeMap;

use atelier_messages::store::ManifestEntry;

use super::driver::Driver;
use super::item_end;
use crate::AgentError;

/// The most candidate pairs whose text is read and compared.
const COMPARED: usize = 4;

impl Driver<'_> {
    /// A file the item added that copies one it found (`before`: path → digest at the item's
    /// start) and left unchanged, among the draft's `files`, as `(copy, original)`.
    pub(super) async fn copy_left(
        &self,
        before: &BTreeMap<String, String>,
        files: &[ManifestEntry],
        prefix: &str,
    ) -> Result<Option<(String, String)>, AgentError> {
        if let Some(exact) = item_end::copy_left(before, &item_end::digests(files)) {
            return Ok(Some(exact));
        }
        for (index, (copy, original)) in text_pairs(before, files)
            .into_iter()
            .take(COMPARED)
            .enumerate()
        {
            let call = |which: &str| format!("{prefix}.copy.{index}.{which}");
            let copied = self.read_back(&copy.path, &call("added")).await?;
            let found = self.read_back(&original.path, &call("found")).await?;
            if let (Some(copied), Some(found)) = (copied, found)
                && same_text(&copied, &found)
            {
                return Ok(Some((copy.path.clone(), original.path.clone())));
            }
        }
        Ok(None)
    }
}

/// Pairs of a text file the item added and a text file of the same kind and about the same
/// size that it found and left unchanged.
fn text_pairs<'a>(
    before: &BTreeMap<String, String>,
    files: &'a [ManifestEntry],
) -> Vec<(&'a ManifestEntry, &'a ManifestEntry)> {
    let is_text = |file: &ManifestEntry| matches!(file.kind.as_str(), "text" | "csv");
    let added = files
        .iter()
        .filter(|file| is_text(file) && !before.contains_key(&file.path));
    let mut pairs = Vec::new();
    for copy in added {
        let originals = files.iter().filter(|file| {
            before.get(&file.path) == Some(&file.digest)
                && file.kind == copy.kind
                && close_in_size(file.size, copy.size)
        });
        pairs.extend(originals.map(|original| (copy, original)));
    }
    pairs
}

/// True when two sizes are within a fifth of each other.
fn close_in_size(a: u64, b: u64) -> bool {
    let (small, large) = (a.min(b), a.max(b));
    large > 0 && small.saturating_mul(5) >= large.saturating_mul(4)
}

/// True when two texts have the same non-empty lines, line ends and trailing blanks aside.
fn same_text(a: &str, b: &str) -> bool {
    let lines = |text: &str| -> Vec<String> {
        let mut lines: Vec<String> = text
            .lines()
            .map(|line| line.trim_end().to_string())
            .collect();
        while lines.last().is_some_and(String::is_empty) {
            lines.pop();
        }
        lines
    };
    let (a, b) = (lines(a), lines(b));
    !a.is_empty() && a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_the_same_text_whatever_its_line_ends() {
        assert!(same_text("Week 1\r\n- shipped  \n\n", "Week 1\n- shipped"));
        assert!(!same_text("Week 1\n- shipped", "Week 1\n- slipped"));
        assert!(!same_text("", "\n"));
        assert!(close_in_size(100, 120) && !close_in_size(100, 130) && !close_in_size(0, 0));
    }
}
