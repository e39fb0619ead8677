//! The verdicts of a replayed scenario against what was injected: recall,
//! attribution, detection delay and false alarms (docs/verdicts.md, "A year
//! to prove it", says how each is counted).
use std::collections::BTreeMap;

use benchlake_core::verdict;
use serde::Serialize;

use super::replay::{Subject, Verdict};
use super::scenario::{Fault, Kind};
use super::synth::World;

/// Nights after a fault ends during which its alarms still count as its own
/// (a change point reported on the night after a repair).
pub const GRACE_NIGHTS: usize = 3;

/// Whether a row is an alarm: notified, drainable.
pub fn is_alarm(v: &Verdict) -> bool {
    // The run's count of failing links repeats its `link_health` rows.
    (v.status == verdict::FAIL || v.status == verdict::REGRESSION)
        && v.check != benchlake_analysis::link_checks::SLOW_LINKS_CHECK
}

/// Whether `v` is a verdict of the kind of check that can see `f` (any
/// node, link or filesystem).
fn family(f: &Fault, v: &Verdict) -> bool {
    match f.kind {
        Kind::CoreLoss => v.subject == Subject::Hostinfo && v.check == "node.cores",
        Kind::MemoryLoss => v.subject == Subject::Hostinfo && v.check == "node.memory_bytes",
        // A slow node also slows its run as a whole (the slowest process
        // ends the phase): the run's alarms are this fault's, misattributed.
        Kind::NodeIo => {
            matches!(v.subject, Subject::Pio(_)) && (v.target.is_none() || v.check.contains("_bw_"))
        }
        Kind::Link => v.subject == Subject::Linktest,
        Kind::Filesystem => v.subject == Subject::Pio(f.target.clone()),
        Kind::Busy | Kind::Absent | Kind::Join => false,
    }
}

/// Whether `v` names what `f` broke.
fn right_target(f: &Fault, v: &Verdict) -> bool {
    match f.kind {
        Kind::Link => {
            let Some((a, b)) = f.pair() else {
                return false;
            };
            v.target.as_deref() == Some(&format!("{a}:{b}"))
                || v.target.as_deref() == Some(&format!("{b}:{a}"))
        }
        Kind::Filesystem => v.target.is_none(),
        _ => v.target.as_deref() == Some(f.target.as_str()),
    }
}

/// One fault's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct FaultScore {
    pub id: usize,
    pub kind: &'static str,
    pub target: String,
    pub first_night: usize,
    pub first_date: String,
    pub last_night: usize,
    pub size: Option<f64>,
    pub drift: Option<f64>,
    /// An alarm of a check that sees this kind of fault while it acted.
    pub flagged: bool,
    /// One of them named the right node, link or filesystem.
    pub attributed: bool,
    /// Nights from the first night to the first alarm naming the target
    /// (else to the first alarm).
    pub delay_nights: Option<usize>,
    /// The first such alarm: check and message.
    pub first_alarm: Option<String>,
}

/// Figures of one kind of fault.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KindScore {
    pub faults: usize,
    pub flagged: usize,
    pub attributed: usize,
    pub median_delay_nights: Option<f64>,
}

/// An alarm no fault explains.
#[derive(Debug, Clone, Serialize)]
pub struct FalseAlarm {
    pub night: usize,
    pub benchmark: &'static str,
    pub target: Option<String>,
    pub check: String,
    pub status: String,
    pub message: String,
    /// The node was busy that night.
    pub busy: bool,
}

/// The whole score.
#[derive(Debug, Clone, Serialize)]
pub struct Score {
    pub nodes: usize,
    pub nights: usize,
    pub node_nights: u64,
    pub faults: usize,
    pub recall: f64,
    pub attribution: f64,
    pub median_delay_nights: Option<f64>,
    pub p90_delay_nights: Option<f64>,
    pub false_alarms: usize,
    pub false_alarms_per_1000_node_nights: f64,
    /// Alarms of a check that sees an active fault's kind, naming another
    /// node, link or filesystem.
    pub misattributed_alarms: usize,
    pub per_kind: BTreeMap<&'static str, KindScore>,
    pub statuses: BTreeMap<String, u64>,
    pub fault_scores: Vec<FaultScore>,
    /// The first 50 false alarms.
    pub false_alarm_examples: Vec<FalseAlarm>,
}

fn median_of(v: &mut [f64]) -> Option<f64> {
    benchlake_analysis::reference::median(v)
}

fn p90(v: &[f64]) -> Option<f64> {
    benchlake_analysis::reference::quantile(v, 0.9)
}

/// Scores the verdicts of `world`'s replay.
pub fn score(
    world: &World,
    verdicts: &[Verdict],
    statuses: &BTreeMap<String, u64>,
    node_nights: u64,
) -> Score {
    let nights = world.s.nights;
    let alarms: Vec<&Verdict> = verdicts.iter().filter(|v| is_alarm(v)).collect();
    let window = |f: &Fault, v: &Verdict| {
        v.night >= f.first_night && v.night <= f.last_night(nights) + GRACE_NIGHTS
    };
    let mut fault_scores = Vec::new();
    let mut explained = vec![false; alarms.len()];
    let mut related = vec![false; alarms.len()];
    for (id, f) in world.faults.iter().enumerate() {
        if !f.kind.is_fault() {
            continue;
        }
        let mut first_any: Option<&Verdict> = None;
        let mut first_right: Option<&Verdict> = None;
        for (k, v) in alarms.iter().enumerate() {
            if !(family(f, v) && window(f, v)) {
                continue;
            }
            related[k] = true;
            if first_any.is_none_or(|x| v.night < x.night) {
                first_any = Some(v);
            }
            if right_target(f, v) {
                explained[k] = true;
                if first_right.is_none_or(|x| v.night < x.night) {
                    first_right = Some(v);
                }
            }
        }
        let first = first_right.or(first_any);
        fault_scores.push(FaultScore {
            id,
            kind: f.kind.name(),
            target: f.target.clone(),
            first_night: f.first_night,
            first_date: world.date(f.first_night).to_string(),
            last_night: f.last_night(nights),
            size: f.size,
            drift: f.drift,
            flagged: first_any.is_some(),
            attributed: first_right.is_some(),
            delay_nights: first.map(|v| v.night.saturating_sub(f.first_night)),
            first_alarm: first.map(|v| {
                format!(
                    "{} {} {}: {}",
                    v.target.as_deref().unwrap_or("run"),
                    v.check,
                    v.status,
                    v.message
                )
            }),
        });
    }
    let mut false_alarm_examples = Vec::new();
    let mut false_alarms = 0;
    let mut misattributed = 0;
    for (k, v) in alarms.iter().enumerate() {
        if explained[k] {
            continue;
        }
        if related[k] {
            misattributed += 1;
            continue;
        }
        false_alarms += 1;
        if false_alarm_examples.len() < 50 {
            let busy = v.target.as_deref().is_some_and(|t| {
                world
                    .nodes
                    .iter()
                    .position(|n| n == t)
                    .is_some_and(|i| world.busy(i, v.night) > 0.0)
            });
            false_alarm_examples.push(FalseAlarm {
                night: v.night,
                benchmark: v.subject.benchmark(),
                target: v.target.clone(),
                check: v.check.clone(),
                status: v.status.clone(),
                message: v.message.clone(),
                busy,
            });
        }
    }
    let n = fault_scores.len();
    let flagged = fault_scores.iter().filter(|f| f.flagged).count();
    let attributed = fault_scores.iter().filter(|f| f.attributed).count();
    let mut delays: Vec<f64> = fault_scores
        .iter()
        .filter_map(|f| f.delay_nights.map(|d| d as f64))
        .collect();
    let mut per_kind: BTreeMap<&'static str, KindScore> = BTreeMap::new();
    for f in &fault_scores {
        let k = per_kind.entry(f.kind).or_default();
        k.faults += 1;
        k.flagged += usize::from(f.flagged);
        k.attributed += usize::from(f.attributed);
    }
    for (kind, k) in per_kind.iter_mut() {
        let mut d: Vec<f64> = fault_scores
            .iter()
            .filter(|f| f.kind == *kind)
            .filter_map(|f| f.delay_nights.map(|d| d as f64))
            .collect();
        k.median_delay_nights = median_of(&mut d);
    }
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Score {
        nodes: world.nodes.len(),
        nights,
        node_nights,
        faults: n,
        recall: ratio(flagged, n),
        attribution: ratio(attributed, flagged),
        median_delay_nights: median_of(&mut delays),
        p90_delay_nights: p90(&delays),
        false_alarms,
        false_alarms_per_1000_node_nights: if node_nights == 0 {
            0.0
        } else {
            false_alarms as f64 * 1000.0 / node_nights as f64
        },
        misattributed_alarms: misattributed,
        per_kind,
        statuses: statuses.clone(),
        fault_scores,
        false_alarm_examples,
    }
}

/// The labels of a scenario: every fault and event as injected, with its
/// dates (`labels.json`).
pub fn labels(world: &World) -> serde_json::Value {
    let nights = world.s.nights;
    let items: Vec<serde_json::Value> = world
        .faults
        .iter()
        .enumerate()
        .map(|(id, f)| {
            serde_json::json!({
                "id": id,
                "kind": f.kind.name(),
                "fault": f.kind.is_fault(),
                "target": f.target,
                "first_night": f.first_night,
                "first_date": world.date(f.first_night).to_string(),
                "last_night": f.last_night(nights),
                "last_date": world.date(f.last_night(nights)).to_string(),
                "size": f.size,
                "drift": f.drift,
            })
        })
        .collect();
    serde_json::json!({
        "scenario": world.s.name,
        "seed": world.s.seed,
        "nodes": world.nodes,
        "nights": nights,
        "start": world.s.start.to_string(),
        "filesystems": world.s.filesystems,
        "items": items,
    })
}
