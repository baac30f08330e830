//! The dashboard's HTTP connections. A client must send a request's headers within
//! [`HEADER_READ_TIMEOUT`], and a kept-alive connection that sends no new request within it is
//! closed, so connections that trickle their headers or sit idle cannot pile up (the live
//! event stream is a response in progress, not an idle connection, and is not cut).

use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;

/// Longest a connection may take to send a request's headers, or stay idle between requests.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on every connection `listener` accepts, until the task is aborted.
pub async fn serve(listener: tokio::net::TcpListener, router: axum::Router) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: wait, do not spin.
                tracing::warn!(%error, "the dashboard could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            // The protocol is detected from the first bytes, a wait the timer below does not
            // cover: a connection that sends nothing is dropped here.
            let mut first = [0u8; 1];
            let sent = tokio::time::timeout(HEADER_READ_TIMEOUT, stream.peek(&mut first)).await;
            if !matches!(sent, Ok(Ok(read)) if read > 0) {
                tracing::debug!(%peer, "dashboard connection sent nothing; closed");
                return;
            }
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "dashboard connection ended");
            }
        });
    }
}
