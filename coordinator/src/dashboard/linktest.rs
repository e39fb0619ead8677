//! The LinkTest view of a run, `/runs/{id}/linktest` (docs/dashboard.md):
//! the rank×rank pair matrix as a server-drawn PNG with rank ticks, host
//! labels and boundaries, whose hover values come from
//! `/api/runs/{id}/linktest/pair`; the histogram of pair times; the slowest
//! pairs with their serial retests; host pairs above the threshold; the
//! host×host matrix; the run's checks.
//!
//! The numbers are those of the LinkTest report ([`benchlake_analysis::
//! linktest_report::summarize`]), so the page and `benchlake report
//! linktest` never disagree, but computed from the pairs streamed from the
//! lake in passes ([`benchlake_analysis::linktest_report::stream`],
//! [`super::linktest_pairs`]): memory is bounded by the picture, not by the
//! pair count (docs/architecture.md, "The LinkTest pair view"). What the page
//! needs is derived once per (run, file, permutation, committed files) on a
//! blocking thread and kept in the [`super::cache::ViewCache`]: the summary,
//! the matrix image (one pixel per pair up to [`MATRIX_PX`] ranks, else the
//! slowest pair of each block, so a slow link never disappears) and which
//! pair coloured each pixel (the hover). A zoomed window is one more pass
//! over the pairs of its rows, cached the same way: at most [`MATRIX_PX`]²
//! cells, whatever its span.
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};
use benchlake_analysis::linktest_report::stream::{
    Cells, StreamError, summarize_streamed, window_streamed,
};
use benchlake_analysis::linktest_report::{
    self as report, ReportOptions, Scale, Summary, fmt as rfmt,
};

use super::html::{self, Chrome, esc};
use super::linktest_pairs::Pairs;
use super::linktest_svg::{histogram_svg, host_svg, matrix_svg};
use super::pages::{self, RunData};
use super::{access, cache};
use crate::http::Http;

/// The matrix image has at most this many pixels per side: beyond, a pixel
/// is the slowest pair of a block of ranks. Equal to the drawn side, so the
/// browser only ever enlarges the image (nearest neighbour): shrinking it
/// would drop pixels, and with them slow links.
pub const MATRIX_PX: usize = 640;
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
    /// `(from, to)` of the pair that coloured each cell of `summary.matrix`.
    pub slowest_of_cell: Vec<(u32, u32)>,
    /// Host pairs above the threshold (`summary.hot_host_pairs` may list fewer).
    pub hot_total: usize,
    /// Host index (into `summary.hosts`) of each rank.
    pub host_of: Vec<u32>,
    /// Serial retest times by (from, to).
    pub retests: HashMap<(usize, usize), f64>,
    /// The matrix image.
    pub png: bytes::Bytes,
    /// Time the derivation took (ms).
    pub load_ms: f64,
    /// Passes over the pairs it took.
    pub passes: usize,
    /// The pairs (for zoomed windows) and the permutation's value in them.
    pub pairs: Option<(Arc<Pairs>, i32)>,
}

/// The cells of a window of the matrix (the whole matrix: the view's own).
#[derive(Debug, Clone, Copy)]
pub struct CellsRef<'a> {
    pub w: Window,
    /// `side`², the slowest pair of each block (NaN: nothing measured).
    pub cells: &'a [f64],
    /// The pair of each cell.
    pub arg: &'a [(u32, u32)],
}

/// A zoomed window's cells, derived from one pass over its rows' pairs.
#[derive(Debug)]
pub struct WindowCells {
    pub w: Window,
    pub cells: Vec<f64>,
    pub arg: Vec<(u32, u32)>,
}

impl WindowCells {
    fn cells(&self) -> CellsRef<'_> {
        CellsRef {
            w: self.w,
            cells: &self.cells,
            arg: &self.arg,
        }
    }
}

impl LinkTestView {
    /// Approximate bytes held.
    fn bytes(&self) -> usize {
        self.summary.matrix.2.len() * 16
            + self.summary.host_matrix_max.len() * 16
            + self.summary.hot_host_pairs.len() * 64
            + self.host_of.len() * 4
            + self.png.len()
            + 4096
    }

    /// The whole matrix's cells.
    pub fn whole(&self) -> CellsRef<'_> {
        CellsRef {
            w: Window::of(&Query::default(), self.n),
            cells: &self.summary.matrix.2,
            arg: &self.slowest_of_cell,
        }
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
/// `perm`) from the lake, streaming the pairs of `files` (the run's
/// committed `linktest_timings` objects): runs on a blocking thread.
fn load(
    rt: tokio::runtime::Handle,
    lake: benchlake_core::lake::Lake,
    files: Vec<crate::model::CommittedFile>,
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
    let chosen = match &source {
        Some(s) if !sources.contains(s) => {
            return Err(format!(
                "not found: run {run_id} has no LinkTest file '{s}'"
            ));
        }
        Some(s) => s.clone(),
        None => sources
            .first()
            .cloned()
            .ok_or_else(|| format!("not found: run {run_id}: no linktest_runs rows"))?,
    };
    let pairs = Arc::new(rt.block_on(Pairs::open(&lake, &files, &chosen))?);
    let mut values = rt.block_on(pairs.permutations())?;
    if values.is_empty() {
        values.push(0);
    }
    let (run, chosen) = rt
        .block_on(benchlake_analysis::linktest_lake::load_run_meta(
            &lake,
            &run_id,
            Some(&chosen),
            &values,
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
    let value = *values.get(perm).ok_or_else(|| {
        format!(
            "not found: {}",
            report::ReportError::NoPermutation(perm, permutations)
        )
    })?;
    let streamed = summarize_streamed(&run, &opts, |sink| {
        rt.block_on(pairs.stream(value, None, sink)).map(|_| ())
    })
    .map_err(|e| match e {
        StreamError::Report(e) => format!("not found: {e}"),
        e => e.to_string(),
    })?;
    let n = run.num_tasks;
    let retests = run.permutations[perm]
        .slow_links
        .iter()
        .filter_map(|s| s.retest_time_s.map(|r| ((s.from_rank, s.to_rank), r)))
        .collect();
    drop(run);
    let summary = streamed.summary;
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
        slowest_of_cell: streamed.slowest_of_cell,
        hot_total: streamed.hot_total,
        host_of,
        retests,
        png: bytes::Bytes::from(png),
        summary,
        load_ms: t0.elapsed().as_secs_f64() * 1e3,
        passes: streamed.passes,
        pairs: Some((pairs, value)),
    };
    let size = view.bytes();
    tracing::info!(run = %run_id, ranks = n, passes = view.passes, ms = view.load_ms as u64, "dashboard: LinkTest view derived");
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

    /// Whether pair (from, to) is inside the window.
    fn contains(&self, from: usize, to: usize) -> bool {
        from >= self.r0 && to >= self.c0 && from < self.r0 + self.span && to < self.c0 + self.span
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

/// The cells of the zoomed window `w` of view `v` (cache key `key`): one
/// pass over the pairs of the window's rows, kept in the view cache. At
/// most [`MATRIX_PX`]² cells whatever the window's span.
async fn zoomed(
    h: &Http,
    v: &Arc<LinkTestView>,
    key: &str,
    w: Window,
) -> Result<Arc<WindowCells>, String> {
    let (pairs, value) = v
        .pairs
        .clone()
        .ok_or("this view has no pairs to zoom into")?;
    let n = v.n;
    let rt = tokio::runtime::Handle::current();
    h.views()
        .get(
            format!("{key}|window|{}|{}|{}", w.r0, w.c0, w.span),
            move || {
                let t0 = Instant::now();
                let c = Cells {
                    r0: w.r0,
                    c0: w.c0,
                    span: w.span,
                    bin: w.bin,
                    side: w.side,
                };
                let (cells, arg) = window_streamed(n, c, |sink| {
                    rt.block_on(pairs.stream(value, Some(w.r0..w.r0 + w.span), sink))
                        .map(|_| ())
                })
                .map_err(|e| e.to_string())?;
                tracing::debug!(
                    r0 = w.r0,
                    c0 = w.c0,
                    span = w.span,
                    ms = t0.elapsed().as_millis() as u64,
                    "dashboard: LinkTest window derived"
                );
                let bytes = cells.len() * 16 + 256;
                Ok((WindowCells { w, cells, arg }, bytes))
            },
        )
        .await
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
) -> Result<(Arc<LinkTestView>, RunData, Query, String), Response> {
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
    let files: Vec<crate::model::CommittedFile> = d
        .files
        .iter()
        .filter(|f| f.table == super::linktest_pairs::TABLE)
        .cloned()
        .collect();
    let rt = tokio::runtime::Handle::current();
    // A file or permutation the run does not have is remembered, so asking
    // again does not read the run's tables again.
    let missing = format!("{key}|missing");
    if let Some(m) = h.views().peek::<String>(&missing) {
        return Err(pages::error_page(h, headers, StatusCode::NOT_FOUND, &m));
    }
    match h
        .views()
        .get(key.clone(), move || {
            load(rt, lake, files, run_id, source, perm)
        })
        .await
    {
        Ok(v) => Ok((v, d, q, key)),
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
    let (v, _, q, key) = match view(&h, &headers, &uri, &id, true).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let w = Window::of(&q, v.n);
    let png = if w.whole(v.n) {
        Ok(v.png.clone())
    } else {
        // A zoomed window (at most 640² pixels): its cells from one pass,
        // drawn off the runtime.
        match zoomed(&h, &v, &key, w).await {
            Ok(c) => tokio::task::spawn_blocking(move || {
                report::matrix_png(w.side, &c.cells, Scale::of(&v.summary))
                    .map(bytes::Bytes::from)
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r),
            Err(e) => Err(e),
        }
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
    let (v, _, q, key) = match view(&h, &headers, &uri, &id, true).await {
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
    let w = Window::of(&q, v.n);
    if !w.contains(from, to) {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": format!(
                "from, to: ranks are {}..{} and {}..{} in this window",
                w.r0, w.r0 + w.span, w.c0, w.c0 + w.span
            )}),
        );
    }
    if w.whole(v.n) {
        return json(StatusCode::OK, pair_value(&v, from, to, v.whole()));
    }
    match zoomed(&h, &v, &key, w).await {
        Ok(c) => json(StatusCode::OK, pair_value(&v, from, to, c.cells())),
        Err(e) => {
            tracing::warn!(run = %id, error = %e, "dashboard: cannot derive the LinkTest window");
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                serde_json::json!({"error": format!("cannot read the run's pairs: {e}")}),
            )
        }
    }
}

/// The JSON of pair (from, to) of the window `c` (which holds it): its
/// time, bandwidth, hosts, retest, and the line the page shows. When the
/// image bins ranks (more than [`MATRIX_PX`] in the window), the pair is the
/// slowest of the block (the pixel) holding (from, to), which is what
/// coloured that pixel, and `block` gives the block's rank ranges.
pub fn pair_value(v: &LinkTestView, from: usize, to: usize, c: CellsRef<'_>) -> serde_json::Value {
    let w = c.w;
    let bin = w.bin.max(1);
    let k = (from.saturating_sub(w.r0) / bin) * w.side + to.saturating_sub(w.c0) / bin;
    let t = c.cells.get(k).copied().filter(|t| !t.is_nan());
    let mut block = serde_json::Value::Null;
    let mut prefix = String::new();
    let (from, to) = if bin > 1 {
        let bi = w.r0 + from.saturating_sub(w.r0) / bin * bin;
        let bj = w.c0 + to.saturating_sub(w.c0) / bin * bin;
        let (ei, ej) = ((bi + bin).min(v.n), (bj + bin).min(v.n));
        block = serde_json::json!({"from": [bi, ei - 1], "to": [bj, ej - 1]});
        prefix = format!("ranks {bi}–{} → {bj}–{}, slowest: ", ei - 1, ej - 1);
        match (t, c.arg.get(k)) {
            (Some(_), Some((i, j))) => (*i as usize, *j as usize),
            _ => (from, to),
        }
    } else {
        (from, to)
    };
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
    let (v, d, q, _) = match view(&h, &headers, &uri, &id, false).await {
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
            pages::footer(
                t0,
                &format!(
                    " · view derived in {:.0} ms ({} passes over the pairs)",
                    v.load_ms, v.passes
                )
            )
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
        if v.hot_total > 50 {
            let _ = write!(
                b,
                "<p class=\"muted\">and {} more host pairs.</p>",
                v.hot_total - 50
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::linktest_svg::{nice_step, short};
    use std::path::Path as FsPath;

    /// The dense pairs of `run`'s first permutation, streamed row-major.
    fn pass_of(
        run: &benchlake_formats::linktest::LinkTestRun,
    ) -> impl FnMut(&mut benchlake_analysis::linktest_report::stream::Sink<'_>) -> Result<(), String>
    {
        let p = run.permutations[0].clone();
        let n = run.num_tasks;
        move |f| {
            for i in 0..n {
                for j in (0..n).filter(|j| *j != i) {
                    f(i, j, p.times[i * n + j], p.steps[i * n + j]);
                }
            }
            Ok(())
        }
    }

    fn view_of(run: &benchlake_formats::linktest::LinkTestRun, per_host: usize) -> LinkTestView {
        let s = summarize_streamed(
            run,
            &ReportOptions {
                max_matrix_cells: MATRIX_PX,
                top_pairs: TOP_PAIRS,
                ..Default::default()
            },
            pass_of(run),
        )
        .unwrap();
        let summary = s.summary;
        let p = &run.permutations[0];
        let n = run.num_tasks;
        let png =
            report::matrix_png(summary.matrix.0, &summary.matrix.2, Scale::of(&summary)).unwrap();
        LinkTestView {
            source: "raw/X/T/pingpong_results_bin.sion".into(),
            sources: vec!["raw/X/T/pingpong_results_bin.sion".into()],
            permutation: 0,
            permutations: 1,
            n,
            host_of: (0..n).map(|r| (r / per_host) as u32).collect(),
            slowest_of_cell: s.slowest_of_cell,
            hot_total: s.hot_total,
            retests: p
                .slow_links
                .iter()
                .filter_map(|s| s.retest_time_s.map(|r| ((s.from_rank, s.to_rank), r)))
                .collect(),
            png: png.into(),
            summary,
            load_ms: 1.0,
            passes: s.passes,
            pairs: None,
        }
    }

    fn view_of_np16(hosts_of: impl Fn(usize) -> String) -> LinkTestView {
        let p = FsPath::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linktest/v1.2p1/np16_a2a_mix/pingpong_results_bin.sion"
        ));
        let mut run = benchlake_formats::linktest::read_file(p).unwrap();
        for (r, info) in run.ranks.iter_mut().enumerate() {
            info.hostname = hosts_of(r);
        }
        view_of(&run, 8)
    }

    #[test]
    fn the_page_shows_the_runs_values_and_the_pair_json_the_hover() {
        let v = view_of_np16(|r| format!("n{}<x>", r / 8));
        assert_eq!(report::png_size(&v.png).unwrap(), (16, 16));
        // The slowest pair of the real file: 9 → 12, 5.01 ms, retested at 32.2 µs.
        let whole = v.whole();
        let j = pair_value(&v, 9, 12, whole);
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
            pair_value(&v, 3, 3, whole)["time_s"],
            serde_json::Value::Null
        );
        assert!(!whole.w.contains(16, 0) && !whole.w.contains(0, 16));

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
        // 1,300 ranks on one host: the image bins 3×3 ranks per pixel; the
        // planted slowest pair is 1 → 1299, retested.
        let n = 1300;
        let run = benchlake_formats::linktest::synth::synthetic_run(n, n, 1);
        let times = run.permutations[0].times.clone();
        let slowest = f64::from(benchlake_formats::linktest::synth::SLOWEST_PAIR_S as f32);
        let mut v = view_of(&run, n);
        assert_eq!(v.passes, 2);
        // Anywhere in the pixel of ranks 0–2 × 1299: the slow pair 1 → 1299.
        let whole = v.whole();
        assert_eq!((whole.w.bin, whole.w.side), (3, 434));
        let j = pair_value(&v, 0, 1299, whole);
        assert_eq!(
            (j["from"].as_u64(), j["to"].as_u64()),
            (Some(1), Some(1299))
        );
        assert_eq!(j["time_s"].as_f64(), Some(slowest));
        assert_eq!(j["block"]["from"], serde_json::json!([0, 2]));
        assert_eq!(j["block"]["to"], serde_json::json!([1299, 1299]));
        assert_eq!(
            j["text"],
            "ranks 0–2 → 1299–1299, slowest: from rank 1 (node0000) → to rank 1299 (node0000): 317 µs (3.30 GB/s); serial retest 4.20 µs"
        );
        // Another pixel: the slowest pair of its 3×3 block, which it names.
        let j = pair_value(&v, 4, 7, whole);
        assert_eq!(j["block"]["from"], serde_json::json!([3, 5]));
        let best = (3..6)
            .flat_map(|i| (6..9).map(move |j| (i, j)))
            .map(|(i, j)| times[i * n + j])
            .fold(f64::NAN, f64::max);
        assert_eq!(j["time_s"].as_f64(), Some(best));
        let (bi, bj) = (
            j["from"].as_u64().unwrap() as usize,
            j["to"].as_u64().unwrap() as usize,
        );
        assert_eq!(times[bi * n + bj], best);
        // Zoomed to 20 ranks at the top right: one pixel per pair, the slow pair at (1, 19).
        let q = Query::parse("r0=0&c0=1290&span=20").unwrap();
        let w = Window::of(&q, n);
        assert_eq!((w.r0, w.c0, w.span, w.bin, w.side), (0, 1280, 20, 1, 20));
        let c = Cells {
            r0: w.r0,
            c0: w.c0,
            span: w.span,
            bin: w.bin,
            side: w.side,
        };
        let (cells, arg) = window_streamed(n, c, pass_of(&run)).unwrap();
        let zoom = WindowCells { w, cells, arg };
        assert_eq!(zoom.cells[20 + 19], slowest);
        assert_eq!(zoom.cells[0], times[1280]);
        let j = pair_value(&v, 1, 1299, zoom.cells());
        assert_eq!(j["block"], serde_json::Value::Null);
        assert_eq!(j["time_s"].as_f64(), Some(slowest));
        assert_eq!(w.query(n), "&r0=0&c0=1280&span=20");
        assert_eq!(whole.w.query(n), "");
        let svg = matrix_svg(&v, "/m.png", "/api", &w, "/z");
        assert!(svg.contains(
            "data-r0=\"0\" data-c0=\"1280\" data-total=\"1300\" data-bin=\"1\" data-side=\"20\""
        ));
        // The ring of the slow pair (the first of the list) sits in its cell.
        assert_eq!(
            (v.summary.slowest[0].from_rank, v.summary.slowest[0].to_rank),
            (1, 1299)
        );
        v.summary.slowest.truncate(1);
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
