//! netprobe as an agent benchmark: the built-in catalog entry `netprobe` run
//! by 4 in-process agents (real gRPC, real `benchlake netprobe` processes),
//! the ranks meeting through rank 0's rendezvous, rank 0's SION file ingested
//! into the linktest tables. Also: an agent whose rank never starts fails the
//! run with a clear error, and (when this machine lets us create network
//! namespaces) the same run with every rank in its own namespace behind a
//! bridge, with its own address and host name.
mod common;

use std::collections::BTreeSet;
use std::path::Path;

use arrow::array::{Array, BooleanArray, Float64Array, Int32Array, StringArray};
use arrow::record_batch::RecordBatch;
use benchlake_coordinator::Tokens;
use benchlake_core::bench::{ArgTemplate, BenchmarkDef, Catalog};
use benchlake_proto::v1 as pb;
use common::*;

/// The built-in `netprobe` entry, with `{self_exe}` pointing at the benchlake
/// binary (in-process agents' own executable is the test binary).
fn builtin_netprobe(prefix: &[String]) -> BenchmarkDef {
    let cat = benchlake_agent::builtin_catalog().unwrap();
    let mut def = cat.get("netprobe").expect("netprobe is built in").clone();
    let mut cmd: Vec<ArgTemplate> = prefix.iter().cloned().map(ArgTemplate::Arg).collect();
    for a in def.command {
        cmd.push(match a {
            ArgTemplate::Arg(s) => ArgTemplate::Arg(s.replace("{self_exe}", &bin())),
            other => other,
        });
    }
    def.command = cmd;
    def
}

fn catalog_with(def: BenchmarkDef) -> Catalog {
    let mut c = Catalog::from_toml(&catalog(&bin())).unwrap();
    c.benchmarks.push(def);
    c
}

/// Every batch of `table` for `run_id`.
fn batches(lake: &Path, table: &str, run_id: &str) -> Vec<RecordBatch> {
    table_batches(lake, table, Some(run_id))
}

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .unwrap_or_else(|| panic!("column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("type of {name}"))
}

/// The landed run: complete 4×4 matrix minus self pairs with positive times,
/// 4 ranks with their host names, the retests, the header's modes.
fn check_landed(c: &Cluster, run_id: &str, n: usize, hosts: &[String]) {
    let lake = c.lake_dir();
    let mut pairs = BTreeSet::new();
    for b in batches(&lake, "linktest_timings", run_id) {
        let (f, t, s, x) = (
            col::<Int32Array>(&b, "from_rank"),
            col::<Int32Array>(&b, "to_rank"),
            col::<Float64Array>(&b, "time_s"),
            col::<Int32Array>(&b, "step"),
        );
        for i in 0..b.num_rows() {
            assert!(s.value(i) > 0.0 && s.value(i) < 1.0, "time {}", s.value(i));
            assert!((1..n as i32).contains(&x.value(i)), "step {}", x.value(i));
            assert_ne!(f.value(i), t.value(i), "no self pairs");
            assert!(pairs.insert((f.value(i), t.value(i))), "pair twice");
        }
    }
    let want: BTreeSet<(i32, i32)> = (0..n as i32)
        .flat_map(|i| (0..n as i32).filter(move |j| *j != i).map(move |j| (i, j)))
        .collect();
    assert_eq!(pairs, want, "the complete matrix minus self pairs");
    let mut ranks = Vec::new();
    for b in batches(&lake, "linktest_ranks", run_id) {
        let (r, h) = (
            col::<Int32Array>(&b, "rank"),
            col::<StringArray>(&b, "hostname"),
        );
        for i in 0..b.num_rows() {
            ranks.push((r.value(i), h.value(i).to_string()));
        }
    }
    ranks.sort();
    let want: Vec<(i32, String)> = hosts
        .iter()
        .enumerate()
        .map(|(r, h)| (r as i32, h.clone()))
        .collect();
    assert_eq!(ranks, want);
    let mut slow = 0;
    for b in batches(&lake, "linktest_slow_links", run_id) {
        let (k, rt, t) = (
            col::<StringArray>(&b, "kind"),
            col::<Float64Array>(&b, "retest_time_s"),
            col::<Float64Array>(&b, "time_s"),
        );
        for i in 0..b.num_rows() {
            assert_eq!(k.value(i), "retested");
            assert!(!rt.is_null(i) && rt.value(i) > 0.0 && t.value(i) > 0.0);
            slow += 1;
        }
    }
    assert_eq!(slow, 3, "3 retests recorded");
    let runs = batches(&lake, "linktest_runs", run_id);
    assert_eq!(runs.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let b = &runs[0];
    assert_eq!(col::<StringArray>(b, "mode").value(0), "TCP");
    assert_eq!(col::<StringArray>(b, "linktest_version").value(0), "2.1.17");
    assert!(col::<BooleanArray>(b, "randomize_steps").value(0));
    assert!(!col::<BooleanArray>(b, "serial").value(0));
}

fn task_text(d: &pb::RunDetail) -> String {
    d.tasks
        .iter()
        .map(|t| format!("{} {} {}", t.error, t.stdout_tail, t.stderr_tail))
        .collect::<Vec<_>>()
        .join("\n")
}

const PARAMS: &[(&str, &str)] = &[
    ("num_messages", "20"),
    ("message_size", "64"),
    ("warmup_messages", "2"),
    ("serial_retests", "3"),
    ("randomize_steps", "true"),
    ("rendezvous_timeout_s", "60"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn netprobe_on_four_agents_lands_a_complete_matrix() {
    let mut c = Cluster::start(Tokens::default()).await;
    for a in ["n0", "n1", "n2", "n3"] {
        c.add_agent_with(a, |cfg| {
            cfg.address = "127.0.0.1".into();
            cfg.catalog = catalog_with(builtin_netprobe(&[]));
        })
        .await;
    }
    c.add_worker("w1", None);
    let run = c.submit("netprobe", PARAMS, 4).await.unwrap();
    let d = c.wait_settled(&run.run_id, 180).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{}", task_text(&d));
    assert_eq!(d.tasks.len(), 4);
    // Rank 0's task uploaded the SION file as format linktest; the others only logs.
    let sion: Vec<_> = d
        .tasks
        .iter()
        .flat_map(|t| t.outputs.iter().map(move |o| (t.rank, o)))
        .filter(|(_, o)| o.format == "linktest")
        .collect();
    assert_eq!(sion.len(), 1, "{sion:?}");
    assert_eq!(sion[0].0, 0);
    assert!(sion[0].1.key.ends_with("pingpong_results_bin.sion"));
    let r0 = d.tasks.iter().find(|t| t.rank == 0).unwrap();
    assert!(
        r0.stdout_tail
            .contains("netprobe iteration 0: 4 ranks, 64 B x 20"),
        "{}",
        r0.stdout_tail
    );
    // One node identity (docs/tables.md): each rank is recorded under its
    // agent's node name (BENCHLAKE_NODE), not the host name all four share.
    let mut by_rank: Vec<(u32, String)> =
        d.tasks.iter().map(|t| (t.rank, t.agent.clone())).collect();
    by_rank.sort();
    let nodes: Vec<String> = by_rank.into_iter().map(|(_, a)| a).collect();
    check_landed(&c, &run.run_id, 4, &nodes);
    let host = benchlake_core::node::hostname();
    assert!(
        !nodes.contains(&host),
        "the test needs agent names apart from '{host}'"
    );
}

/// One agent calibrates by itself (what `benchlake up --demo` does): the
/// built-in entry with `local_ranks=2` (two ranks as threads, ping-ponging
/// through shared memory by default) and a size sweep writes one file per size, the ingest reads all three,
/// the run's checks judge each size against itself (no slow pair), and the
/// calibrate job fits latency and bandwidth from the run alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_agent_sweep_with_local_ranks_calibrates_by_itself() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent_with("solo", |cfg| {
        cfg.address = "127.0.0.1".into();
        cfg.catalog = catalog_with(builtin_netprobe(&[]));
    })
    .await;
    c.add_worker("w1", None);
    let run = c
        .submit(
            "netprobe",
            &[
                ("local_ranks", "2"),
                // The largest size takes milliseconds per message, 50
                // messages spread a stall over the average: on a busy
                // two-core host (CI runs this binary's tests at once) the
                // 8 B and 1 MiB pair times were once both ~0.1 ms of
                // scheduling, the 1 MiB one the smaller, and nothing could
                // be fitted.
                ("message_sizes", "8,64k,16MiB"),
                ("num_messages", "50"),
                ("warmup_messages", "2"),
                ("serial_retests", "0"),
            ],
            1,
        )
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 180).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{}", task_text(&d));
    let mut files: Vec<String> = d.tasks[0]
        .outputs
        .iter()
        .filter(|o| o.format == "linktest")
        .map(|o| o.key.rsplit('/').next().unwrap().to_string())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "pingpong_results_bin_16777216B.sion",
            "pingpong_results_bin_65536B.sion",
            "pingpong_results_bin_8B.sion"
        ]
    );
    let lake = c.lake_dir();
    let mut sizes = BTreeSet::new();
    for b in batches(&lake, "linktest_runs", &run.run_id) {
        let (n, s) = (
            b.column_by_name("num_tasks").unwrap(),
            b.column_by_name("message_size").unwrap(),
        );
        let n = arrow::compute::cast(n, &arrow::datatypes::DataType::Int64).unwrap();
        let s = arrow::compute::cast(s, &arrow::datatypes::DataType::Int64).unwrap();
        let (n, s) = (
            n.as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap(),
            s.as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap(),
        );
        let mode = col::<StringArray>(&b, "mode");
        for i in 0..b.num_rows() {
            assert_eq!(n.value(i), 2, "two local ranks");
            // The entry's default transport for local ranks.
            assert_eq!(mode.value(i), "SHM", "ping-pongs through shared memory");
            sizes.insert(s.value(i));
        }
    }
    assert_eq!(sizes, BTreeSet::from([8, 65536, 16 << 20]));
    // No slow pair: each size's pairs against their own file's median.
    let mut slow = Vec::new();
    for b in batches(&lake, "checks", &run.run_id) {
        let (ch, st, v) = (
            col::<StringArray>(&b, "check"),
            col::<StringArray>(&b, "status"),
            col::<Float64Array>(&b, "value"),
        );
        for i in 0..b.num_rows() {
            if ch.value(i) == "linktest.slow_pairs" {
                slow.push((st.value(i).to_string(), v.value(i)));
            }
        }
    }
    assert_eq!(slow, [("PASS".to_string(), 0.0)]);
    // Fitted from this run alone: intra-node, three sizes.
    let doc: benchlake_replay::calibrations::CalibrationDoc = serde_json::from_str(
        &std::fs::read_to_string(
            lake.join(format!("calibrations/{}/calibration.json", run.run_id)),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(doc.fitted, "{doc:?}");
    assert!(doc.combined.is_empty(), "{doc:?}");
    assert_eq!(doc.fits.len(), 1, "{doc:?}");
    let f = &doc.fits[0];
    assert_eq!(f.class.as_str(), "intra");
    assert_eq!(f.medians.len(), 3, "{f:?}");
    assert!(f.latency_s >= 0.0 && f.bandwidth_mb_s > 0.0, "{f:?}");
    assert_eq!(
        table_rows(&lake, "replay_calibrations", Some(&run.run_id)),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rank_that_never_starts_fails_the_run_with_a_clear_error() {
    let mut c = Cluster::start(Tokens::default()).await;
    c.add_agent_with("n0", |cfg| {
        cfg.address = "127.0.0.1".into();
        cfg.catalog = catalog_with(builtin_netprobe(&[]));
    })
    .await;
    // n1's netprobe never joins: its entry just sleeps.
    c.add_agent_with("n1", |cfg| {
        cfg.address = "127.0.0.1".into();
        let mut def = builtin_netprobe(&[]);
        def.command = vec![
            ArgTemplate::Arg("sleep".into()),
            ArgTemplate::Arg("1".into()),
        ];
        cfg.catalog = catalog_with(def);
    })
    .await;
    c.add_worker("w1", None);
    let run = c
        .submit_spec(pb::BenchmarkSpec {
            benchmark: "netprobe".into(),
            params: [("rendezvous_timeout_s", "2")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nodes: Some(pb::NodeSelector {
                names: vec!["n0".into(), "n1".into()],
                ..Default::default()
            }),
            max_attempts: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let d = c.wait_settled(&run.run_id, 120).await;
    assert_eq!(state(&d), pb::RunState::Failed);
    let r0 = d.tasks.iter().find(|t| t.rank == 0).unwrap();
    assert!(
        r0.stderr_tail
            .contains("rank(s) 1 (127.0.0.1) did not join within 2 s"),
        "{}",
        r0.stderr_tail
    );
    assert!(r0.error.contains("exited with code 1"), "{}", r0.error);
}

/// Network namespaces with a bridge, removed on drop.
struct Netns {
    names: Vec<String>,
    bridge: String,
    veths: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl Netns {
    /// `n` namespaces `blnp{pid}-{k}` at 10.231.{pid % 250}.{k + 2}/24 on a bridge.
    fn create(n: usize) -> Result<(Self, Vec<String>), String> {
        let pid = std::process::id();
        let mut me = Netns {
            names: Vec::new(),
            bridge: format!("blb{}", pid % 10_000_000),
            veths: Vec::new(),
        };
        let net = format!("10.231.{}", pid % 250);
        ip(&["link", "add", &me.bridge, "type", "bridge"])?;
        ip(&["link", "set", &me.bridge, "up"])?;
        let mut addrs = Vec::new();
        for k in 0..n {
            let ns = format!("blnp{pid}-{k}");
            ip(&["netns", "add", &ns])?;
            me.names.push(ns.clone());
            let v = format!("blv{}x{k}", pid % 1_000_000);
            ip(&[
                "link", "add", &v, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            me.veths.push(v.clone());
            ip(&["link", "set", &v, "master", &me.bridge])?;
            ip(&["link", "set", &v, "up"])?;
            let a = format!("{net}.{}", k + 2);
            ip(&["-n", &ns, "addr", "add", &format!("{a}/24"), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            addrs.push(a);
        }
        Ok((me, addrs))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for v in &self.veths {
            let _ = ip(&["link", "del", v]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
        for ns in &self.names {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn netprobe_across_network_namespaces() {
    let (ns, addrs) = match Netns::create(4) {
        Ok(x) => x,
        Err(e) => {
            unavailable(
                "netprobe_across_network_namespaces",
                &format!("cannot create network namespaces here ({e})"),
            );
            return;
        }
    };
    let mut c = Cluster::start(Tokens::default()).await;
    for (k, (name, addr)) in ns.names.iter().zip(&addrs).enumerate() {
        let prefix: Vec<String> = ["ip", "netns", "exec", name.as_str()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut def = builtin_netprobe(&prefix);
        // Each namespace plays a node with its own host name.
        def.env
            .insert("BENCHLAKE_NETPROBE_HOSTNAME".into(), format!("node{k}"));
        let addr = addr.clone();
        c.add_agent_with(&format!("a{k}"), move |cfg| {
            cfg.address = addr;
            cfg.catalog = catalog_with(def);
        })
        .await;
    }
    c.add_worker("w1", None);
    let run = c.submit("netprobe", PARAMS, 4).await.unwrap();
    let d = c.wait_settled(&run.run_id, 180).await;
    assert_eq!(state(&d), pb::RunState::Succeeded, "{}", task_text(&d));
    // Agent a{k} runs in namespace k as host node{k}, whatever rank it got.
    let mut hosts = vec![String::new(); 4];
    for t in &d.tasks {
        hosts[t.rank as usize] = t.agent.replace('a', "node");
    }
    check_landed(&c, &run.run_id, 4, &hosts);
    drop(c);
    drop(ns);
}
