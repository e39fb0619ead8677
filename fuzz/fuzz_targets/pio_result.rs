//! pio result files: never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = benchlake_formats::io::pio::parse(std::path::Path::new("fuzz.json"), data);
});
