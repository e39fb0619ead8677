//! Which rank the Bandela event loop steps next: the unblocked rank with the
//! smallest clock, ties to the lowest rank (reference §3). A tournament tree
//! over the ranks answers in O(1) and is kept up to date in O(log ranks) per
//! rank whose clock or state changed, where a scan over every rank per record
//! made a 1,024-rank replay spend most of its time choosing.

/// A tournament tree over ranks keyed by `(clock, rank)`; ranks that cannot
/// run (blocked or finished) carry no key. Each node holds its winner's key,
/// so replaying a rank's matches reads only the nodes on its path.
pub(crate) struct Ready {
    /// Leaves start here (a power of two at least the number of ranks).
    base: usize,
    /// `tree[k]` is the winner of node `k`'s subtree; the leaves are
    /// `tree[base + rank]`.
    tree: Vec<Node>,
}

/// A candidate as one integer, ordered as the event loop chooses: a runnable
/// one first (bit 96), then the smaller clock (bits 32–95, in
/// `f64::total_cmp`'s order), then the lower rank (bits 0–31). One integer
/// comparison, without branches: which of two ranks' clocks is smaller is a
/// coin toss the processor cannot predict.
type Node = u128;

const BLOCKED: u128 = 1 << 96;

/// `x`'s place in `f64::total_cmp`'s order, as an unsigned integer.
fn order(x: f64) -> u64 {
    let b = x.to_bits() as i64;
    // total_cmp's own transformation (flip the magnitude of negatives), then
    // the sign bit moved so that unsigned comparison agrees.
    ((b ^ (((b >> 63) as u64) >> 1) as i64) as u64) ^ (1 << 63)
}

fn node(rank: usize, key: Option<f64>) -> Node {
    let rank = u128::from(u32::try_from(rank).unwrap_or(u32::MAX));
    match key {
        Some(c) => (u128::from(order(c)) << 32) | rank,
        None => BLOCKED | rank,
    }
}

impl Ready {
    /// `n` ranks, none of them runnable yet.
    pub(crate) fn new(n: usize) -> Self {
        let base = n.max(1).next_power_of_two();
        let mut tree: Vec<Node> = vec![node(usize::MAX, None); 2 * base];
        for (i, leaf) in tree.iter_mut().skip(base).enumerate() {
            *leaf = node(i, None);
        }
        for k in (1..base).rev() {
            let w = match (tree.get(2 * k), tree.get(2 * k + 1)) {
                (Some(a), Some(b)) => *a.min(b),
                _ => node(usize::MAX, None),
            };
            if let Some(t) = tree.get_mut(k) {
                *t = w;
            }
        }
        Self { base, tree }
    }

    /// Sets rank `r`'s key (`None`: it cannot run) and replays its matches.
    pub(crate) fn set(&mut self, r: usize, key: Option<f64>) {
        let mut w = node(r, key);
        let mut k = self.base + r;
        match self.tree.get_mut(k) {
            Some(t) if *t != w => *t = w,
            _ => return,
        }
        while k > 1 {
            let Some(&sib) = self.tree.get(k ^ 1) else {
                return;
            };
            w = w.min(sib);
            k /= 2;
            match self.tree.get_mut(k) {
                Some(t) => *t = w,
                None => return,
            }
        }
    }

    /// The runnable rank with the smallest clock (ties: the lowest rank).
    pub(crate) fn first(&self) -> Option<usize> {
        self.tree
            .get(1)
            .filter(|&&w| w & BLOCKED == 0)
            .map(|&w| (w & u128::from(u32::MAX)) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the event loop did before: a scan over every rank.
    fn scan(keys: &[Option<f64>]) -> Option<usize> {
        keys.iter()
            .enumerate()
            .filter_map(|(i, k)| k.map(|c| (i, c)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(i, _)| i)
    }

    #[test]
    fn order_is_total_cmp() {
        let xs = [
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            0.0,
            1e-300,
            3.0,
            f64::INFINITY,
            f64::NAN,
        ];
        for a in xs {
            for b in xs {
                assert_eq!(order(a).cmp(&order(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }

    #[test]
    fn one_rank_and_none_runnable() {
        let mut r = Ready::new(1);
        assert_eq!(r.first(), None);
        r.set(0, Some(3.0));
        assert_eq!(r.first(), Some(0));
        r.set(0, None);
        assert_eq!(r.first(), None);
    }

    proptest! {
        /// After any sequence of updates the tree picks what a scan picks,
        /// ties included (clocks drawn from a few values so that they tie).
        #[test]
        fn picks_what_a_scan_picks(
            n in 1usize..70,
            ops in prop::collection::vec((0usize..70, prop::option::of(-3i8..6)), 0..300),
        ) {
            let mut ready = Ready::new(n);
            let mut keys = vec![None; n];
            for (r, k) in ops {
                let r = r % n;
                let key = k.map(|v| f64::from(v) * 0.5);
                ready.set(r, key);
                keys[r] = key;
                prop_assert_eq!(ready.first(), scan(&keys));
            }
        }
    }
}
