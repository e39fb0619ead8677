//! The dashboard's pages: health overview, runs list, run page, and the JSON
//! a running run's page polls. Each reads the state store in one transaction
//! ([`crate::Coordinator::db`]) and the in-memory verdicts
//! ([`crate::verdicts`]).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};

use super::access;
use super::html::{self, Chrome, badge, esc};
use crate::Coordinator;
use crate::http::Http;
use crate::model::{AgentState, CommittedFile, RunRow, RunState, ScheduleRow};
use crate::store::RunFilter;

/// Runs per page of `/runs`.
pub const PAGE: usize = 50;
/// Cells of a schedule's verdict strip.
pub const STRIP: u32 = 30;
/// Check columns of the node matrix at most.
const MAX_CHECK_COLUMNS: usize = 24;

pub(super) fn error_page(h: &Http, headers: &HeaderMap, code: StatusCode, msg: &str) -> Response {
    let body = format!(
        "<h1>{}</h1><p class=\"error\">{}</p><p><a href=\"/\">Health overview</a></p>",
        code.as_u16(),
        esc(msg)
    );
    (
        code,
        Html(html::page("Error", "", &Chrome::of(h, headers), &body)),
    )
        .into_response()
}

/// The serving coordinator, or a 503 page.
#[allow(clippy::result_large_err)]
pub(super) fn coord(h: &Http, headers: &HeaderMap) -> Result<Arc<Coordinator>, Response> {
    h.coordinator().ok_or_else(|| {
        error_page(
            h,
            headers,
            StatusCode::SERVICE_UNAVAILABLE,
            "This coordinator does not serve (starting, or a standby): try the leader.",
        )
    })
}

pub(super) fn path_and_query(uri: &Uri) -> String {
    uri.path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into())
}

/// Whether `s` is a run id (a canonical ULID).
pub fn is_run_id(s: &str) -> bool {
    s.len() == 26 && ulid::Ulid::from_string(s).is_ok_and(|u| u.to_string() == s)
}

pub(super) fn store_error(h: &Http, headers: &HeaderMap, e: impl std::fmt::Display) -> Response {
    tracing::warn!(error = %e, "dashboard: cannot read the state store");
    error_page(
        h,
        headers,
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("cannot read the state store: {e}"),
    )
}

pub(super) fn run_link(id: &str) -> String {
    format!(
        "<a class=\"mono\" href=\"/runs/{}\">{}</a>",
        esc(id),
        esc(id)
    )
}

pub(super) fn verdict_badge(v: Option<&str>) -> String {
    match v {
        Some(v) => badge(v),
        None => "<span class=\"muted\">—</span>".into(),
    }
}

pub(super) fn footer(t0: Instant, extra: &str) -> String {
    format!(
        "<footer>rendered in {:.1} ms{}</footer>",
        t0.elapsed().as_secs_f64() * 1e3,
        extra
    )
}

// ---------------------------------------------------------------- overview

/// One line of the node matrix.
struct NodeLine<'a> {
    name: &'a str,
    hostname: &'a str,
    /// None: a node only verdicts name.
    state: Option<AgentState>,
    drain: bool,
    checks: &'a BTreeMap<String, crate::verdicts::NodeCheck>,
    /// Sort key: FAIL, ERROR, LOST, drained, the rest, no verdicts.
    rank: u8,
}

struct OverviewData {
    agents: Vec<crate::model::AgentRow>,
    /// Nodes benchlake drained (the state store's `node_drains`).
    node_drains: Vec<crate::node_actions::NodeDrain>,
    schedules: Vec<(ScheduleRow, Vec<RunRow>)>,
    adhoc: Vec<RunRow>,
    active: Vec<RunRow>,
    silences: crate::silence::Silences,
}

/// `/`: nodes with their latest verdicts (failing first), each schedule's
/// recent verdicts as a strip, runs in progress.
pub async fn overview(State(h): State<Http>, headers: HeaderMap, uri: Uri) -> Response {
    let t0 = Instant::now();
    if let Err(r) = access(&h, &headers, &path_and_query(&uri), false) {
        return r;
    }
    let c = match coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let read = c
        .db_read(|tx| {
            let agents = tx.list_agents()?;
            let mut schedules = Vec::new();
            for s in tx.list_schedules()? {
                let runs = tx.list_runs(&RunFilter {
                    schedule_id: Some(s.schedule_id.clone()),
                    limit: STRIP,
                    ..Default::default()
                })?;
                schedules.push((s, runs));
            }
            let adhoc = tx.list_runs(&RunFilter {
                limit: 200,
                ..Default::default()
            })?;
            let mut active = Vec::new();
            for st in [RunState::Running, RunState::Processing, RunState::Pending] {
                active.extend(tx.list_runs(&RunFilter {
                    state: Some(st),
                    limit: 100,
                    ..Default::default()
                })?);
            }
            Ok(OverviewData {
                agents,
                node_drains: tx.list_node_drains()?,
                schedules,
                adhoc,
                active,
                silences: crate::silence::Silences::read(tx)?,
            })
        })
        .await;
    let d = match read {
        Ok(d) => d,
        Err(e) => return store_error(&h, &headers, e),
    };
    let ix = c.verdicts();
    // Asked before the index is read (see `VerdictIndex::loaded`).
    let loaded = ix.loaded();
    let node_checks = ix.nodes();
    let mut ids: Vec<&str> = Vec::new();
    for (_, runs) in &d.schedules {
        ids.extend(runs.iter().map(|r| r.run_id.as_str()));
    }
    ids.extend(d.adhoc.iter().map(|r| r.run_id.as_str()));
    let verdicts = ix.verdicts_of(ids);

    let mut b = String::with_capacity(64 * 1024);
    b.push_str("<h1>Cluster health</h1>");
    if !loaded {
        b.push_str("<p class=\"note\">Verdicts are still being read from the lake; older ones may be missing.</p>");
    }

    // Nodes.
    let empty = BTreeMap::new();
    // Registered agents, then nodes that only verdicts name (a Slurm node, an
    // agent since removed).
    let mut nodes: Vec<NodeLine<'_>> = d
        .agents
        .iter()
        .map(|a| NodeLine {
            name: &a.name,
            hostname: &a.hostname,
            state: Some(a.state),
            drain: a.drain,
            checks: node_checks.get(&a.name).unwrap_or(&empty),
            rank: 0,
        })
        .collect();
    let known: BTreeSet<&str> = d.agents.iter().map(|a| a.name.as_str()).collect();
    for (name, checks) in &node_checks {
        if !known.contains(name.as_str()) {
            nodes.push(NodeLine {
                name,
                hostname: "",
                state: None,
                drain: false,
                checks,
                rank: 0,
            });
        }
    }
    for n in &mut nodes {
        let worst = crate::verdicts::worst(n.checks.values().map(|c| c.status.as_str()));
        n.rank = match (worst, n.state) {
            (Some("FAIL"), _) => 0,
            // A regression is a finding like FAIL (docs/io.md, "Outcomes").
            (Some("REGRESSION" | "ERROR"), _) => 1,
            (_, Some(AgentState::Lost)) => 2,
            _ if n.drain => 3,
            // Not judged yet or disturbed: grey, after the findings, never
            // counted as failing nor as healthy.
            (Some(v), _) if benchlake_core::verdict::is_undecided(v) => 4,
            (None, _) => 6,
            _ => 5,
        };
    }
    nodes.sort_by(|x, y| x.rank.cmp(&y.rank).then_with(|| x.name.cmp(y.name)));
    // Check columns grouped by family, readable names (the raw name is the
    // header's title: docs/io.md and docs/slurm.md list checks by it).
    let mut columns: Vec<(&'static str, String, String)> = nodes
        .iter()
        .flat_map(|n| n.checks.keys().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|c| {
            let (fam, label) = super::node::check_label(&c);
            (fam, label, c)
        })
        .collect();
    columns.sort();
    columns.truncate(MAX_CHECK_COLUMNS);
    let failing = nodes.iter().filter(|n| n.rank <= 1).count();
    let undecided = nodes.iter().filter(|n| n.rank == 4).count();
    let online = d
        .agents
        .iter()
        .filter(|a| a.state == AgentState::Online)
        .count();
    let lost = d
        .agents
        .iter()
        .filter(|a| a.state == AgentState::Lost)
        .count();
    // Drained: agents drained in benchlake, and nodes benchlake drained in
    // Slurm (each node once).
    let drained = d
        .agents
        .iter()
        .filter(|a| a.drain)
        .map(|a| a.name.as_str())
        .chain(d.node_drains.iter().map(|n| n.node.as_str()))
        .collect::<BTreeSet<_>>()
        .len();
    let _ = write!(
        b,
        "<div class=\"cards\">\
         <div class=\"card\"><span class=\"n\" id=\"n-nodes\">{}</span> nodes</div>\
         <div class=\"card\"><span class=\"n\">{online}</span> online</div>\
         <div class=\"card{}\"><span class=\"n\">{lost}</span> lost</div>\
         <div class=\"card\" title=\"agents drained in benchlake and Slurm nodes benchlake drained\"><span class=\"n\" id=\"n-drained\">{drained}</span> drained</div>\
         <div class=\"card{}\"><span class=\"n\" id=\"n-failing\">{failing}</span> failing nodes</div>\
         <div class=\"card\" title=\"newest verdict NO_REFERENCE (not enough history or peers yet) or INCONCLUSIVE (the run was disturbed)\"><span class=\"n\" id=\"n-undecided\">{undecided}</span> not judged yet</div>\
         <div class=\"card\"><span class=\"n\" id=\"n-active\">{}</span> runs in progress</div></div>",
        nodes.len(),
        if lost > 0 { " warn" } else { "" },
        if failing > 0 { " bad" } else { "" },
        d.active.len()
    );

    b.push_str("<section><h2>Nodes</h2>");
    if nodes.is_empty() {
        b.push_str("<p class=\"muted\">No agent has registered.</p>");
    } else {
        b.push_str("<div class=\"scroll\"><table class=\"grid\" id=\"nodes\"><thead><tr><th rowspan=\"2\">node</th><th rowspan=\"2\">state</th><th rowspan=\"2\">verdict</th>");
        let mut k = 0;
        while k < columns.len() {
            let fam = columns[k].0;
            let span = columns[k..].iter().take_while(|c| c.0 == fam).count();
            let _ = write!(b, "<th class=\"fam\" colspan=\"{span}\">{}</th>", esc(fam));
            k += span;
        }
        b.push_str("</tr><tr>");
        for (_, label, col) in &columns {
            let _ = write!(
                b,
                "<th class=\"check\" title=\"{}\">{}</th>",
                esc(col),
                esc(label)
            );
        }
        b.push_str("</tr></thead><tbody>");
        for n in &nodes {
            let checks = n.checks;
            let mut state = match n.state {
                Some(st) => badge(st.as_str()),
                None => "<span class=\"muted\" title=\"not a registered agent\">—</span>".into(),
            };
            if n.drain {
                state = format!("{state} {}", badge("drained"));
            }
            let now = c.now();
            state.push_str(&super::silences::node_badge(&d.silences, n.name, now));
            let worst = crate::verdicts::worst(checks.values().map(|c| c.status.as_str()));
            let _ = write!(
                b,
                "<tr><td class=\"node\" title=\"{}\"><a href=\"/nodes/{}\">{}</a></td><td>{state}</td><td>{}</td>",
                esc(n.hostname),
                esc(&html::url_encode(n.name)),
                esc(n.name),
                verdict_badge(worst)
            );
            for (_, _, col) in &columns {
                match checks.get(col) {
                    Some(nc) => {
                        let (ack, note) = super::silences::cell_mark(&d.silences, n.name, col, now);
                        let _ = write!(
                            b,
                            "<td class=\"cell\"><a class=\"v v-{}{ack}\" href=\"/runs/{}\" title=\"{} · {} · run {}{}\">{}</a></td>",
                            esc(&nc.status),
                            esc(&nc.run_id),
                            esc(col),
                            esc(&html::figure(nc.value, &nc.unit)),
                            esc(&nc.run_id),
                            esc(&note),
                            esc(&html::figure(nc.value, &nc.unit))
                        );
                    }
                    None => b.push_str("<td class=\"cell\"></td>"),
                }
            }
            b.push_str("</tr>");
        }
        b.push_str("</tbody></table></div>");
    }
    b.push_str("</section>");

    // Schedules' strips.
    b.push_str("<section><h2>Schedules</h2>");
    if d.schedules.is_empty() {
        b.push_str("<p class=\"muted\">No schedules.</p>");
    } else {
        let admin = super::actions::admin(&h, &headers);
        let _ = write!(
            b,
            "<table class=\"strips\" id=\"schedules\"><thead><tr><th>schedule</th><th>benchmark</th><th>cron</th><th>recent runs (oldest → newest)</th>{}</tr></thead><tbody>",
            if admin.is_some() {
                "<th>actions</th>"
            } else {
                ""
            }
        );
        for (s, runs) in &d.schedules {
            let _ = write!(
                b,
                "<tr data-schedule=\"{}\"><td><a href=\"/runs?schedule={}\">{}</a>{}</td><td>{}</td><td class=\"mono\">{} {}</td><td>{}</td>{}</tr>",
                esc(&s.name),
                esc(&html::url_encode(&s.schedule_id)),
                esc(&s.name),
                if s.paused {
                    " <span class=\"b b-paused\">paused</span>"
                } else {
                    ""
                },
                esc(&s.spec.benchmark),
                esc(&s.cron),
                esc(&s.time_zone),
                strip(runs, &verdicts),
                admin
                    .as_ref()
                    .map(|a| super::actions::schedule_cell(a, s))
                    .unwrap_or_default()
            );
        }
        b.push_str("</tbody></table>");
    }
    // Runs without a schedule, by benchmark.
    let mut by_bench: BTreeMap<&str, Vec<RunRow>> = BTreeMap::new();
    for r in d.adhoc.iter().filter(|r| r.schedule_id.is_none()) {
        let v = by_bench.entry(r.benchmark.as_str()).or_default();
        if v.len() < STRIP as usize {
            v.push(r.clone());
        }
    }
    if !by_bench.is_empty() {
        b.push_str("<h3>Submitted runs by benchmark</h3><table class=\"strips\" id=\"adhoc\"><thead><tr><th>benchmark</th><th>recent runs (oldest → newest)</th></tr></thead><tbody>");
        for (bench, runs) in &by_bench {
            let _ = write!(
                b,
                "<tr><td><a href=\"/runs?benchmark={}\">{}</a></td><td>{}</td></tr>",
                esc(&html::url_encode(bench)),
                esc(bench),
                strip(runs, &verdicts)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");

    // Runs in progress.
    b.push_str("<section><h2>Runs in progress</h2>");
    if d.active.is_empty() {
        b.push_str("<p class=\"muted\" id=\"active-none\">None.</p>");
    } else {
        b.push_str("<table id=\"active\"><thead><tr><th>run</th><th>benchmark</th><th>state</th><th>submitted</th><th>started</th></tr></thead><tbody>");
        for r in &d.active {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                run_link(&r.run_id),
                esc(&r.benchmark),
                badge(r.state.as_str()),
                html::time(r.submitted_at_ms),
                html::opt_time(r.started_at_ms)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");
    b.push_str(&footer(t0, ""));
    let attrs = if d.active.is_empty() {
        ""
    } else {
        " data-refresh=\"10\""
    };
    Html(html::page(
        "Health",
        attrs,
        &Chrome::of(&h, &headers).at("/"),
        &b,
    ))
    .into_response()
}

/// The verdict strip of `runs` (newest first in, drawn oldest → newest).
fn strip(runs: &[RunRow], verdicts: &HashMap<String, &'static str>) -> String {
    let mut s = String::from("<span class=\"strip\">");
    for r in runs.iter().rev() {
        let v = verdicts.get(&r.run_id).copied();
        let class = match v {
            Some(v) => v,
            None if !r.state.is_final() => "RUNNING",
            None => "NONE",
        };
        let _ = write!(
            s,
            "<a class=\"sc v-{class}\" href=\"/runs/{0}\" title=\"{0} · {1} · {2} · {3}\"></a>",
            esc(&r.run_id),
            html::time(r.submitted_at_ms),
            r.state.as_str(),
            v.unwrap_or("no verdict")
        );
    }
    s.push_str("</span>");
    s
}

// ---------------------------------------------------------------- runs list

/// The filters of `/runs`, validated.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RunsQuery {
    pub schedule: Option<String>,
    pub benchmark: Option<String>,
    pub status: Option<RunState>,
    pub verdict: Option<String>,
    /// A run id or the start of one.
    pub q: Option<String>,
    /// Page cursor: runs older than this id.
    pub before: Option<String>,
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

impl RunsQuery {
    /// Parses and validates a query string; `Err` names the bad parameter.
    pub fn parse(q: &str) -> Result<Self, String> {
        let m = html::parse_query(q);
        let get = |k: &str| m.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let mut out = Self::default();
        if let Some(s) = get("schedule") {
            if !name_ok(s) {
                return Err("schedule: not a schedule id".into());
            }
            out.schedule = Some(s.to_string());
        }
        if let Some(s) = get("benchmark") {
            if !name_ok(s) {
                return Err("benchmark: letters, digits, '-', '_', '.' and ':' only".into());
            }
            out.benchmark = Some(s.to_string());
        }
        if let Some(s) = get("status") {
            out.status = Some(RunState::parse(s).ok_or_else(|| {
                "status: one of PENDING, RUNNING, PROCESSING, SUCCEEDED, FAILED, CANCELLED"
                    .to_string()
            })?);
        }
        if let Some(s) = get("verdict") {
            if benchlake_core::verdict::known(s).is_none() {
                return Err(format!(
                    "verdict: one of {}",
                    benchlake_core::verdict::STATUSES.join(", ")
                ));
            }
            out.verdict = Some(s.to_string());
        }
        if let Some(s) = get("q") {
            let s = s.to_ascii_uppercase();
            let ok = s.len() <= 26
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
                && !s.bytes().any(|b| matches!(b, b'I' | b'L' | b'O' | b'U'));
            if !ok {
                return Err("q: a run id or its first characters (Crockford base32)".into());
            }
            out.q = Some(s);
        }
        if let Some(s) = get("before") {
            if !is_run_id(s) {
                return Err("before: not a run id".into());
            }
            out.before = Some(s.to_string());
        }
        Ok(out)
    }

    /// The query string of these filters with `before` replaced.
    fn link(&self, before: Option<&str>) -> String {
        let mut parts = Vec::new();
        let mut add = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                parts.push(format!("{k}={}", html::url_encode(v)));
            }
        };
        add("schedule", self.schedule.as_deref());
        add("benchmark", self.benchmark.as_deref());
        add("status", self.status.map(|s| s.as_str()));
        add("verdict", self.verdict.as_deref());
        add("q", self.q.as_deref());
        add("before", before);
        if parts.is_empty() {
            "/runs".into()
        } else {
            format!("/runs?{}", parts.join("&"))
        }
    }
}

/// One page of runs matching `q` (newest first) and whether more follow.
pub fn select_runs(
    tx: &mut dyn crate::store::Tx,
    ix: &crate::verdicts::VerdictIndex,
    q: &RunsQuery,
) -> crate::error::Result<(Vec<RunRow>, bool)> {
    // A run-id prefix: the ids that start with it sort just below prefix+"Z…".
    let prefix_top =
        q.q.as_ref()
            .filter(|p| p.len() < 26)
            .map(|p| format!("{p}{}", "Z".repeat(26 - p.len())));
    let mut before = match (&q.before, &prefix_top) {
        (Some(b), Some(t)) => Some(b.clone().min(t.clone())),
        (Some(b), None) => Some(b.clone()),
        (None, Some(t)) => Some(t.clone()),
        (None, None) => None,
    };
    let keep = |r: &RunRow| {
        q.schedule
            .as_ref()
            .is_none_or(|s| r.schedule_id.as_deref() == Some(s))
            && q.benchmark.as_ref().is_none_or(|b| &r.benchmark == b)
            && q.status.is_none_or(|s| r.state == s)
    };
    let mut out = Vec::new();
    if let Some(id) = q.q.as_ref().filter(|p| p.len() == 26) {
        if q.before.is_none()
            && let Some(r) = tx.get_run(id)?
            && keep(&r)
            && q.verdict
                .as_ref()
                .is_none_or(|v| ix.run(id).and_then(|x| x.verdict()) == Some(v.as_str()))
        {
            out.push(r);
        }
        return Ok((out, false));
    }
    let prefix_ok = |id: &str| q.q.as_ref().is_none_or(|p| id.starts_with(p.as_str()));
    if let Some(v) = &q.verdict {
        // Candidates from the verdict index, newest first.
        loop {
            let ids = ix.runs_with(v, before.as_deref(), 500);
            if ids.is_empty() {
                return Ok((out, false));
            }
            for id in &ids {
                if !prefix_ok(id) {
                    return Ok((out, false));
                }
                if let Some(r) = tx.get_run(id)?
                    && keep(&r)
                {
                    if out.len() == PAGE {
                        return Ok((out, true));
                    }
                    out.push(r);
                }
            }
            before = ids.last().cloned();
        }
    }
    let f = RunFilter {
        schedule_id: q.schedule.clone(),
        state: q.status,
        benchmark: q.benchmark.clone(),
        limit: PAGE as u32 + 1,
        before,
    };
    let mut rows = tx.list_runs(&f)?;
    rows.retain(|r| prefix_ok(&r.run_id));
    let more = rows.len() > PAGE;
    rows.truncate(PAGE);
    Ok((rows, more))
}

/// `/runs`: runs filtered by schedule, benchmark, status, verdict and run
/// id, newest first, [`PAGE`] per page.
pub async fn runs(State(h): State<Http>, headers: HeaderMap, uri: Uri) -> Response {
    let t0 = Instant::now();
    if let Err(r) = access(&h, &headers, &path_and_query(&uri), false) {
        return r;
    }
    let q = match RunsQuery::parse(uri.query().unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return error_page(&h, &headers, StatusCode::BAD_REQUEST, &e),
    };
    let c = match coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Some(id) = q.q.as_ref().filter(|p| p.len() == 26)
        && is_run_id(id)
        && q == (RunsQuery {
            q: Some(id.clone()),
            ..Default::default()
        })
    {
        let id2 = id.clone();
        if let Ok(Some(_)) = c.db_read(move |tx| tx.get_run(&id2)).await {
            return (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, format!("/runs/{id}"))],
            )
                .into_response();
        }
    }
    let ix = c.verdicts.clone();
    let q2 = q.clone();
    let read = c
        .db_read(move |tx| {
            let page = select_runs(tx, &ix, &q2)?;
            Ok((page, tx.list_schedules()?))
        })
        .await;
    let ((rows, more), schedules) = match read {
        Ok(x) => x,
        Err(e) => return store_error(&h, &headers, e),
    };
    let verdicts = c
        .verdicts()
        .verdicts_of(rows.iter().map(|r| r.run_id.as_str()));
    let names: HashMap<&str, &str> = schedules
        .iter()
        .map(|s| (s.schedule_id.as_str(), s.name.as_str()))
        .collect();

    let mut b = String::with_capacity(32 * 1024);
    b.push_str(
        "<h1>Runs</h1><form method=\"get\" action=\"/runs\" class=\"filters\" id=\"filters\">",
    );
    b.push_str("<label>schedule <select name=\"schedule\"><option value=\"\">any</option>");
    for s in &schedules {
        let sel = if q.schedule.as_deref() == Some(&s.schedule_id) {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            b,
            "<option value=\"{}\"{sel}>{}</option>",
            esc(&s.schedule_id),
            esc(&s.name)
        );
    }
    let _ = write!(
        b,
        "</select></label><label>benchmark <input name=\"benchmark\" size=\"12\" value=\"{}\"></label>",
        esc(q.benchmark.as_deref().unwrap_or(""))
    );
    b.push_str("<label>status <select name=\"status\"><option value=\"\">any</option>");
    for st in crate::metrics::RUN_STATES {
        let sel = if q.status.map(|s| s.as_str()) == Some(*st) {
            " selected"
        } else {
            ""
        };
        let _ = write!(b, "<option{sel}>{st}</option>");
    }
    b.push_str(
        "</select></label><label>verdict <select name=\"verdict\"><option value=\"\">any</option>",
    );
    for v in benchlake_core::verdict::STATUSES {
        let sel = if q.verdict.as_deref() == Some(v) {
            " selected"
        } else {
            ""
        };
        let _ = write!(b, "<option{sel}>{v}</option>");
    }
    let _ = write!(
        b,
        "</select></label><label>run id <input name=\"q\" size=\"28\" maxlength=\"26\" placeholder=\"01J…\" value=\"{}\"></label>\
         <button type=\"submit\">Filter</button> <a href=\"/runs\">clear</a></form>",
        esc(q.q.as_deref().unwrap_or(""))
    );
    if rows.is_empty() {
        b.push_str("<p class=\"muted\" id=\"no-runs\">No runs match.</p>");
    } else {
        b.push_str("<table id=\"runs\"><thead><tr><th>run</th><th>benchmark</th><th>schedule</th><th>status</th><th>verdict</th><th>submitted</th><th>duration</th><th>error</th></tr></thead><tbody>");
        for r in &rows {
            let dur = match (r.started_at_ms, r.finished_at_ms) {
                (Some(s), Some(f)) => html::duration(f - s),
                (Some(s), None) => format!("{} …", html::duration(c.now() - s)),
                _ => "—".into(),
            };
            let sched = r
                .schedule_id
                .as_deref()
                .map(|s| names.get(s).copied().unwrap_or(s))
                .unwrap_or("—");
            let err = r.error.as_deref().unwrap_or("");
            let short: String = err.chars().take(120).collect();
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"err\" title=\"{}\">{}</td></tr>",
                run_link(&r.run_id),
                esc(&r.benchmark),
                esc(sched),
                badge(r.state.as_str()),
                verdict_badge(verdicts.get(&r.run_id).copied()),
                html::time(r.submitted_at_ms),
                dur,
                esc(err),
                esc(&short)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("<p class=\"pager\">");
    if q.before.is_some() {
        let _ = write!(b, "<a href=\"{}\">« newest</a> ", esc(&q.link(None)));
    }
    if more && let Some(last) = rows.last() {
        let _ = write!(
            b,
            "<a id=\"older\" href=\"{}\">older »</a>",
            esc(&q.link(Some(&last.run_id)))
        );
    }
    b.push_str("</p>");
    b.push_str(&footer(t0, ""));
    Html(html::page(
        "Runs",
        "",
        &Chrome::of(&h, &headers).at("/runs"),
        &b,
    ))
    .into_response()
}

// ---------------------------------------------------------------- run page

pub(super) struct RunData {
    pub(super) run: RunRow,
    pub(super) tasks: Vec<crate::model::TaskRow>,
    pub(super) jobs: Vec<crate::model::JobRow>,
    pub(super) files: Vec<CommittedFile>,
    pub(super) schedule: Option<String>,
}

pub(super) async fn read_run(c: &Coordinator, id: String) -> crate::error::Result<Option<RunData>> {
    c.db_read(move |tx| {
        let Some(run) = tx.get_run(&id)? else {
            return Ok(None);
        };
        let schedule = match &run.schedule_id {
            Some(s) => tx.get_schedule(s)?.map(|s| s.name),
            None => None,
        };
        Ok(Some(RunData {
            tasks: tx.tasks_of_run(&id)?,
            jobs: tx.jobs_of_run(&id)?,
            files: tx.committed_files_of_run(&id)?,
            schedule,
            run,
        }))
    })
    .await
}

/// A fingerprint of what a live page shows: it changes when a state does.
fn version(d: &RunData) -> String {
    let mut v = d.run.state.as_str().to_string();
    for t in &d.tasks {
        // A Slurm job's state and reason change while the task stays LEASED.
        let _ = write!(v, ";{}{}{}", t.state.as_str(), t.attempt, t.report.message);
    }
    for j in &d.jobs {
        let _ = write!(v, ";{}{}", j.state.as_str(), j.attempt);
    }
    let _ = write!(v, ";{}", d.files.len());
    format!("{:016x}", fnv(&v))
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

pub(super) fn validate_id(h: &Http, headers: &HeaderMap, id: &str) -> Option<Response> {
    (!is_run_id(id)).then(|| {
        error_page(
            h,
            headers,
            StatusCode::BAD_REQUEST,
            "not a run id: a ULID is expected (26 characters of Crockford base32)",
        )
    })
}

/// Views of a run that later pages add, by the tables that hold their data.
const VIEWS: &[(&str, &str, &str)] = &[
    (
        "linktest_timings",
        "LinkTest",
        "pair matrix, histogram, slowest pairs",
    ),
    (
        "io_results",
        "I/O trends",
        "bandwidth over time per schedule and operation",
    ),
    (
        "alltoallv_patterns",
        "alltoallv",
        "patterns and heat maps per lead rank",
    ),
    ("replays", "replay", "sweep curves and per-rank breakdown"),
];

/// `/runs/{id}`: one run.
pub async fn run(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let t0 = Instant::now();
    if let Err(r) = access(&h, &headers, &path_and_query(&uri), false) {
        return r;
    }
    if let Some(r) = validate_id(&h, &headers, &id) {
        return r;
    }
    let c = match coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let d = match read_run(&c, id.clone()).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return error_page(&h, &headers, StatusCode::NOT_FOUND, &format!("no run {id}"));
        }
        Err(e) => return store_error(&h, &headers, e),
    };
    let r = &d.run;
    // Every row, the node rows of an older run read from the lake.
    let verdicts = match crate::verdicts::read_run(&c, &id).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(run = %id, error = %e, "cannot read the run's node verdicts");
            c.verdicts().run(&id)
        }
    };
    let verdict = verdicts.as_ref().and_then(|v| v.verdict());
    let mut b = String::with_capacity(32 * 1024);
    let _ = write!(
        b,
        "<h1>Run <span class=\"mono\" id=\"run-id\">{}</span> {} {}</h1>",
        esc(&r.run_id),
        badge(r.state.as_str()).replace("<span ", "<span id=\"run-state\" "),
        if verdict.is_some() {
            verdict_badge(verdict).replace("<span ", "<span id=\"run-verdict\" ")
        } else {
            String::new()
        }
    );
    if let Some(a) = super::actions::admin(&h, &headers) {
        b.push_str(&super::actions::run_buttons(&a, r, &d.tasks));
    }
    if !r.state.is_final() {
        b.push_str("<p class=\"live\">live: this page updates while the run is in progress <span id=\"live-status\"></span></p>");
    }
    // Summary.
    let dur = match (r.started_at_ms, r.finished_at_ms) {
        (Some(s), Some(f)) => html::duration(f - s),
        (Some(s), None) => format!("{} so far", html::duration(c.now() - s)),
        _ => "—".into(),
    };
    let _ = write!(
        b,
        "<dl class=\"facts\"><dt>benchmark</dt><dd><a href=\"/runs?benchmark={}\">{}</a></dd>\
         <dt>kind</dt><dd>{}</dd><dt>schedule</dt><dd>{}</dd>\
         <dt>submitted</dt><dd>{}</dd><dt>started</dt><dd>{}</dd><dt>finished</dt><dd>{}</dd>\
         <dt>duration</dt><dd>{dur}</dd><dt>date partition</dt><dd>{}</dd>",
        esc(&html::url_encode(&r.benchmark)),
        esc(&r.benchmark),
        esc(&r.kind),
        match (&r.schedule_id, &d.schedule) {
            (Some(sid), name) => format!(
                "<a href=\"/runs?schedule={}\">{}</a>",
                esc(&html::url_encode(sid)),
                esc(name.as_deref().unwrap_or(sid))
            ),
            (None, _) => "submitted".into(),
        },
        html::time(r.submitted_at_ms),
        html::opt_time(r.started_at_ms),
        html::opt_time(r.finished_at_ms),
        esc(&r.date)
    );
    if let Some(p) = &r.rerun_of {
        let _ = write!(b, "<dt>rerun of</dt><dd>{}</dd>", run_link(p));
    }
    if let Some(e) = &r.error {
        let _ = write!(
            b,
            "<dt>error</dt><dd class=\"err\" id=\"run-error\">{}</dd>",
            esc(e)
        );
    }
    b.push_str("</dl>");

    // Spec.
    let s = &r.spec;
    b.push_str("<section><h2>Spec</h2><table class=\"kv\" id=\"params\"><tbody>");
    let _ = write!(
        b,
        "<tr><th>launcher</th><td>{}</td></tr><tr><th>max attempts</th><td>{}</td></tr><tr><th>timeout</th><td>{} s</td></tr>",
        esc(&format!("{:?}", s.launcher).to_lowercase()),
        s.max_attempts,
        s.timeout_s
    );
    let sel = {
        let mut parts = Vec::new();
        if !s.nodes.names.is_empty() {
            parts.push(format!("names {}", s.nodes.names.join(",")));
        }
        for (k, v) in &s.nodes.labels {
            parts.push(format!("label {k}={v}"));
        }
        if s.nodes.count > 0 {
            parts.push(format!("count {}", s.nodes.count));
        }
        if parts.is_empty() {
            "any one agent".to_string()
        } else {
            parts.join("; ")
        }
    };
    let _ = write!(b, "<tr><th>nodes</th><td>{}</td></tr>", esc(&sel));
    for (k, v) in &s.params {
        let _ = write!(
            b,
            "<tr><th>param <span class=\"mono\">{}</span></th><td class=\"mono param\">{}</td></tr>",
            esc(k),
            esc(v)
        );
    }
    b.push_str("</tbody></table></section>");

    // Tasks.
    let _ = write!(b, "<section><h2>Tasks ({})</h2>", d.tasks.len());
    if d.tasks.is_empty() {
        b.push_str("<p class=\"muted\">No tasks.</p>");
    } else {
        b.push_str("<table id=\"tasks\"><thead><tr><th>task</th><th>node</th><th>rank</th><th>state</th><th>attempt</th><th>exit</th><th>started</th><th>finished</th><th>outputs</th><th>failure</th></tr></thead><tbody>");
        for t in &d.tasks {
            let nodes = if t.peers.len() > 1 {
                format!("{} (+{} peers)", t.agent, t.peers.len() - 1)
            } else {
                t.agent.clone()
            };
            let (slurm_job, said) = slurm_notes(t);
            let _ = write!(
                b,
                "<tr><td class=\"mono\">{}</td><td class=\"node\">{}{}</td><td>{}/{}</td><td>{}{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"err\">{}</td></tr>",
                esc(&t.task_id),
                esc(&nodes),
                slurm_job,
                t.rank,
                t.num_tasks,
                badge(t.state.as_str()),
                said,
                t.attempt,
                t.max_attempts,
                t.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "—".into()),
                html::opt_time(t.started_at_ms),
                html::opt_time(t.finished_at_ms),
                t.outputs.len(),
                esc(t.error.as_deref().unwrap_or(""))
            );
            if !t.stdout_tail.is_empty() || !t.stderr_tail.is_empty() {
                let _ = write!(
                    b,
                    "<tr class=\"logs\"><td colspan=\"10\"><details{}><summary>log tails of {}</summary>",
                    if t.state == crate::model::TaskState::Failed {
                        " open"
                    } else {
                        ""
                    },
                    esc(&t.task_id)
                );
                for (name, tail) in [("stdout", &t.stdout_tail), ("stderr", &t.stderr_tail)] {
                    if !tail.is_empty() {
                        let _ = write!(b, "<h4>{name}</h4><pre class=\"tail\">{}</pre>", esc(tail));
                    }
                }
                b.push_str("</details></td></tr>");
            }
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");

    // Jobs.
    let _ = write!(b, "<section><h2>Jobs ({})</h2>", d.jobs.len());
    if d.jobs.is_empty() {
        b.push_str("<p class=\"muted\">No jobs.</p>");
    } else {
        b.push_str("<table id=\"jobs\"><thead><tr><th>job</th><th>kind</th><th>state</th><th>attempt</th><th>worker</th><th>created</th><th>files</th><th>failure</th></tr></thead><tbody>");
        for j in &d.jobs {
            let _ = write!(
                b,
                "<tr><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"err\">{}</td></tr>",
                esc(&j.job_id),
                esc(&j.kind),
                badge(j.state.as_str()),
                j.attempt,
                j.max_attempts,
                esc(j.leased_by.as_deref().unwrap_or("—")),
                html::time(j.created_ms),
                j.committed_keys.len(),
                esc(j.error.as_deref().unwrap_or(""))
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");

    // Verdicts.
    b.push_str("<section><h2>Verdicts</h2>");
    match &verdicts {
        Some(v) if v.rows().next().is_some() => {
            b.push_str("<table id=\"verdicts\"><thead><tr><th>check</th><th>status</th><th class=\"num\">value</th><th class=\"num\">reference</th><th>change</th><th>message</th></tr></thead><tbody>");
            for row in v.rows() {
                let _ = write!(
                    b,
                    "<tr><td class=\"mono\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"change\">{}</td><td>{}</td></tr>",
                    esc(&row.check),
                    badge(&row.status),
                    esc(&html::figure(row.value, &row.unit)),
                    esc(&html::figure(row.reference, &row.unit)),
                    change_cell(row),
                    esc(&row.message)
                );
            }
            b.push_str("</tbody></table>");
        }
        Some(v) if v.node_rows().next().is_some() => {}
        _ => b.push_str("<p class=\"muted\">No checks ran for this run.</p>"),
    }
    // Node-level checks: one row per node and check, each node linked to its page.
    if let Some(v) = &verdicts
        && v.node_rows().next().is_some()
    {
        b.push_str("<h3>Per node</h3><table id=\"node-verdicts\"><thead><tr><th>node</th><th>check</th><th>status</th><th class=\"num\">value</th><th class=\"num\">reference</th><th>message</th></tr></thead><tbody>");
        let mut rows: Vec<&(String, crate::verdicts::CheckRow)> = v.node_rows().collect();
        // Findings first, then by node.
        rows.sort_by(|a, b| {
            let r = |x: &str| benchlake_core::verdict::rank(x).unwrap_or(0);
            r(&b.1.status)
                .cmp(&r(&a.1.status))
                .then_with(|| a.0.cmp(&b.0))
                .then_with(|| a.1.check.cmp(&b.1.check))
        });
        for (node, row) in rows {
            let _ = write!(
                b,
                "<tr><td><a href=\"/nodes/{}\">{}</a></td><td class=\"mono\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&html::url_encode(node)),
                esc(node),
                esc(&row.check),
                badge(&row.status),
                esc(&html::figure(row.value, &row.unit)),
                esc(&html::figure(row.reference, &row.unit)),
                esc(&row.message)
            );
        }
        b.push_str("</tbody></table>");
    }
    // Failing links (LinkTest and netprobe runs): the run's `link_health` rows.
    if d.files.iter().any(|f| f.table == "link_health") {
        match super::links::of_run(&c.lake, &id, &d.files).await {
            Ok(rows) => {
                let _ = write!(
                    b,
                    "<h3>Failing links ({})</h3><p class=\"muted\">Each link's time against its own usual at its hosts' speed tonight (docs/verdicts.md, \"Links\"); a link drains no node.</p>{}",
                    rows.len(),
                    super::links::table(&rows, "link-verdicts", false)
                );
            }
            Err(e) => {
                let _ = write!(
                    b,
                    "<h3>Failing links</h3><p class=\"err\">cannot read the run's link_health rows: {}</p>",
                    esc(&e)
                );
            }
        }
    }
    // What the run's verdicts did to Slurm nodes.
    let events = c.node_actions.events_of_run(&id);
    if !events.is_empty() {
        b.push_str("<h3>Node actions</h3><table id=\"node-actions\"><thead><tr><th>when</th><th>node</th><th>action</th><th>what</th></tr></thead><tbody>");
        for e in &events {
            let _ = write!(
                b,
                "<tr><td>{}</td><td><a href=\"/nodes/{}\">{}</a></td><td>{}{}</td><td>{}</td></tr>",
                html::time(e.at_ms),
                esc(&html::url_encode(&e.node)),
                esc(&e.node),
                badge(&e.action),
                if e.dry_run { " (dry run)" } else { "" },
                esc(&e.detail)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");

    // Tables written.
    b.push_str("<section><h2>Tables written</h2>");
    let mut by_table: BTreeMap<&str, (usize, u64, u64)> = BTreeMap::new();
    for f in &d.files {
        let e = by_table.entry(f.table.as_str()).or_default();
        e.0 += 1;
        e.1 += f.rows;
        e.2 += f.bytes;
    }
    if by_table.is_empty() {
        b.push_str("<p class=\"muted\">Nothing committed yet.</p>");
    } else {
        b.push_str("<table id=\"tables\"><thead><tr><th>table</th><th class=\"num\">files</th><th class=\"num\">rows</th><th class=\"num\">bytes</th></tr></thead><tbody>");
        for (t, (n, rows, bytes)) in &by_table {
            let _ = write!(
                b,
                "<tr><td class=\"mono\">{}</td><td class=\"num\">{n}</td><td class=\"num\">{rows}</td><td class=\"num\">{}</td></tr>",
                esc(t),
                html::bytes(*bytes)
            );
        }
        b.push_str("</tbody></table><details><summary>object keys</summary><ul class=\"keys\">");
        for f in &d.files {
            // A part merged by compaction: where its rows are now.
            match &f.merged {
                None => {
                    let _ = write!(b, "<li class=\"mono\">{}</li>", esc(&f.key));
                }
                Some(m) => {
                    let _ = write!(
                        b,
                        "<li class=\"mono\">{} <span class=\"muted\">(merged: row groups {}–{} of {})</span></li>",
                        esc(&f.key),
                        m.first_group,
                        m.first_group + m.groups.saturating_sub(1),
                        esc(&m.object)
                    );
                }
            }
        }
        b.push_str("</ul></details>");
    }
    b.push_str("</section>");

    // Reports and views.
    b.push_str("<section><h2>Reports</h2><ul id=\"reports\">");
    let mut any = false;
    for (table, name, what) in VIEWS {
        if by_table.contains_key(table) {
            any = true;
            match super::view_link(table, r) {
                Some(href) => {
                    let _ = write!(
                        b,
                        "<li><a class=\"view\" href=\"{}\">{name}</a>: {what}</li>",
                        esc(&href)
                    );
                }
                None => {
                    let _ = write!(
                        b,
                        "<li>{name}: {what} <span class=\"muted\">(page to come)</span></li>"
                    );
                }
            }
        }
    }
    if by_table.contains_key("linktest_timings") {
        let _ = write!(
            b,
            "<li>LinkTest report (SVG and PNG): <code>benchlake report linktest {} --lake LAKE</code></li>",
            esc(&r.run_id)
        );
    }
    if !any {
        b.push_str("<li class=\"muted\">No report for this run's tables.</li>");
    }
    b.push_str("</ul></section>");
    b.push_str(&footer(t0, ""));
    let attrs = if r.state.is_final() {
        String::new()
    } else {
        format!(
            " data-live=\"/api/runs/{}\" data-version=\"{}\"",
            esc(&r.run_id),
            version(&d)
        )
    };
    Html(html::page(
        &format!("Run {}", r.run_id),
        &attrs,
        &Chrome::of(&h, &headers).at("/runs"),
        &b,
    ))
    .into_response()
}

/// `/api/runs/{id}`: the run's state as JSON, with the `version` its page
/// compares to reload when something changed.
pub async fn run_json(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = access(&h, &headers, &path_and_query(&uri), true) {
        return r;
    }
    let json = |code: StatusCode, v: serde_json::Value| {
        (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            v.to_string(),
        )
            .into_response()
    };
    if !is_run_id(&id) {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "not a run id"}),
        );
    }
    let Some(c) = h.coordinator() else {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": "not serving"}),
        );
    };
    let d = match read_run(&c, id).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return json(
                StatusCode::NOT_FOUND,
                serde_json::json!({"error": "no such run"}),
            );
        }
        Err(e) => {
            return json(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"error": e.to_string()}),
            );
        }
    };
    let verdict = c.verdicts().verdict(&d.run.run_id);
    json(
        StatusCode::OK,
        serde_json::json!({
            "run_id": d.run.run_id,
            "state": d.run.state.as_str(),
            "final": d.run.state.is_final(),
            "verdict": verdict,
            "version": version(&d),
            "tasks": d.tasks.iter().map(|t| serde_json::json!({
                "task_id": t.task_id, "agent": t.agent, "state": t.state.as_str(), "attempt": t.attempt,
            })).collect::<Vec<_>>(),
            "jobs": d.jobs.iter().map(|j| serde_json::json!({
                "job_id": j.job_id, "kind": j.kind, "state": j.state.as_str(), "attempt": j.attempt,
            })).collect::<Vec<_>>(),
        }),
    )
}

/// A task's Slurm job for the node cell (`<br>Slurm job 7 on n[1-3]`) and,
/// while it has not ended, what its agent last said for the state cell
/// (`<br>Slurm job 7 PENDING (Resources)`): escaped HTML, empty when none
/// (docs/slurm.md, batch mode).
fn slurm_notes(t: &crate::model::TaskRow) -> (String, String) {
    let r = &t.report;
    let job = if r.slurm_job_id.is_empty() {
        String::new()
    } else if r.slurm_nodes.is_empty() {
        format!(
            "<br><span class=\"muted\">Slurm job {}</span>",
            esc(&r.slurm_job_id)
        )
    } else {
        format!(
            "<br><span class=\"muted\">Slurm job {} on {}</span>",
            esc(&r.slurm_job_id),
            esc(&r.slurm_nodes)
        )
    };
    let said = if r.message.is_empty() || t.state.is_final() {
        String::new()
    } else {
        format!("<br><span class=\"muted\">{}</span>", esc(&r.message))
    };
    (job, said)
}

/// The change point of a REGRESSION (or of a FAIL it explains): "since"
/// with a link to its first run, its night, the step and the confidence;
/// empty for other rows (docs/io.md, "Regressions").
fn change_cell(row: &crate::verdicts::CheckRow) -> String {
    let Some(since) = &row.since_run else {
        return String::new();
    };
    let mut s = format!(
        "since <a class=\"mono\" href=\"/runs/{}\">{}</a>",
        esc(since),
        esc(row.since_date.as_deref().unwrap_or(since))
    );
    if let Some(step) = row.step {
        let _ = write!(s, " {:+.1} %", step * 100.0);
    }
    if let Some(c) = row.confidence {
        let _ = write!(s, " (confidence {c:.3})");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regression_shows_its_change_point_linked_and_escaped() {
        let mut row = crate::verdicts::CheckRow {
            check: "io.write_bw_mib_s.vs_median".into(),
            status: "REGRESSION".into(),
            ..Default::default()
        };
        assert_eq!(change_cell(&row), "");
        row.since_run = Some("01K<R>".into());
        row.since_date = Some("2026-11-20".into());
        row.step = Some(-0.1234);
        row.confidence = Some(0.9991);
        assert_eq!(
            change_cell(&row),
            "since <a class=\"mono\" href=\"/runs/01K&lt;R&gt;\">2026-11-20</a> -12.3 % (confidence 0.999)"
        );
    }

    #[test]
    fn a_tasks_slurm_job_and_progress_are_shown_escaped() {
        let mut t = crate::lifecycle::task::new(
            "R",
            "login",
            0,
            1,
            &crate::model::Spec {
                benchmark: "pio".into(),
                params: Default::default(),
                nodes: Default::default(),
                launcher: benchlake_core::bench::LauncherKind::Sbatch,
                max_attempts: 1,
                timeout_s: 60,
                slurm: Default::default(),
            },
            vec!["login".into()],
            0,
        );
        assert_eq!(slurm_notes(&t), (String::new(), String::new()));
        t.state = crate::model::TaskState::Leased;
        t.report.slurm_job_id = "7".into();
        t.report.message = "Slurm job 7 PENDING (<Resources>)".into();
        let (job, said) = slurm_notes(&t);
        assert_eq!(job, "<br><span class=\"muted\">Slurm job 7</span>");
        assert_eq!(
            said,
            "<br><span class=\"muted\">Slurm job 7 PENDING (&lt;Resources&gt;)</span>"
        );
        t.state = crate::model::TaskState::Done;
        t.report.slurm_nodes = "n[1-3]".into();
        let (job, said) = slurm_notes(&t);
        assert_eq!(
            job,
            "<br><span class=\"muted\">Slurm job 7 on n[1-3]</span>"
        );
        assert_eq!(said, "", "an ended task shows no progress");
    }

    #[test]
    fn run_ids_and_filters_are_validated() {
        assert!(is_run_id("01JD3Q6Z5YV9C2M4T8N0R7K1PX"));
        assert!(!is_run_id("01jd3q6z5yv9c2m4t8n0r7k1px"));
        assert!(!is_run_id("../../etc/passwd"));
        assert!(!is_run_id("<script>"));
        let q = RunsQuery::parse("status=FAILED&verdict=FAIL&q=01jd&benchmark=pio").unwrap();
        assert_eq!(q.status, Some(RunState::Failed));
        assert_eq!(q.q.as_deref(), Some("01JD"));
        assert_eq!(
            q.link(Some("01JD3Q6Z5YV9C2M4T8N0R7K1PX")),
            "/runs?benchmark=pio&status=FAILED&verdict=FAIL&q=01JD&before=01JD3Q6Z5YV9C2M4T8N0R7K1PX"
        );
        assert!(RunsQuery::parse("status=BOGUS").is_err());
        assert!(RunsQuery::parse("verdict=<x>").is_err());
        assert!(RunsQuery::parse("benchmark=%3Cscript%3E").is_err());
        assert!(RunsQuery::parse("before=nope").is_err());
        assert!(RunsQuery::parse("q=01JD!").is_err());
    }
}
