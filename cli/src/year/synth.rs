//! The synthetic cluster of a scenario: each night's raw outputs of the
//! nightly hostinfo, pio (one schedule per filesystem) and LinkTest runs,
//! in the formats the real tools write, with the scenario's faults and
//! events applied (docs/verdicts.md, "A year to prove it").
//!
//! Every random draw comes from a generator seeded by (scenario seed, night,
//! stream), so a night can be made again without the nights before it and
//! the same scenario gives the same history.
use benchlake_formats::hostinfo::HostFacts;
use benchlake_formats::io::pio::{PioParam, PioResult, PioTaskTimes, PioVerification};
use benchlake_formats::linktest::LinkTestRun;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

use super::scenario::{Fault, Kind, Scenario};

/// Bytes each pio process writes and reads.
pub const PIO_BYTES: u64 = 1 << 30;
/// pio transfer size.
const PIO_XFER: u64 = 1 << 20;
/// Hour of the night the runs start (UTC).
const START_HOUR: u32 = 2;

type Rng64 = rand::rngs::StdRng;

/// The cluster of a scenario, with its random busy nights drawn.
pub struct World {
    pub s: Scenario,
    pub nodes: Vec<String>,
    /// The scenario's faults and events, then the drawn busy nights.
    pub faults: Vec<Fault>,
    /// Each node's own I/O level (× the filesystem's).
    node_io: Vec<f64>,
    /// Faults and events by the node they name (index into `faults`).
    by_node: Vec<Vec<usize>>,
    /// `busy` events on every node (`*`).
    all_busy: Vec<usize>,
}

fn unit_normal() -> Normal<f64> {
    // Mean 0, deviation 1: valid parameters, so this cannot fail.
    Normal::new(0.0, 1.0).unwrap_or_else(|_| unreachable!())
}

impl World {
    pub fn new(s: Scenario, nodes: Vec<String>) -> World {
        let mut faults = s.resolved();
        // Random busy nights: on a share of the nights, a share of the nodes.
        let mut rng = Rng64::seed_from_u64(s.seed ^ 0xb05e_0001);
        for night in 0..s.nights {
            if !rng.random_bool(s.busy.night_rate.clamp(0.0, 1.0)) {
                continue;
            }
            for n in &nodes {
                if rng.random_bool(s.busy.node_share.clamp(0.0, 1.0)) {
                    faults.push(Fault {
                        kind: Kind::Busy,
                        target: n.clone(),
                        first_night: night,
                        size: Some(s.busy.slowdown),
                        drift: None,
                        duration: Some(1),
                    });
                }
            }
        }
        let n01 = unit_normal();
        let mut lv = Rng64::seed_from_u64(s.seed ^ 0x10_1e7e1);
        let node_io = (0..nodes.len())
            .map(|_| (1.0 + s.noise.node_io_spread * n01.sample(&mut lv)).max(0.2))
            .collect();
        let index: std::collections::HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let mut by_node = vec![Vec::new(); nodes.len()];
        let mut all_busy = Vec::new();
        for (k, f) in faults.iter().enumerate() {
            if f.kind == Kind::Busy && f.target == "*" {
                all_busy.push(k);
                continue;
            }
            let mut add = |name: &str| {
                if let Some(&i) = index.get(name) {
                    by_node[i].push(k);
                }
            };
            match f.pair() {
                Some((a, b)) if f.kind == Kind::Link => {
                    add(a);
                    add(b);
                }
                _ => add(&f.target),
            }
        }
        World {
            s,
            nodes,
            faults,
            node_io,
            by_node,
            all_busy,
        }
    }

    /// The date of `night`.
    pub fn date(&self, night: usize) -> chrono::NaiveDate {
        self.s.start + chrono::Days::new(night as u64)
    }

    /// When the night's runs start (ms since the epoch).
    pub fn night_ms(&self, night: usize) -> i64 {
        self.date(night)
            .and_hms_opt(START_HOUR, 0, 0)
            .map(|t| t.and_utc().timestamp_millis())
            .unwrap_or_default()
    }

    fn faults_of(&self, node: usize) -> impl Iterator<Item = &Fault> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .chain(self.all_busy.iter())
            .filter_map(|&k| self.faults.get(k))
    }

    /// Whether `node` is in the night's runs.
    pub fn present(&self, node: usize, night: usize) -> bool {
        let n = self.s.nights;
        !self
            .faults_of(node)
            .any(|f| matches!(f.kind, Kind::Absent | Kind::Join) && f.active(night, n))
    }

    /// The nodes in the night's runs.
    pub fn present_nodes(&self, night: usize) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.present(i, night))
            .collect()
    }

    /// The summed effect of `node`'s faults of `kind` on `night`.
    fn effect(&self, node: usize, kind: Kind, night: usize) -> f64 {
        let n = self.s.nights;
        self.faults_of(node)
            .filter(|f| f.kind == kind)
            .map(|f| f.effect(night, n))
            .sum()
    }

    /// How much slower `node`'s measurements are on `night` (0 = not busy).
    pub fn busy(&self, node: usize, night: usize) -> f64 {
        self.effect(node, Kind::Busy, night)
    }

    fn rng(&self, night: usize, stream: u64) -> Rng64 {
        Rng64::seed_from_u64(
            self.s
                .seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add((night as u64) << 20)
                .wrapping_add(stream),
        )
    }

    /// The night's hostinfo documents, one per present node.
    pub fn hostinfo(&self, night: usize) -> Vec<(String, HostFacts)> {
        let at = self.night_ms(night);
        let mut rng = self.rng(night, 1);
        let mem = self.s.memory_gib * (1u64 << 30) as f64;
        self.present_nodes(night)
            .into_iter()
            .map(|i| {
                let name = self.nodes[i].clone();
                let cores = self.s.cores - self.effect(i, Kind::CoreLoss, night).round() as i64;
                // The kernel keeps a little of the memory (fixed per node).
                let kept = 1.0 - 0.002 * ((i * 7919) % 10) as f64 / 10.0;
                let lost = self.effect(i, Kind::MemoryLoss, night).min(0.99);
                let busy = self.busy(i, night);
                let load = if busy > 0.0 {
                    self.s.cores as f64 * (0.5 + rng.random::<f64>() * 0.5)
                } else {
                    rng.random::<f64>() * 0.3
                };
                let f = HostFacts {
                    version: 1,
                    hostname: name.clone(),
                    kernel_release: "6.1.0-28-amd64".into(),
                    kernel_version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1".into(),
                    cpu_model: "AMD EPYC 9654 96-Core Processor".into(),
                    cores,
                    // /proc/meminfo counts kB.
                    memory_bytes: (mem * kept * (1.0 - lost) / 1024.0) as i64 * 1024,
                    load_1m: (load * 100.0).round() / 100.0,
                    uptime_s: 86_400.0 * (1 + night % 30) as f64,
                    collected_at_ms: at + i as i64,
                    node: Some(name.clone()),
                };
                (name, f)
            })
            .collect()
    }

    /// The night's pio result on filesystem number `fs`: every present node
    /// writes and reads [`PIO_BYTES`] (one process per node).
    pub fn pio(&self, night: usize, fs: usize) -> PioResult {
        let n01 = unit_normal();
        let mut rng = self.rng(night, 100 + fs as u64);
        let name = self.s.filesystems.get(fs).cloned().unwrap_or_default();
        let fs_fault: f64 = self
            .faults
            .iter()
            .filter(|f| f.kind == Kind::Filesystem && f.target == name)
            .map(|f| f.effect(night, self.s.nights))
            .sum();
        let level = self.s.node_bw_mib_s
            * (1.0 + self.s.noise.fs_cv * n01.sample(&mut rng)).max(0.2)
            * (1.0 - fs_fault).max(0.01);
        let nodes = self.present_nodes(night);
        let t0 = self.night_ms(night) as f64 / 1000.0 + 600.0 * (1 + fs) as f64;
        let mut phases = Vec::new();
        let mut end = t0;
        for (op, offset) in [("write", 0.0), ("read", 1.0)] {
            let mut tasks = Vec::with_capacity(nodes.len());
            let start = end + offset;
            for (rank, &i) in nodes.iter().enumerate() {
                let own = self.node_io[i]
                    * (1.0 + self.s.noise.node_io_cv * n01.sample(&mut rng)).max(0.2)
                    * (1.0 - self.effect(i, Kind::NodeIo, night)).max(0.01)
                    / (1.0 + self.busy(i, night));
                let bw = level * own;
                let xfer = PIO_BYTES as f64 / (1u64 << 20) as f64 / bw;
                let open = 0.002;
                let t = PioTaskTimes {
                    rank: rank as u32,
                    open_start: start,
                    open_stop: start + open,
                    xfer_start: start + open,
                    xfer_stop: start + open + xfer,
                    close_start: start + open + xfer,
                    close_stop: start + open + xfer + 0.001,
                    bytes: PIO_BYTES,
                    transfers: PIO_BYTES / PIO_XFER,
                    verify_errors: (op == "read").then_some(0),
                };
                end = end.max(t.close_stop);
                tasks.push(t);
            }
            phases.push(benchlake_pio::run::phase_of(0, op, tasks));
        }
        let summary = ["write", "read"]
            .iter()
            .filter_map(|op| benchlake_pio::run::summary_of(op, &phases))
            .collect();
        let rfc = |s: f64| {
            chrono::DateTime::from_timestamp_micros((s * 1e6) as i64)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
                .unwrap_or_default()
        };
        let param = |n: &str, v: String| PioParam {
            name: n.into(),
            value: v,
            source: "cli".into(),
        };
        PioResult {
            format: benchlake_formats::io::pio::FORMAT.into(),
            pio_version: env!("CARGO_PKG_VERSION").into(),
            started_at: rfc(t0),
            finished_at: rfc(end + 0.01),
            params: vec![
                param("block_size", PIO_BYTES.to_string()),
                param("transfer_size", PIO_XFER.to_string()),
                param("segments", "1".into()),
                param("iterations", "1".into()),
                param("np", nodes.len().to_string()),
            ],
            api: "POSIX".into(),
            pattern: "segmented".into(),
            file_per_proc: true,
            num_tasks: nodes.len() as u32,
            hosts: nodes.iter().map(|&i| self.nodes[i].clone()).collect(),
            launcher: "slurm".into(),
            block_size: PIO_BYTES,
            transfer_size: PIO_XFER,
            min_transfer_size: PIO_XFER,
            segments: 1,
            stride: PIO_BYTES,
            header_bytes: 0,
            file_size: PIO_BYTES,
            fsync: true,
            collective: false,
            iterations: 1,
            cache_mode: "o_direct".into(),
            reorder_shift: 1,
            verify: true,
            phases,
            summary,
            verification: PioVerification {
                status: "PASS".into(),
                errors: 0,
                first_error: None,
                messages: Vec::new(),
            },
        }
    }

    /// The fixed level of the pair (a, b) (the network's topology: pairs
    /// across the core are slower than pairs within a leaf switch).
    fn pair_level(&self, a: usize, b: usize) -> f64 {
        let (lo, hi) = (a.min(b) as u64, a.max(b) as u64);
        let mut h = (lo << 32 | hi) ^ self.s.seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        let leaf = if a / 32 == b / 32 { 1.0 } else { 1.25 };
        leaf * (1.0 + self.s.noise.link_spread * (u - 0.5) * 2.0)
    }

    /// The night's LinkTest run over the present nodes (one rank per node).
    pub fn linktest(&self, night: usize) -> LinkTestRun {
        let nodes = self.present_nodes(night);
        let n = nodes.len();
        let mut run = benchlake_formats::linktest::synth::synthetic_run(n, 1, night as u64);
        let n01 = unit_normal();
        let mut rng = self.rng(night, 7);
        let busy: Vec<f64> = nodes.iter().map(|&i| self.busy(i, night)).collect();
        // Link faults between present nodes, by rank pair.
        let rank_of: std::collections::HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(r, &i)| (self.nodes[i].as_str(), r))
            .collect();
        let mut slow: std::collections::HashMap<(usize, usize), f64> = Default::default();
        for f in self.faults.iter().filter(|f| f.kind == Kind::Link) {
            let e = f.effect(night, self.s.nights);
            if let (true, Some((a, b))) = (e > 0.0, f.pair())
                && let (Some(&ra), Some(&rb)) = (rank_of.get(a), rank_of.get(b))
            {
                *slow.entry((ra.min(rb), ra.max(rb))).or_default() += e;
            }
        }
        if let Some(p) = run.permutations.first_mut() {
            let (mut sum, mut cnt, mut lo, mut hi) = (0f64, 0usize, f64::INFINITY, 0f64);
            for i in 0..n {
                for j in 0..n {
                    if i == j {
                        continue;
                    }
                    let level = self.pair_level(nodes[i], nodes[j]);
                    let noise = (1.0 + self.s.noise.link_cv * n01.sample(&mut rng)).max(0.2);
                    let disturbed = 1.0 + busy[i].max(busy[j]);
                    let fault = 1.0 + slow.get(&(i.min(j), i.max(j))).copied().unwrap_or(0.0);
                    let t =
                        f64::from((self.s.pair_time_s * level * noise * disturbed * fault) as f32);
                    if let Some(x) = p.times.get_mut(i * n + j) {
                        *x = t;
                    }
                    sum += t;
                    cnt += 1;
                    lo = lo.min(t);
                    hi = hi.max(t);
                }
            }
            p.min_time_s = lo;
            p.avg_time_s = sum / cnt.max(1) as f64;
            p.max_time_s = hi;
            p.slow_links.clear();
            let day = self.date(night).format("%Y-%m-%d");
            p.start_time = Some(format!("{day} 0{START_HOUR}:30:00"));
            p.end_time = Some(format!("{day} 0{START_HOUR}:40:00"));
        }
        for (r, &i) in nodes.iter().enumerate() {
            if let Some(info) = run.ranks.get_mut(r) {
                info.hostname = self.nodes[i].clone();
                info.core_id = Some(0);
            }
        }
        run
    }
}
