//! Builds `libbenchlake_tracer.so` from `c/*.c` with `mpicc` (or `$MPICC`).
//!
//! The library lands in `$OUT_DIR` (exported to the crate as `BENCHLAKE_TRACER_BUILT`)
//! and is copied next to the workspace's binaries (`target/<profile>/`), where
//! [`library_path`](../src/lib.rs) finds it at run time. Without `mpicc` (or when it
//! fails) the crate builds without the library and says so with a cargo warning —
//! except under `CI=true`, where the build fails with the compiler's output.
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-env-changed=MPICC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".to_string());
    let mut sources: Vec<PathBuf> = std::fs::read_dir("c")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "c"))
                .collect()
        })
        .unwrap_or_default();
    sources.sort();
    let lib = out.join("libbenchlake_tracer.so");
    let output = Command::new(&mpicc)
        .args(["-O2", "-g", "-fPIC", "-shared", "-Wall", "-std=gnu11", "-o"])
        .arg(&lib)
        .args(&sources)
        .arg("-ldl")
        .output();
    match output {
        Ok(o) if o.status.success() => {
            // the compiler's warnings stay visible in the build script's output
            eprint!("{}", String::from_utf8_lossy(&o.stderr));
            println!("cargo:rustc-env=BENCHLAKE_TRACER_BUILT={}", lib.display());
            // target/<profile>/build/<pkg>-<hash>/out -> target/<profile>/
            if let Some(profile_dir) = out.ancestors().nth(3) {
                copy_next_to_binaries(&lib, profile_dir);
            }
        }
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            unbuilt(&format!("{mpicc} failed ({})", o.status), &text);
        }
        Err(e) => unbuilt(
            &format!(
                "{mpicc} not found ({e}); install Open MPI's development package (libopenmpi-dev) to build the tracer library"
            ),
            "",
        ),
    }
}

/// The tracer library could not be built: under `CI=true` the build fails
/// with the compiler's output (docs/testing.md, "Skips and CI"); elsewhere the
/// crate builds without the library and says so with a cargo warning.
fn unbuilt(why: &str, compiler_output: &str) {
    println!("cargo:rerun-if-env-changed=CI");
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!(
            "benchlake-tracer: {why}; the tracer library must build under CI=true\n{compiler_output}"
        );
    }
    eprint!("{compiler_output}");
    println!("cargo:warning=benchlake-tracer: {why}; the tracer library is not built");
    println!("cargo:rustc-env=BENCHLAKE_TRACER_BUILT=");
}

fn copy_next_to_binaries(lib: &Path, dir: &Path) {
    let dst = dir.join("libbenchlake_tracer.so");
    // write to a temporary name and rename, so a running job never sees half a file
    let tmp = dir.join(".libbenchlake_tracer.so.tmp");
    if std::fs::copy(lib, &tmp).is_ok() && std::fs::rename(&tmp, &dst).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
