//! Blobs moved through the store in pieces, for clients and workers, which have no JetStream
//! rights (docs/adr/0016): a download asks `atelier.store.blob` for consecutive pieces (a few
//! at once) into a temporary file beside the target, hashing on the way, and renames it into
//! place only when size and sha256 match; an upload sends `atelier.store.upload` pieces in
//! order, going on from wherever the store says it holds the upload (a lost answer, an owner
//! that changed), until the store has checked the whole blob against its digest.

use std::path::Path;

use atelier_messages::store::{BLOB_PIECE_BYTES, BlobRef, GetBlob, UploadBlob};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use serde_bytes::ByteBuf;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::blobs::{Checked, put_in_place, temp_beside};
use crate::{Policy, request};

/// Pieces of a download asked for at once.
const WINDOW: usize = 4;

/// Times an upload may be told to go back before it gives up.
const RESTARTS: u32 = 3;

/// The piece size for `client`: [`BLOB_PIECE_BYTES`], or half the server's `max_payload` when
/// that is smaller (room for the rest of the message).
pub fn piece_bytes(client: &async_nats::Client) -> u64 {
    match client.server_info().max_payload {
        0 => BLOB_PIECE_BYTES,
        max_payload => BLOB_PIECE_BYTES.min(max_payload as u64 / 2).max(1),
    }
}

/// Downloads `blob` (of `workbench`, when known: its shard answers at once) into `target`,
/// fsynced with its directory when `durable`; `progress` is told the bytes written so far.
pub async fn fetch_to(
    client: &async_nats::Client,
    workbench: Option<&str>,
    blob: &BlobRef,
    target: &Path,
    durable: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), ErrorBody> {
    let started = std::time::Instant::now();
    let temp = temp_beside(target);
    let fetched = fetch_into(client, workbench, blob, &temp, durable, progress).await;
    if let Err(error) = fetched {
        let _ = tokio::fs::remove_file(&temp).await;
        return Err(error);
    }
    put_in_place(&temp, target, durable).await?;
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::info!(digest = %blob.digest, size = blob.size, elapsed_ms, "blob fetched in pieces");
    Ok(())
}

async fn fetch_into(
    client: &async_nats::Client,
    workbench: Option<&str>,
    blob: &BlobRef,
    temp: &Path,
    durable: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), ErrorBody> {
    let mut file = Checked::create(temp).await?;
    let piece = piece_bytes(client);
    let ask = |offset: u64| {
        let request = GetBlob {
            v: PROTOCOL_VERSION,
            digest: blob.digest.clone(),
            workbench: workbench.map(str::to_string),
            offset,
            length: Some(piece.min(blob.size - offset)),
        };
        async move { request_piece(client, &request).await }
    };
    let mut pending = FuturesOrdered::new();
    let mut next_offset = 0;
    while file.size < blob.size {
        while pending.len() < WINDOW && next_offset < blob.size {
            pending.push_back(ask(next_offset));
            next_offset += piece.min(blob.size - next_offset);
        }
        let Some(asked) = pending.next().await else {
            break;
        };
        let content = asked?;
        if content.is_empty() {
            return Err(changed(blob, file.size));
        }
        file.write(&content).await?;
        progress(file.size);
    }
    file.finish(blob, durable).await
}

fn changed(blob: &BlobRef, at: u64) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::FileReadFailed,
        format!(
            "blob {} ended after {at} of its {} bytes",
            blob.digest, blob.size
        ),
    )
}

async fn request_piece(client: &async_nats::Client, piece: &GetBlob) -> Result<Vec<u8>, ErrorBody> {
    let answer = request(client, piece, Policy::STORE).await?;
    Ok(answer.content.into_vec())
}

/// Where an upload's bytes come from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    File(&'a Path),
    Bytes(&'a [u8]),
}

impl<'a> Source<'a> {
    /// The source ready to be read at offsets: a file opened once for the whole upload.
    async fn open(self) -> Result<Opened<'a>, ErrorBody> {
        match self {
            Source::Bytes(bytes) => Ok(Opened::Bytes(bytes)),
            Source::File(path) => {
                let file = tokio::fs::File::open(path)
                    .await
                    .map_err(read_error(path))?;
                Ok(Opened::File(path, file))
            }
        }
    }
}

/// An upload's source being read.
enum Opened<'a> {
    File(&'a Path, tokio::fs::File),
    Bytes(&'a [u8]),
}

fn read_error(path: &Path) -> impl Fn(std::io::Error) -> ErrorBody + '_ {
    move |error| {
        ErrorBody::new(
            ErrorCode::FileReadFailed,
            format!("cannot read {}: {error}", path.display()),
        )
    }
}

impl Opened<'_> {
    async fn read_at(&mut self, offset: u64, length: u64) -> Result<Vec<u8>, ErrorBody> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        match self {
            Opened::Bytes(bytes) => Ok(bytes
                .get(start..start.saturating_add(length).min(bytes.len()))
                .unwrap_or_default()
                .to_vec()),
            Opened::File(path, file) => {
                file.seek(std::io::SeekFrom::Start(offset))
                    .await
                    .map_err(read_error(path))?;
                let mut piece = vec![0; length];
                file.read_exact(&mut piece)
                    .await
                    .map_err(read_error(path))?;
                Ok(piece)
            }
        }
    }
}

/// Uploads `source` (whose digest and size are `blob`) to the store for `workbench`, in
/// pieces; `progress` is told the bytes the store holds so far. Then `blob` may be named in
/// `atelier.store.add` or a draft write as `FileContent::staged`.
pub async fn upload(
    client: &async_nats::Client,
    workbench: &str,
    source: Source<'_>,
    blob: &BlobRef,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), ErrorBody> {
    let upload = hex::encode(rand::random::<[u8; 12]>());
    let piece = piece_bytes(client);
    let mut opened = source.open().await?;
    let mut offset = 0;
    let mut restarts = 0;
    loop {
        let length = piece.min(blob.size - offset);
        let content = opened.read_at(offset, length).await?;
        let piece_sent = UploadBlob {
            v: PROTOCOL_VERSION,
            workbench: workbench.to_string(),
            upload: upload.clone(),
            digest: blob.digest.clone(),
            size: blob.size,
            offset,
            content: ByteBuf::from(content),
        };
        let answer = request(client, &piece_sent, Policy::STORE).await?;
        progress(answer.received);
        if answer.complete {
            return Ok(());
        }
        if answer.received != offset + length {
            restarts += 1;
            if restarts > RESTARTS {
                return Err(ErrorBody::new(
                    ErrorCode::FileWriteFailed,
                    format!(
                        "the upload of {} was sent back to byte {} {restarts} times; try again",
                        blob.digest, answer.received
                    ),
                ));
            }
        }
        offset = answer.received.min(blob.size);
    }
}
