//! The second check of a package, after [`guard`](super::guard): one streaming pass over every
//! part that refuses, before any reader parses the package, what would make a reader allocate
//! or repeat more than [`limits`](crate::office::limits) allow.
//!
//! Every entry is read as XML whatever its name (calamine finds parts through relationships,
//! case-insensitively), with calamine's parser settings, and followed as calamine follows it:
//! - a part's first `sheetData`, cell by cell (see [`sheet_data`]): each sheet's used rectangle
//!   is known before calamine makes it dense, and rectangles over the sheet or workbook budget
//!   are refused; XML inside it that calamine's readers would consume differently is refused
//!   as damaged;
//! - `dimension`, `mergeCell` and shared-formula ranges outside the grid are refused;
//! - an `sst` whose `uniqueCount` exceeds what the part's size can hold is refused;
//! - a `.rels` part may declare at most [`MAX_RELATIONSHIPS`];
//! - a workbook may not list two sheets that are the same part;
//! - `content.xml`, ODS tables as calamine reads them (see [`ods`]).
//!
//! Where calamine would stop with an error (a malformed reference, an unknown cell child,
//! broken XML), the pass stops reading that part too: nothing after it is ever read.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Cursor};

use atelier_messages::ErrorBody;
use quick_xml::Reader;
use quick_xml::events::{BytesEnd, BytesStart, Event};
use zip::ZipArchive;

use super::ods;
use super::opc::{rels_name, resolve};
use super::read_failed;
use super::refs::{check_range_attr, number};
use super::sheet_data::{Cells, Rect, SheetData};
use super::xml_pass::{Halt, Step, each_attr, raw_attr, xml_reader};
use crate::office::limits::{
    MAX_RELATIONSHIPS, MIN_SHARED_STRING_BYTES, SHEET_CELLS, SHEET_TEXT_BYTES, WORKBOOK_CELLS,
    WORKBOOK_TEXT_BYTES, too_complex,
};

type Archive = ZipArchive<Cursor<Vec<u8>>>;

/// The part calamine's ODS reader parses.
const ODS_CONTENT: &str = "content.xml";

/// Checks every part of an archive that passed the zip checks.
pub(super) fn check(archive: &mut Archive, names: &[String]) -> Result<(), ErrorBody> {
    let mut book = Book::default();
    for (index, name) in names.iter().enumerate() {
        let part = {
            let entry = archive
                .by_index(index)
                .map_err(|e| read_failed(format!("the package is damaged: {name}: {e}")))?;
            let size = entry.size();
            scan_part(name, size, names.len(), xml_reader(entry))?
        };
        book.add(name, &part)?;
        if !part.sheet_ids.is_empty() {
            book.workbooks.push((name.clone(), part.sheet_ids));
        }
        if name == ODS_CONTENT {
            let entry = archive
                .by_index(index)
                .map_err(|e| read_failed(format!("the package is damaged: {name}: {e}")))?;
            for table in ods::scan(xml_reader(entry))? {
                book.add_sheet(&table.name, table.cells, table.text, None)?;
            }
        }
    }
    book.check_sheet_parts(archive, names)
}

/// What the pass learned of one part.
#[derive(Default)]
struct Part {
    /// The cells of its first `sheetData`, as calamine reads them.
    sheet: Option<Cells>,
    /// The relationship ids of its `sheet` elements (a workbook's sheet list).
    sheet_ids: Vec<String>,
}

/// One part's pass: what it learned, or the refusal.
fn scan_part<R: BufRead>(
    name: &str,
    size: u64,
    entries: usize,
    mut reader: Reader<R>,
) -> Result<Part, ErrorBody> {
    let mut scan = PartScan {
        name,
        size,
        entries,
        part: Part::default(),
        relationships: 0,
        data: None,
    };
    let result = scan.run(&mut reader);
    let PartScan { mut part, data, .. } = scan;
    if let Some(data) = data {
        part.sheet = Some(data.into_cells());
    }
    match result {
        Ok(()) | Err(Halt::Stop) => Ok(part),
        Err(Halt::Refuse(error)) => Err(error),
    }
}

struct PartScan<'a> {
    name: &'a str,
    size: u64,
    entries: usize,
    part: Part,
    relationships: u64,
    /// The first `sheetData`, while the pass is inside it.
    data: Option<SheetData<'a>>,
}

impl<'a> PartScan<'a> {
    fn run<R: BufRead>(&mut self, reader: &mut Reader<R>) -> Step<()> {
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_event_into(&mut buf) {
                Ok(Event::Start(e)) => self.start(reader, &e)?,
                Ok(Event::End(e)) => self.end(&e)?,
                Ok(Event::Eof) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
    }

    /// A start tag: inside the `sheetData`, its pass sees it first (and reads a cell whole).
    fn start<R: BufRead>(&mut self, reader: &mut Reader<R>, e: &BytesStart<'_>) -> Step<()> {
        if let Some(data) = &mut self.data
            && data.start(reader, e)?
        {
            return Ok(());
        }
        match e.local_name().as_ref() {
            "sheetData" if self.data.is_none() && self.part.sheet.is_none() => {
                self.data = Some(SheetData::new(self.name, e));
            }
            "dimension" | "mergeCell" => check_range_attr(self.name, e, "ref")?,
            "sst" => self.shared_strings(e)?,
            "sheet" => self.sheet_entry(e)?,
            "Relationship" => self.relationship()?,
            _ => {}
        }
        Ok(())
    }

    /// An end tag: inside the `sheetData`, its pass checks it; the first ends there.
    fn end(&mut self, e: &BytesEnd<'_>) -> Step<()> {
        if let Some(data) = &mut self.data
            && data.end(e)?
        {
            self.part.sheet = self.data.take().map(SheetData::into_cells);
        }
        Ok(())
    }

    /// A `.rels` part's `Relationship`: at most [`MAX_RELATIONSHIPS`] a part.
    fn relationship(&mut self) -> Step<()> {
        self.relationships += 1;
        if self.relationships > MAX_RELATIONSHIPS {
            return Err(too_complex(format!(
                "{} declares more than {MAX_RELATIONSHIPS} relationships",
                self.name
            ))
            .into());
        }
        Ok(())
    }

    /// `<sst uniqueCount="…">`: calamine reserves that many strings up front.
    fn shared_strings(&mut self, sst: &BytesStart<'_>) -> Step<()> {
        let Some(count) = raw_attr(sst, "uniqueCount")? else {
            return Ok(());
        };
        let Some(claimed) = number(&count) else {
            return Ok(());
        };
        let room = self.size / MIN_SHARED_STRING_BYTES;
        if claimed > room {
            return Err(too_complex(format!(
                "{} claims {claimed} shared strings but its {} bytes hold at most {room}",
                self.name, self.size
            ))
            .into());
        }
        Ok(())
    }

    /// A workbook's `<sheet r:id="…">`: calamine reads the sheet's part through that relationship.
    fn sheet_entry(&mut self, sheet: &BytesStart<'_>) -> Step<()> {
        let mut id = None;
        each_attr(sheet, |key, value| {
            if key.rsplit(':').next() == Some("id") {
                id = Some(value.to_string());
            }
            true
        })?;
        if let Some(id) = id {
            self.part.sheet_ids.push(id);
        }
        if self.part.sheet_ids.len() > self.entries {
            return Err(too_complex(format!(
                "{} lists more sheets than the package has parts ({})",
                self.name, self.entries
            ))
            .into());
        }
        Ok(())
    }
}

/// The totals of the package's sheets, and the workbooks' sheet lists.
#[derive(Default)]
struct Book {
    cells: u64,
    text: u64,
    workbooks: Vec<(String, Vec<String>)>,
}

impl Book {
    fn add(&mut self, name: &str, part: &Part) -> Result<(), ErrorBody> {
        let Some(cells) = &part.sheet else {
            return Ok(());
        };
        let count = cells.used().map_or(0, |rect| rect.cells());
        self.add_sheet(name, count, cells.text(), cells.used())
    }

    /// Adds one sheet (`rect` names its used rectangle in the refusal).
    fn add_sheet(
        &mut self,
        name: &str,
        cells: u64,
        text: u64,
        rect: Option<Rect>,
    ) -> Result<(), ErrorBody> {
        if cells > SHEET_CELLS {
            let used = rect.map(|r| format!(" ({})", r.name())).unwrap_or_default();
            return Err(too_complex(format!(
                "sheet {name} spans {cells} cells{used}; a sheet is read whole and may span at most {SHEET_CELLS} (256 MiB)"
            )));
        }
        if text > SHEET_TEXT_BYTES {
            return Err(too_complex(format!(
                "sheet {name} repeats more than {} MiB of text into its cells",
                SHEET_TEXT_BYTES >> 20
            )));
        }
        self.cells = self.cells.saturating_add(cells);
        self.text = self.text.saturating_add(text);
        if self.cells > WORKBOOK_CELLS {
            return Err(too_complex(format!(
                "the workbook's sheets span more than {WORKBOOK_CELLS} cells together (1 GiB)"
            )));
        }
        if self.text > WORKBOOK_TEXT_BYTES {
            return Err(too_complex(format!(
                "the workbook's sheets repeat more than {} MiB of text together",
                WORKBOOK_TEXT_BYTES >> 20
            )));
        }
        Ok(())
    }

    /// Each sheet of a workbook must be its own part (calamine reads a part once per sheet).
    fn check_sheet_parts(&self, archive: &mut Archive, names: &[String]) -> Result<(), ErrorBody> {
        for (workbook, ids) in &self.workbooks {
            let wanted = rels_name(workbook).to_ascii_lowercase();
            let Some(index) = names.iter().rposition(|n| n.to_ascii_lowercase() == wanted) else {
                continue;
            };
            let targets = {
                let entry = archive.by_index(index).map_err(|e| {
                    read_failed(format!("the package is damaged: {}: {e}", names[index]))
                })?;
                relationship_targets(xml_reader(entry))
            };
            let mut seen = HashSet::new();
            for id in ids {
                let Some(target) = targets.get(id) else {
                    continue;
                };
                let part = resolve(workbook, &target.replace('\\', "/")).to_ascii_lowercase();
                if !seen.insert(part) {
                    return Err(too_complex(format!(
                        "{workbook} lists the sheet part {target} more than once"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The `Id` → `Target` of a relationships part (the last of a repeated id, as calamine).
fn relationship_targets<R: BufRead>(mut reader: Reader<R>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_event_into(&mut buf) {
            Ok(Event::Start(e)) if e.local_name().as_ref() == "Relationship" => {
                let (mut id, mut target) = (None, None);
                for attribute in e.attributes().with_checks(false).flatten() {
                    match attribute.key.as_ref() {
                        "Id" => id = Some(attribute.value.into_owned()),
                        "Target" => {
                            target = Some(crate::office::xml::unescape(&attribute.value));
                        }
                        _ => {}
                    }
                }
                if let (Some(id), Some(target)) = (id, target) {
                    out.insert(id, target);
                }
            }
            Ok(Event::Eof) | Err(_) => return out,
            Ok(_) => {}
        }
    }
}
