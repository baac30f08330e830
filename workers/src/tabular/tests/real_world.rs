//! Real-world input: csv-spectrum, encodings, delimiters, metadata rows, number formats.

use super::*;

/// A `table_read_rows` result as csv-spectrum's JSON holds rows: every value a string. The
/// tools report an empty field (`,,` and `,"",` alike) as `null`, so `null` reads as `""`.
fn as_strings(result: &RowsRead) -> Vec<serde_json::Map<String, Value>> {
    result
        .rows
        .iter()
        .map(|row| {
            result
                .columns
                .iter()
                .zip(row)
                .map(|(name, value)| {
                    let text = match value {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    (name.clone(), Value::String(text))
                })
                .collect()
        })
        .collect()
}

fn spectrum_json(name: &str) -> Value {
    let path = Path::new(CORPORA).join(format!("csv-spectrum/json/{name}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn every_csv_spectrum_file_reads_as_its_json_twin() {
    let fixture = Fixture::new();
    let mut names: Vec<String> = std::fs::read_dir(Path::new(CORPORA).join("csv-spectrum/csvs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().replace(".csv", ""))
        .collect();
    names.sort();
    assert_eq!(names.len(), 12);
    for name in &names {
        let file = corpus(&format!("csv-spectrum/csvs/{name}.csv"));
        let read = fixture.rows(&file, 1, 100);
        let expected = match spectrum_json(name) {
            // location_coordinates.json is a single object, not a list of rows, and its phone
            // number (1234567890) is not the file's (2095257564): the twin is wrong there.
            Value::Object(mut row) if name == "location_coordinates" => {
                assert_eq!(row["Contact Phone Number"], "1234567890");
                row.insert("Contact Phone Number".into(), json!("2095257564"));
                vec![row]
            }
            other => serde_json::from_value(other).unwrap(),
        };
        assert_eq!(as_strings(&read), expected, "{name}");
        assert_eq!(read.total_rows, expected.len() as u64, "{name}");
    }
}

#[test]
fn empty_fields_are_null_and_numbers_stay_numbers() {
    let fixture = Fixture::new();
    for name in ["empty", "empty_crlf"] {
        let read = fixture.rows(&corpus(&format!("csv-spectrum/csvs/{name}.csv")), 1, 10);
        assert_eq!(
            read.rows,
            vec![
                vec![json!(1), json!(null), json!(null)],
                vec![json!(2), json!(3), json!(4)]
            ],
            "{name}"
        );
        assert_eq!(
            to_json(&read.column_types),
            json!(["integer", "integer", "integer"])
        );
    }
    let zip = fixture.rows(&corpus("csv-spectrum/csvs/comma_in_quotes.csv"), 1, 1);
    assert_eq!(
        zip.rows[0][4],
        json!("08123"),
        "leading zeros keep a code as text"
    );
}

#[test]
fn windows_1252_files_are_detected_and_decoded() {
    let fixture = Fixture::new();
    let text = "nombre,ciudad,nota\nJosé,Málaga,café crème\nFrançois,Besançon,€ 5\nJürgen,Zürich,“quoted”\n";
    let (bytes, _, _) = encoding_rs::WINDOWS_1252.encode(text);
    let file = fixture.csv("accents.csv", &bytes);
    let map = fixture.map(&file);
    assert_eq!(map["encoding_detected"], "windows-1252");
    assert_eq!(map["encoding_confidence"], encoding::CONFIDENT_GUESS);
    assert_eq!(map["warnings"], json!([]));
    let read = fixture.rows(&file, 1, 10);
    assert_eq!(
        read.rows,
        vec![
            vec![json!("José"), json!("Málaga"), json!("café crème")],
            vec![json!("François"), json!("Besançon"), json!("€ 5")],
            vec![json!("Jürgen"), json!("Zürich"), json!("“quoted”")],
        ]
    );
}

#[test]
fn undecidable_bytes_get_a_low_confidence_warning() {
    let fixture = Fixture::new();
    let file = fixture.csv("odd.csv", b"a,b\n\x81,1\n");
    let map = fixture.map(&file);
    assert_eq!(map["encoding_confidence"], encoding::WEAK_GUESS);
    let warnings = map["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("encoding is uncertain")),
        "{warnings:?}"
    );
}

#[test]
fn utf8_bom_and_utf16_files_are_decoded() {
    let fixture = Fixture::new();
    let bom = fixture.csv("bom.csv", b"\xEF\xBB\xBFcity,n\nZ\xC3\xBCrich,1\n");
    let map = fixture.map(&bom);
    assert_eq!(
        (
            map["encoding_detected"].as_str(),
            map["columns"][0]["name"].as_str()
        ),
        (Some("utf-8"), Some("city"))
    );
    assert_eq!(
        fixture.rows(&bom, 1, 5).rows,
        vec![vec![json!("Zürich"), json!(1)]]
    );
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(
        "city;n\nSão Paulo;2\n"
            .encode_utf16()
            .flat_map(u16::to_le_bytes),
    );
    let file = fixture.csv("utf16.csv", &utf16);
    let map = fixture.map(&file);
    assert_eq!(map["encoding_detected"], "utf-16le");
    assert_eq!(map["encoding_confidence"], 1.0);
    assert_eq!(map["delimiter"], ";");
    assert_eq!(
        fixture.rows(&file, 1, 5).rows,
        vec![vec![json!("São Paulo"), json!(2)]]
    );
}

#[test]
fn semicolon_files_with_decimal_commas_are_numbers() {
    let fixture = Fixture::new();
    let file = fixture.csv(
        "movimientos.csv",
        "Fecha;Concepto;Importe;Saldo\n01/10/2024;BIZUM RECIBIDO;-25,00;31.768,85\n02/10/2024;TRANSFERENCIA;-1.150,00;30.618,85\n03/10/2024;NÓMINA;2.500,50;33.119,35\n".as_bytes(),
    );
    let map = fixture.map(&file);
    assert_eq!(map["delimiter"], ";");
    assert_eq!(map["decimal_separator"], ",");
    assert_eq!(map["thousands_separator"], ".");
    let read = fixture.rows(&file, 1, 10);
    assert_eq!(
        to_json(&read.column_types),
        json!(["date", "string", "float", "float"])
    );
    assert_eq!(
        read.rows,
        vec![
            vec![
                json!("2024-10-01"),
                json!("BIZUM RECIBIDO"),
                json!(-25.0),
                json!(31768.85)
            ],
            vec![
                json!("2024-10-02"),
                json!("TRANSFERENCIA"),
                json!(-1150.0),
                json!(30618.85)
            ],
            vec![
                json!("2024-10-03"),
                json!("NÓMINA"),
                json!(2500.5),
                json!(33119.35)
            ],
        ]
    );
    let total = fixture
        .query(&file, "SELECT round(sum(Importe), 2) FROM data", 1, 0)
        .unwrap();
    assert_eq!(total.rows, vec![vec![json!(1325.5)]]);
}

#[test]
fn quoted_thousands_separators_are_numbers_and_dot_decimals_are_not_misread() {
    let fixture = Fixture::new();
    let us = fixture.csv(
        "us.csv",
        b"item,amount\nA,\"1,234.50\"\nB,\"12,000\"\nC,7\n",
    );
    let read = fixture.rows(&us, 1, 5);
    assert_eq!(
        read.rows.iter().map(|r| r[1].clone()).collect::<Vec<_>>(),
        vec![json!(1234.5), json!(12000.0), json!(7.0)]
    );
    let mixed = fixture.csv("mixed.csv", b"a;b\n1.5;2,5\n2.25;3,5\n");
    let read = fixture.rows(&mixed, 1, 5);
    assert_eq!(
        read.rows,
        vec![
            vec![json!(1.5), json!("2,5")],
            vec![json!(2.25), json!("3,5")]
        ]
    );
}

#[test]
fn tsv_psv_and_txt_tables_are_read_with_format_metadata() {
    let fixture = Fixture::new();
    let tsv = fixture.csv(
        "people.tsv",
        b"name\tage\tcity\nAna\t34\tLisboa, PT\nBo\t29\tOslo\n",
    );
    let map = fixture
        .engine
        .map(CsvFile {
            name: "people.tsv",
            ..csv(&tsv)
        })
        .unwrap();
    let map = to_json(&map);
    assert_eq!(
        (map["format"].as_str(), map["delimiter"].as_str()),
        (Some("tsv"), Some("\t"))
    );
    assert_eq!(map["format_inferred"], false);
    assert_eq!(
        fixture.rows(&tsv, 2, 1).rows,
        vec![vec![json!("Bo"), json!(29), json!("Oslo")]]
    );
    let txt = fixture.csv("export.txt", b"id|label\n1|alpha\n2|beta\n");
    let map = to_json(
        &fixture
            .engine
            .map(CsvFile {
                name: "export.txt",
                ..csv(&txt)
            })
            .unwrap(),
    );
    assert_eq!(
        (map["format"].as_str(), map["delimiter"].as_str()),
        (Some("txt"), Some("|"))
    );
    assert_eq!(map["format_inferred"], true);
    assert!(
        map["warnings"][0]
            .as_str()
            .unwrap()
            .contains("inferred from its content"),
        "{map}"
    );
    let psv_named_tsv = to_json(
        &fixture
            .engine
            .map(CsvFile {
                name: "odd.tsv",
                ..csv(&txt)
            })
            .unwrap(),
    );
    assert_eq!(psv_named_tsv["format_inferred"], true);
}

#[test]
fn metadata_lines_above_the_header_are_skipped_and_kept_as_preamble() {
    let fixture = Fixture::new();
    let file = fixture.csv(
        "statement.csv",
        b"Bank statement export\nAccount: ES12 3456\nGenerated: 2024-10-31\nDate,Description,Amount\n2024-10-01,Coffee,-3.5\n2024-10-02,Salary,2500\n",
    );
    let map = fixture.map(&file);
    assert_eq!(map["skipped_rows"], 3);
    assert_eq!(
        map["preamble"],
        json!([
            "Bank statement export",
            "Account: ES12 3456",
            "Generated: 2024-10-31"
        ])
    );
    assert_eq!(map["has_header"], true);
    assert_eq!(map["row_count"], 2);
    assert_eq!(column_names(&map), vec!["Date", "Description", "Amount"]);
    assert_eq!(
        fixture.rows(&file, 1, 5).rows,
        vec![
            vec![json!("2024-10-01"), json!("Coffee"), json!(-3.5)],
            vec![json!("2024-10-02"), json!("Salary"), json!(2500.0)]
        ]
    );
}

#[test]
fn ragged_rows_are_padded_with_nulls() {
    let fixture = Fixture::new();
    let file = fixture.csv("ragged.csv", b"a,b,c\n1,2,3\n4,5\n6,7,8,9\n10,11,12\n");
    let read = fixture.rows(&file, 1, 10);
    assert_eq!(read.columns, vec!["a", "b", "c", "column3"]);
    assert_eq!(
        read.rows,
        vec![
            vec![json!(1), json!(2), json!(3), json!(null)],
            vec![json!(4), json!(5), json!(null), json!(null)],
            vec![json!(6), json!(7), json!(8), json!(9)],
            vec![json!(10), json!(11), json!(12), json!(null)],
        ]
    );
}

#[test]
fn header_less_files_get_generated_names_and_a_warning() {
    let fixture = Fixture::new();
    let file = fixture.csv("nohdr.csv", b"x,1,2.5\ny,2,3.5\nz,3,4.5\n");
    let map = fixture.map(&file);
    assert_eq!(map["has_header"], false);
    assert_eq!(map["row_count"], 3);
    assert_eq!(column_names(&map), vec!["column0", "column1", "column2"]);
    assert!(
        map["warnings"].to_string().contains("no header row"),
        "{map}"
    );
    assert_eq!(
        fixture.rows(&file, 1, 1).rows,
        vec![vec![json!("x"), json!(1), json!(2.5)]]
    );
}

#[test]
fn types_that_break_after_the_sniffer_sample_are_still_read() {
    let fixture = Fixture::new();
    let mut text = String::from("id,code\n");
    for id in 0..30_000 {
        text.push_str(&format!("{id},{id}\n"));
    }
    text.push_str("30000,X-1\n");
    let file = fixture.csv("late.csv", text.as_bytes());
    let read = fixture.rows(&file, 30_001, 1);
    assert_eq!(read.rows, vec![vec![json!(30_000), json!("X-1")]]);
    assert_eq!(to_json(&read.column_types), json!(["integer", "string"]));
    assert_eq!(read.total_rows, 30_001);
}

#[test]
fn chunks_are_deterministic_and_new_content_is_never_stale() {
    let first = Fixture::new();
    let second = Fixture::new();
    let a = first.sales();
    let b = second.sales();
    assert_eq!(a.1, b.1);
    assert_eq!(first.map(&a)["chunks"], second.map(&b)["chunks"]);
    assert_eq!(
        first.map(&a)["chunks"][2],
        json!({"index": 2, "rows": "1001-1200"})
    );
    let v1 = first.csv("v.csv", b"n\n1\n");
    assert_eq!(first.rows(&v1, 1, 5).rows, vec![vec![json!(1)]]);
    let v2 = first.csv("v.csv", b"n\n2\n3\n");
    assert_ne!(v1.1, v2.1);
    assert_eq!(
        first.rows(&v2, 1, 5).rows,
        vec![vec![json!(2)], vec![json!(3)]]
    );
}

#[test]
fn header_only_and_empty_files_map_to_no_rows() {
    let fixture = Fixture::new();
    let header_only = fixture.csv("h.csv", b"a,b\n");
    let map = fixture.map(&header_only);
    assert_eq!(
        (map["row_count"].as_u64(), map["has_header"].as_bool()),
        (Some(0), Some(true))
    );
    assert_eq!(map["chunks"], json!([]));
    let empty = fixture.csv("e.csv", b"");
    assert_eq!(fixture.map(&empty)["row_count"], 0);
}

#[test]
fn na_markers_in_numeric_columns_are_nulls() {
    let fixture = Fixture::new();
    let file = fixture.csv("r.csv", b"dep_delay,carrier\n2,UA\nNA,AA\n-3,NA\n");
    let map = fixture.map(&file);
    assert_eq!(map["null_values"], json!(["NA"]));
    assert_eq!(map["columns"][0]["inferred_type"], "integer");
    assert_eq!(
        fixture.rows(&file, 1, 5).rows,
        vec![
            vec![json!(2), json!("UA")],
            vec![json!(null), json!("AA")],
            vec![json!(-3), json!(null)]
        ]
    );
    assert!(
        map["warnings"]
            .to_string()
            .contains("the values NA were read as empty (NULL)"),
        "{map}"
    );
}

#[test]
fn large_files_are_checked_on_a_prefix_with_the_same_result() {
    let fixture = Fixture::new();
    let mut text = String::from("Export: ledger\nCurrency: EUR\nid;amount;note\n");
    for id in 1..=120_000 {
        text.push_str(&format!(
            "{id};{}.{:03},{:02};row {id}\n",
            1 + id % 7,
            id % 1000,
            id % 100
        ));
    }
    assert!(text.len() > 2 << 20);
    let file = fixture.csv("big.csv", text.as_bytes());
    let map = fixture.map(&file);
    assert_eq!(
        (map["skipped_rows"].as_u64(), map["row_count"].as_u64()),
        (Some(2), Some(120_000))
    );
    assert_eq!(
        (
            map["decimal_separator"].as_str(),
            map["thousands_separator"].as_str()
        ),
        (Some(","), Some("."))
    );
    let last = fixture.rows(&file, 120_000, 1);
    assert_eq!(
        last.rows,
        vec![vec![json!(120_000), json!(7000.0), json!("row 120000")]]
    );
    let leftovers: Vec<String> = std::fs::read_dir(fixture.dir.path().join("cache/tabular"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".duckdb") && name != "locks")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// The column names of a `table_get_map` result.
fn column_names(map: &Value) -> Vec<&Value> {
    map["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect()
}

#[test]
fn a_text_files_figures_are_a_table_beside_its_data() {
    let fixture = Fixture::new();
    let budget = corpus("keenbench/synthetic/budget_notes.txt");
    let total = fixture
        .query(&budget, "SELECT sum(value) FROM figures", 10, 0)
        .unwrap();
    assert_eq!(total.rows, vec![vec![json!(3500.0)]]);
    let each = fixture
        .query(&budget, "SELECT label, value, unit FROM figures", 10, 0)
        .unwrap();
    assert_eq!(
        each.rows,
        vec![
            vec![json!("Entertainment"), json!(500.0), json!("EUR")],
            vec![json!("Groceries"), json!(800.0), json!("EUR")],
            vec![json!("Transport"), json!(200.0), json!("EUR")],
            vec![json!("Bills"), json!(2000.0), json!("EUR")],
        ]
    );

    let notes = fixture.csv(
        "notes.md",
        "# Q3\n\nRevenue grew by 15% to €1,250,000.\n\n| Team | Heads |\n|---|---|\n| Sales | 12 |\n"
            .as_bytes(),
    );
    let found = fixture
        .query(
            &notes,
            "SELECT line, label, value, unit FROM figures",
            10,
            0,
        )
        .unwrap();
    assert_eq!(
        found.rows,
        vec![
            vec![json!(3), json!("Revenue grew by"), json!(15.0), json!("%")],
            vec![json!(3), json!("to"), json!(1_250_000.0), json!("€")],
            vec![json!(7), json!("Sales"), json!(12.0), json!("")],
        ]
    );

    // The same bytes as a delimited file are a table of rows, with no figures.
    let bytes = std::fs::read(&budget.0).unwrap();
    let as_csv = fixture.csv("budget.csv", &bytes);
    let refused = fixture
        .query(&as_csv, "SELECT sum(value) FROM figures", 10, 0)
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::ValidationFailed);
    assert!(
        fixture
            .query(&budget, "SELECT count(*) FROM data", 10, 0)
            .is_ok()
    );
}

#[test]
fn a_workbooks_sheets_are_tables_its_first_is_data() {
    let fixture = Fixture::new();
    let book = corpus("keenbench/office/multi-sheet.xlsx");
    let named = |sql: &str| {
        fixture
            .engine
            .query(
                CsvFile {
                    name: "multi-sheet.xlsx",
                    ..csv(&book)
                },
                sql,
                Window {
                    rows: 50,
                    offset: 0,
                },
            )
            .unwrap()
    };
    let tables = named(
        "SELECT table_name FROM information_schema.tables WHERE table_name <> 'atelier_source' \
         ORDER BY table_name",
    );
    assert_eq!(
        tables.rows,
        vec![
            vec![json!("Expenses")],
            vec![json!("Revenue")],
            vec![json!("Summary")],
            vec![json!("data")]
        ]
    );
    let revenue = named("SELECT count(*), sum(Amount) FROM \"Revenue\"");
    assert_eq!(revenue.rows, vec![vec![json!(6), json!(81600)]]);
    // The first sheet is `data`, read as a delimited file is (its header, typed columns).
    let data = named("SELECT Month, Amount FROM data ORDER BY Amount DESC LIMIT 1");
    assert_eq!(data.rows, vec![vec![json!("May"), json!(15300)]]);
    // The same bytes under a delimited name are not read as a workbook.
    let as_csv = fixture.engine.query(
        CsvFile {
            name: "multi-sheet.csv",
            ..csv(&book)
        },
        "SELECT count(*) FROM \"Revenue\"",
        Window { rows: 1, offset: 0 },
    );
    assert!(as_csv.is_err());
}
