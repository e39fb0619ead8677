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

/// Decodes a 1.x file.
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
            c.f64s(&mut stat, "stat")?;
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
            times = vec![0f64; n * n];
            steps = vec![0i32; n * n];
        }
        let alltoall_on = stats.is_some_and(|s| s.statdata[2] != 0);
        let row = r * n..(r + 1) * n;
        let trow = times
            .get_mut(row.clone())
            .ok_or_else(|| c.err_at(0, "timings", "no row"))?;
        c.f64s(trow, "timings")?;
        let srow = steps
            .get_mut(row)
            .ok_or_else(|| c.err_at(0, "accesspattern", "no row"))?;
        c.i32s(srow, "accesspattern")?;
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
            c.f64s(&mut new, "stimings_new")?;
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
