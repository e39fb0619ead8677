//! pio run as real processes (1, 2 and 4, forked by pio itself or started as
//! an mpirun would) against a real temporary directory: byte counts, file
//! sizes and the placement of every byte for each pattern, the timing rules,
//! and detection of injected corruption.
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow::array::Array;
use benchlake_formats::io::pio::{PioPhase, PioResult, parse};
use benchlake_formats::{IngestContext, InputFile, ingest};
use benchlake_pio::data;
use benchlake_pio::layout::Layout;
use benchlake_pio::params::{parse_cli, resolve};

const SEED: u64 = 20020521;

fn run_pio(dir: &Path, np: u32, extra: &[&str]) -> (i32, PioResult, Vec<String>) {
    let out = dir.join("result.json");
    let mut args: Vec<String> = vec![
        format!("--np={np}"),
        format!("--filename={}", dir.join("test.dat").display()),
        format!("--output={}", out.display()),
        "--keep_file=1".into(),
        "--timeout_s=60".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let st = Command::new(env!("CARGO_BIN_EXE_pio"))
        .args(&args)
        .current_dir(dir)
        .status()
        .unwrap();
    let r = parse(&out, &std::fs::read(&out).unwrap()).unwrap();
    (st.code().unwrap_or(-1), r, args)
}

fn layout_of(args: &[String], np: u32) -> Layout {
    let a: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with("--np"))
        .cloned()
        .collect();
    Layout::new(&resolve(&parse_cli(&a).unwrap(), |_| None).unwrap(), np)
}

fn max_stop(p: &PioPhase) -> f64 {
    p.tasks
        .iter()
        .map(|t| t.close_stop)
        .fold(f64::MIN, f64::max)
}
fn min_start(p: &PioPhase) -> f64 {
    p.tasks
        .iter()
        .map(|t| t.open_start)
        .fold(f64::MAX, f64::min)
}

/// Checks the timing rules on every phase of `r`.
fn check_timing(r: &PioResult) {
    for p in &r.phases {
        assert_eq!(p.tasks.len() as u32, r.num_tasks);
        let total = max_stop(p) - min_start(p);
        assert!(
            (p.total_time_s - total).abs() < 1e-9,
            "aggregate = latest stop − earliest start"
        );
        assert!(
            (p.bw_mib_s - p.bytes as f64 / 1048576.0 / total).abs() < 1e-6 * p.bw_mib_s.max(1.0)
        );
        for t in &p.tasks {
            let ts = [
                t.open_start,
                t.open_stop,
                t.xfer_start,
                t.xfer_stop,
                t.close_start,
                t.close_stop,
            ];
            assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
        }
        let xfer = p.tasks.iter().map(|t| t.xfer_stop).fold(f64::MIN, f64::max)
            - p.tasks
                .iter()
                .map(|t| t.xfer_start)
                .fold(f64::MAX, f64::min);
        assert!((p.xfer_time_s - xfer).abs() < 1e-9);
    }
    // Barriers: every read starts after every write of the iteration ended,
    // and the next iteration's write after the read.
    for w in r.phases.windows(2) {
        assert!(
            min_start(&w[1]) >= max_stop(&w[0]),
            "{} {} overlaps {}",
            w[1].operation,
            w[1].iteration,
            w[0].operation
        );
    }
}

/// Offsets of client c's transfers computed by hand from the consortium's
/// definitions (fixed-size patterns only).
/// Block, transfer, segments, padding, header of a fixed-size pattern.
type Fixed = (u64, u64, u64, u64, u64);

fn expected_offsets(n: u64, c: u64, fixed: Fixed, fpp: bool) -> Vec<u64> {
    let (b, t, segs, pad, header) = fixed;
    let (n, slot) = if fpp { (1, 0) } else { (n, c) };
    let stride = n * b + pad;
    let mut v = Vec::new();
    for s in 0..segs {
        for j in 0..b / t {
            v.push(header + s * stride + slot * b + j * t);
        }
    }
    v
}

/// Every byte of every file is the pattern of the client the layout assigns it
/// to (last iteration's key), and every byte no client owns is a hole (zero).
fn check_bytes(layout: &Layout, np: u32, iteration: u32) {
    let mut owned: std::collections::HashMap<PathBuf, Vec<u8>> = Default::default();
    for f in layout.files() {
        owned.insert(f.clone(), std::fs::read(&f).unwrap());
    }
    let mut covered: std::collections::HashMap<PathBuf, Vec<bool>> = owned
        .iter()
        .map(|(k, v)| (k.clone(), vec![false; v.len()]))
        .collect();
    for c in 0..np {
        let file = layout.file_of(c);
        let bytes = &owned[&file];
        let cov = covered.get_mut(&file).unwrap();
        let key = data::key(SEED, c, iteration);
        layout
            .for_each_transfer::<()>(c, |t| {
                for o in t.offset..t.offset + t.len {
                    assert_eq!(
                        bytes[o as usize],
                        data::byte_at(key, o),
                        "client {c} offset {o}"
                    );
                    assert!(!cov[o as usize], "offset {o} written twice");
                    cov[o as usize] = true;
                }
                Ok(())
            })
            .unwrap();
    }
    for (f, cov) in covered {
        let bytes = &owned[&f];
        assert!(
            cov.iter().zip(bytes).all(|(c, b)| *c || *b == 0),
            "unowned non-zero byte in {}",
            f.display()
        );
    }
}

#[test]
fn every_pattern_with_1_2_and_4_processes() {
    // (pattern args, fixed-size layout parameters B, T, segments, padding, header)
    let cases: [(&[&str], Option<Fixed>); 4] = [
        (
            &[
                "--pattern=segmented",
                "--block_size=64k",
                "--transfer_size=16k",
            ],
            Some((65536, 16384, 1, 0, 0)),
        ),
        (
            &[
                "--pattern=strided",
                "--block_size=32k",
                "--transfer_size=8k",
                "--segments=3",
                "--padding=1000",
                "--header_bytes=512",
            ],
            Some((32768, 8192, 3, 1000, 512)),
        ),
        (
            &[
                "--pattern=random",
                "--block_size=32k",
                "--transfer_size=8k",
                "--min_transfer_size=100",
                "--segments=2",
            ],
            None,
        ),
        (
            &[
                "--pattern=general",
                "--block_size=32k",
                "--transfer_size=8k",
                "--min_transfer_size=1000",
                "--segments=3",
                "--padding=77",
                "--header_bytes=13",
            ],
            None,
        ),
    ];
    for np in [1u32, 2, 4] {
        for (pat, fixed) in &cases {
            for fpp in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let mut extra: Vec<&str> = pat.to_vec();
                extra.push("--iterations=2");
                if fpp {
                    extra.push("--file_per_proc=1");
                }
                let (code, r, args) = run_pio(dir.path(), np, &extra);
                let what = format!("np={np} {pat:?} fpp={fpp}");
                assert_eq!(code, 0, "{what}");
                assert_eq!(r.num_tasks, np, "{what}");
                assert_eq!(r.launcher, if np > 1 { "fork" } else { "single" });
                assert_eq!(
                    r.verification.status, "PASS",
                    "{what}: {:?}",
                    r.verification
                );
                assert_eq!(r.reorder_shift, u32::from(np > 1), "{what}");
                assert_eq!(r.phases.len(), 4, "{what}");
                let layout = layout_of(&args, np);
                let per_client: Vec<u64> = (0..np).map(|c| layout.bytes_of(c)).collect();
                for p in &r.phases {
                    assert_eq!(p.bytes, per_client.iter().sum::<u64>(), "{what}");
                    for t in &p.tasks {
                        // A reader moves the bytes of the client it reads.
                        let owner = if p.operation == "write" {
                            t.rank
                        } else {
                            (t.rank + r.reorder_shift) % np
                        };
                        assert_eq!(t.bytes, per_client[owner as usize], "{what}");
                    }
                    if p.operation == "read" {
                        assert_eq!(p.verify_errors, Some(0));
                    }
                }
                if let Some(fx @ (b, _, segs, _, _)) = *fixed {
                    for c in 0..np {
                        let mut got = Vec::new();
                        layout
                            .for_each_transfer::<()>(c, |x| {
                                got.push(x.offset);
                                Ok(())
                            })
                            .unwrap();
                        assert_eq!(
                            got,
                            expected_offsets(u64::from(np), u64::from(c), fx, fpp),
                            "{what}"
                        );
                        assert_eq!(per_client[c as usize], b * segs, "{what}");
                    }
                }
                for c in 0..np {
                    let f = layout.file_of(c);
                    assert_eq!(
                        std::fs::metadata(&f).unwrap().len(),
                        layout.file_size(c),
                        "{what} {}",
                        f.display()
                    );
                }
                assert_eq!(layout.files().len(), if fpp { np as usize } else { 1 });
                check_bytes(&layout, np, 1);
                check_timing(&r);
                let s = r.summary.iter().find(|s| s.operation == "write").unwrap();
                assert_eq!(s.iterations, 2);
                assert_eq!(s.task_time_s.n, 2 * u64::from(np));
            }
        }
    }
}

#[test]
fn injected_corruption_is_a_failed_check() {
    let dir = tempfile::tempdir().unwrap();
    // Offset 40000 lies in client 1's block (block 32 KiB): read by client 0.
    let (code, r, _) = run_pio(
        dir.path(),
        2,
        &[
            "--pattern=strided",
            "--block_size=32k",
            "--transfer_size=8k",
            "--segments=2",
            "--iterations=2",
            "--inject_corruption=40000",
        ],
    );
    assert_eq!(code, 2, "exit code says verification failed");
    assert_eq!(r.verification.status, "FAIL");
    assert_eq!(r.verification.errors, 2, "one byte per iteration");
    let e = r.verification.first_error.clone().unwrap();
    assert_eq!(
        (e.offset, e.writer, e.reader, e.iteration),
        (40000, 1, 0, 0)
    );
    assert_eq!(e.found, !e.expected);
    let out = dir.path().join("result.json");
    let tables = ingest(
        "pio",
        &[InputFile::from_path(&out)],
        &IngestContext {
            run_id: "r".into(),
            date: "2026-11-22".into(),
        },
    )
    .unwrap();
    assert_eq!(tables[0].table, "io_results");
    assert_eq!(tables[0].rows(), 4);
    assert_eq!(tables[1].rows(), 8);
    assert_eq!(tables[2].rows(), 2);
    let b = &tables[0].batches[0];
    let ve = b.column(b.schema().index_of("verify_errors").unwrap());
    let ve = ve
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .unwrap();
    assert_eq!((ve.is_null(0), ve.value(1), ve.value(3)), (true, 1, 1));
}

#[test]
fn ranks_started_like_mpirun_meet_through_the_rendezvous_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mpi.json");
    let kids: Vec<_> = (0..2)
        .map(|r| {
            Command::new(env!("CARGO_BIN_EXE_pio"))
                .args([
                    format!("--filename={}", dir.path().join("m.dat").display()),
                    format!("--output={}", out.display()),
                    "--rendezvous_host=127.0.0.1".into(),
                    "--timeout_s=60".into(),
                ])
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "2")
                .env("PMIX_NAMESPACE", "test-ns")
                .env("PIO_BLOCK_SIZE", "64k")
                .env("PIO_TRANSFER_SIZE", "4k")
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let r = parse(&out, &std::fs::read(&out).unwrap()).unwrap();
    assert_eq!((r.launcher.as_str(), r.num_tasks), ("mpirun", 2));
    assert_eq!(r.phases[0].bytes, 2 * 65536);
    assert_eq!(r.phases[0].transfers, 32);
    // The env parameters are recorded with their source; test files are gone.
    let p = r.params.iter().find(|p| p.name == "block_size").unwrap();
    assert_eq!((p.value.as_str(), p.source.as_str()), ("64k", "env"));
    assert!(!dir.path().join("m.dat").exists());
    check_timing(&r);
}

#[test]
fn a_rank_that_cannot_start_fails_the_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/t.dat");
    let t0 = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_pio"))
        .args([
            "--np=2".to_string(),
            format!("--filename={}", missing.display()),
            format!("--output={}", dir.path().join("r.json").display()),
            "--timeout_s=120".into(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no/such/dir"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The parent kills the waiting rank soon after rank 0 failed, not after the timeout.
    assert!(t0.elapsed().as_secs() < 60);
    assert!(!dir.path().join("r.json").exists());
}

#[test]
fn two_fake_nodes_read_each_others_data() {
    // Four ranks, two per "node": the reorder shift becomes 2 (IOR -C -Q 1 with
    // block placement), so every client reads data written on the other node.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nodes.json");
    let kids: Vec<_> = (0..4)
        .map(|r| {
            Command::new(env!("CARGO_BIN_EXE_pio"))
                .args([
                    format!("--filename={}", dir.path().join("n.dat").display()),
                    format!("--output={}", out.display()),
                    "--rendezvous_host=127.0.0.1".into(),
                    "--pattern=strided".into(),
                    "--segments=2".into(),
                    "--block_size=16k".into(),
                    "--transfer_size=4k".into(),
                ])
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "4")
                .env("PMIX_NAMESPACE", "nodes-ns")
                .env("PIO_HOSTNAME", if r < 2 { "node-a" } else { "node-b" })
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let r = parse(&out, &std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(r.hosts, ["node-a", "node-a", "node-b", "node-b"]);
    assert_eq!(r.reorder_shift, 2);
    assert_eq!(r.verification.status, "PASS");
    check_timing(&r);
}

#[test]
fn options_preallocate_cached_write_fadvise_and_no_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (code, r, args) = run_pio(
        dir.path(),
        2,
        &[
            "--preallocate=1",
            "--fsync=0",
            "--read_cache=fadvise",
            "--block_size=64k",
            "--transfer_size=16k",
        ],
    );
    assert_eq!(code, 0);
    assert!(!r.fsync);
    assert_eq!(r.cache_mode, "fadvise_dontneed");
    assert_eq!(r.verification.status, "PASS");
    let layout = layout_of(&args, 2);
    assert_eq!(
        std::fs::metadata(layout.file_of(0)).unwrap().len(),
        layout.file_size(0)
    );
    check_bytes(&layout, 2, 0);
    let p = |n: &str| {
        r.params
            .iter()
            .find(|p| p.name == n)
            .map(|p| (p.value.clone(), p.source.clone()))
            .unwrap()
    };
    assert_eq!(p("preallocate"), ("1".to_string(), "cli".to_string()));
    assert_eq!(p("seed"), ("20020521".to_string(), "default".to_string()));

    let dir = tempfile::tempdir().unwrap();
    let (code, r, _) = run_pio(dir.path(), 1, &["--verify=0", "--read_cache=none"]);
    assert_eq!(code, 0);
    assert_eq!(
        (r.verification.status.as_str(), r.cache_mode.as_str()),
        ("SKIPPED", "none")
    );
    assert!(r.phases.iter().all(|p| p.verify_errors.is_none()));
}

#[test]
fn help_and_bad_parameters() {
    let help = Command::new(env!("CARGO_BIN_EXE_pio"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--header_bytes") && text.contains("PIO_NAME"),
        "{text}"
    );
    for bad in [["--nope=1"], ["--pattern=zigzag"], ["--block_size=3k"]] {
        let o = Command::new(env!("CARGO_BIN_EXE_pio"))
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).starts_with("pio: parameter"),
            "{bad:?}"
        );
    }
}

#[test]
fn explicit_stride_and_too_short_stride() {
    let dir = tempfile::tempdir().unwrap();
    let (code, r, args) = run_pio(
        dir.path(),
        2,
        &[
            "--pattern=strided",
            "--block_size=32k",
            "--transfer_size=8k",
            "--segments=3",
            "--stride=100000",
        ],
    );
    assert_eq!((code, r.stride), (0, 100000));
    let layout = layout_of(&args, 2);
    assert_eq!(
        std::fs::metadata(layout.file_of(0)).unwrap().len(),
        2 * 100000 + 65536
    );
    check_bytes(&layout, 2, 0);
    // With 4 clients the 128 KiB segment does not fit in a 100000-byte stride.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pio"))
        .args([
            "--np=4".to_string(),
            format!("--filename={}", dir.path().join("s.dat").display()),
            format!("--output={}", dir.path().join("s.json").display()),
            "--pattern=strided".into(),
            "--block_size=32k".into(),
            "--transfer_size=8k".into(),
            "--segments=2".into(),
            "--stride=100000".into(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("shorter than the segment"));
}
