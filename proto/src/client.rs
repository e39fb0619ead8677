//! Client-side helpers shared by the agent, the worker and the CLI: connecting to
//! the coordinator (plaintext or TLS, see [`ClientTls`]) and attaching the bearer
//! token to every call.
//!
//! The coordinator address may be a comma-separated list
//! (`host1:7070,host2:7070`, `https://a:7070,https://b:7070`): several
//! coordinators share one state database and only the leader listens on its
//! port, so the channel finds the leader by connecting (see [`channel_with`]).
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// rustls as the coordinator's TLS acceptor uses it (ring provider; no OpenSSL).
pub use tokio_rustls;

/// Adds `authorization: Bearer <token>` to every request (nothing when no token).
#[derive(Clone, Default)]
pub struct Auth(Option<MetadataValue<tonic::metadata::Ascii>>);

impl std::fmt::Debug for Auth {
    // The token is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Auth({})",
            if self.0.is_some() { "token" } else { "none" }
        )
    }
}

impl Auth {
    /// An interceptor sending `token` (empty or None = no header).
    pub fn new(token: Option<&str>) -> Result<Self, String> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(Self(None)),
            Some(t) => format!("Bearer {t}")
                .parse()
                .map(|v| Self(Some(v)))
                .map_err(|_| "the token holds characters not allowed in a header".to_string()),
        }
    }
}

impl Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// Normalises `host:port` to `http://host:port`.
pub fn endpoint_url(addr: &str) -> String {
    if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// TLS settings of a client (agent, worker, CLI). They apply only to an
/// `https://` coordinator address, which always speaks TLS: the server is
/// verified against [`ClientTls::ca`] or, when none is given, the system's
/// roots. `http://` and a bare `host:port` stay plaintext.
#[derive(Clone, Default)]
pub struct ClientTls {
    /// PEM CA certificate(s) the coordinator's certificate must chain to
    /// (`--tls-ca`); None = the system roots.
    pub ca: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to a coordinator that
    /// asks for client certificates (`--tls-client-cert`/`--tls-client-key`).
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    /// PEM certificate: trust exactly this server certificate, whatever
    /// names it carries, instead of [`ClientTls::ca`] (`benchlake up`'s own
    /// agent, worker and demo reaching the coordinator on loopback).
    pub pinned: Option<Vec<u8>>,
}

impl std::fmt::Debug for ClientTls {
    // The client key is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca", &self.ca.as_ref().map(|_| "pem"))
            .field("client_cert", &self.client_cert.as_ref().map(|_| "pem"))
            .finish()
    }
}

impl ClientTls {
    /// Reads the CA bundle and the client certificate and key (PEM files);
    /// the certificate and the key go together.
    pub fn from_files(
        ca: Option<&Path>,
        client_cert: Option<&Path>,
        client_key: Option<&Path>,
    ) -> Result<Self, String> {
        let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let client_cert = match (client_cert, client_key) {
            (None, None) => None,
            (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
            _ => {
                return Err(
                    "a TLS client certificate needs both --tls-client-cert and --tls-client-key"
                        .into(),
                );
            }
        };
        Ok(Self {
            ca: ca.map(read).transpose()?,
            client_cert,
            pinned: None,
        })
    }

    /// From `BENCHLAKE_TLS_CA`, `BENCHLAKE_TLS_CLIENT_CERT` and
    /// `BENCHLAKE_TLS_CLIENT_KEY` (unset or empty = not given).
    pub fn from_env() -> Result<Self, String> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from)
        };
        Self::from_files(
            var("BENCHLAKE_TLS_CA").as_deref(),
            var("BENCHLAKE_TLS_CLIENT_CERT").as_deref(),
            var("BENCHLAKE_TLS_CLIENT_KEY").as_deref(),
        )
    }

    /// Whether any TLS setting was given.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.client_cert.is_some()
    }
}

/// Whether `addr` asks for TLS (`https://`).
pub fn is_tls(addr: &str) -> bool {
    addr.starts_with("https://")
}

/// How long one address of a coordinator address list may take to accept a
/// TCP connection before the next one is tried (a standby coordinator does
/// not listen, so it refuses at once; this bounds a host that is down).
pub const LIST_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the TLS handshake with one address of a list may take.
const LIST_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A coordinator address list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// An entry of the list is empty (`a:1,,b:2`, a trailing comma, or nothing).
    #[error(
        "coordinator address list '{list}': entry {index} is empty \
         (give host:port or https://host:port entries separated by commas)"
    )]
    Empty {
        /// The list as given.
        list: String,
        /// 1-based position of the empty entry.
        index: usize,
    },
    /// Some entries are `https://` and others plaintext.
    #[error(
        "coordinator address list '{list}': '{tls}' is https:// but '{plain}' is plaintext; \
         use https:// for every address or for none"
    )]
    MixedSchemes {
        /// The list as given.
        list: String,
        /// The first `https://` entry.
        tls: String,
        /// The first plaintext entry.
        plain: String,
    },
    /// An entry is not a usable address.
    #[error("coordinator address '{addr}': {reason}")]
    Invalid {
        /// The entry as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The entries of a comma-separated coordinator address list, trimmed; every
/// entry non-empty and all of them `https://` or none.
pub fn addresses(list: &str) -> Result<Vec<&str>, AddressError> {
    let mut out = Vec::new();
    for (i, a) in list.split(',').enumerate() {
        let a = a.trim();
        if a.is_empty() {
            return Err(AddressError::Empty {
                list: list.to_string(),
                index: i + 1,
            });
        }
        out.push(a);
    }
    let tls = out.iter().find(|a| is_tls(a));
    let plain = out.iter().find(|a| !is_tls(a));
    if let (Some(tls), Some(plain)) = (tls, plain) {
        return Err(AddressError::MixedSchemes {
            list: list.to_string(),
            tls: tls.to_string(),
            plain: plain.to_string(),
        });
    }
    Ok(out)
}

/// A lazily connecting plaintext-or-TLS channel to the coordinator at `addr`
/// (one address or a comma-separated list, see [`channel_with`]), with the
/// TLS settings of the environment ([`ClientTls::from_env`]; else the system
/// roots and no client certificate) for `https://` addresses.
pub fn channel(addr: &str) -> Result<Channel, String> {
    let first = addr.split(',').next().unwrap_or(addr).trim();
    let tls = if is_tls(&endpoint_url(first)) {
        ClientTls::from_env()?
    } else {
        ClientTls::default()
    };
    channel_with(addr, &tls)
}

/// A lazily connecting channel to the coordinator at `addr`: TLS with `tls`
/// for `https://` (never a silent downgrade: a plaintext server fails the
/// handshake with an error saying so), plaintext for `http://` and a bare
/// `host:port`.
///
/// `addr` may be a comma-separated list of addresses of coordinators sharing
/// one state database, all `https://` or none ([`addresses`]). Only the
/// leader listens, so each (re)connection tries the addresses in order,
/// starting at the one that connected last, each within
/// [`LIST_CONNECT_TIMEOUT`] (TLS handshake included for `https://`, with
/// each address's own host as the server name), and keeps the first that
/// connects. When the leader dies, the channel's next call reconnects the
/// same way and so finds the new leader; calls that fail meanwhile get
/// `UNAVAILABLE` ([`crate::retry`] retries them). When no address connects,
/// the error names every address and its failure. The HTTP/2 `:authority` of
/// every call is the first address's.
///
/// While no address of a list connects (a takeover in progress: the old
/// leader is gone and the standby has not bound its port yet), a connection
/// attempt keeps trying for [`LIST_LEADER_WAIT`] before failing, so a command
/// issued during the takeover waits for the new leader instead of failing.
pub fn channel_with(addr: &str, tls: &ClientTls) -> Result<Channel, String> {
    channel_with_wait(addr, tls, LIST_LEADER_WAIT)
}

/// [`channel_with`] waiting `leader_wait` (instead of [`LIST_LEADER_WAIT`])
/// for an address of a list to connect. A single address never waits.
pub fn channel_with_wait(
    addr: &str,
    tls: &ClientTls,
    leader_wait: Duration,
) -> Result<Channel, String> {
    if addr.contains(',') {
        return channel_list(addr, tls, leader_wait).map_err(|e| e.to_string());
    }
    let url = endpoint_url(addr);
    let bad = |e: &dyn std::fmt::Display| format!("coordinator address '{addr}': {e}");
    let tls_on = is_tls(&url);
    // An https:// channel runs its own rustls handshake in the connector (for
    // errors that say what went wrong); tonic sees the plain URI and the
    // https origin.
    let plain_url = if tls_on {
        url.replacen("https://", "http://", 1)
    } else {
        url.clone()
    };
    let ep = Endpoint::from_shared(plain_url)
        .map_err(|e| bad(&e))?
        .connect_timeout(std::time::Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(std::time::Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if !tls_on {
        if tls.is_set() {
            tracing::warn!(
                coordinator = %addr,
                "TLS options given but the coordinator address is not https://: connecting in plaintext"
            );
        }
        return Ok(ep.connect_lazy());
    }
    let uri: tonic::codegen::http::Uri = url.parse().map_err(|e| bad(&e))?;
    let host = uri
        .host()
        .ok_or_else(|| bad(&"no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let name = pki_types::ServerName::try_from(host.clone())
        .map_err(|e| bad(&e))?
        .to_owned();
    let (config, asked) = rustls_client_config(tls).map_err(|e| format!("TLS to '{addr}': {e}"))?;
    let connector = TlsConnector {
        config,
        asked,
        name,
        host,
        port,
    };
    Ok(ep.origin(uri).connect_with_connector_lazy(connector))
}

/// Why [`channel_list`] cannot make a channel.
#[derive(Debug, thiserror::Error)]
enum ListError {
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error("TLS to '{list}': {reason}")]
    Tls { list: String, reason: String },
}

/// [`channel_with`] for a comma-separated list: one lazy channel whose
/// connector ([`ListConnector`]) finds the address that accepts.
fn channel_list(list: &str, tls: &ClientTls, wait: Duration) -> Result<Channel, ListError> {
    let entries = addresses(list)?;
    let tls_on = entries.first().is_some_and(|a| is_tls(a));
    let tls_config = if tls_on {
        Some(rustls_client_config(tls).map_err(|reason| ListError::Tls {
            list: list.to_string(),
            reason,
        })?)
    } else {
        if tls.is_set() {
            tracing::warn!(
                coordinator = %list,
                "TLS options given but the coordinator addresses are not https://: connecting in plaintext"
            );
        }
        None
    };
    let mut targets = Vec::with_capacity(entries.len());
    let mut origin = None;
    for entry in &entries {
        let bad = |reason: &dyn std::fmt::Display| AddressError::Invalid {
            addr: entry.to_string(),
            reason: reason.to_string(),
        };
        let url = endpoint_url(entry);
        // Validated as tonic validates a single address.
        Endpoint::from_shared(url.replacen("https://", "http://", 1)).map_err(|e| bad(&e))?;
        let uri: tonic::codegen::http::Uri = url.parse().map_err(|e| bad(&e))?;
        let host = uri
            .host()
            .ok_or_else(|| bad(&"no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        // `Uri::port` is None for a port that is not a number: read it here.
        let authority = uri.authority().map_or("", |a| a.as_str());
        let after_host = authority.rsplit_once(']').map_or(authority, |(_, r)| r);
        let port = match after_host.rsplit_once(':') {
            None if tls_on => 443,
            None => 80,
            Some((_, p)) => p
                .parse::<u16>()
                .map_err(|_| bad(&format_args!("port '{p}' is not a number up to 65535")))?,
        };
        let tls = match &tls_config {
            None => None,
            Some((config, asked)) => {
                let name = pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| bad(&e))?
                    .to_owned();
                // Each address records on its own whether its server asked
                // for a client certificate.
                let (config, asked) = match asked {
                    None => (config.clone(), None),
                    Some(_) => {
                        let r = Arc::new(NoClientCert::default());
                        let mut c = (**config).clone();
                        c.client_auth_cert_resolver = r.clone();
                        (Arc::new(c), Some(r))
                    }
                };
                Some(TlsTarget {
                    config,
                    asked,
                    name,
                })
            }
        };
        origin.get_or_insert(uri);
        targets.push(Target {
            given: entry.to_string(),
            host,
            port,
            tls,
        });
    }
    let origin = origin.ok_or_else(|| AddressError::Empty {
        list: list.to_string(),
        index: 1,
    })?;
    // tonic sees a plain http:// endpoint (the connector does TLS itself) and
    // the first address as the origin; no endpoint-wide connect timeout: the
    // connector bounds every address on its own.
    let plain = origin.to_string().replacen("https://", "http://", 1);
    let ep = Endpoint::from_shared(plain)
        .map_err(|e| AddressError::Invalid {
            addr: list.to_string(),
            reason: e.to_string(),
        })?
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    let ep = if tls_on { ep.origin(origin) } else { ep };
    Ok(ep.connect_with_connector_lazy(ListConnector {
        targets: targets.into(),
        last: Arc::new(AtomicUsize::new(NONE_YET)),
        wait,
    }))
}

/// Without a client certificate: records whether the server asked for one.
#[derive(Debug, Default)]
struct NoClientCert(std::sync::atomic::AtomicBool);

impl rustls::client::ResolvesClientCert for NoClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

/// The rustls client config of `tls` (ring provider, ALPN h2) and, without a
/// client certificate, the flag telling whether the server asked for one.
#[allow(clippy::type_complexity)]
fn rustls_client_config(
    tls: &ClientTls,
) -> Result<(Arc<rustls::ClientConfig>, Option<Arc<NoClientCert>>), String> {
    use pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if let Some(pem) = &tls.pinned {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned::new(pem)?))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &tls.ca {
            Some(pem) => {
                for c in pki_types::CertificateDer::pem_slice_iter(pem) {
                    let c = c.map_err(|e| format!("--tls-ca: {e}"))?;
                    roots.add(c).map_err(|e| format!("--tls-ca: {e}"))?;
                }
                if roots.is_empty() {
                    return Err("--tls-ca holds no PEM certificate".into());
                }
            }
            None => {
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                if roots.is_empty() {
                    return Err("no system CA certificates found; give the CA that signed \
                                the coordinator's certificate with --tls-ca"
                        .into());
                }
            }
        }
        builder.with_root_certificates(roots)
    };
    let mut asked = None;
    let mut cfg = match &tls.client_cert {
        Some((cert, key)) => {
            let chain = pki_types::CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("--tls-client-cert: {e}"))?;
            if chain.is_empty() {
                return Err("--tls-client-cert holds no PEM certificate".into());
            }
            let key = pki_types::PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| format!("--tls-client-key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("TLS client certificate and key: {e}"))?
        }
        None => {
            let r = Arc::new(NoClientCert::default());
            asked = Some(r.clone());
            builder.with_client_cert_resolver(r)
        }
    };
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(cfg), asked))
}

/// Connects TCP, then runs the TLS handshake; its failures become errors
/// that say what to check.
#[derive(Clone)]
struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
    asked: Option<Arc<NoClientCert>>,
    name: pki_types::ServerName<'static>,
    host: String,
    port: u16,
}

type TlsIo = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

impl tower::Service<tonic::codegen::http::Uri> for TlsConnector {
    type Response = TlsIo;
    type Error = std::io::Error;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<TlsIo, std::io::Error>> + Send + 'static>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: tonic::codegen::http::Uri) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let at = format!("{}:{}", me.host, me.port);
            let tcp = tokio::net::TcpStream::connect((me.host.as_str(), me.port)).await?;
            let _ = tcp.set_nodelay(true);
            let io = tls_handshake(
                &me.config,
                me.asked.as_deref(),
                me.name.clone(),
                &at,
                tcp,
                Duration::from_secs(10),
            )
            .await?;
            Ok(hyper_util::rt::TokioIo::new(io))
        })
    }
}

/// The TLS handshake over `tcp` with the server `at` (`host:port`) named
/// `name`, within `limit`; its failures become errors that say what to check.
async fn tls_handshake(
    config: &Arc<rustls::ClientConfig>,
    asked: Option<&NoClientCert>,
    name: pki_types::ServerName<'static>,
    at: &str,
    tcp: tokio::net::TcpStream,
    limit: Duration,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let conn = tokio_rustls::TlsConnector::from(config.clone());
    let io = match tokio::time::timeout(limit, conn.connect(name, tcp)).await {
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("TLS handshake with {at} timed out"),
            ));
        }
        Ok(Err(e)) => return Err(std::io::Error::other(handshake_error(at, &e))),
        Ok(Ok(io)) => io,
    };
    if asked.is_some_and(|a| a.0.load(Ordering::Relaxed)) {
        // TLS 1.3: the server refuses us only after our handshake ends,
        // which tonic would report as a bare "transport error".
        return Err(std::io::Error::other(format!(
            "TLS handshake with {at}: the coordinator requires a client certificate \
             (mutual TLS): give --tls-client-cert and --tls-client-key"
        )));
    }
    if io.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(std::io::Error::other(format!(
            "TLS handshake with {at}: the server did not agree to HTTP/2 (ALPN h2); \
             is it a benchlake coordinator?"
        )));
    }
    Ok(io)
}

/// TLS settings of one address of a list.
struct TlsTarget {
    config: Arc<rustls::ClientConfig>,
    /// Without a client certificate: whether this server asked for one.
    asked: Option<Arc<NoClientCert>>,
    /// The address's host as the server name its certificate must carry.
    name: pki_types::ServerName<'static>,
}

/// One address of a list.
struct Target {
    /// The entry as given (for messages).
    given: String,
    host: String,
    port: u16,
    /// None: plaintext.
    tls: Option<TlsTarget>,
}

impl Target {
    /// Connects TCP within [`LIST_CONNECT_TIMEOUT`], then runs the TLS
    /// handshake for an `https://` address.
    async fn connect(&self) -> std::io::Result<ListIo> {
        let at = format!("{}:{}", self.host, self.port);
        let tcp = match tokio::time::timeout(
            LIST_CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        {
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "connecting timed out after {} s",
                        LIST_CONNECT_TIMEOUT.as_secs_f64()
                    ),
                ));
            }
            Ok(r) => r?,
        };
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => Ok(ListIo::Plain(tcp)),
            Some(t) => tls_handshake(
                &t.config,
                t.asked.as_deref(),
                t.name.clone(),
                &at,
                tcp,
                LIST_HANDSHAKE_TIMEOUT,
            )
            .await
            .map(|io| ListIo::Tls(Box::new(io))),
        }
    }
}

/// How long a connection over an address list keeps trying while no address
/// connects: longer than a takeover with the default leader lease (a standby
/// leads within 5 s of the leader's death).
pub const LIST_LEADER_WAIT: Duration = Duration::from_secs(10);

/// No address of a list has connected yet.
const NONE_YET: usize = usize::MAX;

/// The connector of an address-list channel: tries the addresses in order,
/// starting at the one that connected last, and returns the first connection
/// (the leader's: standbys do not listen).
#[derive(Clone)]
struct ListConnector {
    targets: Arc<[Target]>,
    /// Index of the address that connected last ([`NONE_YET`] before the first).
    last: Arc<AtomicUsize>,
    /// How long to keep trying when no address connects.
    wait: Duration,
}

/// Every address of a list failed to connect: each with its error.
#[derive(Debug, thiserror::Error)]
#[error(
    "no coordinator reachable at any of the {} addresses (the leader is found by connecting): {}",
    .0.len(),
    .0.iter().map(|(a, e)| format!("{a}: {e}")).collect::<Vec<_>>().join("; ")
)]
pub struct Unreachable(pub Vec<(String, std::io::Error)>);

impl tower::Service<tonic::codegen::http::Uri> for ListConnector {
    type Response = hyper_util::rt::TokioIo<ListIo>;
    type Error = Unreachable;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Unreachable>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: tonic::codegen::http::Uri) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let n = me.targets.len();
            let deadline = tokio::time::Instant::now() + me.wait;
            let mut pause = Duration::from_millis(100);
            let mut round = 0u32;
            loop {
                let last = me.last.load(Ordering::Relaxed);
                let start = if last == NONE_YET { 0 } else { last % n };
                let mut failed = Vec::new();
                for k in 0..n {
                    let i = (start + k) % n;
                    let t = &me.targets[i];
                    match t.connect().await {
                        Ok(io) => {
                            me.last.store(i, Ordering::Relaxed);
                            if i != last {
                                tracing::info!(coordinator = %t.given, "connected to the coordinator");
                            }
                            return Ok(hyper_util::rt::TokioIo::new(io));
                        }
                        Err(e) => {
                            tracing::debug!(coordinator = %t.given, error = %e, "not the leader here");
                            failed.push((t.given.clone(), e));
                        }
                    }
                }
                // No leader listens: a takeover may be under way. Try again
                // until the wait is spent, then report every address.
                if tokio::time::Instant::now() + pause > deadline {
                    return Err(Unreachable(failed));
                }
                if round == 0 {
                    tracing::info!(
                        wait_s = me.wait.as_secs_f64(),
                        "no coordinator listens at any address; waiting for a leader"
                    );
                }
                round += 1;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        })
    }
}

/// A connection made by [`ListConnector`]: plaintext or TLS, as the list's
/// scheme says.
enum ListIo {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

impl tokio::io::AsyncRead for ListIo {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for ListIo {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What a failed client handshake means, in words.
fn handshake_error(at: &str, e: &std::io::Error) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    let hint = match inner {
        Some(rustls::Error::InvalidMessage(_)) => {
            " (the server does not speak TLS: is the coordinator started without \
             --tls-cert/--tls-key? an https:// address never falls back to plaintext)"
        }
        Some(rustls::Error::InvalidCertificate(_)) => {
            " (the coordinator's certificate is not trusted or not for this name: \
             give the CA that signed it with --tls-ca, and an address its certificate names)"
        }
        Some(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired
            | rustls::AlertDescription::HandshakeFailure
            | rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::UnknownCA,
        )) => {
            " (the coordinator requires a client certificate signed by its client CA: \
             --tls-client-cert and --tls-client-key)"
        }
        _ if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            " (the server closed the connection: is it a coordinator serving TLS?)"
        }
        _ => "",
    };
    format!("TLS handshake with {at} failed: {e}{hint}")
}

/// An error and its sources, `: `-joined.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

use tokio_rustls::rustls::{self, pki_types};

/// A server certificate verifier that accepts one certificate, byte for byte
/// (its signatures over the handshake are still checked).
#[derive(Debug)]
struct Pinned {
    cert: Vec<u8>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl Pinned {
    fn new(pem: &[u8]) -> Result<Self, String> {
        use pki_types::pem::PemObject;
        let cert = pki_types::CertificateDer::from_pem_slice(pem)
            .map_err(|e| format!("pinned server certificate: {e}"))?;
        Ok(Self {
            cert: cert.to_vec(),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        })
    }
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &pki_types::CertificateDer<'_>,
        _intermediates: &[pki_types::CertificateDer<'_>],
        _server_name: &pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_slice() {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_list_is_split_trimmed_and_checked() {
        assert_eq!(addresses("a:1").unwrap(), ["a:1"]);
        assert_eq!(addresses("a:1, b:2 ,c:3").unwrap(), ["a:1", "b:2", "c:3"]);
        assert_eq!(
            addresses("https://a:1,https://b:2").unwrap(),
            ["https://a:1", "https://b:2"]
        );
        // http:// and bare host:port are both plaintext.
        assert_eq!(addresses("http://a:1,b:2").unwrap(), ["http://a:1", "b:2"]);
        for (list, index) in [("a:1,,b:2", 2), ("a:1,", 2), (",a:1", 1), (" ", 1)] {
            assert_eq!(
                addresses(list),
                Err(AddressError::Empty {
                    list: list.into(),
                    index
                }),
                "{list}"
            );
        }
    }

    #[test]
    fn a_mixed_list_is_refused_naming_the_addresses() {
        for list in ["https://a:1,b:2", "http://a:1,https://b:2"] {
            let e = channel_with(list, &ClientTls::default()).unwrap_err();
            assert!(e.contains("https://") && e.contains("plaintext"), "{e}");
            let (tls, plain) = if list.starts_with("https") {
                ("https://a:1", "b:2")
            } else {
                ("https://b:2", "http://a:1")
            };
            assert!(
                e.contains(&format!("'{tls}' is https:// but '{plain}' is plaintext")),
                "{e}"
            );
        }
        let e = channel_with("a:1,,b:2", &ClientTls::default()).unwrap_err();
        assert!(e.contains("entry 2 is empty"), "{e}");
        let e = channel_with("a:1,b:notaport", &ClientTls::default()).unwrap_err();
        assert!(e.starts_with("coordinator address 'b:notaport'"), "{e}");
    }

    /// A port with nothing listening (bound, then closed).
    async fn dead_port() -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn when_no_address_connects_the_error_names_each() {
        let (a, b) = (dead_port().await, dead_port().await);
        for list in [
            format!("127.0.0.1:{a},127.0.0.1:{b}"),
            format!("https://127.0.0.1:{a},https://localhost:{b}"),
        ] {
            let ch = channel_with_wait(&list, &ClientTls::default(), Duration::ZERO).unwrap();
            let e = crate::v1::cluster_service_client::ClusterServiceClient::new(ch)
                .list_agents(crate::v1::ListAgentsRequest {})
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
            let m = e.message();
            assert!(m.contains("any of the 2 addresses"), "{m}");
            for entry in addresses(&list).unwrap() {
                assert!(m.contains(&format!("{entry}: ")), "{entry} missing: {m}");
            }
            assert!(m.matches("refused").count() >= 2, "{m}");
        }
    }

    /// The connector of a plaintext list over `ports`.
    fn list_connector(ports: &[u16]) -> ListConnector {
        ListConnector {
            targets: ports
                .iter()
                .map(|p| Target {
                    given: format!("127.0.0.1:{p}"),
                    host: "127.0.0.1".into(),
                    port: *p,
                    tls: None,
                })
                .collect::<Vec<_>>()
                .into(),
            last: Arc::new(AtomicUsize::new(NONE_YET)),
            wait: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn a_connection_waits_for_a_leader_that_comes_within_the_wait() {
        use tower::Service;
        let (a, b) = (dead_port().await, dead_port().await);
        let uri: tonic::codegen::http::Uri = "http://127.0.0.1:1".parse().unwrap();
        // No wait: refused at once.
        let mut now = list_connector(&[a, b]);
        let t0 = std::time::Instant::now();
        let e = now.call(uri.clone()).await.err().unwrap();
        assert_eq!(e.0.len(), 2);
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
        // Waiting 3 s: b starts listening after 700 ms (a standby taking
        // over) and the same call connects to it.
        let mut waiting = list_connector(&[a, b]);
        waiting.wait = Duration::from_secs(3);
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let l = tokio::net::TcpListener::bind(("127.0.0.1", b))
                .await
                .unwrap();
            let _ = l.accept().await;
        });
        let t0 = std::time::Instant::now();
        let conn = waiting.call(uri.clone()).await.unwrap();
        let took = t0.elapsed();
        assert_eq!(peer_port(&conn), b);
        assert!(
            took >= Duration::from_millis(650) && took < Duration::from_secs(2),
            "{took:?}"
        );
        late.await.unwrap();
        // Nobody comes: the wait is spent and every address is named.
        let t0 = std::time::Instant::now();
        let mut waiting = list_connector(&[a, dead_port().await]);
        waiting.wait = Duration::from_millis(600);
        let e = waiting.call(uri).await.err().unwrap();
        let took = t0.elapsed();
        assert_eq!(e.0.len(), 2);
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    /// The port `conn` is connected to.
    fn peer_port(conn: &hyper_util::rt::TokioIo<ListIo>) -> u16 {
        match conn.inner() {
            ListIo::Plain(s) => s.peer_addr().unwrap().port(),
            ListIo::Tls(_) => unreachable!("plaintext list"),
        }
    }

    #[tokio::test]
    async fn the_connector_starts_at_the_address_that_connected_last() {
        use tower::Service;
        let a = dead_port().await;
        let lb = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let lc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (b, c) = (
            lb.local_addr().unwrap().port(),
            lc.local_addr().unwrap().port(),
        );
        let mut conn = list_connector(&[a, b, c]);
        let uri: tonic::codegen::http::Uri = "http://127.0.0.1:1".parse().unwrap();
        // a refuses: b, the first that accepts.
        assert_eq!(peer_port(&conn.call(uri.clone()).await.unwrap()), b);
        assert_eq!(conn.last.load(Ordering::Relaxed), 1);
        // Again b (not a first, not c).
        assert_eq!(peer_port(&conn.call(uri.clone()).await.unwrap()), b);
        // b goes away: c.
        drop(lb);
        assert_eq!(peer_port(&conn.call(uri.clone()).await.unwrap()), c);
        // b back: c stays, being the last that connected.
        let lb = tokio::net::TcpListener::bind(("127.0.0.1", b))
            .await
            .unwrap();
        assert_eq!(peer_port(&conn.call(uri.clone()).await.unwrap()), c);
        // c gone: around the list, past a, to b.
        drop(lc);
        assert_eq!(peer_port(&conn.call(uri.clone()).await.unwrap()), b);
        drop(lb);
        let e = conn.call(uri).await.err().unwrap().to_string();
        for p in [a, b, c] {
            assert!(e.contains(&format!("127.0.0.1:{p}: ")), "{e}");
        }
    }
}
