//! What a model call pays for the deployment's limits on its profile: admitting it and giving
//! it back through the shared record (`provider_limits`: two compare-and-set round trips to
//! the NATS KV bucket), against the floor of the same work done raw (a KV read and an update,
//! twice), one caller at a time and eight at once (where compare-and-set conflicts retry).
//! The limits are set far above the load, so only the bookkeeping is measured; the server
//! keeps its default sync, as `atelier up`'s does.
//!
//! Run: `cargo bench -p atelier-coordinator --bench provider_limits` (numbers in
//! docs/benchmarks.md; needs `nats-server` on the PATH).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use atelier_agents::spec::ProviderLimits;
use atelier_coordinator::provider_limits::{Limiters, Place, ProfileLimiter};
use common::{nats_server, percentile};

mod common;

/// Calls measured one at a time.
const CALLS: usize = 1_000;
/// Concurrent callers, and calls each.
const CALLERS: usize = 8;
const EACH: usize = 125;

/// Prints the p50 and p99 of `samples`; the p50.
fn report(name: &str, samples: &mut [Duration]) -> Duration {
    let (p50, p99) = (percentile(samples, 0.50), percentile(samples, 0.99));
    println!(
        "{name:<34} p50 {:>7.3} ms   p99 {:>7.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    p50
}

/// One call's bookkeeping: admitted, then given back.
async fn limited_call(limiter: &ProfileLimiter, place: &Place) {
    let lease = limiter
        .acquire(1_000, place, |_, _| {})
        .await
        .expect("admitted");
    limiter.release(&lease, Some(900)).await;
}

/// The same round trips raw: read the key and write it back with its revision, twice.
async fn raw_call(store: &kv::Store) {
    for _ in 0..2 {
        loop {
            let entry = store.entry("raw").await.expect("read");
            let revision = entry.map_or(0, |entry| entry.revision);
            let written = if revision == 0 {
                store.create("raw", "x".into()).await.map(|_| ()).is_ok()
            } else {
                store.update("raw", "x".into(), revision).await.is_ok()
            };
            if written {
                break;
            }
        }
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, url) = nats_server(dir.path(), false);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = async_nats::connect(&url).await.expect("nats");
        let jetstream = jetstream::new(client);
        let limits = ProviderLimits {
            max_concurrent_requests: Some(1_000),
            requests_per_minute: Some(10_000_000),
            tokens_per_minute: Some(10_000_000_000),
        };
        let limiter = Limiters::open(&jetstream, "bench", 1)
            .await
            .expect("limiters")
            .profile("bench", limits);
        let raw = jetstream
            .create_key_value(kv::Config {
                bucket: "bench-raw".into(),
                history: 1,
                ..Default::default()
            })
            .await
            .expect("raw bucket");
        let place = Place::default();

        let mut limited = Vec::with_capacity(CALLS);
        let mut baseline = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let started = Instant::now();
            limited_call(&limiter, &place).await;
            limited.push(started.elapsed());
            let started = Instant::now();
            raw_call(&raw).await;
            baseline.push(started.elapsed());
        }
        println!("one caller, {CALLS} calls (admit + give back):");
        let limited_p50 = report("  through the limiter", &mut limited);
        let raw_p50 = report("  raw KV read + update, twice", &mut baseline);
        println!(
            "  ratio (p50): {:.2}x",
            limited_p50.as_secs_f64() / raw_p50.as_secs_f64()
        );

        let started = Instant::now();
        let tasks: Vec<_> = (0..CALLERS)
            .map(|caller| {
                let limiter = limiter.clone();
                let place = Place {
                    group: format!("group-{caller}"),
                    ..Place::default()
                };
                tokio::spawn(async move {
                    for _ in 0..EACH {
                        limited_call(&limiter, &place).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("caller");
        }
        let limited_rate = (CALLERS * EACH) as f64 / started.elapsed().as_secs_f64();
        let started = Instant::now();
        let tasks: Vec<_> = (0..CALLERS)
            .map(|_| {
                let raw = raw.clone();
                tokio::spawn(async move {
                    for _ in 0..EACH {
                        raw_call(&raw).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("caller");
        }
        let raw_rate = (CALLERS * EACH) as f64 / started.elapsed().as_secs_f64();
        println!("{CALLERS} callers at once, {EACH} calls each:");
        println!("  through the limiter               {limited_rate:>8.0} calls/s");
        println!("  raw KV read + update, twice       {raw_rate:>8.0} calls/s");
        println!("  ratio: {:.2}x the raw rate", limited_rate / raw_rate);
    });
}
