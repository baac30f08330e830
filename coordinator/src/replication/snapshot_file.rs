//! A shard snapshot as a file, written and read one record at a time, so neither taking nor
//! restoring one holds the store in memory (docs/adr/0014, "Snapshots").
//!
//! Layout: [`MAGIC`], the header (`u32` length, then [`SnapshotHeader`] as MessagePack), then
//! one record per entry — tag `1`, the tree's name (`u16` length), the key and the value (`u32`
//! lengths) — and tag `0` at the end. Lengths are big-endian. A file without the magic is a
//! snapshot of the first format (the whole store as one MessagePack value, [`Snapshot`]), read
//! whole as before.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use atelier_messages::{Format, decode, encode};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Position;
use crate::error::{CoordinatorError, io_error};

/// The first bytes of a streamed snapshot.
pub const MAGIC: &[u8; 8] = b"ATSNAP2\n";

const RECORD: u8 = 1;
const END: u8 = 0;

/// Entries applied to sled in one batch while restoring, at most…
const BATCH_ENTRIES: usize = 4096;
/// …and bytes of keys and values.
const BATCH_BYTES: usize = 8 << 20;

/// What a snapshot is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub v: u16,
    pub shard: u32,
    pub position: Position,
}

/// A snapshot on disk: what it is of, and its content's sha256 and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub path: PathBuf,
    pub header: SnapshotHeader,
    pub digest: String,
    pub size: u64,
}

/// A whole store at a position, as the first format stored it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub v: u16,
    pub shard: u32,
    pub position: Position,
    /// Each tree's entries, by tree name.
    pub trees: BTreeMap<String, Vec<(serde_bytes::ByteBuf, serde_bytes::ByteBuf)>>,
}

/// Writes a snapshot's records to a file, hashing what it writes.
pub struct Writer {
    path: PathBuf,
    out: BufWriter<File>,
    hasher: Sha256,
    size: u64,
    header: SnapshotHeader,
}

impl Writer {
    pub fn create(path: &Path, header: SnapshotHeader) -> Result<Self, CoordinatorError> {
        let file = File::create(path).map_err(io_error(path))?;
        let mut writer = Self {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
            hasher: Sha256::new(),
            size: 0,
            header,
        };
        writer.write(MAGIC)?;
        let encoded = encode(&header, Format::MessagePack)?;
        writer.write(&length(encoded.len())?.to_be_bytes())?;
        writer.write(&encoded)?;
        Ok(writer)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), CoordinatorError> {
        self.out.write_all(bytes).map_err(io_error(&self.path))?;
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// One entry of `tree`.
    pub fn record(&mut self, tree: &str, key: &[u8], value: &[u8]) -> Result<(), CoordinatorError> {
        let name_length = u16::try_from(tree.len())
            .map_err(|_| CoordinatorError::Corrupt(format!("tree name `{tree}` is too long")))?;
        self.write(&[RECORD])?;
        self.write(&name_length.to_be_bytes())?;
        self.write(tree.as_bytes())?;
        self.write(&length(key.len())?.to_be_bytes())?;
        self.write(key)?;
        self.write(&length(value.len())?.to_be_bytes())?;
        self.write(value)
    }

    /// Ends the file; what it holds.
    pub fn finish(mut self) -> Result<SnapshotFile, CoordinatorError> {
        self.write(&[END])?;
        self.out.flush().map_err(io_error(&self.path))?;
        Ok(SnapshotFile {
            path: self.path,
            header: self.header,
            digest: hex::encode(self.hasher.finalize()),
            size: self.size,
        })
    }
}

fn length(len: usize) -> Result<u32, CoordinatorError> {
    u32::try_from(len).map_err(|_| CoordinatorError::Corrupt(format!("an entry of {len} bytes")))
}

/// A snapshot file being read.
pub enum Reading {
    /// A streamed snapshot, positioned at its first record.
    Records(Reader),
    /// A snapshot of the first format, read whole.
    Whole(Snapshot),
}

impl Reading {
    /// Opens the snapshot at `path` and reads its header.
    pub fn open(path: &Path) -> Result<(SnapshotHeader, Self), CoordinatorError> {
        let file = File::open(path).map_err(io_error(path))?;
        let mut input = BufReader::new(file);
        let mut magic = [0u8; MAGIC.len()];
        let streamed = input.read_exact(&mut magic).is_ok() && &magic == MAGIC;
        if !streamed {
            let bytes = std::fs::read(path).map_err(io_error(path))?;
            let whole: Snapshot = decode(&bytes, Format::MessagePack).map_err(malformed)?;
            let header = SnapshotHeader {
                v: whole.v,
                shard: whole.shard,
                position: whole.position,
            };
            return Ok((header, Reading::Whole(whole)));
        }
        let mut reader = Reader {
            path: path.to_path_buf(),
            input,
        };
        let header_length = reader.u32()? as usize;
        let header: SnapshotHeader =
            decode(&reader.bytes(header_length)?, Format::MessagePack).map_err(malformed)?;
        Ok((header, Reading::Records(reader)))
    }
}

fn malformed(error: atelier_messages::ErrorBody) -> CoordinatorError {
    CoordinatorError::Corrupt(format!("malformed snapshot: {}", error.message))
}

/// One entry of a tree.
pub struct Record {
    pub tree: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// Reads a streamed snapshot's records.
pub struct Reader {
    path: PathBuf,
    input: BufReader<File>,
}

impl Reader {
    fn bytes(&mut self, len: usize) -> Result<Vec<u8>, CoordinatorError> {
        let mut bytes = vec![0u8; len];
        self.input
            .read_exact(&mut bytes)
            .map_err(io_error(&self.path))?;
        Ok(bytes)
    }

    fn u32(&mut self) -> Result<u32, CoordinatorError> {
        let mut bytes = [0u8; 4];
        self.input
            .read_exact(&mut bytes)
            .map_err(io_error(&self.path))?;
        Ok(u32::from_be_bytes(bytes))
    }

    /// The next entry, or `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<Record>, CoordinatorError> {
        let mut tag = [0u8; 1];
        self.input
            .read_exact(&mut tag)
            .map_err(io_error(&self.path))?;
        match tag[0] {
            END => return Ok(None),
            RECORD => {}
            other => {
                return Err(CoordinatorError::Corrupt(format!(
                    "malformed snapshot: record tag {other}"
                )));
            }
        }
        let mut name_length = [0u8; 2];
        self.input
            .read_exact(&mut name_length)
            .map_err(io_error(&self.path))?;
        let name = self.bytes(usize::from(u16::from_be_bytes(name_length)))?;
        let name = String::from_utf8(name)
            .map_err(|_| CoordinatorError::Corrupt("malformed snapshot: a tree name".into()))?;
        let key_length = self.u32()? as usize;
        let key = self.bytes(key_length)?;
        let value_length = self.u32()? as usize;
        let value = self.bytes(value_length)?;
        Ok(Some(Record {
            tree: name,
            key,
            value,
        }))
    }
}

/// One tree's entries waiting to be applied.
struct Pending {
    tree: sled::Tree,
    name: String,
    batch: sled::Batch,
    entries: usize,
    bytes: usize,
}

impl Pending {
    fn open(db: &sled::Db, name: String) -> Result<Self, CoordinatorError> {
        Ok(Self {
            tree: db.open_tree(&name)?,
            name,
            batch: sled::Batch::default(),
            entries: 0,
            bytes: 0,
        })
    }

    fn add(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.bytes += key.len() + value.len();
        self.entries += 1;
        self.batch.insert(key, value);
    }

    fn full(&self) -> bool {
        self.entries >= BATCH_ENTRIES || self.bytes >= BATCH_BYTES
    }

    /// Applies what waits, and starts again empty.
    fn apply(&mut self) -> Result<(), CoordinatorError> {
        self.tree.apply_batch(std::mem::take(&mut self.batch))?;
        (self.entries, self.bytes) = (0, 0);
        Ok(())
    }
}

/// Applies every record `reader` holds to `db`, in batches of at most [`BATCH_ENTRIES`] and
/// [`BATCH_BYTES`].
pub fn apply_records(db: &sled::Db, reader: &mut Reader) -> Result<u64, CoordinatorError> {
    let mut applied = 0u64;
    let mut pending: Option<Pending> = None;
    while let Some(Record { tree, key, value }) = reader.next_record()? {
        let current = match pending.take() {
            Some(current) if current.name == tree => current,
            Some(mut other) => {
                other.apply()?;
                Pending::open(db, tree)?
            }
            None => Pending::open(db, tree)?,
        };
        let current = pending.insert(current);
        current.add(key, value);
        applied += 1;
        if current.full() {
            current.apply()?;
        }
    }
    if let Some(mut last) = pending {
        last.apply()?;
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SnapshotHeader {
        SnapshotHeader {
            v: 1,
            shard: 3,
            position: Position { seq: 42, epoch: 7 },
        }
    }

    #[test]
    fn records_written_are_read_back_in_order_and_applied_in_batches() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("snapshot");
        let mut writer = Writer::create(&path, header()).unwrap_or_else(|e| panic!("{e}"));
        let entries = BATCH_ENTRIES + 3;
        for n in 0..entries {
            let key = format!("k{n:06}");
            writer
                .record("jobs", key.as_bytes(), &vec![7u8; n % 300])
                .unwrap_or_else(|e| panic!("{e}"));
        }
        writer
            .record("blobs", b"large", &vec![1u8; 100_000])
            .unwrap_or_else(|e| panic!("{e}"));
        let file = writer.finish().unwrap_or_else(|e| panic!("{e}"));
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert_eq!(file.size, bytes.len() as u64);
        assert_eq!(file.digest, hex::encode(Sha256::digest(&bytes)));
        assert!(bytes.starts_with(MAGIC));

        let (read_header, reading) = Reading::open(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_header, header());
        let Reading::Records(mut reader) = reading else {
            panic!("a streamed snapshot");
        };
        let db = crate::storage::open_db(&dir.path().join("db")).unwrap_or_else(|e| panic!("{e}"));
        let applied = apply_records(&db, &mut reader).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(applied, entries as u64 + 1);
        let jobs = db.open_tree("jobs").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(jobs.len(), entries);
        let last = jobs.get(format!("k{:06}", entries - 1)).unwrap_or_default();
        assert_eq!(last.map(|v| v.len()), Some((entries - 1) % 300));
        let blobs = db.open_tree("blobs").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            blobs.get(b"large").unwrap_or_default().map(|v| v.len()),
            Some(100_000)
        );
    }

    #[test]
    fn a_cut_or_damaged_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("snapshot");
        let mut writer = Writer::create(&path, header()).unwrap_or_else(|e| panic!("{e}"));
        writer
            .record("jobs", b"j1", b"real")
            .unwrap_or_else(|e| panic!("{e}"));
        writer.finish().unwrap_or_else(|e| panic!("{e}"));
        let bytes = std::fs::read(&path).unwrap_or_default();
        let db = crate::storage::open_db(&dir.path().join("db")).unwrap_or_else(|e| panic!("{e}"));
        // Cut before its end marker.
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap_or_default();
        let (_, reading) = Reading::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let Reading::Records(mut reader) = reading else {
            panic!("a streamed snapshot");
        };
        assert!(matches!(
            apply_records(&db, &mut reader),
            Err(CoordinatorError::Io { .. })
        ));
        // A record tag that is not one.
        let mut damaged = bytes.clone();
        // The record: tag, name length, "jobs", key length, "j1", value length, "real"; then
        // the end marker.
        let tag_at = bytes.len() - (1 + 2 + 4 + 4 + 2 + 4 + 4 + 1);
        damaged[tag_at] = 9;
        std::fs::write(&path, &damaged).unwrap_or_default();
        let (_, reading) = Reading::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let Reading::Records(mut reader) = reading else {
            panic!("a streamed snapshot");
        };
        assert!(matches!(
            apply_records(&db, &mut reader),
            Err(CoordinatorError::Corrupt(_))
        ));
        // Neither format: refused as malformed.
        std::fs::write(&path, b"not a snapshot").unwrap_or_default();
        assert!(matches!(
            Reading::open(&path),
            Err(CoordinatorError::Corrupt(_))
        ));
    }
}
