//! The scenario file of `benchlake probe year` (docs/verdicts.md, "A year
//! to prove it"): the cluster, its noise and the faults and events injected
//! into its nightly history. TOML; every field is checked, unknown fields
//! are refused, and an error names the file, the field and where it is.
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Largest cluster a scenario may describe.
pub const MAX_NODES: usize = 4096;
/// Longest history a scenario may describe.
pub const MAX_NIGHTS: usize = 3660;
/// Most faults and events in one scenario.
pub const MAX_FAULTS: usize = 10_000;

/// Why a scenario was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: {why}")]
    Read { file: String, why: String },
    #[error("{file}: {field}: {why}")]
    Field {
        file: String,
        field: String,
        why: String,
    },
}

/// A whole scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Shown in the report.
    #[serde(default)]
    pub name: String,
    /// Seed of every random draw (the same scenario and seed give the same
    /// history, byte for byte).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The nodes, as a Slurm hostlist expression (`n[0001-0512]`).
    pub nodes: String,
    /// Nights of history.
    pub nights: usize,
    /// The first night (`YYYY-MM-DD`).
    #[serde(default = "default_start")]
    pub start: chrono::NaiveDate,
    /// Cores of every node.
    #[serde(default = "default_cores")]
    pub cores: i64,
    /// Memory of every node (GiB).
    #[serde(default = "default_memory")]
    pub memory_gib: f64,
    /// The filesystems: one nightly pio schedule each.
    #[serde(default = "default_filesystems")]
    pub filesystems: Vec<String>,
    /// Nightly pio bandwidth of each filesystem's schedule per node (MiB/s).
    #[serde(default = "default_node_bw")]
    pub node_bw_mib_s: f64,
    /// Median time of a LinkTest pair (s).
    #[serde(default = "default_pair_time")]
    pub pair_time_s: f64,
    #[serde(default)]
    pub noise: Noise,
    #[serde(default)]
    pub busy: Busy,
    /// Faults (to be found) and events (to be lived with).
    #[serde(default, rename = "fault")]
    pub faults: Vec<Fault>,
}

fn default_seed() -> u64 {
    1
}
fn default_start() -> chrono::NaiveDate {
    chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap_or_default()
}
fn default_cores() -> i64 {
    128
}
fn default_memory() -> f64 {
    256.0
}
fn default_filesystems() -> Vec<String> {
    vec!["scratch".into()]
}
fn default_node_bw() -> f64 {
    2000.0
}
fn default_pair_time() -> f64 {
    3e-6
}

/// Measurement noise: coefficients of variation (standard deviation /
/// mean) of normal noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Noise {
    /// A filesystem's bandwidth from night to night.
    pub fs_cv: f64,
    /// One node's share of it, around the node's own level.
    pub node_io_cv: f64,
    /// Nodes' own levels around the filesystem's (fixed per node).
    pub node_io_spread: f64,
    /// One pair time of LinkTest, around the pair's own level.
    pub link_cv: f64,
    /// Pairs' own levels (fixed per pair: the network's topology).
    pub link_spread: f64,
}

impl Default for Noise {
    fn default() -> Self {
        Noise {
            fs_cv: 0.03,
            node_io_cv: 0.04,
            node_io_spread: 0.05,
            link_cv: 0.03,
            link_spread: 0.10,
        }
    }
}

/// Random busy nights: on a share of the nights, a share of the nodes runs
/// other work during the benchmarks (their load is high, their
/// measurements slower).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Busy {
    /// Share of the nights that are busy.
    pub night_rate: f64,
    /// Share of the nodes disturbed on a busy night.
    pub node_share: f64,
    /// How much slower a disturbed node's measurements are (0.4 = 40 %).
    pub slowdown: f64,
}

impl Default for Busy {
    fn default() -> Self {
        Busy {
            night_rate: 0.05,
            node_share: 0.05,
            slowdown: 0.4,
        }
    }
}

/// What a fault or event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A node loses `size` cores (hostinfo).
    CoreLoss,
    /// A node loses the share `size` of its memory (hostinfo).
    MemoryLoss,
    /// A node's own I/O bandwidth drops by the share `size` (pio).
    NodeIo,
    /// The pair of nodes `a:b` is slower by the share `size` (LinkTest).
    Link,
    /// A filesystem's bandwidth drops by the share `size` (pio).
    Filesystem,
    /// Event: the node (or `*`, every node) is busy; measurements slower by
    /// `size` (default: the `[busy]` slowdown).
    Busy,
    /// Event: the node is in no run (down, drained, rebooting).
    Absent,
    /// Event: the node is new: in no run before `first_night`.
    Join,
}

impl Kind {
    /// A fault benchlake should find (the others are events to live with).
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            Kind::CoreLoss | Kind::MemoryLoss | Kind::NodeIo | Kind::Link | Kind::Filesystem
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::CoreLoss => "core_loss",
            Kind::MemoryLoss => "memory_loss",
            Kind::NodeIo => "node_io",
            Kind::Link => "link",
            Kind::Filesystem => "filesystem",
            Kind::Busy => "busy",
            Kind::Absent => "absent",
            Kind::Join => "join",
        }
    }
}

/// One fault or event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub kind: Kind,
    /// A node, `a:b` (a pair of nodes, for `link`), a filesystem, or `*`
    /// (every node, for `busy`).
    pub target: String,
    /// First night it acts on (0 = the scenario's first night).
    pub first_night: usize,
    /// How large: cores lost, or the share lost or slower (0.2 = 20 %).
    #[serde(default)]
    pub size: Option<f64>,
    /// Growth per night (a slow drift): the effect on night k after the
    /// first is min(size, drift × (k + 1)). Absent: a step of `size`.
    #[serde(default)]
    pub drift: Option<f64>,
    /// Nights it lasts (absent: to the end; `busy` defaults to 1).
    #[serde(default)]
    pub duration: Option<usize>,
}

impl Fault {
    /// The last night it acts on (inclusive), within `nights`.
    pub fn last_night(&self, nights: usize) -> usize {
        let d = match (self.duration, self.kind) {
            (Some(d), _) => d,
            (None, Kind::Busy) => 1,
            (None, _) => nights,
        };
        (self.first_night + d.max(1) - 1).min(nights.saturating_sub(1))
    }

    /// Whether it acts on `night`.
    pub fn active(&self, night: usize, nights: usize) -> bool {
        if self.kind == Kind::Join {
            return night < self.first_night;
        }
        night >= self.first_night && night <= self.last_night(nights)
    }

    /// The size of its effect on `night` (0 when not active).
    pub fn effect(&self, night: usize, nights: usize) -> f64 {
        if !self.active(night, nights) {
            return 0.0;
        }
        let size = self.size.unwrap_or(0.0);
        match self.drift {
            Some(d) => (d * (night - self.first_night + 1) as f64).min(size),
            None => size,
        }
    }

    /// The two nodes of a `link` target.
    pub fn pair(&self) -> Option<(&str, &str)> {
        self.target.split_once(':')
    }
}

impl Scenario {
    /// Parses and checks a scenario; returns it with its node names.
    pub fn parse(file: &str, text: &str) -> Result<(Scenario, Vec<String>), ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|r| format!(" (byte offset {})", r.start))
                .unwrap_or_default();
            ScenarioError::Read {
                file: file.to_string(),
                why: format!("{}{at}", e.message()),
            }
        })?;
        let nodes = s.check(file)?;
        Ok((s, nodes))
    }

    fn check(&self, file: &str) -> Result<Vec<String>, ScenarioError> {
        let bad = |field: &str, why: String| ScenarioError::Field {
            file: file.to_string(),
            field: field.to_string(),
            why,
        };
        let nodes = benchlake_core::hostlist::expand(&self.nodes)
            .map_err(|e| bad("nodes", e.to_string()))?;
        if !(2..=MAX_NODES).contains(&nodes.len()) {
            return Err(bad(
                "nodes",
                format!("{} nodes; give 2 to {MAX_NODES}", nodes.len()),
            ));
        }
        if !(1..=MAX_NIGHTS).contains(&self.nights) {
            return Err(bad(
                "nights",
                format!("{}; give 1 to {MAX_NIGHTS}", self.nights),
            ));
        }
        if !(1..=4096).contains(&self.cores) {
            return Err(bad("cores", format!("{}; give 1 to 4096", self.cores)));
        }
        let pos = |field: &str, v: f64, max: f64| {
            if v.is_finite() && v > 0.0 && v <= max {
                Ok(())
            } else {
                Err(bad(
                    field,
                    format!("{v}; give a number above 0, at most {max}"),
                ))
            }
        };
        pos("memory_gib", self.memory_gib, 1e6)?;
        pos("node_bw_mib_s", self.node_bw_mib_s, 1e7)?;
        pos("pair_time_s", self.pair_time_s, 10.0)?;
        let share = |field: &str, v: f64| {
            if v.is_finite() && (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(bad(field, format!("{v}; give a share from 0 to 1")))
            }
        };
        let n = &self.noise;
        for (f, v) in [
            ("noise.fs_cv", n.fs_cv),
            ("noise.node_io_cv", n.node_io_cv),
            ("noise.node_io_spread", n.node_io_spread),
            ("noise.link_cv", n.link_cv),
            ("noise.link_spread", n.link_spread),
        ] {
            if !(v.is_finite() && (0.0..=0.5).contains(&v)) {
                return Err(bad(f, format!("{v}; give 0 to 0.5")));
            }
        }
        share("busy.night_rate", self.busy.night_rate)?;
        share("busy.node_share", self.busy.node_share)?;
        if !(self.busy.slowdown.is_finite() && (0.0..=10.0).contains(&self.busy.slowdown)) {
            return Err(bad(
                "busy.slowdown",
                format!("{}; give 0 to 10", self.busy.slowdown),
            ));
        }
        if self.filesystems.is_empty() || self.filesystems.len() > 64 {
            return Err(bad(
                "filesystems",
                format!("{} given; give 1 to 64", self.filesystems.len()),
            ));
        }
        let mut fs = BTreeSet::new();
        for f in &self.filesystems {
            if f.is_empty()
                || f.len() > 64
                || !f
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                || !fs.insert(f.as_str())
            {
                return Err(bad(
                    "filesystems",
                    format!(
                        "'{}': give distinct names of letters, digits, '-' and '_'",
                        f.escape_default()
                    ),
                ));
            }
        }
        if self.faults.len() > MAX_FAULTS {
            return Err(bad(
                "fault",
                format!("{} entries; at most {MAX_FAULTS}", self.faults.len()),
            ));
        }
        let known: BTreeSet<&str> = nodes.iter().map(String::as_str).collect();
        for (i, f) in self.faults.iter().enumerate() {
            let field = |k: &str| format!("fault[{i}].{k}");
            let node = |t: &str| {
                if known.contains(t) {
                    Ok(())
                } else {
                    Err(bad(
                        &field("target"),
                        format!(
                            "'{}' is not one of the scenario's nodes",
                            t.escape_default()
                        ),
                    ))
                }
            };
            match f.kind {
                Kind::Link => {
                    let Some((a, b)) = f.pair() else {
                        return Err(bad(
                            &field("target"),
                            format!(
                                "'{}': a link is two nodes, 'a:b'",
                                f.target.escape_default()
                            ),
                        ));
                    };
                    node(a)?;
                    node(b)?;
                    if a == b {
                        return Err(bad(
                            &field("target"),
                            format!("'{a}:{b}': two different nodes"),
                        ));
                    }
                }
                Kind::Filesystem => {
                    if !fs.contains(f.target.as_str()) {
                        return Err(bad(
                            &field("target"),
                            format!(
                                "'{}' is not one of the scenario's filesystems",
                                f.target.escape_default()
                            ),
                        ));
                    }
                }
                Kind::Busy if f.target == "*" => {}
                _ => node(&f.target)?,
            }
            if f.first_night >= self.nights {
                return Err(bad(
                    &field("first_night"),
                    format!(
                        "{}; the scenario has nights 0 to {}",
                        f.first_night,
                        self.nights - 1
                    ),
                ));
            }
            if f.duration == Some(0) {
                return Err(bad(&field("duration"), "0; give at least 1 night".into()));
            }
            let size = f.size;
            match f.kind {
                Kind::CoreLoss => match size {
                    Some(c) if c >= 1.0 && c.fract() == 0.0 && (c as i64) < self.cores => {}
                    _ => {
                        return Err(bad(
                            &field("size"),
                            format!("{size:?}: give the cores lost, 1 to {}", self.cores - 1),
                        ));
                    }
                },
                Kind::MemoryLoss | Kind::NodeIo | Kind::Filesystem => match size {
                    Some(s) if s > 0.0 && s < 1.0 => {}
                    _ => {
                        return Err(bad(
                            &field("size"),
                            format!("{size:?}: give the share lost, above 0 and below 1"),
                        ));
                    }
                },
                Kind::Link | Kind::Busy => match size {
                    None if f.kind == Kind::Busy => {}
                    Some(s) if s > 0.0 && s <= 10.0 => {}
                    _ => {
                        return Err(bad(
                            &field("size"),
                            format!("{size:?}: give how much slower, above 0 and at most 10"),
                        ));
                    }
                },
                Kind::Absent | Kind::Join => {
                    if size.is_some() {
                        return Err(bad(
                            &field("size"),
                            format!("{} takes no size", f.kind.name()),
                        ));
                    }
                }
            }
            if let Some(d) = f.drift {
                let drifts = matches!(f.kind, Kind::NodeIo | Kind::Link | Kind::Filesystem);
                if !(drifts && d.is_finite() && d > 0.0 && d <= size.unwrap_or(0.0)) {
                    return Err(bad(
                        &field("drift"),
                        format!(
                            "{d}: node_io, link and filesystem faults drift, by more than 0 and at most their size a night"
                        ),
                    ));
                }
            }
        }
        Ok(nodes)
    }

    /// The faults and events with the busy effect's default size filled in.
    pub fn resolved(&self) -> Vec<Fault> {
        self.faults
            .iter()
            .map(|f| {
                let mut f = f.clone();
                if f.kind == Kind::Busy && f.size.is_none() {
                    f.size = Some(self.busy.slowdown);
                }
                f
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
nodes = "n[01-04]"
nights = 30
filesystems = ["scratch"]
[[fault]]
kind = "link"
target = "n01:n03"
first_night = 10
size = 0.3
drift = 0.05
"#;

    #[test]
    fn a_scenario_reads_with_defaults() {
        let (s, nodes) = Scenario::parse("s.toml", OK).unwrap();
        assert_eq!(nodes, ["n01", "n02", "n03", "n04"]);
        assert_eq!((s.cores, s.seed), (128, 1));
        let f = &s.faults[0];
        assert_eq!(f.pair(), Some(("n01", "n03")));
        assert_eq!(f.effect(9, 30), 0.0);
        assert!((f.effect(10, 30) - 0.05).abs() < 1e-12);
        assert!((f.effect(29, 30) - 0.3).abs() < 1e-12);
        assert_eq!(f.last_night(30), 29);
    }

    proptest::proptest! {
        /// Any text, and any damage to a good scenario, is a scenario or
        /// an error naming the file: never a panic. An accepted one keeps
        /// its limits.
        #[test]
        fn no_text_panics(text in "\\PC{0,400}") {
            let _ = Scenario::parse("s.toml", &text);
        }

        #[test]
        fn damaged_scenarios_are_refused_or_within_limits(
            at in 0usize..400,
            with in "[a-z0-9=\\[\\]\"\\-:.,{} \\n]{0,6}",
        ) {
            let mut t: Vec<char> = OK.chars().collect();
            let at = at.min(t.len());
            t.splice(at..at, with.chars());
            let text: String = t.into_iter().collect();
            match Scenario::parse("s.toml", &text) {
                Ok((s, nodes)) => {
                    proptest::prop_assert!((2..=MAX_NODES).contains(&nodes.len()));
                    proptest::prop_assert!((1..=MAX_NIGHTS).contains(&s.nights));
                    for f in &s.faults {
                        proptest::prop_assert!(f.first_night < s.nights);
                    }
                }
                Err(e) => proptest::prop_assert!(e.to_string().starts_with("s.toml: ")),
            }
        }
    }

    #[test]
    fn bad_scenarios_name_the_field() {
        let cases = [
            (OK.replace("n01:n03", "n01:n09"), "fault[0].target"),
            (
                OK.replace("first_night = 10", "first_night = 30"),
                "fault[0].first_night",
            ),
            (OK.replace("drift = 0.05", "drift = 0.5"), "fault[0].drift"),
            (OK.replace("nights = 30", "nights = 0"), "nights"),
            (
                OK.replace("kind = \"link\"", "kind = \"core_loss\""),
                "fault[0].target",
            ),
            (OK.replace("\"n[01-04]\"", "\"n[01-01]\""), "nodes"),
        ];
        for (text, field) in cases {
            let e = Scenario::parse("s.toml", &text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("s.toml: {field}:")), "{e}");
        }
        let e = Scenario::parse("s.toml", &format!("{OK}\nbogus = 1\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.toml") && e.contains("bogus") && e.contains("byte offset"),
            "{e}"
        );
    }
}
