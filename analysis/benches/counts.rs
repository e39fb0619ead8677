//! Parse + full analysis of a synthetic compact pair (1024 ranks, 5000 calls, 50
//! signatures, made by ../shared/data/counts/gen_compact.py into
//! `$COUNTS_BENCH_DIR`, default /tmp/counts-synth). Prints wall time and peak
//! memory (VmHWM); the Go srcountsanalyzer needs 9.95 s and 1.77 GB on it.
use std::path::PathBuf;
use std::time::Instant;

use benchlake_analysis::counts::{Options, fanout, report};

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of this process (/proc/self/stat, 100 ticks/s).
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let u: f64 = f.get(11)?.parse().ok()?;
            let k: f64 = f.get(12)?.parse().ok()?;
            Some((u + k) / 100.0)
        })
        .unwrap_or(0.0)
}

fn main() {
    let dir = PathBuf::from(
        std::env::var("COUNTS_BENCH_DIR").unwrap_or_else(|_| "/tmp/counts-synth".into()),
    );
    let files: Vec<PathBuf> = [
        "send-counters.job0.rank0.txt",
        "recv-counters.job0.rank0.txt",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    if !files.iter().all(|f| f.exists()) {
        eprintln!(
            "missing {}: run `python3 gen_compact.py {} 1024 5000 50 30 8 1` first",
            files[0].display(),
            dir.display()
        );
        return;
    }
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let opts = Options::default();
    let t = Instant::now();
    let c0 = cpu_s();
    let a = match fanout::analyze_files(&files, &opts) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("analysis failed: {e}");
            std::process::exit(1);
        }
    };
    let parse_analyze = t.elapsed().as_secs_f64();
    let cpu = cpu_s() - c0;
    let hwm_analysis = vm_hwm_kb();
    let t = Instant::now();
    let l = &a.leads[0];
    let text = report::patterns(l).len()
        + report::summary(l).len()
        + report::stats(l, opts.size_threshold).len();
    let reports = t.elapsed().as_secs_f64();
    println!("input: {:.1} MB (send + recv)", bytes as f64 / 1e6);
    println!(
        "calls: {}, patterns: {}, heat-map cells: {}",
        l.stats.loaded_calls,
        l.patterns.len(),
        l.heat.values().map(|v| v.len()).sum::<usize>()
    );
    println!(
        "parse + full analysis: CPU {cpu:.2} s (user+sys, one thread), wall {parse_analyze:.3} s ({:.0} MB/s), peak RSS {:.1} MB",
        bytes as f64 / 1e6 / parse_analyze,
        hwm_analysis as f64 / 1024.0
    );
    println!(
        "patterns/summary/stats text: {reports:.3} s ({} bytes)",
        text
    );
    println!(
        "vs Go srcountsanalyzer (9.95 s wall, 4.8 s user, 1.77 GB): {:.1}x less CPU than its user time, {:.1}x less memory",
        4.8 / cpu.max(0.01),
        1.77e6 / hwm_analysis as f64
    );
    // Fan-out at scale: cut the pair into ~16 MB parts, run them, merge, and
    // check the result is the whole-input analysis.
    let split = Options {
        max_part_bytes: 16 << 20,
        ..Options::default()
    };
    let t = Instant::now();
    let specs = match fanout::plan(&files, &split) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("plan failed: {e}");
            std::process::exit(1);
        }
    };
    let mut results = Vec::new();
    for s in &specs {
        match fanout::analyze_part(s) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!("part failed: {e}");
                std::process::exit(1);
            }
        }
    }
    let merged = fanout::merge(results);
    let m = &merged.leads[0];
    let same = m.patterns == l.patterns
        && m.stats == l.stats
        && m.heat == l.heat
        && m.rank_bytes == l.rank_bytes;
    println!(
        "split into {} parts + merge: {:.3} s wall, identical to the whole: {same}",
        specs.len(),
        t.elapsed().as_secs_f64()
    );
    if !same {
        std::process::exit(1);
    }
    println!("VmHWM at end: {} kB", vm_hwm_kb());
}
