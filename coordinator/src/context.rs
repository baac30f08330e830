//! The workbench context a job's model calls carry (see
//! [`WorkbenchContext`](atelier_agents::rpi::WorkbenchContext)): the files' structural maps,
//! the context items and the earlier conversation, each within a budget, built here when the
//! job starts and handed to the agents crate as data.
//!
//! Budgets are in characters (about four per token):
//! - structural maps: [`MAP_BUDGET_CHARS`] (≈3,000 tokens) in all, [`MAP_FILE_CHARS`] per file.
//!   A CSV's map is `table_get_map` (columns, types, row count), any other file's `get_file_map`
//!   (sheets with dimensions and header rows, docx sections, slide titles, pages), both from the
//!   worker pools, compact JSON with chunk lists reduced to their count. Files past the budget
//!   are named in a note; a map that cannot be made says why.
//! - context items: bounded when added (64 KiB each, 16 per workbench) and given in full.
//! - conversation: [`CONVERSATION_BUDGET_CHARS`] (≈4,000 tokens). The most recent
//!   [`RECENT_MESSAGES`] messages go verbatim (each cut at [`MESSAGE_CHARS`]) while they fit in
//!   three quarters of it; older messages are summarized as one line each (role, id and the start
//!   of the text, [`SUMMARY_LINE_CHARS`]), newest first, in the rest; the oldest that do not fit
//!   are counted. With a model that summarizes (see `compression`), the older messages are
//!   the model's summary instead, kept in the conversation and carried first.

use std::time::Duration;

use atelier_agents::provider::{ModelProvider, Usage};
use atelier_agents::rpi::{FileMapText, PriorMessage, SkillText, WorkbenchContext};
use atelier_messages::store::{ManifestEntry, View};
use atelier_messages::tool::{Pool, ToolName, ToolOutput, ToolRequest};
use atelier_messages::workshop::{ContextItem, ContextKind, ConversationMessage};
use atelier_messages::{ErrorBody, PROTOCOL_VERSION};
use atelier_transport::Policy;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::draft_store::DraftStoreHandle;
use crate::jobs::JobRecord;

/// The structural maps' share of a prompt.
pub const MAP_BUDGET_CHARS: usize = 12_000;
/// The longest map of one file.
pub const MAP_FILE_CHARS: usize = 2_000;
/// How long one map may take.
const MAP_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// The messages not given verbatim, oldest first (what a model summary would cover).
    pub older: Vec<PriorMessage>,
}

fn prior(message: &ConversationMessage, limit: usize) -> PriorMessage {
    PriorMessage {
        id: message.id.clone(),
        role: message.role.as_str().to_string(),
        text: cut(&message.text, limit),
    }
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

/// Selects and summarizes `messages` (oldest first, after what `summary` covers) within the
/// conversation budget; the model's `summary`, if any, comes first.
pub fn conversation(
    messages: &[ConversationMessage],
    summary: Option<&ConversationMessage>,
) -> Conversation {
    let recent_budget = CONVERSATION_BUDGET_CHARS * 3 / 4;
    let mut used = 0;
    let mut recent = Vec::new();
    let mut older_end = messages.len();
    for message in messages.iter().rev().take(RECENT_MESSAGES) {
        let shown = prior(message, MESSAGE_CHARS);
        if used + shown.text.len() > recent_budget {
            break;
        }
        used += shown.text.len();
        older_end -= 1;
        recent.push(shown);
    }
    recent.reverse();
    let older = messages[..older_end]
        .iter()
        .map(|message| prior(message, MESSAGE_CHARS))
        .collect();
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
    if let Some(summary) = summary {
        earlier.insert(
            0,
            cut(&crate::compression::summary_line(summary), MESSAGE_CHARS),
        );
    }
    Conversation {
        earlier,
        recent,
        older,
    }
}

/// The conversation before `record`'s message; its older part summarized by `summarizer`
/// when there is one and enough to summarize; and what summarizing used.
async fn earlier_conversation(
    store: &DraftStoreHandle,
    record: &JobRecord,
    summarizer: Option<&dyn ModelProvider>,
) -> Result<(Conversation, Usage), ErrorBody> {
    let messages = store
        .messages_before(record.workbench.clone(), record.message_id.clone())
        .await?;
    let (summary, messages) = crate::compression::split(messages);
    let built = conversation(&messages, summary.as_ref());
    let Some(provider) = summarizer else {
        return Ok((built, Usage::default()));
    };
    if built.older.len() < crate::compression::COMPRESS_AT {
        return Ok((built, Usage::default()));
    }
    let compressed = crate::compression::compress(
        store,
        provider,
        &record.workbench,
        summary.as_ref(),
        &built.older,
    )
    .await;
    match compressed {
        Ok((recorded, usage)) => {
            let covered = built.older.len();
            Ok((conversation(&messages[covered..], Some(&recorded)), usage))
        }
        Err(error) => {
            tracing::warn!(%error, "the model could not summarize the older conversation; it is cut to one line per message");
            Ok((built, Usage::default()))
        }
    }
}

/// The context of `record`'s model calls: maps of the files it sees, the workbench's context
/// items, and the conversation before its message (its older part summarized by
/// `summarizer`, when the model's profile asks for that); and what summarizing used.
pub async fn build(
    client: &async_nats::Client,
    store: &DraftStoreHandle,
    record: &JobRecord,
    summarizer: Option<&dyn ModelProvider>,
) -> Result<(WorkbenchContext, Usage), ErrorBody> {
    let workbench = record.workbench.clone();
    let files = store
        .list_files(workbench.clone(), View::Current)
        .await?
        .files;
    let (maps, maps_note) = maps(client, record, &files).await;
    let items = store.context_items(workbench.clone()).await?;
    let (
        Conversation {
            earlier, recent, ..
        },
        summarizing,
    ) = earlier_conversation(store, record, summarizer).await?;
    let (situation, skills) = context_items(items);
    let context = WorkbenchContext {
        maps,
        maps_note,
        situation,
        skills,
        earlier,
        recent,
    };
    Ok((context, summarizing))
}

/// The situation text and the skills, in the order they are injected.
fn context_items(items: Vec<ContextItem>) -> (Option<String>, Vec<SkillText>) {
    let mut situation = None;
    let mut skills = Vec::new();
    for item in items {
        match item.kind {
            ContextKind::Situation => {
                situation = item.files.into_iter().next().map(|file| file.text);
            }
            ContextKind::Skill => skills.push(SkillText {
                name: item.name,
                files: item.files.into_iter().map(|f| (f.path, f.text)).collect(),
            }),
        }
    }
    (situation, skills)
}

/// A map as compact JSON: lists of chunks become their count.
fn compact(mut map: Value) -> String {
    fn shrink(value: &mut Value) {
        match value {
            Value::Object(fields) => {
                for (name, field) in fields.iter_mut() {
                    match field {
                        Value::Array(items) if name.contains("chunk") => {
                            *field = json!(items.len())
                        }
                        other => shrink(other),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(shrink),
            _ => {}
        }
    }
    shrink(&mut map);
    if let Value::Object(fields) = &mut map {
        fields.remove("path");
    }
    cut(&map.to_string(), MAP_FILE_CHARS)
}

/// One file's map from its pool, or why there is none.
async fn file_map(
    client: &async_nats::Client,
    record: &JobRecord,
    files: &[ManifestEntry],
    index: usize,
) -> String {
    let file = &files[index];
    let (tool, pool) = if file.kind == "csv" {
        (ToolName::TableGetMap, Pool::Tabular)
    } else {
        (ToolName::GetFileMap, Pool::Office)
    };
    let request = ToolRequest {
        v: PROTOCOL_VERSION,
        call_id: format!("{}.map.{index}", record.job_id),
        job_id: Some(record.job_id.clone()),
        workbench: record.workbench.clone(),
        tool: tool.to_string(),
        args: json!({"path": file.path}),
        files: files.to_vec(),
    };
    let subject = pool.subject();
    let span = tracing::info_span!("tool_call", tool = tool.as_str(), call_id = %request.call_id, pool = %pool);
    let answer: Result<ToolOutput, ErrorBody> =
        atelier_transport::request_to(client, &subject, &request, Policy::once(MAP_TIMEOUT))
            .instrument(span)
            .await;
    match answer {
        Ok(output) => compact(output.output),
        Err(error) => format!("(no map: {})", error.code),
    }
}

/// The maps of `files` within [`MAP_BUDGET_CHARS`], and a note naming those left out.
async fn maps(
    client: &async_nats::Client,
    record: &JobRecord,
    files: &[ManifestEntry],
) -> (Vec<FileMapText>, Option<String>) {
    let mut used = 0;
    let mut maps = Vec::new();
    let mut left_out = Vec::new();
    for (index, file) in files.iter().enumerate() {
        if file.kind == "binary" {
            continue;
        }
        if used >= MAP_BUDGET_CHARS {
            left_out.push(file.path.clone());
            continue;
        }
        let map = file_map(client, record, files, index).await;
        used += map.len();
        maps.push(FileMapText {
            path: file.path.clone(),
            map,
        });
    }
    let note = (!left_out.is_empty()).then(|| {
        format!(
            "maps of {} file(s) left out to stay within the budget; get them with get_file_map: {}",
            left_out.len(),
            left_out.join(", ")
        )
    });
    (maps, note)
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
    fn maps_lose_their_chunk_lists_and_path_and_stay_bounded() {
        let map = json!({"path": "a.xlsx", "format": "xlsx", "sheets": [
            {"name": "S", "dimensions": "A1:B9", "chunks": [{"index": 0}, {"index": 1}]}
        ]});
        let text = compact(map);
        assert!(text.contains(r#""chunks":2"#), "{text}");
        assert!(text.contains(r#""dimensions":"A1:B9""#), "{text}");
        assert!(!text.contains("a.xlsx"), "{text}");
        let huge =
            json!({"columns": (0..2_000).map(|n| format!("column_{n}")).collect::<Vec<_>>()});
        assert_eq!(compact(huge).chars().count(), MAP_FILE_CHARS + 1);
    }

    #[test]
    fn the_situation_comes_apart_from_the_skills() {
        use atelier_messages::workshop::ContextFile;
        let file = |path: &str, text: &str| ContextFile {
            path: path.into(),
            text: text.into(),
        };
        let items = vec![
            ContextItem {
                name: "situation".into(),
                kind: ContextKind::Situation,
                files: vec![file("situation.txt", "Q3 close")],
            },
            ContextItem {
                name: "finance".into(),
                kind: ContextKind::Skill,
                files: vec![file("SKILL.md", "Use refs"), file("refs/a.md", "A")],
            },
        ];
        let (situation, skills) = context_items(items);
        assert_eq!(situation.as_deref(), Some("Q3 close"));
        assert_eq!(skills.len(), 1);
        assert_eq!(
            skills[0].files[1],
            ("refs/a.md".to_string(), "A".to_string())
        );
    }

    #[test]
    fn a_short_conversation_is_given_verbatim() {
        let messages = vec![message(1, "Count rows"), message(2, "There are 5 rows.")];
        let built = conversation(&messages, None);
        assert!(built.earlier.is_empty() && built.older.is_empty());
        let texts: Vec<_> = built.recent.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["Count rows", "There are 5 rows."]);
        assert_eq!(built.recent[1].role, "assistant");
    }

    #[test]
    fn older_messages_are_summarized_and_the_whole_stays_in_budget() {
        let long = "word ".repeat(2_000);
        let messages: Vec<_> = (1..=300).map(|seq| message(seq, &long)).collect();
        let built = conversation(&messages, None);
        assert_eq!(built.older.len(), 298);
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
