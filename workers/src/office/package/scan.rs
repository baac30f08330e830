//! The second check of a package, after [`guard`](super::guard): one streaming pass over every
//! part that refuses, before any reader parses the package, what would make a reader allocate
//! or repeat more than [`limits`](crate::office::limits) allow.
//!
//! Every entry is read as XML whatever its name (calamine finds parts through relationships,
//! case-insensitively), with calamine's parser settings, and followed as calamine follows it:
//! - a `sheetData`: cell positions from `r` attributes or counted along rows and cells, so each
//!   sheet's used rectangle is known before calamine makes it dense; positions outside Excel's
//!   grid, rectangles over the sheet budget, shared-formula group indices beyond the sheet's
//!   formulas, and shared formulas whose copies exceed the text budget are refused;
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
use quick_xml::events::{BytesStart, Event};
use zip::ZipArchive;

use super::ods;
use super::opc::{rels_name, resolve};
use super::read_failed;
use super::xml_pass::{Halt, Step, all_attrs, each_attr, get_attrs, raw_attr, xml_reader};
use crate::office::limits::{
    GRID_COLUMNS, GRID_ROWS, MAX_RELATIONSHIPS, MIN_SHARED_STRING_BYTES, SHARED_FORMULA_SLACK,
    SHEET_CELLS, SHEET_TEXT_BYTES, WORKBOOK_CELLS, WORKBOOK_TEXT_BYTES, too_complex,
};
use crate::office::xlsx::cellref::cell_name;

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

/// A rectangle of cells, 0-based and inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rect {
    first: (u64, u64),
    last: (u64, u64),
}

impl Rect {
    fn cells(&self) -> u64 {
        (self.last.0 - self.first.0 + 1).saturating_mul(self.last.1 - self.first.1 + 1)
    }

    fn name(&self) -> String {
        format!(
            "{}:{}",
            cell_name(grid_u32(self.first.0), grid_u32(self.first.1)),
            cell_name(grid_u32(self.last.0), grid_u32(self.last.1))
        )
    }
}

/// A position inside the grid as the `u32` cell names take.
fn grid_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A sheet's cells as calamine counts them along its `sheetData`.
#[derive(Default)]
struct Cells {
    /// calamine's current row and column (0-based).
    row: u64,
    col: u64,
    /// The rectangle of the cells with a value or a formula.
    used: Option<Rect>,
    /// Formula elements so far.
    formulas: u64,
    /// The text length of each shared-formula group's anchor, by group index.
    anchors: Vec<Option<u64>>,
    /// Text calamine copies when reading: each shared formula expanded into its cell.
    text: u64,
}

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
        in_data: false,
        data_done: false,
    };
    match scan.run(&mut reader) {
        Ok(()) | Err(Halt::Stop) => Ok(scan.part),
        Err(Halt::Refuse(error)) => Err(error),
    }
}

struct PartScan<'a> {
    name: &'a str,
    size: u64,
    entries: usize,
    part: Part,
    relationships: u64,
    in_data: bool,
    data_done: bool,
}

impl PartScan<'_> {
    fn run<R: BufRead>(&mut self, reader: &mut Reader<R>) -> Step<()> {
        let (mut buf, mut inner, mut skip) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            buf.clear();
            match reader.read_event_into(&mut buf) {
                Ok(Event::Start(e)) => match e.local_name().as_ref() {
                    "sheetData" if !self.data_done => {
                        self.in_data = true;
                        self.part.sheet.get_or_insert_with(Cells::default);
                    }
                    "row" if self.in_data => self.row_start(&e)?,
                    "c" if self.in_data => {
                        let position = self.cell_position(&e)?;
                        self.cell(reader, position, &mut inner, &mut skip)?;
                    }
                    "dimension" | "mergeCell" => check_range_attr(self.name, &e, "ref")?,
                    "sst" => self.shared_strings(&e)?,
                    "sheet" => self.sheet_entry(&e)?,
                    "Relationship" => {
                        self.relationships += 1;
                        if self.relationships > MAX_RELATIONSHIPS {
                            return Err(too_complex(format!(
                                "{} declares more than {MAX_RELATIONSHIPS} relationships",
                                self.name
                            ))
                            .into());
                        }
                    }
                    _ => {}
                },
                Ok(Event::End(e)) => match e.local_name().as_ref() {
                    "row" if self.in_data => {
                        let cells = self.cells();
                        cells.row += 1;
                        cells.col = 0;
                    }
                    "sheetData" if self.in_data => {
                        self.in_data = false;
                        self.data_done = true;
                    }
                    _ => {}
                },
                Ok(Event::Eof) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
    }

    fn cells(&mut self) -> &mut Cells {
        self.part.sheet.get_or_insert_with(Cells::default)
    }

    /// `<row r="…">`: calamine moves its row counter there.
    fn row_start(&mut self, row: &BytesStart<'_>) -> Step<()> {
        let Some(r) = raw_attr(row, "r")? else {
            return Ok(());
        };
        let (number, _) = parse_ref(&r).ok_or(Halt::Stop)?;
        if number > GRID_ROWS {
            return Err(outside(self.name, &r).into());
        }
        self.cells().row = number - 1;
        Ok(())
    }

    /// A cell's position: its `r`, or calamine's counters.
    fn cell_position(&mut self, cell: &BytesStart<'_>) -> Step<(u64, u64)> {
        let name = self.name;
        let [r, _, _] = get_attrs(cell, ["r", "s", "t"])?;
        for other in all_attrs(cell, "r")? {
            if parse_ref(&other).is_some_and(|(row, col)| row > GRID_ROWS || col > GRID_COLUMNS) {
                return Err(outside(name, &other).into());
            }
        }
        let cells = self.cells();
        let Some(r) = r else {
            return Ok((cells.row, cells.col));
        };
        let (row, col) = parse_ref(&r).ok_or(Halt::Stop)?;
        if col == 0 {
            return Err(Halt::Stop);
        }
        if row > GRID_ROWS || col > GRID_COLUMNS {
            return Err(outside(name, &r).into());
        }
        cells.col = col - 1;
        Ok((row - 1, col - 1))
    }

    /// A cell's children (`v`, `f`, `is`) up to its end; a cell with any counts as used.
    fn cell<R: BufRead>(
        &mut self,
        reader: &mut Reader<R>,
        position: (u64, u64),
        buf: &mut Vec<u8>,
        skip: &mut Vec<u8>,
    ) -> Step<()> {
        let mut used = false;
        loop {
            buf.clear();
            match reader.read_event_into(buf) {
                Ok(Event::Start(child)) => {
                    used = true;
                    match child.local_name().as_ref() {
                        "f" => {
                            let formula = Formula::of(self.name, &child)?;
                            skip.clear();
                            let span = reader
                                .read_to_end_into(child.name(), skip)
                                .map_err(|_| Halt::Stop)?;
                            self.formula(formula, span.end - span.start)?;
                        }
                        "v" | "is" => {
                            skip.clear();
                            reader
                                .read_to_end_into(child.name(), skip)
                                .map_err(|_| Halt::Stop)?;
                        }
                        _ => return Err(Halt::Stop),
                    }
                }
                Ok(Event::End(end)) if end.local_name().as_ref() == "c" => break,
                Ok(Event::Eof) | Err(_) => return Err(Halt::Stop),
                Ok(_) => {}
            }
        }
        let name = self.name;
        let cells = self.cells();
        cells.col += 1;
        if !used {
            return Ok(());
        }
        let (row, col) = position;
        if row >= GRID_ROWS || col >= GRID_COLUMNS {
            return Err(too_complex(format!(
                "{name} has a cell at row {} column {} (counted along its row), outside the sheet (A1:XFD1048576)",
                row + 1,
                col + 1
            ))
            .into());
        }
        cells.used = Some(match cells.used {
            None => Rect {
                first: position,
                last: position,
            },
            Some(rect) => Rect {
                first: (rect.first.0.min(row), rect.first.1.min(col)),
                last: (rect.last.0.max(row), rect.last.1.max(col)),
            },
        });
        Ok(())
    }

    /// A formula element: its range is checked; a shared group's index is bounded by the
    /// sheet's formulas, and each cell that copies a group's anchor adds its text.
    fn formula(&mut self, formula: Formula, text: u64) -> Step<()> {
        let name = self.name;
        let cells = self.cells();
        cells.formulas += 1;
        let Some(group) = formula.shared_group else {
            return Ok(());
        };
        if formula.anchor {
            if group > cells.formulas + SHARED_FORMULA_SLACK {
                return Err(too_complex(format!(
                    "{name} numbers a shared formula {group} among {} formulas",
                    cells.formulas
                ))
                .into());
            }
            let index = group as usize;
            if cells.anchors.len() <= index {
                cells.anchors.resize(index + 1, None);
            }
            cells.anchors[index] = Some(text);
            return Ok(());
        }
        if let Some(Some(anchor)) = cells.anchors.get(group as usize) {
            cells.text = cells.text.saturating_add(anchor.saturating_mul(2) + 16);
            if cells.text > SHEET_TEXT_BYTES {
                return Err(too_complex(format!(
                    "{name}'s shared formulas expand to more than {} MiB of text",
                    SHEET_TEXT_BYTES >> 20
                ))
                .into());
            }
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

/// The attributes of a formula element that matter to calamine's memory.
struct Formula {
    /// The shared group index, when the formula is shared.
    shared_group: Option<u64>,
    /// Whether it is the group's anchor (it has a `ref`).
    anchor: bool,
}

impl Formula {
    fn of(part: &str, f: &BytesStart<'_>) -> Step<Formula> {
        let [t, group, range] = get_attrs(f, ["t", "si", "ref"])?;
        for range in all_attrs(f, "ref")? {
            check_range(part, &range)?;
        }
        let group = group.as_deref().and_then(number);
        Ok(Formula {
            shared_group: group.filter(|_| t.as_deref() == Some("shared")),
            anchor: range.is_some(),
        })
    }
}

/// A reference as calamine parses it (letters, then digits): (row, column), 1-based, the column
/// 0 when absent; `None` when calamine refuses it. Values saturate instead of wrapping.
pub(super) fn parse_ref(text: &str) -> Option<(u64, u64)> {
    const CAP: u64 = u64::MAX / 64;
    let (mut row, mut col) = (0u64, 0u64);
    let mut digits = false;
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' if !digits => {
                let value = u64::from(byte.to_ascii_uppercase() - b'A' + 1);
                col = (col * 26 + value).min(CAP);
            }
            b'0'..=b'9' => {
                digits = true;
                row = (row * 10 + u64::from(byte - b'0')).min(CAP);
            }
            _ => return None,
        }
    }
    (row > 0).then_some((row, col))
}

/// A decimal number (saturating), `None` unless all digits.
fn number(text: &str) -> Option<u64> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| {
        text.bytes().fold(0u64, |n, d| {
            n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        })
    })
}

fn outside(part: &str, reference: &str) -> ErrorBody {
    let shown: String = reference.chars().take(40).collect();
    too_complex(format!(
        "{part} refers to cell {shown}, outside the sheet (A1:XFD1048576)"
    ))
}

/// A range attribute (`A1:D9`): references calamine parses must lie inside the grid.
fn check_range_attr(part: &str, element: &BytesStart<'_>, name: &str) -> Step<()> {
    for range in all_attrs(element, name)? {
        check_range(part, &range)?;
    }
    Ok(())
}

fn check_range(part: &str, range: &str) -> Step<()> {
    for reference in range.split(':') {
        if let Some((row, col)) = parse_ref(reference)
            && (row > GRID_ROWS || col > GRID_COLUMNS)
        {
            return Err(outside(part, reference).into());
        }
    }
    Ok(())
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
        let count = cells.used.map_or(0, |rect| rect.cells());
        self.add_sheet(name, count, cells.text, cells.used)
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
