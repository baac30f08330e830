use super::*;
use serde_json::json;

fn rows(values: Value) -> Rows {
    Rows {
        columns: vec!["value".into()],
        rows: values
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row.as_array().unwrap().clone())
            .collect(),
        complete: true,
    }
}

#[test]
fn contract_lines_read_and_render_the_same() {
    let lines = [
        "islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data",
        "names.txt: list of 3",
        "summary.csv: table (island, penguins) from penguins.csv = SELECT island, count(*) FROM data GROUP BY island",
        "budget.xlsx: edit at Summary!B2, Summary!B3",
        "notes.txt: text",
    ];
    for line in lines {
        let contract = parse_line(&format!("  - {line}")).expect(line);
        assert_eq!(render(&contract), line);
    }
    let table = parse_line("- `summary.csv`: Table (island, penguins)").unwrap();
    assert_eq!(table.holds, Holds::Table);
    assert_eq!(table.columns, ["island", "penguins"]);
    assert_eq!(table.path, "summary.csv");
    let source = parse_line("n.txt: number from p.csv = SELECT avg(x) FROM data")
        .unwrap()
        .source
        .unwrap();
    assert_eq!(
        (source.path.as_str(), source.query.as_str()),
        ("p.csv", "SELECT avg(x) FROM data")
    );
    // Prose is not a contract: an unknown kind, a sentence before the colon.
    assert_eq!(parse_line("Note: this reads the file"), None);
    assert_eq!(parse_line("- the plan: number of rows"), None);
    assert_eq!(parse_line("- [ ] 1. Count — rows → count.txt"), None);
}

#[test]
fn schema_bound_targets_read_as_contracts() {
    let contract = from_json(&json!({
        "path": "./owners.txt", "holds": "list", "count": 4,
        "source": {"path": "launch_plan.csv", "query": "SELECT DISTINCT owner FROM data ORDER BY owner"}
    }))
    .unwrap();
    assert_eq!(contract.path, "owners.txt");
    assert_eq!(contract.count, Some(4));
    assert_eq!(contract.source.unwrap().path, "launch_plan.csv");
    assert_eq!(from_json(&json!("owners.txt")), None);
    assert_eq!(from_json(&json!({"path": "a.txt", "holds": "poem"})), None);
}

#[test]
fn a_number_is_one_number_equal_to_its_source_to_the_precision_written() {
    let number = Contract::new("n.txt", Holds::Number);
    assert_eq!(check(&number, "5\n", None), Ok(()));
    assert_eq!(check(&number, "$3,500.00", None), Ok(()));
    // The values themselves where their count was asked for.
    let listed = check(&number, "Biscoe\nDream\nTorgersen\n", None).unwrap_err();
    assert!(listed.contains("one number alone"), "{listed}");
    assert!(check(&number, "about 5", None).is_err());
    let mean = rows(json!([[43.92192982456142]]));
    assert_eq!(check(&number, "43.92", Some(&mean)), Ok(()));
    assert_eq!(check(&number, "43.9219", Some(&mean)), Ok(()));
    let wrong = check(&number, "43.95", Some(&mean)).unwrap_err();
    assert!(wrong.contains("43.92192982456142"), "{wrong}");
    assert_eq!(check(&number, "3", Some(&rows(json!([[3]])))), Ok(()));
    assert!(check(&number, "3", Some(&rows(json!([])))).is_err());
}

#[test]
fn a_list_has_its_count_and_its_sources_values() {
    let mut list = Contract::new("owners.txt", Holds::List);
    list.count = Some(3);
    assert_eq!(check(&list, "a\nb\nc\n", None), Ok(()));
    let short = check(&list, "a, b, c", None).unwrap_err();
    assert!(
        short.contains("3 values") && short.contains("1 lines"),
        "{short}"
    );
    list.count = None;
    let source = rows(json!([["Biscoe"], ["Dream"], ["Torgersen"]]));
    assert_eq!(
        check(&list, "Dream\nBiscoe\nTorgersen", Some(&source)),
        Ok(())
    );
    let wrong = check(&list, "Dream\nBiscoe\nAnvers", Some(&source)).unwrap_err();
    assert!(
        wrong.contains("missing: \"Torgersen\"") && wrong.contains("\"Anvers\""),
        "{wrong}"
    );
    list.source = Some(atelier_messages::contract::Source {
        path: "p.csv".into(),
        query: "SELECT DISTINCT island FROM data ORDER BY island".into(),
    });
    let unordered = check(&list, "Dream\nBiscoe\nTorgersen", Some(&source)).unwrap_err();
    assert!(unordered.contains("line 1"), "{unordered}");
    // A source read only in part is compared by count alone.
    let partial = Rows {
        complete: false,
        ..source
    };
    assert_eq!(check(&list, "x\ny", Some(&partial)), Ok(()));
}

#[test]
fn a_table_has_its_header_and_its_sources_rows() {
    let mut table = Contract::new("summary.csv", Holds::Table);
    table.columns = vec!["island".into(), "penguins".into()];
    let source = rows(json!([["Biscoe", 168], ["Dream", 124]]));
    let written = "island,penguins\nDream,124\nBiscoe,168\n";
    assert_eq!(check(&table, written, Some(&source)), Ok(()));
    assert_eq!(
        check(
            &table,
            "Island;Penguins\n\"Dream\";124\nBiscoe;168",
            Some(&source)
        ),
        Ok(())
    );
    let header = check(&table, "name,count\nDream,124\nBiscoe,168", None).unwrap_err();
    assert!(header.contains("island, penguins"), "{header}");
    let rows_wrong = check(&table, "island,penguins\nDream,124", Some(&source)).unwrap_err();
    assert!(rows_wrong.contains("1 rows"), "{rows_wrong}");
    let value_wrong = check(
        &table,
        "island,penguins\nDream,120\nBiscoe,168",
        Some(&source),
    )
    .unwrap_err();
    assert!(value_wrong.contains("Dream, 120"), "{value_wrong}");
}

fn sheet(name: &str, rows: Value, complete: bool) -> cells::SheetRows {
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    cells::SheetRows {
        name: name.into(),
        rows: rows
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row.as_array().unwrap().iter().map(text).collect())
            .collect(),
        complete,
    }
}

#[test]
fn a_workbooks_sheet_holds_a_table_a_list_or_a_number() {
    let source = rows(json!([["Engineering", 3], ["Ops", 1]]));
    let mut table = Contract::new("summary.xlsx", Holds::Table);
    table.source = Some(Source {
        path: "plan.csv".into(),
        query: "SELECT Department, count(*) FROM data GROUP BY 1".into(),
    });
    let counted = sheet(
        "Summary",
        json!([
            ["Department", "milestones"],
            ["Ops", 1.0],
            ["Engineering", 3]
        ]),
        true,
    );
    // The whole source file exported instead: six columns where two were promised.
    let exported = sheet(
        "Sheet1",
        json!([
            ["Milestone", "Department", "Owner"],
            ["Beta", "Engineering", "Ana"]
        ]),
        true,
    );
    assert_eq!(
        check_sheets(&table, &[exported.clone(), counted], Some(&source)),
        Ok(())
    );
    let wrong = check_sheets(&table, std::slice::from_ref(&exported), Some(&source)).unwrap_err();
    assert!(
        wrong.starts_with("no sheet holds it (sheet Sheet1: it holds 1 rows under its header"),
        "{wrong}"
    );
    // A sheet read in part is held to the rows read.
    let cut = sheet(
        "Summary",
        json!([["Department", "milestones"], ["Ops", 1]]),
        false,
    );
    assert_eq!(check_sheets(&table, &[cut], Some(&source)), Ok(()));

    let mut list = Contract::new("names.xlsx", Holds::List);
    list.count = Some(2);
    let names = sheet("Sheet1", json!([["island"], ["Biscoe"], ["Dream"]]), true);
    assert_eq!(check_sheets(&list, &[names], None), Ok(()));
    let two_columns = sheet("Sheet1", json!([["Biscoe", 1], ["Dream", 2]]), true);
    assert!(check_sheets(&list, &[two_columns], None).is_err());

    let mut number = Contract::new("total.xlsx", Holds::Number);
    number.source = table.source.clone();
    let total = sheet("Sheet1", json!([["Total", 4]]), true);
    assert_eq!(
        check_sheets(
            &number,
            std::slice::from_ref(&total),
            Some(&rows(json!([[4]])))
        ),
        Ok(())
    );
    let other = check_sheets(&number, &[total], Some(&rows(json!([[5]])))).unwrap_err();
    assert!(other.contains("no cell of it holds 5"), "{other}");
    // Text and edits are not read as values.
    assert_eq!(
        check_sheets(&Contract::new("a.xlsx", Holds::Edit), &[], None),
        Ok(())
    );
}

#[test]
fn numbers_read_with_their_separators() {
    assert_eq!(parse_number("1,249.50"), Some((1249.5, 2)));
    assert_eq!(parse_number("3,5"), Some((3.5, 1)));
    assert_eq!(parse_number("-12"), Some((-12.0, 0)));
    assert_eq!(parse_number("12 %"), Some((12.0, 0)));
    assert_eq!(parse_number("1,24,9"), None);
    assert_eq!(parse_number("2026-02-18"), None);
    assert_eq!(parse_number(""), None);
}

#[test]
fn a_sources_result_is_told_as_its_target_must_hold_it() {
    let rows = |values: &[&str]| Rows {
        columns: vec!["island".into()],
        rows: values.iter().map(|value| vec![json!(value)]).collect(),
        complete: true,
    };
    let number = parse_line("n.txt: number from p.csv = SELECT 1").expect("line");
    let count = Rows {
        columns: vec!["n".into()],
        rows: vec![vec![json!(3)]],
        complete: true,
    };
    assert_eq!(told(&number, &count), "the number 3");
    let list = parse_line("l.txt: list from p.csv = SELECT 1").expect("line");
    assert_eq!(
        told(&list, &rows(&["Biscoe", "Dream"])),
        "2 values, one per line: Biscoe | Dream"
    );
    let many: Vec<String> = (0..25).map(|index| format!("v{index}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(told(&list, &rows(&many)).ends_with("v19 (and 5 more)"));
}

#[test]
fn figures_under_a_text_contract_are_not_vouched_for() {
    let text = Contract::new("total.txt", Holds::Text);
    let alone = figures_as_text(&text, "2.00\n").unwrap_or_default();
    assert!(
        alone.contains("\"2.00\" under a `text` contract"),
        "{alone}"
    );
    assert!(figures_as_text(&text, "12\n3,5\n").is_some());
    // A figure with its unit or a short label is still a figure.
    for written in ["6300 grams.", "Total: 2.00 EUR", "The order totals 2.00."] {
        assert!(
            figures_as_text(&text, written).is_some(),
            "{written:?} should be held a figure"
        );
    }
    // A figure a request shows is one too: it may be the form it asks for ("like 12.30"),
    // not the answer; and a fallback it names ("or 0") is what a query gives as well.
    for written in ["Total: €12.30", "0", "0 EUR"] {
        assert!(
            figures_as_text(&text, written).is_some(),
            "{written:?} should be held a figure"
        );
    }
    // A sentence, two figures on a line, nothing, or another kind: not this check's.
    assert_eq!(
        figures_as_text(&text, "The order has no lines, so its total is 2.00."),
        None
    );
    assert_eq!(figures_as_text(&text, "2 lines, 3.50 each"), None);
    assert_eq!(figures_as_text(&text, ""), None);
    let number = Contract::new("total.txt", Holds::Number);
    assert_eq!(figures_as_text(&number, "2.00"), None);
}
