//! Any text as a workbench path: a normalized path never leaves the workbench, never holds a
//! deceptive character, and normalizing it again changes nothing.
#![no_main]

use atelier_messages::path::{clash, normalize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|raw: &str| {
    let Ok(path) = normalize(raw) else {
        return;
    };
    assert!(!path.starts_with('/'), "{path:?}");
    assert!(
        path.split('/')
            .all(|segment| !segment.is_empty() && segment != ".."),
        "{path:?}"
    );
    assert!(!path.chars().any(char::is_control), "{path:?}");
    assert!(
        path.split('/').all(|segment| segment.len() <= 255),
        "{path:?}"
    );
    assert_eq!(
        normalize(&path).ok().as_deref(),
        Some(path.as_str()),
        "not idempotent"
    );
    assert_eq!(
        clash([path.as_str()], &path),
        None,
        "a path clashes with itself"
    );
});
