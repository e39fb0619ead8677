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

use benchlake_core::layout;
use benchlake_core::lake::migrate::{MigrateReport, new_key_of};

use crate::Coordinator;
use crate::error::Result;
use crate::model::CommittedFile;

/// Moves the lake and the store's keys; returns what moved.
pub async fn migrate(c: &Arc<Coordinator>) -> Result<MigrateReport> {
    let legacy: HashMap<String, CommittedFile> = c
        .store
        .transact(|tx| tx.committed_files(None))?
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
                c.store.transact(|tx| {
                    tx.upsert_committed(&new)?;
                    tx.delete_committed(&old_key)
                })?;
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
