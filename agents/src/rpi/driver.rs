//! The driver of one run: the job, the model and the host it works with. `phases` adds the
//! phase logic and `steps` the journaled steps, each as its own `impl Driver` block.

use atelier_messages::job::Phase;

use super::types::{AgentHost, Budgets, JobInput};
use crate::AgentError;
use crate::catalog::{self, ToolSpec};
use crate::provider::{ModelProvider, PromptStyle};

pub(super) struct Driver<'a> {
    pub(super) job: &'a JobInput,
    pub(super) provider: &'a dyn ModelProvider,
    pub(super) host: &'a dyn AgentHost,
    pub(super) budgets: Budgets,
}

impl Driver<'_> {
    /// True when the model's profile asks for compact prompts (a small model).
    pub(super) fn compact(&self) -> bool {
        self.provider.prompt_style() == PromptStyle::Compact
    }

    /// The paths of the workbench's files, as the agent sees them.
    pub(super) async fn paths(&self) -> Result<Vec<String>, AgentError> {
        let files = self.host.files().await?;
        Ok(files.into_iter().map(|file| file.path).collect())
    }

    /// A phase's tools as this model is offered them: all of them, or, for a compact prompt,
    /// those for the kinds of the workbench's files and of the files the request names, with
    /// only their required parameters, and none in the plan phase (the plan is written from the maps and the research notes; a
    /// small model offered tools there reads and recalls in circles instead of planning).
    pub(super) async fn offered(
        &self,
        phase: Phase,
        tools: Vec<ToolSpec>,
    ) -> Result<Vec<ToolSpec>, AgentError> {
        if !self.compact() {
            return Ok(tools);
        }
        if phase == Phase::Plan {
            return Ok(Vec::new());
        }
        let paths = self.paths().await?;
        let named = crate::request::missing_files(&self.job.message, &paths);
        let offered = catalog::for_file_kinds(tools, &extensions(&paths), &extensions(&named));
        Ok(offered.iter().map(ToolSpec::required_only).collect())
    }
}

/// The extensions of `paths`, lower case.
fn extensions(paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|path| Some(path.rsplit_once('.')?.1.to_lowercase()))
        .collect()
}

/// The research notes of a compact-prompt job whose every file has a structural map.
pub(super) const RESEARCH_SKIPPED: &str =
    "Research was skipped: the structural maps below describe every file.";

impl Driver<'_> {
    /// For a compact prompt, research is skipped when the structural maps describe every
    /// file of the workbench (a small model's research turns mostly restate them, and its
    /// notes can mislead the plan); the notes it leaves. Full prompts always research.
    pub(super) async fn research_skipped(&self) -> Result<Option<String>, AgentError> {
        if !self.compact() {
            return Ok(None);
        }
        let files = self.host.files().await?;
        let mapped = |path: &str| self.job.context.maps.iter().any(|map| map.path == path);
        let every_file_mapped = !files.is_empty() && files.iter().all(|file| mapped(&file.path));
        Ok(every_file_mapped.then(|| RESEARCH_SKIPPED.to_string()))
    }
}
