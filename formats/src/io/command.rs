//! Command lines for real IOR and mdtest runs, built from benchlake's
//! snake_case parameters (the names pio uses too), so that an agent's runner
//! produces exactly the files the `ior` / `mdtest` ingest kinds read.
//!
//! The result is an argument vector (never a shell string; a value starting
//! with `-` is refused so it cannot become a flag), extra environment
//! variables (MPI-IO hints as `IOR_HINT__MPI__<key>`, which IOR rank 0 reads
//! and broadcasts), the output files to collect and the files to delete
//! first (IOR and mdtest *append* to their per-rank CSVs). Parameters with no
//! IOR equivalent (`header_bytes`) are returned as unsupported, not dropped
//! silently.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{FormatError, Position, Result};

/// A tool invocation ready for a launcher (`mpirun -np N <exe> <args>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCommand {
    pub exe: String,
    pub args: Vec<String>,
    /// Extra environment for the tool (rank 0's is enough for IOR hints).
    pub env: Vec<(String, String)>,
    /// Files to upload and ingest after the run (stdout is captured by the
    /// runner into `stdout_file` when set).
    pub outputs: Vec<PathBuf>,
    /// Where the runner should write the tool's stdout (mdtest's text output).
    pub stdout_file: Option<PathBuf>,
    /// Files to delete before the run (appended-to CSVs).
    pub remove_before: Vec<PathBuf>,
    /// Parameters that the tool cannot honour (recorded with the run).
    pub unsupported: Vec<String>,
}

/// MPI-IO hint keys accepted as parameters under their own names (Ross 6.5);
/// any other hint can be given as `hint_<key>`.
pub const MPIIO_HINTS: &[&str] = &[
    "cb_nodes",
    "cb_buffer_size",
    "cb_config_list",
    "romio_cb_read",
    "romio_cb_write",
    "romio_no_indep_rw",
    "romio_ds_read",
    "romio_ds_write",
    "ind_rd_buffer_size",
    "ind_wr_buffer_size",
    "striping_factor",
    "striping_unit",
    "start_iodevice",
    "direct_read",
    "direct_write",
    "pfs_svr_buf",
];

fn bad(name: &str, msg: impl Into<String>) -> FormatError {
    FormatError::malformed("parameters", name, Position::None, msg)
}

fn value(name: &str, v: &str) -> Result<String> {
    if v.is_empty() || v.starts_with('-') || v.contains('\0') {
        return Err(bad(name, format!("'{v}' is not an allowed value")));
    }
    Ok(v.to_string())
}

fn size(name: &str, v: &str) -> Result<String> {
    let t = v.trim();
    let digits = t.trim_end_matches(['k', 'm', 'g', 't', 'K', 'M', 'G', 'T']);
    let suffixes = t.len() - digits.len();
    if digits.is_empty() || suffixes > 1 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            name,
            format!("'{v}' is not a size (digits with an optional k/m/g/t)"),
        ));
    }
    Ok(t.to_string())
}

fn uint(name: &str, v: &str) -> Result<String> {
    v.trim()
        .parse::<u64>()
        .map(|n| n.to_string())
        .map_err(|_| bad(name, format!("'{v}' is not a non-negative integer")))
}

fn flag(name: &str, v: &str) -> Result<bool> {
    match v.trim() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(bad(name, format!("'{v}' is not 0/1"))),
    }
}

/// The IOR command for `params`, writing its JSON summary and per-rank CSV
/// into `out_dir`. Reads and writes by default (`write=0`/`read=0` turn a
/// phase off).
pub fn ior_command(
    exe: &str,
    params: &BTreeMap<String, String>,
    out_dir: &Path,
) -> Result<ToolCommand> {
    let mut args: Vec<String> = Vec::new();
    let mut env = Vec::new();
    let mut unsupported = Vec::new();
    let (mut write, mut read) = (true, true);
    for (k, v) in params {
        let k = k.as_str();
        let opt = |flag: &str, val: String| [flag.to_string(), val];
        match k {
            "api" => args.extend(opt("-a", value(k, v)?)),
            "filename" => args.extend(opt("-o", value(k, v)?)),
            "block_size" => args.extend(opt("-b", size(k, v)?)),
            "transfer_size" => args.extend(opt("-t", size(k, v)?)),
            "segments" => args.extend(opt("-s", uint(k, v)?)),
            "iterations" => args.extend(opt("-i", uint(k, v)?)),
            "reorder_shift" => args.extend(opt("-Q", uint(k, v)?)),
            "reorder_random_seed" => args.extend(opt("-X", uint(k, v)?)),
            "stonewall_s" => args.extend(opt("-D", uint(k, v)?)),
            "write" => write = flag(k, v)?,
            "read" => read = flag(k, v)?,
            "file_per_proc" | "collective" | "fsync" | "reorder" | "random_offset"
            | "reorder_random" | "barriers" | "keep_file" | "check_read" | "check_write"
            | "use_existing" => {
                if flag(k, v)? {
                    let f = match k {
                        "file_per_proc" => "-F",
                        "collective" => "-c",
                        "fsync" => "-e",
                        "reorder" => "-C",
                        "random_offset" => "-z",
                        "reorder_random" => "-Z",
                        "barriers" => "-g",
                        "keep_file" => "-k",
                        "check_read" => "-R",
                        "check_write" => "-W",
                        _ => "-E",
                    };
                    args.push(f.into());
                }
            }
            "header_bytes" | "padding" | "min_transfer_size" | "pattern" | "read_cache"
            | "verify" => {
                unsupported.push(format!("{k}={v}"));
            }
            _ => {
                let hint = k
                    .strip_prefix("hint_")
                    .or_else(|| MPIIO_HINTS.contains(&k).then_some(k));
                match hint {
                    Some(h)
                        if !h.is_empty()
                            && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
                    {
                        env.push((format!("IOR_HINT__MPI__{h}"), value(k, v)?));
                    }
                    _ => return Err(bad(k, "unknown IOR parameter")),
                }
            }
        }
    }
    if !write && !read {
        return Err(bad("write/read", "at least one phase must run"));
    }
    if write {
        args.push("-w".into());
    }
    if read {
        args.push("-r".into());
    }
    let summary = out_dir.join("ior-summary.json");
    let ranks = out_dir.join("ior-ranks.csv");
    args.extend([
        "-O".to_string(),
        "summaryFormat=JSON".into(),
        "-O".into(),
        format!("summaryFile={}", summary.display()),
        "-O".into(),
        format!("saveRankPerformanceDetailsCSV={}", ranks.display()),
    ]);
    Ok(ToolCommand {
        exe: exe.to_string(),
        args,
        env,
        outputs: vec![summary, ranks.clone()],
        stdout_file: None,
        remove_before: vec![ranks],
        unsupported,
    })
}

/// The mdtest command for `params`; its stdout is the text output to ingest.
pub fn mdtest_command(
    exe: &str,
    params: &BTreeMap<String, String>,
    out_dir: &Path,
) -> Result<ToolCommand> {
    let mut args: Vec<String> = Vec::new();
    for (k, v) in params {
        let k = k.as_str();
        let opt = |flag: &str, val: String| [flag.to_string(), val];
        match k {
            "api" => args.extend(opt("-a", value(k, v)?)),
            "dir" => args.extend(opt("-d", value(k, v)?)),
            "items" => args.extend(opt("-n", uint(k, v)?)),
            "iterations" => args.extend(opt("-i", uint(k, v)?)),
            "write_bytes" => args.extend(opt("-w", size(k, v)?)),
            "read_bytes" => args.extend(opt("-e", size(k, v)?)),
            "depth" => args.extend(opt("-z", uint(k, v)?)),
            "branch" => args.extend(opt("-b", uint(k, v)?)),
            "stonewall_s" => args.extend(opt("-W", uint(k, v)?)),
            "tasks_stride" => args.extend(opt("-N", uint(k, v)?)),
            "unique_dir" | "files_only" | "dirs_only" | "leaf_only" | "shared_file"
            | "create_only" | "stat_only" | "read_only" | "remove_only" | "sync_file"
            | "call_sync" => {
                if flag(k, v)? {
                    args.push(
                        match k {
                            "unique_dir" => "-u",
                            "files_only" => "-F",
                            "dirs_only" => "-D",
                            "leaf_only" => "-L",
                            "shared_file" => "-S",
                            "create_only" => "-C",
                            "stat_only" => "-T",
                            "read_only" => "-E",
                            "remove_only" => "-r",
                            "sync_file" => "-y",
                            _ => "-Y",
                        }
                        .into(),
                    );
                }
            }
            _ => return Err(bad(k, "unknown mdtest parameter")),
        }
    }
    let ranks = out_dir.join("mdtest-ranks.csv");
    let text = out_dir.join("mdtest.txt");
    args.push(format!("--saveRankPerformanceDetails={}", ranks.display()));
    Ok(ToolCommand {
        exe: exe.to_string(),
        args,
        env: Vec::new(),
        outputs: vec![text.clone(), ranks.clone()],
        stdout_file: Some(text),
        remove_before: vec![ranks],
        unsupported: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn ior_flags_hints_and_outputs() {
        let c = ior_command(
            "ior",
            &p(&[
                ("api", "MPIIO"),
                ("block_size", "4m"),
                ("transfer_size", "256k"),
                ("segments", "1"),
                ("iterations", "3"),
                ("collective", "1"),
                ("fsync", "1"),
                ("reorder", "1"),
                ("filename", "/scratch/t"),
                ("striping_factor", "4"),
                ("hint_romio_lustre_co_ratio", "2"),
                ("header_bytes", "512"),
            ]),
            Path::new("/out"),
        )
        .unwrap();
        let a = c.args.join(" ");
        assert_eq!(
            a,
            "-a MPIIO -b 4m -c -o /scratch/t -e -i 3 -C -s 1 -t 256k -w -r -O summaryFormat=JSON \
             -O summaryFile=/out/ior-summary.json -O saveRankPerformanceDetailsCSV=/out/ior-ranks.csv"
        );
        assert_eq!(
            c.env,
            [
                (
                    "IOR_HINT__MPI__romio_lustre_co_ratio".to_string(),
                    "2".to_string()
                ),
                (
                    "IOR_HINT__MPI__striping_factor".to_string(),
                    "4".to_string()
                )
            ]
        );
        assert_eq!(c.unsupported, ["header_bytes=512"]);
        assert_eq!(c.remove_before, [PathBuf::from("/out/ior-ranks.csv")]);
    }

    #[test]
    fn refuses_flag_injection_and_unknowns() {
        for (k, v) in [
            ("filename", "-vvv"),
            ("block_size", "4x"),
            ("segments", "-1"),
            ("nope", "1"),
            ("hint_a b", "1"),
            ("fsync", "maybe"),
        ] {
            assert!(
                ior_command("ior", &p(&[(k, v)]), Path::new("/o")).is_err(),
                "{k}={v}"
            );
        }
        assert!(ior_command("ior", &p(&[("write", "0"), ("read", "0")]), Path::new("/o")).is_err());
    }

    #[test]
    fn mdtest_easy_like() {
        let c = mdtest_command(
            "mdtest",
            &p(&[
                ("items", "2000"),
                ("iterations", "2"),
                ("unique_dir", "1"),
                ("leaf_only", "1"),
                ("files_only", "1"),
                ("tasks_stride", "1"),
                ("dir", "/scratch/md"),
            ]),
            Path::new("/out"),
        )
        .unwrap();
        assert_eq!(
            c.args.join(" "),
            "-d /scratch/md -F -n 2000 -i 2 -L -N 1 -u --saveRankPerformanceDetails=/out/mdtest-ranks.csv"
        );
        assert_eq!(c.stdout_file, Some(PathBuf::from("/out/mdtest.txt")));
        assert!(mdtest_command("mdtest", &p(&[("items", "x")]), Path::new("/o")).is_err());
    }
}
