//! LinkTest 1.x payload ("LKTST"), as written by LinkTest 1.2p1
//! (`linktest_output_sion_collect_local_data`).
//!
//! Each rank's stream: `"LKTST"`, i32 version[3], 256-byte hostname, i32
//! mapping[4]; rank 0 then has i32 statdata[10] and f64 stat[10]; every rank has
//! f64 timings[N] (self = 0), i32 accesspattern[N] (step, self = 0) and, with
//! all-to-all, f64 alltoall[N] indexed by step; rank 0 ends with the retest
//! arrays f64 new[N], f64 old[N], i32 from[N], i32 to[N].
use super::{
    AllToAllTime, Cursor, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink,
    V1Stats, payload_order,
};
use crate::error::{FormatError, Position, Result};
use crate::sion::SionSet;

/// The ID at the start of every 1.x rank stream.
pub const ID: &[u8] = b"LKTST";
/// Bytes of the hostname field.
pub const LOCATION_LEN: usize = 256;

/// The longest time of one message exchange accepted (s): an hour.
pub const MAX_MESSAGE_TIME_S: f64 = 3600.0;
/// The highest bandwidth of one link accepted (bytes/s): 10^12, more than
/// ten 800 Gb/s adapters; a time shorter than the message size over it is
/// not a measurement.
pub const MAX_LINK_BYTES_PER_S: f64 = 1e12;

/// Whether `t` can be the time of one exchange of `size` bytes.
fn plausible(t: f64, size: f64) -> bool {
    t.is_finite() && t > 0.0 && t <= MAX_MESSAGE_TIME_S && t >= size / MAX_LINK_BYTES_PER_S
}

/// Decodes a 1.x file. Besides the layout, the values must be those of a
/// run: every pair's time a plausible exchange time (the diagonal 0), each
/// rank's access pattern a permutation of the steps, the same LinkTest
/// version on every rank, the statistics of rank 0 those of the pair times,
/// and each retest's old time the pair's time.
pub fn decode(set: &SionSet) -> Result<LinkTestRun> {
    let n = set.ntasks();
    let order = payload_order(set);
    let mut ranks = Vec::with_capacity(n);
    // Every stream holds ≥ 12 N bytes of this matrix, so `n * n` is bounded by
    // the files' size before it is allocated (checked on rank 0 first).
    let mut times = Vec::new();
    let mut steps = Vec::new();
    let mut alltoall = Vec::new();
    let mut slow_links = Vec::new();
    let mut stats = None;
    let mut version = [0u32; 3];
    // Errors to give if a check made after every rank is read fails:
    // (statistic index, its error) and (retest, its error).
    let mut stat_errs: Vec<(usize, FormatError)> = Vec::new();
    let mut retest_errs: Vec<(usize, usize, f64, FormatError)> = Vec::new();
    for r in 0..n {
        let stream = set.task(r).ok_or_else(|| {
            FormatError::malformed(set.path(), format!("rank {r}"), Position::None, "missing")
        })?;
        let bytes = stream.contiguous();
        let mut c = Cursor::new(&bytes, order, &stream);
        let id = c.take(5, "ID")?;
        if id != ID {
            return Err(c.err_at(0, "ID", format!("expected \"LKTST\", found {id:02x?}")));
        }
        let mut v = [0i32; 3];
        c.i32s(&mut v, "version")?;
        let vv = v.map(|x| x.max(0) as u32);
        if r > 0 && vv != version {
            return Err(c.err_at(5, "version", format!("{vv:?}, rank 0 has {version:?}")));
        }
        if r == 0 {
            if v[0] != 1 {
                return Err(c.err_at(
                    5,
                    "version",
                    format!(
                        "LKTST payload of LinkTest {}.{}.{}: only 1.x uses this layout (2.x before 2.1.17 is not supported)",
                        v[0], v[1], v[2]
                    ),
                ));
            }
            version = vv;
        }
        let hostname = c.cstr(LOCATION_LEN, "location")?;
        let mut coords = [0i32; 4];
        c.i32s(&mut coords, "mapping")?;
        if r == 0 {
            let mut statdata = [0i32; 10];
            c.i32s(&mut statdata, "statdata")?;
            let mut stat = [0f64; 10];
            let stat_pos = c.pos();
            c.f64s(&mut stat, "stat")?;
            for (k, name) in ["min_time", "max_time", "avg_time"].iter().enumerate() {
                stat_errs.push((
                    k,
                    c.err_at(
                        stat_pos + 8 * k,
                        name,
                        format!("{}: not the {name} of the pair times", stat[k]),
                    ),
                ));
            }
            stats = Some(V1Stats { statdata, stat });
            let per_rank = if statdata[2] != 0 { 20 } else { 12 };
            let need = n.saturating_mul(per_rank);
            if need > c.remaining() {
                return Err(c.err_at(
                    c.pos(),
                    "timings",
                    format!(
                        "{n} ranks need {need} bytes of timings, the rank's data has {} left",
                        c.remaining()
                    ),
                ));
            }
            // Every other rank must hold its share too before n·n is allocated,
            // or a file claiming huge N with short streams could exhaust memory.
            let min_other = 289usize.saturating_add(n.saturating_mul(per_rank));
            for k in 1..n {
                let Some(t) = set.task(k) else { continue };
                if (t.len() as usize) < min_other {
                    return Err(FormatError::malformed(
                        t.path,
                        format!("rank {k}: payload"),
                        Position::Offset(t.file_offset(0)),
                        format!("{} bytes, {n} ranks need at least {min_other}", t.len()),
                    ));
                }
            }
            if statdata[0] < 1 || statdata[1] < 0 {
                return Err(c.err_at(
                    stat_pos.saturating_sub(40),
                    "statdata",
                    format!("{} messages of {} bytes", statdata[0], statdata[1]),
                ));
            }
            times = vec![0f64; n * n];
            steps = vec![0i32; n * n];
        }
        let alltoall_on = stats.is_some_and(|s| s.statdata[2] != 0);
        let row = r * n..(r + 1) * n;
        let trow = times
            .get_mut(row.clone())
            .ok_or_else(|| c.err_at(0, "timings", "no row"))?;
        let tpos = c.pos();
        c.f64s(trow, "timings")?;
        let size = stats.map_or(0, |s| s.statdata[1].max(0)) as f64;
        for (k, t) in trow.iter().enumerate() {
            let ok = if k == r {
                *t == 0.0
            } else {
                plausible(*t, size)
            };
            if !ok {
                return Err(c.err_at(
                    tpos + 8 * k,
                    "timings",
                    format!(
                        "{t} s to rank {k}: not a time of one exchange of {size} bytes \
                         (0 to itself, else within {size}/{MAX_LINK_BYTES_PER_S} B/s..{MAX_MESSAGE_TIME_S} s)"
                    ),
                ));
            }
        }
        let srow = steps
            .get_mut(row)
            .ok_or_else(|| c.err_at(0, "accesspattern", "no row"))?;
        let spos = c.pos();
        c.i32s(srow, "accesspattern")?;
        // Step 0 is the rank itself; the others take steps 1..n-1, each once.
        let mut seen = vec![false; n];
        for (k, st) in srow.iter().enumerate() {
            let fresh = usize::try_from(*st)
                .ok()
                .and_then(|s| seen.get_mut(s))
                .is_some_and(|x| !std::mem::replace(x, true));
            if !fresh || (*st == 0) != (k == r) {
                return Err(c.err_at(
                    spos + 4 * k,
                    "accesspattern",
                    format!("step {st} for rank {k}: not a permutation of the steps 0..{n}"),
                ));
            }
        }
        if alltoall_on {
            let mut a = vec![0f64; n];
            c.f64s(&mut a, "alltoall timings")?;
            // Index = step (atimings[step]); steps run 1..N, index 0 is unused.
            for (s, t) in a.iter().enumerate().skip(1) {
                alltoall.push(AllToAllTime {
                    rank: r,
                    step: Some(s as i32),
                    time_s: *t,
                });
            }
        }
        if r == 0 {
            let mut new = vec![0f64; n];
            let mut old = vec![0f64; n];
            let mut from = vec![0i32; n];
            let mut to = vec![0i32; n];
            let new_pos = c.pos();
            c.f64s(&mut new, "stimings_new")?;
            let old_pos = c.pos();
            c.f64s(&mut old, "stimings_old")?;
            let from_pos = c.pos();
            c.i32s(&mut from, "sfrom")?;
            let to_pos = c.pos();
            c.i32s(&mut to, "sto")?;
            for k in 0..n {
                let (f, t) = (from[k], to[k]);
                // Only the first `-Z` entries are used; the rest are all zero.
                // A used entry always names two different ranks.
                if f == t {
                    continue;
                }
                let fr = usize::try_from(f).ok().filter(|f| *f < n).ok_or_else(|| {
                    c.err_at(
                        from_pos + 4 * k,
                        "sfrom",
                        format!("rank {f} outside 0..{n}"),
                    )
                })?;
                let tr = usize::try_from(t).ok().filter(|t| *t < n).ok_or_else(|| {
                    c.err_at(to_pos + 4 * k, "sto", format!("rank {t} outside 0..{n}"))
                })?;
                let size = stats.map_or(0, |s| s.statdata[1].max(0)) as f64;
                if !plausible(new[k], size) {
                    return Err(c.err_at(
                        new_pos + 8 * k,
                        "stimings_new",
                        format!("{} s: not a time of one exchange", new[k]),
                    ));
                }
                retest_errs.push((
                    fr,
                    tr,
                    old[k],
                    c.err_at(
                        old_pos + 8 * k,
                        "stimings_old",
                        format!("{} s: not the time of the pair {fr} → {tr}", old[k]),
                    ),
                ));
                slow_links.push(SlowLink {
                    from_rank: fr,
                    to_rank: tr,
                    time_s: old[k],
                    retest_time_s: Some(new[k]),
                });
            }
        }
        c.finish("payload")?;
        ranks.push(RankInfo {
            rank: r,
            hostname,
            core_id: None,
            coords: Some(coords),
        });
    }
    // The statistics and the retests' old times repeat the pair times.
    let pairs: Vec<f64> = times
        .chunks(n.max(1))
        .enumerate()
        .flat_map(|(r, row)| {
            row.iter()
                .enumerate()
                .filter(move |(k, _)| *k != r)
                .map(|(_, t)| *t)
        })
        .collect();
    if let Some(st) = &stats
        && !pairs.is_empty()
    {
        let want = [
            pairs.iter().copied().fold(f64::INFINITY, f64::min),
            pairs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            pairs.iter().sum::<f64>() / pairs.len() as f64,
        ];
        for (k, e) in stat_errs {
            let (have, w) = (st.stat[k], want[k]);
            let off = (have - w).abs();
            if off.is_nan() || off > 1e-9 * w.abs() {
                return Err(e);
            }
        }
    }
    for (f, t, old, e) in retest_errs {
        if times.get(f * n + t).copied() != Some(old) {
            return Err(e);
        }
    }
    let st = stats.unwrap_or(V1Stats {
        statdata: [0; 10],
        stat: [0.0; 10],
    });
    let sd = st.statdata;
    let flags = Flags {
        all_to_all: sd[2] != 0,
        serial: sd[4] != 0,
        mix_ranks: sd[5] != 0,
        ..Flags::default()
    };
    let a2a = flags
        .all_to_all
        .then_some([st.stat[3], st.stat[5], st.stat[4]]);
    Ok(LinkTestRun {
        format: PayloadFormat::V1,
        version,
        git_hash: None,
        mode: "MPI".into(),
        num_tasks: n,
        num_messages: sd[0].max(0) as u64,
        message_size: sd[1].max(0) as u64,
        num_warmup_messages: None,
        num_serial_retests: slow_links.len() as u64,
        num_multi_buffers: None,
        buffer_seed: None,
        num_randomized_tasks: Some(u64::from(flags.mix_ranks)),
        task_seed: None,
        memory_allocator: None,
        flags,
        v1_stats: Some(st),
        ranks,
        permutations: vec![Permutation {
            start_time: None,
            end_time: None,
            min_time_s: st.stat[0],
            avg_time_s: st.stat[2],
            max_time_s: st.stat[1],
            a2a,
            times,
            steps,
            alltoall,
            slow_links,
        }],
    })
}
