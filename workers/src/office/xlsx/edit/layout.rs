//! Sheet layout: column widths (splitting existing `col` spans), row heights and frozen panes.

use atelier_messages::ErrorBody;

use super::schema::{WORKSHEET_ORDER, ensure_child, prefix_of};
use super::{XlsxEditor, invalid};
use crate::office::xlsx::cellref::{CellRef, MAX_ROWS, cell_name};
use crate::office::xml::{Element, Node};

impl XlsxEditor {
    /// Sets the width of `column` (letters like `B`), in Excel's character units.
    pub(super) fn set_column_width(
        &mut self,
        part: &str,
        column: &str,
        width: f64,
    ) -> Result<(), ErrorBody> {
        let col = CellRef::parse(&format!("{}1", column.trim()))
            .map_err(|_| invalid(format!("{column:?} is not a column like B")))?
            .col;
        if !(0.0..=255.0).contains(&width) {
            return Err(invalid(format!(
                "column width {width} must be between 0 and 255"
            )));
        }
        let number = col + 1;
        let root = &mut self.package.doc_mut(part)?.root;
        let prefix = prefix_of(&root.name);
        let cols = ensure_child(root, "cols", WORKSHEET_ORDER);
        let mut pieces: Vec<Element> = Vec::new();
        for existing in cols.elements() {
            let min: u32 = existing
                .attr("min")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let max: u32 = existing
                .attr("max")
                .and_then(|v| v.parse().ok())
                .unwrap_or(min);
            if number < min || number > max {
                pieces.push(existing.clone());
                continue;
            }
            for (lo, hi) in [(min, number.saturating_sub(1)), (number + 1, max)] {
                if lo <= hi && lo >= min && hi <= max {
                    let mut piece = existing.clone();
                    piece.set_attr("min", &lo.to_string());
                    piece.set_attr("max", &hi.to_string());
                    pieces.push(piece);
                }
            }
        }
        let n = number.to_string();
        pieces.push(Element::new(
            &format!("{prefix}col"),
            &[
                ("min", &n),
                ("max", &n),
                ("width", &width.to_string()),
                ("customWidth", "1"),
            ],
        ));
        pieces.sort_by_key(|c| {
            c.attr("min")
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        });
        cols.children = pieces.into_iter().map(Node::Element).collect();
        Ok(())
    }

    /// Sets the height of row `row` (a 1-based number as text), in points.
    pub(super) fn set_row_height(
        &mut self,
        part: &str,
        row: &str,
        height: f64,
    ) -> Result<(), ErrorBody> {
        let number: u32 = row
            .trim()
            .parse()
            .ok()
            .filter(|r| (1..=MAX_ROWS).contains(r))
            .ok_or_else(|| invalid(format!("row {row:?} must be a 1-based row number")))?;
        if !(0.0..=409.0).contains(&height) {
            return Err(invalid(format!(
                "row height {height} must be between 0 and 409 points"
            )));
        }
        let row = self.row_mut(part, number)?;
        row.element.set_attr("ht", &height.to_string());
        row.element.set_attr("customHeight", "1");
        Ok(())
    }

    /// Freezes the rows above and the columns left of `at`; `A1` unfreezes.
    pub(super) fn freeze(&mut self, part: &str, at: CellRef) -> Result<(), ErrorBody> {
        let root = &mut self.package.doc_mut(part)?.root;
        let prefix = prefix_of(&root.name);
        let views = ensure_child(root, "sheetViews", WORKSHEET_ORDER);
        let view_name = format!("{prefix}sheetView");
        if views.child(&view_name).is_none() {
            views.children.push(Node::Element(Element::new(
                &view_name,
                &[("workbookViewId", "0")],
            )));
        }
        let Some(view) = views.child_mut(&view_name) else {
            return Ok(());
        };
        view.retain_elements(|e| !matches!(e.local_name(), "pane" | "selection"));
        let CellRef { row, col } = at;
        if row == 0 && col == 0 {
            return Ok(());
        }
        let pane = match (row > 0, col > 0) {
            (true, true) => "bottomRight",
            (true, false) => "bottomLeft",
            _ => "topRight",
        };
        let mut attrs: Vec<(&str, String)> = Vec::new();
        if col > 0 {
            attrs.push(("xSplit", col.to_string()));
        }
        if row > 0 {
            attrs.push(("ySplit", row.to_string()));
        }
        attrs.extend([
            ("topLeftCell", cell_name(row, col)),
            ("activePane", pane.to_string()),
            ("state", "frozen".to_string()),
        ]);
        let attrs: Vec<(&str, &str)> = attrs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        view.children.insert(
            0,
            Node::Element(Element::new(&format!("{prefix}pane"), &attrs)),
        );
        view.children.insert(
            1,
            Node::Element(Element::new(
                &format!("{prefix}selection"),
                &[("pane", pane)],
            )),
        );
        Ok(())
    }
}
