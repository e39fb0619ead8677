//! A LinkTest run read back from the lake: the `linktest_*` tables of one run id
//! rebuilt into a [`LinkTestRun`] (so the report draws a lake run exactly like a
//! file), and the run's `checks` verdicts.
//!
//! A run may hold several LinkTest files (one `source` each); the report draws
//! one of them, the first source in sort order unless one is asked for.
use std::collections::BTreeMap;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int32Type, Int64Type};
use benchlake_core::lake::{Lake, RunRows};
use benchlake_formats::linktest::{
    AllToAllTime, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink,
};

use crate::linktest_report::Check;

/// Errors reading a run from the lake.
#[derive(Debug, thiserror::Error)]
pub enum LakeRunError {
    /// Lake access failed.
    #[error("lake: {0}")]
    Lake(#[from] benchlake_core::error::Error),
    /// A Parquet object could not be read.
    #[error("{key}: {message}")]
    Parquet {
        /// Object key.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// The run has no LinkTest rows (or not for the asked source).
    #[error("run {run_id}: no linktest_runs rows{}", file.as_deref().map(|s| format!(" for source '{s}'")).unwrap_or_default())]
    NotFound {
        /// Run id.
        run_id: String,
        /// Source (file) asked for.
        file: Option<String>,
    },
    /// A value in the tables is out of range (rank beyond num_tasks, ...).
    #[error("run {run_id}, table {table}: {message}")]
    Invalid {
        /// Run id.
        run_id: String,
        /// Table.
        table: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Reads every batch of `table` written for `run_id` (all its objects, any
/// date; [`Lake::read_run_rows`]).
pub async fn read_run_table(
    lake: &Lake,
    table: &str,
    run_id: &str,
) -> Result<Vec<RecordBatch>, LakeRunError> {
    lake.read_run_rows(RunRows::new(table, run_id))
        .await
        .map_err(|e| match e {
            benchlake_core::error::Error::Decode { key, message } => {
                LakeRunError::Parquet { key, message }
            }
            e => LakeRunError::Lake(e),
        })
}

/// Column `name` of `b`, or an error naming the table.
fn col<'a>(
    b: &'a RecordBatch,
    name: &str,
    table: &'static str,
    run_id: &str,
) -> Result<&'a dyn Array, LakeRunError> {
    b.column_by_name(name)
        .map(|c| c.as_ref())
        .ok_or_else(|| LakeRunError::Invalid {
            run_id: run_id.into(),
            table,
            message: format!("no column '{name}'"),
        })
}

/// Rows of `batches` whose `source` column equals `source`: (batch, row) pairs.
fn rows_of<'a>(
    batches: &'a [RecordBatch],
    source: &str,
    table: &'static str,
    run_id: &str,
) -> Result<Vec<(&'a RecordBatch, usize)>, LakeRunError> {
    let mut out = Vec::new();
    for b in batches {
        let s = col(b, "source", table, run_id)?.as_string::<i32>();
        out.extend(
            (0..b.num_rows())
                .filter(|&i| s.value(i) == source)
                .map(|i| (b, i)),
        );
    }
    Ok(out)
}

fn i32_at(
    b: &RecordBatch,
    name: &str,
    i: usize,
    table: &'static str,
    run: &str,
) -> Result<Option<i32>, LakeRunError> {
    let c = col(b, name, table, run)?.as_primitive::<Int32Type>();
    Ok(c.is_valid(i).then(|| c.value(i)))
}

fn i64_at(
    b: &RecordBatch,
    name: &str,
    i: usize,
    table: &'static str,
    run: &str,
) -> Result<Option<i64>, LakeRunError> {
    let c = col(b, name, table, run)?.as_primitive::<Int64Type>();
    Ok(c.is_valid(i).then(|| c.value(i)))
}

fn f64_at(
    b: &RecordBatch,
    name: &str,
    i: usize,
    table: &'static str,
    run: &str,
) -> Result<Option<f64>, LakeRunError> {
    let c = col(b, name, table, run)?.as_primitive::<Float64Type>();
    Ok(c.is_valid(i).then(|| c.value(i)))
}

fn str_at(
    b: &RecordBatch,
    name: &str,
    i: usize,
    table: &'static str,
    run: &str,
) -> Result<Option<String>, LakeRunError> {
    let c = col(b, name, table, run)?.as_string::<i32>();
    Ok(c.is_valid(i).then(|| c.value(i).to_string()))
}

fn bool_at(
    b: &RecordBatch,
    name: &str,
    i: usize,
    table: &'static str,
    run: &str,
) -> Result<bool, LakeRunError> {
    let c = col(b, name, table, run)?.as_boolean();
    Ok(c.is_valid(i) && c.value(i))
}

/// "1.2p1" / "2.1.17" → the payload format and version numbers.
fn parse_version(v: &str) -> (PayloadFormat, [u32; 3]) {
    let (fmt, parts): (PayloadFormat, Vec<&str>) = match v.split_once('p') {
        Some((ab, c)) => (PayloadFormat::V1, ab.split('.').chain([c]).collect()),
        None => (PayloadFormat::V2, v.split('.').collect()),
    };
    let mut out = [0u32; 3];
    for (o, p) in out.iter_mut().zip(parts) {
        *o = p.parse().unwrap_or(0);
    }
    (fmt, out)
}

/// Rebuilds the LinkTest run `run_id` (file `source`, or the first source) from
/// the lake's `linktest_*` tables.
pub async fn load_run(
    lake: &Lake,
    run_id: &str,
    source: Option<&str>,
) -> Result<(LinkTestRun, String), LakeRunError> {
    load(lake, run_id, source, None).await
}

/// The run `run_id` (file `source`, or the first source) without its pairs:
/// every table but `linktest_timings`, one permutation per value of `perms`
/// (ascending; the values the pair table holds, permutation 0 when empty)
/// with empty `times` and `steps`. For readers that stream the pairs
/// (the dashboard's pair view).
pub async fn load_run_meta(
    lake: &Lake,
    run_id: &str,
    source: Option<&str>,
    perms: &[i32],
) -> Result<(LinkTestRun, String), LakeRunError> {
    load(lake, run_id, source, Some(perms)).await
}

async fn load(
    lake: &Lake,
    run_id: &str,
    source: Option<&str>,
    only_perms: Option<&[i32]>,
) -> Result<(LinkTestRun, String), LakeRunError> {
    const RUNS: &str = "linktest_runs";
    let runs = read_run_table(lake, RUNS, run_id).await?;
    let mut sources = Vec::new();
    for b in &runs {
        let s = col(b, "source", RUNS, run_id)?.as_string::<i32>();
        sources.extend((0..b.num_rows()).map(|i| s.value(i).to_string()));
    }
    sources.sort();
    let chosen = match source {
        Some(s) => sources.iter().find(|x| *x == s),
        None => sources.first(),
    }
    .cloned()
    .ok_or_else(|| LakeRunError::NotFound {
        run_id: run_id.into(),
        file: source.map(str::to_string),
    })?;
    let &(rb, ri) = rows_of(&runs, &chosen, RUNS, run_id)?
        .first()
        .ok_or_else(|| LakeRunError::NotFound {
            run_id: run_id.into(),
            file: Some(chosen.clone()),
        })?;
    let r = run_id;
    let u64_of = |name: &str| -> Result<Option<u64>, LakeRunError> {
        Ok(i64_at(rb, name, ri, RUNS, r)?.map(|v| v.max(0) as u64))
    };
    let num_tasks = u64_of("num_tasks")?.unwrap_or(0) as usize;
    // A table value can be anything: refuse matrices that would not fit in memory.
    if num_tasks > 1 << 17 {
        return Err(LakeRunError::Invalid {
            run_id: r.into(),
            table: RUNS,
            message: format!("num_tasks {num_tasks} is beyond what a report can draw"),
        });
    }
    let version = str_at(rb, "linktest_version", ri, RUNS, r)?.unwrap_or_default();
    let (format, version) = parse_version(&version);
    let flags = Flags {
        all_to_all: bool_at(rb, "all_to_all", ri, RUNS, r)?,
        bidirectional: bool_at(rb, "bidirectional", ri, RUNS, r)?,
        unidirectional: bool_at(rb, "unidirectional", ri, RUNS, r)?,
        bisection: bool_at(rb, "bisection", ri, RUNS, r)?,
        randomize_steps: bool_at(rb, "randomize_steps", ri, RUNS, r)?,
        serial: bool_at(rb, "serial", ri, RUNS, r)?,
        ..Flags::default()
    };

    // Ranks.
    const RANKS: &str = "linktest_ranks";
    let ranks_b = read_run_table(lake, RANKS, run_id).await?;
    let mut ranks: Vec<RankInfo> = (0..num_tasks)
        .map(|rank| RankInfo {
            rank,
            hostname: "?".into(),
            core_id: None,
            coords: None,
        })
        .collect();
    for (b, i) in rows_of(&ranks_b, &chosen, RANKS, r)? {
        let rank = i32_at(b, "rank", i, RANKS, r)?.unwrap_or(-1);
        let slot = usize::try_from(rank)
            .ok()
            .and_then(|k| ranks.get_mut(k))
            .ok_or_else(|| LakeRunError::Invalid {
                run_id: r.into(),
                table: RANKS,
                message: format!("rank {rank} outside 0..{num_tasks}"),
            })?;
        slot.hostname = str_at(b, "hostname", i, RANKS, r)?.unwrap_or_default();
        slot.core_id = i32_at(b, "core_id", i, RANKS, r)?;
    }

    // Timings → dense matrices per permutation.
    const TIMINGS: &str = "linktest_timings";
    let mut perms: BTreeMap<i32, Permutation> = BTreeMap::new();
    let empty = |n: usize| Permutation {
        start_time: None,
        end_time: None,
        min_time_s: 0.0,
        avg_time_s: 0.0,
        max_time_s: 0.0,
        a2a: None,
        times: vec![0.0; n * n],
        steps: vec![0; n * n],
        alltoall: Vec::new(),
        slow_links: Vec::new(),
    };
    let rank_of = |v: i32, table: &'static str| -> Result<usize, LakeRunError> {
        usize::try_from(v)
            .ok()
            .filter(|k| *k < num_tasks)
            .ok_or_else(|| LakeRunError::Invalid {
                run_id: r.into(),
                table,
                message: format!("rank {v} outside 0..{num_tasks}"),
            })
    };
    let dense = only_perms.is_none();
    for v in only_perms.unwrap_or_default() {
        perms.entry(*v).or_insert_with(|| empty(0));
    }
    let timings = if dense {
        read_run_table(lake, TIMINGS, run_id).await?
    } else {
        Vec::new()
    };
    for b in timings {
        let src = col(&b, "source", TIMINGS, r)?.as_string::<i32>();
        let perm = col(&b, "permutation", TIMINGS, r)?.as_primitive::<Int32Type>();
        let from = col(&b, "from_rank", TIMINGS, r)?.as_primitive::<Int32Type>();
        let to = col(&b, "to_rank", TIMINGS, r)?.as_primitive::<Int32Type>();
        let step = col(&b, "step", TIMINGS, r)?.as_primitive::<Int32Type>();
        let time = col(&b, "time_s", TIMINGS, r)?.as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            if src.value(i) != chosen {
                continue;
            }
            let (f, t) = (
                rank_of(from.value(i), TIMINGS)?,
                rank_of(to.value(i), TIMINGS)?,
            );
            let p = perms
                .entry(perm.value(i))
                .or_insert_with(|| empty(num_tasks));
            if let Some(x) = p.times.get_mut(f * num_tasks + t) {
                *x = time.value(i);
            }
            if let Some(x) = p.steps.get_mut(f * num_tasks + t) {
                *x = step.value(i);
            }
        }
    }
    if perms.is_empty() {
        perms.insert(0, empty(if dense { num_tasks } else { 0 }));
    }

    const A2A: &str = "linktest_alltoall";
    let a2a_b = read_run_table(lake, A2A, run_id).await?;
    for (b, i) in rows_of(&a2a_b, &chosen, A2A, r)? {
        let p = i32_at(b, "permutation", i, A2A, r)?.unwrap_or(0);
        let rank = rank_of(i32_at(b, "rank", i, A2A, r)?.unwrap_or(-1), A2A)?;
        if let Some(pm) = perms.get_mut(&p) {
            pm.alltoall.push(AllToAllTime {
                rank,
                step: i32_at(b, "step", i, A2A, r)?,
                time_s: f64_at(b, "time_s", i, A2A, r)?.unwrap_or(f64::NAN),
            });
        }
    }
    const SLOW: &str = "linktest_slow_links";
    let slow_b = read_run_table(lake, SLOW, run_id).await?;
    for (b, i) in rows_of(&slow_b, &chosen, SLOW, r)? {
        let p = i32_at(b, "permutation", i, SLOW, r)?.unwrap_or(0);
        let link = SlowLink {
            from_rank: rank_of(i32_at(b, "from_rank", i, SLOW, r)?.unwrap_or(-1), SLOW)?,
            to_rank: rank_of(i32_at(b, "to_rank", i, SLOW, r)?.unwrap_or(-1), SLOW)?,
            time_s: f64_at(b, "time_s", i, SLOW, r)?.unwrap_or(f64::NAN),
            retest_time_s: f64_at(b, "retest_time_s", i, SLOW, r)?,
        };
        if let Some(pm) = perms.get_mut(&p) {
            pm.slow_links.push(link);
        }
    }
    // The per-permutation summary columns are not in the tables; the run's are.
    let (min, avg, max) = (
        f64_at(rb, "min_time_s", ri, RUNS, r)?.unwrap_or(f64::NAN),
        f64_at(rb, "avg_time_s", ri, RUNS, r)?.unwrap_or(f64::NAN),
        f64_at(rb, "max_time_s", ri, RUNS, r)?.unwrap_or(f64::NAN),
    );
    let a2a = match (
        f64_at(rb, "a2a_min_time_s", ri, RUNS, r)?,
        f64_at(rb, "a2a_avg_time_s", ri, RUNS, r)?,
        f64_at(rb, "a2a_max_time_s", ri, RUNS, r)?,
    ) {
        (Some(a), Some(b), Some(c)) => Some([a, b, c]),
        _ => None,
    };
    let permutations = perms
        .into_values()
        .map(|mut p| {
            (p.min_time_s, p.avg_time_s, p.max_time_s, p.a2a) = (min, avg, max, a2a);
            p
        })
        .collect();
    let run = LinkTestRun {
        format,
        version,
        git_hash: str_at(rb, "git_hash", ri, RUNS, r)?,
        mode: str_at(rb, "mode", ri, RUNS, r)?.unwrap_or_default(),
        num_tasks,
        num_messages: u64_of("num_messages")?.unwrap_or(0),
        message_size: u64_of("message_size")?.unwrap_or(0),
        num_warmup_messages: u64_of("num_warmup_messages")?,
        num_serial_retests: u64_of("num_serial_retests")?.unwrap_or(0),
        num_multi_buffers: u64_of("num_multi_buffers")?,
        buffer_seed: None,
        num_randomized_tasks: u64_of("num_randomized_tasks")?,
        task_seed: None,
        memory_allocator: None,
        flags,
        v1_stats: None,
        ranks,
        permutations,
    };
    Ok((run, chosen))
}

/// The `checks` rows of `run_id` (every source), in check-name order.
pub async fn load_checks(lake: &Lake, run_id: &str) -> Result<Vec<Check>, LakeRunError> {
    const CHECKS: &str = "checks";
    let mut out = Vec::new();
    for b in read_run_table(lake, CHECKS, run_id).await? {
        for i in 0..b.num_rows() {
            out.push(Check {
                source: str_at(&b, "source", i, CHECKS, run_id)?.unwrap_or_default(),
                check: str_at(&b, "check", i, CHECKS, run_id)?.unwrap_or_default(),
                status: str_at(&b, "status", i, CHECKS, run_id)?.unwrap_or_default(),
                value: f64_at(&b, "value", i, CHECKS, run_id)?,
                reference: f64_at(&b, "reference", i, CHECKS, run_id)?,
                unit: str_at(&b, "unit", i, CHECKS, run_id)?,
                message: str_at(&b, "message", i, CHECKS, run_id)?,
            });
        }
    }
    out.sort_by(|a, b| (&a.check, &a.source).cmp(&(&b.check, &b.source)));
    Ok(out)
}
