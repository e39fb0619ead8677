//! `ClusterService`'s acknowledgements and maintenance windows
//! ([`crate::silence`]): creating and removing needs the admin role, listing
//! is open to every user. `cluster.rs` delegates here.
use benchlake_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::Svc;
use crate::audit::{Actor, action};
use crate::error::CoordError;
use crate::lifecycle::Effects;
use crate::silence::{self, KEEP_ENDED_MS};

type Reply<T> = std::result::Result<Response<T>, Status>;

impl Svc {
    pub(super) async fn acknowledge(
        &self,
        req: Request<pb::AcknowledgeCheckRequest>,
    ) -> Reply<pb::Acknowledgement> {
        let id = crate::auth::identity_of(&req);
        let who = Actor::api(id.clone());
        let now = self.0.now();
        let r = req.into_inner();
        let author = silence::author_of(&id);
        let target = format!("{} {}", r.node.trim(), r.check.trim());
        let ack = self
            .0
            .audited(&who, action::ACK_CREATE, &target, move |tx| {
                crate::access::require_admin(&id, "acknowledging a check")?;
                let schedule = match r.schedule.trim() {
                    "" => None,
                    s => {
                        let row = match tx.get_schedule(s)? {
                            Some(row) => Some(row),
                            None => tx.schedule_by_name(s)?,
                        };
                        let row = row.ok_or_else(|| {
                            CoordError::invalid("schedule", format!("no schedule '{s}'"))
                        })?;
                        Some((row.schedule_id, row.name))
                    }
                };
                let ack = silence::new_ack(&r, schedule, &author, now)?;
                tx.prune_acks(now - KEEP_ENDED_MS)?;
                tx.insert_ack(&ack)?;
                let detail = format!(
                    "{} until {}: {}",
                    ack.id,
                    silence::fmt_time(ack.expires_ms),
                    ack.comment
                );
                Ok((ack, detail, Effects::default()))
            })
            .await?;
        tracing::info!(id = %ack.id, node = %ack.node, check = %ack.check, author = %ack.author,
            expires = %silence::fmt_time(ack.expires_ms), "acknowledged: {}", ack.comment);
        Ok(Response::new(ack.to_pb(now)))
    }

    pub(super) async fn list_acks(
        &self,
        req: Request<pb::ListAcknowledgementsRequest>,
    ) -> Reply<pb::ListAcknowledgementsResponse> {
        let all = req.get_ref().all;
        let now = self.0.now();
        let acks = self.tx(|tx| tx.list_acks()).await?;
        let acknowledgements = acks
            .iter()
            .filter(|a| all || now < a.expires_ms)
            .map(|a| a.to_pb(now))
            .collect();
        Ok(Response::new(pb::ListAcknowledgementsResponse {
            acknowledgements,
        }))
    }

    pub(super) async fn remove_ack(
        &self,
        req: Request<pb::RemoveAcknowledgementRequest>,
    ) -> Reply<pb::Acknowledgement> {
        let who = crate::auth::identity_of(&req);
        let actor = Actor::api(who.clone());
        let id = req.into_inner().id;
        super::check_id("id", &id)?;
        let now = self.0.now();
        let i = id.clone();
        let found = self
            .0
            .audited(&actor, action::ACK_REMOVE, &id, move |tx| {
                crate::access::require_admin(&who, "removing an acknowledgement")?;
                let a = tx
                    .list_acks()?
                    .into_iter()
                    .find(|a| a.id == i)
                    .ok_or_else(|| CoordError::NotFound(format!("id: no acknowledgement '{i}'")))?;
                tx.delete_ack(&i)?;
                let detail = format!("{} {}: {}", a.node, a.check, a.comment);
                Ok((a, detail, Effects::default()))
            })
            .await?;
        tracing::info!(id = %found.id, node = %found.node, check = %found.check,
            by = %actor.who(), "acknowledgement removed");
        Ok(Response::new(found.to_pb(now)))
    }

    pub(super) async fn maint_create(
        &self,
        req: Request<pb::CreateMaintenanceRequest>,
    ) -> Reply<pb::MaintenanceWindow> {
        let id = crate::auth::identity_of(&req);
        let who = Actor::api(id.clone());
        let now = self.0.now();
        let r = req.into_inner();
        let target = r.nodes.trim().to_string();
        let w = self
            .0
            .audited(&who, action::MAINTENANCE_CREATE, &target, move |tx| {
                crate::access::require_admin(&id, "declaring a maintenance window")?;
                let w = silence::new_window(&r, &silence::author_of(&id), now)?;
                tx.prune_maintenance(now - KEEP_ENDED_MS)?;
                tx.insert_maintenance(&w)?;
                let detail = format!(
                    "{} from {} to {}: {}",
                    w.id,
                    silence::fmt_time(w.start_ms),
                    silence::fmt_time(w.end_ms),
                    w.reason
                );
                Ok((w, detail, Effects::default()))
            })
            .await?;
        tracing::info!(id = %w.id, nodes = %w.nodes, start = %silence::fmt_time(w.start_ms),
            end = %silence::fmt_time(w.end_ms), author = %w.author, "maintenance window: {}", w.reason);
        Ok(Response::new(w.to_pb(now)))
    }

    pub(super) async fn maint_list(
        &self,
        req: Request<pb::ListMaintenanceRequest>,
    ) -> Reply<pb::ListMaintenanceResponse> {
        let all = req.get_ref().all;
        let now = self.0.now();
        let ws = self.tx(|tx| tx.list_maintenance()).await?;
        let windows = ws
            .iter()
            .filter(|w| all || now < w.end_ms)
            .map(|w| w.to_pb(now))
            .collect();
        Ok(Response::new(pb::ListMaintenanceResponse { windows }))
    }

    pub(super) async fn maint_delete(
        &self,
        req: Request<pb::DeleteMaintenanceRequest>,
    ) -> Reply<pb::MaintenanceWindow> {
        let who = crate::auth::identity_of(&req);
        let actor = Actor::api(who.clone());
        let id = req.into_inner().id;
        super::check_id("id", &id)?;
        let now = self.0.now();
        let i = id.clone();
        let found = self
            .0
            .audited(&actor, action::MAINTENANCE_REMOVE, &id, move |tx| {
                crate::access::require_admin(&who, "removing a maintenance window")?;
                let w = tx
                    .list_maintenance()?
                    .into_iter()
                    .find(|w| w.id == i)
                    .ok_or_else(|| {
                        CoordError::NotFound(format!("id: no maintenance window '{i}'"))
                    })?;
                tx.delete_maintenance(&i)?;
                let detail = format!("{}: {}", w.nodes, w.reason);
                Ok((w, detail, Effects::default()))
            })
            .await?;
        tracing::info!(id = %found.id, nodes = %found.nodes, by = %actor.who(), "maintenance window removed");
        Ok(Response::new(found.to_pb(now)))
    }
}
