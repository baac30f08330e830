//! A CPU budget per process, through a cgroup of its own (cgroup v2's `cpu.max`, or v1's CFS
//! quota): for benchmarks that stand several processes on one machine for several hosts, each
//! bringing the same CPU. Needs a writable cgroup CPU controller (root, usually).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The CFS period the quota is a share of, in microseconds.
const PERIOD_US: u64 = 100_000;

/// Processes each held to a number of cores until this is dropped (they go back to the root
/// group, and their groups are removed).
pub struct CpuCap {
    root: PathBuf,
    groups: Vec<(PathBuf, u32)>,
}

/// Where the CPU controller is mounted, and whether it is cgroup v2.
fn controller() -> anyhow::Result<(PathBuf, bool)> {
    let unified = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(unified.join("cgroup.controllers"));
    if controllers.is_ok_and(|list| list.split_whitespace().any(|name| name == "cpu")) {
        return Ok((unified.to_path_buf(), true));
    }
    let v1 = unified.join("cpu");
    if v1.join("cpu.cfs_quota_us").exists() {
        return Ok((v1, false));
    }
    bail!(
        "no cgroup CPU controller is mounted: a CPU cap per process needs one (cgroup v2 with `cpu`, or v1's `cpu`)"
    )
}

impl CpuCap {
    /// Holds each of `pids` (all its threads) to `cores` cores of CPU, in a group of its own.
    pub fn apply(pids: &[u32], cores: f64) -> anyhow::Result<Self> {
        if !(cores > 0.0 && cores.is_finite()) {
            bail!("a CPU cap is a positive number of cores, not {cores}");
        }
        let (root, v2) = controller()?;
        let quota_us = (cores * PERIOD_US as f64).round().max(1_000.0) as u64;
        let mut cap = Self {
            root: root.clone(),
            groups: Vec::new(),
        };
        for pid in pids {
            let group = root.join(format!("atelier-bench-{}-{pid}", std::process::id()));
            std::fs::create_dir_all(&group)
                .with_context(|| format!("create {} (CPU caps need root)", group.display()))?;
            cap.groups.push((group.clone(), *pid));
            match v2 {
                true => write(&group.join("cpu.max"), &format!("{quota_us} {PERIOD_US}"))?,
                false => {
                    write(&group.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                    write(&group.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
                }
            }
            write(&group.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(cap)
    }
}

fn write(path: &Path, value: &str) -> anyhow::Result<()> {
    std::fs::write(path, value).with_context(|| format!("write {value:?} to {}", path.display()))
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        for (group, pid) in &self.groups {
            // A process that ended has left its group already.
            let _ = std::fs::write(self.root.join("cgroup.procs"), pid.to_string());
            let _ = std::fs::remove_dir(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CpuCap;

    #[test]
    fn a_cap_is_a_positive_number_of_cores() {
        for cores in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(CpuCap::apply(&[], cores).is_err(), "{cores} was taken");
        }
    }
}
