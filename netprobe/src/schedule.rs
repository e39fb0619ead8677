//! The step schedule: a round-robin 1-factorization of the ranks (the "circle
//! method"), so that in each step every rank has one partner and over all steps
//! each pair meets exactly once. Odd rank counts get a virtual rank; whoever
//! is paired with it idles in that step.
//!
//! A run is a list of [`Iteration`]s (LinkTest's permutations): iteration 0
//! keeps the ranks in order, iterations 1..=R place the ranks on the schedule's
//! slots in a seeded random order, and with step randomization each iteration
//! runs its steps in a seeded random order. Everything derives from one seed
//! (the file's "task seed"), so [`plan`] regenerates the exact order from a
//! file's header.

/// Steps for `n` ranks: n − 1 for even n, n for odd n (0 for n < 2).
pub fn steps_for(n: usize) -> usize {
    match n {
        0 | 1 => 0,
        n if n % 2 == 0 => n - 1,
        n => n,
    }
}

/// Partner of `rank` in `step` (1-based), or `None` when it idles (odd n).
pub fn partner(rank: usize, step: usize, n: usize) -> Option<usize> {
    if rank >= n || step == 0 || step > steps_for(n) {
        return None;
    }
    // Even m = n rounded up; rank m − 1 is the fixed point of the circle.
    let m = n + n % 2;
    let k = m - 1;
    let s = step - 1;
    let p = if rank == k {
        // The r with 2r ≡ s (mod k); k is odd, so 2 has an inverse (k + 1) / 2.
        (s * k.div_ceil(2)) % k
    } else {
        let q = (s + k - rank % k) % k;
        if q == rank { k } else { q }
    };
    (p < n).then_some(p)
}

/// The steps 1..=steps_for(n) in a seeded random order (Fisher–Yates with
/// xorshift64*, so a recorded seed reproduces the order on every rank).
pub fn shuffled_steps(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (1..=steps_for(n)).collect();
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    if x == 0 {
        x = 1;
    }
    for i in (1..v.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let j = (r % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// splitmix64: turns (seed, stream index) into well-mixed sub-seeds.
fn mix(seed: u64, k: u64) -> u64 {
    let mut z = seed
        .wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The ranks 0..n in a seeded random order (Fisher–Yates, xorshift64*).
pub fn shuffled_ranks(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    if x == 0 {
        x = 1;
    }
    for i in (1..v.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let j = (r % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// One iteration (LinkTest permutation) of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iteration {
    /// `rank_at[slot]`: the rank placed on schedule slot `slot`.
    pub rank_at: Vec<usize>,
    /// `slot_of[rank]`: the inverse of `rank_at`.
    pub slot_of: Vec<usize>,
    /// The schedule's steps (1-based) in the order they run.
    pub order: Vec<usize>,
}

impl Iteration {
    /// Ranks.
    pub fn n(&self) -> usize {
        self.rank_at.len()
    }

    /// Partner of `rank` in schedule step `step`, or `None` when it idles.
    pub fn partner(&self, rank: usize, step: usize) -> Option<usize> {
        let n = self.n();
        let slot = *self.slot_of.get(rank)?;
        partner(slot, step, n).and_then(|q| self.rank_at.get(q).copied())
    }

    /// Pairs `(a, b)` with `a < b` of schedule step `step`, ascending by `a`.
    pub fn pairs(&self, step: usize) -> Vec<(usize, usize)> {
        (0..self.n())
            .filter_map(|r| self.partner(r, step).filter(|p| r < *p).map(|p| (r, p)))
            .collect()
    }

    /// `steps[i * n + j]`: the executed step (1-based position in `order`) in
    /// which ranks i and j meet; 0 on the diagonal. What the file's access
    /// pattern holds for this iteration.
    pub fn step_matrix(&self) -> Vec<i32> {
        let n = self.n();
        let mut m = vec![0i32; n * n];
        for (e, s) in self.order.iter().enumerate() {
            for (a, b) in self.pairs(*s) {
                for k in [a * n + b, b * n + a] {
                    if let Some(x) = m.get_mut(k) {
                        *x = e as i32 + 1;
                    }
                }
            }
        }
        m
    }
}

/// The iterations of a run of `n` ranks: iteration 0 in rank order, then
/// `randomized_tasks` iterations with seeded rank placements; each with its
/// steps shuffled when `randomize_steps`. All sub-seeds derive from `seed`.
pub fn plan(n: usize, randomized_tasks: u64, randomize_steps: bool, seed: u64) -> Vec<Iteration> {
    (0..=randomized_tasks)
        .map(|k| {
            let rank_at = if k == 0 {
                (0..n).collect()
            } else {
                shuffled_ranks(n, mix(seed, 2 * k))
            };
            let mut slot_of = vec![0usize; n];
            for (slot, r) in rank_at.iter().enumerate() {
                if let Some(x) = slot_of.get_mut(*r) {
                    *x = slot;
                }
            }
            let order = if randomize_steps {
                shuffled_steps(n, mix(seed, 2 * k + 1))
            } else {
                (1..=steps_for(n)).collect()
            };
            Iteration {
                rank_at,
                slot_of,
                order,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_meets_once_and_partners_are_mutual() {
        for n in 2..40 {
            let mut met = vec![0u32; n * n];
            for step in 1..=steps_for(n) {
                let mut busy = vec![false; n];
                for r in 0..n {
                    if let Some(p) = partner(r, step, n) {
                        assert_ne!(p, r, "n {n} step {step}");
                        assert_eq!(partner(p, step, n), Some(r), "n {n} step {step} rank {r}");
                        assert!(!busy[r]);
                        busy[r] = true;
                        met[r * n + p] += 1;
                    }
                }
                let idle = busy.iter().filter(|b| !**b).count();
                assert_eq!(idle, n % 2, "n {n} step {step}");
            }
            for i in 0..n {
                for j in 0..n {
                    assert_eq!(met[i * n + j], u32::from(i != j), "n {n} pair {i},{j}");
                }
            }
        }
        assert_eq!(partner(0, 1, 1), None);
        assert_eq!(partner(5, 1, 4), None);
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let a = shuffled_steps(16, 42);
        let mut s = a.clone();
        s.sort();
        assert_eq!(s, (1..=15).collect::<Vec<_>>());
        assert_eq!(a, shuffled_steps(16, 42));
        assert_ne!(a, shuffled_steps(16, 43));
    }

    #[test]
    fn plans_are_seeded_and_every_iteration_pairs_everyone_once() {
        let a = plan(9, 3, true, 11);
        assert_eq!(a, plan(9, 3, true, 11));
        assert_ne!(a, plan(9, 3, true, 12));
        assert_eq!(a.len(), 4);
        assert_eq!(a[0].rank_at, (0..9).collect::<Vec<_>>());
        assert_ne!(a[1].rank_at, a[2].rank_at);
        for it in &a {
            let m = it.step_matrix();
            for i in 0..9 {
                let mut seen: Vec<i32> = (0..9).filter(|j| *j != i).map(|j| m[i * 9 + j]).collect();
                assert!(seen.iter().all(|s| *s >= 1));
                seen.sort();
                seen.dedup();
                assert_eq!(seen.len(), 8, "one partner per step");
                for j in 0..9 {
                    assert_eq!(m[i * 9 + j], m[j * 9 + i]);
                }
            }
        }
        let fixed = plan(6, 0, false, 5);
        assert_eq!(fixed[0].order, vec![1, 2, 3, 4, 5]);
        assert_eq!(
            fixed,
            plan(6, 0, false, 99),
            "no randomization: the seed is unused"
        );
    }
}
