//! `benchlake replay`: replays offline (prints the model's summary, `--out`
//! writes the tables) or through the cluster (`submit`: one worker job per sweep
//! point, with a progress bar over the sweep).
use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use benchlake_proto::v1 as pb;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::user::Conn;

#[derive(Debug, Subcommand)]
pub enum ReplayCmd {
    /// Replay a Dimemas .dim trace with the Dimemas model (offline).
    Dimemas {
        /// The .dim trace.
        trace: PathBuf,
        /// A Dimemas .cfg configuration (applied before -p overrides).
        #[arg(long)]
        config: Option<PathBuf>,
        /// A collectives definition file.
        #[arg(long)]
        collectives: Option<PathBuf>,
        /// A calibration (`replay calibrate --out DIR`: the directory or its
        /// calibration.json): its fitted parameters replace --config's, -p replaces them.
        #[arg(long)]
        calibration: Option<PathBuf>,
        #[command(flatten)]
        common: Offline,
    },
    /// Replay a Bandela trace directory (bandela.<rank> files) with the Bandela model (offline).
    Bandela {
        /// Directory of the per-rank trace files.
        trace: PathBuf,
        /// The replaympi input file.
        #[arg(long)]
        input: PathBuf,
        #[command(flatten)]
        common: Offline,
    },
    /// Replay through the cluster: one worker job per sweep point.
    Submit(SubmitArgs),
    /// Fit the models' latency and bandwidth (intra- and inter-node) to
    /// LinkTest or netprobe pair times at several message sizes (offline).
    Calibrate(crate::calibrate::CalibrateArgs),
    /// Whole-run predicted against measured time of traced runs
    /// (`trace_comparison`), with the median and worst error.
    Validate(crate::calibrate::ValidateArgs),
}

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

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// dimemas or bandela.
    #[arg(long, default_value = benchlake_replay::models::DIMEMAS.name)]
    pub model: String,
    /// A local trace file to upload.
    #[arg(long, conflicts_with = "raw_key")]
    pub trace: Option<PathBuf>,
    /// A trace already in the lake (raw/...).
    #[arg(long)]
    pub raw_key: Option<String>,
    /// A Dimemas .cfg (sent as text).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A collectives definition file (sent as text).
    #[arg(long)]
    pub collectives: Option<PathBuf>,
    /// The replaympi input (Bandela; sent as text).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Base parameters, KEY=VALUE.
    #[arg(short = 'p', long = "param")]
    pub params: Vec<String>,
    /// A sweep axis, PARAM=V1,V2,... (repeatable; the grid is their product).
    #[arg(long)]
    pub sweep: Vec<String>,
    /// A calibration from the lake: `latest` (the newest whose nodes cover
    /// the nodes of the trace's run) or a calibration id (the LinkTest or
    /// netprobe run it was fitted after). Its parameters apply under -p.
    #[arg(long, env = "BENCHLAKE_REPLAY_CALIBRATION")]
    pub calibration: Option<String>,
    /// Follow the sweep until it has landed.
    #[arg(long)]
    pub watch: bool,
}

fn kv(items: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|i| {
            i.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .with_context(|| format!("parameter '{i}' is not KEY=VALUE"))
        })
        .collect()
}

fn print_result(r: &benchlake_replay::ReplayResult, wall: f64, json: bool) -> anyhow::Result<()> {
    use std::io::Write;
    // One locked, buffered writer: a 1,024-rank table is one write, and a
    // closed pipe (`| head`) is an error, not a panic.
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

async fn offline(
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
    // On this thread: an offline replay runs on a current-thread runtime
    // (main.rs) with nothing else to serve, so no extra thread is started.
    let r = model.replay_threads(&trace, &params, threads)?;
    let wall = started.elapsed().as_secs_f64();
    if let Some(summary) = model.summary_text
        && !o.json
    {
        // The model's own tool's layout (replaympi users read it); the
        // generic table follows for every model.
        print!("{}", summary(&r));
    }
    print_result(&r, wall, o.json)?;
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
        for k in lake
            .write_final(&tables, &date, &run_id, &replay_id)
            .await?
        {
            eprintln!("wrote {}", out.join(k).display());
        }
    }
    Ok(())
}

pub async fn replay_cmd(c: ReplayCmd) -> anyhow::Result<()> {
    match c {
        ReplayCmd::Dimemas {
            trace,
            config,
            collectives,
            calibration,
            common,
        } => {
            let mut params = match &calibration {
                Some(c) => crate::calibrate::load_params(c)?,
                None => BTreeMap::new(),
            };
            params.extend(kv(&common.params)?);
            offline(
                &benchlake_replay::models::DIMEMAS,
                trace,
                params,
                vec![("config", config), ("collectives", collectives)],
                common,
            )
            .await
        }
        ReplayCmd::Bandela {
            trace,
            input,
            common,
        } => {
            let params = kv(&common.params)?;
            offline(
                &benchlake_replay::models::BANDELA,
                trace,
                params,
                vec![("input", Some(input))],
                common,
            )
            .await
        }
        ReplayCmd::Submit(a) => submit(a).await,
        ReplayCmd::Calibrate(a) => crate::calibrate::calibrate_cmd(a).await,
        ReplayCmd::Validate(a) => crate::calibrate::validate_cmd(a).await,
    }
}

async fn submit(a: SubmitArgs) -> anyhow::Result<()> {
    let mut params: std::collections::HashMap<String, String> =
        kv(&a.params)?.into_iter().collect();
    for (name, path) in [
        ("config", &a.config),
        ("collectives", &a.collectives),
        ("input", &a.input),
    ] {
        if let Some(p) = path {
            params.insert(
                name.into(),
                std::fs::read_to_string(p).with_context(|| p.display().to_string())?,
            );
        }
    }
    let trace = match (&a.trace, &a.raw_key) {
        (Some(p), _) => pb::trace_ref::Source::Uploaded(pb::UploadedTrace {
            file_name: p
                .file_name()
                .and_then(|n| n.to_str())
                .context("the trace path has no file name")?
                .to_string(),
            data: std::fs::read(p).with_context(|| p.display().to_string())?,
        }),
        (None, Some(k)) => pb::trace_ref::Source::RawKey(k.clone()),
        (None, None) => bail!("give --trace FILE or --raw-key KEY"),
    };
    let mut sweep = Vec::new();
    for s in &a.sweep {
        let (k, v) = s
            .split_once('=')
            .with_context(|| format!("--sweep '{s}' is not PARAM=V1,V2"))?;
        sweep.push(pb::SweepAxis {
            param: k.trim().to_string(),
            values: v
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect(),
        });
    }
    let (ch, auth) = (
        benchlake_proto::client::channel_with(&a.conn.coordinator, &a.conn.tls.load()?)
            .map_err(anyhow::Error::msg)?,
        benchlake_proto::client::Auth::new(a.conn.token.as_deref()).map_err(anyhow::Error::msg)?,
    );
    let mut rc = pb::replay_service_client::ReplayServiceClient::with_interceptor(ch, auth)
        .max_encoding_message_size(64 << 20);
    let r = rc
        .trigger_replay(pb::TriggerReplayRequest {
            trace: Some(pb::TraceRef {
                source: Some(trace),
            }),
            model: a.model.clone(),
            params,
            sweep,
            calibration: a.calibration.clone().unwrap_or_default(),
        })
        .await?
        .into_inner();
    println!("replay run {} with {} point(s)", r.run_id, r.points);
    if !a.watch {
        return Ok(());
    }
    let bar = ProgressBar::new(r.points as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} points  {elapsed}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut stream = a
        .conn
        .runs()?
        .watch_run(pb::WatchRunRequest {
            run_id: r.run_id.clone(),
        })
        .await?
        .into_inner();
    let mut last = None;
    while let Some(ev) = stream.message().await? {
        let done = ev
            .jobs
            .iter()
            .filter(|j| {
                j.kind == "replay"
                    && matches!(
                        pb::JobState::try_from(j.state),
                        Ok(pb::JobState::Done | pb::JobState::Failed | pb::JobState::Cancelled)
                    )
            })
            .count();
        bar.set_position(done as u64);
        if let Some(run) = &ev.run {
            bar.set_message(
                pb::RunState::try_from(run.state)
                    .map(|s| s.as_str_name().trim_start_matches("RUN_STATE_").to_string())
                    .unwrap_or_default(),
            );
        }
        last = Some(ev);
    }
    bar.finish();
    let Some(ev) = last else {
        bail!("the watch stream ended without an event")
    };
    let state = ev.run.as_ref().map(|r| r.state).unwrap_or_default();
    if state != pb::RunState::Succeeded as i32 {
        bail!(
            "replay run {} ended {}: {}",
            r.run_id,
            state,
            ev.run.map(|r| r.error).unwrap_or_default()
        );
    }
    println!(
        "landed: tables replays, replay_ranks, replay_functions, replay_transfers (run_id = {})",
        r.run_id
    );
    Ok(())
}
