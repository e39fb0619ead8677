//! Fuzzes the reader of the tracer's statistics file (`bandela_stats`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = benchlake_tracer::stats::parse(&String::from_utf8_lossy(data));
});
