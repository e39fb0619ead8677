//! [`IntRuns`]: an `Int32` column held as runs of arithmetic sequences
//! instead of values, for columns that follow from a table's structure (the
//! sender and partner ranks of `linktest_timings`: 16.8 M values for one
//! 4,096-rank run, but two or three runs per rank). The lake encodes such a
//! column a block at a time ([`super::ParquetEncoder::write_row_group_columns`])
//! without ever storing its values, into the same bytes as the values
//! themselves would give.
use arrow::array::Int32Array;

/// One run: `len` values `first`, `first + step`, … (wrapping in i32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: i32,
    len: usize,
    step: i32,
}

impl Run {
    fn value(&self, i: usize) -> i32 {
        // Wrapping (mod 2^32, so `i as i32` loses nothing that matters).
        self.first.wrapping_add(self.step.wrapping_mul(i as i32))
    }

    fn last(&self) -> i32 {
        self.value(self.len - 1)
    }
}

/// An `Int32` column as runs (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntRuns {
    runs: Vec<Run>,
    len: usize,
}

impl IntRuns {
    /// An empty column.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every value (keeps the memory).
    pub fn clear(&mut self) {
        self.runs.clear();
        self.len = 0;
    }

    /// Appends one value.
    pub fn push(&mut self, v: i32) {
        self.push_run(v, 1, 0);
    }

    /// Appends `len` values `first`, `first + step`, …
    pub fn push_run(&mut self, first: i32, len: usize, step: i32) {
        if len == 0 {
            return;
        }
        self.len += len;
        // A single value has no step of its own.
        let step = (len > 1).then_some(step);
        if let Some(last) = self.runs.last_mut() {
            if last.len == 1 {
                // A single value takes the step to the new values when they
                // go on with it.
                let d = first.wrapping_sub(last.first);
                if step.is_none_or(|s| s == d) {
                    last.step = d;
                    last.len += len;
                    return;
                }
            } else if first == last.value(last.len) && step.is_none_or(|s| s == last.step) {
                last.len += len;
                return;
            }
        }
        self.runs.push(Run {
            first,
            len,
            step: step.unwrap_or(0),
        });
    }

    /// The single value every row holds, if there is one.
    pub fn constant(&self) -> Option<i32> {
        let first = self.runs.first()?.first;
        self.runs
            .iter()
            .all(|r| r.first == first && (r.step == 0 || r.len == 1))
            .then_some(first)
    }

    /// Minimum and maximum (None when empty).
    pub fn min_max(&self) -> Option<(i32, i32)> {
        let mut it = self.runs.iter().map(|r| {
            let (a, b) = (r.first, r.last());
            // A run that wraps around i32 holds both extremes' neighbours:
            // look at every value then (never for ranks).
            if r.len > 2 && r.step != 0 && wraps(r) {
                let (mut lo, mut hi) = (a, a);
                for i in 0..r.len {
                    let v = r.value(i);
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
                (lo, hi)
            } else {
                (a.min(b), a.max(b))
            }
        });
        let first = it.next()?;
        Some(it.fold(first, |(lo, hi), (l, h)| (lo.min(l), hi.max(h))))
    }

    /// The values, made (small tables go through arrow-rs's writer).
    pub fn to_array(&self) -> Int32Array {
        let mut v = vec![0; self.len];
        self.cursor().fill(&mut v);
        Int32Array::from(v)
    }

    /// A reader of the values from the start.
    pub(super) fn cursor(&self) -> RunsCursor<'_> {
        RunsCursor {
            runs: &self.runs,
            run: 0,
            at: 0,
        }
    }
}

/// Whether the run's values overflow i32 along the way (then they are not
/// monotonic).
fn wraps(r: &Run) -> bool {
    i64::try_from(r.len - 1)
        .ok()
        .and_then(|n| i64::from(r.step).checked_mul(n))
        .and_then(|d| d.checked_add(i64::from(r.first)))
        .is_none_or(|last| i32::try_from(last).is_err())
}

/// Reads the values of [`IntRuns`] in order.
pub(super) struct RunsCursor<'a> {
    runs: &'a [Run],
    run: usize,
    at: usize,
}

impl RunsCursor<'_> {
    /// When the next `n` values lie in the current run and the first of
    /// them is `prev` + the run's step (so every delta from `prev` on is the
    /// step), skips them and returns (step, the last of them).
    pub(super) fn skip_uniform(&mut self, n: usize, prev: i32) -> Option<(i32, i32)> {
        let r = self.runs.get(self.run)?;
        if n == 0 || self.at + n > r.len || r.value(self.at).wrapping_sub(prev) != r.step {
            return None;
        }
        let last = r.value(self.at + n - 1);
        self.at += n;
        if self.at == r.len {
            self.run += 1;
            self.at = 0;
        }
        Some((r.step, last))
    }

    /// Fills `out` with the next values; returns how many there were (fewer
    /// than `out.len()` only at the end).
    pub(super) fn fill(&mut self, out: &mut [i32]) -> usize {
        let mut filled = 0;
        while filled < out.len() {
            let Some(r) = self.runs.get(self.run) else {
                break;
            };
            let take = (r.len - self.at).min(out.len() - filled);
            let mut v = r.value(self.at);
            for o in &mut out[filled..filled + take] {
                *o = v;
                v = v.wrapping_add(r.step);
            }
            filled += take;
            self.at += take;
            if self.at == r.len {
                self.run += 1;
                self.at = 0;
            }
        }
        filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(r: &IntRuns) -> Vec<i32> {
        r.to_array().values().to_vec()
    }

    #[test]
    fn runs_hold_exactly_the_values_pushed() {
        let mut r = IntRuns::new();
        let mut want = Vec::new();
        // A rank's partners (two ascending ranges around itself), a constant
        // run, single values that form a sequence, and values that do not.
        for (first, len, step) in [(0, 5, 1), (6, 4, 1), (7, 3, 0), (7, 1, 0), (3, 0, 1)] {
            r.push_run(first, len, step);
            want.extend((0..len).map(|i| first + step * i as i32));
        }
        for v in [10, 12, 14, 15, 15, 15, -4, i32::MAX, i32::MIN] {
            r.push(v);
            want.push(v);
        }
        assert_eq!(values(&r), want);
        assert_eq!(r.len(), want.len());
        assert_eq!(r.min_max(), Some((i32::MIN, i32::MAX)));
        assert_eq!(r.constant(), None);
        // Read in odd-sized pieces, as pages and blocks do.
        let mut c = r.cursor();
        let mut got = Vec::new();
        let mut buf = [0; 7];
        loop {
            let n = c.fill(&mut buf);
            got.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                break;
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn constant_columns_and_wrapping_runs() {
        let mut r = IntRuns::new();
        r.push_run(3, 10, 0);
        r.push(3);
        r.push_run(3, 2, 0);
        assert_eq!(
            (r.constant(), r.min_max(), r.len()),
            (Some(3), Some((3, 3)), 13)
        );
        let mut w = IntRuns::new();
        w.push_run(i32::MAX - 1, 4, 1);
        assert_eq!(values(&w), [i32::MAX - 1, i32::MAX, i32::MIN, i32::MIN + 1]);
        assert_eq!(w.min_max(), Some((i32::MIN, i32::MAX)));
        assert_eq!(IntRuns::new().min_max(), None);
        assert_eq!(IntRuns::new().constant(), None);
    }
}
