//! The one helper of the Rust tests for "cannot run what I test"
//! (docs/testing.md, "Skips and CI"). Included by path by the test crates
//! that need it (`#[path = "…/tests/support/unavailable.rs"] mod unavailable;`),
//! so it costs no dependency and no rebuild of a product crate.
//!
//! Under `CI=true` (`CI` set and not empty, as `.ci/run` sets it) a test that
//! cannot run fails: a green CI means the test ran.
//! Elsewhere the test is skipped out loud: `SKIPPED: test: reason` on stderr,
//! and the same line appended to the file `BENCHLAKE_SKIP_LOG` names (set by
//! scripts/test.sh, whose closing total counts those tests as skipped, not
//! passed). The caller returns right after the call.
#![allow(dead_code)]

use std::io::Write;

/// Says that `test` cannot run here because of `reason`: panics with
/// "cannot run: REASON" under `CI=true`, otherwise reports the skip and
/// returns (the caller then returns without testing anything).
#[track_caller]
pub fn unavailable(test: &str, reason: &str) {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("cannot run: {reason}");
    }
    let line = format!("SKIPPED: {test}: {reason}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("BENCHLAKE_SKIP_LOG").filter(|p| !p.is_empty()) {
        let logged = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = logged {
            eprintln!(
                "cannot append to BENCHLAKE_SKIP_LOG {}: {e}",
                path.to_string_lossy()
            );
        }
    }
}

/// The running test's name: libtest names each test's thread after it.
pub fn this_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("an unnamed test")
        .to_string()
}
