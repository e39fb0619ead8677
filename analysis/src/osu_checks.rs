//! OSU micro-benchmark health checks: a run's `osu_results` rows →
//! `checks` rows, with the same rules and verdicts as the I/O checks
//! ([`crate::io_checks::evaluate`]: absolute bound and/or the reference
//! learned from the same schedule's previous runs, [`crate::reference`]).
//! Pure: no I/O, no clock.
//!
//! Figures (each from the files of its test; the median over files when a
//! run has several):
//! - `osu.latency_us`: osu_latency's latency at the smallest message size of
//!   the sweep (a schedule keeps its sweep), lower is better: the small-message
//!   latency an MPI job sees first;
//! - `osu.bw_mb_s`: osu_bw's bandwidth at the largest size, higher is better;
//! - `osu.bibw_mb_s`: osu_bibw's bandwidth at the largest size.
//!
//! A run without one of these tests skips its rule. Each is judged against
//! its learned reference with a relative floor of [`OSU_FLOOR`]; a site sets
//! an absolute bound with `check_osu_latency_us`, `check_osu_bw_mb_s`,
//! `check_osu_bibw_mb_s` (docs/io.md, "Checks", for the other `check_*`).
use std::collections::BTreeMap;

use arrow::array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};

use crate::io_checks::{Better, IoCheckConfig, IoCheckError, rule};
use crate::reference::median;

/// Default relative floor of the learned allowance (10 % of the median).
pub const OSU_FLOOR: f64 = 0.10;

/// (benchmark, figure, which end of the sweep, better, unit).
const FIGURES: [(&str, &str, End, Better, &str); 3] = [
    (
        "osu_latency",
        "osu.latency_us",
        End::Smallest,
        Better::Lower,
        "us",
    ),
    (
        "osu_bw",
        "osu.bw_mb_s",
        End::Largest,
        Better::Higher,
        "MB/s",
    ),
    (
        "osu_bibw",
        "osu.bibw_mb_s",
        End::Largest,
        Better::Higher,
        "MB/s",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Smallest,
    Largest,
}

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> Result<&'a T, IoCheckError> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| IoCheckError::Column(name.into()))
}

/// The figures of one run from its `osu_results` batches.
pub fn figures(batches: &[RecordBatch]) -> Result<BTreeMap<String, f64>, IoCheckError> {
    // (benchmark, source) → (size, value) at each end of its sweep.
    type Ends = ((i64, f64), (i64, f64));
    let mut files: BTreeMap<(String, String), Ends> = BTreeMap::new();
    for b in batches {
        let bench = col::<StringArray>(b, "benchmark")?;
        let source = col::<StringArray>(b, "source")?;
        let size = col::<Int64Array>(b, "size_bytes")?;
        let value = col::<Float64Array>(b, "value")?;
        for i in 0..b.num_rows() {
            if bench.is_null(i) || source.is_null(i) || size.is_null(i) || value.is_null(i) {
                continue;
            }
            let p = (size.value(i), value.value(i));
            let key = (bench.value(i).to_string(), source.value(i).to_string());
            let e = files.entry(key).or_insert((p, p));
            if p.0 < e.0.0 {
                e.0 = p;
            }
            if p.0 > e.1.0 {
                e.1 = p;
            }
        }
    }
    let mut out = BTreeMap::new();
    for (bench, figure, end, _, _) in FIGURES {
        let values: Vec<f64> = files
            .iter()
            .filter(|((b, _), _)| b == bench)
            .map(|(_, (small, large))| match end {
                End::Smallest => small.1,
                End::Largest => large.1,
            })
            .collect();
        if let Some(m) = median(&values) {
            out.insert(figure.to_string(), m);
        }
    }
    Ok(out)
}

/// The default rules: every figure against its learned reference; a run
/// without a test skips its rule.
pub fn default_config() -> IoCheckConfig {
    IoCheckConfig {
        rules: FIGURES
            .iter()
            .map(|&(_, figure, _, better, unit)| {
                rule(figure, better, unit, None, Some(OSU_FLOOR)).optional()
            })
            .collect(),
        ..IoCheckConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::io_checks::evaluate;
    use benchlake_core::verdict;

    type Row<'a> = (&'a str, &'a str, i64, f64);

    fn batch(rows: &[Row<'_>]) -> RecordBatch {
        let s = |f: &dyn Fn(&Row<'_>) -> String| -> Arc<dyn Array> {
            Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
        };
        RecordBatch::try_new(
            benchlake_core::catalog::schema("osu_results").unwrap(),
            vec![
                s(&|_| "R".into()),
                s(&|r| r.1.into()),
                s(&|r| r.0.into()),
                s(&|_| "7.3".into()),
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.2).collect::<Vec<_>>(),
                )),
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r.3).collect::<Vec<_>>(),
                )),
                s(&|r| if r.0 == "osu_latency" { "us" } else { "MB/s" }.into()),
            ],
        )
        .unwrap()
    }

    #[test]
    fn small_latency_and_large_bandwidth_per_test() {
        let b = batch(&[
            ("osu_latency", "a", 1, 1.5),
            ("osu_latency", "a", 1024, 3.0),
            ("osu_latency", "b", 1, 2.5),
            ("osu_latency", "c", 1, 1.0),
            ("osu_bw", "d", 8, 10.0),
            ("osu_bw", "d", 4194304, 12000.0),
        ]);
        let f = figures(&[b]).unwrap();
        // Latency: the median over the three files of the smallest size.
        assert_eq!(f.get("osu.latency_us"), Some(&1.5));
        assert_eq!(f.get("osu.bw_mb_s"), Some(&12000.0));
        assert_eq!(f.get("osu.bibw_mb_s"), None);
        assert!(figures(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_bandwidth_drop_fails_against_its_history_and_a_missing_test_is_skipped() {
        let cfg = default_config();
        let hist: BTreeMap<String, Vec<f64>> = [
            (
                "osu.bw_mb_s".to_string(),
                vec![12000.0, 12100.0, 11900.0, 12050.0, 11950.0],
            ),
            (
                "osu.latency_us".to_string(),
                vec![1.50, 1.52, 1.49, 1.51, 1.50],
            ),
        ]
        .into();
        let now: BTreeMap<String, f64> = [
            ("osu.bw_mb_s".to_string(), 6000.0),
            ("osu.latency_us".to_string(), 1.51),
        ]
        .into();
        let rows = evaluate(&now, &hist, &cfg);
        let status = |c: &str| {
            rows.iter()
                .find(|r| r.check == c)
                .map(|r| r.status.as_str())
        };
        assert_eq!(status("osu.bw_mb_s.vs_median"), Some(verdict::FAIL));
        assert_eq!(status("osu.latency_us.vs_median"), Some(verdict::PASS));
        // osu_bibw did not run: no row, not an ERROR.
        assert!(rows.iter().all(|r| !r.check.starts_with("osu.bibw")));
        // A latency 3 × its usual fails (lower is better).
        let slow: BTreeMap<String, f64> = [("osu.latency_us".to_string(), 4.5)].into();
        let rows = evaluate(&slow, &hist, &cfg);
        assert!(
            rows.iter()
                .any(|r| r.check == "osu.latency_us.vs_median" && r.status == verdict::FAIL)
        );
    }
}
