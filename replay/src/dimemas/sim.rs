//! The Dimemas discrete-event simulation.
//!
//! One [`Sim`] replays one `.dim` trace: each task streams its records from the file,
//! point-to-point messages are matched in order on (source, tag, communicator) with
//! the queues Dimemas keeps (arrived messages, sends waiting for their receive,
//! "send reached"/"receive reached" notices), transfers compete for per-task
//! intra-node links, per-node inter-node in/out links (with Dimemas's stealing of an
//! out-link held by a transfer that waits for an in-link) and network buses, and
//! collectives synchronise, take all buses and last FAN_IN + FAN_OUT.
//! Memory is bounded by the number of tasks and of messages in flight.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;

use benchlake_formats::dimemas::trace::{RecvKind, describe_offset};
use benchlake_formats::dimemas::{CollectiveDef, DimRecord, DimTrace, GopModel, GopSize};

use super::Platform;
use super::source::DimDecoder;
use crate::error::{ReplayError, Result};
use crate::event::{EventQueue, Nanos};
use crate::result::{CommTimes, DEFAULT_SMALL_MESSAGE, RankResult, ReplayResult, TimelineEvent};
use crate::source::Source;

use super::collective::{bw_ns_per_byte, fan};

// Routine indices of the per-routine breakdown.
const R_SEND: usize = 0;
const R_SSEND: usize = 1;
const R_ISEND: usize = 2;
const R_ISSEND: usize = 3;
const R_RECV: usize = 4;
const R_IRECV: usize = 5;
const R_WAIT: usize = 6;
const R_GLOP: usize = 7;
const NROUTINES: usize = R_GLOP + 32;

fn routine_name(i: usize) -> String {
    match i {
        R_SEND => "MPI_Send".into(),
        R_SSEND => "MPI_Ssend".into(),
        R_ISEND => "MPI_Isend".into(),
        R_ISSEND => "MPI_Issend".into(),
        R_RECV => "MPI_Recv".into(),
        R_IRECV => "MPI_Irecv".into(),
        R_WAIT => "MPI_Wait".into(),
        g => benchlake_formats::dimemas::ingest::glop_name((g - R_GLOP) as u32).into(),
    }
}

type Tid = usize;

#[derive(Clone, Copy)]
enum Ev {
    Resume(u32),
    /// A transfer's end: its resources are freed, then the message is received
    /// (Dimemas's two events at one time, which nothing can come between).
    End(Tid),
    /// A collective's end: the buses are released, then its members resume.
    GroupEnd(i64),
}

#[derive(Clone, Copy)]
enum BusWaiter {
    Transfer(Tid),
    Coll(i64),
}

struct Cur {
    rec: DimRecord,
    at: u64,
    startup_done: bool,
}

#[derive(Clone, Copy)]
enum Block {
    None,
    Recv {
        src: i64,
        tag: i64,
        comm: i64,
        since: Nanos,
        routine: usize,
    },
    Send {
        since: Nanos,
    },
    Coll,
}

struct Notice {
    src: i64,
    tag: i64,
    comm: i64,
    flag: bool,
}

struct Arrived {
    src: u32,
    tag: i64,
    comm: i64,
    size: u64,
}

struct Pending {
    dst: u32,
    size: u64,
    tag: i64,
    comm: i64,
    blocking: bool,
}

struct Task {
    node: usize,
    ratio: f64,
    cur: Option<Cur>,
    finished: bool,
    block: Block,
    comp: f64,
    idle: f64,
    acc: CommTimes,
    funcs: Vec<[f64; 4]>,
    end: f64,
    bytes_recv: u64,
    bytes_sent: u64,
    msgs_sent: u64,
    colls: u64,
    coll_arrival: Nanos,
    mess_recv: VecDeque<Arrived>,
    send_without_recv: VecDeque<Notice>,
    recv_without_send: VecDeque<Notice>,
    send_pending: VecDeque<Pending>,
    mem_in_free: u32,
    mem_out_free: u32,
    mem_in_inf: bool,
    mem_out_inf: bool,
    mem_th_for_in: VecDeque<Tid>,
    mem_th_for_out: VecDeque<Tid>,
}

struct Node {
    inter_lat: f64,
    intra_lat: f64,
    intra_bw: f64,
    intra_buses: u32,
    out_owner: Vec<Option<Tid>>,
    out_free: VecDeque<usize>,
    out_busy: Vec<usize>,
    out_inf: bool,
    in_free: u32,
    in_inf: bool,
    th_for_out: VecDeque<Tid>,
    th_for_in: VecDeque<Tid>,
    mem_bus_cur: u32,
    mem_bus_queue: VecDeque<Tid>,
}

struct Transfer {
    src: u32,
    dst: u32,
    size: u64,
    tag: i64,
    comm: i64,
    mem: bool,
    out_slot: Option<usize>,
    has_out: bool,
    has_in: bool,
    partner_node: usize,
    has_bus: bool,
}

struct Comm {
    tasks: Vec<u32>,
    arrived: Vec<u32>,
    root: Option<u32>,
    number_buses: u32,
    op_start: Nanos,
    op_total: f64,
    op_latency: f64,
    op_size: u64,
    op_routine: usize,
}

/// The simulation state.
struct Sim<'a> {
    path: &'a Path,
    platform: &'a Platform,
    now: Nanos,
    queue: EventQueue<Ev>,
    tasks: Vec<Task>,
    src: Source<DimDecoder>,
    nodes: Vec<Node>,
    transfers: Vec<Option<Transfer>>,
    free_tids: Vec<Tid>,
    bus_max: u32,
    bus_cur: u32,
    bus_queue: VecDeque<BusWaiter>,
    net_bw_ns: f64,
    comms: HashMap<i64, Comm>,
    records: u64,
    /// (receiver, sender) -> (messages, bytes); ordered once, in the result.
    matrix: HashMap<(u32, u32), (u64, u64)>,
    timeline: Option<Vec<TimelineEvent>>,
}

/// Replays the `.dim` trace `trace` on `platform` on one thread.
pub fn simulate(trace: &DimTrace, platform: &Platform) -> Result<ReplayResult> {
    simulate_threads(trace, platform, 1)
}

/// Replays the `.dim` trace `trace` on `platform` with up to `threads`
/// threads: with 2 or more, a second thread decodes the trace ahead of the
/// simulation (the simulation itself is one ordered event loop: the machine's
/// buses and links are shared by every rank). The result is the same,
/// bit for bit, whatever `threads` is.
pub fn simulate_threads(
    trace: &DimTrace,
    platform: &Platform,
    threads: usize,
) -> Result<ReplayResult> {
    if threads <= 1 {
        let mut sim = Sim::new(
            trace,
            platform,
            Source::sequential(DimDecoder::open(trace)?),
        )?;
        sim.run()?;
        return Ok(sim.result());
    }
    std::thread::scope(|scope| {
        let mut sim = Sim::new(
            trace,
            platform,
            Source::pipelined(
                DimDecoder::open(trace)?,
                trace.path().display().to_string(),
                scope,
            )?,
        )?;
        sim.run()?;
        Ok(sim.result())
    })
}

fn links(n: u32) -> (u32, bool) {
    (n, n == 0)
}

impl<'a> Sim<'a> {
    fn new(trace: &'a DimTrace, platform: &'a Platform, src: Source<DimDecoder>) -> Result<Self> {
        let path = trace.path();
        let ntasks = trace.ntasks() as u32;
        if let Some((t, n)) = trace
            .header
            .threads
            .iter()
            .enumerate()
            .find(|(_, n)| **n != 1)
        {
            return Err(ReplayError::Unsupported {
                file: path.to_path_buf(),
                message: format!("task {t} has {n} threads; only one thread per task is replayed"),
            });
        }
        let mut node_index: HashMap<u32, usize> = HashMap::new();
        let mut nodes = Vec::new();
        let mut tasks = Vec::with_capacity(ntasks as usize);
        for t in 0..ntasks {
            let node_id = platform
                .node_of(t, ntasks)
                .ok_or_else(|| ReplayError::param("mapping", format!("no node for task {t}")))?;
            if node_id >= platform.nodes {
                return Err(ReplayError::param(
                    "mapping",
                    format!(
                        "task {t} maps to node {node_id} but the machine has {} nodes",
                        platform.nodes
                    ),
                ));
            }
            let cfg = platform.node_config(node_id).ok_or_else(|| {
                ReplayError::param("nodes", format!("node {node_id} has no node configuration"))
            })?;
            if cfg.cpu_ratio <= 0.0 {
                return Err(ReplayError::param(
                    "cpu_ratio",
                    "must be > 0 (fixed-duration ratios are not implemented)",
                ));
            }
            let idx = *node_index.entry(node_id).or_insert_with(|| {
                let (out_n, out_inf) = links(cfg.out_links);
                let (in_n, in_inf) = links(cfg.in_links);
                nodes.push(Node {
                    inter_lat: cfg.inter_latency * 1e9,
                    intra_lat: cfg.intra_latency * 1e9,
                    intra_bw: cfg.intra_bandwidth,
                    intra_buses: cfg.intra_buses,
                    out_owner: vec![None; out_n as usize],
                    out_free: (0..out_n as usize).collect(),
                    out_busy: Vec::new(),
                    out_inf,
                    in_free: in_n,
                    in_inf,
                    th_for_out: VecDeque::new(),
                    th_for_in: VecDeque::new(),
                    mem_bus_cur: 0,
                    mem_bus_queue: VecDeque::new(),
                });
                nodes.len() - 1
            });
            let (mi, mi_inf) = links(cfg.intra_in_links);
            let (mo, mo_inf) = links(cfg.intra_out_links);
            tasks.push(Task {
                node: idx,
                ratio: cfg.cpu_ratio,
                cur: None,
                finished: false,
                block: Block::None,
                comp: 0.0,
                idle: 0.0,
                acc: CommTimes::default(),
                funcs: vec![[0.0; 4]; NROUTINES],
                end: 0.0,
                bytes_recv: 0,
                bytes_sent: 0,
                msgs_sent: 0,
                colls: 0,
                coll_arrival: 0.0,
                mess_recv: VecDeque::new(),
                send_without_recv: VecDeque::new(),
                recv_without_send: VecDeque::new(),
                send_pending: VecDeque::new(),
                mem_in_free: mi,
                mem_out_free: mo,
                mem_in_inf: mi_inf,
                mem_out_inf: mo_inf,
                mem_th_for_in: VecDeque::new(),
                mem_th_for_out: VecDeque::new(),
            });
        }
        let mut comms = HashMap::new();
        for c in &trace.comms {
            comms.insert(
                c.id,
                Comm {
                    tasks: c.tasks.clone(),
                    arrived: Vec::new(),
                    root: None,
                    number_buses: 0,
                    op_start: 0.0,
                    op_total: 0.0,
                    op_latency: 0.0,
                    op_size: 0,
                    op_routine: R_GLOP,
                },
            );
        }
        Ok(Self {
            path,
            platform,
            now: 0.0,
            queue: EventQueue::default(),
            tasks,
            src,
            nodes,
            transfers: Vec::new(),
            free_tids: Vec::new(),
            bus_max: platform.buses,
            bus_cur: 0,
            bus_queue: VecDeque::new(),
            net_bw_ns: bw_ns_per_byte(platform.bandwidth),
            comms,
            records: 0,
            matrix: HashMap::new(),
            timeline: platform.timeline.then(Vec::new),
        })
    }

    fn inconsistent(&self, task: u32, at: Option<u64>, msg: impl Into<String>) -> ReplayError {
        let where_ = at.map_or_else(String::new, |a| {
            format!(" (record at {})", describe_offset(self.path, a))
        });
        ReplayError::Inconsistent {
            file: self.path.to_path_buf(),
            message: format!("rank {task}{where_}: {}", msg.into()),
        }
    }

    fn mark(&mut self, task: u32, name: &str, start: Nanos, end: Nanos) {
        if let Some(tl) = self.timeline.as_mut()
            && end > start
        {
            tl.push(TimelineEvent {
                rank: task,
                name: name.to_string(),
                start_s: start / 1e9,
                end_s: end / 1e9,
            });
        }
    }

    fn run(&mut self) -> Result<()> {
        for t in 0..self.tasks.len() as u32 {
            self.queue.push(0.0, Ev::Resume(t));
        }
        while let Some((time, ev)) = self.queue.pop() {
            self.now = time;
            match ev {
                Ev::Resume(t) => self.run_task(t)?,
                Ev::End(tid) => {
                    self.free_resources(tid)?;
                    self.message_received(tid)?;
                }
                Ev::GroupEnd(c) => {
                    self.group_resources(c)?;
                    self.group_done(c)?;
                }
            }
        }
        // Nothing left to happen: every task must have finished.
        let stuck: Vec<String> = self
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.finished)
            .take(8)
            .map(|(i, t)| {
                let what = match t.block {
                    Block::Recv { src, tag, comm, .. } => format!(
                        "waits for a message from {src} (tag {tag}, comm {comm}) that is never sent"
                    ),
                    Block::Send { .. } => {
                        "is blocked in a rendezvous send whose receive is never posted".to_string()
                    }
                    Block::Coll => {
                        "waits in a collective that not every member reaches".to_string()
                    }
                    Block::None => "is stalled".to_string(),
                };
                let at = t
                    .cur
                    .as_ref()
                    .map(|c| describe_offset(self.path, c.at))
                    .unwrap_or_default();
                format!("rank {i} (record at {at}) {what}")
            })
            .collect();
        if !stuck.is_empty() {
            let n = self.tasks.iter().filter(|t| !t.finished).count();
            return Err(ReplayError::Inconsistent {
                file: self.path.to_path_buf(),
                message: format!(
                    "deadlock at t = {:.9} s: {n} rank(s) cannot progress: {}",
                    self.now / 1e9,
                    stuck.join("; ")
                ),
            });
        }
        Ok(())
    }

    fn run_task(&mut self, t: u32) -> Result<()> {
        let ti = t as usize;
        loop {
            let Some(task) = self.tasks.get_mut(ti) else {
                return Ok(());
            };
            if task.cur.is_none() {
                match self.src.next(ti)? {
                    None => {
                        task.finished = true;
                        task.end = self.now;
                        return Ok(());
                    }
                    Some((rec, at)) => {
                        self.records += 1;
                        task.cur = Some(Cur {
                            rec,
                            at,
                            startup_done: false,
                        });
                    }
                }
            }
            let Some(cur) = task.cur.as_ref() else {
                return Ok(());
            };
            let at = cur.at;
            let cont = match cur.rec.clone() {
                DimRecord::Noop | DimRecord::Event { .. } => {
                    task.cur = None;
                    true
                }
                DimRecord::Burst { seconds } | DimRecord::GpuBurst { seconds } => {
                    let dur = seconds * 1e9 / task.ratio;
                    task.comp += dur;
                    task.cur = None;
                    let start = self.now;
                    self.mark(t, "compute", start, start + dur);
                    self.queue.push(start + dur, Ev::Resume(t));
                    false
                }
                DimRecord::Send {
                    dst,
                    size,
                    tag,
                    comm,
                    sync,
                } => self.do_send(t, at, dst, size, tag, comm, sync)?,
                DimRecord::Recv {
                    src,
                    size: _,
                    tag,
                    comm,
                    kind,
                } => {
                    if src >= self.tasks.len() as i64 {
                        return Err(self.inconsistent(
                            t,
                            Some(at),
                            format!("receive from task {src}, which does not exist"),
                        ));
                    }
                    match kind {
                        RecvKind::Recv => self.do_recv(t, src, tag, comm, R_RECV)?,
                        RecvKind::Wait => self.do_recv(t, src, tag, comm, R_WAIT)?,
                        RecvKind::Irecv => {
                            if self.recv_reached(t, src, tag, comm, true) {
                                self.start_rendezvous_if_ready(t, src, tag, comm)?;
                            }
                            if let Some(task) = self.tasks.get_mut(ti) {
                                task.cur = None;
                            }
                            true
                        }
                    }
                }
                DimRecord::GlobalOp {
                    glop,
                    comm,
                    root,
                    bytes_send,
                    bytes_recv,
                    synch,
                } => {
                    if synch == 0 || synch == 2 {
                        return Err(ReplayError::Unsupported {
                            file: self.path.to_path_buf(),
                            message: format!(
                                "rank {t} (record at {}): non-blocking collectives (synch {synch}) are not implemented",
                                describe_offset(self.path, at)
                            ),
                        });
                    }
                    self.do_glop(t, at, glop, comm, root, bytes_send, bytes_recv)?;
                    false
                }
            };
            if !cont {
                return Ok(());
            }
        }
    }

    /// Pays the startup latency of the current action. Returns true if the task must
    /// wait for it (a resume is scheduled).
    fn startup(&mut self, t: u32, src_node: usize, dst_node: usize, routine: usize) -> bool {
        let ti = t as usize;
        let l = match self.nodes.get(src_node) {
            Some(n) if src_node == dst_node => n.intra_lat,
            Some(n) => n.inter_lat,
            None => 0.0,
        };
        let now = self.now;
        let Some(task) = self.tasks.get_mut(ti) else {
            return false;
        };
        let Some(cur) = task.cur.as_mut() else {
            return false;
        };
        if cur.startup_done {
            cur.startup_done = false;
            return false;
        }
        if l < 1.0 {
            return false;
        }
        cur.startup_done = true;
        task.acc.latency += l;
        if let Some(f) = task.funcs.get_mut(routine) {
            f[1] += l;
        }
        self.mark(t, "latency", now, now + l);
        self.queue.push(now + l, Ev::Resume(t));
        true
    }

    fn node_of(&self, t: u32) -> usize {
        self.tasks.get(t as usize).map_or(0, |x| x.node)
    }

    #[allow(clippy::too_many_arguments)]
    fn do_send(
        &mut self,
        t: u32,
        at: u64,
        dst: u32,
        size: u64,
        tag: i64,
        comm: i64,
        sync: u8,
    ) -> Result<bool> {
        if dst as usize >= self.tasks.len() {
            return Err(self.inconsistent(
                t,
                Some(at),
                format!("send to task {dst}, which does not exist"),
            ));
        }
        let routine = match sync {
            0 => R_SEND,
            1 => R_SSEND,
            2 => R_ISEND,
            _ => R_ISSEND,
        };
        let (sn, dn) = (self.node_of(t), self.node_of(dst));
        if self.startup(t, sn, dn, routine) {
            return Ok(false);
        }
        let rendezvous = sync & 1 != 0 || self.platform.eager_limit.is_some_and(|l| size >= l);
        let immediate = sync & 2 != 0;
        {
            let e = self.matrix.entry((dst, t)).or_insert((0, 0));
            e.0 += 1;
            e.1 += size;
        }
        if let Some(task) = self.tasks.get_mut(t as usize) {
            task.bytes_sent += size;
            task.msgs_sent += 1;
        }
        // "send reached": consume the matching "receive reached" notice, or leave one.
        let src = i64::from(t);
        let mut hi_ha_irecv = false;
        let mut partner = false;
        if let Some(d) = self.tasks.get_mut(dst as usize) {
            if let Some(pos) = d
                .recv_without_send
                .iter()
                .position(|n| (n.src == src || n.src == -1) && n.tag == tag && n.comm == comm)
            {
                hi_ha_irecv = d.recv_without_send.remove(pos).is_some_and(|n| n.flag);
            } else {
                d.send_without_recv.push_back(Notice {
                    src,
                    tag,
                    comm,
                    flag: rendezvous,
                });
            }
            if let Block::Recv {
                src: s,
                tag: tg,
                comm: c,
                ..
            } = d.block
            {
                partner = (s == src || s == -1) && tg == tag && c == comm;
            }
        }
        if rendezvous && !hi_ha_irecv && !partner {
            let blocking = !immediate;
            let now = self.now;
            if let Some(task) = self.tasks.get_mut(t as usize) {
                task.send_pending.push_back(Pending {
                    dst,
                    size,
                    tag,
                    comm,
                    blocking,
                });
                if blocking {
                    task.block = Block::Send { since: now };
                    return Ok(false);
                }
                task.cur = None;
            }
            return Ok(true);
        }
        self.start_transfer(t, dst, size, tag, comm)?;
        if let Some(task) = self.tasks.get_mut(t as usize) {
            task.cur = None;
        }
        Ok(true)
    }

    fn do_recv(&mut self, t: u32, src: i64, tag: i64, comm: i64, routine: usize) -> Result<bool> {
        let dn = self.node_of(t);
        let sn = if src >= 0 {
            self.node_of(src as u32)
        } else {
            dn
        };
        if self.startup(t, sn, dn, routine) {
            return Ok(false);
        }
        if routine == R_RECV {
            self.recv_reached(t, src, tag, comm, false);
        }
        let now = self.now;
        let Some(task) = self.tasks.get_mut(t as usize) else {
            return Ok(false);
        };
        if let Some(pos) = task
            .mess_recv
            .iter()
            .position(|m| (src == -1 || i64::from(m.src) == src) && m.tag == tag && m.comm == comm)
        {
            if let Some(m) = task.mess_recv.remove(pos) {
                task.bytes_recv += m.size;
            }
            task.cur = None;
            return Ok(true);
        }
        task.block = Block::Recv {
            src,
            tag,
            comm,
            since: now,
            routine,
        };
        self.start_rendezvous_if_ready(t, src, tag, comm)?;
        Ok(false)
    }

    /// "Receive reached": consumes a matching "send reached" notice (returning whether
    /// that send was a rendezvous one) or leaves a notice for the future send.
    fn recv_reached(&mut self, t: u32, src: i64, tag: i64, comm: i64, irecv: bool) -> bool {
        let Some(task) = self.tasks.get_mut(t as usize) else {
            return false;
        };
        if let Some(pos) = task
            .send_without_recv
            .iter()
            .position(|n| (src == -1 || n.src == src) && n.tag == tag && n.comm == comm)
        {
            return task.send_without_recv.remove(pos).is_some_and(|n| n.flag);
        }
        task.recv_without_send.push_back(Notice {
            src,
            tag,
            comm,
            flag: irecv,
        });
        false
    }

    /// Starts the transfer of a rendezvous send waiting for this receive, if any.
    fn start_rendezvous_if_ready(&mut self, t: u32, src: i64, tag: i64, comm: i64) -> Result<()> {
        let candidates: Vec<u32> = if src >= 0 {
            vec![src as u32]
        } else {
            (0..self.tasks.len() as u32).collect()
        };
        for s in candidates {
            let Some(st) = self.tasks.get_mut(s as usize) else {
                continue;
            };
            let Some(pos) = st
                .send_pending
                .iter()
                .position(|p| p.dst == t && p.tag == tag && p.comm == comm)
            else {
                continue;
            };
            let Some(p) = st.send_pending.remove(pos) else {
                continue;
            };
            self.start_transfer(s, t, p.size, p.tag, p.comm)?;
            if p.blocking {
                self.unblock_sender(s);
            }
            return Ok(());
        }
        Ok(())
    }

    fn unblock_sender(&mut self, s: u32) {
        let now = self.now;
        let mut span = None;
        if let Some(st) = self.tasks.get_mut(s as usize) {
            if let Block::Send { since, .. } = st.block {
                // Dimemas reports this blocking in neither computation nor communication.
                st.idle += now - since;
                span = Some(since);
            }
            st.block = Block::None;
            st.cur = None;
        }
        if let Some(since) = span {
            self.mark(s, "idle (rendezvous)", since, now);
        }
        self.queue.push(now, Ev::Resume(s));
    }

    fn alloc_transfer(&mut self, tr: Transfer) -> Tid {
        if let Some(id) = self.free_tids.pop()
            && let Some(slot) = self.transfers.get_mut(id)
        {
            *slot = Some(tr);
            return id;
        }
        self.transfers.push(Some(tr));
        self.transfers.len() - 1
    }

    fn start_transfer(&mut self, src: u32, dst: u32, size: u64, tag: i64, comm: i64) -> Result<()> {
        let mem = self.node_of(src) == self.node_of(dst);
        let tid = self.alloc_transfer(Transfer {
            src,
            dst,
            size,
            tag,
            comm,
            mem,
            out_slot: None,
            has_out: false,
            has_in: false,
            partner_node: self.node_of(dst),
            has_bus: false,
        });
        self.really_send(tid);
        Ok(())
    }

    fn tr(&mut self, tid: Tid) -> Option<&mut Transfer> {
        self.transfers.get_mut(tid).and_then(|t| t.as_mut())
    }

    fn really_send(&mut self, tid: Tid) {
        let Some(tr) = self.tr(tid) else { return };
        if tr.mem {
            self.really_send_mem(tid);
        } else {
            self.really_send_net(tid);
        }
    }

    fn schedule_transfer(&mut self, tid: Tid, ns_per_byte: f64) {
        let Some(tr) = self.tr(tid) else { return };
        let ti = ns_per_byte * tr.size as f64;
        let now = self.now;
        self.queue.push(now + ti, Ev::End(tid));
    }

    fn really_send_mem(&mut self, tid: Tid) {
        let Some(tr) = self.tr(tid) else { return };
        let (src, dst, has_out, has_in) = (tr.src as usize, tr.dst as usize, tr.has_out, tr.has_in);
        if src != dst {
            if !has_out {
                let Some(st) = self.tasks.get_mut(src) else {
                    return;
                };
                if !st.mem_out_inf {
                    if st.mem_out_free > 0 {
                        st.mem_out_free -= 1;
                        if let Some(tr) = self.tr(tid) {
                            tr.has_out = true;
                        }
                    } else {
                        st.mem_th_for_out.push_back(tid);
                        return;
                    }
                }
            }
            if !has_in {
                let Some(dt) = self.tasks.get_mut(dst) else {
                    return;
                };
                if !dt.mem_in_inf {
                    if dt.mem_in_free > 0 {
                        dt.mem_in_free -= 1;
                        if let Some(tr) = self.tr(tid) {
                            tr.has_in = true;
                        }
                    } else {
                        dt.mem_th_for_in.push_back(tid);
                        return;
                    }
                }
            }
        }
        let node = self.node_of(src as u32);
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if n.intra_buses > 0 {
            if n.mem_bus_cur >= n.intra_buses {
                n.mem_bus_queue.push_back(tid);
                return;
            }
            n.mem_bus_cur += 1;
            if let Some(tr) = self.tr(tid) {
                tr.has_bus = true;
            }
        }
        let bw = self
            .nodes
            .get(node)
            .map_or(0.0, |n| bw_ns_per_byte(n.intra_bw));
        self.schedule_transfer(tid, bw);
    }

    /// The first out-link of node `sn` held by a transfer that waits for an in-link.
    fn find_robable(&self, sn: usize) -> Option<(usize, Tid)> {
        let node = self.nodes.get(sn)?;
        for &slot in &node.out_busy {
            let Some(Some(victim)) = node.out_owner.get(slot) else {
                continue;
            };
            let Some(Some(v)) = self.transfers.get(*victim) else {
                continue;
            };
            if v.out_slot == Some(slot) && !v.has_in {
                let queued = self
                    .nodes
                    .get(v.partner_node)
                    .is_some_and(|pn| pn.th_for_in.contains(victim));
                if queued {
                    return Some((slot, *victim));
                }
            }
        }
        None
    }

    fn steal_out_link(&mut self, sn: usize, tid: Tid) {
        let Some((slot, victim)) = self.find_robable(sn) else {
            return;
        };
        let vnode = self
            .transfers
            .get(victim)
            .and_then(|v| v.as_ref())
            .map(|v| v.partner_node);
        if let Some(pn) = vnode.and_then(|p| self.nodes.get_mut(p)) {
            pn.th_for_in.retain(|&x| x != victim);
        }
        if let Some(n) = self.nodes.get_mut(sn) {
            if let Some(o) = n.out_owner.get_mut(slot) {
                *o = Some(tid);
            }
            n.th_for_out.push_front(victim);
        }
        if let Some(v) = self.tr(victim) {
            v.out_slot = None;
        }
        if let Some(tr) = self.tr(tid) {
            tr.out_slot = Some(slot);
        }
    }

    /// Dimemas's `LINKS_get_network_links`: out-link on the sender's node first (or
    /// the promise to steal one), then in-link on the receiver's node.
    fn get_network_links(&mut self, tid: Tid) -> bool {
        let Some(tr) = self.tr(tid) else { return false };
        let (src, dst, out_slot, has_in) = (tr.src, tr.dst, tr.out_slot, tr.has_in);
        let (sn, dn) = (self.node_of(src), self.node_of(dst));
        if let Some(tr) = self.tr(tid) {
            tr.partner_node = dn;
        }
        let mut out_robable = false;
        if self.nodes.get(sn).is_some_and(|n| !n.out_inf) && out_slot.is_none() {
            let free = self.nodes.get_mut(sn).and_then(|n| n.out_free.pop_front());
            match free {
                Some(slot) => {
                    if let Some(n) = self.nodes.get_mut(sn) {
                        if let Some(o) = n.out_owner.get_mut(slot) {
                            *o = Some(tid);
                        }
                        n.out_busy.push(slot);
                    }
                    if let Some(tr) = self.tr(tid) {
                        tr.out_slot = Some(slot);
                    }
                }
                None => {
                    out_robable = self.find_robable(sn).is_some();
                    if !out_robable {
                        if let Some(n) = self.nodes.get_mut(sn) {
                            n.th_for_out.push_back(tid);
                        }
                        return false;
                    }
                }
            }
        }
        if self.nodes.get(dn).is_some_and(|n| !n.in_inf) {
            if !has_in {
                let free = self.nodes.get(dn).is_some_and(|n| n.in_free > 0);
                if !free {
                    let q = if out_robable { sn } else { dn };
                    if let Some(n) = self.nodes.get_mut(q) {
                        if out_robable {
                            n.th_for_out.push_back(tid);
                        } else {
                            n.th_for_in.push_back(tid);
                        }
                    }
                    return false;
                }
                if out_robable {
                    self.steal_out_link(sn, tid);
                }
                if let Some(n) = self.nodes.get_mut(dn) {
                    n.in_free -= 1;
                }
                if let Some(tr) = self.tr(tid) {
                    tr.has_in = true;
                }
            } else if out_robable {
                self.steal_out_link(sn, tid);
            }
        }
        true
    }

    fn really_send_net(&mut self, tid: Tid) {
        if !self.get_network_links(tid) {
            return;
        }
        if self.bus_max > 0 {
            if self.bus_cur >= self.bus_max {
                self.bus_queue.push_back(BusWaiter::Transfer(tid));
                return;
            }
            self.bus_cur += 1;
            if let Some(tr) = self.tr(tid) {
                tr.has_bus = true;
            }
        }
        let bw = self.net_bw_ns;
        self.schedule_transfer(tid, bw);
    }

    fn free_resources(&mut self, tid: Tid) -> Result<()> {
        let Some(tr) = self.tr(tid) else {
            return Ok(());
        };
        let (src, dst, mem, out_slot, has_out, has_in) =
            (tr.src, tr.dst, tr.mem, tr.out_slot, tr.has_out, tr.has_in);
        tr.has_bus = false;
        tr.out_slot = None;
        tr.has_out = false;
        tr.has_in = false;
        if mem {
            if has_out {
                let first = self.tasks.get_mut(src as usize).and_then(|st| {
                    st.mem_out_free += 1;
                    st.mem_th_for_out.pop_front()
                });
                if let Some(f) = first {
                    self.really_send(f);
                }
            }
            if has_in {
                let first = self.tasks.get_mut(dst as usize).and_then(|dt| {
                    dt.mem_in_free += 1;
                    dt.mem_th_for_in.pop_front()
                });
                if let Some(f) = first {
                    self.really_send(f);
                }
            }
            let node = self.node_of(src);
            let next = self.nodes.get_mut(node).and_then(|n| {
                if n.mem_bus_cur > 0 {
                    n.mem_bus_cur -= 1;
                }
                if n.intra_buses > 0 {
                    n.mem_bus_queue.pop_front()
                } else {
                    None
                }
            });
            if let Some(f) = next {
                self.really_send(f);
            }
            return Ok(());
        }
        let (sn, dn) = (self.node_of(src), self.node_of(dst));
        if let Some(slot) = out_slot {
            let first = self.nodes.get_mut(sn).and_then(|n| {
                if let Some(o) = n.out_owner.get_mut(slot) {
                    *o = None;
                }
                n.out_busy.retain(|&s| s != slot);
                n.out_free.push_back(slot);
                n.th_for_out.pop_front()
            });
            if let Some(f) = first {
                self.really_send(f);
            }
        }
        if has_in {
            let first = self.nodes.get_mut(dn).and_then(|n| {
                n.in_free += 1;
                n.th_for_in.pop_front()
            });
            if let Some(f) = first {
                self.really_send(f);
            }
        }
        if self.bus_cur > 0 {
            self.bus_cur -= 1;
        }
        if self.bus_max > 0 {
            match self.bus_queue.front().copied() {
                Some(BusWaiter::Transfer(f)) => {
                    self.bus_queue.pop_front();
                    self.really_send(f);
                }
                Some(BusWaiter::Coll(c)) => self.coll_take_buses(c)?,
                None => {}
            }
        }
        Ok(())
    }

    /// A collective at the head of the bus queue takes the buses that are free.
    fn coll_take_buses(&mut self, c: i64) -> Result<()> {
        let aux = self.bus_max.saturating_sub(self.bus_cur);
        self.bus_cur += aux;
        let done = match self.comms.get_mut(&c) {
            Some(cm) => {
                cm.number_buses += aux;
                cm.number_buses >= self.bus_max
            }
            None => false,
        };
        if done {
            self.bus_queue.pop_front();
            self.start_global_op(c)?;
        }
        Ok(())
    }

    fn message_received(&mut self, tid: Tid) -> Result<()> {
        let Some(tr) = self.transfers.get_mut(tid).and_then(|t| t.take()) else {
            return Ok(());
        };
        self.free_tids.push(tid);
        let now = self.now;
        let Some(d) = self.tasks.get_mut(tr.dst as usize) else {
            return Ok(());
        };
        if let Block::Recv {
            src,
            tag,
            comm,
            since,
            routine,
        } = d.block
            && (src == -1 || src == i64::from(tr.src))
            && tag == tr.tag
            && comm == tr.comm
        {
            d.acc.wait += now - since;
            if let Some(f) = d.funcs.get_mut(routine) {
                f[0] += now - since;
            }
            d.bytes_recv += tr.size;
            d.block = Block::None;
            d.cur = None;
            self.mark(tr.dst, "wait", since, now);
            self.queue.push(now, Ev::Resume(tr.dst));
            return Ok(());
        }
        d.mess_recv.push_back(Arrived {
            src: tr.src,
            tag: tr.tag,
            comm: tr.comm,
            size: tr.size,
        });
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn do_glop(
        &mut self,
        t: u32,
        at: u64,
        glop: u32,
        comm: i64,
        root: i64,
        _s: u64,
        _r: u64,
    ) -> Result<()> {
        let now = self.now;
        let Some(cm) = self.comms.get_mut(&comm) else {
            return Err(self.inconsistent(
                t,
                Some(at),
                format!("collective on communicator {comm}, which is not defined"),
            ));
        };
        if !cm.tasks.contains(&t) {
            return Err(self.inconsistent(
                t,
                Some(at),
                format!("collective on communicator {comm}, which does not contain this rank"),
            ));
        }
        if cm.arrived.contains(&t) {
            return Err(self.inconsistent(t, Some(at), "rank entered a collective twice"));
        }
        let is_root = if glop == 10 {
            root == i64::from(t)
        } else {
            root == 1
        };
        if is_root {
            cm.root = Some(t);
        }
        cm.arrived.push(t);
        let all = cm.arrived.len() == cm.tasks.len();
        if let Some(task) = self.tasks.get_mut(t as usize) {
            task.block = Block::Coll;
            task.coll_arrival = now;
            task.colls += 1;
        }
        if !all {
            return Ok(());
        }
        let Some(cm) = self.comms.get_mut(&comm) else {
            return Ok(());
        };
        if cm.root.is_none() {
            cm.root = Some(t);
        }
        // One thread grabs all the buses of the machine (or waits for them).
        if self.bus_max > 0 && cm.number_buses == 0 && self.bus_cur != 0 {
            cm.number_buses = self.bus_max - self.bus_cur.min(self.bus_max);
            self.bus_cur = self.bus_max;
            self.bus_queue.push_back(BusWaiter::Coll(comm));
            return Ok(());
        }
        self.start_global_op(comm)
    }

    fn collective_def(&self, glop: u32) -> CollectiveDef {
        if let Some(d) = self
            .platform
            .collectives
            .as_ref()
            .and_then(|f| f.lookup(0, glop))
        {
            return d;
        }
        // Without a definition every collective uses the environment's model with size
        // CURR; MPI_Reduce is forced to CTE (Dimemas 5.5).
        let m = if glop == 10 {
            GopModel::Cte
        } else {
            self.platform.gop_model
        };
        CollectiveDef {
            model_in: m,
            size_in: GopSize::Curr,
            model_out: m,
            size_out: GopSize::Curr,
        }
    }

    fn start_global_op(&mut self, comm: i64) -> Result<()> {
        if self.bus_max > 0 {
            self.bus_cur = self.bus_max;
        }
        let Some(cm) = self.comms.get(&comm) else {
            return Ok(());
        };
        let root = cm.root.unwrap_or(0);
        let (glop, bs, br) = match self
            .tasks
            .get(root as usize)
            .and_then(|t| t.cur.as_ref())
            .map(|c| &c.rec)
        {
            Some(DimRecord::GlobalOp {
                glop,
                bytes_send,
                bytes_recv,
                ..
            }) => (*glop, *bytes_send, *bytes_recv),
            _ => (0, 0, 0),
        };
        let def = self.collective_def(glop);
        // Nodes of the communicator with their task counts, by node id.
        let mut per_node: BTreeMap<usize, u32> = BTreeMap::new();
        for &m in &cm.tasks {
            *per_node.entry(self.node_of(m)).or_insert(0) += 1;
        }
        let root_node = self.node_of(root);
        let (mut tin, mut lin, mut tout, mut lout) = (0.0, 0.0, 0.0, 0.0);
        if self.platform.nodes > 1 && !per_node.is_empty() {
            let p = per_node.len() as u32;
            let l = self.nodes.get(root_node).map_or(0.0, |n| n.inter_lat);
            (tin, lin) = fan(
                self.platform.bandwidth,
                p,
                self.bus_max,
                true,
                def.model_in,
                def.size_in,
                bs,
                br,
                l,
            );
            (tout, lout) = fan(
                self.platform.bandwidth,
                p,
                self.bus_max,
                false,
                def.model_out,
                def.size_out,
                bs,
                br,
                l,
            );
        }
        let (mut ntin, mut nlin, mut ntout, mut nlout) = (0.0, 0.0, 0.0, 0.0);
        let mut best = 0.0;
        for (&node, &count) in &per_node {
            let Some(n) = self.nodes.get(node) else {
                continue;
            };
            let (a, b) = fan(
                n.intra_bw,
                count,
                0,
                true,
                def.model_in,
                def.size_in,
                bs,
                br,
                n.intra_lat,
            );
            let (c, d) = fan(
                n.intra_bw,
                count,
                0,
                false,
                def.model_out,
                def.size_out,
                bs,
                br,
                n.intra_lat,
            );
            let sum = a + b + c + d;
            if sum > best {
                best = sum;
                (ntin, nlin, ntout, nlout) = (a, b, c, d);
            }
        }
        let total = ntin + ntout + tin + tout;
        let latency = nlin + nlout + lin + lout;
        let now = self.now;
        let size = bs.max(br);
        if let Some(cm) = self.comms.get_mut(&comm) {
            cm.op_start = now;
            cm.op_total = total;
            cm.op_latency = latency;
            cm.op_size = size;
            cm.op_routine = R_GLOP + glop as usize;
        }
        // Synchronisation: everyone waited from its arrival until now.
        let arrived: Vec<u32> = self
            .comms
            .get(&comm)
            .map(|c| c.arrived.clone())
            .unwrap_or_default();
        for &m in &arrived {
            let mut since = None;
            if let Some(task) = self.tasks.get_mut(m as usize) {
                let w = now - task.coll_arrival;
                task.acc.wait += w;
                if let Some(f) = task.funcs.get_mut(R_GLOP + glop as usize) {
                    f[0] += w;
                }
                since = Some(task.coll_arrival);
            }
            if let Some(s) = since {
                self.mark(m, "wait", s, now);
            }
        }
        self.queue.push(now + total, Ev::GroupEnd(comm));
        Ok(())
    }

    fn group_resources(&mut self, comm: i64) -> Result<()> {
        if let Some(cm) = self.comms.get_mut(&comm) {
            cm.number_buses = 0;
        }
        if self.bus_max == 0 {
            return Ok(());
        }
        self.bus_cur = 0;
        let n = self.bus_queue.len();
        for _ in 0..n {
            if self.bus_cur >= self.bus_max {
                break;
            }
            match self.bus_queue.front().copied() {
                Some(BusWaiter::Transfer(f)) => {
                    self.bus_queue.pop_front();
                    self.really_send(f);
                }
                Some(BusWaiter::Coll(c)) => self.coll_take_buses(c)?,
                None => break,
            }
        }
        Ok(())
    }

    fn group_done(&mut self, comm: i64) -> Result<()> {
        let now = self.now;
        let Some(cm) = self.comms.get_mut(&comm) else {
            return Ok(());
        };
        let arrived = std::mem::take(&mut cm.arrived);
        cm.root = None;
        let (start, total, latency, size, routine) = (
            cm.op_start,
            cm.op_total,
            cm.op_latency,
            cm.op_size,
            cm.op_routine,
        );
        let transfer = total - latency;
        let small = size <= DEFAULT_SMALL_MESSAGE;
        for m in arrived {
            if let Some(task) = self.tasks.get_mut(m as usize) {
                task.acc.latency += latency;
                if small {
                    task.acc.small += transfer;
                } else {
                    task.acc.big += transfer;
                }
                if let Some(f) = task.funcs.get_mut(routine) {
                    f[1] += latency;
                    f[if small { 2 } else { 3 }] += transfer;
                }
                task.block = Block::None;
                task.cur = None;
            }
            let name = routine_name(routine);
            self.mark(m, &name, start, now);
            self.queue.push(now, Ev::Resume(m));
        }
        Ok(())
    }

    fn result(self) -> ReplayResult {
        let mut ranks = Vec::with_capacity(self.tasks.len());
        let mut predicted = 0.0f64;
        for (i, t) in self.tasks.iter().enumerate() {
            predicted = predicted.max(t.end);
            let functions = t
                .funcs
                .iter()
                .enumerate()
                .filter(|(_, f)| f.iter().any(|v| *v != 0.0))
                .map(|(r, f)| {
                    (
                        routine_name(r),
                        CommTimes {
                            wait: f[0] / 1e9,
                            latency: f[1] / 1e9,
                            small: f[2] / 1e9,
                            big: f[3] / 1e9,
                        },
                    )
                })
                .collect();
            ranks.push(RankResult {
                rank: i as u32,
                total_s: t.end / 1e9,
                computation_s: t.comp / 1e9,
                comm: CommTimes {
                    wait: t.acc.wait / 1e9,
                    latency: t.acc.latency / 1e9,
                    small: t.acc.small / 1e9,
                    big: t.acc.big / 1e9,
                },
                idle_s: t.idle / 1e9,
                bytes_received: t.bytes_recv,
                bytes_buffered: 0,
                bytes_sent: t.bytes_sent,
                messages_sent: t.msgs_sent,
                collectives: t.colls,
                functions,
            });
        }
        ReplayResult {
            model: crate::models::DIMEMAS.name.into(),
            predicted_time_s: predicted / 1e9,
            records: self.records,
            ranks,
            transfers: self.matrix.into_iter().collect(),
            adapters: Vec::new(),
            timeline: self.timeline.unwrap_or_default(),
            params: self.platform.to_json(),
        }
    }
}
