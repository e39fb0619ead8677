//! The coordinator's HTTP server: one listener (`--http-addr`), one axum
//! [`Router`] ([`Http::router`]). Today it serves
//!
//! - `/healthz`: `200 ok` while the process runs (no token, no data);
//! - `/readyz`: `200` when this coordinator serves and its state store answers
//!   a trivial transaction and the lake takes a small write (the object
//!   `_health/readyz`, overwritten each time), else `503`; the body states the
//!   role (`single` on SQLite, `leader`, `standby` — a standby is never
//!   ready: it does not serve gRPC) and each check (no token, no data);
//! - `/metrics`: Prometheus text format ([`crate::metrics`]); when the
//!   coordinator has tokens (or `--metrics-tokens`), it needs
//!   `Authorization: Bearer` with an admin, user or metrics token, checked by
//!   [`crate::auth::Guard`] (failed attempts spend the peer's budget as on
//!   gRPC; tokens are never logged).
//!
//! - the web dashboard under `/` ([`crate::dashboard`]: pages behind a
//!   login session when tokens are configured).
//!
//! Further pages go into [`crate::dashboard`]'s router, not a second
//! listener. With TLS configured (`--tls-cert`), the listener speaks TLS only,
//! with the gRPC port's certificate and, with `--tls-client-ca`, its client
//! certificate requirement ([`crate::tls::http_acceptor`]; ALPN h2 and
//! http/1.1).
//!
//! The server runs from the start of `benchlake coordinator`, while a
//! PostgreSQL standby waits for the lead too (its `/readyz` says `standby`
//! and answers 503), so probes and Prometheus reach every coordinator.
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use benchlake_proto::obs::{self, Exposition, PeerInfo, Readiness};
use tokio::net::TcpListener;

use crate::Coordinator;
use crate::auth::Guard;
use crate::config::{CoordinatorConfig, MetricsTokens, Role};
use crate::error::{CoordError, Result};
use crate::metrics::StoreCounts;

/// How long a readiness check or a scrape's store read may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The lake object `/readyz` writes.
pub const READYZ_KEY: &str = "_health/readyz";

/// What this coordinator is doing.
#[derive(Clone)]
enum Node {
    /// Opening its state and lake.
    Starting,
    /// PostgreSQL: waiting for the lead held by `leader`.
    Standby { leader: String },
    /// Serving: `leader` (PostgreSQL) or `single` (SQLite).
    Serving {
        coord: Arc<Coordinator>,
        role: &'static str,
    },
}

struct Inner {
    guard: Guard,
    metrics_tokens: MetricsTokens,
    tokens_on: bool,
    tls: bool,
    sessions: crate::dashboard::Sessions,
    oidc: Option<Arc<crate::oidc::Provider>>,
    views: crate::dashboard::cache::ViewCache,
    node: RwLock<Node>,
}

/// The HTTP endpoints of one coordinator process (cheap to clone).
#[derive(Clone)]
pub struct Http(Arc<Inner>);

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Http")
    }
}

impl Http {
    /// The endpoints of a coordinator configured by `cfg` (tokens, OpenID
    /// Connect), starting. A provider whose client cannot be built (checked
    /// before by [`crate::run_with`]) is left out, with an error logged.
    pub fn new(cfg: &CoordinatorConfig) -> Self {
        let oidc = cfg
            .oidc
            .clone()
            .and_then(|o| match crate::oidc::Provider::new(o) {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    tracing::error!(error = %e, "OpenID Connect sign-in disabled");
                    None
                }
            });
        Self(Arc::new(Inner {
            oidc,
            guard: Guard::new(cfg.tokens.clone()),
            metrics_tokens: cfg.metrics_tokens.clone(),
            tokens_on: cfg.tokens.enabled() || !cfg.metrics_tokens.0.is_empty(),
            tls: cfg.tls_cert.is_some(),
            sessions: crate::dashboard::Sessions::default(),
            views: crate::dashboard::cache::ViewCache::default(),
            node: RwLock::new(Node::Starting),
        }))
    }

    /// The token guard (shared failure budget with `/metrics`).
    pub fn guard(&self) -> &Guard {
        &self.0.guard
    }

    /// The dashboard's login sessions.
    pub fn sessions(&self) -> &crate::dashboard::Sessions {
        &self.0.sessions
    }

    /// The dashboard's OpenID Connect provider, when configured.
    pub fn oidc(&self) -> Option<&crate::oidc::Provider> {
        self.0.oidc.as_deref()
    }

    /// Whether the dashboard needs a login: tokens or OpenID Connect are
    /// configured.
    pub fn login_required(&self) -> bool {
        self.0.guard.enabled() || self.0.oidc.is_some()
    }

    /// What the dashboard's per-run views derived from committed Parquet.
    pub fn views(&self) -> &crate::dashboard::cache::ViewCache {
        &self.0.views
    }

    /// Whether the listener speaks TLS (cookies are then `Secure`).
    pub fn tls(&self) -> bool {
        self.0.tls
    }

    /// The coordinator this process serves, if it serves.
    pub fn coordinator(&self) -> Option<Arc<Coordinator>> {
        match self.node() {
            Node::Serving { coord, .. } => Some(coord),
            _ => None,
        }
    }

    fn set(&self, n: Node) {
        *self.0.node.write().unwrap_or_else(|p| p.into_inner()) = n;
    }

    fn node(&self) -> Node {
        self.0
            .node
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This coordinator waits as a standby; `leader` holds the lead.
    pub fn set_standby(&self, leader: &str) {
        self.set(Node::Standby {
            leader: leader.to_string(),
        });
    }

    /// This coordinator serves `coord`: as the leader on PostgreSQL
    /// (`leader = true`), or alone on SQLite.
    pub fn set_serving(&self, coord: Arc<Coordinator>, leader: bool) {
        self.set(Node::Serving {
            coord,
            role: if leader { "leader" } else { "single" },
        });
    }

    /// Checks the bearer token of a request for data (`/metrics`): any
    /// admin, user or metrics token when authentication is on; `Err` is the
    /// response to send (401, 403 or 429).
    #[allow(clippy::result_large_err)]
    pub fn authorize(
        &self,
        peer: SocketAddr,
        headers: &HeaderMap,
    ) -> std::result::Result<(), Response> {
        if !self.0.tokens_on {
            return Ok(());
        }
        let header = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        match self.0.guard.check_header(
            peer.ip(),
            header,
            &[Role::User],
            &self.0.metrics_tokens,
            "metrics",
        ) {
            Ok(()) => Ok(()),
            Err(s) => Err(match s.code() {
                tonic::Code::Unauthenticated => obs::unauthorized(
                    "/metrics needs 'Authorization: Bearer <token>' (admin, user or metrics token)",
                ),
                tonic::Code::ResourceExhausted => {
                    (StatusCode::TOO_MANY_REQUESTS, s.message().to_string()).into_response()
                }
                _ => (StatusCode::FORBIDDEN, s.message().to_string()).into_response(),
            }),
        }
    }

    /// The router: `/healthz`, `/readyz`, `/metrics`, and the dashboard
    /// ([`crate::dashboard::router`]) for everything else.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(obs::healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .with_state(self.clone())
            .merge(crate::dashboard::router(self.clone()))
            // Every route, and any added later: a state-changing request
            // from another origin is refused (CSRF; docs/dashboard.md).
            .layer(axum::middleware::from_fn(
                crate::dashboard::origin::same_origin,
            ))
    }

    /// Serves [`Http::router`] on `listener` until `shutdown`, over TLS when
    /// `cfg` has a certificate.
    pub async fn serve(
        self,
        cfg: &CoordinatorConfig,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let acceptor = crate::tls::http_acceptor(cfg).map_err(CoordError::Setup)?;
        let local = listener
            .local_addr()
            .map_err(|e| CoordError::Setup(format!("HTTP listen address: {e}")))?;
        tracing::info!(addr = %local, tls = acceptor.is_some(), "HTTP endpoints listening (dashboard /, /healthz, /readyz, /metrics)");
        let router = self.router();
        match acceptor {
            Some(acc) => {
                obs::serve_stream(crate::tls::incoming(listener, acc), local, router, shutdown)
                    .await
            }
            None => obs::serve(listener, router, shutdown).await,
        }
        .map_err(|e| CoordError::Setup(format!("HTTP server: {e}")))
    }

    /// The `/readyz` findings.
    pub async fn readiness(&self) -> Readiness {
        let mut r = Readiness::default();
        let coord = match self.node() {
            Node::Starting => {
                r.check(
                    "role",
                    Err("starting (opening the state store and the lake)".into()),
                );
                return r;
            }
            Node::Standby { leader } => {
                r.check(
                    "role",
                    Err(format!(
                        "standby: waiting for the lead, held by {}",
                        if leader.is_empty() {
                            "another coordinator"
                        } else {
                            &leader
                        }
                    )),
                );
                return r;
            }
            Node::Serving { coord, role } => {
                r.check("role", Ok(role.to_string()));
                coord
            }
        };
        let state = tokio::time::timeout(
            CHECK_TIMEOUT,
            coord.db_read(|tx| tx.get_meta("schema_version")),
        )
        .await;
        r.check(
            "state",
            match state {
                Ok(Ok(_)) => Ok("ok".into()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
            },
        );
        let probe = format!("{}\n", coord.now());
        let put = coord.lake.put(READYZ_KEY, bytes::Bytes::from(probe));
        let ok = format!("writable ({})", coord.lake.root());
        r.check("lake", obs::write_check(put, CHECK_TIMEOUT, ok, "").await);
        r
    }

    /// The `/metrics` page.
    pub async fn metrics_page(&self) -> String {
        let mut e = Exposition::new();
        match self.node() {
            Node::Serving { coord, role } => {
                let now = coord.now();
                let read = tokio::time::timeout(
                    CHECK_TIMEOUT,
                    coord.db(move |tx| {
                        Ok(StoreCounts {
                            counts: tx.state_counts(now)?,
                            agents: tx.list_agents()?,
                        })
                    }),
                )
                .await;
                let counts = match read {
                    Ok(Ok(s)) => Some(s),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "metrics: cannot read the state store");
                        None
                    }
                    _ => {
                        tracing::warn!("metrics: the state store did not answer in time");
                        None
                    }
                };
                coord.metrics.expose(&mut e, role, counts.as_ref());
            }
            n => {
                let role = if matches!(n, Node::Starting) {
                    "starting"
                } else {
                    "standby"
                };
                crate::metrics::expose_role(&mut e, role);
            }
        }
        e.finish()
    }
}

async fn readyz(State(h): State<Http>) -> Response {
    h.readiness().await.into_response()
}

async fn metrics(State(h): State<Http>, peer: PeerInfo, headers: HeaderMap) -> Response {
    if let Err(r) = h.authorize(peer.0.0, &headers) {
        return r;
    }
    obs::metrics_response(h.metrics_page().await)
}
