//! Hand-computed micro cases, one per formula of the Dimemas model (reference §1.4):
//! one message, eager vs rendezvous, bus and link contention, each collective model
//! and size, CPU ratio, and the diagnoses of inconsistent traces.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use benchlake_replay::{ReplayError, run_replay};

/// Writes a `.dim` trace whose task `t` has the records `bodies[t]` (lines without the
/// `op:task:thread:` prefix are not allowed: give full records).
fn write_dim(dir: &Path, name: &str, bodies: &[Vec<String>]) -> PathBuf {
    let n = bodies.len();
    let head0 = format!("#DIMEMAS:\"{name}\":1,");
    let tail = format!(":{n}({}),1,0,0", vec!["1"; n].join(","));
    let defs = format!(
        "d:1:1:{n}:{}\n",
        (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(":")
    );
    let width = 15;
    let hdr_len = head0.len() + width + tail.len() + 1;
    let mut pos = hdr_len + defs.len();
    let mut offsets = Vec::new();
    let mut body = String::new();
    for b in bodies {
        offsets.push(pos);
        let s: String = b.iter().map(|l| format!("{l}\n")).collect();
        pos += s.len();
        body.push_str(&s);
    }
    let num = pos.to_string();
    let header = format!("{head0}{num}{tail}{}\n", " ".repeat(width - num.len()));
    let mut text = header + &defs + &body;
    for (t, o) in offsets.iter().enumerate() {
        text.push_str(&format!("s:{t}:{o}\n"));
    }
    let p = dir.join(format!("{name}.dim"));
    std::fs::write(&p, text).expect("write trace");
    p
}

fn params(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const MIB: u64 = 1 << 20;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn one_eager_message_completes_at_max_of_recv_startup_and_arrival() {
    let d = tempfile::tempdir().expect("tmp");
    // send at 1 ms (L = 5 µs, 1 MiB at 1000 MB/s = 1 ms), Recv posted at 2 ms.
    let p = write_dim(
        d.path(),
        "one",
        &[
            vec!["1:0:0:0.001".into(), format!("2:0:0:1:-1:{MIB}:7:1:0")],
            vec!["1:1:0:0.002".into(), format!("3:1:0:0:-1:{MIB}:7:1:0")],
        ],
    );
    let r = run_replay("dimemas", &p, &params(&[])).expect("replay");
    assert!(
        close(r.predicted_time_s, 0.002005),
        "{}",
        r.predicted_time_s
    );
    assert!(close(r.ranks[0].total_s, 0.001005));
    assert!(close(r.ranks[0].comm.latency, 5e-6));
    assert!(close(r.ranks[1].comm.latency, 5e-6));
    assert!(close(r.ranks[1].comm.wait, 0.0));
    assert_eq!(r.ranks[1].bytes_received, MIB);
    assert_eq!(r.transfers.get(&(1, 0)), Some(&(1, MIB)));
    // Receive posted early: it waits for the arrival at 1.005 + 1 = 2.005 ms.
    let p = write_dim(
        d.path(),
        "early",
        &[
            vec!["1:0:0:0.001".into(), format!("2:0:0:1:-1:{MIB}:7:1:0")],
            vec![format!("3:1:0:0:-1:{MIB}:7:1:0")],
        ],
    );
    let r = run_replay("dimemas", &p, &params(&[])).expect("replay");
    assert!(close(r.ranks[1].total_s, 0.002005));
    assert!(close(r.ranks[1].comm.wait, 0.002005 - 5e-6));
    // Other latency and bandwidth: L = 50 µs, BW = 100 MB/s → 1 MiB takes 10 ms.
    let r = run_replay(
        "dimemas",
        &p,
        &params(&[("latency", "5e-5"), ("bandwidth", "100")]),
    )
    .expect("replay");
    assert!(
        close(r.ranks[1].total_s, 0.001 + 50e-6 + 0.010),
        "{}",
        r.ranks[1].total_s
    );
}

#[test]
fn rendezvous_starts_the_transfer_when_the_receive_is_posted() {
    let d = tempfile::tempdir().expect("tmp");
    // Ssend (sync 1) at 1 ms; Recv at 2 ms: transfer from max(1.005, 2.005) to 3.005 ms.
    let p = write_dim(
        d.path(),
        "rdv",
        &[
            vec!["1:0:0:0.001".into(), format!("2:0:0:1:-1:{MIB}:7:1:1")],
            vec!["1:1:0:0.002".into(), format!("3:1:0:0:-1:{MIB}:7:1:0")],
        ],
    );
    let r = run_replay("dimemas", &p, &params(&[])).expect("replay");
    assert!(
        close(r.predicted_time_s, 0.003005),
        "{}",
        r.predicted_time_s
    );
    // The sender is released when the receive is reached (2.005 ms); Dimemas counts the
    // blocking as neither computation nor communication.
    assert!(close(r.ranks[0].total_s, 0.002005));
    assert!(close(r.ranks[0].idle_s, 0.001));
    // An eager limit turns the plain send (sync 0) into a rendezvous one: same timing.
    let p2 = write_dim(
        d.path(),
        "eager_limit",
        &[
            vec!["1:0:0:0.001".into(), format!("2:0:0:1:-1:{MIB}:7:1:0")],
            vec!["1:1:0:0.002".into(), format!("3:1:0:0:-1:{MIB}:7:1:0")],
        ],
    );
    let eager = run_replay("dimemas", &p2, &params(&[])).expect("replay");
    assert!(close(eager.predicted_time_s, 0.002005));
    let rdv = run_replay("dimemas", &p2, &params(&[("eager_limit", "32K")])).expect("replay");
    assert!(close(rdv.predicted_time_s, 0.003005));
    // An Irecv posted before the Ssend lets the transfer start at once (1.005 ms); the
    // Wait at 2 ms finds the message arrived at 2.005 ms.
    let p3 = write_dim(
        d.path(),
        "irecv",
        &[
            vec!["1:0:0:0.001".into(), format!("2:0:0:1:-1:{MIB}:7:1:1")],
            vec![
                format!("3:1:0:0:-1:{MIB}:7:1:1"),
                "1:1:0:0.002".into(),
                format!("3:1:0:0:-1:{MIB}:7:1:2"),
            ],
        ],
    );
    let r = run_replay("dimemas", &p3, &params(&[])).expect("replay");
    assert!(
        close(r.predicted_time_s, 0.002005),
        "{}",
        r.predicted_time_s
    );
    assert!(close(r.ranks[0].idle_s, 0.0));
}

/// Four senders (tasks 0-3) each send 1 MiB at 1 ms to tasks 4-7, which wait.
fn four_pairs(d: &Path) -> PathBuf {
    let mut bodies = Vec::new();
    for t in 0..4 {
        bodies.push(vec![
            "1:{t}:0:0.001".replace("{t}", &t.to_string()),
            format!("2:{t}:0:{}:-1:{MIB}:7:1:0", t + 4),
        ]);
    }
    for t in 4..8 {
        bodies.push(vec![format!("3:{t}:0:{}:-1:{MIB}:7:1:0", t - 4)]);
    }
    write_dim(d, "pairs", &bodies)
}

#[test]
fn buses_serialise_concurrent_transfers() {
    let d = tempfile::tempdir().expect("tmp");
    let p = four_pairs(d.path());
    let unlimited = run_replay("dimemas", &p, &params(&[])).expect("replay");
    assert!(close(unlimited.predicted_time_s, 0.002005));
    let one = run_replay("dimemas", &p, &params(&[("buses", "1")])).expect("replay");
    assert!(
        close(one.predicted_time_s, 0.002005 + 3.0 * 0.001),
        "{}",
        one.predicted_time_s
    );
    let mut ends: Vec<f64> = one.ranks[4..].iter().map(|r| r.total_s).collect();
    ends.sort_by(f64::total_cmp);
    for (k, e) in ends.iter().enumerate() {
        assert!(close(*e, 0.002005 + k as f64 * 0.001), "{k}: {e}");
    }
    let two = run_replay("dimemas", &p, &params(&[("buses", "2")])).expect("replay");
    assert!(
        close(two.predicted_time_s, 0.003005),
        "{}",
        two.predicted_time_s
    );
}

#[test]
fn in_links_serialise_messages_to_one_node() {
    let d = tempfile::tempdir().expect("tmp");
    // Tasks 0, 1, 2 send 1 MiB to task 3 at 1 ms; one in-link on task 3's node.
    let mut bodies = Vec::new();
    for t in 0..3 {
        bodies.push(vec![
            format!("1:{t}:0:0.001"),
            format!("2:{t}:0:3:-1:{MIB}:{t}:1:0"),
        ]);
    }
    bodies.push(
        (0..3)
            .map(|s| format!("3:3:0:{s}:-1:{MIB}:{s}:1:0"))
            .collect(),
    );
    let p = write_dim(d.path(), "links", &bodies);
    let r = run_replay("dimemas", &p, &params(&[])).expect("replay");
    assert!(
        close(r.predicted_time_s, 0.004005),
        "{}",
        r.predicted_time_s
    );
    let r2 = run_replay("dimemas", &p, &params(&[("links", "3")])).expect("replay");
    // Three links: all arrive at 2.005 ms; the receiver's three Recv startups end at 2.015 ms.
    assert!(
        close(r2.predicted_time_s, 0.002015),
        "{}",
        r2.predicted_time_s
    );
    assert_eq!(r.ranks[3].bytes_received, 3 * MIB);
}

/// Eight tasks run one collective `glop` with root task 0 sending `s` and receiving `r`.
fn collective(d: &Path, name: &str, glop: u32, s: u64, r: u64) -> PathBuf {
    let bodies: Vec<Vec<String>> = (0..8)
        .map(|t| {
            let (root, bs, br) = if t == 0 { (1, s, r) } else { (0, r, s) };
            vec![format!("10:{t}:0:{glop}:1:{root}:0:{bs}:{br}:1")]
        })
        .collect();
    write_dim(d, name, &bodies)
}

#[test]
fn collective_models_and_sizes() {
    let d = tempfile::tempdir().expect("tmp");
    let l = 5e-6;
    let t = 0.001; // 1 MiB at 1000 MB/s
    let bcast = collective(d.path(), "bcast", 1, MIB, 0);
    let allreduce = collective(d.path(), "allreduce", 11, MIB, MIB);
    let barrier = collective(d.path(), "barrier", 0, 0, 0);
    let run = |p: &Path, kv: &[(&str, &str)]| {
        run_replay("dimemas", p, &params(kv))
            .expect("replay")
            .predicted_time_s
    };
    // LOG, B = 0: ceil(log2 8) = 3 steps per phase; CURR: FAN_IN = send, FAN_OUT = recv.
    assert!(close(run(&bcast, &[]), 3.0 * (l + t) + 3.0 * l));
    assert!(close(run(&allreduce, &[]), 6.0 * (l + t)));
    assert!(close(run(&barrier, &[]), 6.0 * l));
    // LIN: P - 1 = 7 steps.
    assert!(close(
        run(&bcast, &[("gop_model", "LIN")]),
        7.0 * (l + t) + 7.0 * l
    ));
    // CTE: one step per phase, and the intra-node phase costs L_intra + S/BW_intra even
    // with one task per node (Dimemas's catch; intra L = 1 µs, BW = 10000 MB/s).
    let (li, ti) = (1e-6, 0.0001);
    assert!(close(
        run(&bcast, &[("gop_model", "CTE")]),
        (l + t) + l + (li + ti) + li
    ));
    // LOG with B = 2: stages of 4, 2, 1 pairs -> 2 + 1 + 1 = 4 steps per phase.
    assert!(close(run(&barrier, &[("buses", "2")]), 8.0 * l));
    assert!(close(run(&barrier, &[("buses", "1")]), 14.0 * l));
    // 4 tasks per node: inter-node P = 2 nodes (1 step) plus the slowest node's intra
    // phase (P = 4, 2 steps, L = 1 µs, 10000 MB/s).
    assert!(close(
        run(&allreduce, &[("tasks_per_node", "4")]),
        2.0 * (l + t) + 4.0 * (li + ti)
    ));
    // Sizes from a collectives definition file.
    for (size, bytes) in [
        ("MAX", MIB),
        ("MIN", 0),
        ("MEAN", MIB / 2),
        ("2MAX", 2 * MIB),
        ("S+R", MIB),
    ] {
        let f = d.path().join(format!("coll_{size}.txt"));
        std::fs::write(&f, format!("Machine globalop: 0 1 LOG {size} LOG {size}\n"))
            .expect("write");
        let got = run(&bcast, &[("collectives", f.to_str().expect("utf8"))]);
        let step = l + bytes as f64 / (1000.0 * MIB as f64);
        assert!(close(got, 6.0 * step), "{size}: {got} vs {}", 6.0 * step);
    }
    // Model 0 removes a phase (FAN_IN CTE still has its one-task intra-node step).
    let f = d.path().join("coll_zero.txt");
    std::fs::write(&f, "Machine globalop: 0 1 CTE MAX 0 MAX\n").expect("write");
    assert!(close(
        run(&bcast, &[("collectives", f.to_str().expect("utf8"))]),
        (l + t) + (li + ti)
    ));
}

#[test]
fn cpu_ratio_divides_bursts() {
    let d = tempfile::tempdir().expect("tmp");
    let p = write_dim(
        d.path(),
        "cpu",
        &[vec!["1:0:0:0.004".into()], vec!["1:1:0:0.002".into()]],
    );
    let r = run_replay("dimemas", &p, &params(&[("cpu_ratio", "2")])).expect("replay");
    assert!(close(r.predicted_time_s, 0.002));
    assert!(close(r.ranks[1].computation_s, 0.001));
}

fn diagnosis(p: &Path) -> String {
    match run_replay("dimemas", p, &params(&[])) {
        Err(ReplayError::Inconsistent { message, .. }) => message,
        other => panic!("expected a diagnosis, got {other:?}"),
    }
}

#[test]
fn inconsistent_traces_end_with_a_diagnosis() {
    let d = tempfile::tempdir().expect("tmp");
    // Unmatched receive: rank 1 waits for a message rank 0 never sends.
    let p = write_dim(
        d.path(),
        "unmatched",
        &[
            vec!["1:0:0:0.001".into()],
            vec!["1:1:0:0.001".into(), "3:1:0:0:-1:8:3:1:0".into()],
        ],
    );
    let m = diagnosis(&p);
    assert!(
        m.contains("deadlock") && m.contains("rank 1") && m.contains("line 5"),
        "{m}"
    );
    // A Wait with no Irecv and no message ("unknown request").
    let p = write_dim(
        d.path(),
        "wait",
        &[vec!["3:0:0:1:-1:8:9:1:2".into()], vec![]],
    );
    let m = diagnosis(&p);
    assert!(
        m.contains("rank 0") && m.contains("line 3") && m.contains("tag 9"),
        "{m}"
    );
    // Head-to-head rendezvous sends deadlock.
    let p = write_dim(
        d.path(),
        "ssend",
        &[
            vec!["2:0:0:1:-1:8:1:1:1".into(), "3:0:0:1:-1:8:1:1:0".into()],
            vec!["2:1:0:0:-1:8:1:1:1".into(), "3:1:0:0:-1:8:1:1:0".into()],
        ],
    );
    let m = diagnosis(&p);
    assert!(
        m.contains("rendezvous") && m.contains("rank 0") && m.contains("rank 1"),
        "{m}"
    );
    // A collective that one member never reaches.
    let p = write_dim(
        d.path(),
        "coll",
        &[
            vec!["10:0:0:0:1:0:0:0:0:1".into()],
            vec!["1:1:0:0.1".into()],
        ],
    );
    let m = diagnosis(&p);
    assert!(m.contains("collective") && m.contains("rank 0"), "{m}");
    // A send to a task that does not exist.
    let p = write_dim(
        d.path(),
        "nodst",
        &[vec!["2:0:0:5:-1:8:1:1:0".into()], vec![]],
    );
    let m = diagnosis(&p);
    assert!(m.contains("rank 0") && m.contains("task 5"), "{m}");
}

#[test]
fn replays_are_deterministic() {
    let d = tempfile::tempdir().expect("tmp");
    let p = d.path().join("halo.dim");
    benchlake_replay::synth::Halo::new(16, 30)
        .write_dim(&p)
        .expect("synth");
    let a = run_replay("dimemas", &p, &params(&[("buses", "3"), ("links", "1")])).expect("a");
    let b = run_replay("dimemas", &p, &params(&[("buses", "3"), ("links", "1")])).expect("b");
    assert_eq!(
        serde_json::to_string(&a).expect("json"),
        serde_json::to_string(&b).expect("json")
    );
    assert_eq!(a.records, 16 * (30 * 7 + 3));
}
