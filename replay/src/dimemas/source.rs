//! Where the Dimemas simulation gets each task's records: decoded on the
//! simulation's own thread ([`Source::sequential`]), or by a second thread that
//! decodes ahead while the simulation runs ([`Source::pipelined`]).
//!
//! Both read the trace with one [`TaskCursor`] per task (positioned reads into
//! one shared scratch buffer, no read buffer per task) and hand the simulation
//! the records, offsets and errors [`TaskStream`](benchlake_formats::dimemas::TaskStream)
//! gives, in the same order, so a replay's predictions do not depend on the
//! number of threads. Records in flight are bounded per trace
//! ([`DECODED_BUDGET`]), so memory does not grow with the trace's length.
use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};

use benchlake_formats::FormatError;
use benchlake_formats::dimemas::{DimRecord, DimTrace, TaskCursor};

use crate::error::{ReplayError, Result};

/// A record with the byte offset of its line.
pub(crate) type Rec = (DimRecord, u64);

/// Bytes of decoded records held at once, over all tasks (chunks being
/// replayed and chunks decoded ahead).
pub const DECODED_BUDGET: usize = 6 << 20;

/// Chunks a task has decoded ahead of the one being replayed (pipelined).
const AHEAD: usize = 1;

/// Polls for a missing chunk before sleeping (about 20 µs).
const SPINS: u32 = 2000;

/// Records per chunk: as many as the budget allows for `per_task` chunks of
/// each of `ntasks` tasks, between 16 and 512.
fn chunk_len(ntasks: usize, per_task: usize) -> usize {
    let rec = std::mem::size_of::<Rec>();
    (DECODED_BUDGET / (ntasks.max(1) * per_task * rec)).clamp(16, 512)
}

/// One task's chunk being replayed.
#[derive(Default)]
struct Cur {
    recs: Vec<Rec>,
    next: usize,
    /// The task's stream ends after this chunk.
    last: bool,
    /// The error that follows this chunk's records.
    err: Option<FormatError>,
}

impl Cur {
    fn take(&mut self) -> Option<Rec> {
        let r = self.recs.get(self.next).cloned();
        if r.is_some() {
            self.next += 1;
        }
        r
    }
}

/// A decoded chunk sent by the decoder thread.
struct Chunk {
    task: u32,
    recs: Vec<Rec>,
    last: bool,
    err: Option<FormatError>,
}

/// The records of every task.
pub(crate) enum Source {
    Seq(Seq),
    Pipe(Pipe),
}

pub(crate) struct Seq {
    path: PathBuf,
    file: File,
    scratch: Vec<u8>,
    cursors: Vec<TaskCursor>,
    cur: Vec<Cur>,
    chunk: usize,
}

pub(crate) struct Pipe {
    cur: Vec<Cur>,
    ready: Vec<VecDeque<Chunk>>,
    /// Empty chunk buffers returned to the decoder: each asks for one more
    /// chunk of its task. Sent in batches so the decoder wakes up rarely.
    batch: Vec<(u32, Vec<Rec>)>,
    batch_len: usize,
    requests: Sender<Vec<(u32, Vec<Rec>)>>,
    chunks: Receiver<Chunk>,
    path: PathBuf,
}

fn open(trace: &DimTrace) -> Result<(File, Vec<TaskCursor>)> {
    let file = File::open(trace.path()).map_err(|e| FormatError::io(trace.path(), e))?;
    let cursors = (0..trace.ntasks() as u32)
        .map(|t| trace.task_cursor(t))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((file, cursors))
}

impl Source {
    /// Records decoded on the caller's thread, when it asks for them.
    pub(crate) fn sequential(trace: &DimTrace) -> Result<Self> {
        let (file, cursors) = open(trace)?;
        let n = cursors.len();
        Ok(Source::Seq(Seq {
            path: trace.path().to_path_buf(),
            file,
            scratch: Vec::new(),
            cursors,
            cur: (0..n).map(|_| Cur::default()).collect(),
            chunk: chunk_len(n, 1),
        }))
    }

    /// Records decoded ahead by a thread spawned on `scope`, which ends once
    /// the returned source is dropped.
    pub(crate) fn pipelined<'scope, 'env>(
        trace: &DimTrace,
        scope: &'scope std::thread::Scope<'scope, 'env>,
    ) -> Result<Self> {
        let (file, cursors) = open(trace)?;
        let n = cursors.len();
        let chunk = chunk_len(n, AHEAD + 1);
        let (req_tx, req_rx) = std::sync::mpsc::channel::<Vec<(u32, Vec<Rec>)>>();
        let (chunk_tx, chunk_rx) = std::sync::mpsc::channel::<Chunk>();
        let path = trace.path().to_path_buf();
        let dec_path = path.clone();
        std::thread::Builder::new()
            .name("dim-decode".into())
            .spawn_scoped(scope, move || {
                decoder(&dec_path, &file, cursors, chunk, &req_rx, &chunk_tx);
            })
            .map_err(|e| ReplayError::Io(format!("cannot start the decoding thread: {e}")))?;
        Ok(Source::Pipe(Pipe {
            cur: (0..n).map(|_| Cur::default()).collect(),
            ready: (0..n).map(|_| VecDeque::new()).collect(),
            batch: Vec::new(),
            batch_len: (n / 16).clamp(1, 64),
            requests: req_tx,
            chunks: chunk_rx,
            path,
        }))
    }

    /// Task `t`'s next record, `None` at the end of its stream.
    pub(crate) fn next(&mut self, t: usize) -> Result<Option<Rec>> {
        match self {
            Source::Seq(s) => s.next(t),
            Source::Pipe(p) => p.next(t),
        }
    }
}

impl Seq {
    fn next(&mut self, t: usize) -> Result<Option<Rec>> {
        let Some(cur) = self.cur.get_mut(t) else {
            return Ok(None);
        };
        if let Some(r) = cur.take() {
            return Ok(Some(r));
        }
        let Some(cursor) = self.cursors.get_mut(t) else {
            return Ok(None);
        };
        cur.recs.clear();
        cur.next = 0;
        cursor.fill(
            &self.path,
            &self.file,
            &mut self.scratch,
            &mut cur.recs,
            self.chunk,
        )?;
        if cursor.is_done() {
            // Give the buffer back once the stream has ended for good.
            cur.recs.shrink_to_fit();
        }
        Ok(cur.take())
    }
}

impl Pipe {
    fn next(&mut self, t: usize) -> Result<Option<Rec>> {
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
    fn wait_for(&mut self, t: usize) -> Result<Chunk> {
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
                    ReplayError::Io(format!(
                        "{}: the decoding thread stopped early",
                        self.path.display()
                    ))
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
fn prefetch(r: Option<&Rec>) {
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
/// more chunk of a task each time the simulation hands back a used buffer.
/// Ends when the simulation drops its side of the channels.
fn decoder(
    path: &Path,
    file: &File,
    mut cursors: Vec<TaskCursor>,
    chunk: usize,
    requests: &Receiver<Vec<(u32, Vec<Rec>)>>,
    chunks: &Sender<Chunk>,
) {
    let mut scratch = Vec::new();
    let ntasks = cursors.len() as u32;
    let mut decode = |task: u32, mut recs: Vec<Rec>| -> bool {
        recs.clear();
        let Some(c) = cursors.get_mut(task as usize) else {
            return true;
        };
        let err = c.fill(path, file, &mut scratch, &mut recs, chunk).err();
        let last = c.is_done() || err.is_some();
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
