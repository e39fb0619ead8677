//! Fuzzes the reader of the tracer's rank map (`bandela_ranks`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = benchlake_formats::bandela::ranks::parse(std::path::Path::new("bandela_ranks"), data);
});
