//! `RunService`: submit, read, watch, cancel and re-run runs; trigger an
//! analysis of a run's outputs and download its reports.
use std::collections::BTreeMap;

use benchlake_core::{ids, layout};
use benchlake_proto::v1 as pb;
use pb::run_service_server::RunService;
use tonic::{Request, Response, Status};

use super::{BoxStream, Svc, check_id, invalid};
use crate::actions::owned_run;
use crate::audit::Actor;
use crate::auth::identity_of;
use crate::config::Identity;
use crate::convert;
use crate::error::{CoordError, Result};
use crate::lifecycle::{self, Effects};
use crate::logic;
use crate::model::*;

/// Whether a run has nothing left to do (final and its record landed).
fn settled(d: &pb::RunDetail) -> bool {
    let Some(r) = &d.run else { return true };
    let final_state = matches!(
        pb::RunState::try_from(r.state),
        Ok(pb::RunState::Succeeded | pb::RunState::Failed | pb::RunState::Cancelled)
    );
    final_state
        && d.jobs.iter().all(|j| {
            matches!(
                pb::JobState::try_from(j.state),
                Ok(pb::JobState::Done | pb::JobState::Failed | pb::JobState::Cancelled)
            )
        })
}

#[tonic::async_trait]
impl RunService for Svc {
    async fn submit_run(
        &self,
        req: Request<pb::SubmitRunRequest>,
    ) -> std::result::Result<Response<pb::Run>, Status> {
        let owner = identity_of(&req).principal();
        let r = req.into_inner();
        let spec = r.spec.ok_or_else(|| invalid("spec", "is required"))?;
        if r.idempotency_key.len() > 200 {
            return Err(invalid("idempotency_key", "longer than 200 characters"));
        }
        let key = (!r.idempotency_key.is_empty()).then_some(r.idempotency_key);
        self.0.cfg.notify.check_names("notify", &r.notify)?;
        let notify = r.notify;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let (run, fx) = self
            .tx(move |tx| {
                if let Some(k) = &key
                    && let Some(run) = tx.run_by_idempotency_key(k)?
                {
                    // The run created earlier with this key: nothing changed.
                    return Ok((convert::run_tx(tx, &run)?, Effects::default()));
                }
                // Validation and selection read the placement index, not the rows.
                let (spec, kind) = logic::validate_spec_tx(&cfg, tx, &spec)?;
                let chosen = logic::select_agents(tx, &spec, &[])?;
                let origin = Origin {
                    idempotency_key: key.clone(),
                    notify: notify.clone(),
                    owner: owner.clone(),
                    ..Default::default()
                };
                let (run, fx) = lifecycle::run::create(tx, &cfg, spec, kind, origin, chosen, now)?;
                Ok((convert::run_tx(tx, &run)?, fx))
            })
            .await?;
        tracing::info!(run = %run.run_id, benchmark = %run.benchmark, "run submitted");
        self.0.apply(fx);
        Ok(Response::new(run))
    }

    async fn get_run(
        &self,
        req: Request<pb::GetRunRequest>,
    ) -> std::result::Result<Response<pb::RunDetail>, Status> {
        let id = req.into_inner().run_id;
        check_id("run_id", &id)?;
        let id2 = id.clone();
        let mut d = self.read(move |tx| convert::run_detail(tx, &id2)).await?;
        self.with_verdict(d.run.as_mut());
        d.checks = self.checks_of(&id).await?;
        Ok(Response::new(d))
    }

    async fn list_runs(
        &self,
        req: Request<pb::ListRunsRequest>,
    ) -> std::result::Result<Response<pb::ListRunsResponse>, Status> {
        let r = req.into_inner();
        let f = convert::run_filter(r);
        let runs = self
            .read(move |tx| {
                let runs = tx.list_runs(&f)?;
                runs.iter()
                    .map(|r| convert::run_tx(tx, r))
                    .collect::<Result<Vec<_>>>()
            })
            .await?;
        let mut runs = runs;
        for r in &mut runs {
            self.with_verdict(Some(r));
        }
        Ok(Response::new(pb::ListRunsResponse { runs }))
    }

    type WatchRunStream = BoxStream<pb::RunEvent>;

    async fn watch_run(
        &self,
        req: Request<pb::WatchRunRequest>,
    ) -> std::result::Result<Response<Self::WatchRunStream>, Status> {
        let id = req.into_inner().run_id;
        check_id("run_id", &id)?;
        let id2 = id.clone();
        let mut first = self.read(move |tx| convert::run_detail(tx, &id2)).await?;
        self.with_verdict(first.run.as_mut());
        let mut rx = self.0.events.subscribe();
        let (out, out_rx) = tokio::sync::mpsc::channel(16);
        let me = self.clone();
        let stopped = self.0.stopped();
        tokio::spawn(async move {
            tokio::pin!(stopped);
            let mut last = first.clone();
            let ev = |d: &pb::RunDetail, m: &str| pb::RunEvent {
                run: d.run.clone(),
                tasks: d.tasks.clone(),
                jobs: d.jobs.clone(),
                message: m.to_string(),
            };
            if out.send(Ok(ev(&first, "current state"))).await.is_err() || settled(&first) {
                return;
            }
            loop {
                // Events carry run ids; a periodic re-read covers lagged receivers.
                let wake = tokio::select! {
                    w = tokio::time::timeout(std::time::Duration::from_secs(2), rx.recv()) => w,
                    _ = &mut stopped => {
                        // Not held open through the drain: the client watches again.
                        let _ = out
                            .send(Err(Status::unavailable(
                                "the coordinator is stopping; watch the run again",
                            )))
                            .await;
                        return;
                    }
                };
                match wake {
                    Ok(Ok(r)) if r != id => continue,
                    Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
                    _ => {}
                }
                let id2 = id.clone();
                let d = match me.tx(move |tx| convert::run_detail(tx, &id2)).await {
                    Ok(mut d) => {
                        me.with_verdict(d.run.as_mut());
                        d
                    }
                    Err(e) => {
                        let _ = out.send(Err(e)).await;
                        return;
                    }
                };
                if d != last {
                    if out.send(Ok(ev(&d, "changed"))).await.is_err() {
                        return;
                    }
                    last = d;
                }
                if settled(&last) {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out_rx),
        )))
    }

    async fn cancel_run(
        &self,
        req: Request<pb::CancelRunRequest>,
    ) -> std::result::Result<Response<pb::Run>, Status> {
        let who = Actor::api(identity_of(&req));
        let r = req.into_inner();
        check_id("run_id", &r.run_id)?;
        if r.reason.len() > 1000 {
            return Err(invalid("reason", "longer than 1000 characters"));
        }
        let run = self
            .0
            .cancel_run(&who, &r.run_id, &r.reason, |tx, run| {
                convert::run_tx(tx, run)
            })
            .await?;
        Ok(Response::new(run))
    }

    async fn rerun_failed(
        &self,
        req: Request<pb::RerunFailedRequest>,
    ) -> std::result::Result<Response<pb::Run>, Status> {
        let who = Actor::api(identity_of(&req));
        let id = req.into_inner().run_id;
        check_id("run_id", &id)?;
        let run = self
            .0
            .rerun_failed(&who, &id, |tx, run| convert::run_tx(tx, run))
            .await?;
        Ok(Response::new(run))
    }

    async fn analyze_run(
        &self,
        req: Request<pb::AnalyzeRunRequest>,
    ) -> std::result::Result<Response<pb::AnalyzeRunResponse>, Status> {
        let id = identity_of(&req);
        self.analyze_run_impl(&id, req.into_inner()).await
    }

    type DownloadReportsStream = BoxStream<pb::ReportChunk>;

    async fn download_reports(
        &self,
        req: Request<pb::DownloadReportsRequest>,
    ) -> std::result::Result<Response<Self::DownloadReportsStream>, Status> {
        self.download_reports_impl(req.into_inner()).await
    }
}

/// The analysis options `AnalyzeRun` accepts, as the JSON the `analyze_plan`
/// executor reads (`benchlake_analysis::counts::Options`).
fn analysis_options(
    opts: &std::collections::HashMap<String, String>,
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, Status> {
    let mut out = serde_json::Map::new();
    let mut keys: Vec<_> = opts.keys().collect();
    keys.sort();
    for k in keys {
        let v = opts[k].trim();
        let field = format!("options.{k}");
        let val = match k.as_str() {
            "size_threshold" | "max_part_bytes" => {
                let n: u64 = v
                    .parse()
                    .map_err(|_| invalid(&field, format!("'{v}' is not a non-negative integer")))?;
                if k == "max_part_bytes" && n == 0 {
                    return Err(invalid(&field, "must be at least 1"));
                }
                serde_json::Value::from(n)
            }
            "reference_compat" | "call_heatmaps" => match v {
                "true" | "1" | "yes" => serde_json::Value::Bool(true),
                "false" | "0" | "no" => serde_json::Value::Bool(false),
                _ => return Err(invalid(&field, format!("'{v}' is not true or false"))),
            },
            _ => {
                return Err(invalid(
                    &field,
                    "unknown option (size_threshold, reference_compat, max_part_bytes, call_heatmaps)",
                ));
            }
        };
        out.insert(k.clone(), val);
    }
    Ok(out)
}

impl Svc {
    /// The verdict rows of run `id` from the verdict index: run-level
    /// checks, then node rows, each in object key order (the node rows of
    /// an older run read from the lake: [`crate::verdicts::read_run`]).
    async fn checks_of(&self, id: &str) -> crate::error::Result<Vec<pb::RunCheck>> {
        let Some(v) = crate::verdicts::read_run(&self.0, id).await? else {
            return Ok(Vec::new());
        };
        let row = |node: &str, r: &crate::verdicts::CheckRow| pb::RunCheck {
            check: r.check.clone(),
            status: r.status.clone(),
            value: r.value,
            reference: r.reference,
            unit: r.unit.clone(),
            message: r.message.clone(),
            node: node.to_string(),
            since_run: r.since_run.clone(),
            since_date: r.since_date.clone(),
            step: r.step,
            confidence: r.confidence,
        };
        Ok(v.rows()
            .map(|r| row("", r))
            .chain(v.node_rows().map(|(n, r)| row(n, r)))
            .collect())
    }

    /// Fills a run's overall verdict (the worst status of its checks, from the
    /// verdicts read off the committed `checks` files; empty while none is).
    fn with_verdict(&self, run: Option<&mut pb::Run>) {
        if let Some(r) = run
            && let Some(v) = self.0.verdicts.verdict(&r.run_id)
        {
            r.verdict = v.to_string();
        }
    }

    /// `AnalyzeRun`: a new run of kind `analysis` (benchmark `analyze-counts`,
    /// parameter `source_run`) in PROCESSING with one `analyze_plan` job over the
    /// source run's `counts` outputs; the plan fans out into part jobs and a merge
    /// job that waits for them (job groups). Like `TriggerReplay`, the analysis
    /// gets its own run, so its tables and reports never mix with an earlier
    /// analysis of the same files.
    async fn analyze_run_impl(
        &self,
        id: &Identity,
        r: pb::AnalyzeRunRequest,
    ) -> std::result::Result<Response<pb::AnalyzeRunResponse>, Status> {
        check_id("run_id", &r.run_id)?;
        // The kinds whose ingest is followed by an analysis (their
        // descriptors, benchlake_formats::kinds); the first is the default.
        let mut analyses = benchlake_formats::kinds::analyses();
        let kind = if r.analysis.is_empty() {
            analyses.next()
        } else {
            analyses.find(|k| k.name == r.analysis)
        };
        let Some(kind) = kind else {
            let known: Vec<&str> = benchlake_formats::kinds::analyses()
                .map(|k| k.name)
                .collect();
            return Err(invalid(
                "analysis",
                format!("'{}' is not an analysis ({})", r.analysis, known.join(", ")),
            ));
        };
        let analysis = kind.name;
        let options = analysis_options(&r.options)?;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let src = r.run_id.clone();
        let who = id.clone();
        let (run_id, job_id, fx) = self.tx(move |tx| {
            let id = &who;
            let source = owned_run(tx, id, &src)?;
            let tasks = tx.tasks_of_run(&src)?;
            if !tasks.iter().all(|t| t.state.is_final()) {
                return Err(CoordError::FailedPrecondition(format!(
                    "run {src} is {} and its tasks have not all ended; analyse it when they have",
                    source.state.as_str()
                )));
            }
            let keys: Vec<String> = tasks
                .iter()
                .flat_map(|t| t.outputs.iter())
                .filter(|o| o.format == analysis)
                .map(|o| o.key.clone())
                .collect();
            if keys.is_empty() {
                return Err(CoordError::FailedPrecondition(format!(
                    "run {src} has no outputs of format '{analysis}' to analyse"
                )));
            }
            let run_id = ids::new_id_at(now);
            let mut params = BTreeMap::new();
            params.insert("source_run".to_string(), src.clone());
            for (k, v) in &options {
                params.insert(k.clone(), v.to_string());
            }
            let spec = serde_json::json!({ "keys": keys, "options": options });
            let (run, jobs, fx) = lifecycle::run::create_processing(
                tx,
                &cfg,
                run_id,
                "analyze-counts".into(),
                "analysis",
                params,
                vec![(
                    benchlake_core::jobs::ANALYZE_PLAN_JOB.to_string(),
                    spec.to_string(),
                )],
                id.principal(),
                now,
            )?;
            let job_id = jobs
                .into_iter()
                .next()
                .map(|j| j.job_id)
                .unwrap_or_default();
            Ok((run.run_id, job_id, fx))
        }).await?;
        tracing::info!(run = %run_id, source = %r.run_id, "counts analysis triggered");
        self.0.apply(fx);
        Ok(Response::new(pb::AnalyzeRunResponse {
            reports_prefix: layout::counts_reports_prefix(&run_id, &job_id)
                .map_err(CoordError::from)?,
            run_id,
            job_ids: vec![job_id],
        }))
    }

    /// `DownloadReports`: every object under `reports/{run_id}/{prefix}`, in
    /// chunks of at most 1 MiB, files in key order.
    async fn download_reports_impl(
        &self,
        r: pb::DownloadReportsRequest,
    ) -> std::result::Result<Response<BoxStream<pb::ReportChunk>>, Status> {
        check_id("run_id", &r.run_id)?;
        let full = layout::reports_under(&r.run_id, &r.prefix).map_err(|e| invalid("prefix", e))?;
        let lake = self.0.lake.clone();
        let objects = lake.list(&full).await.map_err(CoordError::from)?;
        if objects.is_empty() {
            return Err(Status::not_found(format!("no reports under {full}")));
        }
        let (out, out_rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            const CHUNK: usize = 1 << 20;
            for (key, _) in objects {
                let name = key.strip_prefix(&full).unwrap_or(&key).to_string();
                let data = match lake.get(&key).await {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = out.send(Err(Status::from(CoordError::from(e)))).await;
                        return;
                    }
                };
                let mut off = 0usize;
                loop {
                    let end = (off + CHUNK).min(data.len());
                    let chunk = pb::ReportChunk {
                        name: name.clone(),
                        offset: off as u64,
                        data: data.slice(off..end).to_vec(),
                        last: end == data.len(),
                    };
                    if out.send(Ok(chunk)).await.is_err() {
                        return;
                    }
                    off = end;
                    if off >= data.len() {
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out_rx),
        )))
    }
}
