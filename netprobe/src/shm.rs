//! The shared-memory transport of local ranks (`--local-ranks N
//! --transport shm`): the ping-pongs of ranks that share a host go through
//! memory, as MPI's shared-memory transport carries them (Open MPI's
//! `vader`/`sm`: the sender copies into a buffer the receiver polls, the
//! receiver copies out), instead of through TCP on loopback, whose latency
//! is ten times MPI's on one host (docs/linktest.md §7.3). Control traffic
//! (barriers, commands, the gathered rows) stays on the TCP mesh.
//!
//! Every rank owns one inbox. A rank opens its inbox to the partner of the
//! exchange it starts and closes it once it has read the exchange's last
//! message, so a rank that reaches its next step early never writes into an
//! inbox still in use: it waits until the inbox names it. Within an exchange
//! a full flag hands each message over (release on the writer's side,
//! acquire on the reader's).
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::{NetprobeError, POLLS_BEFORE_YIELD, Result};

/// No partner: the inbox is closed.
const CLOSED: usize = usize::MAX;

/// One rank's inbox.
struct Inbox {
    /// The rank allowed to write, or [`CLOSED`].
    open_to: AtomicUsize,
    /// A message is waiting to be read.
    full: AtomicBool,
    /// The message. The flags above already order every access, so the lock
    /// is never contended; it keeps the crate free of `unsafe`.
    data: Mutex<Vec<u8>>,
}

/// The inboxes of the ranks of one process.
pub struct ShmLinks {
    inboxes: Vec<Inbox>,
    /// Set when a rank fails, so its partners stop waiting for it.
    aborted: AtomicBool,
    timeout: Duration,
}

impl ShmLinks {
    /// Inboxes for `ranks` ranks and messages of up to `message_size` bytes;
    /// a wait longer than `timeout` fails the exchange.
    pub fn new(ranks: usize, message_size: usize, timeout: Duration) -> Self {
        Self {
            inboxes: (0..ranks)
                .map(|_| Inbox {
                    open_to: AtomicUsize::new(CLOSED),
                    full: AtomicBool::new(false),
                    data: Mutex::new(vec![0u8; message_size]),
                })
                .collect(),
            aborted: AtomicBool::new(false),
            timeout,
        }
    }

    /// Makes every waiting rank fail (a rank of the run failed).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }

    fn inbox(&self, rank: usize) -> Result<&Inbox> {
        self.inboxes.get(rank).ok_or_else(|| {
            NetprobeError::Protocol(format!(
                "shared memory: rank {rank} of {}",
                self.inboxes.len()
            ))
        })
    }

    /// Polls `ready` as the TCP path polls its socket (spinning, yielding the
    /// core every few thousand polls), up to the timeout.
    fn wait(&self, what: &str, ready: impl Fn() -> bool) -> Result<()> {
        let mut polls = 0u32;
        let start = Instant::now();
        while !ready() {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(POLLS_BEFORE_YIELD) {
                if self.aborted.load(Ordering::Acquire) {
                    return Err(NetprobeError::Protocol(format!(
                        "shared memory: {what}: another rank failed"
                    )));
                }
                if start.elapsed() > self.timeout {
                    return Err(NetprobeError::Protocol(format!(
                        "shared memory: {what}: no progress in {:?}",
                        self.timeout
                    )));
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// Opens `rank`'s inbox to `partner` (the start of their exchange).
    pub fn open(&self, rank: usize, partner: usize) -> Result<()> {
        self.inbox(rank)?.open_to.store(partner, Ordering::Release);
        Ok(())
    }

    /// Closes `rank`'s inbox (its exchange's last message is read).
    pub fn close(&self, rank: usize) -> Result<()> {
        self.inbox(rank)?.open_to.store(CLOSED, Ordering::Release);
        Ok(())
    }

    /// Copies `buf` into `to`'s inbox once it is open to `from` and empty.
    pub fn send(&self, from: usize, to: usize, buf: &[u8]) -> Result<()> {
        let inbox = self.inbox(to)?;
        self.wait(&format!("rank {from} sending to rank {to}"), || {
            inbox.open_to.load(Ordering::Acquire) == from && !inbox.full.load(Ordering::Acquire)
        })?;
        {
            let mut d = inbox.data.lock().map_err(|_| poisoned(to))?;
            let dst = d
                .get_mut(..buf.len())
                .ok_or_else(|| too_long(to, buf.len()))?;
            dst.copy_from_slice(buf);
        }
        inbox.full.store(true, Ordering::Release);
        Ok(())
    }

    /// Copies the message waiting in `rank`'s inbox into `buf`.
    pub fn recv(&self, rank: usize, from: usize, buf: &mut [u8]) -> Result<()> {
        let inbox = self.inbox(rank)?;
        self.wait(&format!("rank {rank} receiving from rank {from}"), || {
            inbox.full.load(Ordering::Acquire)
        })?;
        {
            let d = inbox.data.lock().map_err(|_| poisoned(rank))?;
            let src = d
                .get(..buf.len())
                .ok_or_else(|| too_long(rank, buf.len()))?;
            buf.copy_from_slice(src);
        }
        inbox.full.store(false, Ordering::Release);
        Ok(())
    }
}

fn poisoned(rank: usize) -> NetprobeError {
    NetprobeError::Protocol(format!("shared memory: rank {rank}'s inbox was poisoned"))
}

fn too_long(rank: usize, len: usize) -> NetprobeError {
    NetprobeError::Protocol(format!(
        "shared memory: a {len}-byte message does not fit rank {rank}'s inbox"
    ))
}
