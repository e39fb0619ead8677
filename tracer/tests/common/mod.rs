//! Shared helpers of the tracer tests: build a test program with `mpicc`, run it
//! with `mpirun --oversubscribe -np N` under `LD_PRELOAD` of the tracer, and read
//! the Bandela and Dimemas traces back with benchlake-formats.
#![allow(dead_code)]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use benchlake_formats::bandela::{BRecord, Kernel, RankTrace};
use benchlake_formats::dimemas::{DimRecord, DimTrace};

#[path = "../../../tests/support/unavailable.rs"]
mod unavailable;
pub use unavailable::{this_test, unavailable};

/// The tracer library, or `None` when it was not built: the running test is
/// then [`unavailable`] (a failure under `CI=true`, a logged skip elsewhere)
/// and returns.
pub fn lib() -> Option<PathBuf> {
    let l = benchlake_tracer::library_path();
    if l.is_none() {
        unavailable(
            &this_test(),
            "the tracer library was not built (mpicc missing at build time; install openmpi-bin and libopenmpi-dev)",
        );
    }
    l
}

/// Whether `mpifort` is on `PATH`; when not, the running test is
/// [`unavailable`] and returns.
pub fn mpifort() -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("mpifort").is_file()));
    if !found {
        unavailable(
            &this_test(),
            "mpifort is not installed (install gfortran with Open MPI's libopenmpi-dev)",
        );
    }
    found
}

/// Compiles `tests/programs/<name>` (C with mpicc, Fortran with mpifort) into `dir`.
pub fn build(name: &str, dir: &Path) -> PathBuf {
    build_with(name, dir, &[])
}

/// [`build`] with extra compiler flags (e.g. `-DBL_F08` for a `.F90` program
/// that the C preprocessor switches to `use mpi_f08`).
pub fn build_with(name: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name);
    let exe = dir.join(name.split('.').next().unwrap_or(name));
    let fortran = name.to_ascii_lowercase().ends_with(".f90");
    let cc = if fortran { "mpifort" } else { "mpicc" };
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("c");
    let mut cmd = Command::new(cc);
    cmd.arg("-O1")
        .arg("-I")
        .arg(&inc)
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src);
    if fortran {
        // Fortran has no weak declarations: the Bandela controls come from linking
        // the tracer itself (as the manual's relink with libbandela.so)
        if let Some(l) = benchlake_tracer::library_path() {
            cmd.arg(&l);
            if let Some(d) = l.parent() {
                cmd.arg(format!("-Wl,-rpath,{}", d.display()));
            }
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe` on `np` ranks with the tracer preloaded, writing into `trace_dir`.
pub fn run(lib: &Path, exe: &Path, np: usize, trace_dir: &Path, env: &[(&str, &str)]) -> String {
    // A session directory of this run's own: concurrent mpiruns sharing
    // /tmp/ompi.HOST.UID remove it under each other ("A call to mkdir was
    // unable to create the desired directory", orte_init failed).
    let session = trace_dir.with_extension("ompi");
    std::fs::create_dir_all(&session).expect("mpirun session directory");
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "-np", &np.to_string()])
        .env("OMPI_MCA_orte_tmpdir_base", &session)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self,vader")
        .env("LD_PRELOAD", lib)
        .env("BENCHLAKE_TRACE_DIR", trace_dir)
        .args(["-x", "LD_PRELOAD", "-x", "BENCHLAKE_TRACE_DIR"]);
    for (k, v) in env {
        c.env(k, v).args(["-x", k]);
    }
    let out = c.arg(exe).output().expect("mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mpirun {}: {}\n{}",
        exe.display(),
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Every record of `bandela.<rank>.txt`.
pub fn bandela(dir: &Path, rank: usize) -> Vec<BRecord> {
    let mut t = RankTrace::open(dir.join(format!("bandela.{rank}.txt"))).expect("open rank trace");
    let mut v = Vec::new();
    while let Some(r) = t.next_record().expect("bandela record") {
        v.push(r);
    }
    v
}

/// The kernels of a rank as `routine kernel peer tag bytes` strings (waits as
/// `routine wait`, tests as `routine test <0|1>`, barriers as `routine barrier`).
pub fn kernels(dir: &Path, rank: usize) -> Vec<String> {
    bandela(dir, rank)
        .into_iter()
        .filter_map(|r| match r {
            BRecord::Kernel {
                main_fn, kernel, ..
            } => Some(match kernel {
                Kernel::Isend {
                    peer, tag, bytes, ..
                } => format!("{main_fn} isend {peer} {tag} {bytes}"),
                Kernel::Irecv {
                    peer, tag, bytes, ..
                } => format!("{main_fn} irecv {peer} {tag} {bytes}"),
                Kernel::Wait { .. } => format!("{main_fn} wait"),
                Kernel::Test { completed, .. } => format!("{main_fn} test {}", completed as u8),
                Kernel::Barrier { .. } => format!("{main_fn} barrier"),
                Kernel::Get { .. } => format!("{main_fn} get"),
                Kernel::Put { .. } => format!("{main_fn} put"),
            }),
            _ => None,
        })
        .collect()
}

/// The Dimemas records of every task (CPU bursts dropped).
pub fn dimemas(path: &Path) -> Vec<Vec<DimRecord>> {
    let t = DimTrace::open(path).expect("open .dim");
    (0..t.ntasks() as u32)
        .map(|task| {
            let mut s = t.task_stream(task).expect("task stream");
            let mut v = Vec::new();
            while let Some((r, _)) = s.next_record().expect("dim record") {
                if !matches!(r, DimRecord::Burst { .. }) {
                    v.push(r);
                }
            }
            v
        })
        .collect()
}

/// Replays `trace.dim` with the Dimemas model (default platform) and checks the
/// prediction is positive and finite with `np` tasks; returns the predicted time.
pub fn replay_dimemas(dir: &Path, np: usize) -> f64 {
    let res = benchlake_replay::run_replay("dimemas", &dir.join("trace.dim"), &BTreeMap::new())
        .expect("dimemas replay");
    assert_eq!(res.ranks.len(), np);
    assert!(
        res.predicted_time_s.is_finite() && res.predicted_time_s > 0.0,
        "predicted {}",
        res.predicted_time_s
    );
    res.predicted_time_s
}

/// Replays the Bandela rank files with a host type 0 input.
pub fn replay_bandela(dir: &Path, np: usize) -> benchlake_replay::ReplayResult {
    let input = dir.join("replay.input");
    std::fs::write(
        &input,
        format!(
            "NUMBER_OF_HOSTS 1\nHOST_TYPE 0\nINTRA_HOST_BANDWIDTH_PEAK 800.00\nINTRA_HOST_LATENCY 2.0\nINTRA_HOST_BARRIER_LATENCY 10.00\nblock_max_ignore_collective 2\nignore_index 1 0\nBLOCK_HOST 0\nNUMBER_OF_PROCS {np}\nMPI_RANKS 0-{}\nADAPTERS 0\n",
            np - 1
        ),
    )
    .expect("write input");
    let mut p = BTreeMap::new();
    p.insert("input".to_string(), input.display().to_string());
    let res = benchlake_replay::run_replay("bandela", dir, &p).expect("bandela replay");
    assert_eq!(res.ranks.len(), np);
    assert!(res.predicted_time_s.is_finite() && res.predicted_time_s > 0.0);
    res
}
