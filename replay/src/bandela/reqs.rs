//! A rank's live requests by id. A rank has a handful live at a time, so they
//! sit in a short vector searched in place (a hash of every id, per record,
//! was a tenth of the event loop); past [`INLINE`] the rest go to a hash map,
//! so a trace that keeps thousands live costs no more than before.
use std::collections::HashMap;

/// Requests kept in the vector before the map is used.
const INLINE: usize = 16;

/// Live requests, id → `V`.
pub(crate) struct Reqs<V> {
    small: Vec<(i64, V)>,
    big: HashMap<i64, V>,
}

impl<V> Default for Reqs<V> {
    fn default() -> Self {
        Self {
            small: Vec::new(),
            big: HashMap::new(),
        }
    }
}

impl<V> Reqs<V> {
    /// Sets `id`'s value; the value it had, if it was live.
    pub(crate) fn insert(&mut self, id: i64, v: V) -> Option<V> {
        if let Some(slot) = self.get_mut(&id) {
            return Some(std::mem::replace(slot, v));
        }
        if self.small.len() < INLINE {
            self.small.push((id, v));
            None
        } else {
            self.big.insert(id, v)
        }
    }

    pub(crate) fn get(&self, id: &i64) -> Option<&V> {
        match self.small.iter().find(|(k, _)| k == id) {
            Some((_, v)) => Some(v),
            None if self.big.is_empty() => None,
            None => self.big.get(id),
        }
    }

    pub(crate) fn get_mut(&mut self, id: &i64) -> Option<&mut V> {
        match self.small.iter_mut().find(|(k, _)| k == id) {
            Some((_, v)) => Some(v),
            None if self.big.is_empty() => None,
            None => self.big.get_mut(id),
        }
    }

    pub(crate) fn contains_key(&self, id: &i64) -> bool {
        self.get(id).is_some()
    }

    /// Ends `id`; its value.
    pub(crate) fn remove(&mut self, id: &i64) -> Option<V> {
        match self.small.iter().position(|(k, _)| k == id) {
            Some(p) => Some(self.small.swap_remove(p).1),
            None if self.big.is_empty() => None,
            None => self.big.remove(id),
        }
    }

    /// Every live request, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&i64, &V)> {
        self.small
            .iter()
            .map(|(k, v)| (k, v))
            .chain(self.big.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of inserts and removes leaves what a hash map leaves,
        /// on both sides of the inline limit.
        #[test]
        fn behaves_as_a_map(ops in prop::collection::vec((any::<bool>(), 0i64..40, any::<u16>()), 0..400)) {
            let mut r = Reqs::default();
            let mut m = HashMap::new();
            for (ins, id, v) in ops {
                if ins {
                    prop_assert_eq!(r.insert(id, v), m.insert(id, v));
                } else {
                    prop_assert_eq!(r.remove(&id), m.remove(&id));
                }
                prop_assert_eq!(r.get(&id), m.get(&id));
                prop_assert_eq!(r.contains_key(&id), m.contains_key(&id));
                let mut a: Vec<(i64, u16)> = r.iter().map(|(k, v)| (*k, *v)).collect();
                let mut b: Vec<(i64, u16)> = m.iter().map(|(k, v)| (*k, *v)).collect();
                a.sort_unstable();
                b.sort_unstable();
                prop_assert_eq!(a, b);
            }
        }
    }
}
