//! Shared-nothing hosts: on a stock `nats-server` (1 MiB `max_payload`), files far larger than
//! one message travel in pieces through the store (`atelier.store.blob`, `atelier.store.upload`).
//! A worker on a data directory of its own fetches the blobs it needs by digest and sends large
//! draft writes back the same way.

use std::io::{BufWriter, Cursor, Write};
use std::path::Path;

use anyhow::Context;
use atelier_messages::store::Listing;
use atelier_tests::Cluster;
use calamine::{Data, Reader, Xlsx, open_workbook_from_rs};
use serde_json::json;
use sha2::{Digest, Sha256};

/// A stock nats-server's `max_payload`.
const STOCK_MAX_PAYLOAD: usize = 1 << 20;
const REGIONS: [&str; 4] = ["east", "north", "south", "west"];

/// Writes `rows` rows of `id,region,amount` and returns the file's sha256.
fn write_csv(path: &Path, rows: u64) -> anyhow::Result<String> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let mut hasher = Sha256::new();
    let mut line = String::new();
    let header = "id,region,amount,note\n";
    out.write_all(header.as_bytes())?;
    hasher.update(header.as_bytes());
    for id in 0..rows {
        line.clear();
        let region = REGIONS[(id % 4) as usize];
        let amount = id % 1000;
        line.push_str(&format!("{id},{region},{amount},row number {id}\n"));
        out.write_all(line.as_bytes())?;
        hasher.update(line.as_bytes());
    }
    out.flush()?;
    Ok(hex::encode(hasher.finalize()))
}

fn sheet(bytes: &[u8], name: &str) -> anyhow::Result<Vec<Vec<Data>>> {
    let mut workbook: Xlsx<_> = open_workbook_from_rs(Cursor::new(bytes.to_vec()))?;
    Ok(workbook
        .worksheet_range(name)?
        .rows()
        .map(<[Data]>::to_vec)
        .collect())
}

fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut hasher = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_on_its_own_data_serves_a_100_mb_csv_and_writes_xlsx_back_into_the_draft()
-> anyhow::Result<()> {
    let mut cluster = Cluster::start_with_max_payload(&[], STOCK_MAX_PAYLOAD)?;
    let worker_data = cluster.start_worker_elsewhere("tabular", &[])?;
    let rows = 3_000_000;
    let csv = cluster.dir.path().join("big.csv");
    let digest = write_csv(&csv, rows)?;
    let size = std::fs::metadata(&csv)?.len();
    assert!(size > 100 << 20, "the CSV is {size} bytes");

    cluster.cli_ok(&["wb", "create", "big"])?;
    cluster.cli_ok(&["wb", "add", "big", csv.to_str().unwrap_or_default()])?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "big", "--json"])?.json()?;
    assert_eq!(listing.files.len(), 1);
    assert_eq!(listing.files[0].path, "big.csv");
    assert_eq!(listing.files[0].size, size);
    assert_eq!(listing.files[0].digest, digest);

    let client = async_nats::connect(&cluster.nats.url).await?;
    let summary = atelier_tests::call_tool(
        &client,
        &listing,
        "summary-1",
        "table_export",
        json!({"path": "big.csv", "query": "SELECT region, count(*) AS n, sum(amount) AS total FROM data GROUP BY region ORDER BY region", "target_path": "out/summary.xlsx", "format": "xlsx", "sheet": "Regions"}),
        "tabular",
    )
    .await?
    .map_err(|error| anyhow::anyhow!("{error:?}\n{}", cluster.logs()))?;
    assert_eq!(summary.output["row_count"], 4);
    // The worker fetched the CSV into its own cache, by digest.
    let cached = worker_data
        .join("cache/blobs")
        .join(&digest[..2])
        .join(&digest);
    assert_eq!(sha256_file(&cached)?, digest);

    // A result of several MiB goes back in pieces, not inline.
    let detail = atelier_tests::call_tool(
        &client,
        &listing,
        "detail-1",
        "table_export",
        json!({"path": "big.csv", "query": "SELECT id, region, amount, note FROM data WHERE id < 150000 ORDER BY id", "target_path": "out/detail.xlsx", "format": "xlsx", "sheet": "Rows"}),
        "tabular",
    )
    .await?
    .map_err(|error| anyhow::anyhow!("{error:?}\n{}", cluster.logs()))?;
    assert_eq!(detail.output["row_count"], 150_000);

    let export = cluster.dir.path().join("export");
    cluster.cli_ok(&[
        "wb",
        "export",
        "big",
        export.to_str().unwrap_or_default(),
        "--draft",
    ])?;
    assert_eq!(sha256_file(&export.join("big.csv"))?, digest);

    let regions = sheet(&std::fs::read(export.join("out/summary.xlsx"))?, "Regions")?;
    assert_eq!(regions.len(), 5);
    for (index, region) in REGIONS.iter().enumerate() {
        let residue = index as u64;
        let ids = (0..rows).filter(|id| id % 4 == residue);
        let count = ids.clone().count() as f64;
        let total: u64 = ids.map(|id| id % 1000).sum();
        assert_eq!(regions[index + 1][0], Data::String((*region).into()));
        assert_eq!(regions[index + 1][1], Data::Float(count));
        assert_eq!(regions[index + 1][2], Data::Float(total as f64));
    }

    let detail_bytes = std::fs::read(export.join("out/detail.xlsx"))?;
    assert!(
        detail_bytes.len() > STOCK_MAX_PAYLOAD,
        "detail.xlsx is only {} bytes",
        detail_bytes.len()
    );
    let detail_rows = sheet(&detail_bytes, "Rows")?;
    assert_eq!(detail_rows.len(), 150_001);
    assert_eq!(
        detail_rows[149_999 + 1],
        vec![
            Data::Float(149_999.0),
            Data::String("west".into()),
            Data::Float(999.0),
            Data::String("row number 149999".into()),
        ]
    );
    let listing = cluster.current_listing("big")?;
    let detail_entry = listing
        .files
        .iter()
        .find(|file| file.path == "out/detail.xlsx")
        .ok_or_else(|| anyhow::anyhow!("no detail.xlsx in the draft"))?;
    assert_eq!(detail_entry.size, detail_bytes.len() as u64);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn staged_files_that_do_not_match_their_names_are_refused_and_nothing_is_added()
-> anyhow::Result<()> {
    use atelier_messages::store::{AddFiles, BlobRef, FileContent};
    use atelier_messages::{ErrorCode, PROTOCOL_VERSION};
    use atelier_transport::Policy;
    use atelier_transport::pieces::{Source, upload};

    let cluster = Cluster::start_with_max_payload(&[], STOCK_MAX_PAYLOAD)?;
    cluster.cli_ok(&["wb", "create", "bad"])?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    // An upload whose content is not what its name says (a client lying, or corruption).
    let honest = atelier_transport::blobs::blob_of_bytes(b"the real content");
    let liar = BlobRef {
        digest: atelier_transport::blobs::blob_of_bytes(b"something else").digest,
        size: honest.size,
    };
    let lied = upload(
        &client,
        "bad",
        Source::Bytes(b"the real content"),
        &liar,
        &|_| {},
    )
    .await
    .err();
    assert_eq!(lied.map(|e| e.code), Some(ErrorCode::FileWriteFailed));
    let cases = [
        (
            BlobRef {
                digest: "../../etc/passwd".into(),
                size: 3,
            },
            ErrorCode::ValidationFailed,
        ),
        (
            BlobRef {
                digest: "ab".repeat(32),
                size: 3,
            },
            ErrorCode::NotFound,
        ),
        (liar.clone(), ErrorCode::NotFound),
        (
            BlobRef {
                digest: honest.digest.clone(),
                size: honest.size + 1,
            },
            ErrorCode::NotFound,
        ),
    ];
    for (blob, code) in cases {
        let add = AddFiles {
            v: PROTOCOL_VERSION,
            workbench: "bad".into(),
            files: vec![FileContent::staged("x.txt", blob.clone())],
        };
        let error = atelier_transport::request(
            &client,
            &add,
            Policy::once(std::time::Duration::from_secs(30)),
        )
        .await
        .err();
        assert_eq!(error.map(|e| e.code), Some(code), "{blob:?}");
    }
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "bad", "--json"])?.json()?;
    assert!(listing.files.is_empty());
    let blobs = cluster.data_dir().join("blobs");
    let stored = walk_files(&blobs);
    assert!(
        !stored.iter().any(|name| name.contains(&liar.digest)),
        "the lying upload became a blob: {stored:?}"
    );
    Ok(())
}

/// Every file name under `dir`, recursively.
fn walk_files(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            names.extend(walk_files(&path));
        } else {
            names.push(path.to_string_lossy().to_string());
        }
    }
    names
}

/// Calls asking at once for one blob to be uploaded make one upload: a second upload of an
/// object replaces it, taking its chunks away from whoever is reading the first.
#[tokio::test(flavor = "multi_thread")]
async fn uploads_of_one_blob_at_once_make_one_upload_and_it_reads_back_whole() -> anyhow::Result<()>
{
    use atelier_transport::BlobBucket;

    let dir = tempfile::tempdir()?;
    let nats = atelier_tests::NatsServer::start_with_max_payload(dir.path(), STOCK_MAX_PAYLOAD)?;
    let client = async_nats::connect(&nats.url).await?;
    let grace = std::time::Duration::from_secs(3600);
    let bucket = BlobBucket::ensure_durable(&client, 1, grace)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    // Four chunks of 512 KiB.
    let content: Vec<u8> = (0..2u32 << 20).map(|n| (n % 251) as u8).collect();
    let blob = atelier_transport::blobs::blob_of_bytes(&content);
    let uploads = (0..8).map(|_| bucket.put_bytes(&content, &blob));
    for uploaded in futures::future::join_all(uploads).await {
        uploaded.map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let mut stream = async_nats::jetstream::new(client.clone())
        .get_stream(format!(
            "OBJ_{}",
            atelier_messages::subjects::BLOB_STORE_BUCKET
        ))
        .await?;
    let last = stream.info().await?.state.last_sequence;
    assert_eq!(last, 5, "four chunks and one meta message: one upload");
    let target = dir.path().join("read-back");
    bucket
        .fetch_to(&blob, &target, false)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    assert!(std::fs::read(&target)? == content, "read back differs");
    Ok(())
}

/// A tool call's small writes are kept in the store's database only, not copied into the blob
/// directory shared with the host's workers (most are never read back); a later call that reads
/// one gets it whole from the store (`atelier.store.blob`, checked by digest) into the worker's
/// own cache, and edits on top of it.
#[tokio::test(flavor = "multi_thread")]
async fn a_written_file_is_read_back_from_the_store_without_a_shared_copy() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.run_workflow("w", atelier_tests::TWO_PARAGRAPHS_WORKFLOW, "two-steps")?;

    let client = async_nats::connect(&cluster.nats.url).await?;
    let read = atelier_messages::store::ReadFile {
        v: atelier_messages::PROTOCOL_VERSION,
        workbench: "w".into(),
        path: "notes.docx".into(),
        view: atelier_messages::store::View::Draft,
    };
    let last = atelier_transport::request(
        &client,
        &read,
        atelier_transport::Policy::once(std::time::Duration::from_secs(30)),
    )
    .await
    .map_err(|error| anyhow::anyhow!("{error:?}"))?;
    let mut document = String::new();
    std::io::Read::read_to_string(
        &mut zip::ZipArchive::new(Cursor::new(last.content.to_vec()))?
            .by_name("word/document.xml")?,
        &mut document,
    )?;
    let (first, second) = (
        document
            .find("first line")
            .context("the first write is kept")?,
        document.find("second line").context("the second write")?,
    );
    assert!(first < second, "{document}");

    // Neither write is in the shared directory; the first, which the second call read, is in
    // the worker's cache, whole.
    let shared = walk_files(&cluster.data_dir().join("blobs"));
    assert!(
        !shared.iter().any(|name| name.contains(&last.digest)),
        "{shared:?}"
    );
    let cached = walk_files(&cluster.data_dir().join("cache/blobs"));
    assert_eq!(cached.len(), 1, "{cached:?}");
    let fetched = Path::new(&cached[0]);
    let digest = fetched
        .file_name()
        .map(|name| name.to_string_lossy().to_string())
        .unwrap_or_default();
    assert_ne!(digest, last.digest);
    assert!(!shared.iter().any(|name| name.contains(&digest)));
    assert_eq!(sha256_file(fetched)?, digest);

    // What the worker asks for, asked by hand: the bytes for the workbench's digest; nothing
    // (and no file outside the store) for a digest that is not one, or that no shard holds.
    let blob = |workbench: &str, digest: &str| atelier_messages::store::GetBlob {
        v: atelier_messages::PROTOCOL_VERSION,
        digest: digest.into(),
        workbench: Some(workbench.into()),
        offset: 0,
        length: None,
    };
    let once = atelier_transport::Policy::once(std::time::Duration::from_secs(30));
    let bytes = atelier_transport::request(&client, &blob("w", &last.digest), once)
        .await
        .map_err(|error| anyhow::anyhow!("{error:?}"))?;
    assert_eq!(bytes.content.as_slice(), last.content.as_slice());
    let unknown = "0".repeat(64);
    for (workbench, digest) in [
        ("w", "../../../../etc/passwd"),
        ("w", unknown.as_str()),
        ("not-a-workbench", unknown.as_str()),
    ] {
        let refused = atelier_transport::request(&client, &blob(workbench, digest), once).await;
        assert_eq!(
            refused.err().map(|error| error.code),
            Some(atelier_messages::ErrorCode::NotFound),
            "{workbench} {digest}"
        );
    }
    Ok(())
}
