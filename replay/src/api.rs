//! The public entry point: replay a trace with a named model and sweep-point
//! parameters.
use std::collections::BTreeMap;
use std::path::Path;

use benchlake_formats::dimemas::DimTrace;

use crate::dimemas::Platform;
use crate::error::{ReplayError, Result};
use crate::result::ReplayResult;

/// Replays `trace` with `model` (`dimemas` or `bandela`) and the sweep-point
/// overrides `params` (names in docs/replay.md; for Dimemas see
/// [`crate::dimemas::PARAM_NAMES`]).
pub fn run_replay(
    model: &str,
    trace: &Path,
    params: &BTreeMap<String, String>,
) -> Result<ReplayResult> {
    match model {
        "dimemas" => {
            let platform = Platform::default().apply_params(params)?;
            let t = DimTrace::open(trace)?;
            crate::dimemas::simulate(&t, &platform)
        }
        "bandela" => {
            // `trace` is the directory of bandela.<rank> files; `input` names the
            // replaympi input file; `topology` a host type 1 plug-in (C shared library).
            let input = params.get("input").ok_or_else(|| {
                ReplayError::param(
                    "input",
                    "the Bandela model needs input=<replaympi input file>",
                )
            })?;
            if let Some(k) = params
                .keys()
                .find(|k| !matches!(k.as_str(), "input" | "topology" | "timeline"))
            {
                return Err(ReplayError::param(
                    k,
                    "unknown Bandela parameter (known: input, topology, timeline)",
                ));
            }
            let timeline = params
                .get("timeline")
                .is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
            let inp = benchlake_formats::bandela::BandelaInput::read(input)?;
            let files = crate::bandela::rank_files(trace)?;
            match params.get("topology") {
                Some(lib) => {
                    let mut plugin = crate::bandela::CPlugin::load(Path::new(lib))?;
                    crate::bandela::simulate_opts(&files, &inp, Some(&mut plugin), timeline)
                }
                None => crate::bandela::simulate_opts(&files, &inp, None, timeline),
            }
        }
        other => Err(ReplayError::param(
            "model",
            format!("unknown model '{other}' (known: dimemas, bandela)"),
        )),
    }
}

/// The points of a sweep grid (parameter → values), in a deterministic order (keys
/// sorted, last key varying fastest): one replay job per point.
pub fn sweep_points(grid: &BTreeMap<String, Vec<String>>) -> Vec<BTreeMap<String, String>> {
    let mut points = vec![BTreeMap::new()];
    for (k, values) in grid {
        let mut next = Vec::with_capacity(points.len() * values.len());
        for p in &points {
            for v in values {
                let mut q = p.clone();
                q.insert(k.clone(), v.clone());
                next.push(q);
            }
        }
        points = next;
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_grid_is_the_cartesian_product() {
        let mut g = BTreeMap::new();
        g.insert(
            "latency".to_string(),
            vec!["5e-6".to_string(), "5e-5".to_string()],
        );
        g.insert(
            "bandwidth".to_string(),
            vec!["100".into(), "1000".into(), "10000".into()],
        );
        let pts = sweep_points(&g);
        assert_eq!(pts.len(), 6);
        assert_eq!(pts[0].get("bandwidth").map(String::as_str), Some("100"));
        assert_eq!(pts[0].get("latency").map(String::as_str), Some("5e-6"));
        assert_eq!(pts[1].get("latency").map(String::as_str), Some("5e-5"));
        assert_eq!(pts[5].get("bandwidth").map(String::as_str), Some("10000"));
        assert_eq!(sweep_points(&BTreeMap::new()).len(), 1);
    }
}
