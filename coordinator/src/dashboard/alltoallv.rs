//! The alltoallv view of a run, `/runs/{id}/alltoallv` (docs/dashboard.md):
//! per lead rank (the rank whose profiler files describe a communicator),
//! its communication patterns (`alltoallv_patterns`: N ranks send to M
//! peers, in which calls) and a heat map of the send and receive counts of
//! each count block (`alltoallv_count_rows`: rows are ranks, columns their
//! peers), with the calls that used the block (`alltoallv_calls`).
//!
//! Heat maps up to [`SVG_SIDE`] ranks are SVG cells with the count as
//! tooltip; larger communicators get a server-drawn PNG
//! (`/runs/{id}/alltoallv/heatmap.png`, one pixel per rank pair on the
//! LinkTest report's colour ramp). The run's tables are read once per
//! committed file set into the [`super::cache::ViewCache`].
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use benchlake_analysis::linktest_report::{self as report, Scale, fmt as rfmt};

use super::html::{self, Chrome, esc};
use super::{access, cache, pages};
use crate::http::Http;

/// Tables the view reads.
const TABLES: &[&str] = &[
    "alltoallv_patterns",
    "alltoallv_count_rows",
    "alltoallv_calls",
];
/// Heat maps up to this many ranks a side are SVG cells; larger ones a PNG.
pub const SVG_SIDE: usize = 64;
/// Communicators larger than this get no heat map (the patterns still show).
const MAX_SIDE: usize = 4096;
/// Blocks drawn per direction at most.
const MAX_BLOCKS: usize = 12;

/// A pattern row.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    pub pattern_id: i64,
    pub direction: String,
    pub num_ranks: i64,
    pub num_peers: i64,
    pub num_calls: i64,
    pub call_ids: Vec<i64>,
}

/// The count rows of one block: (ranks sharing the row, counts per peer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Block {
    pub rows: Vec<(Vec<i64>, Vec<i64>)>,
    /// Calls that used this block.
    pub calls: Vec<i64>,
}

/// One lead rank (one communicator's profile).
#[derive(Debug, Clone, Default)]
pub struct Lead {
    /// Ranks of the communicator (from the calls, else the longest count row).
    pub comm_size: usize,
    /// Calls profiled.
    pub calls: usize,
    pub patterns: Vec<Pattern>,
    /// (direction, block) → rows.
    pub blocks: BTreeMap<(String, i64), Block>,
}

/// What the page shows of a run: lead ranks in order.
#[derive(Debug, Default)]
pub struct A2aView {
    pub leads: BTreeMap<i64, Lead>,
}

impl A2aView {
    fn bytes(&self) -> usize {
        1024 + self
            .leads
            .values()
            .map(|l| {
                l.patterns.len() * 96
                    + l.blocks
                        .values()
                        .map(|b| {
                            b.rows
                                .iter()
                                .map(|(r, c)| (r.len() + c.len()) * 8 + 48)
                                .sum::<usize>()
                        })
                        .sum::<usize>()
            })
            .sum::<usize>()
    }
}

fn ints(b: &RecordBatch, name: &str, t: &str) -> Result<Vec<i64>, String> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| format!("{t}: no column {name}"))?;
    let c = arrow::compute::cast(c, &DataType::Int64).map_err(|e| format!("{t}.{name}: {e}"))?;
    let c = c.as_primitive::<Int64Type>();
    Ok((0..c.len())
        .map(|i| if c.is_valid(i) { c.value(i) } else { 0 })
        .collect())
}

fn strs(b: &RecordBatch, name: &str, t: &str) -> Result<Vec<String>, String> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| format!("{t}: no column {name}"))?;
    let c = arrow::compute::cast(c, &DataType::Utf8).map_err(|e| format!("{t}.{name}: {e}"))?;
    let c = c.as_string::<i32>();
    Ok((0..c.len())
        .map(|i| {
            if c.is_valid(i) {
                c.value(i).to_string()
            } else {
                String::new()
            }
        })
        .collect())
}

fn lists(b: &RecordBatch, name: &str, t: &str) -> Result<Vec<Vec<i64>>, String> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| format!("{t}: no column {name}"))?;
    let to = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
    let c = arrow::compute::cast(c, &to).map_err(|e| format!("{t}.{name}: {e}"))?;
    let c = c.as_list::<i32>();
    Ok((0..c.len())
        .map(|i| {
            if c.is_valid(i) {
                let v = c.value(i);
                let v = v.as_primitive::<Int64Type>();
                v.iter().map(|x| x.unwrap_or(0)).collect()
            } else {
                Vec::new()
            }
        })
        .collect())
}

/// Builds the view from the three tables' batches.
pub fn build(
    patterns: &[RecordBatch],
    rows: &[RecordBatch],
    calls: &[RecordBatch],
) -> Result<A2aView, String> {
    let mut v = A2aView::default();
    for b in patterns {
        let t = "alltoallv_patterns";
        let (lead, id, dir) = (
            ints(b, "lead_rank", t)?,
            ints(b, "pattern_id", t)?,
            strs(b, "direction", t)?,
        );
        let (nr, np, nc) = (
            ints(b, "num_ranks", t)?,
            ints(b, "num_peers", t)?,
            ints(b, "num_calls", t)?,
        );
        let ids = lists(b, "call_ids", t)?;
        for i in 0..b.num_rows() {
            v.leads.entry(lead[i]).or_default().patterns.push(Pattern {
                pattern_id: id[i],
                direction: dir[i].clone(),
                num_ranks: nr[i],
                num_peers: np[i],
                num_calls: nc[i],
                call_ids: ids[i].clone(),
            });
        }
    }
    for b in rows {
        let t = "alltoallv_count_rows";
        let (lead, dir, block) = (
            ints(b, "lead_rank", t)?,
            strs(b, "direction", t)?,
            ints(b, "block", t)?,
        );
        let (ranks, counts) = (lists(b, "ranks", t)?, lists(b, "counts", t)?);
        for i in 0..b.num_rows() {
            let l = v.leads.entry(lead[i]).or_default();
            l.comm_size = l.comm_size.max(counts[i].len());
            l.blocks
                .entry((dir[i].clone(), block[i]))
                .or_default()
                .rows
                .push((ranks[i].clone(), counts[i].clone()));
        }
    }
    for b in calls {
        let t = "alltoallv_calls";
        let (lead, call, size) = (
            ints(b, "lead_rank", t)?,
            ints(b, "call_id", t)?,
            ints(b, "comm_size", t)?,
        );
        let (sb, rb) = (ints(b, "send_block", t)?, ints(b, "recv_block", t)?);
        for i in 0..b.num_rows() {
            let l = v.leads.entry(lead[i]).or_default();
            l.calls += 1;
            l.comm_size = l.comm_size.max(usize::try_from(size[i]).unwrap_or(0));
            for (dir, blk) in [("send", sb[i]), ("recv", rb[i])] {
                if let Some(bl) = l.blocks.get_mut(&(dir.to_string(), blk)) {
                    bl.calls.push(call[i]);
                }
            }
        }
    }
    for l in v.leads.values_mut() {
        l.patterns
            .sort_by(|a, b| (a.pattern_id, &a.direction).cmp(&(b.pattern_id, &b.direction)));
        for b in l.blocks.values_mut() {
            b.calls.sort_unstable();
            b.calls.dedup();
        }
    }
    Ok(v)
}

/// The block's counts as a `side`×`side` matrix (rows: ranks; NaN: zero,
/// i.e. no data exchanged), or None when the communicator is too large.
pub fn matrix(block: &Block, side: usize) -> Option<Vec<f64>> {
    if side == 0 || side > MAX_SIDE {
        return None;
    }
    let mut m = vec![f64::NAN; side * side];
    for (ranks, counts) in &block.rows {
        for r in ranks {
            let Some(r) = usize::try_from(*r).ok().filter(|r| *r < side) else {
                continue;
            };
            for (p, c) in counts.iter().enumerate().take(side) {
                if *c != 0 {
                    m[r * side + p] = *c as f64;
                }
            }
        }
    }
    Some(m)
}

fn scale_of(m: &[f64]) -> Scale {
    let (lo, hi) = m
        .iter()
        .filter(|v| !v.is_nan())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    Scale {
        lo,
        hi,
        log: lo > 0.0 && hi >= 10.0 * lo,
    }
}

/// A compact list of call ids: `0, 3, 6, 9` or `0, 3, 6, … (20 calls)`.
fn call_list(ids: &[i64]) -> String {
    let shown: Vec<String> = ids.iter().take(8).map(|c| c.to_string()).collect();
    if ids.len() > 8 {
        format!("{}, … ({} calls)", shown.join(", "), ids.len())
    } else {
        shown.join(", ")
    }
}

/// The heat map of one block: SVG cells with tooltips up to [`SVG_SIDE`]
/// ranks, else an image of `img`; axes with rank ticks; a legend.
pub fn heatmap_svg(block: &Block, side: usize, dir: &str, img: &str) -> String {
    let Some(m) = matrix(block, side) else {
        return format!(
            "<p class=\"muted\">A communicator of {} ranks: no heat map (up to {MAX_SIDE}).</p>",
            rfmt::int(side as u64)
        );
    };
    let sc = scale_of(&m);
    let ms = if side <= SVG_SIDE {
        (side as f64 * 14.0).clamp(120.0, 420.0)
    } else {
        420.0
    };
    let (l, t) = (44.0, 30.0);
    // Tall enough for the legend (150 px bar, the zero swatch below).
    let (w, h) = (l + ms + 110.0, t + ms.max(175.0) + 12.0);
    let cell = ms / side as f64;
    let mut o = String::new();
    let _ = write!(
        o,
        "<svg class=\"chart heat\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{dir} counts\">\
         <text x=\"{}\" y=\"10\" class=\"ax\" text-anchor=\"middle\">{} rank</text>\
         <rect x=\"{l}\" y=\"{t}\" width=\"{ms}\" height=\"{ms}\" fill=\"#eeeeee\"/>",
        l + ms / 2.0,
        if dir == "send" { "to" } else { "from" }
    );
    if side <= SVG_SIDE {
        for (k, v) in m.iter().enumerate() {
            if v.is_nan() {
                continue;
            }
            let [r, g, b] = report::ramp_rgb(sc.norm(*v));
            let (i, j) = (k / side, k % side);
            let _ = write!(
                o,
                "<rect class=\"hc\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"#{r:02x}{g:02x}{b:02x}\"><title>rank {i} {} rank {j}: {}</title></rect>",
                l + j as f64 * cell,
                t + i as f64 * cell,
                (cell - 0.5).max(0.5),
                (cell - 0.5).max(0.5),
                if dir == "send" {
                    "sends to"
                } else {
                    "receives from"
                },
                rfmt::int(*v as u64)
            );
        }
    } else {
        let _ = write!(
            o,
            "<image href=\"{}\" x=\"{l}\" y=\"{t}\" width=\"{ms}\" height=\"{ms}\" preserveAspectRatio=\"none\" class=\"px\"/>",
            esc(img)
        );
    }
    let step = {
        let mut s = 1;
        while side.div_ceil(s) > 8 {
            s = match s {
                1 => 2,
                2 => 5,
                x if x.to_string().starts_with('5') => x * 2,
                x => x * 5 / 2,
            };
        }
        s
    };
    let mut r = 0;
    while r < side {
        let c = (r as f64 + 0.5) * cell;
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{}\" class=\"tk\" text-anchor=\"middle\">{r}</text><text x=\"{}\" y=\"{:.1}\" class=\"tk\" text-anchor=\"end\">{r}</text>",
            l + c,
            t - 4.0,
            l - 4.0,
            t + c + 3.5
        );
        r += step;
    }
    // Legend.
    let lx = l + ms + 14.0;
    for k in 0..32 {
        let f = 1.0 - (k as f64 + 0.5) / 32.0;
        let [rr, gg, bb] = report::ramp_rgb(f);
        let _ = write!(
            o,
            "<rect x=\"{lx}\" y=\"{:.2}\" width=\"12\" height=\"{:.2}\" fill=\"#{rr:02x}{gg:02x}{bb:02x}\"/>",
            t + 150.0 * k as f64 / 32.0,
            150.0 / 32.0 + 0.3
        );
    }
    let _ = write!(
        o,
        "<text x=\"{}\" y=\"{}\" class=\"tk\">{}</text><text x=\"{}\" y=\"{}\" class=\"tk\">{}</text>\
         <rect x=\"{lx}\" y=\"{}\" width=\"12\" height=\"10\" fill=\"#eeeeee\" stroke=\"#999\" stroke-width=\"0.5\"/><text x=\"{}\" y=\"{}\" class=\"tk\">0</text></svg>",
        lx + 16.0,
        t + 8.0,
        rfmt::int(sc.hi.max(0.0) as u64),
        lx + 16.0,
        t + 150.0,
        rfmt::int(sc.lo.max(0.0) as u64),
        t + 160.0,
        lx + 16.0,
        t + 169.0
    );
    o
}

#[derive(Debug, Default, PartialEq)]
struct Query {
    lead: Option<i64>,
    direction: Option<String>,
    block: Option<i64>,
}

impl Query {
    fn parse(q: &str) -> Result<Self, String> {
        let m = html::parse_query(q);
        let int = |k: &str| -> Result<Option<i64>, String> {
            match m.get(k).map(|v| v.trim()).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v
                    .parse::<i64>()
                    .ok()
                    .filter(|x| *x >= 0)
                    .map(Some)
                    .ok_or_else(|| format!("{k}: not a rank or block number")),
            }
        };
        let direction = match m.get("direction").map(String::as_str) {
            None | Some("") => None,
            Some(d @ ("send" | "recv")) => Some(d.to_string()),
            Some(_) => return Err("direction: send or recv".into()),
        };
        Ok(Self {
            lead: int("lead")?,
            direction,
            block: int("block")?,
        })
    }
}

/// The cached view of run `id` (or the error response).
#[allow(clippy::result_large_err)]
async fn view(
    h: &Http,
    headers: &HeaderMap,
    uri: &Uri,
    id: &str,
    api: bool,
) -> Result<(Arc<A2aView>, Query), Response> {
    access(h, headers, &pages::path_and_query(uri), api)?;
    if let Some(r) = pages::validate_id(h, headers, id) {
        return Err(r);
    }
    let q = Query::parse(uri.query().unwrap_or(""))
        .map_err(|e| pages::error_page(h, headers, StatusCode::BAD_REQUEST, &e))?;
    let c = pages::coord(h, headers)?;
    let d = match pages::read_run(&c, id.to_string()).await {
        Ok(Some(d))
            if d.files
                .iter()
                .any(|f| f.table == "alltoallv_patterns" || f.table == "alltoallv_count_rows") =>
        {
            d
        }
        Ok(Some(_)) => {
            return Err(pages::error_page(
                h,
                headers,
                StatusCode::NOT_FOUND,
                &format!(
                    "run {id} has no alltoallv tables (alltoallv_patterns, alltoallv_count_rows)"
                ),
            ));
        }
        Ok(None) => {
            return Err(pages::error_page(
                h,
                headers,
                StatusCode::NOT_FOUND,
                &format!("no run {id}"),
            ));
        }
        Err(e) => return Err(pages::store_error(h, headers, e)),
    };
    let key = format!("alltoallv|{id}|{}", cache::fingerprint(&d.files, TABLES));
    let (lake, run_id, date) = (c.lake.clone(), id.to_string(), d.run.date.clone());
    let rt = tokio::runtime::Handle::current();
    let v = h
        .views()
        .get(key, move || {
            let read =
                |table: &str| {
                    rt.block_on(lake.read_run_rows(
                        benchlake_core::lake::RunRows::new(table, &run_id).on(&date),
                    ))
                    .map_err(|e| e.to_string())
                };
            let v = build(
                &read("alltoallv_patterns")?,
                &read("alltoallv_count_rows")?,
                &read("alltoallv_calls")?,
            )?;
            let size = v.bytes();
            Ok((v, size))
        })
        .await
        .map_err(|e| {
            tracing::warn!(run = %id, error = %e, "dashboard: cannot derive the alltoallv view");
            pages::error_page(
                h,
                headers,
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot read the run's alltoallv tables: {e}"),
            )
        })?;
    Ok((v, q))
}

/// `/runs/{id}/alltoallv/heatmap.png?lead=&direction=&block=`: a block's
/// counts as an image (communicators above [`SVG_SIDE`] ranks).
pub async fn heatmap_png(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let (v, q) = match view(&h, &headers, &uri, &id, true).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (Some(lead), Some(dir), Some(block)) = (q.lead, q.direction.as_deref(), q.block) else {
        return (
            StatusCode::BAD_REQUEST,
            "lead, direction and block are needed",
        )
            .into_response();
    };
    let Some(l) = v.leads.get(&lead) else {
        return (StatusCode::NOT_FOUND, "no such lead rank").into_response();
    };
    let Some(b) = l.blocks.get(&(dir.to_string(), block)) else {
        return (StatusCode::NOT_FOUND, "no such block").into_response();
    };
    let Some(m) = matrix(b, l.comm_size) else {
        return (
            StatusCode::NOT_FOUND,
            "communicator too large for a heat map",
        )
            .into_response();
    };
    // Drawing a 4,096² image takes tens of ms: off the async workers.
    let side = l.comm_size;
    let png = tokio::task::spawn_blocking(move || report::matrix_png(side, &m, scale_of(&m)))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    super::html::png_response(png)
}

/// `/runs/{id}/alltoallv`: the page.
pub async fn page(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let t0 = Instant::now();
    let (v, q) = match view(&h, &headers, &uri, &id, false).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let lead = match q.lead {
        Some(l) if v.leads.contains_key(&l) => l,
        Some(l) => {
            return pages::error_page(
                &h,
                &headers,
                StatusCode::NOT_FOUND,
                &format!("run {id} has no lead rank {l}"),
            );
        }
        None => match v.leads.keys().next() {
            Some(l) => *l,
            None => {
                return pages::error_page(&h, &headers, StatusCode::NOT_FOUND, "no alltoallv rows");
            }
        },
    };
    let body = render(&v, &id, lead, &q);
    Html(html::page(
        &format!("alltoallv {id}"),
        "",
        &Chrome::of(&h, &headers).at("/runs"),
        &format!("{body}{}", pages::footer(t0, "")),
    ))
    .into_response()
}

fn render(v: &A2aView, id: &str, lead: i64, q: &Query) -> String {
    let mut b = String::with_capacity(32 * 1024);
    let _ = write!(
        b,
        "<h1>alltoallv · run {}</h1><p class=\"muted\">{} lead rank{} (one per communicator profiled) · <a href=\"/runs/{}\">run page</a></p>",
        pages::run_link(id),
        v.leads.len(),
        if v.leads.len() == 1 { "" } else { "s" },
        esc(id)
    );
    b.push_str("<table id=\"a2a-leads\"><thead><tr><th>lead rank</th><th class=\"num\">ranks</th><th class=\"num\">calls</th><th class=\"num\">patterns</th><th class=\"num\">count blocks</th></tr></thead><tbody>");
    for (k, l) in &v.leads {
        let cur = if *k == lead { " class=\"current\"" } else { "" };
        let _ = write!(
            b,
            "<tr{cur} data-lead=\"{k}\"><td><a href=\"/runs/{}/alltoallv?lead={k}\">{k}</a></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(id),
            rfmt::int(l.comm_size as u64),
            rfmt::int(l.calls as u64),
            l.patterns.len(),
            l.blocks.len()
        );
    }
    b.push_str("</tbody></table>");
    let Some(l) = v.leads.get(&lead) else {
        return b;
    };
    let _ = write!(
        b,
        "<section><h2>Lead rank <span id=\"a2a-lead\">{lead}</span>: patterns</h2><p class=\"muted\">A pattern: N ranks each send to (receive from) M other ranks, and the calls in which that happened.</p>"
    );
    if l.patterns.is_empty() {
        b.push_str("<p class=\"muted\">No patterns for this lead rank.</p>");
    } else {
        b.push_str("<table id=\"a2a-patterns\"><thead><tr><th class=\"num\">pattern</th><th>direction</th><th>pattern</th><th class=\"num\">calls</th><th>call ids</th></tr></thead><tbody>");
        for p in &l.patterns {
            let _ = write!(
                b,
                "<tr data-pattern=\"{}\" data-direction=\"{}\" data-calls=\"{}\"><td class=\"num\">{}</td><td>{}</td><td>{} rank{} {} {} other rank{}</td><td class=\"num\">{}</td><td class=\"mono\">{}</td></tr>",
                p.pattern_id,
                esc(&p.direction),
                p.num_calls,
                p.pattern_id,
                esc(&p.direction),
                rfmt::int(p.num_ranks.max(0) as u64),
                if p.num_ranks == 1 { "" } else { "s" },
                if p.direction == "send" {
                    "send to"
                } else {
                    "receive from"
                },
                rfmt::int(p.num_peers.max(0) as u64),
                if p.num_peers == 1 { "" } else { "s" },
                rfmt::int(p.num_calls.max(0) as u64),
                esc(&call_list(&p.call_ids))
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");
    for dir in ["send", "recv"] {
        if q.direction.as_deref().is_some_and(|d| d != dir) {
            continue;
        }
        let blocks: Vec<(&i64, &Block)> = l
            .blocks
            .iter()
            .filter(|((d, blk), _)| d == dir && q.block.is_none_or(|x| x == *blk))
            .map(|((_, blk), bl)| (blk, bl))
            .collect();
        if blocks.is_empty() {
            continue;
        }
        let _ = write!(
            b,
            "<section><h2>{} counts</h2><p class=\"muted\">One heat map per count block: row = {}, column = {}; colour = count (elements of the datatype), grey = nothing. {}</p><div class=\"heats\">",
            if dir == "send" { "Send" } else { "Receive" },
            if dir == "send" {
                "sending rank"
            } else {
                "receiving rank"
            },
            if dir == "send" {
                "destination"
            } else {
                "source"
            },
            if l.comm_size <= SVG_SIDE {
                "Point at a cell for its count."
            } else {
                "One pixel per rank pair."
            }
        );
        for (blk, bl) in blocks.iter().take(MAX_BLOCKS) {
            let img =
                format!("/runs/{id}/alltoallv/heatmap.png?lead={lead}&direction={dir}&block={blk}");
            let _ = write!(
                b,
                "<figure class=\"heat\" id=\"a2a-{dir}-{blk}\" data-block=\"{blk}\"><figcaption>block {blk} · {} call{}: {}</figcaption>{}</figure>",
                bl.calls.len(),
                if bl.calls.len() == 1 { "" } else { "s" },
                esc(&call_list(&bl.calls)),
                heatmap_svg(bl, l.comm_size, dir, &img)
            );
        }
        b.push_str("</div>");
        if blocks.len() > MAX_BLOCKS {
            let _ = write!(
                b,
                "<p class=\"muted\">and {} more blocks: <a href=\"/runs/{}/alltoallv?lead={lead}&amp;direction={dir}&amp;block={}\">one block at a time</a>.</p>",
                blocks.len() - MAX_BLOCKS,
                esc(id),
                blocks[MAX_BLOCKS].0
            );
        }
        b.push_str("</section>");
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array, ListArray, StringArray};
    use arrow::datatypes::Int32Type;

    fn l64(v: Vec<Vec<i64>>) -> ListArray {
        ListArray::from_iter_primitive::<Int64Type, _, _>(
            v.into_iter().map(|x| Some(x.into_iter().map(Some))),
        )
    }

    #[test]
    fn patterns_and_heat_maps_show_the_counts() {
        let patterns = RecordBatch::try_from_iter(vec![
            ("lead_rank", Arc::new(Int64Array::from(vec![0, 0])) as _),
            ("pattern_id", Arc::new(Int64Array::from(vec![0, 0])) as _),
            (
                "direction",
                Arc::new(StringArray::from(vec!["send", "recv"])) as _,
            ),
            ("num_ranks", Arc::new(Int64Array::from(vec![1, 3])) as _),
            ("num_peers", Arc::new(Int64Array::from(vec![3, 1])) as _),
            ("num_calls", Arc::new(Int64Array::from(vec![2, 2])) as _),
            ("call_ids", Arc::new(l64(vec![vec![0, 1], vec![0, 1]])) as _),
        ])
        .unwrap();
        let ranks = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(0)]),
            Some(vec![Some(1), Some(2), Some(3)]),
        ]);
        let rows = RecordBatch::try_from_iter(vec![
            ("lead_rank", Arc::new(Int64Array::from(vec![0, 0])) as _),
            (
                "direction",
                Arc::new(StringArray::from(vec!["send", "send"])) as _,
            ),
            ("block", Arc::new(Int64Array::from(vec![0, 0])) as _),
            ("ranks", Arc::new(ranks) as _),
            (
                "counts",
                Arc::new(l64(vec![vec![0, 100, 100, 1000], vec![0; 4]])) as _,
            ),
        ])
        .unwrap();
        let calls = RecordBatch::try_from_iter(vec![
            ("lead_rank", Arc::new(Int64Array::from(vec![0, 0])) as _),
            ("call_id", Arc::new(Int64Array::from(vec![0, 1])) as _),
            ("comm_size", Arc::new(Int32Array::from(vec![4, 4])) as _),
            ("send_block", Arc::new(Int64Array::from(vec![0, 0])) as _),
            ("recv_block", Arc::new(Int64Array::from(vec![0, 0])) as _),
        ])
        .unwrap();
        let v = build(&[patterns], &[rows], &[calls]).unwrap();
        let l = &v.leads[&0];
        assert_eq!((l.comm_size, l.calls, l.patterns.len()), (4, 2, 2));
        let bl = &l.blocks[&("send".to_string(), 0)];
        assert_eq!(bl.calls, vec![0, 1]);
        let m = matrix(bl, 4).unwrap();
        assert_eq!(m[1], 100.0);
        assert_eq!(m[3], 1000.0);
        assert!(m[0].is_nan() && m[4].is_nan());
        assert!(matrix(bl, MAX_SIDE + 1).is_none());

        let page = render(&v, "01JD3Q6Z5YV9C2M4T8N0R7K1PX", 0, &Query::default());
        assert!(page.contains("<td>1 rank send to 3 other ranks</td>"));
        assert!(page.contains("<td>3 ranks receive from 1 other rank</td>"));
        // Three cells with counts (100, 100, 1000), each with its tooltip; a log scale.
        assert_eq!(page.matches("<rect class=\"hc\"").count(), 3);
        assert!(page.contains("<title>rank 0 sends to rank 3: 1,000</title>"));
        assert!(page.contains("block 0 · 2 calls: 0, 1"));
        assert!(scale_of(&m).log);
        // Larger communicators get the image.
        let svg = heatmap_svg(bl, 100, "send", "/x.png?a=1&b=2");
        assert!(svg.contains("<image href=\"/x.png?a=1&amp;b=2\""));
        assert!(!svg.contains("class=\"hc\""));
        assert_eq!(
            call_list(&(0..20).collect::<Vec<_>>()),
            "0, 1, 2, 3, 4, 5, 6, 7, … (20 calls)"
        );
        assert!(Query::parse("direction=x").is_err());
        assert!(Query::parse("lead=-1").is_err());
        assert_eq!(
            Query::parse("lead=4&direction=recv&block=2").unwrap(),
            Query {
                lead: Some(4),
                direction: Some("recv".into()),
                block: Some(2)
            }
        );
    }
}
