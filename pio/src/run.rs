//! One process's part of a pio run, and rank 0's assembly of the result.
//!
//! Per iteration (each on a new file unless `preallocate`):
//! `barrier · open · write (+fsync) · close · barrier · evict caches · barrier ·
//! open · read (+verify) · close · barrier`. Each process records the six
//! timestamps of each phase; rank 0 computes the aggregate figures as the
//! consortium defines them: the phase interval runs from the earliest start to
//! the latest stop, bandwidth is MiB (2^20 bytes) over that interval including
//! open and close.
use std::os::unix::fs::FileExt;
use std::path::Path;

use benchlake_formats::io::pio::{
    FORMAT, PioCorruption, PioPhase, PioResult, PioSummary, PioTaskTimes, PioVerification, Stats,
};
use serde::{Deserialize, Serialize};

use crate::comm::Comm;
use crate::data;
use crate::error::{PioError, Result};
use crate::fsio::{self, AlignedBuf, DIRECT_ALIGN};
use crate::layout::{Layout, Plan};
use crate::params::{Config, ReadCache};

/// One phase of one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    iteration: u32,
    operation: String,
    times: PioTaskTimes,
    first_error: Option<PioCorruption>,
}

/// Everything a process reports to rank 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    rank: u32,
    cache_mode: String,
    records: Vec<Record>,
    messages: Vec<String>,
}

const MIB: f64 = 1048576.0;

/// The read-side reordering shift: processes per node when the run spans
/// several nodes (so each client reads data written on another node, like
/// IOR `-C -Q 1`), else 1 (another process on the same node: this does not
/// defeat a shared page cache, the cache eviction does).
pub fn reorder_shift(cfg: &Config, hosts: &[String]) -> u32 {
    let n = hosts.len() as u32;
    if !cfg.reorder || n <= 1 {
        return 0;
    }
    let shift = cfg.reorder_shift.unwrap_or_else(|| {
        let first = hosts.first().cloned().unwrap_or_default();
        let per_node = hosts.iter().filter(|h| **h == first).count() as u32;
        if per_node < n { per_node } else { 1 }
    });
    shift % n
}

/// Runs this process's share of the benchmark. Rank 0 returns the result.
pub fn run_rank(cfg: &Config, comm: &mut Comm, launcher: &str) -> Result<Option<PioResult>> {
    let started_at = chrono::Utc::now().to_rfc3339();
    let n = comm.size();
    let me = comm.rank();
    let layout = Layout::new(cfg, n);
    if let Err(e) = layout.check() {
        comm.barrier(Err(e.clone()))?;
        return Err(PioError::param("stride", e));
    }
    let shift = reorder_shift(cfg, comm.hosts());
    let writer_of_my_read = (me + shift) % n.max(1);
    let read_file = layout.file_of(writer_of_my_read);
    let my_file = layout.file_of(me);
    // The first rank on each host does host-wide work (drop_caches).
    let host_leader = comm
        .hosts()
        .iter()
        .position(|h| Some(h) == comm.hosts().get(me as usize))
        .is_some_and(|p| p as u32 == me);
    let owns_shared = !cfg.file_per_proc && me == 0;
    let owns_file = cfg.file_per_proc || owns_shared;

    // Decide the cache mode before timing anything.
    let direct_ok = || {
        layout.aligned(DIRECT_ALIGN as u64)
            && fsio::direct_supported(&cfg.filename, &format!("{me}-{}", std::process::id()))
    };
    let mode = match cfg.read_cache {
        ReadCache::Auto if direct_ok() => "o_direct",
        ReadCache::Auto | ReadCache::Fadvise => "fadvise_dontneed",
        ReadCache::Direct if direct_ok() => "o_direct",
        ReadCache::Direct => {
            let e = "read_cache=direct needs 4 KiB aligned offsets/sizes and a file system accepting O_DIRECT";
            comm.barrier(Err(e.into()))?;
            return Err(PioError::param("read_cache", e));
        }
        ReadCache::DropCaches => "drop_caches",
        ReadCache::None => "none",
    };
    let mut buf = AlignedBuf::new(usize::try_from(cfg.transfer_size).unwrap_or(usize::MAX));
    // Block positions are computed here, before any timed interval.
    let write_plan = layout.plan(me);
    let read_plan = layout.plan(writer_of_my_read);
    let mut records = Vec::new();
    let mut messages = Vec::new();

    for it in 0..cfg.iterations {
        // New file per iteration (or preallocated space), outside the timing.
        let prep = if owns_file {
            let _ = std::fs::remove_file(&my_file);
            if cfg.preallocate {
                fsio::preallocate(&my_file, layout.file_size(me)).map_err(|e| e.to_string())
            } else {
                Ok(())
            }
        } else {
            Ok(())
        };
        comm.barrier(prep)?;
        let w = write_phase(cfg, &layout, &write_plan, me, it, &my_file, &mut buf);
        let (w, st) = split(w);
        comm.barrier(st)?;
        records.extend(w);

        // Between the phases, outside the timing: size check, optional
        // corruption (testing aid), cache eviction.
        let mut between: std::result::Result<(), String> = Ok(());
        if owns_file {
            let expect = layout.file_size(me);
            match std::fs::metadata(&my_file) {
                Ok(m) if m.len() == expect => {}
                Ok(m) => messages.push(format!(
                    "iteration {it}: {} is {} bytes, the layout ends at {expect}",
                    my_file.display(),
                    m.len()
                )),
                Err(e) => between = Err(format!("stat {}: {e}", my_file.display())),
            }
        }
        if let (Some(off), 0) = (cfg.inject_corruption, me)
            && let Err(e) = fsio::corrupt(&layout.file_of(0), off)
        {
            between = Err(e.to_string());
        }
        let evicted = match mode {
            "fadvise_dontneed" => fsio::evict(&read_file).map_err(|e| e.to_string()),
            "drop_caches" if host_leader => fsio::drop_caches().map_err(|e| e.to_string()),
            _ => Ok(()),
        };
        comm.barrier(between.and(evicted))?;

        let r = read_phase(
            cfg,
            &layout,
            &read_plan,
            me,
            writer_of_my_read,
            it,
            &read_file,
            mode == "o_direct",
            &mut buf,
        );
        let (r, st) = split(r);
        comm.barrier(st)?;
        records.extend(r);
    }
    if !cfg.keep_file && owns_file {
        let _ = std::fs::remove_file(&my_file);
    }
    let report = Report {
        rank: me,
        cache_mode: mode.to_string(),
        records,
        messages,
    };
    let line = serde_json::to_string(&report).map_err(|e| PioError::Result(e.to_string()))?;
    let Some(lines) = comm.gather(line)? else {
        return Ok(None);
    };
    let mut reports = Vec::new();
    for l in lines {
        reports.push(
            serde_json::from_str::<Report>(&l)
                .map_err(|e| PioError::Comm(format!("bad report: {e}")))?,
        );
    }
    Ok(Some(assemble(
        cfg,
        &layout,
        comm.hosts(),
        launcher,
        shift,
        started_at,
        reports,
    )))
}

fn split(r: Result<Record>) -> (Option<Record>, std::result::Result<(), String>) {
    match r {
        Ok(r) => (Some(r), Ok(())),
        Err(e) => (None, Err(e.to_string())),
    }
}

fn write_phase(
    cfg: &Config,
    layout: &Layout,
    plan: &Plan,
    me: u32,
    it: u32,
    path: &Path,
    buf: &mut AlignedBuf,
) -> Result<Record> {
    let key = data::key(cfg.seed, me, it);
    let (mut bytes, mut transfers) = (0u64, 0u64);
    let open_start = fsio::now();
    let f = fsio::open_write(path)?;
    let open_stop = fsio::now();
    let xfer_start = fsio::now();
    layout.for_each_planned(plan, |t| {
        let b = buf.get_mut(t.len as usize);
        data::fill(b, key, t.offset);
        f.write_all_at(b, t.offset)
            .map_err(|e| PioError::io("write", path, e))?;
        bytes += t.len;
        transfers += 1;
        Ok::<(), PioError>(())
    })?;
    if cfg.fsync {
        f.sync_all().map_err(|e| PioError::io("fsync", path, e))?;
    }
    let xfer_stop = fsio::now();
    let close_start = fsio::now();
    fsio::close(f, path)?;
    let close_stop = fsio::now();
    Ok(Record {
        iteration: it,
        operation: "write".into(),
        times: PioTaskTimes {
            rank: me,
            open_start,
            open_stop,
            xfer_start,
            xfer_stop,
            close_start,
            close_stop,
            bytes,
            transfers,
            verify_errors: None,
        },
        first_error: None,
    })
}

#[allow(clippy::too_many_arguments)]
fn read_phase(
    cfg: &Config,
    layout: &Layout,
    plan: &Plan,
    me: u32,
    writer: u32,
    it: u32,
    path: &Path,
    direct: bool,
    buf: &mut AlignedBuf,
) -> Result<Record> {
    let key = data::key(cfg.seed, writer, it);
    let (mut bytes, mut transfers, mut errors) = (0u64, 0u64, 0u64);
    let mut first: Option<PioCorruption> = None;
    let open_start = fsio::now();
    let f = fsio::open_read(path, direct).map_err(|e| PioError::io("open for read", path, e))?;
    let open_stop = fsio::now();
    let xfer_start = fsio::now();
    layout.for_each_planned(plan, |t| {
        let b = buf.get_mut(t.len as usize);
        f.read_exact_at(b, t.offset)
            .map_err(|e| PioError::io("read", path, e))?;
        if cfg.verify
            && let Some(m) = data::verify(b, key, t.offset)
        {
            {
                errors += m.count;
                first.get_or_insert(PioCorruption {
                    iteration: it,
                    reader: me,
                    writer,
                    file: path.display().to_string(),
                    offset: m.offset,
                    expected: m.expected,
                    found: m.found,
                });
            }
        }
        bytes += t.len;
        transfers += 1;
        Ok::<(), PioError>(())
    })?;
    let xfer_stop = fsio::now();
    let close_start = fsio::now();
    fsio::close(f, path)?;
    let close_stop = fsio::now();
    Ok(Record {
        iteration: it,
        operation: "read".into(),
        times: PioTaskTimes {
            rank: me,
            open_start,
            open_stop,
            xfer_start,
            xfer_stop,
            close_start,
            close_stop,
            bytes,
            transfers,
            verify_errors: cfg.verify.then_some(errors),
        },
        first_error: first,
    })
}

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

/// Aggregates the per-process records of one phase (the consortium's timing
/// rules: earliest start to latest stop; MiB/s with open and close included).
pub fn phase_of(iteration: u32, operation: &str, tasks: Vec<PioTaskTimes>) -> PioPhase {
    let bytes: u64 = tasks.iter().map(|t| t.bytes).sum();
    let transfers: u64 = tasks.iter().map(|t| t.transfers).sum();
    let total = span(&tasks, |t| t.open_start, |t| t.close_stop);
    let verify_errors = if tasks.iter().all(|t| t.verify_errors.is_some()) && !tasks.is_empty() {
        Some(tasks.iter().filter_map(|t| t.verify_errors).sum())
    } else {
        None
    };
    PioPhase {
        iteration,
        operation: operation.to_string(),
        bytes,
        transfers,
        total_time_s: total,
        open_time_s: span(&tasks, |t| t.open_start, |t| t.open_stop),
        xfer_time_s: span(&tasks, |t| t.xfer_start, |t| t.xfer_stop),
        close_time_s: span(&tasks, |t| t.close_start, |t| t.close_stop),
        bw_mib_s: if total > 0.0 {
            bytes as f64 / MIB / total
        } else {
            0.0
        },
        iops: if total > 0.0 {
            transfers as f64 / total
        } else {
            0.0
        },
        verify_errors,
        task_time_s: Stats::of(
            &tasks
                .iter()
                .map(|t| t.close_stop - t.open_start)
                .collect::<Vec<_>>(),
        ),
        tasks,
    }
}

/// Statistics of one operation over the phases.
pub fn summary_of(operation: &str, phases: &[PioPhase]) -> Option<PioSummary> {
    let ps: Vec<&PioPhase> = phases.iter().filter(|p| p.operation == operation).collect();
    let zero = Stats {
        n: 0,
        min: 0.0,
        mean: 0.0,
        max: 0.0,
        stddev: 0.0,
    };
    let f = |g: &dyn Fn(&PioPhase) -> f64| Stats::of(&ps.iter().map(|p| g(p)).collect::<Vec<_>>());
    let task_times: Vec<f64> = ps
        .iter()
        .flat_map(|p| p.tasks.iter().map(|t| t.close_stop - t.open_start))
        .collect();
    let task_bw: Vec<f64> = ps
        .iter()
        .flat_map(|p| p.tasks.iter())
        .filter(|t| t.close_stop > t.open_start)
        .map(|t| t.bytes as f64 / MIB / (t.close_stop - t.open_start))
        .collect();
    Some(PioSummary {
        operation: operation.to_string(),
        iterations: ps.len() as u64,
        bytes: ps.first()?.bytes,
        bw_mib_s: f(&|p| p.bw_mib_s)?,
        total_time_s: f(&|p| p.total_time_s)?,
        iops: f(&|p| p.iops)?,
        task_time_s: Stats::of(&task_times).unwrap_or(zero),
        task_bw_mib_s: Stats::of(&task_bw).unwrap_or(zero),
    })
}

fn assemble(
    cfg: &Config,
    layout: &Layout,
    hosts: &[String],
    launcher: &str,
    shift: u32,
    started_at: String,
    mut reports: Vec<Report>,
) -> PioResult {
    reports.sort_by_key(|r| r.rank);
    let mut phases = Vec::new();
    let mut first_error = None;
    for it in 0..cfg.iterations {
        for op in ["write", "read"] {
            let mut tasks = Vec::new();
            for r in &reports {
                for rec in r
                    .records
                    .iter()
                    .filter(|x| x.iteration == it && x.operation == op)
                {
                    tasks.push(rec.times.clone());
                    if first_error.is_none() {
                        first_error = rec.first_error.clone();
                    }
                }
            }
            if !tasks.is_empty() {
                phases.push(phase_of(it, op, tasks));
            }
        }
    }
    let summary = ["write", "read"]
        .iter()
        .filter_map(|op| summary_of(op, &phases))
        .collect();
    let errors: u64 = phases.iter().filter_map(|p| p.verify_errors).sum();
    let messages: Vec<String> = reports
        .iter()
        .flat_map(|r| r.messages.iter().cloned())
        .collect();
    let mut modes: Vec<&str> = reports.iter().map(|r| r.cache_mode.as_str()).collect();
    modes.sort_unstable();
    modes.dedup();
    let status = if !cfg.verify {
        "SKIPPED"
    } else if errors == 0 && messages.is_empty() {
        "PASS"
    } else {
        "FAIL"
    };
    PioResult {
        format: FORMAT.into(),
        pio_version: env!("CARGO_PKG_VERSION").into(),
        started_at,
        finished_at: chrono::Utc::now().to_rfc3339(),
        params: cfg.result_params(),
        api: "POSIX".into(),
        pattern: cfg.pattern.name().into(),
        file_per_proc: cfg.file_per_proc,
        num_tasks: hosts.len() as u32,
        hosts: hosts.to_vec(),
        launcher: launcher.into(),
        block_size: cfg.block_size,
        transfer_size: cfg.transfer_size,
        min_transfer_size: if cfg.pattern.random_sizes() {
            cfg.min_transfer_size
        } else {
            cfg.transfer_size
        },
        segments: cfg.segments,
        stride: layout.stride(),
        header_bytes: cfg.header_bytes,
        file_size: layout.file_size(0),
        fsync: cfg.fsync,
        collective: cfg.collective,
        iterations: cfg.iterations,
        cache_mode: modes.join("+"),
        reorder_shift: shift,
        verify: cfg.verify,
        phases,
        summary,
        verification: PioVerification {
            status: status.into(),
            errors,
            first_error,
            messages,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rank: u32, s: f64, e: f64, bytes: u64) -> PioTaskTimes {
        PioTaskTimes {
            rank,
            open_start: s,
            open_stop: s + 0.1,
            xfer_start: s + 0.1,
            xfer_stop: e - 0.1,
            close_start: e - 0.1,
            close_stop: e,
            bytes,
            transfers: 4,
            verify_errors: Some(0),
        }
    }

    #[test]
    fn aggregate_is_latest_stop_minus_earliest_start() {
        let p = phase_of(
            0,
            "write",
            vec![t(0, 10.0, 11.0, 1 << 20), t(1, 10.5, 12.0, 1 << 20)],
        );
        assert_eq!(p.total_time_s, 2.0);
        assert_eq!(p.bw_mib_s, 1.0);
        assert!((p.open_time_s - 0.6).abs() < 1e-12);
        assert!((p.close_time_s - 1.1).abs() < 1e-12);
        assert_eq!(p.iops, 4.0);
        assert_eq!(p.verify_errors, Some(0));
        let between = p.task_time_s.unwrap();
        assert_eq!(
            (between.n, between.min, between.max, between.mean),
            (2, 1.0, 1.5, 1.25)
        );
        assert_eq!(between.stddev, 0.25);
        let p2 = phase_of(
            1,
            "write",
            vec![t(0, 20.0, 24.0, 1 << 20), t(1, 20.0, 20.5, 1 << 20)],
        );
        let s = summary_of("write", &[p, p2]).unwrap();
        assert_eq!(
            (s.bw_mib_s.max, s.bw_mib_s.min, s.bw_mib_s.mean),
            (1.0, 0.5, 0.75)
        );
        assert_eq!(s.bw_mib_s.stddev, 0.25); // population deviation
        assert_eq!(s.task_time_s.n, 4);
        assert_eq!(s.task_time_s.max, 4.0);
    }

    #[test]
    fn shift_crosses_nodes_when_it_can() {
        let cfg = crate::params::resolve(&Default::default(), |_| None).unwrap();
        let h = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(reorder_shift(&cfg, &h(&["a"])), 0);
        assert_eq!(reorder_shift(&cfg, &h(&["a", "a", "a", "a"])), 1);
        assert_eq!(reorder_shift(&cfg, &h(&["a", "a", "b", "b"])), 2);
    }
}
