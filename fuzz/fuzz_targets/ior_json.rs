//! IOR JSON summaries: never panic, whatever the bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = benchlake_formats::io::ior::parse_json(std::path::Path::new("fuzz.json"), data);
});
