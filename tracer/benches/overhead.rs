//! Tracer overhead: a tight MPI_Irecv/MPI_Isend/MPI_Wait/MPI_Wait loop between two
//! ranks (`isend_loop.c`), run without and with the tracer preloaded; prints the
//! loop time per intercepted call, the overhead per call, the binary log bytes per
//! record and the text trace bytes per record. Best of `RUNS` runs each.
use std::path::Path;
use std::process::Command;

const ITERS: u64 = 100_000;
const RUNS: usize = 3;

fn run(exe: &Path, lib: Option<&Path>, dir: &Path) -> f64 {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "-np", "2"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self,vader")
        .env("BENCHLAKE_TRACE_DIR", dir)
        .env("BENCHLAKE_TRACE_KEEP_LOG", "1")
        .args([
            "-x",
            "BENCHLAKE_TRACE_DIR",
            "-x",
            "BENCHLAKE_TRACE_KEEP_LOG",
        ]);
    if let Some(l) = lib {
        c.env("LD_PRELOAD", l).args(["-x", "LD_PRELOAD"]);
    }
    let out = c.arg(exe).arg(ITERS.to_string()).output().expect("mpirun");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("loop_ns "))
        .and_then(|v| v.trim().parse().ok())
        .expect("loop_ns line")
}

fn main() {
    let Some(lib) = benchlake_tracer::library_path() else {
        println!("SKIPPED: the tracer library was not built (no mpicc)");
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = tmp.path().join("isend_loop");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/isend_loop.c");
    let st = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("mpicc");
    assert!(st.success());
    let calls = (ITERS * 4) as f64;
    let dir = tmp.path().join("trace");
    let base = (0..RUNS)
        .map(|_| run(&exe, None, &dir))
        .fold(f64::INFINITY, f64::min);
    let traced = (0..RUNS)
        .map(|_| run(&exe, Some(&lib), &dir))
        .fold(f64::INFINITY, f64::min);
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let log = size(&dir.join(".bl_log.0"));
    let records = log / 72;
    let bandela = size(&dir.join("bandela.0.txt"));
    let dim = size(&dir.join("trace.dim"));
    println!(
        "isend/irecv/wait loop, 2 ranks, {ITERS} iterations ({calls} intercepted calls per rank)"
    );
    println!("  untraced: {:.1} ns per call", base / calls);
    println!("  traced:   {:.1} ns per call", traced / calls);
    println!(
        "  overhead: {:.1} ns per intercepted call",
        (traced - base) / calls
    );
    println!(
        "  binary log: {log} bytes, {records} records, {} bytes per record",
        log.checked_div(records).unwrap_or(0)
    );
    println!(
        "  Bandela text (rank 0): {bandela} bytes, {:.1} bytes per record",
        bandela as f64 / records.max(1) as f64
    );
    println!(
        "  Dimemas trace (2 ranks): {dim} bytes, {:.1} bytes per record",
        dim as f64 / (2 * records).max(1) as f64
    );
}
