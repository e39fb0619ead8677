//! The analysis against the Go tools' outputs kept in ../shared/data/counts/*/go_reference.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use benchlake_analysis::counts::{
    self, Options, PartInput, analyze_dir, analyze_part, merge, plan,
};

fn data() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/counts"
    ))
    .to_path_buf()
}

fn lines(text: &str) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        *m.entry(l).or_default() += 1;
    }
    m
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Compares every file of `reference` with the file of the same name in `out`:
/// line multisets (the Go tools print map-derived lines in random order), and
/// the section headers in order.
fn compare_dir(reference: &Path, out: &Path, skip: &[&str]) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(reference).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if skip.iter().any(|s| name.starts_with(s)) {
            continue;
        }
        let want = read(&p);
        let got = read(&out.join(&name));
        if name.starts_with("heat-map-") {
            // The Go tool appends partial sums once per communicator; the final
            // cumulative block is the last lines.
            let g: Vec<&str> = got.lines().collect();
            let w: Vec<&str> = want.lines().collect();
            let k = g.len() - 2;
            let mut tail: Vec<&str> = w[w.len() - k..].to_vec();
            tail.sort();
            let mut mine: Vec<&str> = g[2..].to_vec();
            mine.sort();
            assert_eq!(mine, tail, "{name}");
            assert_eq!(g[..2], w[..2], "{name}");
        } else {
            assert_eq!(
                lines(&got),
                lines(&want),
                "{name} differs from the Go reference"
            );
            let heads = |t: &str| {
                t.lines()
                    .filter(|l| l.starts_with('#'))
                    .map(|l| l.split('(').next().unwrap().to_string())
                    .collect::<Vec<_>>()
            };
            assert_eq!(heads(&got), heads(&want), "{name}: section order");
            if name.starts_with("alltoallv_") {
                assert_eq!(
                    got, want,
                    "{name} is deterministic and must be byte-identical"
                );
            }
        }
        n += 1;
    }
    n
}

fn check_case(case: &str) {
    let dir = data().join(case);
    let out = tempfile::tempdir().unwrap();
    let a = analyze_dir(&dir, out.path(), &Options::default()).unwrap();
    assert!(!a.leads.is_empty());
    let n = compare_dir(&dir.join("go_reference/srcountsanalyzer"), out.path(), &[]);
    assert!(n >= 3, "{case}: only {n} files compared");
    let n = compare_dir(
        &dir.join("go_reference/profile"),
        out.path(),
        &["rankfile.txt", "multicomm-highlights.md"],
    );
    assert!(n >= 3, "{case}: only {n} profile files compared");
}

#[test]
fn a2av_cases_np4_matches_go() {
    check_case("a2av_cases_np4");
}

#[test]
fn ex_alltoallv_c_np4_matches_go() {
    check_case("ex_alltoallv_c_np4");
}

#[test]
fn hand_checked_figures() {
    let dir = data().join("a2av_cases_np4");
    let out = tempfile::tempdir().unwrap();
    let a = analyze_dir(&dir, out.path(), &Options::default()).unwrap();
    let l0 = a.leads.iter().find(|l| l.lead == 0).unwrap();
    assert_eq!(l0.stats.num_calls, 16);
    assert_eq!(l0.patterns.len(), 7);
    // Pattern #0: calls 0-1,3,5 (call 5 joins despite its 8-byte datatype).
    assert_eq!(
        benchlake_formats::counts::ranklist::format(&l0.patterns[0].calls.0, ","),
        "0-1,3,5"
    );
    assert_eq!(l0.patterns[0].send, BTreeMap::from([(3, 3)]));
    assert_eq!(l0.patterns[0].recv, BTreeMap::from([(3, 1), (2, 3)]));
    assert_eq!(l0.stats.small + l0.stats.large, 220);
    assert_eq!(l0.stats.small_nonzero, 123);
    // Lead ranks 1 and 2: their calls (11-12, 14) are >= the header range, so the
    // reference's patterns are empty but its stats count them.
    let l1 = a.leads.iter().find(|l| l.lead == 1).unwrap();
    assert!(l1.patterns.is_empty());
    assert_eq!(l1.stats.loaded_calls, 2);
    assert!(!l1.warnings.is_empty());
    // The threshold is configurable: at 0 bytes every non-zero message is large.
    let zero = Options {
        size_threshold: 0,
        ..Options::default()
    };
    let z = analyze_dir(&dir, tempfile::tempdir().unwrap().path(), &zero).unwrap();
    let z0 = z.leads.iter().find(|l| l.lead == 0).unwrap();
    assert_eq!(
        (z0.stats.large, z0.stats.small, z0.stats.small_nonzero),
        (123, 97, 0)
    );
    let text = counts::report::stats(z0, 0);
    assert!(
        text.contains("123/220 of all messages are large (threshold = 0)"),
        "{text}"
    );
    // Without reference quirks the patterns cover every call.
    let strict = Options {
        reference_compat: false,
        ..Options::default()
    };
    let b = analyze_dir(&dir, tempfile::tempdir().unwrap().path(), &strict).unwrap();
    let l1 = b.leads.iter().find(|l| l.lead == 1).unwrap();
    assert_eq!(l1.patterns.len(), 1);
    assert_eq!(l1.patterns[0].calls.len(), 2);
    let l0 = b.leads.iter().find(|l| l.lead == 0).unwrap();
    // Strict min excluding zero is the real one: call 7-9,15 rows are all 2 or 4.
    assert!(l0.stats.send_min_nonzero.contains_key(&2));
}

/// Splitting into one part per block and merging gives the same analysis.
#[test]
fn split_parts_merge_to_the_whole() {
    let dir = data().join("a2av_cases_np4");
    let files: Vec<PathBuf> = benchlake_formats::counts::expand_dir(&dir)
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let whole = counts::fanout::analyze_files(&files, &Options::default()).unwrap();
    let small = Options {
        max_part_bytes: 1,
        ..Options::default()
    };
    let specs = plan(&files, &small).unwrap();
    let compact_parts = specs
        .iter()
        .filter(|s| matches!(s.input, PartInput::Compact { .. }))
        .count();
    assert!(compact_parts >= 14, "{compact_parts} parts");
    // Parts go through JSON as they would to a worker, and merge in any order.
    let mut results: Vec<_> = specs
        .iter()
        .map(|s| {
            let j = serde_json::to_string(s).unwrap();
            let s: counts::PartSpec = serde_json::from_str(&j).unwrap();
            let r = analyze_part(&s).unwrap();
            serde_json::from_str::<counts::PartResult>(&serde_json::to_string(&r).unwrap()).unwrap()
        })
        .collect();
    results.reverse();
    let mut merged = merge(results);
    merged.options = whole.options.clone();
    assert_eq!(merged.leads.len(), whole.leads.len());
    for (m, w) in merged.leads.iter().zip(&whole.leads) {
        assert_eq!(m.patterns, w.patterns);
        assert_eq!(m.stats, w.stats);
        assert_eq!(m.heat, w.heat);
        assert_eq!(m.rank_bytes, w.rank_bytes);
        assert_eq!(counts::report::stats(m, 200), counts::report::stats(w, 200));
        assert_eq!(counts::report::patterns(m), counts::report::patterns(w));
    }
}

/// Compact and per-call files of the same run give the same analysis.
#[test]
fn compact_and_percall_agree() {
    let dir = data().join("a2av_cases_np4");
    let strict = Options {
        reference_compat: false,
        ..Options::default()
    };
    let list = |sub: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = benchlake_formats::counts::expand_dir(&dir.join(sub))
            .unwrap()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        v.extend(
            benchlake_formats::counts::expand_dir(&dir.join("location"))
                .unwrap()
                .into_iter()
                .map(|(p, _)| p),
        );
        v
    };
    let c = counts::fanout::analyze_files(&list("counts"), &strict).unwrap();
    let p = counts::fanout::analyze_files(&list("counts_notcompact"), &strict).unwrap();
    assert_eq!(c.leads.len(), p.leads.len());
    for (x, y) in c.leads.iter().zip(&p.leads) {
        assert_eq!(x.lead, y.lead);
        assert_eq!(x.patterns, y.patterns);
        assert_eq!(x.stats, y.stats);
        assert_eq!(x.heat, y.heat);
    }
}

#[test]
fn noncompact_only_case_analyses() {
    let dir = data().join("a2av_many_np8_c200_k7_noncompact");
    let out = tempfile::tempdir().unwrap();
    let a = analyze_dir(&dir, out.path(), &Options::default()).unwrap();
    let total: u64 = a.leads.iter().map(|l| l.stats.loaded_calls).sum();
    assert_eq!(total, 200);
    let l0 = &a.leads[0];
    let in_patterns: u64 = l0.patterns.iter().map(|p| p.calls.len()).sum();
    assert_eq!(in_patterns, l0.stats.loaded_calls);
    assert!(
        out.path()
            .join(format!("patterns-job0-rank{}.md", l0.lead))
            .exists()
    );
}

/// The analysis tables have the catalog schemas and the reference's figures.
#[test]
fn analysis_tables() {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    let dir = data().join("a2av_cases_np4");
    let a = analyze_dir(
        &dir,
        tempfile::tempdir().unwrap().path(),
        &Options::default(),
    )
    .unwrap();
    let out = counts::tables::tables(&a, "run1").unwrap();
    for t in &out {
        benchlake_core::lake::encode_parquet(&t.table, "2026-11-22", &t.batches).unwrap();
    }
    let get = |n: &str| {
        out.iter()
            .find(|t| t.table == n)
            .unwrap_or_else(|| panic!("{n}"))
            .batches[0]
            .clone()
    };
    let p = get("alltoallv_patterns");
    let lead = p
        .column_by_name("lead_rank")
        .unwrap()
        .as_primitive::<Int64Type>();
    let pid = p
        .column_by_name("pattern_id")
        .unwrap()
        .as_primitive::<Int64Type>();
    let nr = p
        .column_by_name("num_ranks")
        .unwrap()
        .as_primitive::<Int64Type>();
    let np = p
        .column_by_name("num_peers")
        .unwrap()
        .as_primitive::<Int64Type>();
    let dir_c = p.column_by_name("direction").unwrap().as_string::<i32>();
    // Pattern #0 of lead 0: 3 ranks sent to 3; 1 recv'd from 3, 3 recv'd from 2.
    let rows: Vec<(String, i64, i64)> = (0..p.num_rows())
        .filter(|&i| lead.value(i) == 0 && pid.value(i) == 0)
        .map(|i| (dir_c.value(i).to_string(), nr.value(i), np.value(i)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("send".into(), 3, 3),
            ("recv".into(), 3, 2),
            ("recv".into(), 1, 3)
        ]
    );
    // Pattern #5 (call 10, all zero) is kept as a 0/0 row per side.
    assert_eq!(
        (0..p.num_rows())
            .filter(|&i| lead.value(i) == 0 && pid.value(i) == 5 && nr.value(i) == 0)
            .count(),
        2
    );

    let s = get("alltoallv_stats");
    let stat = s.column_by_name("stat").unwrap().as_string::<i32>();
    let key = s.column_by_name("key").unwrap().as_primitive::<Int64Type>();
    let val = s
        .column_by_name("value")
        .unwrap()
        .as_primitive::<Int64Type>();
    let slead = s
        .column_by_name("lead_rank")
        .unwrap()
        .as_primitive::<Int64Type>();
    let find = |name: &str, k: Option<i64>| {
        (0..s.num_rows())
            .find(|&i| {
                slead.value(i) == 0 && stat.value(i) == name && k.is_none_or(|k| key.value(i) == k)
            })
            .map(|i| val.value(i))
    };
    assert_eq!(find("num_calls", None), Some(16));
    assert_eq!(find("small_nonzero_messages", Some(200)), Some(123));
    assert_eq!(find("comm_size", Some(4)), Some(13));
    assert_eq!(find("class_n_to_n", Some(4)), Some(1));

    // Heat map: lead 0 over all calls, rank 0 sends 444 bytes in total, as in the
    // Go global heat map's final block for rank 0 (lead 0 is the only one with rank 0).
    let h = get("alltoallv_heatmap");
    let hl = h
        .column_by_name("lead_rank")
        .unwrap()
        .as_primitive::<Int64Type>();
    let hr = h
        .column_by_name("rank")
        .unwrap()
        .as_primitive::<Int64Type>();
    let hb = h
        .column_by_name("bytes")
        .unwrap()
        .as_primitive::<Int64Type>();
    let total: i64 = (0..h.num_rows())
        .filter(|&i| hl.value(i) == 0 && hr.value(i) == 0)
        .map(|i| hb.value(i))
        .sum();
    assert_eq!(total, 444);
    let hh = get("alltoallv_host_heatmap");
    let hhl = hh
        .column_by_name("lead_rank")
        .unwrap()
        .as_primitive::<Int64Type>();
    let hhb = hh
        .column_by_name("bytes")
        .unwrap()
        .as_primitive::<Int64Type>();
    // Host vm: 1424 bytes sent under lead 0 (alltoallv_hosts-heat-map.rank0-send.md).
    let vm: i64 = (0..hh.num_rows())
        .filter(|&i| hhl.value(i) == 0)
        .map(|i| hhb.value(i))
        .sum();
    assert_eq!(vm, 1424);
}
