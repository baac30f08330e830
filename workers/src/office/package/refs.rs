//! Cell references, ranges and numbers as calamine parses them, for the package pass
//! ([`scan`](super::scan), [`sheet_data`](super::sheet_data)): a reference or range outside
//! Excel's grid is refused as too complex.

use atelier_messages::ErrorBody;
use quick_xml::events::BytesStart;

use super::xml_pass::{Step, all_attrs};
use crate::office::limits::{GRID_COLUMNS, GRID_ROWS, too_complex};

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
pub(super) fn number(text: &str) -> Option<u64> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| {
        text.bytes().fold(0u64, |n, d| {
            n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        })
    })
}

/// A reference outside Excel's grid, refused.
pub(super) fn outside(part: &str, reference: &str) -> ErrorBody {
    let shown: String = reference.chars().take(40).collect();
    too_complex(format!(
        "{part} refers to cell {shown}, outside the sheet (A1:XFD1048576)"
    ))
}

/// A range attribute (`A1:D9`): references calamine parses must lie inside the grid.
pub(super) fn check_range_attr(part: &str, element: &BytesStart<'_>, name: &str) -> Step<()> {
    for range in all_attrs(element, name)? {
        check_range(part, &range)?;
    }
    Ok(())
}

/// A range (`A1:D9`): references calamine parses must lie inside the grid.
pub(super) fn check_range(part: &str, range: &str) -> Step<()> {
    for reference in range.split(':') {
        if let Some((row, col)) = parse_ref(reference)
            && (row > GRID_ROWS || col > GRID_COLUMNS)
        {
            return Err(outside(part, reference).into());
        }
    }
    Ok(())
}
