//! The replay model registry: the one place that knows which models exist
//! (`dimemas`, `bandela`), which kind of trace each replays, which of its
//! parameters name files, how its parameters are checked and how it runs.
//!
//! The coordinator (`TriggerReplay`), the worker (`replay` jobs, a traced
//! run's default replay) and the CLI look models up here instead of matching
//! on their names; adding a model is one more [`Model`] in [`MODELS`].
use std::collections::BTreeMap;
use std::path::Path;

use benchlake_formats::dimemas::DimTrace;

use crate::dimemas::Platform;
use crate::error::{ReplayError, Result};
use crate::result::ReplayResult;

/// The kind of trace a model replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// One Dimemas `.dim` file (one object in the lake).
    Dimemas,
    /// One Bandela text file per rank (`bandela.<rank>`), all under one lake
    /// prefix ending in `/`.
    Bandela,
}

impl TraceKind {
    /// The ingest kind (`benchlake_formats::ingest`) that reads this trace
    /// into `mpi_trace_records`.
    pub fn format(self) -> &'static str {
        match self {
            TraceKind::Dimemas => "dimemas",
            TraceKind::Bandela => "bandela",
        }
    }

    /// The trace kind read by the ingest kind `format`, if any.
    pub fn of_format(format: &str) -> Option<Self> {
        [TraceKind::Dimemas, TraceKind::Bandela]
            .into_iter()
            .find(|k| k.format() == format)
    }

    /// Whether the trace is one file per rank (a lake prefix ending in `/`)
    /// rather than one file (one object).
    pub fn per_rank_files(self) -> bool {
        matches!(self, TraceKind::Bandela)
    }

    /// What the trace looks like in the lake, for error messages.
    pub fn in_lake(self) -> &'static str {
        match self {
            TraceKind::Dimemas => "a Dimemas trace is one .dim object",
            TraceKind::Bandela => {
                "a Bandela trace is a prefix ending in '/' holding bandela.<rank> objects"
            }
        }
    }
}

type CheckFn = fn(&BTreeMap<String, String>) -> Result<()>;
type RunFn = fn(&Path, &BTreeMap<String, String>, usize) -> Result<ReplayResult>;

/// One replay model.
#[derive(Debug)]
pub struct Model {
    /// The name requests, job specs and the `replays.model` column carry.
    pub name: &'static str,
    /// The name in prose ("the Bandela model needs ...").
    pub title: &'static str,
    /// The trace it replays.
    pub trace: TraceKind,
    /// Parameters whose value names a file: a request carries the file's text
    /// (the coordinator stores it in the lake), the worker passes the path of
    /// its local copy.
    pub file_params: &'static [&'static str],
    /// File parameters every replay needs: (name, what the file is).
    pub required_files: &'static [(&'static str, &'static str)],
    /// Checks the parameters that do not name files (they are checked without
    /// reading anything), so a request fails before any job exists.
    check: CheckFn,
    /// Replays a trace with every parameter (file parameters as local paths).
    run: RunFn,
    /// The model's own text summary (its reference tool's layout), printed by
    /// `benchlake replay` before the generic per-rank table.
    pub summary_text: Option<fn(&ReplayResult) -> String>,
}

impl Model {
    /// The first required file parameter missing from `files` (the names of
    /// the file parameters a request gives), with the message saying what it
    /// is: ("input", "the Bandela model needs the replaympi input text").
    pub fn missing_file<'a>(
        &self,
        files: impl IntoIterator<Item = &'a str>,
    ) -> Option<(&'static str, String)> {
        let files: Vec<&str> = files.into_iter().collect();
        self.required_files
            .iter()
            .find(|(n, _)| !files.contains(n))
            .map(|(n, what)| (*n, format!("the {} model needs {what}", self.title)))
    }

    /// Checks a sweep point's parameters that do not name files, without
    /// reading anything, so a request fails before any job exists. The error
    /// names the offending parameter.
    pub fn check_params(&self, params: &BTreeMap<String, String>) -> Result<()> {
        (self.check)(params)
    }

    /// Replays `trace` (a file, or the directory of the rank files) with
    /// `params` (file parameters as local paths), with [`default_threads`].
    pub fn replay(&self, trace: &Path, params: &BTreeMap<String, String>) -> Result<ReplayResult> {
        self.replay_threads(trace, params, default_threads())
    }

    /// [`Model::replay`] with up to `threads` threads (1 = all on the
    /// caller's thread). The result does not depend on `threads`.
    pub fn replay_threads(
        &self,
        trace: &Path,
        params: &BTreeMap<String, String>,
        threads: usize,
    ) -> Result<ReplayResult> {
        (self.run)(trace, params, threads.max(1))
    }
}

/// The Dimemas 5.5 model over `.dim` traces.
pub const DIMEMAS: Model = Model {
    name: "dimemas",
    title: "Dimemas",
    trace: TraceKind::Dimemas,
    file_params: &["config", "collectives"],
    required_files: &[],
    check: check_dimemas,
    run: run_dimemas,
    summary_text: None,
};

/// The Bandela (replaympi) model over per-rank Bandela traces.
pub const BANDELA: Model = Model {
    name: "bandela",
    title: "Bandela",
    trace: TraceKind::Bandela,
    file_params: &["input"],
    required_files: &[("input", "the replaympi input text")],
    check: check_bandela,
    run: run_bandela,
    summary_text: Some(crate::bandela::summary_text),
};

/// Every model, in the order error messages list them.
pub const MODELS: &[&Model] = &[&DIMEMAS, &BANDELA];

/// The model of a replay nobody named: a traced run's default replay (the
/// tracer writes Bandela traces).
pub const DEFAULT: &Model = &BANDELA;

/// The environment variable giving a replay's threads (`benchlake replay
/// --threads` reads it too).
pub const THREADS_ENV: &str = "BENCHLAKE_REPLAY_THREADS";

/// The threads a replay uses when nobody says: `BENCHLAKE_REPLAY_THREADS` when
/// it holds a positive number, else the cores available to the process.
pub fn default_threads() -> usize {
    benchlake_core::threads::from_env(THREADS_ENV)
}

/// The names of the known models, comma-separated (for messages).
pub fn known() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

/// The parameters that name a file in any model (the coordinator stores
/// their text in the lake whatever the model).
pub fn file_params() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for m in MODELS {
        for p in m.file_params {
            if !out.contains(p) {
                out.push(p);
            }
        }
    }
    out
}

/// The model named `name`, or an error listing the known ones.
pub fn get(name: &str) -> Result<&'static Model> {
    MODELS
        .iter()
        .copied()
        .find(|m| m.name == name)
        .ok_or_else(|| {
            ReplayError::param(
                "model",
                format!("unknown model '{name}' (known: {})", known()),
            )
        })
}

/// The default model of a trace kind (the first model replaying it).
pub fn for_trace(kind: TraceKind) -> Option<&'static Model> {
    MODELS.iter().copied().find(|m| m.trace == kind)
}

fn check_dimemas(params: &BTreeMap<String, String>) -> Result<()> {
    Platform::default().apply_params(params).map(|_| ())
}

fn run_dimemas(
    trace: &Path,
    params: &BTreeMap<String, String>,
    threads: usize,
) -> Result<ReplayResult> {
    let platform = Platform::default().apply_params(params)?;
    let t = DimTrace::open(trace)?;
    crate::dimemas::simulate_threads(&t, &platform, threads)
}

/// Parameters of the Bandela model.
const BANDELA_PARAMS: &[&str] = &["input", "topology", "timeline"];

fn check_bandela(params: &BTreeMap<String, String>) -> Result<()> {
    match params
        .keys()
        .find(|k| !BANDELA_PARAMS.contains(&k.as_str()))
    {
        Some(k) => Err(ReplayError::param(
            k,
            format!(
                "unknown Bandela parameter (known: {})",
                BANDELA_PARAMS.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// With 2 or more `threads`, the rank files are read and parsed on a second
/// thread; the result is the same.
fn run_bandela(
    trace: &Path,
    params: &BTreeMap<String, String>,
    threads: usize,
) -> Result<ReplayResult> {
    // `trace` is the directory of bandela.<rank> files; `input` names the
    // replaympi input file; `topology` a host type 1 plug-in (C shared library).
    let input = params.get("input").ok_or_else(|| {
        ReplayError::param(
            "input",
            "the Bandela model needs input=<replaympi input file>",
        )
    })?;
    check_bandela(params)?;
    let timeline = params
        .get("timeline")
        .is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
    let inp = benchlake_formats::bandela::BandelaInput::read(input)?;
    let files = crate::bandela::rank_files(trace)?;
    match params.get("topology") {
        Some(lib) => {
            let mut plugin = crate::bandela::CPlugin::load(Path::new(lib))?;
            crate::bandela::simulate_threads(&files, &inp, Some(&mut plugin), timeline, threads)
        }
        None => crate::bandela::simulate_threads(&files, &inp, None, timeline, threads),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn models_are_found_by_name_and_unknown_ones_list_the_known() {
        assert_eq!(
            get("dimemas").map(|m| m.trace).ok(),
            Some(TraceKind::Dimemas)
        );
        assert_eq!(
            get("bandela").map(|m| m.trace).ok(),
            Some(TraceKind::Bandela)
        );
        let e = get("booksim")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("'booksim'") && e.contains("dimemas, bandela"),
            "{e}"
        );
        assert_eq!(DEFAULT.name, "bandela");
        assert_eq!(
            for_trace(TraceKind::Bandela).map(|m| m.name),
            Some("bandela")
        );
        assert_eq!(file_params(), vec!["config", "collectives", "input"]);
    }

    #[test]
    fn every_trace_kind_is_an_ingest_kind() {
        let kinds: Vec<&str> = benchlake_formats::ingest::kinds()
            .into_iter()
            .map(|k| k.0)
            .collect();
        for m in MODELS {
            assert!(kinds.contains(&m.trace.format()), "{}", m.name);
            assert_eq!(TraceKind::of_format(m.trace.format()), Some(m.trace));
            for (f, _) in m.required_files {
                assert!(m.file_params.contains(f), "{}: {f}", m.name);
            }
        }
        assert_eq!(TraceKind::of_format("ior"), None);
    }

    #[test]
    fn requests_are_checked_per_model() {
        assert!(
            DIMEMAS
                .check_params(&params(&[("latency", "1e-6")]))
                .is_ok()
        );
        let e = DIMEMAS
            .check_params(&params(&[("latency", "x")]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("latency"), "{e}");
        let e = DIMEMAS
            .check_params(&params(&[("lantency", "1")]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("lantency") && e.contains("unknown Dimemas parameter"),
            "{e}"
        );
        assert_eq!(DIMEMAS.missing_file([]), None);
        assert!(BANDELA.check_params(&params(&[("timeline", "1")])).is_ok());
        assert_eq!(BANDELA.missing_file(["input"]), None);
        assert_eq!(
            BANDELA.missing_file(["config"]),
            Some((
                "input",
                "the Bandela model needs the replaympi input text".to_string()
            ))
        );
        let e = BANDELA
            .check_params(&params(&[("latency", "1")]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("'latency'") && e.contains("input, topology, timeline"),
            "{e}"
        );
    }
}
