//! TLS end to end, in process: a coordinator serving TLS (and mutual TLS) with
//! certificates made at run time (rcgen), an agent and a worker reaching it
//! over `https://`, and the ways a client must fail: `https://` against a
//! plaintext server (never a silent downgrade), plaintext against the TLS
//! port, no client certificate (or one from another CA) where one is required.
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use benchlake_coordinator::{Coordinator, Tokens};
use benchlake_core::clock::ManualClock;
use benchlake_proto::client::{Auth, ClientTls, channel_with};
use benchlake_proto::v1 as pb;
use common::{
    T0, TestState, bin, catalog, config, open_coordinator, serve_coordinator, state, table_rows,
    worker_config,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use tokio::sync::watch;

/// A CA with a server certificate (127.0.0.1, localhost) and a client
/// certificate, all PEM, written to `dir`.
struct Pki {
    dir: tempfile::TempDir,
    ca: Vec<u8>,
    client_cert: Vec<u8>,
    client_key: Vec<u8>,
}

impl Pki {
    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (ca_pem, ca) = make_ca("benchlake test CA");
        let (srv, srv_key) = leaf(
            &ca,
            "coordinator",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (cli, cli_key) = leaf(
            &ca,
            "agent-a1",
            &["a1"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let w = |f: &str, s: &str| std::fs::write(dir.path().join(f), s).unwrap();
        w("ca.pem", &ca_pem);
        w("server.pem", &srv);
        w("server.key", &srv_key);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        Self {
            dir,
            ca: ca_pem.into_bytes(),
            client_cert: cli.into_bytes(),
            client_key: cli_key.into_bytes(),
        }
    }

    /// Client settings trusting this CA, with or without the client certificate.
    fn client(&self, with_cert: bool) -> ClientTls {
        ClientTls {
            ca: Some(self.ca.clone()),
            client_cert: with_cert.then(|| (self.client_cert.clone(), self.client_key.clone())),
            ..Default::default()
        }
    }
}

fn make_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    let cert = p.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(p, key))
}

fn leaf(
    ca: &Issuer<'static, KeyPair>,
    cn: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A coordinator serving TLS with `pki`'s server certificate (and requiring
/// client certificates when `mutual`), on a manual clock.
struct TlsCoord {
    dir: tempfile::TempDir,
    coord: Arc<Coordinator>,
    clock: ManualClock,
    url: String,
    stops: Vec<watch::Sender<bool>>,
    _state: TestState,
}

impl Drop for TlsCoord {
    fn drop(&mut self) {
        for s in &self.stops {
            let _ = s.send(true);
        }
    }
}

impl TlsCoord {
    async fn start(pki: &Pki, mutual: bool) -> Self {
        Self::start_with(pki, mutual, Tokens::default()).await
    }

    async fn start_with(pki: &Pki, mutual: bool, tokens: Tokens) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = TestState::new();
        let mut cfg = config(dir.path(), &state, tokens);
        cfg.tls_cert = Some(pki.path("server.pem"));
        cfg.tls_key = Some(pki.path("server.key"));
        if mutual {
            cfg.tls_client_ca = Some(pki.path("ca.pem"));
        }
        let clock = ManualClock::new(T0);
        let coord = open_coordinator(cfg, &clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let stop = serve_coordinator(coord.clone(), listener);
        Self {
            dir,
            coord,
            clock,
            url,
            stops: vec![stop],
            _state: state,
        }
    }

    fn lake_dir(&self) -> PathBuf {
        self.dir.path().join("lake")
    }

    fn add_agent(&mut self, name: &str, tls: ClientTls) {
        let mut cfg =
            benchlake_agent::AgentConfig::new(&self.url, self.dir.path().join("work").join(name))
                .unwrap();
        cfg.name = name.to_string();
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(&catalog(&bin())).unwrap();
        cfg.poll_interval = Duration::from_millis(30);
        cfg.run_as = Some(benchlake_agent::contain::current_user_name());
        cfg.tls = tls;
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            if let Err(e) = benchlake_agent::run(cfg, rx).await {
                eprintln!("agent ended: {e}");
            }
        });
        self.stops.push(tx);
    }

    fn add_worker(&mut self, name: &str, tls: ClientTls) {
        let cfg = worker_config(&self.url, name, self.dir.path());
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            let _ = benchlake_worker::run_with_tls(
                cfg,
                tls,
                benchlake_worker::Executors::builtin(),
                rx,
            )
            .await;
        });
        self.stops.push(tx);
    }
}

fn runs(
    url: &str,
    tls: &ClientTls,
) -> pb::run_service_client::RunServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Auth>,
> {
    pb::run_service_client::RunServiceClient::with_interceptor(
        channel_with(url, tls).unwrap(),
        Auth::new(None).unwrap(),
    )
}

fn cluster(
    url: &str,
    tls: &ClientTls,
) -> pb::cluster_service_client::ClusterServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Auth>,
> {
    pb::cluster_service_client::ClusterServiceClient::with_interceptor(
        channel_with(url, tls).unwrap(),
        Auth::new(None).unwrap(),
    )
}

async fn list_agents(url: &str, tls: &ClientTls) -> Result<Vec<pb::AgentInfo>, tonic::Status> {
    cluster(url, tls)
        .list_agents(pb::ListAgentsRequest {})
        .await
        .map(|r| r.into_inner().agents)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostinfo_run_lands_with_agent_and_worker_over_mutual_tls() {
    let pki = Pki::new();
    let mut c = TlsCoord::start(&pki, true).await;
    assert!(c.url.starts_with("https://127.0.0.1:"));
    c.add_agent("a1", pki.client(true));
    c.add_worker("w1", pki.client(true));
    let user = pki.client(true);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let agents = list_agents(&c.url, &user).await.unwrap_or_default();
        if agents.iter().any(|a| a.name == "a1") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "agent a1 did not register over TLS"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let run = runs(&c.url, &user)
        .submit_run(pb::SubmitRunRequest {
            spec: Some(common::bench_spec("hostinfo", &[])),
            idempotency_key: String::new(),
            notify: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let d = loop {
        let d = runs(&c.url, &user)
            .get_run(pb::GetRunRequest {
                run_id: run.run_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let done = d.jobs.iter().any(|j| j.kind == "record")
            && d.jobs.iter().all(|j| j.state == pb::JobState::Done as i32);
        if state(&d) != pb::RunState::Running && state(&d) != pb::RunState::Pending && done
            || state(&d) == pb::RunState::Failed
        {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run did not land: {d:#?}"
        );
        c.clock.advance(20);
        c.coord.tick().unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    assert_eq!(d.tasks[0].agent, "a1");
    let lake = c.lake_dir();
    assert_eq!(table_rows(&lake, "node_facts", Some(&run.run_id)), 1);
    assert_eq!(table_rows(&lake, "runs", Some(&run.run_id)), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_against_a_plaintext_server_fails_and_never_downgrades() {
    let pki = Pki::new();
    let c = common::Cluster::start(Tokens::default()).await;
    // Plaintext works as before...
    assert!(list_agents(&c.addr, &ClientTls::default()).await.is_ok());
    // ...but https:// to the same port must not fall back to it.
    let e = list_agents(&format!("https://{}", c.addr), &pki.client(false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    let m = e.message();
    assert!(
        m.contains("TLS handshake") && m.contains("does not speak TLS"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_and_untrusted_clients_fail_against_the_tls_server() {
    let pki = Pki::new();
    let c = TlsCoord::start(&pki, false).await;
    let plain = c.url.replacen("https://", "", 1);
    for addr in [plain.clone(), format!("http://{plain}")] {
        assert!(
            list_agents(&addr, &ClientTls::default()).await.is_err(),
            "plaintext {addr} against the TLS port must fail"
        );
    }
    // Trusting another CA: the server's certificate is refused.
    let (other_ca, _) = make_ca("another CA");
    let other = ClientTls {
        ca: Some(other_ca.into_bytes()),
        ..Default::default()
    };
    let e = list_agents(&c.url, &other).await.unwrap_err();
    assert!(
        e.message().contains("invalid peer certificate"),
        "{}",
        e.message()
    );
    // The right CA (no client certificate needed without --tls-client-ca).
    assert!(list_agents(&c.url, &pki.client(false)).await.is_ok());
    // A name the certificate does not carry is refused too.
    let port = plain.rsplit(':').next().unwrap();
    let e = list_agents(&format!("https://127.0.0.2:{port}"), &pki.client(false)).await;
    assert!(e.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_clients_without_a_ca_signed_certificate() {
    let pki = Pki::new();
    let c = TlsCoord::start(&pki, true).await;
    // No client certificate.
    let e = list_agents(&c.url, &pki.client(false)).await.unwrap_err();
    assert!(
        e.message().contains("requires a client certificate"),
        "{}",
        e.message()
    );
    // A certificate from another CA.
    let (_, other) = make_ca("another CA");
    let (cert, key) = leaf(
        &other,
        "intruder",
        &["intruder"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let mut wrong = pki.client(false);
    wrong.client_cert = Some((cert.into_bytes(), key.into_bytes()));
    assert!(list_agents(&c.url, &wrong).await.is_err());
    // The CA-signed certificate.
    assert!(list_agents(&c.url, &pki.client(true)).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_the_agent() {
    let pki = Pki::new();
    const SHARED: &str = "shared-agent-token-0123456";
    const BOUND_A2: &str = "a2-bound-token-0123456789";
    let tokens = Tokens {
        agent: vec![SHARED.into(), format!("a2:{BOUND_A2}")],
        ..Default::default()
    };
    let c = TlsCoord::start_with(&pki, true, tokens).await;
    let register = |token: &'static str, name: &'static str| {
        let ch = channel_with(&c.url, &pki.client(true)).unwrap();
        async move {
            pb::agent_service_client::AgentServiceClient::with_interceptor(
                ch,
                Auth::new(Some(token)).unwrap(),
            )
            .register(pb::RegisterRequest {
                protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
                name: name.into(),
                ..Default::default()
            })
            .await
        }
    };
    // The certificate's DNS name is `a1`: a shared token registers only as a1.
    let e = register(SHARED, "a2").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert!(e.message().contains("not to agent 'a2'"), "{}", e.message());
    // A token bound to another name than the certificate's is refused.
    let e = register(BOUND_A2, "a2").await.unwrap_err();
    assert!(
        e.message()
            .contains("bound to 'a2' but the client certificate names 'a1'"),
        "{}",
        e.message()
    );
    register(SHARED, "a1").await.unwrap();
}

#[tokio::test]
async fn a_certificate_without_its_key_is_refused() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &TestState::sqlite(), Tokens::default());
    cfg.tls_cert = Some(pki.path("server.pem"));
    let e = benchlake_coordinator::tls::acceptor(&cfg).err().unwrap();
    assert!(e.contains("--tls-key"), "{e}");
    cfg.tls_cert = None;
    cfg.tls_key = Some(pki.path("server.key"));
    assert!(benchlake_coordinator::tls::acceptor(&cfg).is_err());
    cfg.tls_key = None;
    cfg.tls_client_ca = Some(pki.path("ca.pem"));
    assert!(benchlake_coordinator::tls::acceptor(&cfg).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_address_list_connects_to_the_address_that_listens() {
    let pki = Pki::new();
    let c = TlsCoord::start(&pki, true).await;
    let port = c.url.rsplit(':').next().unwrap().to_string();
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    // Each address is verified under its own name (localhost, 127.0.0.1:
    // both in the certificate).
    let list = format!("https://localhost:{dead},https://localhost:{port}");
    assert!(list_agents(&list, &pki.client(true)).await.is_ok());
    let list = format!("https://127.0.0.1:{dead}, {}", c.url);
    assert!(list_agents(&list, &pki.client(true)).await.is_ok());
    // The handshake hints survive in the list's error, address by address.
    let e = list_agents(&list, &pki.client(false)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    let m = e.message();
    assert!(
        m.contains(&format!("https://127.0.0.1:{dead}: ")) && m.contains("refused"),
        "{m}"
    );
    assert!(
        m.contains(&format!("{}: ", c.url)) && m.contains("requires a client certificate"),
        "{m}"
    );
    // https:// to a plaintext coordinator in a list: still no downgrade.
    let plain = common::Cluster::start(Tokens::default()).await;
    let list = format!("https://127.0.0.1:{dead},https://{}", plain.addr);
    let e = list_agents(&list, &pki.client(false)).await.unwrap_err();
    assert!(
        e.message().contains("does not speak TLS"),
        "{}",
        e.message()
    );
}
