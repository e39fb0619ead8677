//! IOR per-rank CSV and human output, mdtest text and per-rank CSV: never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = std::path::Path::new("fuzz.txt");
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = benchlake_formats::io::ior::parse_rank_csv(p, s);
    let _ = benchlake_formats::io::mdtest::parse_text(p, s);
    let _ = benchlake_formats::io::mdtest::parse_rank_csv(p, s);
    let _ = benchlake_formats::io::ior_text::parse(p, s);
});
