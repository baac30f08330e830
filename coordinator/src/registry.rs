//! The jobs running in this process and the switches a control request can flip on them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Per-job switches shared by the orchestrator and the control plane.
#[derive(Debug, Default)]
pub struct JobControl {
    cancelled: AtomicBool,
    /// Woken when an approval decision is recorded.
    pub decided: Notify,
}

impl JobControl {
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.decided.notify_waiters();
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// Which jobs run here.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    jobs: Arc<Mutex<HashMap<String, Arc<JobControl>>>>,
}

impl Registry {
    /// Registers a job about to run; `None` if it already runs here.
    pub fn claim(&self, job_id: &str, cancelled: bool) -> Option<Arc<JobControl>> {
        let mut jobs = self
            .jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if jobs.contains_key(job_id) {
            return None;
        }
        let control = Arc::new(JobControl::default());
        if cancelled {
            control.cancel();
        }
        jobs.insert(job_id.to_string(), Arc::clone(&control));
        Some(control)
    }

    pub fn release(&self, job_id: &str) {
        self.jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(job_id);
    }

    pub fn get(&self, job_id: &str) -> Option<Arc<JobControl>> {
        self.jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(job_id)
            .cloned()
    }

    pub fn running(&self) -> u64 {
        self.jobs.lock().map(|jobs| jobs.len() as u64).unwrap_or(0)
    }
}
