//! The admins' actions on the dashboard (docs/dashboard.md, "Actions"):
//! trigger, pause and resume a schedule (the overview), cancel a run and
//! re-run its failed tasks (the run page), drain and resume an agent and a
//! Slurm node (the node page).
//!
//! Each is a small form that POSTs to its own route and carries the
//! session's form token (`csrf`, 256 random bits made at login; one per
//! coordinator process without tokens), compared in constant time, on top of
//! the same-origin check every state-changing request passes
//! ([`super::origin`]). Destructive ones (cancel, drain) ask for
//! confirmation first (`data-confirm`, `/static/dashboard.js`). Users see no
//! buttons, and a POST from a user's session is refused with 403: the
//! dashboard is read-only for them. The action itself is the API's
//! ([`crate::actions`]): the same rights checks and the same audit record,
//! with `via` = `dashboard`.
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::html::{self, esc};
use super::pages::{coord, error_page, is_run_id};
use crate::audit::Actor;
use crate::config::{Identity, Role};
use crate::error::CoordError;
use crate::http::Http;

/// An admin viewing a page: who, and the token their forms carry.
pub struct Admin {
    pub id: Identity,
    pub csrf: String,
}

/// The admin behind a request (None for users and without a session: no
/// buttons).
pub fn admin(h: &Http, headers: &HeaderMap) -> Option<Admin> {
    match super::identity(h, headers) {
        Some((id, csrf)) if id.role == Role::Admin => Some(Admin { id, csrf }),
        _ => None,
    }
}

/// A one-button form POSTing to `action` (a path built from checked names)
/// with the admin's form token; `confirm` asks first. `id` is the button's
/// element id.
pub fn button(a: &Admin, action: &str, label: &str, id: &str, confirm: Option<&str>) -> String {
    let confirm = confirm
        .map(|c| format!(" data-confirm=\"{}\"", esc(c)))
        .unwrap_or_default();
    format!(
        "<form method=\"post\" action=\"{}\" class=\"action\"{confirm}>\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button type=\"submit\" id=\"{}\">{}</button></form>",
        esc(action),
        esc(&a.csrf),
        esc(id),
        esc(label)
    )
}

/// The `Location` path of `segment` under `prefix` (`/runs/`, `/nodes/`).
fn path(prefix: &str, segment: &str) -> String {
    format!("{prefix}{}", html::url_encode(segment))
}

/// A plain refusal page with `code`.
fn refuse(h: &Http, headers: &HeaderMap, code: StatusCode, msg: &str) -> Response {
    error_page(h, headers, code, msg)
}

/// Checks a dashboard action request: a session, its form token, the admin
/// role; returns who acts and the parsed form.
#[allow(clippy::result_large_err)]
fn check(
    h: &Http,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(Actor, std::collections::HashMap<String, String>), Response> {
    if body.len() > 8192 {
        return Err((StatusCode::PAYLOAD_TOO_LARGE, "form too large").into_response());
    }
    let Some((id, csrf)) = super::identity(h, headers) else {
        return Err(refuse(
            h,
            headers,
            StatusCode::UNAUTHORIZED,
            "Log in first: this action needs an admin session.",
        ));
    };
    let form = html::parse_query(&String::from_utf8_lossy(body));
    let sent = form.get("csrf").map(String::as_str).unwrap_or("");
    if sent.is_empty() || !crate::config::ct_eq(sent.as_bytes(), csrf.as_bytes()) {
        tracing::warn!(who = ?id.principal(), "dashboard action refused: {} form token", if sent.is_empty() { "no" } else { "wrong" });
        return Err(refuse(
            h,
            headers,
            StatusCode::FORBIDDEN,
            if sent.is_empty() {
                "Refused: the form token (csrf) is missing. Use the buttons of the dashboard's own pages."
            } else {
                "Refused: the form token (csrf) is not this session's. Reload the page and try again."
            },
        ));
    }
    if id.role != Role::Admin {
        return Err(refuse(
            h,
            headers,
            StatusCode::FORBIDDEN,
            &format!(
                "Refused: dashboard actions need the admin role; this session has the {} role (the dashboard is read-only for users; the CLI acts on what you own).",
                id.role.as_str()
            ),
        ));
    }
    Ok((Actor::dashboard(id), form))
}

/// The response to a failed action: its status and message.
fn failed(h: &Http, headers: &HeaderMap, e: &CoordError) -> Response {
    let code = match e {
        CoordError::PermissionDenied(_) => StatusCode::FORBIDDEN,
        CoordError::NotFound(_) => StatusCode::NOT_FOUND,
        CoordError::Invalid(_) => StatusCode::BAD_REQUEST,
        CoordError::FailedPrecondition(_) => StatusCode::CONFLICT,
        e if e.is_retryable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refuse(h, headers, code, &format!("Not done: {e}"))
}

fn see_other(to: String) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// Whether `v` is a schedule, agent or node name (the names the API
/// accepts: `[A-Za-z0-9._-]`, up to 128).
fn is_name(v: &str) -> bool {
    crate::grpc::check_name("name", v, 128).is_ok()
}

macro_rules! checked {
    ($h:expr, $headers:expr, $body:expr) => {
        match check(&$h, &$headers, &$body) {
            Ok(x) => x,
            Err(r) => return r,
        }
    };
}

macro_rules! serving {
    ($h:expr, $headers:expr) => {
        match coord(&$h, &$headers) {
            Ok(c) => c,
            Err(r) => return r,
        }
    };
}

/// `POST /schedules/{name}/trigger`: a run of the schedule now.
pub async fn trigger_schedule(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let (who, _) = checked!(h, headers, body);
    if !is_name(&name) {
        return refuse(&h, &headers, StatusCode::NOT_FOUND, "not a schedule name");
    }
    let c = serving!(h, headers);
    match c
        .trigger_schedule(&who, &name, |_, r| Ok(r.run_id.clone()))
        .await
    {
        Ok(run) => see_other(path("/runs/", &run)),
        Err(e) => failed(&h, &headers, &e),
    }
}

async fn pause(h: Http, headers: HeaderMap, name: String, body: Bytes, paused: bool) -> Response {
    let (who, _) = checked!(h, headers, body);
    if !is_name(&name) {
        return refuse(&h, &headers, StatusCode::NOT_FOUND, "not a schedule name");
    }
    let c = serving!(h, headers);
    match c.pause_schedule(&who, &name, paused).await {
        Ok(_) => see_other("/#schedules".into()),
        Err(e) => failed(&h, &headers, &e),
    }
}

/// `POST /schedules/{name}/pause`.
pub async fn pause_schedule(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    pause(h, headers, name, body, true).await
}

/// `POST /schedules/{name}/resume`.
pub async fn resume_schedule(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    pause(h, headers, name, body, false).await
}

/// `POST /runs/{id}/cancel` (form field `reason`, optional).
pub async fn cancel_run(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let (who, form) = checked!(h, headers, body);
    if !is_run_id(&id) {
        return refuse(&h, &headers, StatusCode::NOT_FOUND, "not a run id");
    }
    let reason = form.get("reason").map(|r| r.trim()).unwrap_or("");
    if reason.len() > 1000 {
        return refuse(
            &h,
            &headers,
            StatusCode::BAD_REQUEST,
            "reason: longer than 1000 characters",
        );
    }
    let reason = if reason.is_empty() {
        format!("cancelled from the dashboard by {}", who.who())
    } else {
        reason.to_string()
    };
    let c = serving!(h, headers);
    match c.cancel_run(&who, &id, &reason, |_, _| Ok(())).await {
        Ok(()) => see_other(path("/runs/", &id)),
        Err(e) => failed(&h, &headers, &e),
    }
}

/// `POST /runs/{id}/rerun`: a new run of the failed tasks.
pub async fn rerun_run(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let (who, _) = checked!(h, headers, body);
    if !is_run_id(&id) {
        return refuse(&h, &headers, StatusCode::NOT_FOUND, "not a run id");
    }
    let c = serving!(h, headers);
    match c.rerun_failed(&who, &id, |_, r| Ok(r.run_id.clone())).await {
        Ok(run) => see_other(path("/runs/", &run)),
        Err(e) => failed(&h, &headers, &e),
    }
}

async fn agent(h: Http, headers: HeaderMap, name: String, body: Bytes, drain: bool) -> Response {
    let (who, _) = checked!(h, headers, body);
    if !is_name(&name) {
        return refuse(&h, &headers, StatusCode::NOT_FOUND, "not an agent name");
    }
    let c = serving!(h, headers);
    match c.drain_agent(&who, &name, drain).await {
        Ok(_) => see_other(path("/nodes/", &name)),
        Err(e) => failed(&h, &headers, &e),
    }
}

/// `POST /agents/{name}/drain`.
pub async fn drain_agent(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    agent(h, headers, name, body, true).await
}

/// `POST /agents/{name}/resume`.
pub async fn resume_agent(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    agent(h, headers, name, body, false).await
}

async fn node(h: Http, headers: HeaderMap, node: String, body: Bytes, drain: bool) -> Response {
    let (who, _) = checked!(h, headers, body);
    if !benchlake_core::node::valid_name(&node) {
        return refuse(&h, &headers, StatusCode::NOT_FOUND, "not a node name");
    }
    let c = serving!(h, headers);
    match c.drain_node(&who, &node, drain).await {
        Ok(_) => see_other(path("/nodes/", &node)),
        Err(e) => failed(&h, &headers, &e),
    }
}

/// `POST /nodes/{node}/drain`: a Slurm drain through benchlake.
pub async fn drain_node(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(n): Path<String>,
    body: Bytes,
) -> Response {
    node(h, headers, n, body, true).await
}

/// `POST /nodes/{node}/resume`: resumes a node benchlake drained.
pub async fn resume_node(
    State(h): State<Http>,
    headers: HeaderMap,
    Path(n): Path<String>,
    body: Bytes,
) -> Response {
    node(h, headers, n, body, false).await
}

/// The overview's actions cell of schedule `s`: trigger, and pause or
/// resume.
pub fn schedule_cell(a: &Admin, s: &crate::model::ScheduleRow) -> String {
    let base = path("/schedules/", &s.name);
    let toggle = if s.paused {
        button(
            a,
            &format!("{base}/resume"),
            "Resume",
            &format!("resume-{}", s.name),
            None,
        )
    } else {
        button(
            a,
            &format!("{base}/pause"),
            "Pause",
            &format!("pause-{}", s.name),
            None,
        )
    };
    format!(
        "<td class=\"actions\">{}{toggle}</td>",
        button(
            a,
            &format!("{base}/trigger"),
            "Run now",
            &format!("trigger-{}", s.name),
            None
        )
    )
}

/// The run page's actions: cancel while it is not final, re-run its failed
/// tasks once it is and has some.
pub fn run_buttons(a: &Admin, r: &crate::model::RunRow, tasks: &[crate::model::TaskRow]) -> String {
    let base = path("/runs/", &r.run_id);
    let mut out = String::new();
    if !r.state.is_final() {
        out.push_str(&button(
            a,
            &format!("{base}/cancel"),
            "Cancel run",
            "cancel-run",
            Some(&format!("Cancel run {}? Its tasks are stopped.", r.run_id)),
        ));
    } else if tasks
        .iter()
        .any(|t| t.state == crate::model::TaskState::Failed)
    {
        out.push_str(&button(
            a,
            &format!("{base}/rerun"),
            "Re-run failed tasks",
            "rerun-run",
            None,
        ));
    }
    if out.is_empty() {
        return out;
    }
    format!("<div class=\"actions\" id=\"run-actions\">{out}</div>")
}

/// The node page's actions: drain or resume the agent of that name (no new
/// tasks placed on it), and drain the Slurm node or resume one benchlake
/// drained. `slurm_drained` is Slurm's view (None: unknown or not a Slurm
/// node), `benchlake_drain` whether benchlake has a drain of it on record.
pub fn node_buttons(
    a: &Admin,
    node: &str,
    agent_drained: Option<bool>,
    slurm_drained: Option<bool>,
    benchlake_drain: bool,
) -> String {
    let mut out = String::new();
    match agent_drained {
        Some(false) => out.push_str(&button(
            a,
            &format!("{}/drain", path("/agents/", node)),
            "Drain agent",
            "drain-agent",
            Some(&format!(
                "Drain agent {node}? No new tasks are placed on it; running ones finish."
            )),
        )),
        Some(true) => out.push_str(&button(
            a,
            &format!("{}/resume", path("/agents/", node)),
            "Resume agent",
            "resume-agent",
            None,
        )),
        None => {}
    }
    if benchlake_drain {
        out.push_str(&button(
            a,
            &format!("{}/resume", path("/nodes/", node)),
            "Resume Slurm node",
            "resume-node",
            None,
        ));
    } else if slurm_drained == Some(false) {
        out.push_str(&button(
            a,
            &format!("{}/drain", path("/nodes/", node)),
            "Drain Slurm node",
            "drain-node",
            Some(&format!(
                "Drain Slurm node {node} (scontrol, reason \"benchlake: drained by hand by …\")?"
            )),
        ));
    }
    if out.is_empty() {
        return out;
    }
    format!("<div class=\"actions\" id=\"node-actions\">{out}</div>")
}
