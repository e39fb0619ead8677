//! The public entry point: replay a trace with a named model and sweep-point
//! parameters.
use std::collections::BTreeMap;
use std::path::Path;

use crate::error::Result;
use crate::result::ReplayResult;

/// Replays `trace` with the model named `model` (see [`crate::models`]) and
/// the sweep-point overrides `params` (names in docs/replay.md; for Dimemas
/// see [`crate::dimemas::PARAM_NAMES`]). An unknown model is an error listing
/// the known ones.
pub fn run_replay(
    model: &str,
    trace: &Path,
    params: &BTreeMap<String, String>,
) -> Result<ReplayResult> {
    crate::models::get(model)?.replay(trace, params)
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
