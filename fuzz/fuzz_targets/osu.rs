//! OSU micro-benchmarks text output (osu_latency, osu_bw, osu_bibw): never
//! panic; accepted values are finite and non-negative, sizes strictly increase.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = std::path::Path::new("fuzz.txt");
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(o) = benchlake_formats::osu::parse(p, s) {
        assert!(!o.points.is_empty());
        for w in o.points.windows(2) {
            assert!(w[0].0 < w[1].0);
        }
        for (size, v) in &o.points {
            assert!(*size >= 0 && v.is_finite() && *v >= 0.0);
        }
    }
});
