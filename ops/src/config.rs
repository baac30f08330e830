//! Configuration layers (figment): defaults → `atelier.toml` → `ATELIER_*` env → CLI flags.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format as _, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// Every setting of the `atelier` binary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// NATS server URL; when unset, `up` starts its own `nats-server` and clients read
    /// `<data_dir>/nats.url`.
    pub nats_url: Option<String>,
    /// Where the coordinator keeps sled, blobs and the embedded server's JetStream store.
    pub data_dir: PathBuf,
    /// Model spec for jobs that name none (`openai:MODEL`, `openai-compat:URL#MODEL`, `replay:FILE`).
    pub default_model: Option<String>,
    /// API key for OpenAI-protocol providers (else `OPENAI_API_KEY`).
    pub openai_api_key: Option<String>,
    /// Base URL for `openai:` models.
    pub openai_base_url: Option<String>,
    /// The `nats-server` executable `up` starts.
    pub nats_server_bin: String,
    /// Port for the embedded server (0: any free port; default 4222, or a free one when taken).
    pub nats_port: u16,
    /// Concurrent tool calls per worker process.
    pub worker_concurrency: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            nats_url: None,
            data_dir: PathBuf::from(".atelier"),
            default_model: None,
            openai_api_key: None,
            openai_base_url: None,
            nats_server_bin: "nats-server".to_string(),
            nats_port: 4222,
            worker_concurrency: 4,
        }
    }
}

/// Flags that override the layers below them (only when given).
#[derive(Debug, Default, Serialize)]
pub struct FlagOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

impl Settings {
    /// Loads the layers; `config_file` defaults to `./atelier.toml` (absent is fine).
    pub fn load(config_file: Option<&Path>, flags: FlagOverrides) -> anyhow::Result<Settings> {
        let file = config_file.map_or_else(|| PathBuf::from("atelier.toml"), Path::to_path_buf);
        if config_file.is_some() && !file.exists() {
            anyhow::bail!("config file {} does not exist", file.display());
        }
        let settings: Settings = Figment::from(Serialized::defaults(Settings::default()))
            .merge(Toml::file(&file))
            .merge(Env::prefixed("ATELIER_"))
            .merge(Serialized::defaults(flags))
            .extract()
            .map_err(|error| anyhow::anyhow!("invalid configuration: {error}"))?;
        Ok(settings)
    }

    /// Where `up` records the URL of the server it started.
    pub fn url_file(&self) -> PathBuf {
        self.data_dir.join("nats.url")
    }

    /// The NATS URL for clients: configured, or the one a running `atelier up` recorded.
    pub fn client_nats_url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.nats_url {
            return Ok(url.clone());
        }
        match std::fs::read_to_string(self.url_file()) {
            Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
            _ => anyhow::bail!(
                "no NATS server known: start one with `atelier up` (in this directory or with the same --data), \
                 or pass --nats nats://HOST:PORT (or set ATELIER_NATS_URL)"
            ),
        }
    }
}
