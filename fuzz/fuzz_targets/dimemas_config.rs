//! Fuzzes the Dimemas `.cfg` and collectives-definition parsers.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = std::path::Path::new("fuzz.cfg");
    let _ = benchlake_formats::dimemas::DimConfig::parse(p, data);
    let _ = benchlake_formats::dimemas::CollectivesFile::parse(p, data);
});
