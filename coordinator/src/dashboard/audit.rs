//! `/audit` (admins): the audit trail ([`crate::audit`]), newest first,
//! [`PAGE`] rows a page; `?before=ID` pages back.
use std::fmt::Write;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};

use super::access;
use super::html::{self, Chrome, badge, esc};
use super::pages::{coord, error_page, footer, is_run_id, path_and_query, store_error};
use crate::config::Role;
use crate::http::Http;

/// Rows a page.
pub const PAGE: u32 = 100;

/// A target as a link where it names a page (a run, a node).
fn target_cell(action: &str, target: &str) -> String {
    if action.starts_with("run.") && is_run_id(target) {
        return format!("<a class=\"mono\" href=\"/runs/{0}\">{0}</a>", esc(target));
    }
    if (action.starts_with("node.") || action.starts_with("agent."))
        && benchlake_core::node::valid_name(target)
    {
        return format!("<a href=\"/nodes/{0}\">{0}</a>", esc(target));
    }
    esc(target)
}

/// The page.
pub async fn page(State(h): State<Http>, headers: HeaderMap, uri: Uri) -> Response {
    let t0 = Instant::now();
    match access(&h, &headers, &path_and_query(&uri), false) {
        Ok(Role::Admin) => {}
        Ok(role) => {
            return error_page(
                &h,
                &headers,
                StatusCode::FORBIDDEN,
                &format!(
                    "The audit trail needs the admin role; this session has the {} role.",
                    role.as_str()
                ),
            );
        }
        Err(r) => return r,
    }
    let c = match coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let q = html::parse_query(uri.query().unwrap_or(""));
    let before = q.get("before").filter(|b| is_run_id(b)).cloned();
    let rows = match c.audit_rows(PAGE, before.clone()).await {
        Ok(r) => r,
        Err(e) => return store_error(&h, &headers, e),
    };
    let mut b = String::with_capacity(16 * 1024);
    b.push_str(
        "<h1>Audit trail</h1><p class=\"muted\">Every action taken on schedules, runs, agents and nodes \
         from this dashboard or through the API (CLI, gRPC), refused and failed attempts included, \
         newest first. Times are UTC.</p>",
    );
    if rows.is_empty() {
        b.push_str("<p class=\"muted\" id=\"audit-none\">No action recorded.</p>");
    } else {
        b.push_str("<table id=\"audit\"><thead><tr><th>when (UTC)</th><th>who</th><th>role</th><th>via</th><th>action</th><th>target</th><th>outcome</th><th>detail</th></tr></thead><tbody>");
        for r in &rows {
            let outcome = match r.outcome.as_str() {
                "ok" => badge("ok"),
                "refused" => badge("refused"),
                _ => badge("failed"),
            };
            let _ = write!(
                b,
                "<tr data-action=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.action),
                html::time(r.at_ms),
                esc(&r.who),
                esc(&r.role),
                esc(&r.via),
                esc(&r.action),
                target_cell(&r.action, &r.target),
                outcome,
                esc(&r.detail)
            );
        }
        b.push_str("</tbody></table>");
        if rows.len() == PAGE as usize
            && let Some(last) = rows.last()
        {
            let _ = write!(
                b,
                "<p><a id=\"older\" href=\"/audit?before={}\">Older</a></p>",
                esc(&html::url_encode(&last.id))
            );
        }
    }
    b.push_str(&footer(t0, ""));
    Html(html::page(
        "Audit",
        "",
        &Chrome::of(&h, &headers).at("/audit"),
        &b,
    ))
    .into_response()
}
