//! The driver of one run: the job, the model and the host it works with. `phases` adds the
//! phase logic and `steps` the journaled steps, each as its own `impl Driver` block.

use super::types::{AgentHost, Budgets, JobInput};
use crate::provider::ModelProvider;

pub(super) struct Driver<'a> {
    pub(super) job: &'a JobInput,
    pub(super) provider: &'a dyn ModelProvider,
    pub(super) host: &'a dyn AgentHost,
    pub(super) budgets: Budgets,
}
