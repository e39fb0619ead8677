//! The checks job over a real (local) lake: a schedule's nightly pio
//! bandwidth steps down 15 % and the job finds a REGRESSION on the third
//! night of the step, naming the run the step started with and its logical
//! night; per node the same for a node's own bandwidth.
use std::sync::Arc;

use arrow::array::{Array, TimestampMicrosecondArray};
use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use benchlake_core::ids::new_id_at;
use benchlake_core::jobs::{CHECKS_JOB, ChecksSpec};
use benchlake_core::lake::Lake;
use benchlake_core::layout;

use super::*;
use crate::JobContext;

const SCHEDULE: &str = "01KSCHED0000000000000000AA";
/// 2026-11-01T03:00:00Z in milliseconds.
const NIGHT0_MS: i64 = 1_793_502_000_000;
const DAY_MS: i64 = 86_400_000;

struct World {
    _dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    lake: Lake,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lake = Lake::local(&dir.path().join("lake")).unwrap();
    World {
        _dir: dir,
        rt,
        lake,
    }
}

fn put(w: &World, table: &str, date: &str, run: &str, b: RecordBatch) {
    let key = layout::table_key(table, date, run, &new_id_at(NIGHT0_MS), "").unwrap();
    let mut buf = Vec::new();
    let mut wr = parquet::arrow::ArrowWriter::try_new(&mut buf, b.schema(), None).unwrap();
    wr.write(&b).unwrap();
    wr.close().unwrap();
    w.rt.block_on(w.lake.put(&key, bytes::Bytes::from(buf)))
        .unwrap();
}

/// A `runs` row of a succeeded run of the schedule whose logical night is
/// `night` (the object in the date partition it was submitted on).
fn put_run(w: &World, run: &str, night_ms: i64) -> String {
    let date = chrono::DateTime::from_timestamp_millis(night_ms)
        .unwrap()
        .format("%Y-%m-%d")
        .to_string();
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("run_id", DataType::Utf8, false),
        Field::new("schedule_id", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, false),
        Field::new("submitted_at", ts.clone(), false),
        Field::new("logical_at", ts, true),
    ]));
    let at = |ms: i64| -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from(vec![ms * 1000]).with_timezone("UTC"))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![run])),
        Arc::new(StringArray::from(vec![SCHEDULE])),
        Arc::new(StringArray::from(vec!["SUCCEEDED"])),
        // Submitted an hour after its logical night (e.g. a backfill).
        at(night_ms + 3_600_000),
        at(night_ms),
    ];
    put(
        w,
        "runs",
        &date,
        run,
        RecordBatch::try_new(schema, cols).unwrap(),
    );
    date
}

/// Two write iterations around `bw` MiB/s (spread 0.4 %).
fn put_io(w: &World, date: &str, run: &str, bw: f64) -> String {
    let schema = Arc::new(Schema::new(vec![
        Field::new("operation", DataType::Utf8, false),
        Field::new("bw_mib_s", DataType::Float64, false),
    ]));
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["write", "write"])),
            Arc::new(Float64Array::from(vec![bw * 0.996, bw * 1.004])),
        ],
    )
    .unwrap();
    let job = new_id_at(NIGHT0_MS + 1);
    let key = layout::table_key("io_results", date, run, &job, "").unwrap();
    let mut buf = Vec::new();
    let mut wr = parquet::arrow::ArrowWriter::try_new(&mut buf, b.schema(), None).unwrap();
    wr.write(&b).unwrap();
    wr.close().unwrap();
    w.rt.block_on(w.lake.put(&key, bytes::Bytes::from(buf)))
        .unwrap();
    job
}

/// `node_health` rows of a run: one node's own write bandwidth.
fn put_node(w: &World, date: &str, run: &str, node: &str, bw: f64) {
    let rows = vec![NodeRow {
        node: node.into(),
        check: "node.write_bw_of_median".into(),
        status: "PASS".into(),
        value: Some(bw),
        // Half the median node of a steady cluster (1000 MiB/s).
        reference: Some(500.0),
        unit: "MiB/s".into(),
        message: String::new(),
        regression: None,
    }];
    let b = node_checks::to_batch(run, "src", &rows).unwrap();
    put(w, "node_health", date, run, b);
}

fn ctx(w: &World, run: &str, date: &str, spec: &ChecksSpec) -> JobContext {
    JobContext {
        job_id: new_id_at(NIGHT0_MS + 2),
        run_id: run.into(),
        kind: CHECKS_JOB.into(),
        attempt: 1,
        spec_json: serde_json::to_string(spec).unwrap(),
        run_date: date.into(),
        lake: w.lake.clone(),
        scratch: std::env::temp_dir(),
        rt: w.rt.handle().clone(),
        cancel: Default::default(),
    }
}

/// The checks of a pio run of the schedule whose ingest job was `job`.
fn pio_spec(job: String) -> ChecksSpec {
    ChecksSpec {
        format: "pio".into(),
        ingest_job_id: job,
        source: "raw".into(),
        schedule_id: Some(SCHEDULE.into()),
        params: Default::default(),
        agent: "a1".into(),
        agent_hostname: None,
    }
}

/// Noise of about ±0.6 % that repeats every 7 nights.
fn wobble(i: usize) -> f64 {
    1.0 + 0.006 * [0.3, -0.8, 1.0, -0.2, 0.6, -1.0, 0.1][i % 7]
}

#[test]
fn a_step_down_of_the_schedule_is_a_regression_since_its_first_run() {
    let w = world();
    // 12 steady nights at 1000 MiB/s, then 850 from night 12 on; the
    // checks job runs for night 14 (the third night of the step).
    let mut runs = Vec::new();
    for i in 0..15 {
        let night = NIGHT0_MS + i as i64 * DAY_MS;
        let run = new_id_at(night + 3_600_000);
        let date = put_run(&w, &run, night);
        let level = if i >= 12 { 850.0 } else { 1000.0 };
        let job = put_io(&w, &date, &run, level * wobble(i));
        runs.push((run, date, job));
    }
    let (run, date, job) = runs.last().cloned().unwrap();
    let spec = pio_spec(job);
    let rows = check_rows(&ctx(&w, &run, &date, &spec), &spec).unwrap();
    let row = rows
        .iter()
        .find(|r| r.check == "io.write_bw_mib_s.vs_median")
        .unwrap();
    // The median of the last 20 runs is still 1000 and 850 is under its
    // limit (5 % floor: 950): FAIL, with the change point that explains it.
    assert_eq!(row.status, "FAIL", "{}", row.message);
    let reg = row.regression.as_ref().expect("a change point");
    assert_eq!(reg.since_run, runs[12].0);
    assert_eq!(reg.since_date, "2026-11-13");
    assert!((reg.step + 0.15).abs() < 0.01, "{reg:?}");
    assert!(reg.confidence > 0.99, "{reg:?}");

    // With a floor of 20 % the same night PASSes its learned limit and is a
    // REGRESSION: the step is found though no bound is crossed.
    let mut loose = spec.clone();
    loose
        .params
        .insert("check_io_write_bw_mib_s_floor".into(), "0.2".into());
    let rows = check_rows(&ctx(&w, &run, &date, &loose), &loose).unwrap();
    let row = rows
        .iter()
        .find(|r| r.check == "io.write_bw_mib_s.vs_median")
        .unwrap();
    assert_eq!(row.status, "REGRESSION", "{}", row.message);
    assert!(
        row.message.starts_with(&format!(
            "regression since run {} of 2026-11-13: -15.",
            runs[12].0
        )),
        "{}",
        row.message
    );
    // The columns of the written batch.
    let b = io_checks::to_batch(&run, "raw", &rows).unwrap();
    let i = rows
        .iter()
        .position(|r| r.check == "io.write_bw_mib_s.vs_median")
        .unwrap();
    let since = b
        .column_by_name("since_run")
        .and_then(|a| a.as_any().downcast_ref::<StringArray>().cloned())
        .unwrap();
    assert_eq!(since.value(i), runs[12].0);
    let step = b
        .column_by_name("step")
        .and_then(|a| a.as_any().downcast_ref::<Float64Array>().cloned())
        .unwrap();
    assert!((step.value(i) + 0.15).abs() < 0.01);
    // Rows without a change point have null columns.
    let j = rows
        .iter()
        .position(|r| r.check == "io.verify_errors" || r.regression.is_none())
        .unwrap();
    assert!(since.is_null(j));

    // Switched off: no change point, and the night PASSes.
    let mut off = loose.clone();
    off.params.insert("check_changepoint".into(), "off".into());
    let rows = check_rows(&ctx(&w, &run, &date, &off), &off).unwrap();
    assert!(rows.iter().all(|r| r.regression.is_none()));
    // A bad parameter is one ERROR row.
    let mut bad = loose;
    bad.params
        .insert("check_changepoint_window".into(), "x".into());
    let rows = check_rows(&ctx(&w, &run, &date, &bad), &bad).unwrap();
    assert_eq!(
        (rows.len(), rows[0].status.as_str(), rows[0].check.as_str()),
        (1, "ERROR", "checks.config")
    );
}

#[test]
fn a_node_whose_own_bandwidth_steps_down_regresses() {
    let w = world();
    let mut runs = Vec::new();
    for i in 0..14 {
        let night = NIGHT0_MS + i as i64 * DAY_MS;
        let run = new_id_at(night + 3_600_000);
        let date = put_run(&w, &run, night);
        if i < 13 {
            let level = if i >= 11 { 800.0 } else { 1000.0 };
            put_node(&w, &date, &run, "n2", level * wobble(i));
            put_node(&w, &date, &run, "n1", 1000.0 * wobble(i + 3));
        }
        runs.push((run, date));
    }
    let (run, date) = runs.last().cloned().unwrap();
    let spec = ChecksSpec {
        format: "pio".into(),
        ingest_job_id: new_id_at(NIGHT0_MS + 5),
        source: "raw".into(),
        schedule_id: Some(SCHEDULE.into()),
        params: Default::default(),
        agent: "a1".into(),
        agent_hostname: None,
    };
    let c = ctx(&w, &run, &date, &spec);
    let row = |node: &str, v: f64| NodeRow {
        node: node.into(),
        check: "node.write_bw_of_median".into(),
        status: "PASS".into(),
        value: Some(v),
        reference: Some(500.0),
        unit: "MiB/s".into(),
        message: "ok".into(),
        regression: None,
    };
    let rows = node_regressions(
        &c,
        &spec,
        vec![
            row("n2", 800.0 * wobble(13)),
            row("n1", 1000.0 * wobble(16)),
        ],
    )
    .unwrap();
    assert_eq!(rows[0].status, "REGRESSION", "{}", rows[0].message);
    let reg = rows[0].regression.as_ref().unwrap();
    assert_eq!(
        (reg.since_run.as_str(), reg.since_date.as_str()),
        (runs[11].0.as_str(), "2026-11-12")
    );
    assert_eq!(rows[1].status, "PASS", "{}", rows[1].message);
}

// Node identity (benchlake_core::node).
fn row(node: &str) -> NodeRow {
    NodeRow {
        node: node.into(),
        check: "node.slow_pair_fraction".into(),
        status: "PASS".into(),
        value: None,
        reference: None,
        unit: String::new(),
        message: String::new(),
        regression: None,
    }
}

fn spec(agent: &str, host: Option<&str>) -> ChecksSpec {
    ChecksSpec {
        format: "linktest".into(),
        ingest_job_id: "j".into(),
        source: String::new(),
        schedule_id: None,
        params: BTreeMap::new(),
        agent: agent.into(),
        agent_hostname: host.map(String::from),
    }
}

#[test]
fn rows_naming_the_agents_host_are_the_agents_node() {
    let mut rows = vec![row("vm"), row("n2"), row("other")];
    name_agent_host(&mut rows, &spec("a1", Some("vm")));
    let nodes: Vec<&str> = rows.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(nodes, ["a1", "n2", "other"]);
    // No host known, or an agent name that is no node name: unchanged.
    let mut rows = vec![row("vm")];
    name_agent_host(&mut rows, &spec("a1", None));
    name_agent_host(&mut rows, &spec("bad/name", Some("vm")));
    assert_eq!(rows[0].node, "vm");
}

/// `node_facts` of a hostinfo run: `(load_1m, cores)` per node.
fn put_facts(w: &World, date: &str, run: &str, facts: &[(f64, i64)]) {
    use arrow::array::Int64Array;
    let schema = Arc::new(Schema::new(vec![
        Field::new("run_id", DataType::Utf8, false),
        Field::new("cores", DataType::Int64, false),
        Field::new("load_1m", DataType::Float64, false),
    ]));
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec![run; facts.len()])),
            Arc::new(Int64Array::from_iter_values(facts.iter().map(|f| f.1))),
            Arc::new(Float64Array::from_iter_values(facts.iter().map(|f| f.0))),
        ],
    )
    .unwrap();
    put(w, "node_facts", date, run, b);
}

#[test]
fn a_dip_on_a_night_the_whole_machine_was_busy_is_inconclusive() {
    let w = world();
    // 14 steady nights at 1000 MiB/s, then one night at 700.
    let mut last = None;
    for i in 0..15 {
        let night = NIGHT0_MS + i as i64 * DAY_MS;
        let run = new_id_at(night + 3_600_000);
        let date = put_run(&w, &run, night);
        let level = if i == 14 { 700.0 } else { 1000.0 };
        let job = put_io(&w, &date, &run, level * wobble(i));
        last = Some((run, date, job));
    }
    let (run, date, job) = last.unwrap();
    let spec = pio_spec(job);
    let status = |w: &World| {
        let rows = check_rows(&ctx(w, &run, &date, &spec), &spec).unwrap();
        let r = rows
            .iter()
            .find(|r| r.check == "io.write_bw_mib_s.vs_median")
            .unwrap()
            .clone();
        (r.status, r.message)
    };
    // No hostinfo that night: FAIL.
    assert_eq!(status(&w).0, "FAIL");
    // A hostinfo run that night saw 2 of 8 nodes loaded: still FAIL.
    let quiet = new_id_at(NIGHT0_MS + 14 * DAY_MS + 60_000);
    let mut facts = vec![(0.1, 32); 8];
    facts[0].0 = 31.0;
    facts[1].0 = 20.0;
    put_facts(&w, &date, &quiet, &facts);
    assert_eq!(status(&w).0, "FAIL");
    // Another saw 6 of 8: INCONCLUSIVE, naming it.
    let busy = new_id_at(NIGHT0_MS + 14 * DAY_MS + 120_000);
    for f in facts.iter_mut().take(6) {
        f.0 = 24.0;
    }
    put_facts(&w, &date, &busy, &facts);
    let (st, msg) = status(&w);
    assert_eq!(st, "INCONCLUSIVE", "{msg}");
    assert!(
        msg.starts_with("the machine was busy that night: 6 of 8 nodes"),
        "{msg}"
    );
    assert!(msg.contains(&busy), "{msg}");
}

/// The `osu_results` of one osu_bw run at `bw` MB/s for 4 MiB messages, as
/// the `osu` ingest reads it; returns the ingest job.
fn put_osu_bw(w: &World, date: &str, run: &str, bw: f64) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("osu_bw.txt");
    std::fs::write(
        &p,
        format!(
            "# OSU MPI Bandwidth Test v7.3\n# Size      Bandwidth (MB/s)\n1 2.9\n4194304 {bw:.2}\n"
        ),
    )
    .unwrap();
    let ctx = benchlake_formats::IngestContext {
        run_id: run.into(),
        date: "2026-11-22".into(),
    };
    let out =
        benchlake_formats::ingest("osu", &[benchlake_formats::InputFile::from_path(&p)], &ctx)
            .unwrap();
    let job = new_id_at(NIGHT0_MS + 1);
    let key = layout::table_key(&out[0].table, date, run, &job, "").unwrap();
    let mut buf = Vec::new();
    let b = &out[0].batches[0];
    let mut wr = parquet::arrow::ArrowWriter::try_new(&mut buf, b.schema(), None).unwrap();
    wr.write(b).unwrap();
    wr.close().unwrap();
    w.rt.block_on(w.lake.put(&key, bytes::Bytes::from(buf)))
        .unwrap();
    job
}

#[test]
fn an_osu_bandwidth_halved_fails_against_the_schedules_history() {
    let w = world();
    let mut runs = Vec::new();
    for i in 0..9 {
        let night = NIGHT0_MS + i as i64 * DAY_MS;
        let run = new_id_at(night + 3_600_000);
        let date = put_run(&w, &run, night);
        let bw = if i == 8 { 6000.0 } else { 12000.0 * wobble(i) };
        let job = put_osu_bw(&w, &date, &run, bw);
        runs.push((run, date, job));
    }
    let (run, date, job) = runs.last().cloned().unwrap();
    let spec = ChecksSpec {
        format: "osu".into(),
        ..pio_spec(job)
    };
    let rows = check_rows(&ctx(&w, &run, &date, &spec), &spec).unwrap();
    let row = rows
        .iter()
        .find(|r| r.check == "osu.bw_mb_s.vs_median")
        .expect("the bandwidth's learned check");
    assert_eq!(row.status, "FAIL", "{}", row.message);
    assert_eq!(row.value, Some(6000.0));
    let reference = row.reference.unwrap();
    assert!((reference - 12000.0).abs() < 100.0, "{reference}");
    // osu_latency did not run: its rule is skipped, not an ERROR.
    assert!(rows.iter().all(|r| !r.check.starts_with("osu.latency")));
    assert!(rows.iter().all(|r| r.status != "ERROR"), "{rows:?}");
    // A site's bound: FAIL under 13,000 MB/s for the night before too.
    let (run, date, job) = runs[7].clone();
    let mut bound = ChecksSpec {
        format: "osu".into(),
        ..pio_spec(job)
    };
    bound
        .params
        .insert("check_osu_bw_mb_s".into(), "13000".into());
    let rows = check_rows(&ctx(&w, &run, &date, &bound), &bound).unwrap();
    let status = |c: &str| rows.iter().find(|r| r.check == c).map(|r| r.status.clone());
    assert_eq!(status("osu.bw_mb_s").as_deref(), Some("FAIL"));
    assert_eq!(status("osu.bw_mb_s.vs_median").as_deref(), Some("PASS"));
    // No node-level checks for OSU runs.
    assert!(
        node_rows(&ctx(&w, &run, &date, &bound), &bound)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn the_checks_follow_up_comes_from_the_kinds_descriptor() {
    let spec = |format: &str| IngestSpec {
        format: format.into(),
        keys: vec!["raw/R/T/f".into()],
        task_id: "T".into(),
        agent: "a1".into(),
        agent_hostname: None,
    };
    let info = |kind: Option<&str>| IngestRunInfo {
        kind: kind.map(String::from),
        ..Default::default()
    };
    for f in ["ior", "pio", "mdtest", "linktest", "hostinfo", "osu"] {
        let up = follow_up(&spec(f), &info(None), "J");
        assert_eq!(up.len(), 1, "{f}");
        assert_eq!(up[0].kind, CHECKS_JOB);
        assert_eq!(up[0].spec["format"], f);
        assert_eq!(up[0].spec["ingest_job_id"], "J");
    }
    for f in ["counts", "dimemas", "bandela", "nosuch"] {
        assert!(
            follow_up(&spec(f), &info(Some("io")), "J").is_empty(),
            "{f}"
        );
    }
    // Bandela traces get node checks in traced runs only.
    assert_eq!(
        follow_up(&spec("bandela"), &info(Some("traced")), "J").len(),
        1
    );
}

/// The catalog lint (`benchlake_core::bench::CHECK_FIGURES`, in core: agents
/// check their catalogs without the analyses) knows the figures the check
/// families' rules bound (a new kind's figures too), and no other.
#[test]
fn the_catalog_lint_knows_every_checked_figure() {
    let mut figures: Vec<String> = [
        IoCheckConfig::default(),
        linktest_checks::default_config(),
        osu_checks::default_config(),
    ]
    .iter()
    .flat_map(|c| c.rules.iter().map(|r| r.figure.replace('.', "_")))
    .collect();
    // Figures with rules that the lint does not accept as `check_<figure>`
    // (found when this test was written; whether a catalog may bound them
    // is a separate question).
    let unlinted = [
        "io_read_bw_task_p50_mib_s",
        "io_write_bw_task_p50_mib_s",
        "linktest_median_time_s",
    ];
    figures.retain(|f| !unlinted.contains(&f.as_str()));
    figures.sort();
    figures.dedup();
    let mut known: Vec<String> = benchlake_core::bench::CHECK_FIGURES
        .iter()
        .map(|f| f.to_string())
        .collect();
    known.sort();
    assert_eq!(figures, known);
    assert!(benchlake_core::bench::is_known_check(
        "check_osu_bw_mb_s_floor"
    ));
}

/// A merge between the job's listing of `runs` and its reads (a coordinator
/// compacting the month while the checks run): the history is read in the
/// same attempt, from where the runs are now, not failed for a retry.
#[test]
fn a_month_merged_after_the_listing_is_read_in_the_same_attempt() {
    let w = world();
    let mut runs = Vec::new();
    for i in 0..4 {
        let at = NIGHT0_MS + i * DAY_MS;
        let run = new_id_at(at);
        // As the record job writes it (the catalog's columns: a merge
        // checks them).
        let spec = benchlake_core::jobs::RecordSpec {
            run_id: run.clone(),
            schedule_id: Some(SCHEDULE.into()),
            benchmark: "pio".into(),
            kind: "io".into(),
            status: "SUCCEEDED".into(),
            params: Default::default(),
            submitted_at_ms: at + 3_600_000,
            started_at_ms: None,
            finished_at_ms: None,
            agents: vec!["a1".into()],
            error: None,
            raw_files: Vec::new(),
            scheduled_for_ms: Some(at),
        };
        let tables = crate::executors::record_tables(&spec, None).unwrap();
        let date = format!("2026-11-{:02}", i + 1);
        w.rt.block_on(
            w.lake
                .write_final(&tables[..1], &date, &run, &new_id_at(at + 1)),
        )
        .unwrap();
        runs.push(run);
    }
    let current = new_id_at(NIGHT0_MS + 10 * DAY_MS);
    let spec = pio_spec(new_id_at(NIGHT0_MS));
    let c = ctx(&w, &current, "2026-11-11", &spec);
    // The job lists `runs` (the parts of the four nights)...
    assert_eq!(runs_objects(&c).unwrap().len(), 4);
    // ... the month is merged and its parts deleted ...
    let merged =
        w.rt.block_on(w.lake.compact_month(
            "runs",
            "2026-11-01",
            &new_id_at(NIGHT0_MS + 11 * DAY_MS),
            u64::MAX,
            2,
            false,
        ))
        .unwrap();
    assert_eq!(merged.inputs, 4, "{merged:?}");
    // ... and every earlier run is still found, newest first.
    let mut seen = Vec::new();
    previous_runs(&c, SCHEDULE, |r| {
        seen.push(r.run_id.clone());
        Ok(true)
    })
    .unwrap();
    runs.reverse();
    assert_eq!(seen, runs);
}
