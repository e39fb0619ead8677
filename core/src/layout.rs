//! Object-store layout (DESIGN.md §3). Every key the system writes is built here,
//! from validated ids and names, never from client-supplied paths.
//!
//! ```text
//! raw/{run_id}/{task_id}/{file}                                            immutable raw outputs
//! tables/{table}/date={YYYY-MM-DD}/run_id={run_id}/part-{job_id}.parquet   committed results
//! _staging/{job_id}/{attempt}/...                                          in-flight, never read by users
//! _work/{run_id}/...                                                       jobs' scratch of a run, never read by users
//! ```
//!
//! `_staging/` and `_work/` are garbage once their job attempt or run has ended;
//! the coordinator's reconciler removes them (it parses keys with
//! [`parse_staging_key`] and [`parse_work_key`]).
use crate::error::{Error, Result};
use crate::ids::validate_id;

/// Top-level prefix of raw outputs.
pub const RAW: &str = "raw";
/// Top-level prefix of committed tables.
pub const TABLES: &str = "tables";
/// Top-level prefix of in-flight job outputs.
pub const STAGING: &str = "_staging";
/// Top-level prefix of jobs' scratch objects, per run.
pub const WORK: &str = "_work";

/// Checks a plain file or part name: non-empty, ≤ 200 bytes, no path separators,
/// no `..`, only printable ASCII without spaces or quotes.
pub fn validate_name(field: &'static str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'='));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("'{name}' must be 1-200 characters of [A-Za-z0-9._+=-] and not '.' or '..'"),
        ))
    }
}

/// Checks a date partition value `YYYY-MM-DD`.
pub fn validate_date(date: &str) -> Result<()> {
    chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d")
        .map(|_| ())
        .map_err(|_| Error::invalid("date", format!("'{date}' is not YYYY-MM-DD")))
}

/// `raw/{run_id}/{task_id}/` (with the trailing slash).
pub fn raw_prefix(run_id: &str, task_id: &str) -> Result<String> {
    validate_id("run_id", run_id)?;
    validate_id("task_id", task_id)?;
    Ok(format!("{RAW}/{run_id}/{task_id}/"))
}

/// `raw/{run_id}/{task_id}/{file}`.
pub fn raw_key(run_id: &str, task_id: &str, file: &str) -> Result<String> {
    validate_name("file_name", file)?;
    Ok(format!("{}{file}", raw_prefix(run_id, task_id)?))
}

/// `_staging/{job_id}/{attempt}/` (with the trailing slash).
pub fn staging_prefix(job_id: &str, attempt: u32) -> Result<String> {
    validate_id("job_id", job_id)?;
    Ok(format!("{STAGING}/{job_id}/{attempt}/"))
}

/// The job id and attempt of a key `_staging/{job_id}/{attempt}/{name…}`, or
/// None when the key does not have that shape.
pub fn parse_staging_key(key: &str) -> Option<(&str, u32)> {
    let rest = key.strip_prefix(STAGING)?.strip_prefix('/')?;
    let (job, rest) = rest.split_once('/')?;
    let (attempt, name) = rest.split_once('/')?;
    if name.is_empty() || validate_id("job_id", job).is_err() {
        return None;
    }
    let attempt = attempt.parse().ok()?;
    Some((job, attempt))
}

/// `_work/{run_id}/` (with the trailing slash): scratch objects of a run's jobs
/// (analysis part results, generated replay inputs). Removed by the
/// coordinator's reconciler once the run and all its jobs have ended.
pub fn work_prefix(run_id: &str) -> Result<String> {
    validate_id("run_id", run_id)?;
    Ok(format!("{WORK}/{run_id}/"))
}

/// The run id of a key `_work/{run_id}/{name…}`, or None when the key does not
/// have that shape.
pub fn parse_work_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(WORK)?.strip_prefix('/')?;
    let (run, name) = rest.split_once('/')?;
    (!name.is_empty() && validate_id("run_id", run).is_ok()).then_some(run)
}

/// The final, deterministic key of a job's output for one table:
/// `tables/{table}/date={date}/run_id={run_id}/part-{job_id}[-{part}].parquet`.
/// A retried job writes the same key, so it overwrites instead of duplicating.
pub fn table_key(
    table: &str,
    date: &str,
    run_id: &str,
    job_id: &str,
    part: &str,
) -> Result<String> {
    validate_name("table", table)?;
    validate_date(date)?;
    validate_id("run_id", run_id)?;
    validate_id("job_id", job_id)?;
    let suffix = if part.is_empty() {
        String::new()
    } else {
        validate_name("part", part)?;
        format!("-{part}")
    };
    Ok(format!(
        "{TABLES}/{table}/date={date}/run_id={run_id}/part-{job_id}{suffix}.parquet"
    ))
}

/// `tables/{table}/` prefix.
pub fn table_prefix(table: &str) -> Result<String> {
    validate_name("table", table)?;
    Ok(format!("{TABLES}/{table}/"))
}

/// The date partition (UTC) of a time in ms since the epoch.
pub fn date_of_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::new_id;

    #[test]
    fn keys_follow_the_layout() {
        let (r, t, j) = (new_id(), new_id(), new_id());
        assert_eq!(
            raw_key(&r, &t, "out.sion").unwrap(),
            format!("raw/{r}/{t}/out.sion")
        );
        assert_eq!(
            table_key("linktest_timings", "2026-11-22", &r, &j, "").unwrap(),
            format!("tables/linktest_timings/date=2026-11-22/run_id={r}/part-{j}.parquet")
        );
        assert_eq!(
            table_key("replays", "2026-11-22", &r, &j, "p3").unwrap(),
            format!("tables/replays/date=2026-11-22/run_id={r}/part-{j}-p3.parquet")
        );
        assert_eq!(staging_prefix(&j, 2).unwrap(), format!("_staging/{j}/2/"));
        assert_eq!(date_of_ms(0), "1970-01-01");
        assert_eq!(work_prefix(&r).unwrap(), format!("_work/{r}/"));
    }

    #[test]
    fn staging_and_work_keys_parse_back() {
        let (r, j) = (new_id(), new_id());
        let staged = format!("{}runs.parquet", staging_prefix(&j, 3).unwrap());
        assert_eq!(parse_staging_key(&staged), Some((j.as_str(), 3)));
        let work = format!("{}counts/x/part-00001.json", work_prefix(&r).unwrap());
        assert_eq!(parse_work_key(&work), Some(r.as_str()));
        for bad in [
            format!("_staging/{j}/x/a"),
            format!("_staging/{j}/1/"),
            format!("_staging/{j}/1"),
            "_staging/not-an-id/1/a".to_string(),
            format!("_stagingx/{j}/1/a"),
            format!("tables/{j}/1/a"),
        ] {
            assert_eq!(parse_staging_key(&bad), None, "{bad}");
        }
        for bad in [
            format!("_work/{r}/"),
            format!("_work/{r}"),
            "_work/nope/a".to_string(),
            format!("_workx/{r}/a"),
        ] {
            assert_eq!(parse_work_key(&bad), None, "{bad}");
        }
    }

    #[test]
    fn hostile_names_are_refused() {
        let (r, t) = (new_id(), new_id());
        for bad in ["../x", "a/b", "", "..", "a b", "x\n"] {
            assert!(raw_key(&r, &t, bad).is_err(), "{bad:?}");
        }
        assert!(raw_key("../..", &t, "f").is_err());
        assert!(table_key("t", "2026-13-01", &r, &r, "").is_err());
    }
}
