//! `benchlake probe year`: a labelled synthetic history replayed through the
//! real ingest and check path, scored against what was injected
//! (docs/verdicts.md, "A year to prove it").
pub mod replay;
pub mod scenario;
pub mod score;
pub mod synth;

use std::path::PathBuf;
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
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

pub fn run(a: YearArgs) -> anyhow::Result<()> {
    let (scenario, nodes) = scenario::Scenario::load(&a.scenario)?;
    if a.out.exists()
        && std::fs::read_dir(&a.out)
            .with_context(|| format!("{}", a.out.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{}: not empty; give a new or empty directory (a history replayed into an old one would mix with it)",
            a.out.display()
        );
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let name = if scenario.name.is_empty() {
        a.scenario.display().to_string()
    } else {
        scenario.name.clone()
    };
    let world = synth::World::new(scenario, nodes);
    let labels = score::labels(&world);
    let labels_path = a.out.join("labels.json");
    std::fs::write(&labels_path, serde_json::to_vec_pretty(&labels)?)
        .with_context(|| format!("writing {}", labels_path.display()))?;
    let started = Instant::now();
    let mut r = replay::Replay::new(world, &a.out.join("lake"))?;
    let (every, nights) = (a.progress, r.world.s.nights);
    r.run(|night, t| {
        if every > 0 && ((night + 1) % every == 0 || night + 1 == nights) {
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
    let elapsed = started.elapsed().as_secs_f64();
    let s = score::score(&r.world, &r.verdicts, &r.statuses, r.node_nights);
    let out = serde_json::json!({
        "scenario": name,
        "seconds": elapsed,
        "timings": r.timings,
        "score": s,
    });
    let score_path = a.out.join("score.json");
    std::fs::write(&score_path, serde_json::to_vec_pretty(&out)?)
        .with_context(|| format!("writing {}", score_path.display()))?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let busy = r
        .world
        .faults
        .iter()
        .filter(|f| f.kind == scenario::Kind::Busy)
        .count();
    outln!(
        "{name}: {} nodes × {} nights ({} node-nights), {} faults, {busy} busy spells",
        s.nodes,
        s.nights,
        s.node_nights,
        s.faults
    );
    let t = &r.timings;
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
        labels_path.display(),
        score_path.display(),
        a.out.join("lake").display()
    );
    Ok(())
}
