//! Numbers as the report prints them: three significant digits with a unit
//! chosen so the figure lies in [1, 1000) (`31.7 µs`, `5.01 ms`, `33.1 GB/s`).
//! Exact values stay in the SVG as `data-seconds` attributes and tooltips.

/// `x` rounded to three significant digits (0, NaN and infinities unchanged).
fn round3(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = x.abs().log10().floor() as i32 - 2;
    let p = 10f64.powi(e.abs());
    if e >= 0 {
        (x / p).round() * p
    } else {
        (x * p).round() / p
    }
}

/// Three significant digits, without exponent (`31.7`, `5.01`, `100`, `1230`).
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let r = round3(x);
    if r == 0.0 {
        return "0".into();
    }
    let digits = r.abs().log10().floor() as i32;
    let decimals = (2 - digits).max(0) as usize;
    format!("{r:.decimals$}")
}

/// Scales `x` by the first unit (factor, name) whose rounded figure stays below
/// 1000, from the smallest unit up; the last unit takes everything above.
fn scaled(x: f64, units: &[(f64, &str)]) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x == 0.0 {
        return format!("0 {}", units.last().map(|u| u.1).unwrap_or(""));
    }
    let r = round3(x).abs();
    let mut pick = units.last().copied().unwrap_or((1.0, ""));
    for &(f, name) in units {
        if round3(r / f) < 1000.0 {
            pick = (f, name);
            break;
        }
    }
    // Values below the smallest unit stay in it (0.5 ns).
    format!("{} {}", sig3(x / pick.0), pick.1)
}

/// A time: ns, µs, ms or s with three significant digits.
pub fn time(t: f64) -> String {
    scaled(t, &[(1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s")])
}

/// A rate in bytes per second: B/s, kB/s, MB/s, GB/s or TB/s (decimal prefixes).
pub fn rate(bytes_per_s: f64) -> String {
    scaled(
        bytes_per_s,
        &[
            (1.0, "B/s"),
            (1e3, "kB/s"),
            (1e6, "MB/s"),
            (1e9, "GB/s"),
            (1e12, "TB/s"),
        ],
    )
}

/// The bandwidth of `size` bytes in `t` seconds, `-` when `t` is not positive.
pub fn bandwidth(size: u64, t: f64) -> String {
    if t > 0.0 && t.is_finite() {
        rate(size as f64 / t)
    } else {
        "-".into()
    }
}

/// An integer with thousands separators (`1,048,576`).
pub fn int(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (k, c) in s.chars().enumerate() {
        if k > 0 && (s.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A message size: `1,048,576 B (1 MiB)`; sizes below 1 KiB or not a whole
/// number of KiB/MiB/GiB are given in bytes only.
pub fn size(b: u64) -> String {
    for (f, name) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if b >= f && b.is_multiple_of(f) {
            return format!("{} B ({} {name})", int(b), b / f);
        }
    }
    format!("{} B", int(b))
}

/// A figure with its unit as a `checks` row gives it: seconds are scaled like
/// [`time`], byte rates like [`rate`], anything else gets three significant
/// digits (integers print whole) and the unit as given.
pub fn with_unit(v: f64, unit: &str) -> String {
    match unit {
        "s" => time(v),
        "B/s" => rate(v),
        "MiB/s" => rate(v * 1_048_576.0),
        "GB/s" => rate(v * 1e9),
        _ => {
            let n = if v.fract() == 0.0 && v.abs() < 1e15 {
                format!("{v:.0}")
            } else {
                sig3(v)
            };
            if unit.is_empty() {
                n
            } else {
                format!("{n} {unit}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_digits_with_units() {
        assert_eq!(time(0.000031744451958333334), "31.7 µs");
        assert_eq!(time(5.0112479366362095e-3), "5.01 ms");
        assert_eq!(time(3.365_749_944_350_682e-5), "33.7 µs");
        assert_eq!(time(999.96e-6), "1.00 ms");
        assert_eq!(time(1e-6), "1.00 µs");
        assert_eq!(time(2.0), "2.00 s");
        assert_eq!(time(1234.0), "1230 s");
        assert_eq!(time(5e-10), "0.500 ns");
        assert_eq!(time(0.0), "0 s");
        assert_eq!(time(f64::NAN), "-");
        assert_eq!(rate(1_048_576.0 / 3.365_749_944_350_682e-5), "31.2 GB/s");
        assert_eq!(rate(999.5), "1.00 kB/s");
        assert_eq!(bandwidth(1024, 0.0), "-");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(99.96), "100");
        assert_eq!(int(1_048_576), "1,048,576");
        assert_eq!(int(999), "999");
        assert_eq!(size(1 << 20), "1,048,576 B (1 MiB)");
        assert_eq!(size(1000), "1,000 B");
        assert_eq!(with_unit(0.000031744451958333334, "s"), "31.7 µs");
        assert_eq!(with_unit(3.0, "pairs"), "3 pairs");
        assert_eq!(with_unit(1500.25, "MiB/s"), "1.57 GB/s");
        assert_eq!(with_unit(0.123456, ""), "0.123");
    }
}
