//! `benchlake probe year`: a labelled synthetic history replayed through the
//! real ingest and check path, scored against what was injected
//! (docs/verdicts.md, "A year to prove it").
pub mod replay;
pub mod scenario;
pub mod score;
pub mod synth;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;

use benchlake_core::outln;

#[derive(Debug, Args)]
pub struct YearArgs {
    /// The scenario file (TOML; docs/verdicts.md, "Scenario files").
    #[arg(long, env = "BENCHLAKE_YEAR_SCENARIO")]
    pub scenario: PathBuf,
    /// A new or empty directory: the lake of the history (`lake/`), the
    /// labels (`labels.json`) and the score (`score.json`).
    #[arg(long)]
    pub out: PathBuf,
    /// Print the score as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print a line per this many nights (0: none).
    #[arg(long, default_value_t = 30)]
    pub progress: usize,
    /// Runs of a night replayed at once, like a worker's job slots (the
    /// nights stay in order). Default: the machine's cores.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub jobs: Option<u16>,
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

/// A replayed scenario: its score and what it took.
pub struct Outcome {
    pub name: String,
    pub score: score::Score,
    pub timings: replay::Timings,
    pub seconds: f64,
    pub busy_spells: usize,
    pub labels: PathBuf,
    pub score_file: PathBuf,
    pub lake: PathBuf,
}

/// Replays the scenario `text` (read from `file`) into the new or empty
/// directory `out`, writing `labels.json` and `score.json` there; a line
/// per `progress` nights on standard error (0: none).
pub fn replay_to(
    file: &str,
    text: &str,
    out: &Path,
    progress: usize,
    jobs: usize,
) -> anyhow::Result<Outcome> {
    let (scenario, nodes) = scenario::Scenario::parse(file, text)?;
    if out.exists()
        && std::fs::read_dir(out)
            .with_context(|| format!("{}", out.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{}: not empty; give a new or empty directory (a history replayed into an old one would mix with it)",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let name = if scenario.name.is_empty() {
        file.to_string()
    } else {
        scenario.name.clone()
    };
    let world = synth::World::new(scenario, nodes);
    let labels = score::labels(&world);
    let labels_path = out.join("labels.json");
    std::fs::write(&labels_path, serde_json::to_vec_pretty(&labels)?)
        .with_context(|| format!("writing {}", labels_path.display()))?;
    let started = Instant::now();
    let mut r = replay::Replay::new(world, &out.join("lake"))?;
    r.jobs = jobs.max(1);
    let nights = r.world.s.nights;
    r.run(|night, t| {
        if progress > 0 && ((night + 1) % progress == 0 || night + 1 == nights) {
            eprintln!(
                "night {}/{nights}: {:.0} s (generate {:.0}, ingest {:.0}, checks {:.0}, record {:.0})",
                night + 1,
                started.elapsed().as_secs_f64(),
                t.generate_s,
                t.ingest_s,
                t.checks_s,
                t.record_s
            );
        }
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let s = score::score(&r.world, &r.verdicts, &r.statuses, r.node_nights);
    let doc = serde_json::json!({
        "scenario": name,
        "seconds": seconds,
        "timings": r.timings,
        "score": s,
    });
    let score_path = out.join("score.json");
    std::fs::write(&score_path, serde_json::to_vec_pretty(&doc)?)
        .with_context(|| format!("writing {}", score_path.display()))?;
    Ok(Outcome {
        name,
        score: s,
        timings: r.timings.clone(),
        seconds,
        busy_spells: r
            .world
            .faults
            .iter()
            .filter(|f| f.kind == scenario::Kind::Busy)
            .count(),
        labels: labels_path,
        score_file: score_path,
        lake: out.join("lake"),
    })
}

pub fn run(a: YearArgs) -> anyhow::Result<()> {
    let file = a.scenario.display().to_string();
    let text = std::fs::read_to_string(&a.scenario).with_context(|| format!("reading {file}"))?;
    let jobs = a.jobs.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let o = replay_to(&file, &text, &a.out, a.progress, jobs)?;
    if a.json {
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&o.score_file)?)?;
        outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    print(&o);
    Ok(())
}

/// One line of figures (the demo's).
pub fn summary(o: &Outcome) -> String {
    let s = &o.score;
    format!(
        "{}: {} nodes × {} nights, {} faults: recall {:.3}, attribution {:.3}, median delay {} nights, {:.3} false alarms per 1,000 node-nights ({:.1} s)",
        o.name,
        s.nodes,
        s.nights,
        s.faults,
        s.recall,
        s.attribution,
        fmt_opt(s.median_delay_nights),
        s.false_alarms_per_1000_node_nights,
        o.seconds
    )
}

/// The report of a replayed scenario.
pub fn print(o: &Outcome) {
    let (s, name, elapsed) = (&o.score, &o.name, o.seconds);
    let busy = o.busy_spells;
    outln!(
        "{name}: {} nodes × {} nights ({} node-nights), {} faults, {busy} busy spells",
        s.nodes,
        s.nights,
        s.node_nights,
        s.faults
    );
    let t = &o.timings;
    outln!(
        "replayed through ingest, checks and record in {elapsed:.1} s (generate {:.1}, ingest {:.1}, checks {:.1}, record {:.1})",
        t.generate_s,
        t.ingest_s,
        t.checks_s,
        t.record_s
    );
    let flagged = s.fault_scores.iter().filter(|f| f.flagged).count();
    let attributed = s.fault_scores.iter().filter(|f| f.attributed).count();
    outln!("{:<34} {:>8}  measured", "", "target");
    outln!(
        "{:<34} {:>8}  {:.3} ({flagged} of {})",
        "recall (faults flagged)",
        "≥ 0.98",
        s.recall,
        s.faults
    );
    outln!(
        "{:<34} {:>8}  {:.3} ({attributed} of {flagged})",
        "attribution (right target)",
        "≥ 0.95",
        s.attribution
    );
    outln!(
        "{:<34} {:>8}  {} (90th percentile {})",
        "median delay (nights)",
        "≤ 1",
        fmt_opt(s.median_delay_nights),
        fmt_opt(s.p90_delay_nights)
    );
    outln!(
        "{:<34} {:>8}  {:.3} ({} alarms; {} more named another target during a fault)",
        "false alarms per 1,000 node-nights",
        "≤ 1",
        s.false_alarms_per_1000_node_nights,
        s.false_alarms,
        s.misattributed_alarms
    );
    outln!(
        "{:<12} {:>6} {:>8} {:>10} {:>13}",
        "kind",
        "faults",
        "flagged",
        "attributed",
        "median delay"
    );
    for (k, v) in &s.per_kind {
        outln!(
            "{k:<12} {:>6} {:>8} {:>10} {:>13}",
            v.faults,
            v.flagged,
            v.attributed,
            fmt_opt(v.median_delay_nights)
        );
    }
    let statuses: Vec<String> = s.statuses.iter().map(|(k, v)| format!("{k} {v}")).collect();
    outln!("verdict rows: {}", statuses.join(", "));
    outln!(
        "labels: {}; score: {}; the lake: {} (query it with DuckDB)",
        o.labels.display(),
        o.score_file.display(),
        o.lake.display()
    );
}
