//! A worksheet's `sheetData` as calamine reads it, for the package pass ([`scan`](super::scan)):
//! cell positions from `r` attributes or counted along rows and cells, so the sheet's used
//! rectangle is known before calamine makes it dense. Positions outside Excel's grid,
//! shared-formula group indices beyond the sheet's formulas, and shared formulas whose copies
//! exceed the text budget are refused.
//!
//! calamine reads a sheet along three paths (values, formulas, both in one stream) that consume
//! a cell's children differently when the XML is not well-formed. Inside `sheetData` this pass
//! therefore refuses as damaged what would make them disagree (an end tag that does not close
//! the open element, a `v`, `f` or `is` inside one of the same name, a repeated attribute), so
//! that every path sees the cells this pass measured. Fuzzing found an inline string whose stray
//! end tags made the value reader see a cell at column HGIRC (727 MB of dense cells for one row)
//! that a pass counting depth had never seen.

use std::fmt::Display;
use std::io::BufRead;

use quick_xml::Reader;
use quick_xml::events::{BytesEnd, BytesStart, Event};

use super::read_failed;
use super::refs::{check_range, number, outside, parse_ref};
use super::xml_pass::{Halt, Step, all_attrs, get_attrs, raw_attr};
use crate::office::limits::{
    GRID_COLUMNS, GRID_ROWS, SHARED_FORMULA_SLACK, SHEET_TEXT_BYTES, too_complex,
};
use crate::office::xlsx::cellref::cell_name;

/// A rectangle of cells, 0-based and inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rect {
    first: (u64, u64),
    last: (u64, u64),
}

impl Rect {
    pub(super) fn cells(&self) -> u64 {
        (self.last.0 - self.first.0 + 1).saturating_mul(self.last.1 - self.first.1 + 1)
    }

    pub(super) fn name(&self) -> String {
        format!(
            "{}:{}",
            cell_name(grid_u32(self.first.0), grid_u32(self.first.1)),
            cell_name(grid_u32(self.last.0), grid_u32(self.last.1))
        )
    }

    /// The smallest rectangle holding this one (if any) and `cell`.
    fn with(rect: Option<Rect>, cell: (u64, u64)) -> Rect {
        let Some(rect) = rect else {
            return Rect {
                first: cell,
                last: cell,
            };
        };
        Rect {
            first: (rect.first.0.min(cell.0), rect.first.1.min(cell.1)),
            last: (rect.last.0.max(cell.0), rect.last.1.max(cell.1)),
        }
    }
}

/// A position inside the grid as the `u32` cell names take.
fn grid_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A sheet's cells as calamine counts them along its `sheetData`.
#[derive(Default)]
pub(super) struct Cells {
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

impl Cells {
    /// The rectangle of the cells with a value or a formula.
    pub(super) fn used(&self) -> Option<Rect> {
        self.used
    }

    /// Text calamine copies into the cells when reading (shared formulas expanded).
    pub(super) fn text(&self) -> u64 {
        self.text
    }

    /// `<row r="…">`: calamine moves its row counter there.
    fn row_start(&mut self, part: &str, row: &BytesStart<'_>) -> Step<()> {
        let Some(r) = raw_attr(row, "r")? else {
            return Ok(());
        };
        let (number, _) = parse_ref(&r).ok_or(Halt::Stop)?;
        if number > GRID_ROWS {
            return Err(outside(part, &r).into());
        }
        self.row = number - 1;
        Ok(())
    }

    /// `</row>`: calamine's counters move to the start of the next row.
    fn row_end(&mut self) {
        self.row += 1;
        self.col = 0;
    }

    /// A cell's position: its `r`, or calamine's counters.
    fn position(&mut self, part: &str, cell: &BytesStart<'_>) -> Step<(u64, u64)> {
        let [r, _, _] = get_attrs(cell, ["r", "s", "t"])?;
        for other in all_attrs(cell, "r")? {
            if parse_ref(&other).is_some_and(|(row, col)| row > GRID_ROWS || col > GRID_COLUMNS) {
                return Err(outside(part, &other).into());
            }
        }
        let Some(r) = r else {
            return Ok((self.row, self.col));
        };
        let (row, col) = parse_ref(&r).ok_or(Halt::Stop)?;
        if col == 0 {
            return Err(Halt::Stop);
        }
        if row > GRID_ROWS || col > GRID_COLUMNS {
            return Err(outside(part, &r).into());
        }
        self.col = col - 1;
        Ok((row - 1, col - 1))
    }

    /// After a cell's end: calamine's column moves on, and a cell with a child counts as used.
    fn place(&mut self, part: &str, position: (u64, u64), used: bool) -> Step<()> {
        self.col += 1;
        if !used {
            return Ok(());
        }
        let (row, col) = position;
        if row >= GRID_ROWS || col >= GRID_COLUMNS {
            return Err(too_complex(format!(
                "{part} has a cell at row {} column {} (counted along its row), outside the sheet (A1:XFD1048576)",
                row + 1,
                col + 1
            ))
            .into());
        }
        self.used = Some(Rect::with(self.used, position));
        Ok(())
    }

    /// A formula element: its range is checked; a shared group's index is bounded by the
    /// sheet's formulas, and each cell that copies a group's anchor adds its text.
    fn formula(&mut self, part: &str, formula: Formula, text: u64) -> Step<()> {
        self.formulas += 1;
        let Some(group) = formula.shared_group else {
            return Ok(());
        };
        if formula.anchor {
            return self.anchor(part, group, text);
        }
        if let Some(Some(anchor)) = self.anchors.get(group as usize) {
            self.text = self.text.saturating_add(anchor.saturating_mul(2) + 16);
            if self.text > SHEET_TEXT_BYTES {
                return Err(too_complex(format!(
                    "{part}'s shared formulas expand to more than {} MiB of text",
                    SHEET_TEXT_BYTES >> 20
                ))
                .into());
            }
        }
        Ok(())
    }

    /// A shared group's anchor: its index is bounded by the formulas so far.
    fn anchor(&mut self, part: &str, group: u64, text: u64) -> Step<()> {
        if group > self.formulas + SHARED_FORMULA_SLACK {
            return Err(too_complex(format!(
                "{part} numbers a shared formula {group} among {} formulas",
                self.formulas
            ))
            .into());
        }
        let index = group as usize;
        if self.anchors.len() <= index {
            self.anchors.resize(index + 1, None);
        }
        self.anchors[index] = Some(text);
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

/// The pass inside one `sheetData`, from its start tag to its end tag.
pub(super) struct SheetData<'a> {
    /// The part's name, for messages.
    part: &'a str,
    cells: Cells,
    /// The elements open inside `sheetData`, by qualified name (its own first).
    open: Vec<String>,
    /// Buffers for a cell's events and for its children's content.
    buf: Vec<u8>,
    skip: Vec<u8>,
}

impl<'a> SheetData<'a> {
    /// The pass from `start`, a `sheetData` start tag of `part`.
    pub(super) fn new(part: &'a str, start: &BytesStart<'_>) -> SheetData<'a> {
        SheetData {
            part,
            cells: Cells::default(),
            open: vec![qualified(start)],
            buf: Vec::new(),
            skip: Vec::new(),
        }
    }

    /// The cells counted so far.
    pub(super) fn into_cells(self) -> Cells {
        self.cells
    }

    /// An element that starts inside: its attributes may not repeat; a cell is read to its end
    /// (`true`: the caller sees nothing of it), anything else is open until its end tag.
    pub(super) fn start<R: BufRead>(
        &mut self,
        reader: &mut Reader<R>,
        element: &BytesStart<'_>,
    ) -> Step<bool> {
        distinct(self.part, element)?;
        match element.local_name().as_ref() {
            "c" => {
                let position = self.cells.position(self.part, element)?;
                let used = self.children(reader, &qualified(element))?;
                self.cells.place(self.part, position, used)?;
                return Ok(true);
            }
            "row" => self.cells.row_start(self.part, element)?,
            _ => {}
        }
        self.open.push(qualified(element));
        Ok(false)
    }

    /// An end tag inside: it must close the element open last; `true` when it ends the
    /// `sheetData`.
    pub(super) fn end(&mut self, end: &BytesEnd<'_>) -> Step<bool> {
        let name = end.name();
        let name = name.as_ref();
        match self.open.pop() {
            Some(start) if start == name => {}
            Some(start) => return Err(damaged(self.part, format!("</{name}> closes <{start}>"))),
            None => return Err(damaged(self.part, format!("</{name}> closes nothing"))),
        }
        match end.local_name().as_ref() {
            "row" => self.cells.row_end(),
            "sheetData" => return Ok(true),
            _ => {}
        }
        Ok(false)
    }

    /// A cell's children (`v`, `f`, `is`) up to the cell's end tag, which must close `cell`;
    /// whether it has any.
    fn children<R: BufRead>(&mut self, reader: &mut Reader<R>, cell: &str) -> Step<bool> {
        let mut used = false;
        loop {
            self.buf.clear();
            match reader.read_event_into(&mut self.buf) {
                Ok(Event::Start(child)) => {
                    used = true;
                    distinct(self.part, &child)?;
                    let name = qualified(&child);
                    match child.local_name().as_ref() {
                        "f" => {
                            let formula = Formula::of(self.part, &child)?;
                            let text = read_child(self.part, reader, &name, &mut self.skip)?;
                            self.cells.formula(self.part, formula, text)?;
                        }
                        "v" | "is" => {
                            read_child(self.part, reader, &name, &mut self.skip)?;
                        }
                        _ => return Err(Halt::Stop),
                    }
                }
                Ok(Event::End(end)) => {
                    let end = end.name();
                    let end = end.as_ref();
                    if end != cell {
                        return Err(damaged(self.part, format!("</{end}> closes <{cell}>")));
                    }
                    return Ok(used);
                }
                Ok(Event::Eof) | Err(_) => return Err(Halt::Stop),
                Ok(_) => {}
            }
        }
    }
}

/// An element's qualified name.
fn qualified(element: &BytesStart<'_>) -> String {
    element.name().as_ref().to_string()
}

fn damaged(part: &str, why: impl Display) -> Halt {
    Halt::Refuse(read_failed(format!(
        "the spreadsheet is damaged: {part} is not well-formed XML ({why})"
    )))
}

/// The attributes of an element inside `sheetData` may not repeat (nor be malformed).
fn distinct(part: &str, element: &BytesStart<'_>) -> Step<()> {
    for attribute in element.attributes() {
        attribute.map_err(|e| damaged(part, e))?;
    }
    Ok(())
}

/// A cell's child (`v`, `f`, `is`, named `name`) to its end, nested elements closed in order
/// and none of its own name; the bytes it spans.
fn read_child<R: BufRead>(
    part: &str,
    reader: &mut Reader<R>,
    name: &str,
    buf: &mut Vec<u8>,
) -> Step<u64> {
    let start = reader.buffer_position();
    let mut open: Vec<String> = Vec::new();
    loop {
        buf.clear();
        match reader.read_event_into(buf) {
            Ok(Event::Start(e)) => {
                let inner = qualified(&e);
                if inner == name {
                    return Err(damaged(part, format!("<{name}> inside <{name}>")));
                }
                open.push(inner);
            }
            Ok(Event::End(e)) => {
                let end = e.name();
                let end = end.as_ref();
                let inner = open.pop();
                let expected = inner.as_deref().unwrap_or(name);
                if end != expected {
                    return Err(damaged(part, format!("</{end}> closes <{expected}>")));
                }
                if inner.is_none() {
                    return Ok(reader.buffer_position() - start);
                }
            }
            Ok(Event::Eof) | Err(_) => return Err(Halt::Stop),
            Ok(_) => {}
        }
    }
}
