//! A run's overall verdict from its checks: the one rule, used by the worker
//! (the `runs` table's `verdict` column) and the coordinator (GetRun,
//! ListRuns, the dashboard).
//!
//! The statuses (docs/io.md, "Outcomes"):
//! - `PASS`: judged and within its bound;
//! - `FAIL`: judged and outside its bound;
//! - `REGRESSION`: within its bound, but its series moved to a worse level
//!   and stayed there (a change point: docs/io.md, "Regressions"); a
//!   finding like FAIL: notified, and it drains a node under `drain`;
//! - `ERROR`: could not be judged (no data, bad configuration);
//! - `INCONCLUSIVE`: would fail, but the run's own measurements show it was
//!   disturbed (far more spread than its history): not a verdict on the
//!   machine;
//! - `NO_REFERENCE`: not enough history or peers yet to judge.
//!
//! Neither `INCONCLUSIVE` nor `NO_REFERENCE` is notified or drains a node.

/// Judged and within the bound.
pub const PASS: &str = "PASS";
/// Judged and outside the bound.
pub const FAIL: &str = "FAIL";
/// Within the bound, but the series stepped or drifted to a worse level.
pub const REGRESSION: &str = "REGRESSION";
/// Could not be judged.
pub const ERROR: &str = "ERROR";
/// Would fail, but the run was disturbed (its spread is far above its history).
pub const INCONCLUSIVE: &str = "INCONCLUSIVE";
/// Not enough history or peers yet.
pub const NO_REFERENCE: &str = "NO_REFERENCE";

/// Every status, worst first (the order of [`worst`]).
pub const STATUSES: &[&str] = &[FAIL, REGRESSION, ERROR, INCONCLUSIVE, NO_REFERENCE, PASS];

/// The rank of a status in [`worst`] (higher is worse); None for an
/// unknown value.
pub fn rank(status: &str) -> Option<usize> {
    STATUSES
        .iter()
        .position(|s| *s == status)
        .map(|i| STATUSES.len() - i)
}

/// The static name of a known status.
pub fn known(status: &str) -> Option<&'static str> {
    STATUSES.iter().copied().find(|s| *s == status)
}

/// Whether a status is a finding an admin is told about (notified, able to
/// drain a node): FAIL and REGRESSION; ERROR is reported as such by the
/// callers that choose to. INCONCLUSIVE and NO_REFERENCE never are.
pub fn is_failure(status: &str) -> bool {
    status == FAIL || status == REGRESSION
}

/// Whether a status says nothing about the machine's health yet:
/// INCONCLUSIVE and NO_REFERENCE (shown grey, never green, never notified).
pub fn is_undecided(status: &str) -> bool {
    status == INCONCLUSIVE || status == NO_REFERENCE
}

/// The worst of `statuses`: FAIL > REGRESSION > ERROR > INCONCLUSIVE >
/// NO_REFERENCE > PASS (DESIGN.md §6, extended in docs/architecture.md); None when there is
/// none (no check ran). Other values are ignored.
pub fn worst<'a>(statuses: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let mut best: Option<&'static str> = None;
    for s in statuses {
        let Some(this) = known(s) else {
            continue;
        };
        if best.is_none_or(|b| rank(this) > rank(b)) {
            best = Some(this);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_beats_error_beats_pass() {
        assert_eq!(worst(["PASS", "ERROR", "PASS"]), Some("ERROR"));
        assert_eq!(worst(["PASS", "FAIL", "ERROR"]), Some("FAIL"));
        assert_eq!(worst(["PASS"]), Some("PASS"));
        assert_eq!(worst([]), None);
        assert_eq!(worst(["?"]), None);
    }

    #[test]
    fn undecided_statuses_rank_between_error_and_pass() {
        assert_eq!(worst(["PASS", "NO_REFERENCE"]), Some("NO_REFERENCE"));
        assert_eq!(
            worst(["NO_REFERENCE", "INCONCLUSIVE", "PASS"]),
            Some("INCONCLUSIVE")
        );
        assert_eq!(worst(["INCONCLUSIVE", "ERROR"]), Some("ERROR"));
        assert_eq!(worst(["INCONCLUSIVE", "FAIL", "ERROR"]), Some("FAIL"));
        assert!(is_undecided("NO_REFERENCE") && is_undecided("INCONCLUSIVE"));
        assert!(!is_undecided("PASS") && !is_failure("INCONCLUSIVE"));
    }

    #[test]
    fn regression_ranks_between_fail_and_error() {
        assert_eq!(worst(["PASS", "REGRESSION", "ERROR"]), Some("REGRESSION"));
        assert_eq!(worst(["REGRESSION", "FAIL"]), Some("FAIL"));
        assert_eq!(
            worst(["NO_REFERENCE", "REGRESSION", "INCONCLUSIVE"]),
            Some("REGRESSION")
        );
        assert!(is_failure("REGRESSION") && is_failure("FAIL") && !is_failure("ERROR"));
        assert!(!is_undecided("REGRESSION"));
        assert_eq!(rank("REGRESSION"), Some(5));
    }
}
