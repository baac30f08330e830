//! Any bytes as an xlsx, read by every tool of the office pool that reads it: a whole package
//! (input starting with `PK`), or a new document whose main parts (the sheet, shared strings,
//! styles, workbook and its relationships) are the input's `\0`-separated pieces. Each tool answers
//! or refuses with a code: no panic, no abort, no allocation past libFuzzer's limit, no endless
//! read.
#![no_main]

use atelier_workers::fuzzing::Office;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let package = Office::Xlsx.package(data);
    let _ = Office::Xlsx.read(&package);
});
