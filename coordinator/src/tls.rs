//! TLS on the coordinator's listener (rustls with the ring provider; no system
//! OpenSSL). Every service the coordinator serves on its port, gRPC and Arrow
//! Flight alike, goes through the same acceptor. With a client CA configured
//! (`--tls-client-ca`), every connection must present a certificate signed by
//! it (mutual TLS); bearer tokens are still checked on top.
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use benchlake_proto::client::tokio_rustls::rustls::pki_types::pem::PemObject;
use benchlake_proto::client::tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use benchlake_proto::client::tokio_rustls::rustls::server::WebPkiClientVerifier;
use benchlake_proto::client::tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use benchlake_proto::client::tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;

use crate::config::CoordinatorConfig;

/// How long a client may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn certs(p: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let v = CertificateDer::pem_file_iter(p)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", p.display()))?;
    if v.is_empty() {
        return Err(format!("{}: no PEM certificate in the file", p.display()));
    }
    Ok(v)
}

/// Warns when a private key file is readable by group or others.
fn check_key_mode(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(p) {
        let mode = m.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                key = %p.display(),
                mode = format!("{:o}", mode & 0o777),
                "the TLS private key is readable by group or others; chmod 600 it"
            );
        }
    }
}

/// The TLS acceptor of `cfg` (None: plaintext). Refuses a certificate without
/// a key and the other way round, and a client CA without both.
pub fn acceptor(cfg: &CoordinatorConfig) -> Result<Option<TlsAcceptor>, String> {
    // gRPC clients (tonic, grpc-core behind grpcio and pyarrow) insist on h2.
    acceptor_alpn(cfg, &[b"h2"])
}

/// The acceptor of the HTTP listener ([`crate::http`]): the same certificate,
/// key and client CA as the gRPC port, offering HTTP/2 and HTTP/1.1.
pub fn http_acceptor(cfg: &CoordinatorConfig) -> Result<Option<TlsAcceptor>, String> {
    acceptor_alpn(cfg, &[b"h2", b"http/1.1"])
}

fn acceptor_alpn(cfg: &CoordinatorConfig, alpn: &[&[u8]]) -> Result<Option<TlsAcceptor>, String> {
    let (cert, key) = match (&cfg.tls_cert, &cfg.tls_key) {
        (None, None) => {
            if cfg.tls_client_ca.is_some() {
                return Err(
                    "--tls-client-ca needs TLS: give --tls-cert and --tls-key too".to_string(),
                );
            }
            return Ok(None);
        }
        (Some(c), Some(k)) => (c, k),
        (Some(_), None) => return Err("--tls-cert needs --tls-key (both PEM files)".into()),
        (None, Some(_)) => return Err("--tls-key needs --tls-cert (both PEM files)".into()),
    };
    let chain = certs(cert)?;
    check_key_mode(key);
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &cfg.tls_client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs(ca)? {
                roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut sc = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("TLS certificate and key: {e}"))?;
    sc.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Some(TlsAcceptor::from(Arc::new(sc))))
}

/// At most this many failed handshakes are logged one by one per
/// [`FAILURE_WINDOW`]; the rest are counted and summed up (with their peers)
/// when the window ends, so a scan or a misconfigured fleet cannot flood the
/// log, and no failure goes unreported.
const FAILURES_LOGGED_PER_WINDOW: u32 = 20;
/// See [`FAILURES_LOGGED_PER_WINDOW`].
const FAILURE_WINDOW: Duration = Duration::from_secs(10);

/// Failed handshakes of one listener: logged each, rate-limited.
#[derive(Debug, Default)]
struct Failures {
    logged: u32,
    suppressed: u64,
    /// Distinct peers (IP addresses) of the suppressed failures, the first few.
    peers: Vec<std::net::IpAddr>,
}

impl Failures {
    /// Logs the failure of `peer` or counts it when the window's quota is spent.
    fn record(&mut self, peer: std::net::SocketAddr, error: &str) {
        if self.logged < FAILURES_LOGGED_PER_WINDOW {
            self.logged += 1;
            tracing::warn!(peer = %peer, error = %error, "TLS handshake failed");
            return;
        }
        self.suppressed += 1;
        if self.peers.len() < 8 && !self.peers.contains(&peer.ip()) {
            self.peers.push(peer.ip());
        }
    }

    /// Ends the window: a summary of the failures not logged one by one.
    fn flush(&mut self) {
        if self.suppressed > 0 {
            let peers: Vec<String> = self.peers.iter().map(|p| p.to_string()).collect();
            tracing::warn!(
                failures = self.suppressed,
                peers = %peers.join(", "),
                window_s = FAILURE_WINDOW.as_secs(),
                "further TLS handshakes failed (not logged one by one: more than {FAILURES_LOGGED_PER_WINDOW} per window)"
            );
        }
        *self = Failures::default();
    }
}

/// The connections of `listener` after their TLS handshake, which runs per
/// connection (a slow or silent client holds up no other) within
/// [`HANDSHAKE_TIMEOUT`]; failed handshakes are logged and dropped. Accepting
/// stops when the stream is dropped (server shutdown).
pub fn incoming(
    listener: TcpListener,
    acceptor: TlsAcceptor,
) -> ReceiverStream<std::io::Result<TlsStream<TcpStream>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let failures = Arc::new(std::sync::Mutex::new(Failures::default()));
    tokio::spawn(async move {
        let mut window = tokio::time::interval(FAILURE_WINDOW);
        window.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let (tcp, peer) = tokio::select! {
                _ = tx.closed() => break,
                _ = window.tick() => {
                    failures.lock().unwrap_or_else(|p| p.into_inner()).flush();
                    continue;
                }
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: back off a little.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, failures) = (acceptor.clone(), tx.clone(), failures.clone());
            tokio::spawn(async move {
                let error = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => {
                        let _ = tx.send(Ok(s)).await;
                        return;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("timed out after {} s", HANDSHAKE_TIMEOUT.as_secs()),
                };
                failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .record(peer, &error);
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_beyond_the_quota_are_counted_with_their_peers() {
        let mut f = Failures::default();
        let peer = |i: u8| std::net::SocketAddr::from(([10, 0, 0, i % 3], 40000 + i as u16));
        for i in 0..50u8 {
            f.record(peer(i), "bad certificate");
        }
        assert_eq!(f.logged, FAILURES_LOGGED_PER_WINDOW);
        assert_eq!(f.suppressed, 30);
        assert_eq!(f.peers.len(), 3);
        f.flush();
        assert_eq!((f.logged, f.suppressed, f.peers.len()), (0, 0, 0));
    }
}
