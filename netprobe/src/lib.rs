//! netprobe: a LinkTest-style ping-pong benchmark between ranks over TCP, for
//! clusters or networks without MPI. Every rank runs [`run`] (one process or
//! thread per rank, addresses known up front); rank 0 gathers the results and
//! writes a LinkTest 2.1.17 SION file with mode "TCP", which the `linktest`
//! ingest reads like a real LinkTest file.
//!
//! What it does, in LinkTest's terms:
//! - the step schedule is a round-robin 1-factorization: in each of the N−1
//!   steps (N for odd N, one rank idling per step) every rank has exactly one
//!   partner, and over all steps every pair meets once;
//! - optional randomized step order (seeded, reproducible);
//! - per pair and step, the lower rank first runs warm-up messages then N
//!   ping-pongs of S bytes as initiator, then the higher rank does the same; the
//!   time per message is `elapsed / (2 N)` (one way), as LinkTest reports;
//! - rank 0 retests the K slowest pairs serially (one pair at a time) and stores
//!   both times as LinkTest's slow-link arrays.
//!
//! Not implemented (see docs/linktest.md §7): serial main phase, all-to-all
//! phase, rank permutations, bidirectional/unidirectional modes, barriers
//! between steps.
mod schedule;
mod wire;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use benchlake_formats::linktest::{
    Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink,
};
use benchlake_formats::sion::SionWriteOptions;

pub use schedule::{partner, shuffled_steps, steps_for};

/// Benchmark parameters (the same on every rank).
#[derive(Debug, Clone)]
pub struct Params {
    /// Timed ping-pongs per pair and direction.
    pub num_messages: u64,
    /// Bytes per message.
    pub message_size: usize,
    /// Untimed ping-pongs before the timed ones.
    pub warmup_messages: u64,
    /// Randomize the step order with this seed (`None` = steps in order).
    pub step_seed: Option<u64>,
    /// Slowest pairs retested serially by rank 0.
    pub serial_retests: usize,
    /// Host name recorded for this rank (`None` = the kernel's host name).
    pub hostname: Option<String>,
    /// How long to keep retrying connections to peers that are not up yet.
    pub connect_timeout: Duration,
    /// Read/write timeout on every socket (a dead peer fails the run instead of hanging it).
    pub io_timeout: Duration,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            num_messages: 100,
            message_size: 1024,
            warmup_messages: 10,
            step_seed: None,
            serial_retests: 10,
            hostname: None,
            connect_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(60),
        }
    }
}

/// Errors of a netprobe run.
#[derive(Debug, thiserror::Error)]
pub enum NetprobeError {
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Bad arguments or an unexpected message from a peer.
    #[error("{0}")]
    Protocol(String),
    /// Writing the SION file failed.
    #[error(transparent)]
    Format(#[from] benchlake_formats::FormatError),
}

impl NetprobeError {
    /// Network errors may pass on a retry; bad arguments do not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, NetprobeError::Io { .. })
    }
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetprobeError {
    let context = context.into();
    move |source| NetprobeError::Io { context, source }
}

/// Result alias.
pub type Result<T, E = NetprobeError> = std::result::Result<T, E>;

/// Runs rank `rank` of `peers.len()` ranks: binds `peers[rank]`, connects to the
/// others, measures, and (rank 0) writes `out_path`. Rank 0 returns the run.
pub fn run(
    rank: usize,
    peers: Vec<SocketAddr>,
    params: &Params,
    out_path: &Path,
) -> Result<Option<LinkTestRun>> {
    let addr = *peers
        .get(rank)
        .ok_or_else(|| NetprobeError::Protocol(format!("rank {rank} but {} peers", peers.len())))?;
    let listener = TcpListener::bind(addr).map_err(io(format!("bind {addr}")))?;
    run_with_listener(rank, listener, peers, params, out_path)
}

/// [`run`] with an already bound listener (so tests can use port 0).
pub fn run_with_listener(
    rank: usize,
    listener: TcpListener,
    peers: Vec<SocketAddr>,
    params: &Params,
    out_path: &Path,
) -> Result<Option<LinkTestRun>> {
    let n = peers.len();
    if rank >= n {
        return Err(NetprobeError::Protocol(format!("rank {rank} of {n}")));
    }
    if params.num_messages == 0 {
        return Err(NetprobeError::Protocol(
            "num_messages must be at least 1".into(),
        ));
    }
    let mut conns = connect_mesh(rank, &listener, &peers, params)?;
    let start = chrono::Utc::now();
    let order = match params.step_seed {
        Some(seed) => shuffled_steps(n, seed),
        None => (1..=steps_for(n)).collect(),
    };
    let mut buf = vec![0u8; params.message_size];
    let mut times = vec![0f64; n];
    let mut steps = vec![0i32; n];
    for (executed, sched_step) in order.iter().enumerate() {
        let Some(p) = partner(rank, *sched_step, n) else {
            continue;
        };
        let conn = conns
            .get_mut(p)
            .and_then(|c| c.as_mut())
            .ok_or_else(|| NetprobeError::Protocol(format!("no connection to rank {p}")))?;
        let (first, second) = (rank.min(p), rank.max(p));
        for initiator in [first, second] {
            if initiator == rank {
                let t = pingpong_initiate(conn, &mut buf, params)?;
                if let Some(slot) = times.get_mut(p) {
                    *slot = t;
                }
            } else {
                pingpong_respond(conn, &mut buf, params)?;
            }
        }
        if let Some(s) = steps.get_mut(p) {
            *s = executed as i32 + 1;
        }
    }
    let hostname = params.hostname.clone().unwrap_or_else(local_hostname);
    if rank != 0 {
        let c0 = conns
            .get_mut(0)
            .and_then(|c| c.as_mut())
            .ok_or_else(|| NetprobeError::Protocol("no connection to rank 0".into()))?;
        wire::send_row(c0, &hostname, &times, &steps)?;
        serve_retests(rank, &mut conns, &mut buf, params)?;
        return Ok(None);
    }
    // Rank 0: gather rows.
    let mut all_t = vec![0f64; n * n];
    let mut all_s = vec![0i32; n * n];
    let mut hosts = vec![String::new(); n];
    if let Some(dst) = all_t.get_mut(..n) {
        dst.copy_from_slice(&times);
    }
    if let Some(dst) = all_s.get_mut(..n) {
        dst.copy_from_slice(&steps);
    }
    if let Some(h) = hosts.get_mut(0) {
        *h = hostname;
    }
    for r in 1..n {
        let c = conns
            .get_mut(r)
            .and_then(|c| c.as_mut())
            .ok_or_else(|| NetprobeError::Protocol(format!("no connection to rank {r}")))?;
        let (h, t, s) = wire::recv_row(c, n)?;
        if let Some(x) = hosts.get_mut(r) {
            *x = h;
        }
        if let Some(dst) = all_t.get_mut(r * n..(r + 1) * n) {
            dst.copy_from_slice(&t);
        }
        if let Some(dst) = all_s.get_mut(r * n..(r + 1) * n) {
            dst.copy_from_slice(&s);
        }
    }
    let slow = retest_slowest(&mut conns, &all_t, n, &mut buf, params)?;
    for r in 1..n {
        if let Some(c) = conns.get_mut(r).and_then(|c| c.as_mut()) {
            wire::send_cmd(c, wire::Cmd::Done)?;
        }
    }
    let end = chrono::Utc::now();
    let measured: Vec<f64> = (0..n * n)
        .filter(|k| k / n != k % n)
        .filter_map(|k| all_t.get(k).copied())
        .collect();
    let (min, max) = measured
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
            (a.min(*t), b.max(*t))
        });
    let avg = if measured.is_empty() {
        0.0
    } else {
        measured.iter().sum::<f64>() / measured.len() as f64
    };
    let (min, max) = if measured.is_empty() {
        (0.0, 0.0)
    } else {
        (min, max)
    };
    let fmt = "%Y-%m-%d %H:%M:%S";
    let run = LinkTestRun {
        format: PayloadFormat::V2,
        version: [2, 1, 17],
        git_hash: None,
        mode: "TCP".into(),
        num_tasks: n,
        num_messages: params.num_messages,
        message_size: params.message_size as u64,
        num_warmup_messages: Some(params.warmup_messages),
        num_serial_retests: params.serial_retests as u64,
        num_multi_buffers: Some(1),
        buffer_seed: Some(0),
        num_randomized_tasks: Some(0),
        task_seed: Some(0),
        memory_allocator: Some(0),
        flags: Flags {
            randomize_steps: params.step_seed.is_some(),
            ..Flags::default()
        },
        v1_stats: None,
        ranks: hosts
            .into_iter()
            .enumerate()
            .map(|(r, h)| RankInfo {
                rank: r,
                hostname: h,
                core_id: Some(-1),
                coords: None,
            })
            .collect(),
        permutations: vec![Permutation {
            start_time: Some(start.format(fmt).to_string()),
            end_time: Some(end.format(fmt).to_string()),
            min_time_s: min,
            avg_time_s: avg,
            max_time_s: max,
            a2a: None,
            times: all_t,
            steps: all_s,
            alltoall: Vec::new(),
            slow_links: slow,
        }],
    };
    benchlake_formats::linktest::v2::write_file(&run, out_path, &SionWriteOptions::default())?;
    tracing::info!(path = %out_path.display(), ranks = n, "netprobe result written");
    Ok(Some(run))
}

/// Connections to every other rank: this rank connects to lower ranks (each
/// listener's backlog completes the connect even before the peer accepts), then
/// accepts the higher ranks, which introduce themselves with their rank.
fn connect_mesh(
    rank: usize,
    listener: &TcpListener,
    peers: &[SocketAddr],
    params: &Params,
) -> Result<Vec<Option<TcpStream>>> {
    let n = peers.len();
    let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let deadline = Instant::now() + params.connect_timeout;
    for (p, addr) in peers.iter().enumerate().take(rank) {
        let mut s = loop {
            match TcpStream::connect_timeout(addr, params.connect_timeout) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(%addr, error = %e, "peer not up yet, retrying");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(io(format!("connect to rank {p} at {addr}"))(e)),
            }
        };
        setup(&s, params)?;
        s.write_all(&(rank as u32).to_le_bytes())
            .map_err(io("hello"))?;
        if let Some(c) = conns.get_mut(p) {
            *c = Some(s);
        }
    }
    for _ in rank + 1..n {
        let (mut s, from) = listener.accept().map_err(io("accept"))?;
        setup(&s, params)?;
        let mut b = [0u8; 4];
        s.read_exact(&mut b)
            .map_err(io(format!("hello from {from}")))?;
        let r = u32::from_le_bytes(b) as usize;
        match conns.get_mut(r) {
            Some(slot @ None) if r > rank => *slot = Some(s),
            _ => {
                return Err(NetprobeError::Protocol(format!(
                    "unexpected hello (rank {r}) from {from}"
                )));
            }
        }
    }
    Ok(conns)
}

fn setup(s: &TcpStream, params: &Params) -> Result<()> {
    // Ping-pong latency needs every small message on the wire at once.
    s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    s.set_read_timeout(Some(params.io_timeout))
        .map_err(io("read timeout"))?;
    s.set_write_timeout(Some(params.io_timeout))
        .map_err(io("write timeout"))?;
    Ok(())
}

/// Warm-up plus timed ping-pongs as initiator; seconds per message (one way).
fn pingpong_initiate(c: &mut TcpStream, buf: &mut [u8], params: &Params) -> Result<f64> {
    for _ in 0..params.warmup_messages {
        c.write_all(buf).map_err(io("ping"))?;
        c.read_exact(buf).map_err(io("pong"))?;
    }
    let t = Instant::now();
    for _ in 0..params.num_messages {
        c.write_all(buf).map_err(io("ping"))?;
        c.read_exact(buf).map_err(io("pong"))?;
    }
    Ok(t.elapsed().as_secs_f64() / (2 * params.num_messages) as f64)
}

fn pingpong_respond(c: &mut TcpStream, buf: &mut [u8], params: &Params) -> Result<()> {
    for _ in 0..params.warmup_messages + params.num_messages {
        c.read_exact(buf).map_err(io("ping"))?;
        c.write_all(buf).map_err(io("pong"))?;
    }
    Ok(())
}

/// Ranks ≠ 0 after the main phase: follow rank 0's retest commands until Done.
fn serve_retests(
    rank: usize,
    conns: &mut [Option<TcpStream>],
    buf: &mut [u8],
    params: &Params,
) -> Result<()> {
    loop {
        let cmd = {
            let c0 = conns
                .get_mut(0)
                .and_then(|c| c.as_mut())
                .ok_or_else(|| NetprobeError::Protocol("no connection to rank 0".into()))?;
            wire::recv_cmd(c0)?
        };
        match cmd {
            wire::Cmd::Done => return Ok(()),
            wire::Cmd::Retest { from, to } => {
                let other = if from == rank { to } else { from };
                let c = conns
                    .get_mut(other)
                    .and_then(|c| c.as_mut())
                    .ok_or_else(|| {
                        NetprobeError::Protocol(format!("retest with unknown rank {other}"))
                    })?;
                if from == rank {
                    let t = pingpong_initiate(c, buf, params)?;
                    let c0 = conns
                        .get_mut(0)
                        .and_then(|c| c.as_mut())
                        .ok_or_else(|| NetprobeError::Protocol("no connection to rank 0".into()))?;
                    wire::send_f64(c0, t)?;
                } else {
                    pingpong_respond(c, buf, params)?;
                }
            }
        }
    }
}

/// Rank 0: retests the slowest pairs one at a time.
fn retest_slowest(
    conns: &mut [Option<TcpStream>],
    times: &[f64],
    n: usize,
    buf: &mut [u8],
    params: &Params,
) -> Result<Vec<SlowLink>> {
    let mut pairs: Vec<(f64, usize, usize)> = (0..n * n)
        .filter(|k| k / n != k % n)
        .filter_map(|k| times.get(k).map(|t| (*t, k / n, k % n)))
        .collect();
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
    pairs.truncate(params.serial_retests);
    let mut out = Vec::with_capacity(pairs.len());
    for (t, from, to) in pairs {
        let conn = |conns: &mut [Option<TcpStream>], r: usize| -> Result<TcpStream> {
            conns
                .get(r)
                .and_then(|c| c.as_ref())
                .ok_or_else(|| NetprobeError::Protocol(format!("no connection to rank {r}")))?
                .try_clone()
                .map_err(io("clone socket"))
        };
        for r in [from, to] {
            if r != 0 {
                wire::send_cmd(&mut conn(conns, r)?, wire::Cmd::Retest { from, to })?;
            }
        }
        let retest = if from == 0 {
            pingpong_initiate(&mut conn(conns, to)?, buf, params)?
        } else {
            if to == 0 {
                pingpong_respond(&mut conn(conns, from)?, buf, params)?;
            }
            wire::recv_f64(&mut conn(conns, from)?)?
        };
        out.push(SlowLink {
            from_rank: from,
            to_rank: to,
            time_s: t,
            retest_time_s: Some(retest),
        });
    }
    Ok(out)
}

/// The kernel's host name (Linux), or "localhost".
fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
