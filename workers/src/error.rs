//! The crate's error type: what can stop a worker from starting or serving.
//!
//! Tool calls never fail with this type: they answer with an
//! [`ErrorBody`](atelier_messages::ErrorBody) carrying a stable code.

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The configuration cannot work (e.g. zero concurrency).
    #[error("invalid worker configuration: {0}")]
    InvalidConfig(String),
    /// The cache directory could not be created.
    #[error("cannot prepare cache directory {path}: {source}")]
    CacheDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The ToolExecutor actor failed to start (e.g. the NATS subscription failed).
    #[error("tool executor failed to start: {0}")]
    Spawn(#[from] ractor::SpawnErr),
    /// The content review service could not subscribe.
    #[error("review service failed to start: {0}")]
    Review(#[from] atelier_transport::TransportError),
}
