//! The transport crate's error type.

/// Failures to start serving (request failures are [`atelier_messages::ErrorBody`]s).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot subscribe to `{subject}`: {reason}")]
    Subscribe { subject: String, reason: String },
}
