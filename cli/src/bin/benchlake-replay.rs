//! `benchlake-replay`: the offline replay alone, for where a replay's memory
//! matters (a login node, a laptop, many small replays at once). The same
//! command as `benchlake replay dimemas|bandela` ([`benchlake_replay_cli`]):
//! the same flags, environment variables, output and errors. It links only
//! the replay, so its process starts in about a third of the memory of the
//! one `benchlake` binary, which also holds the services (docs/replay.md,
//! "The replay-only binary").
fn main() -> std::process::ExitCode {
    benchlake_replay_cli::replay_only_main()
}
