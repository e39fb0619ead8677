//! What the checks job reads of earlier runs, remembered by this worker
//! process (docs/verdicts.md, "Speed").
//!
//! Each checks job judges its run against the schedule's earlier runs: their
//! `runs` rows (which schedule, which night), their figures, their nodes'
//! values and their links. Those objects do not change once committed (a
//! retried job rewrites the same key with the same rows), so a worker that
//! has read them once keeps what it derived from them, in bounded LRU maps
//! (`hashlink`, already in the build through rusqlite): a year of nightly
//! runs costs each night's job its own run's tables and not a year's. A
//! run removed by retention is no longer listed, so it is never looked up.
//! Figures are remembered per run **and** per the parameters they depend
//! on, so a changed threshold still applies to the whole history.
use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

use benchlake_analysis::link_checks::{Hosts, RunLinks};
use hashlink::LruCache;

/// One row of a `runs` object: schedule, status and the logical night's
/// instant (µs; coalesce(logical_at, submitted_at)).
#[derive(Debug, Clone)]
pub struct RunsRow {
    pub schedule: Option<String>,
    pub status: String,
    pub at_us: Option<i64>,
}

/// (node, check, value) of one earlier run's `node_health` rows.
pub type NodeValues = Vec<(String, String, f64)>;

/// A bounded map shared by the jobs of this process.
pub struct Memo<K, V> {
    map: Mutex<LruCache<K, Arc<V>>>,
}

impl<K: Hash + Eq, V> Memo<K, V> {
    fn new(capacity: usize) -> Self {
        Memo {
            map: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// The remembered value of `key`, else `make()`'s (remembered when Ok).
    pub fn get_or<E>(&self, key: K, make: impl FnOnce() -> Result<V, E>) -> Result<Arc<V>, E> {
        if let Some(v) = self.lock().get(&key) {
            return Ok(v.clone());
        }
        let v = Arc::new(make()?);
        self.lock().insert(key, v.clone());
        Ok(v)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<K, Arc<V>>> {
        // A job that panicked while holding the lock left a valid map.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `(run_id, date, object)` of the runs in the `runs` objects, newest run
/// first (a merged object holds several).
pub type RunsObjects = Vec<(
    String,
    String,
    std::sync::Arc<benchlake_core::lake::compact::ListedFile>,
)>;

/// The listing of `runs` objects of a job (by job id): listed once per job,
/// however many references read the history; a later job lists again.
pub fn listings() -> &'static Memo<String, RunsObjects> {
    static M: OnceLock<Memo<String, RunsObjects>> = OnceLock::new();
    M.get_or_init(|| Memo::new(8))
}

/// `runs` objects by key: a year of 20 nightly schedules.
pub fn runs() -> &'static Memo<String, Vec<RunsRow>> {
    static M: OnceLock<Memo<String, Vec<RunsRow>>> = OnceLock::new();
    M.get_or_init(|| Memo::new(20 * 400))
}

/// (run, format, the parameters figures depend on).
pub type FiguresKey = (String, String, String);

/// Figures by [`FiguresKey`].
pub fn figures() -> &'static Memo<FiguresKey, BTreeMap<String, f64>> {
    static M: OnceLock<Memo<FiguresKey, BTreeMap<String, f64>>> = OnceLock::new();
    M.get_or_init(|| Memo::new(20 * 100))
}

/// Node values by run.
pub fn node_values() -> &'static Memo<String, NodeValues> {
    static M: OnceLock<Memo<String, NodeValues>> = OnceLock::new();
    M.get_or_init(|| Memo::new(20 * 100))
}

/// Links by run (a 512-host run's links take about 4 MB: 64 runs, the
/// windows of three LinkTest schedules).
pub fn links() -> &'static Memo<String, RunLinks> {
    static M: OnceLock<Memo<String, RunLinks>> = OnceLock::new();
    M.get_or_init(|| Memo::new(64))
}

/// The host names links are numbered by, shared by every job of the process
/// (so remembered links keep their numbers).
pub fn hosts() -> std::sync::MutexGuard<'static, Hosts> {
    static H: OnceLock<Mutex<Hosts>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(Hosts::default()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}
