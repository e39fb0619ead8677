//! At start, the coordinator moves a lake of the layout before 2026-12
//! (`tables/T/date=D/run_id=R/part-J.parquet`) to the `year=/month=` layout
//! ([`benchlake_core::lake::migrate`]) and records each new key in the state
//! store in place of the old one, one transaction per file, before the old
//! object goes. It serves once this is done (one glob cannot read both
//! layouts, and readers list the store). A lake moved by `benchlake tables
//! migrate` while the coordinator was stopped leaves the store naming old
//! keys: those rows are moved to the new keys of objects that exist.
use std::collections::HashMap;
use std::sync::Arc;

use benchlake_core::lake::migrate::{MigrateReport, new_key_of};
use benchlake_core::layout;

use crate::Coordinator;
use crate::error::Result;
use crate::model::CommittedFile;

/// Puts [`layout::COORDINATOR_MARKER`] in the lake (tools that rewrite
/// table files without the state store then refuse it). A failure is
/// logged: the lake may be read-only to this coordinator for a while.
pub async fn mark(c: &Arc<Coordinator>) {
    let body = serde_json::json!({
        "what": "the lake of a benchlake coordinator: its state store lists the table files",
        "started_ms": c.now(),
    });
    if let Err(e) = c
        .lake
        .put(layout::COORDINATOR_MARKER, body.to_string().into())
        .await
    {
        tracing::warn!(error = %e, "could not put {} in the lake", layout::COORDINATOR_MARKER);
    }
}

/// Moves the lake and the store's keys; returns what moved.
pub async fn migrate(c: &Arc<Coordinator>) -> Result<MigrateReport> {
    let legacy: HashMap<String, CommittedFile> = c
        .db(|tx| tx.committed_files(None))
        .await?
        .into_iter()
        .filter(|f| layout::parse_legacy_table_key(&f.key).is_some())
        .map(|f| (f.key.clone(), f))
        .collect();
    let found = c.lake.legacy_table_files().await?.len();
    if legacy.is_empty() && found == 0 {
        return Ok(MigrateReport::default());
    }
    tracing::warn!(
        files = found,
        recorded = legacy.len(),
        lake = %c.lake.root(),
        "the lake has table files of the layout before 2026-12: moving them to tables/T/year=Y/month=M/ before serving"
    );
    let t0 = std::time::Instant::now();
    let mut recorded = legacy;
    let report = c
        .lake
        .migrate_layout(
            false,
            |m| {
                if let Some(old) = recorded.remove(&m.old_key) {
                    let new = CommittedFile {
                        key: m.new_key.clone(),
                        bytes: m.bytes,
                        ..old
                    };
                    c.store
                        .transact(|tx| {
                            tx.upsert_committed(&new)?;
                            tx.delete_committed(&m.old_key)
                        })
                        .map_err(|e| benchlake_core::Error::Config(e.to_string()))?;
                }
                Ok(())
            },
            |i, n, m| {
                if i % 500 == 0 || i == n {
                    tracing::info!(moved = i, of = n, last = %m.new_key, "lake layout");
                }
            },
        )
        .await?;
    // Rows whose objects were moved without the coordinator.
    let mut fixed = 0usize;
    for (old_key, f) in recorded {
        let Some(k) = layout::parse_legacy_table_key(&old_key) else {
            continue;
        };
        let new_key = new_key_of(&k)?;
        match c.lake.size(&new_key).await? {
            Some(bytes) => {
                let new = CommittedFile {
                    key: new_key,
                    bytes,
                    ..f
                };
                c.db(move |tx| {
                    tx.upsert_committed(&new)?;
                    tx.delete_committed(&old_key)
                })
                .await?;
                fixed += 1;
            }
            None => tracing::error!(
                key = %old_key,
                "the state store records a table file that is in neither layout of the lake; left as it is"
            ),
        }
    }
    tracing::warn!(
        moved = report.moved,
        rows = report.rows,
        old_bytes = report.old_bytes,
        new_bytes = report.new_bytes,
        store_rows_fixed = fixed,
        secs = t0.elapsed().as_secs_f64(),
        "lake layout: done"
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
    use benchlake_core::clock::ManualClock;
    use benchlake_core::ids::new_id_at;
    use benchlake_core::lake::Lake;

    use crate::model::CommittedFile;
    use crate::store::{SqliteStore, StateStore};
    use crate::{Coordinator, CoordinatorConfig};

    /// 2026-11-23 00:00 UTC.
    const NOW: i64 = 1_795_392_000_000;

    /// A `linktest_ranks` file as written before 2026-12 (no `date`, no
    /// `core_id`, a column added since).
    fn old_ranks(run: &str, n: usize) -> bytes::Bytes {
        let batch = RecordBatch::try_from_iter([
            (
                "run_id",
                Arc::new(StringArray::from(vec![run; n])) as ArrayRef,
            ),
            (
                "source",
                Arc::new(StringArray::from(vec!["raw/x.sion"; n])) as ArrayRef,
            ),
            (
                "rank",
                Arc::new(Int32Array::from_iter_values(0..n as i32)) as ArrayRef,
            ),
            (
                "hostname",
                Arc::new(StringArray::from(vec!["n1"; n])) as ArrayRef,
            ),
        ])
        .unwrap();
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        bytes::Bytes::from(buf)
    }

    /// A coordinator started over a lake and a store of the old layout
    /// moves both before it serves: objects at their new keys with their
    /// rows and `date`, store rows naming them, no old object left; a row
    /// whose object `tables migrate` already moved is pointed at it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_coordinator_moves_an_old_lake_and_its_store_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let lake = Lake::local(&dir.path().join("lake")).unwrap();
        let (run, job, job2) = (new_id_at(NOW), new_id_at(NOW + 1), new_id_at(NOW + 2));
        let old = format!("tables/linktest_ranks/date=2026-11-23/run_id={run}/part-{job}.parquet");
        lake.put(&old, old_ranks(&run, 4)).await.unwrap();
        // A file moved by `tables migrate` while the coordinator was down.
        let moved_old =
            format!("tables/linktest_ranks/date=2026-11-23/run_id={run}/part-{job2}.parquet");
        lake.put(&moved_old, old_ranks(&run, 2)).await.unwrap();
        lake.migrate_table_file(&moved_old).await.unwrap();
        lake.delete(&moved_old).await.unwrap();
        let row = |key: &str, job: &str, rows| CommittedFile {
            key: key.into(),
            table: "linktest_ranks".into(),
            run_id: run.clone(),
            job_id: job.into(),
            date: "2026-11-23".into(),
            rows,
            bytes: 1,
            committed_ms: NOW,
            merged: None,
        };
        store
            .transact(|tx| {
                tx.upsert_committed(&row(&old, &job, 4))?;
                tx.upsert_committed(&row(&moved_old, &job2, 2))
            })
            .unwrap();

        let cfg = CoordinatorConfig {
            background: false,
            ..Default::default()
        };
        let c = Coordinator::new(store, lake, Arc::new(ManualClock::new(NOW)), cfg).unwrap();
        let _ = c.layout_ready.subscribe().wait_for(|r| *r).await;

        let files = c.store.transact(|tx| tx.committed_files(None)).unwrap();
        let keys: Vec<&str> = files.iter().map(|f| f.key.as_str()).collect();
        let m = "tables/linktest_ranks/year=2026/month=11/part-2026-11-23";
        let mut want = vec![
            format!("{m}-{run}-{job}.parquet"),
            format!("{m}-{run}-{job2}.parquet"),
        ];
        want.sort();
        let mut got: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        got.sort();
        assert_eq!(got, want);
        assert!(
            files.iter().all(|f| f.committed_ms == NOW && f.bytes > 1),
            "{files:?}"
        );
        assert!(c.lake.legacy_table_files().await.unwrap().is_empty());
        let b = c.lake.read_parquet(&want[0]).await.unwrap();
        assert_eq!(
            b[0].schema().as_ref(),
            benchlake_core::catalog::file_schema("linktest_ranks")
                .unwrap()
                .as_ref()
        );
        // A second start finds nothing to do.
        assert_eq!(super::migrate(&c).await.unwrap().legacy_files, 0);
    }
}
