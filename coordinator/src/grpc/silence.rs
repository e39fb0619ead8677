//! `ClusterService`'s acknowledgements and maintenance windows
//! ([`crate::silence`]): creating and removing needs the admin role, listing
//! is open to every user. `cluster.rs` delegates here.
use benchlake_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::Svc;
use crate::error::CoordError;
use crate::silence::{self, KEEP_ENDED_MS};

type Reply<T> = std::result::Result<Response<T>, Status>;

impl Svc {
    pub(super) async fn acknowledge(
        &self,
        req: Request<pb::AcknowledgeCheckRequest>,
    ) -> Reply<pb::Acknowledgement> {
        let id = crate::auth::identity_of(&req);
        crate::access::require_admin(&id, "acknowledging a check")?;
        let now = self.0.now();
        let r = req.into_inner();
        let author = silence::author_of(&id);
        let ack = self
            .tx(move |tx| {
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
                Ok(ack)
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
        crate::access::require_admin(&who, "removing an acknowledgement")?;
        let id = req.into_inner().id;
        super::check_id("id", &id)?;
        let now = self.0.now();
        let i = id.clone();
        let found = self
            .tx(move |tx| {
                let a = tx.list_acks()?.into_iter().find(|a| a.id == i);
                if a.is_some() {
                    tx.delete_ack(&i)?;
                }
                Ok(a)
            })
            .await?
            .ok_or_else(|| CoordError::NotFound(format!("id: no acknowledgement '{id}'")))?;
        tracing::info!(id = %found.id, node = %found.node, check = %found.check,
            by = %silence::author_of(&who), "acknowledgement removed");
        Ok(Response::new(found.to_pb(now)))
    }

    pub(super) async fn maint_create(
        &self,
        req: Request<pb::CreateMaintenanceRequest>,
    ) -> Reply<pb::MaintenanceWindow> {
        let id = crate::auth::identity_of(&req);
        crate::access::require_admin(&id, "declaring a maintenance window")?;
        let now = self.0.now();
        let w = silence::new_window(req.get_ref(), &silence::author_of(&id), now)?;
        let m = w.clone();
        self.tx(move |tx| {
            tx.prune_maintenance(now - KEEP_ENDED_MS)?;
            tx.insert_maintenance(&m)
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
        crate::access::require_admin(&who, "removing a maintenance window")?;
        let id = req.into_inner().id;
        super::check_id("id", &id)?;
        let now = self.0.now();
        let i = id.clone();
        let found = self
            .tx(move |tx| {
                let w = tx.list_maintenance()?.into_iter().find(|w| w.id == i);
                if w.is_some() {
                    tx.delete_maintenance(&i)?;
                }
                Ok(w)
            })
            .await?
            .ok_or_else(|| CoordError::NotFound(format!("id: no maintenance window '{id}'")))?;
        tracing::info!(id = %found.id, nodes = %found.nodes, by = %silence::author_of(&who), "maintenance window removed");
        Ok(Response::new(found.to_pb(now)))
    }
}
