//! Reader of the tracer's measured-statistics file `bandela_stats` (format v1,
//! documented in docs/tracer.md): the Bandelalight sections — receive matrix (bytes,
//! receivers × senders), per-rank buffered bytes and internal requests, and per-rank,
//! per-routine communication time, preceding computation and call counts.
//!
//! Errors name the line and column; nothing is allocated beyond what the file's
//! own `Ranks:` line announces (at most [`MAX_RANKS`]).
use std::path::Path;

/// Most ranks accepted (bounds the receive matrix).
pub const MAX_RANKS: usize = 1 << 16;

/// A malformed statistics file.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// I/O error.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Malformed content.
    #[error("bandela_stats line {line}, column {col}: {field}: {msg}")]
    Malformed {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// Field being read.
        field: &'static str,
        /// What is wrong.
        msg: String,
    },
}

/// Per-rank scalars.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankStats {
    /// Bytes of user sends at most `MPI_BUFFER_MAX` (the Bandelalight heuristic).
    pub bytes_buffered: u64,
    /// Internal send/receive requests (collectives expanded).
    pub internal_requests: u64,
    /// Barriers.
    pub barrier_requests: u64,
    /// Bytes sent (collectives expanded).
    pub bytes_sent: u64,
    /// Bytes received (collectives expanded).
    pub bytes_received: u64,
    /// Binary log records.
    pub records: u64,
    /// Measured computation (s).
    pub comput_s: f64,
    /// Measured communication minus the latency and transfer estimates (s).
    pub wait_s: f64,
    /// Latency estimate (s).
    pub latency_s: f64,
    /// Transfer estimate (s).
    pub transfer_s: f64,
    /// Computation after the last traced call (s).
    pub trailing_comput_s: f64,
}

/// One routine of one rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutineStats {
    /// Calls.
    pub calls: u64,
    /// Time inside the calls (s).
    pub comm_s: f64,
    /// Computation just before the calls (s).
    pub comp_s: f64,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Ranks.
    pub ranks: usize,
    /// `BANDELA_BANDWIDTH` used for the transfer estimate (MB/s, 10^6 B).
    pub bandwidth_mbps: f64,
    /// `BANDELA_LATENCY` (µs).
    pub latency_us: f64,
    /// `BANDELA_BARRIER_LATENCY` (µs).
    pub barrier_latency_us: f64,
    /// `MPI_BUFFER_MAX` (bytes).
    pub mpi_buffer_max: u64,
    /// `recv[receiver][sender]` bytes.
    pub recv: Vec<Vec<u64>>,
    /// Per rank.
    pub per_rank: Vec<RankStats>,
    /// Routine names (columns).
    pub routines: Vec<String>,
    /// `routine[rank][i]` for `routines[i]`.
    pub routine: Vec<Vec<RoutineStats>>,
}

struct Lines<'a> {
    it: std::iter::Enumerate<std::str::Lines<'a>>,
    line: usize,
}

fn bad(line: usize, col: usize, field: &'static str, msg: impl Into<String>) -> StatsError {
    StatsError::Malformed {
        line,
        col,
        field,
        msg: msg.into(),
    }
}

impl<'a> Lines<'a> {
    /// Next non-blank, non-comment line.
    fn next(&mut self, what: &'static str) -> Result<&'a str, StatsError> {
        for (i, l) in self.it.by_ref() {
            self.line = i + 1;
            let t = l.trim_end();
            if !t.is_empty() && !t.starts_with('#') {
                return Ok(t);
            }
        }
        Err(bad(self.line + 1, 1, what, "unexpected end of file"))
    }

    fn labelled(&mut self, label: &'static str) -> Result<&'a str, StatsError> {
        let l = self.next(label)?;
        l.strip_prefix(label)
            .map(str::trim)
            .ok_or_else(|| bad(self.line, 1, label, format!("expected '{label}'")))
    }

    fn expect(&mut self, text: &'static str) -> Result<(), StatsError> {
        let l = self.next(text)?;
        if l == text {
            Ok(())
        } else {
            Err(bad(
                self.line,
                1,
                text,
                format!("expected '{text}', found '{l}'"),
            ))
        }
    }
}

fn words(l: &str) -> impl Iterator<Item = (usize, &str)> {
    l.split(' ')
        .scan(0usize, |pos, w| {
            let c = *pos;
            *pos += w.len() + 1;
            Some((c + 1, w))
        })
        .filter(|(_, w)| !w.is_empty())
}

fn num<T: std::str::FromStr>(
    line: usize,
    col: usize,
    field: &'static str,
    s: &str,
) -> Result<T, StatsError> {
    s.parse::<T>()
        .map_err(|_| bad(line, col, field, format!("expected a number, found '{s}'")))
}

fn float(line: usize, col: usize, field: &'static str, s: &str) -> Result<f64, StatsError> {
    let v: f64 = num(line, col, field, s)?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(bad(line, col, field, "not a finite number"))
    }
}

/// Reads `path`.
pub fn read(path: &Path) -> Result<Stats, StatsError> {
    let text = std::fs::read_to_string(path).map_err(|source| StatsError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text)
}

/// Parses the text of a statistics file.
pub fn parse(text: &str) -> Result<Stats, StatsError> {
    let mut l = Lines {
        it: text.lines().enumerate(),
        line: 0,
    };
    let mut s = Stats::default();
    let v = l.labelled("Ranks:")?;
    s.ranks = num(l.line, 8, "Ranks", v)?;
    if s.ranks == 0 || s.ranks > MAX_RANKS {
        return Err(bad(l.line, 8, "Ranks", format!("must be 1..={MAX_RANKS}")));
    }
    let n = s.ranks;
    let v = l.labelled("Bandwidth (MB/s):")?;
    s.bandwidth_mbps = float(l.line, 19, "Bandwidth", v)?;
    let v = l.labelled("Latency (us):")?;
    s.latency_us = float(l.line, 15, "Latency", v)?;
    let v = l.labelled("Barrier latency (us):")?;
    s.barrier_latency_us = float(l.line, 23, "Barrier latency", v)?;
    let v = l.labelled("MPI_BUFFER_MAX:")?;
    s.mpi_buffer_max = num(l.line, 17, "MPI_BUFFER_MAX", v)?;
    l.expect(">>>> Receive Matrix (bytes) <<<<")?;
    l.expect("Lines are receivers, columns are senders")?;
    let h = l.next("CPU")?;
    if words(h).count() != n + 1 || !h.starts_with("CPU") {
        return Err(bad(
            l.line,
            1,
            "CPU",
            format!("expected 'CPU' and {n} sender columns"),
        ));
    }
    for r in 0..n {
        let line = l.next("matrix row")?;
        let mut w = words(line);
        let (c, first) = w.next().unwrap_or((1, ""));
        let rr: usize = num(l.line, c, "matrix receiver", first)?;
        if rr != r {
            return Err(bad(
                l.line,
                c,
                "matrix receiver",
                format!("expected row {r}"),
            ));
        }
        let row = w
            .map(|(c, x)| num::<u64>(l.line, c, "matrix bytes", x))
            .collect::<Result<Vec<_>, _>>()?;
        if row.len() != n {
            return Err(bad(
                l.line,
                line.len() + 1,
                "matrix row",
                format!("expected {n} values"),
            ));
        }
        s.recv.push(row);
    }
    for r in 0..n {
        let line = l.next("rank")?;
        let mut w = words(line);
        let ok = w.next().map(|x| x.1) == Some("rank")
            && w.next().map(|x| x.1) == Some(r.to_string().as_str());
        if !ok {
            return Err(bad(l.line, 1, "rank", format!("expected 'rank {r} ...'")));
        }
        let mut rs = RankStats::default();
        for (c, kv) in w {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(l.line, c, "rank", "expected key=value"))?;
            let x: u64 = num(l.line, c + k.len() + 1, "rank value", v)?;
            match k {
                "bytes_buffered" => rs.bytes_buffered = x,
                "internal_requests" => rs.internal_requests = x,
                "barrier_requests" => rs.barrier_requests = x,
                "bytes_sent" => rs.bytes_sent = x,
                "bytes_received" => rs.bytes_received = x,
                "records" => rs.records = x,
                _ => return Err(bad(l.line, c, "rank", format!("unknown key '{k}'"))),
            }
        }
        s.per_rank.push(rs);
    }
    // three per-routine tables
    let titles = [
        ">>>> Request times in seconds <<<<",
        ">>>> Computation before requests in seconds <<<<",
        ">>>> Number of requests <<<<",
    ];
    let fixed: [&[&str]; 3] = [
        &["Comput", "Wait", "Latency", "Transfer"],
        &["Trailing"],
        &[],
    ];
    for (t, title) in titles.iter().enumerate() {
        l.expect(title)?;
        let h = l.next("CPU")?;
        let mut w = words(h);
        if w.next().map(|x| x.1) != Some("CPU") {
            return Err(bad(l.line, 1, "CPU", "expected 'CPU'"));
        }
        for f in fixed[t] {
            match w.next() {
                Some((_, x)) if x == *f => {}
                other => {
                    return Err(bad(
                        l.line,
                        other.map_or(h.len() + 1, |x| x.0),
                        "column",
                        format!("expected '{f}'"),
                    ));
                }
            }
        }
        let names: Vec<String> = w.map(|x| x.1.to_string()).collect();
        if t == 0 {
            s.routines = names;
            s.routine = vec![vec![RoutineStats::default(); s.routines.len()]; n];
        } else if names != s.routines {
            return Err(bad(
                l.line,
                5,
                "columns",
                "routine columns differ between tables",
            ));
        }
        for r in 0..n {
            let line = l.next("rank row")?;
            let mut w = words(line);
            let (c, first) = w.next().unwrap_or((1, ""));
            let rr: usize = num(l.line, c, "CPU", first)?;
            if rr != r {
                return Err(bad(l.line, c, "CPU", format!("expected rank {r}")));
            }
            let vals: Vec<(usize, &str)> = w.collect();
            if vals.len() != fixed[t].len() + s.routines.len() {
                return Err(bad(
                    l.line,
                    line.len() + 1,
                    "row",
                    "wrong number of columns",
                ));
            }
            let (fx, rt) = vals.split_at(fixed[t].len());
            let rs = &mut s.per_rank[r];
            let row = &mut s.routine[r];
            let line_no = l.line;
            for (i, (c, x)) in fx.iter().enumerate() {
                let v = float(line_no, *c, "time", x)?;
                match (t, i) {
                    (0, 0) => rs.comput_s = v,
                    (0, 1) => rs.wait_s = v,
                    (0, 2) => rs.latency_s = v,
                    (0, 3) => rs.transfer_s = v,
                    _ => rs.trailing_comput_s = v,
                }
            }
            for (i, (c, x)) in rt.iter().enumerate() {
                let slot = &mut row[i];
                match t {
                    0 => slot.comm_s = float(line_no, *c, "time", x)?,
                    1 => slot.comp_s = float(line_no, *c, "time", x)?,
                    _ => slot.calls = num(line_no, *c, "calls", x)?,
                }
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# benchlake-tracer statistics v1\nRanks: 2\nBandwidth (MB/s): 700.000000\nLatency (us): 2.000000\nBarrier latency (us): 10.000000\nMPI_BUFFER_MAX: 1048575\n\n>>>> Receive Matrix (bytes) <<<<\nLines are receivers, columns are senders\nCPU 0 1\n0 0 400\n1 400 0\n\nrank 0 bytes_buffered=400 internal_requests=2 barrier_requests=1 bytes_sent=400 bytes_received=400 records=5\nrank 1 bytes_buffered=400 internal_requests=2 barrier_requests=1 bytes_sent=400 bytes_received=400 records=5\n\n>>>> Request times in seconds <<<<\nCPU Comput Wait Latency Transfer MPI_Send MPI_Barrier\n0000 0.5 0.1 0.000014 0.000001 0.01 0.09\n0001 0.5 0.1 0.000014 0.000001 0.02 0.08\n\n>>>> Computation before requests in seconds <<<<\nCPU Trailing MPI_Send MPI_Barrier\n0000 0.1 0.2 0.2\n0001 0.1 0.2 0.2\n\n>>>> Number of requests <<<<\nCPU MPI_Send MPI_Barrier\n0000 1 1\n0001 1 1\n";

    #[test]
    fn parses_a_sample() {
        let s = parse(SAMPLE).unwrap();
        assert_eq!(s.ranks, 2);
        assert_eq!(s.recv, vec![vec![0, 400], vec![400, 0]]);
        assert_eq!(s.routines, vec!["MPI_Send", "MPI_Barrier"]);
        assert_eq!(s.per_rank[1].internal_requests, 2);
        assert_eq!(s.per_rank[0].trailing_comput_s, 0.1);
        assert_eq!(s.routine[1][0].comm_s, 0.02);
        assert_eq!(s.routine[1][1].calls, 1);
        assert_eq!(s.routine[0][1].comp_s, 0.2);
    }

    #[test]
    fn errors_name_line_and_column() {
        let t = SAMPLE.replace("1 400 0", "1 400 x");
        let e = parse(&t).unwrap_err().to_string();
        assert!(e.contains("line 12, column 7"), "{e}");
        let e = parse("Ranks: 0\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = parse("").unwrap_err().to_string();
        assert!(e.contains("end of file"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_mutations(cut in 0usize..2000, byte in 0u8..128, text in "[ -~\n]{0,200}") {
            let mut b = SAMPLE.as_bytes().to_vec();
            if !b.is_empty() {
                let i = cut % b.len();
                b[i] = byte;
                b.truncate(cut.max(1));
            }
            let _ = parse(&String::from_utf8_lossy(&b));
            let _ = parse(&text);
        }
    }
}
