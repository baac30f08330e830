//! The autoscaler: supervises worker processes of one or more pools and sizes each pool between
//! its bounds from the demand its workers report (see `atelier_messages::worker`).
//!
//! Every tick it reads the pool's busy and total slots and the calls waiting for a slot
//! (`$SRV.STATS`). A pool is *saturated* when more calls want a slot than it has
//! (`busy + pending > slots`); after [`Tuning::saturated_ticks`] saturated ticks in a row it
//! starts one more worker process. It is *quiet* when nothing waits and the busy slots would fit
//! in the pool less one worker at most [`Tuning::low_utilization`] full; after
//! [`Tuning::idle`] of uninterrupted quiet it retires its newest worker (SIGTERM: the worker
//! leaves the queue group, finishes the calls it holds and exits). Between two changes of one
//! pool lies at least [`Tuning::cooldown`]. Each decision is logged, published on
//! `atelier.pool.<pool>.scaled` and counted in the autoscaler's `$SRV.STATS`
//! (service `atelier-autoscaler`), which the dashboard, `/metrics` and `atelier workers` show.
//!
//! # Layout
//! - this module: the bounds (`--autoscale`, `[autoscale.POOL]`), the timing, a pool's
//!   [`Demand`] and the [`Scaler`] that decides (pure, tested without processes).
//! - `supervisor`: the PoolSupervisor actor (one per pool) that reads the demand, applies the
//!   decisions to worker processes and reports them; [`start`] and the [`Autoscaler`] handle.

mod supervisor;

pub use supervisor::{Autoscaler, Launcher, WORKER_URL_FILE, start};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use atelier_messages::tool::Pool;
use atelier_messages::worker::ScaleDirection;
use serde::{Deserialize, Serialize};

use crate::dashboard::workers::PoolView;

/// How many worker processes a pool may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolBounds {
    pub min: usize,
    pub max: usize,
}

/// Parses `tabular=1..4,office=1..2` (the `--autoscale` flag).
pub fn parse_spec(spec: &str) -> anyhow::Result<BTreeMap<Pool, PoolBounds>> {
    let mut pools = BTreeMap::new();
    for part in spec
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        let Some((pool, range)) = part.split_once('=') else {
            bail!("--autoscale takes POOL=MIN..MAX[,POOL=MIN..MAX], got {part:?}");
        };
        let pool = Pool::parse(pool.trim())
            .with_context(|| format!("--autoscale: unknown pool {pool:?} (tabular, office)"))?;
        let Some((min, max)) = range.split_once("..") else {
            bail!("--autoscale: {part:?} needs a range MIN..MAX, e.g. {pool}=1..4");
        };
        let bounds = PoolBounds {
            min: min
                .trim()
                .parse()
                .with_context(|| format!("--autoscale: bad minimum in {part:?}"))?,
            max: max
                .trim()
                .parse()
                .with_context(|| format!("--autoscale: bad maximum in {part:?}"))?,
        };
        check_bounds(pool, bounds)?;
        pools.insert(pool, bounds);
    }
    if pools.is_empty() {
        bail!("--autoscale names no pool; e.g. --autoscale tabular=1..4");
    }
    Ok(pools)
}

/// Refuses bounds no pool can keep.
pub fn check_bounds(pool: Pool, bounds: PoolBounds) -> anyhow::Result<()> {
    // Demand is read from the pool's workers, so a pool needs one to be seen at all.
    if bounds.min == 0 || bounds.min > bounds.max {
        bail!(
            "autoscale bounds for {pool} must satisfy 1 <= min <= max, got {}..{}",
            bounds.min,
            bounds.max
        );
    }
    Ok(())
}

/// How eagerly the autoscaler reacts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// How often demand is read.
    pub interval: Duration,
    /// Saturated ticks in a row before a worker is added.
    pub saturated_ticks: u32,
    /// Least time between two changes of one pool.
    pub cooldown: Duration,
    /// Uninterrupted quiet before a worker is retired.
    pub idle: Duration,
    /// Highest share of the remaining slots the busy ones may fill for a retirement.
    pub low_utilization: f64,
}

impl Tuning {
    /// The defaults, with the scale-down delay given.
    pub fn with_idle(idle: Duration, cooldown: Duration) -> Self {
        Self {
            interval: Duration::from_millis(500),
            saturated_ticks: 2,
            cooldown,
            idle,
            low_utilization: 0.5,
        }
    }
}

/// A pool's demand at one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    pub workers: u64,
    pub busy: u64,
    pub slots: u64,
    pub pending: u64,
}

impl Demand {
    fn of(view: &PoolView) -> Self {
        Self {
            workers: view.instances.iter().filter(|i| !i.draining).count() as u64,
            busy: view.in_flight,
            slots: view
                .instances
                .iter()
                .filter(|i| !i.draining)
                .map(|i| i.max_concurrency)
                .sum(),
            pending: view.pending_calls,
        }
    }

    /// More calls want a slot than the pool has.
    fn saturated(&self) -> bool {
        self.pending > 0 && self.busy + self.pending > self.slots
    }

    /// Nothing waits, and the busy slots fit in the pool less one worker at most `share` full.
    fn quiet(&self, share: f64) -> bool {
        if self.pending > 0 {
            return false;
        }
        let per_worker = self.slots / self.workers.max(1);
        let remaining = self.slots.saturating_sub(per_worker);
        self.busy as f64 <= share * remaining as f64
    }
}

/// A decision to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub direction: ScaleDirection,
    pub reason: String,
}

/// One pool's decisions, with hysteresis: saturation must last, quiet must last the idle delay,
/// and changes are a cool-down apart.
#[derive(Debug)]
pub struct Scaler {
    bounds: PoolBounds,
    tuning: Tuning,
    saturated_for: u32,
    quiet_since: Option<Instant>,
    last_change: Option<Instant>,
}

impl Scaler {
    pub fn new(bounds: PoolBounds, tuning: Tuning) -> Self {
        Self {
            bounds,
            tuning,
            saturated_for: 0,
            quiet_since: None,
            last_change: None,
        }
    }

    /// What to do now, given the demand and how many workers this autoscaler runs.
    pub fn decide(&mut self, now: Instant, demand: Demand, running: usize) -> Option<Decision> {
        self.saturated_for = if demand.saturated() {
            self.saturated_for + 1
        } else {
            0
        };
        if demand.quiet(self.tuning.low_utilization) {
            self.quiet_since.get_or_insert(now);
        } else {
            self.quiet_since = None;
        }
        let decision = self.choose(now, demand, running)?;
        self.last_change = Some(now);
        self.saturated_for = 0;
        self.quiet_since = None;
        Some(decision)
    }

    fn choose(&self, now: Instant, demand: Demand, running: usize) -> Option<Decision> {
        if running < self.bounds.min {
            return Some(up(format!("below the minimum of {}", self.bounds.min)));
        }
        if running > self.bounds.max {
            return Some(down(format!("above the maximum of {}", self.bounds.max)));
        }
        let cooling = self
            .last_change
            .is_some_and(|last| now.duration_since(last) < self.tuning.cooldown);
        if cooling {
            return None;
        }
        if self.saturated_for >= self.tuning.saturated_ticks && running < self.bounds.max {
            return Some(up(format!(
                "saturated: {} of {} slots busy, {} calls waiting",
                demand.busy, demand.slots, demand.pending
            )));
        }
        let quiet_long = self
            .quiet_since
            .is_some_and(|since| now.duration_since(since) >= self.tuning.idle);
        if quiet_long && running > self.bounds.min {
            return Some(down(format!(
                "quiet for {} s: {} of {} slots busy, nothing waiting",
                self.tuning.idle.as_secs(),
                demand.busy,
                demand.slots
            )));
        }
        None
    }
}

fn up(reason: String) -> Decision {
    Decision {
        direction: ScaleDirection::Up,
        reason,
    }
}

fn down(reason: String) -> Decision {
    Decision {
        direction: ScaleDirection::Down,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning() -> Tuning {
        Tuning {
            interval: Duration::from_millis(500),
            saturated_ticks: 2,
            cooldown: Duration::from_secs(5),
            idle: Duration::from_secs(30),
            low_utilization: 0.5,
        }
    }

    fn demand(workers: u64, busy: u64, pending: u64) -> Demand {
        Demand {
            workers,
            busy,
            slots: workers * 2,
            pending,
        }
    }

    #[test]
    fn specs_parse_and_bad_ones_say_what_is_wrong() {
        let pools = parse_spec("tabular=1..4, office=2..2").unwrap_or_default();
        assert_eq!(pools[&Pool::Tabular], PoolBounds { min: 1, max: 4 });
        assert_eq!(pools[&Pool::Office], PoolBounds { min: 2, max: 2 });
        for bad in [
            "",
            "tabular",
            "tabular=4",
            "gpu=1..2",
            "tabular=3..1",
            "office=0..2",
            "tabular=a..2",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn starts_at_the_minimum_then_grows_only_after_lasting_saturation() {
        let start = Instant::now();
        let mut scaler = Scaler::new(PoolBounds { min: 1, max: 3 }, tuning());
        let first = scaler.decide(start, Demand::default(), 0);
        assert_eq!(first.map(|d| d.direction), Some(ScaleDirection::Up));
        let later = start + Duration::from_secs(10);
        // One saturated tick is not enough (hysteresis).
        assert_eq!(scaler.decide(later, demand(1, 2, 3), 1), None);
        let grown = scaler.decide(later + Duration::from_millis(500), demand(1, 2, 3), 1);
        assert_eq!(grown.map(|d| d.direction), Some(ScaleDirection::Up));
        // Still saturated, but within the cool-down.
        for tick in 1..=4 {
            let now = later + Duration::from_millis(500 + 500 * tick);
            assert_eq!(scaler.decide(now, demand(2, 4, 3), 2), None);
        }
        let after = later + Duration::from_secs(6);
        let again = scaler.decide(after, demand(2, 4, 3), 2);
        assert_eq!(again.map(|d| d.direction), Some(ScaleDirection::Up));
        // At the maximum, saturation adds nothing.
        let much_later = after + Duration::from_secs(60);
        assert_eq!(scaler.decide(much_later, demand(3, 6, 9), 3), None);
        assert_eq!(
            scaler.decide(much_later + Duration::from_secs(1), demand(3, 6, 9), 3),
            None
        );
    }

    #[test]
    fn busy_slots_with_free_ones_left_are_not_saturation() {
        let start = Instant::now();
        let mut scaler = Scaler::new(PoolBounds { min: 1, max: 3 }, tuning());
        for tick in 0..10 {
            let now = start + Duration::from_secs(tick);
            // 3 of 4 slots busy and one call waiting on a busy worker: a slot is still free.
            assert_eq!(scaler.decide(now, demand(2, 3, 1), 2), None);
        }
    }

    #[test]
    fn retires_only_after_the_idle_delay_of_low_utilization() {
        let start = Instant::now();
        let mut scaler = Scaler::new(PoolBounds { min: 1, max: 3 }, tuning());
        // Empty backlog but every slot busy: not quiet (utilization guards the scale-down).
        for tick in 0..40 {
            let now = start + Duration::from_secs(tick);
            assert_eq!(scaler.decide(now, demand(2, 4, 0), 2), None);
        }
        let quiet = start + Duration::from_secs(40);
        assert_eq!(scaler.decide(quiet, demand(2, 1, 0), 2), None);
        assert_eq!(
            scaler.decide(quiet + Duration::from_secs(29), demand(2, 1, 0), 2),
            None
        );
        // A burst in between restarts the idle delay.
        assert_eq!(
            scaler.decide(quiet + Duration::from_secs(30), demand(2, 3, 0), 2),
            None
        );
        assert_eq!(
            scaler.decide(quiet + Duration::from_secs(31), demand(2, 0, 0), 2),
            None
        );
        let retired = scaler.decide(quiet + Duration::from_secs(61), demand(2, 0, 0), 2);
        assert_eq!(retired.map(|d| d.direction), Some(ScaleDirection::Down));
        // Never below the minimum.
        let idle_forever = quiet + Duration::from_secs(600);
        assert_eq!(scaler.decide(idle_forever, demand(1, 0, 0), 1), None);
        assert_eq!(
            scaler.decide(idle_forever + Duration::from_secs(60), demand(1, 0, 0), 1),
            None
        );
    }
}
