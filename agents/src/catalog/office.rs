//! Tools served by the office pool (files, text, office documents); contracts in docs/tools.md.

use atelier_messages::approval::ActionClass;
use atelier_messages::tool::ToolName;
use serde_json::{Value, json};

use super::tool_spec::{Capability, ToolSpec, object, path_only, path_param};

/// `path`, `operations` (items described by `items`), `create_if_missing`, `create_new`,
/// `copy_from`.
fn operations_params(items: Value) -> Value {
    object(
        json!({
            "path": path_param(),
            "operations": {"type": "array", "description": "Operations applied in order, all or nothing", "items": items},
            "create_if_missing": {"type": "boolean", "description": "Create the file from a blank document if it does not exist; edit it in place if it does"},
            "create_new": {"type": "boolean", "description": "Create the file from a blank document (the path must not exist)"},
            "copy_from": {"type": "string", "description": "Start from a copy of this workbench file (the path must not exist)"}
        }),
        &["path", "operations"],
    )
}

fn op_item(ops: &[&str], properties: Value) -> Value {
    let mut properties = properties;
    properties["op"] = json!({"type": "string", "enum": ops});
    json!({"type": "object", "properties": properties, "required": ["op"]})
}

fn style_param() -> Value {
    json!({
        "type": "object",
        "description": "Cell style; unset properties keep the cell's current ones",
        "properties": {
            "bold": {"type": "boolean"}, "italic": {"type": "boolean"}, "underline": {"type": "boolean"},
            "font_size": {"type": "number"}, "font_color": {"type": "string", "description": "Hex RGB, e.g. 1F4E79"},
            "font_name": {"type": "string"}, "fill_color": {"type": "string", "description": "Hex RGB"},
            "number_format": {"type": "string", "description": "e.g. #,##0.00, 0%, yyyy-mm-dd"},
            "horizontal": {"type": "string", "enum": ["left", "center", "right", "justify"]},
            "vertical": {"type": "string", "enum": ["top", "center", "bottom"]},
            "wrap_text": {"type": "boolean"},
            "border": {"type": "string", "enum": ["none", "thin", "medium", "thick", "dashed", "dotted", "double"]},
            "border_color": {"type": "string"}
        }
    })
}

fn xlsx_items() -> Value {
    op_item(
        &[
            "ensure_sheet",
            "delete_sheet",
            "rename_sheet",
            "set_cells",
            "set_range",
            "set_column_widths",
            "set_row_heights",
            "freeze_panes",
            "set_style",
        ],
        json!({
            "sheet": {"type": "string", "description": "Sheet name (every operation)"},
            "new_name": {"type": "string", "description": "rename_sheet: the new name"},
            "cells": {"type": "array", "description": "set_cells: [{cell: \"B2\", value, type?: number|text|bool|date|formula, style?}]", "items": {"type": "object"}},
            "start": {"type": "string", "description": "set_range: top-left cell, e.g. A1"},
            "values": {"type": "array", "description": "set_range: rows of values; numbers stay numbers, booleans booleans, null clears, text starting with = is a formula", "items": {"type": "array"}},
            "widths": {"type": "object", "description": "set_column_widths: {\"A\": 14, \"B\": 30}"},
            "heights": {"type": "object", "description": "set_row_heights: {\"1\": 24} (1-based rows, points)"},
            "cell": {"type": "string", "description": "freeze_panes: first unfrozen cell (A2 freezes row 1; A1 unfreezes)"},
            "range": {"type": "string", "description": "set_style: cells like A1:D1"},
            "style": style_param()
        }),
    )
}

fn run_param() -> Value {
    json!({
        "type": "array",
        "description": "Runs with direct formatting",
        "items": {"type": "object", "properties": {
            "text": {"type": "string"}, "bold": {"type": "boolean"}, "italic": {"type": "boolean"}, "underline": {"type": "boolean"},
            "size": {"type": "number", "description": "Points"}, "color": {"type": "string", "description": "Hex RGB"}, "font": {"type": "string"}
        }, "required": ["text"]}
    })
}

/// [`run_param`] described as the field of `ops`.
fn runs_of(ops: &[&str]) -> Value {
    let mut runs = run_param();
    runs["description"] = Value::String(format!("{}: runs with direct formatting", ops.join(", ")));
    runs
}

fn docx_items() -> Value {
    op_item(
        &[
            "replace_text",
            "append_paragraph",
            "insert_paragraph",
            "append_table",
            "set_table_cell",
            "append_table_row",
            "delete_paragraph",
        ],
        json!({
            "search": {"type": "string", "description": "replace_text (required): text to find (also across formatting runs)"},
            "replace": {"type": "string", "description": "replace_text (required): replacement (keeps the surrounding run's formatting)"},
            "style": {"type": "string", "description": "append_paragraph, insert_paragraph, append_table: paragraph or table style name, e.g. Heading 2, Table Grid"},
            "text": {"type": "string", "description": "append_paragraph, insert_paragraph, set_table_cell: paragraph or cell text"},
            "runs": runs_of(&["append_paragraph", "insert_paragraph"]),
            "after_heading": {"type": "string", "description": "insert_paragraph: heading text to insert after"},
            "after_index": {"type": "integer", "description": "insert_paragraph: paragraph index to insert after"},
            "rows": {"type": "array", "description": "append_table (required): rows of cell values", "items": {"type": "array"}},
            "header": {"type": "boolean", "description": "append_table: bold first row"},
            "table_index": {"type": "integer", "description": "set_table_cell, append_table_row (required): table index (0-based, as numbered by read_file)"},
            "row": {"type": "integer", "description": "set_table_cell (required): row index (0-based)"},
            "col": {"type": "integer", "description": "set_table_cell (required): column index (0-based)"},
            "values": {"type": "array", "description": "append_table_row (required): cell values (formatted like the last row)"},
            "index": {"type": "integer", "description": "delete_paragraph (required): paragraph index (as numbered by read_file)"}
        }),
    )
}

fn pptx_items() -> Value {
    op_item(
        &[
            "add_slide",
            "set_slide_text",
            "append_bullets",
            "delete_slide",
            "set_notes",
        ],
        json!({
            "index": {"type": "integer", "description": "Slide index, 0-based"},
            "layout": {"type": "string", "description": "add_slide: layout name (get_file_info lists them)"},
            "title": {"type": "string"},
            "body": {"type": "string", "description": "Body text; lines become paragraphs"},
            "bullets": {"type": "array", "items": {"type": "string"}},
            "position": {"type": "integer", "description": "add_slide: index of the new slide (default last)"},
            "notes": {"type": "string", "description": "add_slide: speaker notes"},
            "text": {"type": "string", "description": "set_notes: speaker notes"}
        }),
    )
}

/// The office pool's tools, in a stable order.
pub(super) fn tools() -> Vec<ToolSpec> {
    let mut tools = reading_tools();
    tools.extend(writing_tools());
    tools
}

/// The tools that read files.
fn reading_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::read_only(
            ToolName::ListFiles,
            "List all files in the workbench with their metadata (path, kind, size).",
            object(json!({}), &[]),
        ),
        ToolSpec::read_only(
            ToolName::GetFileInfo,
            "Get metadata for a file: kind and size; sheets with dimensions (xlsx); headings, sections, tables and word count (docx); slides with titles and layouts (pptx); page count (pdf); lines and columns (text, csv).",
            path_only(),
        ),
        ToolSpec::read_only(
            ToolName::GetFileMap,
            "Get a deterministic map of a file's regions to read one at a time: row chunks per sheet with the header row (xlsx), sections by heading (docx), slides (pptx), page groups (pdf), line chunks (text).",
            path_only(),
        ),
        ToolSpec::read_only(
            ToolName::ReadFile,
            "Read one region of a file. Use get_file_info or get_file_map first, then read specific regions: sheet+range for spreadsheets, section for docx, slide_index for pptx, pages for pdf, line_start/line_count for text.",
            object(
                json!({
                    "path": path_param(),
                    "sheet": {"type": "string", "description": "Sheet name (xlsx only; default the first sheet)"},
                    "range": {"type": "string", "description": "Cell range like A1:E50 (xlsx only; default the first 100 rows)"},
                    "section": {"type": "string", "description": "Section heading or index (docx only; default the whole document)"},
                    "slide_index": {"type": "integer", "description": "Slide index, 0-based (pptx only; default every slide)"},
                    "pages": {"type": "string", "description": "Page range like 1-5 (pdf only)"},
                    "line_start": {"type": "integer", "description": "Starting line, 1-indexed (text only)"},
                    "line_count": {"type": "integer", "description": "Number of lines to read (text only)"}
                }),
                &["path"],
            ),
        ),
        ToolSpec::read_only(
            ToolName::XlsxGetStyles,
            "List the cell formats used on each sheet of a workbook (font, fill, number format, alignment, borders) so new cells can match them.",
            path_only(),
        ),
        ToolSpec::read_only(
            ToolName::DocxGetStyles,
            "List a document's default font, the paragraph, character and table styles in use, run formatting in use, and the paragraph styles available.",
            path_only(),
        ),
        ToolSpec::read_only(
            ToolName::PptxGetStyles,
            "List a presentation's theme fonts and colors, its layouts, and the fonts and sizes used on slides.",
            path_only(),
        ),
    ]
}

/// The tools that write into the draft.
fn writing_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            ToolName::WriteTextFile,
            "Write or create a text file (md, txt, csv, json, etc.) in the draft. Folders are allowed in the path.",
            object(
                json!({
                    "path": path_param(),
                    "content": {"type": "string", "description": "File content"}
                }),
                &["path", "content"],
            ),
            Capability::Create,
            ActionClass::Additive,
        ),
        ToolSpec::new(
            ToolName::XlsxOperations,
            "Apply operations to an xlsx workbook in the draft (all or nothing): ensure_sheet, delete_sheet, rename_sheet, set_cells (typed), set_range (2-D values keeping JSON types), set_column_widths, set_row_heights, freeze_panes, set_style. Untouched sheets keep their values, formulas, merged cells, widths and formats.",
            operations_params(xlsx_items()),
            Capability::Write,
            ActionClass::Additive,
        ),
        ToolSpec::new(
            ToolName::DocxOperations,
            "Apply operations to a docx document in the draft (all or nothing): replace_text, append_paragraph, insert_paragraph (after a heading), append_table, set_table_cell, append_table_row, delete_paragraph. Untouched content, styles, tables, headers and images are kept.",
            operations_params(docx_items()),
            Capability::Write,
            ActionClass::Additive,
        ),
        ToolSpec::new(
            ToolName::PptxOperations,
            "Apply operations to a pptx presentation in the draft (all or nothing): add_slide (from a layout), set_slide_text, append_bullets, delete_slide, set_notes. Slide indexes are 0-based.",
            operations_params(pptx_items()),
            Capability::Write,
            ActionClass::Additive,
        ),
        ToolSpec::new(
            ToolName::DeleteFile,
            "Delete a file from the draft (the published file stays until the draft is published).",
            path_only(),
            Capability::Write,
            ActionClass::Destructive,
        ),
        ToolSpec::new(
            ToolName::RenameFile,
            "Rename or move a file in the draft (folders allowed); the extension's kind must stay the same.",
            object(
                json!({
                    "path": path_param(),
                    "new_path": {"type": "string", "description": "New workbench path"}
                }),
                &["path", "new_path"],
            ),
            Capability::Write,
            ActionClass::Destructive,
        ),
    ]
}
