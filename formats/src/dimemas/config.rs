//! Dimemas platform configuration (`#DIMEMAS_CONFIGURATION` `.cfg` files) and the
//! collectives definition file (`Machine globalop:` lines).
//!
//! Only the records that change predictions are interpreted (WAN, environment, node,
//! mapping, configuration files); the others are parsed for syntax and kept aside.
//! Bandwidths are in MB/s with MB = 2^20 bytes, latencies in seconds, as in Dimemas.
use std::path::{Path, PathBuf};

use super::text::{parse_f64, parse_i64};
use crate::error::{FormatError, Position, Result};

/// Most configuration values accepted in one array (guards allocation).
const MAX_ARRAY: i64 = 1 << 22;

/// Scalability model of one collective phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GopModel {
    /// The phase does not exist.
    Zero,
    /// Constant: L + S/BW.
    Cte,
    /// Linear: (P-1)(L + S/BW).
    Lin,
    /// Logarithmic with bus-limited binomial-tree steps.
    Log,
}

impl GopModel {
    /// From the environment record's integer (1 CTE, 2 LIN, 3 LOG, 0 none).
    pub fn from_env(v: i64) -> Option<Self> {
        match v {
            0 => Some(Self::Zero),
            1 => Some(Self::Cte),
            2 => Some(Self::Lin),
            3 => Some(Self::Log),
            _ => None,
        }
    }
    fn from_word(w: &str) -> Option<Self> {
        match w {
            "0" => Some(Self::Zero),
            "CTE" => Some(Self::Cte),
            "LIN" => Some(Self::Lin),
            "LOG" => Some(Self::Log),
            _ => None,
        }
    }
}

/// Which message size a collective phase uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GopSize {
    /// `bytes_send` for FAN_IN, `bytes_recv` for FAN_OUT (the default without a file).
    Curr,
    /// min(send, recv).
    Min,
    /// max(send, recv).
    Max,
    /// (send + recv) / 2 (integer division, as Dimemas).
    Mean,
    /// 2 max(send, recv).
    TwoMax,
    /// send + recv.
    SPlusR,
}

impl GopSize {
    fn from_word(w: &str) -> Option<Self> {
        match w {
            "MIN" => Some(Self::Min),
            "MAX" => Some(Self::Max),
            "MEAN" => Some(Self::Mean),
            "2MAX" => Some(Self::TwoMax),
            "S+R" => Some(Self::SPlusR),
            _ => None,
        }
    }
}

/// The model of one collective: FAN_IN and FAN_OUT phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectiveDef {
    /// FAN_IN model.
    pub model_in: GopModel,
    /// FAN_IN size.
    pub size_in: GopSize,
    /// FAN_OUT model.
    pub model_out: GopModel,
    /// FAN_OUT size.
    pub size_out: GopSize,
}

/// A parsed collectives definition file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectivesFile {
    /// (machine id, glop id, definition) from `Machine globalop:` and legacy lines
    /// (legacy lines are stored with machine `None`: all machines).
    pub machine: Vec<(Option<i64>, u32, CollectiveDef)>,
    /// `External globalop:` definitions (WAN level).
    pub external: Vec<(u32, CollectiveDef)>,
    /// Flight times per source machine, seconds.
    pub flight_times: Vec<(i64, Vec<f64>)>,
}

impl CollectivesFile {
    /// The definition of `glop` on `machine`, if the file gives one (last one wins).
    pub fn lookup(&self, machine: i64, glop: u32) -> Option<CollectiveDef> {
        self.machine
            .iter()
            .rev()
            .find(|(m, g, _)| *g == glop && m.is_none_or(|m| m == machine))
            .map(|(_, _, d)| *d)
    }

    /// Reads the file at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read(path).map_err(|e| FormatError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Parses the text of a collectives definition file.
    pub fn parse(path: &Path, text: &[u8]) -> Result<Self> {
        let text = String::from_utf8_lossy(text);
        let mut out = Self::default();
        for (i, raw) in text.lines().enumerate() {
            let lineno = i as u64 + 1;
            let line = raw.trim();
            let bad = |col: usize, field: &str, msg: String| {
                FormatError::malformed(path, field, Position::LineCol(lineno, col as u64 + 1), msg)
            };
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let def = |w: &[&str], col: usize| -> Result<CollectiveDef> {
                let get = |k: usize| w.get(k).copied().unwrap_or("");
                Ok(CollectiveDef {
                    model_in: GopModel::from_word(get(0)).ok_or_else(|| {
                        bad(
                            col,
                            "MODEL_IN",
                            format!("unknown model '{}' (0, CTE, LIN, LOG)", get(0)),
                        )
                    })?,
                    size_in: GopSize::from_word(get(1)).ok_or_else(|| {
                        bad(
                            col,
                            "SIZE_IN",
                            format!("unknown size '{}' (MIN, MAX, MEAN, 2MAX, S+R)", get(1)),
                        )
                    })?,
                    model_out: GopModel::from_word(get(2)).ok_or_else(|| {
                        bad(
                            col,
                            "MODEL_OUT",
                            format!("unknown model '{}' (0, CTE, LIN, LOG)", get(2)),
                        )
                    })?,
                    size_out: GopSize::from_word(get(3)).ok_or_else(|| {
                        bad(
                            col,
                            "SIZE_OUT",
                            format!("unknown size '{}' (MIN, MAX, MEAN, 2MAX, S+R)", get(3)),
                        )
                    })?,
                })
            };
            let int = |w: Option<&&str>, field: &str| -> Result<i64> {
                w.and_then(|s| parse_i64(s.as_bytes()))
                    .ok_or_else(|| bad(0, field, "expected an integer".into()))
            };
            let glop_id = |v: i64| -> Result<u32> {
                u32::try_from(v)
                    .ok()
                    .filter(|&g| g <= 31)
                    .ok_or_else(|| bad(0, "glop_id", format!("collective id {v} out of 0..=31")))
            };
            if line.starts_with("Machine globalop:") {
                let m = int(words.get(2), "machine_id")?;
                let g = glop_id(int(words.get(3), "glop_id")?)?;
                let d = def(words.get(4..).unwrap_or(&[]), 0)?;
                out.machine.push((Some(m), g, d));
            } else if line.starts_with("External globalop:") {
                let g = glop_id(int(words.get(2), "glop_id")?)?;
                let d = def(words.get(3..).unwrap_or(&[]), 0)?;
                out.external.push((g, d));
            } else if line.starts_with("Flight time:") {
                let m = int(words.get(2), "machine_id")?;
                let mut v = Vec::new();
                for w in words.get(3..).unwrap_or(&[]) {
                    v.push(
                        parse_f64(w.as_bytes())
                            .ok_or_else(|| bad(0, "flight_time", format!("not a number: '{w}'")))?,
                    );
                }
                out.flight_times.push((m, v));
            } else if line.starts_with("Policy:") || line.starts_with("Machine policy:") {
                if !line.ends_with("FIFO") {
                    return Err(bad(
                        0,
                        "policy",
                        "only the FIFO communication policy is supported".into(),
                    ));
                }
            } else if line.starts_with("Quantum size") {
                // Only meaningful for RR/BOOST policies, which are rejected above.
            } else if words.len() == 6
                && parse_i64(words.first().unwrap_or(&"").as_bytes()).is_some()
            {
                // Legacy line: <glop> <MI> <SI> <MO> <SO> <contention>, all machines.
                let g = glop_id(int(words.first(), "glop_id")?)?;
                let d = def(words.get(1..5).unwrap_or(&[]), 0)?;
                out.machine.push((None, g, d));
                out.external.push((g, d));
            } else {
                return Err(bad(
                    0,
                    "line",
                    format!("unrecognised collectives definition line: '{line}'"),
                ));
            }
        }
        Ok(out)
    }
}

/// Per-node parameters (`"multi node information"` / `"node information"`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// Machine the nodes belong to.
    pub machine: i64,
    /// How many nodes share this configuration.
    pub count: u32,
    /// Processors per node.
    pub processors: u32,
    /// CPU ratio: bursts are divided by it (negative = fixed durations).
    pub cpu_ratio: f64,
    /// Intra-node latency (s).
    pub intra_latency: f64,
    /// Intra-node bandwidth (MB/s, 0 = instantaneous).
    pub intra_bandwidth: f64,
    /// Intra-node buses (0 = unlimited).
    pub intra_buses: u32,
    /// Intra-node input links per task (0 = unlimited).
    pub intra_in_links: u32,
    /// Intra-node output links per task (0 = unlimited).
    pub intra_out_links: u32,
    /// Inter-node latency L (s).
    pub inter_latency: f64,
    /// Inter-node input links per node (0 = unlimited).
    pub in_links: u32,
    /// Inter-node output links per node (0 = unlimited).
    pub out_links: u32,
    /// WAN latency (s).
    pub wan_latency: f64,
}

/// Per-machine parameters (`"environment information"`).
#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    /// Machine id.
    pub id: i64,
    /// Number of nodes.
    pub nodes: u32,
    /// Inter-node bandwidth (MB/s, 0 = instantaneous).
    pub bandwidth: f64,
    /// Network-wide buses (0 = unlimited).
    pub buses: u32,
    /// Default collective model.
    pub gop_model: GopModel,
}

/// How tasks are placed on nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapping {
    /// `"mapping information"`: node of each task.
    Explicit(Vec<u32>),
    /// `"<k> TASKS_PER_NODE"`.
    TasksPerNode(u32),
    /// `"FILL_NODES"`: as many tasks per node as it has processors.
    FillNodes,
    /// `"INTERLEAVED"`: round-robin over nodes.
    Interleaved,
}

/// A parsed `.cfg` file.
#[derive(Debug, Clone, PartialEq)]
pub struct DimConfig {
    /// Where it was read from (relative file names resolve against its directory).
    pub path: PathBuf,
    /// WAN bandwidth (MB/s).
    pub wan_bandwidth: f64,
    /// Number of machines.
    pub machines: u32,
    /// One per machine.
    pub environments: Vec<Environment>,
    /// Node groups, in file order.
    pub nodes: Vec<NodeConfig>,
    /// Task placement.
    pub mapping: Mapping,
    /// Collectives definition file (third "configuration files" entry), if any.
    pub collectives_file: Option<String>,
    /// Records that were parsed but are not interpreted.
    pub ignored_records: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Num(f64),
    Array(Vec<Value>),
}

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
    path: &'a Path,
}

impl<'a> Lexer<'a> {
    fn pos(&self) -> Position {
        let before = self.s.get(..self.i).unwrap_or(&[]);
        let line = before.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        let col = before.iter().rev().take_while(|&&b| b != b'\n').count() as u64 + 1;
        Position::LineCol(line, col)
    }
    fn err(&self, field: &str, msg: impl Into<String>) -> FormatError {
        FormatError::malformed(self.path, field, self.pos(), msg)
    }
    fn skip_ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if b.is_ascii_whitespace() {
                self.i += 1;
            } else if b == b'/' && self.s.get(self.i + 1) == Some(&b'*') {
                // C comment
                self.i += 2;
                while self.i < self.s.len()
                    && !(self.s.get(self.i) == Some(&b'*') && self.s.get(self.i + 1) == Some(&b'/'))
                {
                    self.i += 1;
                }
                self.i = (self.i + 2).min(self.s.len());
            } else {
                break;
            }
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn expect(&mut self, c: u8, field: &str) -> Result<()> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(field, format!("expected '{}'", c as char)))
        }
    }
    fn string(&mut self, field: &str) -> Result<String> {
        self.expect(b'"', field)?;
        let start = self.i;
        while let Some(b) = self.peek() {
            if b == b'"' {
                let s =
                    String::from_utf8_lossy(self.s.get(start..self.i).unwrap_or(&[])).into_owned();
                self.i += 1;
                return Ok(s);
            }
            if b == b'\n' {
                break;
            }
            self.i += 1;
        }
        Err(self.err(field, "unterminated string"))
    }
    fn value(&mut self, field: &str, depth: u32) -> Result<Value> {
        self.skip_ws();
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.string(field)?)),
            Some(b'[') if depth == 0 => {
                self.i += 1;
                self.skip_ws();
                let start = self.i;
                while self.peek().is_some_and(|b| b != b']') {
                    self.i += 1;
                }
                let n = parse_i64(self.s.get(start..self.i).unwrap_or(&[]))
                    .filter(|&n| (0..=MAX_ARRAY).contains(&n))
                    .ok_or_else(|| self.err(field, "bad array length"))?;
                self.expect(b']', field)?;
                self.expect(b'{', field)?;
                let mut items = Vec::new();
                self.skip_ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                } else {
                    loop {
                        items.push(self.value(field, depth + 1)?);
                        if items.len() as i64 > n {
                            return Err(self
                                .err(field, format!("array longer than its declared length {n}")));
                        }
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                break;
                            }
                            _ => return Err(self.err(field, "expected ',' or '}' in array")),
                        }
                    }
                }
                if items.len() as i64 != n {
                    return Err(self.err(
                        field,
                        format!("array declares {n} values but has {}", items.len()),
                    ));
                }
                Ok(Value::Array(items))
            }
            _ => {
                let start = self.i;
                while self
                    .peek()
                    .is_some_and(|b| !matches!(b, b',' | b'}' | b'\n') && !b.is_ascii_whitespace())
                {
                    self.i += 1;
                }
                let tok = self.s.get(start..self.i).unwrap_or(&[]);
                parse_f64(tok).map(Value::Num).ok_or_else(|| {
                    self.err(
                        field,
                        format!(
                            "expected a number, found '{}'",
                            String::from_utf8_lossy(tok)
                        ),
                    )
                })
            }
        }
    }
}

fn num(v: Option<&Value>, field: &str, path: &Path, at: &Position) -> Result<f64> {
    match v {
        Some(Value::Num(n)) => Ok(*n),
        _ => Err(FormatError::malformed(
            path,
            field,
            at.clone(),
            "expected a number",
        )),
    }
}
fn uint(v: Option<&Value>, field: &str, path: &Path, at: &Position) -> Result<u32> {
    let n = num(v, field, path, at)?;
    if n < 0.0 || n.fract() != 0.0 || n > f64::from(u32::MAX) {
        return Err(FormatError::malformed(
            path,
            field,
            at.clone(),
            format!("expected a non-negative integer, found {n}"),
        ));
    }
    Ok(n as u32)
}
fn string(v: Option<&Value>, field: &str, path: &Path, at: &Position) -> Result<String> {
    match v {
        Some(Value::Str(s)) => Ok(s.clone()),
        _ => Err(FormatError::malformed(
            path,
            field,
            at.clone(),
            "expected a string",
        )),
    }
}

impl DimConfig {
    /// Reads a `.cfg` file.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read(path).map_err(|e| FormatError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Parses the text of a `.cfg` file.
    pub fn parse(path: &Path, text: &[u8]) -> Result<Self> {
        let mut lx = Lexer {
            s: text,
            i: 0,
            path,
        };
        lx.skip_ws();
        if !text
            .get(lx.i..)
            .is_some_and(|r| r.starts_with(b"#DIMEMAS_CONFIGURATION"))
        {
            return Err(lx.err("header", "expected '#DIMEMAS_CONFIGURATION'"));
        }
        lx.i += "#DIMEMAS_CONFIGURATION".len();
        let mut cfg = DimConfig {
            path: path.to_path_buf(),
            wan_bandwidth: 0.0,
            machines: 1,
            environments: Vec::new(),
            nodes: Vec::new(),
            mapping: Mapping::TasksPerNode(1),
            collectives_file: None,
            ignored_records: Vec::new(),
        };
        loop {
            lx.skip_ws();
            if lx.peek().is_none() {
                break;
            }
            let at = lx.pos();
            let name = lx.string("record name")?;
            lx.expect(b'{', &name)?;
            let mut vals = Vec::new();
            lx.skip_ws();
            if lx.peek() == Some(b'}') {
                lx.i += 1;
            } else {
                loop {
                    vals.push(lx.value(&name, 0)?);
                    if vals.len() > 64 {
                        return Err(lx.err(&name, "too many fields"));
                    }
                    lx.skip_ws();
                    match lx.peek() {
                        Some(b',') => lx.i += 1,
                        Some(b'}') => {
                            lx.i += 1;
                            break;
                        }
                        _ => return Err(lx.err(&name, "expected ',' or '}'")),
                    }
                }
            }
            lx.expect(b';', &name)?;
            if lx.peek() == Some(b';') {
                lx.i += 1;
            }
            cfg.apply(&name, &vals, &at)?;
        }
        if cfg.environments.is_empty() {
            return Err(FormatError::malformed(
                path,
                "environment information",
                Position::None,
                "no environment record",
            ));
        }
        if cfg.nodes.is_empty() {
            return Err(FormatError::malformed(
                path,
                "node information",
                Position::None,
                "no node record",
            ));
        }
        Ok(cfg)
    }

    fn apply(&mut self, name: &str, v: &[Value], at: &Position) -> Result<()> {
        let p = self.path.clone();
        let p = p.as_path();
        match name {
            "wide area network information" => {
                self.machines = uint(v.get(1), "wan.machines", p, at)?.max(1);
                self.wan_bandwidth = num(v.get(5), "wan.bandwidth", p, at)?;
            }
            "environment information" => {
                let gop = num(v.get(6), "environment.gop_model", p, at)?;
                self.environments.push(Environment {
                    id: num(v.get(1), "environment.machine_id", p, at)? as i64,
                    nodes: uint(v.get(3), "environment.nodes", p, at)?,
                    bandwidth: num(v.get(4), "environment.bandwidth", p, at)?,
                    buses: uint(v.get(5), "environment.buses", p, at)?,
                    gop_model: GopModel::from_env(gop as i64).ok_or_else(|| {
                        FormatError::malformed(
                            p,
                            "environment.gop_model",
                            at.clone(),
                            format!("model {gop} is not 0..=3"),
                        )
                    })?,
                });
            }
            "multi node information" | "node information" => {
                // "node information" describes one node and has no count field.
                let (k, count) = if name == "multi node information" {
                    (1usize, uint(v.get(1), "node.count", p, at)?)
                } else {
                    (0usize, 1)
                };
                let f = |i: usize| v.get(i + k);
                self.nodes.push(NodeConfig {
                    machine: num(v.first(), "node.machine_id", p, at)? as i64,
                    count,
                    processors: uint(f(2), "node.processors", p, at)?,
                    cpu_ratio: num(f(3), "node.cpu_ratio", p, at)?,
                    intra_latency: num(f(4), "node.intra_latency", p, at)?,
                    intra_bandwidth: num(f(5), "node.intra_bandwidth", p, at)?,
                    intra_buses: uint(f(6), "node.intra_buses", p, at)?,
                    intra_in_links: uint(f(7), "node.intra_in_links", p, at)?,
                    intra_out_links: uint(f(8), "node.intra_out_links", p, at)?,
                    inter_latency: num(f(9), "node.inter_latency", p, at)?,
                    in_links: uint(f(10), "node.in_links", p, at)?,
                    out_links: uint(f(11), "node.out_links", p, at)?,
                    wan_latency: num(f(12), "node.wan_latency", p, at).unwrap_or(0.0),
                });
            }
            "mapping information" => {
                let mut nodes = Vec::new();
                match v.get(2) {
                    Some(Value::Array(items)) => {
                        for it in items {
                            nodes.push(uint(Some(it), "mapping.node", p, at)?);
                        }
                    }
                    _ => {
                        return Err(FormatError::malformed(
                            p,
                            "mapping.nodes",
                            at.clone(),
                            "expected an array of nodes",
                        ));
                    }
                }
                self.mapping = Mapping::Explicit(nodes);
            }
            "predefined mapping information" => {
                let s = string(v.first(), "predefined mapping", p, at)?;
                let s = s.trim();
                self.mapping = if s == "FILL_NODES" {
                    Mapping::FillNodes
                } else if s == "INTERLEAVED" {
                    Mapping::Interleaved
                } else if let Some(k) = s.strip_suffix("TASKS_PER_NODE") {
                    let k = parse_i64(k.trim().as_bytes())
                        .and_then(|k| u32::try_from(k).ok())
                        .filter(|&k| k > 0)
                        .ok_or_else(|| {
                            FormatError::malformed(
                                p,
                                "predefined mapping",
                                at.clone(),
                                format!("bad tasks per node in '{s}'"),
                            )
                        })?;
                    Mapping::TasksPerNode(k)
                } else {
                    return Err(FormatError::malformed(
                        p,
                        "predefined mapping",
                        at.clone(),
                        format!("unknown mapping '{s}'"),
                    ));
                };
            }
            "configuration files" => {
                let f = string(v.get(2), "configuration files.communications", p, at)?;
                self.collectives_file = (!f.is_empty()).then_some(f);
            }
            other => self.ignored_records.push(other.to_string()),
        }
        Ok(())
    }

    /// The collectives definition file, resolved against the configuration's directory.
    pub fn collectives_path(&self) -> Option<PathBuf> {
        let f = self.collectives_file.as_ref()?;
        let p = Path::new(f);
        Some(if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CFG: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay/dimemas/configs"
    );

    #[test]
    fn reads_the_reference_configurations() {
        let c = DimConfig::read(format!("{CFG}/c5_buses2_links2.cfg")).expect("c5");
        assert_eq!(c.environments.len(), 1);
        let e = &c.environments[0];
        assert_eq!(
            (e.nodes, e.bandwidth, e.buses, e.gop_model),
            (1024, 1000.0, 2, GopModel::Log)
        );
        let n = &c.nodes[0];
        assert_eq!((n.count, n.processors, n.cpu_ratio), (1024, 1, 1.0));
        assert_eq!(
            (n.intra_latency, n.intra_bandwidth, n.inter_latency),
            (1e-6, 10000.0, 5e-6)
        );
        assert_eq!(
            (n.in_links, n.out_links, n.intra_in_links, n.intra_out_links),
            (2, 2, 1, 1)
        );
        assert_eq!(c.mapping, Mapping::TasksPerNode(1));
        assert_eq!(c.collectives_file, None);
        let c6 = DimConfig::read(format!("{CFG}/c6_ppn4.cfg")).expect("c6");
        assert_eq!(c6.mapping, Mapping::TasksPerNode(4));
        let c7 = DimConfig::read(format!("{CFG}/c7_gopLIN.cfg")).expect("c7");
        assert_eq!(c7.environments[0].gop_model, GopModel::Lin);
        let c8 = DimConfig::read(format!("{CFG}/c8_gopfile_MAX.cfg")).expect("c8");
        let f = CollectivesFile::read(c8.collectives_path().expect("file")).expect("collectives");
        let max_log = CollectiveDef {
            model_in: GopModel::Log,
            size_in: GopSize::Max,
            model_out: GopModel::Log,
            size_out: GopSize::Max,
        };
        assert_eq!(f.lookup(0, 1), Some(max_log));
        assert_eq!(f.lookup(0, 8).map(|d| d.model_in), Some(GopModel::Lin));
        assert_eq!(f.lookup(0, 10).map(|d| d.model_out), Some(GopModel::Zero));
        assert_eq!(f.lookup(0, 2), None);
    }

    #[test]
    fn errors_have_line_and_column() {
        let p = Path::new("x.cfg");
        let e = DimConfig::parse(p, b"#DIMEMAS_CONFIGURATION\n\"environment information\" {\"\", 0, \"\", 4, abc, 0, 3};;\n")
            .expect_err("bad number")
            .to_string();
        assert!(e.contains("line 2") && e.contains("abc"), "{e}");
        let e = DimConfig::parse(p, b"nope")
            .expect_err("header")
            .to_string();
        assert!(e.contains("#DIMEMAS_CONFIGURATION"), "{e}");
        let e = CollectivesFile::parse(p, b"Machine globalop: 0 1 LOG HUGE LOG MAX\n")
            .expect_err("size")
            .to_string();
        assert!(e.contains("SIZE_IN") && e.contains("line 1"), "{e}");
        let e = CollectivesFile::parse(p, b"\nPolicy: RR\n")
            .expect_err("policy")
            .to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn arbitrary_text_never_panics(s in "[#\"{}\\[\\];, a-zA-Z0-9.:_+-]{0,200}") {
            let p = Path::new("x.cfg");
            let _ = DimConfig::parse(p, format!("#DIMEMAS_CONFIGURATION\n{s}").as_bytes());
            let _ = DimConfig::parse(p, s.as_bytes());
            let _ = CollectivesFile::parse(p, s.as_bytes());
        }
    }
}
