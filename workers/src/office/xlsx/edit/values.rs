//! Typed cell values: what a cell is written as, from JSON (`xlsx_operations`) with an optional
//! declared type, and ISO dates as Excel serial numbers.

use serde_json::Value;

use atelier_messages::ErrorBody;

use super::invalid;

/// Longest text Excel keeps in a cell.
const MAX_TEXT: usize = 32_767;

/// A value to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CellValue {
    Number(f64),
    Text(String),
    Bool(bool),
    /// Excel serial date; `true` when it has a time of day.
    Date(f64, bool),
    Formula(String),
    Clear,
}

impl CellValue {
    /// Converts JSON with an optional declared type. Without one, JSON types are kept: numbers
    /// are numbers, booleans booleans, `null` clears, text starting with `=` is a formula.
    pub(crate) fn from_json(
        value: &Value,
        kind: Option<&str>,
        date1904: bool,
    ) -> Result<CellValue, ErrorBody> {
        let wrong = |what: &str| invalid(format!("{value} is not a valid {what}"));
        Ok(match (kind, value) {
            (None, Value::Null) => CellValue::Clear,
            (None | Some("number"), Value::Number(n)) => {
                CellValue::Number(finite(n.as_f64().unwrap_or(f64::NAN))?)
            }
            (Some("number"), Value::String(s)) => {
                CellValue::Number(finite(s.trim().parse().map_err(|_| wrong("number"))?)?)
            }
            (None | Some("bool" | "boolean"), Value::Bool(b)) => CellValue::Bool(*b),
            (Some("bool" | "boolean"), Value::String(s)) => {
                CellValue::Bool(match s.to_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(wrong("boolean")),
                })
            }
            (None, Value::String(s)) if s.starts_with('=') && s.len() > 1 => {
                CellValue::Formula(s[1..].to_string())
            }
            (Some("formula"), Value::String(s)) => {
                CellValue::Formula(s.trim_start_matches('=').to_string())
            }
            (None | Some("text" | "string"), Value::String(s)) => CellValue::Text(checked_text(s)?),
            (Some("text" | "string"), other) => CellValue::Text(checked_text(&other.to_string())?),
            (Some("date"), Value::String(s)) => {
                let (serial, time) = excel_date(s, date1904)
                    .ok_or_else(|| wrong("date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS)"))?;
                CellValue::Date(serial, time)
            }
            (Some("date"), Value::Number(n)) => {
                CellValue::Date(finite(n.as_f64().unwrap_or(f64::NAN))?, false)
            }
            (Some(kind @ ("number" | "bool" | "boolean" | "date" | "formula")), _) => {
                return Err(wrong(kind));
            }
            (Some(other), _) => {
                return Err(invalid(format!(
                    "unknown cell type {other:?}; use number, text, bool, date or formula"
                )));
            }
            (None, other) => {
                return Err(invalid(format!(
                    "{other} cannot be written to a cell; use a number, text, boolean or null"
                )));
            }
        })
    }
}

fn finite(f: f64) -> Result<f64, ErrorBody> {
    if f.is_finite() {
        Ok(f)
    } else {
        Err(invalid("cells cannot hold NaN or infinity".into()))
    }
}

fn checked_text(text: &str) -> Result<String, ErrorBody> {
    if text.chars().count() > MAX_TEXT {
        return Err(invalid(format!(
            "text of {} characters exceeds Excel's {MAX_TEXT}",
            text.chars().count()
        )));
    }
    Ok(text.to_string())
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-01-05` or `2026-01-05T13:42:17` (also with a space) → Excel serial.
fn excel_date(text: &str, date1904: bool) -> Option<(f64, bool)> {
    let text = text.trim();
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (text, None),
    };
    let mut parts = date.split('-');
    let (y, m, d): (i64, i64, i64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    if parts.next().is_some()
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&d)
        || !(1900..=9999).contains(&y)
    {
        return None;
    }
    let mut serial = (days_from_civil(y, m, d) - days_from_civil(1899, 12, 30)) as f64;
    if date1904 {
        serial -= 1462.0;
    }
    let Some(time) = time else {
        return Some((serial, false));
    };
    let mut hms = time.trim_end_matches('Z').split(':');
    let h: f64 = hms.next()?.parse().ok()?;
    let mi: f64 = hms.next().unwrap_or("0").parse().ok()?;
    let s: f64 = hms.next().unwrap_or("0").parse().ok()?;
    if !(0.0..24.0).contains(&h) || !(0.0..60.0).contains(&mi) || !(0.0..61.0).contains(&s) {
        return None;
    }
    Some((serial + (h * 3600.0 + mi * 60.0 + s) / 86_400.0, true))
}
