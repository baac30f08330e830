//! Any bytes as an office file: the guarded package reader answers (opens or refuses with a
//! code), never panics.
#![no_main]

use atelier_workers::fuzzing::open_package;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = open_package(data.to_vec());
});
