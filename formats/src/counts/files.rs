//! Which profiler file is which: classification by file name (the names are
//! exact, see the reference §1.1) and the expansion of a profiler output
//! directory into the list of files the `counts` ingest reads.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A profiler output file, with the numbers its name carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FileKind {
    /// `send-counters.job<J>.rank<L>.txt`
    SendCounters { job: u64, lead: u64 },
    /// `recv-counters.job<J>.rank<L>.txt`
    RecvCounters { job: u64, lead: u64 },
    /// `counts.rank<L>_call<C>.md`
    PerCall { lead: u64, call: u64 },
    /// `alltoallv_execution_times.rank<L>_comm<K>_job<J>.md`
    ExecTimes { lead: u64, comm: u64, job: u64 },
    /// `alltoallv_late_arrival_times.rank<L>_comm<K>_job<J>.md`
    LateArrival { lead: u64, comm: u64, job: u64 },
    /// `alltoallv_locations_comm<K>_rank<L>.md`
    Location { comm: u64, lead: u64 },
    /// `alltoallv_backtrace_rank<L>_trace<T>.md`
    Backtrace { lead: u64, trace: u64 },
    /// `alltoallv_comm_data_rank<L>.md`
    CommData { lead: u64 },
    /// `profile_alltoallv_job<J>.rank<L>.md` (read by nobody: its figures are
    /// compiled out in the profiler and always zero).
    ProfileSummary { job: u64, lead: u64 },
}

/// Parses `<digits>` followed by `rest` at the start of `s`.
fn num<'a>(s: &'a str, rest: &str) -> Option<(u64, &'a str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 || end > 19 {
        return None;
    }
    let v = s.get(..end)?.parse().ok()?;
    let tail = s.get(end..)?.strip_prefix(rest)?;
    Some((v, tail))
}

/// Classifies a file by its name; `None` for files that are not profiler output.
pub fn classify(path: &Path) -> Option<FileKind> {
    let name = path.file_name()?.to_str()?;
    let two = |s: &str, a: &str, b: &str| -> Option<(u64, u64)> {
        let (x, r) = num(s, a)?;
        let (y, r) = num(r, b)?;
        r.is_empty().then_some((x, y))
    };
    if let Some(s) = name.strip_prefix("send-counters.job") {
        let (job, lead) = two(s, ".rank", ".txt")?;
        return Some(FileKind::SendCounters { job, lead });
    }
    if let Some(s) = name.strip_prefix("recv-counters.job") {
        let (job, lead) = two(s, ".rank", ".txt")?;
        return Some(FileKind::RecvCounters { job, lead });
    }
    if let Some(s) = name.strip_prefix("counts.rank") {
        let (lead, call) = two(s, "_call", ".md")?;
        return Some(FileKind::PerCall { lead, call });
    }
    let three = |s: &str| -> Option<(u64, u64, u64)> {
        let (l, r) = num(s, "_comm")?;
        let (k, r) = num(r, "_job")?;
        let (j, r) = num(r, ".md")?;
        r.is_empty().then_some((l, k, j))
    };
    if let Some(s) = name.strip_prefix("alltoallv_execution_times.rank") {
        let (lead, comm, job) = three(s)?;
        return Some(FileKind::ExecTimes { lead, comm, job });
    }
    if let Some(s) = name.strip_prefix("alltoallv_late_arrival_times.rank") {
        let (lead, comm, job) = three(s)?;
        return Some(FileKind::LateArrival { lead, comm, job });
    }
    if let Some(s) = name.strip_prefix("alltoallv_locations_comm") {
        let (comm, lead) = two(s, "_rank", ".md")?;
        return Some(FileKind::Location { comm, lead });
    }
    if let Some(s) = name.strip_prefix("alltoallv_backtrace_rank") {
        let (lead, trace) = two(s, "_trace", ".md")?;
        return Some(FileKind::Backtrace { lead, trace });
    }
    if let Some(s) = name.strip_prefix("alltoallv_comm_data_rank") {
        let (lead, r) = num(s, ".md")?;
        return r.is_empty().then_some(FileKind::CommData { lead });
    }
    if let Some(s) = name.strip_prefix("profile_alltoallv_job") {
        let (job, lead) = two(s, ".rank", ".md")?;
        return Some(FileKind::ProfileSummary { job, lead });
    }
    None
}

/// Expands a profiler output directory into its profiler files: walks `dir` and
/// its subdirectories (up to 4 levels; each profiler library is usually run into
/// its own directory), keeps the files [`classify`] recognises, and returns them
/// sorted by path, each with its path relative to `dir` (used as `source`).
/// Directories named `go_reference`, `py_reference` and hidden ones are skipped,
/// since they hold analysis outputs rather than profiler outputs.
pub fn expand_dir(dir: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    walk(dir, dir, 0, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(
    root: &Path,
    dir: &Path,
    depth: u32,
    out: &mut Vec<(PathBuf, String)>,
) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        let ft = e.file_type()?;
        if ft.is_dir() {
            if depth < 4
                && !name.starts_with('.')
                && name != "go_reference"
                && name != "py_reference"
            {
                walk(root, &p, depth + 1, out)?;
            }
        } else if classify(&p).is_some() {
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            out.push((p, rel));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_name() {
        let c = |s: &str| classify(Path::new(s));
        assert_eq!(
            c("send-counters.job3.rank12.txt"),
            Some(FileKind::SendCounters { job: 3, lead: 12 })
        );
        assert_eq!(
            c("recv-counters.job0.rank0.txt"),
            Some(FileKind::RecvCounters { job: 0, lead: 0 })
        );
        assert_eq!(
            c("counts.rank1_call12.md"),
            Some(FileKind::PerCall { lead: 1, call: 12 })
        );
        assert_eq!(
            c("alltoallv_execution_times.rank0_comm3_job0.md"),
            Some(FileKind::ExecTimes {
                lead: 0,
                comm: 3,
                job: 0
            })
        );
        assert_eq!(
            c("alltoallv_late_arrival_times.rank2_comm0_job7.md"),
            Some(FileKind::LateArrival {
                lead: 2,
                comm: 0,
                job: 7
            })
        );
        assert_eq!(
            c("alltoallv_locations_comm1_rank0.md"),
            Some(FileKind::Location { comm: 1, lead: 0 })
        );
        assert_eq!(
            c("alltoallv_backtrace_rank0_trace15.md"),
            Some(FileKind::Backtrace { lead: 0, trace: 15 })
        );
        assert_eq!(
            c("alltoallv_comm_data_rank2.md"),
            Some(FileKind::CommData { lead: 2 })
        );
        assert_eq!(
            c("profile_alltoallv_job0.rank0.md"),
            Some(FileKind::ProfileSummary { job: 0, lead: 0 })
        );
        // The seed's wrong name (dash) and near misses are not profiler files.
        assert_eq!(c("counts-rank0_call1.md"), None);
        assert_eq!(c("send-counters.job0.rank0.txt.bak"), None);
        assert_eq!(c("COMMANDS.txt"), None);
    }
}
