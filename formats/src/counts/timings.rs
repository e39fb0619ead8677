//! Reader of the timing files (`alltoallv_execution_times.rank<L>_comm<K>_job<J>.md`
//! and `alltoallv_late_arrival_times…`): `FORMAT_VERSION: 9`, then per call a
//! `# Call C` line and one time in seconds per communicator rank. Streams the
//! values to a callback (these files reach gigabytes at scale).
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::lines::{Lines, labelled_uint, trim_end};
use crate::error::{FormatError, Result};

/// The longest time of one call accepted (s): 10^7 s, 116 days, longer
/// than any batch system lets a job run.
pub const MAX_CALL_S: f64 = 1e7;

/// Reads the `FORMAT_VERSION: V` line that opens the timing, location, backtrace
/// and comm-data files; returns V (other versions are read but logged).
pub fn format_version<R: BufRead>(l: &mut Lines<R>) -> Result<u64> {
    if !l.skip_blank()? {
        return Err(l.error_at(
            "FORMAT_VERSION",
            1,
            1,
            "empty file, expected 'FORMAT_VERSION: 9'",
        ));
    }
    let v = labelled_uint(l, "FORMAT_VERSION: ", "FORMAT_VERSION", u32::MAX as u64)?;
    if v != 9 {
        tracing::warn!(file = %l.path().display(), version = v, "format version is not 9");
    }
    Ok(v)
}

/// Streams `(call_id, comm_rank, seconds)` of a timing file to `f`. Every call
/// must list the same number of ranks.
pub fn read_file(path: &Path, f: impl FnMut(u64, u64, f64)) -> Result<()> {
    let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
    read(BufReader::new(file), path, f)
}

/// As [`read_file`] over any reader.
pub fn read<R: BufRead>(reader: R, path: &Path, f: impl FnMut(u64, u64, f64)) -> Result<()> {
    read_calls(reader, path, None, f)
}

/// [`read_file`], refusing a call that is not one of `calls` (the lead
/// rank's calls, as its count files list them) when they are known.
pub fn read_file_of(
    path: &Path,
    calls: Option<&std::collections::BTreeSet<u64>>,
    f: impl FnMut(u64, u64, f64),
) -> Result<()> {
    let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
    read_calls(BufReader::new(file), path, calls, f)
}

fn read_calls<R: BufRead>(
    reader: R,
    path: &Path,
    calls: Option<&std::collections::BTreeSet<u64>>,
    mut f: impl FnMut(u64, u64, f64),
) -> Result<()> {
    let mut l = Lines::new(reader, path).record("time");
    format_version(&mut l)?;
    let mut ranks_per_call: Option<u64> = None;
    let mut call: Option<(u64, u64)> = None; // (call id, values so far)
    let mut last_call: Option<u64> = None;
    // The profiler (and our tracer) write a blank line after each call's values;
    // a file that ends without it was cut at a line boundary inside the call.
    let mut closed = true;
    let close = |l: &Lines<R>, call: Option<(u64, u64)>, per: &mut Option<u64>| -> Result<()> {
        if let Some((c, n)) = call {
            match *per {
                None if n == 0 => {
                    return Err(l.error("timings", 1, format!("call {c} has no values")));
                }
                None => *per = Some(n),
                Some(p) if p != n => {
                    return Err(l.error(
                        "timings",
                        1,
                        format!("call {c} has {n} values, earlier calls have {p}"),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    };
    while l.advance()? {
        let t = trim_end(l.text());
        if t.is_empty() {
            closed = true;
            continue;
        }
        if t.starts_with(b"# Call ") {
            close(&l, call, &mut ranks_per_call)?;
            let c = labelled_uint(&l, "# Call ", "call", i64::MAX as u64)?;
            if let Some(known) = calls
                && !known.contains(&c)
            {
                return Err(l.error(
                    "call",
                    8,
                    format!(
                        "call {c} is not a call of the lead rank's count files ({} calls, {}..={})",
                        known.len(),
                        known.first().copied().unwrap_or(0),
                        known.last().copied().unwrap_or(0)
                    ),
                ));
            }
            if last_call.is_some_and(|p| c <= p) {
                return Err(l.error(
                    "call",
                    8,
                    format!("call {c} is not after the previous call"),
                ));
            }
            last_call = Some(c);
            call = Some((c, 0));
            closed = false;
            continue;
        }
        let Some((c, n)) = call.as_mut() else {
            return Err(l.error("call", 1, "expected '# Call C'"));
        };
        let v: f64 = std::str::from_utf8(t)
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|v: &f64| v.is_finite() && (0.0..=MAX_CALL_S).contains(v))
            .ok_or_else(|| {
                l.error(
                    "time",
                    1,
                    format!("expected a time in seconds within 0..={MAX_CALL_S}"),
                )
            })?;
        f(*c, *n, v);
        closed = false;
        *n += 1;
    }
    close(&l, call, &mut ranks_per_call)?;
    if let Some((c, n)) = call
        && !closed
    {
        return Err(FormatError::malformed(
            l.path(),
            "time",
            crate::error::Position::Offset(l.consumed()),
            format!(
                "the file ends at byte {} after {n} value(s) of call {c}, without the blank line \
                 that closes every call: it is cut short",
                l.consumed()
            ),
        ));
    }
    if last_call.is_none() {
        return Err(l.no_records("call", "'# Call C' section"));
    }
    Ok(())
}
