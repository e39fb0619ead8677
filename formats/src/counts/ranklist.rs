//! The compressed integer-list notation of the profiler (`0-3, 5, 7-9`): used for
//! the ranks of a count row, the calls of a block, and the lists of the location
//! and backtrace files. This module owns parsing (with the tolerated variants),
//! counting and writing (both the profiler's `", "` and the Go tools' `","`).
use serde::{Deserialize, Serialize};

/// An inclusive range `start..=end` of a list.
pub type Span = (u64, u64);

/// A parse error: 0-based byte offset in the parsed text and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListError {
    /// Byte offset of the offending character in the parsed text.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

fn err(offset: usize, message: impl Into<String>) -> ListError {
    ListError {
        offset,
        message: message.into(),
    }
}

/// Parses one unsigned decimal at `s[i..]`; returns the value and the index after it.
fn number(s: &[u8], i: usize) -> Result<(u64, usize), ListError> {
    let mut j = i;
    let mut v: u64 = 0;
    while let Some(&c) = s.get(j) {
        if !c.is_ascii_digit() {
            break;
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or_else(|| err(i, "number does not fit in 64 bits"))?;
        j += 1;
    }
    if j == i {
        return Err(match s.get(i) {
            Some(c) => err(i, format!("expected a number, found '{}'", char::from(*c))),
            None => err(i, "expected a number, found the end of the list"),
        });
    }
    Ok((v, j))
}

/// Parses `item (SEP item)*` where item is `INT` or `INT-INT` (start <= end) and SEP
/// is `", "` (what the profiler writes) or `","` (the seed's examples and the Go
/// tools' output). Mixing both separators in one list is rejected, as the Go reader
/// does, because it signals a hand-edited or corrupted list. Items must be strictly
/// ascending and disjoint: the profiler only writes such lists, and it rules out a
/// rank being listed twice.
pub fn parse(s: &[u8]) -> Result<Vec<Span>, ListError> {
    parse_with(s, true)
}

/// Like [`parse`], but keeps the items in the order written without requiring
/// them to ascend: location files list world ranks and PIDs in communicator-rank
/// order, which need not be sorted.
pub fn parse_ordered(s: &[u8]) -> Result<Vec<Span>, ListError> {
    parse_with(s, false)
}

fn parse_with(s: &[u8], ascending: bool) -> Result<Vec<Span>, ListError> {
    let mut out: Vec<Span> = Vec::new();
    let mut i = 0;
    let mut sep: Option<&'static [u8]> = None;
    loop {
        let (a, j) = number(s, i)?;
        let (b, j) = if s.get(j) == Some(&b'-') {
            let (b, k) = number(s, j + 1)?;
            if b < a {
                return Err(err(j + 1, format!("descending range {a}-{b}")));
            }
            (b, k)
        } else {
            (a, j)
        };
        if ascending
            && let Some(&(_, prev_end)) = out.last()
            && a <= prev_end
        {
            return Err(err(
                i,
                format!("list is not strictly ascending ({a} after {prev_end})"),
            ));
        }
        out.push((a, b));
        i = j;
        match s.get(i) {
            None => return Ok(out),
            Some(b',') => {
                let this: &'static [u8] = if s.get(i + 1) == Some(&b' ') {
                    b", "
                } else {
                    b","
                };
                match sep {
                    None => sep = Some(this),
                    Some(prev) if prev != this => {
                        return Err(err(
                            i,
                            "mixed ', ' and ',' separators in one list (ambiguous)",
                        ));
                    }
                    Some(_) => {}
                }
                i += this.len();
            }
            Some(c) => {
                return Err(err(
                    i,
                    format!(
                        "expected ',' or the end of the list, found '{}'",
                        char::from(*c)
                    ),
                ));
            }
        }
    }
}

/// Parses the pre-v1 call list: call IDs separated by single spaces (`0 1 2`).
pub fn parse_spaced(s: &[u8]) -> Result<Vec<Span>, ListError> {
    let mut out: Vec<Span> = Vec::new();
    let mut i = 0;
    loop {
        let (a, j) = number(s, i)?;
        if let Some(&(_, prev)) = out.last()
            && a <= prev
        {
            return Err(err(
                i,
                format!("call list is not ascending ({a} after {prev})"),
            ));
        }
        out.push((a, a));
        match s.get(j) {
            None => return Ok(coalesce(out)),
            Some(b' ') => i = j + 1,
            Some(c) => {
                return Err(err(
                    j,
                    format!(
                        "expected ' ' or the end of the list, found '{}'",
                        char::from(*c)
                    ),
                ));
            }
        }
    }
}

/// Number of integers in a list of spans (saturating; spans come from [`parse`]).
pub fn count(spans: &[Span]) -> u64 {
    spans
        .iter()
        .map(|(a, b)| (b - a).saturating_add(1))
        .fold(0u64, |acc, n| acc.saturating_add(n))
}

/// Sorts and merges touching or overlapping spans.
pub fn coalesce(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable();
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Writes a list in compressed notation with separator `sep` (`", "` for the
/// profiler's style, `","` for the Go tools' reports). Spans are coalesced first.
pub fn format(spans: &[Span], sep: &str) -> String {
    let mut s = String::new();
    for (k, (a, b)) in coalesce(spans.to_vec()).iter().enumerate() {
        if k > 0 {
            s.push_str(sep);
        }
        if a == b {
            s.push_str(&a.to_string());
        } else {
            s.push_str(&format!("{a}-{b}"));
        }
    }
    s
}

/// Keeps only the integers `< limit`.
pub fn clip_below(spans: &[Span], limit: u64) -> Vec<Span> {
    spans
        .iter()
        .filter(|(a, _)| *a < limit)
        .map(|&(a, b)| (a, b.min(limit.saturating_sub(1))))
        .collect()
}

/// Expands a list into its integers, refusing to build more than `max` of them.
pub fn expand(spans: &[Span], max: u64) -> Option<Vec<u64>> {
    if count(spans) > max {
        return None;
    }
    Some(spans.iter().flat_map(|&(a, b)| a..=b).collect())
}

/// A list of call IDs, kept as spans so `0-999999` costs two integers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallList(pub Vec<Span>);

impl CallList {
    /// Number of calls.
    pub fn len(&self) -> u64 {
        count(&self.0)
    }
    /// No calls.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Lowest call.
    pub fn first(&self) -> Option<u64> {
        self.0.iter().map(|s| s.0).min()
    }
    /// Whether `call` is in the list.
    pub fn contains(&self, call: u64) -> bool {
        self.0.iter().any(|&(a, b)| a <= call && call <= b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_profiler_and_seed_lists() {
        assert_eq!(parse(b"0-3, 5").unwrap(), vec![(0, 3), (5, 5)]);
        assert_eq!(parse(b"1-5,1024").unwrap(), vec![(1, 5), (1024, 1024)]);
        assert_eq!(parse(b"7").unwrap(), vec![(7, 7)]);
        assert_eq!(parse_spaced(b"0 1 2 5").unwrap(), vec![(0, 2), (5, 5)]);
    }

    #[test]
    fn rejects_bad_lists_with_offsets() {
        assert_eq!(parse(b"0, 2,3").unwrap_err().offset, 4);
        assert_eq!(parse(b"3-1").unwrap_err().offset, 2);
        assert_eq!(parse(b"1, 1").unwrap_err().offset, 3);
        assert_eq!(parse(b"1,,2").unwrap_err().offset, 2);
        assert_eq!(parse(b"").unwrap_err().offset, 0);
        assert_eq!(parse(b"1 2").unwrap_err().offset, 1);
        assert_eq!(parse(b"0-").unwrap_err().offset, 2);
        assert!(
            parse(b"99999999999999999999")
                .unwrap_err()
                .message
                .contains("64 bits")
        );
    }

    #[test]
    fn formats_like_go_and_profiler() {
        let s = vec![(0, 1), (3, 3), (5, 5)];
        assert_eq!(format(&s, ","), "0-1,3,5");
        assert_eq!(format(&s, ", "), "0-1, 3, 5");
        assert_eq!(format(&[(3, 3), (0, 2)], ","), "0-3");
        assert_eq!(clip_below(&[(0, 5), (9, 9)], 4), vec![(0, 3)]);
    }

    fn sorted_set() -> impl Strategy<Value = Vec<u64>> {
        proptest::collection::btree_set(0u64..5000, 1..200).prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #[test]
        fn roundtrip_both_separators(ids in sorted_set(), spaced in any::<bool>()) {
            let spans: Vec<Span> = ids.iter().map(|&i| (i, i)).collect();
            let text = format(&spans, if spaced { ", " } else { "," });
            let back = parse(text.as_bytes()).unwrap();
            prop_assert_eq!(expand(&back, 10_000).unwrap(), ids.clone());
            prop_assert_eq!(count(&back), ids.len() as u64);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(spans) = parse(&bytes) {
                // Whatever parses is ascending and disjoint.
                for w in spans.windows(2) {
                    prop_assert!(w[0].1 < w[1].0);
                }
                for (a, b) in spans {
                    prop_assert!(a <= b);
                }
            }
        }

        #[test]
        fn mixed_separators_always_rejected(ids in proptest::collection::btree_set(0u64..1000, 3..50)) {
            let ids: Vec<u64> = ids.into_iter().collect();
            let mut text = ids[0].to_string();
            for (k, id) in ids.iter().enumerate().skip(1) {
                text.push_str(if k == 1 { "," } else { ", " });
                text.push_str(&id.to_string());
            }
            prop_assert!(parse(text.as_bytes()).is_err());
        }
    }
}
