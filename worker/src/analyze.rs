//! The fanned-out counts analysis (docs/counts.md, "Through the cluster"):
//!
//! - `analyze_plan` downloads a run's count files, cuts them into parts with
//!   [`counts::plan`] (by lead rank, and by block range — i.e. call range — of
//!   compact pairs above `max_part_bytes`) and asks for one `analyze_part` job
//!   per part in the job group `counts-{plan job}` plus one `analyze_merge` job
//!   that waits for that group;
//! - `analyze_part` downloads its part's files, runs [`counts::analyze_part`] and
//!   writes the [`PartResult`] as JSON to the scratch object
//!   `_work/{run}/counts/{plan job}/part-{index}.json` (never a table: nothing of
//!   a part is visible to readers; a retried part overwrites the same key);
//! - `analyze_merge` reads every part result (a missing one fails the job naming
//!   the part), merges them, returns the `alltoallv_patterns`, `alltoallv_stats`
//!   and heat-map tables for the normal commit (final keys per merge job: a
//!   retried merge overwrites) and puts the Go-format text reports under
//!   `reports/{run}/counts/{plan job}/`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use benchlake_analysis::counts::{self, Options, PartInput, PartResult, PartSpec};
use benchlake_core::jobs::{
    ANALYZE_MERGE_JOB, ANALYZE_PART_JOB, ANALYZE_PLAN_JOB, FollowUp, IngestSpec,
};
use benchlake_core::layout;
use serde::{Deserialize, Serialize};

use crate::{ExecError, ExecOutput, Executor, JobContext};

/// Spec of an `analyze_plan` job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSpec {
    /// Raw object keys of the profiler output (count, location files...).
    pub keys: Vec<String>,
    /// Analysis options.
    #[serde(default)]
    pub options: Options,
}

/// Spec of an `analyze_part` job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartJobSpec {
    /// The analysis (the plan job's id).
    pub analysis: String,
    /// Index of the part, 0-based.
    pub index: usize,
    /// Number of parts.
    pub parts: usize,
    /// The part, with lake keys as paths.
    pub part: PartSpec,
}

/// Spec of an `analyze_merge` job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeSpec {
    /// The analysis (the plan job's id).
    pub analysis: String,
    /// One line per part saying what it covers (for error messages).
    pub parts: Vec<String>,
    /// Options (reports need the threshold).
    #[serde(default)]
    pub options: Options,
}

/// The job group of an analysis' parts.
pub fn group_of(analysis: &str) -> String {
    format!("counts-{analysis}")
}

/// Scratch key of a part result ([`layout::counts_part_key`]).
pub fn part_key(run_id: &str, analysis: &str, index: usize) -> Result<String, ExecError> {
    Ok(layout::counts_part_key(run_id, analysis, index)?)
}

/// The follow-up of an ingest job whose kind declares the analysis
/// (`counts`): the analysis of the same files with the default options.
pub fn follow_up_of_ingest(s: &IngestSpec) -> Vec<FollowUp> {
    if s.keys.is_empty() {
        return Vec::new();
    }
    let spec = PlanSpec {
        keys: s.keys.clone(),
        options: Options::default(),
    };
    match serde_json::to_value(&spec) {
        Ok(spec) => vec![FollowUp {
            kind: ANALYZE_PLAN_JOB.into(),
            spec,
            group: None,
            wait_for: None,
        }],
        Err(_) => Vec::new(),
    }
}

fn spec<T: serde::de::DeserializeOwned>(ctx: &JobContext) -> Result<T, ExecError> {
    serde_json::from_str(&ctx.spec_json)
        .map_err(|e| ExecError::Permanent(format!("{} job spec: {e}", ctx.kind)))
}

fn analysis_err(e: counts::CountsError, map: &BTreeMap<PathBuf, String>) -> ExecError {
    let retry = matches!(&e, counts::CountsError::Io { .. })
        || matches!(&e, counts::CountsError::Format(f) if f.is_retryable());
    // Name the lake keys, not the scratch copies.
    let mut msg = e.to_string();
    for (local, key) in map {
        msg = msg.replace(&local.display().to_string(), key);
    }
    if retry {
        ExecError::Retryable(msg)
    } else {
        ExecError::Permanent(msg)
    }
}

/// Rewrites every path of a part spec through `f`.
fn map_paths(
    p: &mut PartSpec,
    mut f: impl FnMut(&Path) -> Result<PathBuf, ExecError>,
) -> Result<(), ExecError> {
    match &mut p.input {
        PartInput::Compact { send, recv, .. } => {
            *send = f(send)?;
            *recv = f(recv)?;
        }
        PartInput::PerCall { files } => {
            for (_, path) in files.iter_mut() {
                *path = f(path)?;
            }
        }
    }
    for l in p.location_files.iter_mut() {
        *l = f(l)?;
    }
    Ok(())
}

/// What a part covers, for messages.
fn describe(p: &PartSpec) -> String {
    match &p.input {
        PartInput::Compact {
            send,
            send_start,
            blocks,
            ..
        } => format!(
            "lead rank {} (job {}), {} from block {}{}",
            p.lead,
            p.job,
            send.display(),
            send_start.index,
            blocks
                .map(|b| format!(", {b} block(s)"))
                .unwrap_or_default()
        ),
        PartInput::PerCall { files } => format!(
            "lead rank {}, {} per-call file(s) from call {}",
            p.lead,
            files.len(),
            files.first().map(|f| f.0).unwrap_or_default()
        ),
    }
}

/// `analyze_plan`.
pub struct AnalyzePlan;

impl Executor for AnalyzePlan {
    fn kind(&self) -> &'static str {
        ANALYZE_PLAN_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: PlanSpec = spec(ctx)?;
        // Only the files the analysis reads are downloaded (the plan scans the
        // block starts of big compact pairs).
        let mut local_to_key = BTreeMap::new();
        let mut files = Vec::new();
        for k in &s.keys {
            let name = k.rsplit('/').next().unwrap_or_default();
            use benchlake_formats::counts::FileKind as K;
            if !matches!(
                benchlake_formats::counts::classify(Path::new(name)),
                Some(
                    K::SendCounters { .. }
                        | K::RecvCounters { .. }
                        | K::PerCall { .. }
                        | K::Location { .. }
                )
            ) {
                continue;
            }
            if ctx.cancelled() {
                return Err(ExecError::Cancelled);
            }
            let p = ctx.fetch(k)?;
            local_to_key.insert(p.clone(), k.clone());
            files.push(p);
        }
        let mut parts =
            counts::plan(&files, &s.options).map_err(|e| analysis_err(e, &local_to_key))?;
        if parts.is_empty() {
            tracing::info!(job = %ctx.job_id, "no count files to analyse");
            return Ok(ExecOutput::default());
        }
        for p in parts.iter_mut() {
            map_paths(p, |l| {
                local_to_key.get(l).map(PathBuf::from).ok_or_else(|| {
                    ExecError::Permanent(format!("plan: unknown file {}", l.display()))
                })
            })?;
        }
        let group = group_of(&ctx.job_id);
        let n = parts.len();
        let mut follow_ups = Vec::with_capacity(n + 1);
        let mut described = Vec::with_capacity(n);
        for (index, part) in parts.into_iter().enumerate() {
            described.push(describe(&part));
            let js = PartJobSpec {
                analysis: ctx.job_id.clone(),
                index,
                parts: n,
                part,
            };
            follow_ups.push(FollowUp {
                kind: ANALYZE_PART_JOB.into(),
                spec: serde_json::to_value(&js).map_err(|e| ExecError::Permanent(e.to_string()))?,
                group: Some(group.clone()),
                wait_for: None,
            });
        }
        let ms = MergeSpec {
            analysis: ctx.job_id.clone(),
            parts: described,
            options: s.options.clone(),
        };
        follow_ups.push(FollowUp {
            kind: ANALYZE_MERGE_JOB.into(),
            spec: serde_json::to_value(&ms).map_err(|e| ExecError::Permanent(e.to_string()))?,
            group: None,
            wait_for: Some(group),
        });
        tracing::info!(job = %ctx.job_id, parts = n, "counts analysis planned");
        Ok(ExecOutput {
            encoded: Vec::new(),
            tables: Vec::new(),
            follow_ups,
            bundled: Vec::new(),
        })
    }
}

/// `analyze_part`.
pub struct AnalyzePart;

impl Executor for AnalyzePart {
    fn kind(&self) -> &'static str {
        ANALYZE_PART_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let mut s: PartJobSpec = spec(ctx)?;
        let key = part_key(&ctx.run_id, &s.analysis, s.index)?;
        let mut local_to_key = BTreeMap::new();
        let mut fetched: BTreeMap<String, PathBuf> = BTreeMap::new();
        map_paths(&mut s.part, |k| {
            let k = k.to_string_lossy().into_owned();
            if !layout::is_raw_key(&k) {
                return Err(ExecError::Permanent(format!(
                    "analyze_part: '{k}' is not a raw object key"
                )));
            }
            if let Some(p) = fetched.get(&k) {
                return Ok(p.clone());
            }
            if ctx.cancelled() {
                return Err(ExecError::Cancelled);
            }
            let p = ctx.fetch(&k)?;
            local_to_key.insert(p.clone(), k.clone());
            fetched.insert(k, p.clone());
            Ok(p)
        })?;
        let mut r = counts::analyze_part(&s.part).map_err(|e| analysis_err(e, &local_to_key))?;
        for w in r.warnings.iter_mut() {
            for (local, k) in &local_to_key {
                *w = w.replace(&local.display().to_string(), k);
            }
        }
        let data = serde_json::to_vec(&r).map_err(|e| ExecError::Permanent(e.to_string()))?;
        ctx.block_on(ctx.lake.put(&key, data.into()))?;
        Ok(ExecOutput::default())
    }
}

/// `analyze_merge`.
pub struct AnalyzeMerge;

impl Executor for AnalyzeMerge {
    fn kind(&self) -> &'static str {
        ANALYZE_MERGE_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: MergeSpec = spec(ctx)?;
        let mut parts: Vec<PartResult> = Vec::with_capacity(s.parts.len());
        for (i, what) in s.parts.iter().enumerate() {
            if ctx.cancelled() {
                return Err(ExecError::Cancelled);
            }
            let key = part_key(&ctx.run_id, &s.analysis, i)?;
            if ctx.block_on(ctx.lake.size(&key))?.is_none() {
                return Err(ExecError::Permanent(format!(
                    "analyze_merge: part {i} of {} ({what}) has no result at {key}: its analyze_part job did not finish; no tables written",
                    s.parts.len()
                )));
            }
            let data = ctx.block_on(ctx.lake.get(&key))?;
            let r: PartResult = serde_json::from_slice(&data).map_err(|e| {
                ExecError::Permanent(format!(
                    "analyze_merge: part {i} ({what}) result at {key} is unreadable: {e}"
                ))
            })?;
            parts.push(r);
        }
        let a = counts::merge(parts);
        let dir = ctx.scratch.join("reports");
        counts::report::write_all(&a, &dir).map_err(|e| analysis_err(e, &BTreeMap::new()))?;
        let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| ExecError::Retryable(format!("{}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        names.sort();
        for p in names {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let key = layout::counts_report_key(&ctx.run_id, &s.analysis, &name)?;
            let data = std::fs::read(&p)
                .map_err(|e| ExecError::Retryable(format!("{}: {e}", p.display())))?;
            ctx.block_on(ctx.lake.put(&key, data.into()))?;
        }
        let tables = counts::tables::tables(&a, &ctx.run_id)
            .map_err(|e| analysis_err(e, &BTreeMap::new()))?;
        Ok(ExecOutput {
            encoded: Vec::new(),
            tables,
            follow_ups: Vec::new(),
            bundled: Vec::new(),
        })
    }
}
