//! ODS tables as calamine reads them from `content.xml`, measured before it does.
//!
//! calamine reads every named `table:table` when the workbook opens: each row element pushes
//! its cells (a cell repeated over columns is copied that many times, up to 16,384 a row), then
//! the rectangle between the first and last non-empty rows is made dense, each row copied as
//! many times as it repeats (up to 1,048,576 rows). A table costs the cells pushed plus that
//! rectangle, and the text of every copy. A table or an annotation left open would make
//! calamine read past the end forever; it is refused as damaged.

use std::io::BufRead;

use atelier_messages::ErrorBody;
use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use super::read_failed;
use super::xml_pass::{Halt, Step, each_attr, raw_attr};
use crate::office::limits::{GRID_COLUMNS, GRID_ROWS, SHEET_CELLS, SHEET_TEXT_BYTES, too_complex};

/// What one table costs calamine.
pub(super) struct Table {
    pub(super) name: String,
    /// Cells pushed plus the dense rectangle.
    pub(super) cells: u64,
    /// Bytes of text in all the copies of its values and formulas.
    pub(super) text: u64,
}

/// The named tables of an ODS `content.xml`, in order.
pub(super) fn scan<R: BufRead>(mut reader: Reader<R>) -> Result<Vec<Table>, ErrorBody> {
    let mut tables = Vec::new();
    let (mut buf, mut inner) = (Vec::new(), Vec::new());
    loop {
        buf.clear();
        let name = match reader.read_event_into(&mut buf) {
            Ok(Event::Start(e)) if e.name().as_ref() == "table:table" => {
                match raw_attr(&e, "table:name") {
                    Ok(Some(name)) => name,
                    Ok(None) => continue,
                    Err(Halt::Stop) => return Ok(tables),
                    Err(Halt::Refuse(error)) => return Err(error),
                }
            }
            Ok(Event::Eof) | Err(_) => return Ok(tables),
            Ok(_) => continue,
        };
        match table(&mut reader, &name, &mut inner) {
            Ok(table) => tables.push(table),
            Err(Halt::Stop) => return Ok(tables),
            Err(Halt::Refuse(error)) => return Err(error),
        }
    }
}

/// A repeat count as calamine parses it (`usize`; anything else stops the read).
fn count(value: Option<String>) -> Step<u64> {
    let Some(value) = value else { return Ok(1) };
    let text = crate::office::xml::unescape(&value);
    text.parse::<u64>().map_err(|_| Halt::Stop)
}

/// One table, to its end.
fn table<R: BufRead>(reader: &mut Reader<R>, name: &str, buf: &mut Vec<u8>) -> Step<Table> {
    let mut cost = TableCost::default();
    let mut row_buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_event_into(buf) {
            Ok(Event::Start(e)) if e.name().as_ref() == "table:table-row" => {
                let repeats = count(raw_attr(&e, "table:number-rows-repeated")?)?;
                let repeats = repeats.min(GRID_ROWS - cost.rows);
                cost.rows += repeats;
                let row = row(reader, &mut row_buf)?;
                cost.add(name, repeats, &row)?;
            }
            Ok(Event::End(e)) if e.name().as_ref() == "table:table" => break,
            Ok(Event::Eof) => {
                return Err(read_failed(format!(
                    "the spreadsheet is damaged: table {name} is not closed"
                ))
                .into());
            }
            Err(_) => return Err(Halt::Stop),
            Ok(_) => {}
        }
    }
    Ok(Table {
        name: name.to_string(),
        cells: cost.cells(),
        text: cost.text(),
    })
}

/// What one row element pushes.
struct Row {
    /// Cells pushed (the empty cells before a non-empty one included).
    len: u64,
    /// The column of its first non-empty cell, if any.
    first: Option<u64>,
    /// Text of its pushed values and formulas.
    text: u64,
}

/// A row's cells, as calamine's `read_row`.
fn row<R: BufRead>(reader: &mut Reader<R>, buf: &mut Vec<u8>) -> Step<Row> {
    let mut row = Row {
        len: 0,
        first: None,
        text: 0,
    };
    let mut empty = 0u64;
    let (mut inner, mut skip) = (Vec::new(), Vec::new());
    loop {
        buf.clear();
        match reader.read_event_into(buf) {
            Ok(Event::Start(e))
                if matches!(
                    e.name().as_ref(),
                    "table:table-cell" | "table:covered-table-cell"
                ) =>
            {
                let repeats = count(raw_attr(&e, "table:number-columns-repeated")?)?;
                let cell = cell(reader, &e, &mut inner)?;
                let pushed = empty.min(GRID_COLUMNS - row.len);
                row.len += pushed;
                empty = 0;
                let repeats = repeats.min(GRID_COLUMNS - row.len);
                if cell.empty {
                    empty = repeats;
                } else {
                    row.first.get_or_insert(row.len);
                    row.len += repeats;
                    row.text = row.text.saturating_add(repeats.saturating_mul(cell.text));
                }
                if !cell.closed {
                    skip.clear();
                    reader
                        .read_to_end_into(e.name(), &mut skip)
                        .map_err(|_| Halt::Stop)?;
                }
            }
            Ok(Event::End(e)) if e.name().as_ref() == "table:table-row" => return Ok(row),
            _ => return Err(Halt::Stop),
        }
    }
}

/// One cell's value, as calamine's `get_datatype`.
struct Cell {
    empty: bool,
    /// Bytes of its value and formula text.
    text: u64,
    /// Whether its end was read with its content.
    closed: bool,
}

fn cell<R: BufRead>(reader: &mut Reader<R>, e: &BytesStart<'_>, buf: &mut Vec<u8>) -> Step<Cell> {
    let (mut value, mut string_type, mut error_type, mut empty_string) =
        (false, false, false, false);
    let mut text = 0u64;
    let mut formula = false;
    each_attr(e, |key, raw| {
        match key {
            "office:value" if !value => value = true,
            "office:string-value" | "office:date-value" | "office:time-value" if !value => {
                value = true;
                empty_string = raw.is_empty() && key == "office:string-value";
                text += raw.len() as u64;
            }
            "office:boolean-value" if !value => value = true,
            "office:value-type" if !value => string_type = raw == "string",
            "calcext:value-type" => error_type = raw == "error",
            "table:formula" => {
                formula = !raw.is_empty();
                text += raw.len() as u64;
            }
            _ => {}
        }
        true
    })?;
    if !((!value && string_type) || (error_type && empty_string)) {
        return Ok(Cell {
            empty: !value && !formula,
            text,
            closed: false,
        });
    }
    loop {
        buf.clear();
        match reader.read_event_into(buf) {
            Ok(Event::Text(t)) => text += t.len() as u64,
            Ok(Event::GeneralRef(r)) => text += r.len() as u64 + 2,
            Ok(Event::End(end))
                if matches!(
                    end.name().as_ref(),
                    "table:table-cell" | "table:covered-table-cell"
                ) =>
            {
                break;
            }
            Ok(Event::Start(s)) if s.name().as_ref() == "office:annotation" => loop {
                buf.clear();
                match reader.read_event_into(buf) {
                    Ok(Event::End(end)) if end.name().as_ref() == "office:annotation" => break,
                    Ok(Event::Eof) => {
                        return Err(read_failed(
                            "the spreadsheet is damaged: an annotation is not closed",
                        )
                        .into());
                    }
                    Err(_) => return Err(Halt::Stop),
                    Ok(_) => {}
                }
            },
            Ok(Event::Start(s)) if s.name().as_ref() == "text:s" => {
                let spaces = match raw_attr(&s, "text:c")? {
                    Some(raw) => crate::office::xml::unescape(&raw)
                        .parse::<i64>()
                        .map_err(|_| Halt::Stop)?,
                    None => 1,
                };
                text = text.saturating_add(u64::try_from(spaces).unwrap_or(0));
                if text > SHEET_TEXT_BYTES {
                    return Err(too_complex(format!(
                        "a cell holds more than {} MiB of text",
                        SHEET_TEXT_BYTES >> 20
                    ))
                    .into());
                }
            }
            Ok(Event::Start(_)) => text += 1,
            Ok(Event::Eof) | Err(_) => return Err(Halt::Stop),
            Ok(_) => {}
        }
    }
    Ok(Cell {
        empty: false,
        text,
        closed: true,
    })
}

/// The running cost of a table.
#[derive(Default)]
struct TableCost {
    /// Rows so far, repeats included (calamine caps them at the grid).
    rows: u64,
    /// Cells pushed by the row elements, and their text.
    pushed: u64,
    pushed_text: u64,
    /// The dense rectangle: rows from the first non-empty row to the last, empty rows after the
    /// last non-empty one waiting, columns from the leftmost non-empty cell to the widest row.
    span_rows: u64,
    waiting: u64,
    left: Option<u64>,
    right: u64,
    span_text: u64,
}

impl TableCost {
    fn add(&mut self, name: &str, repeats: u64, row: &Row) -> Step<()> {
        self.pushed += row.len;
        self.pushed_text = self.pushed_text.saturating_add(row.text);
        match row.first {
            Some(first) => {
                self.span_rows += self.waiting + repeats;
                self.waiting = 0;
                self.left = Some(self.left.map_or(first, |left| left.min(first)));
                self.right = self.right.max(row.len);
                self.span_text = self
                    .span_text
                    .saturating_add(repeats.saturating_mul(row.text));
            }
            None if self.left.is_some() => self.waiting += repeats,
            None => {}
        }
        if self.cells() > SHEET_CELLS {
            return Err(too_complex(format!(
                "sheet {name} spans more than {SHEET_CELLS} cells (256 MiB) with its repeated rows and columns"
            ))
            .into());
        }
        if self.text() > SHEET_TEXT_BYTES {
            return Err(too_complex(format!(
                "sheet {name} repeats more than {} MiB of text into its cells",
                SHEET_TEXT_BYTES >> 20
            ))
            .into());
        }
        Ok(())
    }

    fn cells(&self) -> u64 {
        let width = self.right - self.left.unwrap_or(self.right);
        self.pushed
            .saturating_add(self.span_rows.saturating_mul(width))
    }

    fn text(&self) -> u64 {
        self.pushed_text.saturating_add(self.span_text)
    }
}
