//! Blobs in pieces, for clients and workers that have no JetStream rights (docs/adr/0016): a
//! piece of a stored blob read at an offset (`atelier.store.blob`), and an upload received a
//! piece at a time (`atelier.store.upload`) into a part file, checked against its digest once
//! whole. The caller takes a whole upload into the blob directory ([`crate::blobs::BlobDir::adopt`]),
//! where `atelier.store.add` and draft writes find it.
//!
//! Pieces arrive in order; a piece at another offset than the part file's length is not
//! written, and the answer says where to go on from (a piece sent again after a lost answer,
//! an owner that changed half-way). Part files are named by digest and upload id, so two
//! uploads of one blob never mix; a part file left by an upload that stopped is removed after
//! [`ABANDONED`] when the next upload starts.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use atelier_messages::store::{BLOB_PIECE_BYTES, BlobRef, UploadBlob};
use atelier_messages::{ErrorBody, ErrorCode};
use sha2::{Digest, Sha256};

use crate::blobs::is_digest;
use crate::error::{CoordinatorError, io_error};
use crate::workbench::BlobSource;

/// How long a part file nobody adds to is kept.
pub const ABANDONED: Duration = Duration::from_secs(24 * 3600);

/// Largest blob an upload may announce.
pub const MAX_UPLOAD_BYTES: u64 = 64 << 30;

fn invalid(message: String) -> CoordinatorError {
    ErrorBody::new(ErrorCode::ValidationFailed, message).into()
}

/// The piece of `source` (the blob `digest`) `length` bytes long at `offset` (none: the whole
/// blob, when it is at most one piece), and the whole blob's size.
pub fn read_piece(
    source: BlobSource,
    digest: &str,
    offset: u64,
    length: Option<u64>,
) -> Result<(Vec<u8>, u64), CoordinatorError> {
    let size = match &source {
        BlobSource::Bytes(bytes) => bytes.len() as u64,
        BlobSource::File(_, size) => *size,
    };
    let length = match length {
        Some(length) if length <= BLOB_PIECE_BYTES => length,
        Some(length) => {
            return Err(invalid(format!(
                "a piece is at most {BLOB_PIECE_BYTES} bytes, not {length}"
            )));
        }
        None if size <= BLOB_PIECE_BYTES && offset == 0 => size,
        None => {
            return Err(invalid(format!(
                "blob {digest} is {size} bytes: ask for it in pieces of at most \
                 {BLOB_PIECE_BYTES} bytes (offset, length)"
            )));
        }
    };
    if offset > size {
        return Err(invalid(format!(
            "offset {offset} is past the end of blob {digest} ({size} bytes)"
        )));
    }
    let end = offset.saturating_add(length).min(size);
    let piece = match source {
        BlobSource::Bytes(bytes) => bytes[offset as usize..end as usize].to_vec(),
        BlobSource::File(path, _) => read_range(&path, offset, end - offset)?,
    };
    Ok((piece, size))
}

fn read_range(path: &Path, offset: u64, length: u64) -> Result<Vec<u8>, CoordinatorError> {
    let mut file = std::fs::File::open(path).map_err(io_error(path))?;
    file.seek(SeekFrom::Start(offset)).map_err(io_error(path))?;
    let mut piece = Vec::with_capacity(length as usize);
    file.take(length)
        .read_to_end(&mut piece)
        .map_err(io_error(path))?;
    Ok(piece)
}

/// What an upload holds after a piece.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// This many bytes so far.
    Partial(u64),
    /// Whole and checked: the part file holding the blob.
    Whole(PathBuf),
}

/// Checks an upload's piece before anything is written.
pub fn check(request: &UploadBlob) -> Result<BlobRef, CoordinatorError> {
    let upload_ok = !request.upload.is_empty()
        && request.upload.len() <= 64
        && request
            .upload
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-');
    if !upload_ok {
        return Err(invalid(format!(
            "upload id {:?} must be 1 to 64 letters, digits or '-'",
            request.upload
        )));
    }
    if !is_digest(&request.digest) {
        return Err(invalid(format!(
            "digest {:?} is not a lower-case hex sha256",
            request.digest
        )));
    }
    if request.size > MAX_UPLOAD_BYTES {
        return Err(invalid(format!(
            "a blob of {} bytes is over the upload limit of {MAX_UPLOAD_BYTES}",
            request.size
        )));
    }
    let piece = request.content.len() as u64;
    if piece > BLOB_PIECE_BYTES {
        return Err(invalid(format!(
            "a piece is at most {BLOB_PIECE_BYTES} bytes, not {piece}"
        )));
    }
    if request.offset.saturating_add(piece) > request.size {
        return Err(invalid(format!(
            "a piece of {piece} bytes at {} goes past the blob's {} bytes",
            request.offset, request.size
        )));
    }
    Ok(BlobRef {
        digest: request.digest.clone(),
        size: request.size,
    })
}

/// Adds `request`'s piece to its part file under `dir` (when it continues it), and checks the
/// blob once whole: a blob whose content does not hash to its digest is refused
/// (`FILE_WRITE_FAILED`) and its part file removed.
pub fn receive(dir: &Path, request: &UploadBlob) -> Result<Received, CoordinatorError> {
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let part = dir.join(format!("{}.{}.part", request.digest, request.upload));
    if request.offset == 0 {
        remove_abandoned(dir);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&part)
        .map_err(io_error(&part))?;
    let mut received = file.metadata().map_err(io_error(&part))?.len();
    if request.offset == received {
        file.write_all(&request.content).map_err(io_error(&part))?;
        received += request.content.len() as u64;
    }
    if received < request.size {
        return Ok(Received::Partial(received));
    }
    file.sync_all().map_err(io_error(&part))?;
    let digest = digest_of_file(&part)?;
    if digest != request.digest || received != request.size {
        let _ = std::fs::remove_file(&part);
        return Err(ErrorBody::new(
            ErrorCode::FileWriteFailed,
            format!(
                "the upload of {} arrived as {received} bytes with digest {digest}; nothing \
                 was kept: send it again",
                request.digest
            ),
        )
        .into());
    }
    Ok(Received::Whole(part))
}

fn digest_of_file(path: &Path) -> Result<String, CoordinatorError> {
    let mut file = std::fs::File::open(path).map_err(io_error(path))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(io_error(path))?;
    Ok(hex::encode(hasher.finalize()))
}

/// Removes the part files nobody added to for [`ABANDONED`].
fn remove_abandoned(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let stale = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|idle| idle > ABANDONED);
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_bytes::ByteBuf;

    fn piece(content: &[u8], offset: u64, whole: &[u8]) -> UploadBlob {
        UploadBlob {
            v: 1,
            workbench: "wb".into(),
            upload: "u-1".into(),
            digest: hex::encode(Sha256::digest(whole)),
            size: whole.len() as u64,
            offset,
            content: ByteBuf::from(content.to_vec()),
        }
    }

    #[test]
    fn an_upload_in_pieces_is_whole_once_its_digest_checks_and_a_repeat_changes_nothing()
    -> Result<(), CoordinatorError> {
        let dir = tempfile::tempdir().map_err(io_error(Path::new("tmp")))?;
        let whole = b"hello, pieces of a blob";
        let first = piece(&whole[..10], 0, whole);
        assert_eq!(receive(dir.path(), &first)?, Received::Partial(10));
        // The same piece again (its answer was lost) is not written twice.
        assert_eq!(receive(dir.path(), &first)?, Received::Partial(10));
        // A piece from further on says where to go on from.
        let ahead = piece(&whole[15..], 15, whole);
        assert_eq!(receive(dir.path(), &ahead)?, Received::Partial(10));
        let rest = piece(&whole[10..], 10, whole);
        let Received::Whole(path) = receive(dir.path(), &rest)? else {
            panic!("the last piece completes the blob");
        };
        assert_eq!(std::fs::read(&path).unwrap_or_default(), whole);
        Ok(())
    }

    #[test]
    fn content_that_does_not_hash_to_its_digest_is_refused_and_not_kept()
    -> Result<(), CoordinatorError> {
        let dir = tempfile::tempdir().map_err(io_error(Path::new("tmp")))?;
        let mut forged = piece(b"other bytes", 0, b"other bytez");
        forged.size = 11;
        let refused = receive(dir.path(), &forged);
        let code = refused.map_err(|error| error.to_body().code);
        assert_eq!(code, Err(ErrorCode::FileWriteFailed));
        assert_eq!(
            std::fs::read_dir(dir.path()).map(|d| d.count()).ok(),
            Some(0)
        );
        Ok(())
    }

    #[test]
    fn bad_pieces_are_refused_before_anything_is_written() {
        let whole = b"abc";
        let bad = [
            UploadBlob {
                upload: "../x".into(),
                ..piece(whole, 0, whole)
            },
            UploadBlob {
                digest: "../../etc/passwd".into(),
                ..piece(whole, 0, whole)
            },
            UploadBlob {
                offset: 2,
                ..piece(whole, 0, whole)
            },
            UploadBlob {
                size: MAX_UPLOAD_BYTES + 1,
                ..piece(whole, 0, whole)
            },
        ];
        for request in bad {
            let code = check(&request).map_err(|error| error.to_body().code);
            assert_eq!(code.err(), Some(ErrorCode::ValidationFailed), "{request:?}");
        }
    }

    #[test]
    fn pieces_are_read_at_their_offset_and_a_large_blob_is_not_read_whole()
    -> Result<(), CoordinatorError> {
        let bytes = BlobSource::Bytes(b"0123456789".to_vec());
        assert_eq!(read_piece(bytes, "d", 3, Some(4))?, (b"3456".to_vec(), 10));
        let bytes = BlobSource::Bytes(b"0123456789".to_vec());
        assert_eq!(read_piece(bytes, "d", 8, Some(4))?, (b"89".to_vec(), 10));
        let dir = tempfile::tempdir().map_err(io_error(Path::new("tmp")))?;
        let path = dir.path().join("blob");
        std::fs::write(&path, b"0123456789").map_err(io_error(&path))?;
        let file = BlobSource::File(path.clone(), 10);
        assert_eq!(
            read_piece(file, "d", 0, None)?,
            (b"0123456789".to_vec(), 10)
        );
        let large = BlobSource::File(path.clone(), BLOB_PIECE_BYTES + 1);
        let code = read_piece(large, "d", 0, None).map_err(|error| error.to_body().code);
        assert_eq!(code.err(), Some(ErrorCode::ValidationFailed));
        let past = BlobSource::File(path, 10);
        let code = read_piece(past, "d", 11, Some(1)).map_err(|error| error.to_body().code);
        assert_eq!(code.err(), Some(ErrorCode::ValidationFailed));
        Ok(())
    }
}
