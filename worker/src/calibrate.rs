//! The calibration of a LinkTest or netprobe run (docs/replay.md,
//! "Calibrations in the lake"): every `linktest` ingest is followed by one
//! `calibrate` job, which reads the run's result files, combines their
//! per-size medians with earlier calibrations of the same nodes
//! ([`benchlake_replay::calibrations::fit_document`]) and stores under
//! `calibrations/{run_id}/` the document (`calibration.json`: parameters,
//! fits, nodes, or why nothing could be fitted), a Dimemas `.cfg` and a
//! replaympi input, and commits the `replay_calibrations` rows of a fit.
//! Data that cannot be fitted (one message size, ...) is recorded, not an
//! error: the run does not fail for it.
//!
//! It also applies a calibration to a `replay` job ([`apply`]).
use std::collections::BTreeMap;

use benchlake_core::jobs::{CALIBRATE_JOB, CalibrateSpec, FollowUp, IngestSpec};
use benchlake_core::lake::TableOutput;
use benchlake_core::layout;
use benchlake_replay::calibrate;
use benchlake_replay::calibrations::{self, CalibrationDoc, Gathered};

use crate::{ExecError, ExecOutput, Executor, JobContext};

/// The `calibrate` follow-up of an ingest whose kind declares it (`linktest`:
/// its files are LinkTest or netprobe results).
pub fn follow_up_of_ingest(s: &IngestSpec) -> Option<FollowUp> {
    if s.keys.is_empty() {
        return None;
    }
    let spec = CalibrateSpec {
        keys: s.keys.clone(),
        agent: s.agent.clone(),
    };
    Some(FollowUp {
        kind: CALIBRATE_JOB.into(),
        spec: serde_json::to_value(&spec).ok()?,
        group: None,
        wait_for: None,
    })
}

fn retryable(e: impl std::fmt::Display) -> ExecError {
    ExecError::Retryable(e.to_string())
}

/// Fits and stores the calibration of one LinkTest or netprobe run.
pub struct Calibrate;

impl Executor for Calibrate {
    fn kind(&self) -> &'static str {
        CALIBRATE_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: CalibrateSpec = serde_json::from_str(&ctx.spec_json)
            .map_err(|e| ExecError::Permanent(format!("{} job spec: {e}", ctx.kind)))?;
        let mut g = Gathered::default();
        let mut unreadable = Vec::new();
        for key in &s.keys {
            if !layout::is_raw_key(key) {
                return Err(ExecError::Permanent(format!(
                    "calibrate: '{key}' is not a raw object key"
                )));
            }
            if ctx.cancelled() {
                return Err(ExecError::Cancelled);
            }
            let path = ctx.fetch(key)?;
            match benchlake_formats::linktest::read_file(&path) {
                Ok(run) => g.add_run(key.clone(), &run, &Default::default()),
                // The ingest read it; a file it could not is the ingest's error.
                Err(e) => unreadable.push(format!(
                    "{key}: {}",
                    e.to_string().replace(&path.display().to_string(), key)
                )),
            }
            let _ = std::fs::remove_file(&path);
        }
        let earlier = ctx
            .block_on(calibrations::recent(&ctx.lake, calibrations::MAX_SCAN))
            .map_err(retryable)?;
        let created_ms = chrono::Utc::now().timestamp_millis();
        let nodes = g.nodes.clone();
        let used = g.used;
        let (mut doc, cal) = calibrations::fit_document(&ctx.run_id, created_ms, g, &earlier);
        if used == 0 && !unreadable.is_empty() {
            doc.reason = Some(format!("unreadable: {}", unreadable.join("; ")));
        }
        if doc.fitted
            && let Some(why) = disturbed(&doc, &earlier)
        {
            doc.reject(why);
        }
        let mut tables = Vec::new();
        let mut files = vec![("calibration.json", String::new())];
        if let Some(cal) = &cal {
            let hosts = u32::try_from(doc.nodes.len()).unwrap_or(u32::MAX).max(1);
            files.push((
                "calibration.cfg",
                calibrate::dimemas_cfg(cal, hosts, 1, 1.0),
            ));
            files.push((
                "calibration.bandela",
                calibrate::bandela_input(cal, hosts, 1),
            ));
            let source = s.keys.join(" ");
            let batch =
                calibrate::table(cal, &ctx.run_id, &source, &nodes, doc.rejected.as_deref())
                    .map_err(|e| ExecError::Permanent(e.to_string()))?;
            tables.push(TableOutput::new("replay_calibrations", vec![batch]));
            tracing::info!(
                run = %ctx.run_id,
                params = ?doc.params,
                combined = doc.combined.len(),
                rejected = doc.rejected.as_deref().unwrap_or(""),
                "calibration fitted"
            );
        } else {
            tracing::warn!(
                run = %ctx.run_id,
                reason = doc.reason.as_deref().unwrap_or(""),
                "calibration not fitted (recorded)"
            );
        }
        files[0].1 = serde_json::to_string_pretty(&doc)
            .map_err(|e| ExecError::Permanent(format!("calibration.json: {e}")))?
            + "\n";
        // The model inputs first, the document last: a reader that finds the
        // document finds its inputs.
        files.rotate_left(1);
        for (name, text) in files {
            let key = layout::calibration_key(&ctx.run_id, name)?;
            ctx.block_on(ctx.lake.put(&key, bytes::Bytes::from(text)))?;
        }
        Ok(ExecOutput {
            encoded: Vec::new(),
            tables,
            follow_ups: Vec::new(),
            bundled: Vec::new(),
        })
    }
}

/// Whether the run behind `doc` was disturbed: at one of its message sizes
/// its pair spread (p90 / p50) is far above the spread of the earlier
/// calibrations of the same nodes at that size (their median + the largest
/// of 5 scaled MADs, 50 % and 0.5; [`benchlake_analysis::reference`], with
/// the LinkTest checks' `linktest.pair_spread` floors), once 5 exist.
pub fn disturbed(doc: &CalibrationDoc, earlier: &[CalibrationDoc]) -> Option<String> {
    use benchlake_analysis::io_checks::{Better, figure};
    use benchlake_analysis::reference::{Judgement, Learned, judge};
    let cfg = Learned {
        rel_floor: 0.5,
        abs_floor: 0.5,
        ..Learned::default()
    };
    let mut why = Vec::new();
    for m in &doc.measurements {
        let Some(spread) = m.spread else { continue };
        // Oldest first, as the references want them.
        let history: Vec<f64> = earlier
            .iter()
            .rev()
            .filter(|e| e.id != doc.id && e.nodes == doc.nodes)
            .flat_map(|e| &e.measurements)
            .filter(|x| x.class == m.class && x.bytes == m.bytes)
            .filter_map(|x| x.spread)
            .collect();
        if let Judgement::Judged {
            fail: true,
            reference,
            ..
        } = judge(spread, &history, Better::Lower, &cfg)
        {
            why.push(format!(
                "disturbed: spread {} vs usual {} at {} B ({})",
                figure(spread),
                figure(reference.median),
                m.bytes,
                m.class.as_str()
            ));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// A `replay` job's calibration, applied: the Dimemas model gets the
/// calibration's parameters under the job's own (`params` is returned with
/// them), the Bandela model's `input` file gets its figures in place of its
/// own (rewritten beside it). Returns the document.
pub fn apply(
    ctx: &JobContext,
    id: &str,
    model: &str,
    params: &mut BTreeMap<String, String>,
) -> Result<CalibrationDoc, ExecError> {
    let doc = ctx
        .block_on(calibrations::resolve(&ctx.lake, id, &Default::default()))
        .map_err(|e| ExecError::Permanent(e.to_string()))?;
    let cal = doc.calibration();
    if model == benchlake_replay::models::BANDELA.name {
        let Some(path) = params.get("input").cloned() else {
            return Err(ExecError::Permanent(
                "a Bandela replay with a calibration needs its input".into(),
            ));
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ExecError::Retryable(format!("{path}: {e}")))?;
        let out = calibrations::apply_to_bandela_input(&text, &cal);
        let p = ctx.scratch.join("calibrated.input");
        std::fs::write(&p, out).map_err(|e| retryable(format!("{}: {e}", p.display())))?;
        params.insert("input".into(), p.display().to_string());
    } else {
        let mut merged = doc.params.clone();
        merged.append(params);
        *params = merged;
    }
    Ok(doc)
}

/// The calibration of a traced run's default replay: the newest fitted one
/// whose nodes cover the nodes the run's ranks ran on (`rank_nodes`, from the
/// tracer's rank map, empty names unknown), else the newest covering the
/// task's agent (agents are named after their host; without a rank map the
/// agent is the run's node). Returns (calibration id, note when there is
/// none).
pub fn for_default_replay(
    ctx: &JobContext,
    agent: &str,
    rank_nodes: Option<&[String]>,
) -> Result<(Option<String>, Option<String>), ExecError> {
    use std::collections::BTreeSet;
    let ranked: BTreeSet<String> = rank_nodes
        .unwrap_or_default()
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    let mut tries = Vec::new();
    if !ranked.is_empty() {
        tries.push(ranked);
    }
    let by_agent: BTreeSet<String> = [agent.to_string()].into();
    if !agent.is_empty() && !tries.contains(&by_agent) {
        tries.push(by_agent);
    }
    for nodes in &tries {
        let found = ctx
            .block_on(calibrations::latest_covering(&ctx.lake, nodes))
            .map_err(retryable)?;
        if let Some(d) = found {
            tracing::info!(run = %ctx.run_id, calibration = %d.id, nodes = ?nodes, "default replay calibrated");
            return Ok((Some(d.id), None));
        }
    }
    let list = tries
        .iter()
        .map(|n| n.iter().cloned().collect::<Vec<_>>().join(","))
        .collect::<Vec<_>>()
        .join(" or ");
    Ok((
        None,
        Some(format!(
            "no fitted calibration covers the nodes {list} (rejected fits left out): the default parameters"
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use benchlake_core::ids::new_id;
    use benchlake_core::lake::Lake;

    /// Runs the `calibrate` executor on synthetic LinkTest files (one run per
    /// size, of `ranks` ranks, 48 per host) in a local lake; returns each
    /// run's document, how long its job took and the rows it committed.
    fn calibrate_runs(ranks: usize, sizes: &[u64]) -> Vec<(CalibrationDoc, f64, usize)> {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let lake = Lake::local(&dir.path().join("lake")).unwrap();
        let mut out = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let (run, task) = (benchlake_core::ids::new_id_at(1_000 + i as i64), new_id());
            let file = dir.path().join(format!("lt{size}.sion"));
            let r = benchlake_formats::linktest::synth::with_message_size(
                benchlake_formats::linktest::synth::synthetic_run(
                    ranks,
                    if ranks >= 96 { 48 } else { ranks / 2 },
                    7,
                ),
                size,
            );
            benchlake_formats::linktest::v2::write_file(&r, &file, &Default::default()).unwrap();
            let key = format!("raw/{run}/{task}/pingpong_results_bin.sion");
            rt.block_on(lake.put(&key, bytes::Bytes::from(std::fs::read(&file).unwrap())))
                .unwrap();
            let _ = std::fs::remove_file(&file);
            let scratch = dir.path().join(format!("scratch{i}"));
            std::fs::create_dir_all(&scratch).unwrap();
            let spec = CalibrateSpec {
                keys: vec![key],
                agent: "a1".into(),
            };
            let ctx = JobContext {
                job_id: new_id(),
                run_id: run.clone(),
                kind: CALIBRATE_JOB.into(),
                attempt: 1,
                spec_json: serde_json::to_string(&spec).unwrap(),
                run_date: "2026-11-24".into(),
                lake: lake.clone(),
                scratch,
                rt: rt.handle().clone(),
                cancel: Default::default(),
            };
            let t = std::time::Instant::now();
            let o = Calibrate.execute(&ctx).unwrap();
            let secs = t.elapsed().as_secs_f64();
            let rows = o.tables.iter().map(|t| t.rows()).sum();
            let doc = rt.block_on(calibrations::load(&lake, &run)).unwrap();
            out.push((doc, secs, rows));
        }
        out
    }

    #[test]
    fn one_size_records_why_and_the_next_size_fits() {
        let docs = calibrate_runs(8, &[64, 1 << 20]);
        assert!(!docs[0].0.fitted && docs[0].2 == 0, "{:?}", docs[0].0);
        assert!(docs[0].0.reason.as_deref().unwrap().contains("size"));
        let (d, _, rows) = &docs[1];
        assert!(d.fitted, "{d:?}");
        // Two sizes: stored, with its rows, but rejected.
        assert!(
            d.rejected
                .as_deref()
                .unwrap_or("")
                .contains("2 message sizes"),
            "{d:?}"
        );
        assert_eq!(rows, &2, "an intra and an inter row");
        assert_eq!(d.combined, vec![docs[0].0.id.clone()]);
        let bw: f64 = d.params["bandwidth"].parse().unwrap();
        assert!(
            (bw * 1048576.0 - 10e9).abs() / 10e9 < 0.02,
            "{:?}",
            d.params
        );
    }

    /// A run whose pair spread is far above the spread of the same nodes'
    /// earlier calibrations is rejected as disturbed; a usual spread is not,
    /// nor is one without 5 earlier spreads.
    #[test]
    fn a_disturbed_run_is_rejected() {
        use benchlake_replay::calibrate::LinkClass;
        use benchlake_replay::calibrations::Measurement;
        let doc = |i: i64, spread: f64| CalibrationDoc {
            id: benchlake_core::ids::new_id_at(1_000 + i),
            created_ms: i,
            fitted: true,
            reason: None,
            rejected: None,
            params: BTreeMap::new(),
            fits: Vec::new(),
            nodes: ["n1".to_string()].into(),
            measurements: vec![Measurement {
                class: LinkClass::Intra,
                bytes: 8,
                median_s: 1e-6,
                samples: 100,
                spread: Some(spread),
            }],
            combined: Vec::new(),
            inputs: Vec::new(),
        };
        // Newest first, as `calibrations::recent` returns them.
        let earlier: Vec<CalibrationDoc> = (0..6).rev().map(|i| doc(i, 1.2)).collect();
        assert_eq!(disturbed(&doc(10, 1.3), &earlier), None);
        assert_eq!(
            disturbed(&doc(10, 4.0), &earlier).as_deref(),
            Some("disturbed: spread 4 vs usual 1.200 at 8 B (intra)")
        );
        assert_eq!(disturbed(&doc(10, 4.0), &earlier[..4]), None);
    }

    /// The job's time on 4,096-rank runs (`cargo test --release -p
    /// benchlake-worker calibrate_speed -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn calibrate_speed_at_4096_ranks() {
        for (d, secs, _) in calibrate_runs(4096, &[8, 1 << 20]) {
            eprintln!(
                "4096 ranks: calibrate job {secs:.3} s (fitted {}, {} measurements)",
                d.fitted,
                d.measurements.len()
            );
        }
    }
}
