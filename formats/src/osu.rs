//! `osu`: the text output of the OSU micro-benchmarks' point-to-point tests
//! (osu_latency, osu_bw, osu_bibw; MVAPICH's OMB 5.x to 7.x) → `osu_results`.
//!
//! ```text
//! # OSU MPI Latency Test v7.3
//! # Datatype: MPI_CHAR.
//! # Size       Avg Latency(us)
//! 1                       1.53
//! 2                       1.55
//! ```
//!
//! The title line names the test and the version; comment lines (`#`) may
//! follow until the column header (`# Size …`), whose value column must be
//! the test's (`Latency … (us)`, `Bandwidth (MB/s)`); then one row per
//! message size, sizes strictly increasing. Every row has the first row's
//! number of columns (full statistics, `-f`, add min, max and iterations);
//! the second is the value; a last `Validation` column (OMB 7's `-c`) must
//! say `Pass`. Refused, naming the file, the field and the
//! byte offset: a missing title or column header, a number that does not
//! parse, a negative, infinite or NaN value, a size not above the previous
//! one, text after the rows, a file without rows or cut mid-line.
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use benchlake_core::catalog;
use benchlake_core::lake::TableOutput;

use crate::error::{FormatError, Position, Result};
use crate::ingest::{IngestContext, InputFile};
use crate::io::text::{self, Field};

/// The table the kind writes.
pub const TABLE: &str = "osu_results";

/// The largest message size accepted (1 TiB; OMB's sizes are `int`s).
pub const MAX_SIZE: i64 = 1 << 40;

/// The largest value accepted in either unit (10^12 µs is 11 days; 10^12
/// MB/s is 1 EB/s).
pub const MAX_VALUE: f64 = 1e12;

/// The tests read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsuTest {
    /// osu_latency: one-way latency (µs), lower is better.
    Latency,
    /// osu_bw: unidirectional bandwidth (MB/s).
    Bandwidth,
    /// osu_bibw: bidirectional bandwidth (MB/s).
    BiBandwidth,
}

impl OsuTest {
    const ALL: [OsuTest; 3] = [Self::Latency, Self::Bandwidth, Self::BiBandwidth];

    /// The title between `# OSU MPI ` and ` v<version>`.
    pub fn title(self) -> &'static str {
        match self {
            Self::Latency => "Latency Test",
            Self::Bandwidth => "Bandwidth Test",
            Self::BiBandwidth => "Bi-Directional Bandwidth Test",
        }
    }
    /// The program (`benchmark` column).
    pub fn benchmark(self) -> &'static str {
        match self {
            Self::Latency => "osu_latency",
            Self::Bandwidth => "osu_bw",
            Self::BiBandwidth => "osu_bibw",
        }
    }
    /// The value's unit (`unit` column), as the column header writes it.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Latency => "us",
            Self::Bandwidth | Self::BiBandwidth => "MB/s",
        }
    }
    /// The word the value column's header holds.
    fn column(self) -> &'static str {
        match self {
            Self::Latency => "Latency",
            Self::Bandwidth | Self::BiBandwidth => "Bandwidth",
        }
    }
    /// The test of a `benchmark` column value.
    pub fn of_benchmark(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.benchmark() == name)
    }
}

/// One parsed output.
#[derive(Debug, Clone, PartialEq)]
pub struct OsuOutput {
    pub test: OsuTest,
    /// The version of the title line, without its `v`.
    pub version: String,
    /// (message size in bytes, value), sizes strictly increasing.
    pub points: Vec<(i64, f64)>,
}

fn bad(path: &Path, field: &str, line: u64, col: u64, msg: impl Into<String>) -> FormatError {
    FormatError::malformed(path, field, Position::LineCol(line, col), msg)
}

/// The test and version of a title line, if it is one.
fn title(line: &str) -> Option<(OsuTest, &str)> {
    let rest = line.trim_end().strip_prefix("# OSU MPI ")?;
    let (name, version) = rest.rsplit_once(" v")?;
    let test = OsuTest::ALL.into_iter().find(|t| t.title() == name)?;
    let ok = version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    ok.then_some((test, version))
}

/// Parses one output; positions are line and column (see
/// [`FormatError::with_offset`] for the byte offset).
pub fn parse(path: &Path, text: &str) -> Result<OsuOutput> {
    text::require_complete(path, text, "text")?;
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((n, first)) = lines.next() else {
        return Err(text::no_rows(path, text, "title", "OSU title line"));
    };
    let Some((test, version)) = title(first) else {
        return Err(bad(
            path,
            "title",
            n,
            1,
            "not OSU micro-benchmark output: expected '# OSU MPI Latency Test v<version>', \
             '# OSU MPI Bandwidth Test v…' or '# OSU MPI Bi-Directional Bandwidth Test v…'",
        ));
    };
    let mut out = OsuOutput {
        test,
        version: version.to_string(),
        points: Vec::new(),
    };
    let mut header = false;
    // OMB 7's `-c` adds a last column `Validation` (Pass or Fail).
    let mut validation = false;
    let mut columns = 0usize;
    for (n, line) in lines {
        if let Some(comment) = line.trim_start().strip_prefix('#') {
            if !out.points.is_empty() {
                return Err(bad(path, "row", n, 1, "a comment after the rows"));
            }
            let words: Vec<&str> = comment.split_whitespace().collect();
            if words.first() == Some(&"Size") {
                if header {
                    return Err(bad(path, "column header", n, 1, "a second column header"));
                }
                let rest = comment.trim_start().trim_start_matches("Size");
                let unit = format!("({})", test.unit());
                if !(rest.contains(test.column()) && rest.contains(&unit)) {
                    return Err(bad(
                        path,
                        "column header",
                        n,
                        1,
                        format!(
                            "the {} column header must name {} {unit}",
                            test.benchmark(),
                            test.column()
                        ),
                    ));
                }
                header = true;
                validation = words.last() == Some(&"Validation");
            }
            continue;
        }
        if !header {
            return Err(bad(
                path,
                "column header",
                n,
                1,
                "a row before the '# Size …' column header",
            ));
        }
        let fields = text::split_ws(line, n);
        if columns == 0 {
            columns = fields.len();
        }
        if fields.len() < 2 || fields.len() != columns {
            let col = fields.last().map_or(1, |f| f.col);
            return Err(bad(
                path,
                "row",
                n,
                col,
                format!(
                    "{} columns, expected {}",
                    fields.len(),
                    if columns < 2 { 2 } else { columns }
                ),
            ));
        }
        let size_field = &fields[0];
        let size = size_field.i64(path, "size")?;
        if !(0..=MAX_SIZE).contains(&size) {
            return Err(size_field.err(
                path,
                "size",
                format!("{size} is not a message size (0 to {MAX_SIZE} bytes)"),
            ));
        }
        if let Some(&(prev, _)) = out.points.last()
            && size <= prev
        {
            return Err(size_field.err(
                path,
                "size",
                format!("{size} does not follow {prev}: sizes must increase"),
            ));
        }
        let value = number(path, &fields[1], "value")?;
        let mut stats = &fields[2..];
        if validation && let Some((last, rest)) = stats.split_last() {
            if last.text != "Pass" {
                return Err(last.err(
                    path,
                    "validation",
                    format!(
                        "'{}': OMB's validation of the data received failed",
                        last.text
                    ),
                ));
            }
            stats = rest;
        }
        for f in stats {
            number(path, f, "statistic")?;
        }
        out.points.push((size, value));
    }
    if !header {
        return Err(text::no_rows(
            path,
            text,
            "column header",
            "'# Size …' column header",
        ));
    }
    if out.points.is_empty() {
        return Err(text::no_rows(path, text, "rows", "measurements"));
    }
    Ok(out)
}

/// A finite, non-negative number no larger than [`MAX_VALUE`].
fn number(path: &Path, f: &Field<'_>, name: &str) -> Result<f64> {
    let v = f.f64(path, name)?;
    if !v.is_finite() || !(0.0..=MAX_VALUE).contains(&v) {
        return Err(f.err(
            path,
            name,
            format!("{} is not a measurement (0 to {MAX_VALUE:e})", f.text),
        ));
    }
    Ok(v)
}

/// One row of `osu_results`: source, output, size, value.
type Row<'a> = (&'a str, &'a OsuOutput, i64, f64);

/// The `osu` ingest kind: every input is one test's output.
pub fn ingest(inputs: &[InputFile], ctx: &IngestContext) -> Result<Vec<TableOutput>> {
    let mut runs = Vec::with_capacity(inputs.len());
    for input in inputs {
        let bytes = text::read_bounded(&input.path)?;
        let s = text::utf8(&input.path, &bytes).map_err(|e| e.with_offset(&bytes))?;
        let run = parse(&input.path, s).map_err(|e| e.with_offset(&bytes))?;
        runs.push((input.source.as_str(), run));
    }
    let rows: Vec<Row<'_>> = runs
        .iter()
        .flat_map(|(src, r)| r.points.iter().map(move |&(s, v)| (*src, r, s, v)))
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let text_col = |f: &dyn Fn(&Row<'_>) -> String| -> ArrayRef {
        Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![ctx.run_id.as_str(); rows.len()])),
        text_col(&|r| r.0.to_string()),
        text_col(&|r| r.1.test.benchmark().to_string()),
        text_col(&|r| r.1.version.clone()),
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.2).collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            rows.iter().map(|r| r.3).collect::<Vec<_>>(),
        )),
        text_col(&|r| r.1.test.unit().to_string()),
    ];
    let batch = RecordBatch::try_new(catalog::schema(TABLE)?, cols)?;
    Ok(vec![TableOutput::new(TABLE, vec![batch])])
}

#[cfg(test)]
mod tests {
    use super::*;

    const LATENCY: &str = "# OSU MPI Latency Test v7.3\n\
        # Datatype: MPI_CHAR.\n\
        # Size       Avg Latency(us)\n\
        1                       1.53\n\
        2                       1.55\n\
        4                       1.56\n\
        1024                    3.10\n";

    const BW_V5: &str = "# OSU MPI Bandwidth Test v5.6.3\n\
        # Size      Bandwidth (MB/s)\n\
        1                       2.94\n\
        4194304             11784.52\n";

    const BIBW_FULL: &str = "# OSU MPI Bi-Directional Bandwidth Test v7.1-1\n\
        # Size      Bandwidth (MB/s)      Min (MB/s)     Max (MB/s)\n\
        \n\
        8                      10.25          10.00          10.50\n\
        65536               20000.00       19000.00       21000.00\n";

    /// OMB 7.5's osu_bibw with validation (`-c`); the datatype after the header (7.1).
    const BIBW_VALIDATED: &str = "# OSU MPI Bi-Directional Bandwidth Test v7.5\n\
        # Size      Bandwidth (MB/s)        Validation\n\
        # Datatype: MPI_CHAR.\n\
        1                       0.93              Pass\n\
        2                       1.94              Pass\n";

    fn p() -> &'static Path {
        Path::new("osu.txt")
    }

    fn err(text: &str) -> String {
        parse(p(), text)
            .map_err(|e| e.with_offset(text.as_bytes()))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn reads_latency_bandwidth_and_full_statistics() {
        let l = parse(p(), LATENCY).unwrap();
        assert_eq!(l.test, OsuTest::Latency);
        assert_eq!(l.version, "7.3");
        assert_eq!(
            l.points,
            vec![(1, 1.53), (2, 1.55), (4, 1.56), (1024, 3.10)]
        );
        let b = parse(p(), BW_V5).unwrap();
        assert_eq!((b.test, b.version.as_str()), (OsuTest::Bandwidth, "5.6.3"));
        assert_eq!(b.points, vec![(1, 2.94), (4194304, 11784.52)]);
        let bi = parse(p(), BIBW_FULL).unwrap();
        assert_eq!(bi.test.benchmark(), "osu_bibw");
        assert_eq!(bi.points, vec![(8, 10.25), (65536, 20000.0)]);
        let v = parse(p(), BIBW_VALIDATED).unwrap();
        assert_eq!(v.points, vec![(1, 0.93), (2, 1.94)]);
        let failed = BIBW_VALIDATED.replace("1.94              Pass", "1.94              Fail");
        let e = err(&failed);
        assert!(
            e.contains("validation at line 5, column 43") && e.contains("'Fail'"),
            "{e}"
        );
    }

    #[test]
    fn bad_outputs_name_the_field_and_the_byte_offset() {
        // Not OSU output at all.
        let e = err("hello\n");
        assert!(
            e.starts_with("osu.txt: title at line 1, column 1 (byte offset 0)"),
            "{e}"
        );
        // An unknown test.
        assert!(err("# OSU MPI Allreduce Latency Test v7.3\n").contains("title"));
        // A row before the column header: offset of the row (28 = title + \n).
        let e = err("# OSU MPI Latency Test v7.3\n1 1.5\n");
        assert!(
            e.contains("column header at line 2, column 1 (byte offset 28)"),
            "{e}"
        );
        // A bandwidth header on a latency test.
        let e = err("# OSU MPI Latency Test v7.3\n# Size  Bandwidth (MB/s)\n1 2\n");
        assert!(
            e.contains("column header") && e.contains("Latency (us)"),
            "{e}"
        );
        // A value that is not a number, negative, NaN or infinite.
        let head = "# OSU MPI Bandwidth Test v7.3\n# Size      Bandwidth (MB/s)\n";
        for (v, what) in [
            ("x1", "not a number"),
            ("-2.5", "-2.5"),
            ("NaN", "NaN"),
            ("inf", "inf"),
        ] {
            let e = err(&format!("{head}1 2.0\n2 {v}\n"));
            let at = head.len() + "1 2.0\n".len() + 2;
            assert!(
                e.contains(&format!("value at line 4, column 3 (byte offset {at})")),
                "{v}: {e}"
            );
            assert!(e.contains(what), "{v}: {e}");
        }
        // Sizes must increase.
        let e = err(&format!("{head}8 1\n8 2\n"));
        assert!(
            e.contains("size at line 4, column 1") && e.contains("must increase"),
            "{e}"
        );
        let e = err(&format!("{head}8 1\n4 2\n"));
        assert!(e.contains("4 does not follow 8"), "{e}");
        // A size that is not an integer or out of range.
        assert!(err(&format!("{head}1.5 1\n")).contains("size at line 3"));
        assert!(err(&format!("{head}-1 1\n")).contains("size at line 3"));
        // A row with a different number of columns.
        let e = err(&format!("{head}1 2\n2 3 4\n"));
        assert!(
            e.contains("row at line 4") && e.contains("3 columns, expected 2"),
            "{e}"
        );
        assert!(err(&format!("{head}1\n")).contains("row at line 3"));
        // Cut mid-line, no rows, no column header, text after the rows.
        let e = err(&format!("{head}1 2\n2 3"));
        assert!(
            e.contains("text at byte offset") && e.contains("cut short"),
            "{e}"
        );
        let e = err(head);
        assert!(
            e.contains(&format!("rows at byte offset {}", head.len())),
            "{e}"
        );
        assert!(err("# OSU MPI Latency Test v7.3\n").contains("column header at byte offset"));
        assert!(err(&format!("{head}1 2\n# done\n")).contains("row at line 4"));
        assert!(err("").contains("title"));
    }

    proptest::proptest! {
        /// Garbage and damaged outputs never panic; what is accepted holds
        /// finite, non-negative values at increasing sizes.
        #[test]
        fn never_panics_and_accepts_only_sound_rows(
            garbage in "[ -~\n]{0,300}",
            pos in 0usize..200,
            byte in proptest::prelude::any::<u8>(),
            cut in 0usize..200,
        ) {
            let _ = parse(p(), &garbage);
            let mut b = BIBW_FULL.as_bytes().to_vec();
            let at = pos % b.len();
            b[at] = byte;
            b.truncate(cut.max(1).min(b.len()));
            let s = String::from_utf8_lossy(&b);
            if let Ok(o) = parse(p(), &s) {
                for w in o.points.windows(2) {
                    proptest::prop_assert!(w[0].0 < w[1].0);
                }
                for (size, v) in &o.points {
                    proptest::prop_assert!(*size >= 0 && v.is_finite() && *v >= 0.0);
                }
            }
        }
    }

    #[test]
    fn ingest_writes_one_row_per_size_of_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("lat.txt"), dir.path().join("bw.txt"));
        std::fs::write(&a, LATENCY).unwrap();
        std::fs::write(&b, BW_V5).unwrap();
        let inputs = [InputFile::from_path(&a), InputFile::from_path(&b)];
        let out = crate::ingest(
            "osu",
            &inputs,
            &IngestContext {
                run_id: "R".into(),
                date: "2026-11-22".into(),
            },
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].table, TABLE);
        let batch = &out[0].batches[0];
        assert_eq!(batch.num_rows(), 6);
        let s = |c: &str| {
            let a = batch.column_by_name(c).unwrap();
            let a = a.as_any().downcast_ref::<StringArray>().unwrap();
            (0..batch.num_rows())
                .map(|i| a.value(i).to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(s("benchmark")[3], "osu_latency");
        assert_eq!(s("benchmark")[5], "osu_bw");
        assert_eq!(s("unit")[5], "MB/s");
        assert_eq!(s("version")[0], "7.3");
        assert_eq!(s("source")[4], b.display().to_string());
        let v = batch.column_by_name("value").unwrap();
        let v = v.as_any().downcast_ref::<Float64Array>().unwrap();
        assert_eq!(v.value(5), 11784.52);
        // A bad file names the file and the byte offset through ingest too.
        std::fs::write(&b, format!("{BW_V5}8 1\n")).unwrap();
        let e = crate::ingest(
            "osu",
            &inputs,
            &IngestContext {
                run_id: "R".into(),
                date: "2026-11-22".into(),
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("bw.txt: size at line 5, column 1 (byte offset 119)"),
            "{e}"
        );
    }
}
