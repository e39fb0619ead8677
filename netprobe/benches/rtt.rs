//! Loopback small-message round-trip time of netprobe against a TCP_RR-style
//! baseline measured in the same run.
//!
//! - netprobe: 2 ranks as threads, 1-byte ping-pongs; the file stores the
//!   one-way time per message, so the round trip is twice that.
//! - baseline: what `netperf -t TCP_RR` measures (one 1-byte request, one
//!   1-byte response, one transaction outstanding), as a minimal blocking
//!   socket loop between two threads with TCP_NODELAY; RTT = 1 / transaction rate.
//!   Debian's netperf is not in this machine's archives.
//! - qperf `tcp_lat` (1-byte messages), when `qperf` is installed: it reports
//!   the one-way latency, so its round trip is twice that.
//!
//! Rounds alternate the two (and qperf) so machine noise hits all alike;
//! the figures are the medians over rounds. Prints the ratio netprobe / baseline.
//!
//! Run: `cargo bench -p benchlake-netprobe --bench rtt`.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use benchlake_netprobe::{Params, run_with_listener};

const ROUNDS: usize = 7;
const MSGS: u64 = 20_000;

/// netprobe's round trip (s) for `size`-byte messages, rank 0 initiating.
fn netprobe_rtt(size: usize, msgs: u64, out: &std::path::Path) -> Option<f64> {
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
        serial_retests: 0,
        hostname: Some("localhost".into()),
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(60),
        ..Params::default()
    };
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, l)| {
            let (peers, params, out) = (peers.clone(), params.clone(), out.to_path_buf());
            std::thread::spawn(move || run_with_listener(rank, l, peers, &params, &out))
        })
        .collect();
    let mut run = None;
    for h in handles {
        if let Ok(Ok(Some(r))) = h.join() {
            run = Some(r);
        }
    }
    let p = run?.permutations.into_iter().next()?;
    // times[0 * 2 + 1]: rank 0 → rank 1, one way.
    Some(2.0 * p.times.get(1).copied()?)
}

/// TCP_RR: `msgs` 1-byte transactions on one connection; seconds per transaction.
fn baseline_rtt(size: usize, msgs: u64) -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut b = vec![0u8; size];
        while s.read_exact(&mut b).is_ok() {
            if s.write_all(&b).is_err() {
                break;
            }
        }
    });
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_nodelay(true).expect("nodelay");
    let mut b = vec![0u8; size];
    for _ in 0..1000 {
        c.write_all(&b).expect("write");
        c.read_exact(&mut b).expect("read");
    }
    let t = Instant::now();
    for _ in 0..msgs {
        c.write_all(&b).expect("write");
        c.read_exact(&mut b).expect("read");
    }
    let rtt = t.elapsed().as_secs_f64() / msgs as f64;
    drop(c);
    let _ = server.join();
    rtt
}

/// qperf's tcp_lat round trip (2 × its one-way latency), if qperf is installed.
fn qperf_rtt(port: u16) -> Option<f64> {
    let mut server = std::process::Command::new("qperf")
        .args(["--listen_port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300));
    let out = std::process::Command::new("qperf")
        .args([
            "127.0.0.1",
            "--listen_port",
            &port.to_string(),
            "-m",
            "1",
            "-t",
            "1",
            "tcp_lat",
        ])
        .output()
        .ok();
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out?.stdout).into_owned();
    // "    latency  =  24.1 us"
    let line = text.lines().find(|l| l.contains("latency"))?;
    let mut it = line.split('=').nth(1)?.split_whitespace();
    let v: f64 = it.next()?.parse().ok()?;
    let scale = match it.next()? {
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "sec" | "s" => 1.0,
        _ => return None,
    };
    Some(2.0 * v * scale)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("rtt.sion");
    let have_qperf = std::process::Command::new("qperf")
        .arg("--version")
        .output()
        .is_ok();
    let (mut np, mut base, mut qp) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if let Some(t) = netprobe_rtt(1, MSGS, &out) {
            np.push(t);
        }
        base.push(baseline_rtt(1, MSGS));
        if have_qperf && let Some(t) = qperf_rtt(19_765 + round as u16) {
            qp.push(t);
        }
    }
    let (n, b) = (median(&mut np), median(&mut base));
    println!("loopback 1-byte round trip, median of {ROUNDS} rounds of {MSGS} messages:");
    println!("  netprobe ping-pong      : {:8.2} us", n * 1e6);
    println!(
        "  TCP_RR baseline loop    : {:8.2} us  (blocking sockets, TCP_NODELAY; netperf not installable here)",
        b * 1e6
    );
    if qp.is_empty() {
        println!("  qperf tcp_lat           :      n/a  (qperf not installed)");
    } else {
        let q = median(&mut qp);
        println!(
            "  qperf tcp_lat (2 x lat) : {:8.2} us  (ratio netprobe / qperf {:.2})",
            q * 1e6,
            n / q
        );
    }
    println!("  ratio netprobe / TCP_RR : {:.2}  (target <= 1.5)", n / b);
    for (size, msgs) in [(1024usize, 10_000u64), (65_536, 2_000)] {
        let mut v: Vec<f64> = (0..3)
            .filter_map(|_| netprobe_rtt(size, msgs, &out))
            .collect();
        let mut w: Vec<f64> = (0..3).map(|_| baseline_rtt(size, msgs)).collect();
        println!(
            "{size:>6} B messages: netprobe round trip {:.2} us, baseline {:.2} us",
            median(&mut v) * 1e6,
            median(&mut w) * 1e6
        );
    }
}
