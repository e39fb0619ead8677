//! The health verdicts of the lake's `checks` table, kept in memory for the
//! dashboard ([`crate::dashboard`]) so that no page reads Parquet.
//!
//! Filled twice, both off the request path: once when the coordinator starts
//! (every committed `checks` file the state store lists, read in a background
//! task: [`load`]), and then at each commit that writes `checks` files (the
//! same read that counts `benchlake_verdicts_total`, [`crate::commit`]). Rows
//! are kept per committed object key, so a retried job that rewrites its key
//! replaces its rows instead of adding to them.
//!
//! Besides each run's rows it keeps, per node (the agents of the run's
//! tasks), the newest verdict of each check: the health overview's matrix.
//!
//! The `node_health` table's rows (per-node checks, docs/slurm.md) are kept
//! beside them: they count toward their run's verdict, they name their node
//! themselves (the Slurm node, not the agent), and each node's newest
//! verdict per node check answers `benchlake node-check` ([`VerdictIndex::node_health`]).
use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::{Array, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::DataType;
use serde::Serialize;

/// One `checks` row.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CheckRow {
    /// Check name (`io.write_bw_mib_s`, …).
    pub check: String,
    /// A status of `benchlake_core::verdict` (PASS, FAIL, REGRESSION, …).
    pub status: String,
    /// Measured figure.
    pub value: Option<f64>,
    /// Bound or rolling median it was compared with.
    pub reference: Option<f64>,
    /// Unit of value and reference.
    pub unit: String,
    /// Human-readable verdict.
    pub message: String,
    /// The change point of a REGRESSION (or of a FAIL it explains): its
    /// first run, that run's logical night, the relative step and the
    /// confidence (null columns of older files: None).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_run: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_date: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

/// The worst of `statuses` (the one rule: [`benchlake_core::verdict::worst`]).
pub use benchlake_core::verdict::worst;

/// The verdicts of one run.
#[derive(Debug, Clone, Default)]
pub struct RunVerdicts {
    /// Object key → its rows.
    files: BTreeMap<String, Vec<CheckRow>>,
    /// `node_health` object key → its rows, each with its node.
    node_files: BTreeMap<String, Vec<(String, CheckRow)>>,
    /// The agents of the run's tasks.
    pub agents: Vec<String>,
    /// The worst status of node rows the index no longer holds
    /// ([`MAX_NODE_ROWS`]; [`read_run`] reads them again).
    node_verdict: Option<&'static str>,
    /// Whether node rows were dropped ([`MAX_NODE_ROWS`]).
    pub node_rows_dropped: bool,
}

/// Node rows (`node_health`) the index holds, newest runs first: about
/// 90 MB (a row and its strings are ~450 bytes). Older runs keep their
/// verdict, and their rows are read from the lake when asked for
/// ([`read_run`]): a year of 600 nodes is 446,000 rows, 10,000 runs of
/// 6,000 nodes 60 M, so holding them all grew the coordinator with its
/// history (issue 40). The node page's series are of the runs held.
pub const MAX_NODE_ROWS: usize = 200_000;

impl RunVerdicts {
    /// Every row, in object key order.
    pub fn rows(&self) -> impl Iterator<Item = &CheckRow> {
        self.files.values().flatten()
    }

    /// Every `node_health` row as (node, row), in object key order.
    pub fn node_rows(&self) -> impl Iterator<Item = &(String, CheckRow)> {
        self.node_files.values().flatten()
    }

    /// The run's verdict: the worst of its checks and its nodes' checks.
    pub fn verdict(&self) -> Option<&'static str> {
        worst(
            self.rows()
                .chain(self.node_rows().map(|(_, r)| r))
                .map(|r| r.status.as_str())
                .chain(self.node_verdict),
        )
    }

    /// Drops the node rows (their worst status stays); returns how many.
    fn drop_node_rows(&mut self) -> usize {
        let n = self.node_files.values().map(Vec::len).sum();
        self.node_verdict = worst(
            self.node_rows()
                .map(|(_, r)| r.status.as_str())
                .chain(self.node_verdict),
        );
        self.node_files.clear();
        self.node_rows_dropped = true;
        n
    }
}

/// The newest verdict of one node-level check on one node (`node_health`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeVerdict {
    /// The run it came from.
    pub run_id: String,
    /// The row itself.
    pub row: CheckRow,
}

/// The newest verdict of one check on one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeCheck {
    /// The run it came from.
    pub run_id: String,
    /// PASS, FAIL or ERROR.
    pub status: String,
    /// Measured figure.
    pub value: Option<f64>,
    /// Its unit.
    pub unit: String,
}

#[derive(Debug, Default)]
struct Inner {
    runs: BTreeMap<String, RunVerdicts>,
    /// Node rows held in `runs` ([`MAX_NODE_ROWS`]).
    node_rows: usize,
    /// The bound on `node_rows` when not [`MAX_NODE_ROWS`] (tests).
    budget: Option<usize>,
    nodes: HashMap<String, BTreeMap<String, NodeCheck>>,
    node_health: HashMap<String, BTreeMap<String, NodeVerdict>>,
}

/// The in-memory verdicts (see the module docs).
#[derive(Debug, Default)]
pub struct VerdictIndex {
    inner: RwLock<Inner>,
    loaded: AtomicBool,
    report: std::sync::Mutex<LoadReport>,
}

/// What the start-up load found: files listed, read, and those that could
/// not be read yet (key, error), so an incomplete answer can say why.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Committed `checks` and `node_health` files listed.
    pub listed: usize,
    /// Of those, read into the index.
    pub read: usize,
    /// Files still unreadable: (key, last error).
    pub unreadable: Vec<(String, String)>,
}

impl VerdictIndex {
    /// Records the rows of the committed object `key` of `run_id`, whose
    /// tasks ran on `agents`.
    pub fn record(&self, run_id: &str, key: &str, agents: &[String], rows: Vec<CheckRow>) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        for a in agents {
            let node = g.nodes.entry(a.clone()).or_default();
            for r in &rows {
                let newer = node
                    .get(&r.check)
                    .is_none_or(|c| c.run_id.as_str() <= run_id);
                if newer {
                    node.insert(
                        r.check.clone(),
                        NodeCheck {
                            run_id: run_id.to_string(),
                            status: r.status.clone(),
                            value: r.value,
                            unit: r.unit.clone(),
                        },
                    );
                }
            }
        }
        let run = g.runs.entry(run_id.to_string()).or_default();
        for a in agents {
            if !run.agents.contains(a) {
                run.agents.push(a.clone());
            }
        }
        run.files.insert(key.to_string(), rows);
    }

    /// Forgets the rows of the object `key` of `run_id` (retention deleted
    /// it); the run goes when it has none left. A node's newest verdict of a
    /// check stays what it was (retention removes old runs, not the newest).
    pub fn forget(&self, run_id: &str, key: &str) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let g = &mut *g;
        if let Some(run) = g.runs.get_mut(run_id) {
            run.files.remove(key);
            if let Some(rows) = run.node_files.remove(key) {
                g.node_rows -= rows.len();
            } else if is_node_health(key) {
                // Its rows were dropped; their verdict goes with the file.
                run.node_verdict = None;
            }
            if run.files.is_empty() && run.node_files.is_empty() && run.node_verdict.is_none() {
                g.runs.remove(run_id);
            }
        }
    }

    /// Records the `node_health` rows (node, row) of the committed object
    /// `key` of `run_id`.
    pub fn record_nodes(&self, run_id: &str, key: &str, rows: Vec<(String, CheckRow)>) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        // `*` rows (a node check that could not be evaluated) name no node:
        // they count toward the run only.
        for (n, r) in rows.iter().filter(|(n, _)| n != "*") {
            let newer = |have: Option<&str>| have.is_none_or(|h| h <= run_id);
            let node = g.nodes.entry(n.clone()).or_default();
            if newer(node.get(&r.check).map(|c| c.run_id.as_str())) {
                node.insert(
                    r.check.clone(),
                    NodeCheck {
                        run_id: run_id.to_string(),
                        status: r.status.clone(),
                        value: r.value,
                        unit: r.unit.clone(),
                    },
                );
            }
            let health = g.node_health.entry(n.clone()).or_default();
            if newer(health.get(&r.check).map(|c| c.run_id.as_str())) {
                health.insert(
                    r.check.clone(),
                    NodeVerdict {
                        run_id: run_id.to_string(),
                        row: r.clone(),
                    },
                );
            }
        }
        let g = &mut *g;
        let run = g.runs.entry(run_id.to_string()).or_default();
        g.node_rows += rows.len();
        if let Some(old) = run.node_files.insert(key.to_string(), rows) {
            g.node_rows -= old.len();
        }
        // Over the budget, the oldest runs' rows go (their verdict stays).
        let budget = g.budget.unwrap_or(MAX_NODE_ROWS);
        if g.node_rows > budget {
            for r in g.runs.values_mut() {
                if g.node_rows <= budget {
                    break;
                }
                if !r.node_files.is_empty() {
                    g.node_rows -= r.drop_node_rows();
                }
            }
        }
    }

    /// The newest verdict of each node-level check (`node_health`) on `node`.
    pub fn node_health(&self, node: &str) -> BTreeMap<String, NodeVerdict> {
        self.node_health_read(node).0
    }

    /// [`Self::node_health`] and whether it is complete: the start-up load
    /// had finished before the index was read. (Asking [`Self::loaded`]
    /// after the read could call a read taken mid-load complete, if the load
    /// ended in between.)
    pub fn node_health_read(&self, node: &str) -> (BTreeMap<String, NodeVerdict>, bool) {
        let complete = self.loaded();
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        (
            g.node_health.get(node).cloned().unwrap_or_default(),
            complete,
        )
    }

    /// Marks the start-up load finished.
    pub fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
    }

    /// The start-up load's progress (see [`LoadReport`]).
    pub fn load_report(&self) -> LoadReport {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_report(&self, r: LoadReport) {
        *self.report.lock().unwrap_or_else(|p| p.into_inner()) = r;
    }

    /// Whether the start-up load has finished (before, older verdicts may
    /// be missing). Ask before reading the index, not after: a read taken
    /// before the load ended is incomplete even when this is true by then.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Bounds the node rows held to `n` instead of [`MAX_NODE_ROWS`].
    pub fn set_node_row_budget(&self, n: usize) {
        self.inner.write().unwrap_or_else(|p| p.into_inner()).budget = Some(n);
    }

    /// The node rows held now.
    pub fn node_rows_held(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .node_rows
    }

    /// The verdict of `run_id` (None: no check ran), without copying its
    /// rows.
    pub fn verdict(&self, run_id: &str) -> Option<&'static str> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.runs.get(run_id).and_then(|r| r.verdict())
    }

    /// The verdicts of `run_id` as the index holds them (node rows of older
    /// runs dropped: [`read_run`] has them all).
    pub fn run(&self, run_id: &str) -> Option<RunVerdicts> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.runs.get(run_id).cloned()
    }

    /// The verdict of each of `run_ids` (None: no check ran).
    pub fn verdicts_of<'a>(
        &self,
        run_ids: impl IntoIterator<Item = &'a str>,
    ) -> HashMap<String, &'static str> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        run_ids
            .into_iter()
            .filter_map(|id| {
                g.runs
                    .get(id)
                    .and_then(|r| r.verdict())
                    .map(|v| (id.to_string(), v))
            })
            .collect()
    }

    /// Run ids whose verdict is `verdict`, newest first, older than `before`
    /// when given, at most `limit`.
    pub fn runs_with(&self, verdict: &str, before: Option<&str>, limit: usize) -> Vec<String> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let range = match before {
            Some(b) => g
                .runs
                .range::<str, _>((std::ops::Bound::Unbounded, std::ops::Bound::Excluded(b))),
            None => g.runs.range::<str, _>(..),
        };
        range
            .rev()
            .filter(|(_, r)| r.verdict() == Some(verdict))
            .take(limit)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The newest verdict of each check on `node`.
    pub fn node(&self, node: &str) -> BTreeMap<String, NodeCheck> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.nodes.get(node).cloned().unwrap_or_default()
    }

    /// The newest verdicts of every node that has any.
    pub fn nodes(&self) -> HashMap<String, BTreeMap<String, NodeCheck>> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.nodes.clone()
    }

    /// Every check's rows on `node`, per check, oldest run first, over the
    /// newest `max_runs` runs that have any: its `node_health` rows and the
    /// run-level rows of runs whose tasks ran on it (the node page's
    /// series).
    pub fn node_history(&self, node: &str, max_runs: usize) -> BTreeMap<String, Vec<HistoryPoint>> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let mut runs = Vec::new();
        for (id, r) in g.runs.iter().rev() {
            if runs.len() >= max_runs {
                break;
            }
            let mut rows: Vec<CheckRow> = r
                .node_rows()
                .filter(|(n, _)| n == node)
                .map(|(_, row)| row.clone())
                .collect();
            if r.agents.iter().any(|a| a == node) {
                rows.extend(r.rows().cloned());
            }
            if !rows.is_empty() {
                runs.push((id.clone(), rows));
            }
        }
        let mut out: BTreeMap<String, Vec<HistoryPoint>> = BTreeMap::new();
        for (run_id, rows) in runs.into_iter().rev() {
            for row in rows {
                out.entry(row.check.clone())
                    .or_default()
                    .push(HistoryPoint {
                        run_id: run_id.clone(),
                        row,
                    });
            }
        }
        out
    }
}

/// One point of a node's check series ([`VerdictIndex::node_history`]).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPoint {
    /// The run it came from (a ULID: its time is the run's submission).
    pub run_id: String,
    /// The row.
    pub row: CheckRow,
}

/// The `checks` rows of decoded batches (rows missing `check` or `status`
/// are skipped).
pub fn check_rows(batches: &[RecordBatch]) -> Vec<CheckRow> {
    rows_with_node(batches).into_iter().map(|r| r.1).collect()
}

/// The `node_health` rows of decoded batches as (node, row) (rows missing
/// `node`, `check` or `status` are skipped).
pub fn node_rows(batches: &[RecordBatch]) -> Vec<(String, CheckRow)> {
    rows_with_node(batches)
        .into_iter()
        .filter_map(|(n, r)| n.map(|n| (n, r)))
        .collect()
}

/// Rows of `checks` or `node_health` batches with their `node` when the
/// batch has one.
fn rows_with_node(batches: &[RecordBatch]) -> Vec<(Option<String>, CheckRow)> {
    let mut out = Vec::new();
    for b in batches {
        let text = |n: &str| {
            b.column_by_name(n)
                .and_then(|a| arrow::compute::cast(a, &DataType::Utf8).ok())
        };
        let num = |n: &str| {
            b.column_by_name(n)
                .and_then(|a| arrow::compute::cast(a, &DataType::Float64).ok())
        };
        let s = |n: &str| text(n).and_then(|a| a.as_any().downcast_ref::<StringArray>().cloned());
        let f = |n: &str| num(n).and_then(|a| a.as_any().downcast_ref::<Float64Array>().cloned());
        let (Some(check), Some(status)) = (s("check"), s("status")) else {
            continue;
        };
        let (unit, message, value, reference, node) = (
            s("unit"),
            s("message"),
            f("value"),
            f("reference"),
            s("node"),
        );
        let (since_run, since_date, step, confidence) =
            (s("since_run"), s("since_date"), f("step"), f("confidence"));
        let get_o = |a: &Option<StringArray>, i: usize| {
            a.as_ref()
                .filter(|a| a.is_valid(i))
                .map(|a| a.value(i).to_string())
        };
        let get_s = |a: &Option<StringArray>, i: usize| {
            a.as_ref()
                .filter(|a| a.is_valid(i))
                .map(|a| a.value(i).to_string())
                .unwrap_or_default()
        };
        let get_f = |a: &Option<Float64Array>, i: usize| {
            a.as_ref().filter(|a| a.is_valid(i)).map(|a| a.value(i))
        };
        for i in 0..b.num_rows() {
            if !check.is_valid(i) || !status.is_valid(i) {
                continue;
            }
            let node = node
                .as_ref()
                .filter(|a| a.is_valid(i))
                .map(|a| a.value(i).to_string());
            out.push((
                node,
                CheckRow {
                    check: check.value(i).to_string(),
                    status: status.value(i).to_string(),
                    value: get_f(&value, i),
                    reference: get_f(&reference, i),
                    unit: get_s(&unit, i),
                    message: get_s(&message, i),
                    since_run: get_o(&since_run, i),
                    since_date: get_o(&since_date, i),
                    step: get_f(&step, i),
                    confidence: get_f(&confidence, i),
                },
            ));
        }
    }
    out
}

/// Objects [`read_into`] reads at once: each read in flight held ~35 MB
/// beyond the rows kept (a year of 600 nodes on a local lake, docs/testing.md
/// "The same year with the coordinator's compaction"): 8 at once peaked at
/// 530 MB, 2 at 456 MB, and the load took 8.9 s instead of 8.0 s.
pub const READ_CONCURRENCY: usize = 2;

/// Reads the committed `checks` and `node_health` objects `keys` (run id,
/// object key) of `c` into its index ([`READ_CONCURRENCY`] reads at once);
/// returns those that could not be read, with the error (each read is tried
/// three times first).
pub async fn read_into(
    c: &crate::Coordinator,
    files: Vec<crate::model::CommittedFile>,
) -> Vec<(crate::model::CommittedFile, String)> {
    use futures::StreamExt;
    let mut agents_of: HashMap<String, Vec<String>> = HashMap::new();
    let mut failed = Vec::new();
    // Object reads overlap (an S3 lake answers each in tens of ms).
    let mut reads = futures::stream::iter(files)
        .map(|f| async move {
            // A read that fails is tried twice more before it is reported
            // (a transient lake error must not hide a node's FAIL). The part
            // may sit in a merged file (`crate::compaction`).
            let mut r = crate::compaction::read_committed(c, &f).await;
            for pause in [200u64, 1000] {
                if r.is_ok() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                r = crate::compaction::read_committed(c, &f).await;
            }
            (f, r)
        })
        .buffer_unordered(READ_CONCURRENCY);
    while let Some((f, read)) = reads.next().await {
        let (run_id, key) = (f.run_id.clone(), f.key.clone());
        let batches = match read {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "cannot read committed checks for the verdict index");
                failed.push((f, e.to_string()));
                continue;
            }
        };
        if is_node_health(&key) {
            c.verdicts.record_nodes(&run_id, &key, node_rows(&batches));
            continue;
        }
        let rows = check_rows(&batches);
        if !agents_of.contains_key(&run_id) {
            let id = run_id.clone();
            let agents = c
                .db(move |tx| {
                    let mut a: Vec<String> =
                        tx.tasks_of_run(&id)?.into_iter().map(|t| t.agent).collect();
                    a.sort();
                    a.dedup();
                    Ok(a)
                })
                .await
                .unwrap_or_default();
            agents_of.insert(run_id.clone(), agents);
        }
        let agents = agents_of.get(&run_id).cloned().unwrap_or_default();
        c.verdicts.record(&run_id, &key, &agents, rows);
    }
    failed
}

/// The verdicts of `run_id` with every row: from the index, and for a run
/// whose node rows the index dropped ([`MAX_NODE_ROWS`]), those rows read
/// again from its committed `node_health` files (one small read each).
pub async fn read_run(
    c: &crate::Coordinator,
    run_id: &str,
) -> crate::error::Result<Option<RunVerdicts>> {
    let Some(mut v) = c.verdicts.run(run_id) else {
        return Ok(None);
    };
    if !v.node_rows_dropped {
        return Ok(Some(v));
    }
    let id = run_id.to_string();
    let files = c.db_read(move |tx| tx.committed_files_of_run(&id)).await?;
    for f in files.iter().filter(|f| is_node_health(&f.key)) {
        let batches = crate::compaction::read_committed(c, f).await?;
        v.node_files.insert(f.key.clone(), node_rows(&batches));
    }
    v.node_verdict = None;
    v.node_rows_dropped = false;
    Ok(Some(v))
}

/// Whether a committed object key is one of the `node_health` table's.
pub fn is_node_health(key: &str) -> bool {
    key.starts_with("tables/node_health/")
}

/// Whether `key` is a `checks` file.
pub fn is_checks(key: &str) -> bool {
    key.starts_with("tables/checks/")
}

/// How long the start-up load keeps retrying files it cannot read before it
/// calls the index loaded without them (logged as an error, kept in the
/// [`LoadReport`]).
pub const LOAD_GIVE_UP: std::time::Duration = std::time::Duration::from_secs(120);

/// The committed `checks` and `node_health` files of the state store.
async fn list_verdict_files(c: &crate::Coordinator) -> Vec<crate::model::CommittedFile> {
    // The listing is retried until it succeeds (a store busy with a
    // starting coordinator's other work, or not reachable yet): marking the
    // index loaded without it would let `node-check` and the dashboard
    // report "no verdict" as complete.
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        match c
            .db(|tx| {
                let mut f = tx.committed_files(Some("checks"))?;
                f.extend(tx.committed_files(Some("node_health"))?);
                Ok(f)
            })
            .await
        {
            Ok(f) => return f,
            Err(e) => {
                tracing::warn!(error = %e, retry_ms = wait.as_millis() as u64, "verdicts: cannot list the committed checks files yet");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(5));
            }
        }
    }
}

/// The start-up load: every committed `checks` and `node_health` file of the
/// store. The index counts as loaded (`complete` in node-check answers) only
/// once every listed file was read: files that fail are read again with a
/// growing pause (a file no longer committed is dropped), for at most
/// [`LOAD_GIVE_UP`].
pub async fn load(c: std::sync::Arc<crate::Coordinator>) {
    let t0 = std::time::Instant::now();
    let files = list_verdict_files(&c).await;
    let listed = files.len();
    let mut failed = read_into(&c, files).await;
    let mut wait = std::time::Duration::from_millis(500);
    loop {
        c.verdicts.set_report(LoadReport {
            listed,
            read: listed.saturating_sub(failed.len()),
            unreadable: failed
                .iter()
                .map(|f| (f.0.key.clone(), f.1.clone()))
                .collect(),
        });
        if failed.is_empty() {
            break;
        }
        if t0.elapsed() >= LOAD_GIVE_UP {
            tracing::error!(
                unreadable = failed.len(),
                first = %failed[0].0.key,
                error = %failed[0].1,
                "verdicts: committed checks files stay unreadable; their verdicts are left out"
            );
            break;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(std::time::Duration::from_secs(10));
        // Read again as the store has them now (a part merged since is
        // read from its merged file; one no longer committed is dropped).
        let mut committed: HashMap<String, crate::model::CommittedFile> = list_verdict_files(&c)
            .await
            .into_iter()
            .map(|f| (f.key.clone(), f))
            .collect();
        let again = failed
            .drain(..)
            .filter_map(|f| committed.remove(&f.0.key))
            .collect();
        failed = read_into(&c, again).await;
    }
    c.verdicts.set_loaded();
    tracing::info!(
        files = listed,
        ms = t0.elapsed().as_millis() as u64,
        "dashboard verdicts loaded"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(check: &str, status: &str) -> CheckRow {
        CheckRow {
            check: check.into(),
            status: status.into(),
            value: Some(1.0),
            reference: None,
            unit: "s".into(),
            message: String::new(),
            ..Default::default()
        }
    }

    #[test]
    fn newest_verdict_per_node_and_worst_per_run() {
        let ix = VerdictIndex::default();
        let n1 = vec!["n1".to_string()];
        ix.record("01B", "k2", &n1, vec![row("a", "PASS")]);
        ix.record("01A", "k1", &n1, vec![row("a", "FAIL"), row("b", "ERROR")]);
        let node = ix.node("n1");
        assert_eq!(node["a"].status, "PASS");
        assert_eq!(node["b"].status, "ERROR");
        assert_eq!(ix.run("01A").and_then(|r| r.verdict()), Some("FAIL"));
        assert_eq!(ix.runs_with("FAIL", None, 10), ["01A"]);
        assert!(ix.runs_with("FAIL", Some("01A"), 10).is_empty());
        // A retried job rewrites its key: rows are replaced.
        ix.record("01A", "k1", &n1, vec![row("a", "PASS")]);
        assert_eq!(ix.run("01A").and_then(|r| r.verdict()), Some("PASS"));
        assert_eq!(worst(["PASS", "ERROR", "PASS"]), Some("ERROR"));
        assert_eq!(worst([]), None);
    }

    #[test]
    fn node_rows_name_their_node_and_count_toward_the_run() {
        let ix = VerdictIndex::default();
        ix.record(
            "01A",
            "tables/checks/k",
            &["login".to_string()],
            vec![row("io.x", "PASS")],
        );
        assert_eq!(ix.run("01A").and_then(|r| r.verdict()), Some("PASS"));
        let key = "tables/node_health/date=d/run_id=01A/part-j.parquet";
        assert!(is_node_health(key) && !is_node_health("tables/checks/x"));
        ix.record_nodes(
            "01A",
            key,
            vec![
                ("n1".into(), row("node.cores", "PASS")),
                ("n2".into(), row("node.cores", "FAIL")),
            ],
        );
        // A failing node makes the run FAIL.
        assert_eq!(ix.run("01A").and_then(|r| r.verdict()), Some("FAIL"));
        assert_eq!(ix.node_health("n2")["node.cores"].row.status, "FAIL");
        assert_eq!(ix.node("n2")["node.cores"].status, "FAIL");
        assert!(ix.node_health("login").is_empty());
        // A later run's verdict replaces it; an older one does not.
        ix.record_nodes("01B", "k2", vec![("n2".into(), row("node.cores", "PASS"))]);
        ix.record_nodes("019", "k0", vec![("n2".into(), row("node.cores", "FAIL"))]);
        let h = &ix.node_health("n2")["node.cores"];
        assert_eq!((h.run_id.as_str(), h.row.status.as_str()), ("01B", "PASS"));
        // A row about no node (bad parameters) counts for the run only.
        ix.record_nodes("01C", "k3", vec![("*".into(), row("node.config", "ERROR"))]);
        assert_eq!(ix.run("01C").and_then(|r| r.verdict()), Some("ERROR"));
        assert!(!ix.nodes().contains_key("*") && ix.node_health("*").is_empty());
    }

    #[test]
    fn a_read_taken_before_the_load_ended_is_not_complete() {
        let ix = VerdictIndex::default();
        ix.record_nodes("01A", "k1", vec![("n2".into(), row("node.cores", "PASS"))]);
        let (mid_load, complete) = ix.node_health_read("n2");
        // The load goes on and ends while the caller is still answering.
        ix.record_nodes("01B", "k2", vec![("n2".into(), row("node.cores", "FAIL"))]);
        ix.set_loaded();
        assert!(!complete, "the read missed 01B: {mid_load:?}");
        let (h, complete) = ix.node_health_read("n2");
        assert!(complete);
        assert_eq!(h["node.cores"].run_id, "01B");
    }

    /// Over the budget the oldest runs' node rows go, newest first kept;
    /// their verdict stays, the held count follows records, replacements
    /// and retention, and forgetting a dropped run's node file forgets its
    /// verdict with it.
    #[test]
    fn node_rows_beyond_the_budget_drop_oldest_first_and_keep_their_verdict() {
        let ix = VerdictIndex::default();
        ix.set_node_row_budget(10);
        let key = |run: &str| format!("tables/node_health/x/part-{run}.parquet");
        let rows = |status: &str| -> Vec<(String, CheckRow)> {
            (0..4)
                .map(|n| (format!("n{n}"), row("node.cores", status)))
                .collect()
        };
        ix.record_nodes("01A", &key("01A"), rows("FAIL"));
        ix.record_nodes("01B", &key("01B"), rows("PASS"));
        assert_eq!(ix.node_rows_held(), 8);
        ix.record_nodes("01C", &key("01C"), rows("PASS"));
        // 12 > 10: 01A's rows go, its FAIL stays.
        assert_eq!(ix.node_rows_held(), 8);
        let a = ix.run("01A").unwrap();
        assert!(a.node_rows_dropped && a.node_rows().count() == 0);
        assert_eq!(a.verdict(), Some("FAIL"));
        assert_eq!(ix.verdict("01A"), Some("FAIL"));
        assert_eq!(ix.runs_with("FAIL", None, 10), ["01A"]);
        assert_eq!(ix.run("01C").unwrap().node_rows().count(), 4);
        // The newest verdict per node is not the rows': it stays.
        assert_eq!(ix.node_health("n1")["node.cores"].run_id, "01C");
        // A retried job's file replaces its rows, counted once.
        ix.record_nodes("01C", &key("01C"), rows("PASS"));
        assert_eq!(ix.node_rows_held(), 8);
        // Retention: a held file and a dropped one.
        ix.forget("01B", &key("01B"));
        assert_eq!(ix.node_rows_held(), 4);
        ix.forget("01A", &key("01A"));
        assert!(ix.run("01A").is_none() && ix.verdict("01A").is_none());
    }
}
