//! The hand-written Parquet chunks of large tables (`core/src/lake/chunks.rs`:
//! DELTA_BINARY_PACKED integers, BYTE_STREAM_SPLIT + ZSTD floats, constant
//! dictionary chunks, dictionary chunks with bit-packed indices: the
//! `from_host`/`to_host` of one rank per host) read back in the real query
//! engines users have: a
//! synthetic 300-rank LinkTest 2.1.17 file (89,700 timings, over the bulk
//! threshold; full-precision random times, including 0.0, huge and tiny values)
//! goes through `benchlake ingest linktest … --out DIR`, then DuckDB and
//! pyspark (vectorized and row readers) must return the row count and the exact
//! sums computed here from the run. Needs the e2e venv's python on PATH (the
//! README's test command puts it there); without duckdb/pyspark the test is
//! `common::unavailable` (fails under `CI=true`, a logged skip elsewhere).
mod common;

use std::process::Command;

use benchlake_formats::linktest::{
    AllToAllTime, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, v2,
};
use benchlake_formats::sion::SionWriteOptions;

fn run(n: usize) -> LinkTestRun {
    let mut times = vec![0f64; n * n];
    let mut steps = vec![0i32; n * n];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Full-precision doubles over many magnitudes, a few special ones.
            times[i * n + j] = match (i * n + j) % 1000 {
                0 => 1e300,
                1 => 5e-324,
                _ => (x >> 11) as f64 / (1u64 << 53) as f64 * 1e-3 + 1e-9,
            };
            steps[i * n + j] = ((i + j) % (n - 1) + 1) as i32;
        }
    }
    LinkTestRun {
        format: PayloadFormat::V2,
        version: [2, 1, 17],
        git_hash: None,
        mode: "MPI".into(),
        num_tasks: n,
        num_messages: 10,
        message_size: 1024,
        num_warmup_messages: Some(1),
        num_serial_retests: 0,
        num_multi_buffers: Some(1),
        buffer_seed: Some(0),
        num_randomized_tasks: Some(0),
        task_seed: Some(0),
        memory_allocator: Some(0),
        flags: Flags::default(),
        v1_stats: None,
        ranks: (0..n)
            .map(|r| RankInfo {
                rank: r,
                // One rank per host: the host columns change every row.
                hostname: format!("n{r:04}"),
                core_id: Some(0),
                coords: None,
            })
            .collect(),
        permutations: vec![Permutation {
            start_time: None,
            end_time: None,
            min_time_s: 1e-9,
            avg_time_s: 5e-4,
            max_time_s: 1e300,
            a2a: None,
            times,
            steps,
            alltoall: Vec::<AllToAllTime>::new(),
            slow_links: Vec::new(),
        }],
    }
}

fn python_has(module: &str) -> bool {
    Command::new("python")
        .args(["-c", &format!("import {module}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn python(script: &str) -> String {
    let out = Command::new("python")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn duckdb_and_spark_read_the_bulk_chunks_exactly() {
    let n = 300;
    let r = run(n);
    let dir = tempfile::tempdir().unwrap();
    let sion = dir.path().join("pingpong_results_bin.sion");
    v2::write_file(&r, &sion, &SionWriteOptions::default()).unwrap();
    let lake = dir.path().join("lake");
    let out = Command::new(env!("CARGO_BIN_EXE_benchlake"))
        .args(["ingest", "linktest"])
        .arg(&sion)
        .arg("--out")
        .arg(&lake)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The timings file was written beside the lake's tables and renamed into
    // place: only `tables` is left at the top.
    let top: Vec<String> = std::fs::read_dir(&lake)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(top, ["tables"]);

    // Expected figures, from the run itself.
    let pm = &r.permutations[0];
    let (mut rows, mut sf, mut st, mut ss, mut bits) = (0u64, 0i64, 0i64, 0i64, 0u64);
    for i in 0..n {
        for j in 0..n {
            if i != j {
                rows += 1;
                sf += i as i64;
                st += j as i64;
                ss += i64::from(pm.steps[i * n + j]);
                // An order-independent checksum of the exact time bits.
                bits = bits.wrapping_add(pm.times[i * n + j].to_bits() % 1_000_003);
            }
        }
    }
    let want = format!("{rows} {sf} {st} {ss} {bits}");
    // The host columns: `n{rank}` of each end, summed as numbers.
    let want_hosts = format!("{rows} {sf} {st}");
    let glob = format!("{}/tables/linktest_timings/**/*.parquet", lake.display());
    assert!(rows >= 65_536, "must exercise the bulk path");
    let files = common::table_files(&lake, "linktest_timings", None);
    assert_eq!(files.len(), 1, "{files:?}");

    if !python_has("duckdb") {
        common::unavailable(
            &common::this_test(),
            "python with duckdb not on PATH (run through scripts/test.sh)",
        );
        return;
    }
    let got = python(&format!(
        "import duckdb\n\
         r = duckdb.sql(\"select count(*), sum(from_rank), sum(to_rank), sum(step) from read_parquet('{glob}')\").fetchall()[0]\n\
         import struct\n\
         b = sum(struct.unpack('<Q', struct.pack('<d', t))[0] % 1000003 for (t,) in duckdb.sql(\"select time_s from read_parquet('{glob}')\").fetchall()) % (1 << 64)\n\
         print(r[0], r[1], r[2], r[3], b)\n"
    ));
    assert_eq!(got.trim(), want, "duckdb");
    let got = python(&format!(
        "import duckdb\n\
         r = duckdb.sql(\"select count(*), sum(cast(substr(from_host, 2) as integer)), sum(cast(substr(to_host, 2) as integer)) from read_parquet('{glob}')\").fetchall()[0]\n\
         print(r[0], r[1], r[2])\n"
    ));
    assert_eq!(got.trim(), want_hosts, "duckdb host columns");

    if !python_has("pyspark") {
        common::unavailable(
            &common::this_test(),
            "pyspark not installed (tests/e2e/requirements.txt)",
        );
        return;
    }
    let file = files[0].display().to_string();
    let got = python(&format!(
        "import struct\n\
         from pyspark.sql import SparkSession\n\
         s = SparkSession.builder.master('local[1]').getOrCreate()\n\
         s.sparkContext.setLogLevel('ERROR')\n\
         for vec in ['true', 'false']:\n\
         \x20   s.conf.set('spark.sql.parquet.enableVectorizedReader', vec)\n\
         \x20   df = s.read.parquet('{file}')\n\
         \x20   a = df.selectExpr('count(*)', 'sum(from_rank)', 'sum(to_rank)', 'sum(step)').collect()[0]\n\
         \x20   b = sum(struct.unpack('<Q', struct.pack('<d', r[0]))[0] % 1000003 for r in df.select('time_s').collect()) % (1 << 64)\n\
         \x20   print(a[0], a[1], a[2], a[3], b)\n\
         \x20   h = df.selectExpr('count(*)', 'sum(cast(substring(from_host, 2) as int))', 'sum(cast(substring(to_host, 2) as int))').collect()[0]\n\
         \x20   print(h[0], h[1], h[2])\n\
         s.stop()\n"
    ));
    let lines: Vec<&str> = got.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines,
        vec![
            want.as_str(),
            want_hosts.as_str(),
            want.as_str(),
            want_hosts.as_str()
        ],
        "spark"
    );
}
