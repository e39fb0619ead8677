//! `ScheduleService`: create, list, pause, delete, backfill and trigger cron
//! schedules (the firing itself is [`crate::scheduler`]).
use benchlake_core::ids;
use benchlake_proto::v1 as pb;
use pb::schedule_service_server::ScheduleService;
use tonic::{Request, Response, Status};

use super::{Svc, check_name, invalid};
use crate::access;
use crate::actions::owned_schedule;
use crate::audit::{Actor, action};
use crate::auth::identity_of;
use crate::convert;
use crate::error::CoordError;
use crate::lifecycle::Effects;
use crate::logic;
use crate::model::*;
use crate::scheduler::{self, CronSpec};

#[tonic::async_trait]
impl ScheduleService for Svc {
    async fn create_schedule(
        &self,
        req: Request<pb::CreateScheduleRequest>,
    ) -> std::result::Result<Response<pb::Schedule>, Status> {
        let id = identity_of(&req);
        let who = Actor::api(id.clone());
        let s = req
            .into_inner()
            .schedule
            .ok_or_else(|| invalid("schedule", "is required"))?;
        check_name("schedule.name", &s.name, 100)?;
        let cron = CronSpec::parse(&s.cron, &s.time_zone)?;
        cron.check_fires(&s.cron, self.0.now())?;
        let catch_up = CatchUp::from_pb(s.catch_up)
            .ok_or_else(|| invalid("schedule.catch_up", format!("unknown value {}", s.catch_up)))?;
        if s.max_catch_up > 1000 {
            return Err(invalid("schedule.max_catch_up", "above 1000"));
        }
        let node_action =
            crate::node_actions::NodeAction::from_pb(s.node_action).ok_or_else(|| {
                invalid(
                    "schedule.node_action",
                    format!("unknown value {}", s.node_action),
                )
            })?;
        let spec = s
            .spec
            .ok_or_else(|| invalid("schedule.spec", "is required"))?;
        self.0
            .cfg
            .notify
            .check_names("schedule.notify", &s.notify)?;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let name = s.name.clone();
        let row = self
            .0
            .audited(&who, action::SCHEDULE_CREATE, &name, move |tx| {
                if node_action != crate::node_actions::NodeAction::Off {
                    // It drains and resumes Slurm nodes, as DrainAgent does
                    // agents (refused in the audit trail too).
                    access::require_admin(
                        &id,
                        &format!("schedule.node_action {}", node_action.as_str()),
                    )?;
                }
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
                    node_action,
                    created_ms: now,
                    notify: s.notify.clone(),
                    owner: id.principal(),
                };
                tx.insert_schedule(&row)?;
                let detail = format!(
                    "{} '{}' ({}), {}{}",
                    row.spec.benchmark,
                    row.cron,
                    row.time_zone,
                    if row.paused { "paused" } else { "active" },
                    match row.node_action {
                        crate::node_actions::NodeAction::Off => String::new(),
                        a => format!(", node action {}", a.as_str()),
                    }
                );
                Ok((row, detail, Effects::default()))
            })
            .await?;
        tracing::info!(schedule = %row.name, cron = %row.cron, tz = %row.time_zone, "schedule created");
        Ok(Response::new(row.to_pb()))
    }

    async fn list_schedules(
        &self,
        _req: Request<pb::ListSchedulesRequest>,
    ) -> std::result::Result<Response<pb::ListSchedulesResponse>, Status> {
        let rows = self
            .read(|tx| {
                let mut out = Vec::new();
                for s in tx.list_schedules()? {
                    let last = tx
                        .list_runs(&crate::store::RunFilter {
                            schedule_id: Some(s.schedule_id.clone()),
                            limit: 1,
                            ..Default::default()
                        })?
                        .into_iter()
                        .next();
                    out.push((s, last));
                }
                Ok(out)
            })
            .await?;
        let schedules = rows
            .into_iter()
            .map(|(s, last)| {
                let mut p = s.to_pb();
                if let Some(r) = last {
                    p.last_verdict = self
                        .0
                        .verdicts
                        .run(&r.run_id)
                        .and_then(|v| v.verdict())
                        .map(str::to_string)
                        .unwrap_or_default();
                    p.last_run_state = r.state.to_pb();
                    p.last_run_id = r.run_id;
                }
                p
            })
            .collect();
        Ok(Response::new(pb::ListSchedulesResponse { schedules }))
    }

    async fn pause_schedule(
        &self,
        req: Request<pb::PauseScheduleRequest>,
    ) -> std::result::Result<Response<pb::Schedule>, Status> {
        let who = Actor::api(identity_of(&req));
        let r = req.into_inner();
        let row = self
            .0
            .pause_schedule(&who, &r.schedule_id, r.paused)
            .await?;
        Ok(Response::new(row.to_pb()))
    }

    async fn update_schedule(
        &self,
        req: Request<pb::UpdateScheduleRequest>,
    ) -> std::result::Result<Response<pb::Schedule>, Status> {
        let who = identity_of(&req);
        let actor = Actor::api(who.clone());
        let r = req.into_inner();
        let node_action = match r.node_action {
            0 => None,
            v => Some(
                crate::node_actions::NodeAction::from_pb(v)
                    .ok_or_else(|| invalid("node_action", format!("unknown value {v}")))?,
            ),
        };
        if r.replace_notify {
            self.0.cfg.notify.check_names("notify", &r.notify)?;
        }
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let target = r.schedule_id.clone();
        let row = self
            .0
            .audited(&actor, action::SCHEDULE_CHANGE, &target, move |tx| {
                if let Some(a) = node_action.filter(|a| *a != crate::node_actions::NodeAction::Off)
                {
                    access::require_admin(&who, &format!("schedule.node_action {}", a.as_str()))?;
                }
                let mut s = owned_schedule(tx, &who, &r.schedule_id)?;
                let mut changed = Vec::new();
                let cron = r.cron.clone().unwrap_or_else(|| s.cron.clone());
                let zone = r.time_zone.clone().unwrap_or_else(|| s.time_zone.clone());
                if r.cron.is_some() || r.time_zone.is_some() {
                    let spec = CronSpec::parse(&cron, &zone)?;
                    spec.check_fires(&cron, now)?;
                    s.next_fire_ms = if s.paused { None } else { spec.next_after(now) };
                    s.cron = cron;
                    s.time_zone = if zone.is_empty() { "UTC".into() } else { zone };
                    changed.push(format!("cron '{}' ({})", s.cron, s.time_zone));
                }
                if !r.set_params.is_empty() || !r.unset_params.is_empty() {
                    let mut raw = s.spec.to_pb();
                    for k in &r.unset_params {
                        raw.params.remove(k);
                    }
                    raw.params
                        .extend(r.set_params.iter().map(|(k, v)| (k.clone(), v.clone())));
                    let agents = tx.list_agents()?;
                    let (spec, _) =
                        logic::validate_spec(&cfg, &agents, &raw).map_err(|e| match e {
                            CoordError::Invalid(m) => CoordError::Invalid(format!("schedule.{m}")),
                            e => e,
                        })?;
                    s.spec = spec;
                    changed.push(format!(
                        "params set {:?} unset {:?}",
                        r.set_params.keys().collect::<Vec<_>>(),
                        r.unset_params
                    ));
                }
                if r.replace_notify {
                    s.notify = r.notify.clone();
                    changed.push(format!("notify {:?}", s.notify));
                }
                if let Some(a) = node_action {
                    s.node_action = a;
                    changed.push(format!("node action {}", a.as_str()));
                }
                tx.update_schedule(&s)?;
                let detail = format!("'{}': {}", s.name, changed.join("; "));
                Ok((s, detail, Effects::default()))
            })
            .await?;
        tracing::info!(schedule = %row.name, cron = %row.cron, tz = %row.time_zone, "schedule changed");
        Ok(Response::new(row.to_pb()))
    }

    async fn delete_schedule(
        &self,
        req: Request<pb::DeleteScheduleRequest>,
    ) -> std::result::Result<Response<pb::DeleteScheduleResponse>, Status> {
        let who = identity_of(&req);
        let actor = Actor::api(who.clone());
        let id = req.into_inner().schedule_id;
        self.0
            .audited(&actor, action::SCHEDULE_DELETE, &id.clone(), move |tx| {
                let s = owned_schedule(tx, &who, &id)?;
                tx.delete_schedule(&s.schedule_id)?;
                Ok(((), format!("'{}'", s.name), Effects::default()))
            })
            .await?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }

    async fn backfill(
        &self,
        req: Request<pb::BackfillRequest>,
    ) -> std::result::Result<Response<pb::BackfillResponse>, Status> {
        let id = identity_of(&req);
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
        let (runs, fx) = self
            .tx(move |tx| {
                let s = owned_schedule(tx, &id, &r.schedule_id)?;
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
                let (runs, fx) = scheduler::backfill(tx, &cfg, &s, &instants, now)?;
                let out = runs
                    .iter()
                    .map(|r| convert::run_tx(tx, r))
                    .collect::<crate::error::Result<Vec<_>>>()?;
                Ok((out, fx))
            })
            .await?;
        self.0.apply(fx);
        Ok(Response::new(pb::BackfillResponse { runs }))
    }

    async fn trigger_schedule(
        &self,
        req: Request<pb::TriggerScheduleRequest>,
    ) -> std::result::Result<Response<pb::Run>, Status> {
        let who = Actor::api(identity_of(&req));
        let id = req.into_inner().schedule_id;
        let run = self
            .0
            .trigger_schedule(&who, &id, |tx, run| convert::run_tx(tx, run))
            .await?;
        Ok(Response::new(run))
    }
}
