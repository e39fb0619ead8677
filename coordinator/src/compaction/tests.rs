use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int32Array, StringArray};
use benchlake_core::clock::ManualClock;
use benchlake_core::ids::new_id_at;
use benchlake_core::lake::{Lake, TableOutput};
use benchlake_core::layout;

use super::*;
use crate::CoordinatorConfig;
use crate::store::{SqliteStore, StateStore};

const T: &str = "linktest_ranks";
/// 2026-11-23 00:00 UTC.
const NOW: i64 = 1_795_392_000_000;
const DAY_MS: i64 = 86_400_000;

fn coordinator(dir: &std::path::Path, min_files: usize) -> Arc<Coordinator> {
    coordinator_on(Arc::new(SqliteStore::in_memory().unwrap()), dir, min_files)
}

/// A coordinator over `store` and the local lake under `dir` (a restart
/// when another one used them before).
fn coordinator_on(
    store: Arc<dyn StateStore>,
    dir: &std::path::Path,
    min_files: usize,
) -> Arc<Coordinator> {
    let lake = Lake::local(&dir.join("lake")).unwrap();
    let cfg = CoordinatorConfig {
        background: false,
        compaction: CompactionConfig {
            min_files,
            grace_ms: 60_000,
            ..Default::default()
        },
        ..Default::default()
    };
    Coordinator::new(store, lake, Arc::new(ManualClock::new(NOW)), cfg).unwrap()
}

fn ranks(run: &str, first: i32, n: i32) -> RecordBatch {
    RecordBatch::try_new(
        benchlake_core::catalog::schema(T).unwrap(),
        vec![
            Arc::new(StringArray::from(vec![run; n as usize])) as ArrayRef,
            Arc::new(StringArray::from(vec!["raw/x.sion"; n as usize])),
            Arc::new(Int32Array::from_iter_values(first..first + n)),
            Arc::new(StringArray::from(vec!["n1"; n as usize])),
            Arc::new(Int32Array::from(vec![None; n as usize])),
        ],
    )
    .unwrap()
}

/// A run of `date` commits `n` rows of `T` (from rank `first`), as a job
/// commit records it; its row.
async fn commit_part(c: &Coordinator, date: &str, first: i32, n: i32) -> CommittedFile {
    let at = NOW - 30 * DAY_MS + i64::from(first);
    let (run, job) = (new_id_at(at), new_id_at(at + 1));
    let keys = c
        .lake
        .write_final(
            &[TableOutput::new(T, vec![ranks(&run, first, n)])],
            date,
            &run,
            &job,
        )
        .await
        .unwrap();
    let f = CommittedFile {
        key: keys[0].clone(),
        table: T.into(),
        run_id: run,
        job_id: job,
        date: date.into(),
        rows: n as u64,
        bytes: c.lake.size(&keys[0]).await.unwrap().unwrap(),
        committed_ms: at,
        merged: None,
    };
    c.store.transact(|tx| tx.upsert_committed(&f)).unwrap();
    f
}

fn rank_list(b: &[RecordBatch]) -> Vec<i32> {
    b.iter()
        .flat_map(|b| {
            b.column_by_name("rank")
                .unwrap()
                .as_primitive::<arrow::datatypes::Int32Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// The merged files of `T` in the local lake under `dir`, as keys (what a
/// reader globbing the lake finds).
fn compacted_files(dir: &std::path::Path) -> Vec<String> {
    fn walk(p: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), out);
            } else {
                out.push(e.path());
            }
        }
    }
    let lake = dir.join("lake");
    let mut files = Vec::new();
    walk(&lake.join("tables").join(T), &mut files);
    let mut keys: Vec<String> = files
        .iter()
        .filter(|f| f.to_string_lossy().contains("/compacted-"))
        .map(|f| {
            f.strip_prefix(&lake)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    keys.sort();
    keys
}

fn rows(c: &Coordinator) -> Vec<CommittedFile> {
    c.store.transact(|tx| tx.committed_files(Some(T))).unwrap()
}

/// What a worker does with a leased compact job (the `compact` executor's
/// steps), with `alter` to make it lie; the commit's result.
async fn run_job(
    c: &Coordinator,
    alter: impl FnOnce(&mut CompactSpec),
) -> (JobRow, Result<Vec<String>>) {
    let (j, staged) = stage_job(c, NOW + 10, alter).await;
    let res = commit_staged(c, &j, staged).await;
    (j, res)
}

/// The worker's `CompleteJob` of leased job `j` with its staged file.
async fn commit_staged(c: &Coordinator, j: &JobRow, staged: pb::StagedFile) -> Result<Vec<String>> {
    let req = pb::CompleteJobRequest {
        job_id: j.job_id.clone(),
        lease_id: j.lease_id.clone().unwrap(),
        files: vec![staged],
        result_json: String::new(),
    };
    crate::commit::commit_job(c, req, std::sync::Arc::new(|_: &JobRow| Ok(()))).await
}

/// A worker's part of [`run_job`], leasing at `at`: the leased job and the
/// staged merged file.
async fn stage_job(
    c: &Coordinator,
    at: i64,
    alter: impl FnOnce(&mut CompactSpec),
) -> (JobRow, pb::StagedFile) {
    let cfg = c.cfg.clone();
    let (j, _) = c
        .store
        .transact(|tx| job::lease(tx, &cfg, "w1", &[COMPACT_JOB.to_string()], at))
        .unwrap();
    let j = j.unwrap_or_else(|| {
        let open = c.store.transact(|tx| tx.get_meta(OPEN_KEY)).unwrap();
        let id: BTreeMap<String, String> = serde_json::from_str(&open.clone().unwrap()).unwrap();
        let j = c
            .store
            .transact(|tx| tx.get_job(id.values().next().unwrap()))
            .unwrap();
        panic!("no compact job to lease; open: {open:?} {j:?}")
    });
    let mut spec: CompactSpec = serde_json::from_str(&j.spec_json).unwrap();
    alter(&mut spec);
    let (data, meta) = c
        .lake
        .merge_parts(&spec.table, &spec.parts, spec.merged_from.clone())
        .await
        .unwrap();
    let staged = layout::staged_key(
        &layout::staging_prefix(&j.job_id, j.attempt).unwrap(),
        &spec.table,
        layout::COMPACTED_PART,
    )
    .unwrap();
    let bytes = data.len() as u64;
    c.lake.put(&staged, data).await.unwrap();
    let file = pb::StagedFile {
        staged_key: staged,
        table: spec.table.clone(),
        rows: meta.parts.iter().map(|p| p.rows).sum(),
        bytes,
        part: layout::COMPACTED_PART.into(),
    };
    (j, file)
}

/// A month of small parts becomes one merged file through a compact job:
/// the commit points every part's row at its row groups, every part reads
/// the same rows before, during the grace and after its old object is
/// gone (a reader holding a row from before the merge included), and a
/// later merge takes the month's new parts with the merged file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_month_merges_through_a_compact_job_and_every_part_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path(), 4);
    let mut parts = Vec::new();
    for d in 1..=6 {
        parts.push(commit_part(&c, &format!("2026-11-{d:02}"), d * 100, 3 + d).await);
    }
    let october = commit_part(&c, "2026-10-30", 900, 2).await;
    let mut before = Vec::new();
    for p in &parts {
        before.push(rank_list(&read_committed(&c, p).await.unwrap()));
    }

    // Below the threshold nothing is planned; at it, one job per month.
    let specs = c.schedule_compaction(NOW).unwrap();
    assert_eq!(specs.len(), 1, "November only: October has one part");
    assert_eq!(specs[0].month, "2026-11");
    assert_eq!(specs[0].parts.len(), 6);
    assert!(
        c.schedule_compaction(NOW).unwrap().is_empty(),
        "a month with an open job is not planned again"
    );

    let (j, res) = run_job(&c, |_| {}).await;
    let keys = res.unwrap();
    assert_eq!(keys.len(), 1);
    let merged = keys[0].clone();
    assert_eq!(compacted_files(dir.path()), vec![merged.clone()]);
    assert!(merged.starts_with(&format!(
        "tables/{T}/year=2026/month=11/compacted-2026-11-01-"
    )));
    let now_rows = rows(&c);
    for r in now_rows.iter().filter(|r| r.date.starts_with("2026-11")) {
        assert_eq!(r.object(), merged, "{} points at the merged file", r.key);
    }
    assert_eq!(
        now_rows
            .iter()
            .find(|r| r.key == october.key)
            .unwrap()
            .merged,
        None
    );
    assert_eq!(c.metrics.compaction.get(&[T, "merged"]), 6);
    let done = c
        .store
        .transact(|tx| tx.get_job(&j.job_id))
        .unwrap()
        .unwrap();
    assert_eq!(done.state, JobState::Done);

    // During the grace the old objects are still there; listing readers
    // skip them (the merged file holds them) and read each row once.
    assert!(c.lake.size(&parts[0].key).await.unwrap().is_some());
    let listed = c.lake.table_files(T, Some("2026-11-03")).await.unwrap();
    assert_eq!(listed.len(), 1, "only the merged file: {listed:?}");
    assert_eq!(c.delete_retired(NOW).await.unwrap(), 0, "grace not over");
    assert_eq!(c.delete_retired(NOW + 60_000).await.unwrap(), 6);
    assert!(c.lake.size(&parts[0].key).await.unwrap().is_none());

    for (i, p) in parts.iter().enumerate() {
        let now = now_rows.iter().find(|r| r.key == p.key).unwrap();
        assert_eq!(
            rank_list(&read_committed(&c, now).await.unwrap()),
            before[i]
        );
        // A row read before the merge: its object is gone, the part is
        // found again in the merged file.
        assert_eq!(rank_list(&read_committed(&c, p).await.unwrap()), before[i]);
        let by_listing = c
            .lake
            .read_run_rows(benchlake_core::lake::RunRows::new(T, &p.run_id))
            .await
            .unwrap();
        assert_eq!(rank_list(&by_listing), before[i]);
    }

    // New nights, then the next merge takes them with the merged file.
    let mut later = Vec::new();
    for d in 10..=13 {
        later.push(commit_part(&c, &format!("2026-11-{d}"), d * 100, 2).await);
    }
    let specs = c.schedule_compaction(NOW + 1).unwrap();
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].parts.len(), 10, "6 merged + 4 new");
    assert_eq!(specs[0].merged_from, vec![merged.clone()]);
    let (_, res) = run_job(&c, |_| {}).await;
    let merged2 = res.unwrap().remove(0);
    assert_ne!(merged2, merged);
    assert_eq!(c.delete_retired(NOW + 120_000).await.unwrap(), 5);
    assert!(c.lake.size(&merged).await.unwrap().is_none());
    let files: Vec<String> = c
        .lake
        .table_files(T, None)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.key)
        .collect();
    assert_eq!(files, vec![october.key.clone(), merged2.clone()]);
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(rank_list(&read_committed(&c, p).await.unwrap()), before[i]);
    }
    for p in &later {
        assert_eq!(read_committed(&c, p).await.unwrap()[0].num_rows(), 2);
    }
}

/// The commit refuses a merged file that does not hold exactly what was
/// planned, and a plan that no longer matches the store (a part deleted
/// since): the rows stay as they were, the copy is gone, the job fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_that_is_not_the_plan_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path(), 3);
    let mut parts = Vec::new();
    for d in 1..=4 {
        parts.push(commit_part(&c, &format!("2026-11-{d:02}"), d * 10, 3).await);
    }
    c.schedule_compaction(NOW).unwrap();
    // A worker that drops a part.
    let (j, res) = run_job(&c, |s| {
        s.parts.remove(1);
    })
    .await;
    let e = res.unwrap_err().to_string();
    assert!(e.contains("footer lists 3 parts, the job merged 4"), "{e}");
    assert!(compacted_files(dir.path()).is_empty());
    assert!(rows(&c).iter().all(|r| r.merged.is_none()));

    // A part that retention removed between the plan and the commit.
    let cfg = c.cfg.clone();
    c.store
        .transact(|tx| {
            let j = tx.get_job(&j.job_id)?.unwrap();
            let _ = job::retry_or_fail(tx, &cfg, j, "refused", false, NOW)?;
            Ok(())
        })
        .unwrap();
    let specs = c.schedule_compaction(NOW + 1).unwrap();
    assert_eq!(specs.len(), 1, "the failed job no longer holds the month");
    let gone = parts[2].key.clone();
    c.store.transact(|tx| tx.delete_committed(&gone)).unwrap();
    let (_, res) = run_job(&c, |_| {}).await;
    let e = res.unwrap_err().to_string();
    assert!(e.contains("is no longer committed"), "{e}");
    assert!(compacted_files(dir.path()).is_empty());
    assert!(rows(&c).iter().all(|r| r.merged.is_none()));
}

/// What the planner merges: only months with enough small parts, never a
/// big file, inputs up to the target size (at least two).
#[test]
fn the_plan_takes_small_parts_of_full_months_only() {
    let cfg = CompactionConfig {
        min_files: 3,
        small_bytes: 1_000,
        target_bytes: 2_500,
        ..Default::default()
    };
    let f = |date: &str, n: u32, bytes: u64| CommittedFile {
        key: format!("tables/{T}/k-{date}-{n}"),
        table: T.into(),
        run_id: format!("run{n}"),
        job_id: format!("job{n}"),
        date: date.into(),
        rows: 1,
        bytes,
        committed_ms: 0,
        merged: None,
    };
    let mut files = vec![
        f("2026-11-01", 1, 500),
        f("2026-11-02", 2, 500),
        f("2026-11-03", 3, 5_000),
    ];
    assert!(
        plan(&files, &cfg, &BTreeSet::new(), "2026-11").is_empty(),
        "two small parts, one big"
    );
    let closed = plan(&files, &cfg, &BTreeSet::new(), "2026-12");
    assert_eq!(closed.len(), 1, "a month that is over merges what it has");
    assert_eq!(closed[0].parts.len(), 2);
    files.push(f("2026-11-04", 4, 900));
    files.push(f("2026-11-05", 5, 900));
    let p = plan(&files, &cfg, &BTreeSet::new(), "2026-11");
    assert_eq!(p.len(), 1);
    let keys: Vec<&str> = p[0].parts.iter().map(|p| p.run_id.as_str()).collect();
    assert_eq!(
        keys,
        vec!["run1", "run2", "run4"],
        "up to 2,500 bytes, oldest first"
    );
    assert!(
        p[0].parts
            .iter()
            .all(|p| p.groups.is_none() && p.rows == Some(1))
    );
    let open: BTreeSet<String> = [format!("{T}/2026-11")].into();
    assert!(
        plan(&files, &cfg, &open, "2027-01").is_empty(),
        "a month being merged"
    );
}

/// Retention over merged parts: an expired part's record goes at once and
/// its merged file stays while another part of it is kept; once none is
/// left, the merged file goes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_forgets_merged_parts_and_deletes_their_file_with_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path(), 3);
    let mut parts = Vec::new();
    for d in 1..=6 {
        parts.push(commit_part(&c, &format!("2026-11-{d:02}"), d * 10, 2).await);
    }
    c.schedule_compaction(NOW).unwrap();
    let (_, res) = run_job(&c, |_| {}).await;
    let merged = res.unwrap().remove(0);
    // 2026-11-23 less 19 days: the first three nights expire.
    let some =
        crate::retention::RetentionConfig::parse("delete", &["linktest_ranks=19d".to_string()])
            .unwrap();
    c.apply_retention(&some, NOW).await.unwrap();
    let left: Vec<String> = rows(&c).into_iter().map(|r| r.date).collect();
    assert_eq!(left, vec!["2026-11-04", "2026-11-05", "2026-11-06"]);
    assert!(
        c.lake.size(&merged).await.unwrap().is_some(),
        "three parts still in it"
    );
    assert_eq!(
        rank_list(&read_committed(&c, &rows(&c)[0]).await.unwrap()),
        vec![40, 41]
    );
    let all =
        crate::retention::RetentionConfig::parse("delete", &["linktest_ranks=1d".to_string()])
            .unwrap();
    c.apply_retention(&all, NOW).await.unwrap();
    assert!(rows(&c).is_empty());
    assert!(
        c.lake.size(&merged).await.unwrap().is_none(),
        "its last part went"
    );
}

/// A coordinator killed between the commit's copy of the merged file and
/// its record (`kill -9`): the copy is named by no row. After the restart
/// the job's lease expires and it is queued again; the next plan's pass
/// deletes the copy (a reader globbing the lake sees each row once again),
/// the retry merges under a new name and commits, and every part reads the
/// same rows throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_between_copy_and_record_leaves_no_double_and_the_retry_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
    let c = coordinator_on(store.clone(), dir.path(), 4);
    let mut parts = Vec::new();
    for d in 1..=5 {
        parts.push(commit_part(&c, &format!("2026-11-{d:02}"), d * 10, 2 + d).await);
    }
    let mut before = Vec::new();
    for p in &parts {
        before.push(rank_list(&read_committed(&c, p).await.unwrap()));
    }
    assert_eq!(c.schedule_compaction(NOW).unwrap().len(), 1);

    // The commit's first half, as `commit` does it: the intent, then the
    // copy; then the coordinator is gone.
    let (j, staged) = stage_job(&c, NOW + 10, |_| {}).await;
    let orphan = layout::compacted_key(T, "2026-11-01", &new_id_at(NOW + 20)).unwrap();
    c.store
        .transact(|tx| {
            let mut j = job::leased(tx, &j.job_id, j.lease_id.as_deref().unwrap())?;
            job::record_intent(tx, &mut j, vec![orphan.clone()])
        })
        .unwrap();
    c.lake.copy(&staged.staged_key, &orphan).await.unwrap();
    drop(c);
    // What a reader globbing the lake meets until the pass below: the
    // month twice (the parts and the copy).
    assert_eq!(compacted_files(dir.path()), vec![orphan.clone()]);

    let c = coordinator_on(store, dir.path(), 4);
    let cfg = c.cfg.clone();
    let later = NOW + DAY_MS;
    let (n, _) = c
        .store
        .transact(|tx| job::expire_leases(tx, &cfg, later))
        .unwrap();
    assert_eq!(n, 1, "the killed commit's lease expires");
    // The coordinator's next pass (a tick's, every second by default).
    c.compaction_pass(later).await;
    assert!(compacted_files(dir.path()).is_empty(), "the copy goes");
    assert_eq!(c.metrics.compaction.get(&[T, "retired"]), 1);
    let queued = c
        .store
        .transact(|tx| tx.get_job(&j.job_id))
        .unwrap()
        .unwrap();
    assert_eq!(queued.state, JobState::Queued);
    assert!(queued.committed_keys.is_empty(), "its intent is forgotten");
    assert!(
        c.schedule_compaction(later).unwrap().is_empty(),
        "the queued job still holds its month"
    );
    assert!(rows(&c).iter().all(|r| r.merged.is_none()));
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(rank_list(&read_committed(&c, p).await.unwrap()), before[i]);
    }

    // The retry merges again and commits under its own name.
    let (j2, staged) = stage_job(&c, later + DAY_MS, |_| {}).await;
    assert_eq!((j2.job_id.as_str(), j2.attempt), (j.job_id.as_str(), 2));
    let merged = commit_staged(&c, &j2, staged).await.unwrap().remove(0);
    assert_ne!(merged, orphan);
    assert_eq!(compacted_files(dir.path()), vec![merged.clone()]);
    assert!(rows(&c).iter().all(|r| r.object() == merged));
    assert_eq!(c.delete_retired(later + 3 * DAY_MS).await.unwrap(), 5);
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(rank_list(&read_committed(&c, p).await.unwrap()), before[i]);
    }
    let listed = c.lake.table_files(T, None).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
}

/// The node rows the verdict index dropped for its bound are read again
/// from the lake when a run is asked for whole (`verdicts::read_run`), from
/// a merged file too, with the run's verdict unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_rows_the_index_dropped_are_read_from_the_lake_merged_or_not() {
    use benchlake_analysis::node_checks::{NodeRow, to_batch};
    let dir = tempfile::tempdir().unwrap();
    let c = coordinator(dir.path(), 2);
    c.verdicts.set_node_row_budget(3);
    let mut runs = Vec::new();
    for (d, status) in [(1, "FAIL"), (2, "PASS"), (3, "PASS")] {
        let at = NOW - 30 * DAY_MS + d;
        let (run, job) = (new_id_at(at), new_id_at(at + 1));
        let rows: Vec<NodeRow> = (0..2)
            .map(|n| NodeRow {
                node: format!("n{n}"),
                check: "node.cores".into(),
                status: status.into(),
                value: Some(64.0),
                reference: Some(64.0),
                unit: "cores".into(),
                message: format!("night {d}"),
                regression: None,
            })
            .collect();
        let date = format!("2026-10-0{d}");
        let b = to_batch(&run, "raw/x", &rows).unwrap();
        let keys = c
            .lake
            .write_final(
                &[TableOutput::new("node_health", vec![b])],
                &date,
                &run,
                &job,
            )
            .await
            .unwrap();
        let f = CommittedFile {
            key: keys[0].clone(),
            table: "node_health".into(),
            run_id: run.clone(),
            job_id: job,
            date,
            rows: 2,
            bytes: c.lake.size(&keys[0]).await.unwrap().unwrap(),
            committed_ms: at,
            merged: None,
        };
        c.store.transact(|tx| tx.upsert_committed(&f)).unwrap();
        let read = crate::verdicts::node_rows(&read_committed(&c, &f).await.unwrap());
        c.verdicts.record_nodes(&run, &f.key, read);
        runs.push(run);
    }
    assert_eq!(
        c.verdicts.node_rows_held(),
        2,
        "the two oldest runs' rows went"
    );
    let first = c.verdicts.run(&runs[0]).unwrap();
    assert!(first.node_rows_dropped);
    assert_eq!(first.verdict(), Some("FAIL"));
    let whole = |v: crate::verdicts::RunVerdicts| -> Vec<(String, String, String)> {
        v.node_rows()
            .map(|(n, r)| (n.clone(), r.status.clone(), r.message.clone()))
            .collect()
    };
    let want = vec![
        ("n0".to_string(), "FAIL".to_string(), "night 1".to_string()),
        ("n1".to_string(), "FAIL".to_string(), "night 1".to_string()),
    ];
    let got = crate::verdicts::read_run(&c, &runs[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.verdict(), Some("FAIL"));
    assert_eq!(whole(got), want);

    // October is over: its three parts merge; the dropped rows are read
    // from the merged file.
    let specs = c.schedule_compaction(NOW).unwrap();
    assert_eq!(specs.len(), 1, "{specs:?}");
    let (j, staged) = stage_job(&c, NOW + 10, |_| {}).await;
    commit_staged(&c, &j, staged).await.unwrap();
    c.delete_retired(NOW + 3 * DAY_MS).await.unwrap();
    let got = crate::verdicts::read_run(&c, &runs[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(whole(got), want);
}
