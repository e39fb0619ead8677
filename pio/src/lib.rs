//! pio: benchlake's parallel I/O benchmark, implementing the Parallel I/O
//! Benchmarking Consortium rules (access patterns, timing, reporting; see
//! docs/io.md). Library crate: the CLI mounts [`main_with_args`] as
//! `benchlake pio ...`; programs call [`run`] / [`run_single`].
//!
//! Modules: [`params`] (parameters, CLI over environment), [`layout`] (where
//! each transfer goes), [`data`] (the verification pattern), [`fsio`] (the
//! timed POSIX calls and cache control), [`comm`] (TCP rendezvous, barrier,
//! gather), [`launch`] (mpirun/srun/fork), [`run`] (one process's run and the
//! aggregation). The result file format lives in
//! `benchlake_formats::io::pio`, read back by the `pio` ingest kind.
// Standard output through `out!`/`outln!` (benchlake_core::stdout): no panic
// when it is closed (`| head`).
#![warn(clippy::print_stdout)]
pub mod comm;
pub mod data;
pub mod error;
pub mod fsio;
pub mod launch;
pub mod layout;
pub mod params;
pub mod run;

use benchlake_core::out;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

pub use benchlake_formats::io::pio::PioResult;
pub use error::{PioError, Result};
pub use params::Config;

/// Exit code when the run completed but read-back verification failed.
pub const EXIT_VERIFY_FAILED: u8 = 2;

/// Runs pio in this process alone (one client) and returns the result.
pub fn run_single(cfg: &Config) -> Result<PioResult> {
    let mut comm = comm::Comm::single();
    run::run_rank(cfg, &mut comm, "single")?
        .ok_or_else(|| PioError::Result("rank 0 produced no result".into()))
}

/// Runs this process as `rank` of `size` (the others run the same call), meeting
/// through the rendezvous file next to `cfg.filename`. Rank 0 returns the result.
pub fn run(
    cfg: &Config,
    rank: u32,
    size: u32,
    job: &str,
    launcher: &str,
) -> Result<Option<PioResult>> {
    let advertise = cfg.rendezvous_host.clone().unwrap_or_else(|| {
        if launcher == "fork" {
            "127.0.0.1".into()
        } else {
            comm::hostname()
        }
    });
    let file = comm::rendezvous_path(&cfg.filename, job);
    let mut c = comm::Comm::connect(
        rank,
        size,
        job,
        &file,
        &advertise,
        Duration::from_secs(cfg.timeout_s),
    )?;
    run::run_rank(cfg, &mut c, launcher)
}

/// Writes `r` to `path` atomically (temporary file, then rename).
pub fn write_result(r: &PioResult, path: &Path) -> Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| PioError::io("create dir", d, e))?;
    }
    let json = serde_json::to_vec_pretty(r).map_err(|e| PioError::Result(e.to_string()))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json).map_err(|e| PioError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| PioError::io("rename", path, e))
}

/// A short human summary (what rank 0 prints).
pub fn summary_text(r: &PioResult) -> String {
    let mut s = format!(
        "pio {}: {} clients, {} pattern, {}, {} iteration(s), read cache: {}, reorder shift {}\n",
        r.pio_version,
        r.num_tasks,
        r.pattern,
        if r.file_per_proc {
            "file per process"
        } else {
            "shared file"
        },
        r.iterations,
        r.cache_mode,
        r.reorder_shift
    );
    s.push_str(
        "access  iter  bw(MiB/s)      IOPS   open(s)  wr/rd(s)  close(s)  total(s)  proc min/max(s)\n",
    );
    for p in &r.phases {
        let (lo, hi) = p.task_time_s.map_or((0.0, 0.0), |t| (t.min, t.max));
        s.push_str(&format!(
            "{:<6} {:>5} {:>10.2} {:>9.1} {:>9.6} {:>9.6} {:>9.6} {:>9.6}  {lo:.6}/{hi:.6}\n",
            p.operation,
            p.iteration,
            p.bw_mib_s,
            p.iops,
            p.open_time_s,
            p.xfer_time_s,
            p.close_time_s,
            p.total_time_s
        ));
    }
    for m in &r.summary {
        s.push_str(&format!(
            "{} MiB/s: max {:.2} min {:.2} mean {:.2} dev {:.2}\n",
            m.operation, m.bw_mib_s.max, m.bw_mib_s.min, m.bw_mib_s.mean, m.bw_mib_s.stddev
        ));
    }
    s.push_str(&format!(
        "verification: {} ({} bad bytes)\n",
        r.verification.status, r.verification.errors
    ));
    s
}

/// The command-line entry point, mounted by the CLI as `benchlake pio ARGS`.
/// `args` are pio's own arguments (without the program or subcommand name).
/// Exit codes: 0 success, 1 error, 2 verification failed (result still written).
pub fn main_with_args(args: Vec<String>) -> ExitCode {
    match main_inner(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("pio: {e}");
            ExitCode::from(1)
        }
    }
}

fn main_inner(args: Vec<String>) -> Result<u8> {
    let cli = params::parse_cli(&args)?;
    if cli.contains_key("help") {
        out!("{}", params::usage());
        return Ok(0);
    }
    let cfg = params::resolve(&cli, |k| std::env::var(k).ok())?;
    let launch = launch::detect(cfg.np, cfg.job_id.as_deref(), |k| std::env::var(k).ok())?;
    let result = match launch {
        launch::Launch::Fork { np } => {
            // Re-run this very command line (e.g. `benchlake pio ARGS`) as N ranks.
            let exe = std::env::current_exe().map_err(|e| PioError::Launch(e.to_string()))?;
            let argv: Vec<String> = std::env::args().skip(1).collect();
            let child_args = if argv.ends_with(&args) {
                argv
            } else {
                args.clone()
            };
            let code = launch::fork_and_wait(np, &exe, &child_args, Duration::from_secs(5))?;
            return Ok(u8::try_from(code).unwrap_or(1));
        }
        launch::Launch::Single => Some(run_single(&cfg)?),
        launch::Launch::Rank {
            rank,
            size,
            job,
            launcher,
        } => run(&cfg, rank, size, &job, &launcher)?,
    };
    let Some(r) = result else { return Ok(0) };
    write_result(&r, &cfg.output)?;
    out!("{}", summary_text(&r));
    Ok(if r.verification.status == "FAIL" {
        EXIT_VERIFY_FAILED
    } else {
        0
    })
}
