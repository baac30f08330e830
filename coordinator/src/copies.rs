//! Copies of a deployment's streams, buckets and object stores: one made before with fewer
//! copies than `store_replicas` (a deployment grown from one server) is raised to them when a
//! coordinator starts, its messages kept, so that losing a server loses none of it. The server
//! cannot raise a stream written without waiting for the disk (an event stream made with one
//! copy, docs/adr/0015): that one is named, with what to do.

use async_nats::jetstream::{self, stream};
use atelier_messages::subjects::{self, shard};

/// The JetStream streams behind everything a coordinator makes (a bucket's is `KV_` or `OBJ_`
/// and its name).
fn every_stream() -> Vec<String> {
    let mut names: Vec<String> = [
        subjects::JOBS_STREAM,
        subjects::EVENTS_STREAM,
        subjects::workshop::EVENTS_STREAM,
        subjects::batch::EVENTS_STREAM,
        shard::LOG_STREAM,
    ]
    .map(str::to_string)
    .to_vec();
    names.extend(
        [
            shard::LEASES_BUCKET,
            shard::MEMBERS_BUCKET,
            atelier_messages::provider::LIMITS_BUCKET,
        ]
        .map(|kv| format!("KV_{kv}")),
    );
    names.extend(
        [subjects::BLOB_STORE_BUCKET, shard::SNAPSHOTS_BUCKET]
            .map(|objects| format!("OBJ_{objects}")),
    );
    names
}

/// Raises every stream there is with fewer than `replicas` copies.
pub async fn raise_all(js: &jetstream::Context, replicas: usize) {
    for name in every_stream() {
        let Ok(made) = js.get_stream(&name).await else {
            continue;
        };
        let existing = made.cached_info().config.clone();
        if existing.num_replicas < replicas {
            raise(js, existing, replicas).await;
        }
    }
}

/// Raises a stream made with fewer copies to `replicas`, or says why it cannot.
async fn raise(js: &jetstream::Context, existing: stream::Config, replicas: usize) {
    let name = existing.name.clone();
    let copies = existing.num_replicas;
    if existing.persist_mode == Some(stream::PersistenceMode::Async) {
        tracing::warn!(stream = %name, copies, wanted = replicas, "a stream made with fewer copies than store_replicas, written without waiting for the disk, cannot be raised: remove it (`nats stream rm {name} -f`) and restart this coordinator, which makes it again with {replicas} copies");
        return;
    }
    let raised = stream::Config {
        num_replicas: replicas,
        ..existing
    };
    match js.update_stream(raised).await {
        Ok(_) => {
            tracing::info!(stream = %name, copies, raised_to = replicas, "stream raised to store_replicas copies");
        }
        Err(error) => {
            tracing::warn!(stream = %name, copies, wanted = replicas, %error, "could not raise a stream to store_replicas copies: `nats stream edit {name} --replicas {replicas}`");
        }
    }
}
