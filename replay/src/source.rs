//! Where a replay's event loop gets each task's records: decoded on the loop's
//! own thread ([`Source::sequential`]), or by a second thread that decodes
//! ahead while the loop runs ([`Source::pipelined`]). Both models use it: the
//! Dimemas model over one `.dim` file, the Bandela model over one text file
//! per rank; each says how to decode a task's next records ([`Decode`]).
//!
//! Both ways hand the loop the same records, positions and errors in the same
//! order, so a replay's predictions do not depend on the number of threads.
//! Records in flight are bounded per trace ([`DECODED_BUDGET`]), so memory
//! does not grow with the trace's length.
use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender};

use benchlake_formats::FormatError;

use crate::error::{ReplayError, Result};

/// Bytes of decoded records held at once, over all tasks (chunks being
/// replayed and chunks decoded ahead).
pub const DECODED_BUDGET: usize = 6 << 20;

/// Chunks a task has decoded ahead of the one being replayed (pipelined).
const AHEAD: usize = 1;

/// Polls for a missing chunk before sleeping (about 20 µs).
const SPINS: u32 = 2000;

/// How a trace's tasks are decoded, a chunk at a time.
pub(crate) trait Decode: Send {
    /// A record with its position (byte offset or line). Taken out of its
    /// chunk by a copy: moving it out would write to the chunk, whose cache
    /// lines the decoding thread then has to fetch back (a decoder moves any
    /// heap part out of its records itself, on its own thread).
    type Rec: Send + Clone;
    /// Tasks of the trace.
    fn ntasks(&self) -> usize;
    /// Appends up to `max` of task `t`'s next records to `out`; appends
    /// nothing once its stream has ended. An error met after some records is
    /// returned by the next call, so the records before it are replayed first.
    fn fill(
        &mut self,
        t: usize,
        out: &mut Vec<Self::Rec>,
        max: usize,
    ) -> std::result::Result<(), FormatError>;
    /// Whether task `t`'s stream has ended (and its last error was returned).
    fn is_done(&self, t: usize) -> bool;
    /// Bytes of decoded records held at once when one thread decodes and
    /// replays: smaller chunks keep every task's chunk in the core's cache
    /// where a fill is cheap, larger ones save fills where a fill costs a
    /// read at an offset.
    fn sequential_budget() -> usize {
        DECODED_BUDGET
    }
}

/// Records per chunk: as many as `budget` bytes allow for `per_task` chunks
/// of each of `ntasks` tasks, between 16 and 512.
fn chunk_len<R>(budget: usize, ntasks: usize, per_task: usize) -> usize {
    let rec = std::mem::size_of::<R>().max(1);
    (budget / (ntasks.max(1) * per_task * rec)).clamp(16, 512)
}

/// One task's chunk being replayed.
struct Cur<R> {
    recs: Vec<R>,
    next: usize,
    /// The task's stream ends after this chunk.
    last: bool,
    /// The error that follows this chunk's records.
    err: Option<FormatError>,
}

impl<R> Default for Cur<R> {
    fn default() -> Self {
        Self {
            recs: Vec::new(),
            next: 0,
            last: false,
            err: None,
        }
    }
}

impl<R: Clone> Cur<R> {
    fn take(&mut self) -> Option<R> {
        let r = self.recs.get(self.next).cloned();
        if r.is_some() {
            self.next += 1;
        }
        r
    }
}

/// Used chunk buffers handed back to the decoder, each with its task: each
/// asks for that task's next chunk.
type Returned<R> = Vec<(u32, Vec<R>)>;

/// A decoded chunk sent by the decoder thread.
struct Chunk<R> {
    task: u32,
    recs: Vec<R>,
    last: bool,
    err: Option<FormatError>,
}

/// The records of every task.
pub(crate) enum Source<D: Decode> {
    Seq(Seq<D>),
    Pipe(Pipe<D::Rec>),
}

pub(crate) struct Seq<D: Decode> {
    dec: D,
    cur: Vec<Cur<D::Rec>>,
    chunk: usize,
}

pub(crate) struct Pipe<R> {
    cur: Vec<Cur<R>>,
    ready: Vec<VecDeque<Chunk<R>>>,
    /// Empty chunk buffers returned to the decoder: each asks for one more
    /// chunk of its task. Sent in batches so the decoder wakes up rarely.
    batch: Returned<R>,
    batch_len: usize,
    requests: Sender<Returned<R>>,
    chunks: Receiver<Chunk<R>>,
    /// What the trace is called in an error.
    name: String,
}

impl<D: Decode> Source<D> {
    /// Records decoded on the caller's thread, when it asks for them.
    pub(crate) fn sequential(dec: D) -> Self {
        let n = dec.ntasks();
        Source::Seq(Seq {
            dec,
            cur: (0..n).map(|_| Cur::default()).collect(),
            chunk: chunk_len::<D::Rec>(D::sequential_budget(), n, 1),
        })
    }

    /// Records decoded ahead by a thread spawned on `scope`, which ends once
    /// the returned source is dropped. `name` names the trace in errors.
    pub(crate) fn pipelined<'scope, 'env>(
        dec: D,
        name: String,
        scope: &'scope std::thread::Scope<'scope, 'env>,
    ) -> Result<Self>
    where
        D: 'scope,
        D::Rec: 'scope,
    {
        let n = dec.ntasks();
        let chunk = chunk_len::<D::Rec>(DECODED_BUDGET, n, AHEAD + 1);
        let (req_tx, req_rx) = std::sync::mpsc::channel::<Returned<D::Rec>>();
        let (chunk_tx, chunk_rx) = std::sync::mpsc::channel::<Chunk<D::Rec>>();
        std::thread::Builder::new()
            .name("replay-decode".into())
            .spawn_scoped(scope, move || decoder(dec, chunk, &req_rx, &chunk_tx))
            .map_err(|e| ReplayError::Io(format!("cannot start the decoding thread: {e}")))?;
        Ok(Source::Pipe(Pipe {
            cur: (0..n).map(|_| Cur::default()).collect(),
            ready: (0..n).map(|_| VecDeque::new()).collect(),
            batch: Vec::new(),
            batch_len: (n / 16).clamp(1, 64),
            requests: req_tx,
            chunks: chunk_rx,
            name,
        }))
    }

    /// Task `t`'s next record, `None` at the end of its stream.
    pub(crate) fn next(&mut self, t: usize) -> Result<Option<D::Rec>> {
        match self {
            Source::Seq(s) => s.next(t),
            Source::Pipe(p) => p.next(t),
        }
    }
}

impl<D: Decode> Seq<D> {
    fn next(&mut self, t: usize) -> Result<Option<D::Rec>> {
        let Some(cur) = self.cur.get_mut(t) else {
            return Ok(None);
        };
        if let Some(r) = cur.take() {
            return Ok(Some(r));
        }
        if self.dec.is_done(t) {
            return Ok(None);
        }
        cur.recs.clear();
        cur.next = 0;
        self.dec.fill(t, &mut cur.recs, self.chunk)?;
        if self.dec.is_done(t) {
            // Give the buffer back once the stream has ended for good.
            cur.recs.shrink_to_fit();
        }
        Ok(cur.take())
    }
}

impl<R: Clone> Pipe<R> {
    fn next(&mut self, t: usize) -> Result<Option<R>> {
        loop {
            let Some(cur) = self.cur.get_mut(t) else {
                return Ok(None);
            };
            if let Some(r) = cur.take() {
                // The task's next record was written by the decoding thread
                // and sits in the other core's cache: fetch it now, while
                // the other ranks run, instead of stalling on it next time.
                prefetch(cur.recs.get(cur.next));
                return Ok(Some(r));
            }
            if let Some(e) = cur.err.take() {
                return Err(e.into());
            }
            if cur.last {
                return Ok(None);
            }
            // This chunk is used up: its buffer asks for the next one (the
            // first call has an empty buffer, asking for nothing: every
            // task's first chunks are decoded unasked).
            let buf = std::mem::take(&mut cur.recs);
            cur.next = 0;
            if buf.capacity() > 0 {
                self.batch.push((t as u32, buf));
            }
            if self.batch.len() >= self.batch_len {
                self.flush();
            }
            let chunk = match self.ready.get_mut(t).and_then(VecDeque::pop_front) {
                Some(c) => c,
                None => self.wait_for(t)?,
            };
            if let Some(cur) = self.cur.get_mut(t) {
                cur.recs = chunk.recs;
                cur.last = chunk.last;
                cur.err = chunk.err;
            }
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            // A closed channel means the decoder has stopped; `wait_for` says so.
            let _ = self.requests.send(std::mem::take(&mut self.batch));
        }
    }

    /// Blocks until task `t`'s next chunk arrives, keeping the others. The
    /// chunk is usually a few microseconds away: it spins a little before
    /// sleeping, which would cost two system calls per chunk.
    fn wait_for(&mut self, t: usize) -> Result<Chunk<R>> {
        self.flush();
        let mut spins = 0u32;
        loop {
            let c = match self.chunks.try_recv() {
                Ok(c) => c,
                Err(std::sync::mpsc::TryRecvError::Empty) if spins < SPINS => {
                    spins += 1;
                    std::hint::spin_loop();
                    continue;
                }
                Err(_) => self.chunks.recv().map_err(|_| {
                    ReplayError::Io(format!("{}: the decoding thread stopped early", self.name))
                })?,
            };
            if c.task as usize == t {
                return Ok(c);
            }
            if let Some(q) = self.ready.get_mut(c.task as usize) {
                q.push_back(c);
            }
        }
    }
}

/// A hint to bring `r` into this core's cache.
#[inline]
fn prefetch<R>(r: Option<&R>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(r) = r {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint that never faults nor reads into the
        // program, whatever the address; SSE is part of every x86_64 CPU.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(r).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// The decoding thread: `AHEAD + 1` chunks of every task first, then one
/// more chunk of a task each time the loop hands back a used buffer. Ends
/// when the loop drops its side of the channels.
fn decoder<D: Decode>(
    mut dec: D,
    chunk: usize,
    requests: &Receiver<Returned<D::Rec>>,
    chunks: &Sender<Chunk<D::Rec>>,
) {
    let ntasks = dec.ntasks() as u32;
    let mut decode = |task: u32, mut recs: Vec<D::Rec>| -> bool {
        recs.clear();
        if task >= ntasks {
            return true;
        }
        let err = dec.fill(task as usize, &mut recs, chunk).err();
        let last = dec.is_done(task as usize) || err.is_some();
        if last {
            recs.shrink_to_fit();
        }
        chunks
            .send(Chunk {
                task,
                recs,
                last,
                err,
            })
            .is_ok()
    };
    for _ in 0..=AHEAD {
        for t in 0..ntasks {
            if !decode(t, Vec::with_capacity(chunk)) {
                return;
            }
        }
    }
    while let Ok(batch) = requests.recv() {
        for (t, buf) in batch {
            if !decode(t, buf) {
                return;
            }
        }
    }
}
