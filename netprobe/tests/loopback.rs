//! netprobe with 4 (and 3) ranks as threads on loopback: the file rank 0 writes
//! is a LinkTest 2.1.17 file with mode "TCP" whose matrix is complete.
use std::net::TcpListener;
use std::time::Duration;

use benchlake_formats::linktest::{self, PayloadFormat};
use benchlake_netprobe::{Params, run_with_listener};

fn probe(n: usize, params: Params) -> (linktest::LinkTestRun, linktest::LinkTestRun) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pingpong_results_bin.sion");
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let peers: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let mut handles = Vec::new();
    for (rank, l) in listeners.into_iter().enumerate() {
        let peers = peers.clone();
        let params = Params {
            hostname: Some(format!("host{}", rank / 2)),
            ..params.clone()
        };
        let out = out.clone();
        handles.push(std::thread::spawn(move || {
            run_with_listener(rank, l, peers, &params, &out).unwrap()
        }));
    }
    let mut results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(results[1..].iter().all(|r| r.is_none()));
    let written = results.remove(0).unwrap();
    let read = linktest::read_file(&out).unwrap();
    (written, read)
}

fn params() -> Params {
    Params {
        num_messages: 20,
        message_size: 256,
        warmup_messages: 2,
        step_seed: Some(7),
        serial_retests: 3,
        hostname: None,
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(10),
    }
}

#[test]
fn four_ranks_give_a_complete_matrix() {
    let (written, run) = probe(4, params());
    assert_eq!(run, written, "the file holds exactly what was measured");
    assert_eq!(run.format, PayloadFormat::V2);
    assert_eq!(run.mode, "TCP");
    assert_eq!(run.version_string(), "2.1.17");
    assert_eq!(
        (run.num_tasks, run.num_messages, run.message_size),
        (4, 20, 256)
    );
    assert!(run.flags.randomize_steps);
    let hosts: Vec<_> = run.ranks.iter().map(|r| r.hostname.as_str()).collect();
    assert_eq!(hosts, ["host0", "host0", "host1", "host1"]);
    let p = &run.permutations[0];
    let n = 4;
    for i in 0..n {
        let mut steps_seen = Vec::new();
        for j in 0..n {
            let (t, s) = (p.times[i * n + j], p.steps[i * n + j]);
            if i == j {
                assert_eq!((t, s), (0.0, 0));
                continue;
            }
            assert!(t > 0.0 && t < 1.0, "pair {i}->{j}: {t}");
            // Both sides record the same step for their pair.
            assert_eq!(s, p.steps[j * n + i]);
            steps_seen.push(s);
        }
        steps_seen.sort();
        assert_eq!(
            steps_seen,
            vec![1, 2, 3],
            "rank {i} meets one partner per step"
        );
    }
    let measured: Vec<f64> = (0..16)
        .filter(|k| k / 4 != k % 4)
        .map(|k| p.times[k])
        .collect();
    let max = measured.iter().copied().fold(0.0, f64::max);
    assert_eq!(p.max_time_s, max);
    assert_eq!(p.slow_links.len(), 3);
    assert_eq!(p.slow_links[0].time_s, max);
    assert!(p.slow_links.iter().all(|s| s.retest_time_s.unwrap() > 0.0));
    assert!(p.slow_links.windows(2).all(|w| w[0].time_s >= w[1].time_s));
    // It flows through the same ingest as LinkTest's own files.
    let tables = benchlake_formats::linktest::run_tables(&run, "R", "netprobe.sion").unwrap();
    assert_eq!(tables[2].rows(), 12);
    assert_eq!(tables[4].rows(), 3);
}

#[test]
fn three_ranks_idle_in_turn() {
    let (_, run) = probe(
        3,
        Params {
            step_seed: None,
            serial_retests: 0,
            ..params()
        },
    );
    let p = &run.permutations[0];
    for i in 0..3 {
        for j in 0..3 {
            if i != j {
                assert!(p.times[i * 3 + j] > 0.0);
                assert!((1..=3).contains(&p.steps[i * 3 + j]));
            }
        }
    }
    assert!(p.slow_links.is_empty());
}
