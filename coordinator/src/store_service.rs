//! The DraftStore behind NATS: `atelier.store.*` verbs for clients and workers, answered through
//! the same [`DraftStoreHandle`] the orchestrator uses in-process.

use atelier_messages::ErrorBody;
use atelier_messages::store::{
    AddFiles, BlobBytes, BlobRef, CreateWorkbench, DiffDraft, DiscardDraft, Done, FileBytes,
    GetBlob, ListFiles, ListWorkbenches, PublishDraft, ReadFile, SetApprovals, UploadBlob,
    WriteDraft,
};
use atelier_messages::tool::DraftChanges;
use atelier_transport::blobs::inline_budget;
use atelier_transport::{Router, Routes};
use serde_bytes::ByteBuf;

use crate::draft_store::DraftStoreHandle;

/// Every store verb.
pub(crate) fn routes(client: &async_nats::Client, handle: DraftStoreHandle) -> Routes {
    // Files up to this size are answered inline; larger ones through the blob bucket.
    let inline = inline_budget(client) as u64;
    let router = Router::new(handle)
        .route(
            |store, request: CreateWorkbench| async move { store.create(request.workbench).await },
        )
        .route(|store, _: ListWorkbenches| async move { store.list_workbenches().await })
        .route(|store, request: AddFiles| async move {
            store.add(request.workbench, request.files).await
        })
        .route(|store, request: ListFiles| async move {
            store.list_files(request.workbench, request.view).await
        })
        .route(
            move |store, request: ReadFile| async move { read_file(&store, request, inline).await },
        )
        .route(|store, request: DiffDraft| async move { store.diff(request.workbench).await })
        .route(|store, request: PublishDraft| async move { store.publish(request.workbench).await })
        .route(|store, request: DiscardDraft| async move {
            store.discard(request.workbench).await.map(|()| Done {})
        })
        .route(|store, request: WriteDraft| async move {
            let changes = DraftChanges {
                files: request.files,
                delete: request.delete,
            };
            store
                .write(request.workbench, request.call_id, changes, None)
                .await
        })
        .route(|store, request: SetApprovals| async move {
            store
                .set_approvals(request.workbench, request.approvals)
                .await
        })
        .route(|store, request: GetBlob| async move {
            let (content, size) = store
                .blob_piece(request.digest.clone(), request.offset, request.length)
                .await?;
            Ok(BlobBytes {
                digest: request.digest,
                content: ByteBuf::from(content),
                size,
            })
        })
        .route(|store, request: UploadBlob| async move { store.upload(request).await });
    router.into_routes()
}

/// A file's content: inline when small, else named by digest (read in pieces with
/// `atelier.store.blob`).
async fn read_file(
    store: &DraftStoreHandle,
    request: ReadFile,
    inline: u64,
) -> Result<FileBytes, ErrorBody> {
    let entry = store
        .file_entry(
            request.workbench.clone(),
            request.path.clone(),
            request.view,
        )
        .await?;
    if entry.size > inline {
        let blob = BlobRef {
            digest: entry.digest.clone(),
            size: entry.size,
        };
        return Ok(FileBytes {
            path: entry.path,
            digest: entry.digest,
            content: ByteBuf::new(),
            blob: Some(blob),
        });
    }
    let (entry, content) = store
        .read_file(request.workbench, request.path, request.view)
        .await?;
    Ok(FileBytes {
        path: entry.path,
        digest: entry.digest,
        content: ByteBuf::from(content),
        blob: None,
    })
}
