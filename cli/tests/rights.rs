//! The rights model (coordinator/src/access.rs, docs/configuration.md "Roles
//! and owners") as a matrix: every user-facing method of the gRPC API (from
//! `access::RPC_RIGHTS`, itself checked against the services' descriptors)
//! × every kind of caller (admin, the owner, another user, an unbound user
//! token, agent, worker, no token), each call on a fresh object owned by
//! `alice`, with the outcome the right predicts. A method without an
//! invoker here fails the test, so a new method cannot skip the matrix.
mod common;

use benchlake_coordinator::Tokens;
use benchlake_coordinator::access::{RPC_RIGHTS, Right};
use benchlake_proto::client::{Auth, channel};
use benchlake_proto::v1 as pb;
use common::*;
use tonic::Code;

const ADMIN: &str = "root-admin:admin-token-0123456789";
const ALICE: &str = "alice:alice-token-0123456789";
const BOB: &str = "bob:bob-token-0123456789abc";
const SHARED_USER: &str = "shared-user-token-0123456789";
const AGENT: &str = "agent-token-0123456789abcd";
const WORKER: &str = "worker-token-0123456789abc";

/// The token a holder of `NAME:TOKEN` presents.
fn secret(bound: &str) -> &str {
    bound.split_once(':').map(|x| x.1).unwrap_or(bound)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Admin,
    Owner,
    OtherUser,
    UnboundUser,
    Agent,
    Worker,
    Anonymous,
}

const CALLERS: &[Caller] = &[
    Caller::Admin,
    Caller::Owner,
    Caller::OtherUser,
    Caller::UnboundUser,
    Caller::Agent,
    Caller::Worker,
    Caller::Anonymous,
];

impl Caller {
    fn token(self) -> Option<&'static str> {
        match self {
            Caller::Admin => Some(secret(ADMIN)),
            Caller::Owner => Some(secret(ALICE)),
            Caller::OtherUser => Some(secret(BOB)),
            Caller::UnboundUser => Some(SHARED_USER),
            Caller::Agent => Some(AGENT),
            Caller::Worker => Some(WORKER),
            Caller::Anonymous => None,
        }
    }
}

/// What the model says: the refusal code, or `None` when the call is let
/// through (it may still fail for another reason: not found, precondition).
fn expected(right: Right, caller: Caller, node_action: bool) -> Option<Code> {
    match caller {
        Caller::Anonymous => return Some(Code::Unauthenticated),
        Caller::Agent | Caller::Worker => return Some(Code::PermissionDenied),
        Caller::Admin => return None,
        _ => {}
    }
    let owner = caller == Caller::Owner;
    match right {
        Right::Read | Right::Create => None,
        Right::CreateNodeAction if node_action => Some(Code::PermissionDenied),
        Right::CreateNodeAction => None,
        Right::Owner if owner => None,
        Right::Owner | Right::Admin => Some(Code::PermissionDenied),
    }
}

struct Clients {
    runs: pb::run_service_client::RunServiceClient<Ch>,
    schedules: pb::schedule_service_client::ScheduleServiceClient<Ch>,
    cluster: pb::cluster_service_client::ClusterServiceClient<Ch>,
    replay: pb::replay_service_client::ReplayServiceClient<Ch>,
    addr: String,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn clients(addr: &str, token: Option<&str>) -> Clients {
    let ch = || channel(addr).unwrap();
    let a = || Auth::new(token).unwrap();
    Clients {
        runs: pb::run_service_client::RunServiceClient::with_interceptor(ch(), a()),
        schedules: pb::schedule_service_client::ScheduleServiceClient::with_interceptor(ch(), a()),
        cluster: pb::cluster_service_client::ClusterServiceClient::with_interceptor(ch(), a()),
        replay: pb::replay_service_client::ReplayServiceClient::with_interceptor(ch(), a()),
        addr: addr.to_string(),
    }
}

fn schedule(name: &str, node_action: pb::NodeAction) -> pb::Schedule {
    pb::Schedule {
        name: name.into(),
        cron: "0 3 * * *".into(),
        time_zone: "UTC".into(),
        paused: true,
        spec: Some(bench_spec("sleep", &[("seconds", "0")])),
        node_action: node_action as i32,
        ..Default::default()
    }
}

/// Makes a fresh object owned by alice for a call of `method` and calls it
/// as `c`; the status code (Ok when the call succeeded).
async fn call(
    alice: &mut Clients,
    c: &mut Clients,
    method: &str,
    n: usize,
    node_action: bool,
) -> Code {
    let run = || pb::SubmitRunRequest {
        spec: Some(bench_spec("sleep", &[("seconds", "30")])),
        ..Default::default()
    };
    let sched = format!("s{n}");
    let code = |r: Result<(), tonic::Status>| r.err().map(|e| e.code()).unwrap_or(Code::Ok);
    match method {
        "SubmitRun" => code(c.runs.submit_run(run()).await.map(|_| ())),
        "GetRun" | "WatchRun" | "CancelRun" | "RerunFailed" | "AnalyzeRun" | "DownloadReports" => {
            let id = alice
                .runs
                .submit_run(run())
                .await
                .unwrap()
                .into_inner()
                .run_id;
            match method {
                "GetRun" => code(
                    c.runs
                        .get_run(pb::GetRunRequest { run_id: id })
                        .await
                        .map(|_| ()),
                ),
                "WatchRun" => code(
                    c.runs
                        .watch_run(pb::WatchRunRequest { run_id: id })
                        .await
                        .map(|_| ()),
                ),
                "CancelRun" => code(
                    c.runs
                        .cancel_run(pb::CancelRunRequest {
                            run_id: id,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                ),
                "RerunFailed" => code(
                    c.runs
                        .rerun_failed(pb::RerunFailedRequest { run_id: id })
                        .await
                        .map(|_| ()),
                ),
                "AnalyzeRun" => code(
                    c.runs
                        .analyze_run(pb::AnalyzeRunRequest {
                            run_id: id,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                ),
                _ => code(
                    c.runs
                        .download_reports(pb::DownloadReportsRequest {
                            run_id: id,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                ),
            }
        }
        "ListRuns" => code(
            c.runs
                .list_runs(pb::ListRunsRequest::default())
                .await
                .map(|_| ()),
        ),
        "CreateSchedule" => {
            let action = if node_action {
                pb::NodeAction::Drain
            } else {
                pb::NodeAction::Off
            };
            code(
                c.schedules
                    .create_schedule(pb::CreateScheduleRequest {
                        schedule: Some(schedule(&sched, action)),
                    })
                    .await
                    .map(|_| ()),
            )
        }
        "ListSchedules" => code(
            c.schedules
                .list_schedules(pb::ListSchedulesRequest::default())
                .await
                .map(|_| ()),
        ),
        "PauseSchedule" | "UpdateSchedule" | "DeleteSchedule" | "Backfill" | "TriggerSchedule" => {
            alice
                .schedules
                .create_schedule(pb::CreateScheduleRequest {
                    schedule: Some(schedule(&sched, pb::NodeAction::Off)),
                })
                .await
                .unwrap();
            let schedule_id = sched.clone();
            match method {
                "PauseSchedule" => code(
                    c.schedules
                        .pause_schedule(pb::PauseScheduleRequest {
                            schedule_id,
                            paused: false,
                        })
                        .await
                        .map(|_| ()),
                ),
                "UpdateSchedule" => code(
                    c.schedules
                        .update_schedule(pb::UpdateScheduleRequest {
                            schedule_id,
                            cron: Some("30 3 * * *".into()),
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                ),
                "DeleteSchedule" => code(
                    c.schedules
                        .delete_schedule(pb::DeleteScheduleRequest { schedule_id })
                        .await
                        .map(|_| ()),
                ),
                "Backfill" => code(
                    c.schedules
                        .backfill(pb::BackfillRequest {
                            schedule_id,
                            from_ms: T0 - 86_400_000,
                            to_ms: T0,
                            max_runs: 2,
                        })
                        .await
                        .map(|_| ()),
                ),
                _ => code(
                    c.schedules
                        .trigger_schedule(pb::TriggerScheduleRequest { schedule_id })
                        .await
                        .map(|_| ()),
                ),
            }
        }
        "ListAgents" => code(
            c.cluster
                .list_agents(pb::ListAgentsRequest {})
                .await
                .map(|_| ()),
        ),
        "ListBenchmarks" => code(
            c.cluster
                .list_benchmarks(pb::ListBenchmarksRequest::default())
                .await
                .map(|_| ()),
        ),
        "DrainAgent" => code(
            c.cluster
                .drain_agent(pb::DrainAgentRequest {
                    name: "a1".into(),
                    undrain: true,
                })
                .await
                .map(|_| ()),
        ),
        "ListWorkers" => code(
            c.cluster
                .list_workers(pb::ListWorkersRequest {})
                .await
                .map(|_| ()),
        ),
        "ListTables" => code(
            c.cluster
                .list_tables(pb::ListTablesRequest::default())
                .await
                .map(|_| ()),
        ),
        "GetNodeHealth" => code(
            c.cluster
                .get_node_health(pb::GetNodeHealthRequest::default())
                .await
                .map(|_| ()),
        ),
        "AcknowledgeCheck" => code(
            c.cluster
                .acknowledge_check(pb::AcknowledgeCheckRequest {
                    node: "n1".into(),
                    check: "node.cores".into(),
                    comment: "DIMM on order".into(),
                    expires_ms: now_ms() + 3_600_000,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
        ),
        "ListAcknowledgements" => code(
            c.cluster
                .list_acknowledgements(pb::ListAcknowledgementsRequest { all: true })
                .await
                .map(|_| ()),
        ),
        "CreateMaintenance" => code(
            c.cluster
                .create_maintenance(pb::CreateMaintenanceRequest {
                    nodes: "n[1-2]".into(),
                    start_ms: now_ms(),
                    end_ms: now_ms() + 3_600_000,
                    reason: "firmware".into(),
                })
                .await
                .map(|_| ()),
        ),
        "ListMaintenance" => code(
            c.cluster
                .list_maintenance(pb::ListMaintenanceRequest { all: true })
                .await
                .map(|_| ()),
        ),
        // Removing what an admin made (acknowledgements and windows have no
        // user owner: they act on nodes).
        "RemoveAcknowledgement" | "DeleteMaintenance" => {
            let mut admin = clients(&alice.addr, Some(secret(ADMIN)));
            if method == "RemoveAcknowledgement" {
                let id = admin
                    .cluster
                    .acknowledge_check(pb::AcknowledgeCheckRequest {
                        node: "n1".into(),
                        check: "*".into(),
                        comment: "known".into(),
                        expires_ms: now_ms() + 3_600_000,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .id;
                code(
                    c.cluster
                        .remove_acknowledgement(pb::RemoveAcknowledgementRequest { id })
                        .await
                        .map(|_| ()),
                )
            } else {
                let id = admin
                    .cluster
                    .create_maintenance(pb::CreateMaintenanceRequest {
                        nodes: "n1".into(),
                        start_ms: now_ms(),
                        end_ms: now_ms() + 3_600_000,
                        reason: "firmware".into(),
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .id;
                code(
                    c.cluster
                        .delete_maintenance(pb::DeleteMaintenanceRequest { id })
                        .await
                        .map(|_| ()),
                )
            }
        }
        "TriggerReplay" => code(
            c.replay
                .trigger_replay(pb::TriggerReplayRequest {
                    model: "dimemas".into(),
                    ..Default::default()
                })
                .await
                .map(|_| ()),
        ),
        other => panic!("no invoker for {other}: add one to cli/tests/rights.rs"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_method_every_caller_every_owner() {
    let tokens = Tokens {
        admin: vec![ADMIN.into()],
        user: vec![ALICE.into(), BOB.into(), SHARED_USER.into()],
        agent: vec![AGENT.into()],
        worker: vec![WORKER.into()],
    };
    let mut c = Cluster::start(tokens).await;
    c.token = Some(secret(ADMIN).into());
    c.add_agent("a1", Some(AGENT)).await;
    let mut alice = clients(&c.addr, Some(secret(ALICE)));
    let mut n = 0;
    let mut wrong = Vec::new();
    let mut cases = 0;
    for (_, method, right) in RPC_RIGHTS {
        let variants: &[bool] = if *method == "CreateSchedule" {
            &[false, true]
        } else {
            &[false]
        };
        for &node_action in variants {
            for &caller in CALLERS {
                n += 1;
                cases += 1;
                let mut cl = clients(&c.addr, caller.token());
                let got = call(&mut alice, &mut cl, method, n, node_action).await;
                let want = expected(*right, caller, node_action);
                let ok = match want {
                    Some(code) => got == code,
                    None => !matches!(
                        got,
                        Code::PermissionDenied | Code::Unauthenticated | Code::ResourceExhausted
                    ),
                };
                if !ok {
                    wrong.push(format!(
                        "{method}{} as {caller:?}: got {got:?}, want {}",
                        if node_action { " (node action)" } else { "" },
                        want.map(|c| format!("{c:?}"))
                            .unwrap_or_else(|| "let through".into())
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {cases} cases wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    eprintln!("{cases} cases (methods x callers) as the rights model says");

    // Changes to schedules, acknowledgements and maintenance windows are in
    // the audit trail like the dashboard's actions: taken ones and the ones
    // the caller's role or ownership refused (callers refused before the
    // services, without a role at all, are the authentication layer's).
    let rows = c.coord.audit_rows(1000, None).await.unwrap();
    for action in [
        "schedule.create",
        "schedule.change",
        "schedule.delete",
        "ack.create",
        "ack.remove",
        "maintenance.create",
        "maintenance.remove",
    ] {
        let of: Vec<_> = rows.iter().filter(|r| r.action == action).collect();
        for outcome in ["ok", "refused"] {
            assert!(
                of.iter()
                    .any(|r| r.outcome == outcome && r.via == "api" && !r.who.is_empty()),
                "no '{outcome}' row for {action}: {of:#?}"
            );
        }
    }
    let refused = rows
        .iter()
        .find(|r| r.action == "ack.create" && r.outcome == "refused")
        .unwrap();
    assert!(refused.detail.contains("admin"), "{refused:?}");

    // Owners carry over: a run fired from alice's schedule is alice's, and
    // bob cannot cancel it; the owner is shown on the run.
    alice
        .schedules
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(schedule("alices", pb::NodeAction::Off)),
        })
        .await
        .unwrap();
    let fired = alice
        .schedules
        .trigger_schedule(pb::TriggerScheduleRequest {
            schedule_id: "alices".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fired.owner, "alice");
    let mut bob = clients(&c.addr, Some(secret(BOB)));
    let e = bob
        .runs
        .cancel_run(pb::CancelRunRequest {
            run_id: fired.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("belongs to 'alice'"),
        "{}",
        e.message()
    );
    // A role that may not call a method is told which token would do.
    let e = bob
        .cluster
        .drain_agent(pb::DrainAgentRequest {
            name: "a1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("needs the admin role"),
        "{}",
        e.message()
    );
    // An unbound user token owns its runs under its fingerprint.
    let mut shared = clients(&c.addr, Some(SHARED_USER));
    let mine = shared
        .runs
        .submit_run(pb::SubmitRunRequest {
            spec: Some(bench_spec("sleep", &[("seconds", "30")])),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(mine.owner.starts_with("token:"), "{}", mine.owner);
    shared
        .runs
        .cancel_run(pb::CancelRunRequest {
            run_id: mine.run_id,
            ..Default::default()
        })
        .await
        .unwrap();
    // A user asking for a draining schedule is told which role it needs.
    let e = alice
        .schedules
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(schedule("drainer", pb::NodeAction::Drain)),
        })
        .await
        .unwrap_err();
    assert!(
        e.message().contains("needs the admin role"),
        "{}",
        e.message()
    );
}
