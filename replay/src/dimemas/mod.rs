//! The Dimemas 5.5 model: point-to-point with eager and rendezvous protocols, startup
//! latencies, bandwidth with MB = 2^20 bytes, network buses and per-node in/out links
//! as contended resources, intra/inter-node parameters, tasks per node, CPU ratio, and
//! collectives (synchronisation, then FAN_IN + FAN_OUT by MODEL and SIZE).
//!
//! [`Platform`] gathers the parameters (from a `.cfg` file, a collectives definition
//! file and sweep-point overrides); [`simulate`] replays a `.dim` trace on it.
mod collective;
mod sim;
mod source;

use std::collections::BTreeMap;
use std::path::Path;

use benchlake_formats::dimemas::config::{Environment, Mapping};
use benchlake_formats::dimemas::{CollectivesFile, DimConfig, GopModel, NodeConfig};

use crate::error::{ReplayError, Result};

pub use sim::{simulate, simulate_threads};

/// The platform a `.dim` trace is replayed on (one machine).
#[derive(Debug, Clone, PartialEq)]
pub struct Platform {
    /// Nodes of the machine.
    pub nodes: u32,
    /// Inter-node bandwidth (MB/s, MB = 2^20 B; 0 = instantaneous).
    pub bandwidth: f64,
    /// Network-wide buses (0 = unlimited).
    pub buses: u32,
    /// Default collective model (both phases, size CURR) when no file defines one.
    pub gop_model: GopModel,
    /// Node groups (node ids are assigned in order).
    pub node_groups: Vec<NodeConfig>,
    /// Task placement.
    pub mapping: Mapping,
    /// Messages of at least this many bytes use rendezvous (`-S`); `None` = trace's flag.
    pub eager_limit: Option<u64>,
    /// The collectives definition file, if any.
    pub collectives: Option<CollectivesFile>,
    /// Record a timeline (memory grows with the trace; off by default).
    pub timeline: bool,
}

impl Default for Platform {
    /// The `c1_base` configuration of the reference runs: 1024 nodes, 1 task per node,
    /// L = 5 µs, BW = 1000 MB/s, unlimited buses, 1 in/out link, LOG collectives,
    /// intra-node L = 1 µs, BW = 10000 MB/s.
    fn default() -> Self {
        Self {
            nodes: 1024,
            bandwidth: 1000.0,
            buses: 0,
            gop_model: GopModel::Log,
            node_groups: vec![NodeConfig {
                machine: 0,
                count: 1024,
                processors: 1,
                cpu_ratio: 1.0,
                intra_latency: 1e-6,
                intra_bandwidth: 10000.0,
                intra_buses: 0,
                intra_in_links: 1,
                intra_out_links: 1,
                inter_latency: 5e-6,
                in_links: 1,
                out_links: 1,
                wan_latency: 0.0,
            }],
            mapping: Mapping::TasksPerNode(1),
            eager_limit: None,
            collectives: None,
            timeline: false,
        }
    }
}

/// Parameter names accepted by [`Platform::apply_params`] (documented in docs/replay.md).
pub const PARAM_NAMES: &[&str] = &[
    "config",
    "collectives",
    "latency",
    "bandwidth",
    "buses",
    "links",
    "in_links",
    "out_links",
    "intra_latency",
    "intra_bandwidth",
    "intra_buses",
    "cpu_ratio",
    "tasks_per_node",
    "nodes",
    "eager_limit",
    "gop_model",
    "timeline",
];

fn parse_f(name: &str, v: &str) -> Result<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| {
            ReplayError::param(name, format!("expected a non-negative number, got '{v}'"))
        })
}

fn parse_u(name: &str, v: &str) -> Result<u32> {
    v.trim().parse::<u32>().map_err(|_| {
        ReplayError::param(name, format!("expected a non-negative integer, got '{v}'"))
    })
}

/// Parses a byte count with an optional K/M/G suffix (powers of 1024, as Dimemas's `-S`).
pub fn parse_bytes(name: &str, v: &str) -> Result<u64> {
    let t = v.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1u64 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| {
            ReplayError::param(
                name,
                format!("expected a byte count like 32768 or 32K, got '{v}'"),
            )
        })
}

impl Platform {
    /// The platform described by a `.cfg` file (and its collectives file, if named).
    pub fn from_config(cfg: &DimConfig) -> Result<Self> {
        if cfg.machines > 1 || cfg.environments.len() > 1 {
            return Err(ReplayError::Unsupported {
                file: cfg.path.clone(),
                message: "multi-machine (WAN) configurations are not implemented".into(),
            });
        }
        let env: &Environment =
            cfg.environments
                .first()
                .ok_or_else(|| ReplayError::Unsupported {
                    file: cfg.path.clone(),
                    message: "no environment record".into(),
                })?;
        let collectives = match cfg.collectives_path() {
            Some(p) => Some(CollectivesFile::read(p)?),
            None => None,
        };
        Ok(Self {
            nodes: env.nodes,
            bandwidth: env.bandwidth,
            buses: env.buses,
            gop_model: env.gop_model,
            node_groups: cfg.nodes.clone(),
            mapping: cfg.mapping.clone(),
            eager_limit: None,
            collectives,
            timeline: false,
        })
    }

    /// Applies sweep-point overrides (see [`PARAM_NAMES`]); `config` is applied first.
    pub fn apply_params(mut self, params: &BTreeMap<String, String>) -> Result<Self> {
        if let Some(c) = params.get("config") {
            let cfg = DimConfig::read(Path::new(c))?;
            self = Self::from_config(&cfg)?;
        }
        for (k, v) in params {
            let groups = &mut self.node_groups;
            match k.as_str() {
                "config" => {}
                "collectives" => {
                    self.collectives = if v.is_empty() {
                        None
                    } else {
                        Some(CollectivesFile::read(v)?)
                    }
                }
                "latency" => {
                    let x = parse_f(k, v)?;
                    groups.iter_mut().for_each(|g| g.inter_latency = x);
                }
                "bandwidth" => self.bandwidth = parse_f(k, v)?,
                "buses" => self.buses = parse_u(k, v)?,
                "links" => {
                    let x = parse_u(k, v)?;
                    groups.iter_mut().for_each(|g| {
                        g.in_links = x;
                        g.out_links = x;
                    });
                }
                "in_links" => {
                    let x = parse_u(k, v)?;
                    groups.iter_mut().for_each(|g| g.in_links = x);
                }
                "out_links" => {
                    let x = parse_u(k, v)?;
                    groups.iter_mut().for_each(|g| g.out_links = x);
                }
                "intra_latency" => {
                    let x = parse_f(k, v)?;
                    groups.iter_mut().for_each(|g| g.intra_latency = x);
                }
                "intra_bandwidth" => {
                    let x = parse_f(k, v)?;
                    groups.iter_mut().for_each(|g| g.intra_bandwidth = x);
                }
                "intra_buses" => {
                    let x = parse_u(k, v)?;
                    groups.iter_mut().for_each(|g| g.intra_buses = x);
                }
                "cpu_ratio" => {
                    let x = parse_f(k, v)?;
                    if x <= 0.0 {
                        return Err(ReplayError::param(k, "must be > 0"));
                    }
                    groups.iter_mut().for_each(|g| g.cpu_ratio = x);
                }
                "tasks_per_node" => {
                    let x = parse_u(k, v)?;
                    if x == 0 {
                        return Err(ReplayError::param(k, "must be > 0"));
                    }
                    groups
                        .iter_mut()
                        .for_each(|g| g.processors = g.processors.max(x));
                    self.mapping = Mapping::TasksPerNode(x);
                }
                "nodes" => {
                    let x = parse_u(k, v)?;
                    self.nodes = x;
                    if let [g] = groups.as_mut_slice() {
                        g.count = x;
                    }
                }
                "eager_limit" => self.eager_limit = Some(parse_bytes(k, v)?),
                "gop_model" => {
                    self.gop_model = match v.trim() {
                        "0" => GopModel::Zero,
                        "1" | "CTE" => GopModel::Cte,
                        "2" | "LIN" => GopModel::Lin,
                        "3" | "LOG" => GopModel::Log,
                        other => {
                            return Err(ReplayError::param(
                                k,
                                format!("expected CTE, LIN, LOG or 0..3, got '{other}'"),
                            ));
                        }
                    }
                }
                "timeline" => self.timeline = matches!(v.trim(), "1" | "true" | "yes"),
                other => {
                    return Err(ReplayError::param(
                        other,
                        format!(
                            "unknown Dimemas parameter (known: {})",
                            PARAM_NAMES.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(self)
    }

    /// The node configuration of node `node`.
    pub(crate) fn node_config(&self, node: u32) -> Option<&NodeConfig> {
        let mut first = 0u32;
        for g in &self.node_groups {
            if node < first.saturating_add(g.count) {
                return Some(g);
            }
            first = first.saturating_add(g.count);
        }
        None
    }

    /// The node task `task` of `ntasks` runs on.
    pub(crate) fn node_of(&self, task: u32, ntasks: u32) -> Option<u32> {
        match &self.mapping {
            Mapping::TasksPerNode(k) => Some(task / (*k).max(1)),
            Mapping::FillNodes => {
                let ppn = self.node_groups.first().map_or(1, |g| g.processors.max(1));
                Some(task / ppn)
            }
            Mapping::Interleaved => Some(task % self.nodes.max(1).min(ntasks.max(1))),
            Mapping::Explicit(v) => v.get(task as usize).copied(),
        }
    }

    /// Effective parameters as JSON (the `replays.params` column).
    pub fn to_json(&self) -> serde_json::Value {
        let g = self.node_groups.first();
        serde_json::json!({
            "nodes": self.nodes,
            "bandwidth_mb_s": self.bandwidth,
            "buses": self.buses,
            "gop_model": format!("{:?}", self.gop_model),
            "latency_s": g.map(|g| g.inter_latency),
            "intra_latency_s": g.map(|g| g.intra_latency),
            "intra_bandwidth_mb_s": g.map(|g| g.intra_bandwidth),
            "in_links": g.map(|g| g.in_links),
            "out_links": g.map(|g| g.out_links),
            "cpu_ratio": g.map(|g| g.cpu_ratio),
            "mapping": format!("{:?}", self.mapping),
            "eager_limit": self.eager_limit,
            "collectives_file": self.collectives.is_some(),
        })
    }
}
