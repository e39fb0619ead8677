//! The acknowledgements and maintenance windows on the dashboard
//! ([`crate::silence`]): the overview marks acknowledged cells (an outline
//! and the comment in the tooltip) and nodes in maintenance; `/silences`
//! lists those in force. Read-only: creating and removing them is the CLI's
//! and the API's (admin role).
use std::fmt::Write;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{Html, IntoResponse, Response};

use super::access;
use super::html::{self, Chrome, badge, esc};
use super::pages::{coord, footer, path_and_query, store_error};
use crate::http::Http;
use crate::silence::{Silences, fmt_time};

/// The extra class and tooltip text of an overview cell of `check` on
/// `node` at `now`: ` ack` and the acknowledgement, when one covers it
/// (one scoped to a schedule is not shown here: the cell does not say which
/// schedule's run it comes from).
pub fn cell_mark(s: &Silences, node: &str, check: &str, now: i64) -> (&'static str, String) {
    match s.ack_for(Some(node), check, None, now) {
        Some(a) => (" ack", format!(" · ack: {}", a.describe())),
        None => ("", String::new()),
    }
}

/// The badge of a node in maintenance at `now` ("" when it is not).
pub fn node_badge(s: &Silences, node: &str, now: i64) -> String {
    match s.maintenance_now(node, now) {
        Some(w) => format!(
            " <span class=\"b b-maintenance\" title=\"{}\">maintenance</span>",
            esc(&w.describe())
        ),
        None => String::new(),
    }
}

/// `/silences`: acknowledgements in force and windows ahead or open.
pub async fn page(State(h): State<Http>, headers: HeaderMap, uri: Uri) -> Response {
    let t0 = Instant::now();
    if let Err(r) = access(&h, &headers, &path_and_query(&uri), false) {
        return r;
    }
    let c = match coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let s = match c.db(Silences::read).await {
        Ok(s) => s,
        Err(e) => return store_error(&h, &headers, e),
    };
    let now = c.now();
    let mut b = String::with_capacity(8 * 1024);
    b.push_str("<h1>Acknowledged and in maintenance</h1>\
        <p class=\"muted\">Findings silenced here are recorded as measured, but neither notified nor drained, \
        and do not fail <code>benchlake node-check</code>. Created and removed by admins with \
        <code>benchlake ack</code> and <code>benchlake maintenance</code>.</p>");
    let acks: Vec<_> = s.acks.iter().filter(|a| now < a.expires_ms).collect();
    b.push_str("<section><h2>Acknowledgements</h2>");
    if acks.is_empty() {
        b.push_str("<p class=\"muted\" id=\"acks-none\">None in force.</p>");
    } else {
        b.push_str("<table id=\"acks\"><thead><tr><th>node</th><th>check</th><th>schedule</th><th>comment</th><th>by</th><th>since</th><th>expires</th><th>id</th></tr></thead><tbody>");
        for a in acks {
            let _ = write!(
                b,
                "<tr><td class=\"node\">{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
                esc(&a.node),
                esc(&a.check),
                esc(a.schedule_name.as_deref().unwrap_or("any")),
                esc(&a.comment),
                esc(&a.author),
                esc(&fmt_time(a.created_ms)),
                esc(&fmt_time(a.expires_ms)),
                esc(&a.id)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section><section><h2>Maintenance windows</h2>");
    let windows: Vec<_> = s.windows.iter().filter(|w| now < w.end_ms).collect();
    if windows.is_empty() {
        b.push_str("<p class=\"muted\" id=\"windows-none\">None ahead or open.</p>");
    } else {
        b.push_str("<table id=\"windows\"><thead><tr><th>state</th><th>nodes</th><th>start</th><th>end</th><th>reason</th><th>by</th><th>id</th></tr></thead><tbody>");
        for w in windows {
            let _ = write!(
                b,
                "<tr><td>{}</td><td class=\"node\" title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
                badge(w.state(now)),
                esc(&w.node_names.join(" ")),
                esc(&w.nodes),
                esc(&fmt_time(w.start_ms)),
                esc(&fmt_time(w.end_ms)),
                esc(&w.reason),
                esc(&w.author),
                esc(&w.id)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");
    b.push_str(&footer(t0, ""));
    Html(html::page(
        "Silenced",
        "",
        &Chrome::of(&h, &headers).at("/silences"),
        &b,
    ))
    .into_response()
}
