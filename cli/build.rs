//! Link options of the `benchlake` and `benchlake-replay` binaries. On GNU/Linux its relative
//! relocations are packed (DT_RELR, glibc 2.36+): the dynamic loader then reads
//! a few kilobytes of relocations at start instead of a 2.8 MB table, which
//! takes that much off the peak memory of every command (issue 16: an offline
//! replay at or under Dimemas's memory). The binary stays position-independent.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.ends_with("-linux-gnu") {
        for bin in ["benchlake", "benchlake-replay"] {
            println!("cargo:rustc-link-arg-bin={bin}=-Wl,-z,pack-relative-relocs");
        }
    }
}
