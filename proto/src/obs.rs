//! Observability shared by coordinator, worker and agent: Prometheus metrics
//! in the text exposition format (hand-written: counters, labelled counters,
//! histograms), the HTTP endpoints `/healthz`, `/readyz` and `/metrics` of
//! worker and agent ([`router`]), bearer-token checks for `/metrics`, and
//! [`serve`], which serves an axum router on a plain or TLS listener (the
//! coordinator's HTTP module, `benchlake_coordinator::http`, builds its own
//! router and serves it with it).
//!
//! Metric names start with `benchlake_`, carry their unit (`_seconds`,
//! `_bytes`) and counters end in `_total`. Every family has its `# HELP` and
//! `# TYPE` lines.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::{IncomingStream, Listener};
use tokio_stream::Stream;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Latency buckets (seconds) of RPC and commit histograms: 0.5 ms to 30 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn key(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|s| s.to_string()).collect()
}

/// A counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters by label values (the label names are given when exposed).
#[derive(Debug, Default)]
pub struct CounterVec(Mutex<BTreeMap<Vec<String>, u64>>);

impl CounterVec {
    /// Adds one to the counter of `labels`.
    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1);
    }
    /// Adds `n` to the counter of `labels`.
    pub fn add(&self, labels: &[&str], n: u64) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(key(labels)).or_insert(0) += n;
    }
    /// The value of `labels` (0 when never counted).
    pub fn get(&self, labels: &[&str]) -> u64 {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&key(labels)).copied().unwrap_or(0)
    }
    fn snapshot(&self) -> Vec<(Vec<String>, u64)> {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

#[derive(Debug, Clone)]
struct HistData {
    /// Per bucket (not cumulative), plus one for +Inf.
    counts: Vec<u64>,
    sum: f64,
}

/// Histograms by label values over fixed buckets.
#[derive(Debug)]
pub struct HistogramVec {
    buckets: &'static [f64],
    data: Mutex<BTreeMap<Vec<String>, HistData>>,
}

impl HistogramVec {
    /// Histograms over `buckets` (ascending upper bounds).
    pub fn new(buckets: &'static [f64]) -> Self {
        Self {
            buckets,
            data: Mutex::new(BTreeMap::new()),
        }
    }
    /// Records `v` for `labels`.
    pub fn observe(&self, labels: &[&str], v: f64) {
        let i = self
            .buckets
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.buckets.len());
        let mut m = self.data.lock().unwrap_or_else(|p| p.into_inner());
        let d = m.entry(key(labels)).or_insert_with(|| HistData {
            counts: vec![0; self.buckets.len() + 1],
            sum: 0.0,
        });
        d.counts[i] += 1;
        d.sum += v;
    }
    /// Observations recorded for `labels`.
    pub fn count(&self, labels: &[&str]) -> u64 {
        let m = self.data.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&key(labels))
            .map(|d| d.counts.iter().sum())
            .unwrap_or(0)
    }
}

/// Metric type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A page of the text exposition format being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn fmt_value(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.is_nan() {
        "NaN".into()
    } else if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `# HELP` and `# TYPE` lines of family `name`.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", fmt_value(v));
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, help: &str, kind: Kind, v: f64) {
        self.family(name, help, kind);
        self.sample(name, &[], v);
    }

    /// A family of samples with labels `names`, one per entry of `values`
    /// (label values in the order of `names`).
    pub fn labelled<'a>(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        names: &[&str],
        values: impl IntoIterator<Item = (Vec<&'a str>, f64)>,
    ) {
        self.family(name, help, kind);
        for (vals, v) in values {
            let labels: Vec<(&str, &str)> = names.iter().copied().zip(vals).collect();
            self.sample(name, &labels, v);
        }
    }

    /// A labelled counter family (`name` should end in `_total`).
    pub fn counter_vec(&mut self, name: &str, help: &str, names: &[&str], c: &CounterVec) {
        let snap = c.snapshot();
        self.labelled(
            name,
            help,
            Kind::Counter,
            names,
            snap.iter()
                .map(|(k, v)| (k.iter().map(String::as_str).collect(), *v as f64)),
        );
    }

    /// A histogram family: `_bucket` (cumulative, with `le`), `_sum`, `_count`.
    pub fn histogram_vec(&mut self, name: &str, help: &str, names: &[&str], h: &HistogramVec) {
        self.family(name, help, Kind::Histogram);
        let snap: Vec<(Vec<String>, HistData)> = {
            let m = h.data.lock().unwrap_or_else(|p| p.into_inner());
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let (bucket, sum, count) = (
            format!("{name}_bucket"),
            format!("{name}_sum"),
            format!("{name}_count"),
        );
        for (vals, d) in snap {
            let base: Vec<(&str, &str)> = names
                .iter()
                .copied()
                .zip(vals.iter().map(String::as_str))
                .collect();
            let mut cum = 0u64;
            for (i, le) in h
                .buckets
                .iter()
                .map(|b| fmt_value(*b))
                .chain(std::iter::once("+Inf".to_string()))
                .enumerate()
            {
                cum += d.counts[i];
                let mut l = base.clone();
                l.push(("le", &le));
                self.sample(&bucket, &l, cum as f64);
            }
            self.sample(&sum, &base, d.sum);
            self.sample(&count, &base, cum as f64);
        }
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The metrics of agent and worker RPC retries, process-wide: every retry of
/// [`crate::retry::RetryPolicy`] (`what` names the call) and every call given up.
#[derive(Debug, Default)]
pub struct RetryMetrics {
    /// Retries by call.
    pub retries: CounterVec,
    /// Calls that still failed after the budget, by call.
    pub gave_up: CounterVec,
}

/// The process's [`RetryMetrics`].
pub fn retry_metrics() -> &'static RetryMetrics {
    static M: std::sync::OnceLock<RetryMetrics> = std::sync::OnceLock::new();
    M.get_or_init(RetryMetrics::default)
}

impl RetryMetrics {
    /// Writes `benchlake_rpc_retries_total{call}` and `benchlake_rpc_gave_up_total{call}`.
    pub fn expose(&self, e: &mut Exposition) {
        e.counter_vec(
            "benchlake_rpc_retries_total",
            "Calls to the coordinator (and staging writes) retried after a transient failure, by call.",
            &["call"],
            &self.retries,
        );
        e.counter_vec(
            "benchlake_rpc_gave_up_total",
            "Calls that still failed when the retry budget (--retry-for) was spent, by call.",
            &["call"],
            &self.gave_up,
        );
    }
}

/// The `Bearer` token of an `Authorization` header value.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let t = v
        .strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))?
        .trim();
    (!t.is_empty()).then_some(t)
}

/// Compares two secrets in time independent of where they differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A `401` asking for a bearer token.
pub fn unauthorized(msg: &'static str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        msg,
    )
        .into_response()
}

/// The answer of `/metrics`.
pub fn metrics_response(page: String) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], page).into_response()
}

/// What `/readyz` found: ready or not, and one `name: finding` line per check.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    /// Findings, in order.
    pub checks: Vec<(String, Result<String, String>)>,
}

impl Readiness {
    /// Adds a finding.
    pub fn check(&mut self, name: &str, r: Result<String, String>) {
        self.checks.push((name.to_string(), r));
    }
    /// Whether every check passed.
    pub fn ready(&self) -> bool {
        self.checks.iter().all(|(_, r)| r.is_ok())
    }
    /// `200 ready` or `503 not ready`, then the findings, one per line.
    pub fn into_response(self) -> Response {
        let mut body = String::from(if self.ready() {
            "ready\n"
        } else {
            "not ready\n"
        });
        for (n, r) in &self.checks {
            let _ = match r {
                Ok(m) => writeln!(body, "{n}: {m}"),
                Err(m) => writeln!(body, "{n}: FAILED: {m}"),
            };
        }
        let code = if self.ready() {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (
            code,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            body,
        )
            .into_response()
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// When the coordinator last answered this process (an agent's heartbeat,
/// a worker's lease call): ms since the epoch, 0 for never.
#[derive(Debug, Default)]
pub struct LastContact(std::sync::atomic::AtomicI64);

impl LastContact {
    /// Records that the coordinator answered now.
    pub fn touch(&self) {
        self.0.store(now_ms(), Ordering::Relaxed);
    }

    /// The last answer, ms since the epoch (0: never).
    pub fn ms(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Seconds since `coordinator` last answered, or why that makes the
    /// process not ready: it never answered, or not within `stale`.
    pub fn age(&self, coordinator: &str, stale: std::time::Duration) -> Result<u64, String> {
        let last = self.ms();
        if last == 0 {
            return Err(format!("{coordinator} has not answered yet"));
        }
        let ago = std::time::Duration::from_millis((now_ms() - last).max(0) as u64);
        if ago > stale {
            return Err(format!(
                "{coordinator} last answered {} s ago",
                ago.as_secs()
            ));
        }
        Ok(ago.as_secs())
    }
}

/// A readiness finding of a write `put`: `ok` when it succeeded within
/// `limit`; else `{prefix}not writable: ERROR` or that it did not answer.
pub async fn write_check<E: std::fmt::Display>(
    put: impl Future<Output = Result<(), E>>,
    limit: std::time::Duration,
    ok: String,
    prefix: &str,
) -> Result<String, String> {
    match tokio::time::timeout(limit, put).await {
        Ok(Ok(())) => Ok(ok),
        Ok(Err(e)) => Err(format!("{prefix}not writable: {e}")),
        Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
    }
}

/// A boxed future (the probes' readiness checks).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a worker or agent exposes on its HTTP endpoints.
pub trait Probe: Send + Sync + 'static {
    /// The `/readyz` findings.
    fn ready(&self) -> BoxFuture<'_, Readiness>;
    /// Appends its metric families.
    fn metrics(&self, e: &mut Exposition);
}

#[derive(Clone)]
struct ProbeState {
    probe: Arc<dyn Probe>,
    tokens: Arc<Vec<String>>,
}

/// The HTTP endpoints of a worker or agent: `/healthz` (always `200 ok`),
/// `/readyz` ([`Probe::ready`]) and `/metrics` ([`Probe::metrics`] and the
/// retry counters); `/metrics` needs one of `metrics_tokens` as a bearer
/// token when any is given.
pub fn router(probe: Arc<dyn Probe>, metrics_tokens: Vec<String>) -> Router {
    let st = ProbeState {
        probe,
        tokens: Arc::new(metrics_tokens),
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route(
            "/readyz",
            get(|State(s): State<ProbeState>| async move { s.probe.ready().await.into_response() }),
        )
        .route(
            "/metrics",
            get(|State(s): State<ProbeState>, h: HeaderMap| async move {
                if !s.tokens.is_empty() {
                    let ok = bearer(&h).is_some_and(|t| {
                        s.tokens
                            .iter()
                            .fold(false, |acc, m| acc | ct_eq(m.as_bytes(), t.as_bytes()))
                    });
                    if !ok {
                        return unauthorized(
                            "/metrics needs 'Authorization: Bearer <metrics token>'",
                        );
                    }
                }
                let mut e = Exposition::new();
                s.probe.metrics(&mut e);
                retry_metrics().expose(&mut e);
                metrics_response(e.finish())
            }),
        )
        .with_state(st)
}

/// `/healthz`: the process is alive.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// The peer of an HTTP connection (axum `ConnectInfo`).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, tokio::net::TcpListener>> for Peer {
    fn connect_info(s: IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        Peer(*s.remote_addr())
    }
}

impl<S> Connected<IncomingStream<'_, StreamListener<S>>> for Peer
where
    StreamListener<S>: Listener<Addr = SocketAddr>,
{
    fn connect_info(s: IncomingStream<'_, StreamListener<S>>) -> Self {
        Peer(*s.remote_addr())
    }
}

/// The peer address of a request served by [`serve`].
pub type PeerInfo = ConnectInfo<Peer>;

/// Connections of a stream (a TLS acceptor's handshaken connections) as an
/// axum listener.
pub struct StreamListener<S> {
    stream: Pin<Box<S>>,
    local: SocketAddr,
}

/// A connection whose peer address is known.
pub trait PeerAddr {
    /// The peer's address.
    fn peer(&self) -> SocketAddr;
}

impl PeerAddr for tokio::net::TcpStream {
    fn peer(&self) -> SocketAddr {
        self.peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }
}

impl PeerAddr for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn peer(&self) -> SocketAddr {
        self.get_ref().0.peer()
    }
}

impl<S, Io> Listener for StreamListener<S>
where
    S: Stream<Item = std::io::Result<Io>> + Send + 'static,
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + PeerAddr + 'static,
{
    type Io = Io;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Io, SocketAddr) {
        loop {
            match std::future::poll_fn(|cx| self.stream.as_mut().poll_next(cx)).await {
                Some(Ok(io)) => {
                    let peer = io.peer();
                    return (io, peer);
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "HTTP listener: accepting a connection failed");
                }
                // The acceptor stopped: nothing will come any more.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl<S> StreamListener<S> {
    /// Connections of `stream`, accepted on `local`.
    pub fn new(stream: S, local: SocketAddr) -> Self {
        Self {
            stream: Box::pin(stream),
            local,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves (requests in
/// flight finish). Handlers may extract [`PeerInfo`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// [`serve`] over the connections of `stream` (for example TLS ones) accepted on `local`.
pub async fn serve_stream<S, Io>(
    stream: S,
    local: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    S: Stream<Item = std::io::Result<Io>> + Send + 'static,
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + PeerAddr + 'static,
{
    axum::serve(
        StreamListener::new(stream, local),
        router.into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_writes_families_labels_and_histograms() {
        let c = CounterVec::default();
        c.inc(&["task"]);
        c.add(&["task"], 2);
        c.inc(&["job"]);
        assert_eq!(c.get(&["task"]), 3);
        let h = HistogramVec::new(&[0.1, 1.0]);
        h.observe(&["/a.B/C"], 0.05);
        h.observe(&["/a.B/C"], 0.5);
        h.observe(&["/a.B/C"], 5.0);
        assert_eq!(h.count(&["/a.B/C"]), 3);
        let mut e = Exposition::new();
        e.single("benchlake_up", "Up.", Kind::Gauge, 1.0);
        e.counter_vec("benchlake_x_total", "X.", &["entity"], &c);
        e.histogram_vec("benchlake_d_seconds", "D.", &["method"], &h);
        e.labelled(
            "benchlake_q",
            "Q with \"quotes\".",
            Kind::Gauge,
            &["v"],
            [(vec!["a\"b\\c\nd"], 1.5)],
        );
        let page = e.finish();
        let want = "# HELP benchlake_up Up.\n# TYPE benchlake_up gauge\nbenchlake_up 1\n\
# HELP benchlake_x_total X.\n# TYPE benchlake_x_total counter\n\
benchlake_x_total{entity=\"job\"} 1\nbenchlake_x_total{entity=\"task\"} 3\n\
# HELP benchlake_d_seconds D.\n# TYPE benchlake_d_seconds histogram\n\
benchlake_d_seconds_bucket{method=\"/a.B/C\",le=\"0.1\"} 1\n\
benchlake_d_seconds_bucket{method=\"/a.B/C\",le=\"1\"} 2\n\
benchlake_d_seconds_bucket{method=\"/a.B/C\",le=\"+Inf\"} 3\n\
benchlake_d_seconds_sum{method=\"/a.B/C\"} 5.55\n\
benchlake_d_seconds_count{method=\"/a.B/C\"} 3\n\
# HELP benchlake_q Q with \"quotes\".\n# TYPE benchlake_q gauge\n\
benchlake_q{v=\"a\\\"b\\\\c\\nd\"} 1.5\n";
        assert_eq!(page, want);
    }

    #[test]
    fn readiness_is_503_with_the_failed_check() {
        let mut r = Readiness::default();
        r.check("state", Ok("ok".into()));
        assert!(r.ready());
        r.check("lake", Err("read-only".into()));
        assert!(!r.ready());
        assert_eq!(r.into_response().status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
