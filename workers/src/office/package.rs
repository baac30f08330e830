//! OOXML packages (zip archives of XML parts), opened safely and edited part by part.
//!
//! Opening checks the archive before anything parses it: entry count, declared and actual
//! decompressed sizes, compression ratio, encryption, and a DTD in any XML part. Editing keeps
//! an overlay of changed parts; writing copies every untouched entry byte-for-byte (raw, without
//! recompressing) and compresses only the changed and added parts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Cursor, Read, Write};

use atelier_messages::{ErrorBody, ErrorCode};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::xml::{Document, Element};

/// Most entries an archive may have.
pub(crate) const MAX_ENTRIES: usize = 10_000;
/// Largest decompressed entry.
pub(crate) const MAX_ENTRY_BYTES: u64 = 256 * 1024 * 1024;
/// Largest decompressed archive.
pub(crate) const MAX_TOTAL_BYTES: u64 = 1024 * 1024 * 1024;
/// Highest compression ratio for entries over [`RATIO_FLOOR`] bytes.
pub(crate) const MAX_RATIO: u64 = 200;
/// Entries smaller than this are not ratio-checked (tiny parts compress very well).
const RATIO_FLOOR: u64 = 1024 * 1024;
/// The first bytes of an OLE compound file: legacy binary Office files and encrypted OOXML.
pub(crate) const CFB_MAGIC: [u8; 8] = [0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];

pub(crate) fn read_failed(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::FileReadFailed, message)
}

fn write_failed(e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::FileWriteFailed,
        format!("cannot write the document: {e}"),
    )
}

/// An opened package with an overlay of edits.
pub(crate) struct Package {
    archive: ZipArchive<Cursor<Vec<u8>>>,
    /// Entry names in archive order.
    names: Vec<String>,
    docs: BTreeMap<String, Document>,
    dirty: BTreeSet<String>,
    added: Vec<String>,
    removed: BTreeSet<String>,
}

impl Package {
    /// Opens and checks an archive (`what` names the format in messages, e.g. `DOCX`).
    pub(crate) fn open(bytes: Vec<u8>, what: &str) -> Result<Package, ErrorBody> {
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
        Ok(Package {
            archive,
            names,
            docs: BTreeMap::new(),
            dirty: BTreeSet::new(),
            added: Vec::new(),
            removed: BTreeSet::new(),
        })
    }

    /// The archive's bytes as opened (edits are not applied).
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.archive.into_inner().into_inner()
    }

    /// Whether a part exists (after edits).
    pub(crate) fn exists(&self, name: &str) -> bool {
        !self.removed.contains(name)
            && (self.docs.contains_key(name) || self.names.iter().any(|n| n == name))
    }

    /// Every part name (after edits), archive order first.
    pub(crate) fn part_names(&self) -> Vec<String> {
        self.names
            .iter()
            .chain(self.added.iter())
            .filter(|name| !self.removed.contains(*name))
            .cloned()
            .collect()
    }

    /// A part's bytes as stored (edits to parsed parts are not reflected).
    pub(crate) fn bytes(&mut self, name: &str) -> Result<Vec<u8>, ErrorBody> {
        let mut entry = self
            .archive
            .by_name(name)
            .map_err(|e| read_failed(format!("the package has no readable part {name}: {e}")))?;
        let mut out = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0));
        (&mut entry)
            .take(MAX_ENTRY_BYTES)
            .read_to_end(&mut out)
            .map_err(|e| read_failed(format!("cannot decompress {name}: {e}")))?;
        Ok(out)
    }

    /// A part parsed as XML (cached).
    pub(crate) fn doc(&mut self, name: &str) -> Result<&Document, ErrorBody> {
        self.load(name)?;
        self.docs
            .get(name)
            .ok_or_else(|| read_failed(format!("the package has no part {name}")))
    }

    /// A part parsed as XML, to edit (it is rewritten on [`Package::finish`]).
    pub(crate) fn doc_mut(&mut self, name: &str) -> Result<&mut Document, ErrorBody> {
        self.load(name)?;
        self.dirty.insert(name.to_string());
        self.docs
            .get_mut(name)
            .ok_or_else(|| read_failed(format!("the package has no part {name}")))
    }

    fn load(&mut self, name: &str) -> Result<(), ErrorBody> {
        if self.removed.contains(name) {
            return Err(read_failed(format!("the package has no part {name}")));
        }
        if self.docs.contains_key(name) {
            return Ok(());
        }
        let bytes = self.bytes(name)?;
        let text = std::str::from_utf8(strip_bom(&bytes))
            .map_err(|_| read_failed(format!("{name} is not UTF-8 XML")))?;
        let doc = Document::parse(name, text)?;
        self.docs.insert(name.to_string(), doc);
        Ok(())
    }

    /// Adds (or replaces) a part.
    pub(crate) fn put(&mut self, name: &str, doc: Document) {
        self.removed.remove(name);
        if !self.names.iter().any(|n| n == name) && !self.added.iter().any(|n| n == name) {
            self.added.push(name.to_string());
        }
        self.docs.insert(name.to_string(), doc);
        self.dirty.insert(name.to_string());
    }

    /// Removes a part.
    pub(crate) fn remove(&mut self, name: &str) {
        self.docs.remove(name);
        self.dirty.remove(name);
        self.added.retain(|n| n != name);
        self.removed.insert(name.to_string());
    }

    /// Writes the package: untouched entries copied raw, edited and added parts compressed.
    pub(crate) fn finish(mut self) -> Result<Vec<u8>, ErrorBody> {
        let options = part_options();
        let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
        for index in 0..self.names.len() {
            let name = self.names[index].clone();
            if self.removed.contains(&name) {
                continue;
            }
            match self.docs.get(&name).filter(|_| self.dirty.contains(&name)) {
                Some(doc) => {
                    writer
                        .start_file(name.as_str(), options)
                        .map_err(write_failed)?;
                    writer
                        .write_all(doc.to_xml().as_bytes())
                        .map_err(write_failed)?;
                }
                None => {
                    let entry = self.archive.by_index_raw(index).map_err(write_failed)?;
                    writer.raw_copy_file(entry).map_err(write_failed)?;
                }
            }
        }
        for name in &self.added {
            if let Some(doc) = self.docs.get(name) {
                writer
                    .start_file(name.as_str(), options)
                    .map_err(write_failed)?;
                writer
                    .write_all(doc.to_xml().as_bytes())
                    .map_err(write_failed)?;
            }
        }
        Ok(writer.finish().map_err(write_failed)?.into_inner())
    }
}

/// Deflate at level 1 for rewritten parts: several times faster than the default level for a
/// few percent more bytes (untouched parts keep their original compression).
fn part_options() -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(1))
}

fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
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

/// Builds a package from parts (for new documents and tests).
pub(crate) fn build(parts: &[(&str, &str)]) -> Result<Vec<u8>, ErrorBody> {
    let options = part_options();
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, content) in parts {
        writer.start_file(*name, options).map_err(write_failed)?;
        writer.write_all(content.as_bytes()).map_err(write_failed)?;
    }
    Ok(writer.finish().map_err(write_failed)?.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Open Packaging Conventions: relationships and content types.

const CONTENT_TYPES: &str = "[Content_Types].xml";

/// One relationship of a part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rel {
    pub(crate) id: String,
    pub(crate) kind: String,
    /// The target resolved to a part name (external targets as given).
    pub(crate) target: String,
    pub(crate) external: bool,
}

/// `word/document.xml` → `word/_rels/document.xml.rels`.
pub(crate) fn rels_name(part: &str) -> String {
    match part.rsplit_once('/') {
        Some((dir, file)) => format!("{dir}/_rels/{file}.rels"),
        None => format!("_rels/{part}.rels"),
    }
}

/// Resolves a relationship target against the part that holds it.
pub(crate) fn resolve(part: &str, target: &str) -> String {
    let mut segments: Vec<&str> = if let Some(absolute) = target.strip_prefix('/') {
        return normalize_segments(absolute.split('/').collect());
    } else {
        part.rsplit_once('/')
            .map(|(dir, _)| dir.split('/').collect())
            .unwrap_or_default()
    };
    segments.extend(target.split('/'));
    normalize_segments(segments)
}

fn normalize_segments(segments: Vec<&str>) -> String {
    let mut out: Vec<&str> = Vec::new();
    for segment in segments {
        match segment {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out.join("/")
}

/// The target of `to` as written in the relationships of `from` (relative).
pub(crate) fn relative_target(from: &str, to: &str) -> String {
    let from_dir: Vec<&str> = from
        .rsplit_once('/')
        .map(|(dir, _)| dir.split('/').collect())
        .unwrap_or_default();
    let to_parts: Vec<&str> = to.split('/').collect();
    let common = from_dir
        .iter()
        .zip(to_parts.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out: Vec<&str> = vec![".."; from_dir.len() - common];
    out.extend(&to_parts[common..]);
    out.join("/")
}

impl Package {
    /// The relationships of `part` (none when it has no rels part).
    pub(crate) fn rels(&mut self, part: &str) -> Result<Vec<Rel>, ErrorBody> {
        let name = rels_name(part);
        if !self.exists(&name) {
            return Ok(Vec::new());
        }
        let doc = self.doc(&name)?;
        Ok(doc
            .root
            .elements()
            .map(|rel| {
                let external = rel.attr("TargetMode").as_deref() == Some("External");
                let target = rel.attr("Target").unwrap_or_default();
                Rel {
                    id: rel.attr("Id").unwrap_or_default(),
                    kind: rel.attr("Type").unwrap_or_default(),
                    target: if external {
                        target
                    } else {
                        resolve(part, &target)
                    },
                    external,
                }
            })
            .collect())
    }

    /// The first relationship of `part` whose type ends with `/kind` (e.g. `officeDocument`).
    pub(crate) fn rel_of_kind(&mut self, part: &str, kind: &str) -> Result<Option<Rel>, ErrorBody> {
        let suffix = format!("/{kind}");
        Ok(self
            .rels(part)?
            .into_iter()
            .find(|rel| rel.kind.ends_with(&suffix)))
    }

    /// The package's main part (e.g. `word/document.xml`).
    pub(crate) fn main_part(&mut self, what: &str) -> Result<String, ErrorBody> {
        self.rel_of_kind("", "officeDocument")?
            .map(|rel| rel.target)
            .ok_or_else(|| {
                read_failed(format!(
                    "this {what} package has no main document part; it is damaged or not a {what}"
                ))
            })
    }

    /// Adds a relationship from `part` to `target` (a part name); returns its new id.
    pub(crate) fn add_rel(
        &mut self,
        part: &str,
        kind: &str,
        target: &str,
    ) -> Result<String, ErrorBody> {
        let name = rels_name(part);
        if !self.exists(&name) {
            let root = Element::new(
                "Relationships",
                &[(
                    "xmlns",
                    "http://schemas.openxmlformats.org/package/2006/relationships",
                )],
            );
            self.put(&name, Document::new(root));
        }
        let relative = relative_target(part, target);
        let doc = self.doc_mut(&name)?;
        let taken: BTreeSet<String> = doc.root.elements().filter_map(|r| r.attr("Id")).collect();
        let id = (1..)
            .map(|n| format!("rId{n}"))
            .find(|id| !taken.contains(id))
            .unwrap_or_default();
        doc.root
            .children
            .push(super::xml::Node::Element(Element::new(
                "Relationship",
                &[("Id", &id), ("Type", kind), ("Target", &relative)],
            )));
        Ok(id)
    }

    /// Removes relationship `id` of `part`.
    pub(crate) fn remove_rel(&mut self, part: &str, id: &str) -> Result<(), ErrorBody> {
        let name = rels_name(part);
        if self.exists(&name) {
            self.doc_mut(&name)?
                .root
                .retain_elements(|rel| rel.attr("Id").as_deref() != Some(id));
        }
        Ok(())
    }

    /// Declares `part`'s content type.
    pub(crate) fn add_override(&mut self, part: &str, content_type: &str) -> Result<(), ErrorBody> {
        let part_name = format!("/{part}");
        let types = self.doc_mut(CONTENT_TYPES)?;
        types
            .root
            .retain_elements(|o| o.attr("PartName").as_deref() != Some(&part_name));
        types
            .root
            .children
            .push(super::xml::Node::Element(Element::new(
                "Override",
                &[("PartName", &part_name), ("ContentType", content_type)],
            )));
        Ok(())
    }

    /// Removes a part together with its content type override and its relationships part.
    pub(crate) fn remove_part(&mut self, part: &str) -> Result<(), ErrorBody> {
        let part_name = format!("/{part}");
        self.doc_mut(CONTENT_TYPES)?
            .root
            .retain_elements(|o| o.attr("PartName").as_deref() != Some(&part_name));
        self.remove(part);
        self.remove(&rels_name(part));
        Ok(())
    }

    /// A part name `prefix{n}{suffix}` not yet used (n from 1).
    pub(crate) fn free_name(&self, prefix: &str, suffix: &str) -> String {
        let names = self.part_names();
        (1..)
            .map(|n| format!("{prefix}{n}{suffix}"))
            .find(|candidate| !names.contains(candidate))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .compression_level(Some(9));
        let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
        for (name, content) in entries {
            writer.start_file(*name, options).unwrap();
            writer.write_all(content).unwrap();
        }
        writer.finish().unwrap().into_inner()
    }

    #[test]
    fn refuses_bombs_dtds_encryption_and_truncation() {
        let zeros = vec![0u8; 20 * 1024 * 1024];
        let bomb = zip_of(&[("xl/worksheets/sheet1.xml", &zeros)]);
        let err = Package::open(bomb, "XLSX").err().unwrap();
        assert_eq!(err.code, ErrorCode::FileReadFailed);
        assert!(err.message.contains("compression ratio"), "{}", err.message);

        let dtd = zip_of(&[(
            "word/document.xml",
            b"<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"b\">]><x>&a;</x>",
        )]);
        let err = Package::open(dtd, "DOCX").err().unwrap();
        assert!(err.message.contains("DTD"), "{}", err.message);

        let mut encrypted = CFB_MAGIC.to_vec();
        encrypted.extend([0u8; 504]);
        let err = Package::open(encrypted, "DOCX").err().unwrap();
        assert!(
            err.message.contains("password-protected"),
            "{}",
            err.message
        );

        let whole = zip_of(&[("a.xml", b"<a/>")]);
        let err = Package::open(whole[..whole.len() / 2].to_vec(), "PPTX")
            .err()
            .unwrap();
        assert_eq!(err.code, ErrorCode::FileReadFailed);
        assert!(
            err.message.contains("not a valid zip package"),
            "{}",
            err.message
        );
    }

    #[test]
    fn refuses_entries_larger_than_declared() {
        let mut bytes = zip_of(&[("a.xml", b"<a>0123456789</a>")]);
        // Lower the declared uncompressed size (17 -> 5) in the local header and central directory.
        let patch = |bytes: &mut Vec<u8>, signature: [u8; 4], offset: usize| {
            let at = bytes.windows(4).position(|w| w == signature).unwrap() + offset;
            bytes[at..at + 4].copy_from_slice(&5u32.to_le_bytes());
        };
        patch(&mut bytes, [0x50, 0x4B, 0x03, 0x04], 22);
        patch(&mut bytes, [0x50, 0x4B, 0x01, 0x02], 24);
        let err = Package::open(bytes, "DOCX").err().unwrap();
        assert_eq!(err.code, ErrorCode::FileReadFailed);
    }

    #[test]
    fn edits_copy_untouched_entries_raw() {
        let bytes = zip_of(&[
            ("[Content_Types].xml", b"<Types/>"),
            ("a.xml", b"<a>1</a>"),
            ("b.bin", b"\x00\x01"),
        ]);
        let mut package = Package::open(bytes, "DOCX").unwrap();
        package.doc_mut("a.xml").unwrap().root.set_text("2");
        package.put("c.xml", Document::new(Element::new("c", &[])));
        package.remove("b.bin");
        let out = package.finish().unwrap();
        let mut reread = Package::open(out, "DOCX").unwrap();
        assert_eq!(
            reread.part_names(),
            vec!["[Content_Types].xml", "a.xml", "c.xml"]
        );
        assert_eq!(reread.doc("a.xml").unwrap().root.text(), "2");
        assert_eq!(reread.bytes("[Content_Types].xml").unwrap(), b"<Types/>");
    }

    #[test]
    fn resolves_relationship_targets() {
        assert_eq!(
            resolve("word/document.xml", "media/image1.png"),
            "word/media/image1.png"
        );
        assert_eq!(
            resolve("ppt/slides/slide1.xml", "../slideLayouts/slideLayout2.xml"),
            "ppt/slideLayouts/slideLayout2.xml"
        );
        assert_eq!(resolve("", "word/document.xml"), "word/document.xml");
        assert_eq!(
            resolve("xl/workbook.xml", "/xl/worksheets/sheet1.xml"),
            "xl/worksheets/sheet1.xml"
        );
        assert_eq!(
            relative_target("ppt/slides/slide4.xml", "ppt/slideLayouts/slideLayout2.xml"),
            "../slideLayouts/slideLayout2.xml"
        );
        assert_eq!(
            relative_target("xl/workbook.xml", "xl/worksheets/sheet4.xml"),
            "worksheets/sheet4.xml"
        );
        assert_eq!(
            rels_name("word/document.xml"),
            "word/_rels/document.xml.rels"
        );
        assert_eq!(rels_name(""), "_rels/.rels");
    }
}
