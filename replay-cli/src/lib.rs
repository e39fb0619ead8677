//! The offline replay command: its flags, running a model over a local trace,
//! printing the prediction and, with `--out`, writing the replay tables. One
//! home for both binaries that offer it: `benchlake replay dimemas|bandela`
//! and the replay-only `benchlake-replay` (docs/replay.md, "The replay-only
//! binary"), so they take the same flags and print the same bytes. The
//! replay-only binary's whole command line is here too ([`ReplayOnly`]).
#![warn(clippy::print_stdout)]
use benchlake_core::out;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

/// `replay dimemas`: a Dimemas `.dim` trace with the Dimemas model.
#[derive(Debug, Args)]
pub struct DimemasArgs {
    /// The .dim trace.
    pub trace: PathBuf,
    /// A Dimemas .cfg configuration (applied before -p overrides).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A collectives definition file.
    #[arg(long)]
    pub collectives: Option<PathBuf>,
    /// A calibration (`replay calibrate --out DIR`: the directory or its
    /// calibration.json): its fitted parameters replace --config's, -p replaces them.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    #[command(flatten)]
    pub common: Offline,
}

/// `replay bandela`: a Bandela trace directory with the Bandela model.
#[derive(Debug, Args)]
pub struct BandelaArgs {
    /// Directory of the per-rank trace files.
    pub trace: PathBuf,
    /// The replaympi input file.
    #[arg(long)]
    pub input: PathBuf,
    #[command(flatten)]
    pub common: Offline,
}

/// What both offline commands take.
#[derive(Debug, Args)]
pub struct Offline {
    /// Model parameters, KEY=VALUE (repeatable; see docs/replay.md).
    #[arg(short = 'p', long = "param")]
    pub params: Vec<String>,
    /// Write the replay tables to this lake directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Threads of the replay (default: the cores available). With 2 or more
    /// a second thread reads and parses the trace while the model
    /// simulates (both models); the predictions are the same whatever the
    /// number.
    #[arg(long, env = benchlake_replay::models::THREADS_ENV, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,
}

/// The command line of `benchlake-replay` (`cli/src/bin/`), here so that
/// `benchlake man` and `benchlake completions` describe it too.
#[derive(Debug, clap::Parser)]
#[command(
    name = "benchlake-replay",
    version,
    about = "Replay an MPI trace offline: `benchlake replay dimemas|bandela` in a smaller process",
    propagate_version = true
)]
pub struct ReplayOnly {
    /// Log filter: a level, and `target=level` items, comma-separated (e.g.
    /// `warn`, `warn,benchlake_replay=debug`). Default: `warn`.
    #[arg(long, global = true, env = "BENCHLAKE_LOG")]
    log: Option<String>,
    #[command(subcommand)]
    cmd: ReplayOnlyCmd,
}

#[derive(Debug, clap::Subcommand)]
enum ReplayOnlyCmd {
    /// Replay a Dimemas .dim trace with the Dimemas model.
    Dimemas(DimemasArgs),
    /// Replay a Bandela trace directory (bandela.<rank> files) with the Bandela model.
    Bandela(BandelaArgs),
}

/// `benchlake-replay`'s `main`: parses its command line, logs to standard
/// error, runs the replay; the exit status (2 for a usage error, 1 for a
/// failed replay, with its error printed).
pub fn replay_only_main() -> std::process::ExitCode {
    use clap::Parser;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let cli = ReplayOnly::parse();
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
    exit_code(match cli.cmd {
        ReplayOnlyCmd::Dimemas(a) => dimemas(a),
        ReplayOnlyCmd::Bandela(a) => bandela(a),
    })
}

/// A command's exit status: success, or its error printed (`error: …`, one
/// line, [`error_text`]) and failure. Both binaries end their commands so.
pub fn exit_code(r: anyhow::Result<()>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Replays a `.dim` trace with the Dimemas model and prints the prediction.
pub fn dimemas(a: DimemasArgs) -> anyhow::Result<()> {
    let mut params = match &a.calibration {
        Some(c) => load_params(c)?,
        None => BTreeMap::new(),
    };
    params.extend(kv(&a.common.params)?);
    offline(
        &benchlake_replay::models::DIMEMAS,
        a.trace,
        params,
        vec![("config", a.config), ("collectives", a.collectives)],
        a.common,
    )
}

/// Replays a Bandela trace directory with the Bandela model and prints the
/// prediction.
pub fn bandela(a: BandelaArgs) -> anyhow::Result<()> {
    let params = kv(&a.common.params)?;
    offline(
        &benchlake_replay::models::BANDELA,
        a.trace,
        params,
        vec![("input", Some(a.input))],
        a.common,
    )
}

/// `KEY=VALUE` items (`-p`) as a map; an item without `=` is an error.
pub fn kv(items: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|i| {
            i.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .with_context(|| format!("parameter '{i}' is not KEY=VALUE"))
        })
        .collect()
}

/// Prints the prediction; a failed write ends the process
/// ([`benchlake_core::stdout::failed`]: quietly when the reader has gone).
fn print_result(r: &benchlake_replay::ReplayResult, wall: f64, json: bool) {
    if let Err(e) = write_result(r, wall, json) {
        benchlake_core::stdout::failed(&e)
    }
}

fn write_result(r: &benchlake_replay::ReplayResult, wall: f64, json: bool) -> std::io::Result<()> {
    use std::io::Write;
    // One locked, buffered writer: a 1,024-rank table is one write.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, r)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    writeln!(
        out,
        "model {}: predicted execution time {:.9} s ({} records replayed in {:.3} s)",
        r.model, r.predicted_time_s, r.records, wall
    )?;
    writeln!(
        out,
        "{:>5} {:>14} {:>14} {:>14} {:>12} {:>12} {:>12} {:>12}",
        "rank",
        "total_s",
        "computation_s",
        "communication",
        "wait_s",
        "latency_s",
        "small_s",
        "big_s"
    )?;
    for k in &r.ranks {
        writeln!(
            out,
            "{:>5} {:>14.9} {:>14.9} {:>14.9} {:>12.9} {:>12.9} {:>12.9} {:>12.9}",
            k.rank,
            k.total_s,
            k.computation_s,
            k.communication_s(),
            k.comm.wait,
            k.comm.latency,
            k.comm.small,
            k.comm.big
        )?;
    }
    out.flush()?;
    Ok(())
}

fn offline(
    model: &'static benchlake_replay::models::Model,
    trace: PathBuf,
    mut params: BTreeMap<String, String>,
    files: Vec<(&str, Option<PathBuf>)>,
    o: Offline,
) -> anyhow::Result<()> {
    for (name, path) in files {
        if let Some(p) = path {
            params.insert(name.to_string(), p.display().to_string());
        }
    }
    let threads = o
        .threads
        .map_or_else(benchlake_replay::models::default_threads, |n| n as usize);
    let started = std::time::Instant::now();
    // On the caller's thread, outside any async runtime: nothing else is
    // served, so no thread is started beyond the replay's own.
    let r = model.replay_threads(&trace, &params, threads)?;
    let wall = started.elapsed().as_secs_f64();
    if let Some(summary) = model.summary_text
        && !o.json
    {
        // The model's own tool's layout (replaympi users read it); the
        // generic table follows for every model.
        out!("{}", summary(&r));
    }
    print_result(&r, wall, o.json);
    if let Some(out) = o.out {
        // replaympi's side outputs, beside the tables.
        let dir = out.join("replay-outputs");
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        use benchlake_replay::bandela as b;
        for (name, text) in [
            ("summary.txt", b::summary_text(&r)),
            ("column_data.csv", b::column_data_csv(&r)),
            ("transfers.txt", b::transfer_matrix_text(&r)),
            ("timeline.json", b::chrome_trace_json(&r)),
            ("timeline.prv", b::paraver_prv(&r)),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, text).with_context(|| p.display().to_string())?;
            eprintln!("wrote {}", p.display());
        }
        let run_id = benchlake_core::ids::new_id();
        let replay_id = benchlake_core::ids::new_id();
        let point = BTreeMap::new();
        let source = trace.display().to_string();
        let meta = benchlake_replay::ReplayMeta {
            run_id: &run_id,
            replay_id: &replay_id,
            trace_source: &source,
            point: &point,
            engine_wall_s: wall,
        };
        let tables = benchlake_replay::replay_tables(&r, &meta)?;
        let lake = benchlake_core::lake::Lake::local(&out)?;
        let date = chrono::Utc::now().format("%Y-%m-%d").to_string();
        // The lake's writer is async; a runtime of one thread, started
        // only when there are tables to write.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the runtime that writes the tables")?;
        let keys = rt.block_on(lake.write_final(&tables, &date, &run_id, &replay_id))?;
        for k in keys {
            eprintln!("wrote {}", out.join(k).display());
        }
    }
    Ok(())
}

/// The replay parameters of a calibration written by `--out`
/// (`calibration.json`, or the directory holding it).
pub fn load_params(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let file = if path.is_dir() {
        path.join("calibration.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a calibration (JSON)", file.display()))?;
    let p = v
        .get("params")
        .and_then(|p| p.as_object())
        .with_context(|| format!("{}: no \"params\" object", file.display()))?;
    let mut out = BTreeMap::new();
    for (k, v) in p {
        if !benchlake_replay::dimemas::PARAM_NAMES.contains(&k.as_str()) {
            bail!("{}: params.{k} is not a replay parameter", file.display());
        }
        let s = v
            .as_str()
            .with_context(|| format!("{}: params.{k} is not a string", file.display()))?;
        out.insert(k.clone(), s.to_string());
    }
    Ok(out)
}

/// An error and its causes on one line (`a: b: c`), leaving out a cause
/// whose text the one before already holds: many errors put their source in
/// their own message (`FILE: No such file or directory`), and anyhow's `{:#}`
/// would print it twice.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if last.is_empty() || !last.contains(&s) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&s);
        }
        last = s;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[derive(Debug, thiserror::Error)]
    #[error("{file}: {source}")]
    struct WithSource {
        file: String,
        #[source]
        source: std::io::Error,
    }

    /// A cause already in its error's message is printed once; causes that
    /// are not are all printed, outermost first.
    #[test]
    fn an_error_chain_prints_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(2);
        let e = anyhow::Error::new(WithSource {
            file: "a/b.txt".into(),
            source: io,
        });
        let text = error_text(&e);
        assert_eq!(
            text.matches("No such file or directory").count(),
            1,
            "{text}"
        );
        assert!(text.starts_with("a/b.txt: No such file"), "{text}");
        let e = e.context("replaying rank 3");
        assert_eq!(
            error_text(&e),
            format!("replaying rank 3: {text}"),
            "a context is kept"
        );
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&e), "outer: inner");
    }
}
