//! Every ingest kind through `benchlake_formats::ingest`, as `benchlake
//! ingest` runs it (the readers and the checks made after parsing): the first
//! byte picks the kind, the rest is the file. Never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

/// (kind, file name the kind recognises).
const KINDS: &[(&str, &str)] = &[
    ("counts", "send-counters.job0.rank0.txt"),
    ("counts", "alltoallv_execution_times.rank0_comm0_job0.md"),
    ("hostinfo", "host.json"),
    ("ior", "summary.json"),
    ("mdtest", "human.txt"),
    ("pio", "pio.json"),
    ("dimemas", "trace.dim"),
    ("bandela", "bandela.0.txt"),
    ("linktest", "pingpong_results_bin.sion"),
    ("osu", "osu_latency.txt"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&k, body)) = data.split_first() else {
        return;
    };
    let (kind, name) = KINDS[k as usize % KINDS.len()];
    let Ok(dir) = tempfile::tempdir() else { return };
    let p = dir.path().join(name);
    if std::fs::write(&p, body).is_err() {
        return;
    }
    let ctx = benchlake_formats::IngestContext {
        run_id: "fuzz".into(),
        date: "2026-11-22".into(),
    };
    let _ = benchlake_formats::ingest(kind, &[benchlake_formats::InputFile::from_path(&p)], &ctx);
});
