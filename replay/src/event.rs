//! The discrete-event core shared by the models: a priority queue of timestamped
//! events ordered by (time, insertion order). Ties are broken by insertion order so
//! that a replay is deterministic: the same inputs give bit-identical outputs.
//!
//! Events scheduled at the current time (a rank resuming when a message lands)
//! skip the heap: they wait in a first-in first-out line, which gives the same
//! order as the heap would (they all have the current time and come last) for
//! a fraction of the cost.
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// Simulated time in nanoseconds (f64, as Dimemas's `t_nano`).
pub type Nanos = f64;

/// `t` as an unsigned key whose order is `f64::total_cmp`'s (the same
/// transform), so comparing entries is comparing integers.
fn time_key(t: Nanos) -> u64 {
    let b = t.to_bits() as i64;
    ((b ^ ((((b >> 63) as u64) >> 1) as i64)) as u64) ^ (1 << 63)
}

/// The time of a [`time_key`] (the transform is its own inverse).
fn key_time(k: u64) -> Nanos {
    let b = (k ^ (1 << 63)) as i64;
    f64::from_bits((b ^ ((((b >> 63) as u64) >> 1) as i64)) as u64)
}

struct Entry<E> {
    key: u64,
    seq: u64,
    ev: E,
}

impl<E> Entry<E> {
    fn time(&self) -> Nanos {
        key_time(self.key)
    }
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        (other.key, other.seq).cmp(&(self.key, self.seq))
    }
}

/// A min-queue of events.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    /// Events at one time, in insertion order (all of `now`'s time).
    line: VecDeque<Entry<E>>,
    /// The [`time_key`] of the last event popped.
    now: Option<u64>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            line: VecDeque::new(),
            now: None,
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `ev` at `time`.
    pub fn push(&mut self, time: Nanos, ev: E) {
        self.seq += 1;
        let key = time_key(time);
        let e = Entry {
            key,
            seq: self.seq,
            ev,
        };
        // The line holds events of one time only, so it stays in (time, seq) order.
        if self.now == Some(key) && self.line.back().is_none_or(|b| b.key == key) {
            self.line.push_back(e);
        } else {
            self.heap.push(e);
        }
    }

    /// The earliest event.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        // `Entry`'s order is reversed: the greater entry is the earlier event.
        let from_line = match (self.line.front(), self.heap.peek()) {
            (Some(l), Some(h)) => l > h,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let e = if from_line {
            self.line.pop_front()
        } else {
            self.heap.pop()
        }?;
        self.now = Some(e.key);
        Some((e.time(), e.ev))
    }

    /// Pending events.
    pub fn len(&self) -> usize {
        self.heap.len() + self.line.len()
    }

    /// No pending event.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty() && self.line.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_keys_order_as_total_cmp_and_give_the_time_back() {
        let ts = [
            f64::NEG_INFINITY,
            -3.5,
            -0.0,
            0.0,
            1e-300,
            0.5,
            1.0,
            7e9,
            f64::INFINITY,
        ];
        for a in ts {
            assert_eq!(key_time(time_key(a)).to_bits(), a.to_bits());
            for b in ts {
                assert_eq!(time_key(a).cmp(&time_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }

    #[test]
    fn earliest_first_then_insertion_order() {
        let mut q = EventQueue::default();
        q.push(5.0, "b");
        q.push(1.0, "a");
        q.push(5.0, "c");
        q.push(0.5, "z");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(order, vec!["z", "a", "b", "c"]);
    }

    /// Events pushed at the current time (the line) come out exactly as one
    /// heap ordered by (time, insertion) gives them: both queues get the same
    /// pushes (at the popped time, later, and earlier) and must pop the same.
    #[test]
    fn the_same_time_line_keeps_the_heap_order() {
        let mut q = EventQueue::default();
        let mut reference: Vec<(f64, u64)> = Vec::new();
        let mut seq = 0u64;
        for t in [3.0, 1.0, 1.0, 2.0] {
            seq += 1;
            q.push(t, seq);
            reference.push((t, seq));
        }
        let mut x = 7u64;
        let mut pops = 0;
        let mut from_line = 0;
        while let Some(pos) = (0..reference.len()).min_by(|&a, &b| {
            let (ra, rb) = (reference[a], reference[b]);
            ra.0.total_cmp(&rb.0).then(ra.1.cmp(&rb.1))
        }) {
            let want = reference.remove(pos);
            from_line += usize::from(!q.line.is_empty());
            assert_eq!(q.pop(), Some(want), "pop {pops}");
            pops += 1;
            let t = want.0;
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if pops < 500 {
                let times: &[f64] = match x >> 61 {
                    0..=2 => &[t],
                    3 => &[t, t],
                    4 => &[t, t + 1.0],
                    5 => &[t - 0.5, t],
                    _ => &[t + 2.0],
                };
                for &nt in times {
                    seq += 1;
                    q.push(nt, seq);
                    reference.push((nt, seq));
                }
            }
        }
        assert!(q.is_empty());
        assert!(
            pops > 500 && from_line > 100,
            "{pops} pops, {from_line} from the line"
        );
    }
}
