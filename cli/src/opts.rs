//! Flags of the service commands (`coordinator`, `agent`, `worker`) and their
//! conversion to the libraries' configs. Every flag is also an environment
//! variable; secrets (tokens, S3 keys) are best given by environment or file.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use benchlake_coordinator::store_pg::is_postgres_url;
use benchlake_coordinator::{CoordinatorConfig, Tokens};
use benchlake_core::lake::StoreConfig;
use clap::Args;

/// Where the lake is.
#[derive(Debug, Clone, Args)]
pub struct LakeArgs {
    /// Lake location: a directory, file:///dir, or s3://bucket[/prefix].
    #[arg(long, env = "BENCHLAKE_LAKE")]
    pub lake: Option<String>,
    #[command(flatten)]
    pub s3: S3Args,
}

/// How to reach an S3 lake (also for `ingest --out s3://…`).
#[derive(Debug, Clone, Args)]
pub struct S3Args {
    /// S3 endpoint, e.g. http://127.0.0.1:8333 (empty = AWS).
    #[arg(long, env = "BENCHLAKE_S3_ENDPOINT", default_value = "")]
    pub s3_endpoint: String,
    /// S3 region.
    #[arg(long, env = "BENCHLAKE_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// S3 access key id.
    #[arg(long, env = "BENCHLAKE_S3_ACCESS_KEY_ID", default_value = "")]
    pub s3_access_key_id: String,
    /// S3 secret key (prefer the environment variable).
    #[arg(
        long,
        env = "BENCHLAKE_S3_SECRET_ACCESS_KEY",
        default_value = "",
        hide_env_values = true
    )]
    pub s3_secret_access_key: String,
    /// Virtual-hosted-style S3 requests (default: path style, as SeaweedFS/MinIO want).
    #[arg(long, env = "BENCHLAKE_S3_VIRTUAL_HOSTED")]
    pub s3_virtual_hosted: bool,
}

impl S3Args {
    /// The store config of the lake at `url`.
    pub fn store_at(&self, url: &str) -> StoreConfig {
        StoreConfig {
            url: url.to_string(),
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            access_key_id: self.s3_access_key_id.clone(),
            secret_access_key: self.s3_secret_access_key.clone(),
            virtual_hosted: self.s3_virtual_hosted,
        }
    }
}

impl LakeArgs {
    /// The store config, with `default` when no --lake was given.
    pub fn store(&self, default: &str) -> StoreConfig {
        self.s3
            .store_at(&self.lake.clone().unwrap_or_else(|| default.to_string()))
    }
}

/// Role tokens of the coordinator.
#[derive(Debug, Clone, Args)]
pub struct TokenArgs {
    /// Admin tokens, comma-separated.
    #[arg(
        long,
        env = "BENCHLAKE_ADMIN_TOKENS",
        default_value = "",
        hide_env_values = true
    )]
    pub admin_tokens: String,
    /// User tokens, comma-separated.
    #[arg(
        long,
        env = "BENCHLAKE_USER_TOKENS",
        default_value = "",
        hide_env_values = true
    )]
    pub user_tokens: String,
    /// Agent tokens, comma-separated; `NAME:TOKEN` binds a token to agent NAME.
    #[arg(
        long,
        env = "BENCHLAKE_AGENT_TOKENS",
        default_value = "",
        hide_env_values = true
    )]
    pub agent_tokens: String,
    /// Worker tokens, comma-separated; `NAME:TOKEN` binds a token to worker NAME.
    #[arg(
        long,
        env = "BENCHLAKE_WORKER_TOKENS",
        default_value = "",
        hide_env_values = true
    )]
    pub worker_tokens: String,
    /// A TOML file with `admin = [...]`, `user = [...]`, `agent = [...]`, `worker = [...]`.
    #[arg(long, env = "BENCHLAKE_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,
}

fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

impl TokenArgs {
    pub fn tokens(&self) -> anyhow::Result<Tokens> {
        let mut t = Tokens {
            admin: split(&self.admin_tokens),
            user: split(&self.user_tokens),
            agent: split(&self.agent_tokens),
            worker: split(&self.worker_tokens),
        };
        if let Some(p) = &self.tokens_file {
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct F {
                #[serde(default)]
                admin: Vec<String>,
                #[serde(default)]
                user: Vec<String>,
                #[serde(default)]
                agent: Vec<String>,
                #[serde(default)]
                worker: Vec<String>,
            }
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let f: F = toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
            t.admin.extend(f.admin);
            t.user.extend(f.user);
            t.agent.extend(f.agent);
            t.worker.extend(f.worker);
        }
        t.check().map_err(|e| anyhow::anyhow!(e))?;
        if t.shared() > 0 {
            tracing::warn!(
                shared = t.shared(),
                "agent or worker tokens without a name: any holder can act as any agent or worker; \
                 bind each token to its agent or worker as NAME:TOKEN"
            );
        }
        Ok(t)
    }
}

/// TLS on the coordinator's port (`coordinator`, `up`): gRPC and Flight alike.
#[derive(Debug, Clone, Default, Args)]
pub struct ServerTlsArgs {
    /// TLS certificate chain (PEM): the port then speaks TLS only (needs --tls-key).
    #[arg(long, env = "BENCHLAKE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert; should be readable by its owner only.
    #[arg(long, env = "BENCHLAKE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: clients must present a certificate signed by this CA (PEM).
    #[arg(long, env = "BENCHLAKE_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
}

/// TLS of a client (agent, worker, user commands) to an `https://` coordinator.
#[derive(Debug, Clone, Default, Args)]
pub struct ClientTlsArgs {
    /// CA (PEM) the coordinator's certificate must chain to (default: the
    /// system roots); used only with an https:// coordinator address.
    #[arg(long, env = "BENCHLAKE_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a coordinator that requires mutual TLS.
    #[arg(long, env = "BENCHLAKE_TLS_CLIENT_CERT")]
    pub tls_client_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-client-cert.
    #[arg(long, env = "BENCHLAKE_TLS_CLIENT_KEY")]
    pub tls_client_key: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// Reads the files.
    pub fn load(&self) -> anyhow::Result<benchlake_proto::client::ClientTls> {
        benchlake_proto::client::ClientTls::from_files(
            self.tls_ca.as_deref(),
            self.tls_client_cert.as_deref(),
            self.tls_client_key.as_deref(),
        )
        .map_err(anyhow::Error::msg)
    }
}

/// The HTTP endpoints (`/healthz`, `/readyz`, `/metrics`) of `coordinator`,
/// `worker` and `agent` (and `up`, which always serves them).
#[derive(Debug, Clone, Default, Args)]
pub struct HttpArgs {
    /// Serve /healthz, /readyz and Prometheus /metrics on HOST:PORT (off when
    /// not given; `up` picks a free 127.0.0.1 port); the coordinator also
    /// serves its web dashboard there (docs/dashboard.md). The coordinator's
    /// uses its TLS certificate when it has one.
    #[arg(long, env = "BENCHLAKE_HTTP_ADDR", value_name = "HOST:PORT")]
    pub http_addr: Option<String>,
    /// Tokens that may read /metrics (and nothing else), comma-separated; on
    /// the coordinator admin and user tokens may too. With none (and no role
    /// tokens on the coordinator), /metrics is open.
    #[arg(
        long,
        env = "BENCHLAKE_METRICS_TOKENS",
        default_value = "",
        hide_env_values = true
    )]
    pub metrics_tokens: String,
}

impl HttpArgs {
    /// The metrics tokens (each at least 16 characters).
    pub fn tokens(&self) -> anyhow::Result<Vec<String>> {
        let t = split(&self.metrics_tokens);
        benchlake_coordinator::config::MetricsTokens(t.clone())
            .check()
            .map_err(anyhow::Error::msg)?;
        Ok(t)
    }

    /// Binds --http-addr when given.
    pub async fn bind(&self) -> anyhow::Result<Option<tokio::net::TcpListener>> {
        let Some(addr) = &self.http_addr else {
            return Ok(None);
        };
        let l = benchlake_coordinator::listen::bind(addr)
            .await
            .with_context(|| format!("cannot listen on --http-addr {addr}"))?;
        Ok(Some(l))
    }

    /// Serves a worker's or agent's endpoints on --http-addr (when given)
    /// until `shutdown` turns true.
    pub async fn serve_probe(
        &self,
        probe: std::sync::Arc<dyn benchlake_proto::obs::Probe>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let tokens = self.tokens()?;
        let Some(l) = self.bind().await? else {
            return Ok(());
        };
        let addr = l.local_addr()?;
        if tokens.is_empty() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "/metrics is open to anyone who reaches it; give --metrics-tokens");
        }
        tracing::info!(%addr, "HTTP endpoints listening (/healthz, /readyz, /metrics)");
        let router = benchlake_proto::obs::router(probe, tokens);
        tokio::spawn(async move {
            if let Err(e) = benchlake_proto::obs::serve(l, router, until(shutdown)).await {
                tracing::error!(error = %e, "HTTP endpoints stopped");
            }
        });
        Ok(())
    }
}

/// Coordinator tuning shared by `coordinator` and `up`.
#[derive(Debug, Clone, Args)]
pub struct CoordTuning {
    /// Task lease: an agent silent this long loses its tasks (ms).
    #[arg(long, env = "BENCHLAKE_LEASE_TIMEOUT_MS", default_value_t = 30_000)]
    pub lease_timeout_ms: u64,
    /// Heartbeat interval told to agents (ms).
    #[arg(long, env = "BENCHLAKE_HEARTBEAT_MS", default_value_t = 5_000)]
    pub heartbeat_ms: u64,
    /// Job lease: a worker that stops renewing for this long loses its job (ms).
    #[arg(long, env = "BENCHLAKE_JOB_LEASE_TIMEOUT_MS", default_value_t = 60_000)]
    pub job_lease_timeout_ms: u64,
    /// Attempts per task when the spec does not say.
    #[arg(long, env = "BENCHLAKE_TASK_MAX_ATTEMPTS", default_value_t = 3)]
    pub task_max_attempts: u32,
    /// Attempts per job.
    #[arg(long, env = "BENCHLAKE_JOB_MAX_ATTEMPTS", default_value_t = 3)]
    pub job_max_attempts: u32,
    /// First retry delay, doubled per attempt (ms).
    #[arg(long, env = "BENCHLAKE_RETRY_BACKOFF_MS", default_value_t = 1_000)]
    pub retry_backoff_ms: u64,
    /// Scheduler/reaper period (ms).
    #[arg(long, env = "BENCHLAKE_TICK_MS", default_value_t = 500)]
    pub tick_ms: u64,
    /// PostgreSQL state only: the leader's lease (ms). A standby takes over
    /// within this plus a third of it after the leader stopped.
    #[arg(long, env = "BENCHLAKE_LEADER_LEASE_MS", default_value_t = 3_000)]
    pub leader_lease_ms: u64,
    /// PostgreSQL state only: every commit waits for PostgreSQL's WAL flush.
    /// Off by default: transitions survive coordinator crashes and failovers,
    /// and a crash of the database server itself may lose its last fraction
    /// of a second of them (as SQLite's default here).
    #[arg(long, env = "BENCHLAKE_STATE_SYNCHRONOUS_COMMIT")]
    pub state_synchronous_commit: bool,
}

/// Notifiers of the coordinator (`coordinator`, `up`): webhooks told when a
/// run ends FAILED or with the verdict FAIL or ERROR (docs/notifications.md).
#[derive(Debug, Clone, Default, Args)]
pub struct NotifyArgs {
    /// A webhook notifier, NAME=URL (http or https; repeatable). Schedules
    /// and runs name it (`--notify NAME`); --notify-default adds it to all.
    #[arg(
        long = "webhook",
        env = "BENCHLAKE_WEBHOOKS",
        value_delimiter = ',',
        value_name = "NAME=URL"
    )]
    pub webhooks: Vec<String>,
    /// The HMAC-SHA256 key of webhook NAME, read from PATH (repeatable;
    /// trailing newline ignored): requests then carry X-Benchlake-Signature.
    #[arg(
        long = "webhook-secret-file",
        env = "BENCHLAKE_WEBHOOK_SECRET_FILES",
        value_delimiter = ',',
        value_name = "NAME=PATH"
    )]
    pub webhook_secret_files: Vec<String>,
    /// CA certificates (PEM) an https webhook may chain to, besides the
    /// system's roots.
    #[arg(long = "webhook-ca", env = "BENCHLAKE_WEBHOOK_CA")]
    pub webhook_ca: Option<PathBuf>,
    /// Notifiers told about every run that ends badly (repeatable).
    #[arg(
        long = "notify-default",
        env = "BENCHLAKE_NOTIFY_DEFAULT",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub notify_default: Vec<String>,
    /// Timeout of one delivery attempt (ms).
    #[arg(long, env = "BENCHLAKE_NOTIFY_TIMEOUT_MS", default_value_t = 10_000)]
    pub notify_timeout_ms: u64,
    /// Attempts of a delivery before it is given up.
    #[arg(long, env = "BENCHLAKE_NOTIFY_MAX_ATTEMPTS", default_value_t = 8)]
    pub notify_max_attempts: u32,
    /// Delay after the first failed attempt (ms); doubled per attempt, with
    /// jitter, up to 10 minutes.
    #[arg(long, env = "BENCHLAKE_NOTIFY_BACKOFF_MS", default_value_t = 2_000)]
    pub notify_backoff_ms: u64,
    /// The dashboard's base URL as receivers reach it, for the run link in
    /// payloads (default: from --http-addr).
    #[arg(long, env = "BENCHLAKE_DASHBOARD_URL", value_name = "URL")]
    pub dashboard_url: Option<String>,
    /// An email notifier, NAME=ADDRESS[;ADDRESS…] (repeatable), sent
    /// through --smtp-url.
    #[arg(
        long = "email",
        env = "BENCHLAKE_EMAILS",
        value_delimiter = ',',
        value_name = "NAME=ADDRESS[;ADDRESS]"
    )]
    pub emails: Vec<String>,
    /// The SMTP server of email notifiers: smtp://HOST[:PORT] (no TLS),
    /// smtp+starttls://HOST[:PORT] (STARTTLS required) or smtps://HOST[:PORT].
    #[arg(long, env = "BENCHLAKE_SMTP_URL", value_name = "URL")]
    pub smtp_url: Option<String>,
    /// The sender address of notification emails.
    #[arg(long, env = "BENCHLAKE_SMTP_FROM", value_name = "ADDRESS")]
    pub smtp_from: Option<String>,
    /// SMTP login (with --smtp-password-file).
    #[arg(long, env = "BENCHLAKE_SMTP_USER")]
    pub smtp_user: Option<String>,
    /// File holding the SMTP password (trailing newline ignored).
    #[arg(long, env = "BENCHLAKE_SMTP_PASSWORD_FILE")]
    pub smtp_password_file: Option<PathBuf>,
    /// CA certificates (PEM) the SMTP server's certificate may chain to,
    /// besides the system's roots.
    #[arg(long, env = "BENCHLAKE_SMTP_CA")]
    pub smtp_ca: Option<PathBuf>,
}

/// Splits `NAME=VALUE` of flag `flag`.
fn name_value<'a>(flag: &str, s: &'a str) -> anyhow::Result<(&'a str, &'a str)> {
    let (n, v) = s
        .split_once('=')
        .with_context(|| format!("--{flag}: expected NAME=VALUE"))?;
    benchlake_coordinator::notify::check_name(&format!("--{flag}"), n)
        .map_err(anyhow::Error::msg)?;
    Ok((n, v))
}

impl NotifyArgs {
    /// The notifier settings; `http_base` is the dashboard's address when
    /// the coordinator serves one (the default of --dashboard-url).
    pub fn config(
        &self,
        http_base: Option<String>,
    ) -> anyhow::Result<benchlake_coordinator::notify::NotifyConfig> {
        use benchlake_coordinator::notify::{NotifyConfig, Webhook, parse_url};
        let mut secrets = std::collections::BTreeMap::new();
        for e in &self.webhook_secret_files {
            let (n, p) = name_value("webhook-secret-file", e)?;
            let text = std::fs::read(p)
                .with_context(|| format!("--webhook-secret-file {n}: reading {p}"))?;
            let key = text.strip_suffix(b"\n").unwrap_or(&text);
            let key = key.strip_suffix(b"\r").unwrap_or(key);
            if key.len() < 16 {
                bail!(
                    "--webhook-secret-file {n}: {p} holds {} bytes; use at least 16",
                    key.len()
                );
            }
            if secrets.insert(n.to_string(), key.to_vec()).is_some() {
                bail!("--webhook-secret-file {n}: given twice");
            }
        }
        let mut webhooks = Vec::new();
        for e in &self.webhooks {
            let (n, u) = name_value("webhook", e)?;
            let url = parse_url(&format!("--webhook {n}"), u).map_err(anyhow::Error::msg)?;
            let secret = secrets.remove(n);
            if secret.is_none() {
                tracing::warn!(
                    webhook = n,
                    "webhook without --webhook-secret-file: its requests are not signed"
                );
            }
            webhooks.push(Webhook {
                name: n.to_string(),
                url,
                secret,
            });
        }
        if let Some(n) = secrets.keys().next() {
            bail!("--webhook-secret-file {n}: no --webhook named '{n}'");
        }
        let mut emails = Vec::new();
        for e in &self.emails {
            let (n, to) = name_value("email", e)?;
            emails.push(benchlake_coordinator::notify::EmailNotifier {
                name: n.to_string(),
                to: to
                    .split(';')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(String::from)
                    .collect(),
            });
        }
        let smtp = match &self.smtp_url {
            None => {
                if self.smtp_from.is_some() || self.smtp_user.is_some() {
                    bail!("--smtp-from and --smtp-user need --smtp-url");
                }
                None
            }
            Some(u) => {
                let (security, host, port) = benchlake_coordinator::notify::parse_smtp_url(u)
                    .map_err(|e| anyhow::anyhow!("--{e}"))?;
                let password = match &self.smtp_password_file {
                    Some(p) => {
                        let t = std::fs::read_to_string(p).with_context(|| {
                            format!("--smtp-password-file: reading {}", p.display())
                        })?;
                        Some(t.trim_end_matches(['\n', '\r']).to_string())
                    }
                    None => None,
                };
                Some(benchlake_coordinator::notify::SmtpConfig {
                    security,
                    host,
                    port,
                    from: self
                        .smtp_from
                        .clone()
                        .context("--smtp-url needs --smtp-from (the sender address)")?,
                    user: self.smtp_user.clone(),
                    password,
                    ca_file: self.smtp_ca.clone(),
                })
            }
        };
        let cfg = NotifyConfig {
            webhooks,
            emails,
            smtp,
            defaults: self.notify_default.clone(),
            ca_file: self.webhook_ca.clone(),
            timeout_ms: self.notify_timeout_ms,
            max_attempts: self.notify_max_attempts,
            backoff_ms: self.notify_backoff_ms.max(1),
            dashboard_url: self.dashboard_url.clone().or(http_base),
            ..Default::default()
        };
        cfg.check().map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }
}

/// OpenID Connect sign-in for the dashboard (`coordinator`, `up`;
/// docs/configuration.md, "Dashboard sign-in with OpenID Connect"). The
/// client secret is read from --oidc-client-secret-file or the environment
/// variable BENCHLAKE_OIDC_CLIENT_SECRET, never from the command line.
#[derive(Debug, Clone, Default, Args)]
pub struct OidcArgs {
    /// The OpenID provider's issuer URL (Keycloak:
    /// https://HOST/realms/REALM); turns on "Sign in with …" on the login page.
    #[arg(long, env = "BENCHLAKE_OIDC_ISSUER", value_name = "URL")]
    pub oidc_issuer: Option<String>,
    /// This dashboard's client id at the provider.
    #[arg(long, env = "BENCHLAKE_OIDC_CLIENT_ID", value_name = "ID")]
    pub oidc_client_id: Option<String>,
    /// File holding the client secret (trailing newline ignored); else the
    /// environment variable BENCHLAKE_OIDC_CLIENT_SECRET.
    #[arg(long, env = "BENCHLAKE_OIDC_CLIENT_SECRET_FILE", value_name = "PATH")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// Where the provider sends the browser back, as the browser reaches the
    /// dashboard: http(s)://HOST[:PORT]/login/oidc/callback (default: from
    /// --http-addr).
    #[arg(long, env = "BENCHLAKE_OIDC_REDIRECT_URL", value_name = "URL")]
    pub oidc_redirect_url: Option<String>,
    /// Scopes asked for, comma-separated (openid among them).
    #[arg(
        long,
        env = "BENCHLAKE_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "openid,profile"
    )]
    pub oidc_scopes: Vec<String>,
    /// The claim holding the user's groups or roles (dots walk into
    /// objects: realm_access.roles).
    #[arg(long, env = "BENCHLAKE_OIDC_ROLES_CLAIM", default_value = "groups")]
    pub oidc_roles_claim: String,
    /// Claim value → benchlake role, VALUE=ROLE with ROLE admin or user
    /// (comma-separated or repeated; `*=user` admits everyone the provider
    /// signs in). The most privileged match wins; no match is refused.
    #[arg(
        long,
        env = "BENCHLAKE_OIDC_ROLE_MAP",
        value_delimiter = ',',
        value_name = "VALUE=ROLE"
    )]
    pub oidc_role_map: Vec<String>,
    /// The claim used as the user's name: the owner of the runs and
    /// schedules they create, as a token bound to that name (NAME:TOKEN).
    #[arg(
        long,
        env = "BENCHLAKE_OIDC_NAME_CLAIM",
        default_value = "preferred_username"
    )]
    pub oidc_name_claim: String,
    /// The provider's name on the login page ("Sign in with NAME").
    #[arg(
        long,
        env = "BENCHLAKE_OIDC_PROVIDER_NAME",
        default_value = "OpenID Connect"
    )]
    pub oidc_provider_name: String,
    /// CA certificates (PEM) the provider's certificate may chain to,
    /// besides the system's roots.
    #[arg(long, env = "BENCHLAKE_OIDC_CA", value_name = "PATH")]
    pub oidc_ca: Option<PathBuf>,
    /// Timeout of one request to the provider (ms).
    #[arg(long, env = "BENCHLAKE_OIDC_TIMEOUT_MS", default_value_t = 10_000)]
    pub oidc_timeout_ms: u64,
}

/// The environment variable that may hold the OpenID Connect client secret.
pub const OIDC_SECRET_ENV: &str = "BENCHLAKE_OIDC_CLIENT_SECRET";

impl OidcArgs {
    /// The sign-in settings (None without --oidc-issuer); `http_base` is the
    /// dashboard's address from --http-addr, the default of the redirect URL.
    pub fn config(
        &self,
        http_base: Option<String>,
    ) -> anyhow::Result<Option<benchlake_coordinator::oidc::OidcConfig>> {
        use benchlake_coordinator::oidc::{self, ClaimMapping, OidcConfig, Secret};
        let Some(issuer) = &self.oidc_issuer else {
            if self.oidc_client_id.is_some() || !self.oidc_role_map.is_empty() {
                bail!("--oidc-client-id and --oidc-role-map need --oidc-issuer");
            }
            return Ok(None);
        };
        let secret = match &self.oidc_client_secret_file {
            Some(p) => {
                let t = std::fs::read_to_string(p).with_context(|| {
                    format!("--oidc-client-secret-file: reading {}", p.display())
                })?;
                t.trim_end_matches(['\n', '\r']).to_string()
            }
            None => std::env::var(OIDC_SECRET_ENV).unwrap_or_default(),
        };
        let redirect_url = match (&self.oidc_redirect_url, http_base) {
            (Some(u), _) => u.clone(),
            (None, Some(b)) if !b.ends_with(":0") => format!("{b}{}", oidc::CALLBACK_PATH),
            _ => bail!(
                "--oidc-issuer needs --oidc-redirect-url (the dashboard's {} as browsers reach it) \
                 or an --http-addr with a fixed port",
                oidc::CALLBACK_PATH
            ),
        };
        let ca_pem = match &self.oidc_ca {
            Some(p) => Some(
                std::fs::read(p).with_context(|| format!("--oidc-ca: reading {}", p.display()))?,
            ),
            None => None,
        };
        let cfg = OidcConfig {
            issuer: issuer.clone(),
            client_id: self.oidc_client_id.clone().unwrap_or_default(),
            client_secret: Secret(secret),
            redirect_url,
            scopes: self
                .oidc_scopes
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            mapping: ClaimMapping {
                roles_claim: self.oidc_roles_claim.clone(),
                role_map: oidc::parse_role_map(&self.oidc_role_map)
                    .map_err(|e| anyhow::anyhow!("--{e}"))?,
                name_claim: self.oidc_name_claim.clone(),
            },
            display_name: self.oidc_provider_name.clone(),
            ca_pem,
            timeout: Duration::from_millis(self.oidc_timeout_ms.max(1)),
        };
        cfg.check().map_err(|e| anyhow::anyhow!("--{e}"))?;
        // Builds the HTTP client too (a bad --oidc-ca stops the start here).
        oidc::Provider::new(cfg.clone()).map_err(|e| anyhow::anyhow!("--{e}"))?;
        Ok(Some(cfg))
    }
}

/// The dashboard's URL from `--http-addr`: an unspecified address
/// (`0.0.0.0`, `[::]`) becomes this host's name, which receivers can reach.
fn dashboard_base(http_addr: &str, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    match http_addr.parse::<std::net::SocketAddr>() {
        Ok(sa) if sa.ip().is_unspecified() => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".into());
            format!("{scheme}://{host}:{}", sa.port())
        }
        _ => format!("{scheme}://{http_addr}"),
    }
}

/// `benchlake coordinator`.
#[derive(Debug, Clone, Args)]
pub struct CoordinatorArgs {
    /// Address to listen on.
    #[arg(long, env = "BENCHLAKE_LISTEN", default_value = "127.0.0.1:7700")]
    pub listen: String,
    /// State database: a SQLite file, or `postgres://USER@HOST:PORT/DB` for
    /// PostgreSQL, which several coordinators may share (one leads, the
    /// others wait without listening and take over when it stops).
    #[arg(
        long,
        env = "BENCHLAKE_STATE",
        default_value = "benchlake-data/state.db"
    )]
    pub state: String,
    #[command(flatten)]
    pub lake: LakeArgs,
    /// The scontrol program (and fixed arguments, space-separated) that drains
    /// and resumes Slurm nodes for schedules with a node action (docs/slurm.md).
    #[arg(long, env = "BENCHLAKE_SCONTROL", default_value = "scontrol")]
    pub scontrol: String,
    /// How long the lake keeps raw files and tables: TARGET=DURATION, TARGET
    /// being raw, tables (every table without a rule of its own) or a table
    /// name; DURATION Nd, Nw, Ny or forever (raw=90d,linktest_timings=2y).
    /// No rule: nothing is ever deleted (docs/configuration.md, "Retention").
    #[arg(long, env = "BENCHLAKE_RETENTION", value_delimiter = ',')]
    pub retention: Vec<String>,
    /// What a retention pass does with what the rules expire: dry-run (log
    /// and count in /metrics only), delete, or off.
    #[arg(long, env = "BENCHLAKE_RETENTION_MODE", default_value = "dry-run", value_parser = ["off", "dry-run", "delete"])]
    pub retention_mode: String,
    #[command(flatten)]
    pub compaction: CompactionArgs,
    #[command(flatten)]
    pub tokens: TokenArgs,
    #[command(flatten)]
    pub tuning: CoordTuning,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub notify: NotifyArgs,
    #[command(flatten)]
    pub oidc: OidcArgs,
}

/// When the coordinator merges its lake's small files (docs/configuration.md,
/// "The lake's layout and compaction").
#[derive(clap::Args, Debug, Clone)]
pub struct CompactionArgs {
    /// Merge each table month's small files through compact jobs run by
    /// workers: on or off.
    #[arg(long, env = "BENCHLAKE_COMPACTION", default_value = "on", value_parser = ["on", "off"])]
    pub compaction: String,
    /// Small files a table's month needs before it is merged.
    #[arg(long, env = "BENCHLAKE_COMPACT_MIN_FILES", default_value_t = 8)]
    pub compact_min_files: usize,
    /// A file under this many bytes is small.
    #[arg(long, env = "BENCHLAKE_COMPACT_SMALL_BYTES", default_value_t = 64 << 20)]
    pub compact_small_bytes: u64,
    /// A merge takes inputs up to about this many bytes.
    #[arg(long, env = "BENCHLAKE_COMPACT_TARGET_BYTES", default_value_t = 512 << 20)]
    pub compact_target_bytes: u64,
    /// Seconds a replaced file stays for readers that listed it before the
    /// merge (0: deleted within a second; readers that glob the lake may see
    /// a merged month's rows twice while it stays).
    #[arg(long, env = "BENCHLAKE_COMPACT_GRACE_S", default_value_t = 0)]
    pub compact_grace_s: u64,
    /// Seconds between two plans of merges.
    #[arg(long, env = "BENCHLAKE_COMPACT_EVERY_S", default_value_t = 3600)]
    pub compact_every_s: u64,
}

impl CompactionArgs {
    /// The coordinator's setting.
    pub fn config(&self) -> benchlake_coordinator::compaction::CompactionConfig {
        benchlake_coordinator::compaction::CompactionConfig {
            enabled: self.compaction == "on",
            min_files: self.compact_min_files.max(2),
            small_bytes: self.compact_small_bytes,
            target_bytes: self.compact_target_bytes,
            grace_ms: (self.compact_grace_s as i64).saturating_mul(1000),
            every_ms: (self.compact_every_s.max(1) as i64).saturating_mul(1000),
        }
    }
}

impl Default for CompactionArgs {
    fn default() -> Self {
        Self {
            compaction: "on".into(),
            compact_min_files: 8,
            compact_small_bytes: 64 << 20,
            compact_target_bytes: 512 << 20,
            compact_grace_s: 0,
            compact_every_s: 3600,
        }
    }
}

impl CoordinatorArgs {
    pub fn config(&self, default_lake: &str) -> anyhow::Result<CoordinatorConfig> {
        let t = &self.tuning;
        Ok(CoordinatorConfig {
            state_path: if is_postgres_url(&self.state) {
                CoordinatorConfig::default().state_path
            } else {
                PathBuf::from(&self.state)
            },
            state_postgres: is_postgres_url(&self.state).then(|| self.state.clone()),
            leader_lease_ms: t.leader_lease_ms,
            state_synchronous_commit: t.state_synchronous_commit,
            scontrol: benchlake_core::scontrol::Scontrol::from_command_line(&self.scontrol),
            retention: benchlake_coordinator::retention::RetentionConfig::parse(
                &self.retention_mode,
                &self.retention,
            )?,
            compaction: self.compaction.config(),
            store: self.lake.store(default_lake),
            lease_timeout_ms: t.lease_timeout_ms,
            heartbeat_interval_ms: t.heartbeat_ms,
            agent_lost_after_ms: t.lease_timeout_ms,
            job_lease_timeout_ms: t.job_lease_timeout_ms,
            task_max_attempts: t.task_max_attempts,
            job_max_attempts: t.job_max_attempts,
            retry_backoff_ms: t.retry_backoff_ms,
            tick_ms: t.tick_ms,
            tokens: self.tokens.tokens()?,
            tls_cert: self.tls.tls_cert.clone(),
            tls_key: self.tls.tls_key.clone(),
            tls_client_ca: self.tls.tls_client_ca.clone(),
            metrics_tokens: benchlake_coordinator::config::MetricsTokens(self.http.tokens()?),
            notify: self.notify.config(
                self.http
                    .http_addr
                    .as_deref()
                    .map(|a| dashboard_base(a, self.tls.tls_cert.is_some())),
            )?,
            oidc: self.oidc.config(
                self.http
                    .http_addr
                    .as_deref()
                    .map(|a| dashboard_base(a, self.tls.tls_cert.is_some())),
            )?,
            ..Default::default()
        })
    }
}

/// `benchlake agent`.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// Coordinator address, `host:port` or `https://host:port`; or a
    /// comma-separated list of the coordinators sharing one state database
    /// (`host1:7700,host2:7700`, all https:// or none): the leader is found
    /// by connecting, and found again when it changes.
    #[arg(long, env = "BENCHLAKE_COORDINATOR", default_value = "127.0.0.1:7700")]
    pub coordinator: String,
    /// Agent-role token.
    #[arg(long, env = "BENCHLAKE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Agent name (default: the host name).
    #[arg(long, env = "BENCHLAKE_AGENT_NAME")]
    pub name: Option<String>,
    /// Labels, KEY=VALUE (repeatable).
    #[arg(long = "label", env = "BENCHLAKE_AGENT_LABELS", value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Catalog file (TOML); default: the built-in catalog.
    #[arg(long, env = "BENCHLAKE_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Directory for task outputs.
    #[arg(
        long,
        env = "BENCHLAKE_WORK_DIR",
        default_value = "benchlake-data/work"
    )]
    pub work_dir: PathBuf,
    /// Tasks run at once.
    #[arg(long, env = "BENCHLAKE_SLOTS", default_value_t = 1)]
    pub slots: u32,
    /// Address other agents reach this one on (default: the host name).
    #[arg(long, env = "BENCHLAKE_AGENT_ADDRESS")]
    pub address: Option<String>,
    /// The mpirun command and fixed arguments, space-separated.
    #[arg(long, env = "BENCHLAKE_MPIRUN", default_value = "mpirun")]
    pub mpirun: String,
    /// The srun command and fixed arguments, space-separated (docs/slurm.md).
    #[arg(long, env = "BENCHLAKE_SRUN", default_value = "srun --mpi=pmix")]
    pub srun: String,
    /// The sbatch command and fixed arguments, space-separated (batch mode,
    /// docs/slurm.md); squeue, scontrol, scancel and sacct are taken from
    /// its directory when it is a path.
    #[arg(long, env = "BENCHLAKE_SBATCH", default_value = "sbatch")]
    pub sbatch: String,
    /// Idle poll period (ms): the longest one poll waits at the coordinator
    /// (answered as soon as a task is queued for this agent), and the least
    /// time between two empty polls.
    #[arg(long, env = "BENCHLAKE_POLL_MS", default_value_t = 1000)]
    pub poll_ms: u64,
    /// How long calls to the coordinator (poll, heartbeat, upload, completion)
    /// are retried through an outage before giving up: seconds, or with a unit
    /// (`500ms`, `90s`, `5m`, `1h`).
    #[arg(long, env = "BENCHLAKE_RETRY_FOR", default_value = "120", value_parser = parse_duration)]
    pub retry_for: Duration,
    /// Keep task directories after upload.
    #[arg(long, env = "BENCHLAKE_KEEP_WORK")]
    pub keep_work: bool,
    /// User that benchmarks whose catalog entry names no `run_as` run as. An
    /// agent running as root refuses such entries without it; `root` allows root.
    #[arg(long, env = "BENCHLAKE_RUN_AS")]
    pub run_as: Option<String>,
    /// Directory of the applications `traced` runs may start (`{apps_dir}`);
    /// without it no traced run is accepted.
    #[arg(long, env = "BENCHLAKE_APPS_DIR")]
    pub apps_dir: Option<PathBuf>,
    /// Scratch directory path parameters may name (`{scratch_dir}`, e.g. a
    /// parallel file system for pio/IOR test files).
    #[arg(long, env = "BENCHLAKE_SCRATCH_DIR")]
    pub scratch_dir: Option<PathBuf>,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub http: HttpArgs,
}

impl AgentArgs {
    pub fn config(&self) -> anyhow::Result<benchlake_agent::AgentConfig> {
        let mut c = benchlake_agent::AgentConfig::new(&self.coordinator, &self.work_dir)?;
        c.token = self.token.clone();
        if let Some(n) = &self.name {
            c.name = n.clone();
        }
        let mut labels = BTreeMap::new();
        for l in &self.labels {
            let (k, v) = l
                .split_once('=')
                .with_context(|| format!("label '{l}' is not KEY=VALUE"))?;
            labels.insert(k.trim().to_string(), v.trim().to_string());
        }
        c.labels = labels;
        if let Some(p) = &self.catalog {
            c.catalog = benchlake_agent::load_catalog(p)?;
        }
        c.slots = self.slots.max(1);
        if let Some(a) = &self.address {
            c.address = a.clone();
        }
        c.mpirun = self.mpirun.split_whitespace().map(String::from).collect();
        if c.mpirun.is_empty() {
            bail!("--mpirun is empty");
        }
        c.srun = self.srun.split_whitespace().map(String::from).collect();
        if c.srun.is_empty() {
            bail!("--srun is empty");
        }
        c.sbatch = self.sbatch.split_whitespace().map(String::from).collect();
        if c.sbatch.is_empty() {
            bail!("--sbatch is empty");
        }
        c.poll_interval = Duration::from_millis(self.poll_ms.max(10));
        c.retry_for = self.retry_for;
        c.keep_work = self.keep_work;
        c.run_as = self.run_as.clone();
        c.apps_dir = self.apps_dir.clone();
        c.scratch_dir = self.scratch_dir.clone();
        c.tls = self.tls.load()?;
        Ok(c)
    }
}

/// `benchlake worker`.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Coordinator address, `host:port` or `https://host:port`; or a
    /// comma-separated list of the coordinators sharing one state database
    /// (`host1:7700,host2:7700`, all https:// or none): the leader is found
    /// by connecting, and found again when it changes.
    #[arg(long, env = "BENCHLAKE_COORDINATOR", default_value = "127.0.0.1:7700")]
    pub coordinator: String,
    /// Worker-role token.
    #[arg(long, env = "BENCHLAKE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Worker name (default: worker-<hostname>-<pid>).
    #[arg(long, env = "BENCHLAKE_WORKER_NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub lake: LakeArgs,
    /// Jobs run at once (default: the number of cores).
    #[arg(long, env = "BENCHLAKE_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// Scratch directory.
    #[arg(
        long,
        env = "BENCHLAKE_SCRATCH",
        default_value = "benchlake-data/scratch"
    )]
    pub scratch: PathBuf,
    /// Fault injection (tests): pause between staging and commit (ms).
    #[arg(
        long,
        env = "BENCHLAKE_FAULT_COMMIT_DELAY_MS",
        default_value_t = 0,
        hide = true
    )]
    pub fault_commit_delay_ms: u64,
    /// How long calls to the coordinator (lease, renew, complete, fail) and
    /// staging writes to the lake are retried through an outage before giving
    /// up: seconds, or with a unit (`500ms`, `90s`, `5m`, `1h`).
    #[arg(long, env = "BENCHLAKE_RETRY_FOR", default_value = "120", value_parser = parse_duration)]
    pub retry_for: Duration,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub http: HttpArgs,
}

impl WorkerArgs {
    pub fn config(&self) -> benchlake_worker::WorkerConfig {
        benchlake_worker::WorkerConfig {
            coordinator: self.coordinator.clone(),
            token: self.token.clone(),
            name: self.name.clone().unwrap_or_else(|| {
                format!(
                    "worker-{}-{}",
                    benchlake_agent::host::hostname(),
                    std::process::id()
                )
            }),
            store: self.lake.store("benchlake-data/lake"),
            concurrency: self
                .concurrency
                .unwrap_or_else(benchlake_core::threads::available),
            scratch_dir: self.scratch.clone(),
            lease_wait: Duration::from_secs(10),
            commit_delay: Duration::from_millis(self.fault_commit_delay_ms),
            retry_for: self.retry_for,
        }
    }
}

/// A duration flag: seconds (`120`, `1.5`), or a number with `ms`, `s`, `m` or `h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 120, 90s, 5m, 500ms)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        u => return Err(format!("'{s}': unknown unit '{u}' (ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("'{s}': {e}"))
}

/// A watch that turns true on Ctrl-C or SIGTERM.
pub fn shutdown_signal() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
        tracing::info!("shutting down");
        let _ = tx.send(true);
    });
    rx
}

/// Resolves when `rx` turns true.
pub async fn until(mut rx: tokio::sync::watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

pub async fn run_coordinator(a: CoordinatorArgs) -> anyhow::Result<()> {
    let cfg = a.config("benchlake-data/lake")?;
    let public = !a.listen.starts_with("127.") && !a.listen.starts_with("localhost");
    if public && cfg.tls_cert.is_none() {
        tracing::warn!(
            "no TLS certificate: tokens and data cross the network in plaintext; \
             give --tls-cert and --tls-key"
        );
    }
    if !cfg.tokens.enabled() && public {
        tracing::warn!(
            "no tokens configured: anyone who reaches {} can use the coordinator",
            a.listen
        );
    }
    let listener = benchlake_coordinator::listen::bind(&a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    let http = a.http.bind().await?;
    let sd = shutdown_signal();
    benchlake_coordinator::run_with(cfg, listener, http, until(sd)).await?;
    Ok(())
}

pub async fn run_agent(a: AgentArgs) -> anyhow::Result<()> {
    let cfg = a.config()?;
    let sd = shutdown_signal();
    let probe = benchlake_agent::health::AgentProbe {
        work_dir: cfg.work_dir.clone(),
        coordinator: cfg.coordinator.clone(),
    };
    a.http
        .serve_probe(std::sync::Arc::new(probe), sd.clone())
        .await?;
    benchlake_agent::run(cfg, sd).await?;
    Ok(())
}

pub async fn run_worker(a: WorkerArgs) -> anyhow::Result<()> {
    let cfg = a.config();
    let sd = shutdown_signal();
    let probe = benchlake_worker::health::WorkerProbe {
        lake: benchlake_core::lake::Lake::open(&cfg.store)?,
        name: cfg.name.clone(),
        coordinator: cfg.coordinator.clone(),
    };
    a.http
        .serve_probe(std::sync::Arc::new(probe), sd.clone())
        .await?;
    benchlake_worker::run_with_tls(
        cfg,
        a.tls.load()?,
        benchlake_worker::Executors::builtin(),
        sd,
    )
    .await
    .map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dashboard_link_names_a_reachable_host() {
        assert_eq!(
            dashboard_base("10.1.2.3:8080", false),
            "http://10.1.2.3:8080"
        );
        assert_eq!(
            dashboard_base("bench.example.org:443", true),
            "https://bench.example.org:443"
        );
        let any = dashboard_base("0.0.0.0:8080", false);
        assert!(
            any.starts_with("http://") && any.ends_with(":8080"),
            "{any}"
        );
        assert!(!any.contains("0.0.0.0"), "{any}");
        assert!(!dashboard_base("[::]:9", true).contains("[::]"));
    }

    #[test]
    fn notifier_flags_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("s");
        std::fs::write(&secret, "short\n").unwrap();
        let args = |w: &[&str], s: &[&str]| NotifyArgs {
            webhooks: w.iter().map(|x| x.to_string()).collect(),
            webhook_secret_files: s.iter().map(|x| x.to_string()).collect(),
            notify_timeout_ms: 10_000,
            notify_max_attempts: 8,
            notify_backoff_ms: 2_000,
            ..Default::default()
        };
        let e = args(&["ops=http://h/"], &[&format!("ops={}", secret.display())])
            .config(None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 16"), "{e}");
        std::fs::write(&secret, "0123456789abcdef-secret\n").unwrap();
        let cfg = args(&["ops=http://h/"], &[&format!("ops={}", secret.display())])
            .config(Some("http://d:1".into()))
            .unwrap();
        assert_eq!(
            cfg.webhooks[0].secret.as_deref(),
            Some(&b"0123456789abcdef-secret"[..])
        );
        assert_eq!(cfg.dashboard_url.as_deref(), Some("http://d:1"));
        let e = args(&["ops"], &[]).config(None).unwrap_err().to_string();
        assert!(e.contains("--webhook: expected NAME=VALUE"), "{e}");
        let e = args(&["a b=http://h/"], &[])
            .config(None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a notifier name"), "{e}");
        let e = args(&[], &[&format!("x={}", secret.display())])
            .config(None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no --webhook named 'x'"), "{e}");
    }
}
