//! `WorkerService`: job leasing (long poll), lease renewal, completion (the
//! commit protocol, [`crate::commit`]) and failure.
use benchlake_proto::v1 as pb;
use pb::worker_service_server::WorkerService;
use tonic::{Request, Response, Status};

use super::{Svc, check_name, check_protocol, invalid};
use crate::auth::identity_of;
use crate::config::Role;
use crate::convert;
use crate::error::{CoordError, Result};
use crate::lifecycle::job;
use crate::model::*;

/// A bound worker credential acts only on jobs its worker leased.
fn worker_holds(id: &crate::config::Identity, j: &JobRow) -> Result<()> {
    match (&id.name, &j.leased_by) {
        (Some(n), Some(by)) if id.role != Role::Admin && !id.may_act_as_worker(by) => {
            Err(CoordError::PermissionDenied(format!(
                "job {}: leased by worker '{by}', not '{n}'",
                j.job_id
            )))
        }
        _ => Ok(()),
    }
}

impl Svc {
    async fn try_lease_job(
        &self,
        worker: &str,
        kinds: &[String],
    ) -> std::result::Result<Option<pb::JobAssignment>, Status> {
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let (worker, kinds) = (worker.to_string(), kinds.to_vec());
        let (got, fx) = self
            .tx(move |tx| {
                let (j, fx) = job::lease(tx, &cfg, &worker, &kinds, now)?;
                let got = match j {
                    Some(j) => Some(convert::job_assignment(&j, cfg.job_lease_timeout_ms)?),
                    None => None,
                };
                Ok((got, fx))
            })
            .await?;
        self.0.apply(fx);
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
            // A stopping coordinator hands out nothing more and ends the wait
            // (begin_stop wakes it): the worker polls again, at the restarted one.
            if self.0.is_stopping() {
                return Ok(Response::new(pb::LeaseJobResponse { job: None }));
            }
            if let Some(job) = self.try_lease_job(&r.worker, &r.kinds).await? {
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
        let cfg = self.0.cfg.clone();
        let cancel = self
            .tx(move |tx| match job::leased(tx, &r.job_id, &r.lease_id) {
                Ok(j) => {
                    worker_holds(&id, &j)?;
                    job::renew(tx, &cfg, j, now)?;
                    Ok(false)
                }
                Err(CoordError::LeaseLost(_)) => Ok(true),
                Err(e) => Err(e),
            })
            .await?;
        Ok(Response::new(pb::RenewLeaseResponse { cancel }))
    }

    async fn complete_job(
        &self,
        req: Request<pb::CompleteJobRequest>,
    ) -> std::result::Result<Response<pb::CompleteJobResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        // The ownership check runs inside the commit's own transactions.
        let keys = crate::commit::commit_job(
            &self.0,
            r,
            std::sync::Arc::new(move |j: &crate::model::JobRow| worker_holds(&id, j)),
        )
        .await?;
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
        let (job_id, lease_id, error, retryable) = (
            r.job_id.clone(),
            r.lease_id.clone(),
            r.error.clone(),
            r.retryable,
        );
        let (run_id, fx) = self
            .tx(move |tx| {
                let j = job::leased(tx, &job_id, &lease_id)?;
                worker_holds(&id, &j)?;
                let run_id = j.run_id.clone();
                let mut msg = error;
                msg.truncate(8 << 10);
                let fx = job::retry_or_fail(tx, &cfg, j, &msg, retryable, now)?;
                Ok((run_id, fx))
            })
            .await?;
        tracing::warn!(job = %r.job_id, run = %run_id, retryable = r.retryable, error = %r.error, "job failed");
        self.0.apply(fx);
        Ok(Response::new(pb::FailJobResponse {}))
    }
}
