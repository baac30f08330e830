//! Logs and traces: `tracing` to stderr (filtered by `ATELIER_LOG`), and, when an OTLP endpoint
//! is configured, every span exported to it (OTLP over HTTP/protobuf). The W3C trace-context
//! propagator is always installed, so spans that cross NATS (coordinator → worker) join one trace.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Spans exported over OTLP: Atelier's own crates at info, everything else from warn.
const TRACE_FILTER: &str = "warn,atelier=info,atelier_ops=info,atelier_coordinator=info,\
                            atelier_agents=info,atelier_workers=info";

/// What [`init`] set up; [`Telemetry::shutdown`] flushes spans still buffered.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// The OTLP traces URL for an endpoint given like `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (`http://collector:4318` → `http://collector:4318/v1/traces`).
pub fn traces_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.ends_with("/v1/traces") {
        endpoint.to_string()
    } else {
        format!("{endpoint}/v1/traces")
    }
}

/// Installs the subscriber. `service` names this process in traces (`service.name`).
pub fn init(default_level: &str, otlp_endpoint: Option<&str>, service: &str) -> Telemetry {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter =
        EnvFilter::try_from_env("ATELIER_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let provider = otlp_endpoint
        .filter(|endpoint| !endpoint.trim().is_empty())
        .and_then(|endpoint| match provider(endpoint, service) {
            Ok(provider) => Some(provider),
            Err(error) => {
                // The subscriber is not up yet: this is the only way to say it.
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("warning: OpenTelemetry export disabled: {error}");
                }
                None
            }
        });
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("atelier"))
            .with_filter(EnvFilter::new(TRACE_FILTER))
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    if let (Some(endpoint), Some(_)) = (otlp_endpoint, &provider) {
        tracing::info!(endpoint = %traces_url(endpoint), service, "exporting traces over OTLP");
    }
    Telemetry { provider }
}

fn provider(endpoint: &str, service: &str) -> anyhow::Result<SdkTracerProvider> {
    // The exporter's HTTP client may speak TLS (https endpoints); use the process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url(endpoint))
        .with_timeout(Duration::from_secs(5))
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_string())
                .build(),
        )
        .with_batch_exporter(exporter)
        .build())
}

impl Telemetry {
    /// Flushes and stops the exporter (blocking work, done off the async threads).
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(error) = provider.shutdown() {
                    tracing::warn!(%error, "trace export did not shut down cleanly");
                }
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_gets_the_traces_path_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces/"),
            "http://c:4318/v1/traces"
        );
    }
}
