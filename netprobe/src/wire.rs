//! The control messages exchanged besides the ping-pong payload: rank 0's
//! commands (serial pairs, retests, end of a phase), barrier tokens, replies
//! with measured times, and each rank's result rows gathered by rank 0.
//! Little-endian, fixed-size or length-checked (a peer's bytes never size an
//! allocation beyond what the run's own `n` allows).
use std::io::{Read, Write};
use std::net::TcpStream;

use crate::{NetprobeError, Result, io};

/// Longest host name accepted from a peer.
const MAX_HOSTNAME: usize = 4096;
/// The barrier token.
const BARRIER: u8 = 0xB7;

/// A command from rank 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// No more retests: the run is over.
    Done,
    /// Retest the pair; `from` initiates; both reply with their time.
    Retest { from: usize, to: usize },
    /// Serial mode: measure the pair `a < b` now, as executed step `step`;
    /// both reply with their time.
    Pair { a: usize, b: usize, step: usize },
    /// Serial mode: the main phase of this iteration is over.
    EndPhase,
}

/// One rank's results of one iteration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub times: Vec<f64>,
    pub steps: Vec<i32>,
    pub a2a: f64,
}

pub(crate) fn send_rows(c: &mut TcpStream, host: &str, rows: &[Row]) -> Result<()> {
    let h = host.as_bytes();
    let h = h.get(..h.len().min(MAX_HOSTNAME)).unwrap_or_default();
    let n = rows.first().map(|r| r.times.len()).unwrap_or(0);
    let mut b = Vec::with_capacity(4 + h.len() + rows.len() * (12 * n + 8));
    b.extend_from_slice(&(h.len() as u32).to_le_bytes());
    b.extend_from_slice(h);
    for r in rows {
        for t in &r.times {
            b.extend_from_slice(&t.to_le_bytes());
        }
        for s in &r.steps {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b.extend_from_slice(&r.a2a.to_le_bytes());
    }
    c.write_all(&b).map_err(io("send results to rank 0"))
}

/// Receives `m` rows of `n` entries each (sizes known to rank 0, not read
/// from the peer).
pub(crate) fn recv_rows(
    c: &mut TcpStream,
    n: usize,
    m: usize,
    from: usize,
) -> Result<(String, Vec<Row>)> {
    let ctx = || format!("receive results of rank {from}");
    let mut l = [0u8; 4];
    c.read_exact(&mut l).map_err(io(ctx()))?;
    let len = u32::from_le_bytes(l) as usize;
    if len > MAX_HOSTNAME {
        return Err(NetprobeError::Protocol(format!(
            "rank {from} sent a host name of {len} bytes (at most {MAX_HOSTNAME})"
        )));
    }
    let mut h = vec![0u8; len];
    c.read_exact(&mut h).map_err(io(ctx()))?;
    let mut rows = Vec::with_capacity(m);
    let mut raw = vec![0u8; 12 * n + 8];
    for _ in 0..m {
        c.read_exact(&mut raw).map_err(io(ctx()))?;
        let (tb, rest) = raw.split_at(8 * n);
        let (sb, ab) = rest.split_at(4 * n);
        let times = tb.chunks_exact(8).map(f64_le).collect();
        let steps = sb
            .chunks_exact(4)
            .map(|x| i32::from_le_bytes(x.try_into().unwrap_or([0; 4])))
            .collect();
        rows.push(Row {
            times,
            steps,
            a2a: f64_le(ab),
        });
    }
    Ok((String::from_utf8_lossy(&h).into_owned(), rows))
}

fn f64_le(x: &[u8]) -> f64 {
    f64::from_le_bytes(x.try_into().unwrap_or([0; 8]))
}

pub(crate) fn send_cmd(c: &mut TcpStream, cmd: Cmd) -> Result<()> {
    let (op, a, b, s) = match cmd {
        Cmd::Done => (0u8, 0, 0, 0),
        Cmd::Retest { from, to } => (1, from, to, 0),
        Cmd::Pair { a, b, step } => (2, a, b, step),
        Cmd::EndPhase => (3, 0, 0, 0),
    };
    let mut buf = [0u8; 13];
    buf[0] = op;
    buf[1..5].copy_from_slice(&(a as u32).to_le_bytes());
    buf[5..9].copy_from_slice(&(b as u32).to_le_bytes());
    buf[9..13].copy_from_slice(&(s as u32).to_le_bytes());
    c.write_all(&buf).map_err(io("send command"))
}

pub(crate) fn recv_cmd(c: &mut TcpStream) -> Result<Cmd> {
    let mut b = [0u8; 13];
    c.read_exact(&mut b)
        .map_err(io("receive command from rank 0"))?;
    let word = |k: usize| {
        b.get(k..k + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
            .unwrap_or(0) as usize
    };
    match b[0] {
        0 => Ok(Cmd::Done),
        1 => Ok(Cmd::Retest {
            from: word(1),
            to: word(5),
        }),
        2 => Ok(Cmd::Pair {
            a: word(1),
            b: word(5),
            step: word(9),
        }),
        3 => Ok(Cmd::EndPhase),
        op => Err(NetprobeError::Protocol(format!(
            "unknown command {op} from rank 0"
        ))),
    }
}

pub(crate) fn send_f64(c: &mut TcpStream, v: f64) -> Result<()> {
    c.write_all(&v.to_le_bytes()).map_err(io("send time"))
}

pub(crate) fn recv_f64(c: &mut TcpStream, from: usize) -> Result<f64> {
    let mut b = [0u8; 8];
    c.read_exact(&mut b)
        .map_err(io(format!("receive time from rank {from}")))?;
    Ok(f64::from_le_bytes(b))
}

pub(crate) fn send_token(c: &mut TcpStream) -> Result<()> {
    c.write_all(&[BARRIER]).map_err(io("barrier"))
}

pub(crate) fn recv_token(c: &mut TcpStream, from: usize) -> Result<()> {
    let mut b = [0u8; 1];
    c.read_exact(&mut b)
        .map_err(io(format!("barrier with rank {from}")))?;
    if b[0] != BARRIER {
        return Err(NetprobeError::Protocol(format!(
            "rank {from} sent {:#x} where a barrier token was due",
            b[0]
        )));
    }
    Ok(())
}
