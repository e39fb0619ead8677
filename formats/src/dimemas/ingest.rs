//! The `dimemas` ingest kind: every record of a `.dim` trace becomes one
//! `mpi_trace_records` row. CPU bursts are folded into the `compute_s` of the record
//! that follows them (a trailing burst becomes a `compute` row), as the table documents.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
};
use arrow::record_batch::RecordBatch;
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;

use super::trace::{DimRecord, DimTrace, RecvKind};
use crate::bandela::trace::{MAX_BURST_S, MAX_MESSAGE_BYTES};
use crate::error::{FormatError, Position, Result};
use crate::ingest::{IngestContext, InputFile};

/// Rows per Arrow batch.
const BATCH_ROWS: usize = 64 * 1024;

/// The name of collective `glop` (Dimemas `EventEncoding.h` numbering).
pub fn glop_name(glop: u32) -> &'static str {
    const NAMES: [&str; 16] = [
        "MPI_Barrier",
        "MPI_Bcast",
        "MPI_Gather",
        "MPI_Gatherv",
        "MPI_Scatter",
        "MPI_Scatterv",
        "MPI_Allgather",
        "MPI_Allgatherv",
        "MPI_Alltoall",
        "MPI_Alltoallv",
        "MPI_Reduce",
        "MPI_Allreduce",
        "MPI_Reduce_scatter",
        "MPI_Reduce_scatter_block",
        "MPI_Scan",
        "MPI_Alltoallw",
    ];
    const INAMES: [&str; 16] = [
        "MPI_Ibarrier",
        "MPI_Ibcast",
        "MPI_Igather",
        "MPI_Igatherv",
        "MPI_Iscatter",
        "MPI_Iscatterv",
        "MPI_Iallgather",
        "MPI_Iallgatherv",
        "MPI_Ialltoall",
        "MPI_Ialltoallv",
        "MPI_Ireduce",
        "MPI_Iallreduce",
        "MPI_Ireduce_scatter",
        "MPI_Ireduce_scatter_block",
        "MPI_Iscan",
        "MPI_Ialltoallw",
    ];
    let g = glop as usize;
    NAMES
        .get(g)
        .or_else(|| INAMES.get(g.wrapping_sub(16)))
        .copied()
        .unwrap_or("MPI_Collective")
}

/// One `mpi_trace_records` row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceRow {
    /// Rank.
    pub rank: i32,
    /// Record index within the rank.
    pub seq: i64,
    /// User MPI routine.
    pub main_function: String,
    /// Record kind.
    pub kernel: String,
    /// Partner rank.
    pub peer: Option<i32>,
    /// Communicator.
    pub comm: Option<i64>,
    /// Tag.
    pub tag: Option<i64>,
    /// Bytes.
    pub bytes: Option<i64>,
    /// Request id.
    pub request: Option<i64>,
    /// Symmetric buffer.
    pub symmetric: Option<bool>,
    /// Computation before the record (s).
    pub compute_s: Option<f64>,
}

/// Accumulates rows into `mpi_trace_records` batches.
pub struct TraceRowsBuilder {
    run_id: String,
    source: String,
    rows: Vec<TraceRow>,
    batches: Vec<RecordBatch>,
}

impl TraceRowsBuilder {
    /// A builder for rows of `source` in run `run_id`.
    pub fn new(run_id: &str, source: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            source: source.to_string(),
            rows: Vec::new(),
            batches: Vec::new(),
        }
    }

    /// Changes the `source` of the following rows (flushes the pending ones).
    pub fn set_source(&mut self, source: &str) -> Result<()> {
        self.flush()?;
        self.source = source.to_string();
        Ok(())
    }

    /// Adds one row.
    pub fn push(&mut self, row: TraceRow) -> Result<()> {
        self.rows.push(row);
        if self.rows.len() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let schema = catalog::schema("mpi_trace_records")?;
        let n = self.rows.len();
        let mut run = StringBuilder::new();
        let mut src = StringBuilder::new();
        let mut rank = Int32Builder::with_capacity(n);
        let mut seq = Int64Builder::with_capacity(n);
        let mut mf = StringBuilder::new();
        let mut kernel = StringBuilder::new();
        let mut peer = Int32Builder::with_capacity(n);
        let mut comm = Int64Builder::with_capacity(n);
        let mut tag = Int64Builder::with_capacity(n);
        let mut bytes = Int64Builder::with_capacity(n);
        let mut req = Int64Builder::with_capacity(n);
        let mut sym = BooleanBuilder::with_capacity(n);
        let mut comp = Float64Builder::with_capacity(n);
        for r in self.rows.drain(..) {
            run.append_value(&self.run_id);
            src.append_value(&self.source);
            rank.append_value(r.rank);
            seq.append_value(r.seq);
            mf.append_value(&r.main_function);
            kernel.append_value(&r.kernel);
            peer.append_option(r.peer);
            comm.append_option(r.comm);
            tag.append_option(r.tag);
            bytes.append_option(r.bytes);
            req.append_option(r.request);
            sym.append_option(r.symmetric);
            comp.append_option(r.compute_s);
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(run.finish()),
            Arc::new(src.finish()),
            Arc::new(rank.finish()),
            Arc::new(seq.finish()),
            Arc::new(mf.finish()),
            Arc::new(kernel.finish()),
            Arc::new(peer.finish()),
            Arc::new(comm.finish()),
            Arc::new(tag.finish()),
            Arc::new(bytes.finish()),
            Arc::new(req.finish()),
            Arc::new(sym.finish()),
            Arc::new(comp.finish()),
        ];
        self.batches.push(RecordBatch::try_new(schema, cols)?);
        Ok(())
    }

    /// The finished table.
    pub fn finish(mut self) -> Result<TableOutput> {
        self.flush()?;
        Ok(TableOutput::new("mpi_trace_records", self.batches))
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Appends the rows of one `.dim` trace, after checking its tasks' records
/// agree ([`Exchange`]).
pub fn trace_rows(trace: &DimTrace, out: &mut TraceRowsBuilder) -> Result<u64> {
    let mut total = 0u64;
    let mut x = Exchange::default();
    for task in 0..trace.ntasks() as u32 {
        let mut s = trace.task_stream(task)?;
        let mut seq = 0i64;
        let mut pending = 0.0f64;
        let mut have_pending = false;
        let rank = i32::try_from(task).unwrap_or(i32::MAX);
        while let Some((rec, at)) = s.next_record()? {
            x.record(task, &rec, at, trace)?;
            let mut row = TraceRow {
                rank,
                seq,
                ..TraceRow::default()
            };
            match rec {
                DimRecord::Burst { seconds } | DimRecord::GpuBurst { seconds } => {
                    pending += seconds;
                    have_pending = true;
                    continue;
                }
                DimRecord::Noop => continue,
                DimRecord::Send {
                    dst,
                    size,
                    tag,
                    comm,
                    sync,
                } => {
                    let (f, k) = match sync {
                        0 => ("MPI_Send", "send"),
                        1 => ("MPI_Ssend", "send"),
                        2 => ("MPI_Isend", "isend"),
                        _ => ("MPI_Issend", "isend"),
                    };
                    row.main_function = f.into();
                    row.kernel = k.into();
                    row.peer = i32::try_from(dst).ok();
                    row.comm = Some(comm);
                    row.tag = Some(tag);
                    row.bytes = Some(clamp_i64(size));
                }
                DimRecord::Recv {
                    src,
                    size,
                    tag,
                    comm,
                    kind,
                } => {
                    let (f, k) = match kind {
                        RecvKind::Recv => ("MPI_Recv", "recv"),
                        RecvKind::Irecv => ("MPI_Irecv", "irecv"),
                        RecvKind::Wait => ("MPI_Wait", "wait"),
                    };
                    row.main_function = f.into();
                    row.kernel = k.into();
                    row.peer = i32::try_from(src).ok().filter(|&p| p >= 0);
                    row.comm = Some(comm);
                    row.tag = Some(tag);
                    row.bytes = Some(clamp_i64(size));
                }
                DimRecord::GlobalOp {
                    glop,
                    comm,
                    bytes_send,
                    bytes_recv,
                    ..
                } => {
                    row.main_function = glop_name(glop).into();
                    row.kernel = "collective".into();
                    row.comm = Some(comm);
                    row.bytes = Some(clamp_i64(bytes_send.max(bytes_recv)));
                }
                DimRecord::Event { etype, value } => {
                    row.main_function = format!("event:{etype}:{value}");
                    row.kernel = "event".into();
                }
            }
            row.compute_s = have_pending.then_some(pending);
            pending = 0.0;
            have_pending = false;
            out.push(row)?;
            seq += 1;
            total += 1;
        }
        let (end, want) = (s.stopped_at().unwrap_or(0), trace.task_end(task));
        if end != want {
            return Err(FormatError::malformed(
                trace.path(),
                "record.task",
                Position::Offset(end),
                format!(
                    "the records of task {task} stop here, at a record of another task or thread, \
                     before their end at byte {want}: a damaged task id, or tasks interleaved"
                ),
            ));
        }
        if have_pending {
            out.push(TraceRow {
                rank,
                seq,
                main_function: "compute".into(),
                kernel: "compute".into(),
                compute_s: Some(pending),
                ..TraceRow::default()
            })?;
            total += 1;
        }
    }
    x.check(trace)?;
    Ok(total)
}

/// Ingest entry point for kind `dimemas`: one `.dim` trace per input file.
pub fn ingest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let mut b = TraceRowsBuilder::new(&ctx.run_id, "");
    for input in inputs {
        b.set_source(&input.source)?;
        let trace = DimTrace::open(&input.path)?;
        let n = trace_rows(&trace, &mut b)?;
        tracing::debug!(file = %input.path.display(), rows = n, "dimemas trace ingested");
    }
    Ok(vec![b.finish()?])
}

/// One side of a message: (the other task, -1 for any; tag; size; where).
type Traced = (i64, i64, u64, u64);

/// What the checks across tasks need of a trace's records: the messages
/// sent and received, and the collectives each task enters.
#[derive(Debug, Default)]
struct Exchange {
    /// Messages per (receiving task, communicator): (sender, tag, size, at).
    sent: HashMap<(u32, i64), Vec<Traced>>,
    /// Receives (Recv and Irecv, not their Wait) per (task, communicator):
    /// (source or -1, tag, size, at).
    recvd: HashMap<(u32, i64), Vec<Traced>>,
    /// Collectives per (communicator, task): how many, where the last is.
    glops: BTreeMap<(i64, u32), (u64, u64)>,
}

impl Exchange {
    /// Checks one record's values against the trace (peers are its tasks,
    /// communicators its definitions, sizes and times within physical
    /// bounds) and notes what the checks across tasks need.
    fn record(&mut self, task: u32, rec: &DimRecord, at: u64, trace: &DimTrace) -> Result<()> {
        let bad = |field: &str, msg: String| {
            Err(FormatError::malformed(
                trace.path(),
                field,
                Position::Offset(at),
                msg,
            ))
        };
        let n = trace.ntasks() as i64;
        let known = |comm: i64| trace.comms.is_empty() || trace.comms.iter().any(|c| c.id == comm);
        let size_ok = |v: u64| v <= MAX_MESSAGE_BYTES;
        match *rec {
            DimRecord::Burst { seconds } | DimRecord::GpuBurst { seconds } => {
                if !(seconds.is_finite() && seconds <= MAX_BURST_S) {
                    return bad(
                        "burst_s",
                        format!("{seconds} s: not a burst within 0..={MAX_BURST_S} s"),
                    );
                }
            }
            DimRecord::Send {
                dst,
                size,
                tag,
                comm,
                ..
            } => {
                if i64::from(dst) >= n {
                    return bad("send.dst_task", format!("task {dst} of a trace of {n}"));
                }
                if !size_ok(size) {
                    return bad(
                        "send.size",
                        format!("{size} bytes: more than a node's memory"),
                    );
                }
                if i32::try_from(tag).is_err() {
                    return bad("send.tag", format!("tag {tag} is not a C int"));
                }
                if !known(comm) {
                    return bad("send.comm", format!("communicator {comm} is not defined"));
                }
                self.sent
                    .entry((dst, comm))
                    .or_default()
                    .push((i64::from(task), tag, size, at));
            }
            DimRecord::Recv {
                src,
                size,
                tag,
                comm,
                kind,
            } => {
                if src >= n {
                    return bad("recv.src_task", format!("task {src} of a trace of {n}"));
                }
                if !size_ok(size) {
                    return bad(
                        "recv.size",
                        format!("{size} bytes: more than a node's memory"),
                    );
                }
                if i32::try_from(tag).is_err() {
                    return bad("recv.tag", format!("tag {tag} is not a C int"));
                }
                if !known(comm) {
                    return bad("recv.comm", format!("communicator {comm} is not defined"));
                }
                if kind != RecvKind::Wait {
                    self.recvd
                        .entry((task, comm))
                        .or_default()
                        .push((src, tag, size, at));
                }
            }
            DimRecord::GlobalOp {
                comm,
                bytes_send,
                bytes_recv,
                ..
            } => {
                if !size_ok(bytes_send) || !size_ok(bytes_recv) {
                    return bad(
                        "glop.bytes",
                        format!("{bytes_send}/{bytes_recv} bytes: more than a node's memory"),
                    );
                }
                if !known(comm) {
                    return bad("glop.comm", format!("communicator {comm} is not defined"));
                }
                let g = self.glops.entry((comm, task)).or_insert((0, at));
                *g = (g.0 + 1, at);
            }
            DimRecord::Noop | DimRecord::Event { .. } => {}
        }
        Ok(())
    }

    /// The tasks' records agree as a completed run's do: every message sent
    /// to a task is received there in the same communicator (by a receive
    /// naming its source and tag, or -1), none larger than its receive, and
    /// the members of a communicator enter the same number of collectives.
    /// A record dropped or a peer, tag, communicator or size changed breaks
    /// one of these.
    fn check(&self, trace: &DimTrace) -> Result<()> {
        let err = |field: &str, at: u64, msg: String| {
            Err(FormatError::malformed(
                trace.path(),
                field,
                Position::Offset(at),
                msg,
            ))
        };
        let mut keys: Vec<(u32, i64)> =
            self.sent.keys().chain(self.recvd.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        let empty_s = Vec::new();
        let empty_r = Vec::new();
        for (task, comm) in keys {
            let s = self.sent.get(&(task, comm)).unwrap_or(&empty_s);
            let r = self.recvd.get(&(task, comm)).unwrap_or(&empty_r);
            if s.len() != r.len() {
                // The sender's last message, or the receiver's last receive.
                let at = if r.len() < s.len() {
                    s.last().map_or(0, |m| m.3)
                } else {
                    r.last().map_or(0, |m| m.3)
                };
                return err(
                    "message",
                    at,
                    format!(
                        "task {task} posts {} receive(s) in communicator {comm}, and the other tasks send it {} message(s)",
                        r.len(),
                        s.len()
                    ),
                );
            }
            let wild = r.iter().any(|m| m.0 < 0 || m.1 == -1);
            let mut queues: HashMap<(i64, i64), VecDeque<(u64, u64)>> = HashMap::new();
            let mut by_src: HashMap<i64, usize> = HashMap::new();
            for &(src, tag, size, at) in s {
                queues.entry((src, tag)).or_default().push_back((size, at));
                *by_src.entry(src).or_default() += 1;
            }
            for &(src, tag, size, at) in r {
                if src < 0 {
                    continue;
                }
                let c = by_src.entry(src).or_default();
                if *c == 0 {
                    return err(
                        "recv.src_task",
                        at,
                        format!(
                            "a receive from task {src}, which sends task {task} fewer messages in communicator {comm}"
                        ),
                    );
                }
                *c -= 1;
                if tag == -1 {
                    continue;
                }
                match queues.get_mut(&(src, tag)).and_then(|q| q.pop_front()) {
                    Some((sent, _)) if wild || sent <= size => {}
                    Some((sent, sat)) => {
                        return err(
                            "send.size",
                            sat,
                            format!(
                                "{sent} bytes sent to task {task}, whose receive (at byte offset {at}) takes {size}"
                            ),
                        );
                    }
                    None => {
                        return err(
                            "recv.tag",
                            at,
                            format!(
                                "a receive from task {src} with tag {tag}: that task sends no (more) such message"
                            ),
                        );
                    }
                }
            }
        }
        let n = trace.ntasks() as u32;
        let mut comms: Vec<i64> = self.glops.keys().map(|k| k.0).collect();
        comms.dedup();
        for comm in comms {
            let members: Vec<u32> = trace
                .comms
                .iter()
                .find(|c| c.id == comm)
                .map_or_else(|| (0..n).collect(), |c| c.tasks.clone());
            let count = |t: u32| self.glops.get(&(comm, t)).map_or(0, |g| g.0);
            let most = members.iter().map(|t| count(*t)).max().unwrap_or(0);
            if let Some(short) = members.iter().copied().find(|t| count(*t) < most) {
                let at = self
                    .glops
                    .get(&(comm, short))
                    .map_or(trace.task_end(short), |g| g.1);
                return err(
                    "glop",
                    at,
                    format!(
                        "task {short} enters {} collective(s) on communicator {comm}, another member {most}",
                        count(short)
                    ),
                );
            }
        }
        Ok(())
    }
}
