//! pio vs fio on the same I/O: sequential write + fsync of a fresh 1 GiB file
//! with 1 MiB transfers, then a cold sequential read of it (page cache of the
//! file dropped first: fio's `invalidate=1`, pio's `read_cache=fadvise`),
//! interleaved over ≥ 5 rounds because the disk is noisy (reference io.md §7).
//! Prints per-round figures, medians and the pio/fio ratio.
//!
//! `cargo bench -p benchlake-pio --bench fio_compare`
//! Environment: PIO_BENCH_DIR (default /tmp/pio-bench), PIO_BENCH_SIZE (1g),
//! PIO_BENCH_ROUNDS (5), PIO_BENCH_DIRECT=1 to add an O_DIRECT read pair,
//! PIO_BENCH_SETTLE_S (3): `sync` and a pause before each tool's run, so the
//! previous writer's flush (here: a virtual disk with host-side caching) does
//! not land on whoever runs second.
use std::path::Path;
use std::process::Command;

use benchlake_pio::params::{parse_cli, resolve};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn settle() {
    let s: u64 = std::env::var("PIO_BENCH_SETTLE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let _ = Command::new("sync").status();
    std::thread::sleep(std::time::Duration::from_secs(s));
}

fn pio(file: &Path, size: &str, cache: &str) -> (f64, f64) {
    settle();
    let args: Vec<String> = [
        format!("--filename={}", file.display()),
        format!("--block_size={size}"),
        "--transfer_size=1m".into(),
        "--fsync=1".into(),
        format!("--read_cache={cache}"),
        "--verify=1".into(),
    ]
    .into();
    let cfg = resolve(&parse_cli(&args).expect("args"), |_| None).expect("config");
    let r = benchlake_pio::run_single(&cfg).expect("pio run");
    assert_eq!(r.verification.status, "PASS");
    let bw = |op: &str| {
        r.phases
            .iter()
            .find(|p| p.operation == op)
            .map(|p| p.bw_mib_s)
            .unwrap_or(f64::NAN)
    };
    (bw("write"), bw("read"))
}

fn fio_json(args: &[String]) -> serde_json::Value {
    let out = Command::new("fio")
        .args(args)
        .arg("--output-format=json")
        .output()
        .expect("run fio (apt-get install -y fio)");
    assert!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("fio json")
}

fn fio_bw(v: &serde_json::Value, op: &str) -> f64 {
    v["jobs"][0][op]["bw_bytes"].as_f64().unwrap_or(f64::NAN) / 1048576.0
}

fn fio(file: &Path, size: &str, direct_read: bool) -> (f64, f64) {
    settle();
    let common = |rw: &str| -> Vec<String> {
        vec![
            "--name=bench".into(),
            format!("--filename={}", file.display()),
            format!("--rw={rw}"),
            "--bs=1m".into(),
            format!("--size={size}"),
            "--ioengine=psync".into(),
        ]
    };
    let mut w = common("write");
    // No preallocation: pio writes a fresh file too (fio lays files out with
    // fallocate by default, outside its timing).
    w.extend([
        "--end_fsync=1".to_string(),
        "--direct=0".into(),
        "--fallocate=none".into(),
    ]);
    let wj = fio_json(&w);
    let mut r = common("read");
    r.extend([
        format!("--direct={}", u8::from(direct_read)),
        "--invalidate=1".into(),
    ]);
    let rj = fio_json(&r);
    // Like pio (keep_file=0), remove the file right after reading it, so the
    // next tool never runs beside the other's 1 GiB of cached pages.
    let _ = std::fs::remove_file(file);
    (fio_bw(&wj, "write"), fio_bw(&rj, "read"))
}

fn main() {
    let dir = std::env::var("PIO_BENCH_DIR").unwrap_or_else(|_| "/tmp/pio-bench".into());
    let size = std::env::var("PIO_BENCH_SIZE").unwrap_or_else(|_| "1g".into());
    let rounds: usize = std::env::var("PIO_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(5);
    let direct = std::env::var("PIO_BENCH_DIRECT").is_ok_and(|v| v == "1");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let pf = Path::new(&dir).join("pio.dat");
    let ff = Path::new(&dir).join("fio.dat");
    let (mut pw, mut pr, mut fw, mut fr) = (vec![], vec![], vec![], vec![]);
    let (mut pdr, mut fdr) = (vec![], vec![]);
    println!(
        "pio vs fio: {size} sequential, 1 MiB transfers, write+fsync then cold read, {rounds} rounds in {dir}"
    );
    println!("round  pio_write  fio_write   pio_read   fio_read   (MiB/s)");
    for k in 0..rounds {
        let _ = std::fs::remove_file(&pf);
        let _ = std::fs::remove_file(&ff);
        // Alternate who goes first so drift of the disk hits both equally.
        let (p, f) = if k % 2 == 0 {
            let p = pio(&pf, &size, "fadvise");
            (p, fio(&ff, &size, false))
        } else {
            let f = fio(&ff, &size, false);
            (pio(&pf, &size, "fadvise"), f)
        };
        println!(
            "{k:>5} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            p.0, f.0, p.1, f.1
        );
        pw.push(p.0);
        pr.push(p.1);
        fw.push(f.0);
        fr.push(f.1);
        if direct {
            let p = pio(&pf, &size, "direct");
            let f = fio(&ff, &size, true);
            println!("      direct read: pio {:.1} fio {:.1}", p.1, f.1);
            pdr.push(p.1);
            fdr.push(f.1);
        }
    }
    let _ = std::fs::remove_file(&pf);
    let (mpw, mfw, mpr, mfr) = (
        median(&mut pw),
        median(&mut fw),
        median(&mut pr),
        median(&mut fr),
    );
    println!(
        "median write+fsync: pio {mpw:.1} MiB/s, fio {mfw:.1} MiB/s, ratio {:.3}",
        mpw / mfw
    );
    println!(
        "median cold read:   pio {mpr:.1} MiB/s, fio {mfr:.1} MiB/s, ratio {:.3}",
        mpr / mfr
    );
    if direct {
        let (a, b) = (median(&mut pdr), median(&mut fdr));
        println!(
            "median O_DIRECT read: pio {a:.1} MiB/s, fio {b:.1} MiB/s, ratio {:.3}",
            a / b
        );
    }
    println!("target: ratio ≥ 0.90 (pio figures include open, close and verification)");
}
