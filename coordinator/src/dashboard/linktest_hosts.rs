//! The LinkTest page of a run from its per-host summary (issue 40):
//! `/runs/{id}/linktest` of a run whose ingest wrote `linktest_host_summary`
//! reads that table, `linktest_runs` and `linktest_slow_links` (a few rows
//! per host) instead of every pair, and links to the pair view
//! (`?matrix=1`: matrix, histogram, host × host), which reads the pairs
//! only when asked for. Runs ingested before the summary existed get the
//! pair view directly ([`super::linktest`]).
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::DataType;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use benchlake_analysis::linktest_report::fmt as rfmt;

use super::html::{self, Chrome, esc};
use super::linktest::{Query, checks_section, files_of};
use super::{access, cache, pages};
use crate::http::Http;

/// The tables this page reads.
const TABLES: &[&str] = &[
    "linktest_runs",
    "linktest_host_summary",
    "linktest_slow_links",
];

/// Host rows listed (the slowest first); the rest are counted.
const MAX_HOST_ROWS: usize = 200;

/// One `linktest_host_summary` row.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRow {
    pub source: String,
    pub host: String,
    pub class: String,
    pub pairs: u64,
    pub min_s: f64,
    pub median_s: f64,
    pub max_s: f64,
    pub median_bw: f64,
    pub slow: u64,
    pub threshold_s: f64,
}

/// One `linktest_slow_links` row.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowRow {
    pub from_rank: i64,
    pub to_rank: i64,
    pub from_host: Option<String>,
    pub to_host: Option<String>,
    pub time_s: f64,
    pub retest_s: Option<f64>,
}

/// What the summary page shows.
#[derive(Debug, Default)]
pub struct HostsView {
    /// The run's files.
    pub sources: Vec<String>,
    /// Ranks (largest file), slowest pair of the run (LinkTest's own maximum).
    pub ranks: u64,
    pub max_s: f64,
    pub message_size: u64,
    /// Host rows, the most slow pairs (then the slowest pair) first.
    pub hosts: Vec<HostRow>,
    /// Distinct hosts.
    pub host_count: usize,
    pub slow_links: Vec<SlowRow>,
    /// Time the tables took to read (ms).
    pub load_ms: f64,
}

fn text(b: &RecordBatch, n: &str) -> Option<StringArray> {
    b.column_by_name(n)
        .and_then(|a| arrow::compute::cast(a, &DataType::Utf8).ok())
        .and_then(|a| a.as_any().downcast_ref::<StringArray>().cloned())
}

fn num(b: &RecordBatch, n: &str) -> Option<Float64Array> {
    b.column_by_name(n)
        .and_then(|a| arrow::compute::cast(a, &DataType::Float64).ok())
        .and_then(|a| a.as_any().downcast_ref::<Float64Array>().cloned())
}

/// The view from the three tables' batches; an error names a missing column.
pub fn hosts_view(
    runs: &[RecordBatch],
    summary: &[RecordBatch],
    slow: &[RecordBatch],
) -> Result<HostsView, String> {
    let missing = |t: &str, c: &str| format!("{t} has no column '{c}'");
    let mut v = HostsView::default();
    for b in runs {
        let src = text(b, "source").ok_or_else(|| missing("linktest_runs", "source"))?;
        let tasks = num(b, "num_tasks").ok_or_else(|| missing("linktest_runs", "num_tasks"))?;
        let max = num(b, "max_time_s").ok_or_else(|| missing("linktest_runs", "max_time_s"))?;
        let size =
            num(b, "message_size").ok_or_else(|| missing("linktest_runs", "message_size"))?;
        for i in 0..b.num_rows() {
            if src.is_valid(i) {
                v.sources.push(src.value(i).to_string());
            }
            if tasks.is_valid(i) {
                v.ranks = v.ranks.max(tasks.value(i) as u64);
            }
            if max.is_valid(i) && max.value(i) > v.max_s {
                v.max_s = max.value(i);
                if size.is_valid(i) {
                    v.message_size = size.value(i) as u64;
                }
            }
        }
    }
    v.sources.sort();
    v.sources.dedup();
    let t = "linktest_host_summary";
    for b in summary {
        let get = |c: &str| num(b, c).ok_or_else(|| missing(t, c));
        let gets = |c: &str| text(b, c).ok_or_else(|| missing(t, c));
        let (src, host, class) = (gets("source")?, gets("host")?, gets("pair_class")?);
        let (pairs, lo, med, hi) = (
            get("pairs")?,
            get("min_time_s")?,
            get("median_time_s")?,
            get("max_time_s")?,
        );
        let (bw, slow_n, th) = (
            get("median_bw_bytes_s")?,
            get("slow_pairs")?,
            get("slow_threshold_s")?,
        );
        for i in 0..b.num_rows() {
            if !(src.is_valid(i) && host.is_valid(i) && class.is_valid(i)) {
                continue;
            }
            let f = |a: &Float64Array| if a.is_valid(i) { a.value(i) } else { f64::NAN };
            v.hosts.push(HostRow {
                source: src.value(i).to_string(),
                host: host.value(i).to_string(),
                class: class.value(i).to_string(),
                pairs: f(&pairs) as u64,
                min_s: f(&lo),
                median_s: f(&med),
                max_s: f(&hi),
                median_bw: f(&bw),
                slow: f(&slow_n) as u64,
                threshold_s: f(&th),
            });
        }
    }
    let mut names: Vec<&str> = v.hosts.iter().map(|h| h.host.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    v.host_count = names.len();
    v.hosts.sort_by(|a, b| {
        b.slow
            .cmp(&a.slow)
            .then(b.max_s.total_cmp(&a.max_s))
            .then(a.host.cmp(&b.host))
    });
    let t = "linktest_slow_links";
    for b in slow {
        let from = num(b, "from_rank").ok_or_else(|| missing(t, "from_rank"))?;
        let to = num(b, "to_rank").ok_or_else(|| missing(t, "to_rank"))?;
        let time = num(b, "time_s").ok_or_else(|| missing(t, "time_s"))?;
        let retest = num(b, "retest_time_s");
        // Files of before 2026-12 have no host columns.
        let (fh, th) = (text(b, "from_host"), text(b, "to_host"));
        let host = |a: &Option<StringArray>, i: usize| {
            a.as_ref()
                .filter(|a| a.is_valid(i))
                .map(|a| a.value(i).to_string())
        };
        for i in 0..b.num_rows() {
            if !(from.is_valid(i) && to.is_valid(i) && time.is_valid(i)) {
                continue;
            }
            v.slow_links.push(SlowRow {
                from_rank: from.value(i) as i64,
                to_rank: to.value(i) as i64,
                from_host: host(&fh, i),
                to_host: host(&th, i),
                time_s: time.value(i),
                retest_s: retest
                    .as_ref()
                    .filter(|a| a.is_valid(i))
                    .map(|a| a.value(i)),
            });
        }
    }
    v.slow_links.sort_by(|a, b| b.time_s.total_cmp(&a.time_s));
    Ok(v)
}

/// The summary page of run `id`, or `None` when the request wants the pair
/// view (or the run has no summary; errors are the pair view's to report).
pub(super) async fn page(
    h: &Http,
    headers: &HeaderMap,
    uri: &Uri,
    id: &str,
    t0: Instant,
) -> Option<Response> {
    let q = Query::parse(uri.query().unwrap_or("")).ok()?;
    if !q.wants_summary() {
        return None;
    }
    if let Err(r) = access(h, headers, &pages::path_and_query(uri), false) {
        return Some(r);
    }
    if pages::validate_id(h, headers, id).is_some() {
        return None;
    }
    let c = pages::coord(h, headers).ok()?;
    let d = files_of(h, headers, &c, id).await.ok()?;
    if !d.files.iter().any(|f| f.table == "linktest_host_summary") {
        return None;
    }
    let key = format!(
        "linktest-hosts|{id}|{}",
        cache::fingerprint(&d.files, TABLES)
    );
    let (lake, run_id) = (c.lake.clone(), id.to_string());
    let rt = tokio::runtime::Handle::current();
    let v: Arc<HostsView> = match h
        .views()
        .get(key, move || {
            let t = Instant::now();
            let read = |table: &str| {
                rt.block_on(benchlake_analysis::linktest_lake::read_run_table(
                    &lake, table, &run_id,
                ))
                .map_err(|e| e.to_string())
            };
            let mut v = hosts_view(
                &read("linktest_runs")?,
                &read("linktest_host_summary")?,
                &read("linktest_slow_links")?,
            )?;
            v.load_ms = t.elapsed().as_secs_f64() * 1e3;
            let bytes = 4096 + v.hosts.len() * 160 + v.slow_links.len() * 96;
            Ok((v, bytes))
        })
        .await
    {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(run = %id, error = %e, "dashboard: cannot read the LinkTest summary");
            return Some(pages::error_page(
                h,
                headers,
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot read the run's LinkTest summary: {e}"),
            ));
        }
    };
    let checks = h
        .coordinator()
        .and_then(|c| c.verdicts().run(id))
        .map(|r| r.rows().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    let body = render(&v, id, &checks);
    Some(
        Html(html::page(
            &format!("LinkTest {id}"),
            "",
            &Chrome::of(h, headers).at("/runs"),
            &format!(
                "{body}{}",
                pages::footer(t0, &format!(" · summary read in {:.0} ms", v.load_ms))
            ),
        ))
        .into_response(),
    )
}

/// The page body.
pub fn render(v: &HostsView, id: &str, checks: &[crate::verdicts::CheckRow]) -> String {
    let mut b = String::with_capacity(16 * 1024 + v.hosts.len().min(MAX_HOST_ROWS) * 300);
    let matrix = format!("/runs/{}/linktest?matrix=1", esc(id));
    let _ = write!(
        b,
        "<h1>LinkTest · run {}</h1><p class=\"muted\">{} file(s) · <a href=\"/runs/{}\">run page</a> · from the per-host summary (<code>linktest_host_summary</code>) · <a id=\"lt-matrix-link\" href=\"{matrix}\">pair matrix, histogram and host × host</a> (streams every pair)</p>",
        pages::run_link(id),
        v.sources.len(),
        esc(id),
    );
    let slow_hosts = {
        let mut h: Vec<&str> = v
            .hosts
            .iter()
            .filter(|r| r.slow > 0)
            .map(|r| r.host.as_str())
            .collect();
        h.sort_unstable();
        h.dedup();
        h.len()
    };
    let _ = write!(
        b,
        "<div class=\"cards\">\
         <div class=\"card\"><span class=\"n\" id=\"lt-ranks\">{}</span> ranks</div>\
         <div class=\"card\"><span class=\"n\" id=\"lt-hosts-n\">{}</span> hosts</div>\
         <div class=\"card{}\"><span class=\"n\" id=\"lt-slow-hosts\">{}</span> hosts with slow pairs</div>\
         <div class=\"card bad\"><span class=\"n\" id=\"lt-max\" data-value=\"{}\">{}</span> slowest pair</div></div>",
        rfmt::int(v.ranks),
        rfmt::int(v.host_count as u64),
        if slow_hosts > 0 { " bad" } else { "" },
        rfmt::int(slow_hosts as u64),
        v.max_s,
        rfmt::time(v.max_s),
    );
    let threshold = v
        .hosts
        .first()
        .map(|r| rfmt::time(r.threshold_s))
        .unwrap_or_else(|| "—".into());
    let _ = write!(
        b,
        "<section><h2>Hosts</h2><p class=\"muted\">Each host's measured pairs: <em>intra</em> both ranks on the host, <em>inter</em> the partner on another host. Slow: slower than the checks' slow-pair threshold ({threshold} for the first file). Hosts with the most slow pairs first.</p>\
         <table id=\"lt-hosts\"><thead><tr><th>host</th><th>pairs</th><th class=\"num\">count</th><th class=\"num\">fastest</th><th class=\"num\">median</th><th class=\"num\">slowest</th><th class=\"num\">median bandwidth</th><th class=\"num\">slow pairs</th>{}</tr></thead><tbody>",
        if v.sources.len() > 1 {
            "<th>file</th>"
        } else {
            ""
        }
    );
    for r in v.hosts.iter().take(MAX_HOST_ROWS) {
        let _ = write!(
            b,
            "<tr data-host=\"{0}\" data-class=\"{1}\" data-slow=\"{2}\"><td class=\"node\"><a href=\"/nodes/{3}\">{0}</a></td><td>{1}</td><td class=\"num\">{4}</td><td class=\"num\">{5}</td><td class=\"num\">{6}</td><td class=\"num\">{7}</td><td class=\"num\">{8}</td><td class=\"num{9}\">{2}</td>{10}</tr>",
            esc(&r.host),
            esc(&r.class),
            r.slow,
            html::url_encode(&r.host),
            rfmt::int(r.pairs),
            rfmt::time(r.min_s),
            rfmt::time(r.median_s),
            rfmt::time(r.max_s),
            if r.median_bw.is_finite() {
                rfmt::rate(r.median_bw)
            } else {
                "—".into()
            },
            if r.slow > 0 { " bad" } else { "" },
            if v.sources.len() > 1 {
                format!("<td class=\"mono\">{}</td>", esc(&r.source))
            } else {
                String::new()
            },
        );
    }
    b.push_str("</tbody></table>");
    if v.hosts.len() > MAX_HOST_ROWS {
        let _ = write!(
            b,
            "<p class=\"muted\">and {} more rows, none with more slow pairs.</p>",
            v.hosts.len() - MAX_HOST_ROWS
        );
    }
    b.push_str("</section>");
    b.push_str("<section><h2>Slowest pairs</h2><p class=\"muted\">The pairs LinkTest itself listed as slowest, with their serial retests (<code>linktest_slow_links</code>).</p><table id=\"lt-slowest\"><thead><tr><th class=\"num\">from rank</th><th>host</th><th class=\"num\">to rank</th><th>host</th><th class=\"num\">time</th><th class=\"num\">bandwidth</th><th class=\"num\">serial retest</th></tr></thead><tbody>");
    for p in &v.slow_links {
        let host = |h: &Option<String>| h.as_deref().map(esc).unwrap_or_else(|| "—".into());
        let _ = write!(
            b,
            "<tr data-from=\"{}\" data-to=\"{}\" data-time-s=\"{}\"><td class=\"num\">{}</td><td class=\"node\">{}</td><td class=\"num\">{}</td><td class=\"node\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            p.from_rank,
            p.to_rank,
            p.time_s,
            p.from_rank,
            host(&p.from_host),
            p.to_rank,
            host(&p.to_host),
            rfmt::time(p.time_s),
            rfmt::bandwidth(v.message_size, p.time_s),
            p.retest_s.map(rfmt::time).unwrap_or_else(|| "—".into()),
        );
    }
    b.push_str("</tbody></table></section>");
    b.push_str(&checks_section(checks, id));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic 12-rank run on 3 hosts (the second 4× slower), its
    /// tables as the ingest writes them, the summary derived from them.
    fn tables() -> Vec<benchlake_core::lake::TableOutput> {
        let run = benchlake_formats::linktest::synth::synthetic_run(12, 4, 3);
        let mut t =
            benchlake_formats::linktest::into_run_tables(run, "R", "raw/R/T/f.sion").unwrap();
        let s =
            benchlake_analysis::summaries::derive("linktest", "R", &[], &t, &Default::default())
                .unwrap();
        t.extend(s);
        t
    }

    fn batches<'a>(t: &'a [benchlake_core::lake::TableOutput], name: &str) -> &'a [RecordBatch] {
        &t.iter().find(|o| o.table == name).unwrap().batches
    }

    #[test]
    fn the_summary_page_lists_hosts_slowest_first_and_links_the_matrix() {
        let t = tables();
        let v = hosts_view(
            batches(&t, "linktest_runs"),
            batches(&t, "linktest_host_summary"),
            batches(&t, "linktest_slow_links"),
        )
        .unwrap();
        assert_eq!((v.ranks, v.host_count, v.sources.len()), (12, 3, 1));
        // node0001 is 4× slower with every peer: it has the most slow pairs
        // and comes first; the other hosts' own pairs are not slow.
        let first = &v.hosts[0];
        assert_eq!(
            (first.host.as_str(), first.class.as_str()),
            ("node0001", "inter")
        );
        assert!(first.slow > 0 && first.slow <= first.pairs, "{first:?}");
        for h in v
            .hosts
            .iter()
            .filter(|h| h.host != "node0001" && h.class == "intra")
        {
            assert_eq!(h.slow, 0, "{h:?}");
        }
        assert_eq!(first.pairs, 4 * 8 * 2);
        // Three hosts × (intra, inter).
        assert_eq!(v.hosts.len(), 6);
        let intra: u64 = v
            .hosts
            .iter()
            .filter(|h| h.class == "intra")
            .map(|h| h.pairs)
            .sum();
        assert_eq!(intra, 3 * 4 * 3);
        // The slowest pair of the file (1 → 11) is LinkTest's own maximum.
        // (Stored as LinkTest stores it, an f32.)
        let slowest = f64::from(benchlake_formats::linktest::synth::SLOWEST_PAIR_S as f32);
        assert_eq!(v.max_s, slowest);
        let s = &v.slow_links[0];
        assert_eq!((s.from_rank, s.to_rank), (1, 11));
        assert_eq!(
            (s.from_host.as_deref(), s.to_host.as_deref()),
            (Some("node0000"), Some("node0002"))
        );
        let page = render(&v, "01JD3Q6Z5YV9C2M4T8N0R7K1PX", &[]);
        assert!(page.contains(
            "id=\"lt-matrix-link\" href=\"/runs/01JD3Q6Z5YV9C2M4T8N0R7K1PX/linktest?matrix=1\""
        ));
        assert!(
            page.contains("<tr data-host=\"node0001\" data-class=\"inter\""),
            "{page}"
        );
        assert!(page.contains("id=\"lt-ranks\">12<"));
        assert!(
            !page.contains("lt-matrix\""),
            "no matrix on the summary page"
        );
    }

    /// Slow links of a file written before the host columns: shown without hosts.
    #[test]
    fn slow_links_of_older_files_have_no_hosts() {
        let t = tables();
        let old: Vec<RecordBatch> = batches(&t, "linktest_slow_links")
            .iter()
            .map(|b| b.project(&[0, 1, 2, 3, 4, 5, 6, 7]).unwrap())
            .collect();
        let v = hosts_view(
            batches(&t, "linktest_runs"),
            batches(&t, "linktest_host_summary"),
            &old,
        )
        .unwrap();
        assert_eq!(v.slow_links[0].from_host, None);
        assert!(render(&v, "R", &[]).contains("<td class=\"node\">—</td>"));
        // A summary without its columns is an error naming them.
        let e = hosts_view(batches(&t, "linktest_runs"), &old, &[]).unwrap_err();
        assert!(e.contains("linktest_host_summary has no column"), "{e}");
    }

    #[test]
    fn only_a_plain_request_gets_the_summary() {
        assert!(Query::parse("").unwrap().wants_summary());
        for q in ["matrix=1", "perm=1", "source=a", "r0=0&c0=0&span=64"] {
            assert!(!Query::parse(q).unwrap().wants_summary(), "{q}");
        }
    }
}
