//! A Bandela replay holds one open file per rank. It raises the process's
//! soft limit on open files to what it needs (up to the hard limit), so a
//! trace with more ranks than the soft limit replays; where even the hard
//! limit is too low,
//! the error names the file, the rank count and the limit, and says how to
//! raise it (instead of failing on the 1,013th file of 1,024 with a bare
//! "Too many open files").
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_benchlake");

/// Runs `benchlake ARGS` under `ulimit ULIMIT` (a shell sets the limit,
/// then becomes benchlake); exit status, stdout, stderr.
fn under_ulimit(ulimit: &str, args: &[&str]) -> (bool, String, String) {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit {ulimit} && exec \"$0\" \"$@\""))
        .arg(BIN)
        .args(args)
        .output()
        .expect("run sh");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The prediction lines of a replay's output, without the time the replay
/// took (`… (5400 records replayed in 0.007 s)`).
fn prediction(out: &str) -> Vec<&str> {
    out.lines()
        .map(|l| match l.find(" records replayed in ") {
            Some(at) => l[..at].rsplit_once(" (").map_or(l, |(head, _)| head),
            None => l,
        })
        .collect()
}

#[test]
fn a_trace_with_more_ranks_than_the_soft_limit_replays_and_the_hard_limit_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("halo");
    let o = Command::new(BIN)
        .args([
            "probe", "bandela", "--ranks", "300", "--iters", "2", "--out",
        ])
        .arg(&trace)
        .output()
        .expect("probe");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = trace.to_str().expect("utf-8 path");
    let input = Path::new(t).join("replaympi.input");
    let input = input.to_str().expect("utf-8 path");
    let args = ["replay", "bandela", t, "--input", input];

    let (ok, want, err) = under_ulimit("-Sn unlimited 2>/dev/null || true", &args);
    assert!(ok, "{err}");
    assert!(
        prediction(&want).len() > 300,
        "one line per rank at least:\n{want}"
    );
    // 300 ranks × 2 iterations of the probe's halo.
    assert!(
        prediction(&want).contains(&"model bandela: predicted execution time 0.000413440 s"),
        "{want}"
    );

    // Soft limit 100 (hard left as it is): raised at start, same prediction.
    for threads in ["1", "2"] {
        let mut a = args.to_vec();
        a.extend(["--threads", threads]);
        let (ok, out, err) = under_ulimit("-Sn 100", &a);
        assert!(ok, "threads {threads}: {err}");
        assert_eq!(prediction(&out), prediction(&want), "threads {threads}");
    }

    // Soft and hard limit 100: a clear error, the cause printed once.
    let (ok, out, err) = under_ulimit("-n 100", &args);
    assert!(!ok, "{out}");
    let err = err.trim();
    assert!(err.starts_with(&format!("error: {t}/bandela.")), "{err}");
    for part in [
        "the replay reads the trace's 300 rank files side by side",
        "this process may have 100 open files (`ulimit -n`; hard limit 100)",
        "raise the limit",
    ] {
        assert!(err.contains(part), "missing '{part}' in: {err}");
    }
    assert_eq!(err.matches("Too many open files").count(), 1, "{err}");
}
