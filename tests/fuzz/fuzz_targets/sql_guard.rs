//! Any text as a `table_query` query: the guard answers (accepts or refuses with a code), never
//! panics, and checking a query changes nothing in the database.
#![no_main]

use std::sync::{Mutex, OnceLock};

use atelier_workers::fuzzing::SqlGuard;
use libfuzzer_sys::fuzz_target;

fn guard() -> &'static Mutex<SqlGuard> {
    static GUARD: OnceLock<Mutex<SqlGuard>> = OnceLock::new();
    GUARD.get_or_init(|| Mutex::new(SqlGuard::new().expect("in-memory database")))
}

fuzz_target!(|query: &str| {
    let guard = guard()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = guard.check(query);
    assert_eq!(
        guard.rows().expect("the table is still there"),
        3,
        "{query:?}"
    );
});
