//! Identifiers: runs, tasks, jobs and schedules are ULIDs (sortable by creation time).
use crate::error::{Error, Result};

/// A new ULID string (26 chars, Crockford base32, time-ordered).
pub fn new_id() -> String {
    ulid::Ulid::new().to_string()
}

/// A new ULID for the given time in milliseconds since the epoch (for deterministic tests).
pub fn new_id_at(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    ulid::Ulid::from_datetime(t).to_string()
}

/// When `id` (a ULID) was made, in milliseconds since the epoch; None when
/// it is not a ULID.
pub fn time_ms_of(id: &str) -> Option<i64> {
    ulid::Ulid::from_string(id)
        .ok()
        .map(|u| i64::try_from(u.timestamp_ms()).unwrap_or(i64::MAX))
}

/// Checks that `id` is a ULID, so it can be used in object keys safely.
pub fn validate_id(field: &'static str, id: &str) -> Result<()> {
    ulid::Ulid::from_string(id)
        .map(|_| ())
        .map_err(|e| Error::invalid(field, format!(
            "'{id}' is not a valid id: a ULID is expected (26 characters of Crockford base32, e.g. 01JD3Q6Z5YV9C2M4T8N0R7K1PX) ({e})"
        )))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn an_id_tells_when_it_was_made() {
        assert_eq!(
            time_ms_of(&new_id_at(1_795_392_000_123)),
            Some(1_795_392_000_123)
        );
        assert_eq!(time_ms_of("not-an-id"), None);
    }

    #[test]
    fn ids_validate_and_reject_paths() {
        let id = new_id();
        assert_eq!(id.len(), 26);
        validate_id("run_id", &id).unwrap();
        let e = validate_id("run_id", "../../etc/passwd")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a ULID is expected"), "{e}");
        assert!(new_id_at(1_000) < new_id_at(2_000));
    }
}
