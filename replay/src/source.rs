//! Where a replay's event loop gets each task's records: decoded on the loop's
//! own thread ([`Source::sequential`]), or by a second thread that decodes
//! ahead while the loop runs ([`Source::pipelined`]). Both models use it: the
//! Dimemas model over one `.dim` file, the Bandela model over one text file
//! per rank; each says how to decode a task's next records ([`Decode`]).
//! Where each task's decoding state can be handed between threads (Bandela's
//! rank files, [`Decode::shares_tasks`]), both threads decode: the second
//! one decodes every task's next chunk ahead, and the loop decodes the chunk
//! it needs itself when that thread has not got to it yet, so that neither
//! waits for the other.
//!
//! Both ways hand the loop the same records, positions and errors in the same
//! order, so a replay's predictions do not depend on the number of threads.
//! Records in flight are bounded per trace ([`DECODED_BUDGET`], less for few
//! tasks: [`TASK_BUDGET`]), so memory
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

/// How many records ahead of the one taken the loop asks the core to fetch
/// (1 and 3 were no better on the 1,024-rank Bandela halo; 0 left the take
/// of a record at 15 % of the loop's samples, 2 at 6 %).
const PREFETCH_AHEAD: usize = 2;

/// How a trace's tasks are decoded, a chunk at a time.
pub(crate) trait Decode: Send + Sized {
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
    /// Moves the tasks `mine` marks into a decoder of their own; they end in
    /// `self`. With none marked, a decoding context for another thread (what
    /// the tasks share). `None` if the decoder cannot be split.
    fn split_off(&mut self, _mine: &[bool]) -> Option<Self> {
        None
    }
    /// One task's decoding state, taken out of the decoder so that either
    /// thread can decode it ([`Source::pipelined`]).
    type Task: Send;
    /// Takes task `t`'s state out (the task then ends in `self`); `None`
    /// if it cannot be moved.
    fn take_task(&mut self, _t: usize) -> Option<Self::Task> {
        None
    }
    /// Puts task `t`'s state, taken out of another decoder, in `self`.
    fn put_task(&mut self, _t: usize, _task: Self::Task) {}
    /// Whether each task's state can be taken out ([`Decode::take_task`])
    /// and decoded by any thread ([`Decode::fill_task`]): then both threads
    /// decode, each the next chunk of whichever task it gets to first
    /// ([`Source::pipelined`]).
    fn shares_tasks() -> bool {
        false
    }
    /// [`Decode::fill`] of a task's state taken out of the decoder; `self`
    /// lends what its tasks share (a decoder split off with no task).
    fn fill_task(
        &mut self,
        _t: usize,
        _task: &mut Self::Task,
        _out: &mut Vec<Self::Rec>,
        _max: usize,
    ) -> std::result::Result<(), FormatError> {
        Ok(())
    }
    /// [`Decode::is_done`] of a task's state taken out of the decoder.
    fn task_done(&self, _t: usize, _task: &Self::Task) -> bool {
        true
    }
}

/// Bytes of decoded records per task, under [`DECODED_BUDGET`]: a trace of
/// fewer than 768 tasks holds less than the whole budget, so that a replay's
/// memory grows with its tasks, as Dimemas's does (about 20 KB per task), and
/// stays under it at every size (issue 16). Chunks of 85–341 records were as
/// fast as 512 or faster (docs/testing.md, 2026-11-29).
const TASK_BUDGET: usize = 8 << 10;

/// The least budget, whatever the tasks: below it, chunks of a trace of a few
/// tasks would shrink for no memory that matters, and a two-thread replay
/// of 8 tasks was up to 20 % slower.
const MIN_BUDGET: usize = 1 << 20;

/// Records per chunk: as many as the budget allows for `per_task` chunks of
/// each of `ntasks` tasks, between 16 and 512. The budget is `budget` bytes,
/// or less for few tasks ([`TASK_BUDGET`], at least [`MIN_BUDGET`]).
fn chunk_len<R>(budget: usize, ntasks: usize, per_task: usize) -> usize {
    let rec = std::mem::size_of::<R>().max(1);
    let n = ntasks.max(1);
    let budget = n
        .saturating_mul(TASK_BUDGET)
        .min(budget)
        .max(MIN_BUDGET.min(budget));
    (budget / (n * per_task * rec)).clamp(16, 512)
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

    /// For a chunk decoded by the other thread: its next record, the error
    /// after its records, or the end of the task's stream; `None` once it is
    /// used up and the next chunk is needed.
    fn step(&mut self) -> Option<Result<Option<R>>> {
        if let Some(r) = self.take() {
            // The task's next records were written by the other thread and
            // sit in the other core's cache: fetch them ahead, while the
            // loop runs, instead of stalling on them. Not just the next one:
            // a task often runs several records in a row, and the fetch
            // would still be under way.
            prefetch(self.recs.get(self.next + PREFETCH_AHEAD));
            return Some(Ok(Some(r)));
        }
        if let Some(e) = self.err.take() {
            return Some(Err(e.into()));
        }
        self.last.then_some(Ok(None))
    }

    /// The used-up chunk's buffer, to be decoded into again.
    fn used(&mut self) -> Vec<R> {
        self.next = 0;
        std::mem::take(&mut self.recs)
    }

    /// Puts `chunk` in place of the used-up one.
    fn install(&mut self, chunk: Chunk<R>) {
        // A new chunk's first records are needed at once.
        for r in chunk.recs.iter().take(PREFETCH_AHEAD) {
            prefetch(Some(r));
        }
        self.recs = chunk.recs;
        self.next = 0;
        self.last = chunk.last;
        self.err = chunk.err;
    }
}

/// Used chunk buffers handed back to the decoder, each with its task: each
/// asks for that task's next chunk.
type Returned<R> = Vec<(u32, Vec<R>)>;

/// A decoded chunk of a task's records.
struct Chunk<R> {
    recs: Vec<R>,
    last: bool,
    err: Option<FormatError>,
}

/// The records of every task.
// One per replay, asked for every record: not boxed, so that no pointer is
// followed per record.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Source<D: Decode> {
    Seq(Seq<D>),
    Pipe(Pipe<D>),
    Shared(Shared<D>),
}

pub(crate) struct Seq<D: Decode> {
    dec: D,
    cur: Vec<Cur<D::Rec>>,
    chunk: usize,
}

pub(crate) struct Pipe<D: Decode> {
    cur: Vec<Cur<D::Rec>>,
    ready: Vec<VecDeque<Chunk<D::Rec>>>,
    /// Empty chunk buffers returned to the decoder: each asks for one more
    /// chunk of its task. Sent in batches so the decoder wakes up rarely.
    batch: Returned<D::Rec>,
    batch_len: usize,
    requests: Sender<Returned<D::Rec>>,
    /// Chunks from the decoding thread, each with its task.
    chunks: Receiver<(u32, Chunk<D::Rec>)>,
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
        if D::shares_tasks() {
            return Shared::spawn(dec, name, scope).map(Source::Shared);
        }
        let n = dec.ntasks();
        let chunk = chunk_len::<D::Rec>(DECODED_BUDGET, n, AHEAD + 1);
        let (req_tx, req_rx) = std::sync::mpsc::channel::<Returned<D::Rec>>();
        let (chunk_tx, chunk_rx) = std::sync::mpsc::channel::<(u32, Chunk<D::Rec>)>();
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
            Source::Shared(s) => s.next(t),
        }
    }

    /// Chunks the loop decoded itself because the decoding thread had not
    /// got to them yet ([`Decode::shares_tasks`]).
    pub(crate) fn decoded_by_loop(&self) -> usize {
        match self {
            Source::Shared(s) => s.decoded_by_loop,
            Source::Seq(_) | Source::Pipe(_) => 0,
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

impl<D: Decode> Pipe<D> {
    fn next(&mut self, t: usize) -> Result<Option<D::Rec>> {
        loop {
            let Some(cur) = self.cur.get_mut(t) else {
                return Ok(None);
            };
            if let Some(r) = cur.step() {
                return r;
            }
            // This chunk is used up: its buffer asks for the next one (the
            // first call has an empty buffer, asking for nothing: every
            // task's first chunks are decoded unasked).
            let buf = cur.used();
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
                cur.install(chunk);
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
    fn wait_for(&mut self, t: usize) -> Result<Chunk<D::Rec>> {
        self.flush();
        let mut spins = 0u32;
        loop {
            let (task, c) = match self.chunks.try_recv() {
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
            if task as usize == t {
                return Ok(c);
            }
            if let Some(q) = self.ready.get_mut(task as usize) {
                q.push_back(c);
            }
        }
    }
}

/// One task's state and its chunks decoded ahead, behind a lock that
/// whichever thread decodes the task's next chunk holds meanwhile.
struct Slot<D: Decode> {
    task: D::Task,
    /// Chunks decoded ahead, in order.
    ready: VecDeque<Chunk<D::Rec>>,
    /// The last chunk (or an error) has been decoded.
    ended: bool,
    /// A used buffer to decode the next chunk into.
    spare: Option<Vec<D::Rec>>,
}

/// What the event loop and the decoding thread share.
struct Common<D: Decode> {
    slots: Vec<std::sync::Mutex<Slot<D>>>,
    /// The loop has gone: the decoding thread ends.
    stop: std::sync::atomic::AtomicBool,
    /// The decoding thread sleeps (every task is decoded `AHEAD + 1` chunks
    /// ahead, or has ended): the loop wakes it up once it has used a few.
    sleeping: std::sync::atomic::AtomicBool,
}

/// Locks a slot; a thread that panicked while holding it left it as it was
/// between two chunks (a chunk is pushed whole), so its state is used.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Decodes task `t`'s next chunk, of up to `max` records, from its slot.
fn decode_into<D: Decode>(ctx: &mut D, t: usize, slot: &mut Slot<D>, max: usize) -> Chunk<D::Rec> {
    let mut recs = slot.spare.take().unwrap_or_default();
    recs.clear();
    recs.reserve(max);
    let err = ctx.fill_task(t, &mut slot.task, &mut recs, max).err();
    let last = ctx.task_done(t, &slot.task) || err.is_some();
    if last {
        slot.ended = true;
        recs.shrink_to_fit();
    }
    Chunk { recs, last, err }
}

/// Records decoded by both threads: a second thread decodes every task's
/// next chunks ahead, and the loop decodes the chunk it needs itself when
/// that thread has not got to it yet, instead of waiting. Which thread
/// decodes a chunk changes neither the chunk nor the order of the records.
pub(crate) struct Shared<D: Decode> {
    common: std::sync::Arc<Common<D>>,
    /// The loop's own decoding context (what the tasks share, no task).
    ctx: D,
    cur: Vec<Cur<D::Rec>>,
    chunk: usize,
    /// Chunks the loop has taken since it last woke the decoding thread.
    taken: usize,
    wake_after: usize,
    thread: std::thread::Thread,
    /// Chunks the loop decoded itself.
    decoded_by_loop: usize,
    name: String,
}

impl<D: Decode> Shared<D> {
    fn spawn<'scope, 'env>(
        mut dec: D,
        name: String,
        scope: &'scope std::thread::Scope<'scope, 'env>,
    ) -> Result<Self>
    where
        D: 'scope,
        D::Rec: 'scope,
    {
        let n = dec.ntasks();
        let none = vec![false; n];
        let (Some(ctx), Some(thread_ctx)) = (dec.split_off(&none), dec.split_off(&none)) else {
            return Err(ReplayError::Io(format!(
                "{name}: the trace's tasks cannot be shared between threads"
            )));
        };
        let mut slots = Vec::with_capacity(n);
        for t in 0..n {
            let task = dec.take_task(t).ok_or_else(|| {
                ReplayError::Io(format!("{name}: task {t} cannot be handed to a thread"))
            })?;
            slots.push(std::sync::Mutex::new(Slot {
                task,
                ready: VecDeque::new(),
                ended: false,
                spare: None,
            }));
        }
        let common = std::sync::Arc::new(Common {
            slots,
            stop: std::sync::atomic::AtomicBool::new(false),
            sleeping: std::sync::atomic::AtomicBool::new(false),
        });
        // Per task: the chunk being replayed, the ones decoded ahead, a
        // spare buffer, and the one being decoded (21 records at 1,024 ranks:
        // 24.3 MiB at peak, no slower than 42 records at 27.3 MiB).
        let chunk = chunk_len::<D::Rec>(DECODED_BUDGET, n, AHEAD + 3);
        let theirs = common.clone();
        let handle = std::thread::Builder::new()
            .name("replay-decode".into())
            .spawn_scoped(scope, move || decode_ahead(thread_ctx, &theirs, chunk))
            .map_err(|e| ReplayError::Io(format!("cannot start the decoding thread: {e}")))?;
        Ok(Shared {
            thread: handle.thread().clone(),
            common,
            ctx,
            cur: (0..n).map(|_| Cur::default()).collect(),
            chunk,
            taken: 0,
            wake_after: (n / 16).clamp(1, 64),
            decoded_by_loop: 0,
            name,
        })
    }

    fn next(&mut self, t: usize) -> Result<Option<D::Rec>> {
        let Some(cur) = self.cur.get_mut(t) else {
            return Ok(None);
        };
        if let Some(r) = cur.step() {
            return r;
        }
        let used = cur.used();
        let Some(slot) = self.common.slots.get(t) else {
            return Err(ReplayError::Io(format!("{}: no task {t}", self.name)));
        };
        let chunk = {
            let mut slot = lock(slot);
            if used.capacity() > 0 && slot.spare.is_none() {
                slot.spare = Some(used);
            }
            match slot.ready.pop_front() {
                Some(c) => c,
                None if slot.ended => Chunk {
                    recs: Vec::new(),
                    last: true,
                    err: None,
                },
                None => {
                    // The decoding thread has not got to it: decode it here
                    // rather than wait.
                    self.decoded_by_loop += 1;
                    decode_into(&mut self.ctx, t, &mut slot, self.chunk)
                }
            }
        };
        self.taken += 1;
        if self.taken >= self.wake_after
            && self
                .common
                .sleeping
                .load(std::sync::atomic::Ordering::Acquire)
        {
            self.taken = 0;
            self.thread.unpark();
        }
        cur.install(chunk);
        // An empty chunk is the last one, or an error: never ask again.
        cur.step().unwrap_or_else(|| {
            cur.last = true;
            Ok(None)
        })
    }
}

impl<D: Decode> Drop for Shared<D> {
    fn drop(&mut self) {
        self.common
            .stop
            .store(true, std::sync::atomic::Ordering::Release);
        self.thread.unpark();
    }
}

/// The decoding thread of [`Shared`]: sweeps over the tasks, decoding one
/// more chunk of each that has fewer than `AHEAD + 1` decoded ahead and that
/// the loop is not decoding itself; sleeps when a whole sweep found nothing
/// to do, until the loop has used some chunks. Ends once the loop has gone.
fn decode_ahead<D: Decode>(mut ctx: D, common: &Common<D>, chunk: usize) {
    use std::sync::atomic::Ordering;
    let n = common.slots.len();
    // The loop starts from the first task: start from the middle, so that
    // the two do not queue for the same tasks.
    let mut t = n / 2;
    let mut idle = 0usize;
    while !common.stop.load(Ordering::Acquire) {
        if n == 0 {
            return;
        }
        let Some(m) = common.slots.get(t) else { return };
        let this = t;
        t = (t + 1) % n;
        let did = match m.try_lock() {
            Ok(mut slot) if !slot.ended && slot.ready.len() < AHEAD => {
                let c = decode_into(&mut ctx, this, &mut slot, chunk);
                slot.ready.push_back(c);
                true
            }
            _ => false,
        };
        if did {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle >= n {
            // A whole sweep with nothing to do.
            common.sleeping.store(true, Ordering::Release);
            std::thread::park_timeout(std::time::Duration::from_millis(1));
            common.sleeping.store(false, Ordering::Release);
            idle = 0;
        }
    }
}

/// A hint to bring `r` (its first and last byte) into this core's cache.
#[inline]
fn prefetch<R>(r: Option<&R>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(r) = r {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint that never faults nor reads into the
        // program, whatever the address; SSE is part of every x86_64 CPU.
        // A record can straddle two cache lines.
        unsafe {
            let p = std::ptr::from_ref(r).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(std::mem::size_of::<R>().max(1) - 1));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Decodes task `t`'s next chunk into `recs` and sends it; `false` once the
/// loop has gone.
fn send_chunk<D: Decode>(
    dec: &mut D,
    t: u32,
    mut recs: Vec<D::Rec>,
    chunk: usize,
    chunks: &Sender<(u32, Chunk<D::Rec>)>,
) -> bool {
    recs.clear();
    if t as usize >= dec.ntasks() {
        return true;
    }
    let err = dec.fill(t as usize, &mut recs, chunk).err();
    let last = dec.is_done(t as usize) || err.is_some();
    if last {
        recs.shrink_to_fit();
    }
    chunks.send((t, Chunk { recs, last, err })).is_ok()
}

/// The decoding thread of [`Pipe`]: `AHEAD + 1` chunks of every task first,
/// then one more chunk of a task each time the loop hands back a used
/// buffer. Ends when the loop drops its side of the channels.
fn decoder<D: Decode>(
    mut dec: D,
    chunk: usize,
    requests: &Receiver<Returned<D::Rec>>,
    chunks: &Sender<(u32, Chunk<D::Rec>)>,
) {
    let ntasks = dec.ntasks() as u32;
    for _ in 0..=AHEAD {
        for t in 0..ntasks {
            if !send_chunk(&mut dec, t, Vec::with_capacity(chunk), chunk, chunks) {
                return;
            }
        }
    }
    while let Ok(batch) = requests.recv() {
        for (t, buf) in batch {
            if !send_chunk(&mut dec, t, buf, chunk, chunks) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use benchlake_formats::error::Position;

    /// Decoded records grow with the tasks up to the budget, never past it
    /// (but for the 16-record floor), and a few tasks keep whole chunks.
    #[test]
    fn the_budget_grows_with_the_tasks() {
        type Rec48 = [u64; 6];
        let held = |n: usize, per: usize| n * per * chunk_len::<Rec48>(DECODED_BUDGET, n, per) * 48;
        assert_eq!(chunk_len::<Rec48>(DECODED_BUDGET, 8, 2), 512);
        assert_eq!(chunk_len::<Rec48>(DECODED_BUDGET, 64, 1), 341);
        assert_eq!(chunk_len::<Rec48>(DECODED_BUDGET, 256, 2), 85);
        assert_eq!(chunk_len::<Rec48>(DECODED_BUDGET, 1024, 2), 64);
        assert_eq!(chunk_len::<Rec48>(DECODED_BUDGET, 1 << 20, 4), 16);
        assert_eq!(chunk_len::<Rec48>(2 << 20, 1024, 1), 42);
        for n in [1, 8, 64, 100, 256, 384, 768, 1000, 4096] {
            assert!(held(n, 2) <= (n * TASK_BUDGET).clamp(MIN_BUDGET, DECODED_BUDGET));
        }
        assert!(held(64, 2) < held(256, 2) && held(256, 2) < held(1024, 2));
        // A budget under the least one is kept, not raised.
        assert_eq!(chunk_len::<Rec48>(1000, 1, 1), 20);
    }

    /// Task `t`'s records are `(t, 0)`, `(t, 1)`, … up to its length; a task
    /// may break at a record, an error naming the task and the record.
    struct Counter {
        len: Vec<usize>,
        broken: Option<(usize, usize)>,
        next: Vec<usize>,
        owned: Vec<bool>,
        /// Each fill takes this long (the decoding thread made slow).
        slow: std::time::Duration,
    }

    impl Counter {
        fn new(len: Vec<usize>, broken: Option<(usize, usize)>) -> Self {
            let n = len.len();
            Self {
                len,
                broken,
                next: vec![0; n],
                owned: vec![true; n],
                slow: std::time::Duration::ZERO,
            }
        }
    }

    thread_local! {
        static SHARED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    impl Decode for Counter {
        type Rec = (usize, usize);
        fn ntasks(&self) -> usize {
            self.len.len()
        }
        fn fill(
            &mut self,
            t: usize,
            out: &mut Vec<(usize, usize)>,
            max: usize,
        ) -> std::result::Result<(), FormatError> {
            assert!(
                self.owned[t],
                "task {t} decoded by a decoder that gave it away"
            );
            self.fill_at(t, out, max)
        }
        fn is_done(&self, t: usize) -> bool {
            self.next[t] >= self.len[t]
        }
        fn shares_tasks() -> bool {
            SHARED.with(std::cell::Cell::get)
        }
        fn fill_task(
            &mut self,
            t: usize,
            next: &mut usize,
            out: &mut Vec<(usize, usize)>,
            max: usize,
        ) -> std::result::Result<(), FormatError> {
            let mine = std::mem::replace(&mut self.next[t], *next);
            let r = self.fill_at(t, out, max);
            *next = std::mem::replace(&mut self.next[t], mine);
            r
        }
        fn task_done(&self, t: usize, next: &usize) -> bool {
            *next >= self.len[t]
        }
        fn split_off(&mut self, mine: &[bool]) -> Option<Self> {
            let mut other = Counter::new(self.len.clone(), self.broken);
            other.next.clone_from(&self.next);
            other.slow = self.slow;
            for (t, m) in mine.iter().enumerate() {
                other.owned[t] = *m;
                self.owned[t] = !*m;
            }
            Some(other)
        }
        type Task = usize;
        fn take_task(&mut self, t: usize) -> Option<usize> {
            assert!(self.owned[t], "task {t} given away twice");
            self.owned[t] = false;
            Some(self.next[t])
        }
        fn put_task(&mut self, t: usize, next: usize) {
            assert!(!self.owned[t], "task {t} received twice");
            self.owned[t] = true;
            self.next[t] = next;
        }
    }

    impl Counter {
        /// Task `t`'s next records from `self.next[t]`; slow on the
        /// decoding thread only.
        fn fill_at(
            &mut self,
            t: usize,
            out: &mut Vec<(usize, usize)>,
            max: usize,
        ) -> std::result::Result<(), FormatError> {
            if std::thread::current().name() == Some("replay-decode") {
                let until = std::time::Instant::now() + self.slow;
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            let start = out.len();
            while out.len() - start < max && self.next[t] < self.len[t] {
                if self.broken == Some((t, self.next[t])) {
                    // The records before the error go first; the error
                    // comes with the next call, which ends the task.
                    if out.len() > start {
                        return Ok(());
                    }
                    self.len[t] = self.next[t];
                    return Err(FormatError::malformed(
                        format!("task{t}"),
                        "record",
                        Position::LineCol(self.next[t] as u64 + 1, 1),
                        "broken",
                    ));
                }
                out.push((t, self.next[t]));
                self.next[t] += 1;
            }
            Ok(())
        }
    }

    /// Takes records the way an event loop does: task by task, a few at a
    /// time, until every task has ended or one errs.
    fn drain(src: &mut Source<Counter>, ntasks: usize) -> (Vec<(usize, usize)>, Option<String>) {
        let mut got = Vec::new();
        let mut live: Vec<usize> = (0..ntasks).collect();
        let mut step = 0usize;
        while !live.is_empty() {
            let mut still = Vec::new();
            for &t in &live {
                let mut ended = false;
                for _ in 0..=((t + step) % 5) {
                    match src.next(t) {
                        Ok(Some(r)) => got.push(r),
                        Ok(None) => {
                            ended = true;
                            break;
                        }
                        Err(e) => return (got, Some(e.to_string())),
                    }
                }
                if !ended {
                    still.push(t);
                }
            }
            live = still;
            step += 1;
        }
        (got, None)
    }

    /// Empty tasks, short ones and long ones, over several chunks (512
    /// records for 40 tasks).
    fn lengths() -> Vec<usize> {
        (0..40).map(|t| (t * 37) % 300 * 20).collect()
    }

    /// Where a task breaks: none, after some records, at its first record,
    /// at its last one.
    const BREAKS: [Option<(usize, usize)>; 6] = [
        None,
        Some((17, 20)),
        Some((16, 0)),
        Some((11, 5)),
        Some((22, 2000)),
        Some((5, 3699)),
    ];

    /// The records and the error the loop gets on one thread.
    fn on_one_thread(broken: Option<(usize, usize)>) -> (Vec<(usize, usize)>, Option<String>) {
        let len = lengths();
        let mut seq = Source::sequential(Counter::new(len.clone(), broken));
        let want = drain(&mut seq, len.len());
        assert_eq!(want.1.is_some(), broken.is_some(), "{broken:?}");
        if broken.is_none() {
            assert_eq!(want.0.len(), len.iter().sum::<usize>());
        }
        want
    }

    /// A second thread decoding every task ahead hands the loop the same
    /// records in the same order as one thread, and the same error at the
    /// same point.
    #[test]
    fn a_pipeline_hands_out_what_one_thread_does() {
        let len = lengths();
        for broken in BREAKS {
            let want = on_one_thread(broken);
            for slow in [0, 300] {
                let got = std::thread::scope(|scope| {
                    let mut dec = Counter::new(len.clone(), broken);
                    dec.slow = std::time::Duration::from_micros(slow);
                    let mut src = Source::pipelined(dec, "trace".into(), scope).expect("pipeline");
                    assert!(matches!(src, Source::Pipe(_)));
                    drain(&mut src, len.len())
                });
                assert_eq!(got, want, "slow {slow}, broken {broken:?}");
            }
        }
    }

    /// Tasks decoded by whichever thread gets to their next chunk first:
    /// the loop is handed the same records in the same order as on one
    /// thread, and the same error at the same point, whether the loop or the
    /// second thread decoded the broken chunk; a slow second thread leaves
    /// chunks for the loop to decode itself. Once the loop has gone (at an
    /// error), the second thread ends: the scope would not end otherwise.
    #[test]
    fn shared_tasks_hand_out_what_one_thread_does() {
        let len = lengths();
        for broken in BREAKS {
            let want = on_one_thread(broken);
            for slow in [0, 300] {
                SHARED.with(|s| s.set(true));
                let (got, by_loop) = std::thread::scope(|scope| {
                    let mut dec = Counter::new(len.clone(), broken);
                    dec.slow = std::time::Duration::from_micros(slow);
                    let mut src = Source::pipelined(dec, "trace".into(), scope).expect("pipeline");
                    assert!(matches!(src, Source::Shared(_)));
                    let got = drain(&mut src, len.len());
                    (got, src.decoded_by_loop())
                });
                SHARED.with(|s| s.set(false));
                assert_eq!(got, want, "slow {slow}, broken {broken:?}");
                if slow > 0 && broken.is_none() {
                    assert!(by_loop > 0, "the loop decoded nothing itself");
                }
            }
        }
    }
}
