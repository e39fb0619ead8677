//! `benchlake replay calibrate`: the replay models' network parameters fitted
//! from LinkTest or netprobe pair times ([`benchlake_replay::calibrate`]), read
//! from result files or from runs in the lake; prints the fit, and with
//! `--out` writes the model inputs (a Dimemas `.cfg`, a replaympi input, the
//! parameters as JSON) and the `replay_calibrations` table in OUT's lake layout.
use benchlake_core::outln;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, bail};
use benchlake_replay::calibrate;
use benchlake_replay::calibrations::Gathered;
use clap::Args;

/// Model parameters from measured pair times.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// LinkTest or netprobe result files (SION), or ids of runs whose LinkTest
    /// tables are in --lake; measurements at two or more message sizes are needed.
    #[arg(required = true)]
    pub inputs: Vec<String>,
    /// Only pairs whose two ranks ran on these nodes (comma-separated host or
    /// Slurm node names as the files record them).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Nodes of the platform in the written model inputs (default: the nodes measured).
    #[arg(long)]
    pub platform_nodes: Option<u32>,
    /// Ranks per node in the written model inputs.
    #[arg(long, default_value_t = 1)]
    pub tasks_per_node: u32,
    /// Cores per node: when --tasks-per-node exceeds it, the CPU ratio of the
    /// Dimemas input becomes cores / tasks (ranks share cores).
    #[arg(long)]
    pub cores: Option<u32>,
    /// Write calibration.cfg, calibration.bandela, calibration.json and the
    /// `replay_calibrations` table (lake layout) into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub lake: crate::opts::LakeArgs,
}

/// Reads the LinkTest results named by `a.inputs` one at a time (a 4,096-rank
/// run holds 200 MB of times) into their pair times.
async fn gather(a: &CalibrateArgs, only: &BTreeSet<String>) -> anyhow::Result<Gathered> {
    use benchlake_analysis::linktest_lake;
    let mut g = Gathered::default();
    for t in &a.inputs {
        let path = PathBuf::from(t);
        if path.exists() {
            let p2 = path.clone();
            let run =
                tokio::task::spawn_blocking(move || benchlake_formats::linktest::read_file(&p2))
                    .await??;
            g.add_run(path.display().to_string(), &run, only);
            continue;
        }
        benchlake_core::ids::validate_id("run_id", t)
            .with_context(|| format!("'{t}' is neither a file nor a run id"))?;
        if a.lake.lake.is_none() {
            bail!("a run id needs the lake: give --lake DIR|s3://bucket (or BENCHLAKE_LAKE)");
        }
        let lake = benchlake_core::lake::Lake::open(&a.lake.store(""))?;
        let runs = linktest_lake::read_run_table(&lake, "linktest_runs", t).await?;
        let mut sources: BTreeSet<String> = BTreeSet::new();
        for b in &runs {
            sources.extend(calibrate::sources(b).context("linktest_runs")?);
        }
        if sources.is_empty() {
            bail!("run {t} has no LinkTest or netprobe results in the lake");
        }
        for s in sources {
            let (run, _) = linktest_lake::load_run(&lake, t, Some(&s)).await?;
            g.add_run(format!("{t}:{s}"), &run, only);
        }
    }
    for w in &g.skipped {
        eprintln!("warning: skipped {w}");
    }
    if g.used == 0 {
        bail!("no ping-pong results among the inputs");
    }
    if g.samples.is_empty() {
        if only.is_empty() {
            bail!("the inputs hold no measured pair");
        }
        bail!(
            "no measured pair between the nodes {}",
            only.iter().cloned().collect::<Vec<_>>().join(",")
        );
    }
    Ok(g)
}

pub async fn calibrate_cmd(a: CalibrateArgs) -> anyhow::Result<()> {
    let only: BTreeSet<String> = a.nodes.iter().map(|s| s.trim().to_string()).collect();
    for n in &only {
        if n.is_empty() || n.len() > 255 || n.chars().any(|c| c.is_control()) {
            bail!("--nodes: '{n}' is not a node name");
        }
    }
    let Gathered {
        samples,
        nodes,
        inputs,
        ..
    } = gather(&a, &only).await?;
    let cal = calibrate::fit(samples)?;
    let measured: BTreeSet<&String> = nodes.values().flatten().collect();
    let platform_nodes = a
        .platform_nodes
        .unwrap_or_else(|| u32::try_from(measured.len()).unwrap_or(u32::MAX))
        .max(1);
    let cpu_ratio = match a.cores {
        Some(c) if c > 0 && a.tasks_per_node > c => f64::from(c) / f64::from(a.tasks_per_node),
        _ => 1.0,
    };
    let mut params = cal.params();
    if cpu_ratio != 1.0 {
        params.insert("cpu_ratio".into(), cpu_ratio.to_string());
    }
    let source = inputs.join(" ");
    // The quality gate of the lake's calibrations (docs/replay.md): said
    // here, and recorded in the written table's `rejected` column.
    let rejected = benchlake_replay::calibrations::gate(&cal.fits().cloned().collect::<Vec<_>>());
    let doc = serde_json::json!({
        "params": params,
        "fits": cal.fits().collect::<Vec<_>>(),
        "nodes": measured,
        "inputs": inputs,
        "rejected": rejected,
    });
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        outln!(
            "{:<6} {:>12} {:>14} {:>12} {:>8} {:>9} {:>9} {:>6}  nodes",
            "class",
            "latency µs",
            "bandwidth MB/s",
            "eager limit",
            "r2",
            "max err",
            "samples",
            "sizes"
        );
        for f in cal.fits() {
            outln!(
                "{:<6} {:>12.3} {:>14.1} {:>12} {:>8.4} {:>8.1}% {:>9} {:>6}  {}",
                f.class.as_str(),
                f.latency_s * 1e6,
                f.bandwidth_mb_s,
                f.eager_limit.map_or("-".into(), |e| e.to_string()),
                f.r2,
                f.max_rel_error * 100.0,
                f.samples,
                f.medians.len(),
                nodes.get(&f.class).map(short_list).unwrap_or_default()
            );
        }
        outln!("replay parameters: {}", kv_line(&params));
        match &rejected {
            Some(r) => {
                outln!("quality: rejected ({r}): the lake would never use this fit by default")
            }
            None => outln!(
                "quality: accepted (r² ≥ {}, ≥ {} sizes)",
                benchlake_replay::calibrations::MIN_R2,
                benchlake_replay::calibrations::MIN_SIZES
            ),
        }
    }
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
        let files = [
            (
                "calibration.cfg",
                calibrate::dimemas_cfg(&cal, platform_nodes, a.tasks_per_node, cpu_ratio),
            ),
            (
                "calibration.bandela",
                calibrate::bandela_input(&cal, platform_nodes, a.tasks_per_node),
            ),
            (
                "calibration.json",
                serde_json::to_string_pretty(&doc)? + "\n",
            ),
        ];
        for (name, text) in files {
            let p = out.join(name);
            std::fs::write(&p, text).with_context(|| p.display().to_string())?;
            eprintln!("wrote {}", p.display());
        }
        let run_id = benchlake_core::ids::new_id();
        let batch = calibrate::table(&cal, &run_id, &source, &nodes, rejected.as_deref())?;
        let lake = benchlake_core::lake::Lake::local(out)?;
        let date = chrono::Utc::now().format("%Y-%m-%d").to_string();
        let t = benchlake_core::lake::TableOutput::new("replay_calibrations", vec![batch]);
        for k in lake.write_final(&[t], &date, &run_id, &run_id).await? {
            eprintln!("wrote {}", out.join(k).display());
        }
    }
    Ok(())
}

/// The node names, or for many their count and first and last.
fn short_list(s: &BTreeSet<String>) -> String {
    match (s.len(), s.first(), s.last()) {
        (n, Some(a), Some(z)) if n > 6 => format!("{n} nodes: {a} … {z}"),
        _ => s.iter().cloned().collect::<Vec<_>>().join(","),
    }
}

/// `k=v k=v`, as `-p` takes them.
fn kv_line(p: &BTreeMap<String, String>) -> String {
    p.iter()
        .map(|(k, v)| format!("-p {k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How well replays predicted traced runs.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Traced runs to judge (default: every run with `trace_comparison` rows in the lake).
    pub runs: Vec<String>,
    /// A prediction within this many percent of the measured time counts as good.
    #[arg(long, default_value_t = 15.0)]
    pub within: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub lake: crate::opts::LakeArgs,
}

/// One traced run's whole-run figures.
#[derive(Debug, serde::Serialize)]
struct Judged {
    run_id: String,
    benchmark: String,
    model: String,
    /// The calibration the replay used (its id), or "-" for none.
    calibration: String,
    ranks: usize,
    measured_s: f64,
    predicted_s: f64,
    error_pct: f64,
}

pub async fn validate_cmd(a: ValidateArgs) -> anyhow::Result<()> {
    use benchlake_core::lake::{Lake, RunRows};
    if a.lake.lake.is_none() {
        bail!("give the lake: --lake DIR|s3://bucket (or BENCHLAKE_LAKE)");
    }
    if !(a.within.is_finite() && a.within > 0.0) {
        bail!("--within {}: give a positive percentage", a.within);
    }
    let lake = Lake::open(&a.lake.store(""))?;
    let mut runs: BTreeSet<String> = BTreeSet::new();
    if a.runs.is_empty() {
        for f in lake.table_files("trace_comparison", None).await? {
            runs.extend(f.runs.into_iter().map(|(r, _)| r));
        }
        if runs.is_empty() {
            bail!("the lake holds no trace_comparison rows (no traced run has been replayed)");
        }
    } else {
        for r in &a.runs {
            benchlake_core::ids::validate_id("run_id", r)
                .with_context(|| format!("'{r}' is not a run id (a ULID)"))?;
            runs.insert(r.clone());
        }
    }
    let mut judged = Vec::new();
    for run in &runs {
        let rows = lake
            .read_run_rows(RunRows::new("trace_comparison", run))
            .await?;
        let ws = calibrate::whole_runs(&rows).with_context(|| format!("run {run}"))?;
        let runs_rows = lake.read_run_rows(RunRows::new("runs", run)).await?;
        let replays = lake.read_run_rows(RunRows::new("replays", run)).await?;
        let used = calibrate::calibrations_used(&replays);
        for w in ws {
            judged.push(Judged {
                run_id: run.clone(),
                benchmark: calibrate::first_string(&runs_rows, "benchmark").unwrap_or_default(),
                calibration: used.get(&w.model).cloned().unwrap_or_default(),
                model: w.model,
                ranks: w.ranks,
                measured_s: w.measured_s,
                predicted_s: w.predicted_s,
                error_pct: (w.predicted_s - w.measured_s) / w.measured_s * 100.0,
            });
        }
    }
    let mut abs: Vec<f64> = judged.iter().map(|j| j.error_pct.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let median = if abs.is_empty() {
        0.0
    } else if abs.len() % 2 == 1 {
        abs[abs.len() / 2]
    } else {
        (abs[abs.len() / 2 - 1] + abs[abs.len() / 2]) / 2.0
    };
    let good = abs.iter().filter(|e| **e <= a.within).count();
    let worst = abs.last().copied().unwrap_or(0.0);
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "runs": judged,
                "median_abs_error_pct": median,
                "worst_abs_error_pct": worst,
                "within_pct": a.within,
                "within": good,
            }))?
        );
        return Ok(());
    }
    outln!(
        "{:<26} {:<12} {:<8} {:<26} {:>5} {:>12} {:>12} {:>8}",
        "run",
        "benchmark",
        "model",
        "calibration",
        "ranks",
        "measured s",
        "predicted s",
        "error"
    );
    for j in &judged {
        outln!(
            "{:<26} {:<12} {:<8} {:<26} {:>5} {:>12.6} {:>12.6} {:>7.1}%",
            j.run_id,
            j.benchmark,
            j.model,
            j.calibration,
            j.ranks,
            j.measured_s,
            j.predicted_s,
            j.error_pct
        );
    }
    outln!(
        "{} run(s): median |error| {median:.1} %, worst {worst:.1} %, {good} within {} %",
        judged.len(),
        a.within
    );
    Ok(())
}
