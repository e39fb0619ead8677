//! The LinkTest view of a run, `/runs/{id}/linktest` (docs/dashboard.md):
//! the rank×rank pair matrix as a server-drawn PNG with rank ticks, host
//! labels and boundaries, whose hover values come from
//! `/api/runs/{id}/linktest/pair`; the histogram of pair times; the slowest
//! pairs with their serial retests; host pairs above the threshold; the
//! host×host matrix; the run's checks.
//!
//! The numbers are those of the LinkTest report ([`benchlake_analysis::
//! linktest_report::summarize`] over the run rebuilt from the lake by
//! [`benchlake_analysis::linktest_lake::load_run`]), so the page and
//! `benchlake report linktest` never disagree. What the page needs is derived
//! once per (run, file, permutation, committed files) on a blocking thread and
//! kept in the [`super::cache::ViewCache`]: the summary, the matrix image
//! (one pixel per pair up to [`MATRIX_PX`] ranks, else the slowest pair of
//! each block, so a slow link never disappears) and every pair time as f32
//! for the hover (64 MiB at 4,096 ranks).
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};
use benchlake_analysis::linktest_report::{
    self as report, ReportOptions, Scale, Summary, fmt as rfmt,
};

use super::html::{self, Chrome, esc};
use super::pages::{self, RunData};
use super::{access, cache};
use crate::http::Http;

/// The matrix image has at most this many pixels per side: beyond, a pixel
/// is the slowest pair of a block of ranks. Equal to the drawn side, so the
/// browser only ever enlarges the image (nearest neighbour): shrinking it
/// would drop pixels, and with them slow links.
pub const MATRIX_PX: usize = 640;
/// Side of the drawn matrix (CSS px).
const MS: f64 = MATRIX_PX as f64;
/// Tables LinkTest views read.
const TABLES: &[&str] = &[
    "linktest_runs",
    "linktest_ranks",
    "linktest_timings",
    "linktest_slow_links",
    "linktest_alltoall",
];
/// Slowest pairs listed.
const TOP_PAIRS: usize = 20;
/// Host×host matrices are drawn up to this many hosts.
const MAX_HOSTS: usize = 160;

/// What the page shows of one file and permutation of a run.
#[derive(Debug)]
pub struct LinkTestView {
    /// The file (`source`) shown.
    pub source: String,
    /// Every file of the run, sorted.
    pub sources: Vec<String>,
    /// The permutation shown.
    pub permutation: usize,
    /// Permutations stored.
    pub permutations: usize,
    /// The report's numbers (matrix binned to [`MATRIX_PX`]).
    pub summary: Summary,
    /// Ranks.
    pub n: usize,
    /// Every pair's time, row-major by initiating rank (NaN: not measured).
    pub times: Vec<f32>,
    /// Host index (into `summary.hosts`) of each rank.
    pub host_of: Vec<u32>,
    /// Serial retest times by (from, to).
    pub retests: HashMap<(usize, usize), f64>,
    /// The matrix image.
    pub png: bytes::Bytes,
    /// Time the derivation took (ms).
    pub load_ms: f64,
}

impl LinkTestView {
    /// Approximate bytes held.
    fn bytes(&self) -> usize {
        self.times.len() * 4
            + self.summary.matrix.2.len() * 8
            + self.summary.host_matrix_max.len() * 16
            + self.host_of.len() * 4
            + self.png.len()
            + 4096
    }

    /// The time of pair (from, to), when measured.
    pub fn time(&self, from: usize, to: usize) -> Option<f64> {
        let t = *self.times.get(from.checked_mul(self.n)?.checked_add(to)?)?;
        (!t.is_nan() && from < self.n && to < self.n).then_some(f64::from(t))
    }

    fn host(&self, rank: usize) -> &str {
        self.host_of
            .get(rank)
            .and_then(|h| self.summary.hosts.get(*h as usize))
            .map(String::as_str)
            .unwrap_or("?")
    }
}

/// Derives the view of `run_id` (file `source` or the first, permutation
/// `perm`) from the lake: runs on a blocking thread.
fn load(
    rt: tokio::runtime::Handle,
    lake: benchlake_core::lake::Lake,
    run_id: String,
    source: Option<String>,
    perm: usize,
) -> Result<(LinkTestView, usize), String> {
    use arrow::array::AsArray;
    let t0 = Instant::now();
    let runs = rt
        .block_on(benchlake_analysis::linktest_lake::read_run_table(
            &lake,
            "linktest_runs",
            &run_id,
        ))
        .map_err(|e| e.to_string())?;
    let mut sources: Vec<String> = Vec::new();
    for b in &runs {
        if let Some(c) = b.column_by_name("source") {
            let c = c
                .as_string_opt::<i32>()
                .ok_or("linktest_runs.source is not text")?;
            sources.extend(c.iter().flatten().map(str::to_string));
        }
    }
    sources.sort();
    sources.dedup();
    if let Some(s) = &source
        && !sources.contains(s)
    {
        return Err(format!(
            "not found: run {run_id} has no LinkTest file '{s}'"
        ));
    }
    let (run, chosen) = rt
        .block_on(benchlake_analysis::linktest_lake::load_run(
            &lake,
            &run_id,
            source.as_deref(),
        ))
        .map_err(|e| match e {
            benchlake_analysis::linktest_lake::LakeRunError::NotFound { .. } => {
                format!("not found: {e}")
            }
            e => e.to_string(),
        })?;
    let permutations = run.permutations.len();
    let opts = ReportOptions {
        permutation: perm,
        max_matrix_cells: MATRIX_PX,
        top_pairs: TOP_PAIRS,
        title: format!("LinkTest run {run_id}"),
        ..Default::default()
    };
    let summary = report::summarize(&run, &opts).map_err(|e| format!("not found: {e}"))?;
    let n = run.num_tasks;
    let p = run
        .permutations
        .get(perm)
        .ok_or_else(|| format!("not found: permutation {perm}"))?;
    let times: Vec<f32> = p
        .times
        .iter()
        .zip(&p.steps)
        .enumerate()
        .map(|(k, (t, s))| {
            if k / n.max(1) == k % n.max(1) || (*t == 0.0 && *s == 0) {
                f32::NAN
            } else {
                *t as f32
            }
        })
        .collect();
    let retests = p
        .slow_links
        .iter()
        .filter_map(|s| s.retest_time_s.map(|r| ((s.from_rank, s.to_rank), r)))
        .collect();
    drop(run);
    let index: HashMap<&str, u32> = summary
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), i as u32))
        .collect();
    // Host of each rank, from the boundaries (ranks of a block share a host).
    let mut host_of = vec![0u32; n];
    let b = &summary.host_boundaries;
    for (k, (start, host)) in b.iter().enumerate() {
        let end = b.get(k + 1).map(|x| x.0).unwrap_or(n);
        let h = index.get(host.as_str()).copied().unwrap_or(0);
        for slot in host_of.iter_mut().take(end).skip(*start) {
            *slot = h;
        }
    }
    let (side, _, cells) = &summary.matrix;
    let png = report::matrix_png(*side, cells, Scale::of(&summary)).map_err(|e| e.to_string())?;
    let view = LinkTestView {
        source: chosen,
        sources,
        permutation: perm,
        permutations,
        n,
        times,
        host_of,
        retests,
        png: bytes::Bytes::from(png),
        summary,
        load_ms: t0.elapsed().as_secs_f64() * 1e3,
    };
    let size = view.bytes();
    tracing::info!(run = %run_id, ranks = n, ms = view.load_ms as u64, "dashboard: LinkTest view derived");
    Ok((view, size))
}

/// The query of the LinkTest routes: `source`, `perm`, and for the pair
/// endpoint `from` and `to`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Query {
    source: Option<String>,
    perm: usize,
    from: Option<usize>,
    to: Option<usize>,
    /// Zoom window: first row, first column, ranks a side.
    r0: Option<usize>,
    c0: Option<usize>,
    span: Option<usize>,
    /// `matrix=1`: the pair view (matrix, histogram, host × host), read
    /// from every pair, even where the per-host summary could answer.
    matrix: bool,
}

impl Query {
    /// Whether the request asks for the per-host summary page: no file,
    /// permutation, zoom or matrix named.
    pub(super) fn wants_summary(&self) -> bool {
        !self.matrix
            && self.source.is_none()
            && self.perm == 0
            && self.r0.is_none()
            && self.c0.is_none()
            && self.span.is_none()
    }
}

/// The part of the matrix drawn: ranks `r0..r0+span` × `c0..c0+span`, at
/// `bin` ranks a pixel on `side` pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub r0: usize,
    pub c0: usize,
    pub span: usize,
    pub bin: usize,
    pub side: usize,
}

impl Window {
    /// The window of a query over `n` ranks (clamped into the matrix; the
    /// whole matrix by default).
    fn of(q: &Query, n: usize) -> Self {
        let n = n.max(1);
        let span = q.span.unwrap_or(n).clamp(1, n);
        let bin = span.div_ceil(MATRIX_PX).max(1);
        Self {
            r0: q.r0.unwrap_or(0).min(n - span),
            c0: q.c0.unwrap_or(0).min(n - span),
            span,
            bin,
            side: span.div_ceil(bin),
        }
    }

    /// Whether this is the whole matrix of `n` ranks.
    fn whole(&self, n: usize) -> bool {
        self.r0 == 0 && self.c0 == 0 && self.span >= n
    }

    /// `&r0=…&c0=…&span=…`, empty for the whole matrix.
    fn query(&self, n: usize) -> String {
        if self.whole(n) {
            String::new()
        } else {
            format!("&r0={}&c0={}&span={}", self.r0, self.c0, self.span)
        }
    }
}

/// The window's cells (`side`², row-major): the slowest pair of each
/// `bin`×`bin` block, NaN where nothing was measured.
pub fn window_cells(v: &LinkTestView, w: &Window) -> Vec<f64> {
    let mut m = vec![f64::NAN; w.side * w.side];
    for i in 0..w.span {
        for j in 0..w.span {
            if let Some(t) = v.time(w.r0 + i, w.c0 + j) {
                let c = &mut m[(i / w.bin) * w.side + j / w.bin];
                *c = if c.is_nan() { t } else { c.max(t) };
            }
        }
    }
    m
}

impl Query {
    pub(super) fn parse(q: &str) -> Result<Self, String> {
        let m = html::parse_query(q);
        let num = |k: &str| -> Result<Option<usize>, String> {
            match m.get(k).map(|v| v.trim()).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v
                    .parse::<usize>()
                    .ok()
                    .filter(|x| *x <= 1 << 20)
                    .map(Some)
                    .ok_or_else(|| format!("{k}: not a count")),
            }
        };
        let source = match m.get("source").filter(|v| !v.is_empty()) {
            Some(s) if s.len() > 1024 || s.chars().any(char::is_control) => {
                return Err("source: not a file name of this run".into());
            }
            s => s.cloned(),
        };
        Ok(Self {
            source,
            perm: num("perm")?.unwrap_or(0),
            from: num("from")?,
            to: num("to")?,
            r0: num("r0")?,
            c0: num("c0")?,
            span: num("span")?.map(|x| x.max(2)),
            matrix: matches!(m.get("matrix").map(String::as_str), Some("1" | "true")),
        })
    }

    /// `perm=…` of this view, and `source=…` when the request named one: the
    /// page's image, hover and zoom requests then use the same cache entry
    /// as the page (the default file is keyed without its name).
    fn link(&self, perm: usize) -> String {
        match &self.source {
            Some(s) => format!("source={}&perm={perm}", html::url_encode(s)),
            None => format!("perm={perm}"),
        }
    }
}

/// The committed files of run `id` (404/503 as a response).
#[allow(clippy::result_large_err)]
pub(super) async fn files_of(
    h: &Http,
    headers: &HeaderMap,
    c: &crate::Coordinator,
    id: &str,
) -> Result<RunData, Response> {
    match pages::read_run(c, id.to_string()).await {
        Ok(Some(d)) if d.files.iter().any(|f| f.table == "linktest_timings") => Ok(d),
        Ok(Some(_)) => Err(pages::error_page(
            h,
            headers,
            StatusCode::NOT_FOUND,
            &format!("run {id} has no LinkTest tables (linktest_timings)"),
        )),
        Ok(None) => Err(pages::error_page(
            h,
            headers,
            StatusCode::NOT_FOUND,
            &format!("no run {id}"),
        )),
        Err(e) => Err(pages::store_error(h, headers, e)),
    }
}

/// The cached view of the request (or the error response).
#[allow(clippy::result_large_err)]
async fn view(
    h: &Http,
    headers: &HeaderMap,
    uri: &Uri,
    id: &str,
    api: bool,
) -> Result<(Arc<LinkTestView>, RunData, Query), Response> {
    access(h, headers, &pages::path_and_query(uri), api)?;
    if let Some(r) = pages::validate_id(h, headers, id) {
        return Err(r);
    }
    let q = Query::parse(uri.query().unwrap_or(""))
        .map_err(|e| pages::error_page(h, headers, StatusCode::BAD_REQUEST, &e))?;
    let c = pages::coord(h, headers)?;
    let d = files_of(h, headers, &c, id).await?;
    let key = format!(
        "linktest|{id}|{}|{}|{}",
        q.source.as_deref().unwrap_or(""),
        q.perm,
        cache::fingerprint(&d.files, TABLES)
    );
    let (lake, run_id, source, perm) = (c.lake.clone(), id.to_string(), q.source.clone(), q.perm);
    let rt = tokio::runtime::Handle::current();
    // A file or permutation the run does not have is remembered, so asking
    // again does not read the run's tables again.
    let missing = format!("{key}|missing");
    if let Some(m) = h.views().peek::<String>(&missing) {
        return Err(pages::error_page(h, headers, StatusCode::NOT_FOUND, &m));
    }
    match h
        .views()
        .get(key, move || load(rt, lake, run_id, source, perm))
        .await
    {
        Ok(v) => Ok((v, d, q)),
        Err(e) => {
            if let Some(m) = e.strip_prefix("not found: ") {
                h.views().put(missing, m.to_string(), 256 + m.len());
            }
            let (code, msg) = match e.strip_prefix("not found: ") {
                Some(m) => (StatusCode::NOT_FOUND, m.to_string()),
                None => {
                    tracing::warn!(run = %id, error = %e, "dashboard: cannot derive the LinkTest view");
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("cannot read the run's LinkTest tables: {e}"),
                    )
                }
            };
            Err(pages::error_page(h, headers, code, &msg))
        }
    }
}

/// `/runs/{id}/linktest/matrix.png`: the pair matrix image.
pub async fn matrix_png(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let (v, _, q) = match view(&h, &headers, &uri, &id, true).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let w = Window::of(&q, v.n);
    let png = if w.whole(v.n) {
        Ok(v.png.clone())
    } else {
        // A zoomed window (at most 640² pixels): drawn per request, off the runtime.
        tokio::task::spawn_blocking(move || {
            report::matrix_png(w.side, &window_cells(&v, &w), Scale::of(&v.summary))
                .map(bytes::Bytes::from)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
    };
    super::html::png_response(png)
}

/// `/api/runs/{id}/linktest/pair?from=I&to=J`: one pair's values (the
/// matrix's hover).
pub async fn pair_json(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let json = |code: StatusCode, v: serde_json::Value| {
        (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            v.to_string(),
        )
            .into_response()
    };
    let (v, _, q) = match view(&h, &headers, &uri, &id, true).await {
        Ok(x) => x,
        Err(r) => {
            let code = r.status();
            return json(code, serde_json::json!({"error": code.canonical_reason()}));
        }
    };
    let (Some(from), Some(to)) = (q.from, q.to) else {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "from and to: ranks are needed"}),
        );
    };
    if from >= v.n || to >= v.n {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": format!("from, to: ranks are 0..{}", v.n)}),
        );
    }
    json(
        StatusCode::OK,
        pair_value(&v, from, to, &Window::of(&q, v.n)),
    )
}

/// The JSON of pair (from, to): its time, bandwidth, hosts, retest, and
/// the line the page shows. When the image bins ranks (more than
/// [`MATRIX_PX`]), the pair is the slowest of the block (the pixel) holding
/// (from, to), which is what coloured that pixel, and `block` gives the
/// block's rank ranges.
pub fn pair_value(v: &LinkTestView, from: usize, to: usize, w: &Window) -> serde_json::Value {
    let bin = w.bin;
    let mut block = serde_json::Value::Null;
    let mut prefix = String::new();
    let (from, to) = if bin > 1 {
        let bi = w.r0 + from.saturating_sub(w.r0) / bin * bin;
        let bj = w.c0 + to.saturating_sub(w.c0) / bin * bin;
        let (ei, ej) = ((bi + bin).min(v.n), (bj + bin).min(v.n));
        let mut best: Option<(f64, usize, usize)> = None;
        for i in bi..ei {
            for j in bj..ej {
                if let Some(t) = v.time(i, j)
                    && best.is_none_or(|b| t > b.0)
                {
                    best = Some((t, i, j));
                }
            }
        }
        block = serde_json::json!({"from": [bi, ei - 1], "to": [bj, ej - 1]});
        prefix = format!("ranks {bi}–{} → {bj}–{}, slowest: ", ei - 1, ej - 1);
        best.map(|(_, i, j)| (i, j)).unwrap_or((from, to))
    } else {
        (from, to)
    };
    let t = v.time(from, to);
    let retest = v.retests.get(&(from, to)).copied();
    let size = v.summary.message_size;
    let mut text = format!(
        "{prefix}from rank {from} ({}) → to rank {to} ({}): ",
        v.host(from),
        v.host(to)
    );
    match t {
        Some(t) => {
            let _ = write!(text, "{} ({})", rfmt::time(t), rfmt::bandwidth(size, t));
        }
        None => text.push_str("not measured"),
    }
    if let Some(r) = retest {
        let _ = write!(text, "; serial retest {}", rfmt::time(r));
    }
    serde_json::json!({
        "from": from, "to": to,
        "from_host": v.host(from), "to_host": v.host(to),
        "time_s": t, "retest_time_s": retest,
        "block": block,
        "text": text,
    })
}

/// `/runs/{id}/linktest`: the page.
pub async fn page(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let t0 = Instant::now();
    // Runs with the per-host summary answer from it; the pairs are read only
    // when the matrix is asked for (`?matrix=1`, or a file, permutation or
    // zoom).
    if let Some(r) = super::linktest_hosts::page(&h, &headers, &uri, &id, t0).await {
        return r;
    }
    let (v, d, q) = match view(&h, &headers, &uri, &id, false).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let checks = h
        .coordinator()
        .and_then(|c| c.verdicts().run(&id))
        .map(|r| r.rows().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    let body = render(&v, &d.run.run_id, &q, &checks);
    Html(html::page(
        &format!("LinkTest {id}"),
        "",
        &Chrome::of(&h, &headers).at("/runs"),
        &format!(
            "{body}{}",
            pages::footer(t0, &format!(" · view derived in {:.0} ms", v.load_ms))
        ),
    ))
    .into_response()
}

fn render(v: &LinkTestView, id: &str, q: &Query, checks: &[crate::verdicts::CheckRow]) -> String {
    let s = &v.summary;
    let mut b = String::with_capacity(64 * 1024);
    let _ = write!(
        b,
        "<h1>LinkTest · run {}</h1><p class=\"muted\">file <span class=\"mono\" id=\"lt-source\">{}</span>, permutation {} of {} · <a href=\"/runs/{}\">run page</a></p>",
        pages::run_link(id),
        esc(&v.source),
        v.permutation,
        v.permutations,
        esc(id),
    );
    if v.sources.len() > 1 || v.permutations > 1 {
        let _ = write!(
            b,
            "<form method=\"get\" action=\"/runs/{}/linktest\" class=\"filters\" id=\"lt-pick\"><label>file <select name=\"source\">",
            esc(id)
        );
        for src in &v.sources {
            let sel = if *src == v.source { " selected" } else { "" };
            let _ = write!(b, "<option value=\"{0}\"{sel}>{0}</option>", esc(src));
        }
        b.push_str("</select></label><label>permutation <select name=\"perm\">");
        for k in 0..v.permutations {
            let sel = if k == v.permutation { " selected" } else { "" };
            let _ = write!(b, "<option{sel}>{k}</option>");
        }
        b.push_str("</select></label><input type=\"hidden\" name=\"matrix\" value=\"1\"><button type=\"submit\">Show</button></form>");
    }
    // Facts.
    let bw = |t: f64| rfmt::bandwidth(s.message_size, t);
    let _ = write!(
        b,
        "<div class=\"cards\">\
         <div class=\"card\"><span class=\"n\" id=\"lt-ranks\">{}</span> ranks</div>\
         <div class=\"card\"><span class=\"n\">{}</span> hosts</div>\
         <div class=\"card\"><span class=\"n\">{}</span> pairs measured</div>\
         <div class=\"card\"><span class=\"n\">{}</span> median</div>\
         <div class=\"card bad\"><span class=\"n\" id=\"lt-max\" data-value=\"{}\">{}</span> slowest pair</div></div>",
        rfmt::int(s.num_tasks as u64),
        rfmt::int(s.hosts.len() as u64),
        rfmt::int(s.pairs as u64),
        rfmt::time(s.median_s),
        s.max_s,
        rfmt::time(s.max_s),
    );
    let _ = write!(
        b,
        "<section><h2>Summary</h2><table class=\"kv\" id=\"lt-summary\"><tbody>\
         <tr><th>LinkTest</th><td>{} · mode {}{}{}</td></tr>\
         <tr><th>messages</th><td>{} per pair of {}</td></tr>\
         <tr><th>fastest pair</th><td>{} ({})</td></tr>\
         <tr><th>median</th><td>{} ({})</td></tr>\
         <tr><th>mean</th><td>{} ({})</td></tr>\
         <tr><th>slowest pair</th><td>{} ({})</td></tr>",
        esc(&s.version),
        esc(&s.mode),
        if s.all_to_all { " · all-to-all" } else { "" },
        if s.serial { " · serial" } else { "" },
        rfmt::int(s.num_messages),
        esc(&rfmt::size(s.message_size)),
        rfmt::time(s.min_s),
        bw(s.min_s),
        rfmt::time(s.median_s),
        bw(s.median_s),
        rfmt::time(s.avg_s),
        bw(s.avg_s),
        rfmt::time(s.max_s),
        bw(s.max_s),
    );
    if let Some((lo, avg, hi)) = s.a2a {
        let _ = write!(
            b,
            "<tr><th>all-to-all</th><td>min {} · mean {} · max {}</td></tr>",
            rfmt::time(lo),
            rfmt::time(avg),
            rfmt::time(hi)
        );
    }
    b.push_str("</tbody></table></section>");

    // Matrix.
    let win = Window::of(q, v.n);
    let api = format!(
        "/api/runs/{}/linktest/pair?{}{}",
        id,
        q.link(v.permutation),
        win.query(v.n)
    );
    let img = format!(
        "/runs/{}/linktest/matrix.png?{}{}",
        id,
        q.link(v.permutation),
        win.query(v.n)
    );
    let zoom = format!("/runs/{}/linktest?{}&matrix=1", id, q.link(v.permutation));
    let (side, bin) = (win.side, win.bin);
    let _ = write!(
        b,
        "<section><h2>Pair matrix</h2><p class=\"muted\">Rows: the initiating rank (from), columns: its partner (to); colour: time of the pair ({}, fastest dark, slowest yellow, grey: not measured; red rings: the five slowest pairs of the list below). {}Point at a cell for its values.</p>\
         {}<div class=\"lt-wrap\"><div>{}</div><div class=\"lt-side\"><p class=\"lt-hover\" id=\"lt-hover\">Point at the matrix.</p></div></div></section>",
        if s.log_scale {
            "logarithmic scale"
        } else {
            "linear scale"
        },
        if bin > 1 {
            format!(
                "{} ranks: each pixel is the slowest pair of a block of {bin}×{bin} ranks ({side}×{side} pixels); click to zoom in. ",
                rfmt::int(win.span as u64)
            )
        } else {
            String::new()
        },
        if win.whole(v.n) {
            String::new()
        } else {
            format!(
                "<p id=\"lt-zoom\">Zoomed: rows (from) {}–{}, columns (to) {}–{} · <a href=\"{}\">whole matrix</a></p>",
                win.r0,
                win.r0 + win.span - 1,
                win.c0,
                win.c0 + win.span - 1,
                esc(&zoom)
            )
        },
        matrix_svg(v, &img, &api, &win, &zoom)
    );

    // Histogram.
    let _ = write!(
        b,
        "<section><h2>Histogram of pair times</h2>{}</section>",
        histogram_svg(s)
    );

    // Slowest pairs.
    b.push_str("<section><h2>Slowest pairs</h2><p class=\"muted\">Pairs LinkTest retested serially come first (their retest time shows whether the slowness was contention or the link), then the slowest of the matrix.</p><table id=\"lt-slowest\"><thead><tr><th class=\"num\">from rank</th><th>host</th><th class=\"num\">to rank</th><th>host</th><th class=\"num\">time</th><th class=\"num\">bandwidth</th><th class=\"num\">× median</th><th class=\"num\">serial retest</th></tr></thead><tbody>");
    for p in &s.slowest {
        let _ = write!(
            b,
            "<tr data-from=\"{}\" data-to=\"{}\" data-time-s=\"{}\" data-retest-s=\"{}\"><td class=\"num\">{}</td><td class=\"node\">{}</td><td class=\"num\">{}</td><td class=\"node\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            p.from_rank,
            p.to_rank,
            p.time_s,
            p.retest_time_s.map(|r| r.to_string()).unwrap_or_default(),
            p.from_rank,
            esc(&p.from_host),
            p.to_rank,
            esc(&p.to_host),
            rfmt::time(p.time_s),
            bw(p.time_s),
            if s.median_s > 0.0 {
                format!("{:.1}", p.time_s / s.median_s)
            } else {
                "—".into()
            },
            p.retest_time_s
                .map(rfmt::time)
                .unwrap_or_else(|| "—".into())
        );
    }
    b.push_str("</tbody></table></section>");

    // Host view.
    let _ = write!(
        b,
        "<section><h2>Host × host</h2><p class=\"muted\">The slowest pair between each two hosts (rows: initiating host). Threshold for the list: {} (twice the median).</p>",
        rfmt::time(s.threshold_s)
    );
    b.push_str(&host_svg(s));
    if s.hot_host_pairs.is_empty() {
        b.push_str("<p class=\"muted\" id=\"lt-hot-none\">No host pair above the threshold.</p>");
    } else {
        b.push_str("<table id=\"lt-hot\"><thead><tr><th>from host</th><th>to host</th><th class=\"num\">pairs</th><th class=\"num\">mean</th><th class=\"num\">slowest</th></tr></thead><tbody>");
        for hp in s.hot_host_pairs.iter().take(50) {
            let _ = write!(
                b,
                "<tr><td class=\"node\">{}</td><td class=\"node\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&hp.from_host),
                esc(&hp.to_host),
                rfmt::int(hp.pairs as u64),
                rfmt::time(hp.mean_s),
                rfmt::time(hp.max_s)
            );
        }
        b.push_str("</tbody></table>");
        if s.hot_host_pairs.len() > 50 {
            let _ = write!(
                b,
                "<p class=\"muted\">and {} more host pairs.</p>",
                s.hot_host_pairs.len() - 50
            );
        }
    }
    b.push_str("</section>");

    b.push_str(&checks_section(checks, id));
    b
}

/// The run's LinkTest checks and the report command (both views).
pub(super) fn checks_section(checks: &[crate::verdicts::CheckRow], id: &str) -> String {
    let mut b = String::new();
    b.push_str("<section><h2>Checks</h2>");
    let rows: Vec<_> = checks
        .iter()
        .filter(|c| c.check.starts_with("linktest."))
        .collect();
    if rows.is_empty() {
        b.push_str("<p class=\"muted\">No LinkTest checks for this run.</p>");
    } else {
        b.push_str("<table id=\"lt-checks\"><thead><tr><th>check</th><th>status</th><th class=\"num\">value</th><th class=\"num\">reference</th><th>message</th></tr></thead><tbody>");
        for c in rows {
            let _ = write!(
                b,
                "<tr><td class=\"mono\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&c.check),
                html::badge(&c.status),
                esc(&html::figure(c.value, &c.unit)),
                esc(&html::figure(c.reference, &c.unit)),
                esc(&c.message)
            );
        }
        b.push_str("</tbody></table>");
    }
    let _ = write!(
        b,
        "<p>The same report as SVG and PNG: <code>benchlake report linktest {} --lake LAKE</code></p></section>",
        esc(id)
    );
    b
}

/// A tick step of 1, 2 or 5 × 10^k giving at most `max` ticks over `n`.
fn nice_step(n: usize, max: usize) -> usize {
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if n.div_ceil(step * m) <= max {
                return step * m;
            }
        }
        step *= 10;
    }
}

/// `s` shortened to `max` characters with an ellipsis.
fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut o: String = s.chars().take(max.saturating_sub(1)).collect();
        o.push('…');
        o
    }
}

/// The matrix figure: the image, rank ticks on top and left, host labels at
/// the left, host boundaries, the colour legend.
fn matrix_svg(v: &LinkTestView, img: &str, api: &str, win: &Window, zoom: &str) -> String {
    let s = &v.summary;
    let n = win.span.max(1);
    let (r0, c0) = (win.r0, win.c0);
    // Zooming in: a window of an eighth of this one, at least 32 ranks.
    let zspan = (n / 8).max(32).min(v.n);
    let (l, t) = (170.0, 34.0);
    // Below the matrix: the column hosts, rotated.
    let (w, hgt) = (l + MS + 110.0, t + MS + 96.0);
    // Position of a row (rank r, absolute) and of a column along the axes.
    let pos = |r: f64| (r - r0 as f64) / n as f64 * MS;
    let cpos = |c: f64| (c - c0 as f64) / n as f64 * MS;
    let inside = |r: usize, c: usize| r >= r0 && r < r0 + n && c >= c0 && c < c0 + n;
    let mut o = String::with_capacity(16 * 1024);
    let _ = write!(
        o,
        "<svg class=\"lt-matrix\" id=\"lt-matrix-svg\" width=\"{w}\" height=\"{hgt}\" viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"pair matrix of {n} ranks\">\
         <text x=\"{}\" y=\"11\" class=\"ax\" text-anchor=\"middle\">to rank</text>\
         <text x=\"12\" y=\"{}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 12 {})\">from rank (host)</text>\
         <rect x=\"{l}\" y=\"{t}\" width=\"{MS}\" height=\"{MS}\" fill=\"#eeeeee\"/>\
         <image id=\"lt-matrix\" href=\"{}\" x=\"{l}\" y=\"{t}\" width=\"{MS}\" height=\"{MS}\" preserveAspectRatio=\"none\" data-n=\"{n}\" data-r0=\"{r0}\" data-c0=\"{c0}\" data-total=\"{}\" data-bin=\"{}\" data-side=\"{}\" data-api=\"{}\"{}/>",
        l + MS / 2.0,
        t + MS / 2.0,
        t + MS / 2.0,
        esc(img),
        v.n,
        win.bin,
        win.side,
        esc(api),
        if win.bin > 1 {
            format!(" data-zoom=\"{}\" data-zspan=\"{zspan}\"", esc(zoom))
        } else {
            String::new()
        }
    );
    // Host boundaries (when they stay apart).
    let bounds = &s.host_boundaries;
    let shown = bounds
        .iter()
        .skip(1)
        .filter(|(r, _)| (*r > r0 && *r < r0 + n) || (*r > c0 && *r < c0 + n))
        .count();
    if shown > 0 && MS / shown as f64 >= 3.0 {
        let class = if shown > 32 { "hb many" } else { "hb" };
        for (r, _) in bounds.iter().skip(1) {
            if *r > c0 && *r < c0 + n {
                let x = l + cpos(*r as f64);
                let _ = write!(
                    o,
                    "<line x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{}\" class=\"{class}\"/>",
                    t + MS
                );
            }
            if *r > r0 && *r < r0 + n {
                let y = t + pos(*r as f64);
                let _ = write!(
                    o,
                    "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" class=\"{class}\"/>",
                    l + MS
                );
            }
        }
    }
    // Rings around the five slowest pairs (a single slow pixel is easy to miss).
    for p in s
        .slowest
        .iter()
        .take(5)
        .filter(|p| inside(p.from_rank, p.to_rank))
    {
        let _ = write!(
            o,
            "<circle class=\"slowmark\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\"/>",
            l + cpos(p.to_rank as f64 + 0.5),
            t + pos(p.from_rank as f64 + 0.5)
        );
    }
    // The hovered cell (placed by the script).
    o.push_str(
        "<rect id=\"lt-cursor\" class=\"cursor\" x=\"0\" y=\"0\" width=\"0\" height=\"0\"/>",
    );
    // Rank ticks.
    let step = nice_step(n, 10);
    for k in 0..=n / step {
        // Columns from c0, rows from r0, each at the multiples of the step.
        let c = c0.div_ceil(step) * step + k * step;
        if c < c0 + n {
            let x = l + cpos(c as f64 + 0.5);
            let _ = write!(
                o,
                "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{t}\" class=\"tick\"/><text x=\"{x:.1}\" y=\"{}\" class=\"tk\" text-anchor=\"middle\">{c}</text>",
                t - 4.0,
                t - 7.0,
            );
        }
        let r = r0.div_ceil(step) * step + k * step;
        if r < r0 + n {
            let y = t + pos(r as f64 + 0.5);
            let _ = write!(
                o,
                "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{l}\" y2=\"{y:.1}\" class=\"tick\"/><text x=\"{}\" y=\"{:.1}\" class=\"tk\" text-anchor=\"end\">{r}</text>",
                l - 4.0,
                l - 6.0,
                y + 3.5,
            );
        }
    }
    // Host labels, thinned so that they never overlap (12 px apart).
    let mut last = f64::NEG_INFINITY;
    for (k, (start, host)) in bounds.iter().enumerate() {
        let end = bounds.get(k + 1).map(|x| x.0).unwrap_or(v.n);
        // The part of the host's block inside the window's rows.
        let (a, z) = ((*start).max(r0), end.min(r0 + n));
        if a >= z {
            continue;
        }
        let y = t + pos((a + z) as f64 / 2.0);
        if y - last < 12.0 {
            continue;
        }
        last = y;
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" class=\"host\" text-anchor=\"end\"><title>{} (ranks {}–{})</title>{}</text>",
            l - 36.0,
            y + 3.5,
            esc(host),
            start,
            end - 1,
            esc(&short(host, 16))
        );
    }
    // The columns' hosts below the matrix, the same way.
    let mut last = f64::NEG_INFINITY;
    for (k, (start, host)) in bounds.iter().enumerate() {
        let end = bounds.get(k + 1).map(|x| x.0).unwrap_or(v.n);
        let (a, z) = ((*start).max(c0), end.min(c0 + n));
        if a >= z {
            continue;
        }
        let x = l + cpos((a + z) as f64 / 2.0);
        if x - last < 12.0 {
            continue;
        }
        last = x;
        let y = t + MS + 8.0;
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{y:.1}\" class=\"host\" text-anchor=\"end\" transform=\"rotate(-60 {:.1} {y:.1})\"><title>{} (ranks {}–{})</title>{}</text>",
            x + 3.0,
            x + 3.0,
            esc(host),
            start,
            end - 1,
            esc(&short(host, 16))
        );
    }
    // Legend.
    let scale = Scale::of(s);
    let (lx, ly, lh) = (l + MS + 18.0, t, MS * 0.6);
    const LEVELS: usize = 48;
    for k in 0..LEVELS {
        let f = 1.0 - (k as f64 + 0.5) / LEVELS as f64;
        let [rr, gg, bb] = report::ramp_rgb(f);
        let _ = write!(
            o,
            "<rect x=\"{lx}\" y=\"{:.2}\" width=\"14\" height=\"{:.2}\" fill=\"#{rr:02x}{gg:02x}{bb:02x}\"/>",
            ly + lh * k as f64 / LEVELS as f64,
            lh / LEVELS as f64 + 0.3
        );
    }
    for f in [1.0, 0.75, 0.5, 0.25, 0.0] {
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" class=\"tk\">{}</text>",
            lx + 18.0,
            ly + lh * (1.0 - f) + 3.5,
            esc(&rfmt::time(scale.value(f)))
        );
    }
    let _ = write!(
        o,
        "<rect x=\"{lx}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"#eeeeee\" stroke=\"#999\" stroke-width=\"0.5\"/><text x=\"{}\" y=\"{}\" class=\"tk\">not measured</text></svg>",
        ly + lh + 14.0,
        lx + 18.0,
        ly + lh + 23.0
    );
    o
}

/// The histogram: one bar per bin with its range and count as tooltip, the
/// time axis, the threshold.
fn histogram_svg(s: &Summary) -> String {
    let h = &s.histogram;
    let bins = h.counts.len().max(1);
    let (l, t, w, hh) = (56.0, 12.0, 760.0, 180.0);
    let maxc = h.counts.iter().copied().max().unwrap_or(0).max(1);
    let mut o = String::with_capacity(8 * 1024);
    let _ = write!(
        o,
        "<svg class=\"chart\" id=\"lt-hist\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"histogram of pair times\">",
        l + w + 20.0,
        t + hh + 44.0,
        l + w + 20.0,
        t + hh + 44.0
    );
    let bw = w / bins as f64;
    for (k, c) in h.counts.iter().enumerate() {
        let bh = *c as f64 / maxc as f64 * hh;
        let (a, z) = (
            h.edges.get(k).copied().unwrap_or(0.0),
            h.edges.get(k + 1).copied().unwrap_or(0.0),
        );
        let _ = write!(
            o,
            "<rect class=\"bar\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\"><title>{} – {}: {} pairs</title></rect>",
            l + k as f64 * bw + 0.5,
            t + hh - bh,
            (bw - 1.0).max(0.5),
            bh.max(if *c > 0 { 1.0 } else { 0.0 }),
            esc(&rfmt::time(a)),
            esc(&rfmt::time(z)),
            rfmt::int(*c as u64)
        );
    }
    // Axes: counts at the left, times below.
    let _ = write!(
        o,
        "<line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axis\"/><line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" class=\"axis\"/>\
         <text x=\"{}\" y=\"{}\" class=\"tk\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" class=\"tk\" text-anchor=\"end\">0</text>\
         <text x=\"14\" y=\"{}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">pairs</text>",
        t + hh,
        l + w,
        t + hh,
        t + hh,
        l - 4.0,
        t + 8.0,
        rfmt::int(maxc as u64),
        l - 4.0,
        t + hh,
        t + hh / 2.0,
        t + hh / 2.0
    );
    for k in (0..=bins).step_by((bins / 5).max(1)) {
        let x = l + k as f64 * bw;
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" class=\"tick\"/><text x=\"{x:.1}\" y=\"{}\" class=\"tk\" text-anchor=\"middle\">{}</text>",
            t + hh,
            t + hh + 4.0,
            t + hh + 16.0,
            esc(&rfmt::time(h.edges.get(k).copied().unwrap_or(0.0)))
        );
    }
    let _ = write!(
        o,
        "<text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">pair time ({} bins)</text>",
        l + w / 2.0,
        t + hh + 36.0,
        if h.log { "logarithmic" } else { "linear" }
    );
    // The threshold of the host-pair list.
    let first = h.edges.first().copied().unwrap_or(0.0);
    let lastv = h.edges.last().copied().unwrap_or(0.0);
    let f = if h.log && first > 0.0 && s.threshold_s > 0.0 && lastv > first {
        (s.threshold_s / first).ln() / (lastv / first).ln()
    } else if lastv > first {
        (s.threshold_s - first) / (lastv - first)
    } else {
        -1.0
    };
    if (0.0..=1.0).contains(&f) {
        let x = l + f * w;
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{}\" class=\"thr\"/><text x=\"{:.1}\" y=\"{}\" class=\"tk thr-l\">2× median {}</text>",
            t + hh,
            x + 4.0,
            t + 10.0,
            esc(&rfmt::time(s.threshold_s))
        );
    }
    o.push_str("</svg>");
    o
}

/// The host×host matrix of the slowest pair (a tooltip per cell with the
/// slowest and mean time), up to [`MAX_HOSTS`] hosts.
fn host_svg(s: &Summary) -> String {
    let nh = s.hosts.len();
    if nh == 0 {
        return String::new();
    }
    if nh > MAX_HOSTS {
        return format!(
            "<p class=\"muted\">{} hosts: the host matrix is drawn up to {MAX_HOSTS} hosts; the list below names the slow host pairs.</p>",
            rfmt::int(nh as u64)
        );
    }
    let cell = (480.0 / nh as f64).clamp(4.0, 28.0);
    let labels = cell >= 10.0;
    let l = if labels { 130.0 } else { 10.0 };
    let t = if labels { 110.0 } else { 10.0 };
    let side = cell * nh as f64;
    let scale = Scale::of(s);
    let mut o = String::with_capacity(nh * nh * 160 + 1024);
    let _ = write!(
        o,
        "<svg class=\"chart\" id=\"lt-hosts\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"host by host matrix\">",
        l + side + 10.0,
        t + side + 10.0
    );
    for a in 0..nh {
        for z in 0..nh {
            let k = a * nh + z;
            let max = s.host_matrix_max.get(k).copied().unwrap_or(f64::NAN);
            let mean = s.host_matrix_mean.get(k).copied().unwrap_or(f64::NAN);
            let fill = if max.is_nan() {
                "#eeeeee".to_string()
            } else {
                let [r, g, b] = report::ramp_rgb(scale.norm(max));
                format!("#{r:02x}{g:02x}{b:02x}")
            };
            let tip = if max.is_nan() {
                "no pair measured".to_string()
            } else {
                format!("slowest {}, mean {}", rfmt::time(max), rfmt::time(mean))
            };
            let _ = write!(
                o,
                "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{fill}\"><title>{} → {}: {}</title></rect>",
                l + z as f64 * cell,
                t + a as f64 * cell,
                cell - 0.5,
                cell - 0.5,
                esc(&s.hosts[a]),
                esc(&s.hosts[z]),
                esc(&tip)
            );
        }
    }
    if labels {
        for (k, host) in s.hosts.iter().enumerate() {
            let c = k as f64 * cell + cell / 2.0;
            let _ = write!(
                o,
                "<text x=\"{}\" y=\"{:.1}\" class=\"host\" text-anchor=\"end\">{}</text><text x=\"{:.1}\" y=\"{}\" class=\"host\" transform=\"rotate(-60 {:.1} {})\">{}</text>",
                l - 4.0,
                t + c + 3.5,
                esc(&short(host, 18)),
                l + c + 3.0,
                t - 4.0,
                l + c + 3.0,
                t - 4.0,
                esc(&short(host, 18))
            );
        }
    }
    o.push_str("</svg>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path as FsPath;

    fn view_of_np16(hosts_of: impl Fn(usize) -> String) -> LinkTestView {
        let p = FsPath::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linktest/v1.2p1/np16_a2a_mix/pingpong_results_bin.sion"
        ));
        let mut run = benchlake_formats::linktest::read_file(p).unwrap();
        for (r, info) in run.ranks.iter_mut().enumerate() {
            info.hostname = hosts_of(r);
        }
        let summary = report::summarize(
            &run,
            &ReportOptions {
                max_matrix_cells: MATRIX_PX,
                top_pairs: TOP_PAIRS,
                ..Default::default()
            },
        )
        .unwrap();
        let p = &run.permutations[0];
        let n = run.num_tasks;
        let times = p
            .times
            .iter()
            .enumerate()
            .map(|(k, t)| if k / n == k % n { f32::NAN } else { *t as f32 })
            .collect();
        let png =
            report::matrix_png(summary.matrix.0, &summary.matrix.2, Scale::of(&summary)).unwrap();
        LinkTestView {
            source: "raw/X/T/pingpong_results_bin.sion".into(),
            sources: vec!["raw/X/T/pingpong_results_bin.sion".into()],
            permutation: 0,
            permutations: 1,
            n,
            host_of: (0..n).map(|r| (r / 8) as u32).collect(),
            times,
            retests: p
                .slow_links
                .iter()
                .filter_map(|s| s.retest_time_s.map(|r| ((s.from_rank, s.to_rank), r)))
                .collect(),
            png: png.into(),
            summary,
            load_ms: 1.0,
        }
    }

    #[test]
    fn the_page_shows_the_runs_values_and_the_pair_json_the_hover() {
        let v = view_of_np16(|r| format!("n{}<x>", r / 8));
        assert_eq!(report::png_size(&v.png).unwrap(), (16, 16));
        // The slowest pair of the real file: 9 → 12, 5.01 ms, retested at 32.2 µs.
        let whole = Window::of(&Query::default(), v.n);
        let j = pair_value(&v, 9, 12, &whole);
        assert_eq!(
            j["time_s"].as_f64().unwrap(),
            "0.0050112479366362095".parse::<f64>().unwrap()
        );
        assert_eq!(j["from_host"], "n1<x>");
        assert_eq!(
            j["text"],
            "from rank 9 (n1<x>) → to rank 12 (n1<x>): 5.01 ms (817 kB/s); serial retest 32.2 µs"
        );
        assert_eq!(
            pair_value(&v, 3, 3, &whole)["time_s"],
            serde_json::Value::Null
        );
        assert!(v.time(16, 0).is_none() && v.time(0, 16).is_none());

        let page = render(&v, "01JD3Q6Z5YV9C2M4T8N0R7K1PX", &Query::default(), &[]);
        // Host names are escaped everywhere; the slowest pair and its retest are listed.
        assert!(!page.contains("n1<x>") && page.contains("n1&lt;x&gt;"));
        assert!(page.contains(
            "<td class=\"num\">9</td><td class=\"node\">n1&lt;x&gt;</td><td class=\"num\">12</td>"
        ));
        assert!(page.contains("<tr data-from=\"9\" data-to=\"12\" data-time-s=\"0.0050112479366362095\" data-retest-s=\"0.000032207750336965546\">"));
        assert!(page.contains(">5.01 ms<") && page.contains(">32.2 µs<"));
        assert!(page.contains("id=\"lt-max\" data-value=\"0.0050112479366362095\">5.01 ms</span>"));
        // The image and the hover endpoint of this file and permutation.
        assert!(
            page.contains("href=\"/runs/01JD3Q6Z5YV9C2M4T8N0R7K1PX/linktest/matrix.png?perm=0\"")
        );
        let q = Query::parse("source=raw%2FX%2FT%2Fpingpong_results_bin.sion").unwrap();
        let page = render(&v, "01JD3Q6Z5YV9C2M4T8N0R7K1PX", &q, &[]);
        assert!(page.contains("href=\"/runs/01JD3Q6Z5YV9C2M4T8N0R7K1PX/linktest/matrix.png?source=raw/X/T/pingpong_results_bin.sion&amp;perm=0\""));
        assert!(page.contains("data-n=\"16\""));
        // Histogram: one bar per bin, the counts add up to the pairs.
        assert_eq!(page.matches("<rect class=\"bar\"").count(), 40);
        // Host×host: 2 hosts, 4 cells with their slowest pair.
        assert!(page.contains("<title>n1&lt;x&gt; → n1&lt;x&gt;: slowest 5.01 ms, mean "));
        assert!(!page.contains("<script"));
    }

    #[test]
    fn binned_matrices_hover_the_slowest_pair_of_the_block() {
        // 1,300 ranks: the image bins 3×3 ranks per pixel.
        let n = 1300;
        let mut times = vec![1e-6f32; n * n];
        for k in 0..n {
            times[k * n + k] = f32::NAN;
        }
        times[n + 1299] = 3e-4;
        let mut v = view_of_np16(|_| "h".into());
        v.n = n;
        v.times = times;
        v.host_of = vec![0; n];
        v.summary.hosts = vec!["h".into()];
        v.summary.matrix = (434, 3, Vec::new());
        v.retests = [((1, 1299), 4.2e-6)].into_iter().collect();
        // Anywhere in the pixel of ranks 0–2 × 1299: the slow pair 1 → 1299.
        let whole = Window::of(&Query::default(), n);
        assert_eq!((whole.bin, whole.side), (3, 434));
        let j = pair_value(&v, 0, 1299, &whole);
        assert_eq!(
            (j["from"].as_u64(), j["to"].as_u64()),
            (Some(1), Some(1299))
        );
        assert_eq!(j["block"]["from"], serde_json::json!([0, 2]));
        assert_eq!(j["block"]["to"], serde_json::json!([1299, 1299]));
        assert_eq!(
            j["text"],
            "ranks 0–2 → 1299–1299, slowest: from rank 1 (h) → to rank 1299 (h): 300 µs (13.7 MB/s); serial retest 4.20 µs"
        );
        let j = pair_value(&v, 4, 7, &whole);
        assert_eq!(j["block"]["from"], serde_json::json!([3, 5]));
        assert_eq!(j["time_s"].as_f64(), Some(f64::from(1e-6f32)));
        // Zoomed to 20 ranks at the top right: one pixel per pair, the slow pair at (1, 19).
        let q = Query::parse("r0=0&c0=1290&span=20").unwrap();
        let w = Window::of(&q, n);
        assert_eq!((w.r0, w.c0, w.span, w.bin, w.side), (0, 1280, 20, 1, 20));
        let cells = window_cells(&v, &w);
        assert_eq!(cells[20 + 19], f64::from(3e-4f32));
        assert_eq!(cells[0], f64::from(1e-6f32));
        assert_eq!(
            pair_value(&v, 1, 1299, &w)["block"],
            serde_json::Value::Null
        );
        assert_eq!(w.query(n), "&r0=0&c0=1280&span=20");
        assert_eq!(whole.query(n), "");
        let svg = matrix_svg(&v, "/m.png", "/api", &w, "/z");
        assert!(svg.contains(
            "data-r0=\"0\" data-c0=\"1280\" data-total=\"1300\" data-bin=\"1\" data-side=\"20\""
        ));
        // The ring of the slow pair (the first of the list) sits in its cell.
        v.summary.slowest = vec![report::SlowPair {
            from_rank: 1,
            to_rank: 1299,
            from_host: "h".into(),
            to_host: "h".into(),
            time_s: 3e-4,
            retest_time_s: Some(4.2e-6),
        }];
        let svg = matrix_svg(&v, "/m.png", "/api", &w, "/z");
        assert!(
            svg.contains("<circle class=\"slowmark\" cx=\"794.0\" cy=\"82.0\""),
            "{svg}"
        );
        // Ticks at the window's own ranks.
        assert!(svg.contains(">1280</text>") && svg.contains(">1298</text>"));
    }

    #[test]
    fn queries_are_validated_and_ticks_stay_few() {
        assert_eq!(
            Query::parse("source=raw%2Fa.sion&perm=1&from=3&to=4").unwrap(),
            Query {
                source: Some("raw/a.sion".into()),
                perm: 1,
                from: Some(3),
                to: Some(4),
                ..Default::default()
            }
        );
        assert!(Query::parse("perm=-1").is_err());
        assert!(Query::parse("from=x").is_err());
        assert!(Query::parse("to=99999999999").is_err());
        assert!(Query::parse("source=a%0Ab").is_err());
        assert_eq!(nice_step(4096, 10), 500);
        assert_eq!(nice_step(16, 10), 2);
        assert_eq!(nice_step(4, 10), 1);
        assert_eq!(short("abcdef", 4), "abc…");
    }
}
