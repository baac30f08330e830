//! The worker's DuckDB memory: one budget for the whole process, not one per cached database.
//!
//! DuckDB's `memory_limit` belongs to a database instance, and the engine keeps an instance per
//! cached table, so a limit per database let one worker use it once per open table (up to 16
//! were kept). Instead a worker has one budget ([`Limits::memory_bytes`],
//! `ATELIER_TABULAR_MEMORY_LIMIT`) and `K` query slots ([`Limits::slots`],
//! `ATELIER_TABULAR_QUERY_SLOTS`):
//!
//! - A call runs DuckDB (loading its table included) only while it holds a slot ([`Slots`]), so
//!   at most `K` calls are in DuckDB at once.
//! - At most `K` databases are alive at once ([`OpenDatabases`]): those kept open for warm calls
//!   and the one being loaded or opened. To open another, one that no call uses is closed; with
//!   at most `K` calls in DuckDB, each using one database, there always is one.
//! - Each database is opened with `memory_limit` = budget / `K` ([`Limits::database_memory`]).
//!
//! So what DuckDB accounts for (hash tables, sorts, aggregate states such as `string_agg` or
//! `list`, cached blocks) stays within the budget for the whole process, however many tables and
//! calls there are. DuckDB does not account for a value a scalar function is computing under any
//! limit (`repeat('x', 1e9)` takes about 2 GB, `range(3e8)` as one list far more): the slots bound
//! how many such calls run at once and the query timeout how long; only an OS limit on the worker
//! process (a container's memory limit) bounds their size.

use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;

#[cfg(doc)]
use super::Limits;

/// Parses a DuckDB-style memory size: a number and a unit (`B`, `KB`/`MB`/`GB`/`TB` in powers
/// of 1000, `KiB`/`MiB`/`GiB`/`TiB` in powers of 1024, any case, a space allowed between).
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let unit: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "byte" | "bytes" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * unit;
    // Saturating by design: `as` clamps a float to the integer's range.
    (bytes.is_finite() && bytes >= 1.0).then_some(bytes as u64)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The worker's query slots: a counting semaphore for blocking threads.
pub(super) struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

/// A held slot, given back when dropped.
pub(super) struct Slot<'a> {
    slots: &'a Slots,
}

impl Slots {
    pub(super) fn new(count: usize) -> Self {
        Self {
            free: Mutex::new(count.max(1)),
            freed: Condvar::new(),
        }
    }

    /// Waits for a free slot.
    pub(super) fn acquire(&self) -> Slot<'_> {
        let mut free = lock(&self.free);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot { slots: self }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *lock(&self.slots.free) += 1;
        self.slots.freed.notify_one();
    }
}

/// A database kept open, or being opened by a call (`base` is `None` until it is).
struct Entry {
    digest: String,
    base: Option<Connection>,
    /// One more reference per call using the database.
    users: Arc<()>,
}

impl Entry {
    fn in_use(&self) -> bool {
        Arc::strong_count(&self.users) > 1
    }
}

/// A call's connection; its database counts as in use until it is dropped.
pub(super) struct Leased {
    conn: Connection,
    _user: Arc<()>,
}

impl Deref for Leased {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

/// The databases alive in the worker, at most `capacity` (the slot count), most recently used
/// last.
pub(super) struct OpenDatabases {
    capacity: usize,
    entries: Mutex<Vec<Entry>>,
    opened: Condvar,
}

impl OpenDatabases {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: Mutex::new(Vec::new()),
            opened: Condvar::new(),
        }
    }

    /// A connection to the database of `digest` for a call holding `_slot`: a clone of the open
    /// one, else opened by `open` (after another call opening it is waited for) in the place of
    /// the least recently used database no call uses.
    pub(super) fn connect(
        &self,
        _slot: &Slot<'_>,
        digest: &str,
        open: impl FnOnce() -> Result<Connection, ErrorBody>,
    ) -> Result<Leased, ErrorBody> {
        let closed = {
            let mut entries = lock(&self.entries);
            loop {
                match entries.iter().position(|e| e.digest == digest) {
                    Some(at) if entries[at].base.is_some() => {
                        let entry = entries.remove(at);
                        let leased = lease(&entry);
                        entries.push(entry);
                        return leased;
                    }
                    Some(_) => {
                        entries = self
                            .opened
                            .wait(entries)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                    None => break,
                }
            }
            let closed = match entries.len() >= self.capacity {
                true => {
                    let idle = entries
                        .iter()
                        .position(|e| e.base.is_some() && !e.in_use())
                        .ok_or_else(|| {
                            ErrorBody::new(
                                ErrorCode::Internal,
                                "every open table database is in use (more calls than slots)",
                            )
                        })?;
                    Some(entries.remove(idle))
                }
                false => None,
            };
            entries.push(Entry {
                digest: digest.to_string(),
                base: None,
                users: Arc::new(()),
            });
            closed
        };
        // Closed before this call's database is opened, outside the lock.
        drop(closed);
        let opened = open();
        let mut entries = lock(&self.entries);
        let at = entries
            .iter()
            .position(|e| e.digest == digest && e.base.is_none());
        let leased = match (opened, at) {
            (Ok(base), Some(at)) => {
                entries[at].base = Some(base);
                lease(&entries[at])
            }
            (Err(error), Some(at)) => {
                entries.remove(at);
                Err(error)
            }
            (opened, None) => opened.and_then(|base| {
                let leased = base.try_clone().map_err(super::open_failed);
                leased.map(|conn| Leased {
                    conn,
                    _user: Arc::new(()),
                })
            }),
        };
        drop(entries);
        self.opened.notify_all();
        leased
    }
}

fn lease(entry: &Entry) -> Result<Leased, ErrorBody> {
    let base = entry
        .base
        .as_ref()
        .ok_or_else(|| ErrorBody::new(ErrorCode::Internal, "the table database is not open yet"))?;
    Ok(Leased {
        conn: base.try_clone().map_err(super::open_failed)?,
        _user: Arc::clone(&entry.users),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_duckdb() {
        assert_eq!(parse_size("2GB"), Some(2_000_000_000));
        assert_eq!(parse_size("512 MiB"), Some(512 << 20));
        assert_eq!(parse_size("1.5gb"), Some(1_500_000_000));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("0MB"), None);
        assert_eq!(parse_size("2 parsecs"), None);
    }

    fn memory_db() -> Connection {
        Connection::open_in_memory().unwrap()
    }

    #[test]
    fn at_most_as_many_databases_as_slots_stay_open_and_one_in_use_is_never_closed() {
        let slots = Slots::new(2);
        let open = OpenDatabases::new(2);
        let opened = std::cell::Cell::new(0);
        let connect = |slot: &Slot<'_>, digest: &str| {
            open.connect(slot, digest, || {
                opened.set(opened.get() + 1);
                Ok(memory_db())
            })
        };
        let first = slots.acquire();
        let a = connect(&first, "a").unwrap();
        let second = slots.acquire();
        let b = connect(&second, "b").unwrap();
        drop((b, second));
        // `a` is in use: `b` makes room for `c`.
        let third = slots.acquire();
        let c = connect(&third, "c").unwrap();
        let digests = |open: &OpenDatabases| -> Vec<String> {
            lock(&open.entries)
                .iter()
                .map(|e| e.digest.clone())
                .collect()
        };
        assert_eq!(digests(&open), ["a", "c"]);
        drop((c, third));
        // Warm: `a` is cloned, not opened again.
        let again = connect(&first, "a").unwrap();
        assert_eq!(opened.get(), 3);
        drop((again, a, first));
        assert_eq!(digests(&open), ["c", "a"]);
    }

    #[test]
    fn a_failed_open_leaves_no_entry() {
        let slots = Slots::new(1);
        let open = OpenDatabases::new(1);
        let slot = slots.acquire();
        let failed = open.connect(&slot, "a", || {
            Err(ErrorBody::new(ErrorCode::FileReadFailed, "unreadable"))
        });
        assert_eq!(
            failed.err().map(|e| e.code),
            Some(ErrorCode::FileReadFailed)
        );
        assert!(lock(&open.entries).is_empty());
        assert!(open.connect(&slot, "a", || Ok(memory_db())).is_ok());
    }
}
