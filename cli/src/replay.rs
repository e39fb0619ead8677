//! `benchlake replay`: replays offline (`dimemas`, `bandela`: the command of
//! `benchlake_replay_cli`, shared with the replay-only `benchlake-replay`) or
//! through the cluster (`submit`: one worker job per sweep point, with a
//! progress bar over the sweep).
use benchlake_core::outln;
use std::path::PathBuf;

use anyhow::{Context, bail};
use benchlake_proto::v1 as pb;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::user::Conn;

#[derive(Debug, Subcommand)]
pub enum ReplayCmd {
    /// Replay a Dimemas .dim trace with the Dimemas model (offline).
    Dimemas(benchlake_replay_cli::DimemasArgs),
    /// Replay a Bandela trace directory (bandela.<rank> files) with the Bandela model (offline).
    Bandela(benchlake_replay_cli::BandelaArgs),
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

pub async fn replay_cmd(c: ReplayCmd) -> anyhow::Result<()> {
    match c {
        // main() runs these before any runtime starts; from a runtime they
        // run on a blocking thread (`--out` starts a runtime of its own).
        ReplayCmd::Dimemas(a) => {
            tokio::task::spawn_blocking(move || benchlake_replay_cli::dimemas(a)).await?
        }
        ReplayCmd::Bandela(a) => {
            tokio::task::spawn_blocking(move || benchlake_replay_cli::bandela(a)).await?
        }
        ReplayCmd::Submit(a) => submit(a).await,
        ReplayCmd::Calibrate(a) => crate::calibrate::calibrate_cmd(a).await,
        ReplayCmd::Validate(a) => crate::calibrate::validate_cmd(a).await,
    }
}

async fn submit(a: SubmitArgs) -> anyhow::Result<()> {
    let mut params: std::collections::HashMap<String, String> =
        benchlake_replay_cli::kv(&a.params)?.into_iter().collect();
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
    outln!("replay run {} with {} point(s)", r.run_id, r.points);
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
    outln!(
        "landed: tables replays, replay_ranks, replay_functions, replay_transfers (run_id = {})",
        r.run_id
    );
    Ok(())
}
