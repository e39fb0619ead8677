//! `/nodes/{node}`: one node's page — its identity (the registered agent of
//! that name, its host name, benchlake's drain record, Slurm's state), every
//! check's history as a series with its reference and the drains and
//! resumes benchlake made marked, grouped by check family with readable
//! names ([`check_label`]).
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};

use super::access;
use super::html::{self, Chrome, badge, esc};
use super::pages::{coord, error_page, footer, path_and_query, run_link, store_error};
use crate::http::Http;
use crate::node_actions::NodeEvent;
use crate::verdicts::HistoryPoint;

/// Runs of a node's history the page shows at most.
pub const HISTORY_RUNS: usize = 60;
/// Longest wait for `scontrol show node` on a page.
const SCONTROL_WAIT: Duration = Duration::from_secs(2);

/// The family and readable name of a check: `node.write_bw_mib_s` →
/// ("Node", "write bandwidth"). The raw name stays in the page (titles,
/// tables) so it can be looked up in docs/io.md and docs/slurm.md.
pub fn check_label(check: &str) -> (&'static str, String) {
    let (prefix, rest) = check.split_once('.').unwrap_or(("", check));
    let family = match prefix {
        "node" => "Node",
        "io" => "I/O",
        "mdtest" => "Metadata",
        "linktest" | "netprobe" => "Interconnect",
        "traced" => "Traced runs",
        "checks" => "Configuration",
        _ => "Other",
    };
    let mut words: Vec<String> = Vec::new();
    let parts: Vec<&str> = rest.split(['_', '.']).filter(|w| !w.is_empty()).collect();
    let mut i = 0;
    while i < parts.len() {
        let w = parts[i];
        let next = parts.get(i + 1).copied();
        // Units at the end say nothing the value's unit does not.
        let unit = matches!((w, next), ("mib", Some("s")) | ("ops", Some("s")));
        if unit {
            i += 2;
            continue;
        }
        let word = match w {
            "bw" => "bandwidth",
            "cv" => "spread",
            "vs" => "vs",
            "max" => "max",
            "min" => "min",
            // Seconds: the unit, not a word.
            "s" => "",
            "mads" => "MADs",
            // `io.<op>_bw_task_p50`: the median process.
            "task" => "process",
            "p50" | "p90" | "p99" => w,
            other => other,
        };
        if !word.is_empty() {
            words.push(word.to_string());
        }
        i += 1;
    }
    let label = if words.is_empty() {
        check.to_string()
    } else {
        words.join(" ")
    };
    (family, label)
}

/// The page.
pub async fn page(
    State(h): State<Http>,
    headers: HeaderMap,
    uri: Uri,
    Path(node): Path<String>,
) -> Response {
    let t0 = Instant::now();
    if let Err(r) = access(&h, &headers, &path_and_query(&uri), false) {
        return r;
    }
    let c = match coord(&h, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if !benchlake_core::node::valid_name(&node) {
        return error_page(
            &h,
            &headers,
            StatusCode::NOT_FOUND,
            "not a node name (letters, digits, _ - . up to 128)",
        );
    }
    let n2 = node.clone();
    let read = c
        .db_read(move |tx| Ok((tx.get_agent(&n2)?, tx.get_node_drain(&n2)?)))
        .await;
    let (agent, drain) = match read {
        Ok(x) => x,
        Err(e) => return store_error(&h, &headers, e),
    };
    // Asked before the history is read (see `VerdictIndex::loaded`): until the
    // index has read the lake (seconds after a restart, more for years of
    // history), a node that only verdicts name is not "unknown".
    let loaded = c.verdicts().loaded();
    let history = c.verdicts().node_history(&node, HISTORY_RUNS);
    let events = c.node_actions.events_of(&node);
    if loaded && agent.is_none() && drain.is_none() && history.is_empty() && events.is_empty() {
        return error_page(
            &h,
            &headers,
            StatusCode::NOT_FOUND,
            &format!("no agent, verdict or drain names node '{node}'"),
        );
    }
    // Slurm's view, when scontrol answers quickly.
    let mut sc = c.node_actions.scontrol().clone();
    sc.timeout = SCONTROL_WAIT;
    let n3 = node.clone();
    let slurm = tokio::task::spawn_blocking(move || sc.show_node(&n3))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));

    let mut b = String::with_capacity(32 * 1024);
    let _ = write!(
        b,
        "<h1>Node <span class=\"mono\">{}</span></h1>",
        esc(&node)
    );
    if !loaded {
        b.push_str("<p class=\"note\" id=\"verdicts-loading\">Verdicts are still being read from the lake (the coordinator started moments ago); this node's history may be missing or incomplete: reload in a few seconds.</p>");
    }
    b.push_str("<section><h2>Identity</h2><table id=\"identity\"><tbody>");
    let row = |b: &mut String, k: &str, v: String| {
        let _ = write!(b, "<tr><th>{}</th><td>{v}</td></tr>", esc(k));
    };
    row(
        &mut b,
        "node",
        format!(
            "<span class=\"mono\">{}</span> <span class=\"muted\">(the Slurm node name where Slurm ran the task, else the agent's name: docs/slurm.md, \"Node identity\")</span>",
            esc(&node)
        ),
    );
    match &agent {
        Some(a) => {
            row(
                &mut b,
                "agent",
                format!(
                    "{} {}{}",
                    esc(&a.name),
                    badge(a.state.as_str()),
                    if a.drain {
                        format!(" {}", badge("drained"))
                    } else {
                        String::new()
                    }
                ),
            );
            row(&mut b, "host name", esc(&a.hostname));
            row(
                &mut b,
                "hardware",
                esc(&format!(
                    "{} cores, {}",
                    a.cores,
                    html::figure(Some(a.memory_bytes as f64), "bytes")
                )),
            );
            row(&mut b, "last heartbeat", html::time(a.last_heartbeat_ms));
        }
        None => row(
            &mut b,
            "agent",
            "<span class=\"muted\">no agent of this name (a Slurm node reached through a launcher agent, or an agent since removed)</span>".into(),
        ),
    }
    row(
        &mut b,
        "Slurm",
        match &slurm {
            Ok(Some(st)) => format!(
                "{}{}",
                badge(&st.state),
                st.reason
                    .as_ref()
                    .map(|r| format!(" <span class=\"mono\">{}</span>", esc(r)))
                    .unwrap_or_default()
            ),
            Ok(None) => "<span class=\"muted\">scontrol does not know this node</span>".into(),
            Err(e) => {
                let short: String = e.chars().take(160).collect();
                format!(
                    "<span class=\"muted\" title=\"{}\">scontrol did not answer: {}{}</span>",
                    esc(e),
                    esc(&short),
                    if short.len() < e.len() { "…" } else { "" }
                )
            }
        },
    );
    row(
        &mut b,
        "drained by benchlake",
        match &drain {
            Some(d) if d.run_id.is_empty() => format!(
                "<span id=\"drain\">{} at {} (by hand)</span>",
                esc(&d.reason),
                html::time(d.drained_ms)
            ),
            Some(d) => format!(
                "<span id=\"drain\">{} at {} for {} (run {})</span>",
                esc(&d.reason),
                html::time(d.drained_ms),
                esc(&d.check),
                run_link(&d.run_id)
            ),
            None => "<span class=\"muted\" id=\"drain\">no</span>".into(),
        },
    );
    b.push_str("</tbody></table>");
    if let Some(a) = super::actions::admin(&h, &headers) {
        let slurm_drained = match &slurm {
            Ok(Some(st)) => Some(st.drained() || st.down()),
            _ => None,
        };
        b.push_str(&super::actions::node_buttons(
            &a,
            &node,
            agent.as_ref().map(|a| a.drain),
            slurm_drained,
            drain.is_some(),
        ));
    }
    b.push_str("</section>");

    // Series, by family.
    b.push_str("<section><h2>Checks</h2>");
    if history.is_empty() {
        b.push_str("<p class=\"muted\">No check has judged this node yet.</p>");
    } else {
        let _ = write!(
            b,
            "<p class=\"muted\">The newest {HISTORY_RUNS} runs that judged this node, oldest left; points coloured by verdict (grey: not judged yet), the dashed line is the reference each run was compared with, red marks are drains benchlake made, green ones resumes, purple dashed ones the first run of a regression.</p>"
        );
        let mut families: BTreeMap<&'static str, Vec<(String, &String)>> = BTreeMap::new();
        for check in history.keys() {
            let (fam, label) = check_label(check);
            families.entry(fam).or_default().push((label, check));
        }
        for (fam, mut checks) in families {
            checks.sort();
            let _ = write!(b, "<h3>{}</h3><div class=\"series-grid\">", esc(fam));
            for (label, check) in checks {
                let pts = &history[check];
                let last = pts.last().map(|p| p.row.status.as_str()).unwrap_or("");
                let _ = write!(
                    b,
                    "<figure class=\"series-fig\" data-check=\"{0}\"><figcaption>{1} {2} <span class=\"mono muted\">{0}</span></figcaption>{3}</figure>",
                    esc(check),
                    esc(&label),
                    badge(last),
                    series_svg(check, pts, &events)
                );
            }
            b.push_str("</div>");
        }
    }
    b.push_str("</section>");

    // Failing links naming the node (LinkTest and netprobe runs).
    match super::links::of_node(&c, &node).await {
        Ok(rows) if rows.is_empty() => {}
        Ok(rows) => {
            let _ = write!(
                b,
                "<section><h2>Failing links ({})</h2><p class=\"muted\">Links of this node that failed in the newest {} runs with failing links, newest first (docs/verdicts.md, \"Links\").</p>{}</section>",
                rows.len(),
                super::links::NODE_LINK_FILES,
                super::links::table(&rows, "node-links", true)
            );
        }
        Err(e) => {
            let _ = write!(
                b,
                "<section><h2>Failing links</h2><p class=\"err\">cannot read link_health: {}</p></section>",
                esc(&e)
            );
        }
    }

    // What benchlake did to the node.
    b.push_str("<section><h2>Drains and resumes</h2>");
    if events.is_empty() {
        b.push_str("<p class=\"muted\">None since this coordinator started (the record of the current drain is above).</p>");
    } else {
        b.push_str("<table id=\"events\"><thead><tr><th>when</th><th>action</th><th>run</th><th>what</th></tr></thead><tbody>");
        for e in events.iter().rev() {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td></tr>",
                html::time(e.at_ms),
                badge(&e.action),
                if e.dry_run { " (dry run)" } else { "" },
                run_link(&e.run_id),
                esc(&e.detail)
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");
    b.push_str(&footer(t0, ""));
    Html(html::page(
        &format!("Node {node}"),
        "",
        &Chrome::of(&h, &headers),
        &b,
    ))
    .into_response()
}

/// One check's series: a point per run (coloured by status, linked to the
/// run), the reference as a dashed line, benchlake's drains (red) and
/// resumes (green) of runs in the series and the change points regressions
/// name (purple, dashed) as vertical marks.
pub fn series_svg(check: &str, pts: &[HistoryPoint], events: &[NodeEvent]) -> String {
    let (l, t, w, h) = (92.0, 10.0, 452.0, 90.0);
    let (width, height) = (l + w + 12.0, t + h + 24.0);
    let mut o = String::with_capacity(4096);
    let _ = write!(
        o,
        "<svg class=\"chart node-chart\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{} per run\">",
        esc(check)
    );
    let data: Vec<f64> = pts
        .iter()
        .filter_map(|p| p.row.value)
        .filter(|v| v.is_finite())
        .collect();
    let data_max = data.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    // A reference far from the data would flatten it: it is named in the
    // point's title, not drawn.
    let near = |r: &f64| data.is_empty() || r.abs() <= 3.0 * data_max.max(1e-12);
    let vals: Vec<f64> = data
        .iter()
        .copied()
        .chain(
            pts.iter()
                .filter_map(|p| p.row.reference)
                .filter(|v| v.is_finite() && near(v)),
        )
        .collect();
    let non_negative = vals.iter().all(|v| *v >= 0.0);
    let (mut lo, mut hi) = vals
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        (lo, hi) = (lo - pad, hi + pad);
    } else {
        let pad = (hi - lo) * 0.08;
        (lo, hi) = (lo - pad, hi + pad);
    }
    // Counts, times and bandwidths do not go below zero on the axis either.
    if non_negative {
        lo = lo.max(0.0);
    }
    let n = pts.len();
    let x = |k: usize| {
        if n <= 1 {
            l + w / 2.0
        } else {
            l + 8.0 + (w - 16.0) * k as f64 / (n - 1) as f64
        }
    };
    let y = |v: f64| t + h - ((v - lo) / (hi - lo)).clamp(0.0, 1.0) * h;
    let unit = pts
        .iter()
        .map(|p| p.row.unit.as_str())
        .find(|u| !u.is_empty())
        .unwrap_or("");
    for v in [lo, (lo + hi) / 2.0, hi] {
        let _ = write!(
            o,
            "<line x1=\"{l}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" class=\"grid\"/><text x=\"{2}\" y=\"{3:.1}\" class=\"tk\" text-anchor=\"end\">{4}</text>",
            y(v),
            l + w,
            l - 4.0,
            y(v) + 3.5,
            esc(&html::figure(Some(v), unit))
        );
    }
    // Drains and resumes of runs in the series.
    for e in events {
        let Some(k) = pts.iter().position(|p| p.run_id == e.run_id) else {
            continue;
        };
        let class = match e.action.as_str() {
            "drain" => "ev-drain",
            "resume" => "ev-resume",
            _ => continue,
        };
        let _ = write!(
            o,
            "<line class=\"{class}\" x1=\"{0:.1}\" y1=\"{t}\" x2=\"{0:.1}\" y2=\"{1}\"><title>{2}{3}: {4}</title></line>",
            x(k),
            t + h,
            esc(&e.action),
            if e.dry_run { " (dry run)" } else { "" },
            esc(&e.detail)
        );
    }
    // Change points: the first run of each regression a run of the series
    // reported (`since_run`), once each.
    let mut marked: Vec<&str> = Vec::new();
    for p in pts {
        let Some(since) = p.row.since_run.as_deref() else {
            continue;
        };
        let Some(k) = pts.iter().position(|q| q.run_id == since) else {
            continue;
        };
        if marked.contains(&since) {
            continue;
        }
        marked.push(since);
        let _ = write!(
            o,
            "<line class=\"ev-change\" x1=\"{0:.1}\" y1=\"{t}\" x2=\"{0:.1}\" y2=\"{1}\"><title>change point: {2} since run {3}{4}{5}</title></line>",
            x(k),
            t + h,
            esc(&p.row.status),
            esc(since),
            p.row
                .since_date
                .as_deref()
                .map(|d| format!(" of {}", esc(d)))
                .unwrap_or_default(),
            p.row
                .step
                .map(|s| format!(": {:+.1} %", s * 100.0))
                .unwrap_or_default()
        );
    }
    // The reference, where the runs had one.
    let refs: Vec<String> = pts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            p.row
                .reference
                .filter(|v| v.is_finite() && near(v))
                .map(|v| format!("{:.1},{:.1}", x(i), y(v)))
        })
        .collect();
    if refs.len() > 1 {
        let _ = write!(
            o,
            "<polyline class=\"median\" points=\"{}\"/>",
            refs.join(" ")
        );
    }
    let line: Vec<String> = pts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            p.row
                .value
                .filter(|v| v.is_finite())
                .map(|v| format!("{:.1},{:.1}", x(i), y(v)))
        })
        .collect();
    if line.len() > 1 {
        let _ = write!(
            o,
            "<polyline class=\"series\" points=\"{}\"/>",
            line.join(" ")
        );
    }
    for (i, p) in pts.iter().enumerate() {
        let Some(v) = p.row.value.filter(|v| v.is_finite()) else {
            // A text fact or an error: a mark on the axis.
            let _ = write!(
                o,
                "<a href=\"/runs/{0}\"><rect class=\"pt v-{1}\" x=\"{2:.1}\" y=\"{3:.1}\" width=\"6\" height=\"6\"><title>{0} · {1} · {4}</title></rect></a>",
                esc(&p.run_id),
                esc(&p.row.status),
                x(i) - 3.0,
                t + h - 3.0,
                esc(&p.row.message)
            );
            continue;
        };
        let _ = write!(
            o,
            "<a href=\"/runs/{0}\"><circle class=\"pt v-{1}\" cx=\"{2:.1}\" cy=\"{3:.1}\" r=\"4\" data-run=\"{0}\"><title>{0} · {1} · {4} (reference {5}) · {6}</title></circle></a>",
            esc(&p.run_id),
            esc(&p.row.status),
            x(i),
            y(v),
            esc(&html::figure(Some(v), &p.row.unit)),
            esc(&html::figure(p.row.reference, &p.row.unit)),
            esc(&p.row.message)
        );
    }
    let _ = write!(
        o,
        "<line x1=\"{l}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" class=\"axis\"/>",
        t + h,
        l + w
    );
    // First and last run's day under the axis (run ids are ULIDs: their
    // creation time).
    let day = |p: &HistoryPoint| {
        ulid::Ulid::from_string(&p.run_id)
            .map(|u| html::time(u.timestamp_ms() as i64))
            .map(|s| s.get(..10).unwrap_or(&s).to_string())
            .unwrap_or_default()
    };
    if let (Some(a), Some(z)) = (pts.first(), pts.last()) {
        let _ = write!(
            o,
            "<text x=\"{l}\" y=\"{0}\" class=\"tk\">{1}</text><text x=\"{2}\" y=\"{0}\" class=\"tk\" text-anchor=\"end\">{3} · {4} runs</text>",
            t + h + 16.0,
            esc(&day(a)),
            l + w,
            esc(&day(z)),
            n
        );
    }
    o.push_str("</svg>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdicts::CheckRow;

    #[test]
    fn check_names_read_as_words_in_their_family() {
        assert_eq!(
            check_label("node.write_bw_mib_s"),
            ("Node", "write bandwidth".to_string())
        );
        assert_eq!(check_label("node.cores"), ("Node", "cores".to_string()));
        assert_eq!(
            check_label("io.read_bw_mib_s.vs_median"),
            ("I/O", "read bandwidth vs median".to_string())
        );
        assert_eq!(
            check_label("linktest.max_time_s"),
            ("Interconnect", "max time".to_string())
        );
        assert_eq!(
            check_label("io.open_time_max_s.vs_median"),
            ("I/O", "open time max vs median".to_string())
        );
        assert_eq!(
            check_label("traced.rank_time"),
            ("Traced runs", "rank time".to_string())
        );
        assert_eq!(
            check_label("io.write_bw_task_p50_mib_s.vs_median"),
            ("I/O", "write bandwidth process p50 vs median".to_string())
        );
        assert_eq!(
            check_label("linktest.slow_links"),
            ("Interconnect", "slow links".to_string())
        );
        assert_eq!(check_label("odd"), ("Other", "odd".to_string()));
    }

    fn point(run: &str, status: &str, v: Option<f64>) -> HistoryPoint {
        HistoryPoint {
            run_id: run.into(),
            row: CheckRow {
                check: "node.cores".into(),
                status: status.into(),
                value: v,
                reference: Some(4.0),
                unit: "cores".into(),
                message: "m".into(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_series_marks_its_points_and_the_drains_of_its_runs() {
        let pts = vec![
            point("01JAAAAAAAAAAAAAAAAAAAAAAA", "PASS", Some(4.0)),
            point("01JBBBBBBBBBBBBBBBBBBBBBBB", "FAIL", Some(3.0)),
            point("01JCCCCCCCCCCCCCCCCCCCCCCC", "ERROR", None),
        ];
        let ev = |run: &str, action: &str| NodeEvent {
            at_ms: 0,
            node: "n1".into(),
            run_id: run.into(),
            action: action.into(),
            dry_run: false,
            detail: "d".into(),
        };
        let svg = series_svg(
            "node.cores",
            &pts,
            &[
                ev("01JBBBBBBBBBBBBBBBBBBBBBBB", "drain"),
                ev("elsewhere", "drain"),
            ],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<circle class=\"pt v-").count(), 2);
        assert!(svg.contains("<circle class=\"pt v-FAIL\""));
        assert!(svg.contains("<rect class=\"pt v-ERROR\""));
        assert_eq!(svg.matches("class=\"ev-drain\"").count(), 1);
        assert_eq!(svg.matches("class=\"ev-change\"").count(), 0);
        // A regression names the run its change started with: one mark there.
        let mut reg = pts.clone();
        reg.push(point("01JDDDDDDDDDDDDDDDDDDDDDDD", "REGRESSION", Some(3.0)));
        reg.push(point("01JEEEEEEEEEEEEEEEEEEEEEEE", "REGRESSION", Some(3.0)));
        for p in reg.iter_mut().skip(3) {
            p.row.since_run = Some("01JBBBBBBBBBBBBBBBBBBBBBBB".into());
            p.row.since_date = Some("2026-11-20".into());
            p.row.step = Some(-0.25);
        }
        let svg = series_svg("node.cores", &reg, &[]);
        assert_eq!(svg.matches("class=\"ev-change\"").count(), 1, "{svg}");
        assert!(svg.contains("since run 01JBBBBBBBBBBBBBBBBBBBBBBB of 2026-11-20: -25.0 %"));
        assert!(!svg.contains("NaN"));
    }
}
