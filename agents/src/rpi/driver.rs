//! The driver of one run: the job, the model and the host it works with. `phases` adds the
//! phase logic and `steps` the journaled steps, each as its own `impl Driver` block.

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
    /// A phase's tools as this model is offered them: all of them, or, for a compact prompt,
    /// those for the kinds of the workbench's files and of the files the request names.
    pub(super) async fn offered(&self, tools: Vec<ToolSpec>) -> Result<Vec<ToolSpec>, AgentError> {
        if self.provider.prompt_style() != PromptStyle::Compact {
            return Ok(tools);
        }
        let files = self.host.files().await?;
        let extensions: Vec<String> = files
            .iter()
            .map(|file| file.path.clone())
            .chain(crate::request::file_names(&self.job.message))
            .filter_map(|path| {
                let (_, extension) = path.rsplit_once('.')?;
                Some(extension.to_lowercase())
            })
            .collect();
        Ok(catalog::for_file_kinds(tools, &extensions))
    }
}
