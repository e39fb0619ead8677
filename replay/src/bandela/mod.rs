//! The Bandela (replaympi) model, host types 0 (single shared-memory host) and 2
//! (hosts of type 0 linked by a switch through adapters).
//!
//! The event loop of reference §3: every rank has `comput` and `comm`; the unblocked
//! rank with the smallest `comput + comm` goes next (ties: lowest rank). isend/irecv/
//! wait pay the software latency L(size); the **receiving CPU** does the transfer
//! (size / BW(size), small or big); a send is buffered (copied by the sender at
//! `local_bandwidth`) unless its buffer is symmetric and larger than `mpi_buffer_max`,
//! in which case it completes when the receiver has done the single copy; a wait on an
//! incomplete request blocks and is resynchronised (`wait += clock − (comput + comm)`)
//! when the partner event happens; barriers synchronise and pay the barrier latency.
//! Bandwidths are in MB/s with MB = 10^6 B (the seed's numbers need it), latencies µs.
//! Host type 2: a transfer between hosts is first pushed into the switch by an adapter
//! of the sender's host (round robin), then read by an adapter of the receiver's host;
//! each half runs at twice the ping-pong bandwidth entered; `synchronous Y` locks the
//! sending CPU during its half (N: only a wait on the send blocks); `interleave Y`
//! shares the adapter's aggregate bandwidth (2 × the aggregate peak, or per-link ×
//! `inter_host_degradation_ratio` when the aggregate is −1) among the transfers active
//! when one starts, `N` queues them. Host type 1 (topology plug-in) is not implemented
//! yet (clear error).
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use benchlake_formats::FormatError;
use benchlake_formats::bandela::input::Interp;
use benchlake_formats::bandela::{BRecord, BandelaInput, Kernel, RankTrace};

use crate::error::{ReplayError, Result};
use crate::result::{AdapterStats, CommTimes, RankResult, ReplayResult, TimelineEvent};
use crate::source::{Decode, Source};

mod decode;
mod output;
mod ready;
mod reqs;
pub mod topology;
use decode::*;
pub use output::{
    chrome_trace_json, column_data_csv, paraver_prv, summary_text, transfer_matrix_text,
};
pub use topology::{BandelaItem, CPlugin, Topology};

struct Msg {
    src: u32,
    bytes: u64,
    /// Sender clock when the data can be read (after latency, and copy if buffered).
    avail: f64,
    buffered: bool,
    /// Receiver clock when its transfer ended.
    done: Option<f64>,
    send_req: i64,
    /// Crosses the switch (host type 2, different hosts).
    inter: bool,
    /// Sides still holding the message (the send request, the receive): its
    /// slot is reused once both are done, so memory follows the messages in
    /// flight, not the trace's length.
    refs: u8,
}

/// One adapter of a host (host type 2).
#[derive(Default)]
struct Adapter {
    busy_until: f64,
    active: Vec<f64>,
    requests: u64,
    bytes: f64,
    min: f64,
    max: f64,
    dur_sum: f64,
    busy: f64,
    cur: Option<(f64, f64)>,
}

impl Adapter {
    fn record(&mut self, start: f64, end: f64, bytes: u64) {
        let b = bytes as f64;
        if self.requests == 0 {
            self.min = b;
            self.max = b;
        } else {
            self.min = self.min.min(b);
            self.max = self.max.max(b);
        }
        self.requests += 1;
        self.bytes += b;
        self.dur_sum += end - start;
        // Busy time as a union of intervals, merged as requests arrive (exact when
        // requests reach the adapter in start order, which the clock order gives).
        self.cur = match self.cur {
            Some((cs, ce)) if start <= ce => Some((cs.min(start), ce.max(end))),
            Some((cs, ce)) => {
                self.busy += ce - cs;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
}

enum Req {
    Send {
        msg: usize,
    },
    Recv {
        src: i64,
        tag: i64,
        comm: i64,
        msg: Option<usize>,
        bytes: u64,
        /// Clock when the receive was posted (for the long-latency rule).
        posted: f64,
    },
}

#[derive(Clone, Copy, PartialEq)]
enum Blocked {
    No,
    Req(i64),
    Barrier(i64),
}

struct Rank {
    /// The rank's trace file.
    path: PathBuf,
    /// The line of the record being replayed.
    line: u64,
    comput: f64,
    acc: CommTimes,
    /// Per routine (by [`Fid`]), once charged.
    funcs: Vec<Option<CommTimes>>,
    reqs: reqs::Reqs<Req>,
    blocked: Blocked,
    finished: bool,
    cur: Option<Rec>,
    calipers: Vec<u32>,
    /// A pending `ignore_next_col` marker.
    ignore_mark: Option<u32>,
    /// The collective whose kernels are being skipped.
    ignoring: Option<Fid>,
    bytes_recv: u64,
    /// Timeline intervals (kind, start, end), recorded only when asked for.
    tl: Option<Vec<(u8, f64, f64)>>,
    bytes_buffered: u64,
    bytes_sent: u64,
    sent: u64,
    host: u32,
}

impl Rank {
    fn clock(&self) -> f64 {
        self.comput + self.acc.total()
    }
}

/// A record as the event loop needs it, made on the decoding thread: the
/// routine is its number, and what the loop never reads (a kernel's `ord`)
/// is left out. At 64 bytes it is copied out of its chunk in one go, where
/// a [`BRecord`] with its name took 104 bytes and a call to clone the name.
#[derive(Debug, Clone, PartialEq)]
enum Rec {
    Compute {
        seconds: f64,
        caliper: Option<u32>,
    },
    Kernel(Kernel, Fid),
    /// A communicator (rare): boxed so that it does not make every record
    /// larger.
    Comm(Box<(i64, Vec<u32>)>),
    CaliperPush(u32),
    CaliperPop,
    IgnoreNextCol(u32),
}

const _: () = assert!(std::mem::size_of::<Rec>() <= 64);

/// Replays the rank traces `files` (index = rank) with the model input `input`.
pub fn simulate(files: &[PathBuf], input: &BandelaInput) -> Result<ReplayResult> {
    simulate_with(files, input, None)
}

/// [`simulate`] with a topology plug-in (required for host type 1).
pub fn simulate_with(
    files: &[PathBuf],
    input: &BandelaInput,
    topo: Option<&mut dyn Topology>,
) -> Result<ReplayResult> {
    simulate_opts(files, input, topo, false)
}

/// [`simulate_with`], optionally recording the timeline (memory then grows with the
/// trace).
pub fn simulate_opts(
    files: &[PathBuf],
    input: &BandelaInput,
    topo: Option<&mut dyn Topology>,
    timeline: bool,
) -> Result<ReplayResult> {
    simulate_threads(files, input, topo, timeline, 1)
}

/// [`simulate_opts`] on up to `threads` threads: with 2 or more, a second
/// thread reads and parses the rank files ahead of the event loop (the loop
/// itself is one ordered sequence of events). The result is the same, bit for
/// bit, whatever `threads` is.
pub fn simulate_threads(
    files: &[PathBuf],
    input: &BandelaInput,
    mut topo: Option<&mut dyn Topology>,
    timeline: bool,
    threads: usize,
) -> Result<ReplayResult> {
    if input.host_type == 1 && topo.is_none() {
        return Err(ReplayError::Unsupported {
            file: files.first().cloned().unwrap_or_default(),
            message: "host type 1 needs a topology plug-in (parameter topology=<libtopo.so>)"
                .into(),
        });
    }
    if input.host_type != 1 {
        topo = None;
    }
    // One open file per rank for the whole replay: many systems start a
    // process at 1,024 (docs/replay.md, "Open files and read buffers").
    let held = benchlake_core::limits::open_now().unwrap_or(OTHER_FILES);
    let limits = benchlake_core::limits::ensure_open_files(
        (files.len() as u64).saturating_add(held + OTHER_FILES),
    );
    tracing::debug!(?limits, ranks = files.len(), "open-files limit");
    let mut ranks = Vec::with_capacity(files.len());
    let mut traces = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let stream = RankTrace::open_buffered(f, rank_buffer(files.len()))
            .map_err(|e| out_of_files(e, files.len()))?;
        if stream.header.rank as usize != i {
            return Err(ReplayError::Inconsistent {
                file: f.clone(),
                message: format!(
                    "file holds rank {} but was given as rank {i}",
                    stream.header.rank
                ),
            });
        }
        traces.push(stream);
        ranks.push(Rank {
            path: f.clone(),
            line: 0,
            comput: 0.0,
            acc: CommTimes::default(),
            funcs: Vec::new(),
            reqs: reqs::Reqs::default(),
            blocked: Blocked::No,
            finished: false,
            cur: None,
            calipers: Vec::new(),
            ignore_mark: None,
            ignoring: None,
            bytes_recv: 0,
            tl: timeline.then(Vec::new),
            bytes_buffered: 0,
            bytes_sent: 0,
            sent: 0,
            host: input.host_of(i as u32).unwrap_or(0),
        });
    }
    let names = Names::default();
    let dec = RankFiles {
        ranks: traces.into_iter().map(|t| (Some(t), None, false)).collect(),
        routines: Routines::new(names.clone()),
    };
    if threads <= 1 {
        return replay(
            input,
            ranks,
            Source::sequential(dec),
            names,
            topo,
            files.len(),
        );
    }
    let name = files
        .first()
        .and_then(|f| f.parent())
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    std::thread::scope(|scope| {
        let src = Source::pipelined(dec, name, scope)?;
        replay(input, ranks, src, names, topo, files.len())
    })
}

/// Open files a replay leaves room for beyond its rank files and what the
/// process holds already (a worker's other jobs, its connections).
const OTHER_FILES: u64 = 256;

/// Read buffer per rank file: 16 KiB up to 256 ranks, then smaller so that
/// all of them stay within 4 MiB, but never under 4 KiB (at 65,536 ranks
/// 256 MiB, not the 1 GiB of 16 KiB each). Every rank's file is read side by
/// side, so this is most of the replay's memory at scale; and a rank's lines
/// are parsed a while after its buffer was filled, by then out of the core's
/// caches if all the buffers together are much larger than they are (4 KiB
/// against 16 KiB at 1,024 ranks: 4 % faster, 12 MiB less, docs/testing.md).
fn rank_buffer(ranks: usize) -> usize {
    use benchlake_formats::bandela::trace::{DEFAULT_BUFFER, MIN_BUFFER};
    ((4 << 20) / ranks.max(1)).clamp(MIN_BUFFER, DEFAULT_BUFFER)
}

/// A rank file that could not be opened because the process has too many
/// files open: the replay holds one per rank, so say how many and what the
/// limit is (other errors pass through).
fn out_of_files(e: FormatError, ranks: usize) -> ReplayError {
    match e {
        FormatError::Io { file, source }
            if benchlake_core::limits::is_too_many_open_files(&source) =>
        {
            let limit = benchlake_core::limits::open_files().map_or_else(
                || "a limited number of open files".into(),
                |l| l.to_string(),
            );
            ReplayError::Limit {
                file,
                message: format!(
                    "cannot open it ({source}): the replay reads the trace's {ranks} rank files \
                     side by side, one open file each, and this process may have {limit}; \
                     raise the limit (`ulimit -n`, or `LimitNOFILE=` of a systemd unit)"
                ),
            }
        }
        e => e.into(),
    }
}

/// The event loop over `ranks`, reading their records from `src`.
fn replay(
    input: &BandelaInput,
    ranks: Vec<Rank>,
    src: Source<RankFiles>,
    names: Names,
    topo: Option<&mut dyn Topology>,
    nfiles: usize,
) -> Result<ReplayResult> {
    let adapters = input
        .blocks
        .iter()
        .map(|b| {
            (
                b.host,
                (0..b.adapters)
                    .map(|_| Adapter::default())
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let mut m = Model {
        input,
        src,
        names,
        ranks,
        msgs: Vec::new(),
        free_msgs: Vec::new(),
        unmatched_sends: (0..nfiles).map(|_| VecDeque::new()).collect(),
        comms: HashMap::new(),
        barrier: HashMap::new(),
        records: 0,
        matrix: HashMap::new(),
        adapters,
        rr: HashMap::new(),
        topo,
        live: topology::LiveTransfers::new(),
        ready: ready::Ready::new(nfiles),
        touched: Vec::new(),
    };
    for i in 0..m.ranks.len() {
        m.refresh(i);
    }
    let local_bw = input
        .local_bandwidth
        .unwrap_or(2.0 * input.intra_bandwidth.base);
    let nprocs = i32::try_from(nfiles).unwrap_or(i32::MAX);
    if let Some(t) = m.topo.as_deref_mut() {
        t.start(nprocs, local_bw);
    }
    m.run()?;
    tracing::debug!(
        chunks = m.src.decoded_by_loop(),
        "chunks the event loop decoded itself, the decoding thread not having got to them"
    );
    let end = m.ranks.iter().map(|r| r.clock()).fold(0.0, f64::max);
    if let Some(t) = m.topo.as_deref_mut() {
        m.live.retire(t, f64::INFINITY);
        t.end(end);
    }
    Ok(m.result())
}

struct Model<'a, 't> {
    input: &'a BandelaInput,
    /// Every rank's records.
    src: Source<RankFiles>,
    /// The routines' names.
    names: Names,
    ranks: Vec<Rank>,
    msgs: Vec<Msg>,
    /// Slots of `msgs` no side holds any more.
    free_msgs: Vec<usize>,
    /// (msg id, tag, comm) of sends not yet matched by a receive.
    /// per destination rank, in the order they were sent.
    unmatched_sends: Vec<VecDeque<(usize, i64, i64)>>,
    comms: HashMap<i64, Vec<u32>>,
    barrier: HashMap<i64, Vec<u32>>,
    records: u64,
    /// Messages and bytes per (destination, source): counted in a hash map
    /// and ordered once, in the result (a B-tree search per send was 5 % of
    /// the loop's samples on a 1,024-rank halo).
    matrix: HashMap<(u32, u32), (u64, u64)>,
    /// Adapters per host (host type 2).
    adapters: BTreeMap<u32, Vec<Adapter>>,
    /// Next adapter of each host (round robin).
    rr: HashMap<u32, usize>,
    /// Host type 1 plug-in.
    topo: Option<&'t mut dyn Topology>,
    live: topology::LiveTransfers,
    /// The next rank to step.
    ready: ready::Ready,
    /// Ranks other than the stepped one whose clock or state a step changed
    /// (woken, released from a barrier): their place in `ready` is redone.
    touched: Vec<u32>,
}

fn charge(r: &mut Rank, f: Fid, cat: usize, v: f64) {
    if v > 0.0 {
        let start = r.clock();
        if let Some(tl) = r.tl.as_mut() {
            tl.push((cat as u8, start, start + v));
        }
    }
    if r.funcs.len() <= f as usize {
        r.funcs.resize(f as usize + 1, None);
    }
    let Some(e) = r
        .funcs
        .get_mut(f as usize)
        .map(|e| e.get_or_insert_default())
    else {
        return;
    };
    match cat {
        0 => {
            r.acc.wait += v;
            e.wait += v;
        }
        1 => {
            r.acc.latency += v;
            e.latency += v;
        }
        2 => {
            r.acc.small += v;
            e.small += v;
        }
        _ => {
            r.acc.big += v;
            e.big += v;
        }
    }
}

impl Model<'_, '_> {
    fn err(&self, rank: usize, msg: impl Into<String>) -> ReplayError {
        let (file, line) = self
            .ranks
            .get(rank)
            .map(|r| (r.path.clone(), r.line))
            .unwrap_or_default();
        ReplayError::Inconsistent {
            file,
            message: format!("rank {rank} (record at line {line}): {}", msg.into()),
        }
    }

    fn latency_s(&self, a: u32, b: u32, bytes: u64) -> f64 {
        let (ha, hb) = (
            self.ranks.get(a as usize).map_or(0, |r| r.host),
            self.ranks.get(b as usize).map_or(0, |r| r.host),
        );
        let curve = if ha != hb {
            self.input
                .inter_latency
                .as_ref()
                .unwrap_or(&self.input.intra_latency)
        } else {
            &self.input.intra_latency
        };
        curve.at(bytes, self.input.interp, None) * 1e-6
    }

    fn host(&self, rank: u32) -> u32 {
        self.ranks.get(rank as usize).map_or(0, |r| r.host)
    }

    fn inter(&self, a: u32, b: u32) -> bool {
        self.input.host_type == 2 && self.host(a) != self.host(b)
    }

    /// One half of an inter-host transfer on an adapter of `host` (round robin),
    /// starting no earlier than `ready`. The link runs at twice the ping-pong bandwidth
    /// entered (the switch buffers, then the receiver reads); interleaved transfers share
    /// the adapter's aggregate bandwidth, otherwise they queue. Returns (start, end).
    fn adapter_stage(
        &mut self,
        rank: usize,
        host: u32,
        ready: f64,
        bytes: u64,
    ) -> Result<(f64, f64)> {
        let interp = self.input.interp;
        let (per_link_base, aggregate, curve) = match &self.input.inter_bandwidth {
            Some((p, a, c)) => (*p, *a, c.clone()),
            None => {
                return Err(self.err(
                    rank,
                    "inter-host transfer without INTER_HOST_BANDWIDTH_PEAKS",
                ));
            }
        };
        let per_link = 2.0 * curve.at(bytes, interp, Some(per_link_base)) * 1e6;
        let ratio = self
            .input
            .degradation_ratio
            .as_ref()
            .map_or(1.0, |c| c.at(bytes, interp, None));
        let n_adapters = self.adapters.get(&host).map_or(0, |v| v.len());
        if n_adapters == 0 {
            return Err(self.err(rank, format!("host {host} has no adapter (ADAPTERS 0) but sends or receives across the switch")));
        }
        let k = self.rr.entry(host).or_insert(0);
        let idx = *k % n_adapters;
        *k = (idx + 1) % n_adapters;
        let interleave = self.input.interleave;
        let Some(a) = self.adapters.get_mut(&host).and_then(|v| v.get_mut(idx)) else {
            return Ok((ready, ready));
        };
        let (start, bw) = if interleave {
            a.active.retain(|&e| e > ready);
            let n = a.active.len() as f64 + 1.0;
            let agg = if aggregate > 0.0 {
                2.0 * aggregate * 1e6
            } else {
                per_link * ratio
            };
            (ready, per_link.min(agg / n))
        } else {
            (ready.max(a.busy_until), per_link)
        };
        let end = if bw > 0.0 {
            start + bytes as f64 / bw
        } else {
            start
        };
        a.busy_until = a.busy_until.max(end);
        a.active.push(end);
        a.record(start, end, bytes);
        Ok((start, end))
    }

    fn transfer_s(&self, bytes: u64) -> f64 {
        let c = &self.input.intra_bandwidth;
        let bw = c.at(bytes, self.input.interp, Some(c.base));
        if bw > 0.0 {
            bytes as f64 / (bw * 1e6)
        } else {
            0.0
        }
    }

    fn small(&self, bytes: u64) -> usize {
        if bytes <= self.input.small_message_size {
            2
        } else {
            3
        }
    }

    /// Rank `i`'s place in `ready`: its clock when it can run.
    fn refresh(&mut self, i: usize) {
        let key = self
            .ranks
            .get(i)
            .filter(|r| !r.finished && r.blocked == Blocked::No)
            .map(Rank::clock);
        self.ready.set(i, key);
    }

    fn run(&mut self) -> Result<()> {
        // The unblocked rank with the smallest clock goes next.
        while let Some(i) = self.ready.first() {
            debug_assert_eq!(
                Some(i),
                self.ranks
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| !r.finished && r.blocked == Blocked::No)
                    .min_by(|a, b| a.1.clock().total_cmp(&b.1.clock()).then(a.0.cmp(&b.0)))
                    .map(|(i, _)| i),
                "the ready tree disagrees with a scan"
            );
            self.step(i)?;
            self.refresh(i);
            while let Some(j) = self.touched.pop() {
                self.refresh(j as usize);
            }
        }
        let stuck: Vec<String> = self
            .ranks
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.finished)
            .take(8)
            .map(|(i, r)| {
                let what = match r.blocked {
                    Blocked::Req(q) => format!("waits on request {q} whose partner never comes"),
                    Blocked::Barrier(c) => format!(
                        "waits in a barrier on communicator {c} that not every member reaches"
                    ),
                    Blocked::No => "is stalled".into(),
                };
                format!(
                    "rank {i} (record at line {} of {}) {what}",
                    r.line,
                    r.path.display()
                )
            })
            .collect();
        if !stuck.is_empty() {
            return Err(ReplayError::Inconsistent {
                file: self
                    .ranks
                    .first()
                    .map(|r| r.path.clone())
                    .unwrap_or_default(),
                message: format!("deadlock: {}", stuck.join("; ")),
            });
        }
        Ok(())
    }

    fn step(&mut self, i: usize) -> Result<()> {
        let Some(r) = self.ranks.get_mut(i) else {
            return Ok(());
        };
        let rec = match r.cur.take() {
            Some(c) => c,
            None => match self.src.next(i)? {
                Some((rec, line)) => {
                    self.records += 1;
                    r.line = line;
                    rec
                }
                None => {
                    r.finished = true;
                    return Ok(());
                }
            },
        };
        // The skipped collective's kernels are contiguous: any other record (a
        // computation burst between two calls, a marker) ends the skipped call, so
        // a second call of the same collective right after it is replayed.
        if !matches!(rec, Rec::Kernel(..)) {
            r.ignoring = None;
        }
        match rec {
            Rec::Compute { seconds, caliper } => {
                let idx = caliper.or(r.calipers.last().copied());
                let boost = idx
                    .and_then(|c| {
                        self.input
                            .caliper_boosts
                            .get((c as usize).wrapping_sub(1))
                            .copied()
                    })
                    .unwrap_or(1.0);
                let d = seconds / self.input.cpu_boost / boost;
                let start = r.clock();
                if let Some(tl) = r.tl.as_mut()
                    && d > 0.0
                {
                    tl.push((4, start, start + d));
                }
                r.comput += d;
            }
            Rec::Comm(c) => {
                let (id, ranks) = *c;
                self.comms.insert(id, ranks);
            }
            Rec::CaliperPush(c) => r.calipers.push(c),
            Rec::CaliperPop => {
                r.calipers.pop();
            }
            Rec::IgnoreNextCol(idx) => r.ignore_mark = Some(idx),
            Rec::Kernel(kernel, f) => {
                // ignore_next_col: skip the kernels of the marked collective.
                if r.ignoring == Some(f) {
                    return Ok(());
                }
                r.ignoring = None;
                if let Some(idx) = r.ignore_mark.take() {
                    let main_fn = name_of(&self.names, f);
                    if is_collective(&main_fn) {
                        if self.input.ignore_index.get((idx as usize).wrapping_sub(1)) == Some(&1) {
                            r.ignoring = Some(f);
                            return Ok(());
                        }
                    } else if !self.input.ignore_safely {
                        return Err(self.err(
                            i,
                            format!("ignore_next_col {idx} is followed by {main_fn}, not a collective (ignore_safely N)"),
                        ));
                    }
                }
                self.kernel(i, f, kernel)?
            }
        }
        Ok(())
    }

    /// The latency of a wait completing a receive whose send became available at
    /// `avail` and which was posted at `posted`: the long latency when the pair's
    /// arrivals are further apart than `delay_for_long_latency` (a de-scheduled
    /// process, TCP), else L(0).
    fn wait_latency(&self, a: u32, b: u32, avail: f64, posted: f64) -> f64 {
        let l0 = self.input.intra_latency.base * 1e-6;
        let Some(delay) = self.input.delay_for_long_latency else {
            return l0;
        };
        if (avail - posted).abs() * 1e6 <= delay {
            return l0;
        }
        let long = if self.host(a) != self.host(b) {
            self.input.inter_long_latency
        } else {
            self.input.intra_long_latency
        };
        long.map_or(l0, |v| v * 1e-6)
    }

    fn ignored(&self, col: Option<u32>) -> bool {
        col.is_some_and(|c| self.input.ignore_index.get((c as usize).wrapping_sub(1)) == Some(&1))
    }

    fn kernel(&mut self, i: usize, f: Fid, k: Kernel) -> Result<()> {
        let me = i as u32;
        match k {
            Kernel::Isend {
                peer,
                comm,
                tag,
                bytes,
                req,
                sym,
                col,
            } => {
                if self.ignored(col) {
                    return Ok(());
                }
                if peer as usize >= self.ranks.len() {
                    return Err(self.err(i, format!("isend to rank {peer}, which does not exist")));
                }
                let lat = self.latency_s(me, peer, bytes);
                let inter = self.inter(me, peer);
                // Across the switch the adapter buffers the data: the send completes once
                // it is in the switch, and there is no local copy.
                let buffered = inter || !(sym && bytes > self.input.mpi_buffer_max);
                let copy = if buffered && !inter {
                    let lb = self
                        .input
                        .local_bandwidth
                        .unwrap_or(2.0 * self.input.intra_bandwidth.base);
                    if lb > 0.0 {
                        bytes as f64 / (lb * 1e6)
                    } else {
                        0.0
                    }
                } else {
                    0.0
                };
                let cat = self.small(bytes);
                let Some(r) = self.ranks.get_mut(i) else {
                    return Ok(());
                };
                charge(r, f, 1, lat);
                if buffered && !inter {
                    charge(r, f, cat, copy);
                    r.bytes_buffered += bytes;
                }
                r.bytes_sent += bytes;
                r.sent += 1;
                let mut avail = r.clock();
                if inter {
                    let host = r.host;
                    let (s1, e1) = self.adapter_stage(i, host, avail, bytes)?;
                    if self.input.synchronous {
                        // The CPU is locked until its adapter has pushed the data.
                        if let Some(r) = self.ranks.get_mut(i) {
                            charge(r, f, 0, s1 - avail);
                            charge(r, f, cat, e1 - s1);
                        }
                    }
                    avail = e1;
                }
                let id = self.new_msg(Msg {
                    src: me,
                    bytes,
                    avail,
                    buffered,
                    done: None,
                    send_req: req,
                    inter,
                    refs: 2,
                });
                if let Some(r) = self.ranks.get_mut(i) {
                    r.reqs.insert(req, Req::Send { msg: id });
                }
                let e = self.matrix.entry((peer, me)).or_insert((0, 0));
                e.0 += 1;
                e.1 += bytes;
                // Match with the earliest posted receive of the destination.
                let dst = peer as usize;
                let matched = self.ranks.get(dst).and_then(|d| {
                    let mut best: Option<(i64, usize)> = None;
                    for (rq, q) in d.reqs.iter() {
                        if let Req::Recv {
                            src,
                            tag: t,
                            comm: c,
                            msg: None,
                            ..
                        } = q
                            && (*src == -1 || *src == i64::from(me))
                            && *t == tag
                            && *c == comm
                            && best.is_none_or(|b| *rq < b.0)
                        {
                            best = Some((*rq, 0));
                        }
                    }
                    best.map(|b| b.0)
                });
                match matched {
                    Some(rq) => {
                        if let Some(Req::Recv { msg, .. }) =
                            self.ranks.get_mut(dst).and_then(|d| d.reqs.get_mut(&rq))
                        {
                            *msg = Some(id);
                        }
                        self.wake(dst, avail)?;
                    }
                    None => {
                        if let Some(q) = self.unmatched_sends.get_mut(dst) {
                            q.push_back((id, tag, comm));
                        }
                    }
                }
            }
            Kernel::Irecv {
                peer,
                comm,
                tag,
                bytes,
                req,
                col,
                ..
            } => {
                if self.ignored(col) {
                    return Ok(());
                }
                if peer >= self.ranks.len() as i64 {
                    return Err(
                        self.err(i, format!("irecv from rank {peer}, which does not exist"))
                    );
                }
                let src_for_lat = if peer >= 0 { peer as u32 } else { me };
                let lat = self.latency_s(src_for_lat, me, bytes);
                let msgs = &self.msgs;
                let msg = self.unmatched_sends.get_mut(i).and_then(|q| {
                    let p = q.iter().position(|&(m, t, c)| {
                        msgs.get(m)
                            .is_some_and(|x| peer == -1 || i64::from(x.src) == peer)
                            && t == tag
                            && c == comm
                    })?;
                    q.remove(p).map(|x| x.0)
                });
                let Some(r) = self.ranks.get_mut(i) else {
                    return Ok(());
                };
                let posted = r.clock();
                charge(r, f, 1, lat);
                if r.reqs
                    .insert(
                        req,
                        Req::Recv {
                            src: peer,
                            tag,
                            comm,
                            msg,
                            bytes,
                            posted,
                        },
                    )
                    .is_some()
                {
                    return Err(self.err(i, format!("request {req} reused while still live")));
                }
            }
            Kernel::Wait { req }
            | Kernel::Test {
                req,
                completed: true,
            } => self.wait(i, f, req)?,
            Kernel::Test {
                req,
                completed: false,
            } => {
                if !self.ranks.get(i).is_some_and(|r| r.reqs.contains_key(&req)) {
                    return Err(self.err(i, format!("test on unknown request {req}")));
                }
                let lat = self.input.intra_latency.base * 1e-6;
                if let Some(r) = self.ranks.get_mut(i) {
                    charge(r, f, 1, lat);
                }
            }
            Kernel::Barrier { comm } => {
                let members: Vec<u32> = self
                    .comms
                    .get(&comm)
                    .cloned()
                    .unwrap_or_else(|| (0..self.ranks.len() as u32).collect());
                if !members.contains(&me) {
                    return Err(self.err(
                        i,
                        format!("barrier on communicator {comm}, which does not contain this rank"),
                    ));
                }
                let arrived = self.barrier.entry(comm).or_default();
                arrived.push(me);
                if arrived.len() < members.len() {
                    if let Some(r) = self.ranks.get_mut(i) {
                        r.blocked = Blocked::Barrier(comm);
                        r.cur = None;
                    }
                    return Ok(());
                }
                let arrived = self.barrier.remove(&comm).unwrap_or_default();
                let t = arrived
                    .iter()
                    .filter_map(|&a| self.ranks.get(a as usize))
                    .map(|r| r.clock())
                    .fold(0.0, f64::max);
                let hosts: std::collections::BTreeSet<u32> = arrived
                    .iter()
                    .filter_map(|&a| self.ranks.get(a as usize))
                    .map(|r| r.host)
                    .collect();
                let bl = if hosts.len() > 1 {
                    self.input.inter_barrier_latency
                } else {
                    self.input.intra_barrier_latency
                }
                .unwrap_or(0.0)
                    * 1e-6;
                for a in arrived {
                    self.touched.push(a);
                    if let Some(r) = self.ranks.get_mut(a as usize) {
                        let w = t - r.clock();
                        charge(r, f, 0, w.max(0.0));
                        charge(r, f, 1, bl);
                        r.blocked = Blocked::No;
                    }
                }
            }
            Kernel::Get { bytes, .. } | Kernel::Put { bytes, .. } => {
                let put = matches!(k, Kernel::Put { .. });
                let lat = self
                    .input
                    .get_put_latency
                    .as_ref()
                    .map_or(0.0, |c| c.at(bytes, self.input.interp, None))
                    * 1e-6;
                let bw = self
                    .input
                    .get_bandwidth
                    .as_ref()
                    .map_or(0.0, |c| c.at(bytes, self.input.interp, Some(c.base)))
                    * if put { 0.5 } else { 1.0 };
                let t = if bw > 0.0 {
                    bytes as f64 / (bw * 1e6)
                } else {
                    0.0
                };
                let cat = self.small(bytes);
                if let Some(r) = self.ranks.get_mut(i) {
                    charge(r, f, 1, lat);
                    charge(r, f, cat, t);
                }
            }
        }
        Ok(())
    }

    /// A wait (or a test that completed) on `req` of rank `i`.
    fn wait(&mut self, i: usize, f: Fid, req: i64) -> Result<()> {
        let lat = self.input.intra_latency.base * 1e-6;
        let Some(r) = self.ranks.get(i) else {
            return Ok(());
        };
        let Some(q) = r.reqs.get(&req) else {
            return Err(self.err(i, format!("wait on unknown request {req}")));
        };
        match *q {
            Req::Recv { msg: None, .. } => {
                // The partner has not posted its send: block until it does.
                self.block(i, req, f);
            }
            Req::Recv {
                msg: Some(m),
                bytes,
                posted,
                ..
            } => {
                let Some(msg) = self.msgs.get(m) else {
                    return Ok(());
                };
                let (avail, size, src, inter) = (
                    msg.avail,
                    msg.bytes.min(bytes.max(msg.bytes)),
                    msg.src,
                    msg.inter,
                );
                let lat = self.wait_latency(src, i as u32, avail, posted);
                let cat = self.small(size);
                let (wait_until, dur) = if inter {
                    // The receiver's adapter reads the data from the switch.
                    let now = self.ranks.get(i).map_or(0.0, |r| r.clock()) + lat;
                    let host = self.host(i as u32);
                    let (s2, e2) = self.adapter_stage(i, host, now.max(avail), size)?;
                    (s2 - lat, e2 - s2)
                } else if let Some(t) = self.topo.as_deref_mut() {
                    // Host type 1: the plug-in gives the receive bandwidth.
                    let start = self.ranks.get(i).map_or(0.0, |r| r.clock()).max(avail) + lat;
                    let bw = self.live.arrive(t, start, i as u32, src, size);
                    (
                        avail,
                        if bw > 0.0 {
                            size as f64 / (bw * 1e6)
                        } else {
                            0.0
                        },
                    )
                } else {
                    (avail, self.transfer_s(size))
                };
                let Some(r) = self.ranks.get_mut(i) else {
                    return Ok(());
                };
                let now = r.clock();
                if wait_until > now {
                    charge(r, f, 0, wait_until - now);
                }
                charge(r, f, 1, lat);
                charge(r, f, cat, dur);
                r.bytes_recv += size;
                r.reqs.remove(&req);
                let end = r.clock();
                if let Some(msg) = self.msgs.get_mut(m) {
                    msg.done = Some(end);
                }
                // A single-copy sender waiting on this message can go on.
                let sreq = self.msgs.get(m).map(|x| x.send_req).unwrap_or(-1);
                if self
                    .ranks
                    .get(src as usize)
                    .is_some_and(|s| s.blocked == Blocked::Req(sreq))
                {
                    self.wake(src as usize, end)?;
                }
                self.release(m);
            }
            Req::Send { msg: m } => {
                let (buffered, done, avail) = self
                    .msgs
                    .get(m)
                    .map_or((true, None, 0.0), |x| (x.buffered, x.done, x.avail));
                if buffered {
                    if let Some(r) = self.ranks.get_mut(i) {
                        // An asynchronous inter-host send is done when its data is in
                        // the switch.
                        let now = r.clock();
                        if avail > now {
                            charge(r, f, 0, avail - now);
                        }
                        charge(r, f, 1, lat);
                        r.reqs.remove(&req);
                    }
                    self.release(m);
                } else if let Some(end) = done {
                    if let Some(r) = self.ranks.get_mut(i) {
                        let now = r.clock();
                        if end > now {
                            charge(r, f, 0, end - now);
                        }
                        charge(r, f, 1, lat);
                        r.reqs.remove(&req);
                    }
                    self.release(m);
                } else {
                    self.block(i, req, f);
                }
            }
        }
        Ok(())
    }

    /// A new message's slot (a free one when there is).
    fn new_msg(&mut self, msg: Msg) -> usize {
        match self.free_msgs.pop() {
            Some(id) if id < self.msgs.len() => {
                if let Some(slot) = self.msgs.get_mut(id) {
                    *slot = msg;
                }
                id
            }
            _ => {
                self.msgs.push(msg);
                self.msgs.len() - 1
            }
        }
    }

    /// One side is done with message `m`; the second frees its slot.
    fn release(&mut self, m: usize) {
        if let Some(x) = self.msgs.get_mut(m) {
            x.refs = x.refs.saturating_sub(1);
            if x.refs == 0 {
                self.free_msgs.push(m);
            }
        }
    }

    fn block(&mut self, i: usize, req: i64, f: Fid) {
        if let Some(r) = self.ranks.get_mut(i) {
            r.blocked = Blocked::Req(req);
            r.cur = Some(Rec::Kernel(Kernel::Wait { req }, f));
        }
    }

    /// The partner event of a blocked rank happened at `clock`: resynchronise it
    /// (`wait += clock − (comput + comm)`) and let it retry its wait.
    fn wake(&mut self, i: usize, clock: f64) -> Result<()> {
        let Some(r) = self.ranks.get_mut(i) else {
            return Ok(());
        };
        self.touched.push(i as u32);
        if let Blocked::Req(_) = r.blocked {
            let now = r.clock();
            if clock > now {
                let f = match &r.cur {
                    Some(Rec::Kernel(_, f)) => *f,
                    _ => intern(&self.names, "MPI"),
                };
                charge(r, f, 0, clock - now);
            }
            r.blocked = Blocked::No;
        }
        Ok(())
    }

    fn result(self) -> ReplayResult {
        let names = self
            .names
            .lock()
            .map(|n| n.clone())
            .unwrap_or_else(|e| e.into_inner().clone());
        let mut ranks = Vec::new();
        let mut predicted = 0.0f64;
        for (i, r) in self.ranks.iter().enumerate() {
            let total = r.clock();
            predicted = predicted.max(total);
            ranks.push(RankResult {
                rank: i as u32,
                total_s: total,
                computation_s: r.comput,
                comm: r.acc,
                idle_s: 0.0,
                bytes_received: r.bytes_recv,
                bytes_buffered: r.bytes_buffered,
                bytes_sent: r.bytes_sent,
                messages_sent: r.sent,
                collectives: 0,
                functions: r
                    .funcs
                    .iter()
                    .enumerate()
                    .filter_map(|(f, t)| Some((names.get(f)?.clone(), (*t)?)))
                    .collect(),
            });
        }
        ReplayResult {
            model: crate::models::BANDELA.name.into(),
            predicted_time_s: predicted,
            records: self.records,
            ranks,
            transfers: self.matrix.into_iter().collect(),
            adapters: self
                .adapters
                .iter()
                .flat_map(|(&host, v)| {
                    v.iter().enumerate().map(move |(k, a)| {
                        let busy = a.busy + a.cur.map_or(0.0, |(s, e)| e - s);
                        let any = a.requests > 0;
                        AdapterStats {
                            host,
                            adapter: k as u32,
                            min_request: any.then_some(a.min),
                            avg_request: any.then(|| a.bytes / a.requests as f64),
                            max_request: any.then_some(a.max),
                            busy_fraction: if predicted > 0.0 {
                                busy / predicted
                            } else {
                                0.0
                            },
                            aggregate_bw_mb_s: if busy > 0.0 {
                                a.bytes / busy / 1e6
                            } else {
                                0.0
                            },
                            avg_concurrent: if busy > 0.0 { a.dur_sum / busy } else { 0.0 },
                        }
                    })
                })
                .collect(),
            timeline: self
                .ranks
                .iter()
                .enumerate()
                .flat_map(|(i, r)| {
                    r.tl.iter().flatten().map(move |&(k, a, b)| TimelineEvent {
                        rank: i as u32,
                        name: [
                            "wait",
                            "latency",
                            "transfer (small)",
                            "transfer (big)",
                            "compute",
                        ]
                        .get(k as usize)
                        .copied()
                        .unwrap_or("other")
                        .to_string(),
                        start_s: a,
                        end_s: b,
                    })
                })
                .collect(),
            params: serde_json::json!({
                "host_type": self.input.host_type,
                "hosts": self.input.hosts,
                "intra_latency_us": self.input.intra_latency.base,
                "intra_bandwidth_mb_s": self.input.intra_bandwidth.base,
                "mpi_buffer_max": self.input.mpi_buffer_max,
                "cpu_boost": self.input.cpu_boost,
                "interp": match self.input.interp { Interp::Linear => "linear", Interp::Step => "step" },
            }),
        }
    }
}

/// The rank files of a Bandela trace directory: `bandela.<rank>.txt` or `bandela.<rank>`.
pub fn rank_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found: BTreeMap<u32, PathBuf> = BTreeMap::new();
    let rd =
        std::fs::read_dir(dir).map_err(|e| ReplayError::Io(format!("{}: {e}", dir.display())))?;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("bandela.") else {
            continue;
        };
        let num = rest.strip_suffix(".txt").unwrap_or(rest);
        if let Ok(r) = num.parse::<u32>() {
            found.insert(r, e.path());
        }
    }
    let n = found.len() as u32;
    if n == 0 || found.keys().copied().ne(0..n) {
        return Err(ReplayError::Io(format!(
            "{}: expected bandela.0 … bandela.N-1 rank files",
            dir.display()
        )));
    }
    Ok(found.into_values().collect())
}

/// Routine `f`'s name.
fn name_of(names: &Names, f: Fid) -> String {
    let list = names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    list.get(f as usize).cloned().unwrap_or_default()
}

/// Whether `main_fn` names an MPI collective (for `ignore_next_col`).
fn is_collective(main_fn: &str) -> bool {
    let n = main_fn.to_ascii_lowercase();
    let n = n.strip_prefix("mpi_").unwrap_or(&n);
    matches!(
        n,
        "bcast"
            | "reduce"
            | "allreduce"
            | "barrier"
            | "gather"
            | "gatherv"
            | "scatter"
            | "scatterv"
            | "allgather"
            | "allgatherv"
            | "alltoall"
            | "alltoallv"
            | "alltoallw"
            | "reduce_scatter"
            | "reduce_scatter_block"
            | "scan"
            | "exscan"
    )
}

#[cfg(test)]
mod tests;
