//! `benchlake-replay`: the offline replay alone, for where a replay's memory
//! matters (a login node, a laptop, many small replays at once). The same
//! command as `benchlake replay dimemas|bandela` ([`benchlake_replay_cli`]):
//! the same flags, environment variables, output and errors. It links only
//! the replay, so its process starts in about a third of the memory of the
//! one `benchlake` binary, which also holds the services (docs/replay.md,
//! "The replay-only binary").
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "benchlake-replay",
    version,
    about = "Replay an MPI trace offline: `benchlake replay dimemas|bandela` in a smaller process",
    propagate_version = true
)]
struct Cli {
    /// Log filter: a level, and `target=level` items, comma-separated (e.g.
    /// `warn`, `warn,benchlake_replay=debug`). Default: `warn`.
    #[arg(long, global = true, env = "BENCHLAKE_LOG")]
    log: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Replay a Dimemas .dim trace with the Dimemas model.
    Dimemas(benchlake_replay_cli::DimemasArgs),
    /// Replay a Bandela trace directory (bandela.<rank> files) with the Bandela model.
    Bandela(benchlake_replay_cli::BandelaArgs),
}

fn main() -> std::process::ExitCode {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let cli = Cli::parse();
    // Targets, not the env filter of `benchlake`: the same syntax for levels
    // and targets without the regular-expression engine, whose tables would
    // cost this process a few hundred kilobytes.
    let filter: tracing_subscriber::filter::Targets =
        match cli.log.as_deref().unwrap_or("warn").parse() {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: --log: {e}");
                return std::process::ExitCode::from(2);
            }
        };
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(filter)
        .try_init();
    let res = match cli.cmd {
        Cmd::Dimemas(a) => benchlake_replay_cli::dimemas(a),
        Cmd::Bandela(a) => benchlake_replay_cli::bandela(a),
    };
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", benchlake_replay_cli::error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
