//! A workbook's sheets as tables: each sheet is written as a CSV (its values as `read_file`
//! gives them: numbers, text, ISO dates, booleans), the first is ingested as table `data`
//! like any delimited file (header, metadata rows above it, number format), and every sheet
//! is also a table named after it.

use std::path::{Path, PathBuf};

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;
use serde_json::Value;

use super::sql_string;

/// Tables a sheet's name may not take.
const RESERVED: &[&str] = &["data", "figures", "atelier_source"];

/// One sheet written as a CSV.
pub(super) struct SheetCsv {
    pub(super) name: String,
    pub(super) path: PathBuf,
}

/// Writes every sheet of the workbook at `file` as a CSV beside `temp` (the paths are pushed
/// to `scratch`, removed by the caller), in the workbook's order.
pub(super) fn write_csvs(
    file: &Path,
    zip_based: bool,
    temp: &Path,
    scratch: &mut Vec<PathBuf>,
) -> Result<Vec<SheetCsv>, ErrorBody> {
    let bytes = std::fs::read(file).map_err(|e| {
        ErrorBody::new(
            ErrorCode::FileReadFailed,
            format!("cannot read {}: {e}", file.display()),
        )
    })?;
    let mut written = Vec::new();
    for (index, (name, rows)) in crate::office::sheet_rows(bytes, zip_based)?
        .into_iter()
        .enumerate()
    {
        let path = temp.with_extension(format!("sheet{index}.csv"));
        scratch.push(path.clone());
        std::fs::write(&path, csv_text(&rows)).map_err(|e| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("cannot write the table cache: {e}"),
            )
        })?;
        written.push(SheetCsv { name, path });
    }
    if written.is_empty() {
        return Err(ErrorBody::new(
            ErrorCode::FileReadFailed,
            "the workbook has no sheets",
        ));
    }
    Ok(written)
}

/// Creates a table per sheet named after it (a name taken by `data`, `figures` or the
/// metadata is left out), read from its CSV.
pub(super) fn create_tables(conn: &Connection, sheets: &[SheetCsv]) -> Result<(), duckdb::Error> {
    for sheet in sheets {
        if RESERVED.contains(&sheet.name.to_lowercase().as_str()) {
            continue;
        }
        conn.execute_batch(&format!(
            "CREATE TABLE \"{}\" AS SELECT * FROM read_csv({}, header = true, all_varchar = false)",
            sheet.name.replace('"', "\"\""),
            sql_string(&sheet.path.to_string_lossy())
        ))?;
    }
    Ok(())
}

/// Rows of JSON cells as CSV text: text quoted, numbers and booleans as written, empty cells
/// empty.
fn csv_text(rows: &[Vec<Value>]) -> String {
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().map(csv_cell).collect();
        text.push_str(&cells.join(","));
        text.push('\n');
    }
    text
}

fn csv_cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => format!("\"{}\"", text.replace('"', "\"\"")),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells_are_written_as_csv() {
        let rows = vec![
            vec![json!("Region"), json!("Q1, total"), json!(null)],
            vec![json!("say \"hi\""), json!(12.5), json!(true)],
        ];
        assert_eq!(
            csv_text(&rows),
            "\"Region\",\"Q1, total\",\n\"say \"\"hi\"\"\",12.5,true\n"
        );
    }
}
