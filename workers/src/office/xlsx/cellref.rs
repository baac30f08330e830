//! A1 references: `B7` ↔ (row 6, column 1), ranges `A1:E50`, column letters.

use atelier_messages::{ErrorBody, ErrorCode};

/// Excel's last row (1-based) and column (1-based, `XFD`).
pub(crate) const MAX_ROWS: u32 = 1_048_576;
pub(crate) const MAX_COLUMNS: u32 = 16_384;

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// Column letters for a 0-based column (`0` → `A`, `26` → `AA`).
pub(crate) fn column_name(col: u32) -> String {
    let mut n = col + 1;
    let mut letters = Vec::new();
    while n > 0 {
        let rem = (n - 1) % 26;
        letters.push(b'A' + rem as u8);
        n = (n - 1) / 26;
    }
    letters.reverse();
    String::from_utf8(letters).unwrap_or_default()
}

/// `A1` for 0-based (row, col).
pub(crate) fn cell_name(row: u32, col: u32) -> String {
    format!("{}{}", column_name(col), row + 1)
}

/// Parses `B7` (or `$B$7`) into 0-based (row, col).
fn parse_cell(text: &str) -> Result<(u32, u32), ErrorBody> {
    let bad = || invalid(format!("{text:?} is not a cell reference like B7"));
    let clean: String = text.trim().chars().filter(|c| *c != '$').collect();
    let split = clean.find(|c: char| c.is_ascii_digit()).ok_or_else(bad)?;
    let (letters, digits) = clean.split_at(split);
    if letters.is_empty() || letters.len() > 3 || !letters.chars().all(|c| c.is_ascii_alphabetic())
    {
        return Err(bad());
    }
    let col = letters
        .to_ascii_uppercase()
        .bytes()
        .fold(0u32, |acc, b| acc * 26 + u32::from(b - b'A' + 1));
    let row: u32 = digits.parse().map_err(|_| bad())?;
    if row == 0 || row > MAX_ROWS || col == 0 || col > MAX_COLUMNS {
        return Err(invalid(format!(
            "{text:?} is outside the sheet (A1:XFD1048576)"
        )));
    }
    Ok((row - 1, col - 1))
}

/// A cell position, 0-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CellRef {
    pub(crate) row: u32,
    pub(crate) col: u32,
}

impl CellRef {
    /// Parses `B7` (or `$B$7`).
    pub(crate) fn parse(text: &str) -> Result<CellRef, ErrorBody> {
        let (row, col) = parse_cell(text)?;
        Ok(CellRef { row, col })
    }
}

/// A rectangular range, 0-based and inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CellRange {
    pub(crate) start: (u32, u32),
    pub(crate) end: (u32, u32),
}

impl CellRange {
    /// Parses `A1:E50` or a single cell `C3`.
    pub(crate) fn parse(text: &str) -> Result<CellRange, ErrorBody> {
        let (first, last) = text.split_once(':').unwrap_or((text, text));
        let a = parse_cell(first)?;
        let b = parse_cell(last)?;
        Ok(CellRange {
            start: (a.0.min(b.0), a.1.min(b.1)),
            end: (a.0.max(b.0), a.1.max(b.1)),
        })
    }

    pub(crate) fn rows(&self) -> u32 {
        self.end.0 - self.start.0 + 1
    }

    pub(crate) fn columns(&self) -> u32 {
        self.end.1 - self.start.1 + 1
    }

    pub(crate) fn cells(&self) -> u64 {
        u64::from(self.rows()) * u64::from(self.columns())
    }

    pub(crate) fn intersects(&self, other: &CellRange) -> bool {
        self.start.0 <= other.end.0
            && other.start.0 <= self.end.0
            && self.start.1 <= other.end.1
            && other.start.1 <= self.end.1
    }
}

impl std::fmt::Display for CellRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}",
            cell_name(self.start.0, self.start.1),
            cell_name(self.end.0, self.end.1)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_references() {
        assert_eq!(column_name(0), "A");
        assert_eq!(column_name(25), "Z");
        assert_eq!(column_name(26), "AA");
        assert_eq!(column_name(16_383), "XFD");
        assert_eq!(parse_cell("B7").unwrap(), (6, 1));
        assert_eq!(parse_cell("$aa$10").unwrap(), (9, 26));
        assert_eq!(
            CellRef::parse("XFD1048576").unwrap(),
            CellRef {
                row: 1_048_575,
                col: 16_383
            }
        );
        assert_eq!(cell_name(9, 26), "AA10");
        let range = CellRange::parse("E50:A1").unwrap();
        assert_eq!(range.to_string(), "A1:E50");
        assert_eq!((range.rows(), range.columns(), range.cells()), (50, 5, 250));
        for bad in ["", "7B", "A0", "XFE1", "A1048577", "A1:"] {
            assert_eq!(
                CellRange::parse(bad).unwrap_err().code,
                ErrorCode::ValidationFailed,
                "{bad}"
            );
        }
    }
}
