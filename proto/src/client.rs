//! Client-side helpers shared by the agent, the worker and the CLI: connecting to
//! the coordinator (plaintext or TLS, see [`ClientTls`]) and attaching the bearer
//! token to every call.
use std::path::Path;
use std::sync::Arc;

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

/// A lazily connecting plaintext-or-TLS channel to the coordinator at `addr`,
/// with the TLS settings of the environment ([`ClientTls::from_env`]; else
/// the system roots and no client certificate) for an `https://` address.
pub fn channel(addr: &str) -> Result<Channel, String> {
    let tls = if is_tls(&endpoint_url(addr)) {
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
pub fn channel_with(addr: &str, tls: &ClientTls) -> Result<Channel, String> {
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
            let conn = tokio_rustls::TlsConnector::from(me.config.clone());
            let io = match tokio::time::timeout(
                std::time::Duration::from_secs(10),
                conn.connect(me.name.clone(), tcp),
            )
            .await
            {
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("TLS handshake with {at} timed out"),
                    ));
                }
                Ok(Err(e)) => return Err(std::io::Error::other(handshake_error(&at, &e))),
                Ok(Ok(io)) => io,
            };
            if me
                .asked
                .as_ref()
                .is_some_and(|a| a.0.load(std::sync::atomic::Ordering::Relaxed))
            {
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
            Ok(hyper_util::rt::TokioIo::new(io))
        })
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
