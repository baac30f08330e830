//! One store per deployment: a coordinator with a store of its own claims the NATS deployment
//! before it serves anything.
//!
//! Every coordinator answers the same subjects and consumes the same intake; two of them each
//! with a store of its own would split the workbenches and jobs between two stores (a `wb add`
//! answered by the one that did not see the `wb create`). So a coordinator whose store is its
//! own holds the key [`OWN_STORE_KEY`] of the bucket [`CLAIMS_BUCKET`], created only if absent
//! and renewed by compare-and-set; the bucket's `max_age` is the claim's life, so a killed
//! holder's claim lapses by itself. A second coordinator with a store of its own, or a
//! replicated one (whose shards are leased, docs/adr/0014), finds the claim and refuses to
//! start with `STORE_CLAIMED`; a store of its own likewise refuses while shards are leased.
//! The same store started again (same host and data directory: a restart after a crash) takes
//! its claim back at once, as does any coordinator when the holder ran on its host and its
//! process is gone; sled's own lock keeps two processes off one data directory. A clean stop
//! releases the claim.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use atelier_messages::shard::{ShardLease, StoreClaim};
use atelier_messages::subjects::shard;
use atelier_messages::{ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, decode, encode, now_ms};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::CoordinatorError;

/// The bucket of the deployment-wide claims.
pub const CLAIMS_BUCKET: &str = "atelier-store-claims";
/// The key a coordinator with a store of its own holds.
pub const OWN_STORE_KEY: &str = "own-store";
/// How long a claim lives without renewal.
const CLAIM_LIFE: Duration = Duration::from_secs(6);
/// How often the holder renews it.
const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How often a coordinator waiting for another's claim to lapse looks again.
const POLL: Duration = Duration::from_millis(500);

/// True when `claim` and `mine` are the same store: the same host and data directory.
fn same_store(claim: &StoreClaim, mine: &StoreClaim) -> bool {
    claim.host == mine.host && claim.data_dir == mine.data_dir
}

/// True when `claim`'s holder ran on this host and its process is gone (killed): the claim
/// would lapse by itself, and need not be waited for.
fn is_gone(claim: &StoreClaim) -> bool {
    let proc_fs = Path::new("/proc/self").exists();
    proc_fs
        && claim.host == host_name()
        && claim.pid != 0
        && !Path::new(&format!("/proc/{}", claim.pid)).exists()
}

/// A held claim: renewed in the background until dropped; [`Claim::lost`] resolves if another
/// coordinator took it (this one was paused past the claim's life).
pub struct Claim {
    renewal: JoinHandle<()>,
    lost: watch::Receiver<bool>,
    kv: kv::Store,
}

impl Claim {
    /// Gives the claim up (a clean stop): the next coordinator need not wait for it to lapse.
    pub async fn release(self) {
        self.renewal.abort();
        if let Err(error) = self.kv.delete(OWN_STORE_KEY).await {
            tracing::warn!(%error, "releasing the store claim failed; it lapses by itself");
        }
    }

    /// Resolves when the claim was lost: the coordinator must stop serving.
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        // An error means the renewal ended without a loss (the claim was dropped).
        if lost.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

/// Claims the deployment for the store of its own in `data_dir`, or says who serves it. A
/// replicated store's leases, or another store's claim, left by a killed coordinator lapse
/// within their life: start-up waits that long before it refuses.
pub async fn claim_own_store(
    jetstream: &jetstream::Context,
    coordinator: &str,
    data_dir: &Path,
) -> Result<Claim, CoordinatorError> {
    if let Ok(leases) = jetstream.get_key_value(shard::LEASES_BUCKET).await {
        let life = bucket_life(&leases).await;
        until_free(life, || async {
            Ok(match a_leased_shard(&leases).await? {
                Some(owner) => Look::Held(format!(
                    "a replicated store is served on it (shards leased by {owner})"
                )),
                None => Look::Done(()),
            })
        })
        .await?;
    }
    let kv = jetstream
        .create_or_update_key_value(kv::Config {
            bucket: CLAIMS_BUCKET.to_string(),
            description: "Atelier: the coordinator serving a store of its own".to_string(),
            history: 1,
            max_age: CLAIM_LIFE,
            ..Default::default()
        })
        .await
        .map_err(CoordinatorError::nats("the store claims bucket"))?;
    let mine = StoreClaim {
        v: PROTOCOL_VERSION,
        coordinator: coordinator.to_string(),
        host: host_name(),
        pid: std::process::id(),
        data_dir: data_dir.display().to_string(),
        renewed_at_ms: now_ms(),
    };
    let revision = until_free(CLAIM_LIFE + RENEW_EVERY, || try_take(&kv, &mine)).await?;
    let (lost_tx, lost) = watch::channel(false);
    let renewal = tokio::spawn(renew(kv.clone(), mine, revision, lost_tx));
    Ok(Claim { renewal, lost, kv })
}

/// Refuses a replicated store's start while a store of its own holds the deployment.
pub async fn refuse_beside_an_own_store(
    jetstream: &jetstream::Context,
) -> Result<(), CoordinatorError> {
    let Ok(kv) = jetstream.get_key_value(CLAIMS_BUCKET).await else {
        return Ok(());
    };
    until_free(CLAIM_LIFE + RENEW_EVERY, || async {
        Ok(match holder(&kv).await? {
            Some((holder, _)) if !is_gone(&holder) => Look::Held(describe(&holder)),
            _ => Look::Done(()),
        })
    })
    .await
}

/// What one look at a claim or a lease found.
enum Look<T> {
    /// Nobody holds on: what the look got.
    Done(T),
    /// Someone else holds on (who, as the refusal names them).
    Held(String),
    /// The claim changed between two reads: look again.
    Again,
}

/// Looks with `look` until nobody holds on, waiting up to `patience` for another's claim or
/// lease to lapse; then refuses, naming who holds on.
async fn until_free<T, Check, Fut>(
    patience: Duration,
    mut look: Check,
) -> Result<T, CoordinatorError>
where
    Check: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Look<T>, CoordinatorError>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    let mut told = false;
    loop {
        match look().await? {
            Look::Done(value) => return Ok(value),
            Look::Held(who) if tokio::time::Instant::now() > deadline => {
                return Err(claimed(&who));
            }
            Look::Held(who) if !told => {
                told = true;
                tracing::info!(%who, "another coordinator serves this deployment; waiting for its claim to lapse");
            }
            Look::Held(_) | Look::Again => {}
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How long a bucket's entries live (its `max_age`), and a renewal's margin.
async fn bucket_life(kv: &kv::Store) -> Duration {
    let life = match kv.status().await {
        Ok(status) => status.max_age(),
        Err(_) => CLAIM_LIFE,
    };
    life + RENEW_EVERY
}

/// One try at holding the claim: created when absent, taken over from this same store's
/// earlier run or from a holder whose process is gone; else who holds it. Its revision when
/// held.
async fn try_take(kv: &kv::Store, mine: &StoreClaim) -> Result<Look<u64>, CoordinatorError> {
    match kv.create(OWN_STORE_KEY, value(mine)?).await {
        Ok(revision) => return Ok(Look::Done(revision)),
        Err(error) if error.kind() == kv::CreateErrorKind::AlreadyExists => {}
        Err(error) => return Err(CoordinatorError::nats("claiming the deployment")(error)),
    }
    match holder(kv).await? {
        // It lapsed between the two calls: create it again.
        None => Ok(Look::Again),
        Some((holder, revision)) if same_store(&holder, mine) || is_gone(&holder) => kv
            .update(OWN_STORE_KEY, value(mine)?, revision)
            .await
            .map(Look::Done)
            .map_err(CoordinatorError::nats("taking back this store's claim")),
        Some((holder, _)) => Ok(Look::Held(describe(&holder))),
    }
}

/// Renews the claim until the task is aborted. A renewal that finds the claim changed under
/// it (it lapsed while this coordinator was paused) takes it again ([`try_take`]), unless
/// another coordinator took the deployment meanwhile: then the claim is lost.
async fn renew(kv: kv::Store, mut mine: StoreClaim, mut revision: u64, lost: watch::Sender<bool>) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        mine.renewed_at_ms = now_ms();
        let Ok(bytes) = value(&mine) else { continue };
        let renewed = match kv.update(OWN_STORE_KEY, bytes, revision).await {
            Ok(next) => Ok(Look::Done(next)),
            Err(error) if error.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                tracing::warn!(
                    "the store claim lapsed (was this coordinator paused?); taking it again"
                );
                try_take(&kv, &mine).await
            }
            Err(error) => Err(CoordinatorError::nats("renewing the store claim")(error)),
        };
        match renewed {
            Ok(Look::Done(next)) => revision = next,
            Ok(Look::Held(who)) => {
                tracing::error!(%who, "another coordinator took this deployment's claim: stopping");
                let _ = lost.send(true);
                return;
            }
            Ok(Look::Again) => {}
            Err(error) => tracing::warn!(%error, "renewing the store claim failed; trying again"),
        }
    }
}

/// The claim's holder and revision, if the claim is live (an unreadable one names no one).
async fn holder(kv: &kv::Store) -> Result<Option<(StoreClaim, u64)>, CoordinatorError> {
    let entry = kv
        .entry(OWN_STORE_KEY)
        .await
        .map_err(CoordinatorError::nats("reading the store claim"))?;
    Ok(entry
        .filter(|entry| entry.operation == kv::Operation::Put)
        .map(|entry| {
            let claim = decode::<StoreClaim>(&entry.value, Format::MessagePack)
                .unwrap_or_else(|_| unreadable());
            (claim, entry.revision)
        }))
}

/// A claim whose value cannot be read, as it is named.
fn unreadable() -> StoreClaim {
    StoreClaim {
        v: PROTOCOL_VERSION,
        coordinator: "an unknown coordinator (its claim is unreadable)".to_string(),
        host: String::new(),
        pid: 0,
        data_dir: String::new(),
        renewed_at_ms: now_ms(),
    }
}

/// The owner of a live shard lease, if any.
async fn a_leased_shard(leases: &kv::Store) -> Result<Option<String>, CoordinatorError> {
    use futures::StreamExt;
    let mut keys = leases
        .keys()
        .await
        .map_err(CoordinatorError::nats("listing shard leases"))?;
    while let Some(key) = keys.next().await {
        let Ok(key) = key else { continue };
        if let Ok(Some(entry)) = leases.entry(&key).await
            && entry.operation == kv::Operation::Put
        {
            let lease = decode::<ShardLease>(&entry.value, Format::MessagePack);
            return Ok(Some(lease.map_or(key, |lease| lease.owner)));
        }
    }
    Ok(None)
}

fn value(holder: &StoreClaim) -> Result<bytes::Bytes, CoordinatorError> {
    Ok(encode(holder, Format::MessagePack)?.into())
}

fn describe(holder: &StoreClaim) -> String {
    format!(
        "coordinator {} on {} serves it with the store of its own in {} (claim renewed {} ms ago)",
        holder.coordinator,
        holder.host,
        holder.data_dir,
        now_ms().saturating_sub(holder.renewed_at_ms)
    )
}

fn claimed(who: &str) -> CoordinatorError {
    CoordinatorError::Rejected(ErrorBody::new(
        ErrorCode::StoreClaimed,
        format!(
            "another coordinator already serves this NATS deployment: {who}. A second store \
             would split the workbenches and jobs between them. Run one coordinator per \
             deployment, or set replicated_store = true (ATELIER_REPLICATED_STORE=true) on every \
             coordinator to share the work (docs/operations.md, \"Several coordinators\")"
        ),
    ))
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
