//! netprobe: a LinkTest-style benchmark between ranks over TCP, for clusters
//! or networks without MPI. Every rank runs [`run_rendezvous`] (agents: ranks
//! find each other through rank 0, see [`Rendezvous`]) or [`run_with_listener`]
//! (addresses known up front, e.g. threads in a test); rank 0 gathers the
//! results and writes a LinkTest 2.1.17 SION file with mode "TCP", which the
//! `linktest` ingest reads like a real LinkTest file.
//!
//! What it does, in LinkTest's terms (docs/linktest.md §7):
//! - the step schedule is a round-robin 1-factorization: in each of the N−1
//!   steps (N for odd N, one rank idling per step) every rank has exactly one
//!   partner, and over all steps every pair meets once;
//! - a run has `1 + randomized_tasks` iterations (LinkTest's permutations):
//!   the first in rank order, the others with the ranks placed on the schedule
//!   in a seeded random order; with `randomize_steps` each iteration runs its
//!   steps in a seeded random order. One seed (stored as the file's task seed)
//!   drives both, so the order is reproducible from the file;
//! - per pair: warm-up messages, then N messages of S bytes, as ping-pongs
//!   (default), one-way streams (unidirectional) or both ways at once
//!   (bidirectional);
//! - parallel mode (all pairs of a step at once, optionally with a barrier
//!   between steps) or serial mode (one pair at a time, sequenced by rank 0);
//! - an optional all-to-all phase per iteration;
//! - rank 0 retests the K slowest pairs of every iteration serially and stores
//!   both times as LinkTest's slow-link arrays.
mod mesh;
mod schedule;
mod shm;
mod wire;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use benchlake_formats::linktest::{
    AllToAllTime, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink,
};
use benchlake_formats::sion::SionWriteOptions;

pub use mesh::{Rendezvous, candidate_ports, run_hash};
pub use schedule::{Iteration, partner, plan, shuffled_ranks, shuffled_steps, steps_for};

pub use shm::ShmLinks;

use mesh::Mesh;
use wire::{Cmd, Row};

/// Largest message accepted (one buffer of this size per rank, two when
/// bidirectional).
pub const MAX_MESSAGE_SIZE: usize = 1 << 30;
/// Largest number of timed messages per pair.
pub const MAX_MESSAGES: u64 = 1_000_000_000;
/// Largest number of randomized iterations.
pub const MAX_RANDOMIZED_TASKS: u64 = 10_000;
/// Largest number of ranks.
pub const MAX_RANKS: usize = 65_536;

/// How a pair exchanges its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Ping-pong: one side sends, the other answers; each side initiates in
    /// turn. Time per message = elapsed / (2 N) (one way, as LinkTest).
    #[default]
    PingPong,
    /// One side streams N messages, the other acknowledges the last; each side
    /// sends in turn. Time per message = elapsed / N.
    Unidirectional,
    /// Both sides stream N messages to each other at once. Time per message =
    /// elapsed / N, recorded by each side for its own direction.
    Bidirectional,
}

impl Direction {
    /// Parses `pingpong`, `unidirectional` or `bidirectional`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "pingpong" | "ping-pong" => Some(Self::PingPong),
            "unidirectional" | "uni" => Some(Self::Unidirectional),
            "bidirectional" | "bidi" => Some(Self::Bidirectional),
            _ => None,
        }
    }
    /// The name [`Direction::parse`] accepts.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PingPong => "pingpong",
            Self::Unidirectional => "unidirectional",
            Self::Bidirectional => "bidirectional",
        }
    }
}

/// Benchmark parameters (the same on every rank).
#[derive(Debug, Clone)]
pub struct Params {
    /// Timed messages per pair and direction (1..=[`MAX_MESSAGES`]).
    pub num_messages: u64,
    /// Bytes per message (1..=[`MAX_MESSAGE_SIZE`]).
    pub message_size: usize,
    /// Untimed messages before the timed ones.
    pub warmup_messages: u64,
    /// Ping-pong, unidirectional or bidirectional.
    pub direction: Direction,
    /// Serial mode: one pair at a time instead of all pairs of a step at once.
    pub serial: bool,
    /// Run an all-to-all phase in every iteration.
    pub all_to_all: bool,
    /// Parallel mode: a barrier between steps (every pair of a step starts
    /// together).
    pub barriers: bool,
    /// Run each iteration's steps in a seeded random order.
    pub randomize_steps: bool,
    /// Iterations with a seeded random rank placement, after the first one in
    /// rank order (LinkTest's "randomized tasks").
    pub randomized_tasks: u64,
    /// The seed of step orders and rank placements (stored as the task seed).
    pub seed: u64,
    /// Slowest pairs of each iteration retested serially by rank 0.
    pub serial_retests: usize,
    /// Host name recorded for this rank (`None` = Slurm's node name under
    /// srun, else the kernel's host name).
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
            direction: Direction::PingPong,
            serial: false,
            all_to_all: false,
            barriers: true,
            randomize_steps: false,
            randomized_tasks: 0,
            seed: 0,
            serial_retests: 10,
            hostname: None,
            connect_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(60),
        }
    }
}

impl Params {
    /// Checks the bounds for a run of `n` ranks.
    pub fn validate(&self, n: usize) -> Result<()> {
        let bad = |m: String| Err(NetprobeError::Protocol(m));
        if !(2..=MAX_RANKS).contains(&n) {
            return bad(format!("netprobe needs 2 to {MAX_RANKS} ranks, got {n}"));
        }
        if !(1..=MAX_MESSAGES).contains(&self.num_messages) {
            return bad(format!(
                "num_messages must be 1 to {MAX_MESSAGES}, got {}",
                self.num_messages
            ));
        }
        if self.warmup_messages > MAX_MESSAGES {
            return bad(format!(
                "warmup_messages must be at most {MAX_MESSAGES}, got {}",
                self.warmup_messages
            ));
        }
        if !(1..=MAX_MESSAGE_SIZE).contains(&self.message_size) {
            return bad(format!(
                "message_size must be 1 to {MAX_MESSAGE_SIZE} bytes, got {}",
                self.message_size
            ));
        }
        if self.randomized_tasks > MAX_RANDOMIZED_TASKS {
            return bad(format!(
                "randomized_tasks must be at most {MAX_RANDOMIZED_TASKS}, got {}",
                self.randomized_tasks
            ));
        }
        Ok(())
    }

    fn iterations(&self, n: usize) -> Vec<Iteration> {
        plan(n, self.randomized_tasks, self.randomize_steps, self.seed)
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
    /// Bad arguments, a missing rank or an unexpected message from a peer.
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
    run_listener_mesh(rank, listener, peers, params, out_path, None)
}

/// [`run_with_listener`] for ranks that are threads of one process: their
/// ping-pongs go through `links` (shared memory, as MPI on one host), the
/// rest through the TCP mesh. A rank that fails aborts `links`, so the
/// others stop waiting for it.
pub fn run_with_shared_memory(
    rank: usize,
    listener: TcpListener,
    peers: Vec<SocketAddr>,
    params: &Params,
    out_path: &Path,
    links: std::sync::Arc<ShmLinks>,
) -> Result<Option<LinkTestRun>> {
    if params.direction != Direction::PingPong || params.all_to_all {
        links.abort();
        return Err(NetprobeError::Protocol(
            "the shared-memory transport measures ping-pongs only (no unidirectional, bidirectional or all-to-all mode; use the tcp transport for those)".into(),
        ));
    }
    let r = run_listener_mesh(rank, listener, peers, params, out_path, Some(links.clone()));
    if r.is_err() {
        links.abort();
    }
    r
}

fn run_listener_mesh(
    rank: usize,
    listener: TcpListener,
    peers: Vec<SocketAddr>,
    params: &Params,
    out_path: &Path,
    shm: Option<std::sync::Arc<ShmLinks>>,
) -> Result<Option<LinkTestRun>> {
    let n = peers.len();
    params.validate(n)?;
    if rank >= n {
        return Err(NetprobeError::Protocol(format!("rank {rank} of {n}")));
    }
    let mut mesh = Mesh {
        conns: (0..n).map(|_| None).collect(),
        shm,
    };
    // Addresses are known: a token from them keeps strangers out of the mesh.
    let token = run_hash(&format!("{peers:?}"));
    let deadline = Instant::now() + params.connect_timeout;
    mesh::connect_mesh(
        rank, 0, &listener, &peers, token, &mut mesh, params, deadline,
    )?;
    measure(rank, n, mesh, params, out_path)
}

/// Runs rank `rank` of `rv.hosts.len()` ranks started independently (one per
/// agent): meets the others through rank 0 ([`Rendezvous`]), measures, and
/// (rank 0) writes `out_path`. Rank 0 returns the run.
pub fn run_rendezvous(
    rank: usize,
    rv: &Rendezvous,
    params: &Params,
    out_path: &Path,
) -> Result<Option<LinkTestRun>> {
    let n = rv.hosts.len();
    params.validate(n)?;
    let mesh = mesh::rendezvous_mesh(rank, rv, params)?;
    measure(rank, n, mesh, params, out_path)
}

/// Message buffers of one rank.
struct Bufs {
    recv: Vec<u8>,
    send: Vec<u8>,
}

/// The measurement, once every rank holds a stream to every other.
fn measure(
    rank: usize,
    n: usize,
    mut mesh: Mesh,
    params: &Params,
    out_path: &Path,
) -> Result<Option<LinkTestRun>> {
    let iterations = params.iterations(n);
    let shared_memory = mesh.shm.is_some();
    let mut bufs = Bufs {
        recv: vec![0u8; params.message_size],
        send: if params.direction == Direction::Bidirectional {
            vec![0x5a; params.message_size]
        } else {
            Vec::new()
        },
    };
    let mut rows = Vec::with_capacity(iterations.len());
    let mut clock = Vec::with_capacity(iterations.len());
    for it in &iterations {
        barrier(rank, n, &mut mesh)?;
        let start = chrono::Utc::now();
        let mut row = Row {
            times: vec![0.0; n],
            steps: vec![0; n],
            a2a: 0.0,
        };
        if params.serial {
            if rank == 0 {
                serial_phase(n, it, &mut mesh, &mut bufs, params, &mut row)?;
            } else {
                serve(rank, &mut mesh, &mut bufs, params, Some(&mut row))?;
            }
        } else {
            parallel_phase(rank, n, it, &mut mesh, &mut bufs, params, &mut row)?;
        }
        if params.all_to_all {
            barrier(rank, n, &mut mesh)?;
            row.a2a = all_to_all(rank, it, &mut mesh, &mut bufs.recv, params)?;
        }
        clock.push((start, chrono::Utc::now()));
        rows.push(row);
    }
    let hostname = params.hostname.clone().unwrap_or_else(local_hostname);
    if rank != 0 {
        wire::send_rows(mesh.get(0)?, &hostname, &rows)?;
        serve(rank, &mut mesh, &mut bufs, params, None)?;
        return Ok(None);
    }
    // Rank 0: gather every rank's rows.
    let m = iterations.len();
    let mut hosts = vec![hostname];
    let mut all: Vec<Vec<Row>> = vec![rows];
    for r in 1..n {
        let (h, rr) = wire::recv_rows(mesh.get(r)?, n, m, r)?;
        hosts.push(h);
        all.push(rr);
    }
    let mut perms = Vec::with_capacity(m);
    for (k, (start, end)) in clock.into_iter().enumerate() {
        let mut times = Vec::with_capacity(n * n);
        let mut steps = Vec::with_capacity(n * n);
        let mut a2a = Vec::new();
        for (r, rr) in all.iter().enumerate() {
            let row = rr.get(k).ok_or_else(|| {
                NetprobeError::Protocol(format!("rank {r} sent no row for iteration {k}"))
            })?;
            times.extend_from_slice(&row.times);
            steps.extend_from_slice(&row.steps);
            if params.all_to_all {
                a2a.push(AllToAllTime {
                    rank: r,
                    step: None,
                    time_s: row.a2a,
                });
            }
        }
        let (min, avg, max) = stats(
            (0..n * n)
                .filter(|k| k / n != k % n)
                .filter_map(|k| times.get(k).copied()),
        );
        let a2a_stats = params.all_to_all.then(|| {
            let (a, b, c) = stats(a2a.iter().map(|x| x.time_s));
            [a, b, c]
        });
        let fmt = "%Y-%m-%d %H:%M:%S%.6f";
        perms.push(Permutation {
            start_time: Some(start.format(fmt).to_string()),
            end_time: Some(end.format(fmt).to_string()),
            min_time_s: min,
            avg_time_s: avg,
            max_time_s: max,
            a2a: a2a_stats,
            times,
            steps,
            alltoall: a2a,
            slow_links: Vec::new(),
        });
    }
    for p in &mut perms {
        p.slow_links = retest_slowest(&mut mesh, &p.times, n, &mut bufs, params)?;
    }
    for r in 1..n {
        wire::send_cmd(mesh.get(r)?, Cmd::Done)?;
    }
    let run = LinkTestRun {
        format: PayloadFormat::V2,
        version: [2, 1, 17],
        git_hash: None,
        // LinkTest names the transport it measured; shared memory is ours.
        mode: if shared_memory { "SHM" } else { "TCP" }.into(),
        num_tasks: n,
        num_messages: params.num_messages,
        message_size: params.message_size as u64,
        num_warmup_messages: Some(params.warmup_messages),
        num_serial_retests: params.serial_retests as u64,
        num_multi_buffers: Some(1),
        buffer_seed: Some(0),
        num_randomized_tasks: Some(params.randomized_tasks),
        task_seed: Some(params.seed),
        memory_allocator: Some(0),
        flags: Flags {
            all_to_all: params.all_to_all,
            bidirectional: params.direction == Direction::Bidirectional,
            unidirectional: params.direction == Direction::Unidirectional,
            randomize_steps: params.randomize_steps,
            serial: params.serial,
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
        permutations: perms,
    };
    benchlake_formats::linktest::v2::write_file(&run, out_path, &SionWriteOptions::default())?;
    tracing::info!(path = %out_path.display(), ranks = n, iterations = m, "netprobe result written");
    Ok(Some(run))
}

/// (min, mean, max); zeros when empty.
fn stats(v: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let (mut min, mut max, mut sum, mut k) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0usize);
    for t in v {
        min = min.min(t);
        max = max.max(t);
        sum += t;
        k += 1;
    }
    if k == 0 {
        (0.0, 0.0, 0.0)
    } else {
        (min, sum / k as f64, max)
    }
}

/// Every rank waits until all have arrived (tokens through rank 0).
fn barrier(rank: usize, n: usize, mesh: &mut Mesh) -> Result<()> {
    if rank == 0 {
        for r in 1..n {
            wire::recv_token(mesh.get(r)?, r)?;
        }
        for r in 1..n {
            wire::send_token(mesh.get(r)?)?;
        }
    } else {
        wire::send_token(mesh.get(0)?)?;
        wire::recv_token(mesh.get(0)?, 0)?;
    }
    Ok(())
}

/// All pairs of a step at once, steps in the iteration's order.
fn parallel_phase(
    rank: usize,
    n: usize,
    it: &Iteration,
    mesh: &mut Mesh,
    bufs: &mut Bufs,
    params: &Params,
    row: &mut Row,
) -> Result<()> {
    for (executed, step) in it.order.iter().enumerate() {
        if let Some(p) = it.partner(rank, *step) {
            let t = exchange(rank, p, mesh, bufs, params)?;
            if let Some(x) = row.times.get_mut(p) {
                *x = t;
            }
            if let Some(x) = row.steps.get_mut(p) {
                *x = executed as i32 + 1;
            }
        }
        if params.barriers && executed + 1 < it.order.len() {
            barrier(rank, n, mesh)?;
        }
    }
    Ok(())
}

/// Rank 0 in serial mode: one pair at a time, in step order.
fn serial_phase(
    n: usize,
    it: &Iteration,
    mesh: &mut Mesh,
    bufs: &mut Bufs,
    params: &Params,
    row: &mut Row,
) -> Result<()> {
    for (executed, step) in it.order.iter().enumerate() {
        let e = executed + 1;
        for (a, b) in it.pairs(*step) {
            for x in [a, b] {
                if x != 0 {
                    wire::send_cmd(mesh.get(x)?, Cmd::Pair { a, b, step: e })?;
                }
            }
            if a == 0 {
                let t = exchange(0, b, mesh, bufs, params)?;
                if let Some(x) = row.times.get_mut(b) {
                    *x = t;
                }
                if let Some(x) = row.steps.get_mut(b) {
                    *x = e as i32;
                }
            }
            for x in [a, b] {
                if x != 0 {
                    wire::recv_f64(mesh.get(x)?, x)?;
                }
            }
        }
    }
    for r in 1..n {
        wire::send_cmd(mesh.get(r)?, Cmd::EndPhase)?;
    }
    Ok(())
}

/// Ranks ≠ 0: follow rank 0's commands. In serial mode (`row` given) until the
/// end of the phase; afterwards (retests) until Done.
fn serve(
    rank: usize,
    mesh: &mut Mesh,
    bufs: &mut Bufs,
    params: &Params,
    mut row: Option<&mut Row>,
) -> Result<()> {
    loop {
        // Waiting for the next command may take longer than any one exchange
        // (serial mode: every other pair goes first), so this read alone has
        // no timeout; a dead rank 0 closes the stream, a dead host is left to
        // the task's timeout.
        let c0 = mesh.get(0)?;
        c0.set_read_timeout(None).map_err(io("read timeout"))?;
        let cmd = wire::recv_cmd(c0);
        c0.set_read_timeout(Some(params.io_timeout))
            .map_err(io("read timeout"))?;
        match cmd? {
            Cmd::Done => return Ok(()),
            Cmd::EndPhase if row.is_some() => return Ok(()),
            Cmd::Pair { a, b, step } if row.is_some() && (a == rank || b == rank) => {
                let other = if a == rank { b } else { a };
                let t = exchange(rank, other, mesh, bufs, params)?;
                if let Some(r) = row.as_deref_mut() {
                    if let Some(x) = r.times.get_mut(other) {
                        *x = t;
                    }
                    if let Some(x) = r.steps.get_mut(other) {
                        *x = step as i32;
                    }
                }
                wire::send_f64(mesh.get(0)?, t)?;
            }
            Cmd::Retest { from, to } if row.is_none() && (from == rank || to == rank) => {
                let other = if from == rank { to } else { from };
                let role = if from == rank {
                    Role::Sender
                } else {
                    Role::Receiver
                };
                let t = one_way(role, rank, other, mesh, bufs, params)?;
                wire::send_f64(mesh.get(0)?, t)?;
            }
            cmd => {
                return Err(NetprobeError::Protocol(format!(
                    "rank {rank}: unexpected command {cmd:?} from rank 0"
                )));
            }
        }
    }
}

/// Rank 0: retests the slowest pairs one at a time.
fn retest_slowest(
    mesh: &mut Mesh,
    times: &[f64],
    n: usize,
    bufs: &mut Bufs,
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
        for r in [from, to] {
            if r != 0 {
                wire::send_cmd(mesh.get(r)?, Cmd::Retest { from, to })?;
            }
        }
        let mut retest = None;
        if from == 0 {
            retest = Some(one_way(Role::Sender, 0, to, mesh, bufs, params)?);
        } else if to == 0 {
            one_way(Role::Receiver, 0, from, mesh, bufs, params)?;
        }
        for r in [from, to] {
            if r != 0 {
                let x = wire::recv_f64(mesh.get(r)?, r)?;
                if r == from {
                    retest = Some(x);
                }
            }
        }
        out.push(SlowLink {
            from_rank: from,
            to_rank: to,
            time_s: t,
            retest_time_s: retest,
        });
    }
    Ok(out)
}

/// Which side of a one-way measurement this rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Initiates the ping-pong / sends the stream; its time is the pair's.
    Sender,
    /// Answers / receives.
    Receiver,
}

/// Both directions of the pair (rank, p): the lower rank's direction first.
/// Returns this rank's time toward `p`.
fn exchange(
    rank: usize,
    p: usize,
    mesh: &mut Mesh,
    bufs: &mut Bufs,
    params: &Params,
) -> Result<f64> {
    if params.direction == Direction::Bidirectional {
        return bidirectional(mesh.get(p)?, bufs, params);
    }
    let mut mine = 0.0;
    for first in [rank.min(p), rank.max(p)] {
        if first == rank {
            mine = one_way(Role::Sender, rank, p, mesh, bufs, params)?;
        } else {
            one_way(Role::Receiver, rank, p, mesh, bufs, params)?;
        }
    }
    Ok(mine)
}

/// One direction of the pair (`rank`, `p`) (bidirectional: both at once).
/// Seconds per message for the sender (and both sides when bidirectional);
/// 0 for a receiver.
fn one_way(
    role: Role,
    rank: usize,
    p: usize,
    mesh: &mut Mesh,
    bufs: &mut Bufs,
    params: &Params,
) -> Result<f64> {
    if let Some(links) = &mesh.shm {
        return shm_ping_pong(role, rank, p, links, bufs, params);
    }
    tcp_one_way(role, mesh.get(p)?, bufs, params)
}

/// A ping-pong through shared memory ([`ShmLinks`]): the same messages and
/// timing as the TCP one.
fn shm_ping_pong(
    role: Role,
    rank: usize,
    p: usize,
    links: &ShmLinks,
    bufs: &mut Bufs,
    params: &Params,
) -> Result<f64> {
    let buf = &mut bufs.recv;
    links.open(rank, p)?;
    let total = params.warmup_messages + params.num_messages;
    let mut t = Instant::now();
    for k in 0..total {
        if role == Role::Sender {
            if k == params.warmup_messages {
                t = Instant::now();
            }
            links.send(rank, p, buf)?;
            links.recv(rank, p, buf)?;
        } else {
            links.recv(rank, p, buf)?;
            links.send(rank, p, buf)?;
        }
    }
    let elapsed = t.elapsed().as_secs_f64();
    links.close(rank)?;
    Ok(match role {
        Role::Sender => elapsed / (2 * params.num_messages) as f64,
        Role::Receiver => 0.0,
    })
}

/// [`one_way`] on the pair's TCP stream.
fn tcp_one_way(role: Role, c: &mut TcpStream, bufs: &mut Bufs, params: &Params) -> Result<f64> {
    if params.direction == Direction::Bidirectional {
        return bidirectional(c, bufs, params);
    }
    let buf = &mut bufs.recv;
    let limit = params.io_timeout;
    match (params.direction, role) {
        (Direction::Bidirectional, _) => Ok(0.0),
        (Direction::PingPong, Role::Sender) => polling(c, |c| {
            for _ in 0..params.warmup_messages {
                write_polling(c, buf, limit).map_err(io("ping"))?;
                read_polling(c, buf, limit).map_err(io("pong"))?;
            }
            let t = Instant::now();
            for _ in 0..params.num_messages {
                write_polling(c, buf, limit).map_err(io("ping"))?;
                read_polling(c, buf, limit).map_err(io("pong"))?;
            }
            Ok(t.elapsed().as_secs_f64() / (2 * params.num_messages) as f64)
        }),
        (Direction::PingPong, Role::Receiver) => polling(c, |c| {
            for _ in 0..params.warmup_messages + params.num_messages {
                read_polling(c, buf, limit).map_err(io("ping"))?;
                write_polling(c, buf, limit).map_err(io("pong"))?;
            }
            Ok(0.0)
        }),
        // Streams block: polling measured slower at 8 B (2.2 against
        // 0.77 us per message) though faster at 64 KiB and 1 MiB
        // (docs/linktest.md §7.3); the sockets' timeouts bound every wait.
        (Direction::Unidirectional, Role::Sender) => {
            let mut ack = [0u8; 1];
            if params.warmup_messages > 0 {
                for _ in 0..params.warmup_messages {
                    c.write_all(buf).map_err(io("send"))?;
                }
                c.read_exact(&mut ack).map_err(io("acknowledgement"))?;
            }
            let t = Instant::now();
            for _ in 0..params.num_messages {
                c.write_all(buf).map_err(io("send"))?;
            }
            c.read_exact(&mut ack).map_err(io("acknowledgement"))?;
            Ok(t.elapsed().as_secs_f64() / params.num_messages as f64)
        }
        (Direction::Unidirectional, Role::Receiver) => {
            if params.warmup_messages > 0 {
                for _ in 0..params.warmup_messages {
                    c.read_exact(buf).map_err(io("receive"))?;
                }
                c.write_all(&[1]).map_err(io("acknowledge"))?;
            }
            for _ in 0..params.num_messages {
                c.read_exact(buf).map_err(io("receive"))?;
            }
            c.write_all(&[1]).map_err(io("acknowledge"))?;
            Ok(0.0)
        }
    }
}

/// Runs a ping-pong on `c` made non-blocking, polling it as MPI's progress
/// engine polls (LinkTest's ping-pongs are MPI): a blocking read puts the
/// thread to sleep, and waking it is the latency it then measures — on a
/// virtual machine with idle cores about 37 µs instead of 2 µs per message
/// (docs/linktest.md §7.3). The socket is blocking again afterwards.
fn polling<T>(c: &mut TcpStream, f: impl FnOnce(&mut TcpStream) -> Result<T>) -> Result<T> {
    c.set_nonblocking(true).map_err(io("non-blocking mode"))?;
    let out = f(c);
    let back = c.set_nonblocking(false).map_err(io("blocking mode"));
    let v = out?;
    back?;
    Ok(v)
}

/// Polls before yielding the core: a rank that waits keeps its core for about
/// this many empty reads, then lets another thread run (as Open MPI's
/// `mpi_yield_when_idle`), so ranks outnumbering the cores still progress.
pub(crate) const POLLS_BEFORE_YIELD: u32 = 4096;

/// Waiting on a non-blocking socket without sleeping in the kernel, and
/// without waiting forever: a socket's read timeout does not apply to
/// non-blocking reads, so the wait keeps its own (a peer that hangs fails
/// the exchange after `limit` without progress, as a blocking read would).
struct PollWait {
    polls: u32,
    since: Option<Instant>,
    limit: Duration,
}

impl PollWait {
    fn new(limit: Duration) -> Self {
        Self {
            polls: 0,
            since: None,
            limit,
        }
    }

    /// The socket made progress: the timeout starts again.
    fn progressed(&mut self) {
        self.since = None;
    }

    /// Nothing to read or write yet: spin, or yield the core every
    /// [`POLLS_BEFORE_YIELD`] polls (and check the timeout then).
    fn idle(&mut self) -> std::io::Result<()> {
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(POLLS_BEFORE_YIELD) {
            std::hint::spin_loop();
            return Ok(());
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() > self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no progress in {:?}", self.limit),
            ));
        }
        std::thread::yield_now();
        Ok(())
    }
}

/// `read_exact` on a non-blocking socket, polling.
fn read_polling(c: &mut TcpStream, buf: &mut [u8], limit: Duration) -> std::io::Result<()> {
    let (mut got, mut wait) = (0, PollWait::new(limit));
    while got < buf.len() {
        match c.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                got += n;
                wait.progressed();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait.idle()?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `write_all` on a non-blocking socket, polling while its buffer is full.
fn write_polling(c: &mut TcpStream, buf: &[u8], limit: Duration) -> std::io::Result<()> {
    let (mut sent, mut wait) = (0, PollWait::new(limit));
    while sent < buf.len() {
        match c.write(&buf[sent..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                sent += n;
                wait.progressed();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait.idle()?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Both sides stream to each other at once: a scoped thread writes while this
/// one reads (blocking sockets would deadlock once both send buffers fill).
/// Blocking, as the unidirectional streams: polling measured slower here
/// (docs/linktest.md §7.3), two polling threads per rank competing for the
/// cores; the sockets' timeouts bound every wait.
fn bidirectional(c: &mut TcpStream, bufs: &mut Bufs, params: &Params) -> Result<f64> {
    let mut phase = |count: u64| -> Result<f64> {
        if count == 0 {
            return Ok(0.0);
        }
        let mut w = c.try_clone().map_err(io("clone socket"))?;
        let send = &bufs.send;
        let recv = &mut bufs.recv;
        let t = Instant::now();
        std::thread::scope(|s| {
            let writer = s.spawn(move || -> std::io::Result<()> {
                for _ in 0..count {
                    w.write_all(send)?;
                }
                Ok(())
            });
            let mut r = Ok(());
            for _ in 0..count {
                if let Err(e) = c.read_exact(recv) {
                    r = Err(io("bidirectional receive")(e));
                    break;
                }
            }
            match writer.join() {
                Ok(Ok(())) => r,
                Ok(Err(e)) => r.and(Err(io("bidirectional send")(e))),
                Err(_) => r.and(Err(NetprobeError::Protocol(
                    "sender thread panicked".into(),
                ))),
            }
        })?;
        Ok(t.elapsed().as_secs_f64() / count as f64)
    };
    phase(params.warmup_messages)?;
    phase(params.num_messages)
}

/// The all-to-all phase: every rank exchanges one message with every other
/// (pairwise, in the iteration's step order), `warmup` untimed then
/// `num_messages` timed rounds. Seconds per round.
fn all_to_all(
    rank: usize,
    it: &Iteration,
    mesh: &mut Mesh,
    buf: &mut [u8],
    params: &Params,
) -> Result<f64> {
    // Blocking, as the streams of `bidirectional`: polling measured slower
    // here (docs/linktest.md §7.3).
    let mut t = Instant::now();
    for round in 0..params.warmup_messages + params.num_messages {
        if round == params.warmup_messages {
            t = Instant::now();
        }
        for step in &it.order {
            let Some(p) = it.partner(rank, *step) else {
                continue;
            };
            let c = mesh.get(p)?;
            // The lower rank writes first, so a message larger than the socket
            // buffers never has both sides blocked in write.
            if rank < p {
                c.write_all(buf).map_err(io("all-to-all send"))?;
                c.read_exact(buf).map_err(io("all-to-all receive"))?;
            } else {
                c.read_exact(buf).map_err(io("all-to-all receive"))?;
                c.write_all(buf).map_err(io("all-to-all send"))?;
            }
        }
    }
    Ok(t.elapsed().as_secs_f64() / params.num_messages as f64)
}

/// The name this rank's node goes by in the results (the host field of the
/// LinkTest file): the node by the one rule of [`benchlake_core::node`] —
/// Slurm's node name, else the agent's node, else the kernel's host name.
fn local_hostname() -> String {
    benchlake_core::node::name()
}

#[cfg(test)]
mod poll_tests {
    use super::*;

    /// A peer that stays connected but sends nothing fails the polling read
    /// after the limit, as a blocking read with a timeout would, instead of
    /// spinning until the task's timeout; what arrives is read in full.
    #[test]
    fn a_silent_peer_times_out_and_a_slow_one_is_read_in_full() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 8];
        let t = Instant::now();
        let e = read_polling(&mut b, &mut buf, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        // Half now, half later: the timeout counts from the last progress.
        let w = std::thread::spawn(move || {
            a.write_all(b"abcd").unwrap();
            std::thread::sleep(Duration::from_millis(150));
            a.write_all(b"efgh").unwrap();
            a
        });
        read_polling(&mut b, &mut buf, Duration::from_millis(1000)).unwrap();
        assert_eq!(&buf, b"abcdefgh");
        drop(w.join().unwrap());
        let e = read_polling(&mut b, &mut buf, Duration::from_millis(1000)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
    }
}
