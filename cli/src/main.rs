//! `benchlake`: the one binary. Parses flags (each also a `BENCHLAKE_*`
//! environment variable) and sets up logging; the services live in their
//! library crates.
mod netprobe;
mod opts;
mod replay;
mod up;
mod user;

use clap::{Parser, Subcommand};

use opts::*;

#[derive(Debug, Parser)]
#[command(
    name = "benchlake",
    version,
    about = "HPC cluster-health benchmarks and MPI communication studies, into a Parquet data lake",
    propagate_version = true
)]
struct Cli {
    /// Log filter (tracing env-filter syntax).
    #[arg(long, global = true, env = "BENCHLAKE_LOG", default_value = "info")]
    log: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Coordinator, worker and one local agent in one process (SQLite state and a
    /// local lake under ./benchlake-data by default).
    Up(up::UpArgs),
    /// Run the coordinator.
    Coordinator(CoordinatorArgs),
    /// Run an agent on a compute node.
    Agent(AgentArgs),
    /// Run a worker.
    Worker(WorkerArgs),
    /// Submit, list, show, watch, cancel and re-run runs.
    #[command(subcommand)]
    Run(user::RunCmd),
    /// Manage cron schedules.
    #[command(subcommand)]
    Schedule(user::ScheduleCmd),
    /// List and drain agents.
    #[command(subcommand)]
    Agents(user::AgentsCmd),
    /// The lake's tables.
    #[command(subcommand)]
    Tables(user::TablesCmd),
    /// Parse input files offline and write the lake layout to a directory.
    Ingest(user::IngestArgs),
    /// Show a SION file's container metadata, header, ranks and sizes.
    Inspect(user::InspectArgs),
    /// Reports (LinkTest).
    #[command(subcommand)]
    Report(user::ReportCmd),
    /// Analyses: alltoallv communication patterns.
    #[command(subcommand)]
    Analyze(user::AnalyzeCmd),
    /// Replay MPI traces with the Dimemas or Bandela model (offline or through the cluster).
    #[command(subcommand)]
    Replay(replay::ReplayCmd),
    /// Small probes run by built-in benchmarks.
    #[command(subcommand)]
    Probe(user::ProbeCmd),
    /// pio, the parallel I/O benchmark (Parallel I/O Benchmarking Consortium rules);
    /// `benchlake pio --help` lists its parameters.
    #[command(disable_help_flag = true)]
    Pio {
        /// pio's own arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// One rank of netprobe, the LinkTest-style TCP link test between agents
    /// (run by the built-in catalog entry `netprobe`).
    Netprobe(netprobe::NetprobeArgs),
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Cmd::Pio { args } = cli.cmd {
        // pio is synchronous and may re-run this command line as its ranks.
        return benchlake_pio::main_with_args(args);
    }
    init_logging(&cli.log);
    if let Cmd::Netprobe(a) = cli.cmd {
        // Blocking sockets and threads; no runtime needed.
        return match netprobe::netprobe(a) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let res = rt.block_on(async move {
        match cli.cmd {
            Cmd::Up(a) => up::up(a).await,
            Cmd::Coordinator(a) => run_coordinator(a).await,
            Cmd::Agent(a) => run_agent(a).await,
            Cmd::Worker(a) => run_worker(a).await,
            Cmd::Run(c) => user::run_cmd(c).await,
            Cmd::Schedule(c) => user::schedule_cmd(c).await,
            Cmd::Agents(c) => user::agents_cmd(c).await,
            Cmd::Tables(c) => user::tables_cmd(c).await,
            Cmd::Ingest(a) => user::ingest(a).await,
            Cmd::Probe(c) => user::probe(c),
            Cmd::Replay(c) => replay::replay_cmd(c).await,
            Cmd::Analyze(c) => user::analyze(c).await,
            Cmd::Inspect(a) => user::inspect(a),
            Cmd::Report(c) => user::report(c).await,
            Cmd::Pio { .. } => Ok(()),
            Cmd::Netprobe(_) => Ok(()),
        }
    });
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            match e.downcast_ref::<tonic::Status>() {
                Some(s) => eprintln!("error: {:?}: {}", s.code(), s.message()),
                None => eprintln!("error: {e:#}"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}
