//! The checks a package passes before anything parses it: not an OLE container (legacy binary or
//! encrypted Office file), a readable zip, a bounded entry count, declared and actual decompressed
//! sizes within limits, no suspicious compression ratio, no encrypted entry, a matching CRC, and
//! no DTD in any XML part.

use std::io::{Cursor, Read};

use atelier_messages::ErrorBody;
use zip::ZipArchive;

use super::read_failed;

/// Most entries an archive may have.
const MAX_ENTRIES: usize = 10_000;
/// Largest decompressed entry.
pub(super) const MAX_ENTRY_BYTES: u64 = 256 * 1024 * 1024;
/// Largest decompressed archive.
const MAX_TOTAL_BYTES: u64 = 1024 * 1024 * 1024;
/// Highest compression ratio for entries over [`RATIO_FLOOR`] bytes.
const MAX_RATIO: u64 = 200;
/// Entries smaller than this are not ratio-checked (tiny parts compress very well).
const RATIO_FLOOR: u64 = 1024 * 1024;
/// The first bytes of an OLE compound file: legacy binary Office files and encrypted OOXML.
pub(crate) const CFB_MAGIC: [u8; 8] = [0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];

/// An archive that passed every check, with its entry names in archive order.
pub(super) struct Checked {
    pub(super) archive: ZipArchive<Cursor<Vec<u8>>>,
    pub(super) names: Vec<String>,
}

/// Checks `bytes` as a package (`what` names the format in messages, e.g. `DOCX`).
pub(super) fn check(bytes: Vec<u8>, what: &str) -> Result<Checked, ErrorBody> {
    if bytes.starts_with(&CFB_MAGIC) {
        return Err(read_failed(format!(
            "this {what} file is password-protected or encrypted (an OLE container, not a zip package); remove the password and add it again"
        )));
    }
    let mut archive = ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
        read_failed(format!(
            "this {what} file is not a valid zip package (truncated or corrupt): {e}"
        ))
    })?;
    if archive.len() > MAX_ENTRIES {
        return Err(read_failed(format!(
            "the {what} package has {} entries; the limit is {MAX_ENTRIES}",
            archive.len()
        )));
    }
    let names = check_entries(&mut archive, what)?;
    Ok(Checked { archive, names })
}

/// Checks every entry's sizes, ratio and encryption, decompresses it to verify the declared size
/// and CRC, and refuses DTDs in XML parts. Returns the entry names in order.
fn check_entries(
    archive: &mut ZipArchive<Cursor<Vec<u8>>>,
    what: &str,
) -> Result<Vec<String>, ErrorBody> {
    let mut names = Vec::with_capacity(archive.len());
    let mut total: u64 = 0;
    for index in 0..archive.len() {
        let (name, size) = {
            let entry = archive
                .by_index_raw(index)
                .map_err(|e| read_failed(format!("the {what} package is corrupt: {e}")))?;
            let name = entry.name().map(|n| n.to_string()).unwrap_or_default();
            if entry.encrypted() {
                return Err(read_failed(format!(
                    "the {what} package is password-protected ({name} is encrypted)"
                )));
            }
            check_declared(&name, entry.size(), entry.compressed_size(), what)?;
            (name, entry.size())
        };
        total = total.saturating_add(size);
        if total > MAX_TOTAL_BYTES {
            return Err(read_failed(format!(
                "the {what} package decompresses to more than {MAX_TOTAL_BYTES} bytes; refusing a possible zip bomb"
            )));
        }
        verify_entry(archive, index, &name, size, what)?;
        names.push(name);
    }
    Ok(names)
}

fn check_declared(name: &str, size: u64, compressed: u64, what: &str) -> Result<(), ErrorBody> {
    if size > MAX_ENTRY_BYTES {
        return Err(read_failed(format!(
            "{name} in the {what} package decompresses to {size} bytes; the limit is {MAX_ENTRY_BYTES} (possible zip bomb)"
        )));
    }
    if size > RATIO_FLOOR && size / compressed.max(1) > MAX_RATIO {
        return Err(read_failed(format!(
            "{name} in the {what} package has a compression ratio over {MAX_RATIO}:1; refusing a possible zip bomb"
        )));
    }
    Ok(())
}

/// Decompresses one entry, at most its declared size plus one byte, checking the size, the CRC
/// (checked by the zip reader at the end of the entry) and the XML prolog.
fn verify_entry(
    archive: &mut ZipArchive<Cursor<Vec<u8>>>,
    index: usize,
    name: &str,
    declared: u64,
    what: &str,
) -> Result<(), ErrorBody> {
    let damaged = |e: &dyn std::fmt::Display| {
        read_failed(format!("the {what} package is damaged: {name}: {e}"))
    };
    let mut entry = archive.by_index(index).map_err(|e| damaged(&e))?;
    let mut reader = (&mut entry).take(declared.saturating_add(1));
    let mut head = vec![0u8; 4096];
    let mut head_len = 0;
    let mut total: u64 = 0;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = reader.read(&mut buffer).map_err(|e| damaged(&e))?;
        if read == 0 {
            break;
        }
        if head_len < head.len() {
            let take = read.min(head.len() - head_len);
            head[head_len..head_len + take].copy_from_slice(&buffer[..take]);
            head_len += take;
        }
        total += read as u64;
    }
    if total != declared {
        return Err(read_failed(format!(
            "{name} in the {what} package holds {total}{} bytes but declares {declared}; refusing a damaged or crafted archive",
            if total > declared { "+" } else { "" }
        )));
    }
    if is_xml_part(name) && has_doctype(&head[..head_len]) {
        return Err(read_failed(format!(
            "{name} in the {what} package declares a DTD (<!DOCTYPE>); refused to prevent entity expansion"
        )));
    }
    Ok(())
}

fn is_xml_part(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".xml") || lower.ends_with(".rels") || lower.ends_with(".vml")
}

fn has_doctype(head: &[u8]) -> bool {
    head.windows(9)
        .any(|window| window.eq_ignore_ascii_case(b"<!DOCTYPE"))
}
