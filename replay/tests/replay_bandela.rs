//! Bandela host type 0: hand-computed cases (buffered and single-copy sends, early
//! receive, barrier), the seed's 4-rank broadcast arithmetic
//! (`shared/data/replay/bandela_seed_bcast_check.json`) and deadlock diagnoses.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use benchlake_replay::bandela::{column_data_csv, summary_text, transfer_matrix_text};
use benchlake_replay::{ReplayError, ReplayResult, run_replay};

const INPUT: &str = "NUMBER_OF_HOSTS 1\nHOST_TYPE 0\nmpi_buffer_max 2048\nINTRA_HOST_BANDWIDTH_PEAK 800.00\nINTRA_HOST_LATENCY 2.0\nINTRA_HOST_BARRIER_LATENCY 10.00\nBLOCK_HOST 0\nNUMBER_OF_PROCS 4\nMPI_RANKS 0-3\nADAPTERS 0\n";

fn setup(ranks: &[&str]) -> (tempfile::TempDir, PathBuf, BTreeMap<String, String>) {
    let d = tempfile::tempdir().expect("tmp");
    let n = ranks.len();
    for (i, body) in ranks.iter().enumerate() {
        std::fs::write(
            d.path().join(format!("bandela.{i}.txt")),
            format!("H {i} {n} 0\n{body}"),
        )
        .expect("write");
    }
    let input = d.path().join("input");
    std::fs::write(&input, INPUT).expect("input");
    let mut p = BTreeMap::new();
    p.insert("input".to_string(), input.display().to_string());
    let dir = d.path().to_path_buf();
    (d, dir, p)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn run(dir: &Path, p: &BTreeMap<String, String>) -> ReplayResult {
    run_replay("bandela", dir, p).expect("replay")
}

#[test]
fn buffered_send_is_copied_by_the_sender_and_read_by_the_receiver() {
    let (_d, dir, p) = setup(&[
        "C 0.001\nK 0 MPI_Send isend 1 1 5 1000 1 0\nK 1 MPI_Send wait 1\n",
        "C 0.002\nK 0 MPI_Recv irecv 0 1 5 1000 1 0\nK 1 MPI_Recv wait 1\n",
    ]);
    let r = run(&dir, &p);
    // Receiver: 2 latencies (2 µs) + 1000 B at 800 MB/s (1.25 µs, small).
    let r1 = &r.ranks[1];
    assert!(close(r1.total_s, 0.002 + 4e-6 + 1.25e-6), "{}", r1.total_s);
    assert!(close(r1.comm.latency, 4e-6) && close(r1.comm.small, 1.25e-6) && r1.comm.wait == 0.0);
    assert_eq!(r1.bytes_received, 1000);
    // Sender: 2 latencies + local copy at 2 x 800 MB/s (0.625 µs), bytes buffered.
    let r0 = &r.ranks[0];
    assert!(close(r0.total_s, 0.001 + 4e-6 + 0.625e-6), "{}", r0.total_s);
    assert_eq!(r0.bytes_buffered, 1000);
    for x in &r.ranks {
        assert!(close(
            x.total_s,
            x.computation_s + x.comm.wait + x.comm.latency + x.comm.small + x.comm.big
        ));
    }
    assert!(summary_text(&r).contains(" CPU 1 Total  Time              :     0.002005 s"));
    assert!(
        column_data_csv(&r).contains("1,MPI_Recv,0.000000000,0.000004000,0.000001250,0.000000000")
    );
    assert!(transfer_matrix_text(&r).contains("0 0\n1 0\n"));
}

#[test]
fn symmetric_big_send_is_single_copy_and_completes_with_the_receiver() {
    let (_d, dir, p) = setup(&[
        "C 0.001\nK 0 MPI_Send isend 1 1 5 400000 1 1\nK 1 MPI_Send wait 1\n",
        "C 0.002\nK 0 MPI_Recv irecv 0 1 5 400000 1 1\nK 1 MPI_Recv wait 1\n",
    ]);
    let r = run(&dir, &p);
    let end1 = 0.002 + 4e-6 + 0.0005;
    assert!(close(r.ranks[1].total_s, end1), "{}", r.ranks[1].total_s);
    assert!(close(r.ranks[1].comm.big, 0.0005));
    // The sender waits from 1.002 ms until the receiver's copy ends, then pays L.
    assert!(
        close(r.ranks[0].comm.wait, end1 - 0.001002),
        "{}",
        r.ranks[0].comm.wait
    );
    assert!(close(r.ranks[0].total_s, end1 + 2e-6));
    assert_eq!(r.ranks[0].bytes_buffered, 0);
}

#[test]
fn early_receive_waits_for_the_send() {
    let (_d, dir, p) = setup(&[
        "C 0.001\nK 0 MPI_Send isend 1 1 5 400000 1 0\nK 1 MPI_Send wait 1\n",
        "K 0 MPI_Recv irecv 0 1 5 400000 1 0\nK 1 MPI_Recv wait 1\n",
    ]);
    let r = run(&dir, &p);
    // Data available at 1 ms + 2 µs + copy 400000 B at 1600 MB/s (250 µs).
    let avail = 0.001 + 2e-6 + 0.00025;
    assert!(
        close(r.ranks[1].comm.wait, avail - 2e-6),
        "{}",
        r.ranks[1].comm.wait
    );
    assert!(
        close(r.ranks[1].total_s, avail + 2e-6 + 0.0005),
        "{}",
        r.ranks[1].total_s
    );
}

#[test]
fn barrier_synchronises_and_pays_the_barrier_latency() {
    let (_d, dir, p) = setup(&[
        "C 0.001\nK 0 MPI_Barrier barrier 1\n",
        "C 0.003\nK 0 MPI_Barrier barrier 1\n",
    ]);
    let r = run(&dir, &p);
    for x in &r.ranks {
        assert!(close(x.total_s, 0.003 + 10e-6), "{}", x.total_s);
    }
    assert!(close(r.ranks[0].comm.wait, 0.002));
}

#[test]
fn seed_bcast_root_arithmetic() {
    // CPU 3 of the manual's 4-rank MPI_Bcast, with the inputs worked out in the check:
    // 10 latency charges of 2 µs, one 400 000-byte receive at 800e6 B/s, no waiting.
    let check: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/replay/bandela_seed_bcast_check.json"
        ))
        .expect("json"),
    )
    .expect("parse");
    let inp = &check["inputs_that_reproduce"];
    assert_eq!(inp["latency0_s"].as_f64(), Some(2e-6));
    assert_eq!(inp["bandwidth_bytes_per_s"].as_f64(), Some(800e6));
    let payload = inp["payload_bytes"].as_u64().expect("payload");
    let cpu3 = &check["per_cpu"]["3"];
    let comm_printed = cpu3["comm_printed"].as_f64().expect("comm");
    let total_printed = cpu3["total_printed"].as_f64().expect("total");
    let n_lat = cpu3["latency_events"].as_u64().expect("n");
    let comp = total_printed - comm_printed;
    let mut sender = format!("K 0 MPI_Bcast isend 1 1 -3 {payload} 0 0\nK 1 MPI_Bcast wait 0\n");
    let mut root =
        format!("C {comp:.6}\nK 0 MPI_Bcast irecv 0 1 -3 {payload} 0 0\nK 1 MPI_Bcast wait 0\n");
    for k in 1..n_lat / 2 {
        sender.push_str(&format!(
            "K 0 MPI_Bcast isend 1 1 -3 0 {k} 0\nK 1 MPI_Bcast wait {k}\n"
        ));
        root.push_str(&format!(
            "K 0 MPI_Bcast irecv 0 1 -3 0 {k} 0\nK 1 MPI_Bcast wait {k}\n"
        ));
    }
    let (_d, dir, p) = setup(&[&sender, &root]);
    let r = run(&dir, &p);
    let c = &r.ranks[1];
    assert!(
        (c.communication_s() - comm_printed).abs() < 5e-7,
        "{} vs {comm_printed}",
        c.communication_s()
    );
    assert!(
        (c.total_s - total_printed).abs() < 5e-7,
        "{} vs {total_printed}",
        c.total_s
    );
    assert!(close(
        c.comm.big,
        cpu3["big_transfer_s"].as_f64().expect("big")
    ));
    assert_eq!(c.bytes_received, payload);
}

#[test]
fn inconsistent_traces_are_diagnosed() {
    let (_d, dir, p) = setup(&[
        "C 0.001\n",
        "K 0 MPI_Recv irecv 0 1 5 8 1 0\nK 1 MPI_Recv wait 1\n",
    ]);
    let e = run_replay("bandela", &dir, &p).expect_err("deadlock");
    let m = e.to_string();
    assert!(
        matches!(e, ReplayError::Inconsistent { .. })
            && m.contains("rank 1")
            && m.contains("line 3")
            && m.contains("request 1"),
        "{m}"
    );
    let (_d, dir, p) = setup(&["K 0 MPI_Wait wait 9\n"]);
    let m = run_replay("bandela", &dir, &p)
        .expect_err("unknown")
        .to_string();
    assert!(
        m.contains("rank 0") && m.contains("unknown request 9") && m.contains("line 2"),
        "{m}"
    );
}

fn setup_switch(
    ranks: &[&str],
    hosts: &[u32],
    interleave: bool,
) -> (tempfile::TempDir, PathBuf, BTreeMap<String, String>) {
    let d = tempfile::tempdir().expect("tmp");
    let n = ranks.len();
    for (i, body) in ranks.iter().enumerate() {
        std::fs::write(
            d.path().join(format!("bandela.{i}.txt")),
            format!("H {i} {n} {}\n{body}", hosts[i]),
        )
        .expect("write");
    }
    let on = |h: u32| {
        (0..n)
            .filter(|&i| hosts[i] == h)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let input = format!(
        "NUMBER_OF_HOSTS 2\nHOST_TYPE 2\nsynchronous Y\ninterleave {}\nINTRA_HOST_BANDWIDTH_PEAK 800\nINTRA_HOST_LATENCY 2\nINTER_HOST_LATENCY 5\nINTER_HOST_BANDWIDTH_PEAKS 500 -1\nINTRA_HOST_BARRIER_LATENCY 10\nINTER_HOST_BARRIER_LATENCY 20\nBLOCK_HOST 0\nNUMBER_OF_PROCS 2\nMPI_RANKS {}\nADAPTERS 1\nBLOCK_HOST 1\nNUMBER_OF_PROCS 2\nMPI_RANKS {}\nADAPTERS 1\n",
        if interleave { "Y" } else { "N" },
        on(0),
        on(1)
    );
    let path = d.path().join("input");
    std::fs::write(&path, input).expect("input");
    let mut p = BTreeMap::new();
    p.insert("input".to_string(), path.display().to_string());
    let dir = d.path().to_path_buf();
    (d, dir, p)
}

#[test]
fn host_type_2_switch_transfer_and_adapter_statistics() {
    // 1 MB from host 0 to host 1; 500 MB/s ping-pong = 1000 MB/s per half; L = 5 µs.
    let (_d, dir, p) = setup_switch(
        &[
            "C 0.001\nK 0 MPI_Send isend 1 1 5 1000000 1 0\nK 1 MPI_Send wait 1\n",
            "C 0.002\nK 0 MPI_Recv irecv 0 1 5 1000000 1 0\nK 1 MPI_Recv wait 1\n",
        ],
        &[0, 1],
        false,
    );
    let r = run(&dir, &p);
    // Sender: 5 µs, then its adapter pushes 1 MB in 1 ms (synchronous), wait pays 2 µs.
    assert!(
        close(r.ranks[0].total_s, 0.001 + 5e-6 + 0.001 + 2e-6),
        "{}",
        r.ranks[0].total_s
    );
    assert!(close(r.ranks[0].comm.big, 0.001));
    // Receiver: irecv 5 µs, wait 2 µs, then its adapter reads 1 MB in 1 ms.
    assert!(
        close(r.ranks[1].total_s, 0.002 + 7e-6 + 0.001),
        "{}",
        r.ranks[1].total_s
    );
    assert_eq!(r.adapters.len(), 2);
    for a in &r.adapters {
        assert_eq!(
            (a.min_request, a.avg_request, a.max_request),
            (Some(1e6), Some(1e6), Some(1e6))
        );
        assert!(
            (a.aggregate_bw_mb_s - 1000.0).abs() < 1e-6,
            "{}",
            a.aggregate_bw_mb_s
        );
        assert!((a.avg_concurrent - 1.0).abs() < 1e-9);
        assert!((a.busy_fraction - 0.001 / r.predicted_time_s).abs() < 1e-9);
    }
}

#[test]
fn host_type_2_adapter_queueing_versus_interleaving() {
    let send = |dst: u32| {
        format!("C 0.001\nK 0 MPI_Send isend {dst} 1 5 1000000 1 0\nK 1 MPI_Send wait 1\n")
    };
    let recv =
        |src: u32| format!("K 0 MPI_Recv irecv {src} 1 5 1000000 1 0\nK 1 MPI_Recv wait 1\n");
    let bodies = [send(1), recv(0), send(3), recv(2)];
    let refs: Vec<&str> = bodies.iter().map(|s| s.as_str()).collect();
    // Not interleaved: rank 2's transfer queues behind rank 0's on host 0's one adapter.
    let (_d, dir, p) = setup_switch(&refs, &[0, 1, 0, 1], false);
    let r = run(&dir, &p);
    assert!(
        close(r.ranks[2].comm.wait, 0.001),
        "{}",
        r.ranks[2].comm.wait
    );
    assert!(close(r.ranks[2].total_s, 0.001 + 5e-6 + 0.002 + 2e-6));
    let h0 = r.adapters.iter().find(|a| a.host == 0).expect("host 0");
    assert_eq!(h0.avg_request, Some(1e6));
    assert!((h0.avg_concurrent - 1.0).abs() < 1e-9 && (h0.aggregate_bw_mb_s - 1000.0).abs() < 1e-6);
    // Interleaved: the second transfer shares the adapter (half bandwidth, 2 ms).
    let (_d, dir, p) = setup_switch(&refs, &[0, 1, 0, 1], true);
    let r = run(&dir, &p);
    assert!(close(r.ranks[2].comm.wait, 0.0));
    assert!(close(r.ranks[2].comm.big, 0.002), "{}", r.ranks[2].comm.big);
    let h0 = r.adapters.iter().find(|a| a.host == 0).expect("host 0");
    assert!(
        (h0.avg_concurrent - 1.5).abs() < 1e-9,
        "{}",
        h0.avg_concurrent
    );
}

fn setup_with(
    ranks: &[&str],
    extra: &str,
) -> (tempfile::TempDir, PathBuf, BTreeMap<String, String>) {
    let (d, dir, p) = setup(ranks);
    std::fs::write(d.path().join("input"), format!("{INPUT}{extra}")).expect("input");
    (d, dir, p)
}

#[test]
fn ignore_next_collective_skips_its_kernels() {
    let ranks = [
        "M ignore_next_col 1\nC 0.001\nK 0 MPI_Bcast isend 1 1 -3 400000 1 0\nK 1 MPI_Bcast wait 1\nK 2 MPI_Barrier barrier 1\n",
        "M ignore_next_col 1\nK 0 MPI_Bcast irecv 0 1 -3 400000 1 0\nK 1 MPI_Bcast wait 1\nK 2 MPI_Barrier barrier 1\n",
    ];
    let (_d, dir, p) = setup_with(&ranks, "block_max_ignore_collective 1\nignore_index 1\n");
    let r = run(&dir, &p);
    assert_eq!(r.ranks[1].bytes_received, 0);
    assert!(
        close(r.predicted_time_s, 0.001 + 10e-6),
        "{}",
        r.predicted_time_s
    );
    let (_d, dir, p) = setup_with(&ranks, "block_max_ignore_collective 1\nignore_index 0\n");
    let r = run(&dir, &p);
    assert_eq!(r.ranks[1].bytes_received, 400000);
    // The marker acts once: a second Bcast after a computation burst is replayed.
    let twice = [
        "M ignore_next_col 1\nK 0 MPI_Bcast isend 1 1 -3 400000 1 0\nK 1 MPI_Bcast wait 1\nC 0.001\nK 2 MPI_Bcast isend 1 1 -3 1000 2 0\nK 3 MPI_Bcast wait 2\n",
        "M ignore_next_col 1\nK 0 MPI_Bcast irecv 0 1 -3 400000 1 0\nK 1 MPI_Bcast wait 1\nC 0.001\nK 2 MPI_Bcast irecv 0 1 -3 1000 2 0\nK 3 MPI_Bcast wait 2\n",
    ];
    let (_d, dir, p) = setup_with(&twice, "block_max_ignore_collective 1\nignore_index 1\n");
    assert_eq!(run(&dir, &p).ranks[1].bytes_received, 1000);
    // A marker not followed by a collective stops the model with ignore_safely N.
    let bad = [
        "M ignore_next_col 1\nK 0 MPI_Send isend 1 1 1 8 1 0\nK 1 MPI_Send wait 1\n",
        "K 0 MPI_Recv irecv 0 1 1 8 1 0\nK 1 MPI_Recv wait 1\n",
    ];
    let (_d, dir, p) = setup_with(
        &bad,
        "block_max_ignore_collective 1\nignore_index 1\nignore_safely N\n",
    );
    let m = run_replay("bandela", &dir, &p)
        .expect_err("unsafe")
        .to_string();
    assert!(m.contains("ignore_safely") && m.contains("rank 0"), "{m}");
    let (_d, dir, p) = setup_with(
        &bad,
        "block_max_ignore_collective 1\nignore_index 1\nignore_safely Y\n",
    );
    assert_eq!(run(&dir, &p).ranks[1].bytes_received, 8);
}

#[test]
fn long_latency_when_the_pair_arrives_far_apart() {
    // The receive is posted at 0, the send's data is there at 1.002 ms: 1002 µs apart.
    let ranks = [
        "C 0.001\nK 0 MPI_Send isend 1 1 5 8 1 0\nK 1 MPI_Send wait 1\n",
        "K 0 MPI_Recv irecv 0 1 5 8 1 0\nK 1 MPI_Recv wait 1\n",
    ];
    let (_d, dir, p) = setup_with(
        &ranks,
        "intra_host_long_latency 50\ndelay_for_long_latency 100\n",
    );
    let r = run(&dir, &p);
    // irecv 2 µs + wait's long latency 50 µs.
    assert!(
        close(r.ranks[1].comm.latency, 52e-6),
        "{}",
        r.ranks[1].comm.latency
    );
    let (_d, dir, p) = setup_with(
        &ranks,
        "intra_host_long_latency 50\ndelay_for_long_latency 5000\n",
    );
    assert!(close(run(&dir, &p).ranks[1].comm.latency, 4e-6));
}

#[test]
fn bandela_timeline_and_chrome_trace() {
    let (_d, dir, mut p) = setup(&[
        "C 0.001\nK 0 MPI_Send isend 1 1 5 400000 1 1\nK 1 MPI_Send wait 1\n",
        "C 0.002\nK 0 MPI_Recv irecv 0 1 5 400000 1 1\nK 1 MPI_Recv wait 1\n",
    ]);
    p.insert("timeline".to_string(), "1".to_string());
    let r = run(&dir, &p);
    let names: Vec<(u32, &str)> = r
        .timeline
        .iter()
        .map(|e| (e.rank, e.name.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            (0, "compute"),
            (0, "latency"),
            (0, "wait"),
            (0, "latency"),
            (1, "compute"),
            (1, "latency"),
            (1, "latency"),
            (1, "transfer (big)")
        ]
    );
    for rank in 0..2u32 {
        let end = r
            .timeline
            .iter()
            .filter(|e| e.rank == rank)
            .map(|e| e.end_s)
            .fold(0.0, f64::max);
        assert!(close(end, r.ranks[rank as usize].total_s));
    }
    let json: serde_json::Value =
        serde_json::from_str(&benchlake_replay::bandela::chrome_trace_json(&r)).expect("json");
    assert_eq!(json["traceEvents"].as_array().map(|a| a.len()), Some(2 + 8));
}
