//! Reader of the non-compact per-call count files (`counts.rank<L>_call<C>.md`):
//! datatype sizes, communicator size and the full send and receive matrices of
//! one call. A file holds one call, so the reader returns it whole.
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::compact::{MAX_COMM_SIZE, MAX_DATATYPE_SIZE, parse_counts};
use super::lines::{Lines, labelled_uint, trim_end};
use crate::error::{FormatError, Result};

/// One call of a non-compact file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerCallCounts {
    /// `Send datatype size`.
    pub send_datatype_size: u64,
    /// `Recv datatype size`.
    pub recv_datatype_size: u64,
    /// `Comm size` N.
    pub comm_size: u64,
    /// N×N send counts, row-major: row i = what comm rank i sends to 0..N-1.
    pub send: Vec<u64>,
    /// N×N receive counts, row-major: row i = what comm rank i receives from 0..N-1.
    pub recv: Vec<u64>,
}

impl PerCallCounts {
    /// Row `i` of the send or receive matrix.
    pub fn row(&self, recv: bool, i: u64) -> &[u64] {
        let n = self.comm_size as usize;
        let m = if recv { &self.recv } else { &self.send };
        let start = (i as usize).saturating_mul(n);
        m.get(start..start.saturating_add(n)).unwrap_or_default()
    }
}

/// Reads a per-call file.
pub fn read_file(path: &Path) -> Result<PerCallCounts> {
    let f = File::open(path).map_err(|e| FormatError::io(path, e))?;
    read(BufReader::new(f), path)
}

/// Reads a per-call file from `reader`, naming `path` in errors.
pub fn read<R: BufRead>(reader: R, path: &Path) -> Result<PerCallCounts> {
    let mut l = Lines::new(reader, path);
    next(&mut l, "Send datatype size")?;
    let send_datatype_size = labelled_uint(
        &l,
        "Send datatype size: ",
        "Send datatype size",
        MAX_DATATYPE_SIZE,
    )?;
    next(&mut l, "Recv datatype size")?;
    let recv_datatype_size = labelled_uint(
        &l,
        "Recv datatype size: ",
        "Recv datatype size",
        MAX_DATATYPE_SIZE,
    )?;
    next(&mut l, "Comm size")?;
    let comm_size = labelled_uint(&l, "Comm size: ", "Comm size", MAX_COMM_SIZE)?;
    if comm_size == 0 {
        return Err(l.error("Comm size", 12, "communicator size 0"));
    }
    let send = matrix(&mut l, "Send counts", comm_size)?;
    let recv = matrix(&mut l, "Recv counts", comm_size)?;
    if l.skip_blank()? {
        return Err(l.error("end of file", 1, "unexpected text after the receive counts"));
    }
    Ok(PerCallCounts {
        send_datatype_size,
        recv_datatype_size,
        comm_size,
        send,
        recv,
    })
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

fn matrix<R: BufRead>(l: &mut Lines<R>, title: &str, n: u64) -> Result<Vec<u64>> {
    next(l, title)?;
    if trim_end(l.text()) != title.as_bytes() {
        return Err(l.error(title, 1, format!("expected '{title}'")));
    }
    // Grow as rows arrive rather than reserving N² up front from a header value.
    let mut m = Vec::new();
    let mut row = Vec::new();
    for _ in 0..n {
        if !l.advance()? || trim_end(l.text()).is_empty() {
            return Err(l.error_at(
                title,
                l.number().max(1),
                1,
                format!("{title}: expected {n} rows of counts"),
            ));
        }
        parse_counts(l, l.text(), 0, n, &mut row)?;
        m.extend_from_slice(&row);
    }
    Ok(m)
}

/// The calls of one lead rank with identical (comm size, datatype sizes, send
/// matrix, receive matrix), with the rows of each matrix grouped like the compact
/// writer groups them: the compact file's block, rebuilt from per-call files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallGroup {
    /// The calls (ascending).
    pub calls: super::ranklist::CallList,
    /// The shared matrices.
    pub counts: PerCallCounts,
}

impl CallGroup {
    /// Rows of one direction grouped by identical counts, ordered by their first
    /// rank, each with its ascending rank spans: what `Rank(s) LIST:` lines hold.
    pub fn grouped_rows(&self, recv: bool) -> Vec<(Vec<super::ranklist::Span>, &[u64])> {
        let mut index: std::collections::HashMap<&[u64], usize> = std::collections::HashMap::new();
        let mut out: Vec<(Vec<super::ranklist::Span>, &[u64])> = Vec::new();
        for i in 0..self.counts.comm_size {
            let row = self.counts.row(recv, i);
            match index.get(row) {
                Some(&k) => {
                    if let Some((spans, _)) = out.get_mut(k) {
                        match spans.last_mut() {
                            Some(last) if last.1 + 1 == i => last.1 = i,
                            _ => spans.push((i, i)),
                        }
                    }
                }
                None => {
                    index.insert(row, out.len());
                    out.push((vec![(i, i)], row));
                }
            }
        }
        out
    }
}

/// Groups per-call files of one lead rank into [`CallGroup`]s, in order of first
/// call (which is the block order of the compact file of the same run). `files`
/// are `(call id, path)`; they are read one at a time, so memory holds only the
/// distinct matrices.
pub fn group_files(files: &[(u64, std::path::PathBuf)]) -> Result<Vec<CallGroup>> {
    use std::collections::HashMap;
    use std::hash::{Hash, Hasher};
    let mut sorted: Vec<&(u64, std::path::PathBuf)> = files.iter().collect();
    sorted.sort_by_key(|f| f.0);
    let mut groups: Vec<CallGroup> = Vec::new();
    let mut by_hash: HashMap<u64, Vec<usize>> = HashMap::new();
    for (call, path) in sorted {
        let c = read_file(path)?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            c.comm_size,
            c.send_datatype_size,
            c.recv_datatype_size,
            &c.send,
            &c.recv,
        )
            .hash(&mut h);
        let key = h.finish();
        let slot = by_hash.entry(key).or_default();
        match slot
            .iter()
            .copied()
            .find(|&g| groups.get(g).is_some_and(|g| g.counts == c))
        {
            Some(g) => {
                if let Some(g) = groups.get_mut(g) {
                    // Calls arrive ascending: extend the last span or start one.
                    match g.calls.0.last_mut() {
                        Some(last) if last.1.checked_add(1) == Some(*call) => last.1 = *call,
                        _ => g.calls.0.push((*call, *call)),
                    }
                }
            }
            None => {
                slot.push(groups.len());
                groups.push(CallGroup {
                    calls: super::ranklist::CallList(vec![(*call, *call)]),
                    counts: c,
                });
            }
        }
    }
    Ok(groups)
}
