//! Small text files' content held in memory by digest, so that a call on one runs on the
//! worker's async thread instead of a blocking thread: the content is named by its digest (a
//! copy is never stale), and the work a tool does on a text (UTF-8 checks, line counts, a
//! window of lines, a header row) is a scan of at most [`HELD_TEXT_BYTES`] — tens of
//! microseconds, less than handing the call to a blocking thread and back costs (two wake-ups
//! of an idle core; docs/adr/0020).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The largest text held, and so worked on without a blocking thread.
pub(crate) const HELD_TEXT_BYTES: u64 = 64 * 1024;

/// The most bytes held at once; the texts held longest go first.
const HELD_TOTAL_BYTES: usize = 16 << 20;

#[derive(Debug, Default)]
pub(crate) struct HeldTexts {
    inner: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_digest: HashMap<String, Arc<[u8]>>,
    /// Digests in the order they were held.
    order: VecDeque<String>,
    bytes: usize,
}

impl HeldTexts {
    /// The content of `digest`, if held.
    pub(crate) fn get(&self, digest: &str) -> Option<Arc<[u8]>> {
        self.held().by_digest.get(digest).cloned()
    }

    /// Holds `content` under `digest` when it is small enough, letting the oldest go to stay
    /// within [`HELD_TOTAL_BYTES`].
    pub(crate) fn hold(&self, digest: &str, content: &[u8]) {
        if u64::try_from(content.len()).map_or(true, |len| len > HELD_TEXT_BYTES) {
            return;
        }
        let mut held = self.held();
        if held.by_digest.contains_key(digest) {
            return;
        }
        while held.bytes + content.len() > HELD_TOTAL_BYTES {
            let Some(oldest) = held.order.pop_front() else {
                break;
            };
            if let Some(gone) = held.by_digest.remove(&oldest) {
                held.bytes -= gone.len();
            }
        }
        held.bytes += content.len();
        held.order.push_back(digest.to_string());
        held.by_digest
            .insert(digest.to_string(), Arc::from(content));
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // A panic while holding it left it whole: each change completes before the next.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_texts_are_held_by_digest_and_the_oldest_go_first() {
        let held = HeldTexts::default();
        held.hold("a", b"alpha");
        assert_eq!(held.get("a").as_deref(), Some(&b"alpha"[..]));
        assert_eq!(held.get("b"), None);

        // Larger than a held text may be: not held.
        let large = vec![b'x'; usize::try_from(HELD_TEXT_BYTES).unwrap() + 1];
        held.hold("large", &large);
        assert_eq!(held.get("large"), None);

        // Filling the whole budget lets the first one held go, and only it.
        let piece = vec![b'y'; usize::try_from(HELD_TEXT_BYTES).unwrap()];
        let fit = HELD_TOTAL_BYTES / piece.len();
        for n in 0..fit {
            held.hold(&format!("p{n}"), &piece);
        }
        assert_eq!(held.get("a"), None);
        assert!(held.get("p0").is_some());
        assert_eq!(held.held().bytes, HELD_TOTAL_BYTES);
        held.hold("next", &piece);
        assert!(held.get("p0").is_none());
        assert!(held.get("p1").is_some() && held.get("next").is_some());
        assert_eq!(held.held().bytes, HELD_TOTAL_BYTES);
    }
}
