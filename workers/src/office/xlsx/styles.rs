//! Cell styles in `xl/styles.xml`: deriving new cell formats from existing ones, and the
//! `xlsx_get_styles` summary.

use std::collections::BTreeMap;

use atelier_messages::{ErrorBody, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::office::xml::{Element, Node};

/// Style properties to apply to cells; unset properties keep the cell's current ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StyleSpec {
    pub(crate) bold: Option<bool>,
    pub(crate) italic: Option<bool>,
    pub(crate) underline: Option<bool>,
    pub(crate) font_size: Option<f64>,
    /// Hex RGB, e.g. `1F4E79`.
    pub(crate) font_color: Option<String>,
    pub(crate) font_name: Option<String>,
    /// Hex RGB background.
    pub(crate) fill_color: Option<String>,
    /// Excel number format, e.g. `#,##0.00`, `0%`, `yyyy-mm-dd`.
    pub(crate) number_format: Option<String>,
    /// `left`, `center`, `right`, `justify`, …
    pub(crate) horizontal: Option<String>,
    /// `top`, `center`, `bottom`.
    pub(crate) vertical: Option<String>,
    pub(crate) wrap_text: Option<bool>,
    /// `thin`, `medium`, `thick`, `dashed`, `dotted`, `double` or `none` (all four sides).
    pub(crate) border: Option<String>,
    pub(crate) border_color: Option<String>,
}

impl StyleSpec {
    pub(crate) fn number_format(format: &str) -> StyleSpec {
        StyleSpec {
            number_format: Some(format.to_string()),
            ..StyleSpec::default()
        }
    }

    fn has_font(&self) -> bool {
        self.bold.is_some()
            || self.italic.is_some()
            || self.underline.is_some()
            || self.font_size.is_some()
            || self.font_color.is_some()
            || self.font_name.is_some()
    }

    fn has_alignment(&self) -> bool {
        self.horizontal.is_some() || self.vertical.is_some() || self.wrap_text.is_some()
    }
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// `1F4E79` / `#1f4e79` → `FF1F4E79` (ARGB).
fn argb(color: &str) -> Result<String, ErrorBody> {
    let hex = color.trim().trim_start_matches('#').to_ascii_uppercase();
    match hex.len() {
        6 if hex.chars().all(|c| c.is_ascii_hexdigit()) => Ok(format!("FF{hex}")),
        8 if hex.chars().all(|c| c.is_ascii_hexdigit()) => Ok(hex),
        _ => Err(invalid(format!(
            "color {color:?} must be hex RGB like 1F4E79"
        ))),
    }
}

/// Excel's built-in number formats that have fixed codes.
const BUILTIN_FORMATS: &[(u32, &str)] = &[
    (0, "General"),
    (1, "0"),
    (2, "0.00"),
    (3, "#,##0"),
    (4, "#,##0.00"),
    (9, "0%"),
    (10, "0.00%"),
    (11, "0.00E+00"),
    (12, "# ?/?"),
    (13, "# ??/??"),
    (14, "mm-dd-yy"),
    (15, "d-mmm-yy"),
    (16, "d-mmm"),
    (17, "mmm-yy"),
    (18, "h:mm AM/PM"),
    (19, "h:mm:ss AM/PM"),
    (20, "h:mm"),
    (21, "h:mm:ss"),
    (22, "m/d/yy h:mm"),
    (37, "#,##0 ;(#,##0)"),
    (38, "#,##0 ;[Red](#,##0)"),
    (39, "#,##0.00;(#,##0.00)"),
    (40, "#,##0.00;[Red](#,##0.00)"),
    (45, "mm:ss"),
    (46, "[h]:mm:ss"),
    (47, "mmss.0"),
    (48, "##0.0E+0"),
    (49, "@"),
];

/// Schema order of `styleSheet` children.
const STYLESHEET_ORDER: &[&str] = &[
    "numFmts",
    "fonts",
    "fills",
    "borders",
    "cellStyleXfs",
    "cellXfs",
    "cellStyles",
    "dxfs",
    "tableStyles",
    "colors",
    "extLst",
];
/// Schema order of `font` children.
const FONT_ORDER: &[&str] = &[
    "b",
    "i",
    "strike",
    "condense",
    "extend",
    "outline",
    "shadow",
    "u",
    "vertAlign",
    "sz",
    "color",
    "name",
    "family",
    "charset",
    "scheme",
];

/// Edits a `styleSheet` root (prefix-aware: `x:` or none).
pub(crate) struct StyleSheet<'a> {
    root: &'a mut Element,
    prefix: String,
}

impl<'a> StyleSheet<'a> {
    pub(crate) fn new(root: &'a mut Element) -> StyleSheet<'a> {
        let prefix = root
            .name
            .rsplit_once(':')
            .map(|(p, _)| format!("{p}:"))
            .unwrap_or_default();
        StyleSheet { root, prefix }
    }

    fn q(&self, local: &str) -> String {
        format!("{}{local}", self.prefix)
    }

    fn order(&self, locals: &[&str]) -> Vec<String> {
        locals.iter().map(|l| self.q(l)).collect()
    }

    /// The list element `local` (created in schema order when missing).
    fn list(&mut self, local: &str) -> &mut Element {
        let name = self.q(local);
        let order = self.order(STYLESHEET_ORDER);
        let order: Vec<&str> = order.iter().map(String::as_str).collect();
        self.root.ensure_child(&name, &order)
    }

    /// Appends an item to a list, updates its `count`, returns the new index.
    fn push(&mut self, list: &str, item: Element) -> u32 {
        let list = self.list(list);
        list.children.push(Node::Element(item));
        let count = list.elements().count();
        list.set_attr("count", &count.to_string());
        u32::try_from(count - 1).unwrap_or(0)
    }

    fn item(&mut self, list: &str, index: u32) -> Option<Element> {
        self.list(list).elements().nth(index as usize).cloned()
    }

    /// A new cell format: `base` with `spec` applied; returns its index in `cellXfs`.
    pub(crate) fn derive(&mut self, base: u32, spec: &StyleSpec) -> Result<u32, ErrorBody> {
        let mut xf = self.item("cellXfs", base).unwrap_or_else(|| {
            Element::new(
                &self.q("xf"),
                &[
                    ("numFmtId", "0"),
                    ("fontId", "0"),
                    ("fillId", "0"),
                    ("borderId", "0"),
                    ("xfId", "0"),
                ],
            )
        });
        if spec.has_font() {
            let font_id = xf.attr("fontId").and_then(|v| v.parse().ok()).unwrap_or(0);
            let font = self.font(font_id, spec)?;
            let id = self.push("fonts", font);
            xf.set_attr("fontId", &id.to_string());
            xf.set_attr("applyFont", "1");
        }
        if let Some(color) = &spec.fill_color {
            let fill = self.fill(color)?;
            let id = self.push("fills", fill);
            xf.set_attr("fillId", &id.to_string());
            xf.set_attr("applyFill", "1");
        }
        if let Some(style) = &spec.border {
            let border = self.border(style, spec.border_color.as_deref())?;
            let id = self.push("borders", border);
            xf.set_attr("borderId", &id.to_string());
            xf.set_attr("applyBorder", "1");
        }
        if let Some(format) = &spec.number_format {
            let id = self.number_format(format);
            xf.set_attr("numFmtId", &id.to_string());
            xf.set_attr("applyNumberFormat", "1");
        }
        if spec.has_alignment() {
            self.align(&mut xf, spec);
            xf.set_attr("applyAlignment", "1");
        }
        Ok(self.push("cellXfs", xf))
    }

    fn font(&mut self, base: u32, spec: &StyleSpec) -> Result<Element, ErrorBody> {
        let mut parts: BTreeMap<String, Element> = BTreeMap::new();
        if let Some(font) = self.item("fonts", base) {
            for child in font.elements() {
                parts.insert(child.local_name().to_string(), child.clone());
            }
        }
        let mut toggle = |local: &str, on: Option<bool>, attrs: &[(&str, &str)]| match on {
            Some(true) => {
                parts.insert(local.to_string(), Element::new(&self.q(local), attrs));
            }
            Some(false) => {
                parts.remove(local);
            }
            None => {}
        };
        toggle("b", spec.bold, &[]);
        toggle("i", spec.italic, &[]);
        toggle("u", spec.underline, &[]);
        if let Some(size) = spec.font_size {
            if !(1.0..=409.0).contains(&size) {
                return Err(invalid(format!(
                    "font_size {size} must be between 1 and 409"
                )));
            }
            parts.insert(
                "sz".into(),
                Element::new(&self.q("sz"), &[("val", &size.to_string())]),
            );
        }
        if let Some(color) = &spec.font_color {
            parts.insert(
                "color".into(),
                Element::new(&self.q("color"), &[("rgb", &argb(color)?)]),
            );
        }
        if let Some(name) = &spec.font_name {
            parts.insert(
                "name".into(),
                Element::new(&self.q("name"), &[("val", name)]),
            );
            parts.remove("scheme");
        }
        let mut font = Element::new(&self.q("font"), &[]);
        for local in FONT_ORDER {
            if let Some(child) = parts.remove(*local) {
                font = font.with(child);
            }
        }
        Ok(font)
    }

    fn fill(&self, color: &str) -> Result<Element, ErrorBody> {
        let color = argb(color)?;
        Ok(Element::new(&self.q("fill"), &[]).with(
            Element::new(&self.q("patternFill"), &[("patternType", "solid")])
                .with(Element::new(&self.q("fgColor"), &[("rgb", &color)]))
                .with(Element::new(&self.q("bgColor"), &[("indexed", "64")])),
        ))
    }

    fn border(&self, style: &str, color: Option<&str>) -> Result<Element, ErrorBody> {
        const STYLES: &[&str] = &[
            "none", "thin", "medium", "thick", "dashed", "dotted", "double", "hair",
        ];
        if !STYLES.contains(&style) {
            return Err(invalid(format!(
                "border {style:?} must be one of {}",
                STYLES.join(", ")
            )));
        }
        let color = color.map(argb).transpose()?;
        let mut border = Element::new(&self.q("border"), &[]);
        for side in ["left", "right", "top", "bottom"] {
            let mut edge = Element::new(&self.q(side), &[]);
            if style != "none" {
                edge.set_attr("style", style);
                let color_el = match &color {
                    Some(rgb) => Element::new(&self.q("color"), &[("rgb", rgb)]),
                    None => Element::new(&self.q("color"), &[("auto", "1")]),
                };
                edge = edge.with(color_el);
            }
            border = border.with(edge);
        }
        Ok(border.with(Element::new(&self.q("diagonal"), &[])))
    }

    /// The id of a number format code: built-in, existing custom, or a new custom one.
    pub(crate) fn number_format(&mut self, code: &str) -> u32 {
        if let Some((id, _)) = BUILTIN_FORMATS
            .iter()
            .find(|(_, c)| c.eq_ignore_ascii_case(code))
        {
            return *id;
        }
        let name = self.q("numFmt");
        let list = self.list("numFmts");
        let existing: Vec<(u32, String)> = list
            .children_named(&name)
            .filter_map(|f| Some((f.attr("numFmtId")?.parse().ok()?, f.attr("formatCode")?)))
            .collect();
        if let Some((id, _)) = existing.iter().find(|(_, c)| c == code) {
            return *id;
        }
        let id = existing
            .iter()
            .map(|(id, _)| *id)
            .max()
            .unwrap_or(163)
            .max(163)
            + 1;
        list.children.push(Node::Element(Element::new(
            &name,
            &[("numFmtId", &id.to_string()), ("formatCode", code)],
        )));
        let count = list.elements().count();
        list.set_attr("count", &count.to_string());
        id
    }

    fn align(&self, xf: &mut Element, spec: &StyleSpec) {
        let name = self.q("alignment");
        let alignment = xf.ensure_child(&name, &[name.as_str()]);
        if let Some(h) = &spec.horizontal {
            alignment.set_attr("horizontal", h);
        }
        if let Some(v) = &spec.vertical {
            alignment.set_attr("vertical", v);
        }
        if let Some(wrap) = spec.wrap_text {
            alignment.set_attr("wrapText", if wrap { "1" } else { "0" });
        }
    }
}

/// `xlsx_get_styles`: the cell formats used on each sheet, resolved to readable properties.
pub(crate) fn describe(styles: &Element, usage: &BTreeMap<String, BTreeMap<u32, usize>>) -> Value {
    let prefix = styles
        .name
        .rsplit_once(':')
        .map(|(p, _)| format!("{p}:"))
        .unwrap_or_default();
    let q = |local: &str| format!("{prefix}{local}");
    let list = |local: &str| -> Vec<Element> {
        styles
            .child(&q(local))
            .map(|l| l.elements().cloned().collect())
            .unwrap_or_default()
    };
    let (fonts, fills, xfs) = (list("fonts"), list("fills"), list("cellXfs"));
    let custom: BTreeMap<u32, String> = list("numFmts")
        .iter()
        .filter_map(|f| Some((f.attr("numFmtId")?.parse().ok()?, f.attr("formatCode")?)))
        .collect();
    let format_code = |id: u32| {
        custom.get(&id).cloned().or_else(|| {
            BUILTIN_FORMATS
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, c)| c.to_string())
        })
    };
    let describe_xf = |index: u32| -> Value {
        let Some(xf) = xfs.get(index as usize) else {
            return json!({"style_id": index});
        };
        let id_of = |attr: &str| {
            xf.attr(attr)
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0)
        };
        let font = fonts.get(id_of("fontId"));
        let font_val = |local: &str, attr: &str| {
            font.and_then(|f| f.child(&q(local)))
                .and_then(|e| e.attr(attr))
        };
        let fill = fills
            .get(id_of("fillId"))
            .and_then(|f| f.child(&q("patternFill")))
            .filter(|p| p.attr("patternType").as_deref() == Some("solid"))
            .and_then(|p| p.child(&q("fgColor")))
            .and_then(|c| c.attr("rgb"));
        let alignment = xf.child(&q("alignment"));
        json!({
            "style_id": index,
            "number_format": u32::try_from(id_of("numFmtId")).ok().and_then(format_code),
            "font": {
                "name": font_val("name", "val"), "size": font_val("sz", "val").and_then(|s| s.parse::<f64>().ok()),
                "bold": font.is_some_and(|f| f.child(&q("b")).is_some()),
                "italic": font.is_some_and(|f| f.child(&q("i")).is_some()),
                "color": font_val("color", "rgb"),
            },
            "fill_color": fill,
            "horizontal": alignment.and_then(|a| a.attr("horizontal")),
            "wrap_text": alignment.and_then(|a| a.attr("wrapText")).is_some_and(|w| w == "1" || w == "true"),
            "has_border": id_of("borderId") != 0,
        })
    };
    let sheets: Vec<Value> = usage
        .iter()
        .map(|(sheet, counts)| {
            let styles: Vec<Value> = counts
                .iter()
                .map(|(id, cells)| {
                    let mut v = describe_xf(*id);
                    v["cells"] = json!(cells);
                    v
                })
                .collect();
            json!({"sheet": sheet, "styles": styles})
        })
        .collect();
    json!({"sheets": sheets, "cell_formats": xfs.len(), "custom_number_formats": custom.values().collect::<Vec<_>>()})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::office::xml::Document;

    #[test]
    fn derives_formats_from_existing_ones() {
        let xml = r#"<styleSheet><fonts count="1"><font><sz val="11"/><name val="Calibri"/></font></fonts><fills count="2"><fill/><fill/></fills><borders count="1"><border/></borders><cellXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/></cellXfs></styleSheet>"#;
        let mut doc = Document::parse("styles.xml", xml).unwrap();
        let mut sheet = StyleSheet::new(&mut doc.root);
        let spec = StyleSpec {
            bold: Some(true),
            number_format: Some("#,##0.00".into()),
            fill_color: Some("FFFF00".into()),
            ..StyleSpec::default()
        };
        assert_eq!(sheet.derive(0, &spec).unwrap(), 1);
        assert_eq!(sheet.number_format("0.000"), 164);
        assert_eq!(sheet.number_format("0.000"), 164);
        let mut out = String::new();
        doc.root.write(&mut out);
        assert!(
            out.contains(r#"<font><b/><sz val="11"/><name val="Calibri"/></font>"#),
            "{out}"
        );
        assert!(out.contains(r#"<xf numFmtId="4" fontId="1" fillId="2" borderId="0" xfId="0" applyFont="1" applyFill="1" applyNumberFormat="1"/>"#), "{out}");
        assert!(out.starts_with(r#"<styleSheet><numFmts count="1"><numFmt numFmtId="164" formatCode="0.000"/></numFmts>"#), "{out}");
        assert!(argb("zz").is_err());
    }
}
