//! hostinfo node facts documents: never panic; an accepted document holds
//! only values in the documented ranges (docs/tables.md, `node_facts`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(f) = benchlake_formats::hostinfo::parse(std::path::Path::new("fuzz.json"), s) {
        assert!(f.cores >= 1 && f.memory_bytes >= 1);
        assert!(f.load_1m.is_finite() && f.load_1m >= 0.0);
        assert!(f.uptime_s.is_finite() && f.uptime_s >= 0.0);
    }
});
