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

mod config;
mod mail;
mod payload;
#[cfg(test)]
mod tests;
pub use config::*;
pub use mail::*;
pub use payload::*;

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
pub fn enqueue(tx: &mut dyn Tx, cfg: &NotifyConfig, run: &RunRow, now: i64) -> Result<bool> {
    if !run.state.is_final() || run.state == RunState::Cancelled {
        return Ok(false);
    }
    let names = notifiers_of(cfg, run);
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
