//! `benchlake replay calibrate` as a user runs it: LinkTest 2.1.17 files at
//! three message sizes whose pair times follow known intra- and inter-node
//! lines (with noise and one bad link) give back those lines; `--out` writes
//! a Dimemas .cfg, a replaympi input and the `replay_calibrations` table; a
//! Dimemas replay with `--calibration` predicts what the same parameters
//! given by hand predict. One size only is refused saying what to measure.
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, Int64Type};
use benchlake_formats::linktest::{synth, v2};
use benchlake_formats::sion::SionWriteOptions;

const BIN: &str = env!("CARGO_BIN_EXE_benchlake");

/// Intra-node: 0.4 µs, 20,000 MB/s; inter-node: 3 µs, 5,000 MB/s (MB = 2^20 B).
fn model(intra: bool, bytes: u64) -> f64 {
    let (l, bw) = if intra {
        (0.4e-6, 20000.0)
    } else {
        (3e-6, 5000.0)
    };
    l + bytes as f64 / (bw * 1048576.0)
}

/// A 2.1.17 file of 8 ranks on 2 hosts at `bytes` per message.
fn write(dir: &Path, bytes: u64) -> PathBuf {
    let mut run = synth::synthetic_run(8, 4, bytes);
    run.message_size = bytes;
    let n = run.num_tasks;
    let hosts: Vec<String> = run.ranks.iter().map(|r| r.hostname.clone()).collect();
    for p in &mut run.permutations {
        for i in 0..n {
            for j in 0..n {
                if i == j {
                    continue;
                }
                // ±1 % of deterministic noise, and the link 1 → 6 three times slower.
                let noise = 1.0 + ((i * 7 + j * 3) % 5) as f64 * 0.005 - 0.01;
                let slow = if (i, j) == (1, 6) { 3.0 } else { 1.0 };
                p.times[i * n + j] = model(hosts[i] == hosts[j], bytes) * noise * slow;
            }
        }
    }
    let path = dir.join(format!("linktest-{bytes}.sion"));
    v2::write_file(&run, &path, &SionWriteOptions::default()).expect("write");
    path
}

fn run(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(BIN)
        .args(args)
        .output()
        .expect("run benchlake");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn param(v: &serde_json::Value, k: &str) -> f64 {
    v["params"][k]
        .as_str()
        .unwrap_or_else(|| panic!("no {k} in {v}"))
        .parse()
        .unwrap()
}

#[test]
fn calibration_recovers_the_links_and_drives_a_replay() {
    let d = tempfile::tempdir().unwrap();
    let files: Vec<String> = [8u64, 65536, 1 << 20]
        .iter()
        .map(|&b| write(d.path(), b).display().to_string())
        .collect();
    let out = d.path().join("cal");
    let mut args = vec!["replay", "calibrate", "--json", "--out"];
    let out_s = out.display().to_string();
    args.push(&out_s);
    args.extend(files.iter().map(String::as_str));
    let (ok, stdout, stderr) = run(&args);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    // The fitted lines, within 1.5 % (noise is ±1 %, the bad link is ignored
    // by the medians).
    let close = |got: f64, want: f64| (got - want).abs() / want < 0.015;
    assert!(close(param(&v, "latency"), 3e-6), "{v}");
    assert!(close(param(&v, "bandwidth"), 5000.0), "{v}");
    assert!(close(param(&v, "intra_latency"), 0.4e-6), "{v}");
    assert!(close(param(&v, "intra_bandwidth"), 20000.0), "{v}");
    assert!(v["params"].get("eager_limit").is_none(), "{v}");
    let fits = v["fits"].as_array().unwrap();
    assert_eq!(fits.len(), 2);
    assert_eq!(fits[0]["class"], "intra");
    // 8 ranks on 2 hosts: 2 × 4 × 3 intra pairs and 2 × 16 inter pairs per size.
    assert_eq!(fits[0]["samples"], 24 * 3);
    assert_eq!(fits[1]["samples"], 32 * 3);
    assert!(fits[1]["r2"].as_f64().unwrap() > 0.999, "{v}");
    assert_eq!(v["nodes"], serde_json::json!(["node0000", "node0001"]));

    // The text output names the same figures.
    let mut targs = vec!["replay", "calibrate"];
    targs.extend(files.iter().map(String::as_str));
    let (ok, text, stderr) = run(&targs);
    assert!(ok, "{stderr}");
    assert!(text.contains("inter") && text.contains("intra"), "{text}");
    assert!(text.contains("-p bandwidth="), "{text}");

    // The model inputs: the .cfg and the replaympi input read back.
    let cfg = std::fs::read_to_string(out.join("calibration.cfg")).unwrap();
    assert!(cfg.starts_with("#DIMEMAS_CONFIGURATION"), "{cfg}");
    assert!(cfg.contains("{\"\", 0, \"\", 2, "), "two nodes: {cfg}");
    let band = std::fs::read_to_string(out.join("calibration.bandela")).unwrap();
    assert!(band.contains("NUMBER_OF_HOSTS 2\n"), "{band}");
    assert!(band.contains("INTER_HOST_LATENCY 3\n"), "{band}");
    assert!(band.contains("INTER_HOST_BANDWIDTH_PEAKS 52"), "{band}");

    // The table: one row per class with the fitted values.
    let parts: Vec<PathBuf> = walk(&out.join("tables/replay_calibrations"));
    assert_eq!(parts.len(), 1, "{parts:?}");
    let f = std::fs::File::open(&parts[0]).unwrap();
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let b = r.map(|b| b.unwrap()).next().unwrap();
    assert_eq!(b.num_rows(), 2);
    let class = b.column_by_name("class").unwrap().as_string::<i32>();
    let bw = b
        .column_by_name("bandwidth_mb_s")
        .unwrap()
        .as_primitive::<Float64Type>();
    let sizes = b
        .column_by_name("sizes")
        .unwrap()
        .as_primitive::<Int64Type>();
    let eager = b.column_by_name("eager_limit").unwrap();
    assert_eq!(class.value(1), "inter");
    assert!(close(bw.value(1), 5000.0));
    assert_eq!(sizes.value(1), 3);
    assert!(eager.is_null(1));
    assert_eq!(
        b.column_by_name("nodes")
            .unwrap()
            .as_string::<i32>()
            .value(1),
        "node0000,node0001"
    );

    // A replay with the calibration predicts what its parameters given by
    // hand predict, and not what the default platform predicts.
    let trace = d.path().join("halo.dim");
    benchlake_replay::synth::Halo::new(8, 50)
        .write_dim(&trace)
        .unwrap();
    let t = trace.display().to_string();
    let predicted = |extra: &[&str]| {
        let mut a = vec!["replay", "dimemas", t.as_str(), "--json"];
        a.extend_from_slice(extra);
        let (ok, s, e) = run(&a);
        assert!(ok, "{e}");
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        v["predicted_time_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("{v}"))
    };
    let cal = predicted(&["--calibration", &out_s]);
    let by_hand: Vec<String> = ["latency", "bandwidth", "intra_latency", "intra_bandwidth"]
        .iter()
        .map(|k| format!("{k}={}", v["params"][k].as_str().unwrap()))
        .collect();
    let mut hand_args = Vec::new();
    for p in &by_hand {
        hand_args.push("-p");
        hand_args.push(p.as_str());
    }
    assert_eq!(cal, predicted(&hand_args));
    assert_ne!(cal, predicted(&[]));
    // -p wins over the calibration.
    assert_eq!(
        predicted(&[
            "--calibration",
            &out_s,
            "-p",
            "latency=1e-3",
            "-p",
            "bandwidth=1"
        ]),
        predicted(&[
            "-p",
            "latency=1e-3",
            "-p",
            "bandwidth=1",
            "-p",
            &by_hand[2],
            "-p",
            &by_hand[3]
        ])
    );
}

#[test]
fn one_size_and_unknown_nodes_are_refused_clearly() {
    let d = tempfile::tempdir().unwrap();
    let f = write(d.path(), 1024).display().to_string();
    let (ok, _, e) = run(&["replay", "calibrate", &f]);
    assert!(!ok);
    assert!(e.contains("one message size only (1024 bytes)"), "{e}");
    assert!(e.contains("measure at least two sizes"), "{e}");
    let g = write(d.path(), 1 << 20).display().to_string();
    let (ok, _, e) = run(&["replay", "calibrate", &f, &g, "--nodes", "n9,n10"]);
    assert!(!ok);
    assert!(
        e.contains("no measured pair between the nodes n10,n9"),
        "{e}"
    );
    // Only one host's pairs: intra-node only, no inter-node line.
    let (ok, s, e) = run(&[
        "replay",
        "calibrate",
        &f,
        &g,
        "--nodes",
        "node0001",
        "--json",
    ]);
    assert!(ok, "{e}");
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert!(v["params"].get("latency").is_none(), "{v}");
    assert!(v["params"].get("intra_latency").is_some(), "{v}");
    let (ok, _, e) = run(&["replay", "calibrate", "/nonexistent/x.sion"]);
    assert!(!ok);
    assert!(e.contains("neither a file nor a run id"), "{e}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn probe_files_at_two_sizes_calibrate_to_the_generators_bandwidths() {
    let d = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for size in ["8", "1048576"] {
        let f = d.path().join(format!("p{size}.sion")).display().to_string();
        let (ok, _, e) = run(&[
            "probe",
            "linktest",
            "--ranks",
            "32",
            "--ranks-per-host",
            "8",
            "--message-size",
            size,
            "--out",
            &f,
        ]);
        assert!(ok, "{e}");
        files.push(f);
    }
    let (ok, s, e) = run(&["replay", "calibrate", "--json", &files[0], &files[1]]);
    assert!(ok, "{e}");
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    // 10 GB/s between hosts and 40 GB/s within one, in MB/s of 2^20 B.
    let within = |k: &str, want: f64| (param(&v, k) - want).abs() / want < 0.005;
    assert!(within("bandwidth", 10e9 / 1048576.0), "{v}");
    assert!(within("intra_bandwidth", 40e9 / 1048576.0), "{v}");
    // The size-independent part: the generator's 2–12 µs (4× on the slow host).
    let l = param(&v, "latency");
    assert!((2e-6..48e-6).contains(&l), "{v}");
    let (ok, _, e) = run(&[
        "probe",
        "linktest",
        "--ranks",
        "4",
        "--ranks-per-host",
        "2",
        "--message-size",
        "0",
        "--out",
        &files[0],
    ]);
    assert!(!ok && e.contains("--message-size 0"), "{e}");
}
