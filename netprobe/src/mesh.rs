//! Connections between the ranks: a full mesh of TCP streams, built either
//! from addresses known up front ([`crate::run_with_listener`]) or after a
//! rendezvous at rank 0 ([`crate::run_rendezvous`]).
//!
//! Rendezvous (for agents, which know only each other's advertised host):
//! - rank 0 listens on the first free port of a list derived from the run id
//!   ([`candidate_ports`]), so every rank computes the same list without a
//!   message and a port taken by another program (or another run) is skipped;
//! - every other rank binds an ephemeral port for the mesh, then tries rank 0's
//!   host on each candidate port in turn with a hello carrying the magic, the
//!   run id, `n`, its rank and its mesh port. A listener that is not this run's
//!   rank 0 refuses or stays silent, and the rank moves on to the next port;
//! - rank 0 acknowledges each valid hello at once, and when all `n − 1` ranks
//!   have joined it sends everyone the table of mesh addresses (the source IP
//!   it saw for the rank, plus the rank's mesh port). If a rank does not join
//!   within the timeout, rank 0 tells the others and fails naming the missing
//!   ranks and their hosts; a rank that cannot reach rank 0 fails naming the
//!   host and the ports it tried;
//! - ranks ≥ 1 then connect to the lower ranks ≥ 1 and accept the higher ones;
//!   the stream to rank 0 is the rendezvous stream itself.
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::{NetprobeError, Params, Result, io};

/// Magic of a rendezvous hello.
const JOIN_MAGIC: &[u8; 6] = b"BLNPJ1";
/// Magic of a mesh hello.
const MESH_MAGIC: &[u8; 6] = b"BLNPM1";
/// Longest run id accepted.
const MAX_RUN_ID: usize = 256;
/// How long a hello or an acknowledgement may take once connected.
const HELLO_TIMEOUT: Duration = Duration::from_secs(3);

/// Where and how ranks meet (see the module docs).
#[derive(Debug, Clone)]
pub struct Rendezvous {
    /// The run id: every rank of the run has the same, ranks of other runs differ.
    pub run_id: String,
    /// Advertised host (name or IP) of each rank; rank 0's is where it listens.
    pub hosts: Vec<String>,
    /// Rank 0's candidate ports, tried in order ([`candidate_ports`]).
    pub ports: Vec<u16>,
    /// How long rank 0 waits for every rank to join, and the others for rank 0.
    pub timeout: Duration,
}

/// FNV-1a, 64 bits: a stable hash of the run id on every rank.
pub fn run_hash(run_id: &str) -> u64 {
    run_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Rank 0's candidate ports: `tries` distinct ports in `base..base + span`,
/// starting at a position derived from the run id (so concurrent runs tend to
/// start on different ports) and stepping by a prime.
pub fn candidate_ports(run_id: &str, base: u16, span: u16, tries: usize) -> Vec<u16> {
    let span = u64::from(span.max(1));
    let h = run_hash(run_id);
    let mut out: Vec<u16> = Vec::new();
    for k in 0..span.min(tries.max(1) as u64 * 4) {
        let off = h.wrapping_add(k.wrapping_mul(7919)) % span;
        if let Ok(p) = u16::try_from(u64::from(base) + off)
            && p != 0
            && !out.contains(&p)
        {
            out.push(p);
        }
        if out.len() >= tries.max(1) {
            break;
        }
    }
    out
}

/// The stream to each rank (`None` for itself).
pub(crate) struct Mesh {
    pub conns: Vec<Option<TcpStream>>,
    /// Ping-pongs through shared memory instead of these streams (local
    /// ranks, [`crate::ShmLinks`]).
    pub shm: Option<std::sync::Arc<crate::ShmLinks>>,
}

impl Mesh {
    pub fn get(&mut self, r: usize) -> Result<&mut TcpStream> {
        self.conns
            .get_mut(r)
            .and_then(|c| c.as_mut())
            .ok_or_else(|| NetprobeError::Protocol(format!("no connection to rank {r}")))
    }
}

pub(crate) fn setup(s: &TcpStream, params: &Params) -> Result<()> {
    // Ping-pong latency needs every small message on the wire at once.
    s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    s.set_read_timeout(Some(params.io_timeout))
        .map_err(io("read timeout"))?;
    s.set_write_timeout(Some(params.io_timeout))
        .map_err(io("write timeout"))?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
/// Full mesh among ranks `first..n` with known addresses: this rank connects
/// to the lower ones and accepts the higher ones, which introduce themselves.
pub(crate) fn connect_mesh(
    rank: usize,
    first: usize,
    listener: &TcpListener,
    addrs: &[SocketAddr],
    token: u64,
    mesh: &mut Mesh,
    params: &Params,
    deadline: Instant,
) -> Result<()> {
    let n = addrs.len();
    for (p, addr) in addrs.iter().enumerate().take(rank).skip(first) {
        let mut s = loop {
            match TcpStream::connect_timeout(addr, params.connect_timeout) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(%addr, error = %e, "peer not up yet, retrying");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(io(format!("connect to rank {p} at {addr}"))(e)),
            }
        };
        setup(&s, params)?;
        let mut hello = Vec::with_capacity(18);
        hello.extend_from_slice(MESH_MAGIC);
        hello.extend_from_slice(&token.to_le_bytes());
        hello.extend_from_slice(&(rank as u32).to_le_bytes());
        s.write_all(&hello)
            .map_err(io(format!("hello to rank {p} at {addr}")))?;
        if let Some(c) = mesh.conns.get_mut(p) {
            *c = Some(s);
        }
    }
    let mut missing = n.saturating_sub(rank + 1);
    listener
        .set_nonblocking(true)
        .map_err(io("listener non-blocking"))?;
    while missing > 0 {
        let (mut s, from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let absent: Vec<String> = (rank + 1..n)
                        .filter(|r| mesh.conns.get(*r).is_some_and(|c| c.is_none()))
                        .map(|r| r.to_string())
                        .collect();
                    return Err(NetprobeError::Protocol(format!(
                        "rank {rank}: ranks {} did not connect in time",
                        absent.join(", ")
                    )));
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(io("accept")(e)),
        };
        s.set_nonblocking(false).map_err(io("accept"))?;
        s.set_read_timeout(Some(HELLO_TIMEOUT))
            .map_err(io("accept"))?;
        let mut b = [0u8; 18];
        if let Err(e) = s.read_exact(&mut b) {
            tracing::warn!(%from, error = %e, "dropping a connection without a hello");
            continue;
        }
        let tok = u64::from_le_bytes(b[6..14].try_into().unwrap_or([0; 8]));
        let r = u32::from_le_bytes(b[14..18].try_into().unwrap_or([0; 4])) as usize;
        if &b[..6] != MESH_MAGIC || tok != token {
            tracing::warn!(%from, "dropping a connection of another program or run");
            continue;
        }
        match mesh.conns.get_mut(r) {
            Some(slot @ None) if r > rank => {
                setup(&s, params)?;
                *slot = Some(s);
                missing -= 1;
            }
            _ => {
                return Err(NetprobeError::Protocol(format!(
                    "unexpected hello (rank {r}) from {from}"
                )));
            }
        }
    }
    Ok(())
}

fn resolve(host: &str, port: u16) -> Vec<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .map(|a| a.collect())
        .unwrap_or_default()
}

fn unspecified_like(host: &str) -> IpAddr {
    match resolve(host, 1).first() {
        Some(SocketAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    }
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    let s = s.as_bytes();
    let s = s.get(..s.len().min(u16::MAX as usize)).unwrap_or_default();
    b.extend_from_slice(&(s.len() as u16).to_le_bytes());
    b.extend_from_slice(s);
}

fn get_str(c: &mut TcpStream, max: usize, ctx: &str) -> Result<String> {
    let mut l = [0u8; 2];
    c.read_exact(&mut l).map_err(io(ctx))?;
    let len = u16::from_le_bytes(l) as usize;
    if len > max {
        return Err(NetprobeError::Protocol(format!(
            "{ctx}: a string of {len} bytes (at most {max})"
        )));
    }
    let mut v = vec![0u8; len];
    c.read_exact(&mut v).map_err(io(ctx))?;
    Ok(String::from_utf8_lossy(&v).into_owned())
}

/// Builds the mesh through the rendezvous (see the module docs).
pub(crate) fn rendezvous_mesh(rank: usize, rv: &Rendezvous, params: &Params) -> Result<Mesh> {
    let n = rv.hosts.len();
    if rank >= n {
        return Err(NetprobeError::Protocol(format!(
            "rank {rank} but {n} hosts"
        )));
    }
    if rv.run_id.is_empty() || rv.run_id.len() > MAX_RUN_ID {
        return Err(NetprobeError::Protocol(format!(
            "the run id must be 1-{MAX_RUN_ID} bytes"
        )));
    }
    if rv.ports.is_empty() {
        return Err(NetprobeError::Protocol("no rendezvous ports".into()));
    }
    let deadline = Instant::now() + rv.timeout;
    let token = run_hash(&rv.run_id);
    let mut mesh = Mesh {
        shm: None,
        conns: (0..n).map(|_| None).collect(),
    };
    if rank == 0 {
        rank0_gather(rv, params, deadline, &mut mesh)?;
        return Ok(mesh);
    }
    let ip = unspecified_like(rv.hosts.get(rank).map(String::as_str).unwrap_or(""));
    let listener =
        TcpListener::bind((ip, 0)).map_err(io(format!("rank {rank}: bind a mesh port")))?;
    let mesh_port = listener.local_addr().map_err(io("mesh port"))?.port();
    let mut s = join_rank0(rank, n, mesh_port, rv, deadline)?;
    // The table comes when everyone has joined (or an abort when someone did not).
    s.set_read_timeout(Some(rv.timeout + HELLO_TIMEOUT))
        .map_err(io("rendezvous"))?;
    let mut kind = [0u8; 1];
    s.read_exact(&mut kind).map_err(io(format!(
        "rank {rank}: wait for the rank table from rank 0"
    )))?;
    match kind[0] {
        b'T' => {}
        b'E' => {
            let msg = get_str(&mut s, 4096, "rendezvous abort")?;
            return Err(NetprobeError::Protocol(format!(
                "rank 0 aborted the rendezvous: {msg}"
            )));
        }
        k => {
            return Err(NetprobeError::Protocol(format!(
                "rank 0 sent {k:#x} instead of the rank table"
            )));
        }
    }
    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(n);
    for r in 0..n {
        let a = get_str(&mut s, 256, "rank table")?;
        let addr: SocketAddr = a.parse().map_err(|_| {
            NetprobeError::Protocol(format!("rank table: '{a}' for rank {r} is not ip:port"))
        })?;
        addrs.push(addr);
    }
    setup(&s, params)?;
    if let Some(c) = mesh.conns.get_mut(0) {
        *c = Some(s);
    }
    connect_mesh(
        rank,
        1,
        &listener,
        &addrs,
        token,
        &mut mesh,
        params,
        deadline.max(Instant::now() + params.connect_timeout),
    )?;
    Ok(mesh)
}

/// Rank ≥ 1: finds rank 0 on its candidate ports and joins.
fn join_rank0(
    rank: usize,
    n: usize,
    mesh_port: u16,
    rv: &Rendezvous,
    deadline: Instant,
) -> Result<TcpStream> {
    let host0 = rv.hosts.first().map(String::as_str).unwrap_or("");
    let mut hello = Vec::with_capacity(16 + rv.run_id.len());
    hello.extend_from_slice(JOIN_MAGIC);
    hello.extend_from_slice(&(n as u32).to_le_bytes());
    hello.extend_from_slice(&(rank as u32).to_le_bytes());
    hello.extend_from_slice(&mesh_port.to_le_bytes());
    put_str(&mut hello, &rv.run_id);
    let mut last = String::from("no attempt");
    loop {
        for port in &rv.ports {
            let addrs = resolve(host0, *port);
            if addrs.is_empty() {
                last = format!("cannot resolve '{host0}'");
            }
            for addr in addrs {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let mut s = match TcpStream::connect_timeout(&addr, left.min(HELLO_TIMEOUT)) {
                    Ok(s) => s,
                    Err(e) => {
                        last = format!("{addr}: {e}");
                        continue;
                    }
                };
                let _ = s.set_read_timeout(Some(HELLO_TIMEOUT));
                let _ = s.set_write_timeout(Some(HELLO_TIMEOUT));
                let mut status = [0u8; 1];
                let r = s.write_all(&hello).and_then(|_| s.read_exact(&mut status));
                match (r, status[0]) {
                    (Ok(()), 0) => {
                        tracing::info!(rank, %addr, "joined rank 0");
                        return Ok(s);
                    }
                    (Ok(()), b'F') => {
                        let msg = get_str(&mut s, 4096, "rendezvous refusal")?;
                        return Err(NetprobeError::Protocol(format!(
                            "rank 0 at {addr} refused rank {rank}: {msg}"
                        )));
                    }
                    (Ok(()), b'R') => {
                        let msg = get_str(&mut s, 4096, "rendezvous refusal").unwrap_or_default();
                        last = format!("{addr}: not this run ({msg})");
                    }
                    (Ok(()), k) => last = format!("{addr}: unexpected reply {k:#x}"),
                    (Err(e), _) => last = format!("{addr}: no netprobe answer ({e})"),
                }
            }
        }
        if Instant::now() >= deadline {
            let ports: Vec<String> = rv.ports.iter().map(|p| p.to_string()).collect();
            return Err(NetprobeError::Protocol(format!(
                "rank {rank}: rank 0 at '{host0}' (ports {}) not reachable within {} s; last error: {last}",
                ports.join(", "),
                rv.timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rank 0: listens on the first free candidate port and waits for everyone.
fn rank0_gather(
    rv: &Rendezvous,
    params: &Params,
    deadline: Instant,
    mesh: &mut Mesh,
) -> Result<()> {
    let n = rv.hosts.len();
    let host0 = rv.hosts.first().map(String::as_str).unwrap_or("");
    let ip = unspecified_like(host0);
    let mut listener = None;
    let mut last = None;
    for port in &rv.ports {
        match TcpListener::bind((ip, *port)) {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(e) => {
                tracing::info!(port, error = %e, "rendezvous port taken, trying the next");
                last = Some(e);
            }
        }
    }
    let Some(listener) = listener else {
        let ports: Vec<String> = rv.ports.iter().map(|p| p.to_string()).collect();
        return Err(NetprobeError::Protocol(format!(
            "rank 0: none of the rendezvous ports {} is free ({})",
            ports.join(", "),
            last.map(|e| e.to_string()).unwrap_or_default()
        )));
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    tracing::info!(port, ranks = n, "rank 0 waiting for the other ranks");
    listener
        .set_nonblocking(true)
        .map_err(io("listener non-blocking"))?;
    let mut table: Vec<Option<SocketAddr>> = vec![None; n];
    let mut joined = 1;
    while joined < n {
        let (mut s, from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (1..n)
                        .filter(|r| table.get(*r).is_some_and(|t| t.is_none()))
                        .map(|r| {
                            format!(
                                "{r} ({})",
                                rv.hosts.get(r).map(String::as_str).unwrap_or("?")
                            )
                        })
                        .collect();
                    let msg = format!(
                        "rank(s) {} did not join within {} s",
                        missing.join(", "),
                        rv.timeout.as_secs()
                    );
                    for c in mesh.conns.iter_mut().flatten() {
                        let mut b = vec![b'E'];
                        put_str(&mut b, &msg);
                        let _ = c.write_all(&b);
                    }
                    return Err(NetprobeError::Protocol(format!("rendezvous: {msg}")));
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(io("accept")(e)),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(HELLO_TIMEOUT));
        let _ = s.set_write_timeout(Some(HELLO_TIMEOUT));
        let mut head = [0u8; 16];
        if s.read_exact(&mut head).is_err() || &head[..6] != JOIN_MAGIC {
            tracing::warn!(%from, "dropping a connection that is not a netprobe hello");
            continue;
        }
        let Ok(run_id) = get_str(&mut s, MAX_RUN_ID, "hello") else {
            continue;
        };
        let their_n = u32::from_le_bytes(head[6..10].try_into().unwrap_or([0; 4])) as usize;
        let r = u32::from_le_bytes(head[10..14].try_into().unwrap_or([0; 4])) as usize;
        let mesh_port = u16::from_le_bytes(head[14..16].try_into().unwrap_or([0; 2]));
        let refuse = |s: &mut TcpStream, code: u8, msg: String| {
            let mut b = vec![code];
            put_str(&mut b, &msg);
            let _ = s.write_all(&b);
        };
        if run_id != rv.run_id {
            refuse(&mut s, b'R', format!("this is run {}", rv.run_id));
            continue;
        }
        let dup = table.get(r).is_some_and(|t| t.is_some());
        if their_n != n || r == 0 || r >= n || dup {
            refuse(
                &mut s,
                b'F',
                format!(
                    "rank {r} of {their_n} does not fit this run of {n} ranks{}",
                    if dup { " (rank already joined)" } else { "" }
                ),
            );
            continue;
        }
        if s.write_all(&[0]).is_err() {
            continue;
        }
        tracing::debug!(rank = r, %from, "rank joined");
        if let Some(t) = table.get_mut(r) {
            *t = Some(SocketAddr::new(from.ip(), mesh_port));
        }
        if let Some(c) = mesh.conns.get_mut(r) {
            *c = Some(s);
        }
        joined += 1;
    }
    let mut b = vec![b'T'];
    for (r, t) in table.iter().enumerate() {
        let a = match (r, t) {
            (0, _) => SocketAddr::new(ip, port).to_string(),
            (_, Some(a)) => a.to_string(),
            (_, None) => String::new(),
        };
        put_str(&mut b, &a);
    }
    for r in 1..n {
        let c = mesh.get(r)?;
        c.write_all(&b)
            .map_err(io(format!("send the rank table to rank {r}")))?;
        setup(c, params)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_ports_are_stable_distinct_and_in_range() {
        let a = candidate_ports("01JRUNA", 47000, 2000, 8);
        assert_eq!(a, candidate_ports("01JRUNA", 47000, 2000, 8));
        assert_eq!(a.len(), 8);
        assert!(a.iter().all(|p| (47000..49000).contains(p)));
        let mut d = a.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 8);
        assert_ne!(a[0], candidate_ports("01JRUNB", 47000, 2000, 8)[0]);
        assert_eq!(candidate_ports("x", 65535, 10, 4), vec![65535]);
    }
}
