//! Stand-alone `pio` binary (the same entry point as `benchlake pio`).
fn main() -> std::process::ExitCode {
    benchlake_pio::main_with_args(std::env::args().skip(1).collect())
}
