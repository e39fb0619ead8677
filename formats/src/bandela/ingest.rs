//! The `bandela` ingest kind: each input file is one rank's trace (v1 text or the
//! manual's `format_event` layout); every kernel becomes an `mpi_trace_records` row
//! with the computation that preceded it in `compute_s`.
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use benchlake_core::lake::TableOutput;

use super::trace::{BRecord, Kernel, RankTrace};
use crate::dimemas::ingest::{TraceRow, TraceRowsBuilder};
use crate::error::{FormatError, Position, Result};
use crate::ingest::{IngestContext, InputFile};

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A point-to-point message as one side traced it.
#[derive(Debug, Clone, Copy)]
struct Msg {
    /// The other rank (-1: any source).
    peer: i64,
    comm: i64,
    tag: i64,
    bytes: u64,
    /// Where the kernel is in its file.
    offset: u64,
}

/// What the checks across ranks need of one rank's trace.
#[derive(Debug, Default)]
struct Exchange {
    path: PathBuf,
    rank: u32,
    nranks: u32,
    sends: Vec<Msg>,
    recvs: Vec<Msg>,
    /// Barriers per communicator: how many, and where the last one is.
    barriers: BTreeMap<i64, (u64, u64)>,
    /// Communicators this rank defined (`M comm`), with their world ranks.
    comms: BTreeMap<i64, Vec<u32>>,
    /// Bytes in the file.
    len: u64,
}

fn bad(t: &RankTrace, field: &str, msg: String) -> FormatError {
    FormatError::malformed(t.path(), field, Position::Offset(t.record_offset()), msg)
}

/// Appends the rows of one rank trace, and checks that its requests are
/// used as MPI allows (never reused while live, waited on only when issued,
/// every receive completed by the end, as MPI_Finalize requires).
fn rank_rows(t: &mut RankTrace, out: &mut TraceRowsBuilder, x: &mut Exchange) -> Result<u64> {
    let rank = i32::try_from(t.header.rank).unwrap_or(i32::MAX);
    let mut seq = 0i64;
    let mut pending: Option<f64> = None;
    // Live requests and where each was issued.
    // Live requests: where each was issued, and whether it is a receive.
    let mut live: HashMap<i64, (u64, bool)> = HashMap::new();
    while let Some(r) = t.next_record()? {
        if let BRecord::Comm { id, ranks } = &r {
            x.comms.insert(*id, ranks.clone());
        }
        if let BRecord::Kernel { kernel, .. } = &r {
            let at = t.record_offset();
            match *kernel {
                Kernel::Isend {
                    comm,
                    tag,
                    bytes,
                    req,
                    ..
                }
                | Kernel::Irecv {
                    comm,
                    tag,
                    bytes,
                    req,
                    ..
                } => {
                    let m = Msg {
                        peer: peer_of(kernel),
                        comm,
                        tag,
                        bytes,
                        offset: at,
                    };
                    if matches!(kernel, Kernel::Isend { .. }) {
                        x.sends.push(m);
                    } else {
                        x.recvs.push(m);
                    }
                    let recv = matches!(kernel, Kernel::Irecv { .. });
                    if let Some((first, _)) = live.insert(req, (at, recv)) {
                        return Err(bad(
                            t,
                            "request",
                            format!(
                                "request {req} reused while still live (issued at byte offset {first})"
                            ),
                        ));
                    }
                }
                Kernel::Wait { req }
                | Kernel::Test {
                    req,
                    completed: true,
                } => {
                    let was_live = live.remove(&req).is_some();
                    if !was_live {
                        return Err(bad(
                            t,
                            "request",
                            format!("wait on request {req}, which is not live"),
                        ));
                    }
                }
                Kernel::Barrier { comm } => {
                    let b = x.barriers.entry(comm).or_insert((0, at));
                    *b = (b.0 + 1, at);
                }
                _ => {}
            }
        }
        let BRecord::Kernel {
            main_fn, kernel, ..
        } = r
        else {
            if let BRecord::Compute { seconds, .. } = r {
                *pending.get_or_insert(0.0) += seconds;
            }
            continue;
        };
        let mut row = TraceRow {
            rank,
            seq,
            main_function: main_fn,
            compute_s: pending.take(),
            ..TraceRow::default()
        };
        match kernel {
            Kernel::Isend {
                peer,
                comm,
                tag,
                bytes,
                req,
                sym,
                ..
            } => {
                row.kernel = "isend".into();
                row.peer = i32::try_from(peer).ok();
                (row.comm, row.tag, row.bytes, row.request, row.symmetric) = (
                    Some(comm),
                    Some(tag),
                    Some(clamp(bytes)),
                    Some(req),
                    Some(sym),
                );
            }
            Kernel::Irecv {
                peer,
                comm,
                tag,
                bytes,
                req,
                sym,
                ..
            } => {
                row.kernel = "irecv".into();
                row.peer = i32::try_from(peer).ok().filter(|p| *p >= 0);
                (row.comm, row.tag, row.bytes, row.request, row.symmetric) = (
                    Some(comm),
                    Some(tag),
                    Some(clamp(bytes)),
                    Some(req),
                    Some(sym),
                );
            }
            Kernel::Wait { req } => {
                row.kernel = "wait".into();
                row.request = Some(req);
            }
            Kernel::Test { req, .. } => {
                row.kernel = "test".into();
                row.request = Some(req);
            }
            Kernel::Barrier { comm } => {
                row.kernel = "barrier".into();
                row.comm = Some(comm);
            }
            Kernel::Get { peer, comm, bytes } | Kernel::Put { peer, comm, bytes } => {
                row.kernel = if matches!(kernel, Kernel::Get { .. }) {
                    "get"
                } else {
                    "put"
                }
                .into();
                row.peer = i32::try_from(peer).ok();
                (row.comm, row.bytes) = (Some(comm), Some(clamp(bytes)));
            }
        }
        out.push(row)?;
        seq += 1;
    }
    if let Some(c) = pending {
        out.push(TraceRow {
            rank,
            seq,
            main_function: "compute".into(),
            kernel: "compute".into(),
            compute_s: Some(c),
            ..TraceRow::default()
        })?;
        seq += 1;
    }
    // A send may be released with MPI_Request_free (which the tracer does
    // not intercept) and never waited on; a receive must complete.
    if let Some((req, (at, _))) = live
        .iter()
        .filter(|(_, (_, recv))| *recv)
        .min_by_key(|(_, (at, _))| *at)
    {
        return Err(FormatError::malformed(
            t.path(),
            "request",
            Position::Offset(*at),
            format!(
                "receive request {req} issued here is never completed ({} live at the end of the file, \
                 which MPI_Finalize does not allow): the trace is cut short or damaged",
                live.values().filter(|(_, recv)| *recv).count()
            ),
        ));
    }
    Ok(seq as u64)
}

fn peer_of(k: &Kernel) -> i64 {
    match *k {
        Kernel::Isend { peer, .. } => i64::from(peer),
        Kernel::Irecv { peer, .. } => peer,
        _ => -1,
    }
}

/// Ingest entry point for kind `bandela`: one rank trace per input file.
pub fn ingest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let mut b = TraceRowsBuilder::new(&ctx.run_id, "");
    let mut total = 0u64;
    let mut ranks = Vec::with_capacity(inputs.len());
    for input in inputs {
        b.set_source(&input.source)?;
        let mut t = RankTrace::open(&input.path)?;
        let mut x = Exchange {
            path: input.path.clone(),
            rank: t.header.rank,
            nranks: t.header.nranks,
            ..Exchange::default()
        };
        let n = rank_rows(&mut t, &mut b, &mut x)?;
        x.len = std::fs::metadata(&input.path)
            .map_err(|e| FormatError::io(&input.path, e))?
            .len();
        ranks.push(x);
        total += n;
        tracing::debug!(file = %input.path.display(), rows = n, "bandela rank trace ingested");
    }
    // A rank may make no MPI call, but a whole trace without one is a header
    // cut short (or not a trace): never an ingest of nothing.
    if total == 0
        && let Some(first) = inputs.first()
    {
        let len = std::fs::metadata(&first.path)
            .map_err(|e| FormatError::io(&first.path, e))?
            .len();
        return Err(FormatError::malformed(
            &first.path,
            "K record",
            Position::Offset(len),
            "no MPI call (K record or format_event record) in the trace: it is cut short or empty",
        ));
    }
    across_ranks(&ranks)?;
    Ok(vec![b.finish()?])
}

/// When the inputs are every rank of a run (ranks 0..n-1 of n, each once),
/// the ranks' traces must agree, as they do for a run that completed: every
/// message sent to a rank is received there (in the same communicator, by a
/// receive naming its source and tag or any), a message is never larger than
/// the receive it lands in, and the members of a communicator pass the same
/// number of barriers. A rank's file cut at a line boundary, or a peer, tag,
/// communicator or size changed, breaks one of these; the error names the
/// rank file that holds the first record out of step.
fn across_ranks(ranks: &[Exchange]) -> Result<()> {
    let Some(n) = ranks.first().map(|x| x.nranks) else {
        return Ok(());
    };
    let mut by_rank: Vec<Option<&Exchange>> = vec![None; n as usize];
    for x in ranks {
        match by_rank.get_mut(x.rank as usize) {
            Some(slot @ None) if x.nranks == n => *slot = Some(x),
            _ => return Ok(()),
        }
    }
    let by_rank: Vec<&Exchange> = by_rank.into_iter().flatten().collect();
    if by_rank.len() != n as usize {
        return Ok(());
    }
    let err = |x: &Exchange, field: &str, at: u64, msg: String| {
        FormatError::malformed(&x.path, field, Position::Offset(at), msg)
    };
    let peer_path = |r: i64| {
        usize::try_from(r)
            .ok()
            .and_then(|r| by_rank.get(r))
            .map_or(String::new(), |x| x.path.display().to_string())
    };
    // Messages, per receiving rank and communicator.
    let mut sent: HashMap<(u32, i64), Vec<(u32, Msg)>> = HashMap::new();
    for x in &by_rank {
        for m in &x.sends {
            sent.entry((m.peer as u32, m.comm))
                .or_default()
                .push((x.rank, *m));
        }
    }
    for x in &by_rank {
        let mut comms: Vec<i64> = x.recvs.iter().map(|m| m.comm).collect();
        comms.extend(sent.keys().filter(|k| k.0 == x.rank).map(|k| k.1));
        comms.sort_unstable();
        comms.dedup();
        for comm in comms {
            let empty = Vec::new();
            let s = sent.get(&(x.rank, comm)).unwrap_or(&empty);
            let r: Vec<&Msg> = x.recvs.iter().filter(|m| m.comm == comm).collect();
            if s.len() != r.len() {
                // The pair of ranks out of step: a sender whose messages
                // outnumber the receives naming it, or the other way round
                // (else, with receives from any source, the last sender).
                let from = |src: u32| {
                    s.iter()
                        .filter(|m| m.0 == src)
                        .map(|m| &m.1)
                        .collect::<Vec<_>>()
                };
                let named = |src: u32| {
                    r.iter()
                        .filter(|m| m.peer == i64::from(src))
                        .copied()
                        .collect::<Vec<&Msg>>()
                };
                let src = (0..n)
                    .find(|q| from(*q).len() != named(*q).len())
                    .or(s.last().map(|m| m.0));
                let (sends, recvs) = src.map_or((Vec::new(), Vec::new()), |q| (from(q), named(q)));
                let other = src.and_then(|q| by_rank.get(q as usize)).copied();
                let (who, at, peer, peer_at) = if r.len() < s.len() {
                    (
                        *x,
                        recvs.last().or(r.last()).map_or(x.len, |m| m.offset),
                        other,
                        sends.last().map_or(0, |m| m.offset),
                    )
                } else {
                    (
                        other.unwrap_or(*x),
                        sends.last().map_or(0, |m| m.offset),
                        Some(*x),
                        recvs.last().or(r.last()).map_or(x.len, |m| m.offset),
                    )
                };
                return Err(err(
                    who,
                    "message",
                    at,
                    format!(
                        "rank {} posts {} receive(s) in communicator {comm}, and the other ranks send it {} message(s){}: \
                         a rank's trace is cut short or damaged",
                        x.rank,
                        r.len(),
                        s.len(),
                        peer.map_or(String::new(), |p| format!(
                            "; rank {} of {} (at byte offset {peer_at}) is out of step with it",
                            src.unwrap_or(0),
                            p.path.display()
                        ))
                    ),
                ));
            }
            // Receives naming their source and tag take that source's
            // messages of that tag, in order (MPI's non-overtaking rule).
            let mut queues: HashMap<(u32, i64), std::collections::VecDeque<&Msg>> = HashMap::new();
            for (src, m) in s {
                queues.entry((*src, m.tag)).or_default().push_back(m);
            }
            let wild = r.iter().any(|m| m.peer < 0 || m.tag == -1);
            let mut by_src: HashMap<u32, usize> = HashMap::new();
            for (src, _) in s {
                *by_src.entry(*src).or_default() += 1;
            }
            for m in &r {
                if m.peer >= 0 {
                    let c = by_src.entry(m.peer as u32).or_default();
                    if *c == 0 {
                        return Err(err(
                            x,
                            "irecv.peer",
                            m.offset,
                            format!(
                                "a receive from rank {} in communicator {comm}, which sends rank {} fewer messages there ({})",
                                m.peer,
                                x.rank,
                                peer_path(m.peer)
                            ),
                        ));
                    }
                    *c -= 1;
                }
                if m.peer < 0 || m.tag == -1 {
                    continue;
                }
                match queues
                    .get_mut(&(m.peer as u32, m.tag))
                    .and_then(|q| q.pop_front())
                {
                    Some(sm) if wild || sm.bytes <= m.bytes => {}
                    Some(sm) => {
                        return Err(err(
                            by_rank.get(m.peer as usize).copied().unwrap_or(*x),
                            "isend.bytes",
                            sm.offset,
                            format!(
                                "{} bytes sent to rank {}, whose receive (at byte offset {} of {}) takes {}",
                                sm.bytes,
                                x.rank,
                                m.offset,
                                x.path.display(),
                                m.bytes
                            ),
                        ));
                    }
                    None => {
                        return Err(err(
                            x,
                            "irecv.tag",
                            m.offset,
                            format!(
                                "a receive from rank {} with tag {} in communicator {comm}: that rank ({}) sends no (more) such message",
                                m.peer,
                                m.tag,
                                peer_path(m.peer)
                            ),
                        ));
                    }
                }
            }
        }
    }
    // Barriers: every member of a communicator passes the same number. A
    // communicator no rank defines holds every rank (the world).
    // (A communicator id defined with different members at different
    // times, freed and reused, is left unchecked.)
    let mut defined: BTreeMap<i64, Option<Vec<u32>>> = BTreeMap::new();
    for x in &by_rank {
        for (id, members) in &x.comms {
            let d = defined.entry(*id).or_insert_with(|| Some(members.clone()));
            if d.as_ref().is_some_and(|d| d != members) {
                *d = None;
            }
        }
    }
    let mut comms: Vec<i64> = by_rank
        .iter()
        .flat_map(|x| x.barriers.keys().copied())
        .collect();
    comms.sort_unstable();
    comms.dedup();
    for comm in comms {
        let members: Vec<u32> = match defined.get(&comm) {
            Some(Some(m)) => m.clone(),
            Some(None) => continue,
            None => (0..n).collect(),
        };
        let count = |r: u32| {
            by_rank
                .get(r as usize)
                .and_then(|x| x.barriers.get(&comm))
                .map_or(0, |b| b.0)
        };
        let most = members.iter().map(|r| count(*r)).max().unwrap_or(0);
        let top = members
            .iter()
            .copied()
            .find(|r| count(*r) == most)
            .and_then(|r| by_rank.get(r as usize))
            .map_or(String::new(), |x| {
                let at = x.barriers.get(&comm).map_or(0, |b| b.1);
                format!(" ({} at byte offset {at})", x.path.display())
            });
        if let Some(short) = members
            .iter()
            .copied()
            .find(|r| (*r as usize) < by_rank.len() && count(*r) < most)
        {
            let Some(x) = by_rank.get(short as usize).copied() else {
                continue;
            };
            let at = x.barriers.get(&comm).map_or(x.len, |b| b.1);
            return Err(err(
                x,
                "barrier",
                at,
                format!(
                    "rank {short} passes {} barrier(s) on communicator {comm}, another member {most}{top}: \
                     a trace is cut short or damaged",
                    count(short)
                ),
            ));
        }
    }
    Ok(())
}
