//! The `bandela` ingest kind: each input file is one rank's trace (v1 text or the
//! manual's `format_event` layout); every kernel becomes an `mpi_trace_records` row
//! with the computation that preceded it in `compute_s`.
use benchlake_core::lake::TableOutput;

use super::trace::{BRecord, Kernel, RankTrace};
use crate::dimemas::ingest::{TraceRow, TraceRowsBuilder};
use crate::error::{FormatError, Position, Result};
use crate::ingest::{IngestContext, InputFile};

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Appends the rows of one rank trace.
pub fn rank_rows(t: &mut RankTrace, out: &mut TraceRowsBuilder) -> Result<u64> {
    let rank = i32::try_from(t.header.rank).unwrap_or(i32::MAX);
    let mut seq = 0i64;
    let mut pending: Option<f64> = None;
    while let Some(r) = t.next_record()? {
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
    Ok(seq as u64)
}

/// Ingest entry point for kind `bandela`: one rank trace per input file.
pub fn ingest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let mut b = TraceRowsBuilder::new(&ctx.run_id, "");
    let mut total = 0u64;
    for input in inputs {
        b.set_source(&input.source)?;
        let mut t = RankTrace::open(&input.path)?;
        let n = rank_rows(&mut t, &mut b)?;
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
    Ok(vec![b.finish()?])
}
