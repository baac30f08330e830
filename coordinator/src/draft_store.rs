//! The DraftStore actor: the only writer of workbench manifests and blobs.
//!
//! Calls are serialized through the actor's mailbox (so a publish never interleaves with a draft
//! write) and each runs on the blocking pool, since sled and file I/O block.

use atelier_messages::ErrorBody;
use atelier_messages::store::{
    BlobBytes, Done, DraftDiff, FileBytes, FileContent, Listing, Published, View, WorkbenchInfo,
    Written,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;
use serde_bytes::ByteBuf;

use crate::error::CoordinatorError;
use crate::workbench::Workbenches;

/// One store operation.
#[derive(Debug, Clone)]
pub enum StoreCall {
    Create {
        workbench: String,
    },
    ListWorkbenches,
    Add {
        workbench: String,
        files: Vec<FileContent>,
    },
    List {
        workbench: String,
        view: View,
    },
    Read {
        workbench: String,
        path: String,
        view: View,
    },
    Diff {
        workbench: String,
    },
    Publish {
        workbench: String,
    },
    Discard {
        workbench: String,
    },
    Write {
        workbench: String,
        call_id: String,
        files: Vec<FileContent>,
        delete: Vec<String>,
    },
    Blob {
        digest: String,
    },
}

/// The result of a store operation, serialized as the inner value.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum StoreAnswer {
    Workbench(WorkbenchInfo),
    Workbenches(Vec<WorkbenchInfo>),
    Listing(Listing),
    File(FileBytes),
    Diff(DraftDiff),
    Published(Published),
    Written(Written),
    Blob(BlobBytes),
    Done(Done),
}

/// Configuration of the DraftStore actor.
#[derive(Debug, Clone)]
pub struct DraftStoreConfig {
    pub workbenches: Workbenches,
}

/// The actor's state, built in `pre_start`.
pub struct DraftStoreState {
    workbenches: Workbenches,
}

/// The actor's messages.
pub enum DraftStoreMsg {
    Call(StoreCall, RpcReplyPort<Result<StoreAnswer, ErrorBody>>),
}

/// The DraftStore actor.
pub struct DraftStore;

impl Actor for DraftStore {
    type Msg = DraftStoreMsg;
    type State = DraftStoreState;
    type Arguments = DraftStoreConfig;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        config: DraftStoreConfig,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(DraftStoreState {
            workbenches: config.workbenches,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            DraftStoreMsg::Call(call, reply) => {
                let workbenches = state.workbenches.clone();
                let answer = tokio::task::spawn_blocking(move || execute(&workbenches, call))
                    .await
                    .unwrap_or_else(|join| Err(CoordinatorError::Actor(join.to_string())))
                    .map_err(ErrorBody::from);
                // The caller may have timed out; nothing to do then.
                let _ = reply.send(answer);
            }
        }
        Ok(())
    }
}

fn execute(workbenches: &Workbenches, call: StoreCall) -> Result<StoreAnswer, CoordinatorError> {
    let _span = tracing::debug_span!("store_call", call = call_name(&call)).entered();
    Ok(match call {
        StoreCall::Create { workbench } => StoreAnswer::Workbench(workbenches.create(&workbench)?),
        StoreCall::ListWorkbenches => StoreAnswer::Workbenches(workbenches.list()?),
        StoreCall::Add { workbench, files } => {
            StoreAnswer::Listing(workbenches.add(&workbench, files)?)
        }
        StoreCall::List { workbench, view } => {
            StoreAnswer::Listing(workbenches.list_files(&workbench, view)?)
        }
        StoreCall::Read {
            workbench,
            path,
            view,
        } => {
            let (entry, content) = workbenches.read(&workbench, &path, view)?;
            StoreAnswer::File(FileBytes {
                path: entry.path,
                digest: entry.digest,
                content: ByteBuf::from(content),
            })
        }
        StoreCall::Diff { workbench } => StoreAnswer::Diff(workbenches.diff(&workbench)?),
        StoreCall::Publish { workbench } => {
            StoreAnswer::Published(workbenches.publish(&workbench)?)
        }
        StoreCall::Discard { workbench } => {
            workbenches.discard(&workbench)?;
            StoreAnswer::Done(Done {})
        }
        StoreCall::Write {
            workbench,
            call_id,
            files,
            delete,
        } => StoreAnswer::Written(workbenches.write(&workbench, &call_id, files, &delete)?),
        StoreCall::Blob { digest } => StoreAnswer::Blob(BlobBytes {
            content: ByteBuf::from(workbenches.blob(&digest)?),
            digest,
        }),
    })
}

fn call_name(call: &StoreCall) -> &'static str {
    match call {
        StoreCall::Create { .. } => "create",
        StoreCall::ListWorkbenches => "workbenches",
        StoreCall::Add { .. } => "add",
        StoreCall::List { .. } => "ls",
        StoreCall::Read { .. } => "cat",
        StoreCall::Diff { .. } => "diff",
        StoreCall::Publish { .. } => "publish",
        StoreCall::Discard { .. } => "discard",
        StoreCall::Write { .. } => "write",
        StoreCall::Blob { .. } => "blob",
    }
}

/// A cheap, cloneable handle to the DraftStore actor.
#[derive(Clone)]
pub struct DraftStoreHandle {
    actor: ActorRef<DraftStoreMsg>,
}

impl DraftStoreHandle {
    pub async fn spawn(
        config: DraftStoreConfig,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), CoordinatorError> {
        let (actor, join) = Actor::spawn(None, DraftStore, config)
            .await
            .map_err(|error| CoordinatorError::Actor(error.to_string()))?;
        Ok((Self { actor }, join))
    }

    pub async fn call(&self, call: StoreCall) -> Result<StoreAnswer, ErrorBody> {
        ractor::call!(self.actor, DraftStoreMsg::Call, call).map_err(|error| {
            ErrorBody::new(
                atelier_messages::ErrorCode::Internal,
                format!("draft store unavailable: {error}"),
            )
        })?
    }

    pub fn stop(&self) {
        self.actor.stop(None);
    }
}
