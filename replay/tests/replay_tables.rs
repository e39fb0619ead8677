//! The replay tables: schemas are the catalog's, values come from the replay.
use std::collections::BTreeMap;

use arrow::array::{Array, Float64Array, Int32Array, Int64Array, StringArray};
use benchlake_replay::{ReplayMeta, replay_tables, run_replay};

#[test]
fn ring_replay_tables() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay/dimemas"
    );
    let mut params = BTreeMap::new();
    params.insert("config".to_string(), format!("{dir}/configs/c1_base.cfg"));
    let trace = std::path::PathBuf::from(format!("{dir}/traces/ring_np4.dim"));
    let r = run_replay("dimemas", &trace, &params).expect("replay");
    let mut point = BTreeMap::new();
    point.insert("latency".to_string(), "5e-6".to_string());
    let meta = ReplayMeta {
        run_id: "run1",
        replay_id: "rp1",
        trace_source: "ring_np4.dim",
        point: &point,
        engine_wall_s: 0.5,
    };
    let tables = replay_tables(&r, &meta).expect("tables");
    let names: Vec<&str> = tables.iter().map(|t| t.table.as_str()).collect();
    assert_eq!(
        names,
        [
            "replays",
            "replay_ranks",
            "replay_functions",
            "replay_adapters",
            "replay_transfers"
        ]
    );
    for t in &tables {
        for b in &t.batches {
            benchlake_core::lake::check_schema(&t.table, &b.schema()).expect("catalog schema");
        }
    }
    let replays = &tables[0].batches[0];
    assert_eq!(replays.num_rows(), 1);
    let pred = replays.column_by_name("predicted_time_s").and_then(|c| {
        c.as_any()
            .downcast_ref::<Float64Array>()
            .map(|a| a.value(0))
    });
    assert!((pred.expect("pred") - 0.030798862).abs() < 2e-9);
    let point_json = replays.column_by_name("point").and_then(|c| {
        c.as_any()
            .downcast_ref::<StringArray>()
            .map(|a| a.value(0).to_string())
    });
    assert_eq!(point_json.as_deref(), Some("{\"latency\":\"5e-6\"}"));
    let records = replays
        .column_by_name("records")
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>().map(|a| a.value(0)));
    assert_eq!(records, Some(332));
    let ranks = &tables[1].batches[0];
    assert_eq!(ranks.num_rows(), 4);
    let comm = ranks.column_by_name("communication_s").and_then(|c| {
        c.as_any()
            .downcast_ref::<Float64Array>()
            .map(|a| a.value(2))
    });
    assert!((comm.expect("comm") - 0.004409385).abs() < 2e-9);
    let tr = &tables[4].batches[0];
    assert_eq!(tr.num_rows(), 4);
    let recv = tr
        .column_by_name("receiver")
        .and_then(|c| c.as_any().downcast_ref::<Int32Array>().cloned())
        .expect("recv");
    let send = tr
        .column_by_name("sender")
        .and_then(|c| c.as_any().downcast_ref::<Int32Array>().cloned())
        .expect("send");
    let bytes = tr
        .column_by_name("bytes")
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
        .expect("bytes");
    for i in 0..4 {
        assert_eq!(
            (recv.value(i) - send.value(i)).rem_euclid(4),
            1,
            "ring neighbours"
        );
        assert_eq!(bytes.value(i), 20 * 65536);
    }
    assert!(tables[2].rows() >= 12, "Send, Recv and Barrier for 4 ranks");
    assert_eq!(tables[3].rows(), 0);
    assert_eq!(ranks.column_by_name("idle_s").map(|c| c.len()), Some(4));
}

#[test]
fn dimemas_timeline_exports_as_chrome_trace() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay/dimemas"
    );
    let mut params = BTreeMap::new();
    params.insert("timeline".to_string(), "1".to_string());
    let trace = std::path::PathBuf::from(format!("{dir}/traces/ring_np4.dim"));
    let r = run_replay("dimemas", &trace, &params).expect("replay");
    // 42 bursts per rank, plus latencies, waits and the barrier.
    assert!(r.timeline.iter().filter(|e| e.name == "compute").count() == 4 * 42);
    assert!(r.timeline.iter().any(|e| e.name == "MPI_Barrier"));
    let json: serde_json::Value =
        serde_json::from_str(&benchlake_replay::bandela::chrome_trace_json(&r))
            .expect("valid json");
    let events = json["traceEvents"].as_array().expect("events");
    assert_eq!(events.len(), 4 + r.timeline.len());
    let last_end = r.timeline.iter().map(|e| e.end_s).fold(0.0, f64::max);
    assert!((last_end - r.predicted_time_s).abs() < 1e-12);
    // The summary prints every rank.
    let s = benchlake_replay::bandela::summary_text(&r);
    assert_eq!(s.matches("Total  Time").count(), 4);
}

#[test]
fn dimemas_timeline_exports_as_paraver() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay/dimemas"
    );
    let mut params = BTreeMap::new();
    params.insert("timeline".to_string(), "1".to_string());
    let trace = std::path::PathBuf::from(format!("{dir}/traces/bcast_np4.dim"));
    let r = run_replay("dimemas", &trace, &params).expect("replay");
    let prv = benchlake_replay::bandela::paraver_prv(&r);
    let mut lines = prv.lines();
    assert_eq!(
        lines.next(),
        Some("#Paraver (01/01/70 at 00:00):58011330_ns:4(1,1,1,1):1:4(1:1,1:2,1:3,1:4)")
    );
    let states: Vec<Vec<u64>> = lines
        .map(|l| l.split(':').map(|f| f.parse().expect("number")).collect())
        .collect();
    assert_eq!(states.len(), r.timeline.len());
    assert!(
        states
            .iter()
            .all(|f| f.len() == 8 && f[0] == 1 && f[5] <= f[6])
    );
    // 21 collectives per rank are group communication (state 13).
    assert_eq!(states.iter().filter(|f| f[7] == 13).count(), 4 * 21);
}
