//! Configuration layers (figment): defaults → `atelier.toml` → `ATELIER_*` env → CLI flags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use atelier_agents::rpi::Budgets;
use atelier_agents::spec::ModelProfile;
use atelier_coordinator::defaults::SpendingDefaults;
use atelier_messages::budget::Budget;
use atelier_messages::tool::Pool;
use figment::Figment;
use figment::providers::{Env, Format as _, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// Every setting of the `atelier` binary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// NATS server URL; when unset, `up` starts its own `nats-server` and clients read
    /// `<data_dir>/nats.url`.
    pub nats_url: Option<String>,
    /// NATS credentials file (a user JWT and its nkey seed, as `nsc generate creds` writes) for
    /// a server in operator mode; exclusive with a user in `nats_url`. Not for the server `up`
    /// starts itself, which has its own users.
    pub nats_creds: Option<PathBuf>,
    /// Where the coordinator keeps sled, blobs and the embedded server's JetStream store.
    pub data_dir: PathBuf,
    /// Model for jobs that name none: a profile name, or a spec (`openai:MODEL`,
    /// `anthropic:MODEL`, `openai-compat:URL#MODEL`, `replay:FILE`).
    pub default_model: Option<String>,
    /// Named model profiles (`[models.NAME]`: kind, base_url, model, api_key or api_key_env,
    /// max_tokens, tool_mode, idle_timeout_secs, request_timeout_secs, max_retries); `--model
    /// NAME` uses one.
    pub models: BTreeMap<String, ModelProfile>,
    /// API key for OpenAI-protocol providers (else `OPENAI_API_KEY`).
    pub openai_api_key: Option<String>,
    /// Base URL for `openai:` models.
    pub openai_base_url: Option<String>,
    /// API key for `anthropic:` models (else `ANTHROPIC_API_KEY`).
    pub anthropic_api_key: Option<String>,
    /// Base URL for `anthropic:` models (default `https://api.anthropic.com`).
    pub anthropic_base_url: Option<String>,
    /// The `nats-server` executable `up` starts.
    pub nats_server_bin: String,
    /// Port for the embedded server (0: any free port; default 4222, or a free one when taken).
    pub nats_port: u16,
    /// Concurrent tool calls per worker process.
    pub worker_concurrency: usize,
    /// Pools `up` sizes on its own: `[autoscale.tabular] min = 1, max = 4` (or `up --autoscale`).
    pub autoscale: BTreeMap<String, crate::autoscale::PoolBounds>,
    /// How long a pool must stay quiet before the autoscaler retires a worker (seconds).
    pub autoscale_idle_secs: u64,
    /// Least time between two changes of one pool's size (seconds).
    pub autoscale_cooldown_secs: u64,
    /// Start the n-th autoscaled worker of a pool on core n (`taskset`), one core each.
    pub autoscale_pin_cpus: bool,
    /// Most bytes of blobs a worker without the coordinator's blob directory caches (default 8 GiB).
    pub blob_cache_bytes: u64,
    /// Most bytes of DuckDB databases a tabular worker keeps in `cache/tabular` (default 4 GiB).
    pub table_cache_bytes: u64,
    /// Where the dashboard listens (`up`, `dashboard`); beyond loopback it needs `dashboard_token`.
    pub http_addr: String,
    /// Bearer token for the dashboard and its API (required when bound beyond loopback).
    pub dashboard_token: Option<String>,
    /// Extra `Host` names the dashboard answers to (e.g. behind a proxy); it always answers to
    /// its own address, and on loopback to `localhost`.
    pub dashboard_hosts: Vec<String>,
    /// MCP sessions the dashboard's `/mcp` holds at once (default 1000); an `initialize` beyond
    /// is refused with 503 `TOO_MANY_SESSIONS` until one closes or expires.
    pub mcp_max_sessions: usize,
    /// How long an MCP session through which nothing passed stays open (seconds; default 300).
    pub mcp_session_idle_secs: u64,
    /// OTLP/HTTP endpoint for traces (e.g. `http://127.0.0.1:4318`); else `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: Option<String>,
    /// How long the step journal of a finished job is kept (seconds; default 7 days).
    pub journal_retention_secs: u64,
    /// Jobs one coordinator runs at once; more wait in their queue (JetStream or `queued`).
    pub max_running_jobs: usize,
    /// Accept `openai-compat:` model URLs beyond this machine from submitters (default off).
    pub allow_adhoc_model_urls: bool,
    /// The directory `replay:` scripts are read from (default: the data directory).
    pub replay_dir: Option<PathBuf>,
    /// How many checkpoints each workbench keeps (older ones are pruned; default 50).
    pub checkpoints_kept: u64,
    /// The format of the event streams' messages: `msgpack` (default) or `json` (readable
    /// with any NATS client as it is); every message says its own in `Content-Type`.
    pub events_format: EventsFormat,
    /// How old a draft is before `history`, `chat` and the dashboard point it out (seconds;
    /// default 24 h).
    pub stale_draft_secs: u64,
    /// How long one office tool call may take (milliseconds; default 30 s): `TOOL_TIMEOUT` after.
    pub office_tool_timeout_ms: u64,
    /// The wall-clock limit of a job that names none (`submit --time-limit`; seconds, default
    /// 1 h): `JOB_TIME_LIMIT` after.
    pub job_time_limit_secs: u64,
    /// The most a job may ask for (seconds; default 7 days); more is refused.
    pub max_job_time_limit_secs: u64,
    /// Per-job limits; a job that reaches one fails with `BUDGET_EXCEEDED`.
    pub job_max_model_turns: u64,
    pub job_max_tool_calls: u64,
    pub job_max_tokens: u64,
    /// The budget of a job that names none (and whose workbench and model profile set none):
    /// tokens and dollars (dollars only where the profile has prices). Default: none.
    pub job_budget_tokens: Option<u64>,
    pub job_budget_usd: Option<f64>,
    /// Budgets by workbench: `[workbench_budgets."reports-*"] tokens = 200000, usd = 2.5`; the
    /// longest glob matching a job's workbench gives its default budget.
    pub workbench_budgets: BTreeMap<String, BudgetSetting>,
    /// Workers that may die holding one tool call before it fails with `TOOL_CRASHED`.
    pub tool_crash_attempts: u32,
    /// Hold the coordinator's store by lease and commit every write to a changelog on
    /// JetStream, so that a standby coordinator (same NATS, its own `--data`) takes over when
    /// this one is lost (docs/adr/0014). Off by default.
    pub replicated_store: bool,
    /// How long the store's lease lasts without renewal (milliseconds; default 6000): a lost
    /// coordinator's store is taken over this long after its last renewal.
    pub store_lease_ms: u64,
    /// Copies JetStream keeps of the changelog and the lease (3 in a cluster; default 1).
    pub store_replicas: usize,
    /// Changelog entries between two snapshots of the store (default 10000): a take-over
    /// replays at most about this many, and the changelog is trimmed up to each snapshot.
    pub store_snapshot_entries: u64,
    /// The shards a new replicated deployment is split into (default 16; 1 to 1024), balanced
    /// over its live coordinators. Fixed when the deployment is created: one made before keeps
    /// its count.
    pub store_shards: u32,
    /// The page cache of a replicated deployment's shard stores together (MiB; default 1024),
    /// split evenly over its shards (at least 8 MiB each): a coordinator holding every shard
    /// caches at most this much.
    pub store_cache_mib: u64,
    /// A replicated deployment's garbage collection (`atelier gc`) keeps the blobs a host's
    /// caches took in the last this many seconds, referenced or not (default 3600): another
    /// shard's write may be between storing a blob and referencing it.
    pub store_blob_grace_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            nats_url: None,
            nats_creds: None,
            data_dir: PathBuf::from(".atelier"),
            default_model: None,
            models: BTreeMap::new(),
            openai_api_key: None,
            openai_base_url: None,
            anthropic_api_key: None,
            anthropic_base_url: None,
            nats_server_bin: "nats-server".to_string(),
            nats_port: 4222,
            worker_concurrency: 4,
            blob_cache_bytes: atelier_workers::DEFAULT_BLOB_CACHE_BYTES,
            table_cache_bytes: atelier_workers::DEFAULT_TABLE_CACHE_BYTES,
            autoscale: BTreeMap::new(),
            autoscale_idle_secs: 60,
            autoscale_cooldown_secs: 5,
            autoscale_pin_cpus: false,
            http_addr: DEFAULT_HTTP_ADDR.to_string(),
            dashboard_token: None,
            dashboard_hosts: Vec::new(),
            mcp_max_sessions: crate::mcp::DEFAULT_MAX_SESSIONS,
            mcp_session_idle_secs: crate::mcp::DEFAULT_SESSION_IDLE_SECS,
            otlp_endpoint: None,
            journal_retention_secs: 7 * 24 * 3600,
            max_running_jobs: 64,
            allow_adhoc_model_urls: false,
            replay_dir: None,
            checkpoints_kept: atelier_coordinator::workbench::DEFAULT_CHECKPOINTS_KEPT,
            office_tool_timeout_ms: atelier_workers::DEFAULT_OFFICE_TIMEOUT_MS,
            stale_draft_secs: atelier_coordinator::workbench::DEFAULT_STALE_DRAFT_SECS,
            events_format: EventsFormat::default(),
            job_time_limit_secs: atelier_coordinator::defaults::DEFAULT_JOB_TIME_LIMIT_SECS,
            max_job_time_limit_secs: atelier_coordinator::defaults::MAX_JOB_TIME_LIMIT_SECS,
            job_max_model_turns: Budgets::default().max_model_turns,
            job_max_tool_calls: Budgets::default().max_tool_calls,
            job_max_tokens: Budgets::default().max_tokens,
            job_budget_tokens: None,
            job_budget_usd: None,
            workbench_budgets: BTreeMap::new(),
            tool_crash_attempts: Budgets::default().tool_crash_attempts,
            replicated_store: false,
            store_lease_ms: 6000,
            store_replicas: 1,
            store_snapshot_entries: 10_000,
            store_shards: atelier_messages::shard::DEFAULT_SHARD_COUNT,
            store_cache_mib: atelier_coordinator::replication::DEFAULT_CACHE_BYTES >> 20,
            store_blob_grace_secs: atelier_coordinator::replication::DEFAULT_BLOB_GRACE.as_secs(),
        }
    }
}

/// A budget in the settings (`[workbench_budgets.GLOB]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSetting {
    pub tokens: Option<u64>,
    pub usd: Option<f64>,
}

/// The format of the event streams' messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventsFormat {
    #[default]
    Msgpack,
    Json,
}

impl EventsFormat {
    pub fn format(self) -> atelier_messages::Format {
        match self {
            Self::Msgpack => atelier_messages::Format::MessagePack,
            Self::Json => atelier_messages::Format::Json,
        }
    }
}

/// The dashboard's default address (a free port is used instead when it is taken).
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:7474";

/// The shortest shard lease a replicated store takes (renewed every third of it).
const MIN_STORE_LEASE_MS: u64 = 500;

/// Flags that override the layers below them (only when given).
#[derive(Debug, Default, Serialize)]
pub struct FlagOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_creds: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_addr: Option<String>,
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

    /// The dashboard's address, token and MCP sessions' limits.
    pub fn dashboard(&self) -> anyhow::Result<crate::dashboard::DashboardConfig> {
        let addr = self.http_addr.parse().map_err(|error| {
            anyhow::anyhow!("http_addr `{}` is not HOST:PORT: {error}", self.http_addr)
        })?;
        anyhow::ensure!(
            self.mcp_max_sessions >= 1,
            "mcp_max_sessions = 0: /mcp would refuse every client (default {})",
            crate::mcp::DEFAULT_MAX_SESSIONS
        );
        anyhow::ensure!(
            self.mcp_session_idle_secs >= 1,
            "mcp_session_idle_secs = 0: every MCP session would close at once (default {})",
            crate::mcp::DEFAULT_SESSION_IDLE_SECS
        );
        Ok(crate::dashboard::DashboardConfig {
            addr,
            token: self.dashboard_token.clone(),
            any_port_when_taken: self.http_addr == DEFAULT_HTTP_ADDR,
            hosts: self.dashboard_hosts.clone(),
            mcp: crate::mcp::SessionLimits {
                max_sessions: self.mcp_max_sessions,
                idle: std::time::Duration::from_secs(self.mcp_session_idle_secs),
            },
        })
    }

    /// The OTLP endpoint: configured, else the standard `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn otlp_endpoint(&self) -> Option<String> {
        self.otlp_endpoint
            .clone()
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
            .filter(|endpoint| !endpoint.trim().is_empty())
    }

    /// The autoscaled pools and their bounds, checked.
    pub fn autoscale_pools(&self) -> anyhow::Result<BTreeMap<Pool, crate::autoscale::PoolBounds>> {
        let mut pools = BTreeMap::new();
        for (name, bounds) in &self.autoscale {
            let pool = Pool::parse(name)
                .with_context(|| format!("[autoscale.{name}]: unknown pool (tabular, office)"))?;
            crate::autoscale::check_bounds(pool, *bounds)?;
            pools.insert(pool, *bounds);
        }
        Ok(pools)
    }

    /// The autoscaler's timing.
    pub fn autoscale_tuning(&self) -> crate::autoscale::Tuning {
        crate::autoscale::Tuning::with_idle(
            std::time::Duration::from_secs(self.autoscale_idle_secs),
            std::time::Duration::from_secs(self.autoscale_cooldown_secs),
        )
    }

    /// The per-job budgets, with the configured limits.
    pub fn budgets(&self) -> Budgets {
        Budgets {
            max_model_turns: self.job_max_model_turns,
            max_tool_calls: self.job_max_tool_calls,
            max_tokens: self.job_max_tokens,
            tool_crash_attempts: self.tool_crash_attempts,
            ..Budgets::default()
        }
    }

    /// What jobs may spend when they name no budget, and each profile's prices; a price, a
    /// budget or a provider limit out of its range is refused by name.
    pub fn spending(&self) -> anyhow::Result<SpendingDefaults> {
        let refused = |error: atelier_messages::ErrorBody| anyhow::anyhow!("{}", error.message);
        let mut workbenches = Vec::new();
        for (glob, setting) in &self.workbench_budgets {
            let prefix = format!("workbench_budgets.\"{glob}\".");
            let budget = Budget::parse(setting.tokens, setting.usd, &prefix).map_err(refused)?;
            workbenches.push((glob.clone(), budget));
        }
        let mut profiles = BTreeMap::new();
        for (name, profile) in &self.models {
            profile.limits().check(name).map_err(refused)?;
            profiles.insert(name.clone(), profile.spending(name).map_err(refused)?);
        }
        Ok(SpendingDefaults {
            budget: Budget::parse(self.job_budget_tokens, self.job_budget_usd, "job_budget_")
                .map_err(refused)?,
            workbenches,
            profiles,
        })
    }

    /// How the coordinator's store is replicated, if it is; settings out of their range are
    /// refused, by name, rather than changed behind the operator's back.
    pub fn replication(
        &self,
    ) -> anyhow::Result<Option<atelier_coordinator::replication::ReplicationSettings>> {
        if !self.replicated_store {
            return Ok(None);
        }
        atelier_messages::shard::validate_count(self.store_shards).map_err(|error| {
            anyhow::anyhow!(
                "store_shards: {}; it is fixed when a deployment is created (default {})",
                error.message,
                atelier_messages::shard::DEFAULT_SHARD_COUNT
            )
        })?;
        anyhow::ensure!(
            self.store_lease_ms >= MIN_STORE_LEASE_MS,
            "store_lease_ms = {} is too short: a lease lives at least {MIN_STORE_LEASE_MS} ms (default 6000)",
            self.store_lease_ms
        );
        anyhow::ensure!(
            self.store_replicas >= 1,
            "store_replicas = 0: a stream has at least one copy (3 on a three-server cluster)"
        );
        let floor_mib = atelier_coordinator::replication::MIN_SHARD_CACHE_BYTES >> 20;
        anyhow::ensure!(
            self.store_cache_mib >= floor_mib,
            "store_cache_mib = {} is too small: a shard's store caches at least {floor_mib} MiB (default {})",
            self.store_cache_mib,
            Settings::default().store_cache_mib
        );
        anyhow::ensure!(
            self.store_snapshot_entries >= 1,
            "store_snapshot_entries = 0: snapshot at least every entry (default {})",
            Settings::default().store_snapshot_entries
        );
        Ok(Some(
            atelier_coordinator::replication::ReplicationSettings {
                lease_ttl: std::time::Duration::from_millis(self.store_lease_ms),
                replicas: self.store_replicas,
                snapshot_entries: self.store_snapshot_entries,
                shards: self.store_shards,
                cache_bytes: self.store_cache_mib.saturating_mul(1 << 20),
                blob_grace: std::time::Duration::from_secs(self.store_blob_grace_secs),
            },
        ))
    }

    /// The directory `replay:` model scripts are read from: `replay_dir`, else `replay/` in the
    /// data directory (a directory of its own: never the credentials, sled or NATS files).
    pub fn replay_dir(&self) -> PathBuf {
        self.replay_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("replay"))
    }

    /// Where `up` records the URL of the server it started.
    pub fn url_file(&self) -> PathBuf {
        self.data_dir.join("nats.url")
    }

    /// Where `up` records the workers' URL (with the worker role's credentials).
    pub fn worker_url_file(&self) -> PathBuf {
        self.data_dir.join(crate::autoscale::WORKER_URL_FILE)
    }

    /// The NATS URL for a worker: configured, or the worker URL a running `atelier up` recorded.
    pub fn worker_nats_url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.nats_url {
            return Ok(self.with_recorded_credentials(url, &self.worker_url_file()));
        }
        match std::fs::read_to_string(self.worker_url_file()) {
            Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
            _ => anyhow::bail!(
                "`atelier worker` needs --nats URL (or ATELIER_NATS_URL), or --data of a running `atelier up`"
            ),
        }
    }

    /// `url`, or the URL recorded in `file` when that is the same server with credentials and
    /// `url` carries none (the URL `atelier up` prints, given with the data directory it wrote).
    fn with_recorded_credentials(&self, url: &str, file: &std::path::Path) -> String {
        if self.nats_creds.is_some() {
            return url.to_string();
        }
        let recorded = std::fs::read_to_string(file).unwrap_or_default();
        crate::nats_roles::recorded_credentials(url, recorded.trim())
            .unwrap_or_else(|| url.to_string())
    }

    /// The NATS URL for clients: configured, or the one a running `atelier up` recorded.
    pub fn client_nats_url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.nats_url {
            return Ok(self.with_recorded_credentials(url, &self.url_file()));
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

#[cfg(test)]
mod tests {
    use atelier_messages::budget::Usd;

    use super::*;

    /// A config file holding `text` (in a directory that lives as long as the guard).
    fn written_config(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("atelier.toml");
        std::fs::write(&file, text).expect("config");
        (dir, file)
    }

    #[test]
    fn model_profiles_load_from_the_config_file() {
        let (_dir, file) = written_config(
            "default_model = \"local\"\n[models.local]\nkind = \"openai-compat\"\n\
             base_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"qwen\"\nmax_tokens = 64\n",
        );
        let settings = Settings::load(Some(&file), FlagOverrides::default()).expect("settings");
        assert_eq!(settings.default_model.as_deref(), Some("local"));
        let local = settings.models.get("local").expect("the profile");
        assert_eq!(local.max_tokens, Some(64));
        assert_eq!(local.model, "qwen");
    }

    #[test]
    fn budgets_and_prices_load_from_the_config_file_and_bad_ones_are_refused_by_name() {
        let profile = "[models.cloud]\nkind = \"openai\"\nmodel = \"gpt\"\n";
        let (_dir, file) = written_config(&format!(
            "job_budget_tokens = 9000\n[workbench_budgets.\"reports-*\"]\nusd = 2.5\n\
             {profile}input_usd_per_mtok = 2.5\noutput_usd_per_mtok = 10.0\n\
             job_budget_tokens = 7000\nrequests_per_minute = 600\n"
        ));
        let settings = Settings::load(Some(&file), FlagOverrides::default()).expect("settings");
        let spending = settings.spending().expect("valid settings");
        assert_eq!(spending.budget.tokens, Some(9_000));
        assert_eq!(
            spending.workbenches,
            vec![(
                "reports-*".to_string(),
                Budget {
                    tokens: None,
                    usd: Some(Usd::from_micros(2_500_000))
                }
            )]
        );
        let cloud = spending.profiles.get("cloud").expect("the profile");
        assert_eq!(cloud.budget.tokens, Some(7_000));
        assert!(cloud.prices.is_some());
        for (bad, named) in [
            ("job_budget_usd = -1.0\n", "job_budget_usd"),
            ("job_budget_tokens = 0\n", "job_budget_tokens"),
            (
                "[workbench_budgets.w]\nusd = 0.0\n",
                "workbench_budgets.\"w\".usd",
            ),
            (
                format!("{profile}requests_per_minute = 0\n").as_str(),
                "models.cloud.requests_per_minute",
            ),
            (
                format!("{profile}max_concurrent_requests = 1000000\n").as_str(),
                "models.cloud.max_concurrent_requests",
            ),
            (
                format!("{profile}input_usd_per_mtok = 2.0\n").as_str(),
                "output_usd_per_mtok",
            ),
        ] {
            let (_dir, file) = written_config(bad);
            let settings = Settings::load(Some(&file), FlagOverrides::default()).expect("loads");
            let refused = settings.spending().expect_err(named).to_string();
            assert!(refused.contains(named), "{bad}: {refused}");
        }
    }

    #[test]
    fn the_shard_stores_cache_budget_comes_from_the_config_file() {
        let (_dir, file) = written_config("replicated_store = true\nstore_cache_mib = 256\n");
        let settings = Settings::load(Some(&file), FlagOverrides::default()).expect("settings");
        let replication = settings
            .replication()
            .expect("valid settings")
            .expect("replicated");
        assert_eq!(replication.cache_bytes, 256 << 20);
        assert_eq!(replication.shard_cache_bytes(16), 16 << 20);

        // Below one shard's floor the setting is refused by name, not raised behind the
        // operator's back.
        let (_dir, file) = written_config("replicated_store = true\nstore_cache_mib = 0\n");
        let settings = Settings::load(Some(&file), FlagOverrides::default()).expect("settings");
        let refused = settings.replication().expect_err("refused");
        assert!(
            refused.to_string().starts_with("store_cache_mib = 0"),
            "{refused}"
        );
    }

    #[test]
    fn the_credentials_file_comes_from_the_file_or_the_flag() {
        let (_dir, file) = written_config("nats_creds = \"/etc/atelier/app.creds\"\n");
        let settings = Settings::load(Some(&file), FlagOverrides::default()).expect("settings");
        assert_eq!(
            settings.nats_creds.as_deref(),
            Some(Path::new("/etc/atelier/app.creds"))
        );
        let flags = FlagOverrides {
            nats_creds: Some(PathBuf::from("user.creds")),
            ..FlagOverrides::default()
        };
        let settings = Settings::load(Some(&file), flags).expect("settings");
        assert_eq!(
            settings.nats_creds.as_deref(),
            Some(Path::new("user.creds"))
        );
    }
}
