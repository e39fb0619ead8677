//! Compaction of the coordinator's lake (docs/architecture.md, "Compaction";
//! docs/configuration.md, "The lake's layout and compaction").
//!
//! A night commits one small file per table and job. The coordinator plans
//! merges from its state store, not from listings: a table's month with at
//! least `min_files` small parts gets a `compact` job
//! ([`benchlake_core::jobs::CompactSpec`]) naming every part to merge and
//! where its rows are now. A worker merges them
//! ([`benchlake_core::lake::Lake::merge_parts`]) and stages the merged file;
//! the commit ([`commit`]) checks the file against the spec
//! ([`benchlake_core::lake::Lake::verify_compacted`]), copies it to
//! `tables/{table}/year=…/month=…/compacted-{first date}-{job}.parquet`
//! and, in **one transaction**, points every part's row at its row groups
//! there ([`MergedIn`]) and retires the replaced objects. Readers that list
//! the store see each part once, before or after; the retired objects are
//! deleted [`CompactionConfig::grace_ms`] later (by default at the next
//! pass), and a reader that listed before the commit and finds an object
//! gone reads the part's row again ([`read_committed`]).
//!
//! A compact job belongs to no run: its run id is its own job id, which is
//! how the commit knows the coordinator scheduled it (a worker cannot ask
//! for one as a follow-up). A job killed anywhere is retried. Each attempt's
//! commit names its merged file anew and records the name as the job's
//! intent before it copies: a copy that was never recorded (a coordinator
//! killed between copy and record) is named by no row and written by no
//! later attempt, and the next plan's pass deletes it once the job is queued
//! again. A part that changed since the plan (retention deleted it) fails
//! the job and the next plan starts over.
use std::collections::{BTreeMap, BTreeSet};

use arrow::array::RecordBatch;
use benchlake_core::ids::new_id_at;
use benchlake_core::jobs::{COMPACT_JOB, CompactSpec};
use benchlake_core::lake::compact::PartSource;
use benchlake_core::layout::{self, TableFile};
use benchlake_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use crate::Coordinator;
use crate::error::{CoordError, Result};
use crate::lifecycle::{Effects, job};
use crate::model::*;

/// `meta` key: the open compact job of each `table/YYYY-MM` (JSON map).
const OPEN_KEY: &str = "compaction_open";
/// `meta` key: objects replaced by merges, deleted after their grace (JSON).
const RETIRED_KEY: &str = "compaction_retired";
/// `meta` key: the clock time of the last plan.
const LAST_PLAN_KEY: &str = "compaction_at_ms";

/// When and what the coordinator compacts (`benchlake coordinator
/// --compact-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionConfig {
    /// Whether the coordinator plans merges at all.
    pub enabled: bool,
    /// Small parts a month needs before it is merged.
    pub min_files: usize,
    /// A file under this many bytes is small (a merged file too: it takes
    /// the month's new parts at the next merge).
    pub small_bytes: u64,
    /// A merge takes inputs up to about this many bytes (at least two).
    pub target_bytes: u64,
    /// How long a replaced object stays for readers that listed before (0:
    /// deleted at the next pass, within a second). Readers of the store
    /// find a part again when its object is gone ([`read_committed`]); a
    /// reader globbing the lake (DuckDB, Spark) may see a merged month's
    /// rows twice until the replaced objects are gone, so the default keeps
    /// that window short.
    pub grace_ms: i64,
    /// Time between two plans.
    pub every_ms: i64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            min_files: 8,
            small_bytes: 64 << 20,
            target_bytes: 512 << 20,
            grace_ms: 0,
            every_ms: 3_600_000,
        }
    }
}

/// An object a merge replaced, deleted once `after_ms` passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Retired {
    key: String,
    after_ms: i64,
}

/// The months of `files` to merge, as compact specs: per table and month,
/// when at least `min_files` parts are small objects of their own, or two
/// merged files are small, or — in a month before `current_month`
/// (`YYYY-MM`), which gets no new nights — any two small objects, one of
/// them a part; the small objects (parts and merged files) in order of
/// their first day, up to `target_bytes` (at least two). Months in `open`
/// (a compact job is on them) are left alone.
pub fn plan(
    files: &[CommittedFile],
    cfg: &CompactionConfig,
    open: &BTreeSet<String>,
    current_month: &str,
) -> Vec<CompactSpec> {
    // table/month → object → its parts.
    let mut months: BTreeMap<(String, String), BTreeMap<String, Vec<&CommittedFile>>> =
        BTreeMap::new();
    for f in files {
        let Some(month) = f.date.get(..7) else {
            continue;
        };
        months
            .entry((f.table.clone(), month.to_string()))
            .or_default()
            .entry(f.object().to_string())
            .or_default()
            .push(f);
    }
    let mut out = Vec::new();
    for ((table, month), objects) in months {
        if open.contains(&open_key(&table, &month)) {
            continue;
        }
        let mut small: Vec<(String, String, u64, Vec<&CommittedFile>)> = Vec::new();
        for (object, mut parts) in objects {
            let bytes: u64 = parts.iter().map(|p| p.bytes).sum();
            if bytes >= cfg.small_bytes {
                continue;
            }
            parts.sort_by_key(|p| (p.row_groups().map(|g| g.0), p.date.clone(), p.key.clone()));
            let first = parts
                .iter()
                .map(|p| p.date.clone())
                .min()
                .unwrap_or_default();
            small.push((first, object, bytes, parts));
        }
        let lone = small
            .iter()
            .filter(|s| s.3.len() == 1 && s.3[0].merged.is_none())
            .count();
        let closed = month.as_str() < current_month && lone >= 1 && small.len() >= 2;
        if !closed && lone < cfg.min_files.max(1) && small.len() - lone < 2 {
            continue;
        }
        small.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let mut spec = CompactSpec {
            table: table.clone(),
            month: month.clone(),
            parts: Vec::new(),
            merged_from: Vec::new(),
        };
        let (mut taken, mut bytes) = (0usize, 0u64);
        for (_, object, b, parts) in &small {
            if taken >= 2 && bytes + b > cfg.target_bytes {
                break;
            }
            taken += 1;
            bytes += b;
            if parts.iter().any(|p| p.merged.is_some()) {
                spec.merged_from.push(object.clone());
            }
            spec.parts.extend(parts.iter().map(|p| PartSource {
                key: p.key.clone(),
                run_id: p.run_id.clone(),
                job_id: p.job_id.clone(),
                date: p.date.clone(),
                object: object.clone(),
                groups: p.row_groups(),
                rows: Some(p.rows),
            }));
        }
        if taken >= 2 {
            out.push(spec);
        }
    }
    out
}

fn open_key(table: &str, month: &str) -> String {
    format!("{table}/{month}")
}

fn read_json<T: serde::de::DeserializeOwned + Default>(
    tx: &mut dyn crate::store::Tx,
    key: &str,
) -> Result<T> {
    Ok(match tx.get_meta(key)? {
        Some(v) => serde_json::from_str(&v)?,
        None => T::default(),
    })
}

fn write_json<T: Serialize>(tx: &mut dyn crate::store::Tx, key: &str, v: &T) -> Result<()> {
    tx.set_meta(key, &serde_json::to_string(v)?)
}

/// Reviews the open compact jobs: forgets the months whose job ended, and
/// retires (for deletion now) the merged files of attempts that copied and
/// never recorded (a coordinator killed between the two; nothing names such
/// a copy and no later attempt writes its key, so it goes now rather than
/// when the retry commits, which bounds how long a reader globbing the lake
/// sees that month twice). Returns the months still open.
fn review_open(tx: &mut dyn crate::store::Tx, now: i64) -> Result<BTreeMap<String, String>> {
    let open: BTreeMap<String, String> = read_json(tx, OPEN_KEY)?;
    let mut still = BTreeMap::new();
    let mut abandoned = Vec::new();
    let n = open.len();
    for (k, id) in open {
        match tx.get_job(&id)? {
            Some(j) if j.state == JobState::Queued && !j.committed_keys.is_empty() => {
                abandoned.extend(j.committed_keys.iter().map(|key| Retired {
                    key: key.clone(),
                    after_ms: now,
                }));
                job::forget_intent(tx, j)?;
                still.insert(k, id);
            }
            Some(j) if !j.state.is_final() => {
                still.insert(k, id);
            }
            // A merge that failed after its copy (then its attempts ran
            // out) leaves such a file too (`delete_retired` keeps what a
            // row names).
            Some(j) if j.state != JobState::Done => {
                abandoned.extend(
                    j.committed_keys
                        .into_iter()
                        .map(|key| Retired { key, after_ms: now }),
                );
            }
            _ => {}
        }
    }
    if !abandoned.is_empty() {
        let mut retired: Vec<Retired> = read_json(tx, RETIRED_KEY)?;
        abandoned.retain(|a| retired.iter().all(|r| r.key != a.key));
        retired.extend(abandoned);
        write_json(tx, RETIRED_KEY, &retired)?;
    }
    if still.len() != n {
        write_json(tx, OPEN_KEY, &still)?;
    }
    Ok(still)
}

impl Coordinator {
    /// The tick's part: a [`Self::compaction_pass`] at most every
    /// [`CompactionConfig::every_ms`] or grace period (whichever is shorter,
    /// at most a minute apart), so retired objects go soon after their grace.
    pub(crate) fn compaction_tick(&self, now: i64) {
        use std::sync::atomic::Ordering;
        // Not while the lake's layout is being moved (the records change
        // under the plan).
        if !*self.layout_ready.borrow() {
            return;
        }
        let cfg = &self.cfg.compaction;
        let next = self.compaction_next_ms.load(Ordering::Relaxed);
        if now < next && next - now <= cfg.every_ms {
            return;
        }
        let step = cfg
            .every_ms
            .min(cfg.grace_ms.max(1_000))
            .clamp(1_000, 60_000);
        self.compaction_next_ms.store(now + step, Ordering::Relaxed);
        crate::reconcile::block_on(self.compaction_pass(now));
    }

    /// One pass: deletes retired objects whose grace passed,
    /// and plans merges when a plan is due (every
    /// [`CompactionConfig::every_ms`]). Errors are logged.
    pub(crate) async fn compaction_pass(&self, now: i64) {
        if let Err(e) = self.db(move |tx| review_open(tx, now)).await {
            tracing::warn!(error = %e, "compaction: cannot review its open merges");
        }
        match self.delete_retired(now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(objects = n, "compaction: deleted replaced objects"),
            Err(e) => tracing::warn!(error = %e, "compaction: cannot delete replaced objects yet"),
        }
        let cfg = &self.cfg.compaction;
        if !cfg.enabled {
            return;
        }
        let every = cfg.every_ms;
        let due = self
            .db(move |tx| {
                let last = tx
                    .get_meta(LAST_PLAN_KEY)?
                    .and_then(|v| v.parse::<i64>().ok());
                let due = last.is_none_or(|t| now >= t.saturating_add(every) || now < t);
                if due {
                    tx.set_meta(LAST_PLAN_KEY, &now.to_string())?;
                }
                Ok(due)
            })
            .await;
        match due {
            Ok(true) => {
                if let Err(e) = self.schedule_compaction(now) {
                    tracing::warn!(error = %e, "compaction: cannot plan merges");
                }
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "compaction: cannot read its last plan"),
        }
    }

    /// Plans merges now ([`plan`]) and queues a compact job for each; returns
    /// the specs queued.
    pub fn schedule_compaction(&self, now: i64) -> Result<Vec<CompactSpec>> {
        let cfg = self.cfg.compaction.clone();
        let cfg_all = self.cfg.clone();
        let (specs, fx) = self.store.transact(|tx| {
            let mut fx = Effects::default();
            let mut open = review_open(tx, now)?;
            let files = tx.committed_files(None)?;
            let busy: BTreeSet<String> = open.keys().cloned().collect();
            let month = chrono::DateTime::from_timestamp_millis(now)
                .map(|t| t.format("%Y-%m").to_string())
                .unwrap_or_default();
            let specs = plan(&files, &cfg, &busy, &month);
            for s in &specs {
                let first = s
                    .parts
                    .iter()
                    .map(|p| p.date.clone())
                    .min()
                    .unwrap_or_default();
                let j = job::new_unowned(
                    COMPACT_JOB,
                    serde_json::to_string(s)?,
                    &first,
                    &cfg_all,
                    now,
                );
                let id = j.job_id.clone();
                tx.insert_job(&j)?;
                fx.jobs_queued();
                open.insert(open_key(&s.table, &s.month), id);
            }
            write_json(tx, OPEN_KEY, &open)?;
            Ok((specs, fx))
        })?;
        for s in &specs {
            tracing::info!(table = %s.table, month = %s.month, parts = s.parts.len(),
                merged_files = s.merged_from.len(), "compaction: merge queued");
            self.metrics.compaction.inc(&[&s.table, "scheduled"]);
        }
        self.apply(fx);
        Ok(specs)
    }

    /// Deletes the retired objects whose grace ended by `now` (an object a
    /// row still names is kept and dropped from the list); returns how many
    /// were deleted.
    pub async fn delete_retired(&self, now: i64) -> Result<usize> {
        let due: Vec<Retired> = self
            .db(move |tx| {
                let all: Vec<Retired> = read_json(tx, RETIRED_KEY)?;
                Ok(all.into_iter().filter(|r| r.after_ms <= now).collect())
            })
            .await?;
        let mut deleted = 0;
        let mut gone = BTreeSet::new();
        for r in &due {
            let table = match layout::parse_table_file(&r.key) {
                Some(TableFile::Part(k)) => k.table.to_string(),
                Some(TableFile::Compacted { table, .. }) => table.to_string(),
                None => {
                    gone.insert(r.key.clone());
                    continue;
                }
            };
            let (key, t2) = (r.key.clone(), table.clone());
            let used = self
                .db(move |tx| {
                    Ok(tx
                        .committed_files(Some(&t2))?
                        .iter()
                        .any(|f| f.object() == key))
                })
                .await?;
            // Counted when it was there (an abandoned copy may be retired
            // twice: by the plan's pass and by its job's next intent).
            if !used && self.lake.size(&r.key).await?.is_some() {
                self.lake.delete(&r.key).await?;
                self.metrics.compaction.inc(&[&table, "retired"]);
                deleted += 1;
            }
            gone.insert(r.key.clone());
        }
        if !gone.is_empty() {
            self.db(move |tx| {
                let mut all: Vec<Retired> = read_json(tx, RETIRED_KEY)?;
                all.retain(|r| !gone.contains(&r.key));
                write_json(tx, RETIRED_KEY, &all)
            })
            .await?;
        }
        Ok(deleted)
    }
}

/// The commit of a leased compact job `j` (from [`crate::commit`]): checks
/// the staged merged file against the job's spec, copies it to its key and,
/// in one transaction, moves every part's row onto it, retires the objects
/// it replaces and completes the job. Returns the merged key and its bytes.
pub(crate) async fn commit(
    c: &Coordinator,
    req: &pb::CompleteJobRequest,
    j: &JobRow,
    holds: crate::commit::Holds,
) -> Result<(String, u64)> {
    if j.run_id != j.job_id {
        return Err(CoordError::invalid(
            "job",
            "a compact job the coordinator did not schedule",
        ));
    }
    let spec: CompactSpec = serde_json::from_str(&j.spec_json)?;
    let staged = layout::staged_key(
        &layout::staging_prefix(&j.job_id, j.attempt)?,
        &spec.table,
        layout::COMPACTED_PART,
    )?;
    match req.files.as_slice() {
        [f] if f.staged_key == staged && f.table == spec.table => {}
        _ => {
            return Err(CoordError::invalid(
                "files",
                format!("a compact job commits one file, {staged}"),
            ));
        }
    }
    if !req.result_json.trim().is_empty() {
        let r: benchlake_core::jobs::JobResult = serde_json::from_str(&req.result_json)
            .map_err(|e| CoordError::invalid("result_json", e))?;
        if !r.follow_ups.is_empty() || !r.bundled.is_empty() {
            return Err(CoordError::invalid(
                "result_json",
                "a compact job has no follow-ups",
            ));
        }
    }
    let meta = c
        .lake
        .verify_compacted(&staged, &spec.table, &spec.parts)
        .await
        .map_err(|e| match e {
            benchlake_core::Error::Invalid { message, .. } => {
                CoordError::invalid("files[0]", message)
            }
            e => CoordError::from(e),
        })?;
    let first = spec
        .parts
        .iter()
        .map(|p| p.date.clone())
        .min()
        .unwrap_or_default();
    // Each attempt names its copy anew: an attempt that copied and never
    // recorded (a coordinator killed between the two) leaves a key no later
    // attempt overwrites, which the plan's pass, or this intent, retires.
    let key = layout::compacted_key(&spec.table, &first, &new_id_at(c.now()))?;
    let now = c.now();
    let (job_id, lease_id) = (req.job_id.clone(), req.lease_id.clone());
    let (k2, h2) = (key.clone(), holds.clone());
    c.db(move |tx| {
        let (key, holds) = (k2, h2);
        let mut j = job::leased(tx, &job_id, &lease_id)?;
        holds(&j)?;
        let earlier: Vec<Retired> = j
            .committed_keys
            .iter()
            .filter(|k| **k != key)
            .map(|k| Retired {
                key: k.clone(),
                after_ms: now,
            })
            .collect();
        if !earlier.is_empty() {
            let mut retired: Vec<Retired> = read_json(tx, RETIRED_KEY)?;
            retired.retain(|r| earlier.iter().all(|e| e.key != r.key));
            retired.extend(earlier);
            write_json(tx, RETIRED_KEY, &retired)?;
        }
        job::record_intent(tx, &mut j, vec![key.clone()])
    })
    .await?;
    c.lake.copy(&staged, &key).await?;
    let bytes = c.lake.size(&key).await?.unwrap_or(req.files[0].bytes);
    let (cfg, now, grace) = (c.cfg.clone(), c.now(), c.cfg.compaction.grace_ms);
    let (job_id, lease_id) = (req.job_id.clone(), req.lease_id.clone());
    let (k2, sp, parts) = (key.clone(), spec.clone(), meta.parts);
    let done = c
        .db(move |tx| {
            let (key, spec) = (k2, sp);
            let j = job::leased(tx, &job_id, &lease_id)?;
            holds(&j)?;
            let mut runs: BTreeMap<String, Vec<CommittedFile>> = BTreeMap::new();
            for (p, m) in spec.parts.iter().zip(&parts) {
                if !runs.contains_key(&p.run_id) {
                    let rows = tx.committed_files_of_run(&p.run_id)?;
                    runs.insert(p.run_id.clone(), rows);
                }
                let row = runs
                    .get(&p.run_id)
                    .and_then(|rows| rows.iter().find(|r| r.key == p.key))
                    .ok_or_else(|| {
                        CoordError::invalid(
                            "job",
                            format!("part {} is no longer committed (retention?)", p.key),
                        )
                    })?;
                if row.object() != p.object || row.row_groups() != p.groups {
                    return Err(CoordError::invalid(
                        "job",
                        format!(
                            "part {} moved since the merge was planned (now in {})",
                            p.key,
                            row.object()
                        ),
                    ));
                }
                tx.upsert_committed(&CommittedFile {
                    merged: Some(MergedIn {
                        object: key.clone(),
                        first_group: m.first_group as u64,
                        groups: m.groups as u64,
                    }),
                    ..row.clone()
                })?;
            }
            let replaced: BTreeSet<&str> = spec.parts.iter().map(|p| p.object.as_str()).collect();
            let mut retired: Vec<Retired> = read_json(tx, RETIRED_KEY)?;
            retired.extend(replaced.iter().map(|k| Retired {
                key: k.to_string(),
                after_ms: now + grace,
            }));
            write_json(tx, RETIRED_KEY, &retired)?;
            let mut open: BTreeMap<String, String> = read_json(tx, OPEN_KEY)?;
            open.remove(&open_key(&spec.table, &spec.month));
            write_json(tx, OPEN_KEY, &open)?;
            job::complete(tx, &cfg, j, vec![key.clone()], &[], now)
        })
        .await;
    let fx = match done {
        Ok(fx) => fx,
        Err(e) => {
            if matches!(e, CoordError::Invalid(_)) {
                // Nothing names the copy: the job fails for good and the
                // next plan starts from the store as it is.
                let _ = c.lake.delete(&key).await;
            }
            return Err(e);
        }
    };
    if let Ok(prefix) = layout::staging_prefix(&j.job_id, j.attempt)
        && let Err(e) = c.lake.delete_prefix(&prefix).await
    {
        tracing::warn!(job = %j.job_id, error = %e, "could not delete staging objects");
    }
    tracing::info!(job = %j.job_id, table = %spec.table, month = %spec.month, key = %key,
        parts = spec.parts.len(), bytes, "compaction: merged file committed");
    c.metrics
        .compaction
        .add(&[&spec.table, "merged"], spec.parts.len() as u64);
    c.apply(fx);
    // Without a grace the replaced objects go now, so a reader globbing the
    // lake sees the month twice for as short a time as can be; one that
    // fails here is deleted by the next pass.
    if grace <= 0
        && let Err(e) = c.delete_retired(now).await
    {
        tracing::warn!(error = %e, "compaction: replaced objects left to the next pass");
    }
    Ok((key, bytes))
}

/// The rows of the committed part `f`, wherever they are: its own object or
/// its row groups in a merged file. A part merged after `f` was read from
/// the store (its old object deleted after the grace) is looked up again
/// and read from where it is now.
pub async fn read_committed(c: &Coordinator, f: &CommittedFile) -> Result<Vec<RecordBatch>> {
    match c
        .lake
        .read_part(f.object(), f.row_groups(), &f.run_id)
        .await
    {
        Ok(b) => Ok(b),
        Err(e) => match current(c, f).await? {
            Some(now) if now.object() != f.object() => Ok(c
                .lake
                .read_part(now.object(), now.row_groups(), &now.run_id)
                .await?),
            _ => Err(e.into()),
        },
    }
}

/// The store's row of `f`'s key now (None when it is no longer committed).
pub async fn current(c: &Coordinator, f: &CommittedFile) -> Result<Option<CommittedFile>> {
    let (run, key) = (f.run_id.clone(), f.key.clone());
    c.db_read(move |tx| {
        Ok(tx
            .committed_files_of_run(&run)?
            .into_iter()
            .find(|r| r.key == key))
    })
    .await
}

#[cfg(test)]
mod tests;
