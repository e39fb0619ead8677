//! Calibrations in the lake (docs/replay.md, "Calibrations in the lake"):
//! what a LinkTest or netprobe run's `calibrate` follow-up fits and stores
//! under `calibrations/{run_id}/` (keys from `benchlake_core::layout`), how a
//! replay finds one (by id, or the newest whose nodes cover the replayed
//! run's nodes) and how its figures are applied to a model's inputs.
//!
//! One LinkTest or netprobe run measures one message size, and one size
//! cannot separate latency from bandwidth. So every calibration document
//! keeps its run's own per-size medians ([`Measurement`]), and a new fit
//! combines them with the medians of earlier calibrations of the same nodes
//! at the sizes this run did not measure (the newest wins per size). A run
//! that still has too little (one size, times that do not grow with the
//! size) stores a document saying why, with its medians, for the next run.
use std::collections::{BTreeMap, BTreeSet};

use benchlake_core::lake::Lake;
use benchlake_core::{ids, layout};
use benchlake_formats::linktest::LinkTestRun;
use serde::{Deserialize, Serialize};

use crate::calibrate::{Calibration, ClassFit, LinkClass, NodesByClass, Samples};
use crate::error::{ReplayError, Result};

/// Earlier calibrations read at most when looking for a covering one or for
/// measurements to combine (newest first).
pub const MAX_SCAN: usize = 500;

/// Pair times gathered from LinkTest results, per link class and size, with
/// the nodes seen per class.
#[derive(Default)]
pub struct Gathered {
    /// Pair times per class and size.
    pub samples: Samples,
    /// Nodes whose pairs were measured, per class.
    pub nodes: NodesByClass,
    /// The inputs' names (skipped ones included).
    pub inputs: Vec<String>,
    /// Ping-pong inputs used (others are skipped).
    pub used: usize,
    /// Inputs skipped, with why.
    pub skipped: Vec<String>,
}

impl Gathered {
    /// Adds the pair times of one LinkTest result (its ranks' hosts looked up
    /// once, not per pair: a 4,096-rank file has 16.7 M pairs). `only`, when
    /// not empty, keeps the pairs between those nodes.
    pub fn add_run(&mut self, name: String, run: &LinkTestRun, only: &BTreeSet<String>) {
        // Both-ways and one-way streams time something else than the
        // ping-pong the models' L + s/BW describes.
        if run.flags.bidirectional || run.flags.unidirectional {
            tracing::warn!(
                source = %name,
                "skipped: bidirectional or unidirectional tests are not ping-pong times"
            );
            self.skipped
                .push(format!("{name}: bidirectional or unidirectional test"));
            self.inputs.push(name);
            return;
        }
        self.used += 1;
        self.inputs.push(name);
        let n = run.num_tasks;
        let mut ids: std::collections::HashMap<&str, usize> = Default::default();
        let mut names: Vec<&str> = Vec::new();
        // Per rank: its host's index, or None when `only` leaves it out.
        let host: Vec<Option<usize>> = (0..n)
            .map(|r| {
                let h = run.ranks.get(r)?.hostname.as_str();
                if !only.is_empty() && !only.contains(h) {
                    return None;
                }
                Some(*ids.entry(h).or_insert_with(|| {
                    names.push(h);
                    names.len() - 1
                }))
            })
            .collect();
        let mut seen = vec![[false; 2]; names.len()];
        let mut intra = std::mem::take(self.samples.slot(LinkClass::Intra, run.message_size));
        let mut inter = std::mem::take(self.samples.slot(LinkClass::Inter, run.message_size));
        for p in &run.permutations {
            for (from, hf) in host.iter().enumerate() {
                let Some(hf) = *hf else { continue };
                let Some(row) = p.times.get(from * n..(from + 1) * n) else {
                    continue;
                };
                for (to, (&t, ht)) in row.iter().zip(&host).enumerate() {
                    let Some(ht) = *ht else { continue };
                    if from == to || !(t.is_finite() && t > 0.0) {
                        continue;
                    }
                    let k = usize::from(hf != ht);
                    if k == 0 {
                        intra.push(t as f32);
                    } else {
                        inter.push(t as f32);
                    }
                    seen[hf][k] = true;
                    seen[ht][k] = true;
                }
            }
        }
        *self.samples.slot(LinkClass::Intra, run.message_size) = intra;
        *self.samples.slot(LinkClass::Inter, run.message_size) = inter;
        for (h, s) in names.iter().zip(&seen) {
            for (k, class) in [LinkClass::Intra, LinkClass::Inter].into_iter().enumerate() {
                if s[k] {
                    self.nodes.entry(class).or_default().insert(h.to_string());
                }
            }
        }
    }

    /// Every node measured, whatever the class.
    pub fn all_nodes(&self) -> BTreeSet<String> {
        self.nodes.values().flatten().cloned().collect()
    }
}

/// The median pair time of one link class at one message size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub class: LinkClass,
    pub bytes: u64,
    pub median_s: f64,
    /// Pair times behind the median.
    pub samples: u64,
    /// The run's own spread at this size: p90 / p50 of the pair times (what
    /// tells a disturbed run, against earlier calibrations of the same nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<f64>,
}

/// The quality gate (docs/replay.md, "Calibration quality"): a fit whose r²
/// is below this is stored but rejected.
pub const MIN_R2: f64 = 0.9;
/// A fit over fewer message sizes than this is stored but rejected.
pub const MIN_SIZES: usize = 3;

/// A calibration as stored in `calibrations/{id}/calibration.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationDoc {
    /// The LinkTest or netprobe run it was fitted after.
    pub id: String,
    /// When it was fitted (ms since the epoch).
    pub created_ms: i64,
    /// Whether the fit succeeded (false: [`Self::reason`] says why).
    pub fitted: bool,
    /// Why nothing was fitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why a fit is not trusted (r² below [`MIN_R2`], fewer than
    /// [`MIN_SIZES`] sizes, a disturbed run): stored, but never `latest` and
    /// never used by default; usable only by naming its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// The replay parameters (Dimemas names: `latency`, `bandwidth`,
    /// `intra_latency`, `intra_bandwidth`, `eager_limit`).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// The per-class fits.
    #[serde(default)]
    pub fits: Vec<ClassFit>,
    /// Every node measured (the nodes the calibration covers).
    #[serde(default)]
    pub nodes: BTreeSet<String>,
    /// This run's own per-size medians (what later fits may combine).
    #[serde(default)]
    pub measurements: Vec<Measurement>,
    /// Earlier calibrations whose measurements this fit combined, by id.
    #[serde(default)]
    pub combined: Vec<String>,
    /// The raw objects read.
    #[serde(default)]
    pub inputs: Vec<String>,
}

impl CalibrationDoc {
    /// The fit back as a [`Calibration`].
    pub fn calibration(&self) -> Calibration {
        let get = |c: LinkClass| self.fits.iter().find(|f| f.class == c).cloned();
        Calibration {
            intra: get(LinkClass::Intra),
            inter: get(LinkClass::Inter),
        }
    }

    /// Whether it is fitted, passed the quality gate and measured every
    /// node of `nodes`: what `latest` and the default replays may use.
    pub fn covers(&self, nodes: &BTreeSet<String>) -> bool {
        self.fitted && self.rejected.is_none() && nodes.is_subset(&self.nodes)
    }

    /// Adds a reason to reject the fit (reasons joined by "; ").
    pub fn reject(&mut self, why: String) {
        self.rejected = Some(match self.rejected.take() {
            Some(r) => format!("{r}; {why}"),
            None => why,
        });
    }

    /// One line on the fit's quality: "r² 0.998, 5 sizes: accepted" or
    /// "rejected: …".
    pub fn quality(&self) -> String {
        let fits: Vec<String> = self
            .fits
            .iter()
            .map(|f| {
                format!(
                    "{} r² {:.3} over {} sizes",
                    f.class.as_str(),
                    f.r2,
                    f.medians.len()
                )
            })
            .collect();
        match (&self.rejected, self.fitted) {
            (_, false) => format!(
                "not fitted: {}",
                self.reason.as_deref().unwrap_or("no reason recorded")
            ),
            (Some(r), true) => format!("{}: rejected ({r})", fits.join(", ")),
            (None, true) => format!(
                "{}: accepted (r² ≥ {MIN_R2}, ≥ {MIN_SIZES} sizes)",
                fits.join(", ")
            ),
        }
    }
}

/// The reasons the quality gate rejects `fits` for (r² and sizes; a
/// disturbed run is the caller's to add, [`CalibrationDoc::reject`]).
pub fn gate(fits: &[ClassFit]) -> Option<String> {
    let mut why = Vec::new();
    for f in fits {
        if f.r2.is_nan() || f.r2 < MIN_R2 {
            why.push(format!(
                "{} fit r² {:.3} is below {MIN_R2}",
                f.class.as_str(),
                f.r2
            ));
        }
        if f.medians.len() < MIN_SIZES {
            why.push(format!(
                "{} fit over {} message sizes (at least {MIN_SIZES} needed)",
                f.class.as_str(),
                f.medians.len()
            ));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

impl CalibrationDoc {
    /// What a replay records of it in `replays.params`: the id, its
    /// parameters and the nodes it covers.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "params": self.params,
            "nodes": self.nodes,
        })
    }
}

/// The per-size medians of `samples`, by class and size, with each size's
/// spread (p90 / p50).
pub fn measurements(mut samples: Samples) -> Vec<Measurement> {
    let spreads = samples.spreads();
    crate::calibrate::medians(samples)
        .into_iter()
        .map(|((class, bytes), (median_s, samples))| Measurement {
            class,
            bytes,
            median_s,
            samples,
            spread: spreads.get(&(class, bytes)).copied(),
        })
        .collect()
}

/// Fits run `id`'s pair times, combined with the measurements of `earlier`
/// calibrations (newest first) of the same nodes at the sizes the run did
/// not measure. A fit that fails gives a document with `fitted: false` and
/// the reason, never an error.
pub fn fit_document(
    id: &str,
    created_ms: i64,
    g: Gathered,
    earlier: &[CalibrationDoc],
) -> (CalibrationDoc, Option<Calibration>) {
    let nodes = g.all_nodes();
    // Each slot reduced to its median once (a 4,096-rank file holds 16.7 M
    // pair times); the fit needs nothing else.
    let own = measurements(g.samples);
    let mut by: crate::calibrate::Medians = own
        .iter()
        .map(|m| ((m.class, m.bytes), (m.median_s, m.samples)))
        .collect();
    let mut combined = Vec::new();
    for e in earlier {
        if e.id == id || e.nodes != nodes {
            continue;
        }
        let mut used = false;
        for m in &e.measurements {
            if let std::collections::btree_map::Entry::Vacant(v) = by.entry((m.class, m.bytes)) {
                v.insert((m.median_s, m.samples));
                used = true;
            }
        }
        if used {
            combined.push(e.id.clone());
        }
    }
    let mut doc = CalibrationDoc {
        id: id.to_string(),
        created_ms,
        fitted: false,
        reason: None,
        rejected: None,
        params: BTreeMap::new(),
        fits: Vec::new(),
        nodes,
        measurements: own,
        combined,
        inputs: g.inputs,
    };
    if g.used == 0 {
        doc.reason = Some(format!(
            "no ping-pong results among the inputs ({})",
            g.skipped.join("; ")
        ));
        return (doc, None);
    }
    match crate::calibrate::fit_medians(&by) {
        Ok(c) => {
            doc.fitted = true;
            doc.params = c.params();
            doc.fits = c.fits().cloned().collect();
            doc.rejected = gate(&doc.fits);
            (doc, Some(c))
        }
        Err(e) => {
            doc.reason = Some(e.to_string());
            (doc, None)
        }
    }
}

fn lake_err(e: benchlake_core::Error) -> ReplayError {
    ReplayError::param("calibration", e.to_string())
}

/// Reads calibration `id` (a ULID, checked before it reaches a key).
pub async fn load(lake: &Lake, id: &str) -> Result<CalibrationDoc> {
    let key = layout::calibration_key(id, "calibration.json")
        .map_err(|e| ReplayError::param("calibration", e.to_string()))?;
    let bytes = match lake.size(&key).await.map_err(lake_err)? {
        Some(_) => lake.get(&key).await.map_err(lake_err)?,
        None => {
            return Err(ReplayError::param(
                "calibration",
                format!("no calibration {id} in the lake ({key} is missing)"),
            ));
        }
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| ReplayError::param("calibration", format!("{key}: {e}")))
}

/// The ids of the calibrations in the lake, newest first.
pub async fn list_ids(lake: &Lake) -> Result<Vec<String>> {
    let mut ids: Vec<String> = lake
        .list(&layout::calibrations_prefix())
        .await
        .map_err(lake_err)?
        .into_iter()
        .filter_map(|(k, _)| match layout::parse_calibration_key(&k) {
            Some((id, "calibration.json")) => Some(id.to_string()),
            _ => None,
        })
        .collect();
    ids.sort_by_key(|id| std::cmp::Reverse((ids::time_ms_of(id).unwrap_or(0), id.clone())));
    Ok(ids)
}

/// Up to `max` calibrations, newest first (unreadable documents skipped
/// with a warning).
pub async fn recent(lake: &Lake, max: usize) -> Result<Vec<CalibrationDoc>> {
    let mut out = Vec::new();
    for id in list_ids(lake).await?.into_iter().take(max) {
        match load(lake, &id).await {
            Ok(d) => out.push(d),
            Err(e) => tracing::warn!(calibration = %id, "skipped: {e}"),
        }
    }
    Ok(out)
}

/// The newest fitted calibration that passed the quality gate and whose
/// nodes cover `nodes` (any such one when `nodes` is empty), among the
/// newest [`MAX_SCAN`].
pub async fn latest_covering(
    lake: &Lake,
    nodes: &BTreeSet<String>,
) -> Result<Option<CalibrationDoc>> {
    for id in list_ids(lake).await?.into_iter().take(MAX_SCAN) {
        match load(lake, &id).await {
            Ok(d) if d.covers(nodes) => return Ok(Some(d)),
            Ok(_) => {}
            Err(e) => tracing::warn!(calibration = %id, "skipped: {e}"),
        }
    }
    Ok(None)
}

/// Resolves what a request names: a calibration id (checked, loaded) or
/// `latest` (the newest covering `nodes`; an error saying so when none does).
pub async fn resolve(lake: &Lake, name: &str, nodes: &BTreeSet<String>) -> Result<CalibrationDoc> {
    if name == "latest" {
        return latest_covering(lake, nodes).await?.ok_or_else(|| {
            ReplayError::param(
                "calibration",
                if nodes.is_empty() {
                    "no fitted calibration in the lake (rejected fits left out)".to_string()
                } else {
                    format!(
                        "no fitted calibration covers the nodes {} (rejected fits left out)",
                        nodes.iter().cloned().collect::<Vec<_>>().join(",")
                    )
                },
            )
        });
    }
    ids::validate_id("calibration", name).map_err(|_| {
        ReplayError::param(
            "calibration",
            format!("'{name}' is neither 'latest' nor a calibration id (a ULID)"),
        )
    })?;
    let d = load(lake, name).await?;
    if !d.fitted {
        return Err(ReplayError::param(
            "calibration",
            format!(
                "calibration {name} was not fitted: {}",
                d.reason.as_deref().unwrap_or("no reason recorded")
            ),
        ));
    }
    Ok(d)
}

/// Keywords of a replaympi input a calibration sets.
const BANDELA_KEYWORDS: &[&str] = &[
    "INTRA_HOST_LATENCY",
    "INTRA_HOST_BANDWIDTH_PEAK",
    "INTER_HOST_LATENCY",
    "INTER_HOST_BANDWIDTH_PEAKS",
];

/// A replaympi input with the calibration's latencies and bandwidths in place
/// of its own (replaympi counts µs and MB of 10^6 B): the keyword lines are
/// replaced (with a value on the next line and any `block_points`, `sizes`,
/// `values` table after them), or added after `HOST_TYPE`. The inter-node
/// keywords are only written when the input has them or more than one host.
pub fn apply_to_bandela_input(text: &str, c: &Calibration) -> String {
    let mb10 = |f: &ClassFit| sig6(f.bandwidth_mb_s * (1u64 << 20) as f64 / 1e6);
    let mut values: BTreeMap<&str, String> = BTreeMap::new();
    if let Some(f) = &c.intra {
        values.insert("INTRA_HOST_LATENCY", sig6(f.latency_s * 1e6).to_string());
        values.insert("INTRA_HOST_BANDWIDTH_PEAK", mb10(f).to_string());
    }
    let hosts = text
        .lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some("NUMBER_OF_HOSTS"))
                .then(|| it.next().and_then(|v| v.parse::<u64>().ok()))
                .flatten()
        })
        .unwrap_or(1);
    let has_inter = text
        .lines()
        .any(|l| l.split_whitespace().next() == Some("INTER_HOST_LATENCY"));
    if let Some(f) = &c.inter
        && (hosts > 1 || has_inter)
    {
        values.insert("INTER_HOST_LATENCY", sig6(f.latency_s * 1e6).to_string());
        values.insert("INTER_HOST_BANDWIDTH_PEAKS", format!("{} -1", mb10(f)));
    }
    let mut out = String::with_capacity(text.len() + 200);
    let mut written: BTreeSet<&str> = BTreeSet::new();
    let mut lines = text.lines().peekable();
    let is_num = |l: &str| {
        l.split_whitespace()
            .next()
            .is_some_and(|t| t.parse::<f64>().is_ok())
    };
    let is_table = |l: &str| {
        matches!(
            l.split_whitespace().next(),
            Some("block_points" | "sizes" | "values")
        )
    };
    while let Some(line) = lines.next() {
        let mut it = line.split_whitespace();
        let kw = it.next().unwrap_or("");
        let Some((k, v)) = values.get_key_value(kw) else {
            out.push_str(line);
            out.push('\n');
            if kw == "HOST_TYPE" {
                // Keywords the input lacks go right after HOST_TYPE.
                for (k, v) in &values {
                    if !text
                        .lines()
                        .any(|l| l.split_whitespace().next() == Some(*k))
                    {
                        out.push_str(&format!("{k} {v}\n"));
                        written.insert(k);
                    }
                }
            }
            continue;
        };
        if it.next().is_none() {
            // The value is on the next line (numbers only).
            while lines.peek().is_some_and(|l| is_num(l)) {
                lines.next();
            }
        }
        // A block_points table after the keyword would override the value.
        while lines.peek().is_some_and(|l| is_table(l) || is_num(l)) {
            lines.next();
        }
        if written.insert(k) {
            out.push_str(&format!("{k} {v}\n"));
        }
    }
    for (k, v) in &values {
        if !written.contains(k) {
            out.push_str(&format!("{k} {v}\n"));
        }
    }
    out
}

/// The keywords [`apply_to_bandela_input`] may set.
pub fn bandela_keywords() -> &'static [&'static str] {
    BANDELA_KEYWORDS
}

/// `x` rounded to 6 significant digits.
fn sig6(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = 5 - x.abs().log10().floor() as i32;
    let m = 10f64.powi(e);
    (x * m).round() / m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(class: LinkClass, l: f64, bw: f64) -> ClassFit {
        ClassFit {
            class,
            latency_s: l,
            bandwidth_mb_s: bw,
            eager_limit: None,
            r2: 1.0,
            max_rel_error: 0.0,
            samples: 10,
            medians: vec![(8, l), (1 << 20, l + 1.0 / bw)],
        }
    }

    fn samples(class: LinkClass, bytes: u64, l: f64, bw_mb: f64) -> Samples {
        let mut s = Samples::default();
        for k in 0..5 {
            let t = l + bytes as f64 / (bw_mb * (1u64 << 20) as f64);
            s.add(class, bytes, t * (1.0 + 0.001 * f64::from(k)));
        }
        s
    }

    #[test]
    fn one_size_is_recorded_and_a_later_size_of_the_same_nodes_fits() {
        let nodes = |g: &mut Gathered| {
            g.nodes
                .entry(LinkClass::Inter)
                .or_default()
                .extend(["n1".to_string(), "n2".to_string()]);
            g.used = 1;
        };
        let mut g = Gathered {
            samples: samples(LinkClass::Inter, 64, 4e-6, 1000.0),
            ..Default::default()
        };
        nodes(&mut g);
        let a = ids::new_id_at(1_000);
        let (first, c) = fit_document(&a, 1_000, g, &[]);
        assert!(c.is_none() && !first.fitted);
        let why = first.reason.clone().unwrap();
        assert!(why.contains("size"), "{why}");
        assert_eq!(why.matches("parameter 'calibration'").count(), 1, "{why}");
        assert_eq!(first.measurements.len(), 1);
        assert_eq!(first.measurements[0].bytes, 64);
        // A second run at 1 MiB combines the first's 64-byte median.
        let mut g = Gathered {
            samples: samples(LinkClass::Inter, 1 << 20, 4e-6, 1000.0),
            ..Default::default()
        };
        nodes(&mut g);
        let b = ids::new_id_at(2_000);
        // Another node set's measurement is not combined.
        let mut other = first.clone();
        other.id = ids::new_id_at(1_500);
        other.nodes = ["n9".to_string()].into();
        other.measurements[0].bytes = 8;
        let (doc, c) = fit_document(&b, 2_000, g, &[other, first.clone()]);
        let c = c.expect("fitted");
        assert!(doc.fitted, "{doc:?}");
        assert_eq!(doc.combined, vec![a.clone()]);
        let f = c.inter.unwrap();
        assert!((f.latency_s - 4e-6).abs() / 4e-6 < 0.01, "{f:?}");
        assert!((f.bandwidth_mb_s - 1000.0).abs() / 1000.0 < 0.01, "{f:?}");
        assert_eq!(doc.params["latency"], format!("{:e}", sig6(f.latency_s)));
        // Two sizes: stored, but rejected by the quality gate.
        assert_eq!(
            doc.rejected.as_deref(),
            Some("inter fit over 2 message sizes (at least 3 needed)")
        );
        assert!(!doc.covers(&["n1".to_string()].into()));
        assert!(doc.quality().contains("rejected"), "{}", doc.quality());
        // A third size: accepted.
        let mut g = Gathered {
            samples: samples(LinkClass::Inter, 4096, 4e-6, 1000.0),
            ..Default::default()
        };
        nodes(&mut g);
        let d3 = ids::new_id_at(3_000);
        let (doc, _) = fit_document(&d3, 3_000, g, &[doc.clone(), first.clone()]);
        assert_eq!(doc.rejected, None, "{doc:?}");
        assert!(
            doc.quality().ends_with("accepted (r² ≥ 0.9, ≥ 3 sizes)"),
            "{}",
            doc.quality()
        );
        let back: CalibrationDoc =
            serde_json::from_str(&serde_json::to_string(&doc).unwrap()).unwrap();
        assert_eq!(
            (&back.params, &back.nodes, &back.combined),
            (&doc.params, &doc.nodes, &doc.combined)
        );
        assert!(back.measurements[0].spread.is_some());
        assert!(back.covers(&["n1".to_string()].into()));
        assert!(!back.covers(&["n3".to_string()].into()));
        assert!(!first.covers(&BTreeSet::new()), "unfitted covers nothing");
    }

    /// The quality gate's reasons: a poor r², too few sizes, and a
    /// disturbed run added by the caller.
    #[test]
    fn the_quality_gate_names_each_reason() {
        let mut f = fit(LinkClass::Intra, 1e-6, 1000.0);
        f.medians = vec![(8, 1e-6), (64, 1e-6), (4096, 2e-6)];
        f.r2 = 0.98;
        assert_eq!(gate(std::slice::from_ref(&f)), None);
        f.r2 = -1.52;
        assert_eq!(
            gate(std::slice::from_ref(&f)).as_deref(),
            Some("intra fit r² -1.520 is below 0.9")
        );
        f.r2 = f64::NAN;
        assert!(
            gate(std::slice::from_ref(&f)).is_some(),
            "NaN r² is rejected"
        );
        f.r2 = 0.99;
        f.medians.truncate(2);
        assert!(
            gate(std::slice::from_ref(&f))
                .unwrap()
                .contains("2 message sizes")
        );
        let mut doc = CalibrationDoc {
            id: ids::new_id_at(1),
            created_ms: 1,
            fitted: true,
            reason: None,
            rejected: None,
            params: BTreeMap::new(),
            fits: vec![fit(LinkClass::Intra, 1e-6, 1000.0)],
            nodes: ["n1".to_string()].into(),
            measurements: Vec::new(),
            combined: Vec::new(),
            inputs: Vec::new(),
        };
        assert!(doc.covers(&BTreeSet::new()));
        doc.reject("disturbed: spread 4 vs usual 1.2 at 8 B (intra)".into());
        assert!(!doc.covers(&BTreeSet::new()));
        doc.reject("x".into());
        assert_eq!(
            doc.rejected.as_deref(),
            Some("disturbed: spread 4 vs usual 1.2 at 8 B (intra); x")
        );
    }

    #[test]
    fn bandela_inputs_get_the_calibrated_figures() {
        let c = Calibration {
            intra: Some(fit(LinkClass::Intra, 1.5e-6, 5000.0)),
            inter: Some(fit(LinkClass::Inter, 8e-6, 1000.0)),
        };
        let one = "# x\nNUMBER_OF_HOSTS 1\nHOST_TYPE 0\nINTRA_HOST_LATENCY 2\nINTRA_HOST_BANDWIDTH_PEAK\n700\nblock_points 2\nsizes 1 2\nvalues 3 4\nINTRA_HOST_BARRIER_LATENCY 10\nBLOCK_HOST 0\nNUMBER_OF_PROCS 2\nMPI_RANKS 0-1\nADAPTERS 0\n";
        let out = apply_to_bandela_input(one, &c);
        assert!(out.contains("INTRA_HOST_LATENCY 1.5\n"), "{out}");
        assert!(out.contains("INTRA_HOST_BANDWIDTH_PEAK 5242.88\n"), "{out}");
        assert!(
            !out.contains("700") && !out.contains("block_points"),
            "{out}"
        );
        assert!(!out.contains("INTER_HOST"), "one host: {out}");
        assert!(out.contains("INTRA_HOST_BARRIER_LATENCY 10\n"), "{out}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in");
        std::fs::write(&p, &out).unwrap();
        let inp = benchlake_formats::bandela::BandelaInput::read(p.to_str().unwrap()).unwrap();
        assert_eq!(inp.hosts, 1);
        // Two hosts without INTER lines: they are added after HOST_TYPE.
        let two = "NUMBER_OF_HOSTS 2\nHOST_TYPE 0\nINTRA_HOST_LATENCY 2\nINTRA_HOST_BANDWIDTH_PEAK 700\nBLOCK_HOST 0\nNUMBER_OF_PROCS 1\nMPI_RANKS 0\nADAPTERS 0\nBLOCK_HOST 1\nNUMBER_OF_PROCS 1\nMPI_RANKS 1\nADAPTERS 0\n";
        let out = apply_to_bandela_input(two, &c);
        assert!(out.contains("INTER_HOST_LATENCY 8\n"), "{out}");
        assert!(
            out.contains("INTER_HOST_BANDWIDTH_PEAKS 1048.58 -1\n"),
            "{out}"
        );
        std::fs::write(&p, &out).unwrap();
        benchlake_formats::bandela::BandelaInput::read(p.to_str().unwrap()).unwrap();
    }
}
