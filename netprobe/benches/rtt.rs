//! Loopback small-message round-trip time of netprobe's ping-pong: 2 ranks as
//! threads, 1-byte messages. Prints the one-way time per message (what the
//! LinkTest matrix stores) and the round-trip time. Compare with
//! `netperf -t TCP_RR` (1 / transactions per second) where netperf is installed.
//!
//! Run: `cargo bench -p benchlake-netprobe --bench rtt`.
use std::net::TcpListener;
use std::time::Duration;

use benchlake_netprobe::{Params, run_with_listener};

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("rtt.sion");
    for (size, msgs) in [(1usize, 20_000u64), (1024, 20_000), (65_536, 2_000)] {
        let listeners: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let peers: Vec<_> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr"))
            .collect();
        let params = Params {
            num_messages: msgs,
            message_size: size,
            warmup_messages: 1000.min(msgs),
            step_seed: None,
            serial_retests: 0,
            hostname: Some("localhost".into()),
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(60),
        };
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(rank, l)| {
                let (peers, params, out) = (peers.clone(), params.clone(), out.clone());
                std::thread::spawn(move || run_with_listener(rank, l, peers, &params, &out))
            })
            .collect();
        let mut run = None;
        for h in handles {
            if let Ok(Ok(Some(r))) = h.join() {
                run = Some(r);
            }
        }
        let Some(run) = run else {
            println!("{size} B: run failed");
            continue;
        };
        let p = &run.permutations[0];
        let (a, b) = (p.times[1], p.times[2]);
        println!(
            "{size:>6} B messages: one-way {:.2} us / {:.2} us, round trip {:.2} us / {:.2} us (rank 0 / rank 1 initiating)",
            a * 1e6,
            b * 1e6,
            2.0 * a * 1e6,
            2.0 * b * 1e6
        );
    }
}
