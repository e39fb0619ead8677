//! The replaympi input language: one keyword per line, `#` comments, upper-case
//! keywords required, lower-case ones optional. A performance keyword may be followed
//! by a `block_points` / `sizes` / `values` table giving its value by transfer size.
use std::path::Path;

use crate::error::{FormatError, Position, Result};

/// How a `block_points` table is read between two points (our decision, see
/// docs/replay.md; the manual does not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interp {
    /// Linear in size between points (default).
    Linear,
    /// The value of the last point at or below the size.
    Step,
}

/// A latency (µs) or bandwidth (MB/s, MB = 10^6 B) as a function of transfer size.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfCurve {
    /// The keyword's value: used below the first point (and for size 0).
    pub base: f64,
    /// (size in bytes, value) points, sizes increasing.
    pub points: Vec<(u64, f64)>,
}

impl PerfCurve {
    /// A constant curve.
    pub fn constant(v: f64) -> Self {
        Self {
            base: v,
            points: Vec::new(),
        }
    }

    /// The value at `size`: the base below the first point, interpolated between
    /// points, and above the last point `peak` (bandwidths) or the last value
    /// (latencies: `peak = None`).
    pub fn at(&self, size: u64, interp: Interp, peak: Option<f64>) -> f64 {
        let Some(&(s0, _)) = self.points.first() else {
            return self.base;
        };
        if size < s0 {
            return self.base;
        }
        for w in self.points.windows(2) {
            let (a, b) = (w[0], w[1]);
            if size >= a.0 && size < b.0 {
                return match interp {
                    Interp::Step => a.1,
                    Interp::Linear => a.1 + (b.1 - a.1) * (size - a.0) as f64 / (b.0 - a.0) as f64,
                };
            }
        }
        match (peak, self.points.last()) {
            (Some(p), Some(&(last, _))) if size > last => p,
            (_, Some(&(_, v))) => v,
            _ => self.base,
        }
    }
}

/// One `BLOCK_HOST` block.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBlock {
    /// Host id.
    pub host: u32,
    /// CPUs of the host.
    pub procs: u32,
    /// MPI ranks placed on it.
    pub ranks: Vec<u32>,
    /// Adapters to the switch.
    pub adapters: u32,
}

/// A parsed replaympi input.
#[derive(Debug, Clone, PartialEq)]
pub struct BandelaInput {
    /// `NUMBER_OF_HOSTS`.
    pub hosts: u32,
    /// `HOST_TYPE` 0 (single host), 1 (topology plug-in), 2 (switch cluster).
    pub host_type: u8,
    /// `synchronous` (default Y).
    pub synchronous: bool,
    /// `interleave` (default Y).
    pub interleave: bool,
    /// `cpu_boost` (default 1).
    pub cpu_boost: f64,
    /// `block_max_ignore_collective`.
    pub max_ignore: u32,
    /// `ignore_safely` (default Y).
    pub ignore_safely: bool,
    /// `ignore_index` values (1 = skip the marked collective).
    pub ignore_index: Vec<u32>,
    /// `block_max_calipers`.
    pub max_calipers: u32,
    /// `calipers_boost` (the manual also spells it `calipers_boots`).
    pub caliper_boosts: Vec<f64>,
    /// `mpi_buffer_max` (default 1048575).
    pub mpi_buffer_max: u64,
    /// `small_message_size` (default 1024).
    pub small_message_size: u64,
    /// `adapter_select` (0 round robin).
    pub adapter_select: u32,
    /// `local_bandwidth` (default 2 × intra peak).
    pub local_bandwidth: Option<f64>,
    /// `INTRA_HOST_LATENCY` (µs).
    pub intra_latency: PerfCurve,
    /// `INTRA_HOST_BANDWIDTH_PEAK` (MB/s).
    pub intra_bandwidth: PerfCurve,
    /// `INTRA_HOST_GET_PUT_LATENCY`.
    pub get_put_latency: Option<PerfCurve>,
    /// `INTRA_HOST_GET_BANDWIDTH_PEAK`.
    pub get_bandwidth: Option<PerfCurve>,
    /// `INTER_HOST_LATENCY`.
    pub inter_latency: Option<PerfCurve>,
    /// `INTER_HOST_BANDWIDTH_PEAKS`: (per link, aggregate; −1 = use the ratio) and curve.
    pub inter_bandwidth: Option<(f64, f64, PerfCurve)>,
    /// `inter_host_degradation_ratio`.
    pub degradation_ratio: Option<PerfCurve>,
    /// `INTRA_HOST_BARRIER_LATENCY` (µs).
    pub intra_barrier_latency: Option<f64>,
    /// `INTER_HOST_BARRIER_LATENCY` (µs).
    pub inter_barrier_latency: Option<f64>,
    /// `intra_host_long_latency` (µs).
    pub intra_long_latency: Option<f64>,
    /// `inter_host_long_latency` (µs).
    pub inter_long_latency: Option<f64>,
    /// `delay_for_long_latency` (µs).
    pub delay_for_long_latency: Option<f64>,
    /// `interp linear|step` (our addition).
    pub interp: Interp,
    /// `BLOCK_HOST` blocks.
    pub blocks: Vec<HostBlock>,
}

fn parse_ranks(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if b < a || b - a > 1 << 22 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

impl BandelaInput {
    /// Reads an input file.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read(path).map_err(|e| FormatError::io(path, e))?;
        Self::parse(path, &String::from_utf8_lossy(&text))
    }

    /// Parses an input text.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let mut inp = BandelaInput {
            hosts: 0,
            host_type: 0,
            synchronous: true,
            interleave: true,
            cpu_boost: 1.0,
            max_ignore: 0,
            ignore_safely: true,
            ignore_index: Vec::new(),
            max_calipers: 0,
            caliper_boosts: Vec::new(),
            mpi_buffer_max: 1_048_575,
            small_message_size: 1024,
            adapter_select: 0,
            local_bandwidth: None,
            intra_latency: PerfCurve::constant(0.0),
            intra_bandwidth: PerfCurve::constant(0.0),
            get_put_latency: None,
            get_bandwidth: None,
            inter_latency: None,
            inter_bandwidth: None,
            degradation_ratio: None,
            intra_barrier_latency: None,
            inter_barrier_latency: None,
            intra_long_latency: None,
            inter_long_latency: None,
            delay_for_long_latency: None,
            interp: Interp::Linear,
            blocks: Vec::new(),
        };
        let mut seen: Vec<&'static str> = Vec::new();
        // Tokens: (line, col, word), comments stripped; a keyword's value may be on the
        // following line (the manual's keyword list shows it that way).
        let mut toks: Vec<(u64, usize, String)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let body = line.split('#').next().unwrap_or("");
            let mut col = 0;
            for w in body.split_whitespace() {
                let c = body
                    .get(col..)
                    .and_then(|r| r.find(w))
                    .map_or(col, |o| col + o);
                col = c + w.len();
                toks.push((i as u64 + 1, c + 1, w.to_string()));
                if toks.len() > 1 << 20 {
                    return Err(FormatError::malformed(
                        path,
                        "input",
                        Position::LineCol(i as u64 + 1, 1),
                        "input too large",
                    ));
                }
            }
        }
        let mut i = 0usize;
        let err = |t: &(u64, usize, String), field: &str, msg: String| {
            FormatError::malformed(path, field, Position::LineCol(t.0, t.1 as u64), msg)
        };
        let end = (0u64, 0usize, String::new());
        let mut last_curve: Option<&'static str> = None;
        let mut pending_points: Option<(u64, Vec<u64>)> = None;
        while let Some(t) = toks.get(i) {
            let kw = t.2.as_str();
            i += 1;
            macro_rules! num {
                ($name:expr) => {{
                    let v = toks.get(i).unwrap_or(&end);
                    i += 1;
                    v.2.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| {
                            err(
                                v,
                                $name,
                                format!("expected a number after {}, found '{}'", $name, v.2),
                            )
                        })?
                }};
            }
            macro_rules! int {
                ($name:expr) => {{
                    let v = toks.get(i).unwrap_or(&end);
                    i += 1;
                    v.2.parse::<u64>().map_err(|_| {
                        err(
                            v,
                            $name,
                            format!(
                                "expected a non-negative integer after {}, found '{}'",
                                $name, v.2
                            ),
                        )
                    })?
                }};
            }
            macro_rules! yn {
                ($name:expr) => {{
                    let v = toks.get(i).unwrap_or(&end);
                    i += 1;
                    match v.2.as_str() {
                        "Y" | "y" => true,
                        "N" | "n" => false,
                        _ => {
                            return Err(err(v, $name, format!("expected Y or N, found '{}'", v.2)));
                        }
                    }
                }};
            }
            let curve_kw: Option<&'static str> = match kw {
                "INTRA_HOST_LATENCY" => Some("INTRA_HOST_LATENCY"),
                "INTRA_HOST_BANDWIDTH_PEAK" => Some("INTRA_HOST_BANDWIDTH_PEAK"),
                "INTRA_HOST_GET_PUT_LATENCY" => Some("INTRA_HOST_GET_PUT_LATENCY"),
                "INTRA_HOST_GET_BANDWIDTH_PEAK" => Some("INTRA_HOST_GET_BANDWIDTH_PEAK"),
                "INTER_HOST_LATENCY" => Some("INTER_HOST_LATENCY"),
                "INTER_HOST_BANDWIDTH_PEAKS" => Some("INTER_HOST_BANDWIDTH_PEAKS"),
                "inter_host_degradation_ratio" => Some("inter_host_degradation_ratio"),
                _ => None,
            };
            if let Some(k) = curve_kw {
                if seen.contains(&k) {
                    return Err(err(t, k, "keyword given twice".into()));
                }
                seen.push(k);
                let v = num!(k);
                match k {
                    "INTRA_HOST_LATENCY" => inp.intra_latency = PerfCurve::constant(v),
                    "INTRA_HOST_BANDWIDTH_PEAK" => inp.intra_bandwidth = PerfCurve::constant(v),
                    "INTRA_HOST_GET_PUT_LATENCY" => {
                        inp.get_put_latency = Some(PerfCurve::constant(v))
                    }
                    "INTRA_HOST_GET_BANDWIDTH_PEAK" => {
                        inp.get_bandwidth = Some(PerfCurve::constant(v))
                    }
                    "INTER_HOST_LATENCY" => inp.inter_latency = Some(PerfCurve::constant(v)),
                    "INTER_HOST_BANDWIDTH_PEAKS" => {
                        let agg = num!(k);
                        inp.inter_bandwidth = Some((v, agg, PerfCurve::constant(v)));
                    }
                    _ => inp.degradation_ratio = Some(PerfCurve::constant(v)),
                }
                last_curve = Some(k);
                continue;
            }
            match kw {
                "NUMBER_OF_HOSTS" => {
                    inp.hosts = u32::try_from(int!("NUMBER_OF_HOSTS")).map_err(|_| err(t, kw, "too large".into()))?;
                    seen.push("NUMBER_OF_HOSTS");
                }
                "HOST_TYPE" => {
                    let v = int!("HOST_TYPE");
                    inp.host_type = match v {
                        0..=2 => v as u8,
                        _ => return Err(err(t, kw, format!("HOST_TYPE must be 0, 1 or 2, found {v}"))),
                    };
                    seen.push("HOST_TYPE");
                }
                "synchronous" => inp.synchronous = yn!(kw),
                "interleave" => inp.interleave = yn!(kw),
                "ignore_safely" => inp.ignore_safely = yn!(kw),
                "cpu_boost" => {
                    inp.cpu_boost = num!(kw);
                    if inp.cpu_boost <= 0.0 {
                        return Err(err(t, kw, "cpu_boost must be > 0".into()));
                    }
                }
                "block_max_ignore_collective" => inp.max_ignore = u32::try_from(int!(kw)).unwrap_or(u32::MAX).min(1 << 16),
                "ignore_index" => {
                    for _ in 0..inp.max_ignore.max(1) {
                        inp.ignore_index.push(u32::try_from(int!(kw)).unwrap_or(0));
                    }
                }
                "block_max_calipers" => inp.max_calipers = u32::try_from(int!(kw)).unwrap_or(u32::MAX).min(1 << 16),
                "calipers_boost" | "calipers_boots" => {
                    for _ in 0..inp.max_calipers.max(1) {
                        let b = num!(kw);
                        if b <= 0.0 {
                            return Err(err(t, kw, "caliper boosts must be > 0".into()));
                        }
                        inp.caliper_boosts.push(b);
                    }
                }
                "mpi_buffer_max" => inp.mpi_buffer_max = int!(kw),
                "small_message_size" => inp.small_message_size = int!(kw),
                "adapter_select" => {
                    inp.adapter_select = match int!(kw) {
                        0 => 0,
                        _ => return Err(err(t, kw, "only adapter_select 0 (round robin) is implemented (1 is not in replaympi either)".into())),
                    }
                }
                "local_bandwidth" => inp.local_bandwidth = Some(num!(kw)),
                "INTRA_HOST_BARRIER_LATENCY" => inp.intra_barrier_latency = Some(num!(kw)),
                "INTER_HOST_BARRIER_LATENCY" => inp.inter_barrier_latency = Some(num!(kw)),
                "intra_host_long_latency" => inp.intra_long_latency = Some(num!(kw)),
                "inter_host_long_latency" => inp.inter_long_latency = Some(num!(kw)),
                "delay_for_long_latency" => inp.delay_for_long_latency = Some(num!(kw)),
                "interp" => {
                    let v = toks.get(i).unwrap_or(&end);
                    i += 1;
                    inp.interp = match v.2.as_str() {
                        "linear" => Interp::Linear,
                        "step" => Interp::Step,
                        _ => return Err(err(v, kw, format!("expected linear or step, found '{}'", v.2))),
                    };
                }
                "block_points" => {
                    if last_curve.is_none() {
                        return Err(err(t, kw, "block_points must follow a latency or bandwidth keyword".into()));
                    }
                    pending_points = Some((int!(kw), Vec::new()));
                }
                "sizes" | "values" => {
                    let Some(curve) = last_curve else {
                        return Err(err(t, kw, format!("{kw} must follow block_points")));
                    };
                    // Read numbers until the next keyword.
                    let mut nums = Vec::new();
                    while let Some(v) = toks.get(i) {
                        match v.2.parse::<f64>() {
                            Ok(x) if x.is_finite() => {
                                nums.push(x);
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    if kw == "sizes" {
                        let Some((_, sizes)) = pending_points.as_mut() else {
                            return Err(err(t, kw, "sizes must follow block_points".into()));
                        };
                        for x in nums {
                            if x < 0.0 || x.fract() != 0.0 {
                                return Err(err(t, kw, format!("sizes must be byte counts, found {x}")));
                            }
                            if sizes.last().is_some_and(|&l| (x as u64) <= l) {
                                return Err(err(t, kw, "sizes must increase".into()));
                            }
                            sizes.push(x as u64);
                        }
                    } else {
                        let Some((declared, sizes)) = pending_points.take() else {
                            return Err(err(t, kw, "values must follow block_points and sizes".into()));
                        };
                        if sizes.len() != nums.len() {
                            return Err(err(t, kw, format!("{} sizes but {} values", sizes.len(), nums.len())));
                        }
                        if declared != sizes.len() as u64 {
                            // The manual's own 256-CPU example declares 5 points and gives 4:
                            // the lists win (documented).
                            tracing::warn!(declared, given = sizes.len(), "block_points does not match the sizes/values lists");
                        }
                        let pts: Vec<(u64, f64)> = sizes.into_iter().zip(nums).collect();
                        let c = match curve {
                            "INTRA_HOST_LATENCY" => Some(&mut inp.intra_latency),
                            "INTRA_HOST_BANDWIDTH_PEAK" => Some(&mut inp.intra_bandwidth),
                            "INTRA_HOST_GET_PUT_LATENCY" => inp.get_put_latency.as_mut(),
                            "INTRA_HOST_GET_BANDWIDTH_PEAK" => inp.get_bandwidth.as_mut(),
                            "INTER_HOST_LATENCY" => inp.inter_latency.as_mut(),
                            "INTER_HOST_BANDWIDTH_PEAKS" => inp.inter_bandwidth.as_mut().map(|b| &mut b.2),
                            _ => inp.degradation_ratio.as_mut(),
                        };
                        if let Some(c) = c {
                            c.points = pts;
                        }
                    }
                }
                "BLOCK_HOST" => {
                    let host = u32::try_from(int!(kw)).map_err(|_| err(t, kw, "too large".into()))?;
                    inp.blocks.push(HostBlock { host, procs: 0, ranks: Vec::new(), adapters: 0 });
                }
                "NUMBER_OF_PROCS" | "MPI_RANKS" | "ADAPTERS" => {
                    let n = inp.blocks.len();
                    let Some(b) = inp.blocks.last_mut() else {
                        return Err(err(t, kw, format!("{kw} must follow BLOCK_HOST")));
                    };
                    let _ = n;
                    match kw {
                        "NUMBER_OF_PROCS" => {
                            let v = toks.get(i).unwrap_or(&end);
                            i += 1;
                            b.procs = v.2.parse().map_err(|_| err(v, kw, format!("expected an integer, found '{}'", v.2)))?;
                        }
                        "ADAPTERS" => {
                            let v = toks.get(i).unwrap_or(&end);
                            i += 1;
                            b.adapters = v.2.parse().map_err(|_| err(v, kw, format!("expected an integer, found '{}'", v.2)))?;
                        }
                        _ => {
                            let v = toks.get(i).unwrap_or(&end);
                            i += 1;
                            b.ranks = parse_ranks(&v.2).ok_or_else(|| err(v, kw, format!("expected a rank list like 0-7 or 0,2,4, found '{}'", v.2)))?;
                        }
                    }
                }
                other => {
                    return Err(err(t, "keyword", format!("unknown keyword '{other}'")));
                }
            }
        }
        let whole = Position::None;
        let missing = |k: &str| {
            FormatError::malformed(
                path,
                k,
                whole.clone(),
                format!("required keyword {k} is missing"),
            )
        };
        for k in [
            "NUMBER_OF_HOSTS",
            "HOST_TYPE",
            "INTRA_HOST_LATENCY",
            "INTRA_HOST_BANDWIDTH_PEAK",
        ] {
            if !seen.contains(&k) {
                return Err(missing(k));
            }
        }
        if inp.blocks.is_empty() {
            return Err(missing("BLOCK_HOST"));
        }
        if inp.hosts > 1 && (inp.inter_latency.is_none() || inp.inter_bandwidth.is_none()) {
            return Err(FormatError::malformed(
                path,
                "INTER_HOST_LATENCY",
                whole,
                "INTER_HOST_LATENCY and INTER_HOST_BANDWIDTH_PEAKS are required with more than one host",
            ));
        }
        if inp.blocks.len() as u32 != inp.hosts {
            return Err(FormatError::malformed(
                path,
                "BLOCK_HOST",
                whole,
                format!(
                    "{} hosts declared but {} BLOCK_HOST blocks",
                    inp.hosts,
                    inp.blocks.len()
                ),
            ));
        }
        Ok(inp)
    }

    /// The host of `rank` (the block listing it).
    pub fn host_of(&self, rank: u32) -> Option<u32> {
        self.blocks
            .iter()
            .find(|b| b.ranks.contains(&rank))
            .map(|b| b.host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MANUAL_256: &str = "NUMBER_OF_HOSTS    1\nHOST_TYPE          0\nmpi_buffer_max 1048576\ncpu_boost          1.0\n\nINTRA_HOST_LATENCY  2.\nblock_points        5\nsizes  64   512  1024 2048\nvalues 2.15 4.3  5.   6.  \n\nINTRA_HOST_BANDWIDTH_PEAK  800.\nblock_points               2\nsizes   4096  8192\nvalues  400.  600.\n\nINTRA_HOST_BARRIER_LATENCY    10.\n\nBLOCK_HOST         0\nNUMBER_OF_PROCS  256\nMPI_RANKS      0-255\nADAPTERS           0\n";

    #[test]
    fn parses_the_manuals_256_cpu_input() {
        let inp = BandelaInput::parse(Path::new("in"), MANUAL_256).expect("parse");
        assert_eq!(
            (inp.hosts, inp.host_type, inp.mpi_buffer_max),
            (1, 0, 1_048_576)
        );
        assert_eq!(inp.intra_latency.base, 2.0);
        assert_eq!(
            inp.intra_latency.points,
            vec![(64, 2.15), (512, 4.3), (1024, 5.0), (2048, 6.0)]
        );
        assert_eq!(
            inp.intra_bandwidth.points,
            vec![(4096, 400.0), (8192, 600.0)]
        );
        assert_eq!(inp.intra_barrier_latency, Some(10.0));
        assert_eq!(inp.blocks[0].ranks.len(), 256);
        // Interpolation: base below the first point, linear between, last value / peak above.
        let l = &inp.intra_latency;
        assert_eq!(l.at(0, Interp::Linear, None), 2.0);
        assert_eq!(l.at(64, Interp::Linear, None), 2.15);
        assert!((l.at(768, Interp::Linear, None) - 4.65).abs() < 1e-12);
        assert_eq!(l.at(768, Interp::Step, None), 4.3);
        assert_eq!(l.at(1 << 20, Interp::Linear, None), 6.0);
        let b = &inp.intra_bandwidth;
        assert_eq!(b.at(100, Interp::Linear, Some(800.0)), 800.0);
        assert_eq!(b.at(6144, Interp::Linear, Some(800.0)), 500.0);
        assert_eq!(b.at(1 << 20, Interp::Linear, Some(800.0)), 800.0);
    }

    #[test]
    fn errors_name_keyword_line_and_column() {
        let p = Path::new("in");
        let e = BandelaInput::parse(p, "NUMBER_OF_HOSTS 1\nHOST_TYPE 7\n")
            .expect_err("type")
            .to_string();
        assert!(
            e.contains("HOST_TYPE") && e.contains("line 2, column 1"),
            "{e}"
        );
        let e = BandelaInput::parse(p, "NUMBER_OF_HOSTS 1\nHOST_TYPE 0\nINTRA_HOST_LATENCY 2\n")
            .expect_err("missing")
            .to_string();
        assert!(e.contains("INTRA_HOST_BANDWIDTH_PEAK"), "{e}");
        let e = BandelaInput::parse(p, "NUMBER_OF_HOSTS 1\n  frobnicate 3\n")
            .expect_err("unknown")
            .to_string();
        assert!(
            e.contains("frobnicate") && e.contains("line 2, column 3"),
            "{e}"
        );
        let e = BandelaInput::parse(p, "INTRA_HOST_LATENCY 2\nblock_points 2\nsizes 10 5\n")
            .expect_err("order")
            .to_string();
        assert!(e.contains("increase"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn arbitrary_inputs_never_panic(s in "[A-Za-z_0-9.# \n-]{0,200}") {
            let _ = BandelaInput::parse(Path::new("in"), &s);
            let _ = BandelaInput::parse(Path::new("in"), &format!("{MANUAL_256}\n{s}"));
        }
    }
}
