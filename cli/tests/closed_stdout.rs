//! No command panics when its standard output is closed (`benchlake agents
//! list --json | head`): the process ends as a C program does when its
//! reader has gone, killed by SIGPIPE, with nothing on standard error (no
//! panic message, no backtrace, no `error: Broken pipe`). Both binaries, the
//! kinds of printing they have: `outln!`/`out!` (benchlake_core::stdout),
//! the replay's buffered table, the completion script, clap's help.
#![cfg(unix)]
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_benchlake");
const REPLAY: &str = env!("CARGO_BIN_EXE_benchlake-replay");
/// The signal's number on Linux and the BSDs.
const SIGPIPE: i32 = 13;

/// Runs `bin ARGS` with standard output a pipe whose reader has already
/// gone, so that its first write fails; the exit status and standard error.
fn closed_from_the_start(bin: &str, args: &[&str]) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let o = Command::new(bin)
        .args(args)
        .env_remove("BENCHLAKE_CONFIG")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    (o.status, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Runs `bin ARGS`, reads the first bytes of its standard output and closes
/// it, as `| head -c 100` does; the exit status and standard error.
fn closed_after_a_few_bytes(bin: &str, args: &[&str]) -> (ExitStatus, String) {
    let mut child = Command::new(bin)
        .args(args)
        .env_remove("BENCHLAKE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 100];
    stdout.read_exact(&mut first).expect("the first bytes");
    drop(stdout);
    let o = child.wait_with_output().expect("wait");
    (o.status, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Killed by SIGPIPE, quietly: not a panic (status 101), not an error.
fn ended_quietly(what: &str, (status, err): (ExitStatus, String)) {
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_ne!(status.code(), Some(101), "{what}: {err}");
    assert_eq!(status.signal(), Some(SIGPIPE), "{what}: {status:?}: {err}");
    assert!(err.is_empty(), "{what}: nothing on standard error: {err}");
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn no_command_panics_on_a_closed_standard_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small = dir.path().join("small.dim");
    let big = dir.path().join("big.dim");
    for (path, ranks) in [(&small, "4"), (&big, "1024")] {
        let o = Command::new(BIN)
            .args([
                "probe", "dimemas", "--ranks", ranks, "--iters", "1", "--out",
            ])
            .arg(path)
            .output()
            .expect("probe");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let cases: [(&str, &[&str]); 7] = [
        // `out!` of the user commands (they printed with `print!`).
        (BIN, &["tables", "docs"]),
        (BIN, &["config", "show", "coordinator"]),
        (BIN, &["completions", "bash"]),
        // The replay's table, a buffered writer, in both binaries.
        (BIN, &["replay", "dimemas", s(&small)]),
        (BIN, &["replay", "dimemas", s(&small), "--json"]),
        (REPLAY, &["dimemas", s(&small)]),
        (REPLAY, &["dimemas", s(&small), "--json"]),
    ];
    for (bin, args) in cases {
        ended_quietly(&format!("{bin} {args:?}"), closed_from_the_start(bin, args));
    }
    // Output larger than a pipe holds (a 1,024-rank table, about 110 kB),
    // its reader gone after the first 100 bytes.
    for (bin, args) in [
        (BIN, vec!["replay", "dimemas", s(&big), "--threads", "1"]),
        (REPLAY, vec!["dimemas", s(&big), "--threads", "1"]),
        (BIN, vec!["completions", "zsh"]),
    ] {
        ended_quietly(
            &format!("{bin} {args:?}"),
            closed_after_a_few_bytes(bin, &args),
        );
    }
    // clap's help and version: printed by clap, which ignores the error.
    for args in [
        &["--help"][..],
        &["replay", "dimemas", "--help"],
        &["--version"],
    ] {
        let (status, err) = closed_from_the_start(BIN, args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_ne!(status.code(), Some(101), "{args:?}: {err}");
    }
}
