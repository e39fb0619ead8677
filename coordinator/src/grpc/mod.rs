//! The gRPC services of DESIGN.md §5 on top of [`Coordinator`], one module per
//! service, and the router that serves them with reflection, Flight and the
//! token interceptors.
//!
//! Handlers are thin: they check the request and the caller, run the
//! lifecycle operation ([`crate::lifecycle`]) or the read inside one store
//! transaction, hand the operation's effects to [`Coordinator::apply`] once it
//! committed, and convert the result with [`crate::convert`]. This module owns what every service
//! shares: the router, the caller checks and the field checks.
mod agents;
mod cluster;
mod replay;
mod runs;
mod schedules;
mod silence;
mod workers;

use std::pin::Pin;
use std::sync::Arc;

use benchlake_core::ids;
use benchlake_proto::v1 as pb;
use futures::Stream;
use pb::agent_service_server::AgentServiceServer;
use pb::cluster_service_server::ClusterServiceServer;
use pb::replay_service_server::ReplayServiceServer;
use pb::run_service_server::RunServiceServer;
use pb::schedule_service_server::ScheduleServiceServer;
use pb::worker_service_server::WorkerServiceServer;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;

use crate::Coordinator;
use crate::auth::{Guard, interceptor};
use crate::config::Role;
use crate::error::{CoordError, Result};
use crate::store::Tx;

pub use replay::MAX_SWEEP_POINTS;

type Shared = Arc<Coordinator>;

/// The services `grpc.health.v1` reports SERVING ("" is the whole server).
pub const HEALTH_SERVICES: &[&str] = &[
    "",
    "benchlake.v1.RunService",
    "benchlake.v1.ScheduleService",
    "benchlake.v1.ClusterService",
    "benchlake.v1.ReplayService",
    "benchlake.v1.AgentService",
    "benchlake.v1.WorkerService",
    "arrow.flight.protocol.FlightService",
];

/// Builds the tonic router with every service: the benchlake services,
/// reflection and Flight behind the token interceptors, and `grpc.health.v1`
/// (no token: it tells only whether the server serves). Every call is timed
/// into the metrics ([`crate::metrics::RpcLayer`]).
pub fn router(
    coord: Shared,
) -> Result<
    tonic::transport::server::Router<
        tower::layer::util::Stack<crate::metrics::RpcLayer, tower::layer::util::Identity>,
    >,
> {
    // A coordinator only serves while it may (a standby does not listen;
    // one that loses the lead stops serving), so every service is SERVING.
    let (health, health_svc) = tonic_health::server::health_reporter();
    for name in HEALTH_SERVICES {
        // The reporter's lock is free here: this completes at once.
        futures::executor::block_on(
            health.set_service_status(name, tonic_health::ServingStatus::Serving),
        );
    }
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
        .layer(crate::metrics::RpcLayer(coord.metrics.clone()))
        .add_service(health_svc)
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
        if id.may_act_as_worker(name) {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "worker: this credential belongs to '{}', not to worker '{name}'",
                id.name.as_deref().unwrap_or_default()
            )))
        }
    }

    /// Runs `f` in one store transaction ([`Coordinator::db`]).
    async fn tx<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, Status> {
        self.0.db(f).await.map_err(Status::from)
    }

    /// A read-only transaction a person waits for
    /// ([`crate::Coordinator::db_read`]: ahead of submits and leases).
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Tx) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, Status> {
        self.0.db_read(f).await.map_err(Status::from)
    }
}

fn invalid(field: &str, msg: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {msg}"))
}

/// Checks a name a client gives (agent, worker, label, format, schedule):
/// 1-`max` characters of `[A-Za-z0-9._-]`, so it is safe in keys and logs.
pub(crate) fn check_name(field: &str, v: &str, max: usize) -> Result<()> {
    let ok = !v.is_empty()
        && v.len() <= max
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(CoordError::invalid(
            field,
            format!("'{v}' must be 1-{max} characters of [A-Za-z0-9._-]"),
        ))
    }
}

fn check_id(field: &'static str, v: &str) -> std::result::Result<(), Status> {
    ids::validate_id(field, v).map_err(|e| Status::invalid_argument(e.to_string()))
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send>>;

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
