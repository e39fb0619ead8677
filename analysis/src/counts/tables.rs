//! The analysis as lake tables: `alltoallv_patterns`, `alltoallv_stats`,
//! `alltoallv_heatmap` and `alltoallv_host_heatmap` (schemas in
//! `benchlake_core::catalog::counts`).
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Int64Array, Int64Builder, ListBuilder, StringArray, StringBuilder,
};
use arrow::record_batch::RecordBatch;
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;

use super::summary::Direction;
use super::{Analysis, Class, CountsError};

fn batch(
    table: &str,
    run: &str,
    n: usize,
    cols: Vec<ArrayRef>,
) -> Result<RecordBatch, CountsError> {
    let mut all: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![run; n]))];
    all.extend(cols);
    Ok(RecordBatch::try_new(catalog::schema(table)?, all)?)
}

/// Every table of the analysis (empty tables are left out).
pub fn tables(a: &Analysis, run_id: &str) -> Result<Vec<TableOutput>, CountsError> {
    let mut out = Vec::new();
    for (name, b) in [
        ("alltoallv_patterns", vec![patterns(a, run_id)?]),
        ("alltoallv_stats", vec![stats(a, run_id)?]),
        ("alltoallv_heatmap", heatmap(a, run_id)?),
        ("alltoallv_host_heatmap", vec![host_heatmap(a, run_id)?]),
    ] {
        let t = TableOutput::new(name, b);
        if t.rows() > 0 {
            out.push(t);
        }
    }
    Ok(out)
}

/// `alltoallv_patterns`: one row per pattern, direction and map entry. A side
/// with no non-zero row (an all-zero call) is one row with `num_ranks` =
/// `num_peers` = 0, so barrier-like patterns are not lost.
pub fn patterns(a: &Analysis, run: &str) -> Result<RecordBatch, CountsError> {
    let mut src = StringBuilder::new();
    let (mut lead, mut pid, mut nr, mut np, mut nc) = (
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    let mut dir = StringBuilder::new();
    let mut calls = ListBuilder::new(Int64Builder::new());
    let mut n = 0;
    for l in &a.leads {
        for p in &l.patterns {
            if p.calls.len() > super::report::MAX_EXPANDED_CALLS {
                return Err(CountsError::Input(format!(
                    "lead rank {}: pattern {} has {} calls, more than the {} a call_ids list may hold",
                    l.lead,
                    p.id,
                    p.calls.len(),
                    super::report::MAX_EXPANDED_CALLS
                )));
            }
            for (d, m) in [(Direction::Send, &p.send), (Direction::Recv, &p.recv)] {
                let zero = BTreeMap::from([(0u64, 0u64)]);
                let m = if m.is_empty() { &zero } else { m };
                for (&peers, &ranks) in m {
                    src.append_value(&l.source);
                    lead.append_value(l.lead as i64);
                    pid.append_value(p.id as i64);
                    dir.append_value(d.as_str());
                    nr.append_value(ranks as i64);
                    np.append_value(peers as i64);
                    nc.append_value(p.calls.len() as i64);
                    for &(x, y) in &p.calls.0 {
                        for c in x..=y {
                            calls.values().append_value(c as i64);
                        }
                    }
                    calls.append(true);
                    n += 1;
                }
            }
        }
    }
    batch(
        "alltoallv_patterns",
        run,
        n,
        vec![
            Arc::new(src.finish()),
            Arc::new(lead.finish()),
            Arc::new(pid.finish()),
            Arc::new(dir.finish()),
            Arc::new(nr.finish()),
            Arc::new(np.finish()),
            Arc::new(nc.finish()),
            Arc::new(calls.finish()),
        ],
    )
}

/// `alltoallv_stats`: one row per figure (see docs/counts.md for `stat` names).
pub fn stats(a: &Analysis, run: &str) -> Result<RecordBatch, CountsError> {
    let mut src = StringBuilder::new();
    let (mut job, mut lead, mut key, mut val) = (
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    let (mut dir, mut stat) = (StringBuilder::new(), StringBuilder::new());
    let mut n = 0;
    for l in &a.leads {
        let st = &l.stats;
        let mut row = |d: &str, s: &str, k: Option<u64>, v: u64| {
            src.append_value(&l.source);
            job.append_value(l.job as i64);
            lead.append_value(l.lead as i64);
            dir.append_value(d);
            stat.append_value(s);
            key.append_option(k.map(|k| k as i64));
            val.append_value(v as i64);
            n += 1;
        };
        row("all", "num_calls", None, st.num_calls);
        row("all", "loaded_calls", None, st.loaded_calls);
        let t = Some(a.options.size_threshold);
        row("send", "large_messages", t, st.large);
        row("send", "small_messages", t, st.small);
        row("send", "small_nonzero_messages", t, st.small_nonzero);
        for (d, s, m) in [
            ("send", "datatype_size", &st.send_datatypes),
            ("recv", "datatype_size", &st.recv_datatypes),
            ("all", "comm_size", &st.comm_sizes),
            ("send", "zero_counts", &st.send_sparsity),
            ("recv", "zero_counts", &st.recv_sparsity),
            ("send", "min_count", &st.send_min),
            ("recv", "min_count", &st.recv_min),
            ("send", "min_nonzero_count", &st.send_min_nonzero),
            ("recv", "min_nonzero_count", &st.recv_min_nonzero),
            ("send", "max_count", &st.send_max),
            ("recv", "max_count", &st.recv_max),
        ] {
            for (k, v) in m {
                row(d, s, Some(*k), *v);
            }
        }
        for (class, name) in [
            (Class::OneToN, "class_1_to_n"),
            (Class::NToOne, "class_n_to_1"),
            (Class::NToN, "class_n_to_n"),
        ] {
            let mut per: BTreeMap<u64, u64> = BTreeMap::new();
            for id in l.classes.get(&class).into_iter().flatten() {
                *per.entry(*id).or_default() += 1;
            }
            for (id, times) in per {
                row("send", name, Some(id), times);
            }
        }
    }
    batch(
        "alltoallv_stats",
        run,
        n,
        vec![
            Arc::new(src.finish()),
            Arc::new(job.finish()),
            Arc::new(lead.finish()),
            Arc::new(dir.finish()),
            Arc::new(stat.finish()),
            Arc::new(key.finish()),
            Arc::new(val.finish()),
        ],
    )
}

/// The heat-map rows of one lead rank and direction.
type HeatRun<'a> = (&'a super::LeadAnalysis, Direction, &'a [(u64, u64, u64)]);

/// Rows per batch of `alltoallv_heatmap`: a multiple of the Parquet writer's
/// 8,192-value mini-batches, so the file is the same as from one batch.
pub const HEAT_BATCH_ROWS: usize = 1 << 16;

/// `alltoallv_heatmap`: non-zero rank×rank bytes, in batches of
/// [`HEAT_BATCH_ROWS`] rows.
///
/// A 1,024-rank lead has a million rows. The columns that are the same on every
/// row of a lead and direction (`run_id`, `source`, `lead_rank`, `direction`)
/// are one array of [`HEAT_BATCH_ROWS`] rows shared by every batch of that lead
/// and direction (the lake writer verifies a shared constant array once and
/// writes it as one run): the table holds the three varying columns and not
/// 130 MB of repeated strings.
pub fn heatmap(a: &Analysis, run: &str) -> Result<Vec<RecordBatch>, CountsError> {
    let schema = catalog::schema("alltoallv_heatmap")?;
    // The (lead, direction) runs of rows, in table order.
    let segs: Vec<HeatRun<'_>> = a
        .leads
        .iter()
        .flat_map(|l| l.heat.iter().map(move |(d, v)| (l, *d, v.as_slice())))
        .filter(|(_, _, v)| !v.is_empty())
        .collect();
    let total: usize = segs.iter().map(|s| s.2.len()).sum();
    let full = total.min(HEAT_BATCH_ROWS);
    let run_col: ArrayRef = Arc::new(StringArray::from(vec![run; full]));
    let mut out = Vec::with_capacity(total.div_ceil(HEAT_BATCH_ROWS.max(1)));
    // Shared constant columns of the current segment: source, lead, direction.
    let mut consts: Option<(usize, [ArrayRef; 3])> = None;
    let (mut si, mut at) = (0usize, 0usize);
    while si < segs.len() {
        let mut n = 0usize;
        let (mut rank, mut peer, mut bytes) = (
            Vec::with_capacity(full),
            Vec::with_capacity(full),
            Vec::with_capacity(full),
        );
        // Per-row constant columns, only when a batch spans several segments.
        let mut spans: Vec<(usize, usize)> = Vec::new();
        while n < HEAT_BATCH_ROWS && si < segs.len() {
            let Some(&(_, _, v)) = segs.get(si) else {
                break;
            };
            let take = (HEAT_BATCH_ROWS - n).min(v.len() - at);
            for &(x, y, b) in v.get(at..at + take).unwrap_or_default() {
                rank.push(x as i64);
                peer.push(y as i64);
                bytes.push(i64::try_from(b).unwrap_or(i64::MAX));
            }
            spans.push((si, take));
            n += take;
            at += take;
            if at == v.len() {
                si += 1;
                at = 0;
            }
        }
        let [src, lead, dir]: [ArrayRef; 3] = match spans.as_slice() {
            [(s, _)] => {
                if consts.as_ref().is_none_or(|c| c.0 != *s) {
                    let Some(&(l, d, _)) = segs.get(*s) else {
                        break;
                    };
                    consts = Some((
                        *s,
                        [
                            Arc::new(StringArray::from(vec![l.source.as_str(); full])),
                            Arc::new(Int64Array::from(vec![l.lead as i64; full])),
                            Arc::new(StringArray::from(vec![d.as_str(); full])),
                        ],
                    ));
                }
                let Some((_, c)) = &consts else {
                    break;
                };
                c.clone().map(|a| a.slice(0, n))
            }
            _ => {
                let rows = || {
                    spans.iter().flat_map(|&(s, k)| {
                        std::iter::repeat_n(segs.get(s).map(|x| (x.0, x.1)), k).flatten()
                    })
                };
                [
                    Arc::new(StringArray::from_iter_values(
                        rows().map(|(l, _)| l.source.as_str()),
                    )),
                    Arc::new(Int64Array::from_iter_values(
                        rows().map(|(l, _)| l.lead as i64),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        rows().map(|(_, d)| d.as_str()),
                    )),
                ]
            }
        };
        out.push(RecordBatch::try_new(
            schema.clone(),
            vec![
                run_col.slice(0, n),
                src,
                lead,
                dir,
                Arc::new(Int64Array::from(rank)),
                Arc::new(Int64Array::from(peer)),
                Arc::new(Int64Array::from(bytes)),
            ],
        )?);
    }
    Ok(out)
}

/// `alltoallv_host_heatmap`: bytes between hosts (needs location files).
pub fn host_heatmap(a: &Analysis, run: &str) -> Result<RecordBatch, CountsError> {
    let mut src = StringBuilder::new();
    let (mut lead, mut b) = (Int64Builder::new(), Int64Builder::new());
    let (mut dir, mut h, mut ph) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let mut n = 0;
    for l in &a.leads {
        for (d, v) in &l.heat {
            let mut m: BTreeMap<(&str, &str), u64> = BTreeMap::new();
            for &(x, y, bytes) in v {
                if let (Some(hx), Some(hy)) = (a.hosts.get(&x), a.hosts.get(&y)) {
                    let e = m.entry((hx.as_str(), hy.as_str())).or_default();
                    *e = e.saturating_add(bytes);
                }
            }
            for ((hx, hy), bytes) in m {
                src.append_value(&l.source);
                lead.append_value(l.lead as i64);
                dir.append_value(d.as_str());
                h.append_value(hx);
                ph.append_value(hy);
                b.append_value(i64::try_from(bytes).unwrap_or(i64::MAX));
                n += 1;
            }
        }
    }
    batch(
        "alltoallv_host_heatmap",
        run,
        n,
        vec![
            Arc::new(src.finish()),
            Arc::new(lead.finish()),
            Arc::new(dir.finish()),
            Arc::new(h.finish()),
            Arc::new(ph.finish()),
            Arc::new(b.finish()),
        ],
    )
}
