//! Synthetic traces for benchmarks and tests: the 1-D periodic halo workload of
//! `shared/data/replay/dimemas/tools/synth.py`, written as a `.dim` trace with the same
//! records (compute, 2 Irecv, 2 Isend, 2 Wait per rank and iteration, plus an 8-byte
//! Allreduce every `allreduce_every` iterations), streamed to disk; and the same
//! workload as a Bandela trace directory (one text file per rank) with the
//! replaympi input to replay it with.
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{ReplayError, Result};

/// Parameters of the synthetic halo trace.
#[derive(Debug, Clone, Copy)]
pub struct Halo {
    /// Ranks.
    pub ranks: u32,
    /// Iterations.
    pub iters: u32,
    /// Message size (bytes).
    pub msg: u64,
    /// Base burst (s); rank t computes burst × (1 + 0.1 (t mod 7)).
    pub burst: f64,
    /// Allreduce every k iterations (0 = never).
    pub allreduce_every: u32,
}

impl Halo {
    /// synth.py's defaults: 8192-byte messages, 100 µs bursts, Allreduce every 10.
    pub fn new(ranks: u32, iters: u32) -> Self {
        Self {
            ranks,
            iters,
            msg: 8192,
            burst: 1e-4,
            allreduce_every: 10,
        }
    }

    fn task_body(&self, t: u32) -> String {
        let p = self.ranks;
        let (l, r) = ((t + p - 1) % p, (t + 1) % p);
        let bur = self.burst * (1.0 + 0.1 * f64::from(t % 7));
        let m = self.msg;
        let mut s = String::new();
        for i in 0..self.iters {
            s.push_str(&format!(
                "1:{t}:0:{bur:.9}\n3:{t}:0:{l}:-1:{m}:1:1:1\n3:{t}:0:{r}:-1:{m}:2:1:1\n2:{t}:0:{r}:-1:{m}:1:1:2\n2:{t}:0:{l}:-1:{m}:2:1:2\n3:{t}:0:{l}:-1:{m}:1:1:2\n3:{t}:0:{r}:-1:{m}:2:1:2\n"
            ));
            if self.allreduce_every > 0 && (i + 1) % self.allreduce_every == 0 {
                s.push_str(&format!("10:{t}:0:11:1:0:0:8:8:1\n"));
            }
        }
        s
    }

    /// Rank `t`'s Bandela trace: per iteration a burst, 2 irecv, 2 isend and
    /// a wait on each of the 4 requests; the Allreduce is a barrier on
    /// communicator 0, which the trace does not define (so it holds every
    /// rank: a list of 65,536 ranks would not fit a line).
    fn bandela_body(&self, t: u32) -> String {
        use std::fmt::Write as _;
        let p = self.ranks;
        let (l, r) = ((t + p - 1) % p, (t + 1) % p);
        let bur = self.burst * (1.0 + 0.1 * f64::from(t % 7));
        let m = self.msg;
        let mut s = format!(
            "# bandela-replay v1  rank={t} nranks={p}  (benchlake probe bandela)\nH {t} {p} 0\n"
        );
        let mut ord = 0u64;
        for i in 0..self.iters {
            let _ = write!(
                s,
                "C {bur:.9}\nK {} MPI_Irecv irecv {l} 1 1 {m} 1 0\nK {} MPI_Irecv irecv {r} 1 2 {m} 2 0\nK {} MPI_Isend isend {r} 1 1 {m} 3 0\nK {} MPI_Isend isend {l} 1 2 {m} 4 0\n",
                ord,
                ord + 1,
                ord + 2,
                ord + 3
            );
            ord += 4;
            for q in 1..=4 {
                let _ = writeln!(s, "K {ord} MPI_Waitall wait {q}");
            }
            ord += 1;
            if self.allreduce_every > 0 && (i + 1) % self.allreduce_every == 0 {
                let _ = writeln!(s, "K {ord} MPI_Allreduce barrier 0");
                ord += 1;
            }
        }
        s
    }

    /// Records of the Bandela trace (all ranks).
    pub fn bandela_records(&self) -> u64 {
        let allreduces = self.iters.checked_div(self.allreduce_every).unwrap_or(0);
        (9 * u64::from(self.iters) + u64::from(allreduces)) * u64::from(self.ranks)
    }

    /// The replaympi input for [`Halo::write_bandela`]'s traces: one host of
    /// type 0 holding every rank, with the reference inputs' 2 µs and 800 MB/s
    /// and a 10 µs barrier.
    pub fn bandela_input(&self) -> String {
        format!(
            "# benchlake probe bandela\nNUMBER_OF_HOSTS 1\nHOST_TYPE 0\nINTRA_HOST_LATENCY 2.0\nINTRA_HOST_BANDWIDTH_PEAK 800.0\nINTRA_HOST_BARRIER_LATENCY 10.0\nBLOCK_HOST 0\nNUMBER_OF_PROCS {p}\nMPI_RANKS 0-{}\nADAPTERS 0\n",
            self.ranks - 1,
            p = self.ranks
        )
    }

    /// Writes the Bandela trace into `dir` (`bandela.<rank>.txt`, created if
    /// needed) and its input as `dir/replaympi.input`; returns the records.
    pub fn write_bandela(&self, dir: &Path) -> Result<u64> {
        if self.ranks < 2 {
            return Err(ReplayError::param(
                "ranks",
                "the halo needs at least 2 ranks",
            ));
        }
        let io = |p: &Path, e: std::io::Error| ReplayError::Io(format!("{}: {e}", p.display()));
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        for t in 0..self.ranks {
            let p = dir.join(format!("bandela.{t}.txt"));
            std::fs::write(&p, self.bandela_body(t)).map_err(|e| io(&p, e))?;
        }
        let p = dir.join("replaympi.input");
        std::fs::write(&p, self.bandela_input()).map_err(|e| io(&p, e))?;
        Ok(self.bandela_records())
    }

    /// Records the trace holds.
    pub fn records(&self) -> u64 {
        let allreduces = self.iters.checked_div(self.allreduce_every).unwrap_or(0);
        (7 * u64::from(self.iters) + u64::from(allreduces)) * u64::from(self.ranks)
    }

    /// Writes the trace to `path` (one task body in memory at a time).
    pub fn write_dim(&self, path: &Path) -> Result<u64> {
        if self.ranks < 2 {
            return Err(ReplayError::param(
                "ranks",
                "the halo needs at least 2 ranks",
            ));
        }
        let io = |e: std::io::Error| ReplayError::Io(format!("{}: {e}", path.display()));
        let name = format!("halo1d_P{}_I{}", self.ranks, self.iters);
        let head0 = format!("#DIMEMAS:\"{name}\":1,");
        let tail = format!(
            ":{}({}),1,0,0",
            self.ranks,
            vec!["1"; self.ranks as usize].join(",")
        );
        let defs = format!(
            "d:1:1:{}:{}\n",
            self.ranks,
            (0..self.ranks)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(":")
        );
        const WIDTH: usize = 15;
        let hdr_len = head0.len() + WIDTH + tail.len() + 1;
        // Body sizes first (bodies are regenerated when written, to stay streaming).
        let mut offsets = Vec::with_capacity(self.ranks as usize);
        let mut pos = (hdr_len + defs.len()) as u64;
        for t in 0..self.ranks {
            offsets.push(pos);
            pos += self.task_body(t).len() as u64;
        }
        let num = pos.to_string();
        let pad = " ".repeat(WIDTH.saturating_sub(num.len()));
        let f = std::fs::File::create(path).map_err(io)?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        write!(w, "{head0}{num}{tail}{pad}\n{defs}").map_err(io)?;
        for t in 0..self.ranks {
            w.write_all(self.task_body(t).as_bytes()).map_err(io)?;
        }
        for (t, o) in offsets.iter().enumerate() {
            writeln!(w, "s:{t}:{o}").map_err(io)?;
        }
        w.flush().map_err(io)?;
        Ok(self.records())
    }
}
