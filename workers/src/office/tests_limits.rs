//! Crafted files that would make a reader abort the process (an allocation sized by the file's
//! own numbers) or read without end, each built here by code: every tool that reads the format
//! refuses them with `FILE_TOO_COMPLEX`, or `FILE_READ_FAILED` for XML the readers would read
//! differently (the error kind, not its words), quickly. The refusals
//! run in a child process (this test binary again) that prints its peak memory: the child must
//! exit normally (an abort would kill it) and stay small. Legitimate workbooks of some size
//! still open.

use std::io::{Cursor, Write};
use std::time::{Duration, Instant};

use atelier_messages::store::ManifestEntry;
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde_json::{Value, json};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::limits::{SHEET_CELLS, WORKBOOK_CELLS};
use super::package::tests::parts;
use super::{
    Format, Operations, Selector, StylesOf, blank, blank_workbook, describe, map, read,
    review_diff, styles,
};
use crate::files::sha256_hex;

/// The child's environment variable naming the case to run.
const CASE_VAR: &str = "ATELIER_LIMITS_CASE";
/// The most a child may use at its peak refusing a case (the test binary itself included).
const CHILD_PEAK_KIB: u64 = 400 * 1024;
/// The most processor time a child may spend refusing a case with every tool (a debug build).
const REFUSAL_CPU: Duration = Duration::from_secs(20);

fn entry(name: &str, bytes: &[u8]) -> ManifestEntry {
    ManifestEntry {
        path: name.into(),
        digest: sha256_hex(bytes),
        size: bytes.len() as u64,
        kind: path::kind_of(name).into(),
    }
}

/// A zip of `entries`, deflated.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let options = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(6));
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, content) in entries {
        writer.start_file(*name, options).unwrap();
        writer.write_all(content).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

/// The blank workbook with its sheet replaced by `sheet_data` (the inside of `sheetData`) and
/// `extra` parts added (an `sst` is also declared in the workbook's relationships).
fn xlsx(dimension: &str, sheet_data: &str, extra: &[(&str, String)]) -> Vec<u8> {
    let mut entries = parts(&blank_workbook().unwrap());
    let sheet = String::from_utf8(entries["xl/worksheets/sheet1.xml"].clone()).unwrap();
    let sheet = sheet
        .replace(
            "<dimension ref=\"A1\"/>",
            &format!("<dimension ref=\"{dimension}\"/>"),
        )
        .replace(
            "<sheetData/>",
            &format!("<sheetData>{sheet_data}</sheetData>"),
        );
    entries.insert("xl/worksheets/sheet1.xml".into(), sheet.into_bytes());
    for (name, content) in extra {
        entries.insert((*name).to_string(), content.clone().into_bytes());
    }
    if entries.contains_key("xl/sharedStrings.xml") {
        let rels = String::from_utf8(entries["xl/_rels/workbook.xml.rels"].clone()).unwrap();
        let rels = rels.replace("</Relationships>", r#"<Relationship Id="rId9" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" Target="sharedStrings.xml"/></Relationships>"#);
        entries.insert("xl/_rels/workbook.xml.rels".into(), rels.into_bytes());
    }
    let list: Vec<(&str, &[u8])> = entries
        .iter()
        .map(|(name, content)| (name.as_str(), content.as_slice()))
        .collect();
    zip_of(&list)
}

const SST_HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main""#;

/// A workbook whose shared strings claim 4,294,967,295 entries (calamine reserves them all).
fn shared_strings_lie() -> Vec<u8> {
    let sst = format!(r#"{SST_HEAD} count="1" uniqueCount="4294967295"><si><t>a</t></si></sst>"#);
    xlsx(
        "A1",
        r#"<row r="1"><c r="A1" t="s"><v>0</v></c></row>"#,
        &[("xl/sharedStrings.xml", sst)],
    )
}

/// A workbook with a cell at A1 and one at XFD1048576: 2^34 dense cells.
fn corners() -> Vec<u8> {
    xlsx(
        "A1:XFD1048576",
        r#"<row r="1"><c r="A1"><v>1</v></c></row><row r="1048576"><c r="XFD1048576"><v>2</v></c></row>"#,
        &[],
    )
}

/// A workbook with a cell far outside Excel's grid.
fn outside_grid() -> Vec<u8> {
    xlsx(
        "A1",
        r#"<row r="1"><c r="A1"><v>1</v></c><c r="ZZZZZ99999999"><v>2</v></c></row>"#,
        &[],
    )
}

/// A workbook whose cells, without references, are counted past the last column.
fn counted_past_the_grid() -> Vec<u8> {
    let cells = "<c><v>1</v></c>".repeat(16_385);
    xlsx("A1", &format!("<row>{cells}</row>"), &[])
}

/// A shared formula whose group index makes calamine size a table by it.
fn shared_formula_index() -> Vec<u8> {
    xlsx(
        "A1:A2",
        r#"<row r="1"><c r="A1"><f t="shared" ref="A1:A2" si="4000000000">1+1</f><v>2</v></c></row>"#,
        &[],
    )
}

/// A shared formula of 1 MiB copied into 1,000 cells: 2 GiB of text on read.
fn shared_formula_copies() -> Vec<u8> {
    let anchor = format!(
        r#"<row r="1"><c r="A1"><f t="shared" ref="A1:A1000" si="0">{}</f><v>1</v></c></row>"#,
        "1+".repeat(512 * 1024) + "1"
    );
    let copies: String = (2..=1000)
        .map(|r| format!(r#"<row r="{r}"><c r="A{r}"><f t="shared" si="0"/><v>1</v></c></row>"#))
        .collect();
    xlsx("A1:A1000", &(anchor + &copies), &[])
}

/// A workbook listing its one sheet part 3,000 times.
fn repeated_sheets() -> Vec<u8> {
    let mut entries = parts(&blank_workbook().unwrap());
    let sheets: String = (1..=3000)
        .map(|n| format!(r#"<sheet name="S{n}" sheetId="{n}" r:id="rId1"/>"#))
        .collect();
    let workbook = String::from_utf8(entries["xl/workbook.xml"].clone()).unwrap();
    let workbook = workbook.replace(r#"<sheet name="Sheet1" sheetId="1" r:id="rId1"/>"#, &sheets);
    entries.insert("xl/workbook.xml".into(), workbook.into_bytes());
    let list: Vec<(&str, &[u8])> = entries
        .iter()
        .map(|(name, content)| (name.as_str(), content.as_slice()))
        .collect();
    zip_of(&list)
}

const P_NS: &str = r#"xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main""#;
const REL_SLIDE: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide";

/// A presentation of one slide part listed `refs` times, through `rels` relationships.
fn slide_references(refs: usize, rels: usize) -> Vec<u8> {
    let ids: String = (0..refs)
        .map(|n| {
            format!(
                r#"<p:sldId id="{}" r:id="rId{}"/>"#,
                256 + n,
                100 + n % rels
            )
        })
        .collect();
    let presentation = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:presentation {P_NS}><p:sldIdLst>{ids}</p:sldIdLst><p:sldSz cx="9144000" cy="6858000"/><p:notesSz cx="6858000" cy="9144000"/></p:presentation>"#
    );
    let relationships: String = (0..rels)
        .map(|n| {
            format!(
                r#"<Relationship Id="rId{}" Type="{REL_SLIDE}" Target="slides/slide1.xml"/>"#,
                100 + n
            )
        })
        .collect();
    let presentation_rels = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{relationships}</Relationships>"#
    );
    let slide = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:sld {P_NS}><p:cSld><p:spTree><p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/></p:spTree></p:cSld></p:sld>"#
    );
    zip_of(&[
        (
            "[Content_Types].xml",
            br#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/></Types>"#,
        ),
        (
            "_rels/.rels",
            br#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="ppt/presentation.xml"/></Relationships>"#,
        ),
        ("ppt/presentation.xml", presentation.as_bytes()),
        ("ppt/_rels/presentation.xml.rels", presentation_rels.as_bytes()),
        ("ppt/slides/slide1.xml", slide.as_bytes()),
    ])
}

/// A document whose body nests content controls 10,000 deep (trees drop recursively).
fn deep_document() -> Vec<u8> {
    let mut entries = parts(&blank(Format::Docx).unwrap());
    let document = String::from_utf8(entries["word/document.xml"].clone()).unwrap();
    let nested = "<w:sdt><w:sdtContent>".repeat(10_000)
        + "<w:p/>"
        + &"</w:sdtContent></w:sdt>".repeat(10_000);
    let document = document.replacen("<w:body>", &format!("<w:body>{nested}"), 1);
    assert!(
        document.contains("sdtContent"),
        "the blank document has a body"
    );
    entries.insert("word/document.xml".into(), document.into_bytes());
    let list: Vec<(&str, &[u8])> = entries
        .iter()
        .map(|(name, content)| (name.as_str(), content.as_slice()))
        .collect();
    zip_of(&list)
}

/// Found by fuzzing, in each of `rows` rows: a stray end tag in an inline string makes
/// calamine's value reader end it at the next cell's `</is>` and read a cell at column HGIRC
/// (3,785,395 columns of dense cells a row, 121 GB for 1,000 rows), which a pass counting depth
/// never reaches. The package pass refuses the sheet as damaged.
fn stray_end_tags(rows: u32) -> Vec<u8> {
    let data: String = (1..=rows)
        .map(|r| {
            format!(
                r#"<row r="{r}"><c r="A{r}" t="inlineStr"><is><t>x</p></is#</c><c r="B{r}" t="inlineStr"><is><t>y</t></is></c><c r="hgirC{r}"><v>1</v></c></row>"#
            )
        })
        .collect();
    xlsx("A1", &data, &[])
}

/// A crafted file, the tools to try it with, and the code each must answer.
struct Case {
    name: &'static str,
    path: &'static str,
    bytes: fn() -> Vec<u8>,
    code: ErrorCode,
}

/// Every crafted file.
fn cases() -> Vec<Case> {
    let mut all = package_cases();
    all.extend(ods_cases());
    all.extend(xls_cases());
    all
}

/// Crafted xlsx, docx and pptx packages.
fn package_cases() -> Vec<Case> {
    let case = |name, path, bytes, code| Case {
        name,
        path,
        bytes,
        code,
    };
    use ErrorCode::FileTooComplex;
    vec![
        case(
            "shared_strings_lie",
            "lie.xlsx",
            shared_strings_lie as fn() -> Vec<u8>,
            FileTooComplex,
        ),
        case("corners", "corners.xlsx", corners, FileTooComplex),
        case("outside_grid", "outside.xlsx", outside_grid, FileTooComplex),
        case(
            "counted_past_the_grid",
            "counted.xlsx",
            counted_past_the_grid,
            FileTooComplex,
        ),
        case(
            "shared_formula_index",
            "si.xlsx",
            shared_formula_index,
            FileTooComplex,
        ),
        case(
            "shared_formula_copies",
            "copies.xlsx",
            shared_formula_copies,
            FileTooComplex,
        ),
        case(
            "repeated_sheets",
            "sheets.xlsx",
            repeated_sheets,
            FileTooComplex,
        ),
        case(
            "slides_100000",
            "deck.pptx",
            || slide_references(100_000, 100_000),
            FileTooComplex,
        ),
        case(
            "slides_one_rel",
            "deck.pptx",
            || slide_references(100_000, 1),
            FileTooComplex,
        ),
        case(
            "slides_60000",
            "deck.pptx",
            || slide_references(60_000, 60_000),
            FileTooComplex,
        ),
        case("deep_document", "deep.docx", deep_document, FileTooComplex),
        case(
            "stray_end_tags",
            "stray.xlsx",
            || stray_end_tags(1),
            ErrorCode::FileReadFailed,
        ),
        case(
            "stray_end_tags_1000_rows",
            "stray1000.xlsx",
            || stray_end_tags(1000),
            ErrorCode::FileReadFailed,
        ),
    ]
}

/// Runs every tool that reads `path`'s format on `bytes`; each must refuse with `code`.
fn refuse_everywhere(path: &str, bytes: &[u8], code: ErrorCode) {
    let e = entry(path, bytes);
    let format = Format::of(path).unwrap();
    let selector = Selector {
        line_start: 1,
        line_count: 200,
        ..Selector::default()
    };
    let ranged = Selector {
        range: Some("A1:C3".into()),
        ..selector.clone()
    };
    let mut answers: Vec<(&str, Result<Value, ErrorBody>)> = vec![
        ("get_file_info", describe(&e, Some(bytes.to_vec()))),
        ("get_file_map", map(&e, bytes.to_vec())),
        ("read_file", read(&e, bytes.to_vec(), &selector)),
    ];
    let edit = match format {
        Format::Xlsx => Some(json!([{"op": "ensure_sheet", "sheet": "More"}])),
        Format::Docx => Some(json!([{"op": "replace_text", "search": "a", "replace": "b"}])),
        Format::Pptx => Some(json!([{"op": "add_slide", "title": "More"}])),
        _ => None,
    };
    match format {
        Format::Xlsx => {
            answers.push(("read_file range", read(&e, bytes.to_vec(), &ranged)));
            answers.push((
                "xlsx_get_styles",
                styles(&e, bytes.to_vec(), StylesOf::Xlsx),
            ));
        }
        Format::Docx => answers.push((
            "docx_get_styles",
            styles(&e, bytes.to_vec(), StylesOf::Docx),
        )),
        Format::Pptx => answers.push((
            "pptx_get_styles",
            styles(&e, bytes.to_vec(), StylesOf::Pptx),
        )),
        _ => {}
    }
    if let Some(ops) = edit {
        let parsed = Operations::parse(format, "operations", &ops).unwrap();
        answers.push((
            "operations",
            parsed.apply(bytes.to_vec()).map(|_| Value::Null),
        ));
    }
    for (tool, answer) in answers {
        match answer {
            Err(error) => assert_eq!(error.code, code, "{path} {tool}: {}", error.message),
            Ok(value) => panic!("{path} {tool}: read a crafted file: {value:.200}"),
        }
    }
    let diff = serde_json::to_value(review_diff(path, None, Some(bytes), 5)).unwrap();
    let reason = diff["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&format!("{code}:")),
        "{path} review: {diff:.300}"
    );
}

/// Processor time (user and system) of `/proc/<who>/stat`: `self` or `thread-self`.
fn cpu_time(who: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{who}/stat")).unwrap_or_default();
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    // utime and stime, in clock ticks (100 a second on Linux).
    let ticks = fields.get(11).unwrap_or(&0) + fields.get(12).unwrap_or(&0);
    Duration::from_millis(ticks * 10)
}

/// Peak resident memory of this process (KiB).
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The child: builds the case named by [`CASE_VAR`], refuses it everywhere, prints its peak
/// (its report is its output).
#[test]
#[allow(clippy::print_stdout)]
#[ignore = "run by crafted_files_are_refused_in_a_child_process"]
fn limits_child() {
    let Ok(name) = std::env::var(CASE_VAR) else {
        return;
    };
    let case = cases().into_iter().find(|c| c.name == name).unwrap();
    let bytes = (case.bytes)();
    let (started, cpu) = (Instant::now(), cpu_time("self"));
    refuse_everywhere(case.path, &bytes, case.code);
    println!(
        "case={} bytes={} ms={} cpu_ms={} peak_kib={}",
        case.name,
        bytes.len(),
        started.elapsed().as_millis(),
        (cpu_time("self") - cpu).as_millis(),
        peak_kib()
    );
}

/// Prints each child's report (what the refusals cost) for `--nocapture` runs.
#[test]
#[allow(clippy::print_stdout)]
fn crafted_files_are_refused_in_a_child_process() {
    // The running binary itself, even if a build has replaced the file since it started.
    let exe = "/proc/self/exe";
    for case in cases() {
        let output = std::process::Command::new(exe)
            .args([
                "--exact",
                "office::tests_limits::limits_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CASE_VAR, case.name)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{}: the child died ({:?}): {stdout}\n{stderr}",
            case.name,
            output.status
        );
        let tag = format!("case={} ", case.name);
        let report = stdout
            .lines()
            .find_map(|line| line.find(&tag).map(|at| &line[at..]))
            .unwrap_or_else(|| panic!("{}: no report: {stdout}", case.name));
        let peak: u64 = report
            .rsplit_once("peak_kib=")
            .and_then(|(_, kib)| kib.trim().parse().ok())
            .unwrap();
        assert!(
            peak < CHILD_PEAK_KIB,
            "{}: peak {peak} KiB: {report}",
            case.name
        );
        let cpu: u64 = report
            .split_whitespace()
            .find_map(|field| field.strip_prefix("cpu_ms="))
            .and_then(|ms| ms.parse().ok())
            .unwrap();
        assert!(
            Duration::from_millis(cpu) < REFUSAL_CPU,
            "{}: took {cpu} ms of processor time: {report}",
            case.name
        );
        println!("{report}");
    }
}

#[test]
fn budgets_let_real_sheets_through() {
    assert_eq!(SHEET_CELLS, 8_388_608, "256 MiB of 32-byte cells");
    assert_eq!(WORKBOOK_CELLS, 4 * SHEET_CELLS);
    // 1,048,576 rows of 8 columns fit a sheet; a ninth column does not.
    let ok = xlsx(
        "A1:H1048576",
        r#"<row r="1"><c r="A1"><v>1</v></c></row><row r="1048576"><c r="H1048576"><v>2</v></c></row>"#,
        &[],
    );
    super::package::Package::open(ok, "XLSX").unwrap();
    let over = xlsx(
        "A1:I1048576",
        r#"<row r="1"><c r="A1"><v>1</v></c></row><row r="1048576"><c r="I1048576"><v>2</v></c></row>"#,
        &[],
    );
    let err = super::package::Package::open(over, "XLSX").err().unwrap();
    assert_eq!(err.code, ErrorCode::FileTooComplex, "{}", err.message);
    assert!(err.message.contains("A1:I1048576"), "{}", err.message);
    // Styled empty cells far away cost calamine nothing and are not counted.
    let styled = xlsx(
        "A1:XFD1048576",
        r#"<row r="1"><c r="A1"><v>1</v></c></row><row r="1048576"><c r="XFD1048576" s="0"/></row>"#,
        &[],
    );
    let e = entry("styled.xlsx", &styled);
    let info = describe(&e, Some(styled)).unwrap();
    assert_eq!(info["sheets"][0]["dimensions"], "A1:A1");
}

#[test]
fn a_large_workbook_still_opens() {
    let mut book = rust_xlsxwriter::Workbook::new();
    let sheet = book.add_worksheet().set_name("Data").unwrap();
    let (rows, cols) = (20_000u32, 20u16);
    for col in 0..cols {
        sheet.write_string(0, col, format!("column {col}")).unwrap();
    }
    for row in 1..rows {
        for col in 0..cols - 2 {
            sheet
                .write_number(row, col, f64::from(row) * f64::from(col))
                .unwrap();
        }
        sheet
            .write_string(row, cols - 2, format!("label {}", row % 97))
            .unwrap();
        sheet
            .write_formula(
                row,
                cols - 1,
                format!("=A{}+B{}", row + 1, row + 1).as_str(),
            )
            .unwrap();
    }
    let bytes = book.save_to_buffer().unwrap();
    let e = entry("large.xlsx", &bytes);
    let cpu = cpu_time("thread-self");
    let info = describe(&e, Some(bytes.clone())).unwrap();
    assert_eq!(info["sheets"][0]["dimensions"], "A1:T20000");
    let sheet_map = map(&e, bytes.clone()).unwrap();
    assert_eq!(
        sheet_map["sheets"][0]["chunks"].as_array().unwrap().len(),
        40
    );
    let window = Selector {
        range: Some("A19999:T20000".into()),
        line_start: 1,
        line_count: 200,
        ..Selector::default()
    };
    let tail = read(&e, bytes.clone(), &window).unwrap();
    assert_eq!(tail["rows"][1][1], 19_999);
    assert_eq!(tail["formulas"]["T20000"], "=A20000+B20000");
    let ops = Operations::parse(
        Format::Xlsx,
        "xlsx_operations",
        &json!([{"op": "set_cells", "sheet": "Data", "cells": [{"cell": "V1", "value": 1}]}]),
    )
    .unwrap();
    ops.apply(bytes).unwrap();
    let spent = cpu_time("thread-self") - cpu;
    assert!(spent < Duration::from_secs(60), "{spent:?}");
}

// ODS: calamine reads every table when the workbook opens.

/// An ODS package with `content` as its `content.xml`.
fn ods(table: &str) -> Vec<u8> {
    let content = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2"><office:body><office:spreadsheet>{table}</office:spreadsheet></office:body></office:document-content>"#
    );
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    writer.start_file("mimetype", options).unwrap();
    writer
        .write_all(b"application/vnd.oasis.opendocument.spreadsheet")
        .unwrap();
    let deflated = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    writer
        .start_file("META-INF/manifest.xml", deflated)
        .unwrap();
    writer.write_all(br#"<?xml version="1.0" encoding="UTF-8"?><manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2"><manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.spreadsheet"/><manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/></manifest:manifest>"#).unwrap();
    writer.start_file("content.xml", deflated).unwrap();
    writer.write_all(content.as_bytes()).unwrap();
    writer.finish().unwrap().into_inner()
}

const ODS_ROW: &str = r#"<table:table-row><table:table-cell office:value-type="float" office:value="1"><text:p>1</text:p></table:table-cell><table:table-cell office:value-type="string"><text:p>two</text:p></table:table-cell></table:table-row>"#;

/// One value repeated over every column of every row: calamine copies it 2^34 times.
fn ods_repeated() -> Vec<u8> {
    ods(
        r#"<table:table table:name="Big"><table:table-row table:number-rows-repeated="1048576"><table:table-cell table:number-columns-repeated="16384" office:value-type="float" office:value="1"/></table:table-row></table:table>"#,
    )
}

/// A table that never ends: calamine would read past the end of the part forever.
fn ods_unclosed() -> Vec<u8> {
    ods(&format!(r#"<table:table table:name="Open">{ODS_ROW}"#))
}

/// One cell of two billion spaces (`<text:s text:c="…"/>`).
fn ods_spaces() -> Vec<u8> {
    ods(
        r#"<table:table table:name="Spaces"><table:table-row><table:table-cell office:value-type="string"><text:p>a<text:s text:c="2000000000"/>b</text:p></table:table-cell></table:table-row></table:table>"#,
    )
}

/// Crafted ODS packages.
fn ods_cases() -> Vec<Case> {
    let case = |name, path, bytes, code| Case {
        name,
        path,
        bytes,
        code,
    };
    use ErrorCode::{FileReadFailed, FileTooComplex};
    vec![
        case("ods_repeated", "big.ods", ods_repeated, FileTooComplex),
        case("ods_spaces", "spaces.ods", ods_spaces, FileTooComplex),
        case("ods_unclosed", "open.ods", ods_unclosed, FileReadFailed),
    ]
}

#[test]
fn a_legitimate_ods_still_opens() {
    let ods = ods(&format!(
        r#"<table:table table:name="Data">{ODS_ROW}<table:table-row table:number-rows-repeated="1048574"><table:table-cell table:number-columns-repeated="1024"/></table:table-row></table:table>"#
    ));
    let e = entry("small.ods", &ods);
    let sheet = read(&e, ods.clone(), &Selector::default()).unwrap();
    assert_eq!(sheet["rows"], json!([[1, "two"]]));
}

// XLS: calamine reads the OLE container and every sheet when the workbook opens.

/// BIFF records.
fn record(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut out = kind.to_le_bytes().to_vec();
    out.extend((data.len() as u16).to_le_bytes());
    out.extend(data);
    out
}

/// A BIFF8 workbook stream with one sheet whose records follow `DIMENSIONS` of `dims`
/// (first row, last row + 1, first column, last column + 1) and numbers at `cells`.
fn biff(dims: (u32, u32, u16, u16), cells: &[(u16, u16, f64)]) -> Vec<u8> {
    let bof = |kind: u16| {
        let mut data = vec![0x00, 0x06];
        data.extend(kind.to_le_bytes());
        data.extend([0u8; 12]);
        record(0x0809, &data)
    };
    let mut sheet = bof(0x0010);
    let mut dimensions = dims.0.to_le_bytes().to_vec();
    dimensions.extend(dims.1.to_le_bytes());
    dimensions.extend(dims.2.to_le_bytes());
    dimensions.extend(dims.3.to_le_bytes());
    dimensions.extend([0u8; 2]);
    sheet.extend(record(0x0200, &dimensions));
    for (row, col, value) in cells {
        let mut number = row.to_le_bytes().to_vec();
        number.extend(col.to_le_bytes());
        number.extend(0u16.to_le_bytes());
        number.extend(value.to_le_bytes());
        sheet.extend(record(0x0203, &number));
    }
    sheet.extend(record(0x000A, &[]));
    let name = b"Data";
    let globals_len = |sheet_at: u32| {
        let mut stream = bof(0x0005);
        let mut bound = sheet_at.to_le_bytes().to_vec();
        bound.extend([0, 0, name.len() as u8, 0]);
        bound.extend(name);
        stream.extend(record(0x0085, &bound));
        stream.extend(record(0x000A, &[]));
        stream
    };
    let at = globals_len(0).len() as u32;
    let mut stream = globals_len(at);
    stream.extend(sheet);
    stream.resize(stream.len().max(4096), 0);
    stream
}

const FREE: u32 = 0xFFFF_FFFF;
const END: u32 = 0xFFFF_FFFE;

/// An OLE file (512-byte sectors) holding `stream` as its `Workbook`: sector 0 the FAT, 1 the
/// directory, the stream from 2. `dir_next` is the FAT entry after the directory sector.
fn ole(stream: &[u8], dir_next: u32) -> Vec<u8> {
    let sectors = stream.len().div_ceil(512);
    let mut header = vec![0u8; 512];
    header[..8].copy_from_slice(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]);
    header[24..26].copy_from_slice(&0x3Eu16.to_le_bytes());
    header[26..28].copy_from_slice(&3u16.to_le_bytes());
    header[28..30].copy_from_slice(&0xFFFEu16.to_le_bytes());
    header[30..32].copy_from_slice(&9u16.to_le_bytes());
    header[32..34].copy_from_slice(&6u16.to_le_bytes());
    header[44..48].copy_from_slice(&1u32.to_le_bytes());
    header[48..52].copy_from_slice(&1u32.to_le_bytes());
    header[56..60].copy_from_slice(&4096u32.to_le_bytes());
    header[60..64].copy_from_slice(&END.to_le_bytes());
    header[68..72].copy_from_slice(&END.to_le_bytes());
    for slot in header[76..512].chunks_exact_mut(4) {
        slot.copy_from_slice(&FREE.to_le_bytes());
    }
    header[76..80].copy_from_slice(&0u32.to_le_bytes());
    let mut fat = vec![0xFFFF_FFFDu32, dir_next];
    for n in 0..sectors {
        fat.push(if n + 1 == sectors { END } else { 3 + n as u32 });
    }
    fat.resize(128, FREE);
    let mut directory = vec![0u8; 512];
    let mut entry = |index: usize, name: &str, kind: u8, start: u32, size: u32| {
        let at = index * 128;
        let units: Vec<u16> = name.encode_utf16().chain([0]).collect();
        for (i, unit) in units.iter().enumerate() {
            directory[at + 2 * i..at + 2 * i + 2].copy_from_slice(&unit.to_le_bytes());
        }
        directory[at + 64..at + 66].copy_from_slice(&((units.len() * 2) as u16).to_le_bytes());
        directory[at + 66] = kind;
        directory[at + 68..at + 80].copy_from_slice(&[0xFF; 12]);
        directory[at + 116..at + 120].copy_from_slice(&start.to_le_bytes());
        directory[at + 120..at + 124].copy_from_slice(&size.to_le_bytes());
    };
    entry(0, "Root Entry", 5, END, 0);
    entry(1, "Workbook", 2, 2, stream.len() as u32);
    let mut file = header;
    file.extend(fat.iter().flat_map(|n| n.to_le_bytes()));
    file.extend(directory);
    file.extend(stream);
    file.resize(512 * (3 + sectors), 0);
    file
}

/// Crafted xls files.
fn xls_cases() -> Vec<Case> {
    let case = |name, path, bytes, code| Case {
        name,
        path,
        bytes,
        code,
    };
    use ErrorCode::FileTooComplex;
    vec![
        case(
            "xls_dimensions",
            "dims.xls",
            || ole(&biff((0, 0x7FFF_FFFF, 0, 255), &[(0, 0, 1.0)]), END),
            FileTooComplex,
        ),
        case(
            "xls_corners",
            "corners.xls",
            || ole(&biff((0, 1, 0, 1), &[(0, 0, 1.0), (65_535, 255, 2.0)]), END),
            FileTooComplex,
        ),
        case(
            "xls_loop",
            "loop.xls",
            || ole(&biff((0, 1, 0, 1), &[(0, 0, 1.0)]), 1),
            FileTooComplex,
        ),
    ]
}

#[test]
fn a_legitimate_xls_still_opens() {
    let xls = ole(&biff((0, 2, 0, 2), &[(0, 0, 1.5), (1, 1, 2.5)]), END);
    let e = entry("small.xls", &xls);
    let info = describe(&e, Some(xls.clone())).unwrap();
    assert_eq!(info["sheets"][0]["name"], "Data");
    assert_eq!(info["sheets"][0]["dimensions"], "A1:B2");
    let sheet = read(&e, xls, &Selector::default()).unwrap();
    assert_eq!(sheet["rows"], json!([[1.5, null], [null, 2.5]]));
}
