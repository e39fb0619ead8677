//! The notifiers' settings: webhooks, email recipients and the SMTP server,
//! checked as the coordinator starts.
use super::*;

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
