//! Free TCP ports for servers a test starts as programs of their own
//! (slurmd, Prometheus, an agent's HTTP listener): chosen here, then handed to
//! the program, which binds them itself.
//!
//! Use it from a test file with `#[path = "common/ports.rs"] mod ports;`.
#![allow(dead_code)]

/// `n` free ports for servers a test starts, taken below the kernel's ephemeral range
/// (`ip_local_port_range`) so that no outgoing connection or `bind(:0)` of a
/// test running beside this one can take a port between the choice and the
/// server's bind (a test slurmd once lost its port that way in CI). Each port of
/// this process is handed out once; a port some other program holds is
/// skipped.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u32>().ok())
        })
        .unwrap_or(32768);
    let (low, high) = if ephemeral_low > 12_000 {
        (10_000, ephemeral_low)
    } else {
        (61_000, 65_500)
    };
    let span = high - low;
    // Test binaries of one run differ in PID: start each at its own place.
    let _ = NEXT.compare_exchange(
        0,
        std::process::id().wrapping_mul(97) % span + 1,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    let mut ports = Vec::with_capacity(n);
    for _ in 0..span {
        if ports.len() == n {
            break;
        }
        let port = (low + NEXT.fetch_add(1, Ordering::SeqCst) % span) as u16;
        let free = ["127.0.0.1", "0.0.0.0"]
            .iter()
            .all(|ip| std::net::TcpListener::bind((*ip, port)).is_ok());
        if free {
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), n, "no {n} free ports in {low}..{high}");
    ports
}

/// One port of [`free_ports`].
pub fn free_port() -> u16 {
    free_ports(1)[0]
}
