//! Balancing a replicated deployment's shards over its live coordinators (docs/adr/0014).
//!
//! Every coordinator says it is alive in the members bucket (a key per coordinator, renewed a
//! few times per lease life, gone a lease life after its last renewal or at once on a clean
//! stop). At each look a coordinator reads the live coordinators and the lease holders and
//! computes the [`plan`] every coordinator computes from the same view: it takes the free
//! shards planned for it (or one left free for a lease's life: the one planned may be alive
//! but unable to take it) and gives up the shards planned for another. A join or a leave so
//! moves only the shards it must, and one coordinator alone holds them all. A held shard whose
//! lease is lost (the process was paused, or cut off) stops being served at once, and the
//! coordinator says so: it then exits to come back clean.

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
                .create_or_update_key_value(settings.expiring_bucket(
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

    /// One look: drops lost shards, reads who holds the others, gives up the shards this
    /// coordinator holds beyond its share, and takes the free ones the plan gives it.
    async fn round(&mut self) {
        self.drop_lost().await;
        let live = match self.live().await {
            Ok(live) => live,
            // The bucket may be electing a leader after a server died, perhaps with the
            // coordinator whose shards are free now: take those at once rather than wait for
            // the election (the leases decide who gets each), and give nothing up.
            Err(error) => {
                tracing::warn!(%error, "could not read the live coordinators; taking free shards as if alone");
                BTreeSet::from([self.me.clone()])
            }
        };
        let holders = self.holders().await;
        let plan = plan(self.shared.front.count(), &live, &holders);
        self.give_up_extra(&plan).await;
        self.take_free(&plan, &holders).await;
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

    /// Who holds each shard: this coordinator for those it serves, the leases bucket for the
    /// others (`None` when free; a shard whose lease cannot be read now is left out).
    async fn holders(&self) -> BTreeMap<u32, Option<String>> {
        let others: Vec<u32> = (0..self.shared.front.count())
            .filter(|shard| !self.engines.contains_key(shard))
            .collect();
        let leases = self.holding.leases();
        let read = join_all(others.iter().map(|shard| leases.holder(*shard))).await;
        let mut holders: BTreeMap<u32, Option<String>> = (self.engines.keys())
            .map(|shard| (*shard, Some(self.me.clone())))
            .collect();
        for (shard, holder) in others.into_iter().zip(read) {
            match holder {
                Ok(holder) => {
                    holders.insert(shard, holder.map(|holder| holder.owner));
                }
                Err(error) => tracing::warn!(%error, shard, "cannot read the shard's lease now"),
            }
        }
        holders
    }

    /// Gives up, one by one, the shards the plan gives another coordinator.
    async fn give_up_extra(&mut self, plan: &BTreeMap<u32, String>) {
        let extra: Vec<(u32, String)> = (self.engines.keys())
            .filter_map(|shard| Some((*shard, plan.get(shard)?.clone())))
            .filter(|(_, to)| *to != self.me)
            .collect();
        for (shard, to) in extra {
            if let Some(engine) = self.engines.remove(&shard) {
                tracing::info!(
                    shard,
                    to,
                    "handing the shard over to the coordinator the plan gives it"
                );
                engine.stop(&self.shared.front).await;
            }
        }
    }

    /// Takes, at once, the free shards the plan gives this coordinator (and those left free
    /// for a lease's life: the one they were planned for may be alive but unable to take them),
    /// each from its snapshot and changelog.
    async fn take_free(
        &mut self,
        plan: &BTreeMap<u32, String>,
        holders: &BTreeMap<u32, Option<String>>,
    ) {
        let mut wanted = Vec::new();
        for (shard, holder) in holders {
            if holder.is_some() {
                self.free_since.remove(shard);
                continue;
            }
            let since = *self.free_since.entry(*shard).or_insert_with(Instant::now);
            let mine = plan.get(shard) == Some(&self.me);
            if mine || since.elapsed() > self.holding.settings().lease_ttl {
                wanted.push(*shard);
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

/// Where each of `count` shards belongs among the `live` coordinators, given who holds them
/// now; every coordinator computes the same plan from the same view. No coordinator is planned
/// more than its share (`count / live`, rounded up). A live holder keeps up to its share of the
/// shards it holds (those it ranks highest), so a join or a leave moves only the shards it
/// must, and a standby coordinator does not take a lone shard from a live owner. Every other
/// shard goes, in order, to the coordinator that ranks it highest among those with room
/// (rendezvous hashing bounded by the share).
fn plan(
    count: u32,
    live: &BTreeSet<String>,
    holders: &BTreeMap<u32, Option<String>>,
) -> BTreeMap<u32, String> {
    let members = u32::try_from(live.len()).unwrap_or(u32::MAX);
    if members == 0 {
        return BTreeMap::new();
    }
    let share = count.div_ceil(members) as usize;
    let mut planned = BTreeMap::new();
    let mut load: BTreeMap<&String, usize> = BTreeMap::new();
    for member in live {
        let mut held: Vec<u32> = (holders.iter())
            .filter(|(_, holder)| holder.as_ref() == Some(member))
            .map(|(shard, _)| *shard)
            .collect();
        held.sort_by_key(|shard| std::cmp::Reverse(score(*shard, member)));
        held.truncate(share);
        load.insert(member, held.len());
        planned.extend(held.into_iter().map(|shard| (shard, member.clone())));
    }
    for shard in 0..count {
        if planned.contains_key(&shard) {
            continue;
        }
        let with_room = live
            .iter()
            .filter(|member| load.get(member).copied().unwrap_or(0) < share);
        let Some(to) = with_room.max_by_key(|member| score(shard, member)) else {
            continue;
        };
        *load.entry(to).or_default() += 1;
        planned.insert(shard, to.clone());
    }
    planned
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

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    /// Applies `plan` as the coordinators would: every shard to where it is planned.
    fn apply(plan: &BTreeMap<u32, String>) -> BTreeMap<u32, Option<String>> {
        (plan.iter())
            .map(|(shard, to)| (*shard, Some(to.clone())))
            .collect()
    }

    fn loads(holders: &BTreeMap<u32, Option<String>>) -> BTreeMap<String, usize> {
        let mut loads = BTreeMap::new();
        for holder in holders.values().flatten() {
            *loads.entry(holder.clone()).or_default() += 1;
        }
        loads
    }

    fn moved(
        before: &BTreeMap<u32, Option<String>>,
        after: &BTreeMap<u32, Option<String>>,
    ) -> usize {
        (before.iter())
            .filter(|(shard, holder)| holder.is_some() && after.get(shard) != Some(holder))
            .count()
    }

    #[test]
    fn one_coordinator_alone_is_planned_every_shard() {
        let plan = plan(8, &members(&["a"]), &BTreeMap::new());
        assert_eq!(plan.len(), 8);
        assert!(plan.values().all(|to| to == "a"));
        assert!(super::plan(8, &BTreeSet::new(), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn joins_in_any_order_end_balanced_moving_only_what_they_must() {
        // Two coordinators joining one after the other, whatever their names rank: every
        // shard planned, loads within one of each other, and a plan applied is kept as it is.
        for (second, third) in [("b", "c"), ("c", "b"), ("zz", "b7"), ("q-41", "q-42")] {
            let alone = apply(&plan(8, &members(&["a"]), &BTreeMap::new()));
            let two = apply(&plan(8, &members(&["a", second]), &alone));
            assert_eq!(moved(&alone, &two), 4, "{second}: {two:?}");
            let live = members(&["a", second, third]);
            let three = apply(&plan(8, &live, &two));
            assert_eq!(three.len(), 8);
            let loads = loads(&three);
            assert_eq!(loads.len(), 3, "{third} got nothing: {three:?}");
            assert!(
                loads.values().all(|load| (2..=3).contains(load)),
                "{loads:?}"
            );
            assert_eq!(moved(&two, &three), 2, "{three:?}");
            assert_eq!(apply(&plan(8, &live, &three)), three);
        }
    }

    #[test]
    fn a_leaving_coordinators_shards_are_spread_over_the_others() {
        let live = members(&["a", "b", "c"]);
        let three = apply(&plan(16, &live, &BTreeMap::new()));
        let mut left = three.clone();
        left.values_mut()
            .filter(|holder| holder.as_deref() == Some("b"))
            .for_each(|holder| *holder = None);
        let two = apply(&plan(16, &members(&["a", "c"]), &left));
        assert_eq!(
            loads(&two),
            BTreeMap::from([("a".into(), 8), ("c".into(), 8)])
        );
        // Only b's shards moved.
        assert_eq!(moved(&left, &two), 0);
    }

    #[test]
    fn a_standby_coordinator_does_not_take_a_lone_shard_from_its_live_owner() {
        for owner in ["a", "b"] {
            let held = BTreeMap::from([(0, Some(owner.to_string()))]);
            let plan = plan(1, &members(&["a", "b"]), &held);
            assert_eq!(plan.get(&0).map(String::as_str), Some(owner));
        }
        // A shard whose owner is gone goes to a live coordinator.
        let held = BTreeMap::from([(0, Some("gone".to_string()))]);
        assert_eq!(
            plan(1, &members(&["a"]), &held).get(&0).map(String::as_str),
            Some("a")
        );
    }

    #[test]
    fn free_shards_spread_by_rank_over_many_coordinators() {
        let live: BTreeSet<String> = (0..7).map(|n| format!("coordinator-{n}")).collect();
        let plan = plan(1024, &live, &BTreeMap::new());
        let loads = loads(&apply(&plan));
        assert_eq!(loads.len(), 7);
        assert!(loads.values().all(|load| *load <= 147), "{loads:?}");
        assert_eq!(loads.values().sum::<usize>(), 1024);
    }
}
