//! Balancing a replicated deployment's shards over its live coordinators (docs/adr/0014).
//!
//! Every coordinator says it is alive in the members bucket (a key per coordinator, renewed a
//! few times per lease life, gone a lease life after its last renewal or at once on a clean
//! stop). Each shard ranks the live coordinators by rendezvous hashing; a coordinator takes a
//! free shard it ranks first (or one left free for a lease's life: the first-ranked may be alive
//! but unable to take it),
//! and gives up a shard ranked first by another live coordinator while it holds more than its
//! share. A join or a leave so moves only the shards it must, and one coordinator alone holds
//! them all. A held shard whose lease is lost (the process was paused, or cut off) stops being
//! served at once, and the coordinator says so: it then exits to come back clean.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use atelier_messages::subjects::shard;
use futures::StreamExt;
use futures::future::join_all;
use tokio::sync::{oneshot, watch};

use crate::engine::{Engine, Shared};
use crate::error::CoordinatorError;
use crate::replication::ownership::Holding;

/// How long a look waits for the members bucket before taking free shards as if alone.
const MEMBERS_PATIENCE: Duration = Duration::from_secs(1);

/// The longest between two looks, whatever the lease's life.
const LOOK_AT_MOST_EVERY: Duration = Duration::from_secs(2);

/// The shards this process holds, balanced with the other coordinators until stopped.
pub(crate) struct Balancer {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    lost: watch::Receiver<bool>,
}

impl Balancer {
    /// Joins the deployment's coordinators and starts taking shards.
    pub async fn start(shared: Shared, holding: Holding) -> Result<Self, CoordinatorError> {
        let settings = *holding.settings();
        let members = crate::patiently("opening the members bucket", || async {
            shared
                .jetstream
                .create_key_value(settings.expiring_bucket(
                    shard::MEMBERS_BUCKET,
                    "Atelier coordinators alive, which shards are balanced over",
                ))
                .await
                .map_err(|error| CoordinatorError::Nats(format!("the members bucket: {error}")))
        })
        .await?;
        let (lost_tx, lost) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        let mut state = State {
            me: shared.config.coordinator_id.clone(),
            shared,
            holding,
            members,
            engines: BTreeMap::new(),
            free_since: BTreeMap::new(),
            standing_by: false,
            live: BTreeSet::new(),
            lost: lost_tx,
        };
        // Alive, and the first look, before the coordinator says it is ready: alone, it holds
        // every shard by then.
        say_alive(&state.members, &state.me).await;
        state.round().await;
        let task = tokio::spawn(state.run(stopped));
        Ok(Self { stop, task, lost })
    }

    /// Waits until a shard this process held was lost to another coordinator.
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        let _ = lost.wait_for(|lost| *lost).await;
    }

    /// Stops every engine, gives every lease up (the other coordinators take the shards at
    /// once) and leaves the members.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .is_err()
        {
            tracing::warn!("the shards were not all handed over in time; their leases run out");
        }
    }
}

struct State {
    me: String,
    shared: Shared,
    holding: Holding,
    members: kv::Store,
    engines: BTreeMap<u32, Engine>,
    /// Since when each free shard has been seen free.
    free_since: BTreeMap<u32, Instant>,
    /// Said that this coordinator holds nothing while others hold every shard.
    standing_by: bool,
    /// The live coordinators at the last look.
    live: BTreeSet<String>,
    lost: watch::Sender<bool>,
}

impl State {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) {
        // Often enough to renew the membership well within its life, and to see a lease that
        // ran out soon after.
        let look_again = (self.holding.settings().lease_ttl / 3).min(LOOK_AT_MOST_EVERY);
        let heartbeat = tokio::spawn(beat(self.members.clone(), self.me.clone(), look_again));
        let mut leases = None;
        let mut members = None;
        loop {
            if leases.is_none() {
                leases = self.holding.leases().watch_all().await.ok();
            }
            if members.is_none() {
                members = self.members.watch_all().await.ok();
            }
            self.round().await;
            tokio::select! {
                _ = &mut stopped => break,
                () = tokio::time::sleep(look_again) => {}
                alive = next_change(&mut leases, released) => if !alive { leases = None },
                alive = next_change(&mut members, |entry| joined_or_left(entry, &self.live)) => {
                    if !alive { members = None }
                }
            }
        }
        heartbeat.abort();
        for (_, engine) in std::mem::take(&mut self.engines) {
            engine.stop(&self.shared.front).await;
        }
        if let Err(error) = self.members.delete(&self.me).await {
            tracing::warn!(%error, "could not leave the members; the key runs out instead");
        }
    }

    /// One look: drops lost shards, gives up the shards it
    /// holds beyond its share to those that rank them first, and takes the free ones it should.
    async fn round(&mut self) {
        self.drop_lost().await;
        let live = match self.live().await {
            Ok(live) => live,
            // The bucket may be electing a leader after a server died, perhaps with the
            // coordinator whose shards are free now: take those at once rather than wait for
            // the election (the leases decide who gets each), and give nothing up.
            Err(error) => {
                tracing::warn!(%error, "could not read the live coordinators; taking free shards as if alone");
                self.take_free(&BTreeSet::from([self.me.clone()])).await;
                return;
            }
        };
        self.give_up_extra(&live).await;
        self.take_free(&live).await;
        self.live = live;
    }

    /// The live coordinators, this one included; an error when the bucket does not answer
    /// within [`MEMBERS_PATIENCE`].
    async fn live(&self) -> Result<BTreeSet<String>, CoordinatorError> {
        let read = async {
            let mut keys = self
                .members
                .keys()
                .await
                .map_err(|error| error.to_string())?;
            let mut live = BTreeSet::from([self.me.clone()]);
            while let Some(key) = keys.next().await {
                live.insert(key.map_err(|error| error.to_string())?);
            }
            Ok::<_, String>(live)
        };
        match tokio::time::timeout(MEMBERS_PATIENCE, read).await {
            Ok(Ok(live)) => Ok(live),
            Ok(Err(error)) => Err(CoordinatorError::Nats(format!(
                "the members bucket: {error}"
            ))),
            Err(_) => Err(CoordinatorError::Nats(
                "the members bucket does not answer".into(),
            )),
        }
    }

    async fn drop_lost(&mut self) {
        let lost: Vec<u32> = (self.engines.iter())
            .filter(|(_, engine)| engine.is_lost())
            .map(|(shard, _)| *shard)
            .collect();
        for shard in lost {
            if let Some(engine) = self.engines.remove(&shard) {
                tracing::error!(shard, "lost the shard's lease: it is no longer served here");
                engine.stop(&self.shared.front).await;
                let _ = self.lost.send(true);
            }
        }
    }

    /// Gives up, one by one, the shards another live coordinator ranks first while this one
    /// holds more than its share.
    async fn give_up_extra(&mut self, live: &BTreeSet<String>) {
        let count = self.shared.front.count();
        let share = count.div_ceil(u32::try_from(live.len()).unwrap_or(u32::MAX).max(1));
        let movable: Vec<u32> = (self.engines.keys().copied())
            .filter(|shard| first_ranked(*shard, live) != Some(&self.me))
            .collect();
        for shard in movable {
            if u32::try_from(self.engines.len()).unwrap_or(u32::MAX) <= share {
                return;
            }
            if let Some(engine) = self.engines.remove(&shard) {
                let to = first_ranked(shard, live).cloned().unwrap_or_default();
                tracing::info!(
                    shard,
                    to,
                    "handing the shard over to the coordinator it ranks first"
                );
                engine.stop(&self.shared.front).await;
            }
        }
    }

    /// Takes, at once, the free shards this coordinator ranks first among the live ones (and
    /// those left free for a while), each from its snapshot and changelog.
    async fn take_free(&mut self, live: &BTreeSet<String>) {
        let count = self.shared.front.count();
        let others: Vec<u32> = (0..count)
            .filter(|shard| !self.engines.contains_key(shard))
            .collect();
        let leases = self.holding.leases();
        let holders = join_all(others.iter().map(|shard| leases.holder(*shard))).await;
        let mut wanted = Vec::new();
        for (shard, holder) in others.iter().zip(holders) {
            match holder {
                Ok(Some(_)) => {
                    self.free_since.remove(shard);
                }
                Ok(None) => {
                    let since = *self.free_since.entry(*shard).or_insert_with(Instant::now);
                    let mine = first_ranked(*shard, live) == Some(&self.me);
                    if mine || since.elapsed() > self.holding.settings().lease_ttl {
                        wanted.push(*shard);
                    }
                }
                Err(error) => tracing::warn!(%error, shard, "cannot read the shard's lease now"),
            }
        }
        let taken = join_all(wanted.iter().map(|shard| self.holding.try_take(*shard))).await;
        for (shard, taken) in wanted.into_iter().zip(taken) {
            match taken {
                Ok(Some(ownership)) => self.serve(shard, ownership).await,
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, shard, "could not take the shard over yet"),
            }
        }
        let standing_by = self.engines.is_empty() && self.free_since.is_empty();
        if standing_by && !self.standing_by {
            tracing::info!("standby: another coordinator holds the store");
        }
        self.standing_by = standing_by;
    }

    async fn serve(&mut self, shard: u32, ownership: crate::replication::ownership::Ownership) {
        self.free_since.remove(&shard);
        let db = ownership.db.clone();
        let storage = crate::storage::Storage::replicated(db, ownership.log.clone());
        match Engine::start(&self.shared, shard, storage, Some(ownership)).await {
            Ok(engine) => {
                self.engines.insert(shard, engine);
            }
            Err(error) => tracing::error!(%error, shard, "could not serve the shard taken over"),
        }
    }
}

/// Says `me` is alive every `every`, on its own: a members bucket that does not answer (electing
/// a leader) holds up no look at the shards.
async fn beat(members: kv::Store, me: String, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        say_alive(&members, &me).await;
    }
}

async fn say_alive(members: &kv::Store, me: &str) {
    if let Err(error) = members.put(me, Default::default()).await {
        tracing::warn!(%error, "could not say this coordinator is alive");
    }
}

/// Waits for a change of `watch` that `worth_a_look` picks (never without a watch); false when
/// the watch ended.
async fn next_change(
    watch: &mut Option<kv::Watch>,
    worth_a_look: impl Fn(&kv::Entry) -> bool,
) -> bool {
    let Some(watch) = watch.as_mut() else {
        return std::future::pending().await;
    };
    while let Some(change) = watch.next().await {
        if change.is_ok_and(|entry| worth_a_look(&entry)) {
            return true;
        }
    }
    false
}

/// A lease released: renewals and takes (puts) change nothing to look at, a release frees a
/// shard now.
fn released(entry: &kv::Entry) -> bool {
    entry.operation != kv::Operation::Put
}

/// A coordinator joined (a name not in `live`) or left cleanly (its key deleted): the
/// heartbeats of those known change nothing.
fn joined_or_left(entry: &kv::Entry, live: &BTreeSet<String>) -> bool {
    entry.operation != kv::Operation::Put || !live.contains(&entry.key)
}

/// The live coordinator `shard` ranks first: the highest rendezvous score of shard and name.
fn first_ranked(shard: u32, live: &BTreeSet<String>) -> Option<&String> {
    live.iter().max_by_key(|member| score(shard, member))
}

/// A stable hash of a shard and a coordinator's name (FNV-1a, 64 bits, then mixed), the same
/// in every process and version.
fn score(shard: u32, member: &str) -> u64 {
    let bytes = shard.to_be_bytes().into_iter().chain(member.bytes());
    let hash = bytes.fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut mixed = hash ^ (hash >> 33);
    mixed = mixed.wrapping_mul(0xff51_afd7_ed55_8ccd);
    mixed ^= mixed >> 33;
    mixed = mixed.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    mixed ^ (mixed >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_moves_only_the_shards_a_join_must_and_spreads_them() {
        let two: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let three: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let mut moved = 0;
        let mut to_c = 0;
        for shard in 0..1024 {
            let before = first_ranked(shard, &two);
            let after = first_ranked(shard, &three);
            if before != after {
                moved += 1;
                // A shard moves only to the newcomer.
                assert_eq!(after.map(String::as_str), Some("c"));
            }
            if after.map(String::as_str) == Some("c") {
                to_c += 1;
            }
        }
        assert_eq!(moved, to_c);
        // About a third of the shards move to the third coordinator.
        assert!((280..=400).contains(&moved), "moved {moved} of 1024");
        assert_eq!(first_ranked(7, &BTreeSet::new()), None);
    }
}
