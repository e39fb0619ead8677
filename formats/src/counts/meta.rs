//! Readers of the small per-communicator files: locations
//! (`alltoallv_locations_comm<K>_rank<L>.md`: world ranks, PIDs and hosts of a
//! communicator), backtraces (`alltoallv_backtrace_rank<L>_trace<T>.md`: a stack
//! and the calls made from it) and comm data (`alltoallv_comm_data_rank<L>.md`:
//! the communicators a rank leads). These files are small and are read whole.
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::lines::{Lines, find, labelled_uint, trim_end};
use super::ranklist::{self, CallList, Span};
use super::timings::format_version;
use crate::error::{FormatError, Result};

/// Most ranks a location block may list (bounds list expansion).
const MAX_LIST: u64 = 1 << 24;

/// One communicator of a location file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// `Communicator ID`.
    pub comm_id: u64,
    /// `Calls`.
    pub calls: CallList,
    /// World rank of each comm rank.
    pub world_ranks: Vec<u64>,
    /// PID of each comm rank.
    pub pids: Vec<u64>,
    /// Host of each comm rank.
    pub hosts: Vec<String>,
}

/// One context of a backtrace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BacktraceContext {
    /// `# Context i`.
    pub context_id: u64,
    /// `Communicator`.
    pub comm_id: u64,
    /// `Communicator rank`.
    pub comm_rank: u64,
    /// `COMM_WORLD rank`.
    pub world_rank: u64,
    /// `Calls`.
    pub calls: CallList,
}

/// A backtrace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backtrace {
    /// Program path.
    pub executable: String,
    /// Process id.
    pub pid: u64,
    /// `backtrace_symbols` lines.
    pub frames: Vec<String>,
    /// The contexts.
    pub contexts: Vec<BacktraceContext>,
}

fn open(path: &Path) -> Result<Lines<BufReader<File>>> {
    let f = File::open(path).map_err(|e| FormatError::io(path, e))?;
    Ok(Lines::new(BufReader::new(f), path))
}

fn next<R: BufRead>(l: &mut Lines<R>, what: &str) -> Result<()> {
    if l.skip_blank()? {
        Ok(())
    } else {
        Err(l.error_at(
            what,
            l.number() + 1,
            1,
            format!("unexpected end of file, expected '{what}'"),
        ))
    }
}

/// Parses `PREFIX LIST` on the current line.
fn labelled_list<R: BufRead>(
    l: &Lines<R>,
    prefix: &str,
    field: &str,
    ordered: bool,
) -> Result<Vec<Span>> {
    let t = trim_end(l.text());
    let Some(rest) = t.strip_prefix(prefix.as_bytes()) else {
        return Err(l.error(field, 1, format!("expected '{prefix}LIST'")));
    };
    let r = if ordered {
        ranklist::parse_ordered(rest)
    } else {
        ranklist::parse(rest)
    };
    r.map_err(|e| l.error(field, prefix.len() + e.offset + 1, e.message))
}

fn expand<R: BufRead>(l: &Lines<R>, spans: &[Span], field: &str) -> Result<Vec<u64>> {
    ranklist::expand(spans, MAX_LIST)
        .ok_or_else(|| l.error(field, 1, format!("more than {MAX_LIST} entries")))
}

/// Reads a location file.
pub fn read_locations(path: &Path) -> Result<Vec<Location>> {
    read_locations_from(open(path)?)
}

/// As [`read_locations`] over any reader.
pub fn read_locations_from<R: BufRead>(mut l: Lines<R>) -> Result<Vec<Location>> {
    format_version(&mut l)?;
    let mut out = Vec::new();
    loop {
        if !l.skip_blank()? {
            break;
        }
        let comm_id = labelled_uint(&l, "Communicator ID: ", "Communicator ID", i64::MAX as u64)?;
        next(&mut l, "Calls")?;
        let calls = CallList(labelled_list(&l, "Calls: ", "Calls", false)?);
        next(&mut l, "COMM_WORLD ranks")?;
        let spans = labelled_list(&l, "COMM_WORLD ranks: ", "COMM_WORLD ranks", true)?;
        let world_ranks = expand(&l, &spans, "COMM_WORLD ranks")?;
        next(&mut l, "PIDs")?;
        let spans = labelled_list(&l, "PIDs: ", "PIDs", true)?;
        let pids = expand(&l, &spans, "PIDs")?;
        if pids.len() != world_ranks.len() {
            return Err(l.error(
                "PIDs",
                7,
                format!("{} PIDs for {} ranks", pids.len(), world_ranks.len()),
            ));
        }
        next(&mut l, "Hostnames")?;
        if trim_end(l.text()) != b"Hostnames:" {
            return Err(l.error("Hostnames", 1, "expected 'Hostnames:'"));
        }
        let mut hosts = Vec::with_capacity(world_ranks.len().min(1 << 16));
        while hosts.len() < world_ranks.len() {
            if !l.advance()? {
                return Err(l.error_at(
                    "Hostnames",
                    l.number() + 1,
                    1,
                    format!("{} hostnames for {} ranks", hosts.len(), world_ranks.len()),
                ));
            }
            let t = trim_end(l.text());
            let t2 = t.strip_prefix(b"\t").unwrap_or(t);
            let col = t.len() - t2.len();
            let Some(rest) = t2.strip_prefix(b"Rank ") else {
                return Err(l.error("Hostnames", col + 1, "expected 'Rank i: HOST'"));
            };
            let Some(c) = find(rest, b": ") else {
                return Err(l.error("Hostnames", col + 6, "expected 'Rank i: HOST'"));
            };
            let i = super::lines::parse_uint(rest.get(..c).unwrap_or_default(), MAX_LIST)
                .map_err(|_| l.error("Hostnames", col + 6, "expected a rank"))?;
            if i != hosts.len() as u64 {
                return Err(l.error(
                    "Hostnames",
                    col + 6,
                    format!("expected rank {}, found {i}", hosts.len()),
                ));
            }
            let host = String::from_utf8_lossy(rest.get(c + 2..).unwrap_or_default()).into_owned();
            hosts.push(host);
        }
        out.push(Location {
            comm_id,
            calls,
            world_ranks,
            pids,
            hosts,
        });
    }
    if out.is_empty() {
        return Err(l.no_records("Communicator ID", "'Communicator ID:' block"));
    }
    Ok(out)
}

/// Reads a backtrace file.
pub fn read_backtrace(path: &Path) -> Result<Backtrace> {
    read_backtrace_from(open(path)?)
}

/// As [`read_backtrace`] over any reader.
pub fn read_backtrace_from<R: BufRead>(mut l: Lines<R>) -> Result<Backtrace> {
    format_version(&mut l)?;
    next(&mut l, "stack trace for")?;
    let t = trim_end(l.text());
    let Some(rest) = t.strip_prefix(b"stack trace for ") else {
        return Err(l.error("stack trace", 1, "expected 'stack trace for PATH pid=PID'"));
    };
    let Some(p) = rest.windows(5).rposition(|w| w == b" pid=") else {
        return Err(l.error("stack trace", 17, "missing ' pid=' after the program path"));
    };
    let executable = String::from_utf8_lossy(rest.get(..p).unwrap_or_default()).into_owned();
    let pid = super::lines::parse_uint(rest.get(p + 5..).unwrap_or_default(), i64::MAX as u64)
        .map_err(|_| l.error("pid", 17 + p + 5, "expected a process id"))?;
    next(&mut l, "# Trace")?;
    if trim_end(l.text()) != b"# Trace" {
        return Err(l.error("# Trace", 1, "expected '# Trace'"));
    }
    let mut frames = Vec::new();
    let mut contexts = Vec::new();
    // Frames until the first context header; blank lines separate sections.
    while l.advance()? {
        let t = trim_end(l.text());
        if t.is_empty() {
            continue;
        }
        if t.starts_with(b"# Context ") {
            l.unread();
            break;
        }
        frames.push(String::from_utf8_lossy(t).into_owned());
    }
    while l.skip_blank()? {
        let context_id = labelled_uint(&l, "# Context ", "context", i64::MAX as u64)?;
        next(&mut l, "Communicator")?;
        let comm_id = labelled_uint(&l, "Communicator: ", "Communicator", i64::MAX as u64)?;
        next(&mut l, "Communicator rank")?;
        let comm_rank = labelled_uint(
            &l,
            "Communicator rank: ",
            "Communicator rank",
            i64::MAX as u64,
        )?;
        next(&mut l, "COMM_WORLD rank")?;
        let world_rank =
            labelled_uint(&l, "COMM_WORLD rank: ", "COMM_WORLD rank", i64::MAX as u64)?;
        next(&mut l, "Calls")?;
        let calls = CallList(labelled_list(&l, "Calls: ", "Calls", false)?);
        contexts.push(BacktraceContext {
            context_id,
            comm_id,
            comm_rank,
            world_rank,
            calls,
        });
    }
    if contexts.is_empty() {
        return Err(l.no_records("# Context", "'# Context' block"));
    }
    Ok(Backtrace {
        executable,
        pid,
        frames,
        contexts,
    })
}

/// Reads a comm-data file: `(comm_id, world rank of the lead)` pairs.
pub fn read_comm_data(path: &Path) -> Result<Vec<(u64, u64)>> {
    read_comm_data_from(open(path)?)
}

/// As [`read_comm_data`] over any reader.
pub fn read_comm_data_from<R: BufRead>(mut l: Lines<R>) -> Result<Vec<(u64, u64)>> {
    format_version(&mut l)?;
    let mut out = Vec::new();
    while l.skip_blank()? {
        let t = trim_end(l.text());
        let Some(rest) = t.strip_prefix(b"ID: ") else {
            return Err(l.error("ID", 1, "expected 'ID: K; world rank: L'"));
        };
        let Some(s) = find(rest, b"; world rank: ") else {
            return Err(l.error("ID", 5, "expected 'ID: K; world rank: L'"));
        };
        let k = super::lines::parse_uint(rest.get(..s).unwrap_or_default(), i64::MAX as u64)
            .map_err(|_| l.error("ID", 5, "expected a communicator id"))?;
        let w = super::lines::parse_uint(rest.get(s + 14..).unwrap_or_default(), i64::MAX as u64)
            .map_err(|_| l.error("world rank", 4 + s + 15, "expected a rank"))?;
        out.push((k, w));
    }
    if out.is_empty() {
        return Err(l.no_records("ID", "'ID: K; world rank: L' line"));
    }
    Ok(out)
}
