//! `ReplayService`: a replay of a trace (in the lake, or uploaded) under a
//! model, one job per point of the parameter sweep.
use std::collections::BTreeMap;

use benchlake_core::jobs::{INGEST_JOB, REPLAY_JOB};
use benchlake_core::{ids, layout};
use benchlake_proto::v1 as pb;
use pb::replay_service_server::ReplayService;
use tonic::{Request, Response, Status};

use super::{Svc, check_name, invalid};
use crate::error::CoordError;
use crate::lifecycle;

/// Largest sweep a single TriggerReplay may ask for.
pub const MAX_SWEEP_POINTS: usize = 10_000;

/// The cartesian product of the sweep axes (one empty point when there are none).
fn sweep_points(
    axes: &[pb::SweepAxis],
) -> std::result::Result<Vec<BTreeMap<String, String>>, Status> {
    if axes.len() > 16 {
        return Err(invalid("sweep", "more than 16 axes"));
    }
    let mut points = vec![BTreeMap::new()];
    for (i, a) in axes.iter().enumerate() {
        check_name(&format!("sweep[{i}].param"), &a.param, 64)?;
        if a.values.is_empty() {
            return Err(invalid(&format!("sweep[{i}].values"), "is empty"));
        }
        if points.iter().any(|p| p.contains_key(&a.param)) {
            return Err(invalid(
                &format!("sweep[{i}].param"),
                format!("'{}' appears twice", a.param),
            ));
        }
        if points.len().saturating_mul(a.values.len()) > MAX_SWEEP_POINTS {
            return Err(invalid(
                "sweep",
                format!("more than {MAX_SWEEP_POINTS} points"),
            ));
        }
        let mut next = Vec::with_capacity(points.len() * a.values.len());
        for p in &points {
            for v in &a.values {
                let mut q = p.clone();
                q.insert(a.param.clone(), v.clone());
                next.push(q);
            }
        }
        points = next;
    }
    Ok(points)
}

impl Svc {
    /// The calibration a request names, resolved to an id that exists and
    /// was fitted: `latest` is the newest covering the nodes (the agents of
    /// the tasks) of the run the trace belongs to; an id is checked to be a
    /// ULID before it reaches a key. None when the request names none.
    async fn calibration_of(
        &self,
        name: &str,
        trace_key: &str,
        uploaded: bool,
    ) -> std::result::Result<Option<String>, Status> {
        let name = name.trim();
        if name.is_empty() {
            return Ok(None);
        }
        let mut nodes = std::collections::BTreeSet::new();
        if name == "latest" && !uploaded {
            let run = trace_key
                .strip_prefix("raw/")
                .and_then(|r| r.split('/').next())
                .unwrap_or_default()
                .to_string();
            if ids::validate_id("run_id", &run).is_ok() {
                let tasks = self.tx(move |tx| tx.tasks_of_run(&run)).await?;
                nodes.extend(tasks.into_iter().map(|t| t.agent));
            }
        } else if name != "latest" && ids::validate_id("calibration", name).is_err() {
            return Err(invalid(
                "calibration",
                format!("'{name}' is neither 'latest' nor a calibration id (a ULID)"),
            ));
        }
        match benchlake_replay::calibrations::resolve(&self.0.lake, name, &nodes).await {
            Ok(d) => Ok(Some(d.id)),
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        }
    }
}

#[tonic::async_trait]
impl ReplayService for Svc {
    async fn trigger_replay(
        &self,
        req: Request<pb::TriggerReplayRequest>,
    ) -> std::result::Result<Response<pb::TriggerReplayResponse>, Status> {
        let owner = crate::auth::identity_of(&req).principal();
        let r = req.into_inner();
        let model = r.model.as_str();
        let Ok(spec_model) = benchlake_replay::models::get(model) else {
            return Err(invalid(
                "model",
                format!(
                    "'{model}' is not a model ({})",
                    benchlake_replay::models::known()
                ),
            ));
        };
        let points = sweep_points(&r.sweep)?;
        let now = self.0.now();
        let run_id = ids::new_id_at(now);
        let upload_id = ids::new_id_at(now);
        let lake = &self.0.lake;
        let mut base: BTreeMap<String, String> = r.params.into_iter().collect();
        let (trace_key, uploaded) = match r.trace.and_then(|t| t.source) {
            Some(pb::trace_ref::Source::RawKey(k)) => {
                if !layout::is_raw_key(&k) {
                    return Err(invalid(
                        "trace.raw_key",
                        format!("'{k}' is not a raw object key (raw/RUN/TASK/FILE)"),
                    ));
                }
                let found = if spec_model.trace.per_rank_files() {
                    if !k.ends_with('/') {
                        return Err(invalid("trace.raw_key", spec_model.trace.in_lake()));
                    }
                    !lake.list(&k).await.map_err(CoordError::from)?.is_empty()
                } else {
                    // The object, or a member of its run's bundle.
                    lake.raw_exists(&k).await.map_err(CoordError::from)?
                };
                if !found {
                    return Err(Status::not_found(format!(
                        "trace.raw_key: nothing at '{k}'"
                    )));
                }
                (k, false)
            }
            Some(pb::trace_ref::Source::Uploaded(u)) => {
                if spec_model.trace.per_rank_files() {
                    return Err(invalid(
                        "trace.uploaded",
                        format!(
                            "a {} trace is one file per rank: put it in the lake (a traced run) and pass trace.raw_key",
                            spec_model.title
                        ),
                    ));
                }
                let key = layout::raw_key(&run_id, &upload_id, &u.file_name)
                    .map_err(|e| invalid("trace.uploaded.file_name", e))?;
                if u.data.is_empty() {
                    return Err(invalid("trace.uploaded.data", "is empty"));
                }
                lake.put(&key, bytes::Bytes::from(u.data))
                    .await
                    .map_err(CoordError::from)?;
                (key, true)
            }
            None => return Err(invalid("trace", "give raw_key or uploaded")),
        };
        // Configuration texts travel as parameters; the model reads them as files.
        let mut files = BTreeMap::new();
        for name in benchlake_replay::models::file_params() {
            if let Some(text) = base.remove(name) {
                let key = layout::raw_key(&run_id, &upload_id, &format!("{name}.txt"))
                    .map_err(|e| invalid(&format!("params.{name}"), e))?;
                lake.put(&key, bytes::Bytes::from(text.into_bytes()))
                    .await
                    .map_err(CoordError::from)?;
                files.insert(name.to_string(), key);
            }
        }
        if let Some((name, msg)) = spec_model.missing_file(files.keys().map(String::as_str)) {
            return Err(invalid(&format!("params.{name}"), msg));
        }
        // Every point must be valid for the model before any job exists.
        for p in &points {
            let mut all = base.clone();
            all.extend(p.clone());
            spec_model
                .check_params(&all)
                .map_err(|e| Status::invalid_argument(format!("params: {e}")))?;
        }
        let calibration = self
            .calibration_of(&r.calibration, &trace_key, uploaded)
            .await?;
        let cfg = self.0.cfg.clone();
        let n = points.len();
        let (model_s, rid) = (model.to_string(), run_id.clone());
        let fx = self
            .tx(move |tx| {
                let model = model_s.as_str();
                let mut params = base.clone();
                params.insert("model".into(), model.to_string());
                params.insert("trace".into(), trace_key.clone());
                params.insert("points".into(), n.to_string());
                if let Some(c) = &calibration {
                    params.insert("calibration".into(), c.clone());
                }
                let mut jobs = Vec::with_capacity(points.len() + 1);
                if uploaded {
                    let spec = benchlake_core::jobs::IngestSpec {
                        format: spec_model.trace.format().to_string(),
                        keys: vec![trace_key.clone()],
                        task_id: upload_id.clone(),
                        agent: "client".into(),
                        agent_hostname: None,
                    };
                    jobs.push((INGEST_JOB.to_string(), serde_json::to_string(&spec)?));
                }
                for p in &points {
                    let spec = benchlake_core::jobs::ReplaySpec {
                        model: model.to_string(),
                        trace_key: trace_key.clone(),
                        files: files.clone(),
                        params: base.clone(),
                        point: p.clone(),
                        replay_id: ids::new_id_at(now),
                        calibration: calibration.clone(),
                        calibration_note: None,
                    };
                    jobs.push((REPLAY_JOB.to_string(), serde_json::to_string(&spec)?));
                }
                let (_, _, fx) = lifecycle::run::create_processing(
                    tx,
                    &cfg,
                    rid,
                    format!("replay-{model}"),
                    "replay",
                    params,
                    jobs,
                    owner.clone(),
                    now,
                )?;
                Ok(fx)
            })
            .await?;
        tracing::info!(run = %run_id, model, points = n, "replay triggered");
        self.0.apply(fx);
        Ok(Response::new(pb::TriggerReplayResponse {
            run_id,
            points: n as u32,
        }))
    }
}
