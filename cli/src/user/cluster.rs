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
}

pub async fn tables_cmd(c: TablesCmd) -> anyhow::Result<()> {
    match c {
        TablesCmd::Docs => out!("{}", benchlake_core::catalog::markdown()),
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
