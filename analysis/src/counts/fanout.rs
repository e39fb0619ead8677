//! Splitting the analysis into independent parts and merging their results.
//!
//! A part is a lead rank's compact file pair (whole, or a range of its blocks —
//! blocks hold disjoint call sets, so a block range is a set of whole calls) or a
//! range of its per-call files. Parts only read their own input (and the small
//! location files); their results carry per-block figures and sparse heat maps,
//! so [`merge`] reproduces exactly the analysis of the whole input, whatever the
//! split.
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use benchlake_formats::counts::compact::{self, CompactReader, Row};
use benchlake_formats::counts::percall;
use benchlake_formats::counts::ranklist::{self, CallList};
use benchlake_formats::counts::{FileKind, classify, expand_dir};
use serde::{Deserialize, Serialize};

use super::locations::LocationIndex;
use super::summary::{BlockSummary, CallMapping, Direction, HeatAcc, SideAcc, SideStats};
use super::{Analysis, Class, CountsError, LeadAnalysis, Options, Pattern, Stats};

/// Where a part starts reading a compact file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockStart {
    /// Byte offset of the block's `# Raw counters` line.
    pub offset: u64,
    /// Its line number.
    pub line: u64,
    /// Its block index.
    pub index: u64,
}

impl BlockStart {
    /// The start of a file.
    pub const FILE_START: BlockStart = BlockStart {
        offset: 0,
        line: 1,
        index: 0,
    };
}

/// The input of a part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartInput {
    /// Blocks of a compact pair, read in lockstep.
    Compact {
        /// `send-counters…`.
        send: PathBuf,
        /// `recv-counters…`.
        recv: PathBuf,
        /// Start in the send file.
        send_start: BlockStart,
        /// Start in the recv file.
        recv_start: BlockStart,
        /// Number of blocks to read (`None`: to the end).
        blocks: Option<u64>,
    },
    /// Per-call files `(call, path)`.
    PerCall {
        /// The files.
        files: Vec<(u64, PathBuf)>,
    },
}

/// One unit of work: serialisable, so a coordinator can hand it to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSpec {
    /// Profiler job (0 for per-call input).
    pub job: u64,
    /// Lead rank.
    pub lead: u64,
    /// What to read.
    pub input: PartInput,
    /// Every location file of the run (small; needed to map ranks to world ranks).
    pub location_files: Vec<PathBuf>,
    /// Options.
    pub options: Options,
}

/// The result of a part: serialisable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartResult {
    /// Profiler job.
    pub job: u64,
    /// Lead rank.
    pub lead: u64,
    /// The input file names.
    pub source: String,
    /// Per-block figures.
    pub blocks: Vec<BlockSummary>,
    /// Sparse rank×rank bytes per direction.
    pub heat: BTreeMap<Direction, Vec<(u64, u64, u64)>>,
    /// World rank → host.
    pub hosts: BTreeMap<u64, String>,
    /// Problems that did not stop the part.
    pub warnings: Vec<String>,
    /// Options used.
    pub options: Options,
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A compact send file and its recv file, as found so far.
type Pair<'a> = (Option<&'a PathBuf>, Option<&'a PathBuf>);

/// Cuts the profiler files `files` (e.g. from
/// [`benchlake_formats::counts::expand_dir`]) into parts.
pub fn plan(files: &[PathBuf], options: &Options) -> Result<Vec<PartSpec>, CountsError> {
    let mut pairs: BTreeMap<(u64, u64), Pair<'_>> = BTreeMap::new();
    let mut percall: BTreeMap<u64, Vec<(u64, PathBuf)>> = BTreeMap::new();
    let mut location_files = Vec::new();
    for f in files {
        match classify(f) {
            Some(FileKind::SendCounters { job, lead }) => {
                pairs.entry((job, lead)).or_default().0 = Some(f)
            }
            Some(FileKind::RecvCounters { job, lead }) => {
                pairs.entry((job, lead)).or_default().1 = Some(f)
            }
            Some(FileKind::PerCall { lead, call }) => {
                percall.entry(lead).or_default().push((call, f.clone()))
            }
            Some(FileKind::Location { .. }) => location_files.push(f.clone()),
            _ => {}
        }
    }
    location_files.sort();
    let mut parts = Vec::new();
    let mut compact_leads = std::collections::BTreeSet::new();
    for (&(job, lead), (s, r)) in &pairs {
        let (Some(s), Some(r)) = (s, r) else {
            let f = s
                .or(*r)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            return Err(CountsError::Input(format!(
                "{f}: the matching send-counters/recv-counters file is missing"
            )));
        };
        compact_leads.insert(lead);
        let spec = |send_start, recv_start, blocks| PartSpec {
            job,
            lead,
            input: PartInput::Compact {
                send: (*s).clone(),
                recv: (*r).clone(),
                send_start,
                recv_start,
                blocks,
            },
            location_files: location_files.clone(),
            options: options.clone(),
        };
        let total = file_len(s) + file_len(r);
        if total <= options.max_part_bytes {
            parts.push(spec(BlockStart::FILE_START, BlockStart::FILE_START, None));
            continue;
        }
        let ss = compact::block_starts(s)?;
        let rs = compact::block_starts(r)?;
        if ss.len() != rs.len() {
            return Err(CountsError::Input(format!(
                "{} has {} blocks but {} has {}",
                s.display(),
                ss.len(),
                r.display(),
                rs.len()
            )));
        }
        let mut k = 0usize;
        let send_len = file_len(s);
        let recv_len = file_len(r);
        while k < ss.len() {
            let (Some(a), Some(b)) = (ss.get(k), rs.get(k)) else {
                break;
            };
            let mut e = k + 1;
            // Extend while the part stays under the size budget.
            while let (Some(na), Some(nb)) = (ss.get(e), rs.get(e)) {
                if (na.0 - a.0) + (nb.0 - b.0) > options.max_part_bytes {
                    break;
                }
                e += 1;
            }
            let _ = (send_len, recv_len);
            let start = |t: &(u64, u64, u64)| BlockStart {
                offset: t.0,
                line: t.1,
                index: t.2,
            };
            let blocks = if e >= ss.len() {
                None
            } else {
                Some((e - k) as u64)
            };
            parts.push(spec(start(a), start(b), blocks));
            k = e;
        }
    }
    for (lead, mut files) in percall {
        if compact_leads.contains(&lead) {
            continue;
        }
        files.sort();
        let mut cur: Vec<(u64, PathBuf)> = Vec::new();
        let mut bytes = 0u64;
        for (c, f) in files {
            let len = file_len(&f);
            if !cur.is_empty() && bytes + len > options.max_part_bytes {
                parts.push(PartSpec {
                    job: 0,
                    lead,
                    input: PartInput::PerCall {
                        files: std::mem::take(&mut cur),
                    },
                    location_files: location_files.clone(),
                    options: options.clone(),
                });
                bytes = 0;
            }
            bytes += len;
            cur.push((c, f));
        }
        if !cur.is_empty() {
            parts.push(PartSpec {
                job: 0,
                lead,
                input: PartInput::PerCall { files: cur },
                location_files: location_files.clone(),
                options: options.clone(),
            });
        }
    }
    Ok(parts)
}

/// Per-part accumulation of one block.
struct BlockWork<'a> {
    mappings: Vec<CallMapping>,
    send: SideAcc,
    recv: SideAcc,
    heat: &'a mut BTreeMap<Direction, HeatAcc>,
    heat_ok: &'a mut bool,
    sdt: u64,
    rdt: u64,
}

impl BlockWork<'_> {
    fn row(&mut self, d: Direction, ranks: &[ranklist::Span], counts: &[u64]) {
        let (side, dt) = match d {
            Direction::Send => (&mut self.send, self.sdt),
            Direction::Recv => (&mut self.recv, self.rdt),
        };
        side.add_row(ranks, counts);
        // The rank×rank map is built from the send side only: for any valid
        // alltoallv the bytes rank j receives from rank i equal the bytes i sends
        // to j, so the receive map is its transpose (and costs as much again).
        if !*self.heat_ok || d == Direction::Recv {
            return;
        }
        let h = self.heat.entry(d).or_default();
        for m in &self.mappings {
            let factor = dt.saturating_mul(m.calls.len());
            if !h.add_row(ranks, counts, m.world_ranks.as_deref(), factor) {
                *self.heat_ok = false;
                return;
            }
        }
    }
}

/// What the readers of a compact pair share.
struct ChunkCtx<'a> {
    lead: u64,
    index: &'a LocationIndex,
    opts: &'a Options,
}

/// One block of one side of a compact pair.
struct SideBlock {
    header: compact::BlockHeader,
    stats: SideStats,
    /// The world-rank mappings of the block's calls (send side only).
    mappings: Vec<CallMapping>,
}

/// A byte range of one file of a pair, starting at a block, for one reader.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    /// 0: the send file, 1: the recv file.
    side: usize,
    start: u64,
    end: Option<u64>,
    /// The line before `start` and the index of its block: exact for a file's
    /// first chunk, 0 for the others (shifted once the chunks before are read).
    line_before: u64,
    index: u64,
    /// The file's first chunk.
    first: bool,
}

/// What one reader found: its blocks, then the error that stopped it, if any.
struct ChunkOut {
    blocks: Vec<SideBlock>,
    error: Option<CountsError>,
    /// The number of the last line read.
    lines: u64,
    heat: Option<HeatAcc>,
    heat_ok: bool,
}

/// The blocks of both sides of a pair, in file order, each side ending with the
/// error that stopped its reading (if any), and the send side's heat map.
struct PairRead {
    send: Vec<Result<SideBlock, CountsError>>,
    recv: Vec<Result<SideBlock, CountsError>>,
    heat: Option<HeatAcc>,
    heat_ok: bool,
}

/// Chunks of the recv file per thread: threads take the next chunk when they
/// are done with one, so that the time the send file's rows take (their cost
/// per byte depends on how many ranks share a row) and uneven chunks even out.
const CHUNKS_PER_THREAD: u64 = 8;

/// The smallest chunk a recv file is cut into.
const MIN_CHUNK_BYTES: u64 = 4 << 20;

fn read_chunk(ctx: &ChunkCtx<'_>, path: &Path, c: Chunk, nblocks: Option<u64>) -> ChunkOut {
    let mut out = ChunkOut {
        blocks: Vec::new(),
        error: None,
        lines: c.line_before,
        heat: None,
        heat_ok: true,
    };
    if let Err(e) = read_chunk_into(ctx, path, c, nblocks, &mut out) {
        out.error = Some(e);
    }
    out
}

fn read_chunk_into(
    ctx: &ChunkCtx<'_>,
    path: &Path,
    c: Chunk,
    nblocks: Option<u64>,
    out: &mut ChunkOut,
) -> Result<(), CountsError> {
    let mut r = CompactReader::open_range(path, c.start, c.end, c.line_before, c.index)?;
    let send = c.side == 0;
    let mut row = Row::default();
    while nblocks.is_none_or(|n| (out.blocks.len() as u64) < n) {
        let Some(h) = r.next_block()? else {
            break;
        };
        let mut acc = SideAcc::new(h.comm_size, h.datatype_size, ctx.opts.size_threshold);
        let mappings = if send {
            ctx.index
                .mappings(ctx.lead, h.comm_size, &h.calls, ctx.opts.reference_compat)
        } else {
            Vec::new()
        };
        while r.next_row(&mut row)? {
            acc.add_row(&row.ranks, &row.counts);
            // The rank×rank map is built from the send side only: for any valid
            // alltoallv the bytes rank j receives from rank i equal the bytes i
            // sends to j, so the receive map is its transpose (and costs as much
            // again).
            if send && out.heat_ok {
                let heat = out.heat.get_or_insert_with(HeatAcc::new);
                for m in &mappings {
                    let factor = h.datatype_size.saturating_mul(m.calls.len());
                    if !heat.add_row(&row.ranks, &row.counts, m.world_ranks.as_deref(), factor) {
                        out.heat_ok = false;
                        break;
                    }
                }
            }
        }
        out.blocks.push(SideBlock {
            header: h,
            stats: acc.finish(),
            mappings,
        });
    }
    out.lines = r.line();
    Ok(())
}

/// `e` with its line number moved down by `by` lines: the position, and the
/// line a file cut short names in its message ("… in the middle of line L
/// (…"; the only message of the compact reader that holds a line number).
fn shift_lines(e: CountsError, by: u64) -> CountsError {
    use benchlake_formats::FormatError;
    use benchlake_formats::error::Position;
    if by == 0 {
        return e;
    }
    let CountsError::Format(FormatError::Malformed {
        file,
        field,
        pos,
        mut message,
    }) = e
    else {
        return e;
    };
    let pos = match pos {
        Position::LineCol(l, c) => Position::LineCol(l.saturating_add(by), c),
        // The byte offset is the file's already; only the line is the range's.
        Position::Text { offset, line, col } => Position::Text {
            offset,
            line: line.saturating_add(by),
            col,
        },
        p => p,
    };
    const CUT: &str = " in the middle of line ";
    if let Some(at) = message.find(CUT).map(|i| i + CUT.len()) {
        let digits = message
            .get(at..)
            .map_or(0, |t| t.bytes().take_while(u8::is_ascii_digit).count());
        if let Some(l) = message
            .get(at..at + digits)
            .and_then(|t| t.parse::<u64>().ok())
        {
            message.replace_range(at..at + digits, &l.saturating_add(by).to_string());
        }
    }
    CountsError::Format(FormatError::Malformed {
        file,
        field,
        pos,
        message,
    })
}

/// Reads both files of a compact pair from their starts (up to `nblocks`
/// blocks each) on up to `threads` threads.
///
/// Each side is read on its own (its blocks' figures need only its own rows;
/// the caller pairs the blocks up). With two or more threads the send file is
/// read on this thread and the recv file on the others; without a block limit
/// the recv file is cut at block starts ([`compact::next_block_start`]) into
/// chunks of at least `min_chunk` bytes, [`CHUNKS_PER_THREAD`] per thread, which
/// the threads take in file order as they become free (this thread once the send
/// file is read). A chunk's line numbers and block indices are shifted by those
/// of the chunks before it, so the result (errors included) does not depend on
/// the cuts or on which thread read what: blocks, figures and heat map are the
/// same as from one reader per file.
fn read_pair(
    ctx: &ChunkCtx<'_>,
    files: [(&Path, BlockStart); 2],
    nblocks: Option<u64>,
    threads: usize,
    min_chunk: u64,
) -> PairRead {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let [(send, ss), (recv, rs)] = files;
    let first = |side: usize, st: BlockStart| Chunk {
        side,
        start: st.offset,
        end: None,
        line_before: st.line.saturating_sub(1),
        index: st.index,
        first: true,
    };
    let send_chunk = first(0, ss);
    let mut recv_chunks = vec![first(1, rs)];
    if threads >= 2 && nblocks.is_none() {
        let len = file_len(recv).saturating_sub(rs.offset);
        let size = (len / (threads as u64).saturating_mul(CHUNKS_PER_THREAD)).max(min_chunk.max(1));
        let mut at = rs.offset.saturating_add(size);
        while at < rs.offset.saturating_add(len) {
            let prev = recv_chunks.last().map_or(rs.offset, |c| c.start);
            // A cut is tried once; an unreadable file is an error of the reader
            // of the whole file instead.
            match compact::next_block_start(recv, at) {
                Ok(Some(o)) if o > prev => {
                    if let Some(last) = recv_chunks.last_mut() {
                        last.end = Some(o);
                    }
                    recv_chunks.push(Chunk {
                        side: 1,
                        start: o,
                        end: None,
                        line_before: 0,
                        index: 0,
                        first: false,
                    });
                    at = o.saturating_add(size);
                }
                Ok(Some(o)) => at = o.saturating_add(size),
                Ok(None) | Err(_) => break,
            }
        }
    }
    let path = |c: &Chunk| if c.side == 0 { send } else { recv };
    // The recv chunks, taken in order by whichever thread is free.
    let next = AtomicUsize::new(0);
    let take = || -> Vec<(usize, ChunkOut)> {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(c) = recv_chunks.get(i) else {
                break;
            };
            done.push((i, read_chunk(ctx, path(c), *c, nblocks)));
        }
        done
    };
    let helpers = if threads < 2 {
        0
    } else {
        (threads - 1).min(recv_chunks.len())
    };
    let (send_out, recv_done) = std::thread::scope(|s| {
        let others: Vec<_> = (1..=helpers)
            .filter_map(|t| {
                let job = &take;
                std::thread::Builder::new()
                    .name(format!("counts-read-{t}"))
                    .spawn_scoped(s, job)
                    .ok()
            })
            .collect();
        let send_out = read_chunk(ctx, send, send_chunk, nblocks);
        // What is left (everything, without helpers) is read here.
        let mut done = take();
        for h in others {
            match h.join() {
                Ok(v) => done.extend(v),
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        (send_out, done)
    });
    let mut outs: Vec<(Chunk, Option<ChunkOut>)> = vec![(send_chunk, Some(send_out))];
    let base = outs.len();
    outs.extend(recv_chunks.iter().map(|c| (*c, None)));
    for (i, o) in recv_done {
        if let Some(slot) = outs.get_mut(base + i) {
            slot.1 = Some(o);
        }
    }
    let mut pair = PairRead {
        send: Vec::new(),
        recv: Vec::new(),
        heat: None,
        heat_ok: true,
    };
    // Per side: the (line, index) the next chunk's numbers are shifted by, and
    // whether an error ended the side (what follows it is not read in one pass).
    let mut bases = [(0u64, 0u64); 2];
    let mut ended = [false; 2];
    for (c, o) in outs {
        let Some(o) = o else { continue };
        let side = c.side.min(1);
        if ended[side] {
            continue;
        }
        let (line0, index0) = if c.first { (0, 0) } else { bases[side] };
        let list = if side == 0 {
            &mut pair.send
        } else {
            &mut pair.recv
        };
        let n = o.blocks.len() as u64;
        for mut b in o.blocks {
            b.header.line = b.header.line.saturating_add(line0);
            b.header.index = b.header.index.saturating_add(index0);
            list.push(Ok(b));
        }
        let start = if c.first { c.index } else { index0 };
        bases[side] = (o.lines.saturating_add(line0), start.saturating_add(n));
        if let Some(e) = o.error {
            list.push(Err(shift_lines(e, line0)));
            ended[side] = true;
        }
        if side == 0 {
            pair.heat = o.heat;
            pair.heat_ok &= o.heat_ok;
        }
    }
    pair
}

/// Analyses one part on one thread.
pub fn analyze_part(spec: &PartSpec) -> Result<PartResult, CountsError> {
    analyze_part_threads(spec, 1)
}

/// Analyses one part on up to `threads` threads (a compact pair's files are
/// read side by side, the recv file in several pieces): the same result
/// whatever the number.
pub fn analyze_part_threads(spec: &PartSpec, threads: usize) -> Result<PartResult, CountsError> {
    analyze_part_with(spec, threads, MIN_CHUNK_BYTES)
}

fn analyze_part_with(
    spec: &PartSpec,
    threads: usize,
    min_chunk: u64,
) -> Result<PartResult, CountsError> {
    let opts = &spec.options;
    let index = LocationIndex::load(&spec.location_files)?;
    let mut heat: BTreeMap<Direction, HeatAcc> = BTreeMap::new();
    let mut heat_ok = true;
    let mut blocks = Vec::new();
    let mut warnings = Vec::new();
    let source;
    match &spec.input {
        PartInput::Compact {
            send,
            recv,
            send_start,
            recv_start,
            blocks: nblocks,
        } => {
            source = format!("{}, {}", file_name(send), file_name(recv));
            let ctx = ChunkCtx {
                lead: spec.lead,
                index: &index,
                opts,
            };
            let pair = read_pair(
                &ctx,
                [(send.as_path(), *send_start), (recv.as_path(), *recv_start)],
                *nblocks,
                threads,
                min_chunk,
            );
            let (pair_heat, pair_heat_ok) = (pair.heat, pair.heat_ok);
            let mut sends = pair.send.into_iter();
            let mut recvs = pair.recv.into_iter();
            loop {
                // In file order, as one reader of each file in lockstep finds
                // them: a block's headers, then whatever stopped a side.
                let (bs, br) = match (sends.next(), recvs.next()) {
                    (Some(Ok(a)), Some(Ok(b))) => (a, b),
                    (Some(Err(e)), _) | (_, Some(Err(e))) => return Err(e),
                    (None, None) => break,
                    _ => {
                        return Err(CountsError::Input(format!(
                            "{} and {} have different numbers of blocks",
                            send.display(),
                            recv.display()
                        )));
                    }
                };
                let (hs, hr) = (&bs.header, &br.header);
                if hs.calls != hr.calls || hs.comm_size != hr.comm_size {
                    return Err(CountsError::Input(format!(
                        "{}: block {} (line {}) does not match block {} of {} (calls or communicator size differ)",
                        recv.display(),
                        hr.index,
                        hr.line,
                        hs.index,
                        send.display()
                    )));
                }
                blocks.push(BlockSummary {
                    index: hs.index,
                    comm_size: hs.comm_size,
                    header_calls: Some(hs.header_calls),
                    calls: bs.header.calls,
                    mappings: bs.mappings,
                    send: bs.stats,
                    recv: br.stats,
                });
            }
            if let Some(h) = pair_heat {
                heat.insert(Direction::Send, h);
            }
            heat_ok &= pair_heat_ok;
        }
        PartInput::PerCall { files } => {
            source = files.first().map(|(_, p)| file_name(p)).unwrap_or_default();
            // One file (one call, N² counts) in memory at a time. Calls whose
            // figures are identical share one summary, so memory is bounded by
            // the distinct call signatures, like the compact format.
            let mut sorted: Vec<&(u64, PathBuf)> = files.iter().collect();
            sorted.sort_by_key(|f| f.0);
            let mut seen: HashMap<u64, Vec<usize>> = HashMap::new();
            for (call, path) in sorted {
                let c = percall::read_file(path)?;
                let n = c.comm_size;
                let calls = CallList(vec![(*call, *call)]);
                let mut w = BlockWork {
                    mappings: index.mappings(spec.lead, n, &calls, opts.reference_compat),
                    send: SideAcc::new(n, c.send_datatype_size, opts.size_threshold),
                    recv: SideAcc::new(n, c.recv_datatype_size, opts.size_threshold),
                    heat: &mut heat,
                    heat_ok: &mut heat_ok,
                    sdt: c.send_datatype_size,
                    rdt: c.recv_datatype_size,
                };
                for (d, recv) in [(Direction::Send, false), (Direction::Recv, true)] {
                    for i in 0..n {
                        w.row(d, &[(i, i)], c.row(recv, i));
                    }
                }
                let b = BlockSummary {
                    index: *call,
                    comm_size: n,
                    header_calls: None,
                    calls,
                    mappings: w.mappings,
                    send: w.send.finish(),
                    recv: w.recv.finish(),
                };
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (b.comm_size, &b.send, &b.recv).hash(&mut h);
                let slot = seen.entry(h.finish()).or_default();
                let same = slot.iter().copied().find(|&k| {
                    blocks.get(k).is_some_and(|x: &BlockSummary| {
                        x.comm_size == b.comm_size && x.send == b.send && x.recv == b.recv
                    })
                });
                match same.and_then(|k| blocks.get_mut(k)) {
                    Some(x) => {
                        push_call(&mut x.calls.0, *call);
                        for m in b.mappings {
                            match x
                                .mappings
                                .iter_mut()
                                .find(|y| y.world_ranks == m.world_ranks)
                            {
                                Some(y) => push_call(&mut y.calls.0, *call),
                                None => x.mappings.push(m),
                            }
                        }
                    }
                    None => {
                        slot.push(blocks.len());
                        blocks.push(b);
                    }
                }
            }
        }
    }
    if !heat_ok {
        warnings.push(format!(
            "lead rank {}: rank×rank heat map skipped (more than {} world ranks)",
            spec.lead,
            super::summary::MAX_HEAT_DIM
        ));
        heat.clear();
    }
    Ok(PartResult {
        job: spec.job,
        lead: spec.lead,
        source,
        blocks,
        heat: heat.into_iter().map(|(d, h)| (d, h.sparse())).collect(),
        hosts: index.hosts(),
        warnings,
        options: opts.clone(),
    })
}

/// Appends `call` (larger than every call already in `spans`) to a span list.
fn push_call(spans: &mut Vec<ranklist::Span>, call: u64) {
    match spans.last_mut() {
        Some(last) if last.1.checked_add(1) == Some(call) => last.1 = call,
        _ => spans.push((call, call)),
    }
}

fn add(m: &mut BTreeMap<u64, u64>, k: u64, v: u64) {
    let e = m.entry(k).or_default();
    *e = e.saturating_add(v);
}

/// Merges part results (any split of the same input) into the analysis.
pub fn merge(parts: Vec<PartResult>) -> Analysis {
    let options = parts.first().map(|p| p.options.clone()).unwrap_or_default();
    let mut hosts = BTreeMap::new();
    let mut by_lead: BTreeMap<(u64, u64), Vec<PartResult>> = BTreeMap::new();
    for p in parts {
        for (w, h) in &p.hosts {
            hosts.entry(*w).or_insert_with(|| h.clone());
        }
        by_lead.entry((p.job, p.lead)).or_default().push(p);
    }
    let leads = by_lead
        .into_iter()
        .map(|((job, lead), parts)| merge_lead(job, lead, parts, &options))
        .collect();
    Analysis {
        leads,
        hosts,
        options,
    }
}

fn merge_lead(job: u64, lead: u64, parts: Vec<PartResult>, opts: &Options) -> LeadAnalysis {
    let mut warnings = Vec::new();
    let mut blocks = Vec::new();
    let mut sources = Vec::new();
    let mut heat: BTreeMap<Direction, Vec<(u64, u64, u64)>> = BTreeMap::new();
    let nparts = parts.len();
    for p in parts {
        if !sources.contains(&p.source) {
            sources.push(p.source);
        }
        warnings.extend(p.warnings);
        blocks.extend(p.blocks);
        for (d, v) in p.heat {
            heat.entry(d).or_default().extend(v);
        }
    }
    if nparts > 1 {
        for v in heat.values_mut() {
            let dim = v.iter().map(|&(a, b, _)| a.max(b) + 1).max().unwrap_or(0);
            if dim <= super::summary::MAX_HEAT_DIM {
                // Dense sum: parts of one file pair usually all touch most cells.
                let d = dim as usize;
                let mut dense = vec![0u64; d * d];
                for &(a, b, x) in v.iter() {
                    if let Some(e) = dense.get_mut(a as usize * d + b as usize) {
                        *e = e.saturating_add(x);
                    }
                }
                *v = dense
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| **x != 0)
                    .map(|(i, x)| ((i / d) as u64, (i % d) as u64, *x))
                    .collect();
            } else {
                let mut m: HashMap<(u64, u64), u64> = HashMap::with_capacity(v.len());
                for &(a, b, x) in v.iter() {
                    let e = m.entry((a, b)).or_default();
                    *e = e.saturating_add(x);
                }
                *v = m.into_iter().map(|((a, b), x)| (a, b, x)).collect();
            }
        }
    }
    for v in heat.values_mut() {
        v.sort_unstable();
    }
    blocks.sort_by_key(|b| (b.calls.first().unwrap_or(u64::MAX), b.index));
    let loaded: u64 = blocks
        .iter()
        .map(|b| b.calls.len())
        .fold(0, u64::saturating_add);
    let header = blocks
        .iter()
        .filter_map(|b| b.header_calls.map(|h| (b.index, h)))
        .min_by_key(|(i, _)| *i)
        .map(|(_, h)| h);
    let num_calls = match header {
        Some((s, e)) if opts.reference_compat => e.saturating_sub(s).saturating_add(1),
        _ => loaded,
    };

    // Patterns: calls in creation order (first call), equal send and recv maps.
    let mut patterns: Vec<Pattern> = Vec::new();
    let mut excluded = 0u64;
    let mut clipped: Vec<(CallList, &BlockSummary)> = blocks
        .iter()
        .filter_map(|b| {
            let c = if opts.reference_compat {
                let kept = ranklist::clip_below(&b.calls.0, num_calls);
                excluded += b.calls.len() - ranklist::count(&kept);
                CallList(kept)
            } else {
                b.calls.clone()
            };
            (!c.is_empty()).then_some((c, b))
        })
        .collect();
    clipped.sort_by_key(|(c, _)| c.first());
    for (calls, b) in clipped {
        match patterns
            .iter_mut()
            .find(|p| p.send == b.send.patterns && p.recv == b.recv.patterns)
        {
            // Coalesced once below, not per block.
            Some(p) => p.calls.0.extend(calls.0),
            None => patterns.push(Pattern {
                id: patterns.len() as u64,
                send: b.send.patterns.clone(),
                recv: b.recv.patterns.clone(),
                calls,
            }),
        }
    }
    for p in &mut patterns {
        p.calls.0 = ranklist::coalesce(std::mem::take(&mut p.calls.0));
    }
    if excluded > 0 {
        warnings.push(format!(
            "lead rank {lead}: {excluded} calls with IDs >= {num_calls} (the header's call range) are not in the patterns (reference behaviour)"
        ));
    }
    let mut classes: BTreeMap<Class, Vec<u64>> = BTreeMap::new();
    for p in &patterns {
        for (&peers, &ranks) in &p.send {
            let (d, s) = (peers as f64, ranks as f64);
            let class = if peers > ranks.saturating_mul(100) {
                Class::OneToN
            } else if 0.9 * d <= s && s <= 1.1 * d {
                Class::NToN
            } else if peers.saturating_mul(100) < ranks {
                Class::NToOne
            } else {
                continue;
            };
            let v = classes.entry(class).or_default();
            if opts.reference_compat || v.last() != Some(&p.id) {
                v.push(p.id);
            }
        }
    }

    // Statistics over every loaded call.
    let mut st = Stats {
        num_calls,
        loaded_calls: loaded,
        ..Stats::default()
    };
    for b in &blocks {
        let k = b.calls.len();
        add(&mut st.send_datatypes, b.send.datatype_size, k);
        add(&mut st.recv_datatypes, b.recv.datatype_size, k);
        add(&mut st.comm_sizes, b.comm_size, k);
        st.large = st.large.saturating_add(b.send.large.saturating_mul(k));
        st.small = st.small.saturating_add(b.send.small.saturating_mul(k));
        st.small_nonzero = st
            .small_nonzero
            .saturating_add(b.send.small_nonzero.saturating_mul(k));
        add(&mut st.send_sparsity, b.send.total_zero, k);
        add(&mut st.recv_sparsity, b.recv.total_zero, k);
        add(&mut st.send_min, b.send.min, k);
        add(&mut st.recv_min, b.recv.min, k);
        add(&mut st.send_max, b.send.max, k);
        add(&mut st.recv_max, b.recv.max, k);
        let (snz, rnz) = if opts.reference_compat {
            (0, 0)
        } else {
            (b.send.min_nonzero, b.recv.min_nonzero)
        };
        add(&mut st.send_min_nonzero, snz, k);
        add(&mut st.recv_min_nonzero, rnz, k);
    }

    // Bytes per world rank over all calls.
    let mut rank_bytes: BTreeMap<Direction, BTreeMap<u64, u64>> = BTreeMap::new();
    for b in &blocks {
        for d in [Direction::Send, Direction::Recv] {
            let m = rank_bytes.entry(d).or_default();
            for map in &b.mappings {
                let k = map.calls.len();
                for (i, bytes) in b.side(d).rank_bytes.iter().enumerate() {
                    let w = match &map.world_ranks {
                        Some(w) => w.get(i).copied().unwrap_or(i as u64),
                        None => i as u64,
                    };
                    add(m, w, bytes.saturating_mul(k));
                }
            }
        }
    }
    LeadAnalysis {
        job,
        lead,
        source: sources.join("; "),
        patterns,
        classes,
        stats: st,
        blocks,
        rank_bytes,
        heat,
        warnings,
    }
}

/// Runs the whole analysis of a profiler output directory locally (parts run one
/// after the other, on one thread) and writes the Go-compatible reports into
/// `out_dir`.
pub fn analyze_dir(dir: &Path, out_dir: &Path, options: &Options) -> Result<Analysis, CountsError> {
    let analysis = analyze_input_dir(dir, options, 1)?;
    super::report::write_all(&analysis, out_dir)?;
    Ok(analysis)
}

/// The analysis of a profiler output directory, without writing anything;
/// `threads` as in [`analyze_files_threads`].
pub fn analyze_input_dir(
    dir: &Path,
    options: &Options,
    threads: usize,
) -> Result<Analysis, CountsError> {
    let files: Vec<PathBuf> = expand_dir(dir)
        .map_err(|e| CountsError::Io {
            path: dir.to_path_buf(),
            source: e,
        })?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    analyze_files_threads(&files, options, threads)
}

/// Plans, runs every part and merges, without writing anything (one thread).
pub fn analyze_files(files: &[PathBuf], options: &Options) -> Result<Analysis, CountsError> {
    analyze_files_threads(files, options, 1)
}

/// [`analyze_files`] with each part on up to `threads` threads
/// ([`analyze_part_threads`]): the same analysis whatever the number.
pub fn analyze_files_threads(
    files: &[PathBuf],
    options: &Options,
    threads: usize,
) -> Result<Analysis, CountsError> {
    let mut results = Vec::new();
    for spec in plan(files, options)? {
        tracing::debug!(lead = spec.lead, "analysing part");
        results.push(analyze_part_threads(&spec, threads)?);
    }
    let mut a = merge(results);
    a.options = options.clone();
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact pair of `blocks` blocks of `n` ranks (rows grouped as the
    /// profiler does), the recv file about three times the send file.
    fn write_pair(dir: &Path, n: u64, blocks: u64) -> (PathBuf, PathBuf) {
        let mut x = 12345u64;
        let mut rnd = move |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let (mut send, mut recv) = (String::new(), String::new());
        for b in 0..blocks {
            let calls = format!("{}-{}, {}", b * 10, b * 10 + rnd(3), b * 10 + 7);
            let k = ranklist::count(&ranklist::parse(calls.as_bytes()).unwrap());
            for (text, dt, distinct) in [(&mut send, 4, 2), (&mut recv, 8, n)] {
                // Blank lines between blocks and header lines, as tolerated.
                text.push_str(&format!(
                    "{}# Raw counters\n\nNumber of ranks: {n}\nDatatype size: {dt}\nAlltoallv calls 0-{}\nCount: {k} calls - {calls}\n\n\nBEGINNING DATA\n",
                    if b % 3 == 1 { "\n" } else { "" },
                    blocks * 10 - 1
                ));
                let rows: Vec<Vec<u64>> = (0..distinct.min(n))
                    .map(|_| {
                        (0..n)
                            .map(|_| if rnd(3) == 0 { 0 } else { rnd(500) })
                            .collect()
                    })
                    .collect();
                for g in 0..distinct.min(n) {
                    let ranks: Vec<(u64, u64)> = (0..n)
                        .filter(|r| r % distinct.min(n) == g)
                        .map(|r| (r, r))
                        .collect();
                    text.push_str(&format!("Rank(s) {}: ", ranklist::format(&ranks, ", ")));
                    for c in &rows[g as usize] {
                        text.push_str(&format!("{c} "));
                    }
                    text.push('\n');
                }
                text.push_str("END DATA\n");
            }
        }
        let (s, r) = (
            dir.join("send-counters.job0.rank0.txt"),
            dir.join("recv-counters.job0.rank0.txt"),
        );
        std::fs::write(&s, send).unwrap();
        std::fs::write(&r, recv).unwrap();
        (s, r)
    }

    fn spec(s: &Path, r: &Path, blocks: Option<u64>) -> PartSpec {
        PartSpec {
            job: 0,
            lead: 0,
            input: PartInput::Compact {
                send: s.to_path_buf(),
                recv: r.to_path_buf(),
                send_start: BlockStart::FILE_START,
                recv_start: BlockStart::FILE_START,
                blocks,
            },
            location_files: Vec::new(),
            options: Options::default(),
        }
    }

    /// Every thread count and cut gives the one-thread result, errors included.
    fn same_on_all_threads(spec: &PartSpec) -> Result<PartResult, String> {
        let one = analyze_part_with(spec, 1, u64::MAX).map_err(|e| e.to_string());
        for threads in 2..=6 {
            for min_chunk in [1, 64, 4096, u64::MAX] {
                let got = analyze_part_with(spec, threads, min_chunk).map_err(|e| e.to_string());
                assert_eq!(
                    got, one,
                    "{threads} threads, chunks of at least {min_chunk} bytes"
                );
            }
        }
        one
    }

    #[test]
    fn threads_and_cuts_give_the_one_thread_result() {
        let dir = tempfile::tempdir().unwrap();
        let (s, r) = write_pair(dir.path(), 13, 40);
        let whole = same_on_all_threads(&spec(&s, &r, None)).unwrap();
        assert_eq!(whole.blocks.len(), 40);
        assert_eq!(whole.blocks[39].index, 39);
        assert!(!whole.heat[&Direction::Send].is_empty());
        // A block-limited part from a later block start.
        let ss = compact::block_starts(&s).unwrap();
        let rs = compact::block_starts(&r).unwrap();
        let mut p = spec(&s, &r, Some(5));
        if let PartInput::Compact {
            send_start,
            recv_start,
            ..
        } = &mut p.input
        {
            let at = |t: &(u64, u64, u64)| BlockStart {
                offset: t.0,
                line: t.1,
                index: t.2,
            };
            *send_start = at(&ss[7]);
            *recv_start = at(&rs[7]);
        }
        let part = same_on_all_threads(&p).unwrap();
        assert_eq!(part.blocks.len(), 5);
        assert_eq!(part.blocks[0], whole.blocks[7]);
        // To the end from a later block start.
        if let PartInput::Compact { blocks, .. } = &mut p.input {
            *blocks = None;
        }
        assert_eq!(same_on_all_threads(&p).unwrap().blocks, whole.blocks[7..]);
    }

    #[test]
    fn errors_name_the_same_line_whatever_the_threads() {
        let dir = tempfile::tempdir().unwrap();
        let (s, r) = write_pair(dir.path(), 11, 30);
        let text = std::fs::read_to_string(&r).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let write = |l: &[&str]| {
            let mut t = l.join("\n");
            t.push('\n');
            std::fs::write(&r, t).unwrap();
        };
        let fails = || same_on_all_threads(&spec(&s, &r, None)).unwrap_err();
        // A bad count in the last block of the recv file (past every cut).
        let row = lines.len() - 5;
        assert!(lines[row].starts_with("Rank(s) "));
        let bad = lines[row].replace(": ", ": x");
        let mut l = lines.clone();
        l[row] = &bad;
        write(&l);
        let e = fails();
        assert!(e.contains(&format!("line {}, column", row + 1)), "{e}");
        // A missing row: named at the block's END DATA line.
        let mut l = lines.clone();
        l.remove(row);
        write(&l);
        let e = fails();
        assert!(e.contains("rows for 10 of 11 ranks"), "{e}");
        assert!(
            e.contains(&format!("line {}, column", lines.len() - 1)),
            "{e}"
        );
        // Block 20 of the recv file lists other calls than the send file's.
        let count = lines
            .iter()
            .enumerate()
            .filter(|(_, t)| t.starts_with("Count: "))
            .nth(20)
            .unwrap()
            .0;
        let mut l = lines.clone();
        l[count] = "Count: 1 calls - 99999";
        write(&l);
        let e = fails();
        assert!(e.contains(&format!("block 20 (line {})", count - 4)), "{e}");
        assert!(e.contains("does not match block 20"), "{e}");
        // Blocks cut short by the next block (where the file may be cut for
        // the threads): a missing END DATA, a header without its last lines.
        let starts: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, t)| t.starts_with("# Raw counters"))
            .map(|(k, _)| k)
            .collect();
        for what in [
            "missing 'END DATA' before the next block",
            "expected 'Alltoallv calls S-E', found '#'",
        ] {
            let mut l = lines.clone();
            // Block 18 follows block 17 without a blank line.
            let cut = if what.starts_with("missing") {
                l.remove(starts[18] - 1);
                starts[18] - 1
            } else {
                l.drain(starts[17] + 4..starts[18]);
                starts[17] + 4
            };
            write(&l);
            let e = fails();
            assert!(e.contains(what), "{e}");
            assert!(e.contains(&format!("line {}, column 1", cut + 1)), "{e}");
        }
        // A recv file cut short, and one with a block fewer than the send file.
        std::fs::write(&r, &text[..text.len() - 4]).unwrap();
        let e = fails();
        assert!(e.contains("recv-counters"), "{e}");
        let last = text.rfind("# Raw counters").unwrap();
        std::fs::write(&r, &text[..last]).unwrap();
        let e = fails();
        assert!(e.contains("different numbers of blocks"), "{e}");
    }
}
