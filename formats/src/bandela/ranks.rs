//! The tracer's rank map `bandela_ranks` (format v1, docs/tracer.md): which
//! host and node every rank of a traced run ran on, read by the `bandela`
//! ingest into `mpi_trace_ranks`.
//!
//! ```text
//! # benchlake-tracer ranks v1
//! ranks 3
//! 0 host-a n1
//! 1 host-a n2
//! 2 host-b n3
//! ```
//!
//! Line 1 names the format and its version; line 2 the number of ranks N;
//! then one line per rank (`rank hostname node`, any order), each rank of
//! 0..N-1 exactly once. Names are 1–255 bytes of printable ASCII without
//! spaces (the tracer writes `_` for anything else). Fields are separated by
//! spaces or tabs; empty lines are skipped; every rank line ends with a line
//! end (`\n` or `\r\n`), so a file cut inside its last name is an error,
//! not a shorter name. Errors name
//! the file, the field and the byte offset where it starts.
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;

use crate::error::{FormatError, Position, Result};

/// The file's name beside the rank files.
pub const FILE_NAME: &str = "bandela_ranks";

/// The first line's prefix; the version follows it.
pub const HEADER: &str = "# benchlake-tracer ranks v";

/// The version this reader reads.
pub const VERSION: u32 = 1;

/// At most this many ranks (bounds the memory a header can ask for).
pub const MAX_RANKS: usize = 1 << 24;

/// Longest host or node name accepted.
pub const MAX_NAME: usize = 255;

/// Where one rank ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankHost {
    pub rank: u32,
    /// `gethostname` of the rank's process.
    pub hostname: String,
    /// The Slurm node name (`SLURMD_NODENAME`) when set, else the agent's
    /// node name (`BENCHLAKE_NODE`), else the host name.
    pub node: String,
}

/// Reads a rank map file; rows in rank order.
pub fn read(path: &Path) -> Result<Vec<RankHost>> {
    let bytes = std::fs::read(path).map_err(|e| FormatError::io(path, e))?;
    parse(path, &bytes)
}

/// Fields of one line with their byte offsets in the file.
fn fields(line: &[u8], start: usize) -> Vec<(usize, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
            i += 1;
        }
        let s = i;
        while i < line.len() && line[i] != b' ' && line[i] != b'\t' {
            i += 1;
        }
        if i > s {
            out.push((start + s, &line[s..i]));
        }
    }
    out
}

/// Parses the bytes of a rank map (`path` names it in errors); rows in rank
/// order.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<RankHost>> {
    let bad = |field: &str, off: usize, msg: String| {
        FormatError::malformed(path, field, Position::Offset(off as u64), msg)
    };
    // (offset, line without its line end)
    let mut lines = Vec::new();
    let mut start = 0;
    for piece in bytes.split(|b| *b == b'\n') {
        let line = piece.strip_suffix(b"\r").unwrap_or(piece);
        lines.push((start, line));
        start += piece.len() + 1;
    }
    let end = bytes.len();
    let mut it = lines.into_iter();
    // Header and version.
    let (off, first) = it.next().unwrap_or((0, &[]));
    let Some(ver) = first.strip_prefix(HEADER.as_bytes()) else {
        return Err(bad(
            "header",
            off,
            format!("expected '{HEADER}{VERSION}' (not a benchlake-tracer rank map)"),
        ));
    };
    let ver_off = off + HEADER.len();
    let v = std::str::from_utf8(ver)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .ok_or_else(|| bad("version", ver_off, "not a number".into()))?;
    if v != VERSION {
        return Err(bad(
            "version",
            ver_off,
            format!("version {v} is not supported (this reader reads v{VERSION})"),
        ));
    }
    // Rank count.
    let Some((off, line)) = it.next() else {
        return Err(bad(
            "ranks",
            end,
            "the file ends before the 'ranks N' line".into(),
        ));
    };
    let f = fields(line, off);
    let n = match f.as_slice() {
        [(_, k), (o, v)] if *k == b"ranks" => std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|n| (1..=MAX_RANKS).contains(n))
            .ok_or_else(|| {
                bad(
                    "ranks",
                    *o,
                    format!(
                        "'{}' is not a rank count (1..={MAX_RANKS})",
                        String::from_utf8_lossy(v)
                    ),
                )
            })?,
        _ => return Err(bad("ranks", off, "expected 'ranks N'".into())),
    };
    // Memory follows the lines read, not the count declared: a 20-byte file
    // declaring 16 M ranks costs a 2 MB bit set, not a 16 M-slot table.
    let mut seen = vec![0u64; n.div_ceil(64)];
    let mut out: Vec<RankHost> = Vec::new();
    let mut read = 0usize;
    let name = |field: &str, o: usize, v: &[u8]| -> Result<String> {
        if v.len() > MAX_NAME {
            return Err(bad(
                field,
                o,
                format!("{} bytes long (at most {MAX_NAME})", v.len()),
            ));
        }
        if let Some(k) = v.iter().position(|b| !(0x21..0x7f).contains(b)) {
            return Err(bad(
                field,
                o + k,
                format!("byte 0x{:02x} is not printable ASCII", v[k]),
            ));
        }
        Ok(String::from_utf8_lossy(v).into_owned())
    };
    for (off, line) in it.by_ref() {
        if line.iter().all(|b| *b == b' ' || *b == b'\t') {
            continue; // empty lines (and the end of the last line)
        }
        if read == n {
            return Err(bad(
                "rank",
                off,
                format!("more lines than the {n} ranks declared"),
            ));
        }
        let f = fields(line, off);
        if off + line.len() >= end && !bytes.ends_with(b"\n") {
            return Err(bad(
                if f.len() >= 3 { "node" } else { "rank" },
                end,
                "the last line has no line end: the file is cut short".into(),
            ));
        }
        let [(ro, r), (ho, h), (no, nd)] = f.as_slice() else {
            let (field, at) = match f.len() {
                0 => ("rank", off),
                1 => ("hostname", off + line.len()),
                2 => ("node", off + line.len()),
                _ => ("node", f[3].0),
            };
            return Err(bad(
                field,
                at,
                format!("expected 'rank hostname node', found {} field(s)", f.len()),
            ));
        };
        let rank = std::str::from_utf8(r)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| {
                bad(
                    "rank",
                    *ro,
                    format!("'{}' is not a rank", String::from_utf8_lossy(r)),
                )
            })?;
        let r = rank as usize;
        if r >= n {
            return Err(bad(
                "rank",
                *ro,
                format!("rank {rank} is not below the {n} ranks declared"),
            ));
        }
        if seen[r / 64] & (1 << (r % 64)) != 0 {
            return Err(bad("rank", *ro, format!("rank {rank} appears twice")));
        }
        seen[r / 64] |= 1 << (r % 64);
        out.push(RankHost {
            rank,
            hostname: name("hostname", *ho, h)?,
            node: name("node", *no, nd)?,
        });
        read += 1;
    }
    if read < n {
        let missing = (0..n)
            .find(|r| seen[r / 64] & (1 << (r % 64)) == 0)
            .unwrap_or(read);
        return Err(bad(
            "rank",
            end,
            format!("the file ends after {read} of {n} ranks (rank {missing} is missing)"),
        ));
    }
    out.sort_unstable_by_key(|h| h.rank);
    Ok(out)
}

/// The `mpi_trace_ranks` table of a rank map read from `source`.
pub fn table(run_id: &str, source: &str, rows: &[RankHost]) -> Result<TableOutput> {
    let n = rows.len();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![run_id; n])),
        Arc::new(StringArray::from(vec![source; n])),
        Arc::new(Int32Array::from_iter_values(
            rows.iter()
                .map(|r| i32::try_from(r.rank).unwrap_or(i32::MAX)),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.hostname.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.node.as_str()),
        )),
    ];
    let batch = RecordBatch::try_new(catalog::schema("mpi_trace_ranks")?, cols)?;
    Ok(TableOutput::new("mpi_trace_ranks", vec![batch]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(text: &str) -> Result<Vec<RankHost>> {
        parse(Path::new("raw/R/t/bandela_ranks"), text.as_bytes())
    }

    fn err(text: &str) -> String {
        p(text).unwrap_err().to_string()
    }

    #[test]
    fn reads_ranks_in_any_order() {
        let r =
            p("# benchlake-tracer ranks v1\nranks 3\n2 hb n3\n0 ha n1\n1\tha   n2\n\n").unwrap();
        let got: Vec<(u32, &str, &str)> = r
            .iter()
            .map(|x| (x.rank, x.hostname.as_str(), x.node.as_str()))
            .collect();
        assert_eq!(got, [(0, "ha", "n1"), (1, "ha", "n2"), (2, "hb", "n3")]);
        // CRLF line ends; a last line without one is cut short.
        assert_eq!(
            p("# benchlake-tracer ranks v1\r\nranks 1\r\n0 h h\r\n")
                .unwrap()
                .len(),
            1
        );
        let e = p("# benchlake-tracer ranks v1\nranks 1\n0 h n1").unwrap_err();
        assert!(
            e.to_string().ends_with(
                "node at byte offset 42: the last line has no line end: the file is cut short"
            ),
            "{e}"
        );
        let t = table("R", "raw/R/t/bandela_ranks", &r).unwrap();
        assert_eq!(t.rows(), 3);
    }

    #[test]
    fn bad_input_names_field_and_offset() {
        let h = "# benchlake-tracer ranks v1\n"; // 28 bytes
        let cases: &[(String, &str)] = &[
            (String::new(), "header at byte offset 0"),
            ("# something else\n".into(), "header at byte offset 0"),
            (
                "# benchlake-tracer ranks v2\nranks 1\n0 h n\n".into(),
                "version at byte offset 26: version 2",
            ),
            (
                "# benchlake-tracer ranks vx\n".into(),
                "version at byte offset 26",
            ),
            (h.into(), "ranks at byte offset 28"),
            (format!("{h}ranks two\n"), "ranks at byte offset 34: 'two'"),
            (format!("{h}ranks 0\n"), "ranks at byte offset 34"),
            (format!("{h}count 2\n"), "ranks at byte offset 28"),
            // Truncated: the second rank's line is missing.
            (
                format!("{h}ranks 2\n0 h n\n"),
                "rank at byte offset 42: the file ends after 1 of 2 ranks (rank 1 is missing)",
            ),
            // Cut inside a line.
            (
                format!("{h}ranks 2\n0 h n\n1 h"),
                "rank at byte offset 45: the last line has no line end",
            ),
            (
                format!("{h}ranks 2\n0 h n\n1.5 h n\n"),
                "rank at byte offset 42: '1.5' is not a rank",
            ),
            (
                format!("{h}ranks 2\n0 h n\n-1 h n\n"),
                "rank at byte offset 42",
            ),
            (
                format!("{h}ranks 2\n0 h n\n0 h n\n"),
                "rank at byte offset 42: rank 0 appears twice",
            ),
            (
                format!("{h}ranks 2\n0 h n\n2 h n\n"),
                "rank at byte offset 42: rank 2 is not below the 2 ranks declared",
            ),
            (
                format!("{h}ranks 1\n0 h n\n0 h n\n"),
                "rank at byte offset 42: more lines",
            ),
            (
                format!("{h}ranks 1\n0 h\u{e9} n\n"),
                "hostname at byte offset 39: byte 0xc3",
            ),
            (format!("{h}ranks 1\n0 h n x\n"), "node at byte offset 42"),
            // The largest count in a tiny file: an error, not a 16 M-slot table.
            (
                format!("{h}ranks 16777216\n16777215 h n\n"),
                "the file ends after 1 of 16777216 ranks (rank 0 is missing)",
            ),
            (
                format!("{h}ranks 1\n0 h {}\n", "n".repeat(300)),
                "node at byte offset 40: 300 bytes long",
            ),
        ];
        for (text, want) in cases {
            let e = err(text);
            assert!(
                e.starts_with("raw/R/t/bandela_ranks: ") && e.contains(want),
                "{text:?}: {e}"
            );
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(Path::new("x"), &bytes);
        }

        #[test]
        fn damaged_maps_fail_with_a_position(
            n in 1usize..20,
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut text = format!("{HEADER}{VERSION}\nranks {n}\n");
            for r in 0..n {
                text.push_str(&format!("{r} host n{}\n", r % 3));
            }
            let bytes = text.into_bytes();
            // Cut anywhere before the last line's end: an error, never a panic.
            let at = cut.index(bytes.len() - 1);
            if let Err(e) = parse(Path::new("x"), &bytes[..at]) {
                prop_assert!(e.to_string().contains("at byte offset"), "{}", e);
            } else {
                // Only the whole file parses (a cut keeps at most all but
                // its final line end).
                prop_assert!(false, "a cut at {} of {} parsed", at, bytes.len());
            }
            let mut b = bytes.clone();
            let i = flip.index(b.len());
            b[i] = byte;
            if let Err(e) = parse(Path::new("x"), &b) {
                prop_assert!(e.to_string().contains("at byte offset"), "{}", e);
            }
        }

        #[test]
        fn written_maps_read_back(nodes in proptest::collection::vec(0u8..4, 1..40)) {
            let mut text = format!("{HEADER}{VERSION}\nranks {}\n", nodes.len());
            for (r, n) in nodes.iter().enumerate().rev() {
                text.push_str(&format!("{r} host{} n{n}\n", n / 2));
            }
            let got = parse(Path::new("x"), text.as_bytes()).unwrap();
            prop_assert_eq!(got.len(), nodes.len());
            for (r, n) in nodes.iter().enumerate() {
                prop_assert_eq!(got[r].rank as usize, r);
                prop_assert_eq!(&got[r].node, &format!("n{n}"));
            }
        }
    }
}
