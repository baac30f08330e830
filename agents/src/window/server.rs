//! Asking an OpenAI-compatible server for its context window and its token counts: llama.cpp
//! (`GET /props`, `POST /tokenize`) and Ollama (`POST /api/show`). A server that answers
//! neither has an unknown window; every failure here only means "unknown".

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// The longest wait for a server's answer about itself.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a server said about itself.
#[derive(Debug, Clone, Copy)]
struct Facts {
    /// Its context window, in tokens.
    window: u64,
    /// True when it counts tokens (`POST /tokenize`, llama.cpp).
    tokenizer: bool,
}

/// llama.cpp's settings, under the server's root.
const PROPS: &str = "props";
/// llama.cpp's tokenizer, under the server's root.
const TOKENIZE: &str = "tokenize";
/// Ollama's model details, under the server's root.
const API_SHOW: &str = "api/show";

/// The server's root behind `base_url` (…`/v1`): its trailing `/` and a final `/v1` dropped.
fn server_root(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

/// The URL of `path` under a server's `root`.
fn probe_url(root: &str, path: &str) -> String {
    format!("{root}/{path}")
}

/// Every URL a probe of the server behind `base_url` may ask. The ad-hoc URL check
/// ([`crate::spec::check`]) parses these very strings, so the hosts checked are the hosts
/// requested.
pub(crate) fn probe_urls(base_url: &str) -> [String; 3] {
    let root = server_root(base_url);
    [PROPS, TOKENIZE, API_SHOW].map(|path| probe_url(root, path))
}

/// One server's window and tokenizer, asked once.
#[derive(Debug)]
pub struct ServerProbe {
    /// The server's root (its base URL without a trailing `/v1`).
    root: String,
    model: String,
    api_key: Option<String>,
    /// None when no client could be built (then the window is unknown).
    client: Option<reqwest::Client>,
    facts: OnceCell<Option<Facts>>,
}

impl ServerProbe {
    /// A probe of the server behind `base_url` (…`/v1`) serving `model`; `api_key` goes only to
    /// that server, as with its chat requests.
    pub fn new(base_url: &str, model: &str, api_key: Option<String>) -> Self {
        let root = server_root(base_url).to_string();
        // reqwest is built without a crypto provider; installing ring twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Never sent on by a redirect to a host the model URL's check did not see.
        let client = reqwest::Client::builder()
            .timeout(PROBE_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .ok();
        Self {
            root,
            model: model.to_string(),
            api_key: api_key.filter(|key| !key.trim().is_empty()),
            client,
            facts: OnceCell::new(),
        }
    }

    /// The server's context window (asked once), if it tells.
    pub async fn window(&self) -> Option<u64> {
        self.facts().await.map(|facts| facts.window)
    }

    /// The tokens of `text` by the server's own tokenizer, if it has one.
    pub async fn count(&self, text: &str) -> Option<u64> {
        if !self.facts().await?.tokenizer {
            return None;
        }
        let reply = self
            .post(TOKENIZE, &json!({"content": text, "add_special": true}))
            .await?;
        let tokens = reply.get("tokens")?.as_array()?.len();
        u64::try_from(tokens).ok()
    }

    async fn facts(&self) -> Option<Facts> {
        *self
            .facts
            .get_or_init(|| async {
                let facts = match self.llama_cpp().await {
                    Some(facts) => Some(facts),
                    None => self.ollama().await,
                };
                match facts {
                    Some(facts) => tracing::info!(
                        server = %self.root,
                        window = facts.window,
                        tokenizer = facts.tokenizer,
                        "the model server's context window"
                    ),
                    None => tracing::debug!(
                        server = %self.root,
                        "the model server does not tell its context window"
                    ),
                }
                facts
            })
            .await
    }

    /// llama.cpp: `GET /props` → `default_generation_settings.n_ctx` (a slot's window).
    async fn llama_cpp(&self) -> Option<Facts> {
        let props = self.get(PROPS).await?;
        let window = props
            .get("default_generation_settings")?
            .get("n_ctx")?
            .as_u64()?;
        Some(Facts {
            window,
            tokenizer: true,
        })
    }

    /// Ollama: `POST /api/show` → the `num_ctx` the model is run with, when it sets one.
    async fn ollama(&self) -> Option<Facts> {
        let show = self.post(API_SHOW, &json!({"model": self.model})).await?;
        let parameters = show.get("parameters")?.as_str()?;
        let window = parameters.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
        })?;
        Some(Facts {
            window,
            tokenizer: false,
        })
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let request = self.client.as_ref()?.get(probe_url(&self.root, path));
        self.json(request).await
    }

    async fn post(&self, path: &str, body: &Value) -> Option<Value> {
        let request = self
            .client
            .as_ref()?
            .post(probe_url(&self.root, path))
            .json(body);
        self.json(request).await
    }

    async fn json(&self, request: reqwest::RequestBuilder) -> Option<Value> {
        let request = match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        let response = request.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json::<Value>().await.ok()
    }
}
