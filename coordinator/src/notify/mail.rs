//! Email: the SMTP transport and the subject and text of a notification mail.
use super::*;

/// The SMTP transport of `s`: TLS verified against the system's roots and
/// `ca_file`.
pub(crate) fn smtp_transport(
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
        pub(crate) struct $t(pub(crate) String);
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
