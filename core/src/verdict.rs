//! A run's overall verdict from its checks: the one rule, used by the worker
//! (the `runs` table's `verdict` column) and the coordinator (GetRun,
//! ListRuns, the dashboard).

/// The worst of `statuses`: FAIL > ERROR > PASS (DESIGN.md §6); None when
/// there is none (no check ran). Other values are ignored.
pub fn worst<'a>(statuses: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let rank = |v: &str| match v {
        "FAIL" => 3,
        "ERROR" => 2,
        "PASS" => 1,
        _ => 0,
    };
    let mut best: Option<&'static str> = None;
    for s in statuses {
        let this = match s {
            "FAIL" => "FAIL",
            "ERROR" => "ERROR",
            "PASS" => "PASS",
            _ => continue,
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
}
