//! `benchlake`: the one binary. Parses flags (each also a `BENCHLAKE_*`
//! environment variable) and sets up logging; the services live in their
//! library crates.
// Standard output through `out!`/`outln!` (benchlake_core::stdout): no panic
// when it is closed (`| head`).
#![warn(clippy::print_stdout)]
mod benchmarks;
mod calibrate;
mod config;
mod netprobe;
mod nodecheck;
mod opts;
mod probe_load;
mod replay;
mod run_checks;
mod schedule_show;
mod silence;
mod up;
mod user;
mod year;

use benchlake_core::out;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use opts::*;

#[derive(Debug, Parser)]
#[command(
    name = "benchlake",
    version,
    about = "HPC cluster-health benchmarks and MPI communication studies, into a Parquet data lake",
    propagate_version = true
)]
struct Cli {
    /// Log filter (tracing env-filter syntax, e.g. `info`, `warn,benchlake_worker=debug`).
    /// Default: `info` for the services (`coordinator`, `agent`, `worker`, `up`'s log
    /// file), `warn` for the user commands.
    #[arg(long, global = true, env = "BENCHLAKE_LOG")]
    log: Option<String>,
    /// Log line format: `text` (coloured only on a terminal) or `json` (one object
    /// per line, for log collectors).
    #[arg(
        long,
        global = true,
        env = "BENCHLAKE_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Write log lines to this file (appended) instead of the terminal; `-` is the
    /// terminal. `benchlake up` logs to DATA/benchlake.log by default and shows
    /// only warnings and errors on the terminal, so its progress stays readable.
    #[arg(long, global = true, env = "BENCHLAKE_LOG_FILE")]
    log_file: Option<std::path::PathBuf>,
    /// Configuration file (TOML): any flag of any command, under the environment
    /// and the command line (docs/configuration.md).
    #[arg(long, global = true, env = "BENCHLAKE_CONFIG")]
    config: Option<std::path::PathBuf>,
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
    /// The benchmarks the agents offer (`list`, `show NAME`) and the built-in catalog (`builtin`).
    #[command(subcommand)]
    Benchmarks(benchmarks::BenchmarksCmd),
    /// Acknowledge a failing node or check (admin): `ack NODE CHECK --comment
    /// TEXT --expires 7d`; `ack list`, `ack remove ID`. Acknowledged findings
    /// are recorded but neither notified nor drained.
    Ack(silence::AckArgs),
    /// Maintenance windows (admin): `maintenance add NODES --start T --end T
    /// --reason TEXT`, `list`, `remove ID`. Results of runs in a window are
    /// recorded but neither notified nor drained.
    #[command(subcommand)]
    Maintenance(silence::MaintenanceCmd),
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
    ///
    /// The offline replays (`dimemas`, `bandela`) also come alone, as the
    /// `benchlake-replay` binary installed beside this one: the same flags and
    /// output, in a process about a third of the size (docs/replay.md).
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
    /// The configuration file: `config show COMMAND…` prints the effective value of
    /// every flag of COMMAND and where it came from (secrets hidden).
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Print a shell completion script: `benchlake completions bash >
    /// /etc/bash_completion.d/benchlake` (also zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
        /// The binary to complete: `benchlake`, or the replay-only
        /// `benchlake-replay`.
        #[arg(long, default_value = "benchlake", value_parser = ["benchlake", "benchlake-replay"])]
        bin: String,
    },
    /// Write the manual pages (roff): benchlake.1 and one per command
    /// (benchlake-run-submit.1, …) into DIR; read one with `man -l DIR/benchlake.1`.
    Man {
        /// Output directory (created if missing).
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// One rank of netprobe, the LinkTest-style TCP link test between agents
    /// (run by the built-in catalog entry `netprobe`).
    Netprobe(netprobe::NetprobeArgs),
    /// A node's health from its newest node-level verdicts (node_health):
    /// exit 0 healthy, 1 failing, 2 cannot tell; `--drain` drains a failing
    /// node (Slurm's HealthCheckProgram, docs/slurm.md).
    NodeCheck(nodecheck::NodeCheckArgs),
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print the effective configuration of a command, e.g. `benchlake config show
    /// coordinator` or `benchlake --config site.toml config show agent`.
    Show {
        /// The command (and its flags, if any), as it would be run.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Where log lines go: the terminal (stderr) and/or a file.
struct LogPlan {
    filter: String,
    format: LogFormat,
    file: Option<std::path::PathBuf>,
    /// Only warnings and errors on the terminal (next to a file that gets all).
    terminal_warn_only: bool,
}

impl LogPlan {
    /// The plan for `cli`: services log `info` to stderr; user commands `warn`
    /// (their output is what they print, not log lines); `up` logs to a file
    /// under its data directory and keeps the terminal for its progress.
    fn of(cli: &Cli) -> Self {
        let service = matches!(
            cli.cmd,
            Cmd::Coordinator(_) | Cmd::Agent(_) | Cmd::Worker(_) | Cmd::Up(_) | Cmd::Netprobe(_)
        );
        let default = if service { "info" } else { "warn" };
        let filter = cli.log.clone().unwrap_or_else(|| default.to_string());
        let (file, terminal_warn_only) = match (&cli.log_file, &cli.cmd) {
            (Some(f), _) if f.as_os_str() == "-" => (None, false),
            (Some(f), _) => (Some(f.clone()), false),
            (None, Cmd::Up(a)) => (Some(a.data.join("benchlake.log")), true),
            (None, _) => (None, false),
        };
        Self {
            filter,
            format: cli.log_format,
            file,
            terminal_warn_only,
        }
    }
}

/// Sets up logging; returns the log file when there is one. A file that cannot
/// be opened is an error (logs are never dropped silently).
fn init_logging(plan: &LogPlan) -> Result<Option<std::path::PathBuf>, String> {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter::LevelFilter};

    type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;
    let env_filter =
        || EnvFilter::try_new(&plan.filter).map_err(|e| format!("--log '{}': {e}", plan.filter));
    let layer = |w: tracing_subscriber::fmt::writer::BoxMakeWriter, ansi: bool| -> Boxed {
        let l = tracing_subscriber::fmt::layer()
            .with_writer(w)
            .with_target(false);
        match plan.format {
            LogFormat::Json => l.json().boxed(),
            LogFormat::Text => l.with_ansi(ansi).boxed(),
        }
    };
    let stderr_ansi = std::io::stderr().is_terminal();
    let mut layers: Vec<Boxed> = Vec::new();
    let mut path = None;
    if let Some(p) = &plan.file {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("log file directory {}: {e}", dir.display()))?;
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| format!("log file {}: {e}", p.display()))?;
        let w = tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::sync::Mutex::new(f));
        layers.push(layer(w, false).with_filter(env_filter()?).boxed());
        path = Some(p.clone());
    }
    if path.is_none() || plan.terminal_warn_only {
        let w = tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr);
        let l = layer(w, stderr_ansi);
        layers.push(if path.is_some() {
            l.with_filter(LevelFilter::WARN).boxed()
        } else {
            l.with_filter(env_filter()?).boxed()
        });
    }
    let _ = tracing_subscriber::registry().with(layers).try_init();
    Ok(path)
}

use benchlake_replay_cli::{error_text, exit_code};

/// `BENCHLAKE_CHECK_ARGS=1 benchlake ARGS…`: parses the command line as the
/// real run would (every subcommand, flag and value parser; pio's own
/// parameters through pio's parser) and exits 0, or 2 with the parse error,
/// without reading a configuration file or doing anything; a parse error
/// ends with a line `check-args: KIND` (clap's error kind, e.g.
/// `UnknownArgument`). The test of every documented command line
/// (tests/e2e/test_docs.py) runs them through it.
fn check_args(cmd: clap::Command) -> std::process::ExitCode {
    let refused = |e: clap::Error| {
        let _ = e.print();
        eprintln!("check-args: {:?}", e.kind());
        std::process::ExitCode::from(2)
    };
    let mut matches = match cmd.try_get_matches_from(std::env::args_os()) {
        Ok(m) => m,
        Err(e) => return refused(e),
    };
    let cli = match Cli::from_arg_matches_mut(&mut matches) {
        Ok(c) => c,
        Err(e) => return refused(e),
    };
    if let Cmd::Pio { args } = &cli.cmd {
        let checked = benchlake_pio::params::parse_cli(args).and_then(|p| {
            if p.contains_key("help") {
                return Ok(());
            }
            benchlake_pio::params::resolve(&p, |_| None).map(|_| ())
        });
        if let Err(e) = checked {
            eprintln!("pio: {e}");
            eprintln!("check-args: pio");
            return std::process::ExitCode::from(2);
        }
    }
    std::process::ExitCode::SUCCESS
}

/// mimalloc instead of glibc malloc: glibc keeps what a thread freed in that
/// thread's arena, so `up` and the coordinator's worker-side ingest grew by
/// tens of MB per large LinkTest run and never gave it back (issue 40;
/// docs/architecture.md, "Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // One command tree for the config file and the parse (clap's derive
    // would build a second one while the first is still alive).
    let cmd = Cli::command();
    if std::env::var_os("BENCHLAKE_CHECK_ARGS").is_some_and(|v| v == "1") {
        return check_args(cmd);
    }
    let argv = match config::apply(&cmd, std::env::args_os().collect()) {
        Ok(a) => a.argv,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut matches = cmd.get_matches_from(argv);
    let cli = Cli::from_arg_matches_mut(&mut matches)
        .unwrap_or_else(|e| e.format(&mut Cli::command()).exit());
    if let Cmd::Pio { args } = cli.cmd {
        // pio is synchronous and may re-run this command line as its ranks.
        return benchlake_pio::main_with_args(args);
    }
    match init_logging(&LogPlan::of(&cli)) {
        Ok(Some(p)) if matches!(cli.cmd, Cmd::Up(_)) => eprintln!("logs: {}", p.display()),
        Ok(_) => {}
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    if let Cmd::NodeCheck(a) = cli.cmd {
        // One small call on a current-thread runtime: Slurm runs it often.
        return nodecheck::main(a);
    }
    if let Cmd::Netprobe(a) = cli.cmd {
        // Blocking sockets and threads; no runtime needed.
        return exit_code(netprobe::netprobe(a));
    }
    // An offline replay runs on this thread, with no runtime (`--out` starts
    // one of its own): the same path as the replay-only `benchlake-replay`,
    // and a small process (issue 16: peak memory under Dimemas's).
    if let Cmd::Replay(replay::ReplayCmd::Dimemas(a)) = cli.cmd {
        return exit_code(benchlake_replay_cli::dimemas(a));
    }
    if let Cmd::Replay(replay::ReplayCmd::Bandela(a)) = cli.cmd {
        return exit_code(benchlake_replay_cli::bandela(a));
    }
    let built = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let rt = match built {
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
            Cmd::Benchmarks(c) => benchmarks::benchmarks_cmd(c).await,
            Cmd::Ack(a) => silence::ack_cmd(a).await,
            Cmd::Maintenance(c) => silence::maintenance_cmd(c).await,
            Cmd::Tables(c) => user::tables_cmd(c).await,
            Cmd::Ingest(a) => user::ingest(a).await,
            // Its own runtime and blocking work: off the async threads.
            Cmd::Probe(user::ProbeCmd::Year(a)) => std::thread::spawn(move || year::run(a))
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("probe year: the replay thread panicked"))),
            Cmd::Probe(user::ProbeCmd::Load(a)) => probe_load::run(a).await,
            Cmd::Probe(c) => user::probe(c),
            Cmd::Replay(c) => replay::replay_cmd(c).await,
            Cmd::Analyze(c) => user::analyze(c).await,
            Cmd::Inspect(a) => user::inspect(a),
            Cmd::Report(c) => user::report(c).await,
            Cmd::Config(ConfigCmd::Show { mut command }) => {
                // The file of this command line, unless the shown one names
                // its own (its global `--config`, not a command's own flag
                // of that name such as `replay dimemas --config FILE.cfg`).
                let mut built = Cli::command();
                built.build();
                let shown: Vec<std::ffi::OsString> = std::iter::once("benchlake".into())
                    .chain(command.iter().map(Into::into))
                    .collect();
                if let Some(f) = &cli.config
                    && config::global_flag(&built, &shown, "config").is_none()
                {
                    command.insert(0, format!("--config={}", f.display()));
                }
                out!("{}", config::show(&Cli::command(), &command)?);
                Ok(())
            }
            Cmd::Completions { shell, bin } => {
                use std::io::Write;
                let mut cmd = if bin == "benchlake-replay" {
                    benchlake_replay_cli::ReplayOnly::command()
                } else {
                    Cli::command()
                };
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut cmd, bin, &mut script);
                if let Err(e) = std::io::stdout().write_all(&script) {
                    // Quietly when `| head` has closed the pipe.
                    benchlake_core::stdout::failed(&e)
                }
                Ok(())
            }
            Cmd::Man { out } => {
                std::fs::create_dir_all(&out)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
                clap_mangen::generate_to(Cli::command(), &out).map_err(|e| {
                    anyhow::anyhow!("writing manual pages to {}: {e}", out.display())
                })?;
                let n = std::fs::read_dir(&out).map(|d| d.count()).unwrap_or(0);
                eprintln!("{n} manual pages in {}", out.display());
                Ok(())
            }
            Cmd::Pio { .. } => Ok(()),
            Cmd::Netprobe(_) => Ok(()),
            Cmd::NodeCheck(_) => Ok(()),
        }
    });
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            match e.downcast_ref::<tonic::Status>() {
                Some(s) => match user::unreachable(s) {
                    Some(m) => eprintln!("error: {m}"),
                    None => eprintln!("error: {:?}: {}", s.code(), s.message()),
                },
                None => eprintln!("error: {}", error_text(&e)),
            }
            std::process::ExitCode::FAILURE
        }
    }
}
