//! The model's context window as a budget the engine keeps.
//!
//! A profile's window is its `context_tokens`, else the server's own figure (llama.cpp's
//! `GET /props` `n_ctx`, Ollama's `POST /api/show` `num_ctx`), else unknown (then nothing is
//! dropped and a server's refusal is `CONTEXT_OVERFLOW`). A request may use the window less
//! the reply's reserve: its `max_tokens`, at most a quarter of the window.
//!
//! Each request is measured before it is sent: with the server's tokenizer where there is one
//! (llama.cpp's `POST /tokenize` of the messages' text), else the documented estimate
//! [`estimate_tokens`] — a token per 3 bytes of text plus [`MESSAGE_OVERHEAD_TOKENS`] a
//! message, which over-counts English prose and JSON for the BPE tokenizers of current models.
//! A request over its budget is cut down in this order ([`fit`]), each step only as far as
//! needed:
//!
//! 1. older tool results (all but the newest): replaced, oldest first, by a line saying the
//!    result was dropped;
//! 2. the structural maps of files the request and the item's task do not name, largest first;
//! 3. the earlier conversation on the workbench;
//! 4. the newest tool result: cut to its head, with a note to read the rest in slices.
//!
//! What still does not fit fails the turn with `CONTEXT_OVERFLOW`, as does a server's own
//! "exceeds the context" answer; neither is sent again unchanged.
//!
//! # Layout
//! - this file: the budget, the estimate and the markers the prompts wrap droppable parts in.
//! - `fit`: dropping in the documented order.
//! - `server`: asking a server for its window and its token counts.

mod fit;
mod server;

pub use fit::{Dropped, fit};
pub use server::ServerProbe;
pub(crate) use server::probe_urls;

use crate::AgentError;
use crate::provider::ChatMessage;

/// How often a fitted request is measured again and cut further when the server's count still
/// finds it over (the estimate's ratio to the server's count is corrected each time).
const REFITS: u32 = 2;

/// The tokens one message costs beyond its text (role, template markers), in the estimate.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 8;
/// Bytes of text per token, in the estimate.
pub const BYTES_PER_TOKEN: u64 = 3;
/// Tokens kept free beyond the reply's reserve (template tokens the count does not see).
const SAFETY_MARGIN_TOKENS: u64 = 64;

/// Opens the earlier-conversation section of a system prompt (the third thing dropped).
pub const CONVERSATION_OPEN: &str = "<earlier-conversation>";
/// Closes it.
pub const CONVERSATION_CLOSE: &str = "</earlier-conversation>";

/// A provider's context window: its profile's `context_tokens`, else its server's figure.
#[derive(Debug)]
pub struct Window {
    configured: Option<u64>,
    probe: Option<ServerProbe>,
    max_tokens: Option<u32>,
}

impl Window {
    /// `configured` (the profile's `context_tokens`) wins over what `probe` learns from the
    /// server; `max_tokens` is the reply's reserve.
    pub fn new(
        configured: Option<u32>,
        probe: Option<ServerProbe>,
        max_tokens: Option<u32>,
    ) -> Self {
        Self {
            configured: configured.map(u64::from),
            probe,
            max_tokens,
        }
    }

    /// The window in tokens and where the figure comes from, if known.
    async fn size(&self) -> Option<(u64, &'static str)> {
        if let Some(window) = self.configured {
            return Some((window, "the profile's context_tokens"));
        }
        let window = self.probe.as_ref()?.window().await?;
        Some((window, "the server's"))
    }

    /// The tokens of `messages` (with `extra`, the native tool schemas, sent beside them): the
    /// server's count where it has a tokenizer, else the estimate.
    async fn measure(&self, messages: &[ChatMessage], extra: &str) -> u64 {
        let estimate = estimate_tokens(messages, extra.len());
        let Some(probe) = &self.probe else {
            return estimate;
        };
        let text = format!("{}{extra}", messages_text(messages));
        match probe.count(&text).await {
            Some(tokens) => {
                tokens + u64::try_from(messages.len()).unwrap_or(u64::MAX) * MESSAGE_OVERHEAD_TOKENS
            }
            None => estimate,
        }
    }

    /// Cuts `messages` down to the window in the documented order; what was dropped, or
    /// `CONTEXT_OVERFLOW` when they cannot fit. An unknown window leaves them as they are.
    pub async fn keep(
        &self,
        messages: &mut [ChatMessage],
        extra: &str,
    ) -> Result<Dropped, AgentError> {
        let Some((window, source)) = self.size().await else {
            return Ok(Dropped::default());
        };
        let budget = prompt_budget(window, self.max_tokens);
        let mut dropped = Dropped::default();
        for _ in 0..=REFITS {
            let measured = self.measure(messages, extra).await;
            if measured <= budget {
                return Ok(dropped);
            }
            // The estimate scaled to the measure, so the cuts aim at the server's count.
            let estimate = estimate_tokens(messages, extra.len()).max(1);
            let count = |messages: &[ChatMessage]| {
                let scaled = u128::from(estimate_tokens(messages, extra.len()))
                    * u128::from(measured)
                    / u128::from(estimate);
                u64::try_from(scaled).unwrap_or(u64::MAX)
            };
            match fit(messages, budget, &count) {
                Ok(more) => {
                    tracing::warn!(
                        ?more,
                        measured,
                        budget,
                        "the request was cut to fit the model's context"
                    );
                    dropped = merge(dropped, more);
                }
                Err(needed) => {
                    return Err(AgentError::ContextOverflow(format!(
                        "the request needs about {needed} tokens after dropping older tool \
                         results, unnamed files' maps and the earlier conversation; the model's \
                         window is {window} tokens ({source}), {budget} of them for the request \
                         after the reply's reserve. Use a model with a larger context (and set \
                         its profile's context_tokens), or ask about fewer or smaller files"
                    )));
                }
            }
        }
        let measured = self.measure(messages, extra).await;
        if measured <= budget {
            return Ok(dropped);
        }
        Err(AgentError::ContextOverflow(format!(
            "the request still measures {measured} tokens after cutting; the model's window is \
             {window} tokens ({source}), {budget} of them for the request"
        )))
    }
}

fn merge(mut into: Dropped, more: Dropped) -> Dropped {
    into.tool_results += more.tool_results;
    into.maps.extend(more.maps);
    into.conversation |= more.conversation;
    into.cut_result |= more.cut_result;
    into
}

/// A file's structural map as the prompts carry it, delimited so it can be dropped.
pub fn map_block(path: &str, map: &str) -> String {
    format!("<map path=\"{path}\">\n{map}\n</map>\n")
}

/// The tokens a request may use: the window less the reply's reserve (`max_tokens`, at most a
/// quarter of the window) and a small margin.
pub fn prompt_budget(window: u64, max_tokens: Option<u32>) -> u64 {
    let reserve = max_tokens.map_or(window / 4, |max| u64::from(max).min(window / 4));
    window.saturating_sub(reserve + SAFETY_MARGIN_TOKENS)
}

/// The estimated tokens of `messages` and of `extra` text sent with them (native tool
/// schemas): a token per [`BYTES_PER_TOKEN`] bytes, plus [`MESSAGE_OVERHEAD_TOKENS`] a
/// message.
pub fn estimate_tokens(messages: &[ChatMessage], extra: usize) -> u64 {
    let bytes: usize = messages.iter().map(message_bytes).sum::<usize>() + extra;
    let messages = u64::try_from(messages.len()).unwrap_or(u64::MAX);
    (u64::try_from(bytes).unwrap_or(u64::MAX)).div_ceil(BYTES_PER_TOKEN)
        + messages * MESSAGE_OVERHEAD_TOKENS
}

/// The text of `messages` as one string (for a server's tokenizer).
pub fn messages_text(messages: &[ChatMessage]) -> String {
    let mut text = String::new();
    for message in messages {
        text.push_str(&message.content);
        for call in &message.tool_calls {
            text.push_str(&call.name);
            text.push_str(&call.arguments);
        }
        text.push('\n');
    }
    text
}

fn message_bytes(message: &ChatMessage) -> usize {
    message.content.len()
        + message
            .tool_calls
            .iter()
            .map(|call| call.name.len() + call.arguments.len())
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_the_replys_reserve() {
        assert_eq!(prompt_budget(16_384, Some(1_024)), 16_384 - 1_024 - 64);
        // A reserve over a quarter of the window is capped there.
        assert_eq!(prompt_budget(16_384, Some(8_192)), 16_384 - 4_096 - 64);
        assert_eq!(prompt_budget(16_384, None), 16_384 - 4_096 - 64);
        assert_eq!(prompt_budget(10, Some(4_096)), 0);
    }

    #[test]
    fn the_estimate_counts_bytes_and_messages() {
        let messages = [ChatMessage::system("x".repeat(300)), ChatMessage::user("")];
        assert_eq!(estimate_tokens(&messages, 0), 100 + 2 * 8);
        assert_eq!(estimate_tokens(&messages, 30), 110 + 2 * 8);
    }
}
