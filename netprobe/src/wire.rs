//! The few messages exchanged besides the ping-pong payload: each rank's result
//! row to rank 0, and rank 0's retest commands. Little-endian, length-checked.
use std::io::{Read, Write};
use std::net::TcpStream;

use crate::{NetprobeError, Result, io};

/// Longest host name accepted from a peer.
const MAX_HOSTNAME: usize = 4096;

/// A command from rank 0 after the main phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// No more retests.
    Done,
    /// Retest the pair; `from` initiates and reports its time to rank 0.
    Retest { from: usize, to: usize },
}

pub(crate) fn send_row(c: &mut TcpStream, host: &str, times: &[f64], steps: &[i32]) -> Result<()> {
    let h = host.as_bytes();
    let mut b = Vec::with_capacity(4 + h.len() + 12 * times.len());
    b.extend_from_slice(&(h.len().min(MAX_HOSTNAME) as u32).to_le_bytes());
    b.extend_from_slice(h.get(..h.len().min(MAX_HOSTNAME)).unwrap_or_default());
    for t in times {
        b.extend_from_slice(&t.to_le_bytes());
    }
    for s in steps {
        b.extend_from_slice(&s.to_le_bytes());
    }
    c.write_all(&b).map_err(io("send results to rank 0"))
}

pub(crate) fn recv_row(c: &mut TcpStream, n: usize) -> Result<(String, Vec<f64>, Vec<i32>)> {
    let mut l = [0u8; 4];
    c.read_exact(&mut l).map_err(io("receive results"))?;
    let len = u32::from_le_bytes(l) as usize;
    if len > MAX_HOSTNAME {
        return Err(NetprobeError::Protocol(format!("host name of {len} bytes")));
    }
    let mut h = vec![0u8; len];
    c.read_exact(&mut h).map_err(io("receive results"))?;
    let mut raw = vec![0u8; 12 * n];
    c.read_exact(&mut raw).map_err(io("receive results"))?;
    let (tb, sb) = raw.split_at(8 * n);
    let times = tb
        .chunks_exact(8)
        .map(|x| f64::from_le_bytes(x.try_into().unwrap_or([0; 8])))
        .collect();
    let steps = sb
        .chunks_exact(4)
        .map(|x| i32::from_le_bytes(x.try_into().unwrap_or([0; 4])))
        .collect();
    Ok((String::from_utf8_lossy(&h).into_owned(), times, steps))
}

pub(crate) fn send_cmd(c: &mut TcpStream, cmd: Cmd) -> Result<()> {
    let mut b = [0u8; 9];
    if let Cmd::Retest { from, to } = cmd {
        b[0] = 1;
        b[1..5].copy_from_slice(&(from as u32).to_le_bytes());
        b[5..9].copy_from_slice(&(to as u32).to_le_bytes());
    }
    c.write_all(&b).map_err(io("send command"))
}

pub(crate) fn recv_cmd(c: &mut TcpStream) -> Result<Cmd> {
    let mut b = [0u8; 9];
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
        op => Err(NetprobeError::Protocol(format!(
            "unknown command {op} from rank 0"
        ))),
    }
}

pub(crate) fn send_f64(c: &mut TcpStream, v: f64) -> Result<()> {
    c.write_all(&v.to_le_bytes())
        .map_err(io("send retest time"))
}

pub(crate) fn recv_f64(c: &mut TcpStream) -> Result<f64> {
    let mut b = [0u8; 8];
    c.read_exact(&mut b).map_err(io("receive retest time"))?;
    Ok(f64::from_le_bytes(b))
}
