//! One store per NATS deployment. Two `atelier coordinator --nats URL --data DIR` started as the
//! README shows, each with a data directory of its own, used to split the workbenches between
//! two stores (a `wb add` answered `NOT_FOUND` by the coordinator that never saw the `wb
//! create`). Now the second refuses to start with `STORE_CLAIMED`, naming the first and the
//! setting that shares the work; a replicated coordinator refuses beside a store of its own
//! too; the same store restarted after a SIGKILL takes its claim back at once. Real
//! nats-server, coordinators and workers.

use std::time::Duration;

use atelier_tests::Cluster;

const CSV: &str = "region,amount\nnorth,10\nsouth,20\n";

#[test]
fn a_second_coordinator_refuses_to_start_and_nothing_is_split() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(&[])?;
    // As the README shows, on another host; and a replicated one beside them.
    let mut second = cluster.spawn_coordinator("coordinator-b", &[])?;
    let mut replicated =
        cluster.spawn_coordinator("coordinator-r", &[("ATELIER_REPLICATED_STORE", "true")])?;
    for (process, name) in [
        (&mut second, "coordinator-b"),
        (&mut replicated, "coordinator-r"),
    ] {
        let status = process.wait_status(Duration::from_secs(30));
        assert!(
            status.is_some_and(|status| !status.success()),
            "{name} kept running: {status:?}"
        );
        let log = std::fs::read_to_string(cluster.dir.path().join(format!("{name}.log")))?;
        assert!(
            log.contains("STORE_CLAIMED")
                && log.contains("another coordinator already serves this NATS deployment")
                && log.contains(&cluster.data_dir().to_string_lossy().to_string())
                && log.contains("replicated_store = true"),
            "{name}: {log}"
        );
    }
    // Every add right after its create finds the workbench: one store answers them all.
    let file = cluster.dir.path().join("sales.csv");
    std::fs::write(&file, CSV)?;
    for index in 0..12 {
        let name = format!("w{index}");
        cluster.cli_ok(&["wb", "create", &name])?;
        cluster.cli_ok(&["wb", "add", &name, &file.to_string_lossy()])?;
        let text = cluster.cli_ok(&["wb", "cat", &name, "sales.csv"])?.stdout;
        assert_eq!(text, CSV);
    }
    Ok(())
}

#[test]
fn the_same_store_killed_and_restarted_takes_its_claim_back_at_once() -> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(&[])?;
    cluster.cli_ok(&["wb", "create", "kept"])?;
    cluster.kill_coordinator();
    cluster.start_coordinator()?;
    // Its own claim, still live, was taken back, not waited for.
    let log = std::fs::read_to_string(cluster.dir.path().join("coordinator.log"))?;
    assert!(!log.contains("waiting for its claim to lapse"), "{log}");
    assert!(cluster.cli_ok(&["wb", "list"])?.stdout.contains("kept"));
    Ok(())
}

#[test]
fn a_coordinator_paused_past_its_claims_life_takes_it_again_and_still_holds_the_deployment()
-> anyhow::Result<()> {
    // A pause (a suspended machine) lets the claim lapse; nobody else started meanwhile, so
    // the coordinator takes it again and goes on serving: a second one still refuses.
    let cluster = Cluster::start_with(&[])?;
    let pid = cluster
        .coordinator
        .as_ref()
        .and_then(|process| process.pid())
        .ok_or_else(|| anyhow::anyhow!("no coordinator"))?
        .to_string();
    let signal = |name: &str| {
        std::process::Command::new("kill")
            .args([name, &pid])
            .status()
    };
    signal("-STOP")?;
    std::thread::sleep(Duration::from_secs(8));
    signal("-CONT")?;
    atelier_tests::wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(cluster.dir.path().join("coordinator.log"))
            .is_ok_and(|log| log.contains("the store claim lapsed"))
    })?;
    cluster.cli_ok(&["wb", "create", "after-the-pause"])?;
    let mut second = cluster.spawn_coordinator("coordinator-b", &[])?;
    let status = second.wait_status(Duration::from_secs(30));
    assert!(status.is_some_and(|status| !status.success()), "{status:?}");
    Ok(())
}
