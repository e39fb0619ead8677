//! LinkTest ingest speed: a synthetic 4,096-rank LinkTest 2.1.17 file (16.8 M
//! timings, written with our own writer) is opened (mmap), decoded, turned into
//! the `linktest_*` Arrow tables and encoded as Parquet; prints GB/s of SION
//! input per core (everything runs on one thread). Then the real 1.2p1 files are
//! decoded repeatedly for a per-file figure comparable with LinkTest's own reader.
//!
//! Run: `cargo bench -p benchlake-formats --bench linktest` (`LINKTEST_BENCH_RANKS`
//! overrides the rank count).
use std::path::Path;
use std::time::{Duration, Instant};

use benchlake_core::lake::encode_parquet;
use benchlake_formats::linktest::{
    self, AllToAllTime, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink,
    run_tables,
};
use benchlake_formats::sion::{SionSet, SionWriteOptions};

/// A deterministic synthetic run: LinkTest-like step schedule (partner of r in
/// step s is (s − r) mod n, as in a round-robin tournament), float-rounded times.
fn synthetic(n: usize) -> LinkTestRun {
    let mut times = vec![0f64; n * n];
    let mut steps = vec![0i32; n * n];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 2–12 µs, stored as f32 like LinkTest does.
            let t = 2e-6 + (x % 10_000) as f64 * 1e-9;
            times[i * n + j] = f64::from(t as f32);
            steps[i * n + j] = ((i + j) % (n - 1) + 1) as i32;
        }
    }
    let hosts_per = 48;
    LinkTestRun {
        format: PayloadFormat::V2,
        version: [2, 1, 17],
        git_hash: Some("0000000000000000000000000000000000000000".into()),
        mode: "MPI".into(),
        num_tasks: n,
        num_messages: 10,
        message_size: 1 << 20,
        num_warmup_messages: Some(2),
        num_serial_retests: 10,
        num_multi_buffers: Some(1),
        buffer_seed: Some(0),
        num_randomized_tasks: Some(0),
        task_seed: Some(0),
        memory_allocator: Some(0),
        flags: Flags {
            all_to_all: true,
            parallel_sion: true,
            ..Flags::default()
        },
        v1_stats: None,
        ranks: (0..n)
            .map(|r| RankInfo {
                rank: r,
                hostname: format!("node{:05}", r / hosts_per),
                core_id: Some((r % hosts_per) as i32),
                coords: None,
            })
            .collect(),
        permutations: vec![Permutation {
            start_time: Some("2026-11-23 07:00:00".into()),
            end_time: Some("2026-11-23 07:10:00".into()),
            min_time_s: 2e-6,
            avg_time_s: 7e-6,
            max_time_s: 1.2e-5,
            a2a: Some([1e-3, 2e-3, 3e-3]),
            times,
            steps,
            alltoall: (0..n)
                .map(|r| AllToAllTime {
                    rank: r,
                    step: None,
                    time_s: 1e-3,
                })
                .collect(),
            slow_links: (0..10)
                .map(|k| SlowLink {
                    from_rank: k,
                    to_rank: k + 1,
                    time_s: 1.2e-5,
                    retest_time_s: Some(3e-6),
                })
                .collect(),
        }],
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn main() {
    let n: usize = std::env::var("LINKTEST_BENCH_RANKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pingpong_results_bin.sion");
    let t = Instant::now();
    let run = synthetic(n);
    linktest::v2::write_file(&run, &path, &SionWriteOptions::default()).expect("write");
    drop(run);
    let size = std::fs::metadata(&path).expect("stat").len();
    println!(
        "synthetic LinkTest 2.1.17 file: {n} ranks, {} timings, {:.1} MB (written in {:.2} s)",
        n * (n - 1),
        size as f64 / 1e6,
        secs(t.elapsed())
    );

    let mut best = [f64::INFINITY; 4];
    for _ in 0..3 {
        let t0 = Instant::now();
        let set = SionSet::open(&path).expect("open");
        let run = linktest::decode(&set).expect("decode");
        let t1 = Instant::now();
        let tables = run_tables(
            &run,
            "01JBENCH000000000000000000",
            "raw/01JBENCH/task/pingpong_results_bin.sion",
        )
        .expect("tables");
        let t2 = Instant::now();
        let mut parquet_bytes = 0;
        for t in &tables {
            parquet_bytes += encode_parquet(&t.table, &t.batches).expect("parquet").len();
        }
        let t3 = Instant::now();
        let times = [t1 - t0, t2 - t1, t3 - t2, t3 - t0].map(secs);
        for (b, v) in best.iter_mut().zip(times) {
            *b = b.min(v);
        }
        println!(
            "  run: decode {:.3} s, arrow {:.3} s, parquet {:.3} s ({:.1} MB), total {:.3} s",
            times[0],
            times[1],
            times[2],
            parquet_bytes as f64 / 1e6,
            times[3]
        );
    }
    let gb = size as f64 / 1e9;
    println!(
        "best: decode {:.2} GB/s, decode+arrow {:.2} GB/s, decode+arrow+parquet {:.2} GB/s of SION input per core (1 thread)",
        gb / best[0],
        gb / (best[0] + best[1]),
        gb / best[3]
    );

    // Real LinkTest 1.2p1 files.
    let base = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/linktest/v1.2p1"
    ));
    for case in ["np4_default", "np8_mix_retest3", "np16_a2a_mix"] {
        let p = base.join(case).join("pingpong_results_bin.sion");
        let Ok(meta) = std::fs::metadata(&p) else {
            println!("  {case}: not found, skipped");
            continue;
        };
        let reps = 2000;
        let t = Instant::now();
        for _ in 0..reps {
            let run = linktest::read_file(&p).expect("read");
            std::hint::black_box(&run);
        }
        let per = secs(t.elapsed()) / reps as f64;
        println!(
            "  1.2p1 {case}: {} bytes, open+decode {:.1} us per file ({:.0} MB/s)",
            meta.len(),
            per * 1e6,
            meta.len() as f64 / per / 1e6
        );
    }
}
