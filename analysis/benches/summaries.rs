//! `linktest_host_summary` speed: a synthetic LinkTest run of
//! `SUMMARY_BENCH_RANKS` (1,024) ranks, 48 ranks per host and one, turned into
//! its tables and encoded as the ingest encodes them; the summary derived
//! from the encoded tables (read back a batch at a time, as the worker's
//! ingest job and `benchlake ingest` do) and from the batches. Best of 5,
//! one thread.
//!
//! Run: `cargo bench -p benchlake-analysis --bench summaries`.
use std::time::Instant;

use benchlake_analysis::summaries::derive;
use benchlake_core::lake::EncodedTable;

fn main() {
    let n: usize = std::env::var("SUMMARY_BENCH_RANKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    for rph in [48, 1] {
        let run = benchlake_formats::linktest::synth::synthetic_run(n, rph, 0);
        let tables = benchlake_formats::linktest::into_run_tables(run, "R", "raw/R/T/f.sion")
            .expect("tables");
        let encoded: Vec<EncodedTable> = tables
            .iter()
            .map(|t| EncodedTable::encode(t, "2026-11-22").expect("encode"))
            .collect();
        let params = Default::default();
        let (mut from_files, mut from_batches, mut rows) = (f64::INFINITY, f64::INFINITY, 0);
        for _ in 0..5 {
            let t = Instant::now();
            let out = derive("linktest", "R", &encoded, &[], &params).expect("derive");
            from_files = from_files.min(t.elapsed().as_secs_f64());
            rows = out.iter().map(|o| o.rows()).sum();
            let t = Instant::now();
            let out = derive("linktest", "R", &[], &tables, &params).expect("derive");
            from_batches = from_batches.min(t.elapsed().as_secs_f64());
            assert_eq!(rows, out.iter().map(|o| o.rows()).sum::<usize>());
        }
        println!(
            "linktest_host_summary, {n} ranks, {rph} per host ({} pairs): {rows} rows; from the encoded tables {:.3} s, from the batches {:.3} s (best of 5)",
            n * (n - 1),
            from_files,
            from_batches
        );
    }
}
