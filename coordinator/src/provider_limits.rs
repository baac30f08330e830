//! A model profile's limits held for the whole deployment: every coordinator admits its calls
//! to the profile's provider through one record per profile in the NATS KV bucket
//! [`LIMITS_BUCKET`], updated by compare-and-set (docs/adr/0018).
//!
//! A call is admitted when fewer than `max_concurrent_requests` calls are in flight, its
//! request and its estimated tokens fit the minute's pace (GCRA: each admitted call moves the
//! next allowed start on by its share of a minute, so calls are evenly spaced), and no
//! `Retry-After` pause is running. Admitted, it holds a lease that lapses by itself after
//! [`LEASE_LIFE`] (a coordinator killed mid-call frees its slot); given back, its tokens are
//! corrected by the usage the provider reported. A 429 pauses the profile for every
//! coordinator. The rules are pure functions of the record ([`admit`], [`settle`],
//! [`pause`]); [`ProfileLimiter`] reads, applies and writes them back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
pub use atelier_agents::spec::ProviderLimits;
use atelier_messages::provider::{
    LIMITS_BUCKET, Lease, LimiterState, Priority, Ticket, WaitReason,
};
use atelier_messages::{Format, decode, encode, now_ms};

use crate::error::CoordinatorError;

/// How long an admitted call holds its slot when it is never given back.
pub const LEASE_LIFE: Duration = Duration::from_secs(600);
/// The longest sleep between two looks of a waiting call.
const LONGEST_NAP: Duration = Duration::from_millis(1000);
/// How often a call waiting for a slot, or for the calls ahead of it, looks again (a call in
/// flight may end any moment).
const SLOT_POLL: Duration = Duration::from_millis(20);

/// A minute, in milliseconds.
const MINUTE_MS: f64 = 60_000.0;
/// A pace's next start within this of now counts as now: the clock reads whole milliseconds
/// (GCRA's burst tolerance, a millisecond's worth).
const CLOCK_TOLERANCE_MS: f64 = 1.0;

/// What [`admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// The call holds a lease: send it.
    Admitted,
    /// Not yet: why, and how long it looks (0: until a call in flight ends or one ahead goes).
    Wait { reason: WaitReason, ms: u64 },
}

/// One call asking to be admitted.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The lease it will hold (and its ticket's key while it waits).
    pub lease: &'a str,
    /// Its tokens, estimated.
    pub estimate: u64,
    /// Its job's place in the line.
    pub place: &'a Place,
}

/// How long a waiting call's ticket lives unless its caller looks again.
pub const TICKET_LIFE: Duration = Duration::from_secs(5);

/// Admits `call` at `now` (ms), or says why it waits. A call is admitted when the limits allow
/// it and no waiting call goes first: a higher priority, then the group (batch or workbench)
/// with fewer calls in flight, then the one waiting longest. A call that waits keeps a ticket
/// in the line. Lapsed leases and tickets are dropped first.
pub fn admit(
    state: &mut LimiterState,
    limits: &ProviderLimits,
    now: u64,
    call: &Call<'_>,
) -> Admission {
    state.leases.retain(|_, held| held.expires_ms > now);
    state.waiting.retain(|_, ticket| ticket.expires_ms > now);
    let blocked = over_limits(state, limits, now)
        .or_else(|| ahead_of(state, call, now).then_some((WaitReason::Queue, 0)));
    if let Some((reason, ms)) = blocked {
        keep_ticket(state, call, now);
        return Admission::Wait { reason, ms };
    }
    state.waiting.remove(call.lease);
    if let Some(interval) = limits.requests_per_minute.map(|rpm| share(rpm.into())) {
        state.requests_at_ms = state.requests_at_ms.max(now as f64) + interval;
    }
    if let Some(interval) = limits.tokens_per_minute.map(share) {
        state.tokens_at_ms = state.tokens_at_ms.max(now as f64) + interval * call.estimate as f64;
    }
    state.leases.insert(
        call.lease.to_string(),
        Lease {
            expires_ms: now.saturating_add(millis(LEASE_LIFE)),
            tokens: call.estimate,
            group: call.place.group.clone(),
        },
    );
    Admission::Admitted
}

/// Why the limits keep any call from starting at `now`, and for how long.
fn over_limits(
    state: &LimiterState,
    limits: &ProviderLimits,
    now: u64,
) -> Option<(WaitReason, u64)> {
    if state.paused_until_ms > now {
        return Some((WaitReason::RetryAfter, state.paused_until_ms - now));
    }
    if let Some(most) = limits.max_concurrent_requests
        && state.leases.len() >= usize::try_from(most).unwrap_or(usize::MAX)
    {
        return Some((WaitReason::Concurrency, 0));
    }
    let now_f = now as f64 + CLOCK_TOLERANCE_MS;
    if limits.requests_per_minute.is_some() && state.requests_at_ms > now_f {
        return Some((WaitReason::Requests, until(state.requests_at_ms, now)));
    }
    if limits.tokens_per_minute.is_some() && state.tokens_at_ms > now_f {
        return Some((WaitReason::Tokens, until(state.tokens_at_ms, now)));
    }
    None
}

/// A call's rank in the line: priority, its group's calls in flight, how long it waited, its
/// lease (the smallest goes first).
fn rank<'a>(
    state: &LimiterState,
    lease: &'a str,
    priority: Priority,
    group: &str,
    since_ms: u64,
) -> (Priority, usize, u64, &'a str) {
    let in_flight = state
        .leases
        .values()
        .filter(|held| held.group == group)
        .count();
    (priority, in_flight, since_ms, lease)
}

/// True when another waiting call goes before `call`.
fn ahead_of(state: &LimiterState, call: &Call<'_>, now: u64) -> bool {
    let since = state
        .waiting
        .get(call.lease)
        .map_or(now, |ticket| ticket.since_ms);
    let mine = rank(
        state,
        call.lease,
        call.place.priority,
        &call.place.group,
        since,
    );
    state.waiting.iter().any(|(lease, ticket)| {
        lease != call.lease
            && rank(
                state,
                lease,
                ticket.priority,
                &ticket.group,
                ticket.since_ms,
            ) < mine
    })
}

/// Puts `call` in the line, or keeps its ticket alive (written again only when half its life
/// is gone, so a waiting look is usually a read).
fn keep_ticket(state: &mut LimiterState, call: &Call<'_>, now: u64) {
    let fresh = state
        .waiting
        .get(call.lease)
        .is_some_and(|ticket| ticket.expires_ms > now + millis(TICKET_LIFE) / 2);
    if fresh {
        return;
    }
    let since_ms = state
        .waiting
        .get(call.lease)
        .map_or(now, |ticket| ticket.since_ms);
    state.waiting.insert(
        call.lease.to_string(),
        Ticket {
            priority: call.place.priority,
            group: call.place.group.clone(),
            since_ms,
            expires_ms: now.saturating_add(millis(TICKET_LIFE)),
        },
    );
}

/// The whole milliseconds from `now` to `at` (at least 1: `at` is later).
fn until(at: f64, now: u64) -> u64 {
    ((at - now as f64).ceil() as u64).max(1)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Gives `lease` back; with the tokens the provider reported (`used`), the token pace is
/// corrected by the difference from its estimate.
pub fn settle(state: &mut LimiterState, limits: &ProviderLimits, lease: &str, used: Option<u64>) {
    let Some(held) = state.leases.remove(lease) else {
        return;
    };
    if let (Some(tpm), Some(used)) = (limits.tokens_per_minute, used) {
        let difference = used as f64 - held.tokens as f64;
        state.tokens_at_ms += difference * share(tpm);
    }
}

/// No call starts for `retry_after` from `now`: the provider refused one for its rate.
pub fn pause(state: &mut LimiterState, now: u64, retry_after: Duration) {
    let until = now.saturating_add(millis(retry_after));
    state.paused_until_ms = state.paused_until_ms.max(until);
}

/// The milliseconds one of `per_minute` takes (a limit of 0 admits one a minute).
fn share(per_minute: u64) -> f64 {
    MINUTE_MS / per_minute.max(1) as f64
}

/// The deployment's limiters, as one coordinator reaches them.
#[derive(Clone)]
pub struct Limiters {
    kv: kv::Store,
    /// What this coordinator's leases start with (unique in the deployment).
    instance: String,
}

impl Limiters {
    /// Opens (creating when absent, with `replicas` copies) the limiters' bucket.
    pub async fn open(
        jetstream: &jetstream::Context,
        instance: &str,
        replicas: usize,
    ) -> Result<Self, CoordinatorError> {
        let kv = jetstream
            .create_or_update_key_value(kv::Config {
                bucket: LIMITS_BUCKET.to_string(),
                description: "Atelier: each model profile's limiter, shared by every coordinator"
                    .to_string(),
                history: 1,
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .map_err(CoordinatorError::nats("the provider limits bucket"))?;
        Ok(Self {
            kv,
            instance: format!("{instance}-{}-{}", std::process::id(), now_ms()),
        })
    }

    /// The limiter of the profile `name`.
    pub fn profile(&self, name: &str, limits: ProviderLimits) -> ProfileLimiter {
        ProfileLimiter {
            kv: self.kv.clone(),
            profile: name.to_string(),
            limits,
            instance: self.instance.clone(),
        }
    }
}

/// Where a job's calls stand in a saturated profile's line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    pub priority: Priority,
    /// The job's batch, else its workbench: calls share fairly between groups.
    pub group: String,
}

/// Every lease this process takes has its own number.
static NEXT_LEASE: AtomicU64 = AtomicU64::new(1);

/// One profile's limiter, shared through the KV bucket.
#[derive(Clone)]
pub struct ProfileLimiter {
    kv: kv::Store,
    profile: String,
    limits: ProviderLimits,
    instance: String,
}

impl ProfileLimiter {
    /// The profile's name.
    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// Waits until a call of `estimate` tokens, in `place`, is admitted; its lease. `on_wait`
    /// hears the first reason it waits (once).
    pub async fn acquire(
        &self,
        estimate: u64,
        place: &Place,
        mut on_wait: impl FnMut(WaitReason, u64),
    ) -> Result<String, CoordinatorError> {
        let lease = format!(
            "{}-{}",
            self.instance,
            NEXT_LEASE.fetch_add(1, Ordering::Relaxed)
        );
        let call = Call {
            lease: &lease,
            estimate,
            place,
        };
        let mut told = false;
        loop {
            let decided = self
                .change(|state, now| admit(state, &self.limits, now, &call))
                .await?;
            let (reason, ms) = match decided {
                // Another coordinator wrote first: look again.
                None => continue,
                Some(Admission::Admitted) => return Ok(lease),
                Some(Admission::Wait { reason, ms }) => (reason, ms),
            };
            if !told {
                told = true;
                tracing::info!(profile = %self.profile, reason = reason.as_str(), expected_ms = ms, "a model call waits for its profile's limits");
                on_wait(reason, ms);
            }
            tokio::time::sleep(nap(ms)).await;
        }
    }

    /// Gives `lease` back with the tokens the provider reported.
    pub async fn release(&self, lease: &str, used: Option<u64>) {
        self.until_written("giving a provider slot back", |state, _| {
            settle(state, &self.limits, lease, used);
        })
        .await;
    }

    /// Pauses the profile for every coordinator for `retry_after`.
    pub async fn pause(&self, retry_after: Duration) {
        tracing::warn!(profile = %self.profile, retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX), "the provider refused a call for its rate; pausing the profile");
        self.until_written("pausing the profile", |state, now| {
            pause(state, now, retry_after);
        })
        .await;
    }

    /// Applies `apply` until a compare-and-set writes it (a few tries); a failure is logged:
    /// the lease lapses, the pause is only advice.
    async fn until_written(
        &self,
        what: &'static str,
        mut apply: impl FnMut(&mut LimiterState, u64),
    ) {
        for _ in 0..WRITE_TRIES {
            match self.change(|state, now| apply(state, now)).await {
                Ok(Some(_)) => return,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, profile = %self.profile, what, "the provider limiter could not be written");
                    return;
                }
            }
        }
        tracing::warn!(profile = %self.profile, what, "the provider limiter stayed contended");
    }

    /// Reads the record and applies `decide`; a record it changed is written back by
    /// compare-and-set: `None` when another coordinator wrote first (try again).
    async fn change<T>(
        &self,
        decide: impl FnOnce(&mut LimiterState, u64) -> T,
    ) -> Result<Option<T>, CoordinatorError> {
        let entry = self
            .kv
            .entry(&self.profile)
            .await
            .map_err(CoordinatorError::nats("reading a provider limiter"))?;
        let live = entry.filter(|entry| entry.operation == kv::Operation::Put);
        let revision = live.as_ref().map(|entry| entry.revision);
        let mut state = live
            .and_then(|entry| decode::<LimiterState>(&entry.value, Format::MessagePack).ok())
            .unwrap_or_default();
        let before = state.clone();
        let decided = decide(&mut state, now_ms());
        if state == before {
            return Ok(Some(decided));
        }
        let bytes: bytes::Bytes = encode(&state, Format::MessagePack)?.into();
        let written = match revision {
            Some(revision) => self
                .kv
                .update(&self.profile, bytes, revision)
                .await
                .map(|_| ())
                .map_err(|error| error.kind() == kv::UpdateErrorKind::WrongLastRevision),
            None => self
                .kv
                .create(&self.profile, bytes)
                .await
                .map(|_| ())
                .map_err(|error| error.kind() == kv::CreateErrorKind::AlreadyExists),
        };
        match written {
            Ok(()) => Ok(Some(decided)),
            Err(true) => Ok(None),
            Err(false) => Err(CoordinatorError::Nats(format!(
                "writing the provider limiter of {}",
                self.profile
            ))),
        }
    }
}

/// How often a release or a pause tries its compare-and-set.
const WRITE_TRIES: u32 = 20;

/// How long a waiting call sleeps before it looks again.
/// How long a waiting call sleeps before it looks again: the wait it was told (a pace's next
/// start, a pause's end), at most [`LONGEST_NAP`]; [`SLOT_POLL`] when it waits for a slot or
/// its turn. A few milliseconds of jitter keep waiters from looking all at once.
fn nap(expected_ms: u64) -> Duration {
    let jitter = Duration::from_millis(now_ms() % 5);
    let wait = match expected_ms {
        0 => SLOT_POLL,
        ms => Duration::from_millis(ms).min(LONGEST_NAP),
    };
    wait + jitter
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(concurrent: Option<u32>, rpm: Option<u32>, tpm: Option<u64>) -> ProviderLimits {
        ProviderLimits {
            max_concurrent_requests: concurrent,
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
        }
    }

    /// A place in the line of `priority`, in `group`.
    fn place(priority: Priority, group: &str) -> Place {
        Place {
            priority,
            group: group.to_string(),
        }
    }

    /// A normal-priority call of workbench `w` holding `lease`.
    fn call(lease: &str, estimate: u64) -> Call<'_> {
        static NORMAL: std::sync::LazyLock<Place> =
            std::sync::LazyLock::new(|| place(Priority::Normal, "w"));
        Call {
            lease,
            estimate,
            place: &NORMAL,
        }
    }

    #[test]
    fn requests_are_spaced_by_their_share_of_a_minute() {
        let limits = limits(None, Some(40), None);
        let mut state = LimiterState::default();
        assert_eq!(
            admit(&mut state, &limits, 1_000, &call("a", 0)),
            Admission::Admitted
        );
        // 40 a minute: one every 1.5 s.
        assert_eq!(
            admit(&mut state, &limits, 1_000, &call("b", 0)),
            Admission::Wait {
                reason: WaitReason::Requests,
                ms: 1_500
            }
        );
        assert_eq!(
            admit(&mut state, &limits, 2_500, &call("b", 0)),
            Admission::Admitted
        );
        assert_eq!(state.leases.len(), 2);
        assert!(state.waiting.is_empty(), "an admitted call leaves the line");
    }

    #[test]
    fn calls_in_flight_hold_their_slots_until_given_back_or_lapsed() {
        let limits = limits(Some(2), None, None);
        let mut state = LimiterState::default();
        for lease in ["a", "b"] {
            assert_eq!(
                admit(&mut state, &limits, 0, &call(lease, 0)),
                Admission::Admitted
            );
        }
        assert!(matches!(
            admit(&mut state, &limits, 0, &call("c", 0)),
            Admission::Wait {
                reason: WaitReason::Concurrency,
                ..
            }
        ));
        settle(&mut state, &limits, "a", None);
        assert_eq!(
            admit(&mut state, &limits, 0, &call("c", 0)),
            Admission::Admitted
        );
        // A killed coordinator's lease lapses by itself.
        let later = millis(LEASE_LIFE) + 1;
        assert_eq!(
            admit(&mut state, &limits, later, &call("d", 0)),
            Admission::Admitted
        );
        assert_eq!(state.leases.len(), 1);
    }

    #[test]
    fn tokens_are_paced_and_corrected_by_what_was_used() {
        // 60,000 tokens a minute: a token a millisecond.
        let limits = limits(None, None, Some(60_000));
        let mut state = LimiterState::default();
        assert_eq!(
            admit(&mut state, &limits, 0, &call("a", 3_000)),
            Admission::Admitted
        );
        assert_eq!(
            admit(&mut state, &limits, 0, &call("b", 10)),
            Admission::Wait {
                reason: WaitReason::Tokens,
                ms: 3_000
            }
        );
        // The call used 1,000 tokens, not 3,000: the pace gives the 2,000 back.
        settle(&mut state, &limits, "a", Some(1_000));
        assert_eq!(
            admit(&mut state, &limits, 0, &call("b", 10)),
            Admission::Wait {
                reason: WaitReason::Tokens,
                ms: 1_000
            }
        );
        assert_eq!(
            admit(&mut state, &limits, 1_000, &call("b", 10)),
            Admission::Admitted
        );
    }

    #[test]
    fn a_retry_after_pauses_every_call() {
        let limits = limits(None, None, None);
        let mut state = LimiterState::default();
        pause(&mut state, 1_000, Duration::from_secs(2));
        assert_eq!(
            admit(&mut state, &limits, 1_500, &call("a", 0)),
            Admission::Wait {
                reason: WaitReason::RetryAfter,
                ms: 1_500
            }
        );
        // A shorter pause never shortens a running one.
        pause(&mut state, 1_500, Duration::from_millis(10));
        assert_eq!(state.paused_until_ms, 3_000);
        assert_eq!(
            admit(&mut state, &limits, 3_000, &call("a", 0)),
            Admission::Admitted
        );
    }

    #[test]
    fn a_higher_priority_goes_first_and_groups_share_fairly() {
        let limits = limits(Some(1), None, None);
        let mut state = LimiterState::default();
        let (batch_place, person_place) = (
            place(Priority::Low, "batch"),
            place(Priority::Normal, "notes"),
        );
        let batch = |lease| Call {
            lease,
            estimate: 0,
            place: &batch_place,
        };
        assert_eq!(
            admit(&mut state, &limits, 0, &batch("b1")),
            Admission::Admitted
        );
        // The batch's next calls wait in line, then a person's message arrives.
        assert!(matches!(
            admit(&mut state, &limits, 1, &batch("b2")),
            Admission::Wait { .. }
        ));
        let person = Call {
            lease: "p1",
            estimate: 0,
            place: &person_place,
        };
        assert!(matches!(
            admit(&mut state, &limits, 2, &person),
            Admission::Wait { .. }
        ));
        settle(&mut state, &limits, "b1", None);
        // The slot is free: the batch's call waiting longer still lets the person go first.
        assert_eq!(
            admit(&mut state, &limits, 3, &batch("b2")),
            Admission::Wait {
                reason: WaitReason::Queue,
                ms: 0
            }
        );
        assert_eq!(admit(&mut state, &limits, 3, &person), Admission::Admitted);
        settle(&mut state, &limits, "p1", None);

        // Two batches of one priority: the one with fewer calls in flight goes first.
        let limits = ProviderLimits {
            max_concurrent_requests: Some(2),
            ..limits
        };
        let other_place = place(Priority::Low, "other");
        let other = |lease| Call {
            lease,
            estimate: 0,
            place: &other_place,
        };
        assert_eq!(
            admit(&mut state, &limits, 4, &batch("b2")),
            Admission::Admitted
        );
        assert_eq!(
            admit(&mut state, &limits, 4, &batch("b3")),
            Admission::Admitted
        );
        assert!(matches!(
            admit(&mut state, &limits, 5, &batch("b4")),
            Admission::Wait { .. }
        ));
        assert!(matches!(
            admit(&mut state, &limits, 6, &other("o1")),
            Admission::Wait { .. }
        ));
        settle(&mut state, &limits, "b2", None);
        // "batch" holds one slot, "other" none: o1 goes before b4, which waited longer.
        assert!(matches!(
            admit(&mut state, &limits, 7, &batch("b4")),
            Admission::Wait {
                reason: WaitReason::Queue,
                ..
            }
        ));
        assert_eq!(
            admit(&mut state, &limits, 7, &other("o1")),
            Admission::Admitted
        );
    }

    #[test]
    fn a_waiting_call_that_stops_looking_leaves_the_line() {
        let limits = limits(Some(1), None, None);
        let mut state = LimiterState::default();
        assert_eq!(
            admit(&mut state, &limits, 0, &call("a", 0)),
            Admission::Admitted
        );
        let high = place(Priority::High, "x");
        let gone = Call {
            lease: "gone",
            estimate: 0,
            place: &high,
        };
        assert!(matches!(
            admit(&mut state, &limits, 0, &gone),
            Admission::Wait { .. }
        ));
        settle(&mut state, &limits, "a", None);
        assert!(matches!(
            admit(&mut state, &limits, 1, &call("b", 0)),
            Admission::Wait {
                reason: WaitReason::Queue,
                ..
            }
        ));
        let lapsed = millis(TICKET_LIFE) + 1;
        assert_eq!(
            admit(&mut state, &limits, lapsed, &call("b", 0)),
            Admission::Admitted
        );
    }
}
