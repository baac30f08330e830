//! `xlsx_operations`: the operations a call may list, checked and applied in order.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use atelier_messages::ErrorBody;

use super::values::CellValue;
use super::{XlsxEditor, invalid};
use crate::office::ordered::apply_in_order;
use crate::office::xlsx::cellref::{CellRange, CellRef, cell_name};
use crate::office::xlsx::styles::StyleSpec;

/// Most cells one `set_style` may cover.
const MAX_STYLED_CELLS: u64 = 1_000_000;

/// One operation of an `xlsx_operations` call.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum XlsxOp {
    EnsureSheet {
        sheet: String,
    },
    DeleteSheet {
        sheet: String,
    },
    RenameSheet {
        sheet: String,
        new_name: String,
    },
    SetCells {
        sheet: String,
        cells: Vec<CellSpec>,
    },
    SetRange {
        sheet: String,
        start: String,
        values: Vec<Vec<Value>>,
    },
    SetColumnWidths {
        sheet: String,
        widths: BTreeMap<String, f64>,
    },
    SetRowHeights {
        sheet: String,
        heights: BTreeMap<String, f64>,
    },
    FreezePanes {
        sheet: String,
        cell: String,
    },
    SetStyle {
        sheet: String,
        range: String,
        style: StyleSpec,
    },
}

/// One cell of `set_cells`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CellSpec {
    cell: String,
    value: Value,
    /// `number`, `text`, `bool`, `date` or `formula`; inferred from the JSON type when absent.
    #[serde(rename = "type")]
    kind: Option<String>,
    style: Option<StyleSpec>,
}

/// Applies `ops` in order; returns the new workbook and one result per operation.
pub(crate) fn apply(bytes: Vec<u8>, ops: &[XlsxOp]) -> Result<(Vec<u8>, Vec<Value>), ErrorBody> {
    let mut editor = XlsxEditor::open(bytes)?;
    let results = apply_in_order(&mut editor, ops, XlsxEditor::apply_one)?;
    Ok((editor.finish()?, results))
}

impl XlsxEditor {
    fn apply_one(&mut self, op: &XlsxOp) -> Result<Value, ErrorBody> {
        match op {
            XlsxOp::EnsureSheet { sheet } => {
                let created = self.ensure_sheet(sheet)?;
                Ok(json!({"op": "ensure_sheet", "sheet": sheet, "created": created}))
            }
            XlsxOp::DeleteSheet { sheet } => {
                self.delete_sheet(sheet)?;
                Ok(json!({"op": "delete_sheet", "sheet": sheet}))
            }
            XlsxOp::RenameSheet { sheet, new_name } => {
                self.rename_sheet(sheet, new_name)?;
                Ok(json!({"op": "rename_sheet", "sheet": sheet, "new_name": new_name}))
            }
            XlsxOp::SetCells { sheet, cells } => {
                let part = self.sheet_part(sheet)?;
                for spec in cells {
                    self.set_cell(&part, spec)?;
                }
                Ok(json!({"op": "set_cells", "sheet": sheet, "cells": cells.len()}))
            }
            XlsxOp::SetRange {
                sheet,
                start,
                values,
            } => {
                let part = self.sheet_part(sheet)?;
                let start = CellRef::parse(start)?;
                let rows = self.range_values(start, values)?;
                self.write_rows(&part, start, &rows)?;
                let count: usize = rows.iter().map(Vec::len).sum();
                Ok(json!({"op": "set_range", "sheet": sheet, "cells": count}))
            }
            XlsxOp::SetColumnWidths { sheet, widths } => {
                let part = self.sheet_part(sheet)?;
                for (column, width) in widths {
                    self.set_column_width(&part, column, *width)?;
                }
                Ok(json!({"op": "set_column_widths", "sheet": sheet, "columns": widths.len()}))
            }
            XlsxOp::SetRowHeights { sheet, heights } => {
                let part = self.sheet_part(sheet)?;
                for (row, height) in heights {
                    self.set_row_height(&part, row, *height)?;
                }
                Ok(json!({"op": "set_row_heights", "sheet": sheet, "rows": heights.len()}))
            }
            XlsxOp::FreezePanes { sheet, cell } => {
                let part = self.sheet_part(sheet)?;
                self.freeze(&part, CellRef::parse(cell)?)?;
                Ok(json!({"op": "freeze_panes", "sheet": sheet, "cell": cell}))
            }
            XlsxOp::SetStyle {
                sheet,
                range,
                style,
            } => {
                let part = self.sheet_part(sheet)?;
                let range = CellRange::parse(range)?;
                self.set_style(&part, range, style)?;
                Ok(
                    json!({"op": "set_style", "sheet": sheet, "range": range.to_string(), "cells": range.cells()}),
                )
            }
        }
    }

    /// One cell of `set_cells`: its value, then its style.
    fn set_cell(&mut self, part: &str, spec: &CellSpec) -> Result<(), ErrorBody> {
        let CellRef { row, col } = CellRef::parse(&spec.cell)?;
        let value = CellValue::from_json(&spec.value, spec.kind.as_deref(), self.date1904)
            .map_err(|e| invalid(format!("cell {}: {}", spec.cell, e.message)))?;
        self.write_cell(part, row, col, &value)?;
        if let Some(style) = &spec.style {
            self.style_cell(part, row, col, style)?;
        }
        Ok(())
    }

    /// The values of `set_range` with their JSON types kept; errors name the cell.
    fn range_values(
        &self,
        start: CellRef,
        values: &[Vec<Value>],
    ) -> Result<Vec<Vec<CellValue>>, ErrorBody> {
        (start.row..)
            .zip(values)
            .map(|(row, cells)| {
                (start.col..)
                    .zip(cells)
                    .map(|(col, value)| {
                        CellValue::from_json(value, None, self.date1904).map_err(|e| {
                            invalid(format!("cell {}: {}", cell_name(row, col), e.message))
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn set_style(
        &mut self,
        part: &str,
        range: CellRange,
        style: &StyleSpec,
    ) -> Result<(), ErrorBody> {
        if range.cells() > MAX_STYLED_CELLS {
            return Err(invalid(format!(
                "set_style on {} cells; the limit is 1,000,000",
                range.cells()
            )));
        }
        for row in range.start.0..=range.end.0 {
            for col in range.start.1..=range.end.1 {
                self.style_cell(part, row, col, style)?;
            }
        }
        Ok(())
    }
}
