//! The Kubernetes manifests under `deploy/kubernetes` pass a schema check (Kubernetes' own
//! schemas for the core kinds, strict; a JSON schema for KEDA's ScaledObject), name the metrics
//! `/metrics` really serves, and a broken copy fails the same check.

use std::path::{Path, PathBuf};
use std::process::Command;

fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

/// Runs `check.py` on `dir`; its exit status and output.
fn check(dir: &Path) -> anyhow::Result<(bool, String)> {
    let output = Command::new("python3")
        .arg(manifests().join("check.py"))
        .arg(dir)
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    anyhow::ensure!(
        !text.contains("ModuleNotFoundError"),
        "the schema check needs kubernetes-validate: run scripts/setup.sh --tests\n{text}"
    );
    Ok((output.status.success(), text))
}

#[test]
fn the_manifests_pass_the_schema_check() -> anyhow::Result<()> {
    let (passed, output) = check(&manifests())?;
    assert!(passed, "{output}");
    for resource in [
        "workers.yaml: Deployment/atelier-worker-tabular",
        "workers.yaml: Deployment/atelier-worker-office",
        "keda.yaml: ScaledObject/atelier-worker-tabular",
        "keda.yaml: ScaledObject/atelier-worker-office",
        "hpa.yaml: HorizontalPodAutoscaler/atelier-worker-tabular",
        "dashboard.yaml: Service/atelier-dashboard",
    ] {
        assert!(
            output.contains(&format!("ok {resource}")),
            "{resource}: {output}"
        );
    }
    Ok(())
}

#[test]
fn the_scalers_query_metrics_that_metrics_serves() -> anyhow::Result<()> {
    let keda = std::fs::read_to_string(manifests().join("keda.yaml"))?;
    let hpa = std::fs::read_to_string(manifests().join("hpa.yaml"))?;
    let metrics = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/src/metrics.rs"),
    )?;
    for name in ["atelier_pool_pending_calls", "atelier_pool_busy_slots"] {
        assert!(
            metrics.contains(&format!("\"{name}\"")),
            "{name} is not a metric"
        );
        assert!(keda.contains(name), "keda.yaml does not use {name}");
    }
    assert!(hpa.contains("name: atelier_pool_pending_calls"));
    for pool in ["tabular", "office"] {
        assert!(keda.contains(&format!("{{pool=\"{pool}\"}}")), "{pool}");
    }
    Ok(())
}

#[test]
fn a_broken_manifest_fails_the_check() -> anyhow::Result<()> {
    let cases = [
        ("workers.yaml", "replicas: 1", "replicas: one"),
        (
            "workers.yaml",
            "terminationGracePeriodSeconds",
            "terminationGracePeriod",
        ),
        ("hpa.yaml", "maxReplicas: 8", "maxReplicas: eight"),
        ("keda.yaml", "threshold: \"2\"", "threshold: 2"),
        ("keda.yaml", "cooldownPeriod: 120", "coolDownPeriod: 120"),
    ];
    for (file, good, bad) in cases {
        let dir = tempfile::tempdir()?;
        let original = std::fs::read_to_string(manifests().join(file))?;
        assert!(original.contains(good), "{file} has no {good:?}");
        std::fs::write(dir.path().join(file), original.replacen(good, bad, 1))?;
        let (passed, output) = check(dir.path())?;
        assert!(!passed, "{file} with {bad:?} passed: {output}");
        assert!(output.contains("FAIL"), "{output}");
    }
    Ok(())
}
