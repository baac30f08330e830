//! Context compression: a model-made summary of the older messages of a workbench's
//! conversation, for models whose profile can afford the extra call (`summarize_history`).
//! The coordinator keeps the summary in the conversation; later jobs carry it instead of the
//! messages it covers.

use crate::answer::AnswerShape;
use crate::error::AgentError;
use crate::provider::{ChatMessage, ModelProvider, ModelRequest, ToolChoice, Usage};
use crate::rpi::PriorMessage;

/// The heading that opens the summarizing request's system prompt.
pub const HEADING: &str = "## Conversation summary";

/// The longest summary kept (characters).
pub const MAX_SUMMARY_CHARS: usize = 4_000;

const INSTRUCTIONS: &str = "You keep the memory of a workbench's conversation. Summarize the \
messages below for the assistant that answers the next request: what was asked, what was \
decided and done (files written or changed, figures found), and what is still open. At most \
200 words of plain text, no preamble, nothing that is not in the messages.";

/// The summary of `messages` (oldest first), continuing `previous` (the summary of what came
/// before them), and what the call used.
pub async fn summarize(
    provider: &dyn ModelProvider,
    previous: Option<&str>,
    messages: &[PriorMessage],
) -> Result<(String, Usage), AgentError> {
    let mut shown = String::new();
    if let Some(previous) = previous {
        shown.push_str(&format!("Summary so far:\n{previous}\n\n"));
    }
    shown.push_str("Messages:\n");
    for message in messages {
        shown.push_str(&format!(
            "[{} {}]\n{}\n\n",
            message.id, message.role, message.text
        ));
    }
    let request = ModelRequest {
        resample: false,
        phase: "compress".into(),
        item_index: None,
        messages: vec![
            ChatMessage::system(format!("{HEADING}\n{INSTRUCTIONS}")),
            ChatMessage::user(shown),
        ],
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        answer: AnswerShape::Text,
    };
    let response = provider.complete(&request, &|_: &str| {}).await?;
    let summary = response.content.trim();
    if summary.is_empty() {
        return Err(AgentError::Degenerate(
            "the model's summary of the conversation is empty".into(),
        ));
    }
    let summary: String = summary.chars().take(MAX_SUMMARY_CHARS).collect();
    Ok((summary, response.usage))
}
