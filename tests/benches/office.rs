//! Office pool benchmark: the whole NATS path (a real office worker process) against openpyxl
//! and python-docx doing the same work in the same run.
//!
//! 1. read a 100,000 × 10 sheet range (`read_file` with `sheet` + `range`) vs openpyxl
//!    (`load_workbook(read_only=True)` + `iter_rows(values_only=True)`);
//! 2. write a 100,000-cell workbook (`xlsx_operations` `create_new` + `set_range`) vs openpyxl
//!    (`Workbook()`, `ws.append`, `save`);
//! 3. 1,000 `replace_text` operations on a 50-page docx (one `docx_operations` call) vs
//!    python-docx (load, replace in the runs of every matching paragraph, save).
//!
//! ```sh
//! pip install openpyxl python-docx
//! cargo build --release --bin atelier
//! cargo bench -p atelier-tests --bench office
//! ```
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_tests::{Cluster, call_tool};
use serde_json::{Value, json};

const READ_ROWS: u32 = 100_000;
const READ_COLS: u16 = 10;
const WRITE_ROWS: usize = 10_000;
const WRITE_COLS: usize = 10;
const REPLACEMENTS: usize = 1_000;
/// Paragraphs in the docx (about 50 pages of 40-word paragraphs).
const PARAGRAPHS: usize = 1_250;
const RUNS: usize = 3;

const PYTHON: &str = r#"
import json, sys, time
big, docx_path, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
result = {}
try:
    import openpyxl
    t = time.perf_counter()
    wb = openpyxl.load_workbook(big, read_only=True)
    ws = wb["Data"]
    n = sum(1 for row in ws.iter_rows(min_row=1, max_row=100000, max_col=10, values_only=True) for v in row)
    result["read_s"] = time.perf_counter() - t
    result["read_cells"] = n
    t = time.perf_counter()
    wb = openpyxl.Workbook()
    ws = wb.active
    for r in range(10000):
        ws.append([r * 1.5 if c % 2 == 0 else f"row {r} col {c}" for c in range(10)])
    wb.save(out_dir + "/py_write.xlsx")
    result["write_s"] = time.perf_counter() - t
except ImportError as e:
    result["openpyxl"] = str(e)
try:
    import docx
    t = time.perf_counter()
    d = docx.Document(docx_path)
    for i in range(1000):
        key = "{{k%d}}" % i
        for p in d.paragraphs:
            if key in p.text:
                for run in p.runs:
                    if key in run.text:
                        run.text = run.text.replace(key, "value %d" % i)
    d.save(out_dir + "/py_replaced.docx")
    result["replace_s"] = time.perf_counter() - t
except ImportError as e:
    result["python-docx"] = str(e)
print(json.dumps(result))
"#;

struct Nats {
    client: async_nats::Client,
    workbench: String,
    calls: usize,
}

impl Nats {
    async fn call(
        &mut self,
        cluster: &Cluster,
        tool: &str,
        args: Value,
    ) -> anyhow::Result<(Value, Duration)> {
        self.calls += 1;
        let listing = cluster.current_listing(&self.workbench)?;
        let call_id = format!("bench-{}", self.calls);
        let start = Instant::now();
        let reply = call_tool(&self.client, &listing, &call_id, tool, args, "office").await?;
        let elapsed = start.elapsed();
        let output = reply.map_err(|e| anyhow::anyhow!("{tool}: {e}"))?;
        Ok((output.output, elapsed))
    }
}

fn big_workbook(path: &Path) -> anyhow::Result<()> {
    let mut workbook = rust_xlsxwriter::Workbook::new();
    let sheet = workbook.add_worksheet().set_name("Data")?;
    for row in 0..READ_ROWS {
        for col in 0..READ_COLS {
            if col % 2 == 0 {
                sheet.write_number(row, col, f64::from(row) * 1.5 + f64::from(col))?;
            } else {
                sheet.write_string(row, col, format!("r{row}c{col}"))?;
            }
        }
    }
    workbook.save(path)?;
    Ok(())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ratio(python: Option<f64>, ours: Duration) -> String {
    python.map_or_else(|| "n/a".to_string(), |p| format!("{:.1}×", p / secs(ours)))
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(&["office"])?;
    let data = cluster.dir.path().join("bench");
    std::fs::create_dir_all(&data)?;
    let big = data.join("big.xlsx");
    big_workbook(&big)?;
    cluster.cli_ok(&["wb", "create", "bench"])?;
    cluster.cli_ok(&["wb", "add", "bench", big.to_str().unwrap_or_default()])?;
    let mut nats = Nats {
        client: async_nats::connect(&cluster.nats.url).await?,
        workbench: "bench".into(),
        calls: 0,
    };

    // 1. Read 100,000 × 10.
    let mut reads = Vec::new();
    for _ in 0..RUNS {
        let (out, elapsed) = nats
            .call(
                &cluster,
                "read_file",
                json!({"path": "big.xlsx", "sheet": "Data", "range": "A1:J100000"}),
            )
            .await?;
        anyhow::ensure!(
            out["row_count"] == READ_ROWS,
            "read {} rows",
            out["row_count"]
        );
        reads.push(elapsed);
    }

    // 2. Write a 100,000-cell workbook.
    let values: Vec<Value> = (0..WRITE_ROWS)
        .map(|r| {
            Value::Array(
                (0..WRITE_COLS)
                    .map(|c| {
                        if c % 2 == 0 {
                            json!(r as f64 * 1.5)
                        } else {
                            json!(format!("row {r} col {c}"))
                        }
                    })
                    .collect(),
            )
        })
        .collect();
    let mut writes = Vec::new();
    for run in 0..RUNS {
        let (out, elapsed) = nats
            .call(&cluster, "xlsx_operations", json!({"path": format!("out/w{run}.xlsx"), "create_new": true,
                "operations": [{"op": "set_range", "sheet": "Sheet1", "start": "A1", "values": values}]}))
            .await?;
        anyhow::ensure!(
            out["operations"][0]["cells"] == WRITE_ROWS * WRITE_COLS,
            "wrote {}",
            out["operations"][0]["cells"]
        );
        writes.push(elapsed);
    }

    // 3. A 50-page docx with 1,000 placeholders, made by the pool itself, then 1,000 replacements.
    let words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua ut enim ad minim veniam quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat";
    let mut ops = Vec::new();
    for p in 0..PARAGRAPHS {
        if p % 50 == 0 {
            ops.push(json!({"op": "append_paragraph", "style": "Heading 1", "text": format!("Section {}", p / 50)}));
        }
        let text = if p < REPLACEMENTS {
            format!("{words} {{{{k{p}}}}} end.")
        } else {
            format!("{words}.")
        };
        ops.push(json!({"op": "append_paragraph", "text": text}));
    }
    nats.call(
        &cluster,
        "docx_operations",
        json!({"path": "long.docx", "create_new": true, "operations": ops}),
    )
    .await?;
    let replace_ops: Vec<Value> = (0..REPLACEMENTS)
        .map(|i| json!({"op": "replace_text", "search": format!("{{{{k{i}}}}}"), "replace": format!("value {i}")}))
        .collect();
    let mut replaces = Vec::new();
    for run in 0..RUNS {
        let (out, elapsed) = nats
            .call(&cluster, "docx_operations", json!({"path": format!("r{run}.docx"), "copy_from": "long.docx", "operations": replace_ops}))
            .await?;
        anyhow::ensure!(
            out["operations"][999]["replacements"] == 1,
            "{}",
            out["operations"][999]
        );
        replaces.push(elapsed);
    }
    let export = data.join("export");
    cluster.cli_ok(&[
        "wb",
        "export",
        "bench",
        export.to_str().unwrap_or_default(),
        "--draft",
    ])?;

    let python = std::process::Command::new("python3")
        .args(["-c", PYTHON])
        .arg(&big)
        .arg(export.join("long.docx"))
        .arg(&data)
        .output()
        .context("python3")?;
    let baseline: Value = serde_json::from_slice(&python.stdout)
        .unwrap_or_else(|_| json!({"error": String::from_utf8_lossy(&python.stderr)}));
    let (read, write, replace) = (median(reads), median(writes), median(replaces));
    println!("office benchmark (median of {RUNS} calls over NATS; Python once)");
    println!("| task | Atelier (s) | Python (s) | speed-up |");
    println!("|---|---|---|---|");
    for (task, ours, key) in [
        (
            "read A1:J100000 (1,000,000 cells) — openpyxl read-only",
            read,
            "read_s",
        ),
        ("write a 100,000-cell workbook — openpyxl", write, "write_s"),
        (
            "1,000 replace_text on a 50-page docx — python-docx",
            replace,
            "replace_s",
        ),
    ] {
        let py = baseline[key].as_f64();
        println!(
            "| {task} | {:.3} | {} | {} |",
            secs(ours),
            py.map_or("n/a".into(), |p| format!("{p:.3}")),
            ratio(py, ours)
        );
    }
    if baseline.get("read_s").is_none() || baseline.get("replace_s").is_none() {
        println!("python baseline incomplete: {baseline}");
    }
    Ok(())
}
