//! Any bytes as a pptx, read by every tool of the office pool that reads it: a whole package (input
//! starting with `PK`), or a new document whose main parts (the slide, presentation, its
//! relationships, the slide's relationships, a layout and the theme) are the input's `\0`-separated
//! pieces. Each tool answers or refuses with a code: no panic, no abort, no allocation past
//! libFuzzer's limit, no endless read.
#![no_main]

use atelier_workers::fuzzing::Office;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let package = Office::Pptx.package(data);
    let _ = Office::Pptx.read(&package);
});
