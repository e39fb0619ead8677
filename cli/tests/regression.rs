//! REGRESSION end to end (docs/io.md, "Regressions"): a real coordinator,
//! agent and worker run a pio schedule; its history holds 12 earlier nights
//! at 4× this machine's bandwidth (written into the lake as the checks job
//! reads them: `runs` rows of the schedule and their `io_results`), so the
//! schedule's real runs are a step down. The learned limits are loosened
//! (floor 90 %) so no bound is crossed: the third real run is REGRESSION,
//! since the first real run, through GetRun and the `checks` table.
mod common;

use std::sync::Arc;

use arrow::array::TimestampMicrosecondArray;
use arrow::array::{Array, ArrayRef, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use benchlake_core::ids::new_id_at;
use benchlake_core::lake::Lake;
use benchlake_core::layout;
use benchlake_proto::v1 as pb;
use common::*;

const DAY_MS: i64 = 86_400_000;

async fn put(lake: &Lake, table: &str, date: &str, run: &str, b: &RecordBatch, at_ms: i64) {
    let key = layout::table_key(table, date, run, &new_id_at(at_ms), "").unwrap();
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, b.schema(), None).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
    lake.put(&key, buf.into()).await.unwrap();
}

/// An earlier succeeded run of `schedule` on the night `at_ms` whose two
/// write iterations average `bw` MiB/s, with a spread of 0.8: pio on a busy
/// test machine varies that much (0.74 seen), and a run whose spread is far
/// above its history is disturbed, never a regression.
async fn put_night(lake: &Lake, schedule: &str, at_ms: i64, bw: f64) -> String {
    let run = new_id_at(at_ms);
    let date = chrono::DateTime::from_timestamp_millis(at_ms)
        .unwrap()
        .format("%Y-%m-%d")
        .to_string();
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let at = || -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from(vec![at_ms * 1000]).with_timezone("UTC"))
    };
    let runs = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("run_id", DataType::Utf8, false),
            Field::new("schedule_id", DataType::Utf8, true),
            Field::new("status", DataType::Utf8, false),
            Field::new("submitted_at", ts.clone(), false),
            Field::new("logical_at", ts, true),
        ])),
        vec![
            Arc::new(StringArray::from(vec![run.as_str()])),
            Arc::new(StringArray::from(vec![schedule])),
            Arc::new(StringArray::from(vec!["SUCCEEDED"])),
            at(),
            at(),
        ],
    )
    .unwrap();
    put(lake, "runs", &date, &run, &runs, at_ms).await;
    let io = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("operation", DataType::Utf8, false),
            Field::new("bw_mib_s", DataType::Float64, false),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["write", "write"])),
            Arc::new(Float64Array::from(vec![bw * 0.2, bw * 1.8])),
        ],
    )
    .unwrap();
    put(lake, "io_results", &date, &run, &io, at_ms).await;
    run
}

fn check<'a>(d: &'a pb::RunDetail, name: &str) -> &'a pb::RunCheck {
    d.checks
        .iter()
        .find(|c| c.check == name && c.node.is_empty())
        .unwrap_or_else(|| panic!("no {name} in {:#?}", d.checks))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schedule_that_steps_down_regresses_since_its_first_slow_run() {
    let mut c = Cluster::start(Default::default()).await;
    // The site's catalog declares the floors it loosens (the shipped pio
    // entry has the bounds, the history and the change-point settings).
    let anchor = "description = \"check: previous runs needed before relative verdicts; fewer is NO_REFERENCE (default 5)\"\n";
    let floors = [
        "check_io_write_bw_mib_s_floor",
        "check_io_write_bw_min_mib_s_floor",
    ]
    .map(|n| format!("[[benchmark.param]]\nname = \"{n}\"\ntype = \"float\"\noptional = true\n"))
    .concat();
    let builtin = include_str!("../../agent/src/builtin.toml")
        .replace("{self_exe}", &bin())
        // The first is pio's (the netprobe entry has the same line).
        .replacen(anchor, &format!("{anchor}{floors}"), 1);
    assert!(builtin.contains("check_io_write_bw_min_mib_s_floor"));
    c.add_agent_with("io1", |cfg| {
        cfg.catalog = benchlake_core::bench::Catalog::from_toml(&builtin).unwrap();
    })
    .await;
    c.add_worker("w1", None);
    let params = [
        ("np", "1"),
        ("block_size", "256k"),
        ("transfer_size", "64k"),
        ("iterations", "2"),
        ("fsync", "false"),
        ("read_cache", "none"),
        // No learned limit is crossed by a 75 % loss: only the change point
        // can tell.
        ("check_io_write_bw_mib_s_floor", "0.9"),
        ("check_io_write_bw_min_mib_s_floor", "0.9"),
        ("check_changepoint_window", "30"),
    ];
    let mut s = c.schedules();
    let sched = s
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(pb::Schedule {
                name: "nightly-pio".into(),
                cron: "0 3 * * *".into(),
                time_zone: "UTC".into(),
                allow_overlap: true,
                spec: Some(bench_spec("pio", &params)),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut trigger = async || {
        let run = s
            .trigger_schedule(pb::TriggerScheduleRequest {
                schedule_id: sched.schedule_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let d = c.wait_settled(&run.run_id, 120).await;
        assert_eq!(state(&d), pb::RunState::Succeeded, "{d:#?}");
        d
    };
    let d1 = trigger().await;
    let r1 = d1.run.as_ref().unwrap().run_id.clone();
    let bw = check(&d1, "io.write_bw_mib_s.vs_median")
        .value
        .expect("a write bandwidth");
    assert_eq!(
        check(&d1, "io.write_bw_mib_s.vs_median").status,
        "NO_REFERENCE"
    );

    // 12 earlier nights of the schedule at 4× that (older run ids).
    let lake = Lake::local(&c.lake_dir()).unwrap();
    let wobble = [0.3, -0.8, 1.0, -0.2, 0.6, -1.0, 0.1];
    let now = c.clock_now();
    for (i, w) in (0..12).zip(wobble.iter().cycle()) {
        put_night(
            &lake,
            &sched.schedule_id,
            now - (20 - i) * DAY_MS,
            4.0 * bw * (1.0 + 0.01 * w),
        )
        .await;
    }

    let d2 = trigger().await;
    let d3 = trigger().await;
    let r3 = d3.run.as_ref().unwrap().run_id.clone();
    let _ = d2;
    let row = check(&d3, "io.write_bw_mib_s.vs_median");
    assert_eq!(row.status, "REGRESSION", "{row:#?} {:#?}", d3.checks);
    assert_eq!(row.since_run.as_deref(), Some(r1.as_str()), "{row:#?}");
    let step = row.step.expect("a step");
    assert!((-0.95..-0.5).contains(&step), "{row:#?}");
    assert!(row.confidence.is_some_and(|c| c > 0.99), "{row:#?}");
    assert!(
        row.message
            .starts_with(&format!("regression since run {r1} of ")),
        "{}",
        row.message
    );
    // The night is r1's logical night (its `runs` row: logical_at, else submitted_at).
    let night = {
        let b = table_batches(&c.lake_dir(), "runs", Some(&r1));
        let col = b[0].column_by_name("logical_at").unwrap();
        let col =
            arrow::compute::cast(col, &DataType::Timestamp(TimeUnit::Microsecond, None)).unwrap();
        let t = col
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        chrono::DateTime::from_timestamp_micros(t.value(0))
            .unwrap()
            .format("%Y-%m-%d")
            .to_string()
    };
    assert_eq!(row.since_date.as_deref(), Some(night.as_str()));
    assert_eq!(
        d3.run.as_ref().unwrap().verdict,
        "REGRESSION",
        "{:#?}",
        d3.checks
    );

    // `run show` prints the change point under the row; `--json` has its fields.
    let out = std::process::Command::new(bin())
        .args(["run", "show", &r3, "--coordinator", &c.addr])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verdict    REGRESSION"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let i = lines
        .iter()
        .position(|l| {
            l.trim_start()
                .starts_with("REGRESSION io.write_bw_mib_s.vs_median")
        })
        .unwrap_or_else(|| panic!("{text}"));
    let next = lines.get(i + 1).copied().unwrap_or_default().trim();
    assert!(
        next.starts_with(&format!("since run {r1} of {night}: -")) && next.contains("(confidence "),
        "{text}"
    );
    let out = std::process::Command::new(bin())
        .args(["run", "show", &r3, "--json", "--coordinator", &c.addr])
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "io.write_bw_mib_s.vs_median")
        .unwrap();
    assert_eq!(row["since_run"], r1.as_str(), "{row}");
    assert_eq!(row["since_date"], night.as_str(), "{row}");

    // The `checks` table has the same in its new columns.
    let b = table_batches(&c.lake_dir(), "checks", Some(&r3));
    let mut found = false;
    for b in &b {
        let name = b.column_by_name("check").unwrap();
        let name = name.as_any().downcast_ref::<StringArray>().unwrap();
        let since = b.column_by_name("since_run").unwrap();
        let since = since.as_any().downcast_ref::<StringArray>().unwrap();
        for i in 0..b.num_rows() {
            if name.value(i) == "io.write_bw_mib_s.vs_median" {
                assert_eq!(since.value(i), r1);
                found = true;
            } else if name.value(i).starts_with("io.read") {
                assert!(since.is_null(i), "no change point for the read figures");
            }
        }
    }
    assert!(found);
    c.shutdown();
}
