//! Notifications of runs that end badly: webhooks (an HTTP POST of JSON,
//! signed with HMAC-SHA256 of a shared secret), retried with backoff from a
//! durable outbox in the state store (docs/notifications.md).
//!
//! This module owns the notifier settings ([`NotifyConfig`]: named webhooks
//! from the coordinator's configuration, never from the user API, and the
//! default list), the outbox rows' life ([`enqueue`] in the transaction of a
//! run's final transition; [`Outbox`] delivering them), the payload and its
//! signature.
//!
//! A run that ends FAILED, or whose checks give the verdict FAIL or ERROR,
//! is notified once to each of its notifiers (the run's own, from its
//! schedule, and the configured defaults). CANCELLED runs are not notified:
//! someone cancelled them. The `checks` of a run are committed by its own
//! jobs before its record job and so before its final transition: the
//! outbox row is written in that transaction (one per run and notifier,
//! unique in the store), and the sender reads the run's committed `checks`
//! and `node_health` rows from the lake when it first handles the row, so
//! the verdict it reports is the run's whole verdict, and a run whose checks
//! all passed is marked SKIPPED without a request. Only the coordinator that
//! leads sends (a standby serves nothing; on PostgreSQL a deposed leader's
//! writes are refused), and the body built once is stored with the row, so a
//! retry — after a restart or a takeover too — sends the same bytes and the
//! same delivery id.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hmac::{KeyInit, Mac};
use serde::Serialize;

use crate::Coordinator;
use crate::config::CoordinatorConfig;
use crate::error::{CoordError, Result};
use crate::model::*;
use crate::store::Tx;
use crate::verdicts::CheckRow;

/// How long ended outbox rows are kept (30 days): `run show` lists them.
pub const KEEP_MS: i64 = 30 * 86_400_000;
/// How often the sender removes older ones (hourly).
pub const PRUNE_EVERY_MS: i64 = 3_600_000;

/// Header with `sha256=<hex HMAC-SHA256(secret, body)>`.
pub const SIGNATURE_HEADER: &str = "X-Benchlake-Signature";
/// Header with `sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
pub const SIGNATURE_TS_HEADER: &str = "X-Benchlake-Signature-Timestamped";
/// Header with the Unix time (seconds) of the attempt.
pub const TIMESTAMP_HEADER: &str = "X-Benchlake-Timestamp";
/// Header with the event name.
pub const EVENT_HEADER: &str = "X-Benchlake-Event";
/// Header with the delivery id (the same on every attempt of a delivery).
pub const DELIVERY_HEADER: &str = "X-Benchlake-Delivery";

/// A webhook notifier.
#[derive(Clone)]
pub struct Webhook {
    /// Its name (schedules and the defaults name it).
    pub name: String,
    /// `http://` or `https://` URL.
    pub url: reqwest::Url,
    /// HMAC key; without one, requests carry no signature.
    pub secret: Option<Vec<u8>>,
}

impl std::fmt::Debug for Webhook {
    // The secret is never printed, nor a URL's path or query (a Slack-style
    // URL is a secret itself).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Webhook {{ name: {}, url: {}, signed: {} }}",
            self.name,
            redact_url(&self.url),
            self.secret.is_some()
        )
    }
}

/// `scheme://host:port/…` of `url` (its path, query and credentials hidden).
pub fn redact_url(url: &reqwest::Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let path = if url.path() == "/" && url.query().is_none() {
        "/"
    } else {
        "/…"
    };
    format!(
        "{}://{}{port}{path}",
        url.scheme(),
        url.host_str().unwrap_or("")
    )
}

/// An email notifier: its recipients, sent through [`SmtpConfig`].
#[derive(Debug, Clone)]
pub struct EmailNotifier {
    /// Its name (schedules and the defaults name it).
    pub name: String,
    /// Recipient addresses (checked at start-up).
    pub to: Vec<String>,
}

/// How the SMTP server is reached (`--smtp-url`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// `smtp://`: no TLS (a relay on the same host or a private network).
    Plain,
    /// `smtp+starttls://`: STARTTLS required before anything is sent.
    StartTls,
    /// `smtps://`: TLS from the first byte.
    Tls,
}

/// The SMTP server of email notifiers.
#[derive(Clone)]
pub struct SmtpConfig {
    pub security: SmtpSecurity,
    pub host: String,
    pub port: u16,
    /// The sender address.
    pub from: String,
    /// Login (AUTH PLAIN/LOGIN) when given.
    pub user: Option<String>,
    /// Its password (read from a file; never printed).
    pub password: Option<String>,
    /// Extra CA certificates (PEM) the server's certificate may chain to.
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SmtpConfig {{ {:?} {}:{}, from: {}, user: {:?}, password: {} }}",
            self.security,
            self.host,
            self.port,
            self.from,
            self.user,
            if self.password.is_some() {
                "***"
            } else {
                "none"
            }
        )
    }
}

/// Parses `--smtp-url`: `smtp://HOST[:PORT]` (port 25), `smtp+starttls://`
/// (587) or `smtps://` (465); no credentials, path or query.
pub fn parse_smtp_url(s: &str) -> std::result::Result<(SmtpSecurity, String, u16), String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("smtp-url: '{s}' is not a URL: {e}"))?;
    let (sec, port) = match url.scheme() {
        "smtp" => (SmtpSecurity::Plain, 25),
        "smtp+starttls" => (SmtpSecurity::StartTls, 587),
        "smtps" => (SmtpSecurity::Tls, 465),
        o => {
            return Err(format!(
                "smtp-url: scheme '{o}' is not allowed (smtp, smtp+starttls or smtps)"
            ));
        }
    };
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| "smtp-url: the URL has no host".to_string())?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "smtp-url: credentials in the URL are not allowed (--smtp-user, --smtp-password-file)"
                .into(),
        );
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() {
        return Err("smtp-url: a path or query is not allowed".into());
    }
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((sec, host, url.port().unwrap_or(port)))
}

/// Checks an email address (as the SMTP envelope takes it).
pub fn check_address(field: &str, a: &str) -> std::result::Result<(), String> {
    a.parse::<lettre::Address>()
        .map(|_| ())
        .map_err(|e| format!("{field}: '{a}' is not an email address: {e}"))
}

/// The notifier settings of the coordinator.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// Webhooks by name.
    pub webhooks: Vec<Webhook>,
    /// Email notifiers by name.
    pub emails: Vec<EmailNotifier>,
    /// The SMTP server (needed by email notifiers).
    pub smtp: Option<SmtpConfig>,
    /// Notifiers told about every run (besides the run's own).
    pub defaults: Vec<String>,
    /// Extra CA certificates (PEM) an `https://` receiver may chain to,
    /// besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Timeout of one attempt.
    pub timeout_ms: u64,
    /// Attempts of a delivery before it is given up.
    pub max_attempts: u32,
    /// Delay after the first failed attempt; doubles per attempt (with
    /// jitter), up to `backoff_max_ms`.
    pub backoff_ms: u64,
    /// Largest delay between two attempts.
    pub backoff_max_ms: u64,
    /// Base URL of the dashboard as receivers reach it (links in payloads);
    /// none: no link.
    pub dashboard_url: Option<String>,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            webhooks: Vec::new(),
            emails: Vec::new(),
            smtp: None,
            defaults: Vec::new(),
            ca_file: None,
            timeout_ms: 10_000,
            max_attempts: 8,
            backoff_ms: 2_000,
            backoff_max_ms: 600_000,
            dashboard_url: None,
        }
    }
}

/// Checks a notifier name: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn check_name(field: &str, name: &str) -> std::result::Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(format!(
            "{field}: '{name}' is not a notifier name (1 to 64 of A-Z a-z 0-9 . _ -)"
        ));
    }
    Ok(())
}

/// Parses a webhook URL: `http` or `https` with a host, no credentials.
pub fn parse_url(field: &str, s: &str) -> std::result::Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("{field}: '{s}' is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{field}: scheme '{}' is not allowed (http or https)",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{field}: the URL has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "{field}: credentials in the URL are not allowed (sign with --webhook-secret-file)"
        ));
    }
    Ok(url)
}

impl NotifyConfig {
    /// Whether any notifier is configured.
    pub fn enabled(&self) -> bool {
        !self.webhooks.is_empty() || !self.emails.is_empty()
    }

    /// The email notifier named `name`.
    pub fn email(&self, name: &str) -> Option<&EmailNotifier> {
        self.emails.iter().find(|e| e.name == name)
    }

    /// Whether a notifier named `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.webhook(name).is_some() || self.email(name).is_some()
    }

    /// The webhook named `name`.
    pub fn webhook(&self, name: &str) -> Option<&Webhook> {
        self.webhooks.iter().find(|w| w.name == name)
    }

    /// Names of every notifier.
    pub fn names(&self) -> Vec<&str> {
        self.webhooks
            .iter()
            .map(|w| w.name.as_str())
            .chain(self.emails.iter().map(|e| e.name.as_str()))
            .collect()
    }

    /// Checks the settings: unique names, defaults that exist, sane numbers.
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for w in &self.webhooks {
            check_name("webhook", &w.name)?;
            if !seen.insert(w.name.as_str()) {
                return Err(format!("webhook: '{}' is defined twice", w.name));
            }
        }
        for e in &self.emails {
            check_name("email", &e.name)?;
            if !seen.insert(e.name.as_str()) {
                return Err(format!("email: '{}' is defined twice", e.name));
            }
            if e.to.is_empty() {
                return Err(format!("email {}: no recipient", e.name));
            }
            for a in &e.to {
                check_address(&format!("email {}", e.name), a)?;
            }
        }
        if !self.emails.is_empty() {
            let Some(s) = &self.smtp else {
                return Err("email: email notifiers need --smtp-url and --smtp-from".into());
            };
            check_address("smtp-from", &s.from)?;
            if s.password.is_some() && s.user.is_none() {
                return Err("smtp-password-file: needs --smtp-user".into());
            }
            if s.user.is_some() && s.security == SmtpSecurity::Plain {
                return Err(
                    "smtp-user: a login over smtp:// would travel in clear; use smtp+starttls:// or smtps://"
                        .into(),
                );
            }
        }
        for d in &self.defaults {
            if !self.has(d) {
                return Err(format!(
                    "notify-default: no notifier named '{d}' (known: {})",
                    self.names().join(", ")
                ));
            }
        }
        if self.max_attempts == 0 || self.max_attempts > 100 {
            return Err("notify-max-attempts: must be 1 to 100".into());
        }
        if self.timeout_ms == 0 {
            return Err("notify-timeout-ms: must be above 0".into());
        }
        if let Some(u) = &self.dashboard_url {
            parse_url("dashboard-url", u)?;
        }
        Ok(())
    }

    /// Refuses names that are not configured notifiers (`field` names the
    /// request field).
    pub fn check_names(&self, field: &str, names: &[String]) -> Result<()> {
        for n in names {
            check_name(field, n).map_err(CoordError::Invalid)?;
            if !self.has(n) {
                let known = self.names();
                return Err(CoordError::invalid(
                    field,
                    if known.is_empty() {
                        format!(
                            "no notifier named '{n}': the coordinator has none configured (--webhook, --email)"
                        )
                    } else {
                        format!("no notifier named '{n}' (known: {})", known.join(", "))
                    },
                ));
            }
        }
        Ok(())
    }
}

/// `sha256=<hex HMAC-SHA256(key, message)>`.
pub fn sign(key: &[u8], message: &[u8]) -> String {
    // HMAC takes keys of any length.
    let mut m = <hmac::Hmac<sha2_11::Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    m.update(message);
    format!("sha256={}", hex::encode(m.finalize().into_bytes()))
}

/// The timestamped signature's message: `"<timestamp>.<body>"`.
pub fn timestamped(ts: i64, body: &[u8]) -> Vec<u8> {
    let mut v = format!("{ts}.").into_bytes();
    v.extend_from_slice(body);
    v
}

/// Delay before attempt `attempt + 1` after `attempt` failed ones:
/// `base · 2^(attempt−1)`, capped at `max`, then scaled by `jitter` in
/// `[0.5, 1.0]` ("equal jitter": receivers that came back are not hit by
/// every coordinator's retries in the same second).
pub fn backoff_ms(base: u64, max: u64, attempt: u32, jitter: f64) -> i64 {
    let exp = attempt.saturating_sub(1).min(30);
    let d = base.max(1).saturating_mul(1u64 << exp).min(max.max(1)) as f64;
    (d * jitter.clamp(0.5, 1.0)).round() as i64
}

/// The notifiers of `run`: its own, then the defaults, once each.
pub fn notifiers_of(cfg: &NotifyConfig, run: &RunRow) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in run.notify.iter().chain(&cfg.defaults) {
        if !out.contains(n) {
            out.push(n.clone());
        }
    }
    out
}

/// Called in the transaction of `run`'s final transition: an outbox row per
/// notifier of the run when the run may need telling — it FAILED, or it
/// committed `checks` or `node_health` rows (their verdict is read when the
/// row is sent). Rows are unique per (run, notifier): a second call adds
/// nothing. Returns whether a row was written.
pub fn enqueue(tx: &mut dyn Tx, cfg: &CoordinatorConfig, run: &RunRow, now: i64) -> Result<bool> {
    if !run.state.is_final() || run.state == RunState::Cancelled {
        return Ok(false);
    }
    let names = notifiers_of(&cfg.notify, run);
    if names.is_empty() {
        return Ok(false);
    }
    if run.state != RunState::Failed {
        let checked = tx
            .committed_files_of_run(&run.run_id)?
            .iter()
            .any(|f| f.table == "checks" || f.table == "node_health");
        if !checked {
            return Ok(false);
        }
    }
    for n in names {
        tx.insert_notification(&NotificationRow::new(&run.run_id, &n, now))?;
    }
    Ok(true)
}

/// One failing check in a payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailingCheck {
    pub check: String,
    pub status: String,
    pub value: Option<f64>,
    pub reference: Option<f64>,
    pub unit: String,
    pub message: String,
    /// The change point of a REGRESSION (or of a FAIL it explains).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_run: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_date: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

impl From<&CheckRow> for FailingCheck {
    fn from(r: &CheckRow) -> Self {
        Self {
            check: r.check.clone(),
            status: r.status.clone(),
            value: r.value,
            reference: r.reference,
            unit: r.unit.clone(),
            message: r.message.clone(),
            since_run: r.since_run.clone(),
            since_date: r.since_date.clone(),
            step: r.step,
            confidence: r.confidence,
        }
    }
}

/// A node with failing checks in a payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailingNode {
    pub node: String,
    /// Its failing checks: `node_health` rows of the node, or the run's
    /// failing checks when the run has no `node_health` rows.
    pub checks: Vec<FailingCheck>,
}

/// The `node_health` rows (node, row) of decoded batches (the one reader:
/// [`crate::verdicts::node_rows`]).
pub use crate::verdicts::node_rows;

/// Whether a check status is failing (FAIL, REGRESSION or ERROR).
/// INCONCLUSIVE and NO_REFERENCE never are: they are not notified
/// (docs/notifications.md).
fn failing(status: &str) -> bool {
    benchlake_core::verdict::is_failure(status) || status == "ERROR"
}

/// What the sender learnt about a run: the payload's facts.
#[derive(Debug, Clone)]
pub struct RunFacts {
    pub run: RunRow,
    pub schedule_name: Option<String>,
    /// Agents of the run's tasks, sorted.
    pub agents: Vec<String>,
    /// Rows of the run's `checks` files.
    pub checks: Vec<CheckRow>,
    /// Rows of the run's `node_health` files.
    pub nodes: Vec<(String, CheckRow)>,
}

impl RunFacts {
    /// The run's verdict: the worst of its checks and node checks.
    pub fn verdict(&self) -> Option<&'static str> {
        crate::verdicts::worst(
            self.checks
                .iter()
                .map(|r| r.status.as_str())
                .chain(self.nodes.iter().map(|(_, r)| r.status.as_str())),
        )
    }

    /// The event to send, or None when the run ended well (nothing to say).
    pub fn event(&self) -> Option<&'static str> {
        if self.run.state == RunState::Failed {
            return Some("run.failed");
        }
        match self.verdict() {
            Some("FAIL") => Some("verdict.fail"),
            Some("REGRESSION") => Some("verdict.regression"),
            Some("ERROR") => Some("verdict.error"),
            _ => None,
        }
    }

    /// The failing checks of the run (its `checks` rows that are not PASS).
    pub fn failing_checks(&self) -> Vec<FailingCheck> {
        self.checks
            .iter()
            .filter(|r| failing(&r.status))
            .map(FailingCheck::from)
            .collect()
    }

    /// The failing nodes: from `node_health` when the run has such rows,
    /// else every agent of a run with failing checks (the run's checks are
    /// over all its nodes).
    pub fn failing_nodes(&self) -> Vec<FailingNode> {
        let mut by: BTreeMap<String, Vec<FailingCheck>> = BTreeMap::new();
        if !self.nodes.is_empty() {
            for (n, r) in self.nodes.iter().filter(|(_, r)| failing(&r.status)) {
                by.entry(n.clone()).or_default().push(r.into());
            }
        } else {
            let checks = self.failing_checks();
            if !checks.is_empty() {
                for a in &self.agents {
                    by.insert(a.clone(), checks.clone());
                }
            }
        }
        by.into_iter()
            .map(|(node, checks)| FailingNode { node, checks })
            .collect()
    }
}

/// ISO 8601 UTC of epoch milliseconds.
fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The JSON body of a notification (docs/notifications.md lists the fields).
pub fn payload(
    facts: &RunFacts,
    event: &str,
    delivery_id: &str,
    notifier: &str,
    dashboard_url: Option<&str>,
    now: i64,
) -> String {
    let r = &facts.run;
    let opt = |v: Option<i64>| v.map(iso);
    let link = dashboard_url.map(|u| format!("{}/runs/{}", u.trim_end_matches('/'), r.run_id));
    let v = serde_json::json!({
        "event": event,
        "delivery_id": delivery_id,
        "notifier": notifier,
        "time": iso(now),
        "run": {
            "run_id": r.run_id,
            "status": r.state.as_str(),
            "verdict": facts.verdict(),
            "benchmark": r.benchmark,
            "kind": r.kind,
            "params": r.spec.params,
            "agents": facts.agents,
            "error": r.error,
            "submitted_at": iso(r.submitted_at_ms),
            "started_at": opt(r.started_at_ms),
            "finished_at": opt(r.finished_at_ms),
            "scheduled_for": opt(r.scheduled_for_ms),
            "date": r.date,
        },
        "schedule": r.schedule_id.as_ref().map(|id| serde_json::json!({
            "schedule_id": id,
            "name": facts.schedule_name,
        })),
        "failing_checks": facts.failing_checks(),
        "failing_nodes": facts.failing_nodes(),
        "links": { "run": link },
    });
    v.to_string()
}

/// Reads what the payload of `run_id` says: the run, its schedule's name,
/// its agents, and its committed `checks` and `node_health` rows.
pub async fn run_facts(c: &Coordinator, run_id: &str) -> Result<RunFacts> {
    let id = run_id.to_string();
    let (run, schedule_name, agents, files) = c
        .db(move |tx| {
            let run = tx
                .get_run(&id)?
                .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{id}'")))?;
            let schedule_name = match &run.schedule_id {
                Some(s) => tx.get_schedule(s)?.map(|s| s.name),
                None => None,
            };
            let mut agents: Vec<String> = tx
                .tasks_of_run(&id)?
                .into_iter()
                .flat_map(|t| t.peers)
                .collect();
            agents.sort();
            agents.dedup();
            let files: Vec<CommittedFile> = tx
                .committed_files_of_run(&id)?
                .into_iter()
                .filter(|f| f.table == "checks" || f.table == "node_health")
                .collect();
            Ok((run, schedule_name, agents, files))
        })
        .await?;
    let mut checks = Vec::new();
    let mut nodes = Vec::new();
    for f in files {
        let batches = c.lake.read_parquet(&f.key).await?;
        if f.table == "checks" {
            checks.extend(crate::verdicts::check_rows(&batches));
        } else {
            nodes.extend(node_rows(&batches));
        }
    }
    Ok(RunFacts {
        run,
        schedule_name,
        agents,
        checks,
        nodes,
    })
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// 2xx.
    Delivered(u16),
    /// A 4xx other than 408 and 429: the receiver refuses it; not retried.
    Rejected(u16),
    /// 5xx, 408, 429 or no answer: retried. The receiver's `Retry-After`
    /// (seconds) when it gave one.
    Failed(String, Option<u64>),
}

/// The verdict on an HTTP status.
pub fn classify(status: u16) -> Attempt {
    match status {
        200..=299 => Attempt::Delivered(status),
        408 | 429 => Attempt::Failed(format!("HTTP {status}"), None),
        400..=499 => Attempt::Rejected(status),
        _ => Attempt::Failed(format!("HTTP {status}"), None),
    }
}

/// Sends the outbox's rows (see the module docs): the leader's delivery loop.
pub struct Outbox {
    client: reqwest::Client,
    /// The SMTP transport of email notifiers (connections per message).
    smtp: Option<(
        lettre::AsyncSmtpTransport<lettre::Tokio1Executor>,
        lettre::message::Mailbox,
    )>,
}

/// The SMTP transport of `s`: TLS verified against the system's roots and
/// `ca_file`.
fn smtp_transport(
    s: &SmtpConfig,
    timeout: Duration,
) -> std::result::Result<lettre::AsyncSmtpTransport<lettre::Tokio1Executor>, String> {
    use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
    let params = || -> std::result::Result<TlsParameters, String> {
        let mut b = TlsParameters::builder(s.host.clone());
        if let Some(p) = &s.ca_file {
            let pem = std::fs::read(p)
                .map_err(|e| format!("smtp-ca {}: cannot read: {e}", p.display()))?;
            let cert = Certificate::from_pem(&pem)
                .map_err(|e| format!("smtp-ca {}: not PEM certificates: {e}", p.display()))?;
            b = b.add_root_certificate(cert);
        }
        b.build_rustls().map_err(|e| format!("smtp TLS: {e}"))
    };
    let tls = match s.security {
        SmtpSecurity::Plain => Tls::None,
        SmtpSecurity::StartTls => Tls::Required(params()?),
        SmtpSecurity::Tls => Tls::Wrapper(params()?),
    };
    let mut b = lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::builder_dangerous(&s.host)
        .port(s.port)
        .tls(tls)
        .timeout(Some(timeout));
    if let Some(u) = &s.user {
        b = b.credentials(lettre::transport::smtp::authentication::Credentials::new(
            u.clone(),
            s.password.clone().unwrap_or_default(),
        ));
    }
    Ok(b.build())
}

/// A header of ours on an email (`X-Benchlake-Event`, `X-Benchlake-Delivery`).
macro_rules! mail_header {
    ($t:ident, $name:literal) => {
        #[derive(Debug, Clone)]
        struct $t(String);
        impl lettre::message::header::Header for $t {
            fn name() -> lettre::message::header::HeaderName {
                lettre::message::header::HeaderName::new_from_ascii_str($name)
            }
            fn parse(
                s: &str,
            ) -> std::result::Result<Self, Box<dyn std::error::Error + Send + Sync>> {
                Ok(Self(s.to_string()))
            }
            fn display(&self) -> lettre::message::header::HeaderValue {
                lettre::message::header::HeaderValue::new(Self::name(), self.0.clone())
            }
        }
    };
}
mail_header!(MailEvent, "X-Benchlake-Event");
mail_header!(MailDelivery, "X-Benchlake-Delivery");

/// A figure for a mail: up to 6 significant digits, no exponent for
/// ordinary magnitudes.
fn figure(v: &serde_json::Value) -> String {
    match v.as_f64() {
        Some(f) if f.is_finite() && f.abs() >= 1e-3 && f.abs() < 1e15 => {
            let s = format!("{f:.3}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
        Some(f) => format!("{f:e}"),
        None => "-".into(),
    }
}

/// Subject and plain text of a notification email, from its JSON payload.
pub fn email_text(payload: &str) -> (String, String) {
    let v: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
    let s = |p: &[&str]| -> String {
        let mut cur = &v;
        for k in p {
            cur = &cur[*k];
        }
        cur.as_str().unwrap_or("").to_string()
    };
    let (run_id, bench, status) = (
        s(&["run", "run_id"]),
        s(&["run", "benchmark"]),
        s(&["run", "status"]),
    );
    let verdict = s(&["run", "verdict"]);
    let schedule = s(&["schedule", "name"]);
    let what = if status == "FAILED" {
        "FAILED".to_string()
    } else {
        verdict.clone()
    };
    let mut subject = format!("[benchlake] {what}: {bench} run {run_id}");
    if !schedule.is_empty() {
        subject.push_str(&format!(" of schedule {schedule}"));
    }
    let mut t = format!(
        "Run {run_id} of {bench} ended {status}{}.\n",
        if verdict.is_empty() {
            String::new()
        } else {
            format!(" with the verdict {verdict}")
        }
    );
    if !schedule.is_empty() {
        t.push_str(&format!(
            "Schedule: {schedule} (instant {})\n",
            s(&["run", "scheduled_for"])
        ));
    }
    t.push_str(&format!(
        "Started {}, finished {}\n",
        s(&["run", "started_at"]),
        s(&["run", "finished_at"])
    ));
    let agents: Vec<&str> = v["run"]["agents"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    t.push_str(&format!("Agents: {}\n", agents.join(", ")));
    let err = s(&["run", "error"]);
    if !err.is_empty() {
        t.push_str(&format!("Error: {err}\n"));
    }
    if let Some(checks) = v["failing_checks"].as_array().filter(|c| !c.is_empty()) {
        t.push_str("\nFailing checks:\n");
        for c in checks {
            let unit = c["unit"].as_str().unwrap_or("");
            t.push_str(&format!(
                "  {:<5} {} = {} {unit} (reference {} {unit}): {}\n",
                c["status"].as_str().unwrap_or(""),
                c["check"].as_str().unwrap_or(""),
                figure(&c["value"]),
                figure(&c["reference"]),
                c["message"].as_str().unwrap_or("")
            ));
        }
    }
    if let Some(nodes) = v["failing_nodes"].as_array().filter(|n| !n.is_empty()) {
        t.push_str("\nFailing nodes:\n");
        for n in nodes {
            let checks: Vec<&str> = n["checks"]
                .as_array()
                .map(|a| a.iter().filter_map(|c| c["check"].as_str()).collect())
                .unwrap_or_default();
            t.push_str(&format!(
                "  {}: {}\n",
                n["node"].as_str().unwrap_or(""),
                checks.join(", ")
            ));
        }
    }
    let link = s(&["links", "run"]);
    if !link.is_empty() {
        t.push_str(&format!("\nDashboard: {link}\n"));
    }
    t.push_str(&format!(
        "\n-- \nbenchlake notification {} ({}). The notification as JSON:\n{payload}\n",
        s(&["delivery_id"]),
        s(&["event"])
    ));
    (subject, t)
}

impl Outbox {
    /// The HTTP client of `cfg`: certificates verified against the system's
    /// roots and `ca_file`; no redirects followed (a redirect is not a
    /// delivery); no proxy from the environment.
    pub fn new(cfg: &NotifyConfig) -> std::result::Result<Self, String> {
        let mut b = reqwest::Client::builder()
            .timeout(Duration::from_millis(cfg.timeout_ms))
            .connect_timeout(Duration::from_millis(cfg.timeout_ms.min(5_000)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("benchlake/", env!("CARGO_PKG_VERSION")));
        if let Some(p) = &cfg.ca_file {
            let pem = std::fs::read(p)
                .map_err(|e| format!("webhook-ca {}: cannot read: {e}", p.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("webhook-ca {}: not PEM certificates: {e}", p.display()))?;
            if certs.is_empty() {
                return Err(format!("webhook-ca {}: no certificate in it", p.display()));
            }
            b = b.tls_certs_merge(certs);
        }
        let client = b.build().map_err(|e| format!("webhook HTTP client: {e}"))?;
        let smtp = match &cfg.smtp {
            Some(s) if !cfg.emails.is_empty() => {
                let from = s
                    .from
                    .parse::<lettre::message::Mailbox>()
                    .map_err(|e| format!("smtp-from '{}': {e}", s.from))?;
                Some((
                    smtp_transport(s, Duration::from_millis(cfg.timeout_ms))?,
                    from,
                ))
            }
            _ => None,
        };
        Ok(Self { client, smtp })
    }

    /// One email of `body` (the JSON payload) to `e`'s recipients.
    pub async fn mail(
        &self,
        e: &EmailNotifier,
        event: &str,
        delivery: &str,
        body: &str,
    ) -> Attempt {
        use lettre::AsyncTransport;
        let Some((transport, from)) = &self.smtp else {
            return Attempt::Rejected(0);
        };
        let (subject, text) = email_text(body);
        let mut b = lettre::Message::builder()
            .from(from.clone())
            .subject(subject)
            .message_id(Some(format!("<{delivery}@benchlake>")))
            .header(lettre::message::header::ContentType::TEXT_PLAIN)
            .header(MailEvent(event.to_string()))
            .header(MailDelivery(delivery.to_string()));
        for a in &e.to {
            match a.parse::<lettre::message::Mailbox>() {
                Ok(m) => b = b.to(m),
                Err(err) => return Attempt::Failed(format!("recipient '{a}': {err}"), None),
            }
        }
        let msg = match b.body(text) {
            Ok(m) => m,
            Err(err) => return Attempt::Failed(format!("building the message: {err}"), None),
        };
        match transport.send(msg).await {
            Ok(r) => Attempt::Delivered(u16::from(r.code())),
            Err(err) if err.is_permanent() => {
                Attempt::Rejected(err.status().map(u16::from).unwrap_or(500))
            }
            Err(err) => {
                let mut msg = format!("SMTP: {err}");
                let mut src = std::error::Error::source(&err);
                while let Some(s) = src {
                    // Some errors print their source in their own text.
                    let s_text = s.to_string();
                    if !msg.contains(&s_text) {
                        msg.push_str(&format!(": {s_text}"));
                    }
                    src = s.source();
                }
                Attempt::Failed(msg, None)
            }
        }
    }

    /// One POST of `body` to `w`.
    pub async fn post(
        &self,
        w: &Webhook,
        event: &str,
        delivery: &str,
        body: &str,
        now_s: i64,
    ) -> Attempt {
        let mut req = self
            .client
            .post(w.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(EVENT_HEADER, event)
            .header(DELIVERY_HEADER, delivery)
            .header(TIMESTAMP_HEADER, now_s.to_string());
        if let Some(k) = &w.secret {
            req = req
                .header(SIGNATURE_HEADER, sign(k, body.as_bytes()))
                .header(
                    SIGNATURE_TS_HEADER,
                    sign(k, &timestamped(now_s, body.as_bytes())),
                );
        }
        match req.body(body.to_string()).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                match classify(status) {
                    Attempt::Failed(m, _) => Attempt::Failed(m, retry_after),
                    a => a,
                }
            }
            Err(e) => {
                let what = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "cannot connect"
                } else {
                    "request failed"
                };
                // The error's source chain names the cause (refused, certificate).
                let mut msg = format!("{what}: {e}");
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    // Some errors print their source in their own text.
                    let s_text = s.to_string();
                    if !msg.contains(&s_text) {
                        msg.push_str(&format!(": {s_text}"));
                    }
                    src = s.source();
                }
                Attempt::Failed(msg, None)
            }
        }
    }

    /// Handles the due rows once: builds payloads, sends, records outcomes.
    /// Returns how many rows it handled.
    pub async fn deliver_due(&self, c: &Coordinator) -> Result<usize> {
        let now = c.now();
        let due = c.db(move |tx| tx.due_notifications(now, 32)).await?;
        let n = due.len();
        let sends = due.into_iter().map(|row| self.handle(c, row));
        futures::future::join_all(sends).await;
        Ok(n)
    }

    /// The time of the next due row, if any.
    pub async fn next_due(c: &Coordinator) -> Result<Option<i64>> {
        c.db(|tx| tx.next_notification_ms()).await
    }

    async fn handle(&self, c: &Coordinator, mut row: NotificationRow) {
        let cfg = &c.cfg.notify;
        let m = &c.metrics;
        let now = c.now();
        if row.body.is_none() {
            // Acknowledged and in-maintenance findings are left out (crate::silence).
            let read = crate::silence::read_facts(c, &row.run_id, now).await;
            let (facts, measured, silenced) = match read {
                Ok(f) => f,
                Err(e) => {
                    // The lake or the store is unavailable: look again later
                    // (not an attempt: nothing was sent).
                    tracing::warn!(run = %row.run_id, notifier = %row.notifier, error = %e, "cannot read the run for its notification; retrying");
                    row.next_ms = now + backoff_ms(cfg.backoff_ms, cfg.backoff_max_ms, 1, 1.0);
                    row.last_error = Some(format!("reading the run: {e}"));
                    self.save(c, row).await;
                    return;
                }
            };
            match facts.event() {
                None => {
                    row.state = NotificationState::Skipped;
                    row.last_error = crate::silence::skip_note(&silenced);
                    m.notifications.inc(&["skipped"]);
                    self.save(c, row).await;
                    return;
                }
                Some(ev) => {
                    row.event = Some(ev.to_string());
                    let body = payload(
                        &facts,
                        ev,
                        &row.delivery_id,
                        &row.notifier,
                        cfg.dashboard_url.as_deref(),
                        now,
                    );
                    row.body = Some(crate::silence::annotate(body, measured, &silenced));
                }
            }
        }
        let (event, body) = (
            row.event.clone().unwrap_or_default(),
            row.body.clone().unwrap_or_default(),
        );
        let (outcome, target) = if let Some(w) = cfg.webhook(&row.notifier) {
            row.attempt += 1;
            let a = self
                .post(w, &event, &row.delivery_id, &body, now.div_euclid(1000))
                .await;
            (a, redact_url(&w.url))
        } else if let Some(e) = cfg.email(&row.notifier) {
            row.attempt += 1;
            let a = self.mail(e, &event, &row.delivery_id, &body).await;
            let target = cfg
                .smtp
                .as_ref()
                .map(|s| format!("smtp {}:{}", s.host, s.port))
                .unwrap_or_default();
            (a, target)
        } else {
            tracing::warn!(notifier = %row.notifier, run = %row.run_id, "notification given up: the notifier is no longer configured");
            row.state = NotificationState::Failed;
            row.last_error = Some(format!("notifier '{}' is not configured", row.notifier));
            m.notifications.inc(&["gave_up"]);
            self.save(c, row).await;
            return;
        };
        let done = c.now();
        match outcome {
            Attempt::Delivered(status) => {
                row.state = NotificationState::Delivered;
                row.delivered_ms = Some(done);
                row.last_error = None;
                m.notifications.inc(&["delivered"]);
                tracing::info!(notifier = %row.notifier, run = %row.run_id, delivery = %row.delivery_id, status, attempt = row.attempt, "notification delivered");
            }
            Attempt::Rejected(status) => {
                row.state = NotificationState::Failed;
                row.last_error = Some(format!("{status}: the receiver refused it"));
                m.notifications.inc(&["rejected"]);
                tracing::warn!(notifier = %row.notifier, to = %target, run = %row.run_id, status, "notification refused by the receiver; not retried");
            }
            Attempt::Failed(msg, retry_after) => {
                row.last_error = Some(msg.clone());
                if row.attempt >= cfg.max_attempts {
                    row.state = NotificationState::Failed;
                    m.notifications.inc(&["gave_up"]);
                    tracing::warn!(notifier = %row.notifier, to = %target, run = %row.run_id, attempts = row.attempt, error = %msg, "notification given up after its last attempt");
                } else {
                    let jitter = 0.5 + rand::random::<f64>() * 0.5;
                    let mut delay =
                        backoff_ms(cfg.backoff_ms, cfg.backoff_max_ms, row.attempt, jitter);
                    if let Some(s) = retry_after {
                        delay = delay.max((s.saturating_mul(1000)).min(cfg.backoff_max_ms) as i64);
                    }
                    row.next_ms = done + delay;
                    m.notifications.inc(&["retried"]);
                    tracing::warn!(notifier = %row.notifier, to = %target, run = %row.run_id, attempt = row.attempt, retry_in_ms = delay, error = %msg, "notification failed; retrying");
                }
            }
        }
        self.save(c, row).await;
    }

    async fn save(&self, c: &Coordinator, row: NotificationRow) {
        let id = row.delivery_id.clone();
        if let Err(e) = c.db(move |tx| tx.update_notification(&row)).await {
            tracing::warn!(delivery = %id, error = %e, "cannot record a notification's outcome");
        }
    }

    /// Delivers until `shutdown`: woken when a transaction queued rows
    /// ([`crate::lifecycle::Effects`]), else when the next row is due (at
    /// least once a second, so rows queued by another coordinator before a
    /// takeover are found too).
    pub async fn run(self, c: Arc<Coordinator>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut pruned_at = i64::MIN;
        loop {
            let now = c.now();
            if now.saturating_sub(pruned_at) >= PRUNE_EVERY_MS {
                pruned_at = now;
                let before = now - KEEP_MS;
                match c.db(move |tx| tx.prune_notifications(before)).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "notification outbox: old rows removed"),
                    Err(e) => {
                        tracing::warn!(error = %e, "notification outbox: cannot remove old rows")
                    }
                }
            }
            match self.deliver_due(&c).await {
                Ok(n) if n > 0 => continue,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "notification outbox: cannot read due rows"),
            }
            let wait = match Self::next_due(&c).await {
                Ok(Some(t)) => (t - c.now()).clamp(0, 1_000) as u64,
                _ => 1_000,
            };
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                _ = c.outbox_wake.notified() => {}
                _ = shutdown.changed() => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            sign(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            ),
            "sha256=60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        assert_eq!(timestamped(1700000000, b"{}"), b"1700000000.{}");
    }

    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        assert_eq!(backoff_ms(2_000, 600_000, 1, 1.0), 2_000);
        assert_eq!(backoff_ms(2_000, 600_000, 2, 1.0), 4_000);
        assert_eq!(backoff_ms(2_000, 600_000, 5, 1.0), 32_000);
        assert_eq!(backoff_ms(2_000, 600_000, 40, 1.0), 600_000);
        assert_eq!(backoff_ms(2_000, 600_000, 2, 0.5), 2_000);
        // Jitter stays in [0.5, 1].
        assert_eq!(backoff_ms(2_000, 600_000, 1, 0.0), 1_000);
        assert_eq!(backoff_ms(2_000, 600_000, 1, 7.0), 2_000);
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(classify(200), Attempt::Delivered(200));
        assert_eq!(classify(204), Attempt::Delivered(204));
        assert_eq!(classify(404), Attempt::Rejected(404));
        assert_eq!(classify(401), Attempt::Rejected(401));
        assert!(matches!(classify(408), Attempt::Failed(..)));
        assert!(matches!(classify(429), Attempt::Failed(..)));
        assert!(matches!(classify(500), Attempt::Failed(..)));
        assert!(matches!(classify(503), Attempt::Failed(..)));
        assert!(matches!(classify(302), Attempt::Failed(..)));
    }

    #[test]
    fn urls_and_names_are_checked() {
        assert!(parse_url("webhook", "https://hooks.example/x?y=1").is_ok());
        assert!(parse_url("webhook", "http://127.0.0.1:9/").is_ok());
        for bad in [
            "ftp://h/",
            "file:///etc/passwd",
            "http://u:p@h/",
            "nothing",
            "unix:/x",
        ] {
            let e = parse_url("webhook", bad).unwrap_err();
            assert!(e.starts_with("webhook: "), "{e}");
        }
        assert!(check_name("n", "ops-team_1.x").is_ok());
        assert!(check_name("n", "").is_err());
        assert!(check_name("n", "a b").is_err());
        assert!(check_name("n", "a=b").is_err());
        let u = parse_url("w", "https://hooks.slack.example/services/T0/B0/SECRET").unwrap();
        assert_eq!(redact_url(&u), "https://hooks.slack.example/…");
        let w = Webhook {
            name: "ops".into(),
            url: u,
            secret: Some(b"s3cr3t-value".to_vec()),
        };
        let shown = format!("{w:?}");
        assert!(
            !shown.contains("SECRET") && !shown.contains("s3cr3t"),
            "{shown}"
        );
    }

    #[test]
    fn config_checks_defaults_and_names() {
        let mut cfg = NotifyConfig {
            webhooks: vec![Webhook {
                name: "ops".into(),
                url: parse_url("w", "http://127.0.0.1:1/").unwrap(),
                secret: None,
            }],
            defaults: vec!["ops".into()],
            ..Default::default()
        };
        assert!(cfg.check().is_ok());
        assert!(cfg.check_names("schedule.notify", &["ops".into()]).is_ok());
        let e = cfg
            .check_names("schedule.notify", &["mail".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("schedule.notify") && e.contains("mail") && e.contains("ops"),
            "{e}"
        );
        cfg.defaults.push("nope".into());
        assert!(cfg.check().unwrap_err().contains("nope"));
        cfg.defaults.pop();
        cfg.webhooks.push(cfg.webhooks[0].clone());
        assert!(cfg.check().unwrap_err().contains("twice"));
    }

    fn facts(state: RunState, checks: &[(&str, &str)], nodes: &[(&str, &str, &str)]) -> RunFacts {
        let spec = Spec {
            benchmark: "pio".into(),
            params: Default::default(),
            nodes: Nodes::default(),
            launcher: benchlake_core::bench::LauncherKind::Local,
            max_attempts: 1,
            timeout_s: 60,
            slurm: Default::default(),
        };
        let mut run = RunRow::new(
            "01RUN".into(),
            spec,
            "io",
            Origin::default(),
            1_700_000_000_000,
        );
        run.state = state;
        let row = |c: &str, s: &str| CheckRow {
            check: c.into(),
            status: s.into(),
            value: Some(1.5),
            reference: Some(100.0),
            unit: "MiB/s".into(),
            message: format!("{c} {s}"),
            ..Default::default()
        };
        RunFacts {
            run,
            schedule_name: None,
            agents: vec!["a1".into(), "a2".into()],
            checks: checks.iter().map(|(c, s)| row(c, s)).collect(),
            nodes: nodes
                .iter()
                .map(|(n, c, s)| (n.to_string(), row(c, s)))
                .collect(),
        }
    }

    #[test]
    fn events_verdicts_and_failing_nodes() {
        let f = facts(RunState::Succeeded, &[("io.write", "PASS")], &[]);
        assert_eq!(f.event(), None);
        let f = facts(RunState::Succeeded, &[], &[]);
        assert_eq!(f.event(), None);
        let f = facts(RunState::Failed, &[], &[]);
        assert_eq!(f.event(), Some("run.failed"));
        let f = facts(
            RunState::Succeeded,
            &[("io.write", "FAIL"), ("io.read", "ERROR")],
            &[],
        );
        assert_eq!(f.event(), Some("verdict.fail"));
        assert_eq!(f.failing_checks().len(), 2);
        let nodes = f.failing_nodes();
        assert_eq!(
            nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
            ["a1", "a2"]
        );
        let f = facts(
            RunState::Succeeded,
            &[("io.write", "PASS")],
            &[("n1", "node.cores", "PASS"), ("n2", "node.cores", "ERROR")],
        );
        assert_eq!(f.event(), Some("verdict.error"));
        // A REGRESSION (even beside an ERROR) is notified and failing.
        let g = facts(
            RunState::Succeeded,
            &[("a", "ERROR"), ("b", "REGRESSION")],
            &[],
        );
        assert_eq!(
            (g.event(), g.failing_checks().len()),
            (Some("verdict.regression"), 2)
        );
        let nodes = f.failing_nodes();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].node, "n2");
        assert_eq!(nodes[0].checks[0].check, "node.cores");
        let body = payload(
            &f,
            "verdict.error",
            "01DEL",
            "ops",
            Some("https://b.example/"),
            1_700_000_000_000,
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["run"]["run_id"], "01RUN");
        assert_eq!(v["run"]["verdict"], "ERROR");
        assert_eq!(v["delivery_id"], "01DEL");
        assert_eq!(v["links"]["run"], "https://b.example/runs/01RUN");
        assert_eq!(v["failing_nodes"][0]["node"], "n2");
        assert_eq!(v["time"], "2023-11-14T22:13:20.000Z");
    }

    /// Not enough history and a disturbed run are no findings: nothing is
    /// sent, and they are not among a failing run's failing checks.
    #[test]
    fn undecided_verdicts_are_not_notified() {
        let f = facts(
            RunState::Succeeded,
            &[
                ("io.write_bw_mib_s.vs_median", "NO_REFERENCE"),
                ("io.read_bw_mib_s.vs_median", "INCONCLUSIVE"),
                ("io.verify_errors", "PASS"),
            ],
            &[("n1", "node.cores", "NO_REFERENCE")],
        );
        assert_eq!(f.verdict(), Some("INCONCLUSIVE"));
        assert_eq!(f.event(), None);
        let f = facts(
            RunState::Succeeded,
            &[("io.write", "FAIL"), ("io.read", "INCONCLUSIVE")],
            &[("n1", "node.cores", "INCONCLUSIVE")],
        );
        assert_eq!(f.event(), Some("verdict.fail"));
        assert_eq!(f.failing_checks().len(), 1);
    }

    #[test]
    fn smtp_urls_and_addresses_are_checked() {
        assert_eq!(
            parse_smtp_url("smtp://127.0.0.1:2525").unwrap(),
            (SmtpSecurity::Plain, "127.0.0.1".into(), 2525)
        );
        assert_eq!(
            parse_smtp_url("smtp+starttls://mail.example.org").unwrap(),
            (SmtpSecurity::StartTls, "mail.example.org".into(), 587)
        );
        assert_eq!(
            parse_smtp_url("smtps://[::1]").unwrap(),
            (SmtpSecurity::Tls, "::1".into(), 465)
        );
        for bad in [
            "http://h/",
            "smtp://u:p@h",
            "smtp://h/x",
            "smtp://h?tls=none",
            "nothing",
        ] {
            let e = parse_smtp_url(bad).unwrap_err();
            assert!(e.starts_with("smtp-url: "), "{e}");
        }
        assert!(check_address("e", "ops@example.org").is_ok());
        let e = check_address("email ops", "ops at example").unwrap_err();
        assert!(
            e.contains("email ops") && e.contains("ops at example"),
            "{e}"
        );
        let s = SmtpConfig {
            security: SmtpSecurity::StartTls,
            host: "h".into(),
            port: 587,
            from: "b@example.org".into(),
            user: Some("u".into()),
            password: Some("hunter2-secret".into()),
            ca_file: None,
        };
        assert!(!format!("{s:?}").contains("hunter2"));
        // Email notifiers need an SMTP server and valid recipients.
        let mut cfg = NotifyConfig {
            emails: vec![EmailNotifier {
                name: "mail".into(),
                to: vec!["ops@example.org".into()],
            }],
            ..Default::default()
        };
        assert!(cfg.check().unwrap_err().contains("--smtp-url"));
        cfg.smtp = Some(SmtpConfig {
            security: SmtpSecurity::Plain,
            ..s.clone()
        });
        assert!(cfg.check().unwrap_err().contains("in clear"));
        cfg.smtp = Some(s);
        assert!(cfg.check().is_ok());
        assert!(cfg.has("mail") && cfg.enabled());
        cfg.emails[0].to.push("nope".into());
        assert!(cfg.check().unwrap_err().contains("'nope'"));
    }

    #[test]
    fn an_email_says_what_failed() {
        let f = facts(
            RunState::Succeeded,
            &[("io.write_bw_mib_s", "FAIL"), ("io.read", "PASS")],
            &[],
        );
        let body = payload(
            &f,
            "verdict.fail",
            "01DEL",
            "mail",
            Some("http://d:1"),
            1_700_000_000_000,
        );
        let (subject, text) = email_text(&body);
        assert_eq!(subject, "[benchlake] FAIL: pio run 01RUN");
        assert!(
            text.starts_with("Run 01RUN of pio ended SUCCEEDED with the verdict FAIL.\n"),
            "{text}"
        );
        assert!(
            text.contains("  FAIL  io.write_bw_mib_s = 1.5 MiB/s (reference 100 MiB/s): io.write_bw_mib_s FAIL\n"),
            "{text}"
        );
        assert!(!text.contains("io.read ="), "{text}");
        assert!(
            text.contains("Failing nodes:\n  a1: io.write_bw_mib_s\n  a2: io.write_bw_mib_s\n"),
            "{text}"
        );
        assert!(
            text.contains("Dashboard: http://d:1/runs/01RUN\n"),
            "{text}"
        );
        assert!(text.contains(&body), "the JSON rides along");
        let f = facts(RunState::Failed, &[], &[]);
        let (subject, _) = email_text(&payload(&f, "run.failed", "01DEL", "mail", None, 0));
        assert_eq!(subject, "[benchlake] FAILED: pio run 01RUN");
    }
}
