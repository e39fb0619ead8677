//! The ingest kinds: one [`KindDescriptor`] per format / benchmark kind
//! (`linktest`, `counts`, `ior`, ...), the one place that says what a kind
//! reads, which tables its ingest writes, which checks judge it, which
//! follow-up jobs the worker queues after its ingest and the tables each of
//! those jobs may commit. The worker, the coordinator and the CLI look kinds
//! up here and never match a kind's name (docs/architecture.md, "Adding a
//! benchmark kind").
use benchlake_core::jobs::{ANALYZE_MERGE_JOB, ANALYZE_PART_JOB, ANALYZE_PLAN_JOB};
use benchlake_core::jobs::{CALIBRATE_JOB, CHECKS_JOB};
use benchlake_core::lake::{EncodedTable, TableOutput};

use crate::error::Result;
use crate::ingest::{IngestContext, InputFile};

/// A kind's reader: its input files → the tables they yield.
pub type IngestFn = fn(&[InputFile], &IngestContext) -> Result<Vec<TableOutput>>;

/// A reader that encodes its tables itself (a row group at a time), with an
/// optional spill directory for the large ones.
pub type EncodedFn =
    fn(&[InputFile], &IngestContext, Option<&std::path::Path>) -> Result<Vec<EncodedTable>>;

/// Refuses a file named on the command line that the kind would skip inside
/// a directory (`benchlake ingest`).
pub type NamedFileFn = fn(&InputFile) -> Result<()>;

/// The benchmark kind of traced runs (`benchlake trace`): their Bandela
/// and Dimemas ingests get node checks and a default replay.
pub const TRACED_RUN_KIND: &str = "traced";

/// The checks implementation that judges a kind's rows (the worker's
/// `checks` executor dispatches on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckFamily {
    /// I/O bandwidths, the processes' spread and each node's bandwidth
    /// (`io_checks`, `node_checks::io_node_checks`).
    Io,
    /// mdtest's metadata rates (`io_checks::mdtest_figures`).
    Mdtest,
    /// LinkTest's pair times, slow pairs per node and each link's history
    /// (`linktest_checks`, `link_checks`).
    Linktest,
    /// Node facts against expected or learned values (`node_checks::facts_checks`).
    NodeFacts,
    /// A traced run's computation per rank against other nodes' ranks
    /// (`node_checks::rank_time_checks`).
    TraceRankTime,
    /// The OSU micro-benchmarks' small-message latency and large-message
    /// bandwidth (`osu_checks`).
    Osu,
}

/// The checks of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Who computes the verdicts.
    pub family: CheckFamily,
    /// The tables the run-level figures are computed from (this run's and
    /// the schedule's earlier runs'); empty: node-level checks only.
    pub figure_tables: &'static [&'static str],
    /// The tables the node-level checks read (of the current run only).
    pub node_tables: &'static [&'static str],
}

/// A follow-up job the worker queues after a kind's ingest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowUpJob {
    /// The run's health verdicts (`checks`; the kind's [`Checks`]).
    Checks,
    /// The fanned-out counts analysis (`analyze_plan` → parts → merge).
    Analyze,
    /// A calibration of the replay models (`calibrate`).
    Calibrate,
    /// The default replays of a trace and their comparison with the run
    /// (`replay`, `trace_compare`: job kinds a user also triggers, with
    /// tables of their own in `benchlake_core::jobs::job_tables`).
    DefaultReplay,
}

/// The tables one job kind may commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobWrites {
    /// The job kind (`benchlake_core::jobs::*_JOB`).
    pub job_kind: &'static str,
    /// Its tables (the coordinator refuses a staged file of any other).
    pub tables: &'static [&'static str],
}

/// One follow-up of a kind's ingest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowUp {
    /// What is queued.
    pub job: FollowUpJob,
    /// Only after runs of this benchmark kind (`traced`); None: every run.
    pub run_kind: Option<&'static str>,
    /// The job kinds it queues with the tables each may write.
    pub writes: &'static [JobWrites],
}

impl FollowUp {
    /// Whether it follows an ingest of a run of benchmark kind `run_kind`.
    pub fn applies_to(&self, run_kind: Option<&str>) -> bool {
        self.run_kind.is_none() || self.run_kind == run_kind
    }
}

/// Summary tables the ingest job derives from the rows it read
/// (`benchlake_analysis::summaries`), not the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary {
    /// `linktest_host_summary` from the pair times.
    LinktestHosts,
    /// `io_node_summary` from `io_task_times`.
    IoNodes,
}

/// Rows the worker's ingest job adds beside the reader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestExtra {
    /// `mpi_trace_ranks`: the rank map the tracer leaves beside the rank files.
    TraceRankMap,
}

/// Everything benchlake knows of one ingest kind.
#[derive(Debug, Clone, Copy)]
pub struct KindDescriptor {
    /// The kind's name: the `format` of a catalog output, `benchlake ingest KIND`.
    pub name: &'static str,
    /// What it reads (one line, `benchlake ingest --list`).
    pub reads: &'static str,
    /// Its reader.
    pub reader: IngestFn,
    /// A reader that encodes (streams) its large tables itself; preferred
    /// over [`Self::reader`] where Parquet is wanted.
    pub encoded_reader: Option<EncodedFn>,
    /// Refuses a file named on the command line the reader would skip.
    pub named_file: Option<NamedFileFn>,
    /// The tables its ingest job writes (the coordinator refuses any other):
    /// the reader's, the [`Self::extra`] rows and the [`Self::summary`].
    pub tables: &'static [&'static str],
    /// The summary the ingest job derives.
    pub summary: Option<Summary>,
    /// Rows the worker's ingest job adds.
    pub extra: Option<IngestExtra>,
    /// Its checks (queued by [`FollowUpJob::Checks`]).
    pub checks: Option<Checks>,
    /// The follow-up jobs of its ingest, in the order they are queued.
    pub follow_ups: &'static [FollowUp],
    /// Whether the raw outputs of a run with outputs of this kind are
    /// bundled: one small file per node (`hostinfo`), packed with the
    /// nodes' logs by the run's record job into one object,
    /// `raw/{run_id}/bundle.tar.zst`, once every other job of the run has
    /// ended (`benchlake_core::lake::bundle`). Readers keep naming the raw
    /// keys (`Lake::get_raw`); a kind whose jobs list a task's raw prefix
    /// (Bandela rank files) must not set it.
    pub bundle_raw: bool,
}

impl KindDescriptor {
    /// Its follow-up `job`, if it has one.
    pub fn follow_up(&self, job: FollowUpJob) -> Option<&'static FollowUp> {
        self.follow_ups.iter().find(|f| f.job == job)
    }

    /// The tables job kind `job_kind` may commit as one of its follow-ups;
    /// None when none of them queues that job kind.
    pub fn job_tables(&self, job_kind: &str) -> Option<&'static [&'static str]> {
        self.follow_ups
            .iter()
            .flat_map(|f| f.writes)
            .find(|w| w.job_kind == job_kind)
            .map(|w| w.tables)
    }
}

/// The tables a `checks` job may write.
const CHECKS_WRITES: &[JobWrites] = &[JobWrites {
    job_kind: CHECKS_JOB,
    tables: &["checks", "node_health"],
}];

/// The checks follow-up of every run.
const CHECKS: FollowUp = FollowUp {
    job: FollowUpJob::Checks,
    run_kind: None,
    writes: CHECKS_WRITES,
};

/// The default replay of a traced run.
const TRACED_REPLAY: FollowUp = FollowUp {
    job: FollowUpJob::DefaultReplay,
    run_kind: Some(TRACED_RUN_KIND),
    writes: &[],
};

/// The I/O tables; `io_node_summary` is derived from `io_task_times` by the
/// ingest job (`benchlake_analysis::summaries`), not by the reader.
const IO_TABLES: &[&str] = &[
    "io_results",
    "io_task_times",
    "io_summary",
    "io_node_summary",
];

/// The trace tables.
const TRACE_TABLES: &[&str] = &["mpi_trace_records"];

/// Every registered kind.
pub const KINDS: &[KindDescriptor] = &[
    KindDescriptor {
        name: "counts",
        reads: "alltoallv profiler outputs: compact/per-call count files, timings, locations, backtraces",
        reader: crate::counts::ingest,
        encoded_reader: None,
        named_file: Some(crate::counts::tables::check_named_file),
        tables: &[
            "alltoallv_calls",
            "alltoallv_count_rows",
            "alltoallv_call_times",
            "alltoallv_locations",
            "alltoallv_comms",
            "alltoallv_backtraces",
        ],
        summary: None,
        extra: None,
        checks: None,
        follow_ups: &[FollowUp {
            job: FollowUpJob::Analyze,
            run_kind: None,
            writes: &[
                JobWrites {
                    job_kind: ANALYZE_PLAN_JOB,
                    tables: &[],
                },
                JobWrites {
                    job_kind: ANALYZE_PART_JOB,
                    tables: &[],
                },
                JobWrites {
                    job_kind: ANALYZE_MERGE_JOB,
                    tables: &[
                        "alltoallv_patterns",
                        "alltoallv_stats",
                        "alltoallv_heatmap",
                        "alltoallv_host_heatmap",
                    ],
                },
            ],
        }],
        bundle_raw: false,
    },
    KindDescriptor {
        name: "hostinfo",
        reads: "node facts JSON written by `benchlake probe host` → node_facts",
        reader: crate::hostinfo::ingest,
        encoded_reader: None,
        named_file: None,
        tables: &["node_facts"],
        summary: None,
        extra: None,
        checks: Some(Checks {
            family: CheckFamily::NodeFacts,
            figure_tables: &[],
            node_tables: &["node_facts"],
        }),
        follow_ups: &[CHECKS],
        // One small facts file per node per night: bundled.
        bundle_raw: true,
    },
    KindDescriptor {
        name: "ior",
        reads: "IOR JSON summaries and per-rank CSVs",
        reader: crate::io::ingest_ior,
        encoded_reader: None,
        named_file: None,
        tables: IO_TABLES,
        summary: Some(Summary::IoNodes),
        extra: None,
        checks: Some(Checks {
            family: CheckFamily::Io,
            // io_task_times: the processes' spread (io.<op>_bw_cv).
            figure_tables: &["io_results", "io_task_times"],
            node_tables: &[],
        }),
        follow_ups: &[CHECKS],
        bundle_raw: false,
    },
    KindDescriptor {
        name: "mdtest",
        reads: "mdtest text output and per-rank CSVs",
        reader: crate::io::ingest_mdtest,
        encoded_reader: None,
        named_file: None,
        tables: &["mdtest_results", "mdtest_summary"],
        summary: None,
        extra: None,
        checks: Some(Checks {
            family: CheckFamily::Mdtest,
            figure_tables: &["mdtest_summary"],
            node_tables: &[],
        }),
        follow_ups: &[CHECKS],
        bundle_raw: false,
    },
    KindDescriptor {
        name: "pio",
        reads: "pio result files (benchlake-pio/1)",
        reader: crate::io::ingest_pio,
        encoded_reader: None,
        named_file: None,
        tables: IO_TABLES,
        summary: Some(Summary::IoNodes),
        extra: None,
        checks: Some(Checks {
            family: CheckFamily::Io,
            figure_tables: &["io_results", "io_task_times"],
            node_tables: &["io_task_times"],
        }),
        follow_ups: &[CHECKS],
        bundle_raw: false,
    },
    KindDescriptor {
        name: "dimemas",
        reads: "Dimemas .dim MPI traces -> mpi_trace_records",
        reader: crate::dimemas::ingest::ingest,
        encoded_reader: None,
        named_file: None,
        tables: TRACE_TABLES,
        summary: None,
        extra: None,
        checks: None,
        follow_ups: &[TRACED_REPLAY],
        bundle_raw: false,
    },
    KindDescriptor {
        name: "bandela",
        reads: "Bandela text traces (one file per rank) -> mpi_trace_records",
        reader: crate::bandela::ingest::ingest,
        encoded_reader: None,
        named_file: None,
        // The rank map beside the rank files (worker: traced runs).
        tables: &["mpi_trace_records", "mpi_trace_ranks"],
        summary: None,
        extra: Some(IngestExtra::TraceRankMap),
        checks: Some(Checks {
            family: CheckFamily::TraceRankTime,
            figure_tables: &[],
            node_tables: &["mpi_trace_ranks"],
        }),
        follow_ups: &[
            FollowUp {
                job: FollowUpJob::Checks,
                run_kind: Some(TRACED_RUN_KIND),
                writes: CHECKS_WRITES,
            },
            TRACED_REPLAY,
        ],
        bundle_raw: false,
    },
    KindDescriptor {
        name: "linktest",
        reads: "LinkTest SION result files (1.x and 2.1.17; netprobe)",
        reader: crate::linktest::ingest_linktest,
        // Its pair times go into Parquet a row group at a time.
        encoded_reader: Some(crate::linktest::ingest_linktest_encoded_in),
        named_file: None,
        tables: &[
            "linktest_runs",
            "linktest_ranks",
            "linktest_timings",
            "linktest_alltoall",
            "linktest_slow_links",
            // Derived from the pairs by the ingest job
            // (`benchlake_analysis::summaries`), not by the reader.
            "linktest_host_summary",
        ],
        summary: Some(Summary::LinktestHosts),
        extra: None,
        checks: Some(Checks {
            family: CheckFamily::Linktest,
            figure_tables: &["linktest_runs", "linktest_timings"],
            node_tables: &["linktest_ranks", "linktest_timings"],
        }),
        follow_ups: &[
            FollowUp {
                job: FollowUpJob::Checks,
                run_kind: None,
                // Each link against its own history (docs/verdicts.md, "Links").
                writes: &[JobWrites {
                    job_kind: CHECKS_JOB,
                    tables: &["checks", "node_health", "link_health"],
                }],
            },
            FollowUp {
                job: FollowUpJob::Calibrate,
                run_kind: None,
                writes: &[JobWrites {
                    job_kind: CALIBRATE_JOB,
                    tables: &["replay_calibrations"],
                }],
            },
        ],
        bundle_raw: false,
    },
    KindDescriptor {
        name: "osu",
        reads: "OSU micro-benchmarks text output (osu_latency, osu_bw, osu_bibw) -> osu_results",
        reader: crate::osu::ingest,
        encoded_reader: None,
        named_file: None,
        tables: &[crate::osu::TABLE],
        summary: None,
        extra: None,
        checks: Some(Checks {
            family: CheckFamily::Osu,
            figure_tables: &[crate::osu::TABLE],
            node_tables: &[],
        }),
        follow_ups: &[CHECKS],
        bundle_raw: false,
    },
];

/// The descriptor of kind `name`.
pub fn get(name: &str) -> Option<&'static KindDescriptor> {
    KINDS.iter().find(|k| k.name == name)
}

/// The names of every kind, comma-separated (for messages).
pub fn known() -> String {
    KINDS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

/// The tables job kind `job_kind`, queued as a follow-up of the ingest of
/// `format` (the `format` of its spec, when it names one), may commit. Without
/// a format: every table some kind declares for that job kind. None when no
/// kind queues that job kind (it is not a follow-up of any kind).
pub fn follow_up_tables(job_kind: &str, format: Option<&str>) -> Option<Vec<&'static str>> {
    let mut declared = KINDS
        .iter()
        .filter_map(|k| k.job_tables(job_kind).map(|t| (k.name, t)))
        .peekable();
    declared.peek()?;
    let mut out: Vec<&'static str> = Vec::new();
    for (name, tables) in declared {
        if format.is_none_or(|f| f == name) {
            for t in tables {
                if !out.contains(t) {
                    out.push(t);
                }
            }
        }
    }
    Some(out)
}

/// The kinds whose ingest is followed by an analysis (`AnalyzeRun`'s
/// `analysis` values), first the default.
pub fn analyses() -> impl Iterator<Item = &'static KindDescriptor> {
    KINDS
        .iter()
        .filter(|k| k.follow_up(FollowUpJob::Analyze).is_some())
}

/// Whether the ingest jobs of runs of benchmark kind `run_kind` carry the
/// agent's cores: the default replays of traced runs slow bursts down when
/// ranks outnumber them (docs/replay.md).
pub fn run_kind_wants_cores(run_kind: &str) -> bool {
    KINDS
        .iter()
        .flat_map(|k| k.follow_ups)
        .any(|f| f.job == FollowUpJob::DefaultReplay && f.run_kind.is_some_and(|r| r == run_kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declared_table_is_in_the_catalog() {
        for k in KINDS {
            let writes = k.follow_ups.iter().flat_map(|f| f.writes);
            for t in k
                .tables
                .iter()
                .chain(writes.flat_map(|w| w.tables))
                .chain(k.checks.iter().flat_map(|c| c.figure_tables))
                .chain(k.checks.iter().flat_map(|c| c.node_tables))
            {
                assert!(
                    benchlake_core::catalog::get(t).is_some(),
                    "{}: {t} is not in the catalog",
                    k.name
                );
            }
        }
    }

    #[test]
    fn checks_read_only_tables_the_ingest_writes() {
        for k in KINDS {
            let Some(c) = k.checks else {
                assert!(k.follow_up(FollowUpJob::Checks).is_none(), "{}", k.name);
                continue;
            };
            assert!(k.follow_up(FollowUpJob::Checks).is_some(), "{}", k.name);
            for t in c.figure_tables.iter().chain(c.node_tables) {
                assert!(k.tables.contains(t), "{}: {t}", k.name);
            }
        }
    }

    #[test]
    fn names_are_unique_and_lookups_find_them() {
        for (i, k) in KINDS.iter().enumerate() {
            assert!(KINDS[..i].iter().all(|o| o.name != k.name), "{}", k.name);
            assert_eq!(get(k.name).map(|d| d.name), Some(k.name));
        }
        assert!(get("nosuch").is_none());
        assert!(known().starts_with("counts, hostinfo, ior"));
    }

    #[test]
    fn follow_up_tables_per_format_and_job_kind() {
        let link = follow_up_tables(CHECKS_JOB, Some("linktest")).unwrap();
        assert_eq!(link, vec!["checks", "node_health", "link_health"]);
        let pio = follow_up_tables(CHECKS_JOB, Some("pio")).unwrap();
        assert_eq!(pio, vec!["checks", "node_health"]);
        // A kind without checks writes nothing through a checks job.
        assert_eq!(follow_up_tables(CHECKS_JOB, Some("counts")), Some(vec![]));
        // Without a format: every kind's.
        let any = follow_up_tables(CHECKS_JOB, None).unwrap();
        assert_eq!(any, vec!["checks", "node_health", "link_health"]);
        assert_eq!(
            follow_up_tables(CALIBRATE_JOB, None),
            Some(vec!["replay_calibrations"])
        );
        assert_eq!(follow_up_tables(ANALYZE_PLAN_JOB, None), Some(vec![]));
        assert_eq!(follow_up_tables("record", None), None);
        assert_eq!(follow_up_tables("evil", Some("pio")), None);
    }

    #[test]
    fn only_per_node_kinds_bundle_their_raw_outputs() {
        let bundled: Vec<&str> = KINDS
            .iter()
            .filter(|k| k.bundle_raw)
            .map(|k| k.name)
            .collect();
        assert_eq!(bundled, vec!["hostinfo"]);
    }

    #[test]
    fn traced_runs_want_cores_and_the_counts_analysis_is_the_default() {
        assert!(run_kind_wants_cores(TRACED_RUN_KIND));
        assert!(!run_kind_wants_cores("linktest"));
        assert!(!run_kind_wants_cores("io"));
        let a: Vec<&str> = analyses().map(|k| k.name).collect();
        assert_eq!(a, vec!["counts"]);
        let bandela = get("bandela").unwrap();
        let checks = bandela.follow_up(FollowUpJob::Checks).unwrap();
        assert!(checks.applies_to(Some(TRACED_RUN_KIND)));
        assert!(!checks.applies_to(Some("io")) && !checks.applies_to(None));
        assert!(CHECKS.applies_to(None) && CHECKS.applies_to(Some("io")));
    }
}
