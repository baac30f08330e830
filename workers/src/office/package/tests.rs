//! Package checks and edits, and the hostile packages other openers are tested with.

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::guard::CFB_MAGIC;
use super::opc::{relative_target, rels_name, resolve};
use super::*;
use crate::office::xml::Element;

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(9));
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, content) in entries {
        writer.start_file(*name, options).unwrap();
        writer.write_all(content).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

/// Every entry of a zip, decompressed.
pub(crate) fn parts(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes.to_vec())).unwrap();
    let mut out = BTreeMap::new();
    for i in 0..archive.len() {
        let mut file = archive.by_index(i).unwrap();
        let mut content = Vec::new();
        file.read_to_end(&mut content).unwrap();
        out.insert(
            file.name().map(|n| n.to_string()).unwrap_or_default(),
            content,
        );
    }
    out
}

/// Names of the parts whose content differs (or exists on one side only).
pub(crate) fn changed_parts(before: &[u8], after: &[u8]) -> Vec<String> {
    let (a, b) = (parts(before), parts(after));
    let mut names: Vec<String> = a.keys().chain(b.keys()).cloned().collect();
    names.sort();
    names.dedup();
    names.into_iter().filter(|n| a.get(n) != b.get(n)).collect()
}

/// A new workbook (one sheet, `Sheet1`) that also has a calculation chain, as Excel saves one
/// with formulas.
pub(crate) fn xlsx_with_calc_chain() -> Vec<u8> {
    let mut entries = parts(&crate::office::xlsx::blank_workbook().unwrap());
    let mut insert = |part: &str, before: &str, xml: &str| {
        let text = String::from_utf8(entries[part].clone()).unwrap();
        let text = text.replace(before, &format!("{xml}{before}"));
        entries.insert(part.to_string(), text.into_bytes());
    };
    insert(
        "[Content_Types].xml",
        "</Types>",
        r#"<Override PartName="/xl/calcChain.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.calcChain+xml"/>"#,
    );
    insert(
        "xl/_rels/workbook.xml.rels",
        "</Relationships>",
        r#"<Relationship Id="rId9" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/calcChain" Target="calcChain.xml"/>"#,
    );
    entries.insert(
        "xl/calcChain.xml".to_string(),
        br#"<calcChain xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><c r="A1" i="1"/></calcChain>"#.to_vec(),
    );
    let entries: Vec<(&str, &[u8])> = entries
        .iter()
        .map(|(name, content)| (name.as_str(), content.as_slice()))
        .collect();
    zip_of(&entries)
}

/// An OLE compound file, as a password-protected Office file is stored.
pub(crate) fn encrypted_file() -> Vec<u8> {
    let mut bytes = CFB_MAGIC.to_vec();
    bytes.resize(4096, 0);
    bytes
}

/// Spreadsheet files every opener must refuse with `FILE_READ_FAILED`: (the words the refusal
/// contains, the file's bytes). A zip bomb, a part declaring a DTD, an encrypted (OLE) file and
/// a truncated archive.
pub(crate) fn hostile_xlsx_files() -> Vec<(&'static str, Vec<u8>)> {
    let zeros = vec![0u8; 20 * 1024 * 1024];
    let bomb = zip_of(&[("xl/worksheets/sheet1.xml", &zeros)]);
    let dtd = zip_of(&[(
        "xl/workbook.xml",
        b"<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"b\">]><x>&a;</x>",
    )]);
    let whole = zip_of(&[("xl/workbook.xml", b"<workbook/>")]);
    let truncated = whole[..whole.len() / 2].to_vec();
    vec![
        ("compression ratio", bomb),
        ("DTD", dtd),
        ("password-protected", encrypted_file()),
        ("not a valid zip package", truncated),
    ]
}

#[test]
fn refuses_bombs_dtds_encryption_and_truncation() {
    for (refusal, bytes) in hostile_xlsx_files() {
        let err = Package::open(bytes, "XLSX").err().unwrap();
        assert_eq!(err.code, ErrorCode::FileReadFailed, "{refusal}");
        assert!(err.message.contains(refusal), "{refusal}: {}", err.message);
    }
}

#[test]
fn refuses_entries_larger_than_declared() {
    let mut bytes = zip_of(&[("a.xml", b"<a>0123456789</a>")]);
    // Lower the declared uncompressed size (17 -> 5) in the local header and central directory.
    let patch = |bytes: &mut Vec<u8>, signature: [u8; 4], offset: usize| {
        let at = bytes.windows(4).position(|w| w == signature).unwrap() + offset;
        bytes[at..at + 4].copy_from_slice(&5u32.to_le_bytes());
    };
    patch(&mut bytes, [0x50, 0x4B, 0x03, 0x04], 22);
    patch(&mut bytes, [0x50, 0x4B, 0x01, 0x02], 24);
    let err = Package::open(bytes, "DOCX").err().unwrap();
    assert_eq!(err.code, ErrorCode::FileReadFailed);
}

#[test]
fn edits_copy_untouched_entries_raw() {
    let bytes = zip_of(&[
        ("[Content_Types].xml", b"<Types/>"),
        ("a.xml", b"<a>1</a>"),
        ("b.bin", b"\x00\x01"),
    ]);
    let mut package = Package::open(bytes, "DOCX").unwrap();
    package.doc_mut("a.xml").unwrap().root.set_text("2");
    package.put("c.xml", Document::new(Element::new("c", &[])));
    package.remove("b.bin");
    let out = package.finish().unwrap();
    let mut reread = Package::open(out, "DOCX").unwrap();
    assert_eq!(
        reread.part_names(),
        vec!["[Content_Types].xml", "a.xml", "c.xml"]
    );
    assert_eq!(reread.doc("a.xml").unwrap().root.text(), "2");
    assert_eq!(reread.bytes("[Content_Types].xml").unwrap(), b"<Types/>");
}

#[test]
fn resolves_relationship_targets() {
    assert_eq!(
        resolve("word/document.xml", "media/image1.png"),
        "word/media/image1.png"
    );
    assert_eq!(
        resolve("ppt/slides/slide1.xml", "../slideLayouts/slideLayout2.xml"),
        "ppt/slideLayouts/slideLayout2.xml"
    );
    assert_eq!(resolve("", "word/document.xml"), "word/document.xml");
    assert_eq!(
        resolve("xl/workbook.xml", "/xl/worksheets/sheet1.xml"),
        "xl/worksheets/sheet1.xml"
    );
    assert_eq!(
        relative_target("ppt/slides/slide4.xml", "ppt/slideLayouts/slideLayout2.xml"),
        "../slideLayouts/slideLayout2.xml"
    );
    assert_eq!(
        relative_target("xl/workbook.xml", "xl/worksheets/sheet4.xml"),
        "worksheets/sheet4.xml"
    );
    assert_eq!(
        rels_name("word/document.xml"),
        "word/_rels/document.xml.rels"
    );
    assert_eq!(rels_name(""), "_rels/.rels");
}

#[test]
fn sheet_xml_the_readers_would_disagree_on_is_refused() {
    let sheet = |cells: &str| {
        let mut entries = parts(&crate::office::xlsx::blank_workbook().unwrap());
        let xml = String::from_utf8(entries["xl/worksheets/sheet1.xml"].clone()).unwrap();
        let xml = xml.replace(
            "<sheetData/>",
            &format!("<sheetData><row r=\"1\">{cells}</row></sheetData>"),
        );
        entries.insert("xl/worksheets/sheet1.xml".into(), xml.into_bytes());
        let list: Vec<(&str, &[u8])> = entries
            .iter()
            .map(|(name, content)| (name.as_str(), content.as_slice()))
            .collect();
        Package::open(zip_of(&list), "XLSX").err()
    };
    // Found by fuzzing: calamine's value reader ends the first cell's `is` at the second
    // cell's `</is>` and then reads a cell at column HGIRC; a depth-counting reader does not.
    let found = r#"<c r="A1" t="inlineStr"><is><t>x</p></is#</c><c r="B1" t="inlineStr"><is><t>y</t></is></c><c r="hgirC1"><v>1</v></c>"#;
    for cells in [
        found,
        r#"<c r="A1"><v><v>1</v></v></c>"#,
        r#"<c r="A1"><f>1<f>2</f></f></c>"#,
        r#"<c r="A1"><v>1</w></c>"#,
        r#"<c r="A1"><v>1</v></c></x>"#,
        r#"<c r="A1" r="B1"><v>1</v></c>"#,
        r#"<c r="B1" r="XFD1048576"><v>2</v></c>"#,
        r#"<c r="B1" s><v>2</v></c><c r="XFD1048576"><v>3</v></c>"#,
    ] {
        let err = sheet(cells).unwrap_or_else(|| panic!("{cells}: opened"));
        assert_eq!(
            err.code,
            ErrorCode::FileReadFailed,
            "{cells}: {}",
            err.message
        );
        assert!(err.message.contains("damaged"), "{}", err.message);
    }
    let fine = r#"<c r="A1" t="inlineStr"><is><r><t>a</t></r><t>b</t></is></c><c r="B1"><f>A1</f><v>1</v></c>"#;
    assert!(sheet(fine).is_none());
}
