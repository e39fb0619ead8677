//! The record job bundles a per-node run's raw outputs (issue 40, item 4),
//! and the figures of docs/testing.md ("Raw bundles"): objects and bytes
//! under `raw/` before and after, for `BUNDLE_NODES` nodes (default 600)
//! × `BUNDLE_NIGHTS` nightly hostinfo runs (default 2).
use super::*;
use benchlake_core::ids::{new_id, new_id_at};
use benchlake_core::jobs::RecordRawFile;
use benchlake_core::lake::{Lake, sha256_hex};

const NIGHT_MS: i64 = 86_400_000;
/// 2026-11-23 00:00 UTC.
const T0: i64 = 1_795_392_000_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One node's raw outputs as an agent uploads them for `hostinfo`: its
/// facts document (this machine's, under the node's name) and its empty
/// stdout and stderr.
fn node_files(i: usize, night: usize) -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut f = benchlake_formats::hostinfo::collect();
    f.hostname = format!("node{i:04}");
    f.node = Some(f.hostname.clone());
    f.collected_at_ms = T0 + night as i64 * NIGHT_MS + i as i64;
    f.load_1m = (i % 17) as f64 / 4.0;
    let doc = serde_json::to_string_pretty(&f).unwrap().into_bytes();
    vec![
        ("host.json", "hostinfo", doc),
        ("stdout.txt", "log", Vec::new()),
        ("stderr.txt", "log", Vec::new()),
    ]
}

/// A night's hostinfo run of `nodes` nodes put in the lake: its record spec.
fn put_night(lake: &Lake, rt: &tokio::runtime::Runtime, nodes: usize, night: usize) -> RecordSpec {
    let at = T0 + night as i64 * NIGHT_MS;
    let run_id = new_id_at(at);
    let mut raw_files = Vec::new();
    for i in 0..nodes {
        let task = new_id();
        for (name, format, data) in node_files(i, night) {
            let key = layout::raw_key(&run_id, &task, name).unwrap();
            raw_files.push(RecordRawFile {
                task_id: task.clone(),
                agent: format!("node{i:04}"),
                key: key.clone(),
                bytes: data.len() as u64,
                sha256: sha256_hex(&data),
                format: format.into(),
                slurm_job_id: None,
                slurm_nodes: None,
            });
            rt.block_on(lake.put(&key, bytes::Bytes::from(data)))
                .unwrap();
        }
    }
    RecordSpec {
        run_id,
        schedule_id: None,
        benchmark: "hostinfo".into(),
        kind: "noop".into(),
        status: "SUCCEEDED".into(),
        params: Default::default(),
        submitted_at_ms: at,
        started_at_ms: Some(at),
        finished_at_ms: Some(at + 60_000),
        agents: (0..nodes).map(|i| format!("node{i:04}")).collect(),
        error: None,
        raw_files,
        scheduled_for_ms: Some(at),
    }
}

/// The record job of `s`, run as the worker runs it (tables written to the
/// final keys).
fn record(
    lake: &Lake,
    rt: &tokio::runtime::Runtime,
    scratch: &std::path::Path,
    s: &RecordSpec,
) -> crate::local::LocalOutput {
    let date = layout::date_of_ms(s.submitted_at_ms);
    crate::local::run(
        lake,
        rt.handle(),
        scratch,
        crate::local::LocalJob {
            job_id: new_id(),
            run_id: s.run_id.clone(),
            run_date: date,
            spec_json: serde_json::to_string(s).unwrap(),
            executor: &Record,
        },
    )
    .unwrap()
}

fn raw_totals(lake: &Lake, rt: &tokio::runtime::Runtime) -> (usize, u64) {
    let l = rt.block_on(lake.list(layout::RAW)).unwrap();
    (l.len(), l.iter().map(|x| x.1).sum())
}

/// `bundle` column of the record's `raw_files` rows.
fn bundle_column(out: &crate::local::LocalOutput) -> Vec<Option<String>> {
    use arrow::array::{Array, AsArray};
    let t = out.tables.iter().find(|t| t.table == "raw_files").unwrap();
    let mut v = Vec::new();
    for b in &t.batches {
        let c = b.column_by_name("bundle").unwrap().as_string::<i32>();
        for i in 0..c.len() {
            v.push((!c.is_null(i)).then(|| c.value(i).to_string()));
        }
    }
    v
}

#[test]
fn a_hostinfo_night_ends_as_one_raw_object_and_the_figures() {
    let nodes = env_or("BUNDLE_NODES", 600);
    let nights = env_or("BUNDLE_NIGHTS", 2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::local(&dir.path().join("lake")).unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut specs = Vec::new();
    for n in 0..nights {
        specs.push(put_night(&lake, &rt, nodes, n));
    }
    let (before_n, before_b) = raw_totals(&lake, &rt);
    assert_eq!(before_n, nights * nodes * 3);
    let started = std::time::Instant::now();
    for s in &specs {
        let out = record(&lake, &rt, &scratch, s);
        let bundle = layout::raw_bundle_key(&s.run_id).unwrap();
        // Every raw_files row names the bundle; the run has one raw object.
        let col = bundle_column(&out);
        assert_eq!(col.len(), nodes * 3);
        assert!(col.iter().all(|b| b.as_deref() == Some(bundle.as_str())));
        let left = rt
            .block_on(lake.list(&layout::raw_run_prefix(&s.run_id).unwrap()))
            .unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].0, bundle);
        // Readers of a raw key get the uploaded bytes.
        for f in s.raw_files.iter().step_by(97) {
            let d = rt.block_on(lake.get_raw(&f.key)).unwrap();
            assert_eq!(
                (d.len() as u64, sha256_hex(&d)),
                (f.bytes, f.sha256.clone())
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let (after_n, after_b) = raw_totals(&lake, &rt);
    assert_eq!(after_n, nights);
    assert!(after_b < before_b, "{after_b} >= {before_b}");
    let facts: u64 = specs
        .iter()
        .flat_map(|s| &s.raw_files)
        .filter(|f| f.format == "hostinfo")
        .map(|f| f.bytes)
        .sum();
    eprintln!(
        "raw bundles: {nodes} nodes x {nights} nights: raw/ before {before_n} objects, {before_b} bytes \
         (facts documents: mean {} bytes); after {after_n} objects, {after_b} bytes \
         ({:.1} KB per night); {:.2} s for {nights} record jobs ({:.0} ms per night)",
        facts / (nodes * nights) as u64,
        after_b as f64 / nights as f64 / 1e3,
        secs,
        secs * 1e3 / nights as f64
    );
    // A record job run again (a retry after a crash) finds the bundle and
    // records the same rows.
    let out = record(&lake, &rt, &scratch, &specs[0]);
    assert_eq!(bundle_column(&out).iter().flatten().count(), nodes * 3);
    assert_eq!(raw_totals(&lake, &rt), (after_n, after_b));
}

#[test]
fn runs_without_a_per_node_kind_keep_their_objects() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::local(&dir.path().join("lake")).unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut s = put_night(&lake, &rt, 3, 0);
    for f in &mut s.raw_files {
        if f.format == "hostinfo" {
            f.format = "pio".into();
        }
    }
    let out = record(&lake, &rt, &scratch, &s);
    assert!(bundle_column(&out).iter().all(Option::is_none));
    assert_eq!(raw_totals(&lake, &rt).0, 9);
    // A per-node run whose record does not match the objects is recorded
    // without a bundle, its objects left where they are.
    let mut s = put_night(&lake, &rt, 2, 1);
    s.raw_files[0].sha256 = "00".repeat(32);
    let out = record(&lake, &rt, &scratch, &s);
    assert!(bundle_column(&out).iter().all(Option::is_none));
    assert_eq!(raw_totals(&lake, &rt).0, 9 + 6);
}
