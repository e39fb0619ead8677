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

    fn concurrent_transactions(&self) -> Option<usize> {
        self.inner.concurrent_transactions()
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
}
