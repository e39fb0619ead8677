//! The user commands: runs ([`runs`]), schedules ([`schedules`]), agents and
//! tables ([`cluster`]) through the coordinator's gRPC API, and offline
//! ingest, analysis, reports and the probes used by built-in benchmarks
//! ([`offline`]). This module holds what they share: the connection and the
//! run spec flags.
use benchlake_core::{out, outln};
use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use benchlake_proto::client::{Auth, channel_with};
use benchlake_proto::v1 as pb;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Ch = InterceptedService<Channel, Auth>;

/// How to reach the coordinator.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// Coordinator address, `host:port` or `https://host:port`; or a
    /// comma-separated list of the coordinators sharing one state database
    /// (`host1:7700,host2:7700`, all https:// or none): the leader is found
    /// by connecting, and found again when it changes.
    #[arg(long, env = "BENCHLAKE_COORDINATOR", default_value = "127.0.0.1:7700")]
    pub coordinator: String,
    /// User (or admin) token.
    #[arg(long, env = "BENCHLAKE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tls: Box<crate::opts::ClientTlsArgs>,
    /// TLS settings used instead of `tls` (`benchlake up`'s own clients).
    #[arg(skip)]
    pub client_tls: Option<std::sync::Arc<benchlake_proto::client::ClientTls>>,
}

/// The coordinator address the command's clients were made for, so that an
/// unreachable coordinator is reported with its address ([`unreachable`]).
static CONTACTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The message for a call the coordinator did not answer (`Unavailable`):
/// which address was tried and where it comes from. None when no client was
/// made.
pub fn unreachable(status: &tonic::Status) -> Option<String> {
    // A coordinator that answers UNAVAILABLE itself (its lake or state store
    // failing) was reached: only a transport failure is "cannot reach".
    let m = status.message();
    let transport = std::error::Error::source(status).is_some()
        || m.contains("connect error")
        || m.contains("transport error")
        || m.contains("error trying to connect");
    if status.code() != tonic::Code::Unavailable || !transport {
        return None;
    }
    let addr = CONTACTED.get()?;
    Some(format!(
        "cannot reach the coordinator at {addr}: {} (is it running and listening there? \
         set --coordinator or BENCHLAKE_COORDINATOR)",
        status.message()
    ))
}

impl Conn {
    pub(crate) fn ch(&self) -> anyhow::Result<(Channel, Auth)> {
        let _ = CONTACTED.set(self.coordinator.clone());
        Ok((
            channel_with(
                &self.coordinator,
                &match &self.client_tls {
                    Some(t) => (**t).clone(),
                    None => self.tls.load()?,
                },
            )
            .map_err(anyhow::Error::msg)?,
            Auth::new(self.token.as_deref()).map_err(anyhow::Error::msg)?,
        ))
    }
    pub fn runs(&self) -> anyhow::Result<pb::run_service_client::RunServiceClient<Ch>> {
        let (c, a) = self.ch()?;
        Ok(pb::run_service_client::RunServiceClient::with_interceptor(
            c, a,
        ))
    }
    pub fn schedules(
        &self,
    ) -> anyhow::Result<pb::schedule_service_client::ScheduleServiceClient<Ch>> {
        let (c, a) = self.ch()?;
        Ok(pb::schedule_service_client::ScheduleServiceClient::with_interceptor(c, a))
    }
    pub fn cluster(&self) -> anyhow::Result<pb::cluster_service_client::ClusterServiceClient<Ch>> {
        let (c, a) = self.ch()?;
        Ok(pb::cluster_service_client::ClusterServiceClient::with_interceptor(c, a))
    }
}

/// A benchmark spec from flags.
#[derive(Debug, Clone, Args)]
pub struct SpecArgs {
    /// Benchmark name from the agents' catalog.
    pub benchmark: String,
    /// Parameters, KEY=VALUE (repeatable).
    #[arg(short = 'p', long = "param")]
    pub params: Vec<String>,
    /// Agents by name (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub agents: Vec<String>,
    /// Required agent labels, KEY=VALUE (repeatable).
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// Number of agents.
    #[arg(long, default_value_t = 0)]
    pub count: u32,
    /// Launcher: local, mpirun, srun or sbatch (Slurm batch mode) (default: the benchmark's).
    #[arg(long)]
    pub launcher: Option<String>,
    /// Attempts per task.
    #[arg(long, default_value_t = 0)]
    pub max_attempts: u32,
    /// Timeout in seconds (0 = the catalog's).
    #[arg(long, default_value_t = 0)]
    pub timeout: u64,
    #[command(flatten)]
    pub slurm: Box<SlurmArgs>,
}

/// Slurm options of a run with `--launcher srun` or `sbatch` (docs/slurm.md).
#[derive(Debug, Clone, Default, Args)]
pub struct SlurmArgs {
    /// srun, sbatch: number of Slurm nodes (-N).
    #[arg(
        short = 'N',
        long = "nodes",
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub nodes: u32,
    /// srun, sbatch: tasks per node.
    #[arg(
        long,
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub ntasks_per_node: u32,
    /// srun, sbatch: partition.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub partition: Option<String>,
    /// srun, sbatch: time limit in minutes.
    #[arg(
        long,
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub time_limit: u32,
    /// srun, sbatch: Slurm node names or ranges (comma-separated: n1,n[2-3]); default: Slurm places the tasks.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub nodelist: Option<String>,
    /// srun, sbatch: account.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub account: Option<String>,
    /// srun, sbatch: quality of service.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub qos: Option<String>,
    /// srun, sbatch: reservation.
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub reservation: Option<String>,
    /// srun, sbatch: node features the nodes must have (-C: ib&nvme, a|b).
    #[arg(long, help_heading = "Slurm (--launcher srun|sbatch)")]
    pub constraint: Option<String>,
    /// sbatch: longest wait in Slurm's queue in seconds before the job is
    /// cancelled (0: one day); the run's timeout counts from its start.
    #[arg(
        long,
        default_value_t = 0,
        help_heading = "Slurm (--launcher srun|sbatch)"
    )]
    pub queue_timeout: u32,
}

impl SlurmArgs {
    /// The protocol message (None when no option is given).
    pub fn to_pb(&self) -> Option<pb::SlurmOptions> {
        benchlake_proto::launcher::slurm_to_pb(&benchlake_core::slurm::SlurmOptions {
            nodes: self.nodes,
            ntasks_per_node: self.ntasks_per_node,
            partition: self.partition.clone().unwrap_or_default(),
            time_limit_min: self.time_limit,
            nodelist: self
                .nodelist
                .as_deref()
                .map(split_nodelist)
                .unwrap_or_default(),
            account: self.account.clone().unwrap_or_default(),
            qos: self.qos.clone().unwrap_or_default(),
            reservation: self.reservation.clone().unwrap_or_default(),
            constraint: self.constraint.clone().unwrap_or_default(),
            queue_timeout_s: self.queue_timeout,
        })
    }
}

/// Splits a Slurm node list at the commas outside brackets
/// (`n1,n[2-3,5]` → `n1`, `n[2-3,5]`).
fn split_nodelist(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0u32;
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                if !cur.trim().is_empty() {
                    out.push(cur.trim().to_string());
                }
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn kv(items: &[String], what: &str) -> anyhow::Result<HashMap<String, String>> {
    items
        .iter()
        .map(|i| {
            i.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                .with_context(|| format!("{what} '{i}' is not KEY=VALUE"))
        })
        .collect()
}

impl SpecArgs {
    pub fn spec(&self) -> anyhow::Result<pb::BenchmarkSpec> {
        let launcher = match self.launcher.as_deref() {
            None => pb::Launcher::Unspecified as i32,
            Some(o) => match benchlake_proto::launcher::parse_to_pb(o) {
                Some(v) => v,
                None => bail!(
                    "unknown launcher '{o}' ({})",
                    benchlake_core::bench::LauncherKind::known()
                ),
            },
        };
        Ok(pb::BenchmarkSpec {
            benchmark: self.benchmark.clone(),
            params: kv(&self.params, "parameter")?,
            nodes: Some(pb::NodeSelector {
                names: self.agents.clone(),
                labels: kv(&self.labels, "label")?,
                count: self.count,
            }),
            launcher,
            max_attempts: self.max_attempts,
            timeout_s: self.timeout,
            slurm: self.slurm.to_pb(),
        })
    }
}

mod cluster;
mod offline;
mod runs;
mod schedules;

pub use cluster::*;
pub use offline::*;
pub use runs::*;
pub use schedules::*;

#[cfg(test)]
mod slurm_args_tests {
    use super::runs::slurm_line;
    use super::*;

    #[test]
    fn node_lists_split_outside_brackets() {
        assert_eq!(split_nodelist("n1,n[2-3,5], x "), ["n1", "n[2-3,5]", "x"]);
        assert!(split_nodelist("").is_empty());
        assert_eq!(SlurmArgs::default().to_pb(), None);
    }

    #[test]
    fn an_ended_task_shows_no_stale_progress() {
        let mut t = pb::Task {
            slurm_job_id: "7".into(),
            slurm_nodes: "n[1-3]".into(),
            progress: "Slurm job 7 PENDING (Resources)".into(),
            state: pb::TaskState::Running as i32,
            ..Default::default()
        };
        assert_eq!(
            slurm_line(&t).as_deref(),
            Some("slurm job 7 on n[1-3]: Slurm job 7 PENDING (Resources)")
        );
        t.state = pb::TaskState::Failed as i32;
        assert_eq!(slurm_line(&t).as_deref(), Some("slurm job 7 on n[1-3]"));
        t.slurm_job_id.clear();
        assert_eq!(slurm_line(&t), None);
    }
}
