//! Logs and traces: `tracing` to stderr, text or JSON, and OpenTelemetry
//! span export over OTLP when a collector is configured.
//!
//! Configuration follows the conventions operators already use: `RUST_LOG`
//! for the filter (default `info`), and the standard OpenTelemetry
//! environment (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, …) for export, which is
//! off unless an endpoint is set.
//!
//! # Caveats
//!
//! Spans are sent with OTLP over HTTP/protobuf (port 4318 on a collector),
//! without TLS: point the exporter at a collector beside the pod or in the
//! cluster. gRPC (4317) and `https://` endpoints are not built in, to keep the
//! dependency tree small; [`init`] says so in a warning when asked for them.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

/// The service name spans carry when `OTEL_SERVICE_NAME` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "operon";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The OTLP exporter could not be built (for example an endpoint that is
    /// not a URL).
    #[error("cannot set up OTLP span export; check OTEL_EXPORTER_OTLP_ENDPOINT and related variables")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// A global subscriber was already installed: `init` runs once per process.
    #[error("logging was already initialised in this process")]
    AlreadyInitialised(#[source] tracing_subscriber::util::TryInitError),
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Where spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Otlp {
    /// The collector's base URL (`http://collector:4318`); traces go to
    /// `/v1/traces` under it. `None`: the exporter reads the standard
    /// `OTEL_EXPORTER_OTLP_*` variables itself.
    pub endpoint: Option<String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

impl Otlp {
    /// Export configured by the environment, or `None` (export off) when
    /// neither `OTEL_EXPORTER_OTLP_ENDPOINT` nor
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set to something.
    pub fn from_env() -> Option<Self> {
        let set = |name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            return None;
        }
        let service_name = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
        Some(Self { endpoint: None, service_name })
    }

    /// Export to the collector at `endpoint` (a base URL, as in
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn to(endpoint: impl Into<String>, service_name: impl Into<String>) -> Self {
        Self { endpoint: Some(endpoint.into()), service_name: service_name.into() }
    }
}

/// Keeps span export alive; dropping it flushes the spans not yet sent and
/// shuts the exporter down. Hold it for the life of `main`.
#[must_use = "dropping the guard stops span export"]
#[derive(Debug, Default)]
pub struct Guard {
    provider: Option<SdkTracerProvider>,
}

impl Guard {
    /// Whether spans are being exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            // The subscriber may already be gone at this point: stderr it is.
            eprintln!("operon: flushing spans to the OTLP collector failed: {e}");
        }
    }
}

/// Installs the process's global subscriber: `RUST_LOG` filter (default
/// `info`), log lines in `format` to stderr (coloured when `ansi`, else as
/// [`fmt_layer`] decides: only on a terminal), and OTLP span export if
/// [`Otlp::from_env`] finds an endpoint.
///
/// # Errors
///
/// [`Error::Exporter`] if the OTLP environment is invalid;
/// [`Error::AlreadyInitialised`] if a global subscriber is already set.
pub fn init(format: LogFormat, ansi: Option<bool>) -> Result<Guard, Error> {
    let filter =
        EnvFilter::builder().with_default_directive(tracing::level_filters::LevelFilter::INFO.into()).from_env_lossy();
    let otlp = Otlp::from_env();
    let (otel, guard) = match &otlp {
        Some(otlp) => {
            let (layer, guard) = otel_layer(otlp)?;
            (Some(layer), guard)
        }
        None => (None, Guard::default()),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(match ansi {
            Some(ansi) => fmt_layer_to(format, std::io::stderr, ansi),
            None => fmt_layer(format),
        })
        .with(otel)
        .try_init()
        .map_err(Error::AlreadyInitialised)?;
    if let Some(otlp) = otlp {
        warn_about_unsupported_transport();
        tracing::info!(service_name = %otlp.service_name, "exporting spans over OTLP/HTTP");
    }
    Ok(guard)
}

/// The log-line layer alone, writing to stderr. Text lines are coloured
/// only when stderr is a terminal: in a pod's log, escape codes are noise.
pub fn fmt_layer<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync + 'static>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    fmt_layer_to(format, std::io::stderr, ansi)
}

fn fmt_layer_to<S, W>(format: LogFormat, writer: W, ansi: bool) -> Box<dyn Layer<S> + Send + Sync + 'static>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(ansi);
    match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().boxed(),
    }
}

/// The span-export layer alone, with the guard that flushes it — for
/// [`init`], and for tests that install it with
/// `tracing::subscriber::with_default` rather than globally.
///
/// # Errors
///
/// [`Error::Exporter`] if the exporter cannot be built.
pub fn otel_layer<S>(otlp: &Otlp) -> Result<(tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>, Guard), Error>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    // The exporter's HTTP client takes its TLS from the process default.
    crate::install_crypto_provider();
    let mut exporter =
        opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let Some(endpoint) = &otlp.endpoint {
        // Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL with the signal path appended.
        exporter = exporter.with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')));
    }
    let exporter = exporter.build().map_err(Error::Exporter)?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(otlp.service_name.clone()).build())
        .build();
    let tracer = provider.tracer("operon");
    Ok((tracing_opentelemetry::layer().with_tracer(tracer), Guard { provider: Some(provider) }))
}

fn warn_about_unsupported_transport() {
    let var = |name| std::env::var(name).unwrap_or_default();
    let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") + &var("OTEL_EXPORTER_OTLP_PROTOCOL");
    if protocol.contains("grpc") || protocol.contains("json") {
        tracing::warn!(%protocol, "only OTLP over HTTP/protobuf is built in; sending http/protobuf");
    }
    for name in ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
        if var(name).starts_with("https:") {
            tracing::warn!(variable = name, "TLS is not built in: spans to an https:// collector will fail");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message as _;
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A one-route OTLP/HTTP receiver: every POST body is sent on the channel.
    fn receiver() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let mut reader = BufReader::new(stream);
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    continue;
                }
                let _ = reader
                    .get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
                let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_owned();
                if tx.send((path, body)).is_err() {
                    return;
                }
            }
        });
        (base, rx)
    }

    #[test]
    fn spans_should_be_exported_to_the_otlp_endpoint() {
        let (base, received) = receiver();
        let (layer, guard) = otel_layer(&Otlp::to(base, "operon-test")).expect("exporter builds");
        assert!(guard.exporting());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("reconcile", controller = "shop", key = "default/web");
            span.in_scope(|| tracing::info!("reconciling"));
        });
        drop(guard); // flushes

        let (path, body) = received.recv_timeout(Duration::from_secs(30)).expect("an export arrives");
        assert_eq!(path, "/v1/traces");
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
        let resource = request.resource_spans.first().and_then(|r| r.resource.as_ref()).expect("a resource");
        let service = resource.attributes.iter().find(|kv| kv.key == "service.name").and_then(|kv| kv.value.clone());
        assert_eq!(service.and_then(|v| v.value), Some(Value::StringValue("operon-test".into())));
        let spans: Vec<_> = request.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).collect();
        let span = spans.iter().find(|s| s.name == "reconcile").expect("the reconcile span");
        let attribute = |key: &str| {
            span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone()).and_then(|v| v.value)
        };
        assert_eq!(attribute("controller"), Some(Value::StringValue("shop".into())));
        assert_eq!(attribute("key"), Some(Value::StringValue("default/web".into())));
    }

    #[test]
    fn otlp_should_be_off_without_an_endpoint() {
        // Only meaningful when the test environment sets no endpoint itself.
        if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            && std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        {
            assert_eq!(Otlp::from_env(), None);
        }
        assert!(!Guard::default().exporting());
    }

    /// Log lines captured in memory.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn log_with(format: LogFormat) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(fmt_layer_to(format, move || writer.clone(), false));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(controller = "shop", "reconciled");
        });
        String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8")
    }

    #[test]
    fn json_format_should_write_one_object_per_line() {
        let text = log_with(LogFormat::Json);
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON object");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["fields"]["message"], "reconciled");
        assert_eq!(line["fields"]["controller"], "shop");
    }

    #[test]
    fn text_format_should_write_readable_lines() {
        let text = log_with(LogFormat::Text);
        assert!(text.contains(" INFO ") && text.contains("reconciled controller=\"shop\""), "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(text.trim()).is_err());
    }
}
