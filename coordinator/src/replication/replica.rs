//! A shard's store: a sled database the changelog's entries are applied to, each together with
//! the position it brings the store to (one transaction), so a crash leaves a consistent prefix
//! and replay resumes after it. Snapshots of the whole store go to the object store and bound
//! the replay of a new owner; one whose content does not match its digest is
//! `SNAPSHOT_CORRUPT` and is not restored.
//!
//! A snapshot is taken while the owner keeps writing (a fuzzy snapshot): it is labelled with
//! the position the store had committed *before* it was read, and holds every committed write
//! up to there plus some later ones. Replaying the changelog from that position puts each key
//! back to its last write in changelog order, so the later writes it holds are simply applied
//! again. It is stored only once everything it holds is committed, so it never holds a write
//! the changelog lacks.

use std::path::Path;

use async_nats::jetstream::{self, object_store};
use atelier_messages::subjects::shard;
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use futures::TryStreamExt;
use sha2::{Digest, Sha256};
use sled::Transactional;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::snapshot_file::{Reading, SnapshotFile, SnapshotHeader, Writer, apply_records};
use super::{Checked, Position, RESERVED_TREE_PREFIX, ReplicationSettings};
use crate::error::{CoordinatorError, io_error};

/// The tree holding the store's position.
const META_TREE: &str = "__replication";
const POSITION_KEY: &[u8] = b"position";
/// The object metadata key holding a snapshot's sha256 (lower-case hex).
const DIGEST_KEY: &str = "atelier-sha256";

/// A shard's sled store.
#[derive(Clone)]
pub struct Replica {
    db: sled::Db,
    meta: sled::Tree,
}

impl Replica {
    /// A shard's store at `path` with a page cache of up to `cache_bytes`.
    pub fn open(path: &Path, cache_bytes: u64) -> Result<Self, CoordinatorError> {
        Self::from_db(crate::storage::open_replica_db(path, cache_bytes)?)
    }

    /// The store in `db` (which the coordinator's own storage also writes).
    pub fn from_db(db: sled::Db) -> Result<Self, CoordinatorError> {
        let meta = db.open_tree(META_TREE)?;
        Ok(Self { db, meta })
    }

    /// Notes that the store holds everything up to `position` (its owner's own commits).
    pub fn set_position(&self, position: Position) -> Result<(), CoordinatorError> {
        self.meta
            .insert(POSITION_KEY, crate::storage::encode(&position)?)?;
        Ok(())
    }

    pub fn position(&self) -> Result<Position, CoordinatorError> {
        Ok(match self.meta.get(POSITION_KEY)? {
            Some(bytes) => crate::storage::decode(&bytes)?,
            None => Position::default(),
        })
    }

    /// Applies `checked` at `seq`, unless the store is already past it. A part of a change is
    /// not applied alone (replay hands it over with its last part).
    pub fn apply(&self, seq: u64, checked: &Checked) -> Result<(), CoordinatorError> {
        let position = self.position()?;
        if seq <= position.seq || matches!(checked, Checked::Part(_)) {
            return Ok(());
        }
        let next = crate::storage::encode(&position.after(seq, checked))?;
        let Checked::Mutations(mutations) = checked else {
            self.meta.insert(POSITION_KEY, next)?;
            return Ok(());
        };
        let names: Vec<&str> = {
            let mut names: Vec<&str> = mutations.iter().map(|m| m.tree.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            names
        };
        let mut trees = vec![self.meta.clone()];
        for name in &names {
            trees.push(self.db.open_tree(name)?);
        }
        trees
            .as_slice()
            .transaction(|trees| {
                for mutation in mutations {
                    let index = 1 + names.binary_search(&mutation.tree.as_str()).unwrap_or(0);
                    match &mutation.value {
                        Some(value) => {
                            trees[index].insert(mutation.key.as_slice(), value.as_slice())?
                        }
                        None => trees[index].remove(mutation.key.as_slice())?,
                    };
                }
                trees[0].insert(POSITION_KEY, next.as_slice())?;
                Ok(())
            })
            .map_err(|error: sled::transaction::TransactionError<()>| {
                CoordinatorError::Transaction(format!("{error:?}"))
            })
    }

    /// One tree's value under `key`.
    pub fn get(&self, tree: &str, key: &[u8]) -> Result<Option<Vec<u8>>, CoordinatorError> {
        Ok(self
            .db
            .open_tree(tree)?
            .get(key)?
            .map(|value| value.to_vec()))
    }

    /// The store's sled database.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Writes the whole store (but its own bookkeeping) to a snapshot file at `path`, labelled
    /// with the position it had before it was read (see the module's documentation).
    pub fn export_to(&self, shard: u32, path: &Path) -> Result<SnapshotFile, CoordinatorError> {
        let header = SnapshotHeader {
            v: PROTOCOL_VERSION,
            shard,
            position: self.position()?,
        };
        let mut writer = Writer::create(path, header)?;
        for name in self.db.tree_names() {
            let name = String::from_utf8_lossy(&name).to_string();
            if name.starts_with(RESERVED_TREE_PREFIX) {
                continue;
            }
            for entry in self.db.open_tree(&name)?.iter() {
                let (key, value) = entry?;
                writer.record(&name, &key, &value)?;
            }
        }
        writer.finish()
    }

    /// A new store at `path` (caching up to `cache_bytes`) holding the snapshot in `file`.
    pub fn import_from(
        path: &Path,
        cache_bytes: u64,
        file: &SnapshotFile,
    ) -> Result<Self, CoordinatorError> {
        let replica = Self::open(path, cache_bytes)?;
        let (header, reading) = Reading::open(&file.path)?;
        match reading {
            Reading::Records(mut reader) => {
                apply_records(&replica.db, &mut reader)?;
            }
            Reading::Whole(snapshot) => {
                for (name, entries) in &snapshot.trees {
                    let tree = replica.db.open_tree(name)?;
                    let mut batch = sled::Batch::default();
                    for (key, value) in entries {
                        batch.insert(key.as_slice(), value.as_slice());
                    }
                    tree.apply_batch(batch)?;
                }
            }
        }
        replica
            .meta
            .insert(POSITION_KEY, crate::storage::encode(&header.position)?)?;
        replica.db.flush()?;
        Ok(replica)
    }
}

/// Shard snapshots in the object store (objects `shard-N.at-SEQ`, [`shard::snapshot`]), each with
/// its content's sha256. A shard's latest is the one at the highest sequence: an owner that
/// lost its lease and still stores one stores it under its own, older, position, which is
/// never restored.
#[derive(Clone)]
pub struct Snapshots {
    store: object_store::ObjectStore,
}

impl Snapshots {
    pub async fn open(
        jetstream: &jetstream::Context,
        settings: &ReplicationSettings,
    ) -> Result<Self, CoordinatorError> {
        // One made before is taken as it is (its copies are raised at start, `copies`).
        let config = object_store::Config {
            bucket: shard::SNAPSHOTS_BUCKET.to_string(),
            description: Some("Atelier shard snapshots (docs/adr/0014)".to_string()),
            storage: settings.storage(),
            num_replicas: settings.replicas,
            ..Default::default()
        };
        let store = atelier_transport::blobs::object_store_or_create(jetstream, config)
            .await
            .map_err(CoordinatorError::nats("the snapshots bucket"))?;
        Ok(Self { store })
    }

    /// Stores the snapshot in `file`, then removes its shard's older ones; its size in bytes.
    pub async fn put_file(&self, file: &SnapshotFile) -> Result<u64, CoordinatorError> {
        let name = shard::snapshot(file.header.shard, file.header.position.seq);
        let meta = object_store::ObjectMetadata {
            name: name.clone(),
            metadata: [(DIGEST_KEY.to_string(), file.digest.clone())].into(),
            ..Default::default()
        };
        let content = tokio::fs::File::open(&file.path)
            .await
            .map_err(io_error(&file.path))?;
        let mut content = tokio::io::BufReader::new(content);
        self.store
            .put(meta, &mut content)
            .await
            .map_err(CoordinatorError::nats("storing a snapshot"))?;
        for older in self.names(file.header.shard).await? {
            if older < name
                && let Err(error) = self.store.delete(&older).await
            {
                tracing::warn!(%error, older, "could not remove an older snapshot");
            }
        }
        Ok(file.size)
    }

    /// The names of `shard`'s snapshots, oldest first.
    pub async fn names(&self, shard: u32) -> Result<Vec<String>, CoordinatorError> {
        let prefix = shard::snapshot_prefix(shard);
        let listing = |error: String| CoordinatorError::nats("listing snapshots")(error);
        let mut names: Vec<String> = match self.store.list().await {
            Ok(list) => {
                list.map_err(|error| listing(error.to_string()))
                    .try_filter_map(|info| {
                        let name =
                            (!info.deleted && info.name.starts_with(&prefix)).then_some(info.name);
                        async move { Ok(name) }
                    })
                    .try_collect()
                    .await?
            }
            Err(error) => return Err(listing(error.to_string())),
        };
        names.sort();
        Ok(names)
    }

    /// Downloads `shard`'s latest snapshot, if any, into a file in `dir`; `SNAPSHOT_CORRUPT`
    /// (and no file) when its content does not match its digest or is not a snapshot of that
    /// shard at the position it is stored under.
    pub async fn fetch(
        &self,
        shard: u32,
        dir: &Path,
    ) -> Result<Option<SnapshotFile>, CoordinatorError> {
        let Some(latest) = self.names(shard).await?.pop() else {
            return Ok(None);
        };
        let mut object = match self.store.get(&latest).await {
            Ok(object) => object,
            Err(error) if error.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(CoordinatorError::nats("reading a snapshot")(error)),
        };
        let expected = object.info.metadata.get(DIGEST_KEY).cloned();
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(io_error(dir))?;
        let path = dir.join(format!("{latest}.fetched"));
        let fetched = download(&mut object, &path, shard).await;
        let checked = match fetched {
            Ok((digest, size)) if expected.as_deref() == Some(digest.as_str()) => {
                let checking = path.clone();
                let header = crate::storage::run_blocking(move || Reading::open(&checking))
                    .await
                    .map(|(header, _)| header)
                    .map_err(|error| corrupt(shard, &error.to_string()));
                header.and_then(|header| {
                    check(shard, &latest, &header)?;
                    Ok(SnapshotFile {
                        path: path.clone(),
                        header,
                        digest,
                        size,
                    })
                })
            }
            Ok(_) => Err(corrupt(shard, "its content does not match its digest")),
            Err(error) => Err(error),
        };
        if checked.is_err() {
            let _ = tokio::fs::remove_file(&path).await;
        }
        checked.map(Some)
    }
}

/// Streams `object` into `path`; its content's sha256 and size.
async fn download(
    object: &mut object_store::Object,
    path: &Path,
    shard: u32,
) -> Result<(String, u64), CoordinatorError> {
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(io_error(path))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let read = object
            .read(&mut buffer)
            .await
            .map_err(|error| corrupt(shard, &error.to_string()))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        size += read as u64;
        file.write_all(&buffer[..read])
            .await
            .map_err(io_error(path))?;
    }
    file.flush().await.map_err(io_error(path))?;
    Ok((hex::encode(hasher.finalize()), size))
}

/// Whether `header` is of `shard` at the position its name `stored_as` says.
fn check(shard: u32, stored_as: &str, header: &SnapshotHeader) -> Result<(), CoordinatorError> {
    if header.shard != shard {
        return Err(corrupt(shard, "it is another shard's"));
    }
    if shard::snapshot(shard, header.position.seq) != stored_as {
        return Err(corrupt(
            shard,
            "its position is not the one it is stored under",
        ));
    }
    Ok(())
}

fn corrupt(shard: u32, why: &str) -> CoordinatorError {
    tracing::error!(shard, why, "refused a shard snapshot");
    CoordinatorError::Rejected(ErrorBody::new(
        ErrorCode::SnapshotCorrupt,
        format!("the snapshot of shard {shard} is not restored: {why}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_store_lasts_as_long_as_its_owner_holds_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("shard");
        let replica = Replica::open(&path, 8 << 20).unwrap_or_else(|e| panic!("{e}"));
        let position = Position { seq: 3, epoch: 1 };
        replica
            .set_position(position)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(replica.position().ok(), Some(position));
        assert!(path.exists());
        drop(replica);
        // sled removes a temporary store when its last handle goes, which a write of its log
        // still running on sled's I/O threads may hold a moment longer.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while path.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            !path.exists(),
            "a new owner restores from the snapshot and the changelog, never from this copy"
        );
    }
}
