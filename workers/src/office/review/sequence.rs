//! One diff for every format that is a sequence of units (lines, rows, paragraphs, slides):
//! Myers over the two sequences; a replaced run pairs its units as `changed`, the rest of the
//! longer side as added or removed. Counts are exact; the sample keeps the first `limit` changes.

use std::hash::Hash;
use std::time::{Duration, Instant};

use atelier_messages::review::{Changes, UnitChange, UnitOp};
use similar::{Algorithm, DiffOp, capture_diff_slices_deadline};

/// How long the search for a minimal diff may take; past it the diff is coarser (still correct).
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);

/// Compares `old` and `new`; positions in the result are 1-based.
pub(crate) fn diff<T: Hash + Ord + Clone>(old: &[T], new: &[T], limit: usize) -> Changes<T> {
    let mut changes = Changes::default();
    let record = |change: UnitChange<T>, changes: &mut Changes<T>| {
        match change.op {
            UnitOp::Added => changes.added += 1,
            UnitOp::Removed => changes.removed += 1,
            UnitOp::Changed => changes.changed += 1,
        }
        if changes.sample.len() < limit {
            changes.sample.push(change);
        } else {
            changes.truncated = true;
        }
    };
    let deadline = Instant::now() + DEADLINE;
    for op in capture_diff_slices_deadline(Algorithm::Myers, old, new, Some(deadline)) {
        let (old_range, new_range) = match op {
            DiffOp::Equal { .. } => continue,
            DiffOp::Delete {
                old_index, old_len, ..
            } => (old_index..old_index + old_len, 0..0),
            DiffOp::Insert {
                new_index, new_len, ..
            } => (0..0, new_index..new_index + new_len),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => (
                old_index..old_index + old_len,
                new_index..new_index + new_len,
            ),
        };
        let paired = old_range.len().min(new_range.len());
        for offset in 0..paired {
            let (before, after) = (old_range.start + offset, new_range.start + offset);
            record(
                unit(
                    UnitOp::Changed,
                    after,
                    Some(&old[before]),
                    Some(&new[after]),
                ),
                &mut changes,
            );
        }
        for before in old_range.clone().skip(paired) {
            record(
                unit(UnitOp::Removed, before, Some(&old[before]), None),
                &mut changes,
            );
        }
        for after in new_range.clone().skip(paired) {
            record(
                unit(UnitOp::Added, after, None, Some(&new[after])),
                &mut changes,
            );
        }
    }
    changes
}

fn unit<T: Clone>(op: UnitOp, index: usize, old: Option<&T>, new: Option<&T>) -> UnitChange<T> {
    UnitChange {
        op,
        position: index as u64 + 1,
        old: old.cloned(),
        new: new.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn added_removed_and_changed_units_are_counted_and_placed() {
        let old = strings(&["a", "b", "c", "d"]);
        let new = strings(&["a", "B", "c", "e", "f"]);
        let changes = diff(&old, &new, 10);
        assert_eq!((changes.added, changes.removed, changes.changed), (1, 0, 2));
        let first = &changes.sample[0];
        assert_eq!(first.op, UnitOp::Changed);
        assert_eq!(first.position, 2);
        assert_eq!(first.old.as_deref(), Some("b"));
        assert_eq!(first.new.as_deref(), Some("B"));
        assert_eq!(changes.sample[2].op, UnitOp::Added);
        assert_eq!(changes.sample[2].new.as_deref(), Some("f"));
        assert!(!changes.truncated);
    }

    #[test]
    fn a_large_diff_keeps_exact_counts_and_a_bounded_sample() {
        let old: Vec<u32> = (0..2_000).collect();
        let new: Vec<u32> = (0..2_000)
            .map(|n| if n % 2 == 0 { n } else { n + 100_000 })
            .collect();
        let changes = diff(&old, &new, 25);
        assert_eq!(changes.changed, 1_000);
        assert_eq!(changes.sample.len(), 25);
        assert!(changes.truncated);
    }

    #[test]
    fn identical_sequences_have_no_changes() {
        let same = strings(&["x", "y"]);
        let changes = diff(&same, &same, 5);
        assert_eq!((changes.added, changes.removed, changes.changed), (0, 0, 0));
        assert!(changes.sample.is_empty());
    }
}
