//! The benchlake tracer: a PMPI interposition library written in C (`c/*.c`, built
//! by `build.rs` with `mpicc`) that records every rank's MPI calls of a real run and
//! writes, at `MPI_Finalize`, into `$BENCHLAKE_TRACE_DIR`: the Bandela text trace
//! (`bandela.<rank>.txt`), a Dimemas trace (`trace.dim`), the alltoallv count and
//! timing files of the collective profiler (format version 9) and a
//! Bandelalight-like statistics file (`bandela_stats`). See docs/tracer.md.
//!
//! This crate owns the C sources, finds the built library ([`library_path`]) and
//! reads the statistics file ([`stats`]).
use std::path::PathBuf;

pub mod stats;

/// File name of the shared library.
pub const LIBRARY_NAME: &str = "libbenchlake_tracer.so";

/// Where `build.rs` put the library (`$OUT_DIR`), `None` when `mpicc` was missing at
/// build time.
pub fn built_path() -> Option<PathBuf> {
    let p = env!("BENCHLAKE_TRACER_BUILT");
    (!p.is_empty()).then(|| PathBuf::from(p))
}

/// Where an installed tree keeps the library, relative to the directory of the
/// `benchlake` executable: `PREFIX/bin/benchlake` and
/// `PREFIX/lib/benchlake/libbenchlake_tracer.so` (deploy/README.md).
pub const INSTALL_DIR_FROM_BIN: &str = "../lib/benchlake";

/// The search path for the library, in order: `$BENCHLAKE_TRACER_LIB`; the
/// install layout ([`INSTALL_DIR_FROM_BIN`]); beside the executable (the build
/// puts a copy there); its parent directory (test binaries in `deps/`); the
/// build output. This is the one lookup: the agent preloads what it finds and
/// `up --demo` checks the same.
pub fn search_path() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("BENCHLAKE_TRACER_LIB").filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
        return out;
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.to_path_buf()))
    {
        out.push(dir.join(INSTALL_DIR_FROM_BIN).join(LIBRARY_NAME));
        out.push(dir.join(LIBRARY_NAME));
        if let Some(up) = dir.parent() {
            out.push(up.join(LIBRARY_NAME));
        }
    }
    if let Some(b) = built_path() {
        out.push(b);
    }
    out
}

/// The library to preload: the first file of [`search_path`] that exists;
/// `None` when none does (`$BENCHLAKE_TRACER_LIB` names a missing file, or the
/// tracer was built without `mpicc` and none was installed).
pub fn library_path() -> Option<PathBuf> {
    search_path().into_iter().find(|p| p.is_file())
}

/// Names of the files the tracer writes into its output directory, grouped by the
/// ingest kind that reads them (`bandela`, `dimemas`, `counts`, or the stored-only
/// `tracer_stats` and `tracer_ranks`; the `bandela` ingest reads the rank map beside
/// the rank files).
pub fn classify_output(file_name: &str) -> Option<&'static str> {
    if let Some(rest) = file_name.strip_prefix("bandela.") {
        let num = rest.strip_suffix(".txt").unwrap_or(rest);
        return num.parse::<u32>().is_ok().then_some("bandela");
    }
    if file_name.ends_with(".dim") {
        return Some("dimemas");
    }
    if file_name == "bandela_stats" {
        return Some("tracer_stats");
    }
    if file_name == "bandela_ranks" {
        return Some("tracer_ranks");
    }
    let counts = ["send-counters.", "recv-counters.", "alltoallv_"];
    if counts.iter().any(|p| file_name.starts_with(p)) {
        return Some("counts");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_outputs() {
        assert_eq!(classify_output("bandela.3.txt"), Some("bandela"));
        assert_eq!(classify_output("bandela.12"), Some("bandela"));
        assert_eq!(classify_output("bandela_heartbeat.0"), None);
        assert_eq!(classify_output("trace.dim"), Some("dimemas"));
        assert_eq!(classify_output("bandela_stats"), Some("tracer_stats"));
        assert_eq!(classify_output("bandela_ranks"), Some("tracer_ranks"));
        assert_eq!(
            classify_output("send-counters.job0.rank0.txt"),
            Some("counts")
        );
        assert_eq!(
            classify_output("alltoallv_execution_times.rank0_comm0_job0.md"),
            Some("counts")
        );
        assert_eq!(classify_output(".bl_log.0"), None);
    }
}
