//! Benchmark catalog definitions: what an agent may run, with which typed
//! parameters, and how the argument vector is built.
//!
//! An agent executes only benchmarks defined in its own catalog file; the
//! coordinator receives the definitions at registration and validates client
//! parameters against them before a run exists. Both sides use
//! [`BenchmarkDef::validate_params`], so a value the coordinator accepted is one
//! the agent accepts. Values become separate arguments of an `execve` argument
//! vector ([`BenchmarkDef::argv`]); nothing is ever passed through a shell.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod lint;
pub use lint::{CHECK_FIGURES, CHECK_PARAMS, is_known_check};

/// Largest number of parameters a request may carry.
pub const MAX_PARAMS: usize = 64;
/// Largest accepted parameter value, in bytes.
pub const MAX_VALUE_LEN: usize = 1024;

/// The type of a benchmark parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    /// A signed 64-bit integer.
    Int,
    /// A finite floating-point number.
    Float,
    /// `true` or `false` (also accepts 1/0, yes/no, on/off).
    Bool,
    /// A byte count: an integer with an optional suffix k, m, g, t (powers of 1024),
    /// `KiB`/`MiB`/... or `KB`/`MB`/... (powers of 1000). Substituted as plain bytes.
    Size,
    /// One of `choices`.
    Choice,
    /// A string of safe characters (`[A-Za-z0-9._,:=+@/-]`, not starting with `-`).
    String,
    /// An absolute path that must lie inside one of the parameter's `within`
    /// roots (directories, or patterns with `*`). The coordinator checks the
    /// literal roots; the agent checks every root again after resolving
    /// symbolic links ([`BenchmarkDef::check_paths`]).
    Path,
}

impl ParamType {
    /// The catalog's (and the protocol's) name of the type.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::Int => "int",
            ParamType::Float => "float",
            ParamType::Bool => "bool",
            ParamType::Size => "size",
            ParamType::Choice => "choice",
            ParamType::String => "string",
            ParamType::Path => "path",
        }
    }

    /// The type named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "int" => ParamType::Int,
            "float" => ParamType::Float,
            "bool" => ParamType::Bool,
            "size" => ParamType::Size,
            "choice" => ParamType::Choice,
            "string" => ParamType::String,
            "path" => ParamType::Path,
            _ => return None,
        })
    }
}

/// One typed parameter of a benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamDef {
    /// Parameter name (`[a-z0-9_]`, used as `{name}` in the command).
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: ParamType,
    /// Default value (as a user would type it); none means the parameter is required
    /// unless `optional` is set.
    #[serde(default)]
    pub default: Option<String>,
    /// The parameter may be absent (its `{name}` must then only appear in `when`
    /// items or `env` values; such a variable is then not set).
    #[serde(default)]
    pub optional: bool,
    /// Inclusive lower bound (int, float, size).
    #[serde(default)]
    pub min: Option<f64>,
    /// Inclusive upper bound (int, float, size).
    #[serde(default)]
    pub max: Option<f64>,
    /// Allowed values (choice).
    #[serde(default)]
    pub choices: Vec<String>,
    /// Path parameters: the directories (or `*` patterns) a value must lie in.
    /// Entries are absolute, or start with a built-in directory placeholder
    /// (`{out_dir}`, `{apps_dir}`, `{scratch_dir}`) that the agent fills in.
    #[serde(default)]
    pub within: Vec<String>,
    /// What it means.
    #[serde(default)]
    pub description: String,
}

/// One element of a command template.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ArgTemplate {
    /// An argument with `{name}` placeholders.
    Arg(String),
    /// Arguments included only when parameter `when` is true (bool) or present.
    When {
        /// The parameter that switches these arguments on.
        when: String,
        /// The arguments (with placeholders).
        args: Vec<String>,
    },
}

/// A string, or a table of exactly `when` and `args` (an unknown key is an
/// error naming it, as `deny_unknown_fields` does for the other tables).
impl<'de> Deserialize<'de> for ArgTemplate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ArgTemplate;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a table { when = \"PARAM\", args = [...] }")
            }
            fn visit_str<E: serde::de::Error>(
                self,
                v: &str,
            ) -> std::result::Result<Self::Value, E> {
                Ok(ArgTemplate::Arg(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                use serde::de::Error as _;
                const FIELDS: &[&str] = &["when", "args"];
                let (mut when, mut args) = (None, None);
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "when" if when.is_none() => when = Some(m.next_value::<String>()?),
                        "args" if args.is_none() => args = Some(m.next_value::<Vec<String>>()?),
                        "when" | "args" => {
                            return Err(A::Error::custom(format!("duplicate field `{k}`")));
                        }
                        _ => return Err(A::Error::unknown_field(&k, FIELDS)),
                    }
                }
                Ok(ArgTemplate::When {
                    when: when.ok_or_else(|| A::Error::missing_field("when"))?,
                    args: args.ok_or_else(|| A::Error::missing_field("args"))?,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A file a benchmark leaves in its output directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputDef {
    /// File name in the output directory (a plain name), or a glob with `*` in the
    /// name part (e.g. `counts.rank*_call*.md`).
    pub file: String,
    /// Format / ingest kind of the file (`linktest`, `ior`, `counts`, `log`, ...).
    pub format: String,
    /// The task fails if no file matches.
    #[serde(default)]
    pub required: bool,
}

/// Launchers a benchmark supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// Direct exec on every selected agent (one task per agent).
    Local,
    /// Open MPI `mpirun` from the first selected agent with the host list of all.
    Mpirun,
    /// Slurm `srun`.
    Srun,
    /// Slurm batch mode: the task is submitted with `sbatch` and followed
    /// until it ends (docs/slurm.md).
    Sbatch,
}

impl LauncherKind {
    /// Every launcher, in the order messages list them.
    pub const ALL: [LauncherKind; 4] = [Self::Local, Self::Mpirun, Self::Srun, Self::Sbatch];

    /// The names of every launcher, comma-separated (for messages).
    pub fn known() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }

    /// Lower-case name (also the catalog's and the protocol's string form).
    pub fn as_str(self) -> &'static str {
        match self {
            LauncherKind::Local => "local",
            LauncherKind::Mpirun => "mpirun",
            LauncherKind::Srun => "srun",
            LauncherKind::Sbatch => "sbatch",
        }
    }
    /// Whether Slurm starts the task (`srun`, `sbatch`): the run's Slurm
    /// options apply and Slurm, not the node selector, picks compute nodes.
    pub fn is_slurm(self) -> bool {
        matches!(self, LauncherKind::Srun | LauncherKind::Sbatch)
    }
    /// Parses a name (any case).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
    }
}

fn default_launchers() -> Vec<LauncherKind> {
    vec![LauncherKind::Local]
}
fn default_timeout() -> u64 {
    3600
}

/// A benchmark of an agent's catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkDef {
    /// Catalog name (`[a-z0-9_-]`), what specs refer to.
    pub name: String,
    /// Kind (io, linktest, netprobe, counts, traced, noop, ...): what the run is about.
    pub kind: String,
    /// One line for `benchlake` listings.
    #[serde(default)]
    pub description: String,
    /// The argument vector template; the first element is the program.
    pub command: Vec<ArgTemplate>,
    /// Typed parameters.
    #[serde(default, rename = "param")]
    pub params: Vec<ParamDef>,
    /// Declared output files.
    #[serde(default, rename = "output")]
    pub outputs: Vec<OutputDef>,
    /// Default timeout in seconds (a spec may ask for less, never more than `max_timeout_s`).
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    /// Upper bound of a spec's timeout (0 = `timeout_s`).
    #[serde(default)]
    pub max_timeout_s: u64,
    /// Launchers this benchmark supports; the first is the default.
    #[serde(default = "default_launchers")]
    pub launchers: Vec<LauncherKind>,
    /// Environment variables set for the process (values may hold placeholders).
    /// A variable whose value names an optional parameter that is absent is not
    /// set (e.g. an MPI-IO hint the run did not ask for).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// String parameters holding `key=value[,key=value…]` lists that become one
    /// environment variable `<prefix><key>=<value>` per pair (IOR's
    /// `IOR_HINT__MPI__<key>` MPI-IO hints).
    #[serde(default, rename = "env_list")]
    pub env_lists: Vec<EnvList>,
    /// File (a plain name in the output directory) that receives the program's
    /// stdout instead of `stdout.txt` (tools that print their results, e.g.
    /// mdtest). Declare it as an output too to upload it with its format.
    #[serde(default)]
    pub stdout: Option<String>,
    /// The user the benchmark runs as. An agent running as root switches to
    /// this user before `exec` (its `--run-as` gives the default for entries
    /// without one); it refuses to run an entry as root unless the entry or the
    /// agent's configuration says `root`.
    #[serde(default)]
    pub run_as: Option<String>,
    /// Slurm options the `srun` launcher uses where the run's spec leaves
    /// them unset (`[benchmark.slurm]`: partition, time_limit_min, …;
    /// docs/slurm.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<crate::slurm::SlurmOptions>,
}

/// A string parameter expanded into environment variables (see
/// [`BenchmarkDef::env_lists`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvList {
    /// The string parameter holding `key=value,key=value`.
    pub param: String,
    /// Prefix of every variable name (`[A-Za-z0-9_]`).
    pub prefix: String,
}

/// What the coordinator knows of a benchmark (sent by agents at registration):
/// everything but the command, enough to validate a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkInfo {
    /// Catalog name.
    pub name: String,
    /// Kind.
    pub kind: String,
    /// One line.
    #[serde(default)]
    pub description: String,
    /// Typed parameters.
    #[serde(default)]
    pub params: Vec<ParamDef>,
    /// Declared outputs.
    #[serde(default)]
    pub outputs: Vec<OutputDef>,
    /// Default timeout (s).
    pub timeout_s: u64,
    /// Timeout cap (0 = `timeout_s`).
    #[serde(default)]
    pub max_timeout_s: u64,
    /// Supported launchers, default first.
    pub launchers: Vec<LauncherKind>,
    /// The user the offering agent runs it as (the entry's `run_as`, else
    /// the agent's `--run-as`); None: the agent's own user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
}

/// A catalog file: `[[benchmark]]` tables.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// The benchmarks.
    #[serde(default, rename = "benchmark")]
    pub benchmarks: Vec<BenchmarkDef>,
}

/// Built-in placeholders filled by the agent, not by clients.
pub const BUILTINS: &[&str] = &[
    "out_dir",
    "rank",
    "num_tasks",
    "hosts",
    "run_id",
    "task_id",
    "np",
    "agent",
    "self_exe",
    // Comma-separated advertised addresses of the run's agents, in rank order
    // (netprobe's rendezvous: rank 0's is where the others find it).
    "addresses",
    "tracer_lib",
    // Directories an agent declares (`--apps-dir`, `--scratch-dir`), usable as
    // roots of path parameters.
    "apps_dir",
    "scratch_dir",
];

/// Built-ins that may start a `within` root of a path parameter.
pub const DIR_BUILTINS: &[&str] = &["out_dir", "apps_dir", "scratch_dir"];

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn env_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Characters allowed in a `string` parameter value.
fn safe_string(v: &str) -> bool {
    !v.is_empty()
        && !v.starts_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._,:=+@/-".contains(&b))
        && !v.split('/').any(|c| c == "..")
}

/// Parses a size with an optional unit suffix into bytes.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mul: u64 = match unit.trim() {
        "" | "b" | "B" => 1,
        "k" | "K" | "KiB" | "kib" => 1 << 10,
        "m" | "M" | "MiB" | "mib" => 1 << 20,
        "g" | "G" | "GiB" | "gib" => 1 << 30,
        "t" | "T" | "TiB" | "tib" => 1 << 40,
        "KB" | "kB" | "kb" => 1_000,
        "MB" | "mb" => 1_000_000,
        "GB" | "gb" => 1_000_000_000,
        "TB" | "tb" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(mul)
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl ParamDef {
    /// Checks `value` and returns its canonical form (sizes in bytes, bools as
    /// `true`/`false`). `field` names the parameter in errors (e.g. `spec.params.size`).
    pub fn canonical(&self, value: &str, field: &str) -> std::result::Result<String, String> {
        if value.len() > MAX_VALUE_LEN {
            return Err(format!("{field}: value longer than {MAX_VALUE_LEN} bytes"));
        }
        let bounds = |x: f64| -> std::result::Result<(), String> {
            if let Some(min) = self.min
                && x < min
            {
                return Err(format!("{field}: {value} is below the minimum {min}"));
            }
            if let Some(max) = self.max
                && x > max
            {
                return Err(format!("{field}: {value} is above the maximum {max}"));
            }
            Ok(())
        };
        match self.ty {
            ParamType::Int => {
                let x: i64 = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("{field}: '{value}' is not an integer"))?;
                bounds(x as f64)?;
                Ok(x.to_string())
            }
            ParamType::Float => {
                let x: f64 = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite())
                    .ok_or_else(|| format!("{field}: '{value}' is not a number"))?;
                bounds(x)?;
                Ok(x.to_string())
            }
            ParamType::Bool => parse_bool(value)
                .map(|b| b.to_string())
                .ok_or_else(|| format!("{field}: '{value}' is not a boolean (true/false)")),
            ParamType::Size => {
                let x = parse_size(value).ok_or_else(|| {
                    format!("{field}: '{value}' is not a size (e.g. 4096, 64k, 1MiB, 2GB)")
                })?;
                bounds(x as f64)?;
                Ok(x.to_string())
            }
            ParamType::Choice => {
                if self.choices.iter().any(|c| c == value) {
                    Ok(value.to_string())
                } else {
                    Err(format!(
                        "{field}: '{value}' is not one of {}",
                        self.choices.join(", ")
                    ))
                }
            }
            ParamType::Path => {
                let norm = normalize_path(value).ok_or_else(|| {
                    format!(
                        "{field}: '{value}' is not an absolute path of [A-Za-z0-9._,:=+@/-] without '..'"
                    )
                })?;
                // Roots naming a built-in are known only to the agent, which
                // checks them (and symbolic links) before the run starts.
                if self.within.iter().all(|r| !r.contains('{'))
                    && !self.within.iter().any(|r| path_within(&norm, r))
                {
                    return Err(outside(field, value, &self.within));
                }
                Ok(norm)
            }
            ParamType::String => {
                if safe_string(value) {
                    Ok(value.to_string())
                } else {
                    Err(format!(
                        "{field}: '{value}' may only hold [A-Za-z0-9._,:=+@/-], must not start with '-' or contain '..'"
                    ))
                }
            }
        }
    }
}

fn outside(field: &str, value: &str, within: &[String]) -> String {
    format!(
        "{field}: '{value}' is outside the directories this benchmark allows ({})",
        within.join(", ")
    )
}

/// An absolute path in canonical form (no `.` or empty components, no
/// trailing `/`), or None when it is relative, holds characters outside
/// `[A-Za-z0-9._,:=+@/-]` or a `..` component, or a component starts with `-`.
pub fn normalize_path(v: &str) -> Option<String> {
    if !v.starts_with('/') || v.len() > MAX_VALUE_LEN {
        return None;
    }
    if !v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._,:=+@/-".contains(&b))
    {
        return None;
    }
    let mut out = String::with_capacity(v.len());
    for c in v.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c if c.starts_with('-') => return None,
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// Whether the canonical path `p` lies in `root`: the directory itself or
/// below it, or (a root holding `*`) a path the pattern matches, where `*`
/// matches within one path component.
pub fn path_within(p: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    if root.contains('*') {
        return glob_component(root.as_bytes(), p.as_bytes());
    }
    if root.is_empty() {
        // `/`: everything. Allowed, but the admin said so explicitly.
        return true;
    }
    p == root || (p.starts_with(root) && p.as_bytes().get(root.len()) == Some(&b'/'))
}

fn glob_component(pat: &[u8], s: &[u8]) -> bool {
    match pat.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => {
            // `*` never crosses a `/`.
            let mut i = 0;
            loop {
                if glob_component(rest, &s[i..]) {
                    return true;
                }
                if i >= s.len() || s[i] == b'/' {
                    return false;
                }
                i += 1;
            }
        }
        Some((c, rest)) => s.first() == Some(c) && glob_component(rest, &s[1..]),
    }
}

/// Every `{name}` placeholder in a template string (`{{` and `}}` are literal braces).
pub fn placeholders(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|x| x.1) == Some('{') => {
                chars.next();
            }
            '}' if chars.peek().map(|x| x.1) == Some('}') => {
                chars.next();
            }
            '{' => {
                let rest = &s[i + 1..];
                let end = rest
                    .find('}')
                    .ok_or_else(|| format!("unclosed '{{' in '{s}'"))?;
                out.push(rest[..end].to_string());
                for _ in 0..=end {
                    chars.next();
                }
            }
            '}' => return Err(format!("unmatched '}}' in '{s}'")),
            _ => {}
        }
    }
    Ok(out)
}

/// Replaces placeholders in `s` with `values`.
pub fn substitute(
    s: &str,
    values: &BTreeMap<String, String>,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|x| x.1) == Some('{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek().map(|x| x.1) == Some('}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let rest = &s[i + 1..];
                let end = rest
                    .find('}')
                    .ok_or_else(|| format!("unclosed '{{' in '{s}'"))?;
                let name = &rest[..end];
                let v = values
                    .get(name)
                    .ok_or_else(|| format!("no value for '{{{name}}}'"))?;
                out.push_str(v);
                for _ in 0..=end {
                    chars.next();
                }
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

impl BenchmarkDef {
    /// Checks the definition itself (names, placeholders, defaults, bounds).
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Error::invalid("catalog", format!("benchmark '{}': {m}", self.name));
        if !is_ident(&self.name) {
            return Err(bad("name must be 1-64 characters of [a-z0-9_-]".into()));
        }
        if !is_ident(&self.kind) {
            return Err(bad("kind must be 1-64 characters of [a-z0-9_-]".into()));
        }
        if self.command.is_empty() || !matches!(self.command.first(), Some(ArgTemplate::Arg(_))) {
            return Err(bad("command must start with the program".into()));
        }
        if let Some(o) = &self.slurm {
            o.validate("slurm.").map_err(|e| bad(e.to_string()))?;
        }
        if self.launchers.is_empty() {
            return Err(bad("launchers must not be empty".into()));
        }
        let mut names = std::collections::HashSet::new();
        for p in &self.params {
            // `np` may be declared: the parameter then sets the process count.
            if !is_ident(&p.name) || (BUILTINS.contains(&p.name.as_str()) && p.name != "np") {
                return Err(bad(format!(
                    "parameter name '{}' is invalid or reserved",
                    p.name
                )));
            }
            if !names.insert(p.name.as_str()) {
                return Err(bad(format!("parameter '{}' twice", p.name)));
            }
            if p.ty == ParamType::Path {
                if p.within.is_empty() {
                    return Err(bad(format!(
                        "path parameter '{}' must declare `within` (the directories its values may name)",
                        p.name
                    )));
                }
                for r in &p.within {
                    let ok = match r.strip_prefix('{') {
                        Some(rest) => DIR_BUILTINS
                            .iter()
                            .any(|b| rest.strip_prefix(b).is_some_and(|t| t.starts_with('}'))),
                        None => r.starts_with('/'),
                    };
                    if !ok || r.contains("..") {
                        return Err(bad(format!(
                            "parameter '{}': within entry '{r}' must be an absolute directory or start with one of {{{}}}",
                            p.name,
                            DIR_BUILTINS.join("}, {")
                        )));
                    }
                }
            } else if !p.within.is_empty() {
                return Err(bad(format!(
                    "parameter '{}': `within` is only for path parameters",
                    p.name
                )));
            }
            if p.ty == ParamType::Choice && p.choices.is_empty() {
                return Err(bad(format!("choice parameter '{}' has no choices", p.name)));
            }
            if let Some(d) = &p.default {
                p.canonical(d, &format!("default of {}", p.name))
                    .map_err(bad)?;
            }
        }
        let known = |n: &str| names.contains(n) || BUILTINS.contains(&n);
        let check_str = |s: &str| -> Result<()> {
            for ph in placeholders(s).map_err(bad)? {
                if !known(&ph) {
                    return Err(bad(format!("unknown placeholder '{{{ph}}}'")));
                }
            }
            Ok(())
        };
        for a in &self.command {
            match a {
                ArgTemplate::Arg(s) => check_str(s)?,
                ArgTemplate::When { when, args } => {
                    if !names.contains(when.as_str()) {
                        return Err(bad(format!("'when' names unknown parameter '{when}'")));
                    }
                    for s in args {
                        check_str(s)?;
                    }
                }
            }
        }
        for v in self.env.values() {
            check_str(v)?;
        }
        for o in &self.outputs {
            let plain = o.file.replace('*', "x");
            crate::layout::validate_name("output file", &plain).map_err(|e| bad(e.to_string()))?;
        }
        for l in &self.env_lists {
            let Some(p) = self.params.iter().find(|p| p.name == l.param) else {
                return Err(bad(format!(
                    "env_list names unknown parameter '{}'",
                    l.param
                )));
            };
            if p.ty != ParamType::String {
                return Err(bad(format!(
                    "env_list parameter '{}' must be of type string",
                    l.param
                )));
            }
            if l.prefix.is_empty() || !l.prefix.bytes().all(env_name_byte) {
                return Err(bad(format!(
                    "env_list prefix '{}' must be [A-Za-z0-9_]",
                    l.prefix
                )));
            }
        }
        if let Some(u) = &self.run_as
            && (u.is_empty()
                || u.len() > 32
                || !u
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)))
        {
            return Err(bad(format!("run_as '{u}' is not a user name")));
        }
        if let Some(f) = &self.stdout {
            crate::layout::validate_name("stdout file", f).map_err(|e| bad(e.to_string()))?;
            if f == "stderr.txt" {
                return Err(bad("stdout must not be stderr.txt".into()));
            }
        }
        lint::lint(self).map_err(bad)
    }

    /// Whether the command or the environment names the built-in `name`.
    pub fn uses_builtin(&self, name: &str) -> bool {
        let has = |s: &str| placeholders(s).is_ok_and(|v| v.iter().any(|p| p == name));
        self.command.iter().any(|a| match a {
            ArgTemplate::Arg(s) => has(s),
            ArgTemplate::When { args, .. } => args.iter().any(|s| has(s)),
        }) || self.env.values().any(|v| has(v))
    }

    /// The program (first command element) with only built-ins substituted;
    /// None when it depends on a client parameter (it cannot be checked ahead).
    pub fn program(&self, builtins: &BTreeMap<String, String>) -> Option<String> {
        match self.command.first() {
            Some(ArgTemplate::Arg(s)) => substitute(s, builtins).ok(),
            _ => None,
        }
    }

    /// The environment of a run: [`BenchmarkDef::env`] substituted (variables
    /// naming an absent optional parameter left out) plus the [`EnvList`]
    /// expansions. Errors name the parameter.
    pub fn environment(
        &self,
        params: &BTreeMap<String, String>,
        builtins: &BTreeMap<String, String>,
    ) -> std::result::Result<BTreeMap<String, String>, String> {
        let mut values = builtins.clone();
        values.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut env = BTreeMap::new();
        for (k, v) in &self.env {
            let absent_optional = placeholders(v)?.iter().any(|ph| {
                !params.contains_key(ph) && self.params.iter().any(|p| &p.name == ph && p.optional)
            });
            if absent_optional {
                continue;
            }
            env.insert(k.clone(), substitute(v, &values)?);
        }
        for l in &self.env_lists {
            let Some(list) = params.get(&l.param) else {
                continue;
            };
            for pair in list.split(',').filter(|p| !p.is_empty()) {
                let (key, value) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("params.{}: '{pair}' is not key=value", l.param))?;
                if key.is_empty() || !key.bytes().all(env_name_byte) || value.is_empty() {
                    return Err(format!(
                        "params.{}: '{pair}' needs a key of [A-Za-z0-9_] and a non-empty value",
                        l.param
                    ));
                }
                env.insert(format!("{}{key}", l.prefix), value.to_string());
            }
        }
        Ok(env)
    }

    /// The argument vector for validated `params` plus the built-in values.
    pub fn argv(
        &self,
        params: &BTreeMap<String, String>,
        builtins: &BTreeMap<String, String>,
    ) -> std::result::Result<Vec<String>, String> {
        let mut values = builtins.clone();
        values.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut argv = Vec::new();
        for a in &self.command {
            match a {
                ArgTemplate::Arg(s) => argv.push(substitute(s, &values)?),
                ArgTemplate::When { when, args } => {
                    let on = match params.get(when) {
                        Some(v) => v != "false",
                        None => false,
                    };
                    if on {
                        for s in args {
                            argv.push(substitute(s, &values)?);
                        }
                    }
                }
            }
        }
        Ok(argv)
    }

    /// The agent's check of path parameters: each value (already canonical
    /// from [`BenchmarkDef::validate_params`]) must lie in one of its `within`
    /// roots with the built-ins substituted (empty built-ins drop the root),
    /// both as written and after resolving symbolic links of the value and of
    /// the root, so a link inside an allowed directory cannot lead outside it.
    pub fn check_paths(
        &self,
        params: &BTreeMap<String, String>,
        builtins: &BTreeMap<String, String>,
    ) -> std::result::Result<(), String> {
        for p in self.params.iter().filter(|p| p.ty == ParamType::Path) {
            let Some(v) = params.get(&p.name) else {
                continue;
            };
            let field = format!("params.{}", p.name);
            let mut roots = Vec::new();
            for r in &p.within {
                let r = substitute(r, builtins)?;
                if r.contains('*') {
                    roots.push(r.trim_end_matches('/').to_string());
                } else if let Some(n) = normalize_path(&r) {
                    roots.push(n);
                }
            }
            if !roots.iter().any(|r| path_within(v, r)) {
                return Err(outside(&field, v, &roots));
            }
            let real = resolve_existing(std::path::Path::new(v));
            let real_ok = roots.iter().any(|r| {
                let rr = if r.contains('*') {
                    r.clone()
                } else {
                    resolve_existing(std::path::Path::new(r))
                };
                path_within(&real, &rr)
            });
            if !real_ok {
                return Err(format!(
                    "{field}: '{v}' resolves to '{real}', outside the directories this benchmark allows ({})",
                    roots.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The coordinator's view of this benchmark.
    pub fn info(&self) -> BenchmarkInfo {
        BenchmarkInfo {
            name: self.name.clone(),
            kind: self.kind.clone(),
            description: self.description.clone(),
            params: self.params.clone(),
            outputs: self.outputs.clone(),
            timeout_s: self.timeout_s,
            max_timeout_s: self.max_timeout_s,
            launchers: self.launchers.clone(),
            run_as: self.run_as.clone(),
        }
    }

    /// See [`BenchmarkInfo::effective_timeout`].
    pub fn effective_timeout(&self, requested: u64) -> std::result::Result<u64, String> {
        self.info().effective_timeout(requested)
    }

    /// See [`BenchmarkInfo::validate_params`].
    pub fn validate_params(
        &self,
        params: &BTreeMap<String, String>,
        prefix: &str,
    ) -> std::result::Result<BTreeMap<String, String>, String> {
        validate_params(&self.name, &self.params, params, prefix)
    }
}

impl BenchmarkInfo {
    /// Validates client parameters: unknown names, types and bounds; fills defaults.
    /// Returns the canonical values. Errors name the field as `{prefix}.{param}`.
    pub fn validate_params(
        &self,
        params: &BTreeMap<String, String>,
        prefix: &str,
    ) -> std::result::Result<BTreeMap<String, String>, String> {
        validate_params(&self.name, &self.params, params, prefix)
    }

    /// The effective timeout for a requested one (0 = default), capped by the catalog.
    pub fn effective_timeout(&self, requested: u64) -> std::result::Result<u64, String> {
        let cap = if self.max_timeout_s == 0 {
            self.timeout_s
        } else {
            self.max_timeout_s
        };
        match requested {
            0 => Ok(self.timeout_s),
            t if t <= cap => Ok(t),
            t => Err(format!(
                "spec.timeout_s: {t} is above this benchmark's maximum {cap}"
            )),
        }
    }
}

/// `p` with symbolic links resolved: the longest existing prefix is
/// canonicalised and the rest appended as written.
fn resolve_existing(p: &std::path::Path) -> String {
    let mut rest = Vec::new();
    let mut cur = p;
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out.display().to_string();
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return p.display().to_string(),
        }
    }
}

/// Validates client parameters against `defs`: unknown names, types and bounds;
/// fills defaults. Returns the canonical values. Errors name the field as
/// `{prefix}.{param}`.
pub fn validate_params(
    bench: &str,
    defs: &[ParamDef],
    params: &BTreeMap<String, String>,
    prefix: &str,
) -> std::result::Result<BTreeMap<String, String>, String> {
    if params.len() > MAX_PARAMS {
        return Err(format!("{prefix}: more than {MAX_PARAMS} parameters"));
    }
    for k in params.keys() {
        if !defs.iter().any(|p| &p.name == k) {
            let known: Vec<_> = defs.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "{prefix}.{k}: unknown parameter of benchmark '{}' (known: {})",
                bench,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    let mut out = BTreeMap::new();
    for p in defs {
        let field = format!("{prefix}.{}", p.name);
        match params.get(&p.name).or(p.default.as_ref()) {
            Some(v) => {
                out.insert(p.name.clone(), p.canonical(v, &field)?);
            }
            None if p.optional => {}
            None => return Err(format!("{field}: required parameter is missing")),
        }
    }
    Ok(out)
}

impl Catalog {
    /// Parses and checks a catalog TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let c: Catalog =
            toml::from_str(text).map_err(|e| Error::invalid("catalog", e.to_string()))?;
        if c.benchmarks.is_empty() {
            return Err(Error::invalid(
                "catalog",
                "no [[benchmark]] entries (an agent with an empty catalog can run nothing)",
            ));
        }
        let mut names = std::collections::HashSet::new();
        for b in &c.benchmarks {
            b.check()?;
            if !names.insert(b.name.as_str()) {
                return Err(Error::invalid(
                    "catalog",
                    format!("benchmark '{}' twice", b.name),
                ));
            }
        }
        Ok(c)
    }

    /// A benchmark by name.
    pub fn get(&self, name: &str) -> Option<&BenchmarkDef> {
        self.benchmarks.iter().find(|b| b.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_names_agree_everywhere() {
        for l in LauncherKind::ALL {
            // The catalog (serde) spells a launcher as `as_str` does.
            let json = serde_json::to_string(&l).unwrap();
            assert_eq!(json, format!("\"{}\"", l.as_str()));
            assert_eq!(serde_json::from_str::<LauncherKind>(&json).unwrap(), l);
            assert_eq!(LauncherKind::parse(l.as_str()), Some(l));
            assert_eq!(LauncherKind::parse(&l.as_str().to_uppercase()), Some(l));
        }
        assert_eq!(LauncherKind::parse("slurm"), None);
        assert_eq!(LauncherKind::known(), "local, mpirun, srun, sbatch");
    }

    const CAT: &str = r#"
[[benchmark]]
name = "sleep"
kind = "noop"
command = ["sleep", "{seconds}", { when = "verbose", args = ["-v", "--tag={tag}"] }]
timeout_s = 10
[[benchmark.param]]
name = "seconds"
type = "float"
default = "0.5"
min = 0
max = 60
[[benchmark.param]]
name = "verbose"
type = "bool"
default = "false"
[[benchmark.param]]
name = "tag"
type = "string"
default = "x"
[[benchmark.param]]
name = "size"
type = "size"
default = "1MiB"
max = 1073741824
"#;

    fn p(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn params_are_typed_bounded_and_substituted() {
        let c = Catalog::from_toml(CAT).unwrap();
        let b = c.get("sleep").unwrap();
        let v = b
            .validate_params(&p(&[("seconds", "2")]), "spec.params")
            .unwrap();
        assert_eq!(v["size"], "1048576");
        assert_eq!(b.argv(&v, &BTreeMap::new()).unwrap(), ["sleep", "2"]);
        let v = b
            .validate_params(&p(&[("verbose", "yes"), ("tag", "a.b")]), "spec.params")
            .unwrap();
        assert_eq!(
            b.argv(&v, &BTreeMap::new()).unwrap(),
            ["sleep", "0.5", "-v", "--tag=a.b"]
        );
        let e = b
            .validate_params(&p(&[("seconds", "61")]), "spec.params")
            .unwrap_err();
        assert!(
            e.contains("spec.params.seconds") && e.contains("maximum 60"),
            "{e}"
        );
        let e = b
            .validate_params(&p(&[("nope", "1")]), "spec.params")
            .unwrap_err();
        assert!(e.contains("unknown parameter"), "{e}");
        for bad in ["-rf", "a;b", "$(x)", "../etc", "a b"] {
            assert!(
                b.validate_params(&p(&[("tag", bad)]), "p").is_err(),
                "{bad}"
            );
        }
        assert!(b.validate_params(&p(&[("size", "2GiB")]), "p").is_err());
        assert_eq!(b.effective_timeout(0).unwrap(), 10);
        assert!(b.effective_timeout(11).is_err());
    }

    #[test]
    fn bad_catalogs_are_refused() {
        for bad in [
            CAT.replace("{seconds}", "{secs}"),
            CAT.replace("name = \"sleep\"", "name = \"Sle ep\""),
            CAT.replace("when = \"verbose\"", "when = \"loud\""),
            CAT.replace("default = \"0.5\"", "default = \"99\""),
        ] {
            assert!(Catalog::from_toml(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn environment_skips_absent_optional_params_and_expands_lists() {
        let c = Catalog::from_toml(
            r#"
[[benchmark]]
name = "ior"
kind = "io"
command = ["ior", "-o", "{out_dir}/f"]
stdout = "ior.txt"
env = { IOR_HINT__MPI__striping_factor = "{striping_factor}", FIXED = "a-{out_dir}" }
env_list = [{ param = "hints", prefix = "IOR_HINT__MPI__" }]
[[benchmark.param]]
name = "striping_factor"
type = "int"
optional = true
[[benchmark.param]]
name = "hints"
type = "string"
optional = true
"#,
        )
        .unwrap();
        let b = c.get("ior").unwrap();
        let builtins = p(&[("out_dir", "/o")]);
        let none = b.validate_params(&p(&[]), "params").unwrap();
        assert_eq!(
            b.environment(&none, &builtins).unwrap(),
            p(&[("FIXED", "a-/o")])
        );
        let v = b
            .validate_params(
                &p(&[
                    ("striping_factor", "4"),
                    ("hints", "romio_cb_write=enable,cb_nodes=2"),
                ]),
                "params",
            )
            .unwrap();
        assert_eq!(
            b.environment(&v, &builtins).unwrap(),
            p(&[
                ("FIXED", "a-/o"),
                ("IOR_HINT__MPI__cb_nodes", "2"),
                ("IOR_HINT__MPI__romio_cb_write", "enable"),
                ("IOR_HINT__MPI__striping_factor", "4"),
            ])
        );
        for bad in ["novalue", "a.b=1", "=1", "x="] {
            let v = b.validate_params(&p(&[("hints", bad)]), "params").unwrap();
            let e = b.environment(&v, &builtins).unwrap_err();
            assert!(e.contains("params.hints"), "{bad}: {e}");
        }
        assert_eq!(b.program(&builtins).as_deref(), Some("ior"));
        assert_eq!(b.stdout.as_deref(), Some("ior.txt"));
        let bad_list = r#"
[[benchmark]]
name = "x"
kind = "io"
command = ["x"]
env_list = [{ param = "n", prefix = "P_" }]
[[benchmark.param]]
name = "n"
type = "int"
"#;
        assert!(Catalog::from_toml(bad_list).is_err());
        let bad_stdout =
            "[[benchmark]]\nname = \"x\"\nkind = \"io\"\ncommand = [\"x\"]\nstdout = \"../x\"\n";
        assert!(Catalog::from_toml(bad_stdout).is_err());
    }

    const PATHS: &str = r#"
[[benchmark]]
name = "pio"
kind = "io"
command = ["pio", { when = "dir", args = ["--dir={dir}"] }]
run_as = "nobody"
[[benchmark.param]]
name = "dir"
type = "path"
optional = true
within = ["/scratch", "/tmp/x/apps/*.x"]
[[benchmark.param]]
name = "app"
type = "path"
optional = true
within = ["{apps_dir}"]
"#;

    #[test]
    fn path_params_stay_inside_their_roots() {
        let c = Catalog::from_toml(PATHS).unwrap();
        let b = c.get("pio").unwrap();
        assert_eq!(b.run_as.as_deref(), Some("nobody"));
        let ok = |v: &str| b.validate_params(&p(&[("dir", v)]), "spec.params");
        assert_eq!(ok("/scratch//a/./b/").unwrap()["dir"], "/scratch/a/b");
        assert_eq!(ok("/scratch").unwrap()["dir"], "/scratch");
        assert_eq!(
            ok("/tmp/x/apps/ring.x").unwrap()["dir"],
            "/tmp/x/apps/ring.x"
        );
        for bad in [
            "/proc/sys",
            "/scratchy",
            "/scratch/../etc",
            "relative/dir",
            "/tmp/x/apps/sub/ring.x",
            "/scratch/-rf",
            "/scratch/a b",
        ] {
            let e = ok(bad).unwrap_err();
            assert!(e.contains("spec.params.dir"), "{bad}: {e}");
        }
        let e = ok("/proc/sys").unwrap_err();
        assert!(e.contains("outside the directories"), "{e}");
        // A root naming a built-in is the agent's to check.
        let v = b
            .validate_params(&p(&[("app", "/usr/bin/id")]), "spec.params")
            .unwrap();
        let builtins = p(&[("apps_dir", "/opt/apps")]);
        let e = b.check_paths(&v, &builtins).unwrap_err();
        assert!(e.contains("params.app") && e.contains("/opt/apps"), "{e}");
        let v = b
            .validate_params(&p(&[("app", "/opt/apps/ring")]), "spec.params")
            .unwrap();
        b.check_paths(&v, &builtins).unwrap();
        // No apps directory configured: nothing is allowed.
        assert!(b.check_paths(&v, &p(&[("apps_dir", "")])).is_err());
    }

    #[test]
    fn symlinks_out_of_a_root_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let apps = d.path().join("apps");
        std::fs::create_dir(&apps).unwrap();
        std::os::unix::fs::symlink("/usr/bin/id", apps.join("id")).unwrap();
        std::fs::write(apps.join("ring"), "x").unwrap();
        let c = Catalog::from_toml(PATHS).unwrap();
        let b = c.get("pio").unwrap();
        let builtins = p(&[("apps_dir", apps.to_str().unwrap())]);
        let v = b
            .validate_params(&p(&[("app", apps.join("id").to_str().unwrap())]), "x")
            .unwrap();
        let e = b.check_paths(&v, &builtins).unwrap_err();
        assert!(e.contains("resolves to '/usr/bin/id'"), "{e}");
        let v = b
            .validate_params(&p(&[("app", apps.join("ring").to_str().unwrap())]), "x")
            .unwrap();
        b.check_paths(&v, &builtins).unwrap();
    }

    #[test]
    fn path_params_need_roots() {
        let no_within = PATHS.replace("within = [\"{apps_dir}\"]", "");
        assert!(Catalog::from_toml(&no_within).is_err());
        let bad_root = PATHS.replace("{apps_dir}", "{run_id}");
        assert!(Catalog::from_toml(&bad_root).is_err());
        let rel_root = PATHS.replace("\"/scratch\"", "\"scratch\"");
        assert!(Catalog::from_toml(&rel_root).is_err());
        let bad_user = PATHS.replace("nobody", "no body");
        assert!(Catalog::from_toml(&bad_user).is_err());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("2GB"), Some(2_000_000_000));
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }
}
