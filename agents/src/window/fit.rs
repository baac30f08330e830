//! Cutting a request down to its budget, in the documented order (see the module docs).

use super::{BYTES_PER_TOKEN, CONVERSATION_CLOSE, CONVERSATION_OPEN};
use crate::provider::{ChatMessage, Role};

/// How a text-mode transcript carries a tool result (a user message).
const TEXT_RESULT_PREFIX: &str = "Tool result for ";
/// The fewest characters of the newest tool result kept when it is cut.
const MIN_KEPT_RESULT_CHARS: usize = 400;

/// What was dropped to fit.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Older tool results replaced by a line.
    pub tool_results: usize,
    /// The files whose structural maps were left out.
    pub maps: Vec<String>,
    /// The earlier conversation was left out.
    pub conversation: bool,
    /// The newest tool result was cut to its head.
    pub cut_result: bool,
}

impl Dropped {
    /// True when nothing was dropped.
    pub fn is_empty(&self) -> bool {
        *self == Dropped::default()
    }
}

/// Cuts `messages` down until `count` says they fit `budget`, in the documented order; the
/// tokens they still need when they cannot.
pub fn fit(
    messages: &mut [ChatMessage],
    budget: u64,
    count: &dyn Fn(&[ChatMessage]) -> u64,
) -> Result<Dropped, u64> {
    let mut dropped = Dropped::default();
    let fits = |messages: &[ChatMessage]| count(messages) <= budget;
    if fits(messages) {
        return Ok(dropped);
    }
    let results = tool_results(messages);
    if let Some((_, older)) = results.split_last() {
        for &index in older {
            drop_result(&mut messages[index]);
            dropped.tool_results += 1;
            if fits(messages) {
                return Ok(dropped);
            }
        }
    }
    for path in unnamed_maps(messages) {
        drop_map(messages, &path);
        dropped.maps.push(path);
        if fits(messages) {
            return Ok(dropped);
        }
    }
    if drop_conversation(messages) {
        dropped.conversation = true;
        if fits(messages) {
            return Ok(dropped);
        }
    }
    if let Some(&newest) = results.last() {
        let over = count(messages).saturating_sub(budget);
        dropped.cut_result = cut_result(&mut messages[newest], over);
        if fits(messages) {
            return Ok(dropped);
        }
    }
    Err(count(messages))
}

/// The indices of the messages that carry tool results, oldest first.
fn tool_results(messages: &[ChatMessage]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, message)| is_tool_result(message))
        .map(|(index, _)| index)
        .collect()
}

fn is_tool_result(message: &ChatMessage) -> bool {
    message.role == Role::Tool
        || (message.role == Role::User && message.content.starts_with(TEXT_RESULT_PREFIX))
}

/// The first line of a text-mode result (`Tool result for NAME:`), kept when it is dropped.
fn result_heading(content: &str) -> &str {
    if content.starts_with(TEXT_RESULT_PREFIX) {
        content
            .split_once('\n')
            .map_or(content, |(heading, _)| heading)
    } else {
        ""
    }
}

fn drop_result(message: &mut ChatMessage) {
    let heading = result_heading(&message.content);
    let body = message.content[heading.len()..].trim_start_matches('\n');
    let chars = body.chars().count();
    let line = format!(
        "[this earlier result ({chars} characters) was dropped to fit the model's context; call \
         the tool again if you need it]"
    );
    message.content = if heading.is_empty() {
        line
    } else {
        format!("{heading}\n{line}")
    };
}

/// Cuts the result so it sheds about `over` tokens; false when it is already at its floor.
fn cut_result(message: &mut ChatMessage, over: u64) -> bool {
    let chars = message.content.chars().count();
    let shed = usize::try_from(over.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX);
    let keep = chars.saturating_sub(shed + 200).max(MIN_KEPT_RESULT_CHARS);
    if keep >= chars {
        return false;
    }
    let head: String = message.content.chars().take(keep).collect();
    message.content = format!(
        "{head}\n[cut to fit the model's context: the first {keep} of {chars} characters; read \
         the rest in smaller slices (a row range, a sheet range, a section)]"
    );
    true
}

/// The paths of the maps in the system messages that no user message names, largest first.
fn unnamed_maps(messages: &[ChatMessage]) -> Vec<String> {
    let named: String = messages
        .iter()
        .filter(|message| message.role == Role::User && !is_tool_result(message))
        .map(|message| message.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut maps: Vec<(usize, String)> = messages
        .iter()
        .filter(|message| message.role == Role::System)
        .flat_map(|message| map_spans(&message.content))
        .filter(|(path, _)| {
            let file_name = path.rsplit('/').next().unwrap_or(path);
            !named.contains(path.as_str()) && !named.contains(file_name)
        })
        .map(|(path, span)| (span.1 - span.0, path))
        .collect();
    maps.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
    maps.into_iter().map(|(_, path)| path).collect()
}

/// Each map block in `text`: its path and its byte span.
fn map_spans(text: &str) -> Vec<(String, (usize, usize))> {
    const OPEN: &str = "<map path=\"";
    const CLOSE: &str = "</map>\n";
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find(OPEN) {
        let start = from + offset;
        let path_start = start + OPEN.len();
        let Some(path_len) = text[path_start..].find("\">") else {
            break;
        };
        let Some(close) = text[path_start..].find(CLOSE) else {
            break;
        };
        let end = path_start + close + CLOSE.len();
        spans.push((
            text[path_start..path_start + path_len].to_string(),
            (start, end),
        ));
        from = end;
    }
    spans
}

fn drop_map(messages: &mut [ChatMessage], path: &str) {
    for message in messages
        .iter_mut()
        .filter(|message| message.role == Role::System)
    {
        if let Some((_, (start, end))) = map_spans(&message.content)
            .into_iter()
            .find(|(found, _)| found == path)
        {
            message.content.replace_range(
                start..end,
                &format!(
                    "<map path=\"{path}\">(left out to fit the model's context; read the file with the tools)</map>\n"
                ),
            );
            return;
        }
    }
}

/// Removes the earlier-conversation section; false when there is none.
fn drop_conversation(messages: &mut [ChatMessage]) -> bool {
    for message in messages
        .iter_mut()
        .filter(|message| message.role == Role::System)
    {
        let Some(start) = message.content.find(CONVERSATION_OPEN) else {
            continue;
        };
        let Some(close) = message.content[start..].find(CONVERSATION_CLOSE) else {
            continue;
        };
        let end = start + close + CONVERSATION_CLOSE.len();
        message.content.replace_range(
            start..end,
            "(The earlier conversation on this workbench was left out to fit the model's context.)",
        );
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{estimate_tokens, map_block};

    fn count(messages: &[ChatMessage]) -> u64 {
        estimate_tokens(messages, 0)
    }

    /// A system prompt with two maps and an earlier conversation, the request naming
    /// penguins.csv, two text-mode tool results of 3,000 characters.
    fn transcript() -> Vec<ChatMessage> {
        let system = format!(
            "Research.\n{}{}\n{CONVERSATION_OPEN}\nhello {}\n{CONVERSATION_CLOSE}\n",
            map_block("penguins.csv", &"p".repeat(1_500)),
            map_block("big/other.xlsx", &"o".repeat(3_000)),
            "c".repeat(1_500)
        );
        vec![
            ChatMessage::system(system),
            ChatMessage::user("Write the number of rows in penguins.csv into count.txt"),
            ChatMessage::assistant("{\"tool\": \"read_file\"}", Vec::new()),
            ChatMessage::user(format!("Tool result for read_file:\n{}", "a".repeat(3_000))),
            ChatMessage::assistant("{\"tool\": \"read_file\"}", Vec::new()),
            ChatMessage::user(format!("Tool result for read_file:\n{}", "b".repeat(3_000))),
        ]
    }

    #[test]
    fn a_request_that_fits_is_left_alone() {
        let mut messages = transcript();
        let before = messages.clone();
        let dropped = fit(&mut messages, 100_000, &count).expect("fits");
        assert!(dropped.is_empty());
        assert_eq!(messages, before);
    }

    #[test]
    fn older_results_go_first_then_unnamed_maps_then_the_conversation() {
        let full = count(&transcript());
        // Just under: dropping the older result is enough.
        let mut messages = transcript();
        let dropped = fit(&mut messages, full - 100, &count).expect("fits");
        assert_eq!(dropped.tool_results, 1);
        assert!(dropped.maps.is_empty() && !dropped.conversation);
        assert!(
            messages[3]
                .content
                .starts_with("Tool result for read_file:\n[this earlier result (3000 characters)"),
            "{}",
            messages[3].content
        );
        assert!(messages[5].content.ends_with(&"b".repeat(3_000)));
        // Further: the map of the file the request does not name, not penguins.csv's.
        let mut messages = transcript();
        let dropped = fit(&mut messages, full - 1_500, &count).expect("fits");
        assert_eq!(dropped.maps, ["big/other.xlsx"]);
        assert!(!dropped.conversation);
        assert!(messages[0].content.contains(&"p".repeat(1_500)));
        assert!(!messages[0].content.contains(&"o".repeat(3_000)));
        // Further: the conversation too.
        let mut messages = transcript();
        let dropped = fit(&mut messages, full - 2_000, &count).expect("fits");
        assert!(dropped.conversation);
        assert!(!dropped.cut_result);
        assert!(!messages[0].content.contains("hello"));
        assert!(messages[0].content.contains(&"p".repeat(1_500)));
        // Further: the newest result is cut to its head.
        let mut messages = transcript();
        let dropped = fit(&mut messages, full - 2_500, &count).expect("fits");
        assert!(dropped.cut_result);
        assert!(
            messages[5]
                .content
                .contains("[cut to fit the model's context"),
            "{}",
            messages[5].content
        );
        assert!(count(&messages) <= full - 2_500);
    }

    #[test]
    fn what_cannot_fit_says_how_many_tokens_it_needs() {
        let mut messages = transcript();
        let needed = fit(&mut messages, 100, &count).expect_err("cannot fit");
        assert!(needed > 100, "{needed}");
        assert_eq!(needed, count(&messages));
    }

    #[test]
    fn native_tool_results_are_dropped_whole() {
        let mut messages = vec![
            ChatMessage::system("s"),
            ChatMessage::user("q"),
            ChatMessage::tool_result("call_1", "x".repeat(900)),
            ChatMessage::tool_result("call_2", "y".repeat(90)),
        ];
        let budget = count(&messages) - 200;
        let dropped = fit(&mut messages, budget, &count).expect("fits");
        assert_eq!(dropped.tool_results, 1);
        assert!(messages[2].content.starts_with("[this earlier result (900"));
        assert_eq!(messages[3].content, "y".repeat(90));
    }
}
