//! Retention: how long the lake keeps raw files and each table's files
//! (docs/configuration.md, "Retention").
//!
//! Rules name a target and a duration: `raw=90d` (raw outputs under `raw/`,
//! aged by their run's creation time: the run id is a ULID), `TABLE=730d`
//! (one table's committed files, aged by their `date` partition), `tables=2y`
//! (every table without a rule of its own), `TABLE=forever`. Nothing has a
//! rule by default: without rules nothing is ever deleted.
//!
//! The mode says what a pass does with what the rules expire: `dry-run` (the
//! default) logs and counts it and deletes nothing, so an administrator sees
//! what a rule would remove before switching to `delete`; `off` skips the
//! pass. Counted in `benchlake_retention_objects_total{target,mode}` and
//! `benchlake_retention_bytes_total{target,mode}`.
//!
//! Deleting a table file removes the object first, then the state store's
//! record of it (a pass interrupted between the two finds the record again
//! and finishes; deleting a missing object is not an error), and the
//! in-memory verdicts of a `checks`/`node_health` file go with it. The
//! reconciler's tick runs a pass at most every [`RETENTION_EVERY_MS`].
use std::collections::BTreeMap;

use benchlake_core::layout;

use crate::Coordinator;
use crate::error::{CoordError, Result};

/// Clock time between two retention passes.
pub const RETENTION_EVERY_MS: i64 = 3_600_000;
/// `meta` key of the clock time of the last pass.
const LAST_PASS_KEY: &str = "retention_at_ms";
const DAY_MS: i64 = 86_400_000;

/// What a pass does with expired objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetentionMode {
    /// No pass.
    Off,
    /// Log and count, delete nothing.
    #[default]
    DryRun,
    /// Delete.
    Delete,
}

impl RetentionMode {
    /// From `off`, `dry-run` or `delete`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "off" => Ok(Self::Off),
            "dry-run" => Ok(Self::DryRun),
            "delete" => Ok(Self::Delete),
            other => Err(CoordError::Setup(format!(
                "retention mode: '{other}' is not off, dry-run or delete"
            ))),
        }
    }

    /// The name users type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::DryRun => "dry-run",
            Self::Delete => "delete",
        }
    }
}

/// The rules and the mode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetentionConfig {
    pub mode: RetentionMode,
    /// Target (`raw`, `tables` or a table name) → days kept (None: for ever).
    pub rules: BTreeMap<String, Option<u32>>,
}

impl RetentionConfig {
    /// Parses rules `TARGET=DURATION` (`raw=90d`, `linktest_timings=2y`,
    /// `tables=400d`, `runs=forever`; units d, w, y = 365 d). Unknown
    /// tables are refused, so a typo never leaves data to grow unnoticed.
    pub fn parse(mode: &str, rules: &[String]) -> Result<Self> {
        let mut out = Self {
            mode: RetentionMode::parse(mode)?,
            rules: BTreeMap::new(),
        };
        for r in rules.iter().flat_map(|r| r.split(',')).map(str::trim) {
            if r.is_empty() {
                continue;
            }
            let bad = |m: String| CoordError::Setup(format!("retention rule '{r}': {m}"));
            let (target, dur) = r
                .split_once('=')
                .ok_or_else(|| bad("expected TARGET=DURATION (raw=90d)".into()))?;
            let known = target == "raw"
                || target == "tables"
                || benchlake_core::catalog::get(target).is_some();
            if !known {
                return Err(bad(format!(
                    "'{target}' is not raw, tables or a table of the catalog"
                )));
            }
            let days = if dur == "forever" {
                None
            } else {
                let (n, unit) = dur.split_at(dur.len().saturating_sub(1));
                let n: u32 = n.parse().map_err(|_| {
                    bad(format!(
                        "'{dur}' is not N followed by d, w or y, or forever"
                    ))
                })?;
                let days = match unit {
                    "d" => n,
                    "w" => n.saturating_mul(7),
                    "y" => n.saturating_mul(365),
                    _ => return Err(bad(format!("'{dur}': the unit is d, w or y"))),
                };
                if days == 0 {
                    return Err(bad("a retention of 0 days would delete everything".into()));
                }
                Some(days)
            };
            if out.rules.insert(target.to_string(), days).is_some() {
                return Err(bad(format!("'{target}' has two rules")));
            }
        }
        Ok(out)
    }

    /// Days `table` is kept (None: for ever).
    pub fn table_days(&self, table: &str) -> Option<u32> {
        match self.rules.get(table) {
            Some(d) => *d,
            None => self.rules.get("tables").copied().flatten(),
        }
    }

    /// Days raw files are kept (None: for ever).
    pub fn raw_days(&self) -> Option<u32> {
        self.rules.get("raw").copied().flatten()
    }
}

/// What one pass found expired (and, with `delete`, removed).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RetentionReport {
    /// Table → (files, bytes) expired.
    pub tables: BTreeMap<String, (u64, u64)>,
    /// Raw objects and bytes expired.
    pub raw: (u64, u64),
    /// Objects that could not be deleted (retried next pass).
    pub failed: u64,
}

/// The UTC day (`YYYY-MM-DD`) of `ms`.
fn day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

impl Coordinator {
    /// One retention pass at `now` by `cfg` (see the module).
    pub async fn apply_retention(
        &self,
        cfg: &RetentionConfig,
        now: i64,
    ) -> Result<RetentionReport> {
        let mut rep = RetentionReport::default();
        if cfg.mode == RetentionMode::Off || cfg.rules.is_empty() {
            return Ok(rep);
        }
        let delete = cfg.mode == RetentionMode::Delete;
        let mode = cfg.mode.as_str();
        // Tables: by partition date (a file of day D expires when D is more
        // than N days before today).
        let files = self.db(|tx| tx.committed_files(None)).await?;
        // Merged files whose parts expired: deleted once no part of theirs
        // is left (a month merged by compaction goes when its last day does).
        let mut merged_touched = std::collections::BTreeSet::new();
        for f in files {
            let Some(days) = cfg.table_days(&f.table) else {
                continue;
            };
            let cutoff = day(now - i64::from(days) * DAY_MS);
            if f.date.is_empty() || f.date >= cutoff {
                continue;
            }
            if delete {
                if let Some(m) = &f.merged {
                    merged_touched.insert((f.table.clone(), m.object.clone()));
                } else if let Err(e) = self.lake.delete(&f.key).await {
                    tracing::warn!(key = %f.key, error = %e, "retention could not delete a table file");
                    rep.failed += 1;
                    continue;
                }
                let key = f.key.clone();
                self.db(move |tx| tx.delete_committed(&key)).await?;
                if crate::verdicts::is_checks(&f.key) || crate::verdicts::is_node_health(&f.key) {
                    self.verdicts.forget(&f.run_id, &f.key);
                }
            }
            let e = rep.tables.entry(f.table.clone()).or_default();
            e.0 += 1;
            e.1 += f.bytes;
            self.metrics.retention_objects.inc(&[&f.table, mode]);
            self.metrics.retention_bytes.add(&[&f.table, mode], f.bytes);
        }
        for (table, object) in merged_touched {
            let (o, t) = (object.clone(), table.clone());
            let used = self
                .db(move |tx| {
                    Ok(tx
                        .committed_files(Some(&t))?
                        .iter()
                        .any(|f| f.object() == o))
                })
                .await?;
            if !used && let Err(e) = self.lake.delete(&object).await {
                tracing::warn!(key = %object, error = %e, "retention could not delete a merged file");
                rep.failed += 1;
            }
        }
        // Raw files: by their run's creation (the run id's ULID time).
        if let Some(days) = cfg.raw_days() {
            let cutoff = now - i64::from(days) * DAY_MS;
            for (key, bytes) in self.lake.list(layout::RAW).await? {
                // A raw output or a run's bundle: both age with their run.
                let Some(run) = layout::parse_raw_run(&key) else {
                    continue;
                };
                let Ok(id) = ulid::Ulid::from_string(run) else {
                    continue;
                };
                if (id.timestamp_ms() as i64) >= cutoff {
                    continue;
                }
                if delete && let Err(e) = self.lake.delete(&key).await {
                    tracing::warn!(%key, error = %e, "retention could not delete a raw file");
                    rep.failed += 1;
                    continue;
                }
                rep.raw.0 += 1;
                rep.raw.1 += bytes;
                self.metrics.retention_objects.inc(&["raw", mode]);
                self.metrics.retention_bytes.add(&["raw", mode], bytes);
            }
        }
        let files: u64 = rep.tables.values().map(|t| t.0).sum();
        if files > 0 || rep.raw.0 > 0 {
            tracing::info!(
                mode,
                table_files = files,
                raw_objects = rep.raw.0,
                raw_bytes = rep.raw.1,
                failed = rep.failed,
                tables = ?rep.tables,
                "{}",
                if delete {
                    "retention deleted expired lake objects"
                } else {
                    "retention (dry run): these lake objects are past their rules and would be deleted"
                }
            );
        }
        Ok(rep)
    }

    /// Whether a retention pass is due at `now`; if so, records `now`.
    pub(crate) fn retention_due(&self, now: i64) -> Result<bool> {
        self.store.transact(|tx| {
            let last = tx
                .get_meta(LAST_PASS_KEY)?
                .and_then(|v| v.parse::<i64>().ok());
            let due = match last {
                Some(t) => now >= t.saturating_add(RETENTION_EVERY_MS) || now < t,
                None => true,
            };
            if due {
                tx.set_meta(LAST_PASS_KEY, &now.to_string())?;
            }
            Ok(due)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use benchlake_core::clock::ManualClock;
    use benchlake_core::ids::new_id_at;
    use benchlake_core::lake::Lake;
    use bytes::Bytes;

    use crate::CoordinatorConfig;
    use crate::model::CommittedFile;
    use crate::store::{SqliteStore, StateStore};

    /// 2026-11-23 00:00 UTC.
    const NOW: i64 = 1_795_392_000_000;

    /// A table file and a raw file of a run `age_days` old, in the lake and
    /// in the store; their keys.
    async fn put_run(c: &Coordinator, age_days: i64, table: &str) -> (String, String) {
        let at = NOW - age_days * DAY_MS;
        let run = new_id_at(at);
        let date = day(at);
        let job = new_id_at(at + 1);
        let key = layout::table_key(table, &date, &run, &job, "").unwrap();
        c.lake
            .put(&key, Bytes::from_static(b"parquet"))
            .await
            .unwrap();
        let raw = layout::raw_key(&run, &new_id_at(at + 2), "out.txt").unwrap();
        c.lake.put(&raw, Bytes::from_static(b"raw!")).await.unwrap();
        let f = CommittedFile {
            key: key.clone(),
            table: table.into(),
            run_id: run,
            job_id: job,
            date,
            rows: 1,
            bytes: 7,
            committed_ms: at,
            merged: None,
        };
        c.store.transact(|tx| tx.upsert_committed(&f)).unwrap();
        (key, raw)
    }

    async fn exists(c: &Coordinator, key: &str) -> bool {
        c.lake.get(key).await.is_ok()
    }

    /// Dry run first: counted, nothing deleted; then delete removes exactly
    /// the expired files (object and record), keeps the recent ones and the
    /// tables without a rule, and a second pass finds nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dry_run_counts_and_delete_removes_only_what_expired() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let lake = Lake::local(&dir.path().join("lake")).unwrap();
        let cfg = CoordinatorConfig {
            background: false,
            ..Default::default()
        };
        let c = Coordinator::new(store, lake, Arc::new(ManualClock::new(NOW)), cfg).unwrap();
        let (old_t, old_raw) = put_run(&c, 100, "linktest_timings").await;
        let (new_t, new_raw) = put_run(&c, 10, "linktest_timings").await;
        let (runs_t, _) = put_run(&c, 400, "runs").await;
        let rules = vec!["raw=90d".to_string(), "linktest_timings=30d".to_string()];

        let dry = RetentionConfig::parse("dry-run", &rules).unwrap();
        let rep = c.apply_retention(&dry, NOW).await.unwrap();
        assert_eq!(rep.tables.get("linktest_timings"), Some(&(1, 7)));
        assert_eq!(rep.raw, (2, 8), "the 100- and 400-day-old runs' raw files");
        let (a, b) = (exists(&c, &old_t).await, exists(&c, &old_raw).await);
        assert!(a && b, "dry run deletes nothing");
        assert_eq!(
            c.metrics
                .retention_objects
                .get(&["linktest_timings", "dry-run"]),
            1
        );

        let del = RetentionConfig::parse("delete", &rules).unwrap();
        let rep = c.apply_retention(&del, NOW).await.unwrap();
        assert_eq!(rep.tables.get("linktest_timings"), Some(&(1, 7)));
        assert_eq!(rep.raw.0, 2);
        assert!(!exists(&c, &old_t).await && !exists(&c, &old_raw).await);
        assert!(
            exists(&c, &new_t).await && exists(&c, &new_raw).await,
            "recent files stay"
        );
        assert!(
            exists(&c, &runs_t).await,
            "a table without a rule is kept for ever"
        );
        let left: Vec<String> = c
            .store
            .transact(|tx| tx.committed_files(None))
            .unwrap()
            .into_iter()
            .map(|f| f.key)
            .collect();
        assert!(!left.contains(&old_t) && left.contains(&new_t) && left.contains(&runs_t));
        assert_eq!(c.metrics.retention_objects.get(&["raw", "delete"]), 2);
        // Nothing left to do.
        let rep = c.apply_retention(&del, NOW).await.unwrap();
        assert_eq!(rep, RetentionReport::default());
        // Off does nothing at all.
        let off = RetentionConfig::parse("off", &rules).unwrap();
        assert_eq!(
            c.apply_retention(&off, NOW + 1000 * DAY_MS).await.unwrap(),
            RetentionReport::default()
        );
    }

    /// A run's bundle ages with its run like the raw outputs it replaced:
    /// the old run's bundle expires, the recent one's stays readable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bundles_expire_with_their_run() {
        use benchlake_core::lake::bundle::BundleMember;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let lake = Lake::local(&dir.path().join("lake")).unwrap();
        let cfg = CoordinatorConfig {
            background: false,
            ..Default::default()
        };
        let c = Coordinator::new(store, lake, Arc::new(ManualClock::new(NOW)), cfg).unwrap();
        let mut runs = Vec::new();
        for age in [100, 10] {
            let at = NOW - age * DAY_MS;
            let run = new_id_at(at);
            let mut members = Vec::new();
            for i in 0..3 {
                let key = layout::raw_key(&run, &new_id_at(at + 1 + i), "host.json").unwrap();
                let body = Bytes::from(format!("{{\"node\":{i}}}"));
                c.lake.put(&key, body.clone()).await.unwrap();
                members.push(BundleMember {
                    key,
                    bytes: body.len() as u64,
                    sha256: benchlake_core::lake::sha256_hex(&body),
                    format: "hostinfo".into(),
                });
            }
            let rep = c.lake.bundle_raw(&run, &members).await.unwrap();
            runs.push((rep, members));
        }
        let rules = vec!["raw=90d".to_string()];
        let dry = c
            .apply_retention(&RetentionConfig::parse("dry-run", &rules).unwrap(), NOW)
            .await
            .unwrap();
        assert_eq!(dry.raw, (1, runs[0].0.bundle_bytes));
        let del = c
            .apply_retention(&RetentionConfig::parse("delete", &rules).unwrap(), NOW)
            .await
            .unwrap();
        assert_eq!(del.raw, (1, runs[0].0.bundle_bytes));
        assert!(!exists(&c, &runs[0].0.key).await);
        assert!(c.lake.get_raw(&runs[0].1[0].key).await.is_err());
        assert!(exists(&c, &runs[1].0.key).await);
        assert_eq!(
            &c.lake.get_raw(&runs[1].1[2].key).await.unwrap()[..],
            b"{\"node\":2}"
        );
    }

    #[test]
    fn rules_parse_and_refuse_what_they_should() {
        let c = RetentionConfig::parse(
            "delete",
            &[
                "raw=90d,linktest_timings=2y".into(),
                "tables=8w".into(),
                "runs=forever".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.mode, RetentionMode::Delete);
        assert_eq!(c.raw_days(), Some(90));
        assert_eq!(c.table_days("linktest_timings"), Some(730));
        assert_eq!(c.table_days("checks"), Some(56));
        assert_eq!(c.table_days("runs"), None);
        let none = RetentionConfig::parse("dry-run", &[]).unwrap();
        assert_eq!(none.table_days("checks"), None);
        assert_eq!(none.raw_days(), None);
        for (rule, want) in [
            ("raw", "expected TARGET=DURATION"),
            ("linktest_timing=1y", "not raw, tables or a table"),
            ("raw=0d", "0 days"),
            ("raw=3m", "the unit is d, w or y"),
            ("raw=xd", "is not N followed by"),
        ] {
            let e = RetentionConfig::parse("dry-run", &[rule.into()])
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{rule}: {e}");
        }
        let e = RetentionConfig::parse("dry-run", &["raw=1d".into(), "raw=2d".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("two rules"), "{e}");
        assert!(RetentionConfig::parse("sometimes", &[]).is_err());
    }
}
