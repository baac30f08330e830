//! Context compression: when a job's model can afford it (its profile's `summarize_history`),
//! the older conversation — what would otherwise be cut to one line per message — is summarized
//! by the model once, and the summary is kept in the conversation as a system message
//! (`context_compressed`, through the last message it covers). Later jobs carry that summary
//! instead of the messages it covers, and summarize again (from it) only what has grown since.
//!
//! The summary is recorded before the job's research, so a restarted job finds it and does not
//! ask again; a model that cannot summarize leaves the one-line form, with a warning. The call's
//! tokens are counted in the job's (and against its token budget), not in its model turns.

use atelier_agents::compress;
use atelier_agents::provider::{ModelProvider, Usage};
use atelier_agents::rpi::PriorMessage;
use atelier_messages::ErrorBody;
use atelier_messages::workshop::{ConversationMessage, SystemEvent};

use crate::draft_store::DraftStoreHandle;

/// Older messages (not given verbatim) that make a summary worth its call.
pub const COMPRESS_AT: usize = 2;

/// The number of a message id (`m12` → 12).
fn seq(id: &str) -> u64 {
    id.strip_prefix('m')
        .and_then(|n| n.parse().ok())
        .unwrap_or_default()
}

/// The last summary among `messages` and the messages after what it covers (summaries left out).
pub fn split(
    messages: Vec<ConversationMessage>,
) -> (Option<ConversationMessage>, Vec<ConversationMessage>) {
    let through = |message: &ConversationMessage| match &message.event {
        Some(SystemEvent::ContextCompressed {
            through_message_id, ..
        }) => Some(seq(through_message_id)),
        _ => None,
    };
    let summary = messages
        .iter()
        .rev()
        .find(|message| through(message).is_some())
        .cloned();
    let covered = summary.as_ref().and_then(through).unwrap_or_default();
    let rest = messages
        .into_iter()
        .filter(|message| through(message).is_none() && seq(&message.id) > covered)
        .collect();
    (summary, rest)
}

/// Summarizes `older` (continuing `summary`) with `provider` and keeps the result in the
/// workbench's conversation; the recorded message and what the call used.
pub async fn compress(
    store: &DraftStoreHandle,
    provider: &dyn ModelProvider,
    workbench: &str,
    summary: Option<&ConversationMessage>,
    older: &[PriorMessage],
) -> Result<(ConversationMessage, Usage), ErrorBody> {
    let previous = summary.map(|summary| summary.text.as_str());
    let (text, usage) = compress::summarize(provider, previous, older)
        .await
        .map_err(|error| error.to_body())?;
    let through = older.last().map(|m| m.id.clone()).unwrap_or_default();
    let summarized = older.iter().map(|m| m.id.clone()).collect();
    tracing::info!(
        workbench,
        through = %through,
        prompt_tokens = usage.prompt_tokens,
        completion_tokens = usage.completion_tokens,
        "older conversation summarized"
    );
    let recorded = store
        .record_summary(workbench.to_string(), through, summarized, text)
        .await?;
    Ok((recorded, usage))
}

/// How a summary reads in a prompt's earlier conversation.
pub fn summary_line(summary: &ConversationMessage) -> String {
    let through = match &summary.event {
        Some(SystemEvent::ContextCompressed {
            through_message_id, ..
        }) => through_message_id.as_str(),
        _ => "",
    };
    format!(
        "Summary of the conversation through {through}: {}",
        summary.text
    )
}

#[cfg(test)]
mod tests {
    use atelier_messages::workshop::Role;

    use super::*;

    fn message(id: &str, event: Option<SystemEvent>) -> ConversationMessage {
        ConversationMessage {
            id: id.into(),
            role: if event.is_some() {
                Role::System
            } else {
                Role::User
            },
            text: format!("text of {id}"),
            at_ms: 0,
            job_id: None,
            model: None,
            event,
        }
    }

    fn summary(id: &str, through: &str) -> ConversationMessage {
        let event = SystemEvent::ContextCompressed {
            through_message_id: through.into(),
            summarized: Vec::new(),
        };
        message(id, Some(event))
    }

    #[test]
    fn the_last_summary_stands_for_what_it_covers() {
        let messages = vec![
            message("m1", None),
            message("m2", None),
            message("m3", None),
            summary("m4", "m2"),
            message("m5", None),
            summary("m6", "m3"),
            message("m7", None),
        ];
        let (last, rest) = split(messages);
        assert_eq!(last.map(|s| s.id), Some("m6".to_string()));
        let ids: Vec<_> = rest.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m5", "m7"]);
        let (none, all) = split(vec![message("m1", None)]);
        assert!(none.is_none());
        assert_eq!(all.len(), 1);
        assert_eq!(
            summary_line(&summary("m6", "m3")),
            "Summary of the conversation through m3: text of m6"
        );
    }
}
