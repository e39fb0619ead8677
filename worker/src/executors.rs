//! The built-in executors: `ingest` (raw files → tables through the formats
//! registry), `record` (a finished run's rows in `runs` and `raw_files`) and
//! `noop` (commits nothing; load tests).
use std::sync::Arc;

use arrow::array::{
    ArrayRef, ListBuilder, RecordBatch, StringArray, StringBuilder, TimestampMicrosecondArray,
    UInt64Array,
};
use benchlake_core::catalog;
use benchlake_core::jobs::{
    FollowUp, INGEST_JOB, IngestRunInfo, IngestSpec, RECORD_JOB, RecordSpec,
};
use benchlake_core::lake::TableOutput;
use benchlake_core::lake::bundle::BundleMember;
use benchlake_core::layout;
use benchlake_formats::kinds::{FollowUpJob, IngestExtra, KindDescriptor};
use benchlake_formats::{IngestContext, InputFile};

use crate::{ExecError, ExecOutput, Executor, JobContext};

fn spec<T: serde::de::DeserializeOwned>(ctx: &JobContext) -> Result<T, ExecError> {
    serde_json::from_str(&ctx.spec_json)
        .map_err(|e| ExecError::Permanent(format!("{} job spec: {e}", ctx.kind)))
}

/// Raw files of one format → that format's tables.
pub struct Ingest;

impl Executor for Ingest {
    fn kind(&self) -> &'static str {
        INGEST_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: IngestSpec = spec(ctx)?;
        let mut inputs = Vec::with_capacity(s.keys.len());
        for k in &s.keys {
            if ctx.cancelled() {
                return Err(ExecError::Cancelled);
            }
            inputs.push(InputFile {
                path: ctx.fetch(k)?,
                source: k.clone(),
            });
        }
        let ictx = IngestContext {
            run_id: ctx.run_id.clone(),
            date: ctx.run_date.clone(),
        };
        // Users know the raw object, not this worker's scratch copy of it.
        let named = |e: benchlake_formats::FormatError| {
            let mut err = ExecError::from(e);
            if let ExecError::Permanent(m) | ExecError::Retryable(m) = &mut err {
                *m = name_objects(m, &inputs);
            }
            err
        };
        let kind = benchlake_formats::ingest::descriptor(&s.format).map_err(named)?;
        // A kind with an encoding reader goes straight into Parquet a row
        // group at a time (LinkTest: a 4,096-rank file's 16.8 M pair times
        // are never held as batches); the others give batches that the
        // commit encodes.
        let (mut tables, encoded) = if kind.encoded_reader.is_some() {
            let e = benchlake_formats::ingest_encoded(&s.format, &inputs, &ictx).map_err(named)?;
            (Vec::new(), e)
        } else {
            let t = benchlake_formats::ingest(&s.format, &inputs, &ictx).map_err(named)?;
            (t, Vec::new())
        };
        // A traced run's rank map (where each rank ran) rides with its Bandela
        // rank files: `mpi_trace_ranks` (docs/tracer.md).
        if kind.extra == Some(IngestExtra::TraceRankMap) {
            match crate::traced::rank_map(ctx, &s)? {
                Some((key, rows)) => tables.push(
                    benchlake_formats::bandela::ranks::table(&ctx.run_id, &key, &rows)
                        .map_err(ExecError::from)?,
                ),
                None => tracing::info!(
                    job = %ctx.job_id,
                    "no bandela_ranks beside the rank files (a trace of an older tracer): no mpi_trace_ranks rows, the default replay puts every rank on one host"
                ),
            }
        }
        // The run's health verdicts follow the I/O and LinkTest ingests.
        let info: IngestRunInfo = serde_json::from_str(&ctx.spec_json).unwrap_or_default();
        // The summaries beside the rows (`linktest_host_summary`,
        // `io_node_summary`): read back from what was just encoded.
        let summaries = benchlake_analysis::summaries::derive(
            &s.format,
            &ctx.run_id,
            &encoded,
            &tables,
            &info.params,
        )
        .map_err(|e| ExecError::Permanent(e.to_string()))?;
        tables.extend(summaries);
        Ok(ExecOutput {
            encoded,
            tables,
            follow_ups: follow_ups(ctx, kind, &s, &info)?,
            bundled: Vec::new(),
        })
    }
}

/// The follow-up jobs of an ingest of `kind`: those its descriptor declares
/// for the run's benchmark kind, in its order.
fn follow_ups(
    ctx: &JobContext,
    kind: &KindDescriptor,
    s: &IngestSpec,
    info: &IngestRunInfo,
) -> Result<Vec<FollowUp>, ExecError> {
    let mut out = Vec::new();
    for f in kind
        .follow_ups
        .iter()
        .filter(|f| f.applies_to(info.kind.as_deref()))
    {
        match f.job {
            // The run's health verdicts.
            FollowUpJob::Checks => out.extend(crate::checks::follow_up(s, info, &ctx.job_id)),
            // The counts analysis of the same files (docs/counts.md).
            FollowUpJob::Analyze => out.extend(crate::analyze::follow_up_of_ingest(s)),
            // A LinkTest or netprobe run's calibration (docs/replay.md).
            FollowUpJob::Calibrate => out.extend(crate::calibrate::follow_up_of_ingest(s)),
            FollowUpJob::DefaultReplay => {
                // A traced run's default replay and comparison (docs/tracer.md)...
                out.extend(crate::traced::follow_up_of_ingest(ctx, s, info)?);
                // ... and its default Dimemas replay (docs/replay.md).
                out.extend(crate::traced_dimemas::follow_up_of_ingest(ctx, s, info)?);
            }
        }
    }
    Ok(out)
}

/// `msg` with every local scratch path of `inputs` replaced by the object key
/// it was fetched from.
fn name_objects(msg: &str, inputs: &[InputFile]) -> String {
    let mut out = msg.to_string();
    // Longest paths first, so a path that prefixes another is not split.
    let mut by_len: Vec<&InputFile> = inputs.iter().collect();
    by_len.sort_by_key(|i| std::cmp::Reverse(i.path.as_os_str().len()));
    for i in by_len {
        let p = i.path.display().to_string();
        if !p.is_empty() && out.contains(&p) {
            out = out.replace(&p, &i.source);
        }
    }
    out
}

/// A finished run → one `runs` row and its `raw_files` rows.
pub struct Record;

fn ts(ms: Option<i64>) -> TimestampMicrosecondArray {
    TimestampMicrosecondArray::from(vec![ms.map(|m| m * 1000)]).with_timezone("UTC")
}

/// The `runs` and `raw_files` tables of a record spec; `verdict` is the
/// run's overall verdict ([`benchlake_core::verdict::worst`] of its checks).
pub fn record_tables(s: &RecordSpec, verdict: Option<&str>) -> Result<Vec<TableOutput>, ExecError> {
    record_tables_bundled(s, verdict, &[])
}

/// [`record_tables`] where the raw outputs `bundled` are in the run's bundle
/// (their `raw_files` rows name it).
pub fn record_tables_bundled(
    s: &RecordSpec,
    verdict: Option<&str>,
    bundled: &[String],
) -> Result<Vec<TableOutput>, ExecError> {
    let err = |e: arrow::error::ArrowError| ExecError::Permanent(format!("record: {e}"));
    let mut agents = ListBuilder::new(StringBuilder::new());
    for a in &s.agents {
        agents.values().append_value(a);
    }
    agents.append(true);
    let params =
        serde_json::to_string(&s.params).map_err(|e| ExecError::Permanent(e.to_string()))?;
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![s.run_id.as_str()])),
        Arc::new(StringArray::from(vec!["coordinator"])),
        Arc::new(StringArray::from(vec![s.schedule_id.as_deref()])),
        Arc::new(StringArray::from(vec![s.benchmark.as_str()])),
        Arc::new(StringArray::from(vec![s.kind.as_str()])),
        Arc::new(StringArray::from(vec![s.status.as_str()])),
        Arc::new(StringArray::from(vec![params.as_str()])),
        Arc::new(ts(Some(s.submitted_at_ms))),
        Arc::new(ts(s.started_at_ms)),
        Arc::new(ts(s.finished_at_ms)),
        Arc::new(agents.finish()),
        Arc::new(StringArray::from(vec![s.error.as_deref()])),
        Arc::new(StringArray::from(vec![verdict])),
        Arc::new(ts(s.scheduled_for_ms)),
        Arc::new(ts(Some(s.logical_at_ms()))),
    ];
    let runs = RecordBatch::try_new(catalog::schema("runs")?, cols).map_err(err)?;
    let f = &s.raw_files;
    let bundle = if bundled.is_empty() {
        String::new()
    } else {
        layout::raw_bundle_key(&s.run_id).map_err(ExecError::from)?
    };
    let run: Vec<&str> = f.iter().map(|_| s.run_id.as_str()).collect();
    let keys: Vec<&str> = f.iter().map(|x| x.key.as_str()).collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(run)),
        Arc::new(StringArray::from(keys.clone())),
        Arc::new(StringArray::from(
            f.iter().map(|x| x.task_id.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            f.iter().map(|x| x.agent.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(keys)),
        Arc::new(UInt64Array::from(
            f.iter().map(|x| x.bytes).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            f.iter().map(|x| x.sha256.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            f.iter().map(|x| x.format.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            f.iter()
                .map(|x| x.slurm_job_id.as_deref())
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            f.iter()
                .map(|x| x.slurm_nodes.as_deref())
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            f.iter()
                .map(|x| bundled.contains(&x.key).then_some(bundle.as_str()))
                .collect::<Vec<_>>(),
        )),
    ];
    let raw = RecordBatch::try_new(catalog::schema("raw_files")?, cols).map_err(err)?;
    let mut out = vec![TableOutput::new("runs", vec![runs])];
    if raw.num_rows() > 0 {
        out.push(TableOutput::new("raw_files", vec![raw]));
    }
    Ok(out)
}

impl Executor for Record {
    fn kind(&self) -> &'static str {
        RECORD_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: RecordSpec = spec(ctx)?;
        // The record job runs after every other job of the run, its checks
        // included: their rows decide the verdict.
        let statuses = crate::checks::run_statuses(ctx, &s.run_id)?;
        let verdict = benchlake_core::verdict::worst(statuses.iter().map(String::as_str));
        // Every other job of the run has ended: the per-node raw outputs
        // can go into the run's bundle.
        let bundled = bundle_raw_files(ctx, &s)?;
        Ok(ExecOutput {
            encoded: Vec::new(),
            tables: record_tables_bundled(&s, verdict, &bundled)?,
            follow_ups: Vec::new(),
            bundled,
        })
    }
}

/// Packs the raw outputs of run `s`, when one of them is of a kind that
/// declares `bundle_raw` (`hostinfo`: one small file per node, beside each
/// node's stdout and stderr), into the run's bundle and deletes
/// their objects ([`benchlake_core::lake::Lake::bundle_raw`]: written and
/// read back first; a retry finishes what a killed attempt began). Returns
/// the keys bundled: none when the run has fewer than two files (one
/// object is already one object). A store failure is retried with the
/// record job; a bundle that cannot be made (an object that differs from
/// its record, a damaged earlier bundle with objects already gone) is
/// logged and the run is recorded without it: its files stay where they are.
fn bundle_raw_files(ctx: &JobContext, s: &RecordSpec) -> Result<Vec<String>, ExecError> {
    let per_node = s
        .raw_files
        .iter()
        .any(|f| benchlake_formats::kinds::get(&f.format).is_some_and(|k| k.bundle_raw));
    if !per_node {
        return Ok(Vec::new());
    }
    // Every raw output of the run: its nodes' logs too (one small object
    // each), but a file too large for a bundle stays its own object.
    let members: Vec<BundleMember> = s
        .raw_files
        .iter()
        .filter(|f| f.bytes <= benchlake_core::lake::bundle::MAX_MEMBER_BYTES)
        .filter(|f| layout::parse_raw_key(&f.key).is_some_and(|(r, _, _)| r == s.run_id))
        .map(|f| BundleMember {
            key: f.key.clone(),
            bytes: f.bytes,
            sha256: f.sha256.clone(),
            format: f.format.clone(),
        })
        .collect();
    if members.len() < 2 {
        return Ok(Vec::new());
    }
    match ctx.block_on(ctx.lake.bundle_raw(&s.run_id, &members)) {
        Ok(rep) => {
            tracing::info!(
                job = %ctx.job_id,
                run = %s.run_id,
                bundle = %rep.key,
                members = rep.members,
                member_bytes = rep.member_bytes,
                bundle_bytes = rep.bundle_bytes,
                deleted = rep.deleted,
                "the run's per-node raw outputs are one object"
            );
            Ok(members.into_iter().map(|m| m.key).collect())
        }
        Err(e) if e.is_retryable() => Err(ExecError::from(e)),
        Err(e) => {
            tracing::error!(job = %ctx.job_id, run = %s.run_id, error = %e, "raw outputs not bundled; they stay one object per file");
            Ok(Vec::new())
        }
    }
}

/// Commits nothing (coordinator load tests).
pub struct Noop;

impl Executor for Noop {
    fn kind(&self) -> &'static str {
        "noop"
    }
    fn execute(&self, _ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        Ok(ExecOutput::default())
    }
}

/// One sweep point of a replay → the `replay*` tables.
pub struct Replay;

impl Executor for Replay {
    fn kind(&self) -> &'static str {
        benchlake_core::jobs::REPLAY_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: benchlake_core::jobs::ReplaySpec = spec(ctx)?;
        let model = benchlake_replay::models::get(&s.model)
            .map_err(|e| ExecError::Permanent(e.to_string()))?;
        let trace = if model.trace.per_rank_files() {
            // One file per rank: every object under the prefix, in one directory.
            let dir = ctx.scratch.join("trace");
            std::fs::create_dir_all(&dir)
                .map_err(|e| ExecError::Retryable(format!("{}: {e}", dir.display())))?;
            let objects = ctx.block_on(ctx.lake.list(&s.trace_key))?;
            if objects.is_empty() {
                return Err(ExecError::Permanent(format!(
                    "no trace objects under {}",
                    s.trace_key
                )));
            }
            for (key, _) in objects {
                let name = key.rsplit('/').next().unwrap_or("part");
                ctx.block_on(ctx.lake.download(&key, &dir.join(name)))?;
            }
            dir
        } else {
            ctx.fetch(&s.trace_key)?
        };
        let mut params = s.params.clone();
        params.extend(s.point.clone());
        for (name, key) in &s.files {
            params.insert(name.clone(), ctx.fetch(key)?.display().to_string());
        }
        // A named calibration: applied under the job's own parameters.
        let calibration = match &s.calibration {
            Some(id) => Some(crate::calibrate::apply(ctx, id, model.name, &mut params)?),
            None => None,
        };
        let started = std::time::Instant::now();
        let mut result = model
            .replay(&trace, &params)
            .map_err(|e| ExecError::Permanent(e.to_string()))?;
        // `replays.params` says which calibration was used, or why none.
        if let serde_json::Value::Object(m) = &mut result.params {
            match (&calibration, &s.calibration_note) {
                (Some(doc), _) => {
                    m.insert("calibration".into(), doc.summary());
                }
                (None, Some(note)) => {
                    m.insert(
                        "calibration".into(),
                        serde_json::json!({ "id": null, "note": note }),
                    );
                }
                (None, None) => {}
            }
        }
        let meta = benchlake_replay::ReplayMeta {
            run_id: &ctx.run_id,
            replay_id: &s.replay_id,
            trace_source: &s.trace_key,
            point: &s.point,
            engine_wall_s: started.elapsed().as_secs_f64(),
        };
        let tables = benchlake_replay::replay_tables(&result, &meta)
            .map_err(|e| ExecError::Permanent(e.to_string()))?;
        Ok(ExecOutput {
            encoded: Vec::new(),
            tables,
            follow_ups: Vec::new(),
            bundled: Vec::new(),
        })
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn errors_name_the_raw_object_not_the_scratch_copy() {
        let inputs = [
            InputFile {
                path: "/scratch/w1/raw/R/T/a.sion".into(),
                source: "raw/R/T/a.sion".into(),
            },
            InputFile {
                path: "/scratch/w1/raw/R/T/a.sion.1".into(),
                source: "raw/R/T/a.sion.1".into(),
            },
        ];
        assert_eq!(
            name_objects(
                "/scratch/w1/raw/R/T/a.sion.1: byte offset 8: bad magic; see /scratch/w1/raw/R/T/a.sion",
                &inputs
            ),
            "raw/R/T/a.sion.1: byte offset 8: bad magic; see raw/R/T/a.sion"
        );
    }
}

#[cfg(test)]
mod rank_map_tests {
    use super::*;
    use benchlake_core::jobs::{IngestRunInfo, REPLAY_JOB, ReplaySpec};
    use benchlake_core::lake::Lake;

    const TRACE: &str = "# bandela-replay v1  rank=R nranks=2  (benchlake-tracer, app=t, hosts=1)\nH R 2 0\nM comm 1 0,1\nC 0.001\nK 1 MPI_Barrier barrier 1\nC 0.000003\n";

    /// What [`execute`] ran and gave.
    struct Ran {
        out: Result<ExecOutput, ExecError>,
        lake: Lake,
        rt: tokio::runtime::Runtime,
        dir: tempfile::TempDir,
        run_id: String,
        keys: Vec<String>,
    }

    /// Runs the `ingest` executor on raw files `(name, bytes)` of one task in
    /// a local lake.
    fn execute(format: &str, kind: &str, files: Vec<(String, Vec<u8>)>) -> Ran {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let lake = Lake::local(&dir.path().join("lake")).unwrap();
        let (run, task, job) = (
            benchlake_core::ids::new_id(),
            benchlake_core::ids::new_id(),
            benchlake_core::ids::new_id(),
        );
        let mut keys = Vec::new();
        for (name, data) in files {
            let key = format!("raw/{run}/{task}/{name}");
            rt.block_on(lake.put(&key, bytes::Bytes::from(data)))
                .unwrap();
            // The rank map rides beside the rank files, not as an input.
            if name != "bandela_ranks" {
                keys.push(key);
            }
        }
        let spec = IngestSpec {
            format: format.into(),
            keys: keys.clone(),
            task_id: task.clone(),
            agent: "a1".into(),
            agent_hostname: None,
        };
        let info = IngestRunInfo {
            kind: Some(kind.into()),
            ..Default::default()
        };
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        let ctx = JobContext {
            job_id: job,
            run_id: run.clone(),
            kind: INGEST_JOB.into(),
            attempt: 1,
            spec_json: benchlake_core::jobs::ingest_spec_json(&spec, &info),
            run_date: "2026-11-24".into(),
            lake: lake.clone(),
            scratch,
            rt: rt.handle().clone(),
            cancel: Default::default(),
        };
        Ran {
            out: Ingest.execute(&ctx),
            lake,
            rt,
            dir,
            run_id: run,
            keys,
        }
    }

    /// Runs the `ingest` executor on a traced run's two Bandela rank files
    /// (and `map`, the rank map beside them, when given) in a local lake.
    fn ingest(map: Option<&str>) -> (Result<ExecOutput, ExecError>, String) {
        let mut files: Vec<(String, Vec<u8>)> = (0..2)
            .map(|r| {
                let text = TRACE.replace('R', &r.to_string());
                (format!("bandela.{r}.txt"), text.into_bytes())
            })
            .collect();
        if let Some(m) = map {
            files.push(("bandela_ranks".into(), m.as_bytes().to_vec()));
        }
        let Ran {
            out,
            lake,
            rt,
            dir: _dir,
            ..
        } = execute("bandela", "traced", files);
        // The replay input the follow-up wrote, if any.
        let input = out
            .as_ref()
            .ok()
            .and_then(|o| o.follow_ups.iter().find(|f| f.kind == REPLAY_JOB))
            .map(|f| {
                let s: ReplaySpec = serde_json::from_value(f.spec.clone()).unwrap();
                let b = rt.block_on(lake.get(&s.files["input"])).unwrap();
                String::from_utf8(b.to_vec()).unwrap()
            })
            .unwrap_or_default();
        (out, input)
    }

    /// A LinkTest ingest hands the commit Parquet files it encoded while
    /// reading (no batches), the same bytes as the batches encoded, and a
    /// broken file's error names the raw object, not the scratch copy.
    #[test]
    fn linktest_ingest_streams_into_parquet() {
        let sion = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linktest/v1.2p1/np16_a2a_mix/pingpong_results_bin.sion"
        ))
        .unwrap();
        let name = "pingpong_results_bin.sion";
        let ran = execute("linktest", "linktest", vec![(name.into(), sion.clone())]);
        let out = ran.out.unwrap();
        // Only the summary derived from them comes as batches.
        assert_eq!(
            out.tables
                .iter()
                .map(|t| t.table.as_str())
                .collect::<Vec<_>>(),
            ["linktest_host_summary"]
        );
        // The same file through the batch path, encoded as the commit would.
        let path = ran.dir.path().join("copy.sion");
        std::fs::write(&path, &sion).unwrap();
        let inputs = [InputFile {
            path,
            source: ran.keys[0].clone(),
        }];
        let batches = benchlake_formats::ingest(
            "linktest",
            &inputs,
            &IngestContext {
                run_id: ran.run_id.clone(),
                date: "2026-11-24".into(),
            },
        )
        .unwrap();
        let want: Vec<_> = batches
            .iter()
            .map(|t| benchlake_core::lake::EncodedTable::encode(t, "2026-11-24").unwrap())
            .collect();
        let key =
            |e: &benchlake_core::lake::EncodedTable| (e.table.clone(), e.part.clone(), e.rows);
        assert_eq!(
            out.encoded.iter().map(key).collect::<Vec<_>>(),
            want.iter().map(key).collect::<Vec<_>>()
        );
        assert!(out.encoded.iter().any(|e| e.table == "linktest_timings"));
        for (got, want) in out.encoded.iter().zip(&want) {
            assert!(got.data == want.data, "{} differs", got.table);
        }
        let mut cut = sion.clone();
        cut.truncate(sion.len() / 2);
        let ran = execute("linktest", "linktest", vec![(name.into(), cut)]);
        let msg = ran.out.unwrap_err().to_string();
        assert!(msg.contains(&ran.keys[0]), "{msg}");
        assert!(
            !msg.contains(&ran.dir.path().display().to_string()),
            "{msg}"
        );
    }

    /// A LinkTest ingest writes the pairs with their hosts and the per-host
    /// summary beside them, and only tables its kind declares (the
    /// coordinator refuses any other).
    #[test]
    fn linktest_ingest_writes_the_host_summary_and_only_declared_tables() {
        use arrow::array::{Array, AsArray};
        let run = benchlake_formats::linktest::synth::synthetic_run(6, 2, 1);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.sion");
        benchlake_formats::linktest::v2::write_file(&run, &file, &Default::default()).unwrap();
        let sion = std::fs::read(&file).unwrap();
        let ran = execute("linktest", "linktest", vec![("f.sion".into(), sion)]);
        let out = ran.out.unwrap();
        let allowed = benchlake_formats::ingest::tables("linktest").unwrap();
        let written: Vec<&str> = out
            .encoded
            .iter()
            .map(|e| e.table.as_str())
            .chain(out.tables.iter().map(|t| t.table.as_str()))
            .collect();
        for t in &written {
            assert!(allowed.contains(t), "{t} is not declared");
        }
        assert!(written.contains(&"linktest_host_summary"), "{written:?}");
        // Three hosts of two ranks: an intra and an inter row each.
        let sum = table(&out, "linktest_host_summary").unwrap();
        let b = &sum.batches[0];
        assert_eq!(b.num_rows(), 6);
        let pairs = b
            .column_by_name("pairs")
            .unwrap()
            .as_primitive::<arrow::datatypes::Int64Type>();
        // node0000: 0↔1 (2 intra pairs); with the 4 other ranks, 2 × 4 × 2 = 16 inter.
        assert_eq!(pairs.values()[..2], [2, 16]);
        // The pairs carry their hosts: rank r is on node{r / 2}.
        let timings = out
            .encoded
            .iter()
            .find(|e| e.table == "linktest_timings")
            .unwrap();
        let mut seen = 0;
        timings
            .for_each_batch(&[], |b| {
                let from = b
                    .column_by_name("from_rank")
                    .unwrap()
                    .as_primitive::<arrow::datatypes::Int32Type>();
                let host = b.column_by_name("to_host").unwrap().as_string::<i32>();
                let to = b
                    .column_by_name("to_rank")
                    .unwrap()
                    .as_primitive::<arrow::datatypes::Int32Type>();
                let fhost = b.column_by_name("from_host").unwrap().as_string::<i32>();
                for i in 0..b.num_rows() {
                    assert_eq!(fhost.value(i), format!("node{:04}", from.value(i) / 2));
                    assert_eq!(host.value(i), format!("node{:04}", to.value(i) / 2));
                    assert!(host.is_valid(i));
                    seen += 1;
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, 30);
    }

    /// A pio ingest writes `io_node_summary` beside `io_task_times`: one row
    /// per operation of the node both processes ran on, with the process
    /// bandwidths of the node checks; only tables pio declares.
    #[test]
    fn pio_ingest_writes_the_node_summary() {
        use arrow::array::AsArray;
        let json = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../formats/tests/data/pio_np2_result.json"
        ))
        .unwrap();
        let ran = execute("pio", "pio", vec![("pio-result.json".into(), json)]);
        let out = ran.out.unwrap();
        let allowed = benchlake_formats::ingest::tables("pio").unwrap();
        for t in &out.tables {
            assert!(allowed.contains(&t.table.as_str()), "{}", t.table);
        }
        let times = &table(&out, "io_task_times").unwrap().batches;
        let want = benchlake_analysis::node_checks::node_bandwidths(times);
        let sum = table(&out, "io_node_summary").unwrap();
        let b = &sum.batches[0];
        let node = b.column_by_name("node").unwrap().as_string::<i32>();
        let op = b.column_by_name("operation").unwrap().as_string::<i32>();
        let n = b
            .column_by_name("processes")
            .unwrap()
            .as_primitive::<arrow::datatypes::Int64Type>();
        let (lo, hi) = (
            b.column_by_name("min_bw_mib_s")
                .unwrap()
                .as_primitive::<arrow::datatypes::Float64Type>(),
            b.column_by_name("max_bw_mib_s")
                .unwrap()
                .as_primitive::<arrow::datatypes::Float64Type>(),
        );
        assert!(b.num_rows() >= 2, "write and read of node vm");
        for i in 0..b.num_rows() {
            assert_eq!(node.value(i), "vm");
            // The node checks' mean process bandwidth lies within min..max.
            let mean = want[op.value(i)]["vm"];
            assert!(
                lo.value(i) <= mean && mean <= hi.value(i),
                "{mean} {lo:?} {hi:?}"
            );
            assert!(n.value(i) >= 2);
        }
    }

    /// An OSU output through the ingest executor: its rows in `osu_results`
    /// (the one table its descriptor declares) and one checks follow-up.
    #[test]
    fn osu_ingest_writes_its_table_and_queues_its_checks() {
        let text = "# OSU MPI Latency Test v7.3\n# Size       Avg Latency(us)\n0 1.41\n1 1.43\n";
        let ran = execute("osu", "osu", vec![("osu_latency.txt".into(), text.into())]);
        let out = ran.out.unwrap();
        let allowed = benchlake_formats::ingest::tables("osu").unwrap();
        assert_eq!(allowed, ["osu_results"]);
        assert_eq!(out.tables.len(), 1);
        assert_eq!(table(&out, "osu_results").map(|t| t.rows()), Some(2));
        let kinds: Vec<&str> = out.follow_ups.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["checks"]);
        assert_eq!(out.follow_ups[0].spec["format"], "osu");
        // A bad row names the raw object and the byte offset.
        let ran = execute(
            "osu",
            "osu",
            vec![(
                "osu_bw.txt".into(),
                b"# OSU MPI Bandwidth Test v7.3\n# Size  Bandwidth (MB/s)\n1 -3\n".to_vec(),
            )],
        );
        let e = ran.out.unwrap_err().to_string();
        assert!(e.contains(&format!("raw/{}/", ran.run_id)), "{e}");
        assert!(
            e.contains("osu_bw.txt: value at line 3, column 3 (byte offset 57)"),
            "{e}"
        );
    }

    fn table<'a>(o: &'a ExecOutput, name: &str) -> Option<&'a TableOutput> {
        o.tables.iter().find(|t| t.table == name)
    }

    #[test]
    fn the_rank_map_lands_in_mpi_trace_ranks_and_places_the_replay() {
        let (out, input) = ingest(Some(
            "# benchlake-tracer ranks v1\nranks 2\n0 host n1\n1 host n2\n",
        ));
        let out = out.unwrap();
        let t = table(&out, "mpi_trace_ranks").expect("mpi_trace_ranks");
        assert_eq!(t.rows(), 2);
        let b = &t.batches[0];
        let node = b
            .column_by_name("node")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((node.value(0), node.value(1)), ("n1", "n2"));
        assert!(table(&out, "mpi_trace_records").is_some());
        assert!(
            input.contains("NUMBER_OF_HOSTS 2\nHOST_TYPE 2\n"),
            "{input}"
        );
        // The node check follows the traced run's bandela ingest.
        assert!(out.follow_ups.iter().any(|f| f.kind == "checks"));
    }

    #[test]
    fn an_old_trace_without_a_rank_map_still_ingests() {
        let (out, input) = ingest(None);
        let out = out.unwrap();
        assert!(table(&out, "mpi_trace_ranks").is_none());
        assert!(table(&out, "mpi_trace_records").is_some());
        assert!(
            input.contains("NUMBER_OF_HOSTS 1\nHOST_TYPE 0\n"),
            "{input}"
        );
    }

    #[test]
    fn a_bad_rank_map_fails_the_ingest_naming_the_object() {
        let (out, _) = ingest(Some(
            "# benchlake-tracer ranks v1\nranks 2\n0 h n1\n0 h n2\n",
        ));
        let e = out.unwrap_err().to_string();
        assert!(
            e.contains("/bandela_ranks: rank at byte offset 43: rank 0 appears twice"),
            "{e}"
        );
        assert!(!e.contains("scratch"), "{e}");
        let (out, _) = ingest(Some(
            "# benchlake-tracer ranks v1\nranks 3\n0 h a\n1 h b\n2 h c\n",
        ));
        let e = out.unwrap_err().to_string();
        assert!(
            e.contains("3 ranks, but the task has 2 Bandela rank files"),
            "{e}"
        );
    }
}

#[cfg(test)]
#[path = "record_bundle_tests.rs"]
mod record_bundle_tests;

/// Merges a table month's small parts into one file (`compact` jobs, which
/// the coordinator schedules): the merged file goes to staging like any
/// table and the coordinator checks and commits it (docs/architecture.md,
/// "Compaction").
pub struct Compact;

impl Executor for Compact {
    fn kind(&self) -> &'static str {
        benchlake_core::jobs::COMPACT_JOB
    }
    fn execute(&self, ctx: &JobContext) -> Result<ExecOutput, ExecError> {
        let s: benchlake_core::jobs::CompactSpec = spec(ctx)?;
        if catalog::get(&s.table).is_none() {
            return Err(ExecError::Permanent(format!(
                "compact job spec: unknown table '{}'",
                s.table
            )));
        }
        if s.parts.len() < 2 {
            return Err(ExecError::Permanent(format!(
                "compact job spec: {} part(s) of {} {}; nothing to merge",
                s.parts.len(),
                s.table,
                s.month
            )));
        }
        let (data, meta) = ctx.block_on(ctx.lake.merge_parts(
            &s.table,
            &s.parts,
            s.merged_from.clone(),
        ))?;
        let rows: u64 = meta.parts.iter().map(|p| p.rows).sum();
        tracing::info!(table = %s.table, month = %s.month, parts = meta.parts.len(),
            rows, bytes = data.len(), "merged a month's parts");
        Ok(ExecOutput {
            encoded: vec![benchlake_core::lake::EncodedTable {
                table: s.table,
                part: layout::COMPACTED_PART.to_string(),
                rows: rows as usize,
                data,
                spilled: None,
            }],
            ..ExecOutput::default()
        })
    }
}
