//! Content-addressed blobs on disk: `<dir>/<first two hex>/<sha256>`, written durably; small
//! ones are kept durable in sled by the caller, and those of files added by users are written
//! here as a cache ([`BlobDir::put_cached`]) for workers on this host. Garbage collection sweeps both the blobs
//! and the table databases those workers cached by a blob's digest ([`sweep_tables`]).
//!
//! A replicated store (docs/adr/0014) also keeps each large blob in the JetStream bucket
//! `atelier-blob-store` ([`BlobDir::with_remote`]): a coordinator that takes the store over
//! brings a blob it lacks from there the first time it is read.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use atelier_messages::store::BlobRef;
use atelier_messages::workshop::Collected;
use atelier_transport::BlobBucket;

use sha2::{Digest, Sha256};

use crate::error::{CoordinatorError, io_error};

/// The blob directory.
#[derive(Debug, Clone)]
pub struct BlobDir {
    root: PathBuf,
    /// The durable copy of a replicated store's blobs.
    remote: Option<Remote>,
}

/// Blobs kept in a JetStream bucket, reached from blocking code.
#[derive(Debug, Clone)]
struct Remote {
    bucket: Arc<BlobBucket>,
    runtime: tokio::runtime::Handle,
}

impl Remote {
    /// Waits for `work` from the storage's blocking threads ([`crate::storage::wait_for`]).
    fn wait<T>(
        &self,
        what: &'static str,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, CoordinatorError> {
        crate::storage::wait_for(&self.runtime, what, work)
    }
}

/// Lower-case hex sha256 of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether `digest` looks like a sha256 hex digest (guards paths built from it).
pub fn is_digest(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl BlobDir {
    pub fn open(root: PathBuf) -> Result<Self, CoordinatorError> {
        std::fs::create_dir_all(&root).map_err(io_error(&root))?;
        Ok(Self { root, remote: None })
    }

    /// Also keeps every durable blob in `bucket`, and brings from it any blob that is not here
    /// (called within the runtime that serves the bucket).
    pub fn with_remote(self, bucket: BlobBucket) -> Self {
        let remote = Remote {
            bucket: Arc::new(bucket),
            runtime: tokio::runtime::Handle::current(),
        };
        Self {
            remote: Some(remote),
            ..self
        }
    }

    /// The bucket that keeps the durable copy of a replicated store's blobs, if there is one.
    pub fn durable(&self) -> Option<Arc<BlobBucket>> {
        self.remote.as_ref().map(|remote| remote.bucket.clone())
    }

    /// Puts the blob file at `path` into the durable copy, if there is one.
    pub async fn replicate(&self, path: &Path, blob: &BlobRef) -> Result<(), CoordinatorError> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        remote.bucket.put_file(path, blob).await?;
        Ok(())
    }

    /// Brings the blob `digest` from the durable copy when it is not here; whether it is here.
    pub fn fetch(&self, digest: &str) -> Result<bool, CoordinatorError> {
        let Some(path) = self.path_for(digest) else {
            return Ok(false);
        };
        if path.exists() {
            return Ok(true);
        }
        let Some(remote) = &self.remote else {
            return Ok(false);
        };
        let Some(size) =
            remote.wait("a blob's size in the bucket", remote.bucket.size_of(digest))?
        else {
            return Ok(false);
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        let blob = BlobRef {
            digest: digest.to_string(),
            size,
        };
        remote.wait(
            "a blob from the bucket",
            remote.bucket.fetch_to(&blob, &path, true),
        )??;
        tracing::info!(
            digest,
            size,
            "blob brought from the replicated store's bucket"
        );
        Ok(true)
    }

    /// Where uploads received in pieces are kept until whole ([`crate::pieces`]); its files are
    /// not named by digests, so a sweep passes them by.
    pub fn uploads_dir(&self) -> PathBuf {
        self.root.join("uploads")
    }

    fn path_of(&self, digest: &str) -> PathBuf {
        self.root.join(&digest[..2]).join(digest)
    }

    /// Where the blob `digest` lives (or would); `None` when the digest is malformed.
    pub fn path_for(&self, digest: &str) -> Option<PathBuf> {
        is_digest(digest).then(|| self.path_of(digest))
    }

    /// Whether the blob file `digest` exists with `size` bytes.
    pub fn has(&self, digest: &str, size: u64) -> bool {
        self.path_for(digest)
            .and_then(|path| std::fs::metadata(path).ok())
            .is_some_and(|meta| meta.len() == size)
    }

    /// Writes `bytes` as a cache file (temp file, rename; no fsync): its durable copy is
    /// elsewhere. A reader must check the file against the manifest's size or digest.
    pub fn put_cached(&self, bytes: &[u8]) -> Result<String, CoordinatorError> {
        self.write(bytes, false)
    }

    /// Stores `bytes` (temp file, fsync, rename, fsync dir; and into the durable copy of a
    /// replicated store) and returns the digest.
    pub fn put(&self, bytes: &[u8]) -> Result<String, CoordinatorError> {
        let digest = self.write(bytes, true)?;
        if let Some(remote) = &self.remote {
            let blob = BlobRef {
                digest: digest.clone(),
                size: bytes.len() as u64,
            };
            remote.wait(
                "a blob put into the bucket",
                remote.bucket.put_bytes(bytes, &blob),
            )??;
        }
        Ok(digest)
    }

    fn write(&self, bytes: &[u8], durable: bool) -> Result<String, CoordinatorError> {
        let digest = digest_of(bytes);
        let target = self.path_of(&digest);
        if target.exists() {
            return Ok(digest);
        }
        let dir = self.root.join(&digest[..2]);
        std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        let temp = dir.join(format!(".{digest}.{}.tmp", std::process::id()));
        let mut file = std::fs::File::create(&temp).map_err(io_error(&temp))?;
        file.write_all(bytes).map_err(io_error(&temp))?;
        if durable {
            file.sync_all().map_err(io_error(&temp))?;
        }
        std::fs::rename(&temp, &target).map_err(io_error(&target))?;
        if durable {
            std::fs::File::open(&dir)
                .and_then(|handle| handle.sync_all())
                .map_err(io_error(&dir))?;
        }
        Ok(digest)
    }

    /// Takes the checked file `part` (in [`BlobDir::uploads_dir`], on this file system) as the
    /// blob `digest`, durably: renamed into place and its directory fsynced (the caller
    /// fsynced the file). A blob already here stays as it is and `part` is removed.
    pub fn adopt(&self, part: &Path, digest: &str) -> Result<PathBuf, CoordinatorError> {
        let Some(target) = self.path_for(digest) else {
            return Err(atelier_messages::ErrorBody::new(
                atelier_messages::ErrorCode::ValidationFailed,
                format!("blob digest {digest:?} is not a lower-case hex sha256"),
            )
            .into());
        };
        if target.exists() {
            std::fs::remove_file(part).map_err(io_error(part))?;
            return Ok(target);
        }
        let dir = self.root.join(&digest[..2]);
        std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        std::fs::rename(part, &target).map_err(io_error(&target))?;
        std::fs::File::open(&dir)
            .and_then(|handle| handle.sync_all())
            .map_err(io_error(&dir))?;
        Ok(target)
    }

    /// Reads a blob; `None` when absent or the digest is malformed.
    pub fn get(&self, digest: &str) -> Result<Option<Vec<u8>>, CoordinatorError> {
        if !is_digest(digest) {
            return Ok(None);
        }
        if !self.fetch(digest)? {
            return Ok(None);
        }
        let path = self.path_of(digest);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error(&path)(error)),
        }
    }
}

/// What a sweep removed and kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub removed: u64,
    pub freed_bytes: u64,
    pub kept: u64,
}

impl BlobDir {
    /// Removes every blob whose digest `keep` refuses (temp files of writes in flight and
    /// anything that is not a blob are left alone).
    pub fn sweep(&self, keep: impl Fn(&str) -> bool) -> Result<Swept, CoordinatorError> {
        let mut swept = Swept::default();
        for shard in std::fs::read_dir(&self.root).map_err(io_error(&self.root))? {
            let shard = shard.map_err(io_error(&self.root))?.path();
            if !shard.is_dir() {
                continue;
            }
            for blob in std::fs::read_dir(&shard).map_err(io_error(&shard))? {
                let path = blob.map_err(io_error(&shard))?.path();
                let Some(digest) = path.file_name().and_then(|name| name.to_str()) else {
                    continue;
                };
                swept.sweep(digest, &keep, std::slice::from_ref(&path))?;
            }
        }
        Ok(swept)
    }
}

impl Swept {
    /// A collection of one host: these blobs swept and `tables`, logged.
    pub fn with_tables(self, tables: Swept) -> Collected {
        tracing::info!(
            removed = self.removed,
            freed_bytes = self.freed_bytes,
            removed_tables = tables.removed,
            "blob garbage collected"
        );
        Collected {
            removed_blobs: self.removed,
            freed_bytes: self.freed_bytes + tables.freed_bytes,
            kept_blobs: self.kept,
            removed_tables: tables.removed,
            hosts: 1,
            ..Collected::default()
        }
    }

    /// Keeps the files named by `digest` when `keep` accepts it, else removes them (one found
    /// file counted as removed, their bytes as freed; a file already gone is no error). A
    /// name that is not a digest is left alone.
    fn sweep(
        &mut self,
        digest: &str,
        keep: &impl Fn(&str) -> bool,
        files: &[PathBuf],
    ) -> Result<(), CoordinatorError> {
        if !is_digest(digest) {
            return Ok(());
        }
        if keep(digest) {
            self.kept += 1;
            return Ok(());
        }
        for file in files {
            let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
            match std::fs::remove_file(file) {
                Ok(()) => self.freed_bytes += size,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(io_error(file)(error)),
            }
        }
        self.removed += 1;
        Ok(())
    }
}

/// Removes the cached table databases under `dir` (`<digest>.duckdb` and its `.wal`) whose
/// digest `keep` refuses: their file is gone from every manifest, so no worker asks for them
/// again. A missing `dir` has nothing to sweep. A worker holding one open keeps reading it.
pub fn sweep_tables(
    dir: &std::path::Path,
    keep: impl Fn(&str) -> bool,
) -> Result<Swept, CoordinatorError> {
    let mut swept = Swept::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(swept),
        Err(error) => return Err(io_error(dir)(error)),
    };
    for entry in entries {
        let path = entry.map_err(io_error(dir))?.path();
        let Some(digest) = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(".duckdb"))
        else {
            continue;
        };
        let mut wal = path.clone().into_os_string();
        wal.push(".wal");
        swept.sweep(digest, &keep, &[path.clone(), PathBuf::from(wal)])?;
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_is_content_addressed_and_idempotent() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let blobs = BlobDir::open(dir.path().join("blobs")).unwrap_or_else(|e| panic!("{e}"));
        let first = blobs.put(b"hello").unwrap_or_default();
        let second = blobs.put(b"hello").unwrap_or_default();
        assert_eq!(first, second);
        assert_eq!(
            first,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(
            blobs.get(&first).ok().flatten().as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(blobs.get("../../etc/passwd").ok().flatten(), None);
    }
}
