//! The file readers of the checks on CSV cells and slide titles: RFC 4180 records, and the title
//! placeholders of a pptx's slides in the presentation's order.

use std::io::{Cursor, Read};

use anyhow::{Context, bail};
use quick_xml::Reader as XmlReader;
use quick_xml::events::{BytesStart, Event};

/// The records of a CSV: `,` between fields, `"` around a field that may then hold commas,
/// line breaks and `""` for a quote (RFC 4180); `\r\n` ends a record like `\n`; blank lines
/// are not records; a leading BOM is dropped.
pub(crate) fn csv_records(text: &str) -> Vec<Vec<String>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut records = Vec::new();
    let mut record: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    // Whether the record so far had a quoted field (then it is not a blank line).
    let mut had_quotes = false;
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '"' if quoted => {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            }
            '"' if field.is_empty() => {
                quoted = true;
                had_quotes = true;
            }
            ',' if !quoted => record.push(std::mem::take(&mut field)),
            '\n' if !quoted => {
                record.push(std::mem::take(&mut field));
                end_record(&mut records, std::mem::take(&mut record), had_quotes);
                had_quotes = false;
            }
            '\r' if !quoted => {}
            _ => field.push(ch),
        }
    }
    record.push(field);
    end_record(&mut records, record, had_quotes);
    records
}

/// Keeps `record` unless it is a blank line.
fn end_record(records: &mut Vec<Vec<String>>, record: Vec<String>, had_quotes: bool) {
    let blank = !had_quotes && record.len() == 1 && record[0].trim().is_empty();
    if !blank {
        records.push(record);
    }
}

/// The field of data row `row` (1-based, after the header row) in the column named `column`
/// (header names compared trimmed); a row shorter than the header reads as empty there.
pub(crate) fn csv_cell(bytes: &[u8], row: usize, column: &str) -> anyhow::Result<String> {
    let records = csv_records(&String::from_utf8_lossy(bytes));
    let Some(header) = records.first() else {
        bail!("the file is empty");
    };
    let Some(at) = header.iter().position(|name| name.trim() == column.trim()) else {
        bail!("no column {column:?} (the header: {header:?})");
    };
    let data_rows = records.len() - 1;
    let Some(record) = records.get(row).filter(|_| row > 0) else {
        bail!("no data row {row} (the file has {data_rows})");
    };
    Ok(record.get(at).cloned().unwrap_or_default())
}

/// The title of each slide, in the presentation's order (`p:sldIdLst` of
/// `ppt/presentation.xml`): the text of its title placeholder (`p:ph` of type `title` or
/// `ctrTitle`), paragraphs joined with `\n`; `None` for a slide without one.
pub(crate) fn pptx_titles(bytes: &[u8]) -> anyhow::Result<Vec<Option<String>>> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).context("not a pptx (zip)")?;
    let presentation = part(&mut archive, "ppt/presentation.xml")?;
    let relationships = part(&mut archive, "ppt/_rels/presentation.xml.rels")?;
    let targets = relationship_targets(&relationships)?;
    let mut titles = Vec::new();
    for id in slide_ids(&presentation)? {
        let Some(target) = targets.iter().find(|(rid, _)| *rid == id).map(|(_, t)| t) else {
            bail!("slide relationship {id} is not in ppt/_rels/presentation.xml.rels");
        };
        let name = match target.strip_prefix('/') {
            Some(absolute) => absolute.to_string(),
            None => format!("ppt/{target}"),
        };
        titles.push(slide_title(&part(&mut archive, &name)?)?);
    }
    Ok(titles)
}

fn part(archive: &mut zip::ZipArchive<Cursor<&[u8]>>, name: &str) -> anyhow::Result<String> {
    let mut xml = String::new();
    archive
        .by_name(name)
        .with_context(|| format!("no {name}"))?
        .read_to_string(&mut xml)
        .with_context(|| format!("{name} is not UTF-8"))?;
    Ok(xml)
}

/// An attribute's value as written (the ids, targets and placeholder types read here hold no
/// entity references).
fn attribute(element: &BytesStart<'_>, key: &str) -> Option<String> {
    element
        .attributes()
        .flatten()
        .find(|attr| attr.key.into_inner() == key)
        .map(|attr| attr.value.into_owned())
}

/// The `r:id` of each `p:sldId`, in order.
fn slide_ids(xml: &str) -> anyhow::Result<Vec<String>> {
    let mut reader = XmlReader::from_str(xml);
    let mut ids = Vec::new();
    loop {
        match reader
            .read_event()
            .context("ppt/presentation.xml is not well-formed")?
        {
            Event::Start(e) | Event::Empty(e) if e.name().into_inner() == "p:sldId" => {
                ids.extend(attribute(&e, "r:id"));
            }
            Event::Eof => return Ok(ids),
            _ => {}
        }
    }
}

/// (Id, Target) of each `Relationship`.
fn relationship_targets(xml: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut reader = XmlReader::from_str(xml);
    let mut targets = Vec::new();
    loop {
        match reader
            .read_event()
            .context("ppt/_rels/presentation.xml.rels is not well-formed")?
        {
            Event::Start(e) | Event::Empty(e) if e.name().into_inner() == "Relationship" => {
                if let (Some(id), Some(target)) = (attribute(&e, "Id"), attribute(&e, "Target")) {
                    targets.push((id, target));
                }
            }
            Event::Eof => return Ok(targets),
            _ => {}
        }
    }
}

/// A shape (`p:sp`) being read: whether it is the title placeholder, and its paragraphs.
#[derive(Default)]
struct Shape {
    title: bool,
    paragraphs: Vec<String>,
}

/// The text of the first title placeholder of a slide part.
fn slide_title(xml: &str) -> anyhow::Result<Option<String>> {
    let mut reader = XmlReader::from_str(xml);
    let mut shapes: Vec<Shape> = Vec::new();
    let mut in_text = false;
    loop {
        let event = reader.read_event().context("a slide is not well-formed")?;
        match event {
            Event::Start(e) => match e.name().into_inner() {
                "p:sp" => shapes.push(Shape::default()),
                "a:p" => new_paragraph(&mut shapes),
                "a:t" => in_text = true,
                "p:ph" => mark_title(&mut shapes, &e),
                _ => {}
            },
            Event::Empty(e) => match e.name().into_inner() {
                "p:ph" => mark_title(&mut shapes, &e),
                "a:br" => push_text(&mut shapes, "\n"),
                "a:p" => new_paragraph(&mut shapes),
                _ => {}
            },
            Event::End(e) => match e.name().into_inner() {
                "a:t" => in_text = false,
                "p:sp" => {
                    if let Some(shape) = shapes.pop().filter(|s| s.title) {
                        return Ok(Some(shape.paragraphs.join("\n")));
                    }
                }
                _ => {}
            },
            Event::Text(t) if in_text => push_text(&mut shapes, &t),
            Event::GeneralRef(r) if in_text => push_text(&mut shapes, &resolve_reference(&r)),
            Event::Eof => return Ok(None),
            _ => {}
        }
    }
}

fn mark_title(shapes: &mut [Shape], placeholder: &BytesStart<'_>) {
    let kind = attribute(placeholder, "type");
    if let Some(shape) = shapes.last_mut() {
        shape.title |= matches!(kind.as_deref(), Some("title" | "ctrTitle"));
    }
}

fn new_paragraph(shapes: &mut [Shape]) {
    if let Some(shape) = shapes.last_mut() {
        shape.paragraphs.push(String::new());
    }
}

/// Adds text to the innermost shape's last paragraph.
fn push_text(shapes: &mut [Shape], text: &str) {
    if let Some(paragraph) = shapes.last_mut().and_then(|s| s.paragraphs.last_mut()) {
        paragraph.push_str(text);
    }
}

/// `amp` → `&`, `#65`/`#x41` → `A`; anything else kept as written.
pub(crate) fn resolve_reference(name: &str) -> String {
    let named = match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    };
    let numeric = || {
        let code = name.strip_prefix('#')?;
        let value = match code.strip_prefix('x') {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => code.parse().ok()?,
        };
        char::from_u32(value)
    };
    named
        .or_else(numeric)
        .map(String::from)
        .unwrap_or_else(|| format!("&{name};"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_records_follow_rfc_4180() {
        let text = "\u{feff}a,\"b, c\"\r\n1,\"say \"\"hi\"\"\nthere\"\r\n\r\n\"\"\n2,";
        assert_eq!(
            csv_records(text),
            vec![
                vec!["a", "b, c"],
                vec!["1", "say \"hi\"\nthere"],
                vec![""],
                vec!["2", ""],
            ]
        );
        assert!(csv_records("").is_empty());
    }

    #[test]
    fn csv_cells_by_row_and_column_name() -> anyhow::Result<()> {
        let csv = b"species, birds\nAdelie,152\nGentoo\n";
        assert_eq!(csv_cell(csv, 1, "birds")?, "152");
        assert_eq!(csv_cell(csv, 2, "species")?, "Gentoo");
        assert_eq!(csv_cell(csv, 2, "birds")?, "");
        assert!(csv_cell(csv, 3, "birds").is_err());
        assert!(csv_cell(csv, 0, "birds").is_err());
        assert!(csv_cell(csv, 1, "count").is_err());
        Ok(())
    }

    #[test]
    fn a_slide_title_is_its_title_placeholder_text() -> anyhow::Result<()> {
        let slide = r#"<p:sld><p:cSld><p:spTree>
            <p:sp><p:nvSpPr><p:nvPr><p:ph type="body" idx="1"/></p:nvPr></p:nvSpPr>
              <p:txBody><a:p><a:r><a:t>Body</a:t></a:r></a:p></p:txBody></p:sp>
            <p:sp><p:nvSpPr><p:nvPr><p:ph type="ctrTitle"/></p:nvPr></p:nvSpPr>
              <p:txBody><a:p><a:r><a:t>Q4 </a:t></a:r><a:r><a:t>R&amp;D</a:t></a:r><a:br/><a:r><a:t>Review</a:t></a:r></a:p></p:txBody></p:sp>
            </p:spTree></p:cSld></p:sld>"#;
        assert_eq!(slide_title(slide)?.as_deref(), Some("Q4 R&D\nReview"));
        let untitled = r#"<p:sld><p:sp><p:txBody><a:p><a:r><a:t>Hi</a:t></a:r></a:p></p:txBody></p:sp></p:sld>"#;
        assert_eq!(slide_title(untitled)?, None);
        Ok(())
    }

    #[test]
    fn slide_titles_of_a_real_deck_in_order() -> anyhow::Result<()> {
        let deck = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/keenbench/context/keenbench_pitch_deck.pptx"
        ))?;
        let titles = pptx_titles(&deck)?;
        let titles: Vec<Option<&str>> = titles.iter().map(Option::as_deref).collect();
        assert_eq!(
            titles,
            vec![
                Some("KeenBench"),
                Some("Problem"),
                Some("Solution"),
                Some("Team (Fictional)"),
                None
            ]
        );
        Ok(())
    }
}
