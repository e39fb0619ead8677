//! `benchlake-replay` is `benchlake replay dimemas|bandela` in a smaller
//! process: the same flags, the same output to the byte (but for the time
//! the replay took), the same errors and exit status, the same tables with
//! `--out`. Its memory is measured by `bench/replay_speed.py`, not here.
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow::array::AsArray;
use arrow::datatypes::{Float64Type, Int32Type};

const BIN: &str = env!("CARGO_BIN_EXE_benchlake");
const REPLAY: &str = env!("CARGO_BIN_EXE_benchlake-replay");

/// Runs `bin ARGS`; exit status, stdout, stderr.
fn run(bin: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(bin).args(args).output().expect("run");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The output without the time the replay took (`… records replayed in
/// 0.007 s)` in the text, `"engine_wall_s"`-like timings do not appear in
/// `--json`).
fn untimed(out: &str) -> String {
    out.lines()
        .map(|l| match l.find(" records replayed in ") {
            Some(at) => l[..at].to_string(),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `benchlake replay MODEL ARGS` and `benchlake-replay MODEL ARGS`: both
/// exit alike and print the same, which is returned.
fn same(model: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut full = vec!["replay", model];
    full.extend(args);
    let mut lean = vec![model];
    lean.extend(args);
    let (code, out, err) = run(BIN, &full);
    let (lcode, lout, lerr) = run(REPLAY, &lean);
    assert_eq!(code, lcode, "exit status of {args:?}: {err} / {lerr}");
    assert_eq!(untimed(&out), untimed(&lout), "stdout of {args:?}");
    assert_eq!(err, lerr, "stderr of {args:?}");
    (code, out, err)
}

fn probe(args: &[&str], out: &Path) {
    let o = Command::new(BIN)
        .arg("probe")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("probe");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn the_replay_only_binary_prints_what_benchlake_replay_prints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dim = dir.path().join("halo.dim");
    probe(&["dimemas", "--ranks", "8", "--iters", "50"], &dim);
    for threads in ["1", "2"] {
        let (code, out, _) = same("dimemas", &[s(&dim), "--threads", threads]);
        assert_eq!(code, Some(0));
        // 8 ranks, each 50 iterations of the halo: a prediction, not an echo.
        assert!(
            out.starts_with("model dimemas: predicted execution time 0.0091"),
            "{out}"
        );
        assert_eq!(out.lines().count(), 2 + 8, "{out}");
        same("dimemas", &[s(&dim), "--threads", threads, "--json"]);
        same(
            "dimemas",
            &[s(&dim), "--threads", threads, "-p", "latency=1e-4"],
        );
    }

    let band = dir.path().join("band");
    probe(&["bandela", "--ranks", "4", "--iters", "20"], &band);
    let input = band.join("replaympi.input");
    let (code, out, _) = same("bandela", &[s(&band), "--input", s(&input)]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("model bandela: predicted execution time"),
        "{out}"
    );

    // --help and --version name the binary; the flags are the same.
    let (_, help, _) = run(REPLAY, &["dimemas", "--help"]);
    let (_, full_help, _) = run(BIN, &["replay", "dimemas", "--help"]);
    // Each flag's name (`--threads <THREADS>`), and its text but for
    // `--log`, whose default differs (`benchlake` also runs services).
    let flags = |h: &str| {
        h.lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('-') && !l.starts_with("--log"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    let full_flags = flags(&full_help);
    for f in flags(&help) {
        assert!(full_flags.contains(&f), "{f} missing from benchlake's help");
    }
    assert!(help.contains("--threads") && help.contains("--calibration"));
    let (code, v, _) = run(REPLAY, &["--version"]);
    assert_eq!(code, Some(0));
    assert!(v.starts_with("benchlake-replay "), "{v}");
}

#[test]
fn the_replay_only_binary_fails_as_benchlake_replay_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dim = dir.path().join("halo.dim");
    probe(&["dimemas", "--ranks", "4", "--iters", "20"], &dim);
    // A send of task 2, in the middle of its stream, to no integer task.
    let text = std::fs::read_to_string(&dim).expect("read");
    let at = text.find("\n2:2:0:").expect("a send of task 2") + 1;
    let line = text[..at].matches('\n').count() + 1;
    let broken = format!("{}2:2:0:q{}", &text[..at], &text[at + 7..]);
    let bad = dir.path().join("bad.dim");
    std::fs::write(&bad, broken).expect("write");
    for threads in ["1", "2"] {
        let (code, out, err) = same("dimemas", &[s(&bad), "--threads", threads]);
        assert_eq!(code, Some(1));
        assert!(out.is_empty(), "nothing printed for a broken trace: {out}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains("bad.dim"), "the file is named: {err}");
        assert!(
            err.contains(&format!("send.dst_task at line {line}, column 7")),
            "the field and its place are named: {err}"
        );
    }
    let (code, _, err) = same("dimemas", &[s(&dir.path().join("none.dim"))]);
    assert_eq!(code, Some(1));
    assert!(err.contains("none.dim"), "{err}");
    let (code, _, err) = same("dimemas", &[s(&dim), "-p", "latency"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("'latency' is not KEY=VALUE"), "{err}");
    // A usage error is clap's, status 2, from both.
    let (code, _, _) = run(REPLAY, &["dimemas", s(&dim), "--threads", "0"]);
    assert_eq!(code, Some(2));
}

/// `benchlake replay dimemas TRACE --config FILE.cfg`, as docs/replay.md
/// has it: the Dimemas configuration is the replay's (not read as
/// benchlake's own configuration file, which the global `--config` names),
/// and both binaries print the same prediction, Dimemas 5.5's for that
/// configuration (`shared/data/replay/dimemas/reference.json`: halo_np4
/// under c2_lat50us, 0.071142202 s; 0.064352612 s under the built-in c1).
#[test]
fn a_dimemas_configuration_is_the_replays_in_both_binaries() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/replay/dimemas");
    let dim = data.join("traces/halo_np4.dim");
    let cfg = data.join("configs/c2_lat50us.cfg");
    let eq = format!("--config={}", s(&cfg));
    for args in [
        vec![s(&dim), "--config", s(&cfg)],
        vec!["--config", s(&cfg), s(&dim)],
        vec![s(&dim), &eq, "--threads", "1"],
    ] {
        let (code, out, err) = same("dimemas", &args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(
            out.starts_with("model dimemas: predicted execution time 0.07114"),
            "{args:?}: {out}"
        );
    }
    let (code, out, err) = same("dimemas", &[s(&dim)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("model dimemas: predicted execution time 0.06435"),
        "{out}"
    );
    // benchlake's own configuration file, before the subcommand, beside it.
    let dir = tempfile::tempdir().expect("tempdir");
    let site = dir.path().join("site.toml");
    std::fs::write(&site, "log = \"warn\"\n").expect("write");
    let (code, out, err) = run(
        BIN,
        &[
            "--config",
            s(&site),
            "replay",
            "dimemas",
            s(&dim),
            "--config",
            s(&cfg),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("model dimemas: predicted execution time 0.07114"),
        "{out}"
    );
}

/// Every Parquet file of `table` under `lake`.
fn table(lake: &Path, table: &str) -> Vec<arrow::array::RecordBatch> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut todo = vec![lake.join("tables").join(table)];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                files.push(p);
            }
        }
    }
    assert_eq!(files.len(), 1, "{table}: {files:?}");
    let f = std::fs::File::open(&files[0]).expect("open");
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .expect("parquet")
        .build()
        .expect("reader")
        .map(|b| b.expect("batch"))
        .collect()
}

#[test]
fn the_replay_only_binary_writes_the_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dim = dir.path().join("halo.dim");
    probe(&["dimemas", "--ranks", "8", "--iters", "50"], &dim);
    let lake = dir.path().join("lake");
    let (code, _, err) = run(REPLAY, &["dimemas", s(&dim), "--out", s(&lake), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("replay-outputs/summary.txt"), "{err}");
    let (_, json, _) = run(REPLAY, &["dimemas", s(&dim), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    let predicted = v["predicted_time_s"].as_f64().expect("predicted_time_s");

    let replays = table(&lake, "replays");
    assert_eq!(replays[0].num_rows(), 1);
    let p = replays[0]
        .column_by_name("predicted_time_s")
        .expect("column")
        .as_primitive::<Float64Type>();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    assert!(close(p.value(0), predicted), "{} {predicted}", p.value(0));
    let ranks = table(&lake, "replay_ranks");
    let rank = ranks[0]
        .column_by_name("rank")
        .expect("rank")
        .as_primitive::<Int32Type>();
    assert_eq!(rank.len(), 8);
    let total = ranks[0]
        .column_by_name("total_s")
        .expect("total_s")
        .as_primitive::<Float64Type>();
    for (i, r) in v["ranks"].as_array().expect("ranks").iter().enumerate() {
        assert_eq!(rank.value(i), r["rank"].as_i64().expect("rank") as i32);
        let want = r["total_s"].as_f64().expect("total_s");
        assert!(close(total.value(i), want), "{} {want}", total.value(i));
    }
}
