//! `benchlake agents` and `benchlake tables`.
use super::*;

#[derive(Debug, Subcommand)]
pub enum AgentsCmd {
    /// List agents.
    List {
        #[command(flatten)]
        conn: Conn,
    },
    /// Stop giving new tasks to an agent (admin).
    Drain {
        #[command(flatten)]
        conn: Conn,
        name: String,
        /// Reverse a drain.
        #[arg(long)]
        undrain: bool,
    },
}

pub async fn agents_cmd(c: AgentsCmd) -> anyhow::Result<()> {
    match c {
        AgentsCmd::List { conn } => {
            let agents = conn
                .cluster()?
                .list_agents(pb::ListAgentsRequest {})
                .await?
                .into_inner()
                .agents;
            if conn.json {
                return json(&agents
                    .iter()
                    .map(|a| serde_json::json!({"name": a.name, "state": a.state, "hostname": a.hostname, "cores": a.cores,
                        "memory_bytes": a.memory_bytes, "labels": a.labels, "benchmarks": a.benchmarks,
                        "running_tasks": a.running_tasks, "last_heartbeat_ms": a.last_heartbeat_ms,
                        "refused": a.refused.iter().map(|r| serde_json::json!({"name": r.name, "reason": r.reason})).collect::<Vec<_>>()}))
                    .collect::<Vec<_>>());
            }
            for a in agents {
                outln!(
                    "{:<20} {:<9} {:<20} {:>3} cores {:>7.1} GiB  running {}  last seen {}  [{}]",
                    a.name,
                    a.state,
                    a.hostname,
                    a.cores,
                    a.memory_bytes as f64 / (1u64 << 30) as f64,
                    a.running_tasks,
                    fmt_ms(a.last_heartbeat_ms),
                    a.benchmarks.join(", ")
                );
                // What the agent will not run, and why (it is never placed there).
                for r in &a.refused {
                    outln!("  refuses {}: {}", r.name, r.reason);
                }
            }
        }
        AgentsCmd::Drain {
            conn,
            name,
            undrain,
        } => {
            let a = conn
                .cluster()?
                .drain_agent(pb::DrainAgentRequest { name, undrain })
                .await?
                .into_inner();
            if conn.json {
                return json(&serde_json::json!({ "name": a.name, "state": a.state }));
            }
            outln!("{} {}", a.name, a.state);
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum TablesCmd {
    /// The tables with their files, rows and sizes.
    List {
        #[command(flatten)]
        conn: Conn,
    },
    /// Print docs/tables.md (generated from the catalog).
    Docs,
    /// Move a lake written before 2026-12 (`tables/T/date=D/run_id=R/part-J.parquet`)
    /// to the `year=/month=` layout, each file gaining its `date` column
    /// (docs/architecture.md, "Compaction"). For lakes of offline ingests: a
    /// coordinator moves its own lake when it starts (stop it before running
    /// this on its lake; it records the new keys when it starts again).
    /// Safe to stop anywhere and run again.
    Migrate {
        #[command(flatten)]
        lake: crate::opts::LakeArgs,
        /// Count what would move; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Merge each month's small files of a lake of offline ingests into one
    /// file per table and month (`compacted-{first date}-{id}.parquet`, the
    /// same columns; docs/architecture.md, "Compaction"). Every run reads the
    /// same rows after; run it nightly and a small table keeps about one file
    /// a month. A coordinator's lake is refused (its state store lists the
    /// files). A reader globbing the lake while this runs can see a month's
    /// rows twice between a merged file's upload and the deletes.
    Compact {
        #[command(flatten)]
        lake: crate::opts::LakeArgs,
        /// Only these tables (default: every table of the catalog).
        #[arg(long = "table")]
        tables: Vec<String>,
        /// Files from this size on are left as they are.
        #[arg(long, default_value_t = 64 << 20)]
        small_bytes: u64,
        /// Merge a month once it has this many small committed files.
        #[arg(long, default_value_t = 8)]
        min_files: usize,
        /// Count what would merge; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

pub async fn tables_cmd(c: TablesCmd) -> anyhow::Result<()> {
    match c {
        TablesCmd::Docs => out!("{}", benchlake_core::catalog::markdown()),
        TablesCmd::Compact {
            lake,
            tables,
            small_bytes,
            min_files,
            dry_run,
        } => compact_cmd(lake, tables, small_bytes, min_files, dry_run).await?,
        TablesCmd::Migrate { lake, dry_run } => {
            let Some(root) = lake.lake.clone() else {
                anyhow::bail!("give the lake: --lake DIR|s3://bucket (or BENCHLAKE_LAKE)");
            };
            let l = benchlake_core::lake::Lake::open(&lake.store(""))?;
            let r = l
                .migrate_layout(
                    dry_run,
                    |_| Ok(()),
                    |i, n, m| {
                        if i % 100 == 0 || i == n {
                            eprintln!("moved {i}/{n}: {}", m.new_key);
                        }
                    },
                )
                .await
                .with_context(|| format!("migrating {root}"))?;
            if dry_run {
                outln!(
                    "{root}: {} files of the layout before 2026-12 ({} bytes) would move; nothing written",
                    r.legacy_files,
                    r.old_bytes
                );
            } else {
                outln!(
                    "{root}: moved {} files ({} rows; {} bytes before, {} after) to tables/T/year=Y/month=M/",
                    r.moved,
                    r.rows,
                    r.old_bytes,
                    r.new_bytes
                );
            }
        }
        TablesCmd::List { conn } => {
            let r = conn
                .cluster()?
                .list_tables(pb::ListTablesRequest {})
                .await?
                .into_inner();
            if conn.json {
                return json(&r
                    .tables
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "files": t.files, "rows": t.rows, "bytes": t.bytes, "columns": t.columns}))
                    .collect::<Vec<_>>());
            }
            outln!("lake: {}", r.lake_root);
            for t in r.tables {
                outln!(
                    "{:<22} {:>6} files {:>12} rows {:>12} bytes",
                    t.name,
                    t.files,
                    t.rows,
                    t.bytes
                );
            }
        }
    }
    Ok(())
}

/// `benchlake tables compact`.
async fn compact_cmd(
    lake: crate::opts::LakeArgs,
    tables: Vec<String>,
    small_bytes: u64,
    min_files: usize,
    dry_run: bool,
) -> anyhow::Result<()> {
    use benchlake_core::layout;
    let Some(root) = lake.lake.clone() else {
        anyhow::bail!("give the lake: --lake DIR|s3://bucket (or BENCHLAKE_LAKE)");
    };
    let l = benchlake_core::lake::Lake::open(&lake.store(""))?;
    if l.size(layout::COORDINATOR_MARKER).await?.is_some() {
        anyhow::bail!(
            "{root}: a coordinator serves this lake ({} is there) and lists its files from its \
             state store; merging them here would hide rows from its readers",
            layout::COORDINATOR_MARKER
        );
    }
    if let Some((k, _)) = l.legacy_table_files().await?.first() {
        anyhow::bail!(
            "{root}: the lake holds table files of the layout before 2026-12 (such as {k}); \
             move it first with `benchlake tables migrate --lake {root}`"
        );
    }
    let tables: Vec<String> = if tables.is_empty() {
        benchlake_core::catalog::all()
            .iter()
            .map(|t| t.name.to_string())
            .collect()
    } else {
        for t in &tables {
            if benchlake_core::catalog::get(t).is_none() {
                anyhow::bail!("--table {t}: no such table (`benchlake tables docs` lists them)");
            }
        }
        tables
    };
    let (mut merged, mut inputs, mut before, mut after) = (0usize, 0usize, 0u64, 0u64);
    for t in &tables {
        // One day of each month that has files.
        let mut months = std::collections::BTreeSet::new();
        for (k, _) in l.list(&layout::table_prefix(t)?).await? {
            match layout::parse_table_file(&k) {
                Some(layout::TableFile::Part(p)) => months.insert(format!("{}-01", &p.date[..7])),
                Some(layout::TableFile::Compacted { first_date, .. }) => {
                    months.insert(format!("{}-01", &first_date[..7]))
                }
                None => false,
            };
        }
        for m in months {
            let r = l
                .compact_month(
                    t,
                    &m,
                    &benchlake_core::ids::new_id(),
                    small_bytes,
                    min_files,
                    dry_run,
                )
                .await
                .with_context(|| format!("compacting {t} of {}", &m[..7]))?;
            if r.inputs > 0 {
                merged += 1;
                inputs += r.inputs;
                before += r.in_bytes;
                after += r.out_bytes;
                if dry_run {
                    outln!(
                        "{t} {}: {} files ({} bytes) would merge",
                        &m[..7],
                        r.inputs,
                        r.in_bytes
                    );
                } else {
                    outln!(
                        "{t} {}: {} files ({} bytes) -> {} ({} rows, {} bytes)",
                        &m[..7],
                        r.inputs,
                        r.in_bytes,
                        r.key,
                        r.rows,
                        r.out_bytes
                    );
                }
            }
        }
    }
    if dry_run {
        outln!(
            "{root}: {merged} months would merge {inputs} files ({before} bytes); nothing written"
        );
    } else {
        outln!(
            "{root}: {merged} months merged {inputs} files ({before} bytes) into {merged} ({after} bytes)"
        );
    }
    Ok(())
}
