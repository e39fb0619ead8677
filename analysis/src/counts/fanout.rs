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
use super::summary::{BlockSummary, CallMapping, Direction, HeatAcc, SideAcc};
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
    lead: u64,
    comm_size: u64,
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

/// Analyses one part.
pub fn analyze_part(spec: &PartSpec) -> Result<PartResult, CountsError> {
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
            let mut s =
                CompactReader::open_at(send, send_start.offset, send_start.line, send_start.index)?;
            let mut r =
                CompactReader::open_at(recv, recv_start.offset, recv_start.line, recv_start.index)?;
            let mut row = Row::default();
            let mut done = 0u64;
            while nblocks.is_none_or(|n| done < n) {
                let (hs, hr) = match (s.next_block()?, r.next_block()?) {
                    (None, None) => break,
                    (Some(a), Some(b)) => (a, b),
                    _ => {
                        return Err(CountsError::Input(format!(
                            "{} and {} have different numbers of blocks",
                            send.display(),
                            recv.display()
                        )));
                    }
                };
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
                let n = hs.comm_size;
                let mut w = BlockWork {
                    lead: spec.lead,
                    comm_size: n,
                    mappings: index.mappings(spec.lead, n, &hs.calls, opts.reference_compat),
                    send: SideAcc::new(n, hs.datatype_size, opts.size_threshold),
                    recv: SideAcc::new(n, hr.datatype_size, opts.size_threshold),
                    heat: &mut heat,
                    heat_ok: &mut heat_ok,
                    sdt: hs.datatype_size,
                    rdt: hr.datatype_size,
                };
                while s.next_row(&mut row)? {
                    w.row(Direction::Send, &row.ranks, &row.counts);
                }
                while r.next_row(&mut row)? {
                    w.row(Direction::Recv, &row.ranks, &row.counts);
                }
                let _ = (w.lead, w.comm_size);
                blocks.push(BlockSummary {
                    index: hs.index,
                    comm_size: n,
                    header_calls: Some(hs.header_calls),
                    calls: hs.calls.clone(),
                    mappings: w.mappings,
                    send: w.send.finish(),
                    recv: w.recv.finish(),
                });
                done += 1;
            }
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
                    lead: spec.lead,
                    comm_size: n,
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
/// after the other) and writes the Go-compatible reports into `out_dir`.
pub fn analyze_dir(dir: &Path, out_dir: &Path, options: &Options) -> Result<Analysis, CountsError> {
    let analysis = analyze_input_dir(dir, options)?;
    super::report::write_all(&analysis, out_dir)?;
    Ok(analysis)
}

/// The analysis of a profiler output directory, without writing anything.
pub fn analyze_input_dir(dir: &Path, options: &Options) -> Result<Analysis, CountsError> {
    let files: Vec<PathBuf> = expand_dir(dir)
        .map_err(|e| CountsError::Io {
            path: dir.to_path_buf(),
            source: e,
        })?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    analyze_files(&files, options)
}

/// Plans, runs every part and merges, without writing anything.
pub fn analyze_files(files: &[PathBuf], options: &Options) -> Result<Analysis, CountsError> {
    let mut results = Vec::new();
    for spec in plan(files, options)? {
        tracing::debug!(lead = spec.lead, "analysing part");
        results.push(analyze_part(&spec)?);
    }
    let mut a = merge(results);
    a.options = options.clone();
    Ok(a)
}
