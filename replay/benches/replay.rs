//! Replay throughput on the synthetic 256-rank halo trace (≈1.8 M records, the
//! reference's `synth.py 256 1000`), generated into a temporary directory.
//! Prints records/s on one core and the peak resident memory (VmHWM).
//! Run: `cargo bench -p benchlake-replay --bench replay` (env `HALO_RANKS`, `HALO_ITERS`).
use std::collections::BTreeMap;
use std::time::Instant;

use benchlake_replay::synth::Halo;

fn vm_hwm_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn env_u32(k: &str, d: u32) -> u32 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn main() {
    let ranks = env_u32("HALO_RANKS", 256);
    let iters = env_u32("HALO_ITERS", 1000);
    let dir = std::env::temp_dir().join(format!("benchlake-replay-bench-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return;
    }
    let path = dir.join(format!("halo1d_P{ranks}_I{iters}.dim"));
    let halo = Halo::new(ranks, iters);
    let t0 = Instant::now();
    let records = match halo.write_dim(&path) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("generating the trace failed: {e}");
            return;
        }
    };
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "generated {} ({records} records, {:.1} MB) in {:.2} s",
        path.display(),
        size as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    let hwm_before = vm_hwm_kb().unwrap_or(0);
    let mut best = f64::INFINITY;
    for run in 0..3 {
        let t = Instant::now();
        match benchlake_replay::run_replay(
            benchlake_replay::models::DIMEMAS.name,
            &path,
            &BTreeMap::new(),
        ) {
            Ok(r) => {
                let s = t.elapsed().as_secs_f64();
                best = best.min(s);
                println!(
                    "run {run}: dimemas replay of {} records in {s:.3} s = {:.2} M records/s (predicted {:.9} s)",
                    r.records,
                    r.records as f64 / s / 1e6,
                    r.predicted_time_s
                );
            }
            Err(e) => {
                eprintln!("replay failed: {e}");
                break;
            }
        }
    }
    println!(
        "best: {:.2} M records/s on one core; peak RSS {} kB (before replay {hwm_before} kB)",
        records as f64 / best / 1e6,
        vm_hwm_kb().unwrap_or(0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
