//! The result file of `pio`, benchlake's own parallel I/O benchmark: the format
//! is defined here (written by the `benchlake-pio` crate, read by the `pio`
//! ingest kind) so the writer and reader cannot drift apart.
//!
//! One JSON object, `"format": "benchlake-pio/1"`; documented field by field in
//! docs/io.md. Times are seconds; `*_start`/`*_stop` are Unix epoch seconds
//! from each process's real-time clock (cross-node figures assume synchronized
//! clocks, as IOR's gettimeofday does).
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Position, Result};
use crate::io::text;

/// The value of the `format` field this version writes and reads.
pub const FORMAT: &str = "benchlake-pio/1";

/// A whole pio result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioResult {
    /// Always [`FORMAT`].
    pub format: String,
    /// Version of the pio that wrote it.
    pub pio_version: String,
    /// RFC 3339 UTC.
    pub started_at: String,
    /// RFC 3339 UTC.
    pub finished_at: String,
    /// Every parameter with its resolved value and where it came from.
    pub params: Vec<PioParam>,
    /// `POSIX` (pio's only API).
    pub api: String,
    /// `segmented`, `strided`, `random` or `general`.
    pub pattern: String,
    pub file_per_proc: bool,
    pub num_tasks: u32,
    /// Host of each rank, by rank.
    pub hosts: Vec<String>,
    /// How processes were started: `fork`, `mpirun`, `slurm`, `single`.
    pub launcher: String,
    pub block_size: u64,
    pub transfer_size: u64,
    /// Smallest transfer of the random/general patterns (= transfer_size otherwise).
    pub min_transfer_size: u64,
    pub segments: u64,
    /// Distance between segment starts (bytes).
    pub stride: u64,
    pub header_bytes: u64,
    /// Expected size of each file after the write phase.
    pub file_size: u64,
    pub fsync: bool,
    pub collective: bool,
    pub iterations: u32,
    /// `o_direct`, `fadvise_dontneed`, `drop_caches` or `none`.
    pub cache_mode: String,
    /// Client c read the data written by client (c + shift) mod n.
    pub reorder_shift: u32,
    pub verify: bool,
    /// One per iteration and operation, in execution order.
    pub phases: Vec<PioPhase>,
    /// One per operation over all iterations.
    pub summary: Vec<PioSummary>,
    pub verification: PioVerification,
}

/// A parameter as resolved: CLI over environment over default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioParam {
    pub name: String,
    pub value: String,
    /// `cli`, `env` or `default`.
    pub source: String,
}

/// One iteration × operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioPhase {
    pub iteration: u32,
    /// `write` or `read`.
    pub operation: String,
    /// Aggregate bytes moved by all processes.
    pub bytes: u64,
    pub transfers: u64,
    /// Latest close stop − earliest open start.
    pub total_time_s: f64,
    /// Latest open stop − earliest open start (a span across processes).
    pub open_time_s: f64,
    /// Latest transfer stop − earliest transfer start (fsync included).
    pub xfer_time_s: f64,
    /// Latest close stop − earliest close start.
    pub close_time_s: f64,
    /// bytes / 2^20 / total_time_s.
    pub bw_mib_s: f64,
    /// transfers / total_time_s.
    pub iops: f64,
    /// Bytes that failed verification (reads only; None when not verified).
    pub verify_errors: Option<u64>,
    /// Open-start-to-close-stop time of each process in this phase:
    /// min/mean/max/deviation between processes (Ross 6.6).
    #[serde(default)]
    pub task_time_s: Option<Stats>,
    pub tasks: Vec<PioTaskTimes>,
}

/// The six timestamps and counters of one process in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioTaskTimes {
    pub rank: u32,
    pub open_start: f64,
    pub open_stop: f64,
    pub xfer_start: f64,
    pub xfer_stop: f64,
    pub close_start: f64,
    pub close_stop: f64,
    pub bytes: u64,
    pub transfers: u64,
    pub verify_errors: Option<u64>,
}

/// min/mean/max/population deviation of a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: u64,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Square root of the mean squared deviation (the seed's DEVIATION, ÷ n).
    pub stddev: f64,
}

impl Stats {
    /// Statistics of `xs`; `None` when empty.
    pub fn of(xs: &[f64]) -> Option<Stats> {
        if xs.is_empty() {
            return None;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        Some(Stats {
            n: xs.len() as u64,
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            mean,
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            stddev: var.sqrt(),
        })
    }
}

/// Statistics of one operation over all iterations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioSummary {
    pub operation: String,
    pub iterations: u64,
    /// Aggregate bytes of one iteration.
    pub bytes: u64,
    /// Aggregate bandwidth across iterations (max = the seed's MAXIMUM).
    pub bw_mib_s: Stats,
    /// Aggregate time across iterations.
    pub total_time_s: Stats,
    /// Transfers per second across iterations.
    pub iops: Stats,
    /// Each process's open-start-to-close-stop time, across iterations and processes.
    pub task_time_s: Stats,
    /// Each process's bandwidth (its bytes / its time), across iterations and processes.
    pub task_bw_mib_s: Stats,
}

/// The verdict of the read-back check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioVerification {
    /// `PASS`, `FAIL` or `SKIPPED` (verification off or no read phase).
    pub status: String,
    /// Bytes that differed from the expected pattern, over all reads.
    pub errors: u64,
    pub first_error: Option<PioCorruption>,
    /// Other problems found by the checks (e.g. a file size differing from the layout).
    #[serde(default)]
    pub messages: Vec<String>,
}

/// Where the first corrupted byte was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PioCorruption {
    pub iteration: u32,
    /// Rank that read it.
    pub reader: u32,
    /// Rank whose data it should have been.
    pub writer: u32,
    pub file: String,
    pub offset: u64,
    pub expected: u8,
    pub found: u8,
}

/// Parses and validates a pio result file. Every figure pio derives is
/// derived again from the per-process timestamps and counters and must agree
/// (the writer's `phase_of` and `summary_of`, pio/src/run.rs), and every
/// timestamp must lie within the run (`started_at`..`finished_at`): a number
/// changed anywhere in a result is refused, with its JSON path and byte
/// offset, instead of landing as a different figure.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<PioResult> {
    let r: PioResult =
        serde_json::from_slice(bytes).map_err(|e| text::json_err(path, "pio result", &e))?;
    check(&r).map_err(|(field, msg)| {
        FormatError::malformed(
            path,
            field.clone(),
            Position::Offset(text::json_offset(bytes, &field)),
            msg,
        )
    })?;
    Ok(r)
}

const MIB: f64 = 1048576.0;

/// How far another node's clock may be from the launcher's (s).
pub const CLOCK_SKEW_S: f64 = 60.0;

/// Whether `a` and `b` agree to within rounding (the writer computes them
/// from the same numbers; JSON keeps every `f64` exactly).
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-9)
}

/// Earliest `start` to latest `stop` over `tasks`, as the writer computes it.
fn span(
    tasks: &[PioTaskTimes],
    start: impl Fn(&PioTaskTimes) -> f64,
    stop: impl Fn(&PioTaskTimes) -> f64,
) -> f64 {
    let s = tasks.iter().map(&start).fold(f64::INFINITY, f64::min);
    let e = tasks.iter().map(&stop).fold(f64::NEG_INFINITY, f64::max);
    if s.is_finite() && e.is_finite() {
        (e - s).max(0.0)
    } else {
        0.0
    }
}

fn stats_agree(field: &str, have: &Stats, want: Option<Stats>) -> Result<(), (String, String)> {
    let want = want.unwrap_or(Stats {
        n: 0,
        min: 0.0,
        mean: 0.0,
        max: 0.0,
        stddev: 0.0,
    });
    if have.n != want.n {
        return Err((
            format!("{field}.n"),
            format!("{}, but the data give {}", have.n, want.n),
        ));
    }
    for (name, h, w) in [
        ("min", have.min, want.min),
        ("mean", have.mean, want.mean),
        ("max", have.max, want.max),
        ("stddev", have.stddev, want.stddev),
    ] {
        if !close(h, w) {
            return Err((
                format!("{field}.{name}"),
                format!("{h}, but the per-process figures give {w}"),
            ));
        }
    }
    Ok(())
}

/// A size parameter's value as pio parses it (k/m/g/t = powers of 2^10).
fn param_size(v: &str) -> Option<u64> {
    let t = v.trim();
    let (num, mul) = match t.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => (
            t.get(..t.len() - 1)?,
            match c.to_ascii_lowercase() {
                'k' => 1u64 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                _ => return None,
            },
        ),
        _ => (t, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// Unix seconds of an RFC 3339 time.
fn epoch_s(t: &str) -> Option<f64> {
    let d = chrono::DateTime::parse_from_rfc3339(t).ok()?;
    Some(d.timestamp() as f64 + f64::from(d.timestamp_subsec_nanos()) * 1e-9)
}

fn check(r: &PioResult) -> Result<(), (String, String)> {
    let bad = |f: &str, m: String| Err((f.to_string(), m));
    if r.format != FORMAT {
        return bad("format", format!("'{}', expected '{FORMAT}'", r.format));
    }
    if r.num_tasks == 0 || r.hosts.len() != r.num_tasks as usize {
        return bad(
            "hosts",
            format!("{} hosts for {} tasks", r.hosts.len(), r.num_tasks),
        );
    }
    // The parameters as resolved, and the fields they became.
    for (i, p) in r.params.iter().enumerate() {
        let want = match p.name.as_str() {
            "block_size" => Some(r.block_size),
            "transfer_size" => Some(r.transfer_size),
            "segments" => Some(r.segments),
            "iterations" => Some(u64::from(r.iterations)),
            // np = 0 means "as many as the launcher started" (mpirun, srun).
            "np" if param_size(&p.value) == Some(0) => None,
            "np" => Some(u64::from(r.num_tasks)),
            _ => None,
        };
        if let (Some(w), Some(v)) = (want, param_size(&p.value))
            && v != w
        {
            return bad(
                &format!("params[{i}].value"),
                format!("{} = '{}', but the result says {w}", p.name, p.value),
            );
        }
    }
    let (Some(t0), Some(t1)) = (epoch_s(&r.started_at), epoch_s(&r.finished_at)) else {
        return bad("started_at", "not an RFC 3339 time".into());
    };
    if t1 < t0 {
        return bad("finished_at", "before started_at".into());
    }
    // Every iteration has a write and a read phase: a result without phases
    // is not a run's output (and would land as a run without rows).
    if r.phases.is_empty() {
        return bad("phases", "no phase in the result".into());
    }
    let mut verify_total = 0u64;
    for (i, p) in r.phases.iter().enumerate() {
        let at = |f: &str| format!("phases[{i}].{f}");
        if !matches!(p.operation.as_str(), "write" | "read") {
            return bad(&at("operation"), format!("unknown '{}'", p.operation));
        }
        if p.iteration >= r.iterations {
            return bad(
                &at("iteration"),
                format!("{} ≥ iterations ({})", p.iteration, r.iterations),
            );
        }
        if p.tasks.len() != r.num_tasks as usize {
            return bad(
                &at("tasks"),
                format!("{} processes for {} tasks", p.tasks.len(), r.num_tasks),
            );
        }
        let mut seen = vec![false; p.tasks.len()];
        for (k, t) in p.tasks.iter().enumerate() {
            let ts = [
                ("open_start", t.open_start),
                ("open_stop", t.open_stop),
                ("xfer_start", t.xfer_start),
                ("xfer_stop", t.xfer_stop),
                ("close_start", t.close_start),
                ("close_stop", t.close_stop),
            ];
            // Clocks of other nodes may differ by a little (a minute allowed:
            // NTP keeps cluster nodes within milliseconds).
            for (j, (name, v)) in ts.iter().enumerate() {
                let before = j.checked_sub(1).and_then(|b| ts.get(b)).map(|x| x.1);
                if !v.is_finite()
                    || *v < t0 - CLOCK_SKEW_S
                    || *v > t1 + CLOCK_SKEW_S
                    || before.is_some_and(|b| *v < b)
                {
                    return bad(
                        &at(&format!("tasks[{k}].{name}")),
                        format!(
                            "{v}: not within the run ({t0:.6}..{t1:.6}) after the timestamp before it"
                        ),
                    );
                }
            }
            match seen.get_mut(t.rank as usize) {
                Some(s) if !*s => *s = true,
                _ => {
                    return bad(
                        &at(&format!("tasks[{k}].rank")),
                        format!("{}: not a rank below {} seen once", t.rank, r.num_tasks),
                    );
                }
            }
        }
        let sum = |f: &dyn Fn(&PioTaskTimes) -> u64| {
            p.tasks.iter().try_fold(0u64, |a, t| a.checked_add(f(t)))
        };
        if sum(&|t| t.bytes) != Some(p.bytes) {
            return bad(&at("bytes"), format!("{}, not the processes' sum", p.bytes));
        }
        if sum(&|t| t.transfers) != Some(p.transfers) {
            return bad(
                &at("transfers"),
                format!("{}, not the processes' sum", p.transfers),
            );
        }
        let verify = if p.tasks.iter().all(|t| t.verify_errors.is_some()) {
            p.tasks
                .iter()
                .try_fold(0u64, |a, t| a.checked_add(t.verify_errors.unwrap_or(0)))
        } else {
            None
        };
        if verify != p.verify_errors {
            return bad(&at("verify_errors"), "not the processes' sum".into());
        }
        verify_total = verify_total.saturating_add(p.verify_errors.unwrap_or(0));
        let total = span(&p.tasks, |t| t.open_start, |t| t.close_stop);
        let want = [
            ("total_time_s", p.total_time_s, total),
            (
                "open_time_s",
                p.open_time_s,
                span(&p.tasks, |t| t.open_start, |t| t.open_stop),
            ),
            (
                "xfer_time_s",
                p.xfer_time_s,
                span(&p.tasks, |t| t.xfer_start, |t| t.xfer_stop),
            ),
            (
                "close_time_s",
                p.close_time_s,
                span(&p.tasks, |t| t.close_start, |t| t.close_stop),
            ),
            (
                "bw_mib_s",
                p.bw_mib_s,
                if total > 0.0 {
                    p.bytes as f64 / MIB / total
                } else {
                    0.0
                },
            ),
            (
                "iops",
                p.iops,
                if total > 0.0 {
                    p.transfers as f64 / total
                } else {
                    0.0
                },
            ),
        ];
        for (name, have, w) in want {
            if name == "bw_mib_s" && have > crate::io::ior::MAX_BW_MIB_S {
                return bad(
                    &at(name),
                    format!(
                        "{have} MiB/s: above {} MiB/s, no file system's",
                        crate::io::ior::MAX_BW_MIB_S
                    ),
                );
            }
            if !have.is_finite() || have < 0.0 || !close(have, w) {
                return bad(
                    &at(name),
                    format!("{have}, but the processes' timestamps and counters give {w}"),
                );
            }
        }
        if let Some(tt) = &p.task_time_s {
            let times: Vec<f64> = p
                .tasks
                .iter()
                .map(|t| t.close_stop - t.open_start)
                .collect();
            stats_agree(&at("task_time_s"), tt, Stats::of(&times))?;
        }
    }
    if r.verification.errors != verify_total {
        return bad(
            "verification.errors",
            format!(
                "{}, but the phases count {verify_total}",
                r.verification.errors
            ),
        );
    }
    for (i, s) in r.summary.iter().enumerate() {
        let at = |f: &str| format!("summary[{i}].{f}");
        let ps: Vec<&PioPhase> = r
            .phases
            .iter()
            .filter(|p| p.operation == s.operation)
            .collect();
        if s.iterations != ps.len() as u64 {
            return bad(
                &at("iterations"),
                format!(
                    "{}, but {} phases are '{}'",
                    s.iterations,
                    ps.len(),
                    s.operation
                ),
            );
        }
        if ps.first().map(|p| p.bytes) != Some(s.bytes) {
            return bad(&at("bytes"), format!("{}, not its first phase's", s.bytes));
        }
        let of =
            |g: &dyn Fn(&PioPhase) -> f64| Stats::of(&ps.iter().map(|p| g(p)).collect::<Vec<_>>());
        stats_agree(&at("bw_mib_s"), &s.bw_mib_s, of(&|p| p.bw_mib_s))?;
        stats_agree(
            &at("total_time_s"),
            &s.total_time_s,
            of(&|p| p.total_time_s),
        )?;
        stats_agree(&at("iops"), &s.iops, of(&|p| p.iops))?;
        let times: Vec<f64> = ps
            .iter()
            .flat_map(|p| p.tasks.iter().map(|t| t.close_stop - t.open_start))
            .collect();
        stats_agree(&at("task_time_s"), &s.task_time_s, Stats::of(&times))?;
        let bw: Vec<f64> = ps
            .iter()
            .flat_map(|p| p.tasks.iter())
            .filter(|t| t.close_stop > t.open_start)
            .map(|t| t.bytes as f64 / MIB / (t.close_stop - t.open_start))
            .collect();
        stats_agree(&at("task_bw_mib_s"), &s.task_bw_mib_s, Stats::of(&bw))?;
    }
    Ok(())
}
