//! The workbench context a job's model calls carry (see
//! [`WorkbenchContext`](atelier_agents::rpi::WorkbenchContext)): the earlier conversation
//! within a budget, built here and handed to the agents crate as data.
//!
//! Budgets are in characters (about four per token):
//! - conversation: [`CONVERSATION_BUDGET_CHARS`] (≈4,000 tokens). The most recent
//!   [`RECENT_MESSAGES`] messages go verbatim (each cut at [`MESSAGE_CHARS`]) while they fit in
//!   three quarters of it; older messages are summarized as one line each (role, id and the start
//!   of the text, [`SUMMARY_LINE_CHARS`]), newest first, in the rest; the oldest that do not fit
//!   are counted.

use atelier_agents::rpi::{PriorMessage, WorkbenchContext};
use atelier_messages::ErrorBody;
use atelier_messages::workshop::ConversationMessage;

use crate::draft_store::DraftStoreHandle;
use crate::jobs::JobRecord;

/// The conversation's share of a prompt.
pub const CONVERSATION_BUDGET_CHARS: usize = 16_000;
/// Messages given verbatim at most.
pub const RECENT_MESSAGES: usize = 8;
/// The longest verbatim message.
pub const MESSAGE_CHARS: usize = 4_000;
/// The longest summary line of an older message.
pub const SUMMARY_LINE_CHARS: usize = 200;

/// The earlier conversation: summary lines of older messages and the recent ones verbatim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation {
    pub earlier: Vec<String>,
    pub recent: Vec<PriorMessage>,
}

/// `text` cut at `limit` characters (on a character boundary), marked when cut.
fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

fn one_line(message: &ConversationMessage) -> String {
    let flat = message
        .text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "{} {}: {}",
        message.id,
        message.role.as_str(),
        cut(&flat, SUMMARY_LINE_CHARS)
    )
}

/// Selects and summarizes `messages` (oldest first) within the conversation budget.
pub fn conversation(messages: &[ConversationMessage]) -> Conversation {
    let recent_budget = CONVERSATION_BUDGET_CHARS * 3 / 4;
    let mut used = 0;
    let mut recent = Vec::new();
    let mut older_end = messages.len();
    for message in messages.iter().rev().take(RECENT_MESSAGES) {
        let text = cut(&message.text, MESSAGE_CHARS);
        if used + text.len() > recent_budget {
            break;
        }
        used += text.len();
        older_end -= 1;
        recent.push(PriorMessage {
            id: message.id.clone(),
            role: message.role.as_str().to_string(),
            text,
        });
    }
    recent.reverse();
    let mut earlier = Vec::new();
    let mut omitted = 0;
    for message in messages[..older_end].iter().rev() {
        let line = one_line(message);
        if used + line.len() > CONVERSATION_BUDGET_CHARS {
            omitted += 1;
            continue;
        }
        used += line.len();
        earlier.push(line);
    }
    earlier.reverse();
    if omitted > 0 {
        earlier.insert(0, format!("({omitted} older message(s) omitted)"));
    }
    Conversation { earlier, recent }
}

/// The context of `record`'s model calls: the conversation before its message.
pub async fn build(
    store: &DraftStoreHandle,
    record: &JobRecord,
) -> Result<WorkbenchContext, ErrorBody> {
    let messages = store
        .messages_before(record.workbench.clone(), record.message_id.clone())
        .await?;
    let Conversation { earlier, recent } = conversation(&messages);
    Ok(WorkbenchContext {
        earlier,
        recent,
        ..WorkbenchContext::default()
    })
}

#[cfg(test)]
mod tests {
    use atelier_messages::workshop::Role;

    use super::*;

    fn message(seq: usize, text: &str) -> ConversationMessage {
        ConversationMessage {
            id: format!("m{seq}"),
            role: if seq % 2 == 1 {
                Role::User
            } else {
                Role::Assistant
            },
            text: text.to_string(),
            at_ms: 0,
            job_id: None,
            model: None,
            event: None,
        }
    }

    #[test]
    fn a_short_conversation_is_given_verbatim() {
        let messages = vec![message(1, "Count rows"), message(2, "There are 5 rows.")];
        let built = conversation(&messages);
        assert!(built.earlier.is_empty());
        let texts: Vec<_> = built.recent.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["Count rows", "There are 5 rows."]);
        assert_eq!(built.recent[1].role, "assistant");
    }

    #[test]
    fn older_messages_are_summarized_and_the_whole_stays_in_budget() {
        let long = "word ".repeat(2_000);
        let messages: Vec<_> = (1..=300).map(|seq| message(seq, &long)).collect();
        let built = conversation(&messages);
        let recent_ids: Vec<_> = built.recent.iter().map(|m| m.id.as_str()).collect();
        // Two cut messages (4,000 characters and a mark each) fit in three quarters of 16,000.
        assert_eq!(recent_ids, ["m299", "m300"]);
        assert!(
            built
                .recent
                .iter()
                .all(|m| m.text.chars().count() == MESSAGE_CHARS + 1)
        );
        let total: usize = built.earlier.iter().map(String::len).sum::<usize>()
            + built.recent.iter().map(|m| m.text.len()).sum::<usize>();
        assert!(total <= CONVERSATION_BUDGET_CHARS + 64, "{total}");
        assert!(
            built.earlier[0].ends_with("older message(s) omitted)"),
            "{:?}",
            built.earlier[0]
        );
        let last = built.earlier.last().map(String::as_str).unwrap_or_default();
        assert!(last.starts_with("m298 assistant: word word"), "{last}");
    }
}
