//! Turns of the state store, interactive reads first.
//!
//! Both stores run one transaction at a time (SQLite: one connection with an
//! exclusive lock; PostgreSQL: one connection). Under a flood of submits,
//! polls and commits, a plain lock hands the next turn to whichever thread
//! the OS wakes: a `run list` waited behind hundreds of them (ListRuns p50
//! 936 ms with 200 submitters, issue 39). Here every transaction takes a
//! turn of [`Turns`]; the read-only requests people wait for at a terminal
//! or a page ([`Priority::Interactive`]: ListRuns, GetRun, ListSchedules,
//! ListAgents, the dashboard's pages), and an agent's lease of a task queued
//! for it (work in flight before new work), go before the waiting background ones
//! ([`Priority::Normal`]: submits, leases, commits, the scheduler), so a read
//! waits for at most the one transaction in progress. A run of
//! [`MAX_INTERACTIVE_RUN`] interactive turns in a row lets one waiting
//! normal turn through, so a storm of reads cannot stop the machine's work.
//!
//! Async code never runs a transaction itself: [`crate::Coordinator::db`]
//! queues it for the store's own thread ([`Executor`]), which takes the
//! turns above in the same order, so no async thread waits on the store's
//! lock or a statement (issue 38: one way to run a transaction). Code that
//! is on a blocking thread already (the tick, the node actions, start-up)
//! takes its turn of [`Prioritized`] directly.
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::Result;
use crate::placement::SharedPlacement;
pub use crate::store::Priority;
use crate::store::{StateStore, Tx};

/// Interactive turns granted in a row while normal ones wait, before one
/// normal turn goes through.
pub const MAX_INTERACTIVE_RUN: u32 = 8;

#[derive(Debug, Default)]
struct State {
    busy: bool,
    interactive_waiting: usize,
    normal_waiting: usize,
    /// Interactive turns granted since the last normal one.
    interactive_run: u32,
}

/// One turn at a time, interactive first (see the module).
#[derive(Debug, Default)]
pub struct Turns {
    state: Mutex<State>,
    interactive: Condvar,
    normal: Condvar,
}

/// A turn held; the next waiter's when dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a few counters, consistent after every statement.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a turn.
    pub fn acquire(&self, p: Priority) -> Turn<'_> {
        let mut s = self.lock();
        match p {
            Priority::Interactive => {
                s.interactive_waiting += 1;
                while s.busy {
                    s = self.interactive.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                s.interactive_waiting -= 1;
                s.interactive_run = s.interactive_run.saturating_add(1);
            }
            Priority::Normal => {
                s.normal_waiting += 1;
                while s.busy
                    || (s.interactive_waiting > 0 && s.interactive_run < MAX_INTERACTIVE_RUN)
                {
                    s = self.normal.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                s.normal_waiting -= 1;
                s.interactive_run = 0;
            }
        }
        s.busy = true;
        Turn { turns: self }
    }

    fn release(&self) {
        let mut s = self.lock();
        s.busy = false;
        let normal_due = s.interactive_run >= MAX_INTERACTIVE_RUN && s.normal_waiting > 0;
        if s.interactive_waiting > 0 && !normal_due {
            self.interactive.notify_one();
        } else if s.normal_waiting > 0 {
            self.normal.notify_one();
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns.release();
    }
}

/// A store whose transactions take [`Turns`].
pub struct Prioritized {
    inner: Arc<dyn StateStore>,
    turns: Turns,
}

impl Prioritized {
    /// `inner` behind turns.
    pub fn new(inner: Arc<dyn StateStore>) -> Self {
        Self {
            inner,
            turns: Turns::default(),
        }
    }
}

impl StateStore for Prioritized {
    fn transact_dyn(&self, f: &mut (dyn FnMut(&mut dyn Tx) -> Result<()> + Send)) -> Result<()> {
        self.transact_dyn_at(Priority::Normal, f)
    }

    fn transact_dyn_at(
        &self,
        p: Priority,
        f: &mut (dyn FnMut(&mut dyn Tx) -> Result<()> + Send),
    ) -> Result<()> {
        let _turn = self.turns.acquire(p);
        self.inner.transact_dyn(f)
    }

    fn placement(&self) -> Option<SharedPlacement> {
        self.inner.placement()
    }
}

/// A transaction handed to the [`Executor`]'s thread.
type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    interactive: std::collections::VecDeque<Job>,
    normal: std::collections::VecDeque<Job>,
    /// Interactive jobs run since the last normal one.
    interactive_run: u32,
    closed: bool,
}

impl Queue {
    /// The next job by the rule of [`Turns`]: interactive first, but after
    /// [`MAX_INTERACTIVE_RUN`] of them in a row a waiting normal one.
    fn next(&mut self) -> Option<Job> {
        let normal_due = self.interactive_run >= MAX_INTERACTIVE_RUN && !self.normal.is_empty();
        if !normal_due && let Some(j) = self.interactive.pop_front() {
            self.interactive_run = self.interactive_run.saturating_add(1);
            return Some(j);
        }
        let j = self.normal.pop_front()?;
        self.interactive_run = 0;
        Some(j)
    }
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is consistent after every statement.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The store's own thread: the transactions of async code
/// ([`crate::Coordinator::db`]) are queued here and run one at a time in
/// the order of [`Turns`]' rule, so no async thread ever waits for the
/// store or runs a statement, and a handler's future only waits for its
/// answer. Code already on a blocking thread (the tick, the node actions)
/// takes its turn of [`Prioritized`] directly; the executor takes its turns
/// there too, so both kinds are one queue at the store.
pub struct Executor {
    shared: Arc<Shared>,
    store: Arc<dyn StateStore>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("turns::Executor")
    }
}

impl Executor {
    /// Starts the thread `benchlake-store` over `store`; it ends when the
    /// executor is dropped, after the jobs already queued. Each job's wait
    /// and run time go to `metrics` (`benchlake_store_wait_seconds`,
    /// `benchlake_store_transaction_seconds`).
    pub fn new(store: Arc<dyn StateStore>, metrics: Arc<crate::metrics::Metrics>) -> Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        });
        let s2 = shared.clone();
        std::thread::Builder::new()
            .name("benchlake-store".into())
            .spawn(move || serve(&s2))
            .map_err(|e| crate::error::CoordError::Setup(format!("store thread: {e}")))?;
        Ok(Self {
            shared,
            store,
            metrics,
        })
    }

    /// Runs `f` in one transaction on the store's thread, in the queue of
    /// `p`, and waits for its value. A caller that stops waiting before its
    /// turn came (a request cancelled) leaves a job that is skipped.
    pub async fn run<T: Send + 'static>(
        &self,
        p: Priority,
        f: impl FnOnce(&mut dyn Tx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (store, metrics) = (self.store.clone(), self.metrics.clone());
        let queue = match p {
            Priority::Interactive => "interactive",
            Priority::Normal => "normal",
        };
        let queued = std::time::Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel::<Result<T>>();
        let job: Job = Box::new(move || {
            if tx.is_closed() {
                return;
            }
            let started = std::time::Instant::now();
            metrics
                .store_wait
                .observe(&[queue], (started - queued).as_secs_f64());
            let out = store.transact_at(p, f);
            metrics
                .store_run
                .observe(&[queue], started.elapsed().as_secs_f64());
            let _ = tx.send(out);
        });
        {
            let mut q = self.shared.lock();
            match p {
                Priority::Interactive => q.interactive.push_back(job),
                Priority::Normal => q.normal.push_back(job),
            }
        }
        self.shared.ready.notify_one();
        rx.await.map_err(|_| {
            crate::error::CoordError::Setup(
                "the store's thread dropped the transaction (it panicked)".into(),
            )
        })?
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_one();
    }
}

/// The store thread's loop: the next job by priority until closed and empty.
fn serve(shared: &Shared) {
    loop {
        let job = {
            let mut q = shared.lock();
            loop {
                if let Some(j) = q.next() {
                    break j;
                }
                if q.closed {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        // A panicking transaction is rolled back by its store and its caller
        // told (its answer channel dropped); the thread goes on.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            tracing::error!("a store transaction panicked; its caller gets an error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// With a busy store and many normal turns waiting, an interactive turn
    /// is next, and normal turns still get through between interactive runs.
    #[test]
    fn interactive_turns_go_first_and_normal_ones_are_not_starved() {
        let turns = Arc::new(Turns::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = turns.acquire(Priority::Normal);
        let waiting = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for i in 0..6 {
            let (turns, order, waiting) = (turns.clone(), order.clone(), waiting.clone());
            threads.push(std::thread::spawn(move || {
                waiting.fetch_add(1, Ordering::SeqCst);
                let _t = turns.acquire(Priority::Normal);
                order.lock().unwrap().push(format!("n{i}"));
                std::thread::sleep(Duration::from_millis(2));
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while turns.lock().normal_waiting < 6 {
            assert!(Instant::now() < deadline, "the normal turns never queued");
            std::thread::sleep(Duration::from_millis(1));
        }
        let (t2, o2) = (turns.clone(), order.clone());
        let reader = std::thread::spawn(move || {
            let _t = t2.acquire(Priority::Interactive);
            o2.lock().unwrap().push("read".to_string());
        });
        while turns.lock().interactive_waiting < 1 {
            assert!(Instant::now() < deadline, "the read never queued");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(held);
        reader.join().unwrap();
        for t in threads {
            t.join().unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.len(), 7);
        assert_eq!(order[0], "read", "{order:?}");
    }

    #[test]
    fn a_storm_of_reads_lets_normal_turns_through() {
        let turns = Arc::new(Turns::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut readers = Vec::new();
        for _ in 0..4 {
            let (turns, stop) = (turns.clone(), stop.clone());
            readers.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _t = turns.acquire(Priority::Interactive);
                    std::thread::sleep(Duration::from_micros(200));
                }
            }));
        }
        let t = Instant::now();
        for _ in 0..20 {
            let _t = turns.acquire(Priority::Normal);
        }
        let took = t.elapsed();
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        // 20 normal turns, each after at most 8 reads of ~0.2 ms.
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    fn executor() -> Executor {
        let store = crate::store::SqliteStore::in_memory().unwrap();
        Executor::new(
            Arc::new(Prioritized::new(Arc::new(store))),
            Arc::new(crate::metrics::Metrics::default()),
        )
        .unwrap()
    }

    /// A transaction that panics is an error for its caller; the store's
    /// thread goes on with the next one.
    #[tokio::test]
    async fn a_panicking_transaction_is_an_error_and_the_thread_goes_on() {
        let ex = executor();
        let r: Result<()> = ex
            .run(Priority::Normal, |_tx| -> Result<()> { panic!("boom") })
            .await;
        let e = r.unwrap_err().to_string();
        assert!(e.contains("panicked"), "{e}");
        let v = ex
            .run(Priority::Normal, |tx| tx.get_meta("nothing"))
            .await
            .unwrap();
        assert_eq!(v, None);
    }

    /// While the thread is busy, a queued read goes before queued writes,
    /// writes keep their order, and a caller that gave up is skipped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_reads_go_first_and_abandoned_jobs_are_skipped() {
        let ex = Arc::new(executor());
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = started.clone();
        let ex2 = ex.clone();
        let first = tokio::spawn(async move {
            ex2.run(Priority::Normal, move |_tx| {
                s2.store(true, Ordering::SeqCst);
                let _ = hold_rx.recv();
                Ok(())
            })
            .await
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !started.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the first job never ran");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let push = |name: String, p: Priority| {
            let (ex, order) = (ex.clone(), order.clone());
            tokio::spawn(async move {
                ex.run(p, move |_tx| {
                    order.lock().unwrap().push(name);
                    Ok(())
                })
                .await
            })
        };
        for i in 0..3 {
            tasks.push(push(format!("w{i}"), Priority::Normal));
            while ex.shared.lock().normal.len() < i + 1 {
                assert!(Instant::now() < deadline, "a write never queued");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        // A caller that stops waiting: its job is skipped.
        let gone = push("gone".into(), Priority::Normal);
        while ex.shared.lock().normal.len() < 4 {
            assert!(
                Instant::now() < deadline,
                "the abandoned write never queued"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        gone.abort();
        let _ = gone.await;
        let read = push("read".into(), Priority::Interactive);
        while ex.shared.lock().interactive.is_empty() {
            assert!(Instant::now() < deadline, "the read never queued");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        hold_tx.send(()).unwrap();
        first.await.unwrap().unwrap();
        read.await.unwrap().unwrap();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["read", "w0", "w1", "w2"]);
        // Every job that ran is timed; the abandoned one is not.
        assert_eq!(ex.metrics.store_wait.count(&["normal"]), 4);
        assert_eq!(ex.metrics.store_run.count(&["normal"]), 4);
        assert_eq!(ex.metrics.store_wait.count(&["interactive"]), 1);
    }
}
