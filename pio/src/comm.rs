//! How pio's processes meet and synchronise without MPI.
//!
//! **Rendezvous.** Rank 0 listens on a TCP port and publishes `host:port` in a
//! small file next to the test file, `<dir>/.pio-rendezvous-<job>`; the test
//! directory is the one thing every process (on every node) is guaranteed to
//! share. The file is written to a temporary name and renamed, so readers never
//! see half an address. The other ranks poll for it, connect and send
//! `HELLO <job> <rank> <size> <host>`; rank 0 checks the job key, the size and
//! that each rank arrives once (a stale file from an older run, or another
//! job's listener, is rejected or refused, and the rank retries), then answers
//! every rank with the list of hosts by rank and deletes the file.
//!
//! **Barrier.** Every non-root rank sends `BARRIER ok` (or `BARRIER err <why>`)
//! and waits; rank 0 waits for all, then sends `GO` (or `ABORT <why>` if anyone
//! failed) to each. A failing process thereby stops the others instead of
//! leaving them blocked. **Gather.** Ranks send one JSON line; rank 0 reads
//! them in rank order. Lines are bounded (64 MiB) and every socket read has the
//! run's timeout, so a dead peer gives an error, not a hang.
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{PioError, Result};

const MAX_LINE: usize = 64 << 20;

/// A connection to a peer.
struct Peer {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Peer {
    fn new(s: TcpStream, timeout: Duration) -> Result<Peer> {
        s.set_read_timeout(Some(timeout)).map_err(comm)?;
        s.set_nodelay(true).map_err(comm)?;
        let w = s.try_clone().map_err(comm)?;
        Ok(Peer {
            r: BufReader::new(s),
            w,
        })
    }
    fn send(&mut self, line: &str) -> Result<()> {
        let mut b = Vec::with_capacity(line.len() + 1);
        b.extend_from_slice(line.as_bytes());
        b.push(b'\n');
        self.w.write_all(&b).map_err(comm)
    }
    fn recv(&mut self) -> Result<String> {
        read_line_bounded(&mut self.r, MAX_LINE)
    }
}

fn comm(e: std::io::Error) -> PioError {
    PioError::Comm(e.to_string())
}

/// Reads one `\n`-terminated line of at most `max` bytes.
pub fn read_line_bounded(r: &mut impl BufRead, max: usize) -> Result<String> {
    let mut out = Vec::new();
    loop {
        let buf = r.fill_buf().map_err(comm)?;
        if buf.is_empty() {
            return Err(PioError::Comm("peer closed the connection".into()));
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                out.extend_from_slice(buf.get(..i).unwrap_or_default());
                r.consume(i + 1);
                break;
            }
            None => {
                let n = buf.len();
                out.extend_from_slice(buf);
                r.consume(n);
            }
        }
        if out.len() > max {
            return Err(PioError::Comm(format!("message longer than {max} bytes")));
        }
    }
    String::from_utf8(out).map_err(|_| PioError::Comm("message is not UTF-8".into()))
}

enum Role {
    Single,
    Root(Vec<Peer>),
    Member(Peer),
}

/// The communicator of one process.
pub struct Comm {
    rank: u32,
    size: u32,
    hosts: Vec<String>,
    role: Role,
}

/// This machine's host name, or `PIO_HOSTNAME` when set (containers whose
/// host name says nothing about the node; also how tests fake several nodes).
pub fn hostname() -> String {
    if let Ok(h) = std::env::var("PIO_HOSTNAME")
        && !h.trim().is_empty()
    {
        return h.trim().replace(' ', "_");
    }
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call;
    // gethostname writes at most `len` bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(buf.get(..end).unwrap_or_default()).into_owned()
}

/// The node a process runs on, as results record it: `PIO_HOSTNAME` when
/// set (tests faking several nodes), else the node by the one rule of
/// [`benchlake_core::node`] (Slurm's node name, else the agent's node,
/// `BENCHLAKE_NODE`), else [`hostname`]. Only for the record: peers connect
/// to [`hostname`].
pub fn node_name() -> String {
    node_name_from(|k| std::env::var(k).ok())
}

fn node_name_from(env: impl Fn(&str) -> Option<String>) -> String {
    if let Some(h) = env("PIO_HOSTNAME").filter(|h| !h.trim().is_empty()) {
        return h.trim().replace(' ', "_");
    }
    benchlake_core::node::name_from(&env, hostname)
}

/// The rendezvous file of `job` for a test file at `filename`.
pub fn rendezvous_path(filename: &Path, job: &str) -> PathBuf {
    let dir = match filename.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let safe: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!(".pio-rendezvous-{safe}"))
}

impl Comm {
    /// A communicator of one process.
    pub fn single() -> Comm {
        Comm {
            rank: 0,
            size: 1,
            hosts: vec![node_name()],
            role: Role::Single,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }
    /// Number of processes.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Host of each rank.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Meets the other `size - 1` processes through the rendezvous file `file`.
    /// `advertise` is the host name or address rank 0 publishes.
    pub fn connect(
        rank: u32,
        size: u32,
        job: &str,
        file: &Path,
        advertise: &str,
        timeout: Duration,
    ) -> Result<Comm> {
        if size <= 1 {
            return Ok(Comm::single());
        }
        if rank >= size {
            return Err(PioError::Comm(format!("rank {rank} ≥ size {size}")));
        }
        let me = node_name();
        if rank == 0 {
            Self::root(size, job, file, advertise, timeout, me)
        } else {
            Self::member(rank, size, job, file, timeout, me)
        }
    }

    fn root(
        size: u32,
        job: &str,
        file: &Path,
        advertise: &str,
        timeout: Duration,
        me: String,
    ) -> Result<Comm> {
        let bind = if advertise == "127.0.0.1" || advertise == "localhost" {
            "127.0.0.1:0"
        } else {
            "0.0.0.0:0"
        };
        let l = TcpListener::bind(bind).map_err(comm)?;
        let port = l.local_addr().map_err(comm)?.port();
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, format!("{advertise}:{port}\n"))
            .map_err(|e| PioError::io("write", &tmp, e))?;
        std::fs::rename(&tmp, file).map_err(|e| PioError::io("rename", file, e))?;
        let deadline = Instant::now() + timeout;
        l.set_nonblocking(true).map_err(comm)?;
        let mut slots: Vec<Option<(Peer, String)>> = (1..size).map(|_| None).collect();
        let mut joined = 0u32;
        while joined + 1 < size {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).map_err(comm)?;
                    let mut p = Peer::new(s, timeout)?;
                    let Ok(hello) = p.recv() else { continue };
                    let f: Vec<&str> = hello.split(' ').collect();
                    let ok = match f.as_slice() {
                        ["HELLO", j, r, n, h] if *j == job && n.parse() == Ok(size) => r
                            .parse::<u32>()
                            .ok()
                            .filter(|r| *r >= 1 && *r < size)
                            .map(|r| (r, h.to_string())),
                        _ => None,
                    };
                    match ok {
                        Some((r, h)) => match slots.get_mut(r as usize - 1) {
                            Some(slot @ None) => {
                                *slot = Some((p, h));
                                joined += 1;
                            }
                            _ => {
                                let _ = p.send("REJECT duplicate rank");
                            }
                        },
                        None => {
                            let _ = p.send("REJECT wrong job or size");
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let _ = std::fs::remove_file(file);
                        return Err(PioError::Comm(format!(
                            "only {} of {size} processes arrived within {}s",
                            joined + 1,
                            timeout.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(comm(e)),
            }
        }
        let _ = std::fs::remove_file(file);
        let mut hosts = vec![me];
        let mut peers = Vec::new();
        for s in slots.into_iter().flatten() {
            hosts.push(s.1);
            peers.push(s.0);
        }
        let list = serde_json::to_string(&hosts).map_err(|e| PioError::Comm(e.to_string()))?;
        for p in &mut peers {
            p.send(&format!("WELCOME {list}"))?;
        }
        Ok(Comm {
            rank: 0,
            size,
            hosts,
            role: Role::Root(peers),
        })
    }

    fn member(
        rank: u32,
        size: u32,
        job: &str,
        file: &Path,
        timeout: Duration,
        me: String,
    ) -> Result<Comm> {
        let deadline = Instant::now() + timeout;
        let host = me.replace(' ', "_");
        loop {
            if Instant::now() > deadline {
                return Err(PioError::Comm(format!(
                    "no rendezvous at {} within {}s",
                    file.display(),
                    timeout.as_secs()
                )));
            }
            let addr = match std::fs::read_to_string(file) {
                Ok(a) if a.ends_with('\n') => a.trim().to_string(),
                _ => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            };
            let Some(sa) = addr.to_socket_addrs().ok().and_then(|mut i| i.next()) else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let Ok(s) = TcpStream::connect_timeout(&sa, Duration::from_secs(5)) else {
                // A stale file of a finished run: wait for the new one.
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let mut p = Peer::new(s, timeout)?;
            p.send(&format!("HELLO {job} {rank} {size} {host}"))?;
            let Ok(reply) = p.recv() else { continue };
            if let Some(list) = reply.strip_prefix("WELCOME ") {
                let hosts: Vec<String> =
                    serde_json::from_str(list).map_err(|e| PioError::Comm(e.to_string()))?;
                if hosts.len() != size as usize {
                    return Err(PioError::Comm("host list of the wrong size".into()));
                }
                return Ok(Comm {
                    rank,
                    size,
                    hosts,
                    role: Role::Member(p),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for every process. `status` is this process's state: an error
    /// aborts every process with its message.
    pub fn barrier(&mut self, status: std::result::Result<(), String>) -> Result<()> {
        match &mut self.role {
            Role::Single => status.map_err(PioError::Aborted),
            Role::Member(p) => {
                match &status {
                    Ok(()) => p.send("BARRIER ok")?,
                    Err(m) => p.send(&format!(
                        "BARRIER err rank {}: {}",
                        self.rank,
                        m.replace('\n', " ")
                    ))?,
                }
                let r = p.recv()?;
                if r == "GO" {
                    status.map_err(PioError::Aborted)
                } else {
                    Err(PioError::Aborted(
                        r.strip_prefix("ABORT ").unwrap_or(&r).to_string(),
                    ))
                }
            }
            Role::Root(peers) => {
                let mut err = status.err().map(|m| format!("rank 0: {m}"));
                for p in peers.iter_mut() {
                    match p.recv() {
                        Ok(l) if l == "BARRIER ok" => {}
                        Ok(l) => {
                            err.get_or_insert(
                                l.strip_prefix("BARRIER err ").unwrap_or(&l).to_string(),
                            );
                        }
                        Err(e) => {
                            err.get_or_insert(e.to_string());
                        }
                    }
                }
                let reply = match &err {
                    None => "GO".to_string(),
                    Some(m) => format!("ABORT {m}"),
                };
                for p in peers.iter_mut() {
                    let _ = p.send(&reply);
                }
                match err {
                    None => Ok(()),
                    Some(m) => Err(PioError::Aborted(m)),
                }
            }
        }
    }

    /// Sends `line` (no newlines) to rank 0; rank 0 gets every rank's line in
    /// rank order, the others get `None`.
    pub fn gather(&mut self, line: String) -> Result<Option<Vec<String>>> {
        match &mut self.role {
            Role::Single => Ok(Some(vec![line])),
            Role::Member(p) => {
                p.send(&line)?;
                Ok(None)
            }
            Role::Root(peers) => {
                let mut all = vec![line];
                for p in peers.iter_mut() {
                    all.push(p.recv()?);
                }
                Ok(Some(all))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slurm_node_name_is_the_recorded_host() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(node_name_from(env(&[("SLURMD_NODENAME", "n2")])), "n2");
        assert_eq!(
            node_name_from(env(&[("SLURMD_NODENAME", "n2"), ("PIO_HOSTNAME", "h")])),
            "h"
        );
        assert_eq!(node_name_from(env(&[("SLURMD_NODENAME", " ")])), hostname());
        assert_eq!(node_name_from(env(&[("BENCHLAKE_NODE", "a1")])), "a1");
        assert_eq!(
            node_name_from(env(&[("BENCHLAKE_NODE", "a1"), ("SLURMD_NODENAME", "n2")])),
            "n2"
        );
    }

    #[test]
    fn four_threads_meet_barrier_and_gather() {
        let dir = tempfile::tempdir().unwrap();
        let file = rendezvous_path(&dir.path().join("t"), "job/1");
        assert!(
            file.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .ends_with("job_1")
        );
        let hs: Vec<_> = (0..4u32)
            .map(|r| {
                let f = file.clone();
                std::thread::spawn(move || {
                    let mut c =
                        Comm::connect(r, 4, "job/1", &f, "127.0.0.1", Duration::from_secs(20))
                            .unwrap();
                    c.barrier(Ok(())).unwrap();
                    let g = c.gather(format!("r{}", c.rank())).unwrap();
                    // A failing rank aborts everyone.
                    let b = c.barrier(if r == 2 {
                        Err("disk full".into())
                    } else {
                        Ok(())
                    });
                    (g, b.map_err(|e| e.to_string()), c.hosts().len())
                })
            })
            .collect();
        let res: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            res[0].0.as_deref(),
            Some(&["r0", "r1", "r2", "r3"].map(String::from)[..])
        );
        assert!(res[1].0.is_none());
        for (_, b, n) in &res {
            assert_eq!(*n, 4);
            assert!(
                b.as_ref().unwrap_err().contains("rank 2: disk full"),
                "{b:?}"
            );
        }
        assert!(!file.exists(), "rendezvous file removed");
    }

    #[test]
    fn bounded_lines() {
        let mut r = std::io::Cursor::new(b"abc\nxyz".to_vec());
        assert_eq!(read_line_bounded(&mut r, 10).unwrap(), "abc");
        assert!(read_line_bounded(&mut r, 10).is_err());
        let mut big = std::io::Cursor::new(vec![b'a'; 100]);
        assert!(read_line_bounded(&mut big, 10).is_err());
    }
}
