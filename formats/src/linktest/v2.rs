//! LinkTest 2.1.17 payload: decoding and writing.
//!
//! Decisions where the 2.1.17 document is defective (docs/linktest.md §"2.1.17
//! decisions" explains each):
//! - the ID is the 8 bytes `"LinkTest"` (the table's size 5 is a leftover);
//! - the file header sits at the start of global rank 0's stream, followed by
//!   rank 0's data chunk;
//! - string lengths (mode, hostname) count the bytes stored, NUL included when
//!   present; the text ends at the first NUL;
//! - every rank's chunk: u32 hostname length, hostname, i32 core id, then M
//!   permutations, then `"END_BLOCK"`; rank 0's per-permutation block (start
//!   time … end time) precedes its timings in every permutation;
//! - timing slot k of rank r is partner k for k < r and k + 1 otherwise (self
//!   skipped); the access pattern uses the same slots;
//! - M is taken from rank 0's stream length and must be `max(1, R)` or `R + 1`
//!   for R = "Num. Randomized Tasks";
//! - slow-partner entries are u64 ranks; entries with equal sender and receiver
//!   are unused padding;
//! - all integers and doubles are in the container's byte order.
use std::path::Path;

use super::{
    AllToAllTime, Cursor, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink,
    payload_order,
};
use crate::error::{FormatError, Position, Result};
use crate::sion::{ByteOrder, SionSet, SionWriteOptions, TaskData, encode_sion_set};

/// The ID at the start of rank 0's stream.
pub const ID: &[u8] = b"LinkTest";
/// Bytes of the git-hash field.
pub const GIT_HASH_LEN: usize = 41;
/// Bytes of the start/end time fields.
pub const TIME_LEN: usize = 32;
/// The header's end marker.
pub const END_HEADER: &[u8] = b"END_HEADER";
/// The chunk's end marker.
pub const END_BLOCK: &[u8] = b"END_BLOCK";

/// Decodes a 2.1.17 file.
pub fn decode(set: &SionSet) -> Result<LinkTestRun> {
    decode_with(set, None)
}

/// Receives each rank's pair times and steps of a one-permutation file, in
/// rank order, instead of the n × n matrices: `(rank, slots)`, slot k being
/// partner k for k < rank and k + 1 otherwise.
pub(crate) type RankSink<'s> = &'s mut dyn FnMut(usize, &RankSlots<'_>) -> Result<()>;

/// One rank's pair slots as the file holds them (times as f64, steps as u64,
/// in the payload's byte order): the sink converts them straight into its
/// own columns, with no copy in between; a step that does not fit i32 is
/// found in that same pass and reported at its offset.
pub(crate) struct RankSlots<'a> {
    times: &'a [u8],
    steps: &'a [u8],
    order: ByteOrder,
    /// The error for the step of slot k that does not fit.
    step_error: &'a dyn Fn(usize) -> FormatError,
    /// Every rank's hostname, by rank (read ahead of the pair times: a
    /// pair's partner may come later in the file).
    hosts: &'a [String],
}

impl RankSlots<'_> {
    /// Every rank's hostname, by rank ("" for a rank whose header could not
    /// be read ahead; the decode then fails on it).
    pub(crate) fn hosts(&self) -> &[String] {
        self.hosts
    }

    /// Number of slots.
    pub(crate) fn len(&self) -> usize {
        self.times.len() / 8
    }

    /// The times of `slots` as the file holds them, if that is little-endian.
    pub(crate) fn times_le(&self, slots: std::ops::Range<usize>) -> Option<&[u8]> {
        (self.order == ByteOrder::Little)
            .then(|| self.times.get(slots.start * 8..slots.end * 8))
            .flatten()
    }

    /// Appends the times of `slots` to `out`.
    pub(crate) fn times_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<f64>) {
        let raw = &self.times[slots.start * 8..slots.end * 8];
        if cfg!(target_endian = "little") && self.order == ByteOrder::Little {
            extend_native(out, raw);
        } else {
            out.extend(raw.chunks_exact(8).map(|c| {
                let a: [u8; 8] = c.try_into().unwrap_or_default();
                match self.order {
                    ByteOrder::Little => f64::from_le_bytes(a),
                    ByteOrder::Big => f64::from_be_bytes(a),
                }
            }));
        }
    }

    /// Appends the steps of `slots` to `out`; the error names the first step
    /// that does not fit i32 (`out` is then left as it was).
    pub(crate) fn steps_to(&self, slots: std::ops::Range<usize>, out: &mut Vec<i32>) -> Result<()> {
        let raw = &self.steps[slots.start * 8..slots.end * 8];
        let n = raw.len() / 8;
        let len = out.len();
        out.reserve(n);
        let spare = &mut out.spare_capacity_mut()[..n];
        // One pass, branch-free: convert, and remember any high bits.
        let mut high = 0u64;
        let mut put = |read: fn([u8; 8]) -> u64| {
            for (o, c) in spare.iter_mut().zip(raw.chunks_exact(8)) {
                let v = read(c.try_into().unwrap_or_default());
                high |= v;
                o.write(v as i32);
            }
        };
        match self.order {
            ByteOrder::Little => put(u64::from_le_bytes),
            ByteOrder::Big => put(u64::from_be_bytes),
        }
        if high >> 31 != 0 {
            let k = first_step_over(raw, self.order);
            return Err((self.step_error)(slots.start + k));
        }
        // SAFETY: the loop above wrote all n values (`raw` holds n steps).
        unsafe { out.set_len(len + n) };
        Ok(())
    }
}

/// Appends `raw`, whole f64 values in this machine's byte order, to `out`.
fn extend_native(out: &mut Vec<f64>, raw: &[u8]) {
    let n = raw.len() / 8;
    out.reserve(n);
    let spare = out.spare_capacity_mut();
    // SAFETY: `reserve` made room for n more values; every bit pattern is an
    // f64, and the byte copy needs no alignment of `raw`.
    unsafe {
        std::ptr::copy_nonoverlapping(raw.as_ptr(), spare.as_mut_ptr().cast::<u8>(), n * 8);
        out.set_len(out.len() + n);
    }
}

/// [`decode`]; with a sink and a file of one permutation, the pair times go to
/// the sink as each rank is decoded and the run's matrices stay empty (same
/// checks, same errors in the same order).
pub(crate) fn decode_with(set: &SionSet, mut sink: Option<RankSink<'_>>) -> Result<LinkTestRun> {
    let n = set.ntasks();
    let order = payload_order(set);
    let s0 = set
        .task(0)
        .ok_or_else(|| FormatError::malformed(set.path(), "rank 0", Position::None, "missing"))?;
    let b0 = s0.contiguous();
    let mut c = Cursor::new(&b0, order, &s0);
    c.take(ID.len(), "ID")?;
    let version = [
        c.u32("major version")?,
        c.u32("minor version")?,
        c.u32("patch level")?,
    ];
    if version[0] != 2 {
        return Err(c.err_at(8, "major version", format!("{} (expected 2)", version[0])));
    }
    if version[1..] != [1, 17] {
        tracing::debug!(
            ?version,
            "LinkTest 2.x file other than 2.1.17; decoding with the 2.1.17 layout"
        );
    }
    let git_hash = c.cstr(GIT_HASH_LEN, "git hash")?;
    let mode_len = c.u32("mode length")? as usize;
    let mode = c.cstr(mode_len, "mode")?;
    let mut fl = [0u8; 13];
    for (i, f) in fl.iter_mut().enumerate() {
        *f = c.u8(FLAG_NAMES.get(i).copied().unwrap_or("flag"))?;
    }
    let flags = Flags {
        all_to_all: fl[0] != 0,
        bidirectional: fl[1] != 0,
        unidirectional: fl[2] != 0,
        bisection: fl[3] != 0,
        randomize_steps: fl[4] != 0,
        serial: fl[5] != 0,
        no_sion_file: fl[6] != 0,
        parallel_sion: fl[7] != 0,
        gpu_memory: fl[8] != 0,
        multi_buffer: fl[9] != 0,
        randomize_buffers: fl[10] != 0,
        check_buffers: fl[11] != 0,
        mix_ranks: false,
    };
    let memory_allocator = fl[12];
    let num_messages = c.u64("number of messages")?;
    let message_size = c.u64("message size")?;
    let num_warmup = c.u64("warm-up messages")?;
    let retests_pos = c.pos();
    let retests = c.u64("serial retests")?;
    let num_multi_buffers = c.u64("multiple buffers")?;
    let buffer_seed = c.u64("buffer randomization seed")?;
    let randomized_pos = c.pos();
    let num_randomized = c.u64("randomized tasks")?;
    let task_seed = c.u64("task randomization seed")?;
    let end_pos = c.pos();
    if c.take(END_HEADER.len(), "END_HEADER")? != END_HEADER {
        return Err(c.err_at(end_pos, "END_HEADER", "end-of-header marker missing"));
    }
    let header_len = c.pos();

    let f = if flags.all_to_all { 8usize } else { 0 };
    let pairs = n.saturating_sub(1);
    let per_perm = pairs.checked_mul(16).and_then(|v| v.checked_add(f));
    // Rank 0's per-permutation block: 32 + 24 + 3f + 32 d + 32.
    let rank0_extra = usize::try_from(retests)
        .ok()
        .and_then(|d| d.checked_mul(32))
        .and_then(|v| v.checked_add(88 + 3 * f));
    let (Some(per_perm), Some(rank0_extra)) = (per_perm, rank0_extra) else {
        return Err(FormatError::malformed(
            s0.path,
            "rank 0: serial retests",
            Position::Offset(s0.file_offset(retests_pos as u64)),
            format!("{retests} retests cannot fit in the file"),
        ));
    };
    let per_perm0 = per_perm + rank0_extra;
    // Rank 0 stream: header, hostname length + hostname + core id, M blocks, END_BLOCK.
    let host0_len = {
        let mut c = Cursor::new(&b0, order, &s0);
        c.take(header_len, "header")?;
        c.u32("hostname length")? as usize
    };
    let fixed0 = header_len
        .checked_add(8)
        .and_then(|v| v.checked_add(host0_len))
        .and_then(|v| v.checked_add(END_BLOCK.len()));
    let m = match fixed0 {
        Some(fx) if b0.len() >= fx && (b0.len() - fx) % per_perm0 == 0 => {
            (b0.len() - fx) / per_perm0
        }
        _ => {
            return Err(FormatError::malformed(
                s0.path,
                "rank 0: data chunk",
                Position::Offset(s0.file_offset(header_len as u64)),
                format!(
                    "{} bytes is not the header plus a whole number of {per_perm0}-byte permutations for {n} ranks",
                    b0.len()
                ),
            ));
        }
    };
    let allowed = [num_randomized.max(1), num_randomized.saturating_add(1)];
    if !allowed.contains(&(m as u64)) {
        return Err(FormatError::malformed(
            s0.path,
            "rank 0: randomized tasks",
            Position::Offset(s0.file_offset(randomized_pos as u64)),
            format!(
                "the data holds {m} permutations, the header's {num_randomized} randomized tasks allow {} or {}",
                allowed[0], allowed[1]
            ),
        ));
    }
    // Check every rank's stream length before allocating n·n per permutation:
    // each pair then costs ≥ 16 bytes of input, so the matrices are bounded by
    // the file size.
    let min_other = per_perm
        .saturating_mul(m)
        .saturating_add(8 + END_BLOCK.len());
    for k in 1..n {
        let Some(t) = set.task(k) else { continue };
        if (t.len() as usize) < min_other {
            return Err(FormatError::malformed(
                t.path,
                format!("rank {k}: data chunk"),
                Position::Offset(t.file_offset(0)),
                format!(
                    "{} bytes, {m} permutations of {n} ranks need at least {min_other}",
                    t.len()
                ),
            ));
        }
    }
    if m != 1 {
        sink = None;
    }
    // A sink needs every rank's hostname before the pairs (the node of each
    // partner): read them ahead, from the start of each rank's stream.
    let hosts: Vec<String> = if sink.is_some() {
        (0..n)
            .map(|r| rank_hostname_ahead(set, r, order, header_len).unwrap_or_default())
            .collect()
    } else {
        Vec::new()
    };
    let mut perms: Vec<Permutation> = Vec::with_capacity(m);
    let mut ranks = Vec::with_capacity(n);
    let (mut slot_t, mut slot_s) = if sink.is_some() {
        (Vec::new(), Vec::new())
    } else {
        (vec![0f64; pairs], vec![0i32; pairs])
    };
    for r in 0..n {
        let stream = set.task(r).ok_or_else(|| {
            FormatError::malformed(set.path(), format!("rank {r}"), Position::None, "missing")
        })?;
        let bytes = stream.contiguous();
        let mut c = Cursor::new(&bytes, order, &stream);
        if r == 0 {
            c.take(header_len, "header")?;
        }
        let hlen = c.u32("hostname length")? as usize;
        let hostname = c.cstr(hlen, "hostname")?;
        let core_id = c.i32("core id")?;
        let want = (if r == 0 { per_perm0 } else { per_perm })
            .checked_mul(m)
            .and_then(|v| v.checked_add(END_BLOCK.len()));
        if want != Some(c.remaining()) {
            return Err(c.err_at(
                c.pos(),
                "data chunk",
                format!(
                    "{} bytes left for {m} permutations of {n} ranks, expected {}",
                    c.remaining(),
                    want.map(|w| w.to_string())
                        .unwrap_or_else(|| "too many".into())
                ),
            ));
        }
        if r == 0 {
            for _ in 0..m {
                perms.push(Permutation {
                    start_time: None,
                    end_time: None,
                    min_time_s: 0.0,
                    avg_time_s: 0.0,
                    max_time_s: 0.0,
                    a2a: None,
                    times: if sink.is_some() {
                        Vec::new()
                    } else {
                        vec![0f64; n * n]
                    },
                    steps: if sink.is_some() {
                        Vec::new()
                    } else {
                        vec![0i32; n * n]
                    },
                    alltoall: Vec::with_capacity(if flags.all_to_all { n } else { 0 }),
                    slow_links: Vec::new(),
                });
            }
        }
        for p in perms.iter_mut() {
            if r == 0 {
                read_rank0_block(&mut c, p, retests as usize, flags.all_to_all, n)?;
            }
            let times = if sink.is_some() {
                c.take(pairs * 8, "timings")?
            } else {
                c.f64s(&mut slot_t, "timings")?;
                &[]
            };
            let steps_pos = c.pos();
            let raw = c.take(pairs * 8, "access pattern")?;
            let step_error = |k: usize| {
                let mut a = [0u8; 8];
                a.copy_from_slice(raw.get(k * 8..k * 8 + 8).unwrap_or(&[0; 8]));
                let s = match order {
                    ByteOrder::Little => u64::from_le_bytes(a),
                    ByteOrder::Big => u64::from_be_bytes(a),
                };
                c.err_at(
                    steps_pos + 8 * k,
                    "access pattern",
                    format!("step {s} exceeds i32"),
                )
            };
            match sink.as_mut() {
                Some(f) => f(
                    r,
                    &RankSlots {
                        times,
                        steps: raw,
                        order,
                        step_error: &step_error,
                        hosts: &hosts,
                    },
                )?,
                None => {
                    if let Err(k) = steps_into(raw, order, &mut slot_s) {
                        return Err(step_error(k));
                    }
                    // Slots before the diagonal, then after it.
                    let row = r * n;
                    if let (Some(tt), Some(ss)) =
                        (p.times.get_mut(row..row + n), p.steps.get_mut(row..row + n))
                    {
                        tt[..r].copy_from_slice(&slot_t[..r]);
                        tt[r + 1..].copy_from_slice(&slot_t[r..]);
                        ss[..r].copy_from_slice(&slot_s[..r]);
                        ss[r + 1..].copy_from_slice(&slot_s[r..]);
                    }
                }
            }
            if flags.all_to_all {
                let t = c.f64("all-to-all time")?;
                p.alltoall.push(AllToAllTime {
                    rank: r,
                    step: None,
                    time_s: t,
                });
            }
        }
        let end = c.pos();
        if c.take(END_BLOCK.len(), "END_BLOCK")? != END_BLOCK {
            return Err(c.err_at(end, "END_BLOCK", "end-of-chunk marker missing"));
        }
        c.finish("data chunk")?;
        // A sink reads each rank once: let the file's pages go every 64 ranks.
        if sink.is_some() && (r % 64 == 63 || r + 1 == n) {
            set.release(r - r % 64..r + 1);
        }
        ranks.push(RankInfo {
            rank: r,
            hostname,
            core_id: Some(core_id),
            coords: None,
        });
    }
    Ok(LinkTestRun {
        format: PayloadFormat::V2,
        version,
        git_hash: non_empty(git_hash),
        mode,
        num_tasks: n,
        num_messages,
        message_size,
        num_warmup_messages: Some(num_warmup),
        num_serial_retests: retests,
        num_multi_buffers: Some(num_multi_buffers),
        buffer_seed: Some(buffer_seed),
        num_randomized_tasks: Some(num_randomized),
        task_seed: Some(task_seed),
        memory_allocator: Some(memory_allocator),
        flags,
        v1_stats: None,
        ranks,
        permutations: perms,
    })
}

/// Rank `r`'s hostname as the decode reads it (after the header for rank
/// 0), from the first block of its stream when that holds it; `None` when
/// it cannot be read (the decode reports why).
fn rank_hostname_ahead(
    set: &SionSet,
    r: usize,
    order: ByteOrder,
    header_len: usize,
) -> Option<String> {
    let stream = set.task(r)?;
    let read = |bytes: &[u8]| -> Option<String> {
        let mut c = Cursor::new(bytes, order, &stream);
        if r == 0 {
            c.take(header_len, "header").ok()?;
        }
        let hlen = c.u32("hostname length").ok()? as usize;
        c.cstr(hlen, "hostname").ok()
    };
    match stream.blocks.first().and_then(|b| read(b.data)) {
        Some(h) => Some(h),
        None => read(&stream.contiguous()),
    }
}

/// The first slot whose step does not fit i32 (0 when all do).
fn first_step_over(raw: &[u8], order: ByteOrder) -> usize {
    raw.chunks_exact(8)
        .position(|c| {
            let a: [u8; 8] = c.try_into().unwrap_or_default();
            let v = match order {
                ByteOrder::Little => u64::from_le_bytes(a),
                ByteOrder::Big => u64::from_be_bytes(a),
            };
            i32::try_from(v).is_err()
        })
        .unwrap_or(0)
}

/// The access pattern (u64 steps) as i32 into `out`; `Err(k)` for the first
/// slot whose step does not fit.
fn steps_into(raw: &[u8], order: ByteOrder, out: &mut [i32]) -> std::result::Result<(), usize> {
    let mut big = 0u64;
    for (o, c) in out.iter_mut().zip(raw.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        let v = match order {
            ByteOrder::Little => u64::from_le_bytes(a),
            ByteOrder::Big => u64::from_be_bytes(a),
        };
        // Branch-free: remember any high bits, check once at the end.
        big |= v >> 31;
        *o = v as i32;
    }
    if big == 0 {
        return Ok(());
    }
    Err(first_step_over(raw, order))
}

/// Empty strings (all-NUL fields) are "not recorded".
fn non_empty(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

const FLAG_NAMES: [&str; 13] = [
    "all-to-all flag",
    "bidirectional flag",
    "unidirectional flag",
    "bisection flag",
    "step-randomization flag",
    "serial flag",
    "no-SION-file flag",
    "parallel-SION flag",
    "GPU-memory flag",
    "multi-buffer flag",
    "randomized-buffer flag",
    "check-buffer flag",
    "memory allocator type",
];

fn read_rank0_block(
    c: &mut Cursor<'_, '_>,
    p: &mut Permutation,
    d: usize,
    a2a: bool,
    n: usize,
) -> Result<()> {
    p.start_time = non_empty(c.cstr(TIME_LEN, "start time")?);
    p.min_time_s = c.f64("minimum time")?;
    p.avg_time_s = c.f64("average time")?;
    p.max_time_s = c.f64("maximum time")?;
    if a2a {
        p.a2a = Some([
            c.f64("all-to-all minimum")?,
            c.f64("all-to-all average")?,
            c.f64("all-to-all maximum")?,
        ]);
    }
    // d was checked against the stream length before we got here.
    let mut retested = vec![0f64; d];
    let mut slowest = vec![0f64; d];
    c.f64s(&mut retested, "retested slow timings")?;
    c.f64s(&mut slowest, "slowest timings")?;
    let send_pos = c.pos();
    let mut send = Vec::with_capacity(d);
    for _ in 0..d {
        send.push(c.u64("slow sending partners")?);
    }
    let recv_pos = c.pos();
    let mut recv = Vec::with_capacity(d);
    for _ in 0..d {
        recv.push(c.u64("slow receiving partners")?);
    }
    p.slow_links.clear();
    for k in 0..d {
        let (f, t) = (send[k], recv[k]);
        if f == t {
            continue;
        }
        let fr = usize::try_from(f).ok().filter(|v| *v < n).ok_or_else(|| {
            c.err_at(
                send_pos + 8 * k,
                "slow sending partners",
                format!("rank {f} outside 0..{n}"),
            )
        })?;
        let tr = usize::try_from(t).ok().filter(|v| *v < n).ok_or_else(|| {
            c.err_at(
                recv_pos + 8 * k,
                "slow receiving partners",
                format!("rank {t} outside 0..{n}"),
            )
        })?;
        p.slow_links.push(SlowLink {
            from_rank: fr,
            to_rank: tr,
            time_s: slowest[k],
            retest_time_s: Some(retested[k]),
        });
    }
    p.end_time = non_empty(c.cstr(TIME_LEN, "end time")?);
    Ok(())
}

/// Serializes a run as 2.1.17 per-rank streams (global rank order), in the
/// given byte order. Errors when the run cannot be represented.
pub fn encode_streams(run: &LinkTestRun, order: ByteOrder) -> Result<Vec<Vec<u8>>> {
    let n = run.num_tasks;
    let bad = |field: &str, msg: String| {
        FormatError::malformed("<linktest writer>", field, Position::None, msg)
    };
    if n == 0 || run.ranks.len() != n {
        return Err(bad(
            "ranks",
            format!("{} rank entries for {n} tasks", run.ranks.len()),
        ));
    }
    if run.permutations.is_empty() {
        return Err(bad(
            "permutations",
            "at least one permutation is needed".into(),
        ));
    }
    let d = usize::try_from(run.num_serial_retests)
        .map_err(|_| bad("num_serial_retests", "too large".into()))?;
    let git = run.git_hash.clone().unwrap_or_default();
    if git.len() >= GIT_HASH_LEN {
        return Err(bad(
            "git_hash",
            format!("{} bytes, at most 40 fit", git.len()),
        ));
    }
    for p in &run.permutations {
        if p.times.len() != n * n || p.steps.len() != n * n {
            return Err(bad("permutation", "times/steps must be n × n".into()));
        }
        if p.slow_links.len() > d {
            return Err(bad(
                "slow_links",
                format!("{} entries, num_serial_retests is {d}", p.slow_links.len()),
            ));
        }
        if run.flags.all_to_all && p.alltoall.len() != n {
            return Err(bad(
                "alltoall",
                "2.x stores one all-to-all time per rank".into(),
            ));
        }
        for t in [&p.start_time, &p.end_time].into_iter().flatten() {
            if t.len() >= TIME_LEN {
                return Err(bad("start/end time", format!("{t:?} longer than 31 bytes")));
            }
        }
    }
    let mut w = W {
        buf: Vec::new(),
        order,
    };
    let mut out = Vec::with_capacity(n);
    let f = if run.flags.all_to_all { 8 } else { 0 };
    for r in 0..n {
        let hostname = run
            .ranks
            .get(r)
            .map(|x| x.hostname.as_str())
            .unwrap_or_default();
        let mut cap = 17 + hostname.len() + run.permutations.len() * (16 * n + f);
        if r == 0 {
            cap += 160 + run.mode.len() + run.permutations.len() * (88 + 3 * f + 32 * d);
        }
        w.buf = Vec::with_capacity(cap);
        if r == 0 {
            write_header(&mut w, run, &git);
        }
        w.u32(hostname.len() as u32 + 1);
        w.cstr(hostname, hostname.len() + 1);
        w.i32(run.ranks.get(r).and_then(|x| x.core_id).unwrap_or(-1));
        for p in &run.permutations {
            if r == 0 {
                w.cstr(p.start_time.as_deref().unwrap_or_default(), TIME_LEN);
                w.f64(p.min_time_s);
                w.f64(p.avg_time_s);
                w.f64(p.max_time_s);
                if run.flags.all_to_all {
                    let [a, b, c] = p.a2a.unwrap_or_default();
                    w.f64(a);
                    w.f64(b);
                    w.f64(c);
                }
                let pad = d - p.slow_links.len();
                for s in &p.slow_links {
                    w.f64(s.retest_time_s.unwrap_or(0.0));
                }
                w.zeros(8 * pad);
                for s in &p.slow_links {
                    w.f64(s.time_s);
                }
                w.zeros(8 * pad);
                for s in &p.slow_links {
                    w.u64(s.from_rank as u64);
                }
                w.zeros(8 * pad);
                for s in &p.slow_links {
                    w.u64(s.to_rank as u64);
                }
                w.zeros(8 * pad);
                w.cstr(p.end_time.as_deref().unwrap_or_default(), TIME_LEN);
            }
            let row = r * n..(r + 1) * n;
            let times = p.times.get(row.clone()).unwrap_or_default();
            let steps = p.steps.get(row).unwrap_or_default();
            for (j, t) in times.iter().enumerate() {
                if j != r {
                    w.f64(*t);
                }
            }
            for (j, s) in steps.iter().enumerate() {
                if j != r {
                    w.u64(
                        u64::try_from(*s)
                            .map_err(|_| bad("steps", format!("negative step {s}")))?,
                    );
                }
            }
            if run.flags.all_to_all {
                let t = p
                    .alltoall
                    .iter()
                    .find(|a| a.rank == r)
                    .map(|a| a.time_s)
                    .unwrap_or(0.0);
                w.f64(t);
            }
        }
        w.bytes(END_BLOCK);
        out.push(std::mem::take(&mut w.buf));
    }
    Ok(out)
}

fn write_header(w: &mut W, run: &LinkTestRun, git: &str) {
    w.bytes(ID);
    for v in run.version {
        w.u32(v);
    }
    w.cstr(git, GIT_HASH_LEN);
    w.u32(run.mode.len() as u32 + 1);
    w.cstr(&run.mode, run.mode.len() + 1);
    let fl = &run.flags;
    for b in [
        fl.all_to_all,
        fl.bidirectional,
        fl.unidirectional,
        fl.bisection,
        fl.randomize_steps,
        fl.serial,
        fl.no_sion_file,
        fl.parallel_sion,
        fl.gpu_memory,
        fl.multi_buffer,
        fl.randomize_buffers,
        fl.check_buffers,
    ] {
        w.bytes(&[u8::from(b)]);
    }
    w.bytes(&[run.memory_allocator.unwrap_or(0)]);
    for v in [
        run.num_messages,
        run.message_size,
        run.num_warmup_messages.unwrap_or(0),
        run.num_serial_retests,
        run.num_multi_buffers.unwrap_or(0),
        run.buffer_seed.unwrap_or(0),
        run.num_randomized_tasks.unwrap_or(0),
        run.task_seed.unwrap_or(0),
    ] {
        w.u64(v);
    }
    w.bytes(END_HEADER);
}

struct W {
    buf: Vec<u8>,
    order: ByteOrder,
}

impl W {
    fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    fn zeros(&mut self, n: usize) {
        self.buf.resize(self.buf.len() + n, 0);
    }
    fn cstr(&mut self, s: &str, width: usize) {
        let b = s.as_bytes();
        let k = b.len().min(width.saturating_sub(1));
        self.buf.extend_from_slice(b.get(..k).unwrap_or_default());
        self.zeros(width - k);
    }
    fn u32(&mut self, v: u32) {
        match self.order {
            ByteOrder::Little => self.bytes(&v.to_le_bytes()),
            ByteOrder::Big => self.bytes(&v.to_be_bytes()),
        }
    }
    fn i32(&mut self, v: i32) {
        self.u32(v as u32);
    }
    fn u64(&mut self, v: u64) {
        match self.order {
            ByteOrder::Little => self.bytes(&v.to_le_bytes()),
            ByteOrder::Big => self.bytes(&v.to_be_bytes()),
        }
    }
    fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }
}

/// Encodes a run as a 2.1.17 SION file set in memory (one buffer per physical file).
pub fn encode_file(
    run: &LinkTestRun,
    name: &Path,
    opts: &SionWriteOptions,
) -> Result<Vec<Vec<u8>>> {
    let streams = encode_streams(run, opts.byte_order)?;
    let tasks: Vec<TaskData<'_>> = streams.iter().map(|s| TaskData::single(s)).collect();
    encode_sion_set(name, &tasks, opts)
}

/// Writes a run as a 2.1.17 SION file set at `path` (`path.000001`, … when
/// `opts.nfiles > 1`).
pub fn write_file(run: &LinkTestRun, path: &Path, opts: &SionWriteOptions) -> Result<()> {
    let files = encode_file(run, path, opts)?;
    for (k, data) in files.iter().enumerate() {
        let p = crate::sion::read::multi_file_name(path, k as u32);
        std::fs::write(&p, data).map_err(|e| FormatError::io(&p, e))?;
    }
    Ok(())
}
