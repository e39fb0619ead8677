//! Object-store layout (DESIGN.md §3). Every key the system writes is built here,
//! from validated ids and names, never from client-supplied paths.
//!
//! ```text
//! raw/{run_id}/{task_id}/{file}                                            immutable raw outputs
//! raw/{run_id}/bundle.tar.zst                                              a run's per-node raw outputs in one object
//! tables/{table}/year={YYYY}/month={MM}/part-{date}-{run_id}-{job_id}.parquet  committed results
//! reports/{run_id}/counts/{analysis}/{file}                                text reports of a counts analysis
//! _staging/{job_id}/{attempt}/...                                          in-flight, never read by users
//! _work/{run_id}/counts/{analysis}/part-{index}.json                       a counts analysis' part results
//! _work/{run_id}/traced/{job_id}/replaympi.input                           a traced run's default replay input
//! calibrations/{run_id}/calibration.json                                   a LinkTest/netprobe run's calibration (fit or why not)
//! calibrations/{run_id}/calibration.cfg | calibration.bandela              its model inputs (Dimemas, replaympi)
//! ```
//!
//! A run of a per-node kind (one small raw output per node, `hostinfo`; the
//! kind's descriptor says so) keeps its raw outputs as one object,
//! [`raw_bundle_key`]: once the run's jobs have ended its record job packs
//! them (a zstd-compressed tar whose member names are the raw keys, so
//! `tar --zstd -xf bundle.tar.zst` in the lake root restores the per-node
//! objects), reads the bundle back, and only then deletes the per-node
//! objects (`benchlake_core::lake::bundle`). A raw key stays the name of a
//! raw output after that: readers go through `Lake::get_raw` /
//! `Lake::download_raw`, which look in the run's bundle when the object is
//! gone. [`parse_raw_run`] gives the run of either kind of raw object
//! (retention ages both by it).
//!
//! `_staging/` and `_work/` are garbage once their job attempt or run has ended;
//! the coordinator's reconciler removes them (it parses keys with
//! [`parse_staging_key`] and [`parse_work_key`]). Readers of the lake parse
//! table keys back with [`parse_table_key`].
use crate::error::{Error, Result};
use crate::ids::validate_id;

/// Top-level prefix of raw outputs.
pub const RAW: &str = "raw";
/// Top-level prefix of committed tables.
pub const TABLES: &str = "tables";
/// The object a coordinator puts at the top of its lake when it starts: its
/// readers list table files from its state store, so tools that rewrite
/// table files without it (`benchlake tables compact`) refuse such a lake.
pub const COORDINATOR_MARKER: &str = "_coordinator.json";
/// Top-level prefix of in-flight job outputs.
pub const STAGING: &str = "_staging";
/// The staged part name of a `compact` job's merged file.
pub const COMPACTED_PART: &str = "compacted";
/// Top-level prefix of jobs' scratch objects, per run.
pub const WORK: &str = "_work";
/// Top-level prefix of text reports (per run).
pub const REPORTS: &str = "reports";
/// Top-level prefix of replay calibrations (per LinkTest or netprobe run).
pub const CALIBRATIONS: &str = "calibrations";
/// The files of one calibration under [`calibration_prefix`]: the document
/// (parameters, fits, nodes, or why nothing was fitted), the Dimemas
/// configuration and the replaympi input.
pub const CALIBRATION_FILES: &[&str] =
    &["calibration.json", "calibration.cfg", "calibration.bandela"];

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
    // chrono alone takes `2026-1-2`; keys need the fixed-width form.
    let b = date.as_bytes();
    let shape = b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        });
    shape
        .then(|| chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").ok())
        .flatten()
        .map(|_| ())
        .ok_or_else(|| Error::invalid("date", format!("'{date}' is not YYYY-MM-DD")))
}

/// The date partition `YYYY-MM-DD` as days since 1970-01-01 (the value of a
/// Parquet/Arrow `Date32`, which every table file's `date` column holds).
pub fn date_days(date: &str) -> Result<i32> {
    let d = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d")
        .map_err(|_| Error::invalid("date", format!("'{date}' is not YYYY-MM-DD")))?;
    i32::try_from((d - chrono::NaiveDate::default()).num_days())
        .map_err(|_| Error::invalid("date", format!("'{date}' is out of range")))
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

/// File name of a run's raw bundle under `raw/{run_id}/` (not a task id, so
/// it never meets a task's prefix).
pub const RAW_BUNDLE_FILE: &str = "bundle.tar.zst";

/// `raw/{run_id}/` (with the trailing slash): every raw object of a run, its
/// bundle included.
pub fn raw_run_prefix(run_id: &str) -> Result<String> {
    validate_id("run_id", run_id)?;
    Ok(format!("{RAW}/{run_id}/"))
}

/// `raw/{run_id}/bundle.tar.zst`: the run's bundled raw outputs.
pub fn raw_bundle_key(run_id: &str) -> Result<String> {
    Ok(format!("{}{RAW_BUNDLE_FILE}", raw_run_prefix(run_id)?))
}

/// The run id of a bundle key `raw/{run_id}/bundle.tar.zst`, or None.
pub fn parse_raw_bundle_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(RAW)?.strip_prefix('/')?;
    let (run, file) = rest.split_once('/')?;
    (file == RAW_BUNDLE_FILE && validate_id("run_id", run).is_ok()).then_some(run)
}

/// The run id of any raw object of the layout: a raw output
/// ([`parse_raw_key`]) or a run's bundle ([`parse_raw_bundle_key`]); None for
/// a key of another shape.
pub fn parse_raw_run(key: &str) -> Option<&str> {
    parse_raw_key(key)
        .map(|(run, _, _)| run)
        .or_else(|| parse_raw_bundle_key(key))
}

/// Whether `key` is a key (or a prefix ending in `/`) under `raw/` that a
/// client may name: no `..` and no empty segment. (Raw keys are built by
/// [`raw_key`]; this checks one handed back by a client or a job spec.)
pub fn is_raw_key(key: &str) -> bool {
    key.strip_prefix(RAW)
        .is_some_and(|rest| rest.starts_with('/'))
        && !key.contains("..")
        && !key.contains("//")
}

/// The run id, task id and file name of a key `raw/{run_id}/{task_id}/{file}`,
/// or None when the key does not have that shape.
pub fn parse_raw_key(key: &str) -> Option<(&str, &str, &str)> {
    let rest = key.strip_prefix(RAW)?.strip_prefix('/')?;
    let (run, rest) = rest.split_once('/')?;
    let (task, file) = rest.split_once('/')?;
    (validate_id("run_id", run).is_ok()
        && validate_id("task_id", task).is_ok()
        && validate_name("file_name", file).is_ok())
    .then_some((run, task, file))
}

/// `_staging/{job_id}/` (with the trailing slash): every attempt of a job.
pub fn staging_job_prefix(job_id: &str) -> Result<String> {
    validate_id("job_id", job_id)?;
    Ok(format!("{STAGING}/{job_id}/"))
}

/// `_staging/{job_id}/{attempt}/` (with the trailing slash).
pub fn staging_prefix(job_id: &str, attempt: u32) -> Result<String> {
    validate_id("job_id", job_id)?;
    Ok(format!("{STAGING}/{job_id}/{attempt}/"))
}

/// `{prefix}{table}[-{part}].parquet`: a job attempt's staged object of one
/// table, under the attempt's `prefix` (built by [`staging_prefix`]; the
/// coordinator hands it to the worker, so a prefix of another shape is
/// refused).
pub fn staged_key(prefix: &str, table: &str, part: &str) -> Result<String> {
    validate_name("table", table)?;
    let key = if part.is_empty() {
        format!("{prefix}{table}.parquet")
    } else {
        validate_name("part", part)?;
        format!("{prefix}{table}-{part}.parquet")
    };
    match parse_staging_key(&key) {
        Some((job, attempt)) if prefix == staging_prefix(job, attempt)? => Ok(key),
        _ => Err(Error::invalid(
            "staging_prefix",
            format!("'{prefix}' is not _staging/JOB/ATTEMPT/"),
        )),
    }
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

/// `_work/{run_id}/counts/{analysis}/part-{index:05}.json`: the result of
/// one part of a counts analysis (`analysis` is the plan job's id). A retried
/// part overwrites the same key.
pub fn counts_part_key(run_id: &str, analysis: &str, index: usize) -> Result<String> {
    validate_id("analysis", analysis)?;
    Ok(format!(
        "{}counts/{analysis}/part-{index:05}.json",
        work_prefix(run_id)?
    ))
}

/// `_work/{run_id}/traced/{job_id}/replaympi.input`: the replaympi input of
/// the default replay a traced run's ingest job `job_id` asks for.
pub fn traced_replay_input_key(run_id: &str, job_id: &str) -> Result<String> {
    validate_id("job_id", job_id)?;
    Ok(format!(
        "{}traced/{job_id}/replaympi.input",
        work_prefix(run_id)?
    ))
}

/// The run id of a key `_work/{run_id}/{name…}`, or None when the key does not
/// have that shape.
pub fn parse_work_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(WORK)?.strip_prefix('/')?;
    let (run, name) = rest.split_once('/')?;
    (!name.is_empty() && validate_id("run_id", run).is_ok()).then_some(run)
}

/// The final, deterministic key of a job's output for one table:
/// `tables/{table}/year={YYYY}/month={MM}/part-{date}-{run_id}-{job_id}[-{part}].parquet`.
/// A retried job writes the same key, so it overwrites instead of duplicating.
///
/// The path names the run's month (hive partitions `year` and `month`) and
/// the file name its day, run and job; the file itself carries `date` and
/// `run_id` as columns ([`crate::catalog::file_schema`]). No path segment
/// names a run, so a compacted file holding many runs' rows can sit beside
/// fresh ones under the same glob (docs/architecture.md, "Compaction").
pub fn table_key(
    table: &str,
    date: &str,
    run_id: &str,
    job_id: &str,
    part: &str,
) -> Result<String> {
    validate_id("run_id", run_id)?;
    validate_id("job_id", job_id)?;
    let suffix = if part.is_empty() {
        String::new()
    } else {
        validate_name("part", part)?;
        format!("-{part}")
    };
    Ok(format!(
        "{}part-{date}-{run_id}-{job_id}{suffix}.parquet",
        month_table_prefix(table, date)?
    ))
}

/// `tables/{table}/` prefix.
pub fn table_prefix(table: &str) -> Result<String> {
    validate_name("table", table)?;
    Ok(format!("{TABLES}/{table}/"))
}

/// `tables/{table}/year={YYYY}/month={MM}/`: the month partition that holds
/// the table's objects of `date` (filter the listing by [`parse_table_key`]'s
/// `date` or `run_id`).
pub fn month_table_prefix(table: &str, date: &str) -> Result<String> {
    validate_date(date)?;
    let (year, month) = (&date[..4], &date[5..7]);
    Ok(format!(
        "{}year={year}/month={month}/",
        table_prefix(table)?
    ))
}

/// `tables/{table}/**/*.parquet`: the glob DuckDB and Spark read a table
/// with (relative to the lake root; `hive_partitioning` adds `year` and
/// `month`; `date` and `run_id` are columns of every file).
pub fn table_glob(table: &str) -> Result<String> {
    Ok(format!("{}**/*.parquet", table_prefix(table)?))
}

/// The parts of a committed table key (see [`table_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableKey<'a> {
    /// Catalog table.
    pub table: &'a str,
    /// The run's day, `YYYY-MM-DD`.
    pub date: &'a str,
    /// The run the rows belong to.
    pub run_id: &'a str,
    /// The job that wrote the object.
    pub job_id: &'a str,
    /// The part suffix (empty when the job wrote one object of the table).
    pub part: &'a str,
}

/// The four segments of a key `tables/{a}/{b}/{c}/{d}`, or None.
fn table_segments(key: &str) -> Option<(&str, &str, &str, &str)> {
    let rest = key.strip_prefix(TABLES)?.strip_prefix('/')?;
    let mut it = rest.split('/');
    let four = (it.next()?, it.next()?, it.next()?, it.next()?);
    it.next().is_none().then_some(four)
}

/// Length of a ULID (run and job ids).
const ID_LEN: usize = 26;

/// The parts of a key
/// `tables/{table}/year={YYYY}/month={MM}/part-{date}-{run_id}-{job_id}[-{part}].parquet`
/// (whose year and month agree with its date), or None when the key does not
/// have that shape (an object someone else put in the lake is no part of a
/// table; a key of the layout before 2026-12 is [`parse_legacy_table_key`]'s).
pub fn parse_table_key(key: &str) -> Option<TableKey<'_>> {
    let (table, year, month, file) = table_segments(key)?;
    let year = year.strip_prefix("year=")?;
    let month = month.strip_prefix("month=")?;
    let stem = file.strip_prefix("part-")?.strip_suffix(".parquet")?;
    let date = stem.get(..10)?;
    let run_id = stem.get(11..11 + ID_LEN)?;
    let job_id = stem.get(12 + ID_LEN..12 + 2 * ID_LEN)?;
    let tail = stem.get(12 + 2 * ID_LEN..)?;
    let part = match tail.strip_prefix('-') {
        Some(p) if !p.is_empty() => p,
        None if tail.is_empty() => "",
        _ => return None,
    };
    let ok = stem.as_bytes().get(10) == Some(&b'-')
        && stem.as_bytes().get(11 + ID_LEN) == Some(&b'-')
        && validate_name("table", table).is_ok()
        && validate_date(date).is_ok()
        && date.get(..4) == Some(year)
        && date.get(5..7) == Some(month)
        && validate_id("run_id", run_id).is_ok()
        && validate_id("job_id", job_id).is_ok()
        && (part.is_empty() || validate_name("part", part).is_ok());
    ok.then_some(TableKey {
        table,
        date,
        run_id,
        job_id,
        part,
    })
}

/// `tables/{table}/year={YYYY}/month={MM}/compacted-{first_date}-{id}.parquet`:
/// a merged file of the month of `first_date` (its earliest day), named by a
/// ULID `id` (new for each attempt of a merge, so a copy an attempt never
/// recorded is not overwritten by a later one's and can be deleted).
pub fn compacted_key(table: &str, first_date: &str, id: &str) -> Result<String> {
    validate_id("id", id)?;
    Ok(format!(
        "{}compacted-{first_date}-{id}.parquet",
        month_table_prefix(table, first_date)?
    ))
}

/// A table object: a committed part or a merged file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFile<'a> {
    /// One job's rows of one run ([`table_key`]).
    Part(TableKey<'a>),
    /// Several runs' rows ([`compacted_key`]); its footer says which.
    Compacted {
        /// Catalog table.
        table: &'a str,
        /// Its earliest day.
        first_date: &'a str,
        /// The merge's id.
        id: &'a str,
    },
}

/// A part ([`parse_table_key`]) or a merged file ([`compacted_key`]) of the
/// `year=/month=` layout, or None.
pub fn parse_table_file(key: &str) -> Option<TableFile<'_>> {
    if let Some(k) = parse_table_key(key) {
        return Some(TableFile::Part(k));
    }
    let (table, year, month, file) = table_segments(key)?;
    let stem = file.strip_prefix("compacted-")?.strip_suffix(".parquet")?;
    let first_date = stem.get(..10)?;
    let id = stem.get(11..)?;
    let ok = stem.as_bytes().get(10) == Some(&b'-')
        && validate_name("table", table).is_ok()
        && validate_date(first_date).is_ok()
        && year.strip_prefix("year=") == first_date.get(..4)
        && month.strip_prefix("month=") == first_date.get(5..7)
        && validate_id("id", id).is_ok();
    ok.then_some(TableFile::Compacted {
        table,
        first_date,
        id,
    })
}

/// The parts of a key of the layout before 2026-12,
/// `tables/{table}/date={date}/run_id={run_id}/part-{job_id}[-{part}].parquet`,
/// which `benchlake tables migrate` (and the coordinator at start) move to
/// [`table_key`]: the file gains its `date` column and its new key.
pub fn parse_legacy_table_key(key: &str) -> Option<TableKey<'_>> {
    let (table, date, run, file) = table_segments(key)?;
    let date = date.strip_prefix("date=")?;
    let run_id = run.strip_prefix("run_id=")?;
    let stem = file.strip_prefix("part-")?.strip_suffix(".parquet")?;
    let (job_id, part) = stem.split_once('-').unwrap_or((stem, ""));
    let ok = validate_name("table", table).is_ok()
        && validate_date(date).is_ok()
        && validate_id("run_id", run_id).is_ok()
        && validate_id("job_id", job_id).is_ok()
        && (part.is_empty() || validate_name("part", part).is_ok());
    ok.then_some(TableKey {
        table,
        date,
        run_id,
        job_id,
        part,
    })
}

/// `reports/{run_id}/` (with the trailing slash): every report of a run.
pub fn reports_prefix(run_id: &str) -> Result<String> {
    validate_id("run_id", run_id)?;
    Ok(format!("{REPORTS}/{run_id}/"))
}

/// `reports/{run_id}/{rel}/` (with the trailing slash) for a relative prefix
/// a client names (`counts/{analysis}`; empty = every report of the run):
/// each of its `/`-separated segments must be a plain name.
pub fn reports_under(run_id: &str, rel: &str) -> Result<String> {
    let mut out = reports_prefix(run_id)?;
    for seg in rel.split('/').filter(|s| !s.is_empty()) {
        validate_name("prefix", seg)?;
        out.push_str(seg);
        out.push('/');
    }
    Ok(out)
}

/// The part of `prefix` below `reports/{run_id}/` (what [`reports_under`]
/// takes back), or None when `prefix` is not under that run's reports.
pub fn reports_rel<'a>(run_id: &str, prefix: &'a str) -> Option<&'a str> {
    prefix
        .strip_prefix(REPORTS)?
        .strip_prefix('/')?
        .strip_prefix(run_id)?
        .strip_prefix('/')
}

/// `reports/{run_id}/counts/{analysis}/` (with the trailing slash): the text
/// reports of one counts analysis (`analysis` is its plan job's id).
pub fn counts_reports_prefix(run_id: &str, analysis: &str) -> Result<String> {
    validate_id("analysis", analysis)?;
    Ok(format!("{}counts/{analysis}/", reports_prefix(run_id)?))
}

/// `reports/{run_id}/counts/{analysis}/{file}`: one text report.
pub fn counts_report_key(run_id: &str, analysis: &str, file: &str) -> Result<String> {
    validate_name("report", file)?;
    Ok(format!(
        "{}{file}",
        counts_reports_prefix(run_id, analysis)?
    ))
}

/// `calibrations/` (with the trailing slash): every calibration in the lake.
pub fn calibrations_prefix() -> String {
    format!("{CALIBRATIONS}/")
}

/// `calibrations/{run_id}/` (with the trailing slash): the calibration fitted
/// after the LinkTest or netprobe run `run_id` (its id is the run's).
pub fn calibration_prefix(run_id: &str) -> Result<String> {
    validate_id("calibration", run_id)?;
    Ok(format!("{CALIBRATIONS}/{run_id}/"))
}

/// `calibrations/{run_id}/{file}`, `file` one of [`CALIBRATION_FILES`].
pub fn calibration_key(run_id: &str, file: &str) -> Result<String> {
    if !CALIBRATION_FILES.contains(&file) {
        return Err(Error::invalid(
            "calibration_file",
            format!("'{file}' is not one of {}", CALIBRATION_FILES.join(", ")),
        ));
    }
    Ok(format!("{}{file}", calibration_prefix(run_id)?))
}

/// The calibration id and file of a key `calibrations/{run_id}/{file}`, or
/// None when the key does not have that shape.
pub fn parse_calibration_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(CALIBRATIONS)?.strip_prefix('/')?;
    let (id, file) = rest.split_once('/')?;
    (validate_id("calibration", id).is_ok() && CALIBRATION_FILES.contains(&file))
        .then_some((id, file))
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
            format!("tables/linktest_timings/year=2026/month=11/part-2026-11-22-{r}-{j}.parquet")
        );
        assert_eq!(
            table_key("replays", "2026-11-22", &r, &j, "p3").unwrap(),
            format!("tables/replays/year=2026/month=11/part-2026-11-22-{r}-{j}-p3.parquet")
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
    fn run_table_keys_parse_back() {
        let (r, j) = (new_id(), new_id());
        let prefix = month_table_prefix("io_results", "2026-11-22").unwrap();
        assert_eq!(prefix, "tables/io_results/year=2026/month=11/");
        for part in ["", "p3", "a-b"] {
            let key = table_key("io_results", "2026-11-22", &r, &j, part).unwrap();
            assert!(key.starts_with(&prefix), "{key}");
            assert_eq!(
                parse_table_key(&key),
                Some(TableKey {
                    table: "io_results",
                    date: "2026-11-22",
                    run_id: &r,
                    job_id: &j,
                    part,
                })
            );
            assert_eq!(parse_legacy_table_key(&key), None, "{key}");
        }
        let m = "tables/t/year=2026/month=11";
        for bad in [
            format!("{m}/part-2026-11-22-{r}-{j}.json"),
            format!("{m}/x-2026-11-22-{r}-{j}.parquet"),
            format!("{m}/sub/part-2026-11-22-{r}-{j}.parquet"),
            format!("{m}/part-2026-11-31-{r}-{j}.parquet"),
            format!("{m}/part-2026-12-01-{r}-{j}.parquet"),
            format!("tables/t/year=2025/month=11/part-2026-11-22-{r}-{j}.parquet"),
            format!("{m}/part-2026-11-22-{r}{j}.parquet"),
            format!("{m}/part-2026-11-22-{r}-{j}x.parquet"),
            format!("{m}/part-2026-11-22-{r}-{j}-.parquet"),
            format!("{m}/part-2026-11-22-nope-{j}.parquet"),
            format!("{m}/part-2026-11-22-{r}.parquet"),
            format!("tables/t/month=11/part-2026-11-22-{r}-{j}.parquet"),
            format!("raw/t/year=2026/month=11/part-2026-11-22-{r}-{j}.parquet"),
            format!("tables/t/date=2026-11-22/run_id={r}/part-{j}.parquet"),
            format!("{m}/part-2026-11-22-{r}-{j}-é.parquet"),
        ] {
            assert_eq!(parse_table_key(&bad), None, "{bad}");
        }
        assert!(table_key("t", "2026-11-22", "../x", &j, "").is_err());
        assert!(table_key("t/u", "2026-11-22", &r, &j, "").is_err());
        assert!(month_table_prefix("t", "2026-1-22").is_err());
        assert_eq!(table_glob("checks").unwrap(), "tables/checks/**/*.parquet");
    }

    proptest::proptest! {
        /// Any text parses without panicking; a key accepted as a table file
        /// is the key its parts build again; a real key with a byte changed
        /// is either refused or another valid key.
        #[test]
        fn any_key_parses_without_panicking(s in "\\PC{0,120}", i in 0usize..200, c in proptest::prelude::any::<char>()) {
            let check = |key: &str| {
                match parse_table_file(key) {
                    Some(TableFile::Part(k)) => {
                        proptest::prop_assert_eq!(table_key(k.table, k.date, k.run_id, k.job_id, k.part).unwrap(), key);
                    }
                    Some(TableFile::Compacted { table, first_date, id }) => {
                        proptest::prop_assert_eq!(compacted_key(table, first_date, id).unwrap(), key);
                    }
                    None => {}
                }
                let _ = parse_legacy_table_key(key);
                Ok(())
            };
            check(&s)?;
            let real = table_key("io_results", "2026-11-22", "01JD3Q6Z5YV9C2M4T8N0R7K1PX", "01JD3Q6Z5YV9C2M4T8N0R7K1PY", "p3").unwrap();
            let mut chars: Vec<char> = real.chars().collect();
            let at = i % chars.len();
            chars[at] = c;
            let changed: String = chars.into_iter().collect();
            check(&changed)?;
            let merged = compacted_key("checks", "2026-02-28", "01JD3Q6Z5YV9C2M4T8N0R7K1PX").unwrap();
            let mut chars: Vec<char> = merged.chars().collect();
            let at = i % chars.len();
            chars[at] = c;
            check(&chars.into_iter().collect::<String>())?;
        }
    }

    #[test]
    fn legacy_table_keys_parse_back() {
        let (r, j) = (new_id(), new_id());
        let old = format!("tables/io_results/date=2026-11-22/run_id={r}/part-{j}-p3.parquet");
        let k = parse_legacy_table_key(&old).unwrap();
        assert_eq!(
            (k.table, k.date, k.run_id, k.job_id, k.part),
            ("io_results", "2026-11-22", r.as_str(), j.as_str(), "p3")
        );
        assert_eq!(parse_table_key(&old), None);
        for bad in [
            format!("tables/t/date=2026-11-22/run_id={r}/part-{j}.json"),
            format!("tables/t/date=2026-13-22/run_id={r}/part-{j}.parquet"),
            format!("tables/t/date=2026-11-22/run={r}/part-{j}.parquet"),
            format!("tables/t/run_id={r}/part-{j}.parquet"),
        ] {
            assert_eq!(parse_legacy_table_key(&bad), None, "{bad}");
        }
    }

    #[test]
    fn report_keys_follow_the_layout() {
        let (r, a) = (new_id(), new_id());
        assert_eq!(reports_prefix(&r).unwrap(), format!("reports/{r}/"));
        let counts = counts_reports_prefix(&r, &a).unwrap();
        assert_eq!(counts, format!("reports/{r}/counts/{a}/"));
        assert_eq!(
            counts_report_key(&r, &a, "pattern_summary.md").unwrap(),
            format!("{counts}pattern_summary.md")
        );
        // What a client asks for, and what it reads back from a prefix.
        assert_eq!(reports_under(&r, "").unwrap(), format!("reports/{r}/"));
        assert_eq!(reports_under(&r, &format!("/counts/{a}")).unwrap(), counts);
        assert_eq!(reports_under(&r, &format!("counts//{a}/")).unwrap(), counts);
        let rel = reports_rel(&r, &counts).unwrap();
        assert_eq!(rel, format!("counts/{a}/"));
        assert_eq!(reports_under(&r, rel).unwrap(), counts);
        assert_eq!(reports_rel(&new_id(), &counts), None);
        assert_eq!(reports_rel(&r, "raw/x"), None);
        for bad in ["../x", "counts/..", "a b", "x\n"] {
            assert!(reports_under(&r, bad).is_err(), "{bad:?}");
        }
        assert!(reports_prefix("..").is_err());
        assert!(counts_reports_prefix(&r, "x/y").is_err());
        assert!(counts_report_key(&r, &a, "../evil").is_err());
    }

    #[test]
    fn work_raw_and_staging_keys_follow_the_layout() {
        let (r, t, j) = (new_id(), new_id(), new_id());
        let part = counts_part_key(&r, &j, 7).unwrap();
        assert_eq!(part, format!("_work/{r}/counts/{j}/part-00007.json"));
        assert_eq!(parse_work_key(&part), Some(r.as_str()));
        let input = traced_replay_input_key(&r, &j).unwrap();
        assert_eq!(input, format!("_work/{r}/traced/{j}/replaympi.input"));
        assert_eq!(parse_work_key(&input), Some(r.as_str()));
        assert!(counts_part_key(&r, "x", 0).is_err());
        assert!(traced_replay_input_key(&r, "../x").is_err());
        assert_eq!(staging_job_prefix(&j).unwrap(), format!("_staging/{j}/"));
        let sp = staging_prefix(&j, 2).unwrap();
        assert_eq!(
            staged_key(&sp, "runs", "").unwrap(),
            format!("_staging/{j}/2/runs.parquet")
        );
        assert_eq!(
            staged_key(&sp, "replays", "p3").unwrap(),
            format!("_staging/{j}/2/replays-p3.parquet")
        );
        assert_eq!(
            parse_staging_key(&staged_key(&sp, "runs", "").unwrap()),
            Some((j.as_str(), 2))
        );
        for bad in [
            format!("_staging/{j}/2"),
            format!("_staging/{j}/02/"),
            format!("x/_staging/{j}/2/"),
            format!("_staging/{j}/2/../"),
            String::new(),
        ] {
            assert!(staged_key(&bad, "runs", "").is_err(), "{bad}");
        }
        assert!(staged_key(&sp, "a/b", "").is_err());
        assert!(staged_key(&sp, "runs", "../x").is_err());
        assert!(
            staging_prefix(&j, 1)
                .unwrap()
                .starts_with(&staging_job_prefix(&j).unwrap())
        );
        let raw = raw_key(&r, &t, "bandela.0").unwrap();
        assert_eq!(
            parse_raw_key(&raw),
            Some((r.as_str(), t.as_str(), "bandela.0"))
        );
        assert_eq!(parse_raw_key(&raw_prefix(&r, &t).unwrap()), None);
        assert_eq!(parse_raw_key(&format!("raw/{r}/{t}/a/b")), None);
        assert_eq!(parse_raw_key("raw/x/y/z"), None);
        assert!(is_raw_key(&raw) && is_raw_key(&raw_prefix(&r, &t).unwrap()));
        for bad in [
            "raw", "rawx/a", "raw/../x", "raw/a//b", "tables/x", "/raw/a",
        ] {
            assert!(!is_raw_key(bad), "{bad}");
        }
    }

    #[test]
    fn bundle_keys_follow_the_layout() {
        let (r, t) = (new_id(), new_id());
        let b = raw_bundle_key(&r).unwrap();
        assert_eq!(b, format!("raw/{r}/bundle.tar.zst"));
        assert!(b.starts_with(&raw_run_prefix(&r).unwrap()));
        assert!(
            raw_key(&r, &t, "x")
                .unwrap()
                .starts_with(&raw_run_prefix(&r).unwrap())
        );
        assert_eq!(parse_raw_bundle_key(&b), Some(r.as_str()));
        assert_eq!(parse_raw_run(&b), Some(r.as_str()));
        assert_eq!(parse_raw_key(&b), None);
        let k = raw_key(&r, &t, "host.json").unwrap();
        assert_eq!(parse_raw_run(&k), Some(r.as_str()));
        assert_eq!(parse_raw_bundle_key(&k), None);
        // The bundle's name is no task id: a task prefix never holds it.
        assert!(validate_id("task_id", RAW_BUNDLE_FILE).is_err());
        for bad in [
            format!("raw/{r}/bundle.tar"),
            format!("raw/{r}/x/bundle.tar.zst"),
            "raw/nope/bundle.tar.zst".to_string(),
            format!("tables/{r}/bundle.tar.zst"),
            format!("raw/{r}/"),
        ] {
            assert_eq!(parse_raw_bundle_key(&bad), None, "{bad}");
            assert_eq!(parse_raw_run(&bad), None, "{bad}");
        }
        assert!(raw_bundle_key("../x").is_err());
    }

    #[test]
    fn calibration_keys_follow_the_layout() {
        let r = new_id();
        let k = calibration_key(&r, "calibration.json").unwrap();
        assert_eq!(k, format!("calibrations/{r}/calibration.json"));
        assert!(k.starts_with(&calibrations_prefix()));
        assert_eq!(
            parse_calibration_key(&k),
            Some((r.as_str(), "calibration.json"))
        );
        assert!(calibration_key(&r, "../x").is_err());
        assert!(calibration_key("latest", "calibration.json").is_err());
        assert!(calibration_prefix("../..").is_err());
        for bad in [
            format!("calibrations/{r}/other.json"),
            format!("calibrations/{r}/"),
            "calibrations/nope/calibration.json".to_string(),
            format!("raw/{r}/calibration.json"),
        ] {
            assert_eq!(parse_calibration_key(&bad), None, "{bad}");
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
