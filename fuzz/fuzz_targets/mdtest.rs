//! mdtest text output and per-rank CSV: never panic; accepted figures are
//! never NaN or negative.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = std::path::Path::new("fuzz.txt");
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(t) = benchlake_formats::io::mdtest::parse_text(p, s) {
        for l in t.summaries.iter().flat_map(|s| &s.lines) {
            for v in [l.max, l.min, l.mean, l.stddev] {
                assert!(!v.is_nan() && v >= 0.0);
            }
        }
    }
    if let Ok(c) = benchlake_formats::io::mdtest::parse_rank_csv(p, s) {
        for f in &c.figures {
            assert!(!f.rate.is_nan() && f.rate >= 0.0 && f.time.is_finite() && f.time >= 0.0);
        }
    }
});
