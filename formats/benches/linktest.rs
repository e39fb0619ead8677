//! LinkTest ingest speed: a synthetic 4,096-rank LinkTest 2.1.17 file (16.8 M
//! timings, written with our own writer) is opened (mmap), decoded, turned into
//! the `linktest_*` Arrow tables (`into_run_tables`, as the ingest does) and
//! encoded as Parquet; prints GB/s of SION
//! input per core (everything runs on one thread). Then the real 1.2p1 files are
//! decoded repeatedly for a per-file figure comparable with LinkTest's own reader.
//!
//! Run: `cargo bench -p benchlake-formats --bench linktest` (`LINKTEST_BENCH_RANKS`
//! overrides the rank count). `LINKTEST_BENCH_MODE=streamed` measures instead what
//! `benchlake ingest linktest` and the worker run (`ingest_encoded`, the pair
//! times streamed into Parquet) for 48 ranks per host and for one rank per host
//! (every pair's partner on another host: the host columns' worst case).
use std::path::Path;
use std::time::{Duration, Instant};

use benchlake_core::lake::encode_parquet;
use benchlake_formats::linktest::{self, into_run_tables, run_tables};
use benchlake_formats::sion::{ChunkLayout, SionSet, SionWriteOptions, TaskData};

/// LinkTest 1.2p1 rank streams ("LKTST" layout) for `n` ranks.
fn v1_streams(n: usize, alltoall: bool) -> Vec<Vec<u8>> {
    (0..n)
        .map(|r| {
            let mut b = b"LKTST".to_vec();
            for v in [1i32, 2, 1] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            let mut host = b"node0001".to_vec();
            host.resize(256, 0);
            b.extend_from_slice(&host);
            for v in [r as i32, 0, 0, 0] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            if r == 0 {
                for v in [1i32, 1024, i32::from(alltoall), 1, 0, 0, 0, 0, 0, 1] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                for v in [1e-6f64, 9e-6, 5e-6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
            for j in 0..n {
                let t = if j == r {
                    0.0
                } else {
                    1e-6 * (1 + (r * 7 + j) % 9) as f64
                };
                b.extend_from_slice(&t.to_le_bytes());
            }
            for j in 0..n {
                let s = if j == r {
                    0
                } else {
                    ((r + j) % (n - 1) + 1) as i32
                };
                b.extend_from_slice(&s.to_le_bytes());
            }
            if alltoall {
                b.resize(b.len() + 8 * n, 0);
            }
            if r == 0 {
                b.resize(b.len() + 24 * n, 0);
            }
            b
        })
        .collect()
}

/// On-CPU time of this thread (ns), from the scheduler's accounting: the machine
/// is shared, so wall time overstates the cost per core.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map(|ns| ns as f64 / 1e9)
        .unwrap_or(f64::NAN)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `ingest_encoded("linktest")` of a synthetic `n`-rank file, 48 ranks per
/// host and 1: best wall and CPU time of 7 runs and the Parquet bytes.
fn streamed(n: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    for rph in [48, 1] {
        let path = dir.path().join(format!("rph{rph}.sion"));
        let run = linktest::synth::synthetic_run(n, rph, 0);
        linktest::v2::write_file(&run, &path, &SionWriteOptions::default()).expect("write");
        drop(run);
        let size = std::fs::metadata(&path).expect("stat").len();
        let input = benchlake_formats::InputFile {
            path: path.clone(),
            source: "raw/01JBENCH/task/pingpong_results_bin.sion".into(),
        };
        let ctx = benchlake_formats::IngestContext {
            run_id: "01JBENCH000000000000000000".into(),
            date: "2026-11-22".into(),
        };
        let (mut wall, mut cpu, mut bytes) = (f64::INFINITY, f64::INFINITY, 0);
        for _ in 0..7 {
            let (t0, c0) = (Instant::now(), cpu_s());
            let out =
                benchlake_formats::ingest_encoded("linktest", std::slice::from_ref(&input), &ctx)
                    .expect("ingest");
            wall = wall.min(secs(t0.elapsed()));
            cpu = cpu.min(cpu_s() - c0);
            bytes = out.iter().map(|t| t.data.len()).sum::<usize>();
        }
        println!(
            "streamed ingest, {n} ranks, {rph} per host ({:.1} MB SION): best of 7 {:.3} s wall, {:.3} s CPU; Parquet {:.2} MB",
            size as f64 / 1e6,
            wall,
            cpu,
            bytes as f64 / 1e6
        );
    }
}

fn main() {
    let n: usize = std::env::var("LINKTEST_BENCH_RANKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    if std::env::var("LINKTEST_BENCH_MODE").as_deref() == Ok("streamed") {
        streamed(n);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pingpong_results_bin.sion");
    let t = Instant::now();
    // The same generator `benchlake probe linktest` writes (48 ranks per host).
    let run = linktest::synth::synthetic_run(n, 48, 0);
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
    let mut best_cpu = [f64::INFINITY; 4];
    for _ in 0..3 {
        let (t0, c0) = (Instant::now(), cpu_s());
        let set = SionSet::open(&path).expect("open");
        let run = linktest::decode(&set).expect("decode");
        let (t1, c1) = (Instant::now(), cpu_s());
        let tables = into_run_tables(
            run,
            "01JBENCH000000000000000000",
            "raw/01JBENCH/task/pingpong_results_bin.sion",
        )
        .expect("tables");
        let (t2, c2) = (Instant::now(), cpu_s());
        let mut parquet_bytes = 0;
        for t in &tables {
            parquet_bytes += encode_parquet(&t.table, "2026-11-22", &t.batches)
                .expect("parquet")
                .len();
        }
        let (t3, c3) = (Instant::now(), cpu_s());
        let times = [t1 - t0, t2 - t1, t3 - t2, t3 - t0].map(secs);
        let cpu = [c1 - c0, c2 - c1, c3 - c2, c3 - c0];
        for (b, v) in best.iter_mut().zip(times) {
            *b = b.min(v);
        }
        for (b, v) in best_cpu.iter_mut().zip(cpu) {
            *b = b.min(v);
        }
        println!(
            "  run: decode {:.3} s (cpu {:.3}), arrow {:.3} s (cpu {:.3}), parquet {:.3} s (cpu {:.3}, {:.1} MB), total {:.3} s (cpu {:.3})",
            times[0],
            cpu[0],
            times[1],
            cpu[1],
            times[2],
            cpu[2],
            parquet_bytes as f64 / 1e6,
            times[3],
            cpu[3]
        );
    }
    // Where the Parquet time goes: each table on its own (CPU seconds).
    {
        let set = SionSet::open(&path).expect("open");
        let run = linktest::decode(&set).expect("decode");
        let tables = into_run_tables(
            run,
            "01JBENCH000000000000000000",
            "raw/01JBENCH/task/pingpong_results_bin.sion",
        )
        .expect("tables");
        // LINKTEST_BENCH_OUT=DIR keeps the Parquet files (for reading them back
        // with DuckDB/Spark) and prints checksums of the timings to compare.
        let keep = std::env::var_os("LINKTEST_BENCH_OUT").map(std::path::PathBuf::from);
        for t in &tables {
            let c0 = cpu_s();
            let data = encode_parquet(&t.table, "2026-11-22", &t.batches).expect("parquet");
            let bytes = data.len();
            if let Some(dir) = &keep {
                std::fs::write(dir.join(format!("{}.parquet", t.table)), &data).expect("keep");
            }
            println!(
                "  {}: {} rows, parquet cpu {:.3} s, {:.1} MB",
                t.table,
                t.rows(),
                cpu_s() - c0,
                bytes as f64 / 1e6
            );
        }
    }
    if std::env::var_os("LINKTEST_BENCH_OUT").is_some() {
        let set = SionSet::open(&path).expect("open");
        let run = linktest::decode(&set).expect("decode");
        let (mut rows, mut st, mut sf, mut sto, mut ss) = (0u64, 0f64, 0i64, 0i64, 0i64);
        for pm in &run.permutations {
            for i in 0..n {
                for j in 0..n {
                    if i != j {
                        rows += 1;
                        st += pm.times[i * n + j];
                        sf += i as i64;
                        sto += j as i64;
                        ss += i64::from(pm.steps[i * n + j]);
                    }
                }
            }
        }
        println!(
            "checksums: rows {rows} sum(from_rank) {sf} sum(to_rank) {sto} sum(step) {ss} sum(time_s) {st:.9e}"
        );
    }
    let gb = size as f64 / 1e9;
    println!(
        "best wall: decode {:.2} GB/s, decode+arrow {:.2} GB/s, decode+arrow+parquet {:.2} GB/s of SION input (1 thread)",
        gb / best[0],
        gb / (best[0] + best[1]),
        gb / best[3]
    );
    println!(
        "best per CPU-second: decode {:.2} GB/s, decode+arrow {:.2} GB/s, decode+arrow+parquet {:.2} GB/s of SION input per core",
        gb / best_cpu[0],
        gb / (best_cpu[0] + best_cpu[1]),
        gb / best_cpu[3]
    );

    // A 1.x file shaped like the reference's np256 case (256 ranks, collective
    // layout): the reference timed LinkTest's own reader on that file (§7:
    // `pingponganalysis` reading only 0.01 s, `siondump -a` ≤ 0.03 s).
    let v1_path = dir.path().join("np256_like.sion");
    let v1_streams = v1_streams(256, false);
    let tasks: Vec<TaskData<'_>> = v1_streams.iter().map(|s| TaskData::single(s)).collect();
    let opts = SionWriteOptions {
        layout: ChunkLayout::Collective { group_size: 16 },
        ..Default::default()
    };
    benchlake_formats::sion::write_sion_set(&v1_path, &tasks, &opts).expect("write v1");
    let v1_size = std::fs::metadata(&v1_path).expect("stat").len();
    let reps = 200;
    let t = Instant::now();
    for _ in 0..reps {
        let run = linktest::read_file(&v1_path).expect("read v1");
        let tables = run_tables(&run, "R", "np256.sion").expect("tables");
        std::hint::black_box(&tables);
    }
    let per = secs(t.elapsed()) / reps as f64;
    println!(
        "1.x np256-shaped file ({v1_size} bytes): open+decode+arrow {:.3} ms per file (LinkTest 1.2p1 pingponganalysis reading only: 10 ms, siondump: <= 30 ms, per the reference)",
        per * 1e3
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
