//! netprobe with ranks as threads on loopback: every mode gives a LinkTest
//! 2.1.17 file with mode "TCP" whose matrices are complete, whose header
//! records the mode, and whose recorded seed reproduces the step order; the
//! rendezvous finds rank 0 past taken ports and fails clearly when a rank
//! never shows up. Ping-pongs through shared memory (mode "SHM") give the
//! same complete matrices in parallel and serial mode, and a rank that fails
//! stops the others instead of leaving them waiting.
use std::net::TcpListener;
use std::time::{Duration, Instant};

use benchlake_formats::linktest::{self, LinkTestRun, PayloadFormat};
use benchlake_netprobe::{
    Direction, Params, Rendezvous, ShmLinks, candidate_ports, plan, run_rendezvous,
    run_with_listener, run_with_shared_memory,
};

fn probe(n: usize, params: Params) -> (LinkTestRun, LinkTestRun) {
    probe_over(n, params, false)
}

/// `n` ranks as threads; their ping-pongs through TCP or shared memory.
fn probe_over(n: usize, params: Params, shm: bool) -> (LinkTestRun, LinkTestRun) {
    let links =
        shm.then(|| std::sync::Arc::new(ShmLinks::new(n, params.message_size, params.io_timeout)));
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
        let links = links.clone();
        handles.push(std::thread::spawn(move || match links {
            Some(links) => run_with_shared_memory(rank, l, peers, &params, &out, links).unwrap(),
            None => run_with_listener(rank, l, peers, &params, &out).unwrap(),
        }));
    }
    let mut results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(results[1..].iter().all(|r| r.is_none()));
    let written = results.remove(0).unwrap();
    let read = linktest::read_file(&out).unwrap();
    assert_eq!(read, written, "the file holds exactly what was measured");
    (written, read)
}

fn params() -> Params {
    Params {
        num_messages: 20,
        message_size: 256,
        warmup_messages: 2,
        randomize_steps: true,
        seed: 7,
        serial_retests: 3,
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(10),
        ..Params::default()
    }
}

/// Every permutation: positive times off the diagonal, zeros on it, both
/// sides of a pair in the same step, one partner per step, and the steps
/// exactly those the plan regenerated from the header's fields gives.
fn check_complete(run: &LinkTestRun) {
    let n = run.num_tasks;
    let plan = plan(
        n,
        run.num_randomized_tasks.unwrap(),
        run.flags.randomize_steps,
        run.task_seed.unwrap(),
    );
    assert_eq!(run.permutations.len(), plan.len());
    let steps = benchlake_netprobe::steps_for(n) as i32;
    for (k, p) in run.permutations.iter().enumerate() {
        assert_eq!(
            p.steps,
            plan[k].step_matrix(),
            "permutation {k}: the seed reproduces the steps"
        );
        for i in 0..n {
            let mut seen = Vec::new();
            for j in 0..n {
                let (t, s) = (p.times[i * n + j], p.steps[i * n + j]);
                if i == j {
                    assert_eq!((t, s), (0.0, 0));
                    continue;
                }
                assert!(t > 0.0 && t < 1.0, "perm {k} pair {i}->{j}: {t}");
                assert_eq!(s, p.steps[j * n + i]);
                assert!((1..=steps).contains(&s));
                seen.push(s);
            }
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), n - 1, "rank {i} meets one partner per step");
        }
        let measured: Vec<f64> = (0..n * n)
            .filter(|x| x / n != x % n)
            .map(|x| p.times[x])
            .collect();
        let max = measured.iter().copied().fold(0.0, f64::max);
        let min = measured.iter().copied().fold(f64::INFINITY, f64::min);
        assert_eq!((p.min_time_s, p.max_time_s), (min, max));
        let want = (run.num_serial_retests as usize).min(n * (n - 1));
        assert_eq!(p.slow_links.len(), want);
        if want > 0 {
            assert_eq!(p.slow_links[0].time_s, max);
        }
        assert!(p.slow_links.iter().all(|s| s.retest_time_s.unwrap() > 0.0));
        assert!(p.slow_links.windows(2).all(|w| w[0].time_s >= w[1].time_s));
    }
}

#[test]
fn four_ranks_give_a_complete_matrix() {
    let (_, run) = probe(4, params());
    assert_eq!(run.format, PayloadFormat::V2);
    assert_eq!(run.mode, "TCP");
    assert_eq!(run.version_string(), "2.1.17");
    assert_eq!(
        (run.num_tasks, run.num_messages, run.message_size),
        (4, 20, 256)
    );
    assert_eq!(run.num_warmup_messages, Some(2));
    assert_eq!(
        (run.task_seed, run.num_randomized_tasks),
        (Some(7), Some(0))
    );
    assert!(run.flags.randomize_steps);
    assert!(!run.flags.serial && !run.flags.all_to_all);
    assert!(!run.flags.bidirectional && !run.flags.unidirectional);
    let hosts: Vec<_> = run.ranks.iter().map(|r| r.hostname.as_str()).collect();
    assert_eq!(hosts, ["host0", "host0", "host1", "host1"]);
    check_complete(&run);
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
            randomize_steps: false,
            serial_retests: 0,
            barriers: false,
            ..params()
        },
    );
    check_complete(&run);
    assert!(!run.flags.randomize_steps);
    assert!(run.permutations[0].slow_links.is_empty());
}

#[test]
fn serial_mode_is_recorded_and_complete() {
    let (_, run) = probe(
        5,
        Params {
            serial: true,
            ..params()
        },
    );
    assert!(run.flags.serial);
    check_complete(&run);
}

#[test]
fn randomized_tasks_give_one_permutation_each_reproducible_from_the_seed() {
    let (_, run) = probe(
        6,
        Params {
            randomized_tasks: 2,
            seed: 1234,
            serial_retests: 2,
            ..params()
        },
    );
    assert_eq!(run.num_randomized_tasks, Some(2));
    assert_eq!(run.task_seed, Some(1234));
    assert_eq!(
        run.permutations.len(),
        3,
        "the ordered iteration plus 2 randomized"
    );
    check_complete(&run);
    // The placements differ, so the steps in which pairs meet differ.
    assert_ne!(run.permutations[1].steps, run.permutations[2].steps);
    // A different seed would have given other steps.
    let other = plan(6, 2, true, 1235);
    assert_ne!(run.permutations[1].steps, other[1].step_matrix());
}

#[test]
fn all_to_all_phase_records_one_time_per_rank() {
    let (_, run) = probe(
        4,
        Params {
            all_to_all: true,
            ..params()
        },
    );
    assert!(run.flags.all_to_all);
    check_complete(&run);
    let p = &run.permutations[0];
    assert_eq!(p.alltoall.len(), 4);
    assert!(
        p.alltoall
            .iter()
            .all(|a| a.time_s > 0.0 && a.step.is_none())
    );
    let [min, avg, max] = p.a2a.unwrap();
    assert!(min > 0.0 && min <= avg && avg <= max);
    assert_eq!(max, p.alltoall.iter().map(|a| a.time_s).fold(0.0, f64::max));
    let tables = benchlake_formats::linktest::run_tables(&run, "R", "netprobe.sion").unwrap();
    assert_eq!(tables[3].rows(), 4, "linktest_alltoall");
}

#[test]
fn unidirectional_and_bidirectional_are_recorded() {
    for (dir, serial) in [
        (Direction::Unidirectional, false),
        (Direction::Bidirectional, false),
        (Direction::Bidirectional, true),
    ] {
        let (_, run) = probe(
            4,
            Params {
                direction: dir,
                serial,
                message_size: 200_000, // larger than the socket buffers: no deadlock
                num_messages: 5,
                ..params()
            },
        );
        assert_eq!(run.flags.unidirectional, dir == Direction::Unidirectional);
        assert_eq!(run.flags.bidirectional, dir == Direction::Bidirectional);
        assert_eq!(run.flags.serial, serial);
        assert_eq!(run.message_size, 200_000);
        check_complete(&run);
    }
}

#[test]
fn bad_parameters_are_refused() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let peers = vec![l.local_addr().unwrap(); 2];
    let out = std::env::temp_dir().join("netprobe-never-written.sion");
    for (p, msg) in [
        (
            Params {
                num_messages: 0,
                ..params()
            },
            "num_messages",
        ),
        (
            Params {
                message_size: 0,
                ..params()
            },
            "message_size",
        ),
        (
            Params {
                randomized_tasks: 1_000_000,
                ..params()
            },
            "randomized_tasks",
        ),
    ] {
        let e = run_with_listener(0, l.try_clone().unwrap(), peers.clone(), &p, &out).unwrap_err();
        assert!(e.to_string().contains(msg), "{e}");
    }
    let e = run_with_listener(0, l, vec![peers[0]], &params(), &out).unwrap_err();
    assert!(e.to_string().contains("2 to"), "{e}");
}

fn rendezvous(run_id: &str, n: usize, ports: Vec<u16>, timeout: Duration) -> Rendezvous {
    Rendezvous {
        run_id: run_id.into(),
        hosts: vec!["127.0.0.1".into(); n],
        ports,
        timeout,
    }
}

fn spawn_run(
    run_id: &str,
    n: usize,
    ports: &[u16],
    out: &std::path::Path,
) -> Vec<std::thread::JoinHandle<benchlake_netprobe::Result<Option<LinkTestRun>>>> {
    let mut handles = Vec::new();
    for rank in (0..n).rev() {
        // Ranks start in reverse order, rank 0 last.
        let rv = rendezvous(run_id, n, ports.to_vec(), Duration::from_secs(20));
        let out = out.to_path_buf();
        handles.push(std::thread::spawn(move || {
            run_rendezvous(rank, &rv, &params(), &out)
        }));
        std::thread::sleep(Duration::from_millis(50));
    }
    handles
}

#[test]
fn rendezvous_skips_taken_ports_and_other_runs() {
    let ports = candidate_ports("01RUNRV", 41000, 3000, 6);
    // Another program holds the first candidate port.
    let _squatter = TcpListener::bind(("0.0.0.0", ports[0])).ok();
    let dir = tempfile::tempdir().unwrap();
    let (out_a, out_b) = (dir.path().join("a.sion"), dir.path().join("b.sion"));
    // Run B's rank 0 takes the first free port; run A's ranks knock there
    // first, are told "not this run", and find their own rank 0 further on.
    let rv_b0 = rendezvous("01RUNB", 2, ports.clone(), Duration::from_secs(20));
    let ob = out_b.clone();
    let b0 = std::thread::spawn(move || run_rendezvous(0, &rv_b0, &params(), &ob));
    std::thread::sleep(Duration::from_millis(200));
    let a = spawn_run("01RUNRV", 4, &ports, &out_a);
    for h in a {
        let r = h.join().unwrap();
        assert!(r.is_ok(), "{r:?}");
    }
    let rv_b1 = rendezvous("01RUNB", 2, ports.clone(), Duration::from_secs(20));
    run_rendezvous(1, &rv_b1, &params(), &out_b).unwrap();
    assert!(b0.join().unwrap().unwrap().is_some());
    let run = linktest::read_file(&out_a).unwrap();
    assert_eq!(run.num_tasks, 4);
    check_complete(&run);
    assert_eq!(linktest::read_file(&out_b).unwrap().num_tasks, 2);
}

#[test]
fn a_rank_that_never_shows_up_fails_the_rendezvous_clearly() {
    let ports = candidate_ports("01RUNMISSING", 44000, 3000, 4);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.sion");
    let n = 3;
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for rank in [0usize, 1] {
        let rv = rendezvous("01RUNMISSING", n, ports.clone(), Duration::from_secs(2));
        let out = out.clone();
        handles.push(std::thread::spawn(move || {
            run_rendezvous(rank, &rv, &params(), &out)
        }));
    }
    let r: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let e0 = r[0].as_ref().unwrap_err().to_string();
    assert!(
        e0.contains("rank(s) 2 (127.0.0.1) did not join within 2 s"),
        "{e0}"
    );
    let e1 = r[1].as_ref().unwrap_err().to_string();
    assert!(
        e1.contains("rank 0 aborted the rendezvous") && e1.contains("rank(s) 2"),
        "{e1}"
    );
    assert!(!out.exists());
    assert!(t0.elapsed() < Duration::from_secs(15));
    // Without rank 0, a rank names the host and ports it tried.
    let rv = rendezvous(
        "01RUNNOBODY",
        2,
        candidate_ports("01RUNNOBODY", 44000, 3000, 2),
        Duration::from_secs(1),
    );
    let e = run_rendezvous(1, &rv, &params(), &out)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank 0 at '127.0.0.1' (ports") && e.contains("not reachable within 1 s"),
        "{e}"
    );
}

#[test]
fn shared_memory_ping_pongs_give_complete_matrices() {
    // Odd ranks (one idles per step), no barriers (a rank reaches its next
    // partner while that one is still busy), randomized placements, retests.
    let (_, run) = probe_over(
        5,
        Params {
            barriers: false,
            randomized_tasks: 2,
            ..params()
        },
        true,
    );
    assert_eq!(run.mode, "SHM");
    assert_eq!(run.permutations.len(), 3);
    check_complete(&run);
    let (_, run) = probe_over(
        4,
        Params {
            serial: true,
            ..params()
        },
        true,
    );
    assert!(run.flags.serial);
    check_complete(&run);
}

#[test]
fn shared_memory_refuses_streams_and_a_failed_rank_stops_the_others() {
    let n = 3;
    let run = |params: Params, bad_rank: Option<usize>| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("pp.sion");
        let links = std::sync::Arc::new(ShmLinks::new(n, params.message_size, params.io_timeout));
        let listeners: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let peers: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(rank, l)| {
                let (peers, out, links) = (peers.clone(), out.clone(), links.clone());
                // The bad rank sends messages larger than the inboxes hold.
                let params = Params {
                    message_size: if Some(rank) == bad_rank {
                        params.message_size * 2
                    } else {
                        params.message_size
                    },
                    ..params.clone()
                };
                std::thread::spawn(move || {
                    run_with_shared_memory(rank, l, peers, &params, &out, links)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    };
    let r = run(
        Params {
            direction: Direction::Unidirectional,
            ..params()
        },
        None,
    );
    assert!(
        r.iter()
            .all(|x| x.as_ref().unwrap_err().contains("ping-pongs only")),
        "{r:?}"
    );
    let t = Instant::now();
    let r = run(
        Params {
            io_timeout: Duration::from_secs(60),
            ..params()
        },
        Some(0),
    );
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the others stopped waiting: {:?}",
        t.elapsed()
    );
    assert!(r[0].as_ref().unwrap_err().contains("does not fit"), "{r:?}");
    assert!(r.iter().all(|x| x.is_err()), "{r:?}");
}
