//! DuckDB values as the tools see them: coarse column types, one cell model shared by query
//! windows and exports, and the projection that turns exotic DuckDB types into readable ones.
//!
//! Text is read in bounded pieces ([`TextRead`]): the SQL that reads a text column asks DuckDB
//! for a prefix of each value (or for the value only when it is small enough) and for its size
//! in bytes, so a huge value is never copied whole into the worker. Text shown to the model is
//! cut at [`MAX_CELL_BYTES`] with a marker saying the whole value's size.

use std::borrow::Cow;

use duckdb::types::ValueRef;
use serde::Serialize;
use serde_json::Value;

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// The most bytes of one text value in a response to the model: a longer value shows its first
/// bytes (cut on a character boundary) followed by `…[truncated: <whole size> bytes]`.
pub(crate) const MAX_CELL_BYTES: usize = 8 * 1024;

/// How the text columns of a result are read from DuckDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextRead {
    /// The first `n` characters of each value (`left`), and its size in bytes (`strlen`).
    Prefix(usize),
    /// Each value whole when it is at most `n` bytes; of a longer one only its size.
    Whole(u64),
}

/// A column's coarse type, as reported to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ColumnType {
    Integer,
    Float,
    String,
    Date,
    Timestamp,
    Boolean,
}

impl ColumnType {
    /// The coarse type of a DuckDB type name as `DESCRIBE` prints it.
    pub(crate) fn of_duckdb(type_name: &str) -> Self {
        let upper = type_name.trim().to_ascii_uppercase();
        match upper.as_str() {
            "BOOLEAN" => ColumnType::Boolean,
            "TINYINT" | "SMALLINT" | "INTEGER" | "BIGINT" | "HUGEINT" | "UTINYINT"
            | "USMALLINT" | "UINTEGER" | "UBIGINT" | "UHUGEINT" => ColumnType::Integer,
            "FLOAT" | "DOUBLE" => ColumnType::Float,
            "DATE" => ColumnType::Date,
            _ if upper.starts_with("DECIMAL") => ColumnType::Float,
            _ if upper.starts_with("TIMESTAMP") => ColumnType::Timestamp,
            _ => ColumnType::String,
        }
    }
}

/// A result column: its name, DuckDB type and coarse type.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) duckdb_type: String,
    pub(crate) kind: ColumnType,
}

impl Column {
    pub(crate) fn new(name: String, duckdb_type: String) -> Self {
        let kind = ColumnType::of_duckdb(&duckdb_type);
        Self {
            name,
            duckdb_type,
            kind,
        }
    }

    /// The select-list item that reads this column as a type [`Cell::from_value`] understands:
    /// decimals as doubles, every timestamp flavour as microseconds, anything exotic as text.
    pub(crate) fn projection(&self) -> String {
        let ident = quote_ident(&self.name);
        let value = self.value();
        match value == ident {
            true => ident,
            false => format!("{value} AS {ident}"),
        }
    }

    /// The expression [`Self::projection`] names: the column itself, or its cast.
    fn value(&self) -> String {
        let ident = quote_ident(&self.name);
        let native = matches!(
            self.duckdb_type.to_ascii_uppercase().as_str(),
            "BOOLEAN" | "FLOAT" | "DOUBLE" | "DATE" | "VARCHAR" | "TIMESTAMP"
        ) || self.kind == ColumnType::Integer;
        if native {
            return ident;
        }
        let cast = match self.kind {
            ColumnType::Float => "DOUBLE",
            ColumnType::Timestamp => "TIMESTAMP",
            _ => "VARCHAR",
        };
        format!("CAST({ident} AS {cast})")
    }

    /// Whether the column is read as text (`VARCHAR`, or cast to it).
    pub(crate) fn is_text(&self) -> bool {
        self.kind == ColumnType::String
    }

    /// The select-list items that read this column: its [`Self::projection`], or for a text
    /// column the part of each value `text` asks for and the value's size in bytes (read back
    /// together by [`Cell::from_text`]). DuckDB still computes a huge value, but only the part
    /// asked for leaves it.
    pub(crate) fn read_items(&self, text: TextRead) -> Vec<String> {
        if !self.is_text() {
            return vec![self.projection()];
        }
        let value = self.value();
        let part = match text {
            TextRead::Prefix(chars) => format!("left({value}, {chars})"),
            TextRead::Whole(bytes) => {
                format!("CASE WHEN strlen({value}) <= {bytes} THEN {value} END")
            }
        };
        vec![part, format!("strlen({value})")]
    }
}

/// A SQL identifier in double quotes.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One value of a result row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    /// Text of which only `prefix` was read (see [`TextRead`]); the whole value is `bytes` long.
    Cut {
        prefix: String,
        bytes: u64,
    },
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 00:00:00.
    Timestamp(i64),
}

impl Cell {
    /// Reads a value of a projected column (see [`Column::projection`]).
    pub(crate) fn from_value(value: ValueRef<'_>) -> Self {
        match value {
            ValueRef::Null => Cell::Null,
            ValueRef::Boolean(b) => Cell::Bool(b),
            ValueRef::TinyInt(i) => Cell::Int(i.into()),
            ValueRef::SmallInt(i) => Cell::Int(i.into()),
            ValueRef::Int(i) => Cell::Int(i.into()),
            ValueRef::BigInt(i) => Cell::Int(i),
            ValueRef::UTinyInt(i) => Cell::Int(i.into()),
            ValueRef::USmallInt(i) => Cell::Int(i.into()),
            ValueRef::UInt(i) => Cell::Int(i.into()),
            ValueRef::UBigInt(i) => i64::try_from(i).map_or(Cell::Float(i as f64), Cell::Int),
            ValueRef::HugeInt(i) => i64::try_from(i).map_or(Cell::Float(i as f64), Cell::Int),
            ValueRef::UHugeInt(i) => i64::try_from(i).map_or(Cell::Float(i as f64), Cell::Int),
            ValueRef::Float(f) => Cell::Float(f.into()),
            ValueRef::Double(f) => Cell::Float(f),
            ValueRef::Text(bytes) => Cell::Text(String::from_utf8_lossy(bytes).into_owned()),
            ValueRef::Date32(days) => Cell::Date(days),
            ValueRef::Timestamp(unit, value) => Cell::Timestamp(unit.to_micros(value)),
            other => Cell::Text(format!("{other:?}")),
        }
    }

    /// Reads a text column's two items (see [`Column::read_items`]): the part of the value that
    /// was asked for and the value's size in bytes.
    pub(crate) fn from_text(part: ValueRef<'_>, size: ValueRef<'_>) -> Self {
        let bytes = match Cell::from_value(size) {
            Cell::Int(bytes) => u64::try_from(bytes).unwrap_or(0),
            _ => return Cell::Null,
        };
        let prefix = match part {
            ValueRef::Text(part) => String::from_utf8_lossy(part).into_owned(),
            _ => String::new(),
        };
        match prefix.len() as u64 >= bytes {
            true => Cell::Text(prefix),
            false => Cell::Cut { prefix, bytes },
        }
    }

    /// The cell as JSON for the model: numbers stay numbers, dates and timestamps become ISO
    /// text, text over [`MAX_CELL_BYTES`] is cut (see [`Cell::is_cut`]).
    pub(crate) fn to_json(&self) -> Value {
        match self {
            Cell::Null => Value::Null,
            Cell::Bool(b) => Value::Bool(*b),
            Cell::Int(i) => Value::from(*i),
            Cell::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Cell::Text(text) => Value::String(cut_for_model(text, text.len() as u64)),
            Cell::Cut { prefix, bytes } => Value::String(cut_for_model(prefix, *bytes)),
            Cell::Date(_) | Cell::Timestamp(_) => self
                .to_text()
                .map_or(Value::Null, |t| Value::String(t.into_owned())),
        }
    }

    /// Whether [`Cell::to_json`] shows only the start of this value.
    pub(crate) fn is_cut(&self) -> bool {
        match self {
            Cell::Text(text) => text.len() > MAX_CELL_BYTES,
            Cell::Cut { .. } => true,
            _ => false,
        }
    }

    /// The cell as text (for CSV); `None` for NULL. Of a [`Cell::Cut`] only the part read.
    pub(crate) fn to_text(&self) -> Option<Cow<'_, str>> {
        match self {
            Cell::Null => None,
            Cell::Bool(b) => Some(b.to_string().into()),
            Cell::Int(i) => Some(i.to_string().into()),
            Cell::Float(f) => Some(f.to_string().into()),
            Cell::Text(text) | Cell::Cut { prefix: text, .. } => Some(Cow::Borrowed(text)),
            Cell::Date(days) => Some(format_date(i64::from(*days)).into()),
            Cell::Timestamp(micros) => Some(format_timestamp(*micros).into()),
        }
    }
}

/// `text` (the start of a value `whole` bytes long) as the model sees it: whole when it is at
/// most [`MAX_CELL_BYTES`], else its first bytes and a marker with the whole size.
fn cut_for_model(text: &str, whole: u64) -> String {
    if text.len() as u64 == whole && text.len() <= MAX_CELL_BYTES {
        return text.to_string();
    }
    format!(
        "{}…[truncated: {whole} bytes]",
        floor_chars(text, MAX_CELL_BYTES)
    )
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn floor_chars(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[..end]
}

/// `YYYY-MM-DD` of a day count since 1970-01-01.
fn format_date(days: i64) -> String {
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]` of microseconds since the epoch.
fn format_timestamp(micros: i64) -> String {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let in_day = micros.rem_euclid(MICROS_PER_DAY);
    let seconds = in_day / 1_000_000;
    let fraction = in_day % 1_000_000;
    let clock = format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    match fraction {
        0 => format!("{} {clock}", format_date(days)),
        _ => format!("{} {clock}.{fraction:06}", format_date(days)),
    }
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Excel's serial day number (1900 date system) of days since 1970-01-01.
pub(crate) fn excel_serial_of_days(days: f64) -> f64 {
    days + 25_569.0
}

/// Days (with fraction) since 1970-01-01 of a microsecond timestamp.
pub(crate) fn days_of_micros(micros: i64) -> f64 {
    micros as f64 / MICROS_PER_DAY as f64
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn maps_duckdb_types_to_coarse_types() {
        let cases = [
            ("BIGINT", ColumnType::Integer),
            ("HUGEINT", ColumnType::Integer),
            ("DOUBLE", ColumnType::Float),
            ("DECIMAL(10,2)", ColumnType::Float),
            ("VARCHAR", ColumnType::String),
            ("DATE", ColumnType::Date),
            ("TIMESTAMP WITH TIME ZONE", ColumnType::Timestamp),
            ("BOOLEAN", ColumnType::Boolean),
            ("INTEGER[]", ColumnType::String),
            ("TIME", ColumnType::String),
        ];
        for (name, expected) in cases {
            assert_eq!(ColumnType::of_duckdb(name), expected, "{name}");
        }
    }

    #[test]
    fn projects_exotic_types_into_readable_ones() {
        let column = |ty: &str| Column::new("a\"b".into(), ty.into()).projection();
        assert_eq!(column("BIGINT"), "\"a\"\"b\"");
        assert_eq!(
            column("DECIMAL(10,2)"),
            "CAST(\"a\"\"b\" AS DOUBLE) AS \"a\"\"b\""
        );
        assert_eq!(
            column("TIMESTAMP_NS"),
            "CAST(\"a\"\"b\" AS TIMESTAMP) AS \"a\"\"b\""
        );
        assert_eq!(
            column("INTEGER[]"),
            "CAST(\"a\"\"b\" AS VARCHAR) AS \"a\"\"b\""
        );
    }

    #[test]
    fn formats_dates_and_timestamps() {
        assert_eq!(format_date(0), "1970-01-01");
        assert_eq!(format_date(20_513), "2026-03-01");
        assert_eq!(format_date(-1), "1969-12-31");
        assert_eq!(format_date(11_016), "2000-02-29");
        assert_eq!(
            format_timestamp(20_513 * MICROS_PER_DAY + 3_723_000_000),
            "2026-03-01 01:02:03"
        );
        assert_eq!(format_timestamp(1_500), "1970-01-01 00:00:00.001500");
        assert_eq!(format_timestamp(-1_000_000), "1969-12-31 23:59:59");
    }

    #[test]
    fn json_keeps_numbers_and_nulls() {
        assert_eq!(Cell::Int(3).to_json(), serde_json::json!(3));
        assert_eq!(Cell::Float(2.5).to_json(), serde_json::json!(2.5));
        assert_eq!(Cell::Float(f64::NAN).to_json(), Value::Null);
        assert_eq!(Cell::Date(0).to_json(), serde_json::json!("1970-01-01"));
        assert_eq!(Cell::Null.to_text(), None);
        assert_eq!(excel_serial_of_days(f64::from(20_513)), 46_082.0);
    }

    #[test]
    fn text_columns_are_read_in_bounded_parts() {
        let text = Column::new("t".into(), "VARCHAR".into());
        assert_eq!(
            text.read_items(TextRead::Prefix(10)),
            ["left(\"t\", 10)", "strlen(\"t\")"]
        );
        let blob = Column::new("b".into(), "BLOB".into());
        assert_eq!(
            blob.read_items(TextRead::Whole(99)),
            [
                "CASE WHEN strlen(CAST(\"b\" AS VARCHAR)) <= 99 THEN CAST(\"b\" AS VARCHAR) END",
                "strlen(CAST(\"b\" AS VARCHAR))"
            ]
        );
        let number = Column::new("n".into(), "DECIMAL(10,2)".into());
        assert_eq!(
            number.read_items(TextRead::Prefix(10)),
            ["CAST(\"n\" AS DOUBLE) AS \"n\""]
        );
    }

    #[test]
    fn long_text_is_cut_for_the_model_with_its_whole_size() {
        let short = Cell::Text("héllo".into());
        assert_eq!(short.to_json(), json!("héllo"));
        assert!(!short.is_cut());
        let long = Cell::Text("é".repeat(MAX_CELL_BYTES));
        let shown = long.to_json();
        let shown = shown.as_str().unwrap();
        let whole = 2 * MAX_CELL_BYTES;
        assert!(
            shown.ends_with(&format!("…[truncated: {whole} bytes]")),
            "{shown}"
        );
        assert_eq!(shown.find('…'), Some(MAX_CELL_BYTES));
        assert!(long.is_cut());
        let cut = Cell::Cut {
            prefix: "ab".into(),
            bytes: 1_000_000_000,
        };
        assert_eq!(cut.to_json(), json!("ab…[truncated: 1000000000 bytes]"));
        assert!(cut.is_cut());
        assert_eq!(floor_chars("aé", 2), "a");
    }

    #[test]
    fn a_text_read_is_whole_only_when_all_of_it_came() {
        let read =
            |part: ValueRef<'static>, size: i64| Cell::from_text(part, ValueRef::BigInt(size));
        assert_eq!(read(ValueRef::Text(b"abc"), 3), Cell::Text("abc".into()));
        assert_eq!(
            read(ValueRef::Text(b"ab"), 3),
            Cell::Cut {
                prefix: "ab".into(),
                bytes: 3
            }
        );
        assert_eq!(
            read(ValueRef::Null, 7),
            Cell::Cut {
                prefix: String::new(),
                bytes: 7
            }
        );
        assert_eq!(Cell::from_text(ValueRef::Null, ValueRef::Null), Cell::Null);
    }
}
