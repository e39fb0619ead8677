//! `ClusterService`: the agents, workers and tables as users see them, and
//! draining agents.
use benchlake_proto::v1 as pb;
use pb::cluster_service_server::ClusterService;
use tonic::{Request, Response, Status};

use super::Svc;
use crate::convert;
use crate::model::*;

#[tonic::async_trait]
impl ClusterService for Svc {
    async fn list_agents(
        &self,
        _req: Request<pb::ListAgentsRequest>,
    ) -> std::result::Result<Response<pb::ListAgentsResponse>, Status> {
        let rows = self
            .read(|tx| {
                let mut out = Vec::new();
                for a in tx.list_agents()? {
                    let running = tx
                        .tasks_of_agent(&a.name, &[TaskState::Leased, TaskState::Running])?
                        .len() as u32;
                    out.push((a, running));
                }
                Ok(out)
            })
            .await?;
        let agents = rows
            .into_iter()
            .map(|(a, running)| {
                let state = match (a.state, a.drain) {
                    (AgentState::Lost, _) => "LOST",
                    (_, true) if running > 0 => "DRAINING",
                    (_, true) => "DRAINED",
                    _ => "ONLINE",
                };
                let last = self
                    .0
                    .last_heartbeat(&a.name)
                    .unwrap_or(a.last_heartbeat_ms);
                convert::agent_info(a, state, last, running)
            })
            .collect();
        Ok(Response::new(pb::ListAgentsResponse { agents }))
    }

    async fn list_benchmarks(
        &self,
        req: Request<pb::ListBenchmarksRequest>,
    ) -> std::result::Result<Response<pb::ListBenchmarksResponse>, Status> {
        let name = req.into_inner().name;
        let agents = self.read(|tx| tx.list_agents()).await?;
        let benchmarks = convert::benchmark_offers(&agents, &name);
        if !name.is_empty() && benchmarks.is_empty() {
            return Err(Status::not_found(format!(
                "no agent's catalog has a benchmark '{name}' (benchmarks list shows what they have)"
            )));
        }
        Ok(Response::new(pb::ListBenchmarksResponse { benchmarks }))
    }

    async fn drain_agent(
        &self,
        req: Request<pb::DrainAgentRequest>,
    ) -> std::result::Result<Response<pb::AgentInfo>, Status> {
        let who = crate::audit::Actor::api(crate::auth::identity_of(&req));
        let r = req.into_inner();
        let a = self.0.drain_agent(&who, &r.name, !r.undrain).await?;
        tracing::info!(agent = %a.name, drain = a.drain, "agent drain changed");
        let state = if a.drain {
            "DRAINING"
        } else {
            a.state.as_str()
        };
        let last = a.last_heartbeat_ms;
        Ok(Response::new(convert::agent_info(a, state, last, 0)))
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
        let totals = self.read(|tx| tx.table_totals()).await?;
        let tables = benchlake_core::catalog::all()
            .iter()
            .map(|t| {
                let mine = totals
                    .iter()
                    .find(|x| x.table == t.name)
                    .cloned()
                    .unwrap_or_default();
                pb::TableInfo {
                    name: t.name.to_string(),
                    files: mine.files,
                    rows: mine.rows,
                    bytes: mine.bytes,
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

    async fn acknowledge_check(
        &self,
        req: Request<pb::AcknowledgeCheckRequest>,
    ) -> std::result::Result<Response<pb::Acknowledgement>, Status> {
        self.acknowledge(req).await
    }
    async fn list_acknowledgements(
        &self,
        req: Request<pb::ListAcknowledgementsRequest>,
    ) -> std::result::Result<Response<pb::ListAcknowledgementsResponse>, Status> {
        self.list_acks(req).await
    }
    async fn remove_acknowledgement(
        &self,
        req: Request<pb::RemoveAcknowledgementRequest>,
    ) -> std::result::Result<Response<pb::Acknowledgement>, Status> {
        self.remove_ack(req).await
    }
    async fn create_maintenance(
        &self,
        req: Request<pb::CreateMaintenanceRequest>,
    ) -> std::result::Result<Response<pb::MaintenanceWindow>, Status> {
        self.maint_create(req).await
    }
    async fn list_maintenance(
        &self,
        req: Request<pb::ListMaintenanceRequest>,
    ) -> std::result::Result<Response<pb::ListMaintenanceResponse>, Status> {
        self.maint_list(req).await
    }
    async fn delete_maintenance(
        &self,
        req: Request<pb::DeleteMaintenanceRequest>,
    ) -> std::result::Result<Response<pb::MaintenanceWindow>, Status> {
        self.maint_delete(req).await
    }

    /// From memory (the verdict index, the node actions' events) and one
    /// read of the drain record: fast enough for Slurm's HealthCheckProgram.
    async fn get_node_health(
        &self,
        req: Request<pb::GetNodeHealthRequest>,
    ) -> std::result::Result<Response<pb::NodeHealth>, Status> {
        let node = req.into_inner().node;
        benchlake_core::scontrol::check_node_name(&node)
            .map_err(|e| crate::CoordError::invalid("node", e))?;
        // Whether the answer is complete is decided with the read itself:
        // the start-up load may end while the drain record is read below.
        let (checks, complete) = self.0.verdicts.node_health_read(&node);
        let mut checks: Vec<pb::NodeCheckVerdict> = checks
            .into_iter()
            .map(|(check, v)| pb::NodeCheckVerdict {
                check,
                status: v.row.status,
                value: v.row.value,
                reference: v.row.reference,
                unit: v.row.unit,
                message: v.row.message,
                run_id: v.run_id,
                silenced: String::new(),
                since_run: v.row.since_run,
                since_date: v.row.since_date,
                step: v.row.step,
                confidence: v.row.confidence,
            })
            .collect();
        let verdict = crate::verdicts::worst(checks.iter().map(|c| c.status.as_str()))
            .unwrap_or_default()
            .to_string();
        let (n, now) = (node.clone(), self.0.now());
        let runs: Vec<String> = checks.iter().map(|c| c.run_id.clone()).collect();
        let (drain, maintenance) = self
            .tx(move |tx| {
                let drain = tx.get_node_drain(&n)?;
                let m = crate::silence::node_silences(tx, &n, &mut checks, &runs, now)?;
                Ok((drain, (m, checks)))
            })
            .await?;
        let (maintenance, checks) = maintenance;
        let drain = drain.map(|d| pb::NodeDrainRecord {
            reason: d.reason,
            run_id: d.run_id,
            check: d.check,
            schedule_id: d.schedule_id.unwrap_or_default(),
            drained_at_ms: d.drained_ms,
        });
        let events = self
            .0
            .node_actions
            .events_of(&node)
            .into_iter()
            .map(|e| pb::NodeActionEvent {
                at_ms: e.at_ms,
                run_id: e.run_id,
                action: e.action,
                dry_run: e.dry_run,
                detail: e.detail,
            })
            .collect();
        Ok(Response::new(pb::NodeHealth {
            node,
            checks,
            verdict,
            drain,
            events,
            complete,
            maintenance,
        }))
    }
}
