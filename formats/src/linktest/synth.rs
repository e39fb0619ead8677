//! The one generator of synthetic LinkTest runs: `benchlake probe linktest`
//! writes it as a LinkTest 2.1.17 file (so anyone can test a pipeline at scale),
//! the ingest bench measures it, and the report's tests and example render it
//! at scales the real files in `shared/data` do not reach (at most 16 ranks).
//!
//! Times are 2–12 µs per message (LinkTest-like, rounded to `f32` as LinkTest
//! stores them), ranks are placed on hosts in blocks of `ranks_per_host`, and
//! a few defects are planted so the page has something to show: every link of
//! the host `slow_host` (the second host, when there are two or more) is 4×
//! slower, and the pair `1 → n−1` is the slowest of the run, with a retest.
use super::{AllToAllTime, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink};

/// Time of the planted slowest pair (s).
pub const SLOWEST_PAIR_S: f64 = 3.1744451958333334e-4;

/// Hostname of rank `r`.
pub fn hostname(r: usize, ranks_per_host: usize) -> String {
    format!("node{:04}", r / ranks_per_host.max(1))
}

/// A run of `ranks` ranks, `ranks_per_host` per host (at least 2 ranks).
pub fn synthetic_run(ranks: usize, ranks_per_host: usize, seed: u64) -> LinkTestRun {
    let n = ranks.max(2);
    let rph = ranks_per_host.max(1);
    let slow_host = 1usize;
    let mut times = vec![0f64; n * n];
    let mut steps = vec![0i32; n * n];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let (mut sum, mut cnt, mut lo, mut hi) = (0f64, 0usize, f64::INFINITY, 0f64);
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut t = 2e-6 + (x % 10_000) as f64 * 1e-9;
            if i / rph == slow_host || j / rph == slow_host {
                t *= 4.0;
            }
            if (i, j) == (1, n - 1) {
                t = SLOWEST_PAIR_S;
            }
            let t = f64::from(t as f32);
            times[i * n + j] = t;
            steps[i * n + j] = ((i + j) % (n - 1) + 1) as i32;
            sum += t;
            cnt += 1;
            lo = lo.min(t);
            hi = hi.max(t);
        }
    }
    let slowest = times[n + n - 1];
    LinkTestRun {
        format: PayloadFormat::V2,
        version: [2, 1, 17],
        git_hash: None,
        mode: "MPI".into(),
        num_tasks: n,
        num_messages: 10,
        message_size: 1 << 20,
        num_warmup_messages: Some(2),
        num_serial_retests: 1,
        num_multi_buffers: Some(1),
        buffer_seed: Some(0),
        num_randomized_tasks: Some(0),
        task_seed: Some(seed),
        memory_allocator: Some(0),
        flags: Flags {
            all_to_all: true,
            parallel_sion: true,
            ..Flags::default()
        },
        v1_stats: None,
        ranks: (0..n)
            .map(|r| RankInfo {
                rank: r,
                hostname: hostname(r, rph),
                core_id: Some((r % rph) as i32),
                coords: None,
            })
            .collect(),
        permutations: vec![Permutation {
            start_time: Some("2026-11-23 07:00:00".into()),
            end_time: Some("2026-11-23 07:10:00".into()),
            min_time_s: lo,
            avg_time_s: sum / cnt.max(1) as f64,
            max_time_s: hi,
            a2a: Some([1e-3, 2e-3, 3e-3]),
            times,
            steps,
            alltoall: (0..n)
                .map(|r| AllToAllTime {
                    rank: r,
                    step: None,
                    time_s: 2e-3,
                })
                .collect(),
            slow_links: vec![SlowLink {
                from_rank: 1,
                to_rank: n - 1,
                time_s: slowest,
                retest_time_s: Some(4.2e-6),
            }],
        }],
    }
}

/// Inter-node bandwidth of [`with_message_size`] (bytes/s).
pub const SIZED_INTER_BW: f64 = 10e9;
/// Intra-node bandwidth of [`with_message_size`] (bytes/s).
pub const SIZED_INTRA_BW: f64 = 40e9;

/// `run` as if measured with `bytes` per message: every measured pair's time
/// gains `bytes / bandwidth` ([`SIZED_INTRA_BW`] between ranks of one host,
/// [`SIZED_INTER_BW`] between hosts), so runs at several sizes describe a
/// network a calibration can fit (latency = the size-independent part).
pub fn with_message_size(mut run: LinkTestRun, bytes: u64) -> LinkTestRun {
    let n = run.num_tasks;
    let hosts: Vec<&str> = run.ranks.iter().map(|r| r.hostname.as_str()).collect();
    let extra = |i: usize, j: usize| {
        let same = hosts.get(i).is_some_and(|h| Some(h) == hosts.get(j));
        bytes as f64 / if same { SIZED_INTRA_BW } else { SIZED_INTER_BW }
    };
    for p in &mut run.permutations {
        let (mut sum, mut cnt, mut lo, mut hi) = (0f64, 0usize, f64::INFINITY, 0f64);
        for i in 0..n {
            for j in 0..n {
                let Some(t) = p.times.get_mut(i * n + j) else {
                    continue;
                };
                if i == j || *t <= 0.0 {
                    continue;
                }
                *t = f64::from((*t + extra(i, j)) as f32);
                sum += *t;
                cnt += 1;
                lo = lo.min(*t);
                hi = hi.max(*t);
            }
        }
        if cnt > 0 {
            (p.min_time_s, p.avg_time_s, p.max_time_s) = (lo, sum / cnt as f64, hi);
        }
        for l in &mut p.slow_links {
            l.time_s = p
                .times
                .get(l.from_rank * n + l.to_rank)
                .copied()
                .unwrap_or(l.time_s);
            l.retest_time_s = l.retest_time_s.map(|r| r + extra(l.from_rank, l.to_rank));
        }
    }
    run.message_size = bytes;
    run
}
