//! OOXML packages (zip archives of XML parts), opened safely and edited part by part.
//!
//! Opening runs every check of [`guard`] (the zip) and of [`scan`] (what the parts' own numbers
//! would make a reader allocate, see [`limits`](super::limits)) before anything parses the
//! archive; every office reader and editor opens its file here. Editing keeps an
//! overlay of changed parts; writing copies every untouched entry byte-for-byte (raw, without
//! recompressing) and compresses only the changed and added parts. [`opc`] adds relationships
//! and content types on top.

mod guard;
mod ods;
mod opc;
mod refs;
mod scan;
mod sheet_data;
#[cfg(test)]
pub(crate) mod tests;
mod xml_pass;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{Cursor, Read, Write};

use atelier_messages::{ErrorBody, ErrorCode};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::limits::MAX_XML_NODES;
use super::xml::Document;
pub(crate) use guard::CFB_MAGIC;
use guard::MAX_ENTRY_BYTES;

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
    /// The same names, to look up.
    stored: HashSet<String>,
    docs: BTreeMap<String, Document>,
    /// XML nodes the parts parsed from now on may still make.
    nodes: usize,
    dirty: BTreeSet<String>,
    added: Vec<String>,
    removed: BTreeSet<String>,
}

impl Package {
    /// Opens and checks an archive that calamine may also read (a spreadsheet; `what` names the
    /// format in messages, e.g. `XLSX`): the zip checks, then the scan of every part for what
    /// would make calamine allocate or repeat more than the limits allow.
    pub(crate) fn open(bytes: Vec<u8>, what: &str) -> Result<Package, ErrorBody> {
        let mut checked = guard::check(bytes, what)?;
        scan::check(&mut checked.archive, &checked.names)?;
        Ok(Self::checked(checked))
    }

    /// Opens and checks an archive whose parts only this crate's XML parser reads (DOCX, PPTX):
    /// the zip checks alone. That parser bounds every part it reads by depth and the package's
    /// node budget, so the scan of [`Package::open`], which follows calamine, would only parse
    /// every part once more (for a Word file with Word's full style sheets, 0.8 MB of XML, most
    /// of the cost of an edit).
    pub(crate) fn open_document(bytes: Vec<u8>, what: &str) -> Result<Package, ErrorBody> {
        guard::check(bytes, what).map(Self::checked)
    }

    fn checked(checked: guard::Checked) -> Package {
        Package {
            archive: checked.archive,
            stored: checked.names.iter().cloned().collect(),
            names: checked.names,
            docs: BTreeMap::new(),
            nodes: MAX_XML_NODES,
            dirty: BTreeSet::new(),
            added: Vec::new(),
            removed: BTreeSet::new(),
        }
    }

    /// The archive's bytes as opened (edits are not applied).
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.archive.into_inner().into_inner()
    }

    /// Whether a part exists (after edits).
    pub(crate) fn exists(&self, name: &str) -> bool {
        !self.removed.contains(name) && (self.docs.contains_key(name) || self.stored.contains(name))
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
        self.docs.get(name).ok_or_else(|| missing_part(name))
    }

    /// A part parsed as XML, to edit (it is rewritten on [`Package::finish`]).
    pub(crate) fn doc_mut(&mut self, name: &str) -> Result<&mut Document, ErrorBody> {
        self.load(name)?;
        self.dirty.insert(name.to_string());
        self.docs.get_mut(name).ok_or_else(|| missing_part(name))
    }

    fn load(&mut self, name: &str) -> Result<(), ErrorBody> {
        if self.removed.contains(name) {
            return Err(missing_part(name));
        }
        if self.docs.contains_key(name) {
            return Ok(());
        }
        let bytes = self.bytes(name)?;
        let text = std::str::from_utf8(strip_bom(&bytes))
            .map_err(|_| read_failed(format!("{name} is not UTF-8 XML")))?;
        let doc = Document::parse_within(name, text, &mut self.nodes)?;
        self.docs.insert(name.to_string(), doc);
        Ok(())
    }

    /// Adds (or replaces) a part.
    pub(crate) fn put(&mut self, name: &str, doc: Document) {
        self.removed.remove(name);
        if !self.stored.contains(name) && !self.added.iter().any(|n| n == name) {
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
        let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
        for index in 0..self.names.len() {
            let name = &self.names[index];
            if self.removed.contains(name) {
                continue;
            }
            match self.docs.get(name).filter(|_| self.dirty.contains(name)) {
                Some(doc) => write_part(&mut writer, name, doc.to_xml().as_bytes())?,
                None => {
                    let entry = self.archive.by_index_raw(index).map_err(write_failed)?;
                    writer.raw_copy_file(entry).map_err(write_failed)?;
                }
            }
        }
        for name in &self.added {
            if let Some(doc) = self.docs.get(name) {
                write_part(&mut writer, name, doc.to_xml().as_bytes())?;
            }
        }
        Ok(writer.finish().map_err(write_failed)?.into_inner())
    }
}

fn missing_part(name: &str) -> ErrorBody {
    read_failed(format!("the package has no part {name}"))
}

/// Writes one part, deflated at level 1: several times faster than the default level for a few
/// percent more bytes (untouched parts keep their original compression).
fn write_part(
    writer: &mut ZipWriter<Cursor<Vec<u8>>>,
    name: &str,
    content: &[u8],
) -> Result<(), ErrorBody> {
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(1));
    writer.start_file(name, options).map_err(write_failed)?;
    writer.write_all(content).map_err(write_failed)
}

fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Builds a package from parts (for new documents and tests).
pub(crate) fn build(parts: &[(&str, &str)]) -> Result<Vec<u8>, ErrorBody> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, content) in parts {
        write_part(&mut writer, name, content.as_bytes())?;
    }
    Ok(writer.finish().map_err(write_failed)?.into_inner())
}
