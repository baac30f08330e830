//! What the office fuzz targets run (feature `fuzzing`): every tool that reads a format, called
//! as the office pool calls it, on a package given whole or made of a template's parts with
//! some of them replaced by the input.

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};

use atelier_messages::store::ManifestEntry;
use atelier_messages::{ErrorBody, path};
use serde_json::{Value, json};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::{Format, Operations, Selector, StylesOf, blank, describe, map, read, styles};

/// The parts the input replaces, in order, for each format.
fn fuzzed_parts(format: Format) -> &'static [&'static str] {
    match format {
        Format::Docx => &[
            "word/document.xml",
            "word/styles.xml",
            "word/_rels/document.xml.rels",
            "[Content_Types].xml",
        ],
        Format::Pptx => &[
            "ppt/slides/slide1.xml",
            "ppt/presentation.xml",
            "ppt/_rels/presentation.xml.rels",
            "ppt/slides/_rels/slide1.xml.rels",
            "ppt/slideLayouts/slideLayout1.xml",
            "ppt/theme/theme1.xml",
        ],
        _ => &[
            "xl/worksheets/sheet1.xml",
            "xl/sharedStrings.xml",
            "xl/styles.xml",
            "xl/workbook.xml",
            "xl/_rels/workbook.xml.rels",
        ],
    }
}

/// The template of a format: a new document (a presentation with one slide and its notes).
fn template(format: Format) -> Vec<u8> {
    let bytes = blank(format).unwrap_or_default();
    if format != Format::Pptx {
        return bytes;
    }
    let ops = json!([{"op": "add_slide", "title": "T", "bullets": ["a", "b"], "notes": "n"}]);
    Operations::parse(format, "pptx_operations", &ops)
        .and_then(|ops| ops.apply(bytes.clone()))
        .map(|(deck, _)| deck)
        .unwrap_or(bytes)
}

fn unzip(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(mut archive) = zip::ZipArchive::new(Cursor::new(bytes)) else {
        return out;
    };
    for index in 0..archive.len() {
        let Ok(mut entry) = archive.by_index(index) else {
            continue;
        };
        let name = entry.name().map(|n| n.to_string()).unwrap_or_default();
        let mut content = Vec::new();
        if entry.read_to_end(&mut content).is_ok() {
            out.insert(name, content);
        }
    }
    out
}

/// The package the input stands for: the input itself when it is a zip (`PK`), else the
/// template with its fuzzed parts replaced, in order, by the input's `\0`-separated pieces.
pub(crate) fn package(format: Format, input: &[u8]) -> Vec<u8> {
    if input.starts_with(b"PK") {
        return input.to_vec();
    }
    let mut parts = unzip(&template(format));
    for (name, piece) in fuzzed_parts(format).iter().zip(input.split(|b| *b == 0)) {
        parts.insert((*name).to_string(), piece.to_vec());
    }
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    for (name, content) in &parts {
        if writer.start_file(name.as_str(), options).is_err() || writer.write_all(content).is_err()
        {
            return Vec::new();
        }
    }
    writer
        .finish()
        .map(|cursor| cursor.into_inner())
        .unwrap_or_default()
}

/// Every tool that reads `format`, on `bytes`: `get_file_info`, `get_file_map`, `read_file`
/// (whole and by selector), the styles tool, an edit, and a content review.
pub(crate) fn read_all(format: Format, bytes: &[u8]) -> Vec<Result<(), ErrorBody>> {
    let name = match format {
        Format::Docx => "fuzz.docx",
        Format::Pptx => "fuzz.pptx",
        _ => "fuzz.xlsx",
    };
    let entry = ManifestEntry {
        path: name.into(),
        digest: String::new(),
        size: bytes.len() as u64,
        kind: path::kind_of(name).into(),
    };
    let whole = Selector {
        line_start: 1,
        line_count: 200,
        ..Selector::default()
    };
    let (narrow, of, ops) = match format {
        Format::Docx => (
            Selector {
                section: Some("0".into()),
                ..whole.clone()
            },
            StylesOf::Docx,
            json!([{"op": "replace_text", "search": "a", "replace": "b"}]),
        ),
        Format::Pptx => (
            Selector {
                slide_index: Some(0),
                ..whole.clone()
            },
            StylesOf::Pptx,
            json!([{"op": "add_slide", "title": "More"}]),
        ),
        _ => (
            Selector {
                range: Some("A1:E20".into()),
                ..whole.clone()
            },
            StylesOf::Xlsx,
            json!([{"op": "set_cells", "sheet": "Sheet1", "cells": [{"cell": "B2", "value": 1}]}]),
        ),
    };
    let drop = |r: Result<Value, ErrorBody>| r.map(|_| ());
    let mut out = vec![
        drop(describe(&entry, Some(bytes.to_vec()))),
        drop(map(&entry, bytes.to_vec())),
        drop(read(&entry, bytes.to_vec(), &whole)),
        drop(read(&entry, bytes.to_vec(), &narrow)),
        drop(styles(&entry, bytes.to_vec(), of)),
    ];
    let edit = Operations::parse(format, "operations", &ops)
        .and_then(|ops| ops.apply(bytes.to_vec()))
        .map(|_| ());
    out.push(edit);
    let _ = super::review_diff(name, None, Some(bytes), 5);
    out
}
