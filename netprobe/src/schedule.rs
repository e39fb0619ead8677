//! The step schedule: a round-robin 1-factorization of the ranks (the "circle
//! method"), so that in each step every rank has one partner and over all steps
//! each pair meets exactly once. Odd rank counts get a virtual rank; whoever
//! is paired with it idles in that step.

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
}
