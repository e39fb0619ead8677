//! pio's parameters and their resolution, following the consortium proposal
//! (Ross 6.3/6.4): every parameter has a command-line form in
//! `lower_case_with_underscores` (`--block_size=4m` or `--block_size 4m`) and an
//! environment form in `UPPER_CASE_WITH_UNDERSCORES` with a `PIO_` prefix
//! (`PIO_BLOCK_SIZE=4m`); the command line wins over the environment, which wins
//! over the default. The resolved value and its source are kept for the result.
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::{PioError, Result};

/// The access patterns of the consortium proposal (Loewe, 6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// One segment: client c's block at c·block_size.
    Segmented,
    /// The segment repeated every `stride` bytes (segment + padding).
    Strided,
    /// Segmented or strided with random transfer sizes (so random block sizes).
    Random,
    /// Random + strided + an initial offset (`header_bytes`) skewing alignment.
    General,
}

impl Pattern {
    /// Name used in parameters and results.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Segmented => "segmented",
            Pattern::Strided => "strided",
            Pattern::Random => "random",
            Pattern::General => "general",
        }
    }
    /// Whether transfer sizes are random.
    pub fn random_sizes(self) -> bool {
        matches!(self, Pattern::Random | Pattern::General)
    }
}

/// How the read phase tries to start with no cached data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadCache {
    /// O_DIRECT when the layout is 4 KiB aligned and the file system accepts
    /// it, else drop the test file's pages (fadvise DONTNEED).
    Auto,
    /// O_DIRECT or fail.
    Direct,
    /// fdatasync + posix_fadvise(DONTNEED) on the test file(s) before reading.
    Fadvise,
    /// sync + `echo 1 > /proc/sys/vm/drop_caches` once per host (root only).
    DropCaches,
    /// Nothing (reads may hit the page cache; only the client reordering helps).
    None,
}

/// The resolved configuration of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub filename: PathBuf,
    pub pattern: Pattern,
    pub file_per_proc: bool,
    pub block_size: u64,
    pub transfer_size: u64,
    pub min_transfer_size: u64,
    pub segments: u64,
    pub padding: u64,
    /// Distance between segment starts, when given instead of `padding`.
    pub stride: Option<u64>,
    pub header_bytes: u64,
    pub iterations: u32,
    pub fsync: bool,
    pub collective: bool,
    pub read_cache: ReadCache,
    pub reorder: bool,
    pub reorder_shift: Option<u32>,
    pub verify: bool,
    pub seed: u64,
    pub keep_file: bool,
    pub preallocate: bool,
    pub np: u32,
    pub output: PathBuf,
    pub timeout_s: u64,
    pub rendezvous_host: Option<String>,
    pub job_id: Option<String>,
    pub inject_corruption: Option<u64>,
    /// Every parameter: name → (value as text, source).
    pub provenance: BTreeMap<String, (String, String)>,
}

/// One parameter: name, default (as text, empty = unset), help.
pub const PARAMS: &[(&str, &str, &str)] = &[
    (
        "filename",
        "pio.testfile",
        "test file (file-per-process appends .%08d per rank)",
    ),
    (
        "pattern",
        "segmented",
        "segmented | strided | random | general",
    ),
    (
        "file_per_proc",
        "0",
        "1 = one file per process instead of a shared file",
    ),
    (
        "block_size",
        "1m",
        "bytes per client per segment (k/m/g suffixes = 2^10/2^20/2^30)",
    ),
    (
        "transfer_size",
        "256k",
        "bytes per I/O call (upper bound for random/general)",
    ),
    (
        "min_transfer_size",
        "",
        "lower bound of random transfer sizes (default transfer_size/2)",
    ),
    (
        "segments",
        "1",
        "segments (strided/random/general repeat the segment)",
    ),
    (
        "padding",
        "0",
        "bytes of padding after each segment (stride = clients·block_size + padding)",
    ),
    (
        "stride",
        "",
        "distance between segment starts instead of padding (≥ clients per file · block_size)",
    ),
    (
        "header_bytes",
        "",
        "bytes skipped at the start of the file (default 0; general: 1)",
    ),
    (
        "iterations",
        "1",
        "write+read repetitions, each on a new file",
    ),
    (
        "fsync",
        "1",
        "1 = fsync before the write phase's stop time (sustained write)",
    ),
    (
        "collective",
        "0",
        "accepted and recorded; POSIX I/O has no collective calls",
    ),
    (
        "read_cache",
        "auto",
        "auto | direct | fadvise | drop_caches | none",
    ),
    (
        "reorder",
        "1",
        "1 = client c reads the data of client c+shift (like IOR -C)",
    ),
    (
        "reorder_shift",
        "",
        "shift for reorder (default: processes per node when several nodes, else 1)",
    ),
    (
        "verify",
        "1",
        "1 = check every byte read against the pattern",
    ),
    (
        "seed",
        "20020521",
        "seed of the data pattern and random sizes",
    ),
    ("keep_file", "0", "1 = keep the test files after the run"),
    (
        "preallocate",
        "0",
        "1 = write into preallocated space instead of a new file",
    ),
    (
        "np",
        "0",
        "processes to fork locally (0 = from mpirun/srun environment, or 1)",
    ),
    ("output", "pio-result.json", "result file written by rank 0"),
    (
        "timeout_s",
        "3600",
        "bound of every wait for other processes (must exceed the longest phase)",
    ),
    (
        "rendezvous_host",
        "",
        "address rank 0 publishes (default: 127.0.0.1 for local runs, else hostname)",
    ),
    (
        "job_id",
        "",
        "rendezvous key (default: from the launcher's environment)",
    ),
    (
        "inject_corruption",
        "",
        "testing aid: flip the byte at this offset of the first file after writing",
    ),
];

/// Parses a size: bytes, or with a k/m/g/t suffix (powers of 2^10).
pub fn parse_size(name: &str, v: &str) -> Result<u64> {
    let t = v.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mul: u64 = match c.to_ascii_lowercase() {
                'k' => 1 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                _ => return Err(PioError::param(name, format!("bad size suffix in '{v}'"))),
            };
            (t.get(..i).unwrap_or(""), mul)
        }
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| PioError::param(name, format!("'{v}' is not a size")))?;
    n.checked_mul(mul)
        .ok_or_else(|| PioError::param(name, format!("'{v}' overflows")))
}

fn parse_bool(name: &str, v: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(PioError::param(name, format!("'{v}' is not 0/1"))),
    }
}

fn parse_u64(name: &str, v: &str) -> Result<u64> {
    v.trim()
        .parse()
        .map_err(|_| PioError::param(name, format!("'{v}' is not a non-negative integer")))
}

/// The command-line arguments as `name → value` (accepts `--name=value`,
/// `--name value`, and `--name` alone for flags = 1). `help` is returned as a
/// parameter named `help`.
pub fn parse_cli(args: &[String]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let Some(body) = a.strip_prefix("--") else {
            return Err(PioError::param(a, "expected --name=value"));
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => {
                let takes_value = it.peek().is_some_and(|n| !n.starts_with("--"));
                match it.next_if(|_| takes_value) {
                    Some(v) => (body.to_string(), v.clone()),
                    None => (body.to_string(), "1".to_string()),
                }
            }
        };
        if name != "help" && !PARAMS.iter().any(|p| p.0 == name) {
            return Err(PioError::param(&name, "unknown parameter (see --help)"));
        }
        if name != name.to_ascii_lowercase() {
            return Err(PioError::param(&name, "command-line names are lower case"));
        }
        out.insert(name, value);
    }
    Ok(out)
}

/// Resolves every parameter from the CLI map and an environment lookup.
pub fn resolve(
    cli: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config> {
    let mut prov: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (name, default, _) in PARAMS {
        let env_name = format!("PIO_{}", name.to_ascii_uppercase());
        let (v, src) = if let Some(v) = cli.get(*name) {
            (v.clone(), "cli")
        } else if let Some(v) = env(&env_name) {
            (v, "env")
        } else {
            (default.to_string(), "default")
        };
        prov.insert(name.to_string(), (v, src.to_string()));
    }
    let get = |n: &str| prov.get(n).map(|p| p.0.clone()).unwrap_or_default();
    let opt = |n: &str| Some(get(n)).filter(|v| !v.trim().is_empty());
    let pattern = match get("pattern").trim() {
        "segmented" => Pattern::Segmented,
        "strided" => Pattern::Strided,
        "random" => Pattern::Random,
        "general" => Pattern::General,
        other => {
            return Err(PioError::param(
                "pattern",
                format!("unknown pattern '{other}'"),
            ));
        }
    };
    let read_cache = match get("read_cache").trim() {
        "auto" => ReadCache::Auto,
        "direct" => ReadCache::Direct,
        "fadvise" => ReadCache::Fadvise,
        "drop_caches" => ReadCache::DropCaches,
        "none" => ReadCache::None,
        other => {
            return Err(PioError::param(
                "read_cache",
                format!("unknown mode '{other}'"),
            ));
        }
    };
    let transfer_size = parse_size("transfer_size", &get("transfer_size"))?;
    let min_transfer_size = match opt("min_transfer_size") {
        Some(v) => parse_size("min_transfer_size", &v)?,
        None if pattern.random_sizes() => (transfer_size / 2).max(1),
        None => transfer_size,
    };
    let header_bytes = match opt("header_bytes") {
        Some(v) => parse_size("header_bytes", &v)?,
        // GENERAL exists to skew alignment; an unset header would make it RANDOM.
        None if pattern == Pattern::General => 1,
        None => 0,
    };
    let iterations = u32::try_from(parse_u64("iterations", &get("iterations"))?)
        .map_err(|_| PioError::param("iterations", "too large"))?;
    let np = u32::try_from(parse_u64("np", &get("np"))?)
        .map_err(|_| PioError::param("np", "too large"))?;
    let reorder_shift = match opt("reorder_shift") {
        Some(v) => Some(
            u32::try_from(parse_u64("reorder_shift", &v)?)
                .map_err(|_| PioError::param("reorder_shift", "too large"))?,
        ),
        None => None,
    };
    let mut cfg = Config {
        filename: PathBuf::from(get("filename")),
        pattern,
        file_per_proc: parse_bool("file_per_proc", &get("file_per_proc"))?,
        block_size: parse_size("block_size", &get("block_size"))?,
        transfer_size,
        min_transfer_size,
        segments: parse_u64("segments", &get("segments"))?,
        padding: parse_size("padding", &get("padding"))?,
        stride: match opt("stride") {
            Some(v) => Some(parse_size("stride", &v)?),
            None => None,
        },
        header_bytes,
        iterations,
        fsync: parse_bool("fsync", &get("fsync"))?,
        collective: parse_bool("collective", &get("collective"))?,
        read_cache,
        reorder: parse_bool("reorder", &get("reorder"))?,
        reorder_shift,
        verify: parse_bool("verify", &get("verify"))?,
        seed: parse_u64("seed", &get("seed"))?,
        keep_file: parse_bool("keep_file", &get("keep_file"))?,
        preallocate: parse_bool("preallocate", &get("preallocate"))?,
        np,
        output: PathBuf::from(get("output")),
        timeout_s: parse_u64("timeout_s", &get("timeout_s"))?,
        rendezvous_host: opt("rendezvous_host"),
        job_id: opt("job_id"),
        inject_corruption: match opt("inject_corruption") {
            Some(v) => Some(parse_size("inject_corruption", &v)?),
            None => None,
        },
        provenance: prov.clone(),
    };
    // Record the derived defaults as the values actually used.
    for (name, v) in [
        ("min_transfer_size", min_transfer_size),
        ("header_bytes", header_bytes),
    ] {
        if let Some(p) = cfg.provenance.get_mut(name).filter(|p| p.1 == "default") {
            p.0 = v.to_string();
        }
    }
    cfg.validate()?;
    Ok(cfg)
}

impl Config {
    /// Checks the combination of values (the layout rules of each pattern).
    pub fn validate(&self) -> Result<()> {
        if self.filename.as_os_str().is_empty() {
            return Err(PioError::param("filename", "empty"));
        }
        if self.transfer_size == 0 || self.block_size == 0 || self.segments == 0 {
            return Err(PioError::param(
                "block_size/transfer_size/segments",
                "must be positive",
            ));
        }
        if self.iterations == 0 {
            return Err(PioError::param("iterations", "must be positive"));
        }
        if !self.block_size.is_multiple_of(self.transfer_size) {
            return Err(PioError::param(
                "block_size",
                format!(
                    "{} is not a multiple of transfer_size {}",
                    self.block_size, self.transfer_size
                ),
            ));
        }
        if self.pattern.random_sizes()
            && (self.min_transfer_size == 0 || self.min_transfer_size > self.transfer_size)
        {
            return Err(PioError::param(
                "min_transfer_size",
                "must be in 1..=transfer_size",
            ));
        }
        if self.stride.is_some() && self.padding != 0 {
            return Err(PioError::param(
                "stride",
                "give stride or padding, not both",
            ));
        }
        if self.pattern == Pattern::Segmented
            && (self.segments != 1 || self.padding != 0 || self.stride.is_some())
        {
            return Err(PioError::param(
                "segments",
                "the segmented pattern has one segment and no padding (use strided)",
            ));
        }
        if self.transfer_size > (1 << 30) {
            return Err(PioError::param("transfer_size", "at most 1 GiB"));
        }
        Ok(())
    }

    /// The parameters as result records.
    pub fn result_params(&self) -> Vec<benchlake_formats::io::pio::PioParam> {
        self.provenance
            .iter()
            .map(|(n, (v, s))| benchlake_formats::io::pio::PioParam {
                name: n.clone(),
                value: v.clone(),
                source: s.clone(),
            })
            .collect()
    }
}

/// The usage text.
pub fn usage() -> String {
    let mut s = String::from(
        "pio: parallel I/O benchmark (Parallel I/O Benchmarking Consortium rules)\n\n\
         usage: pio [--name=value ...]   (environment: PIO_NAME=value; the command line wins)\n\
         run under mpirun/srun (one process per rank) or with --np N to fork N local processes\n\nparameters:\n",
    );
    for (n, d, h) in PARAMS {
        s.push_str(&format!(
            "  --{n:<20} {h}{}\n",
            if d.is_empty() {
                String::new()
            } else {
                format!(" [default {d}]")
            }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(a: &[&str]) -> BTreeMap<String, String> {
        parse_cli(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn cli_overrides_env_overrides_default() {
        let env = |k: &str| match k {
            "PIO_BLOCK_SIZE" => Some("8m".to_string()),
            "PIO_TRANSFER_SIZE" => Some("1m".to_string()),
            "PIO_HEADER_BYTES" => Some("12".to_string()),
            _ => None,
        };
        let c = resolve(
            &cli(&["--block_size=2m", "--pattern", "strided", "--segments", "3"]),
            env,
        )
        .unwrap();
        assert_eq!(c.block_size, 2 << 20);
        assert_eq!(c.transfer_size, 1 << 20);
        assert_eq!(c.header_bytes, 12);
        assert_eq!(c.segments, 3);
        assert_eq!(c.pattern, Pattern::Strided);
        assert_eq!(
            c.provenance["block_size"],
            ("2m".to_string(), "cli".to_string())
        );
        assert_eq!(c.provenance["transfer_size"].1, "env");
        assert_eq!(
            c.provenance["iterations"],
            ("1".to_string(), "default".to_string())
        );
    }

    #[test]
    fn sizes_flags_and_errors() {
        assert_eq!(parse_size("x", "4k").unwrap(), 4096);
        assert_eq!(parse_size("x", "1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("x", "47008").unwrap(), 47008);
        assert!(parse_size("x", "4q").is_err());
        assert!(parse_size("x", "99999999999t").is_err());
        let c = cli(&["--keep_file", "--np", "2"]);
        assert_eq!(c["keep_file"], "1");
        assert_eq!(c["np"], "2");
        assert!(parse_cli(&["--nope=1".to_string()]).is_err());
        assert!(parse_cli(&["--FILENAME=x".to_string()]).is_err());
        assert!(resolve(&cli(&["--block_size=3k", "--transfer_size=2k"]), |_| None).is_err());
        assert!(resolve(&cli(&["--segments=2"]), |_| None).is_err());
        assert!(
            resolve(
                &cli(&["--pattern=strided", "--stride=8m", "--padding=1"]),
                |_| None
            )
            .is_err()
        );
        assert!(
            resolve(&cli(&["--stride=8m"]), |_| None).is_err(),
            "segmented has no stride"
        );
        let g = resolve(&cli(&["--pattern=general", "--segments=2"]), |_| None).unwrap();
        assert_eq!((g.header_bytes, g.min_transfer_size), (1, 128 << 10));
    }
}
