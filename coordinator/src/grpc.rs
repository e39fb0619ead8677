//! The gRPC services of DESIGN.md §5 on top of [`Coordinator`], and the router
//! that serves them with reflection, Flight and the token interceptors.
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use benchlake_core::bench::{BenchmarkInfo, LauncherKind, OutputDef, ParamDef, ParamType};
use benchlake_core::{ids, layout};
use benchlake_proto::v1 as pb;
use futures::Stream;
use pb::agent_service_server::{AgentService, AgentServiceServer};
use pb::cluster_service_server::{ClusterService, ClusterServiceServer};
use pb::replay_service_server::{ReplayService, ReplayServiceServer};
use pb::run_service_server::{RunService, RunServiceServer};
use pb::schedule_service_server::{ScheduleService, ScheduleServiceServer};
use pb::worker_service_server::{WorkerService, WorkerServiceServer};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use crate::Coordinator;
use crate::auth::{Guard, identity_of, interceptor, require};
use crate::config::Role;
use crate::error::{CoordError, Result};
use crate::logic::{self, Origin};
use crate::model::*;
use crate::scheduler::{self, CronSpec};
use crate::store::{RunFilter, Tx};

type Shared = Arc<Coordinator>;

/// Builds the tonic router with every service.
pub fn router(coord: Shared) -> Result<tonic::transport::server::Router> {
    let guard = Guard::new(coord.cfg.tokens.clone());
    let max = coord.cfg.max_message_bytes;
    let refl1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(benchlake_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| CoordError::Setup(format!("reflection: {e}")))?;
    let refl1a = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(benchlake_proto::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| CoordError::Setup(format!("reflection: {e}")))?;
    const USERS: &[Role] = &[Role::User];
    const AGENTS: &[Role] = &[Role::Agent];
    const WORKERS: &[Role] = &[Role::Worker];
    // Reflection describes the API to any authenticated caller (grpcurl sends
    // its -H headers with the reflection calls too); nothing to anonymous ones.
    const ANY: &[Role] = &[Role::User, Role::Agent, Role::Worker];
    let svc = Svc(coord.clone());
    // Every gRPC service: the shared implementation behind a token check for
    // the roles that may call it.
    macro_rules! guarded {
        ($server:ident, $roles:expr, $name:literal) => {
            SizeLimitCode(InterceptedService::new(
                $server::new(svc.clone()).max_decoding_message_size(max),
                interceptor(guard.clone(), $roles, $name),
            ))
        };
    }
    Ok(tonic::transport::Server::builder()
        .add_service(InterceptedService::new(
            refl1,
            interceptor(guard.clone(), ANY, "ServerReflection"),
        ))
        .add_service(InterceptedService::new(
            refl1a,
            interceptor(guard.clone(), ANY, "ServerReflection"),
        ))
        .add_service(guarded!(RunServiceServer, USERS, "RunService"))
        .add_service(guarded!(ScheduleServiceServer, USERS, "ScheduleService"))
        .add_service(guarded!(ClusterServiceServer, USERS, "ClusterService"))
        .add_service(guarded!(ReplayServiceServer, USERS, "ReplayService"))
        .add_service(guarded!(AgentServiceServer, AGENTS, "AgentService"))
        .add_service(guarded!(WorkerServiceServer, WORKERS, "WorkerService"))
        .add_service(InterceptedService::new(
            arrow_flight::flight_service_server::FlightServiceServer::new(
                crate::flight::FlightSvc(coord),
            ),
            interceptor(guard, USERS, "FlightService"),
        )))
}

/// A service whose over-limit messages answer `RESOURCE_EXHAUSTED`, the gRPC
/// convention for a message larger than the receiver accepts (tonic's decoder
/// says `OUT_OF_RANGE`, a code no handler of ours uses).
#[derive(Clone)]
pub struct SizeLimitCode<S>(S);

impl<S: tonic::server::NamedService> tonic::server::NamedService for SizeLimitCode<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, ReqB, ResB> tonic::codegen::Service<http::Request<ReqB>> for SizeLimitCode<S>
where
    S: tonic::codegen::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqB>) -> Self::Future {
        let f = self.0.call(req);
        Box::pin(async move {
            let mut r = f.await?;
            // An error before any message is a trailers-only response: the
            // status is in the headers.
            let h = r.headers_mut();
            if h.get("grpc-status").map(|v| v.as_bytes()) == Some(b"11") {
                h.insert("grpc-status", http::HeaderValue::from_static("8"));
            }
            Ok(r)
        })
    }
}

/// The service implementation (one struct for all services).
#[derive(Clone)]
pub struct Svc(pub Shared);

impl Svc {
    /// Refuses a caller that may not act as agent `name`: a credential bound
    /// to another name, or not the credential the agent registered with.
    fn check_agent(&self, id: &crate::config::Identity, name: &str) -> Result<()> {
        if !id.may_act_as(name) {
            return Err(CoordError::PermissionDenied(format!(
                "name: this credential belongs to '{}', not to agent '{name}'",
                id.name.as_deref().unwrap_or_default()
            )));
        }
        if id.role != Role::Admin && !id.credential.is_empty() {
            let creds = self.0.credentials.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = creds.get(name)
                && !c.is_empty()
                && *c != id.credential
            {
                return Err(CoordError::PermissionDenied(format!(
                    "name: agent '{name}' registered with another credential"
                )));
            }
        }
        Ok(())
    }

    /// Refuses a caller that may not act as worker `name`.
    fn check_worker(id: &crate::config::Identity, name: &str) -> std::result::Result<(), Status> {
        if id.may_act_as(name) {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "worker: this credential belongs to '{}', not to worker '{name}'",
                id.name.as_deref().unwrap_or_default()
            )))
        }
    }

    fn tx<T>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T>) -> std::result::Result<T, Status> {
        self.0.store.transact(f).map_err(Status::from)
    }
}

fn invalid(field: &str, msg: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {msg}"))
}

fn check_name(field: &str, v: &str, max: usize) -> std::result::Result<(), Status> {
    let ok = !v.is_empty()
        && v.len() <= max
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("'{v}' must be 1-{max} characters of [A-Za-z0-9._-]"),
        ))
    }
}

fn check_id(field: &'static str, v: &str) -> std::result::Result<(), Status> {
    ids::validate_id(field, v).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn detail(tx: &mut dyn Tx, run_id: &str) -> Result<pb::RunDetail> {
    let run = tx
        .get_run(run_id)?
        .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{run_id}'")))?;
    let tasks = tx.tasks_of_run(run_id)?;
    let jobs = tx.jobs_of_run(run_id)?;
    Ok(pb::RunDetail {
        run: Some(run_pb(&run, &tasks)),
        tasks: tasks.iter().map(TaskRow::to_pb).collect(),
        jobs: jobs.iter().map(JobRow::to_pb).collect(),
    })
}

fn run_pb(run: &RunRow, tasks: &[TaskRow]) -> pb::Run {
    let mut agents: Vec<String> = tasks.iter().flat_map(|t| t.peers.iter().cloned()).collect();
    agents.sort();
    agents.dedup();
    run.to_pb(agents)
}

fn run_pb_tx(tx: &mut dyn Tx, run: &RunRow) -> Result<pb::Run> {
    let tasks = tx.tasks_of_run(&run.run_id)?;
    Ok(run_pb(run, &tasks))
}

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

type BoxStream<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl RunService for Svc {
    async fn submit_run(
        &self,
        req: Request<pb::SubmitRunRequest>,
    ) -> std::result::Result<Response<pb::Run>, Status> {
        let r = req.into_inner();
        let spec = r.spec.ok_or_else(|| invalid("spec", "is required"))?;
        if r.idempotency_key.len() > 200 {
            return Err(invalid("idempotency_key", "longer than 200 characters"));
        }
        let key = (!r.idempotency_key.is_empty()).then_some(r.idempotency_key);
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        // The transaction runs on a blocking thread: waiting for the store's
        // lock must not hold an async worker that heartbeats need.
        let coord = self.0.clone();
        let run = tokio::task::spawn_blocking(move || {
            coord.store.transact(|tx| {
                if let Some(k) = &key
                    && let Some(run) = tx.run_by_idempotency_key(k)?
                {
                    return run_pb_tx(tx, &run);
                }
                // Validation and selection read the placement index, not the rows.
                let (spec, kind) = logic::validate_spec_tx(&cfg, tx, &spec)?;
                let chosen = logic::select_agents(tx, &spec, &[])?;
                let origin = Origin {
                    idempotency_key: key.clone(),
                    ..Default::default()
                };
                let run = logic::create_run(tx, &cfg, spec, kind, origin, chosen, now)?;
                logic::advance_run(tx, &cfg, &run.run_id, now)?;
                run_pb_tx(tx, &run)
            })
        })
        .await
        .map_err(|e| Status::internal(format!("submit: {e}")))??;
        tracing::info!(run = %run.run_id, benchmark = %run.benchmark, "run submitted");
        self.0.notify_run(&run.run_id);
        Ok(Response::new(run))
    }

    async fn get_run(
        &self,
        req: Request<pb::GetRunRequest>,
    ) -> std::result::Result<Response<pb::RunDetail>, Status> {
        let id = req.into_inner().run_id;
        check_id("run_id", &id)?;
        Ok(Response::new(self.tx(|tx| detail(tx, &id))?))
    }

    async fn list_runs(
        &self,
        req: Request<pb::ListRunsRequest>,
    ) -> std::result::Result<Response<pb::ListRunsResponse>, Status> {
        let r = req.into_inner();
        let f = RunFilter {
            schedule_id: (!r.schedule_id.is_empty()).then_some(r.schedule_id),
            state: RunState::from_pb(r.state),
            benchmark: (!r.benchmark.is_empty()).then_some(r.benchmark),
            limit: r.limit,
        };
        let runs = self.tx(|tx| {
            let runs = tx.list_runs(&f)?;
            runs.iter()
                .map(|r| run_pb_tx(tx, r))
                .collect::<Result<Vec<_>>>()
        })?;
        Ok(Response::new(pb::ListRunsResponse { runs }))
    }

    type WatchRunStream = BoxStream<pb::RunEvent>;

    async fn watch_run(
        &self,
        req: Request<pb::WatchRunRequest>,
    ) -> std::result::Result<Response<Self::WatchRunStream>, Status> {
        let id = req.into_inner().run_id;
        check_id("run_id", &id)?;
        let first = self.tx(|tx| detail(tx, &id))?;
        let mut rx = self.0.events.subscribe();
        let (out, out_rx) = tokio::sync::mpsc::channel(16);
        let me = self.clone();
        tokio::spawn(async move {
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
                let wake = tokio::time::timeout(std::time::Duration::from_secs(2), rx.recv()).await;
                match wake {
                    Ok(Ok(r)) if r != id => continue,
                    Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
                    _ => {}
                }
                let d = match me.tx(|tx| detail(tx, &id)) {
                    Ok(d) => d,
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
        let r = req.into_inner();
        check_id("run_id", &r.run_id)?;
        if r.reason.len() > 1000 {
            return Err(invalid("reason", "longer than 1000 characters"));
        }
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let run = self.tx(|tx| {
            let run = logic::cancel_run(tx, &cfg, &r.run_id, &r.reason, now)?;
            run_pb_tx(tx, &run)
        })?;
        self.0.notify_run(&r.run_id);
        self.0.job_notify.notify_waiters();
        Ok(Response::new(run))
    }

    async fn rerun_failed(
        &self,
        req: Request<pb::RerunFailedRequest>,
    ) -> std::result::Result<Response<pb::Run>, Status> {
        let id = req.into_inner().run_id;
        check_id("run_id", &id)?;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let run = self.tx(|tx| {
            let run = logic::rerun_failed(tx, &cfg, &id, now)?;
            run_pb_tx(tx, &run)
        })?;
        self.0.notify_run(&run.run_id);
        Ok(Response::new(run))
    }

    async fn analyze_run(
        &self,
        req: Request<pb::AnalyzeRunRequest>,
    ) -> std::result::Result<Response<pb::AnalyzeRunResponse>, Status> {
        self.analyze_run_impl(req.into_inner()).await
    }

    type DownloadReportsStream = BoxStream<pb::ReportChunk>;

    async fn download_reports(
        &self,
        req: Request<pb::DownloadReportsRequest>,
    ) -> std::result::Result<Response<Self::DownloadReportsStream>, Status> {
        self.download_reports_impl(req.into_inner()).await
    }
}

fn find_schedule(tx: &mut dyn Tx, id_or_name: &str) -> Result<ScheduleRow> {
    if let Some(s) = tx.get_schedule(id_or_name)? {
        return Ok(s);
    }
    tx.schedule_by_name(id_or_name)?
        .ok_or_else(|| CoordError::NotFound(format!("schedule_id: no schedule '{id_or_name}'")))
}

#[tonic::async_trait]
impl ScheduleService for Svc {
    async fn create_schedule(
        &self,
        req: Request<pb::CreateScheduleRequest>,
    ) -> std::result::Result<Response<pb::Schedule>, Status> {
        let s = req
            .into_inner()
            .schedule
            .ok_or_else(|| invalid("schedule", "is required"))?;
        check_name("schedule.name", &s.name, 100)?;
        let cron = CronSpec::parse(&s.cron, &s.time_zone)?;
        let catch_up = CatchUp::from_pb(s.catch_up)
            .ok_or_else(|| invalid("schedule.catch_up", format!("unknown value {}", s.catch_up)))?;
        if s.max_catch_up > 1000 {
            return Err(invalid("schedule.max_catch_up", "above 1000"));
        }
        let spec = s
            .spec
            .ok_or_else(|| invalid("schedule.spec", "is required"))?;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let row = self.tx(|tx| {
            if tx.schedule_by_name(&s.name)?.is_some() {
                return Err(CoordError::FailedPrecondition(format!(
                    "schedule.name: a schedule named '{}' exists",
                    s.name
                )));
            }
            let agents = tx.list_agents()?;
            let (spec, _kind) =
                logic::validate_spec(&cfg, &agents, &spec).map_err(|e| match e {
                    CoordError::Invalid(m) => CoordError::Invalid(format!("schedule.{m}")),
                    e => e,
                })?;
            let row = ScheduleRow {
                schedule_id: ids::new_id_at(now),
                name: s.name.clone(),
                cron: s.cron.clone(),
                time_zone: if s.time_zone.is_empty() {
                    "UTC".into()
                } else {
                    s.time_zone.clone()
                },
                catch_up,
                max_catch_up: s.max_catch_up,
                allow_overlap: s.allow_overlap,
                paused: s.paused,
                spec,
                next_fire_ms: cron.next_after(now),
                last_fire_ms: None,
                created_ms: now,
            };
            tx.insert_schedule(&row)?;
            Ok(row)
        })?;
        tracing::info!(schedule = %row.name, cron = %row.cron, tz = %row.time_zone, "schedule created");
        Ok(Response::new(row.to_pb()))
    }

    async fn list_schedules(
        &self,
        _req: Request<pb::ListSchedulesRequest>,
    ) -> std::result::Result<Response<pb::ListSchedulesResponse>, Status> {
        let schedules = self.tx(|tx| tx.list_schedules())?;
        Ok(Response::new(pb::ListSchedulesResponse {
            schedules: schedules.iter().map(ScheduleRow::to_pb).collect(),
        }))
    }

    async fn pause_schedule(
        &self,
        req: Request<pb::PauseScheduleRequest>,
    ) -> std::result::Result<Response<pb::Schedule>, Status> {
        let r = req.into_inner();
        let now = self.0.now();
        let row = self.tx(|tx| {
            let mut s = find_schedule(tx, &r.schedule_id)?;
            if s.paused && !r.paused {
                // Instants that passed while paused are not caught up on resume.
                let cron = CronSpec::parse(&s.cron, &s.time_zone)?;
                s.next_fire_ms = cron.next_after(now);
            }
            s.paused = r.paused;
            tx.update_schedule(&s)?;
            Ok(s)
        })?;
        Ok(Response::new(row.to_pb()))
    }

    async fn delete_schedule(
        &self,
        req: Request<pb::DeleteScheduleRequest>,
    ) -> std::result::Result<Response<pb::DeleteScheduleResponse>, Status> {
        let id = req.into_inner().schedule_id;
        self.tx(|tx| {
            let s = find_schedule(tx, &id)?;
            tx.delete_schedule(&s.schedule_id)
        })?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }

    async fn backfill(
        &self,
        req: Request<pb::BackfillRequest>,
    ) -> std::result::Result<Response<pb::BackfillResponse>, Status> {
        let r = req.into_inner();
        if r.from_ms >= r.to_ms {
            return Err(invalid("to_ms", "must be after from_ms"));
        }
        let max = match r.max_runs {
            0 => 100,
            n if n <= 1000 => n,
            n => return Err(invalid("max_runs", format!("{n} is above 1000"))),
        } as usize;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let runs = self.tx(|tx| {
            let s = find_schedule(tx, &r.schedule_id)?;
            let cron = CronSpec::parse(&s.cron, &s.time_zone)?;
            let instants = cron.instants(r.from_ms, r.to_ms, false, max + 1);
            if instants.len() > max {
                return Err(CoordError::invalid(
                    "max_runs",
                    format!(
                        "the range holds more than {max} instants; narrow it or raise max_runs"
                    ),
                ));
            }
            let mut out = Vec::new();
            for t in instants {
                let run = scheduler::fire_one(tx, &cfg, &s, t, now)?;
                out.push(run_pb_tx(tx, &run)?);
            }
            Ok(out)
        })?;
        for r in &runs {
            self.0.notify_run(&r.run_id);
        }
        Ok(Response::new(pb::BackfillResponse { runs }))
    }

    async fn trigger_schedule(
        &self,
        req: Request<pb::TriggerScheduleRequest>,
    ) -> std::result::Result<Response<pb::Run>, Status> {
        let id = req.into_inner().schedule_id;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let run = self.tx(|tx| {
            let s = find_schedule(tx, &id)?;
            if !s.allow_overlap && !tx.active_runs_of_schedule(&s.schedule_id)?.is_empty() {
                return Err(CoordError::FailedPrecondition(format!(
                    "schedule '{}' has an active run and allow_overlap is off",
                    s.name
                )));
            }
            let run = scheduler::fire_one(tx, &cfg, &s, now, now)?;
            run_pb_tx(tx, &run)
        })?;
        self.0.notify_run(&run.run_id);
        Ok(Response::new(run))
    }
}

#[tonic::async_trait]
impl ClusterService for Svc {
    async fn list_agents(
        &self,
        _req: Request<pb::ListAgentsRequest>,
    ) -> std::result::Result<Response<pb::ListAgentsResponse>, Status> {
        let rows = self.tx(|tx| {
            let mut out = Vec::new();
            for a in tx.list_agents()? {
                let running = tx
                    .tasks_of_agent(&a.name, &[TaskState::Leased, TaskState::Running])?
                    .len() as u32;
                out.push((a, running));
            }
            Ok(out)
        })?;
        let agents = rows
            .into_iter()
            .map(|(a, running)| {
                let state = match (a.state, a.drain) {
                    (AgentState::Lost, _) => "LOST",
                    (_, true) if running > 0 => "DRAINING",
                    (_, true) => "DRAINED",
                    _ => "ONLINE",
                };
                pb::AgentInfo {
                    last_heartbeat_ms: self
                        .0
                        .last_heartbeat(&a.name)
                        .unwrap_or(a.last_heartbeat_ms),
                    name: a.name,
                    labels: a.labels.into_iter().collect(),
                    hostname: a.hostname,
                    cores: a.cores,
                    memory_bytes: a.memory_bytes,
                    state: state.into(),
                    benchmarks: a.catalog.into_iter().map(|b| b.name).collect(),
                    address: a.address,
                    version: a.version,
                    running_tasks: running,
                }
            })
            .collect();
        Ok(Response::new(pb::ListAgentsResponse { agents }))
    }

    async fn drain_agent(
        &self,
        req: Request<pb::DrainAgentRequest>,
    ) -> std::result::Result<Response<pb::AgentInfo>, Status> {
        require(&req, &[])?;
        let r = req.into_inner();
        let a = self.tx(|tx| {
            let mut a = tx
                .get_agent(&r.name)?
                .ok_or_else(|| CoordError::NotFound(format!("name: no agent '{}'", r.name)))?;
            a.drain = !r.undrain;
            tx.upsert_agent(&a)?;
            Ok(a)
        })?;
        {
            let mut d = self.0.draining.lock().unwrap_or_else(|p| p.into_inner());
            if a.drain {
                d.insert(a.name.clone());
            } else {
                d.remove(&a.name);
            }
        }
        tracing::info!(agent = %a.name, drain = a.drain, "agent drain changed");
        Ok(Response::new(pb::AgentInfo {
            name: a.name,
            labels: a.labels.into_iter().collect(),
            hostname: a.hostname,
            cores: a.cores,
            memory_bytes: a.memory_bytes,
            state: if a.drain {
                "DRAINING".into()
            } else {
                a.state.as_str().into()
            },
            last_heartbeat_ms: a.last_heartbeat_ms,
            benchmarks: a.catalog.into_iter().map(|b| b.name).collect(),
            address: a.address,
            version: a.version,
            running_tasks: 0,
        }))
    }

    async fn list_workers(
        &self,
        _req: Request<pb::ListWorkersRequest>,
    ) -> std::result::Result<Response<pb::ListWorkersResponse>, Status> {
        let w = self
            .0
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut workers: Vec<pb::WorkerInfo> = w
            .into_iter()
            .map(|(name, s)| pb::WorkerInfo {
                name,
                last_seen_ms: s.last_seen_ms,
                leased_jobs: s.leased_jobs,
            })
            .collect();
        workers.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Response::new(pb::ListWorkersResponse { workers }))
    }

    async fn list_tables(
        &self,
        _req: Request<pb::ListTablesRequest>,
    ) -> std::result::Result<Response<pb::ListTablesResponse>, Status> {
        let files = self.tx(|tx| tx.committed_files(None))?;
        let tables = benchlake_core::catalog::all()
            .iter()
            .map(|t| {
                let mine = files.iter().filter(|f| f.table == t.name);
                let (n, rows, bytes) = mine.fold((0u64, 0u64, 0u64), |a, f| {
                    (a.0 + 1, a.1 + f.rows, a.2 + f.bytes)
                });
                pb::TableInfo {
                    name: t.name.to_string(),
                    files: n,
                    rows,
                    bytes,
                    columns: t
                        .schema
                        .fields()
                        .iter()
                        .map(|f| {
                            format!(
                                "{}: {}",
                                f.name(),
                                benchlake_core::catalog::type_name(f.data_type())
                            )
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Response::new(pb::ListTablesResponse {
            tables,
            lake_root: self.0.lake.root().to_string(),
        }))
    }
}

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

#[tonic::async_trait]
impl ReplayService for Svc {
    async fn trigger_replay(
        &self,
        req: Request<pb::TriggerReplayRequest>,
    ) -> std::result::Result<Response<pb::TriggerReplayResponse>, Status> {
        let r = req.into_inner();
        let model = r.model.as_str();
        if !matches!(model, "dimemas" | "bandela") {
            return Err(invalid(
                "model",
                format!("'{model}' is not a model (dimemas, bandela)"),
            ));
        }
        let points = sweep_points(&r.sweep)?;
        let now = self.0.now();
        let run_id = ids::new_id_at(now);
        let upload_id = ids::new_id_at(now);
        let lake = &self.0.lake;
        let mut base: BTreeMap<String, String> = r.params.into_iter().collect();
        let (trace_key, uploaded) = match r.trace.and_then(|t| t.source) {
            Some(pb::trace_ref::Source::RawKey(k)) => {
                if !k.starts_with("raw/") || k.contains("..") || k.contains("//") {
                    return Err(invalid(
                        "trace.raw_key",
                        format!("'{k}' is not a raw object key (raw/RUN/TASK/FILE)"),
                    ));
                }
                let found = if model == "bandela" {
                    if !k.ends_with('/') {
                        return Err(invalid(
                            "trace.raw_key",
                            "a Bandela trace is a prefix ending in '/' holding bandela.<rank> objects",
                        ));
                    }
                    !lake.list(&k).await.map_err(CoordError::from)?.is_empty()
                } else {
                    lake.size(&k).await.map_err(CoordError::from)?.is_some()
                };
                if !found {
                    return Err(Status::not_found(format!(
                        "trace.raw_key: nothing at '{k}'"
                    )));
                }
                (k, false)
            }
            Some(pb::trace_ref::Source::Uploaded(u)) => {
                if model == "bandela" {
                    return Err(invalid(
                        "trace.uploaded",
                        "a Bandela trace is one file per rank: put it in the lake (a traced run) and pass trace.raw_key",
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
        for name in ["config", "collectives", "input"] {
            if let Some(text) = base.remove(name) {
                let key = layout::raw_key(&run_id, &upload_id, &format!("{name}.txt"))
                    .map_err(|e| invalid(&format!("params.{name}"), e))?;
                lake.put(&key, bytes::Bytes::from(text.into_bytes()))
                    .await
                    .map_err(CoordError::from)?;
                files.insert(name.to_string(), key);
            }
        }
        if model == "dimemas" {
            // Every point must be a valid platform before any job exists.
            for p in &points {
                let mut all = base.clone();
                all.extend(p.clone());
                benchlake_replay::dimemas::Platform::default()
                    .apply_params(&all)
                    .map_err(|e| Status::invalid_argument(format!("params: {e}")))?;
            }
        } else if model == "bandela" && !files.contains_key("input") {
            return Err(invalid(
                "params.input",
                "the Bandela model needs the replaympi input text",
            ));
        }
        let cfg = self.0.cfg.clone();
        let n = points.len();
        self.tx(|tx| {
            let mut params = base.clone();
            params.insert("model".into(), model.to_string());
            params.insert("trace".into(), trace_key.clone());
            params.insert("points".into(), n.to_string());
            let run = RunRow {
                run_id: run_id.clone(),
                schedule_id: None,
                benchmark: format!("replay-{model}"),
                kind: "replay".into(),
                state: RunState::Processing,
                spec: Spec {
                    benchmark: format!("replay-{model}"),
                    params,
                    nodes: Nodes::default(),
                    launcher: LauncherKind::Local,
                    max_attempts: 1,
                    timeout_s: 0,
                },
                submitted_at_ms: now,
                started_at_ms: Some(now),
                finished_at_ms: None,
                scheduled_for_ms: None,
                error: None,
                idempotency_key: None,
                rerun_of: None,
                date: layout::date_of_ms(now),
                outcome: None,
            };
            tx.insert_run(&run)?;
            if uploaded {
                let spec = benchlake_core::jobs::IngestSpec {
                    format: model.to_string(),
                    keys: vec![trace_key.clone()],
                    task_id: upload_id.clone(),
                    agent: "client".into(),
                };
                tx.insert_job(&logic::new_job(
                    &run,
                    logic::INGEST_JOB,
                    serde_json::to_string(&spec)?,
                    &cfg,
                    now,
                ))?;
            }
            for p in &points {
                let spec = benchlake_core::jobs::ReplaySpec {
                    model: model.to_string(),
                    trace_key: trace_key.clone(),
                    files: files.clone(),
                    params: base.clone(),
                    point: p.clone(),
                    replay_id: ids::new_id_at(now),
                };
                tx.insert_job(&logic::new_job(
                    &run,
                    benchlake_core::jobs::REPLAY_JOB,
                    serde_json::to_string(&spec)?,
                    &cfg,
                    now,
                ))?;
            }
            Ok(())
        })?;
        tracing::info!(run = %run_id, model, points = n, "replay triggered");
        self.0.notify_run(&run_id);
        self.0.job_notify.notify_waiters();
        Ok(Response::new(pb::TriggerReplayResponse {
            run_id,
            points: n as u32,
        }))
    }
}

/// A bound worker credential acts only on jobs its worker leased.
fn worker_holds(id: &crate::config::Identity, j: &JobRow) -> Result<()> {
    match (&id.name, &j.leased_by) {
        (Some(n), Some(by)) if id.role != Role::Admin && n != by => {
            Err(CoordError::PermissionDenied(format!(
                "job {}: leased by worker '{by}', not '{n}'",
                j.job_id
            )))
        }
        _ => Ok(()),
    }
}

fn param_from_pb(p: pb::ParamDef, field: &str) -> std::result::Result<ParamDef, Status> {
    let ty = ParamType::parse(&p.r#type)
        .ok_or_else(|| invalid(field, format!("unknown parameter type '{}'", p.r#type)))?;
    Ok(ParamDef {
        name: p.name,
        ty,
        default: p.default,
        optional: p.optional,
        min: p.min,
        max: p.max,
        choices: p.choices,
        within: p.within,
        description: p.description,
    })
}

fn catalog_from_pb(defs: Vec<pb::BenchmarkDef>) -> std::result::Result<Vec<BenchmarkInfo>, Status> {
    if defs.len() > 1000 {
        return Err(invalid("catalog", "more than 1000 benchmarks"));
    }
    let mut out = Vec::new();
    for (i, b) in defs.into_iter().enumerate() {
        let field = format!("catalog[{i}]");
        check_name(&format!("{field}.name"), &b.name, 64)?;
        let params = b
            .params
            .into_iter()
            .map(|p| param_from_pb(p, &format!("{field}.params")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let launchers = b
            .launchers
            .iter()
            .map(|l| {
                LauncherKind::parse(l).ok_or_else(|| {
                    invalid(
                        &format!("{field}.launchers"),
                        format!("unknown launcher '{l}'"),
                    )
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        out.push(BenchmarkInfo {
            name: b.name,
            kind: b.kind,
            description: b.description,
            params,
            outputs: b
                .outputs
                .into_iter()
                .map(|o| OutputDef {
                    file: o.file,
                    format: o.format,
                    required: o.required,
                })
                .collect(),
            timeout_s: b.timeout_s,
            max_timeout_s: b.max_timeout_s,
            launchers: if launchers.is_empty() {
                vec![LauncherKind::Local]
            } else {
                launchers
            },
        });
    }
    Ok(out)
}

fn check_protocol(v: i32) -> std::result::Result<(), Status> {
    if v == benchlake_proto::PROTOCOL_VERSION as i32 {
        Ok(())
    } else {
        Err(Status::failed_precondition(format!(
            "protocol_version: {v} is not supported; this coordinator speaks version {} (upgrade the client or the coordinator)",
            benchlake_proto::PROTOCOL_VERSION as i32
        )))
    }
}

impl Svc {
    /// The task, if `lease_id` still holds it.
    fn leased_task(tx: &mut dyn Tx, task_id: &str, lease_id: &str) -> Result<TaskRow> {
        let t = tx
            .get_task(task_id)?
            .ok_or_else(|| CoordError::NotFound(format!("task_id: no task '{task_id}'")))?;
        if t.lease_id.as_deref() != Some(lease_id)
            || !matches!(t.state, TaskState::Leased | TaskState::Running)
        {
            return Err(CoordError::LeaseLost(format!(
                "task {task_id}: lease {lease_id} is no longer valid (task is {})",
                t.state.as_str()
            )));
        }
        Ok(t)
    }

    fn peers_pb(tx: &mut dyn Tx, names: &[String]) -> Result<Vec<pb::PeerAgent>> {
        let mut out = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let a = tx.get_agent(n)?;
            out.push(pb::PeerAgent {
                rank: i as u32,
                name: n.clone(),
                hostname: a.as_ref().map(|a| a.hostname.clone()).unwrap_or_default(),
                address: a.as_ref().map(|a| a.address.clone()).unwrap_or_default(),
                cores: a.as_ref().map(|a| a.cores).unwrap_or_default(),
            });
        }
        Ok(out)
    }
}

#[tonic::async_trait]
impl AgentService for Svc {
    async fn register(
        &self,
        req: Request<pb::RegisterRequest>,
    ) -> std::result::Result<Response<pb::RegisterResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        check_protocol(r.protocol_version)?;
        check_name("name", &r.name, 128)?;
        if !id.may_act_as(&r.name) {
            return Err(Status::permission_denied(format!(
                "name: this credential belongs to '{}', not to agent '{}'",
                id.name.as_deref().unwrap_or_default(),
                r.name
            )));
        }
        if r.labels.len() > 64 {
            return Err(invalid("labels", "more than 64 labels"));
        }
        for (k, v) in &r.labels {
            check_name("labels", k, 64)?;
            if v.len() > 256 {
                return Err(invalid("labels", format!("value of '{k}' longer than 256")));
            }
        }
        let catalog = catalog_from_pb(r.catalog)?;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let live_after = now - cfg.agent_lost_after_ms as i64;
        let last_seen = self.0.last_heartbeat(&r.name);
        let (restarted, drain) = self.tx(|tx| {
            let prev = tx.get_agent(&r.name)?;
            // A name held by a live agent is not taken over with another
            // credential: that would end its tasks and replace its catalog.
            if let Some(p) = &prev
                && !p.credential.is_empty()
                && p.credential != id.credential
                && id.role != Role::Admin
                && p.state != AgentState::Lost
                && last_seen.unwrap_or(p.last_heartbeat_ms) >= live_after
            {
                return Err(CoordError::PermissionDenied(format!(
                    "name: agent '{}' is registered and alive with another credential",
                    r.name
                )));
            }
            let drain = prev.as_ref().map(|p| p.drain).unwrap_or(false);
            let a = AgentRow {
                name: r.name.clone(),
                labels: r.labels.clone().into_iter().collect(),
                hostname: r.hostname.clone(),
                cores: r.cores,
                memory_bytes: r.memory_bytes,
                address: r.address.clone(),
                version: r.version.clone(),
                slots: r.slots.max(1),
                catalog: catalog.clone(),
                state: AgentState::Online,
                drain,
                registered_ms: now,
                last_heartbeat_ms: now,
                credential: id.credential.clone(),
            };
            tx.upsert_agent(&a)?;
            // A (re-)registering agent knows none of the tasks leased to an earlier
            // incarnation: those attempts are over.
            let stale = tx.tasks_of_agent(&r.name, &[TaskState::Leased, TaskState::Running])?;
            let mut runs = Vec::new();
            for t in stale {
                runs.push(t.run_id.clone());
                logic::retry_or_fail_task(
                    tx,
                    &cfg,
                    t,
                    &format!("agent '{}' restarted", r.name),
                    false,
                    now,
                )?;
            }
            Ok((runs, drain))
        })?;
        for run in restarted {
            self.0.notify_run(&run);
        }
        self.0
            .credentials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.name.clone(), id.credential.clone());
        self.0
            .heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.name.clone(), now);
        if drain {
            self.0
                .draining
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(r.name.clone());
        }
        tracing::info!(agent = %r.name, host = %r.hostname, benchmarks = catalog.len(), "agent registered");
        Ok(Response::new(pb::RegisterResponse {
            agent_id: r.name,
            heartbeat_interval_ms: self.0.cfg.heartbeat_interval_ms,
            lease_timeout_ms: self.0.cfg.lease_timeout_ms,
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> std::result::Result<Response<pb::HeartbeatResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        self.check_agent(&id, &r.name).map_err(Status::from)?;
        let now = self.0.now();
        {
            let mut hb = self.0.heartbeats.lock().unwrap_or_else(|p| p.into_inner());
            match hb.get_mut(&r.name) {
                Some(t) => *t = now,
                None => {
                    return Err(Status::not_found(format!(
                        "name: agent '{}' is not registered (register first)",
                        r.name
                    )));
                }
            }
        }
        let drain = self
            .0
            .draining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&r.name);
        if r.running_task_ids.len() > 10_000 {
            return Err(invalid("running_task_ids", "more than 10000"));
        }
        self.0
            .running_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                r.name.clone(),
                (now, r.running_task_ids.iter().cloned().collect()),
            );
        let mut cancel = Vec::new();
        if !r.running_task_ids.is_empty() {
            if let Some(cancel) = self.0.heartbeat_tasks(&r.name, &r.running_task_ids, now) {
                return Ok(Response::new(pb::HeartbeatResponse {
                    cancel_task_ids: cancel,
                    drain,
                }));
            }
            let lease_ms = self.0.cfg.lease_timeout_ms as i64;
            cancel = self.tx(|tx| {
                let mut cancel = Vec::new();
                for id in &r.running_task_ids {
                    match tx.get_task(id)? {
                        Some(mut t)
                            if t.agent == r.name
                                && matches!(t.state, TaskState::Leased | TaskState::Running) =>
                        {
                            // Extend only when half the lease is used: one write per
                            // half-lease per task, not per heartbeat.
                            if t.lease_expires_ms.unwrap_or(0) - now < lease_ms / 2 {
                                t.lease_expires_ms = Some(now + lease_ms);
                                tx.update_task(&t)?;
                            }
                        }
                        _ => cancel.push(id.clone()),
                    }
                }
                Ok(cancel)
            })?;
        }
        Ok(Response::new(pb::HeartbeatResponse {
            cancel_task_ids: cancel,
            drain,
        }))
    }

    async fn poll_task(
        &self,
        req: Request<pb::PollTaskRequest>,
    ) -> std::result::Result<Response<pb::PollTaskResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        self.check_agent(&id, &r.name).map_err(Status::from)?;
        if r.free_slots == 0 {
            return Ok(Response::new(pb::PollTaskResponse { task: None }));
        }
        if self
            .0
            .draining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&r.name)
        {
            return Ok(Response::new(pb::PollTaskResponse { task: None }));
        }
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let got = self.tx(|tx| {
            let Some(a) = tx.get_agent(&r.name)? else {
                return Err(CoordError::NotFound(format!(
                    "name: agent '{}' is not registered",
                    r.name
                )));
            };
            if a.drain {
                return Ok(None);
            }
            let Some(mut t) = tx.next_task_for_agent(&r.name, now)? else {
                return Ok(None);
            };
            let run = tx
                .get_run(&t.run_id)?
                .ok_or_else(|| CoordError::NotFound(format!("run of task {}", t.task_id)))?;
            t.state = TaskState::Leased;
            t.lease_id = Some(ids::new_id_at(now));
            t.lease_expires_ms = Some(now + cfg.lease_timeout_ms as i64);
            tx.update_task(&t)?;
            logic::advance_run(tx, &cfg, &t.run_id, now)?;
            let peers = Self::peers_pb(tx, &t.peers)?;
            let raw_prefix = layout::raw_prefix(&t.run_id, &t.task_id)?;
            Ok(Some((t, run, peers, raw_prefix)))
        })?;
        let Some((t, run, peers, raw_prefix)) = got else {
            return Ok(Response::new(pb::PollTaskResponse { task: None }));
        };
        self.0.notify_run(&t.run_id);
        tracing::info!(task = %t.task_id, run = %t.run_id, agent = %r.name, attempt = t.attempt, "task leased");
        Ok(Response::new(pb::PollTaskResponse {
            task: Some(pb::TaskAssignment {
                task_id: t.task_id.clone(),
                run_id: t.run_id.clone(),
                attempt: t.attempt,
                lease_id: t.lease_id.clone().unwrap_or_default(),
                benchmark: run.spec.benchmark.clone(),
                params: run.spec.params.clone().into_iter().collect(),
                launcher: launcher_to_pb(run.spec.launcher),
                timeout_s: run.spec.timeout_s,
                rank: t.rank,
                num_tasks: t.num_tasks,
                peers,
                raw_prefix,
            }),
        }))
    }

    async fn report_progress(
        &self,
        req: Request<pb::ReportProgressRequest>,
    ) -> std::result::Result<Response<pb::ReportProgressResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let res = self.tx(|tx| {
            let mut t = match Self::leased_task(tx, &r.task_id, &r.lease_id) {
                Ok(t) => t,
                Err(CoordError::LeaseLost(_)) => return Ok(true),
                Err(e) => return Err(e),
            };
            self.check_agent(&id, &t.agent)?;
            if t.state == TaskState::Leased {
                t.state = TaskState::Running;
                t.started_at_ms = Some(now);
            }
            t.stdout_tail = tail(&r.stdout_tail);
            t.stderr_tail = tail(&r.stderr_tail);
            t.lease_expires_ms = Some(now + cfg.lease_timeout_ms as i64);
            let run_id = t.run_id.clone();
            tx.update_task(&t)?;
            logic::advance_run(tx, &cfg, &run_id, now)?;
            Ok(false)
        })?;
        if !res {
            self.0.notify_run_of_task(&r.task_id);
        }
        Ok(Response::new(pb::ReportProgressResponse { cancel: res }))
    }

    async fn upload_output(
        &self,
        req: Request<Streaming<pb::UploadChunk>>,
    ) -> std::result::Result<Response<pb::RawFile>, Status> {
        let id = identity_of(&req);
        let mut stream = req.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| invalid("chunk", "empty upload stream"))?;
        layout::validate_name("file_name", &first.file_name)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        check_name("format", &first.format, 64)?;
        let t = self.tx(|tx| Self::leased_task(tx, &first.task_id, &first.lease_id))?;
        self.check_agent(&id, &t.agent).map_err(Status::from)?;
        let key = layout::raw_key(&t.run_id, &t.task_id, &first.file_name)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let max = self.0.cfg.max_upload_bytes;
        let mut w = self.0.lake.writer(&key).await.map_err(CoordError::from)?;
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        let mut size = 0u64;
        let mut claimed = first.sha256.clone();
        let mut chunk = Some(first);
        let res: std::result::Result<(), Status> = async {
            while let Some(c) = chunk.take() {
                size += c.data.len() as u64;
                if size > max {
                    return Err(Status::resource_exhausted(format!(
                        "file_name: upload of '{key}' exceeds the limit of {max} bytes"
                    )));
                }
                sha2::Digest::update(&mut hasher, &c.data);
                w.write(&c.data);
                w.wait_for_capacity(8)
                    .await
                    .map_err(|e| Status::unavailable(format!("lake: {e}")))?;
                if !c.sha256.is_empty() {
                    claimed = c.sha256.clone();
                }
                chunk = stream.message().await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = res {
            let _ = w.abort().await;
            return Err(e);
        }
        let digest = hex::encode(sha2::Digest::finalize(hasher));
        if !claimed.is_empty() && !claimed.eq_ignore_ascii_case(&digest) {
            let _ = w.abort().await;
            return Err(Status::data_loss(format!(
                "sha256: '{key}' arrived with digest {digest}, the agent sent {claimed}"
            )));
        }
        w.finish()
            .await
            .map_err(|e| Status::unavailable(format!("lake: {e}")))?;
        tracing::debug!(key = %key, bytes = size, "raw output stored");
        Ok(Response::new(pb::RawFile {
            key,
            bytes: size,
            sha256: digest,
            format: String::new(),
        }))
    }

    async fn complete_task(
        &self,
        req: Request<pb::CompleteTaskRequest>,
    ) -> std::result::Result<Response<pb::CompleteTaskResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        if r.outputs.len() > 100_000 {
            return Err(invalid("outputs", "more than 100000 files"));
        }
        let t = self.tx(|tx| Self::leased_task(tx, &r.task_id, &r.lease_id))?;
        self.check_agent(&id, &t.agent).map_err(Status::from)?;
        let prefix = layout::raw_prefix(&t.run_id, &t.task_id)
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut outputs = Vec::new();
        for (i, o) in r.outputs.iter().enumerate() {
            if !o.key.starts_with(&prefix) {
                return Err(invalid(
                    &format!("outputs[{i}].key"),
                    format!("'{}' is not under {prefix}", o.key),
                ));
            }
            check_name(&format!("outputs[{i}].format"), &o.format, 64)?;
            let size = self
                .0
                .lake
                .size(&o.key)
                .await
                .map_err(CoordError::from)?
                .ok_or_else(|| {
                    invalid(
                        &format!("outputs[{i}].key"),
                        format!("'{}' was not uploaded", o.key),
                    )
                })?;
            if size != o.bytes {
                return Err(invalid(
                    &format!("outputs[{i}].bytes"),
                    format!("'{}' has {size} bytes in the lake, not {}", o.key, o.bytes),
                ));
            }
            outputs.push(RawFileRow {
                key: o.key.clone(),
                bytes: o.bytes,
                sha256: o.sha256.clone(),
                format: o.format.clone(),
            });
        }
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let run_id = self.tx(|tx| {
            let mut t = Self::leased_task(tx, &r.task_id, &r.lease_id)?;
            t.outputs = outputs;
            t.exit_code = Some(r.exit_code);
            t.stdout_tail = tail(&r.stdout_tail);
            t.stderr_tail = tail(&r.stderr_tail);
            t.lease_id = None;
            t.lease_expires_ms = None;
            t.finished_at_ms = Some(now);
            t.started_at_ms.get_or_insert(now);
            if r.success {
                t.state = TaskState::Done;
                t.error = None;
            } else {
                // A benchmark that ran and failed is not retried automatically (its
                // failure is the result); `RerunFailed` re-runs it on request.
                t.state = TaskState::Failed;
                t.error = Some(if r.error.is_empty() {
                    format!("exit code {}", r.exit_code)
                } else {
                    r.error.clone()
                });
            }
            let run_id = t.run_id.clone();
            tx.update_task(&t)?;
            logic::advance_run(tx, &cfg, &run_id, now)?;
            Ok(run_id)
        })?;
        tracing::info!(task = %r.task_id, run = %run_id, success = r.success, "task completed");
        self.0.notify_run(&run_id);
        self.0.job_notify.notify_waiters();
        Ok(Response::new(pb::CompleteTaskResponse {}))
    }
}

/// Keeps the last 8 KiB of a log tail (on a char boundary).
fn tail(s: &str) -> String {
    const MAX: usize = 8 << 10;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut start = s.len() - MAX;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

impl Coordinator {
    fn notify_run_of_task(&self, task_id: &str) {
        if let Ok(Some(t)) = self.store.transact(|tx| tx.get_task(task_id)) {
            self.notify_run(&t.run_id);
        }
    }

    pub(crate) fn worker_seen(&self, name: &str, now: i64, delta: i32) {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        let e = w.entry(name.to_string()).or_default();
        e.last_seen_ms = now;
        e.leased_jobs = (e.leased_jobs as i64 + delta as i64).max(0) as u32;
    }
}

fn job_pb(j: &JobRow, lease_ms: u64) -> Result<pb::JobAssignment> {
    Ok(pb::JobAssignment {
        job_id: j.job_id.clone(),
        run_id: j.run_id.clone(),
        kind: j.kind.clone(),
        attempt: j.attempt,
        lease_id: j.lease_id.clone().unwrap_or_default(),
        spec_json: j.spec_json.clone(),
        staging_prefix: layout::staging_prefix(&j.job_id, j.attempt)?,
        lease_timeout_ms: lease_ms,
        run_date: j.date.clone(),
    })
}

impl Svc {
    fn try_lease_job(
        &self,
        worker: &str,
        kinds: &[String],
    ) -> std::result::Result<Option<pb::JobAssignment>, Status> {
        let now = self.0.now();
        let lease_ms = self.0.cfg.job_lease_timeout_ms;
        let got = self.tx(|tx| {
            let Some(mut j) = tx.next_job(kinds, now)? else {
                return Ok(None);
            };
            j.state = JobState::Leased;
            j.lease_id = Some(ids::new_id_at(now));
            j.leased_by = Some(worker.to_string());
            j.lease_expires_ms = Some(now + lease_ms as i64);
            tx.update_job(&j)?;
            Ok(Some(job_pb(&j, lease_ms)?))
        })?;
        if got.is_some() {
            self.0.worker_seen(worker, now, 1);
        }
        Ok(got)
    }
}

#[tonic::async_trait]
impl WorkerService for Svc {
    async fn lease_job(
        &self,
        req: Request<pb::LeaseJobRequest>,
    ) -> std::result::Result<Response<pb::LeaseJobResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        check_protocol(r.protocol_version)?;
        check_name("worker", &r.worker, 128)?;
        Self::check_worker(&id, &r.worker)?;
        if r.kinds.len() > 64 {
            return Err(invalid("kinds", "more than 64 kinds"));
        }
        for k in &r.kinds {
            check_name("kinds", k, 64)?;
        }
        let now = self.0.now();
        self.0.worker_seen(&r.worker, now, 0);
        let deadline = tokio::time::Instant::now()
            + std::time::Duration::from_millis(r.wait_ms.min(30_000) as u64);
        loop {
            // Register interest before looking, so a job queued in between wakes us.
            let notified = self.0.job_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(job) = self.try_lease_job(&r.worker, &r.kinds)? {
                return Ok(Response::new(pb::LeaseJobResponse { job: Some(job) }));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Response::new(pb::LeaseJobResponse { job: None }));
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }

    async fn renew_lease(
        &self,
        req: Request<pb::RenewLeaseRequest>,
    ) -> std::result::Result<Response<pb::RenewLeaseResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        let now = self.0.now();
        let lease_ms = self.0.cfg.job_lease_timeout_ms as i64;
        let cancel = self.tx(|tx| match logic::leased_job(tx, &r.job_id, &r.lease_id) {
            Ok(mut j) => {
                worker_holds(&id, &j)?;
                j.lease_expires_ms = Some(now + lease_ms);
                tx.update_job(&j)?;
                Ok(false)
            }
            Err(CoordError::LeaseLost(_)) => Ok(true),
            Err(e) => Err(e),
        })?;
        Ok(Response::new(pb::RenewLeaseResponse { cancel }))
    }

    async fn complete_job(
        &self,
        req: Request<pb::CompleteJobRequest>,
    ) -> std::result::Result<Response<pb::CompleteJobResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        self.tx(|tx| worker_holds(&id, &logic::leased_job(tx, &r.job_id, &r.lease_id)?))?;
        let keys = crate::commit::commit_job(&self.0, r).await?;
        Ok(Response::new(pb::CompleteJobResponse {
            committed_keys: keys,
        }))
    }

    async fn fail_job(
        &self,
        req: Request<pb::FailJobRequest>,
    ) -> std::result::Result<Response<pb::FailJobResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let (run_id, worker) = self.tx(|tx| {
            let j = logic::leased_job(tx, &r.job_id, &r.lease_id)?;
            worker_holds(&id, &j)?;
            let run_id = j.run_id.clone();
            let worker = j.leased_by.clone().unwrap_or_default();
            let mut msg = r.error.clone();
            msg.truncate(8 << 10);
            logic::retry_or_fail_job(tx, &cfg, j, &msg, r.retryable, now)?;
            Ok((run_id, worker))
        })?;
        tracing::warn!(job = %r.job_id, run = %run_id, retryable = r.retryable, error = %r.error, "job failed");
        self.0.worker_seen(&worker, now, -1);
        self.0.notify_run(&run_id);
        self.0.job_notify.notify_waiters();
        Ok(Response::new(pb::FailJobResponse {}))
    }
}

/// Used by `commit`: parameters of a committed file's final key.
pub(crate) fn final_key(
    table: &str,
    date: &str,
    run_id: &str,
    job_id: &str,
    part: &str,
) -> Result<String> {
    Ok(layout::table_key(table, date, run_id, job_id, part)?)
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
    /// `AnalyzeRun`: a new run of kind `analysis` (benchmark `analyze-counts`,
    /// parameter `source_run`) in PROCESSING with one `analyze_plan` job over the
    /// source run's `counts` outputs; the plan fans out into part jobs and a merge
    /// job that waits for them (job groups). Like `TriggerReplay`, the analysis
    /// gets its own run, so its tables and reports never mix with an earlier
    /// analysis of the same files.
    async fn analyze_run_impl(
        &self,
        r: pb::AnalyzeRunRequest,
    ) -> std::result::Result<Response<pb::AnalyzeRunResponse>, Status> {
        check_id("run_id", &r.run_id)?;
        let analysis = if r.analysis.is_empty() {
            "counts"
        } else {
            r.analysis.as_str()
        };
        if analysis != "counts" {
            return Err(invalid(
                "analysis",
                format!("'{analysis}' is not an analysis (counts)"),
            ));
        }
        let options = analysis_options(&r.options)?;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let src = r.run_id.clone();
        let (run_id, job_id) = self.tx(|tx| {
            let source = tx
                .get_run(&src)?
                .ok_or_else(|| CoordError::NotFound(format!("run_id: no run '{src}'")))?;
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
                .filter(|o| o.format == "counts")
                .map(|o| o.key.clone())
                .collect();
            if keys.is_empty() {
                return Err(CoordError::FailedPrecondition(format!(
                    "run {src} has no outputs of format 'counts' to analyse"
                )));
            }
            let run_id = ids::new_id_at(now);
            let mut params = BTreeMap::new();
            params.insert("source_run".to_string(), src.clone());
            for (k, v) in &options {
                params.insert(k.clone(), v.to_string());
            }
            let run = RunRow {
                run_id: run_id.clone(),
                schedule_id: None,
                benchmark: "analyze-counts".into(),
                kind: "analysis".into(),
                state: RunState::Processing,
                spec: Spec {
                    benchmark: "analyze-counts".into(),
                    params,
                    nodes: Nodes::default(),
                    launcher: LauncherKind::Local,
                    max_attempts: 1,
                    timeout_s: 0,
                },
                submitted_at_ms: now,
                started_at_ms: Some(now),
                finished_at_ms: None,
                scheduled_for_ms: None,
                error: None,
                idempotency_key: None,
                rerun_of: None,
                date: layout::date_of_ms(now),
                outcome: None,
            };
            tx.insert_run(&run)?;
            let spec = serde_json::json!({ "keys": keys, "options": options });
            let job = logic::new_job(
                &run,
                benchlake_core::jobs::ANALYZE_PLAN_JOB,
                spec.to_string(),
                &cfg,
                now,
            );
            tx.insert_job(&job)?;
            Ok((run_id, job.job_id))
        })?;
        tracing::info!(run = %run_id, source = %r.run_id, "counts analysis triggered");
        self.0.notify_run(&run_id);
        self.0.job_notify.notify_waiters();
        Ok(Response::new(pb::AnalyzeRunResponse {
            reports_prefix: format!("reports/{run_id}/counts/{job_id}/"),
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
        let prefix = r.prefix.trim_start_matches('/');
        for part in prefix.split('/').filter(|p| !p.is_empty()) {
            layout::validate_name("prefix", part).map_err(|e| invalid("prefix", e))?;
        }
        let mut full = format!("reports/{}/{prefix}", r.run_id);
        if !full.ends_with('/') {
            full.push('/');
        }
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
