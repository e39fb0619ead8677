//! `AgentService`: registration, heartbeats, task polling, progress, output
//! uploads and task completion.
use benchlake_core::layout;
use benchlake_proto::v1 as pb;
use pb::agent_service_server::AgentService;
use tonic::{Request, Response, Status, Streaming};

use super::{Svc, check_name, check_protocol, invalid};
use crate::auth::identity_of;
use crate::config::Role;
use crate::convert;
use crate::error::CoordError;
use crate::lifecycle::{agent, task};
use crate::model::*;

#[tonic::async_trait]
impl AgentService for Svc {
    async fn register(
        &self,
        req: Request<pb::RegisterRequest>,
    ) -> std::result::Result<Response<pb::RegisterResponse>, Status> {
        let id = identity_of(&req);
        let mut r = req.into_inner();
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
        let catalog = convert::catalog(std::mem::take(&mut r.catalog))?;
        if r.held_tasks.len() > 100_000 {
            return Err(invalid("held_tasks", "more than 100000 tasks"));
        }
        let held: Vec<(String, String)> = std::mem::take(&mut r.held_tasks)
            .into_iter()
            .map(|h| (h.task_id, h.lease_id))
            .collect();
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let last_seen = self.0.last_heartbeat(&r.name);
        // Drain, state, times and credential are the lifecycle's to set.
        let row = convert::agent_row(&r, catalog.clone(), false, String::new(), now);
        let (credential, admin) = (id.credential.clone(), id.role == Role::Admin);
        let (fx, drain, kept) = self
            .tx(move |tx| {
                let who = agent::Registrant {
                    credential: &credential,
                    admin,
                    last_seen_ms: last_seen,
                };
                agent::register_keeping(tx, &cfg, row, &who, &held, now)
            })
            .await?;
        if !kept.is_empty() {
            tracing::info!(agent = %r.name, tasks = ?kept, "agent re-attached to the tasks it still runs");
        }
        self.0.apply(fx);
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
            kept_task_ids: kept,
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
            // A store without a placement index: the rows decide.
            let cfg = self.0.cfg.clone();
            let (name, ids) = (r.name.clone(), r.running_task_ids.clone());
            cancel = self
                .tx(move |tx| {
                    let mut cancel = Vec::new();
                    for id in &ids {
                        if !task::heartbeat(tx, &cfg, &name, id, now)? {
                            cancel.push(id.clone());
                        }
                    }
                    Ok(cancel)
                })
                .await?;
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
        // A long poll (`wait_ms`) waits on the agent's bell, rung when a
        // commit queues a task for it (`placement::TaskBells`); only for a
        // registered agent, so the bells stay as many as the agents.
        let bell = (r.wait_ms > 0)
            .then(|| self.0.store.placement())
            .flatten()
            .and_then(|p| {
                let g = p.read().unwrap_or_else(|e| e.into_inner());
                g.agent(&r.name).is_some().then(|| g.bells().of(&r.name))
            });
        let deadline = tokio::time::Instant::now()
            + std::time::Duration::from_millis(u64::from(r.wait_ms.min(MAX_POLL_WAIT_MS)));
        let stopped = self.0.stopped();
        tokio::pin!(stopped);
        loop {
            // Listen before looking, so a task queued in between wakes us.
            let mut rung = bell.as_ref().map(|b| Box::pin(b.notified()));
            if let Some(n) = rung.as_mut() {
                n.as_mut().enable();
            }
            if let Some(task) = self.try_poll_task(&r).await? {
                return Ok(Response::new(pb::PollTaskResponse { task: Some(task) }));
            }
            let Some(rung) = rung else {
                return Ok(Response::new(pb::PollTaskResponse { task: None }));
            };
            if self.0.is_stopping() || tokio::time::Instant::now() >= deadline {
                return Ok(Response::new(pb::PollTaskResponse { task: None }));
            }
            tokio::select! {
                _ = tokio::time::timeout_at(deadline, rung) => {}
                _ = &mut stopped => {}
            }
        }
    }

    async fn report_progress(
        &self,
        req: Request<pb::ReportProgressRequest>,
    ) -> std::result::Result<Response<pb::ReportProgressResponse>, Status> {
        let id = identity_of(&req);
        let r = req.into_inner();
        check_slurm_job(
            "slurm_job_id",
            &r.slurm_job_id,
            "slurm_nodes",
            &r.slurm_nodes,
        )?;
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let svc = self.clone();
        let fx = self
            .tx(move |tx| {
                let t = match task::leased(tx, &r.task_id, &r.lease_id) {
                    Ok(t) => t,
                    // The attempt is over (cancelled, expired): the agent stops it.
                    Err(CoordError::LeaseLost(_)) => return Ok(None),
                    Err(e) => return Err(e),
                };
                svc.check_agent(&id, &t.agent)?;
                let p = task::Progress {
                    stdout_tail: &r.stdout_tail,
                    stderr_tail: &r.stderr_tail,
                    pending: r.phase == "pending",
                    report: TaskReport {
                        message: r.message.clone(),
                        slurm_job_id: r.slurm_job_id.clone(),
                        slurm_nodes: r.slurm_nodes.clone(),
                    },
                };
                task::progress_with(tx, &cfg, t, &p, now).map(Some)
            })
            .await?;
        let cancel = fx.is_none();
        if let Some(fx) = fx {
            self.0.apply(fx);
        }
        Ok(Response::new(pb::ReportProgressResponse { cancel }))
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
        let (task_id, lease_id) = (first.task_id.clone(), first.lease_id.clone());
        let t = self
            .tx(move |tx| task::leased(tx, &task_id, &lease_id))
            .await?;
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
                    .map_err(|e| lake_write_failed(&key, &e))?;
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
        w.finish().await.map_err(|e| lake_write_failed(&key, &e))?;
        tracing::debug!(key = %key, bytes = size, "raw output stored");
        Ok(Response::new(pb::RawFile {
            key,
            bytes: size,
            sha256: digest,
            format: String::new(),
            bundle: String::new(),
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
        check_slurm_job(
            "slurm_job_id",
            &r.slurm_job_id,
            "slurm_nodes",
            &r.slurm_nodes,
        )?;
        let (task_id, lease_id) = (r.task_id.clone(), r.lease_id.clone());
        let (tid, lid) = (task_id.clone(), lease_id.clone());
        let t = self.tx(move |tx| task::leased(tx, &tid, &lid)).await?;
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
            outputs.push(RawFileRow::from_pb(o));
        }
        let now = self.0.now();
        let cfg = self.0.cfg.clone();
        let run_id = t.run_id;
        if !r.success && r.retryable {
            // Not the benchmark's failure (its outputs could not land): a new
            // attempt while attempts remain, as for a lost lease.
            let reason = if r.error.is_empty() {
                "the agent could not hand in its outputs".to_string()
            } else {
                r.error.clone()
            };
            let (tid, lid, why) = (task_id.clone(), lease_id.clone(), reason.clone());
            let fx = self
                .tx(move |tx| {
                    let t = task::leased(tx, &tid, &lid)?;
                    task::retry_or_fail(tx, &cfg, t, &why, false, now)
                })
                .await?;
            tracing::warn!(task = %r.task_id, run = %run_id, error = %reason, "task attempt ended without a result; retried while attempts remain");
            self.0.apply(fx);
            return Ok(Response::new(pb::CompleteTaskResponse {}));
        }
        let done = task::Completion {
            success: r.success,
            exit_code: r.exit_code,
            error: r.error,
            outputs,
            stdout_tail: r.stdout_tail,
            stderr_tail: r.stderr_tail,
            slurm_job_id: r.slurm_job_id,
            slurm_nodes: r.slurm_nodes,
        };
        let success = r.success;
        let fx = self
            .tx(move |tx| {
                // Read again: the lease may have ended while outputs were checked.
                let t = task::leased(tx, &task_id, &lease_id)?;
                task::complete(tx, &cfg, t, done, now)
            })
            .await?;
        tracing::info!(task = %r.task_id, run = %run_id, success, "task completed");
        self.0.apply(fx);
        Ok(Response::new(pb::CompleteTaskResponse {}))
    }
}

/// A raw output that could not be written to the lake (a full disk, the
/// object store away): logged here, where the operator looks, and
/// UNAVAILABLE to the agent, which retries within its `--retry-for`.
fn lake_write_failed(key: &str, e: &dyn std::fmt::Display) -> Status {
    tracing::warn!(key = %key, error = %e, "cannot write a raw output to the lake");
    Status::unavailable(format!("lake: {e}"))
}

/// Refuses a Slurm job id or node list that is not one: the job id is
/// digits (with `_`/`+` of array and heterogeneous jobs), the node list
/// Slurm's names and ranges (`n[1-3],gpu01`). Both reach tables and pages.
fn check_slurm_job(
    id_field: &str,
    id: &str,
    nodes_field: &str,
    nodes: &str,
) -> std::result::Result<(), Status> {
    if id.len() > 64
        || !id
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '_' | '+'))
    {
        return Err(invalid(
            id_field,
            format!("'{}' is not a Slurm job id", id.escape_default()),
        ));
    }
    if nodes.len() > 65_536
        || !nodes.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']' | ',' | ':')
        })
    {
        return Err(invalid(
            nodes_field,
            "not a Slurm node list (letters, digits, '_', '-', '.', '[', ']', ',')",
        ));
    }
    Ok(())
}

/// The longest a `PollTask` waits for a task (`wait_ms` is capped to it).
pub const MAX_POLL_WAIT_MS: u32 = 5_000;

impl Svc {
    /// One look for a task of agent `r.name` (PollTask): leases it, or None.
    async fn try_poll_task(
        &self,
        r: &pb::PollTaskRequest,
    ) -> std::result::Result<Option<pb::TaskAssignment>, Status> {
        if self
            .0
            .draining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&r.name)
        {
            return Ok(None);
        }
        // Nothing that has not ended is placed on this agent: nothing to
        // lease, and no transaction (a commit that queues a task for it
        // updates the placement before it rings the agent's bell).
        if let Some(p) = self.0.store.placement() {
            let g = p.read().unwrap_or_else(|e| e.into_inner());
            if g.agent(&r.name).is_some() && g.load(&r.name) == 0 {
                return Ok(None);
            }
        }
        let now = self.0.now();
        let (cfg, name) = (self.0.cfg.clone(), r.name.clone());
        let got = self
            .0
            .db_at(crate::turns::Priority::Interactive, move |tx| {
                let Some(a) = tx.get_agent(&name)? else {
                    return Err(CoordError::NotFound(format!(
                        "name: agent '{name}' is not registered"
                    )));
                };
                if a.drain {
                    return Ok(None);
                }
                let (Some((t, run)), fx) = task::lease(tx, &cfg, &name, now)? else {
                    return Ok(None);
                };
                let peers = convert::peers(tx, &t.peers)?;
                let raw_prefix = layout::raw_prefix(&t.run_id, &t.task_id)?;
                Ok(Some((t, run, peers, raw_prefix, fx)))
            })
            .await
            .map_err(Status::from)?;
        let Some((t, run, peers, raw_prefix, fx)) = got else {
            return Ok(None);
        };
        self.0.apply(fx);
        tracing::info!(task = %t.task_id, run = %t.run_id, agent = %r.name, attempt = t.attempt, "task leased");
        Ok(Some(convert::task_assignment(&t, &run, peers, raw_prefix)))
    }
}

#[cfg(test)]
mod tests {
    use super::check_slurm_job;

    #[test]
    fn slurm_job_ids_and_node_lists_are_checked() {
        assert!(check_slurm_job("id", "", "nodes", "").is_ok());
        assert!(check_slurm_job("id", "4711", "nodes", "n[1-3],gpu-01").is_ok());
        assert!(check_slurm_job("id", "12_3", "nodes", "n1").is_ok());
        let e = check_slurm_job("slurm_job_id", "7; rm", "nodes", "").unwrap_err();
        assert!(e.message().starts_with("slurm_job_id: "), "{e}");
        let e = check_slurm_job("id", "7", "slurm_nodes", "n1 <script>").unwrap_err();
        assert!(e.message().starts_with("slurm_nodes: "), "{e}");
        assert!(check_slurm_job("id", &"9".repeat(65), "nodes", "").is_err());
    }
}
