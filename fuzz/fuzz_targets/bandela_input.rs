//! Fuzzes the replaympi input reader (every keyword, block_points tables,
//! host blocks).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = benchlake_formats::bandela::BandelaInput::parse(std::path::Path::new("input"), text);
    }
});
