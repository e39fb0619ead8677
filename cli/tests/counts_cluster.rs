//! The counts analysis fanned out through the in-process cluster: a run whose
//! agent produces a real profiler output (../shared/data/counts/a2av_cases_np4),
//! its ingest and automatic analysis, then `AnalyzeRun` with a forced small part
//! size (one block per part) through two workers. Checks that the merged tables
//! equal the offline analysis, that the merge waits for every part (job groups),
//! that an expired part job is retried without duplicate rows, that failed parts
//! fail the merge with the part named, and the `benchlake analyze counts RUN_ID`
//! CLI path against the Go reference line sets.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow::array::RecordBatch;
use benchlake_coordinator::Tokens;
use benchlake_proto::v1 as pb;
use common::*;

fn case() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/counts/a2av_cases_np4"
    ))
    .canonicalize()
    .unwrap()
}

/// The files the test benchmark copies into its output directory.
fn case_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (sub, prefixes) in [
        ("counts", &["send-counters.", "recv-counters."][..]),
        ("location", &["alltoallv_locations_"][..]),
    ] {
        for e in std::fs::read_dir(case().join(sub)).unwrap() {
            let p = e.unwrap().path();
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            if prefixes.iter().any(|x| n.starts_with(x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn a2av_catalog() -> String {
    let files: Vec<String> = case_files()
        .iter()
        .map(|p| format!("\"{}\"", p.display()))
        .collect();
    format!(
        r#"
[[benchmark]]
name = "a2av"
kind = "counts"
description = "copies a real alltoallv profiler output"
command = ["cp", {}, "{{out_dir}}"]
timeout_s = 60
[[benchmark.output]]
file = "send-counters.*"
format = "counts"
required = true
[[benchmark.output]]
file = "recv-counters.*"
format = "counts"
required = true
[[benchmark.output]]
file = "alltoallv_locations_*"
format = "counts"
"#,
        files.join(", ")
    )
}

/// Every batch of `table` for one run in the lake, concatenated.
fn lake_table(lake: &Path, table: &str, run_id: &str) -> Option<RecordBatch> {
    let batches = table_batches(lake, table, Some(run_id));
    let schema = batches.first()?.schema();
    Some(arrow::compute::concat_batches(&schema, &batches).unwrap())
}

/// The offline analysis of the same files, as tables of `run_id`.
fn offline_tables(run_id: &str) -> BTreeMap<String, RecordBatch> {
    let a = benchlake_analysis::counts::fanout::analyze_files(&case_files(), &Default::default())
        .unwrap();
    benchlake_analysis::counts::tables::tables(&a, run_id)
        .unwrap()
        .into_iter()
        .map(|t| {
            let schema = t.batches[0].schema();
            (
                t.table.clone(),
                arrow::compute::concat_batches(&schema, &t.batches).unwrap(),
            )
        })
        .collect()
}

/// The lake's analysis tables of `run_id` equal the offline analysis, column by
/// column (so no row is missing or duplicated).
fn assert_tables_equal_offline(lake: &Path, run_id: &str) {
    let want = offline_tables(run_id);
    assert!(want.contains_key("alltoallv_patterns"));
    assert!(want.contains_key("alltoallv_stats"));
    for (table, w) in &want {
        let got = lake_table(lake, table, run_id)
            .unwrap_or_else(|| panic!("{table}: no rows of run {run_id} in the lake"));
        assert_eq!(got.num_rows(), w.num_rows(), "{table} rows");
        assert!(w.num_rows() > 0, "{table}");
        for (i, f) in w.schema().fields().iter().enumerate() {
            assert_eq!(
                got.column(i).as_ref(),
                w.column(i).as_ref(),
                "{table}.{} differs from the offline analysis",
                f.name()
            );
        }
    }
}

fn jobs_of<'a>(d: &'a pb::RunDetail, kind: &str) -> Vec<&'a pb::Job> {
    d.jobs.iter().filter(|j| j.kind == kind).collect()
}

fn job_state(j: &pb::Job) -> pb::JobState {
    pb::JobState::try_from(j.state).unwrap()
}

fn lease_req(kinds: &[&str]) -> pb::LeaseJobRequest {
    pb::LeaseJobRequest {
        protocol_version: benchlake_proto::PROTOCOL_VERSION as i32,
        worker: "ghost".into(),
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        wait_ms: 0,
    }
}

fn planner_only() -> benchlake_worker::Executors {
    let mut e = benchlake_worker::Executors::default();
    e.add(benchlake_worker::analyze::AnalyzePlan);
    e
}

async fn analyze(c: &Cluster, run_id: &str) -> pb::AnalyzeRunResponse {
    c.runs()
        .analyze_run(pb::AnalyzeRunRequest {
            run_id: run_id.into(),
            analysis: "counts".into(),
            options: [("max_part_bytes".to_string(), "1".to_string())]
                .into_iter()
                .collect(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Line multisets (the Go tools print map-derived lines in random order).
fn lines(text: &str) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        *m.entry(l).or_default() += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_analysis_fans_out_through_two_workers() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent_with_catalog("a1", &a2av_catalog()).await;
    c.add_worker("w1", None);
    c.add_worker("w2", None);

    // 1. The run: ingest, then the automatic analysis (one part per lead rank).
    let run = c.submit("a2av", &[], 1).await.unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    assert_eq!(jobs_of(&d, "ingest").len(), 1);
    assert_eq!(jobs_of(&d, "analyze_plan").len(), 1);
    assert_eq!(
        jobs_of(&d, "analyze_part").len(),
        3,
        "one part per lead rank"
    );
    assert_eq!(jobs_of(&d, "analyze_merge").len(), 1);
    let lake = c.lake_dir();
    assert_eq!(table_rows(&lake, "alltoallv_calls", Some(&run.run_id)), 19);
    assert_tables_equal_offline(&lake, &run.run_id);
    let plan = jobs_of(&d, "analyze_plan")[0].job_id.clone();
    let reports = lake.join(format!("reports/{}/counts/{plan}", run.run_id));
    assert!(reports.join("patterns-job0-rank0.md").is_file());

    // 2. AnalyzeRun with one block per part; only a planner runs at first.
    c.stop_workers();
    c.add_worker_with("planner", planner_only());
    let ar = analyze(&c, &run.run_id).await;
    let d = c
        .wait_run(&ar.run_id, 60, |d| !jobs_of(d, "analyze_part").is_empty())
        .await;
    let parts = jobs_of(&d, "analyze_part").len();
    assert!(parts >= 3, "{parts} parts");
    let merge = jobs_of(&d, "analyze_merge")[0].clone();
    assert_eq!(job_state(&merge), pb::JobState::Queued);
    c.stop_workers();

    // A ghost worker leases one part and goes silent; the merge is not leasable.
    let mut ghost = c.workers_client(None);
    let held = ghost
        .lease_job(lease_req(&["analyze_part"]))
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert!(
        ghost
            .lease_job(lease_req(&["analyze_merge"]))
            .await
            .unwrap()
            .into_inner()
            .job
            .is_none(),
        "the merge must wait for its parts"
    );
    c.add_worker("w3", None);
    c.add_worker("w4", None);
    let d = c
        .wait_run(&ar.run_id, 60, |d| {
            jobs_of(d, "analyze_part")
                .iter()
                .filter(|j| job_state(j) == pb::JobState::Done)
                .count()
                == parts - 1
        })
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let d2 = c.detail(&ar.run_id).await;
    assert_eq!(
        job_state(jobs_of(&d2, "analyze_merge")[0]),
        pb::JobState::Queued,
        "merge ran before all parts ended: {d:#?}"
    );
    assert_eq!(table_rows(&lake, "alltoallv_patterns", Some(&ar.run_id)), 0);
    // The ghost died mid-write: a torn part result at its key.
    let spec: serde_json::Value = serde_json::from_str(&held.spec_json).unwrap();
    let key = benchlake_worker::analyze::part_key(
        &ar.run_id,
        spec["analysis"].as_str().unwrap(),
        spec["index"].as_u64().unwrap() as usize,
    )
    .unwrap();
    std::fs::write(lake.join(&key), b"{\"job\": 0, \"lea").unwrap();
    c.advance(10_001);
    assert_eq!(c.tick().expired_jobs, 1);
    let d = c.wait_settled(&ar.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
    let retried = d.jobs.iter().find(|j| j.job_id == held.job_id).unwrap();
    assert_eq!(retried.attempt, 2);
    assert_eq!(jobs_of(&d, "analyze_merge")[0].attempt, 1);
    assert_tables_equal_offline(&lake, &ar.run_id);
    let late = ghost
        .complete_job(pb::CompleteJobRequest {
            job_id: held.job_id.clone(),
            lease_id: held.lease_id.clone(),
            files: vec![],
            result_json: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(late.code(), tonic::Code::Aborted);

    // 3. A part that fails: the merge fails naming it, and writes no rows.
    c.stop_workers();
    c.add_worker_with("planner2", planner_only());
    let bad = analyze(&c, &run.run_id).await;
    c.wait_run(&bad.run_id, 60, |d| !jobs_of(d, "analyze_part").is_empty())
        .await;
    c.stop_workers();
    let victim = ghost
        .lease_job(lease_req(&["analyze_part"]))
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    ghost
        .fail_job(pb::FailJobRequest {
            job_id: victim.job_id.clone(),
            lease_id: victim.lease_id.clone(),
            error: "injected: disk on fire".into(),
            retryable: false,
        })
        .await
        .unwrap();
    c.add_worker("w5", None);
    let d = c.wait_settled(&bad.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Failed, "{d:#?}");
    let m = jobs_of(&d, "analyze_merge")[0];
    assert_eq!(job_state(m), pb::JobState::Failed);
    assert!(
        m.error.contains(&victim.job_id) && m.error.contains("injected: disk on fire"),
        "{}",
        m.error
    );
    assert_eq!(
        table_rows(&lake, "alltoallv_patterns", Some(&bad.run_id)),
        0
    );

    // 4. The CLI: `benchlake analyze counts RUN_ID --out DIR` through the cluster.
    let out = c.dir.path().join("cli-reports");
    let (addr, rid, o) = (c.addr.clone(), run.run_id.clone(), out.clone());
    let res = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin())
            .args([
                "analyze",
                "counts",
                &rid,
                "--max-part-bytes",
                "1",
                "--coordinator",
                &addr,
            ])
            .arg("--out")
            .arg(&o)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        res.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr)
    );
    let reference = case().join("go_reference/srcountsanalyzer");
    let mut compared = 0;
    for e in std::fs::read_dir(&reference).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let want = std::fs::read_to_string(&p).unwrap();
        let got = std::fs::read_to_string(out.join(&name))
            .unwrap_or_else(|e| panic!("{name} not downloaded: {e}"));
        assert_eq!(
            lines(&got),
            lines(&want),
            "{name} differs from the Go reference"
        );
        compared += 1;
    }
    assert_eq!(compared, 9);
    // Heat maps came along too.
    assert!(out.join("alltoallv_heat-map.rank0-send.md").is_file());
}
