//! IOR / mdtest / pio ingest against the real outputs in ../shared/data/io.
use std::path::{Path, PathBuf};

use arrow::array::{Array, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray};
use benchlake_formats::io::{ior, ior_text, mdtest, pio, text};
use benchlake_formats::{FormatError, IngestContext, InputFile, ingest};
use proptest::prelude::*;

fn data(case: &str, file: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/io"))
        .join(case)
        .join(file)
}

fn ctx() -> IngestContext {
    IngestContext {
        run_id: "run1".into(),
        date: "2026-11-22".into(),
    }
}

const IOR_CASES: [&str; 5] = [
    "segmented_posix_shared_np4",
    "strided_posix_shared_np4",
    "random_posix_shared_np4",
    "fpp_posix_np4",
    "mpiio_collective_shared_np4",
];

fn ior_json(case: &str) -> ior::IorSummary {
    let p = data(case, "summary.json");
    ior::parse_json(&p, &std::fs::read(&p).unwrap()).unwrap()
}

#[test]
fn ior_segmented_json_values() {
    let j = ior_json("segmented_posix_shared_np4");
    assert_eq!(j.version, "4.1.0+dev");
    assert_eq!(j.began, "Sun Nov 22 10:46:35 2026");
    let t = &j.tests[0];
    assert_eq!(t.num_tasks(), 4);
    assert_eq!(t.pattern(), "segmented");
    assert_eq!(t.parameters.block_size, 4194304);
    assert_eq!(t.parameters.transfer_size, 262144);
    let it = t.iterations();
    assert_eq!(it.len(), 6);
    let (i, r) = it[0];
    assert_eq!((i, r.access.as_str()), (0, "write"));
    assert_eq!(r.bw_mib, Some(3508.0431));
    assert_eq!(r.iops, Some(14897.3559));
    assert_eq!(r.open_time, Some(0.0035));
    assert_eq!(r.wr_rd_time, Some(0.0043));
    assert_eq!(r.close_time, Some(0.0032));
    assert_eq!(r.total_time, 0.0046);
    // Pitfall 1: %.4f turns sub-0.1 ms latencies into 0.
    assert_eq!(it[1].1.latency, Some(0.0));
    let (i, r) = it[5];
    assert_eq!(
        (i, r.access.as_str(), r.bw_mib),
        (2, "read", Some(6298.9360))
    );
    assert_eq!(j.summary.len(), 2);
    let w = &j.summary[0];
    assert_eq!(w.operation, "write");
    assert_eq!(
        (w.bw_max_mib, w.bw_min_mib, w.bw_mean_mib, w.bw_std_mib),
        (3508.0431, 2387.7060, 3060.8331, 484.4706)
    );
    assert_eq!(w.ops_mean, 12243.3322);
    assert_eq!(w.xsize_mib, 16.0);
}

/// IOR's summary statistics are the population statistics of the Results
/// records: recomputing them from what we read must agree to print precision.
#[test]
fn ior_summary_agrees_with_results_in_every_case() {
    for case in IOR_CASES {
        let j = ior_json(case);
        for s in &j.summary {
            let bws: Vec<f64> = j.tests[0]
                .iterations()
                .iter()
                .filter(|(_, r)| r.access == s.operation)
                .map(|(_, r)| r.bw_mib.unwrap())
                .collect();
            assert_eq!(bws.len() as i64, s.repetitions, "{case}");
            let st = pio::Stats::of(&bws).unwrap();
            assert!((st.max - s.bw_max_mib).abs() < 1e-3, "{case} max");
            assert!((st.min - s.bw_min_mib).abs() < 1e-3, "{case} min");
            assert!((st.mean - s.bw_mean_mib).abs() < 1e-3, "{case} mean");
            assert!(
                (st.stddev - s.bw_std_mib).abs() < 1e-3,
                "{case} sd {} vs {}",
                st.stddev,
                s.bw_std_mib
            );
        }
    }
}

#[test]
fn ior_patterns_and_flags_of_each_case() {
    let expect = [
        (
            "segmented_posix_shared_np4",
            "segmented",
            false,
            false,
            "POSIX",
            1,
        ),
        (
            "strided_posix_shared_np4",
            "strided",
            false,
            false,
            "POSIX",
            32,
        ),
        (
            "random_posix_shared_np4",
            "random_offset",
            false,
            false,
            "POSIX",
            1,
        ),
        ("fpp_posix_np4", "segmented", true, false, "POSIX", 1),
        (
            "mpiio_collective_shared_np4",
            "strided",
            false,
            true,
            "MPIIO",
            8,
        ),
    ];
    for (case, pattern, fpp, coll, api, segs) in expect {
        let j = ior_json(case);
        let t = &j.tests[0];
        assert_eq!(t.pattern(), pattern, "{case}");
        assert_eq!(t.parameters.file_per_proc != 0, fpp, "{case}");
        assert_eq!(t.parameters.collective != 0, coll, "{case}");
        assert_eq!(t.parameters.api, api, "{case}");
        assert_eq!(t.parameters.segment_count, segs, "{case}");
    }
    let m = ior_json("mpiio_collective_shared_np4");
    assert_eq!(m.tests[0].iterations()[3].1.total_time, 0.4067);
    assert_eq!(m.summary[1].bw_mean_mib, 157.9305);
}

#[test]
fn ior_rank_csv_values() {
    let p = data("segmented_posix_shared_np4", "rank_details.csv");
    let rows = ior::parse_rank_csv(&p, &std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(rows.len(), 24);
    let r = rows
        .iter()
        .find(|r| r.access == "write" && r.rank == 2 && r.iteration == 1)
        .unwrap();
    assert_eq!(r.runtime_with_openclose, 2.2912025452e-03);
    assert_eq!(r.runtime, 2.2840499878e-03);
    assert_eq!(r.throughput_with_openclose, 1.8306124916e+09);
    assert_eq!(r.throughput, 1.8363450986e+09);
    let last = rows.last().unwrap();
    assert_eq!(
        (last.access.as_str(), last.rank, last.iteration),
        ("read", 3, 2)
    );
    assert_eq!(last.runtime, 4.9185752869e-04);
    // Throughput is bytes/s of one rank's 4 MiB block.
    assert!((r.throughput * r.runtime - 4194304.0).abs() < 1.0);
}

fn col<'a, T: 'static>(t: &'a benchlake_core::lake::TableOutput, name: &str) -> &'a T {
    let b = &t.batches[0];
    b.column(b.schema().index_of(name).unwrap())
        .as_any()
        .downcast_ref::<T>()
        .unwrap()
}

#[test]
fn ior_ingest_every_case_into_tables() {
    for case in IOR_CASES {
        let inputs = vec![
            InputFile::from_path(data(case, "summary.json")),
            InputFile::from_path(data(case, "rank_details.csv")),
        ];
        let out = ingest("ior", &inputs, &ctx()).unwrap();
        let names: Vec<_> = out.iter().map(|t| t.table.as_str()).collect();
        assert_eq!(names, ["io_results", "io_task_times", "io_summary"]);
        assert_eq!(out[0].rows(), 6, "{case}");
        assert_eq!(out[1].rows(), 24, "{case}");
        assert_eq!(out[2].rows(), 2, "{case}");
        let tool = col::<StringArray>(&out[0], "tool");
        assert_eq!(tool.value(0), "ior");
        let bytes = col::<Int64Array>(&out[0], "bytes");
        let j = ior_json(case);
        let xsize = j.summary[0].xsize_mib;
        assert_eq!(bytes.value(0) as f64, xsize * 1048576.0, "{case}");
        assert!(col::<Int64Array>(&out[0], "verify_errors").is_null(0));
    }
    let out = ingest(
        "ior",
        &[InputFile::from_path(data("fpp_posix_np4", "summary.json"))],
        &ctx(),
    )
    .unwrap();
    // No per-rank CSV given: no (empty) io_task_times table.
    let names: Vec<_> = out.iter().map(|t| t.table.as_str()).collect();
    assert_eq!(names, ["io_results", "io_summary"]);
    assert!(col::<BooleanArray>(&out[0], "file_per_proc").value(0));
    let bw = col::<Float64Array>(&out[0], "bw_mib_s");
    assert_eq!(bw.value(0), 5203.4476);
    assert_eq!(col::<Int64Array>(&out[0], "iteration").value(4), 2);
    assert_eq!(col::<StringArray>(&out[0], "operation").value(5), "read");
    assert_eq!(
        col::<Float64Array>(&out[1], "bw_mean_mib_s").value(1),
        13621.2802
    );
}

#[test]
fn mdtest_text_values() {
    let p = data("mdtest_files_dirs_np4", "human.txt");
    let t = mdtest::parse_text(&p, &std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(t.version.as_deref(), Some("4.1.0+dev"));
    assert_eq!((t.num_tasks, t.num_nodes), (Some(4), Some(1)));
    assert_eq!(t.summaries.len(), 1);
    let s = &t.summaries[0];
    assert_eq!(
        (s.statistic.as_str(), s.iterations, s.num_tasks, s.items),
        ("rate", 3, 4, Some(4000))
    );
    assert_eq!(s.lines.len(), 10);
    let l = &s.lines[0];
    assert_eq!(l.operation, "Directory creation");
    assert_eq!(
        (l.max, l.min, l.mean, l.stddev),
        (20405.025, 2223.961, 9563.715, 9582.977)
    );
    let tr = s
        .lines
        .iter()
        .find(|l| l.operation == "Tree removal")
        .unwrap();
    assert_eq!(
        (tr.max, tr.min, tr.mean, tr.stddev),
        (15.471, 7.987, 12.457, 3.949)
    );
    let fr = s.lines.iter().find(|l| l.operation == "File read").unwrap();
    assert_eq!(fr.mean, 60895.989);
}

#[test]
fn mdtest_rank_csv_values_and_consistency_with_text() {
    let p = data("mdtest_files_dirs_np4", "rank_details.csv");
    let c = mdtest::parse_rank_csv(&p, &std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(c.operations.len(), 11);
    assert_eq!(c.num_tasks, 4);
    // `all` line: 11 pairs; 12 rank lines × 9 pairs (no tree phases).
    assert_eq!(c.figures.len(), 11 + 12 * 9);
    let all = c
        .figures
        .iter()
        .find(|f| f.rank.is_none() && f.operation == "Directory creation")
        .unwrap();
    assert_eq!(
        (all.rate, all.time, all.items),
        (2.0405025480e+04, 1.9603013992e-01, Some(1000))
    );
    // The aggregate line is iteration 0, which was the fastest: the text's Max.
    assert!((all.rate - 20405.025).abs() < 1e-3);
    let f = c
        .figures
        .iter()
        .find(|f| f.rank == Some(2) && f.iteration == 1 && f.operation == "File creation")
        .unwrap();
    assert_eq!((f.rate, f.time), (3.1070182039e+02, 3.2185199261e+00));
    let dr = c
        .figures
        .iter()
        .find(|f| f.rank == Some(0) && f.operation == "Directory read")
        .unwrap();
    assert!(dr.rate.is_infinite() && dr.time == 0.0);
    let out = ingest(
        "mdtest",
        &[
            InputFile::from_path(p.clone()),
            InputFile::from_path(data("mdtest_files_dirs_np4", "human.txt")),
        ],
        &ctx(),
    )
    .unwrap();
    assert_eq!(out[0].table, "mdtest_results");
    assert_eq!(out[0].rows(), 119);
    assert!(col::<Int32Array>(&out[0], "rank").is_null(0));
    assert_eq!(out[1].table, "mdtest_summary");
    assert_eq!(out[1].rows(), 10);
    assert_eq!(col::<Float64Array>(&out[1], "stddev").value(0), 9582.977);
    assert_eq!(col::<StringArray>(&out[1], "unit").value(0), "ops/s");
}

fn malformed_pos(e: FormatError) -> (String, benchlake_formats::error::Position) {
    match e {
        FormatError::Malformed { file, pos, .. } => (file.display().to_string(), pos),
        other => panic!("not malformed: {other}"),
    }
}

#[test]
fn malformed_ior_json_names_file_line_and_column() {
    use benchlake_formats::error::Position;
    let good = std::fs::read_to_string(data("segmented_posix_shared_np4", "summary.json")).unwrap();
    // Truncated mid-file.
    let cut = &good[..good.len() / 2];
    let e = ior::parse_json(Path::new("x/summary.json"), cut.as_bytes()).unwrap_err();
    let msg = e.to_string();
    let (file, pos) = malformed_pos(e);
    assert_eq!(file, "x/summary.json");
    assert!(matches!(pos, Position::LineCol(l, _) if l > 50), "{msg}");
    // A mistyped field: the position is the value's line.
    let bad = good.replacen("\"bwMiB\": 3508.0431", "\"bwMiB\": \"fast\"", 1);
    let line = bad.lines().position(|l| l.contains("\"fast\"")).unwrap() as u64 + 1;
    let e = ior::parse_json(Path::new("s.json"), bad.as_bytes()).unwrap_err();
    assert!(matches!(malformed_pos(e).1, Position::LineCol(l, _) if l == line));
    // A NaN printed by C is not JSON.
    let nan = good.replacen("3508.0431", "nan", 1);
    assert!(ior::parse_json(Path::new("s.json"), nan.as_bytes()).is_err());
    // Negative block size is refused with the field path.
    let neg = good.replacen("\"blockSize\": 4194304\n", "\"blockSize\": -1\n", 1);
    let e = ior::parse_json(Path::new("s.json"), neg.as_bytes()).unwrap_err();
    assert!(
        e.to_string().contains("tests[0].Parameters.blockSize"),
        "{e}"
    );
}

#[test]
fn malformed_csv_and_text_name_line_and_column() {
    use benchlake_formats::error::Position;
    let csv = format!(
        "{}\nwrite,0,1e-3,1e-3,4e9,4e9\nread,1,0.5,zz,1,1\n",
        ior::RANK_CSV_HEADER
    );
    let e = ior::parse_rank_csv(Path::new("r.csv"), &csv).unwrap_err();
    assert_eq!(malformed_pos(e).1, Position::LineCol(3, 12));
    let e = ior::parse_rank_csv(Path::new("r.csv"), "nope\n").unwrap_err();
    assert_eq!(malformed_pos(e).1, Position::LineCol(1, 1));
    let txt = "mdtest-4 was launched with 2 total task(s) on 1 node(s)\n2 tasks, 20 files\n\nSUMMARY rate (in ops/sec): (of 1 iterations)\n   Operation   Max Min Mean Std Dev\n   ---------   ---\n   File creation  1.0  2.0  x  0.0\n";
    let e = mdtest::parse_text(Path::new("m.txt"), txt).unwrap_err();
    assert_eq!(malformed_pos(e).1, Position::LineCol(7, 4));
    let e = mdtest::parse_rank_csv(
        Path::new("m.csv"),
        "rank,items,rate-File stat,time-File stat\n0,,1.0,abc\n",
    )
    .unwrap_err();
    assert_eq!(malformed_pos(e).1, Position::LineCol(2, 8));
    // Unknown input for the ior kind.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("human.txt");
    std::fs::write(&f, "hello\n").unwrap();
    let e = ingest("ior", &[InputFile::from_path(&f)], &ctx()).unwrap_err();
    assert!(e.to_string().contains("human.txt"), "{e}");
    // An IOR banner without any test is malformed, not empty.
    std::fs::write(&f, "IOR-4.1.0+dev: MPI Coordinated Test of Parallel I/O\n").unwrap();
    let e = ingest("ior", &[InputFile::from_path(&f)], &ctx()).unwrap_err();
    assert!(e.to_string().contains("no test"), "{e}");
    // A broken Results number points at its line and column.
    let good = std::fs::read_to_string(data("segmented_posix_shared_np4", "human.txt")).unwrap();
    let bad = good.replacen("16190 ", "1x190 ", 1);
    let e = ior_text::parse(Path::new("h.txt"), &bad).unwrap_err();
    assert_eq!(malformed_pos(e).1, Position::LineCol(34, 22));
    // Invalid UTF-8 is reported as a position too.
    std::fs::write(&f, b"rank,items\n\xff\n").unwrap();
    let e = ingest("mdtest", &[InputFile::from_path(&f)], &ctx()).unwrap_err();
    // (through the ingest, with its byte offset)
    assert_eq!(
        malformed_pos(e).1,
        Position::Text {
            offset: 11,
            line: 2,
            col: 1
        }
    );
}

#[test]
fn line_col_counts_characters() {
    assert_eq!(text::line_col("é\nab", 4), (2, 2));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn readers_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let p = Path::new("fuzz");
        let _ = ior::parse_json(p, &bytes);
        let _ = pio::parse(p, &bytes);
        let s = String::from_utf8_lossy(&bytes);
        let _ = ior::parse_rank_csv(p, &s);
        let _ = mdtest::parse_text(p, &s);
        let _ = mdtest::parse_rank_csv(p, &s);
        let _ = ior_text::parse(p, &s);
    }

    #[test]
    fn readers_never_panic_on_mutated_real_files(pos in 0usize..6000, byte in any::<u8>(), cut in 0usize..6000) {
        let p = Path::new("fuzz");
        for f in [data("segmented_posix_shared_np4", "summary.json"), data("mdtest_files_dirs_np4", "human.txt"),
                  data("random_posix_shared_np4", "human.txt"),
                  data("mdtest_files_dirs_np4", "rank_details.csv"), data("strided_posix_shared_np4", "rank_details.csv")] {
            let mut b = std::fs::read(&f).unwrap();
            let at = pos % b.len().max(1);
            if let Some(x) = b.get_mut(at) { *x = byte; }
            b.truncate(cut.max(1));
            let s = String::from_utf8_lossy(&b);
            let _ = ior::parse_json(p, &b);
            let _ = ior::parse_rank_csv(p, &s);
            let _ = mdtest::parse_text(p, &s);
            let _ = mdtest::parse_rank_csv(p, &s);
            let _ = ior_text::parse(p, &s);
        }
    }
}

#[test]
fn mdtest_rate_and_time_tables_with_rank_statistics() {
    let txt = "-- started at 11/22/2026 10:47:39 --\n\n\
mdtest-4.1.0+dev was launched with 2 total task(s) on 1 node(s)\n\
2 tasks, 200 files\n\n\
SUMMARY rate (in ops/sec): (of 2 iterations)\n\
   Operation     per Rank: Max            Min           Mean      per Iteration: Max            Min           Mean        Std Dev\n\
   ---------               ---            ---           ----                     ---            ---           ----        -------\n\
   File creation        1500.000       1000.000       1250.000         2900.000       1900.000       2400.000        707.107\n\
   Tree creation          50.000         40.000         45.000           50.000         40.000         45.000          7.071\n\n\
SUMMARY time (in ms/op): (of 2 iterations)\n\
   Operation                     Max            Min           Mean        Std Dev\n\
   ---------                     ---            ---           ----        -------\n\
   File creation               0.105          0.069          0.087          0.025\n\
-- finished at 11/22/2026 10:47:53 --\n";
    let t = mdtest::parse_text(Path::new("m.txt"), txt).unwrap();
    assert_eq!(t.summaries.len(), 2);
    let r = &t.summaries[0];
    assert_eq!(
        (r.statistic.as_str(), r.num_tasks, r.items, r.iterations),
        ("rate", 2, Some(200), 2)
    );
    assert_eq!(r.lines[0].operation, "File creation");
    assert_eq!((r.lines[0].max, r.lines[0].stddev), (2900.0, 707.107));
    assert_eq!(r.lines[1].mean, 45.0);
    let tm = &t.summaries[1];
    assert_eq!(
        (tm.statistic.as_str(), tm.lines.len(), tm.lines[0].min),
        ("time", 1, 0.069)
    );
}

#[test]
fn ior_human_output_values() {
    let p = data("segmented_posix_shared_np4", "human.txt");
    let t = ior_text::parse(&p, &std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(t.version, "4.1.0+dev");
    assert!(
        t.command_line
            .ends_with("-o scratch/iorwork/segmented_posix_shared_np4/testfile")
    );
    assert!(!t.fsync());
    let test = &t.tests[0];
    assert_eq!(test.options["tasks"], "4");
    assert_eq!(test.options["aggregate filesize"], "16 MiB");
    assert_eq!(test.results.len(), 6);
    let r = &test.results[0];
    assert_eq!(
        (r.access.as_str(), r.bw_mib, r.iops, r.latency),
        ("write", 3835.0, 16190.0, 0.000127)
    );
    assert_eq!((r.block_kib, r.xfer_kib), (4096.0, 256.0));
    assert_eq!(
        (r.open, r.wr_rd, r.close, r.total, r.iteration),
        (0.001578, 0.003953, 0.002281, 0.004172, 0)
    );
    let last = &test.results[5];
    assert_eq!(
        (
            last.access.as_str(),
            last.bw_mib,
            last.total,
            last.iteration
        ),
        ("read", 9216.0, 0.001736, 2)
    );
    let w = &t.summary[0];
    assert_eq!(
        (w.bw_max_mib, w.bw_min_mib, w.bw_mean_mib, w.bw_std_mib),
        (4520.94, 3835.01, 4143.44, 284.26)
    );
    assert_eq!(
        (w.ops_max, w.ops_sd, w.mean_time),
        (18083.77, 1137.03, 0.00388)
    );
    assert_eq!(
        (w.test_id, w.num_tasks, w.tasks_per_node, w.repetitions),
        (0, 4, 4, 3)
    );
    assert_eq!(
        (
            w.segment_count,
            w.block_size,
            w.transfer_size,
            w.aggregate_mib
        ),
        (1, 4194304, 262144, 16.0)
    );
    assert_eq!((w.api.as_str(), w.file_per_proc), ("POSIX", false));
    assert_eq!(t.summary[1].bw_mean_mib, 8941.86);
}

/// Every IOR human output parses, and its summary agrees with its Results
/// lines (whose bandwidth is printed to the MiB/s).
#[test]
fn ior_human_output_every_case_is_consistent() {
    let expect = [
        ("segmented_posix_shared_np4", "segmented", false, false),
        ("strided_posix_shared_np4", "strided", false, false),
        ("random_posix_shared_np4", "random_offset", false, false),
        ("fpp_posix_np4", "segmented", true, false),
        ("mpiio_collective_shared_np4", "strided", false, true),
    ];
    for (case, pattern, fpp, coll) in expect {
        let p = data(case, "human.txt");
        let t = ior_text::parse(&p, &std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(t.tests[0].results.len(), 6, "{case}");
        for s in &t.summary {
            let bws: Vec<f64> = t.tests[0]
                .results
                .iter()
                .filter(|r| r.access == s.operation)
                .map(|r| r.bw_mib)
                .collect();
            let st = pio::Stats::of(&bws).unwrap();
            assert!(
                (st.max - s.bw_max_mib).abs() <= 1.0,
                "{case} {} max",
                s.operation
            );
            assert!(
                (st.mean - s.bw_mean_mib).abs() <= 1.0,
                "{case} {} mean",
                s.operation
            );
        }
        let out = ingest("ior", &[InputFile::from_path(&p)], &ctx()).unwrap();
        assert_eq!(out[0].table, "io_results");
        assert_eq!(out[0].rows(), 6);
        assert_eq!(
            col::<StringArray>(&out[0], "pattern").value(0),
            pattern,
            "{case}"
        );
        assert_eq!(
            col::<BooleanArray>(&out[0], "file_per_proc").value(0),
            fpp,
            "{case}"
        );
        assert_eq!(
            col::<BooleanArray>(&out[0], "collective").value(0),
            coll,
            "{case}"
        );
        assert_eq!(col::<Int64Array>(&out[0], "iteration").value(5), 2);
        assert_eq!(out[1].table, "io_summary");
        let j = ior_json(case);
        // Human and JSON are separate runs of the same parameters: same bytes.
        assert_eq!(
            col::<Int64Array>(&out[0], "bytes").value(0) as f64,
            j.summary[0].xsize_mib * 1048576.0,
            "{case}"
        );
    }
}
