//! Issue 13, item 10: input is never accepted silently when it is foreign or cut
//! short. Every reader turns a non-empty input without rows, a last record cut
//! short or a file of another format into an error naming the file, the field
//! and the byte offset; intact real files still give every row, exactly.
use std::path::{Path, PathBuf};

use arrow::array::AsArray;
use arrow::datatypes::{Float64Type, Int64Type};
use benchlake_core::lake::TableOutput;
use benchlake_formats::counts::{meta, timings};
use benchlake_formats::io::{ior, ior_text, mdtest};
use benchlake_formats::{FormatError, IngestContext, InputFile, ingest};

fn shared(rel: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")).join(rel)
}

const TIMINGS: &str =
    "counts/a2av_cases_np4/exec_timings/alltoallv_execution_times.rank0_comm0_job0.md";
const TIMINGS_NAME: &str = "alltoallv_execution_times.rank0_comm0_job0.md";

fn ctx() -> IngestContext {
    IngestContext {
        run_id: "r1".into(),
        date: "2026-11-22".into(),
    }
}

fn run(kind: &str, files: &[&Path]) -> benchlake_formats::Result<Vec<TableOutput>> {
    let inputs: Vec<InputFile> = files.iter().map(|p| InputFile::from_path(*p)).collect();
    ingest(kind, &inputs, &ctx())
}

/// `data[..len]` written as `dir/name`.
fn cut(dir: &Path, name: &str, data: &[u8], len: usize) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, &data[..len]).unwrap();
    p
}

/// The error's text, after checking it names `file`, `field` and `byte offset N`.
fn expect_err(
    r: benchlake_formats::Result<Vec<TableOutput>>,
    file: &Path,
    field: &str,
    offset: u64,
) -> String {
    let e = match r {
        Ok(t) => panic!(
            "{} was accepted: {:?}",
            file.display(),
            t.iter()
                .map(|t| (t.table.clone(), t.rows()))
                .collect::<Vec<_>>()
        ),
        Err(e) => e,
    };
    let s = e.to_string();
    assert!(matches!(e, FormatError::Malformed { .. }), "{s}");
    assert!(s.starts_with(&format!("{}: ", file.display())), "{s}");
    assert!(
        s.contains(&format!(": {field} at byte offset {offset}")),
        "{s}"
    );
    assert!(!e.is_retryable());
    s
}

fn call_times(out: &[TableOutput]) -> Vec<(i64, i64, f64)> {
    let t = out
        .iter()
        .find(|t| t.table == "alltoallv_call_times")
        .unwrap();
    let mut v = Vec::new();
    for b in &t.batches {
        let call = b
            .column_by_name("call_id")
            .unwrap()
            .as_primitive::<Int64Type>();
        let rank = b
            .column_by_name("rank")
            .unwrap()
            .as_primitive::<Int64Type>();
        let time = b
            .column_by_name("exec_time_s")
            .unwrap()
            .as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            v.push((call.value(i), rank.value(i), time.value(i)));
        }
    }
    v
}

#[test]
fn intact_timings_give_all_48_rows_exactly() {
    let out = run("counts", &[&shared(TIMINGS)]).unwrap();
    let v = call_times(&out);
    assert_eq!(v.len(), 48);
    assert!(v.contains(&(5, 3, 0.000023)), "{v:?}");
    assert!(v.contains(&(15, 0, 0.000353)), "{v:?}");
}

#[test]
fn timings_cut_mid_number_is_an_error_not_24_rows() {
    // `head -c 286`: the file ends with "0" of call 5 rank 3's "0.000023".
    let data = std::fs::read(shared(TIMINGS)).unwrap();
    let d = tempfile::tempdir().unwrap();
    let p = cut(d.path(), TIMINGS_NAME, &data, 286);
    let s = expect_err(run("counts", &[&p]), &p, "time", 285);
    assert!(
        s.contains("line 37 ('0')") && s.contains("cut short"),
        "{s}"
    );
    // The streaming reader says the same to its other callers.
    let e = timings::read_file(&p, |_, _, _| {}).unwrap_err();
    assert!(e.to_string().contains("time at byte offset 285"), "{e}");
}

#[test]
fn timings_cut_at_a_line_boundary_inside_a_call_is_an_error() {
    // After call 0's four values, without the blank line closing the call: a
    // cut the value count cannot catch (there is no earlier call).
    let data = std::fs::read(shared(TIMINGS)).unwrap();
    let d = tempfile::tempdir().unwrap();
    let p = cut(d.path(), TIMINGS_NAME, &data, 64);
    let s = expect_err(run("counts", &[&p]), &p, "time", 64);
    assert!(s.contains("after 4 value(s) of call 0"), "{s}");
    // Only the header: no call at all.
    let p = cut(d.path(), TIMINGS_NAME, &data, 19);
    expect_err(run("counts", &[&p]), &p, "call", 19);
}

#[test]
fn every_accepted_cut_of_a_timings_file_keeps_exact_values() {
    // Cuts at a call boundary cannot be told from a shorter run; whatever is
    // accepted holds only whole calls with their exact values, and nothing panics.
    let data = std::fs::read(shared(TIMINGS)).unwrap();
    let full = call_times(&run("counts", &[&shared(TIMINGS)]).unwrap());
    let d = tempfile::tempdir().unwrap();
    let mut accepted = Vec::new();
    for n in 0..data.len() {
        let p = cut(d.path(), TIMINGS_NAME, &data, n);
        if let Ok(out) = run("counts", &[&p]) {
            let v = call_times(&out);
            assert_eq!(v.len() % 4, 0, "cut at {n}: {v:?}");
            assert!(v.iter().all(|r| full.contains(r)), "cut at {n}: {v:?}");
            accepted.push(n);
        }
    }
    // One cut per whole call but the last (after its closing blank line).
    assert_eq!(accepted.len(), 11, "{accepted:?}");
}

#[test]
fn counts_of_foreign_files_is_an_error_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    let empty = d.path().join("empty.txt");
    std::fs::write(&empty, b"").unwrap();
    // 2 GB of zeros (sparse: it costs no disk and is never read).
    let zeros = d.path().join("zeros.bin");
    std::fs::File::create(&zeros)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    for p in [
        empty,
        zeros,
        shared("linktest/v1.2p1/np4_default/pingpong_results_bin.sion"),
        shared("replay/dimemas/traces/ring_np4.dim"),
        shared("io/fpp_posix_np4/summary.json"),
        shared("io/mdtest_files_dirs_np4/human.txt"),
    ] {
        let e = run("counts", &[&p]).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: file name: not an alltoallv profiler file",
                p.display()
            )),
            "{e}"
        );
    }
    // Several foreign files: the first is named.
    let a = shared("io/fpp_posix_np4/summary.json");
    let b = shared("replay/dimemas/traces/ring_np4.dim");
    let e = run("counts", &[&a, &b]).unwrap_err().to_string();
    assert!(e.starts_with(&a.display().to_string()), "{e}");
}

#[test]
fn unrelated_files_next_to_profiler_files_are_still_skipped() {
    // A profiler output directory holds COMMANDS.txt and analysis outputs: they
    // do not make the ingest of its profiler files fail.
    let t = shared(TIMINGS);
    let c = shared("counts/a2av_cases_np4/COMMANDS.txt");
    let out = run("counts", &[&c, &t]).unwrap();
    assert_eq!(call_times(&out).len(), 48);
}

#[test]
fn profiler_files_without_records_are_errors() {
    let d = tempfile::tempdir().unwrap();
    let header = b"FORMAT_VERSION: 9\n\n";
    for (name, field) in [
        ("alltoallv_locations_comm0_rank0.md", "Communicator ID"),
        ("alltoallv_backtrace_rank0_trace0.md", "stack trace for"),
        ("alltoallv_comm_data_rank0.md", "ID"),
        (TIMINGS_NAME, "call"),
    ] {
        let p = cut(d.path(), name, header, header.len());
        let r = run("counts", &[&p]);
        if field == "stack trace for" {
            // Already an error before this issue (the program line is required).
            assert!(r.is_err());
            continue;
        }
        expect_err(r, &p, field, 19);
    }
    // A backtrace cut before its first context.
    let bt = shared("counts/a2av_cases_np4/backtrace/alltoallv_backtrace_rank0_trace0.md");
    let data = std::fs::read(&bt).unwrap();
    let at = data.windows(10).position(|w| w == b"# Context ").unwrap();
    let p = cut(d.path(), "alltoallv_backtrace_rank0_trace0.md", &data, at);
    expect_err(run("counts", &[&p]), &p, "# Context", at as u64);
    assert!(meta::read_backtrace(&p).is_err());
    // The intact file has its context.
    assert_eq!(meta::read_backtrace(&bt).unwrap().contexts.len(), 1);
}

#[test]
fn sion_version_word_must_be_a_sionlib_version() {
    let src = shared("linktest/v1.2p1/np4_default/pingpong_results_bin.sion");
    let data = std::fs::read(&src).unwrap();
    assert_eq!(&data[8..12], &1007i32.to_le_bytes());
    let d = tempfile::tempdir().unwrap();
    for (off, word, field) in [
        (8, 0xFFFF_FFFFu32, "SIONlib version"),
        (8, 0, "SIONlib version"),
        (8, 7, "SIONlib version"),
        (12, 0xFFFF_FFFF, "SIONlib patch level"),
    ] {
        let mut bad = data.clone();
        bad[off..off + 4].copy_from_slice(&word.to_le_bytes());
        let p = d.path().join("pingpong_results_bin.sion");
        std::fs::write(&p, &bad).unwrap();
        let s = expect_err(run("linktest", &[&p]), &p, field, off as u64);
        assert!(s.contains(&format!("0x{word:08x}")), "{s}");
    }
    // The intact copy still ingests.
    let out = run("linktest", &[&src]).unwrap();
    assert_eq!(
        out.iter()
            .find(|t| t.table == "linktest_timings")
            .unwrap()
            .rows(),
        12
    );
}

#[test]
fn mdtest_output_cut_at_64_bytes_is_an_error() {
    let src = shared("io/mdtest_files_dirs_np4/human.txt");
    let data = std::fs::read(&src).unwrap();
    let d = tempfile::tempdir().unwrap();
    let p = cut(d.path(), "human.txt", &data, 64);
    // Line 3 (the banner) starts at byte 38 and is cut mid-way.
    let s = expect_err(run("mdtest", &[&p]), &p, "line", 38);
    assert!(s.contains("line 3"), "{s}");
    // Cut at the end of a line before the tables, or before the closing line.
    let text = std::str::from_utf8(&data).unwrap();
    let before_tables = text.find("SUMMARY rate").unwrap();
    let p = cut(d.path(), "human.txt", &data, before_tables);
    expect_err(run("mdtest", &[&p]), &p, "SUMMARY", before_tables as u64);
    let before_end = text.find("-- finished at").unwrap();
    let p = cut(d.path(), "human.txt", &data, before_end);
    expect_err(
        run("mdtest", &[&p]),
        &p,
        "-- finished at",
        before_end as u64,
    );
    // Intact: the rate table with its ten operations.
    let t = mdtest::parse_text(&src, text).unwrap();
    assert_eq!(t.summaries.len(), 1);
    assert_eq!(t.summaries[0].lines.len(), 10);
    assert_eq!(run("mdtest", &[&src]).unwrap()[0].rows(), 10);
}

#[test]
fn ior_output_cut_before_its_end_is_an_error() {
    let src = shared("io/fpp_posix_np4/human.txt");
    let data = std::fs::read(&src).unwrap();
    let text = std::str::from_utf8(&data).unwrap();
    let d = tempfile::tempdir().unwrap();
    // After the first result row: one row of six would have landed.
    let after_row = text.find("read      8381").unwrap();
    let p = cut(d.path(), "human.txt", &data, after_row);
    expect_err(run("ior", &[&p]), &p, "Finished", after_row as u64);
    // Cut in the middle of a number of the results table.
    let mid = after_row + 14;
    let p = cut(d.path(), "human.txt", &data, mid);
    expect_err(run("ior", &[&p]), &p, "line", after_row as u64);
    assert!(ior_text::parse(&p, std::str::from_utf8(&data[..mid]).unwrap()).is_err());
    // Intact.
    assert_eq!(
        ior_text::parse(&src, text).unwrap().tests[0].results.len(),
        6
    );
}

#[test]
fn per_rank_csvs_cut_short_are_errors() {
    let d = tempfile::tempdir().unwrap();
    // IOR: 24 rows (4 ranks x 2 accesses x 3 repetitions).
    let src = shared("io/fpp_posix_np4/rank_details.csv");
    let data = std::fs::read(&src).unwrap();
    let s = std::str::from_utf8(&data).unwrap();
    assert_eq!(ior::parse_rank_csv(&src, s).unwrap().len(), 24);
    let line_ends: Vec<usize> = s.match_indices('\n').map(|(i, _)| i + 1).collect();
    // Header only.
    let p = cut(d.path(), "rank_details.csv", &data, line_ends[0]);
    expect_err(run("ior", &[&p]), &p, "row", line_ends[0] as u64);
    // 13 rows: the last group (write of repetition 2) has 1 rank of 4.
    let p = cut(d.path(), "rank_details.csv", &data, line_ends[13]);
    let e = expect_err(run("ior", &[&p]), &p, "row", line_ends[13] as u64);
    assert!(e.contains("1 rank(s) where the one before has 4"), "{e}");
    // Mid-number.
    let p = cut(d.path(), "rank_details.csv", &data, line_ends[13] + 9);
    expect_err(run("ior", &[&p]), &p, "row", line_ends[13] as u64);

    // mdtest: "all" then 4 ranks x 3 iterations.
    let src = shared("io/mdtest_files_dirs_np4/rank_details.csv");
    let data = std::fs::read(&src).unwrap();
    let s = std::str::from_utf8(&data).unwrap();
    assert_eq!(mdtest::parse_rank_csv(&src, s).unwrap().num_tasks, 4);
    let line_ends: Vec<usize> = s.match_indices('\n').map(|(i, _)| i + 1).collect();
    for rows in [0, 1] {
        // Header only, and header plus the "all" line.
        let p = cut(d.path(), "rank_details.csv", &data, line_ends[rows]);
        expect_err(run("mdtest", &[&p]), &p, "row", line_ends[rows] as u64);
    }
    let p = cut(d.path(), "rank_details.csv", &data, line_ends[7]);
    let e = expect_err(run("mdtest", &[&p]), &p, "row", line_ends[7] as u64);
    assert!(e.contains("2 rank(s) where the one before has 4"), "{e}");
}

#[test]
fn hostinfo_of_a_binary_file_names_the_offset() {
    let p = shared("linktest/v1.2p1/np4_default/pingpong_results_bin.sion");
    expect_err(run("hostinfo", &[&p]), &p, "hostinfo", 8);
}

#[test]
fn bandela_trace_cut_mid_number_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let full = "H 0 2 0\nK 0 MPI_Send isend 1 1 5 400000 1 0\nK 1 MPI_Send wait 1\nC 0.25\n";
    let p = d.path().join("bandela.0.txt");
    std::fs::write(&p, full).unwrap();
    // Two calls and the trailing computation.
    assert_eq!(run("bandela", &[&p]).unwrap()[0].rows(), 3);
    // "C 0.2" of "C 0.25" must not land as 0.2 s of computation.
    let at = full.find("C 0.25").unwrap();
    std::fs::write(&p, &full[..full.len() - 2]).unwrap();
    let s = expect_err(run("bandela", &[&p]), &p, "record", at as u64);
    assert!(s.contains("line 4 ('C 0.2')"), "{s}");
    // Only the header: no call.
    std::fs::write(&p, "H 0 2 0\n").unwrap();
    expect_err(run("bandela", &[&p]), &p, "K record", 8);
}

#[test]
fn json_summaries_without_results_are_errors() {
    let d = tempfile::tempdir().unwrap();
    // IOR: a summary whose tests (or a test's results) are gone lands nothing
    // but its summary table; it is not a run's output.
    let src = shared("io/fpp_posix_np4/summary.json");
    let full: serde_json::Value = serde_json::from_slice(&std::fs::read(&src).unwrap()).unwrap();
    for (field, edit) in [
        (
            "tests",
            &(|v: &mut serde_json::Value| v["tests"] = serde_json::json!([]))
                as &dyn Fn(&mut serde_json::Value),
        ),
        ("tests[0].Results", &|v: &mut serde_json::Value| {
            v["tests"][0]["Results"] = serde_json::json!([])
        }),
    ] {
        let mut v = full.clone();
        edit(&mut v);
        let p = d.path().join("summary.json");
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
        let e = run("ior", &[&p]).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: {field} at byte offset ", p.display()))
                && e.contains(": no "),
            "{e}"
        );
    }
    assert_eq!(run("ior", &[&src]).unwrap()[0].rows(), 6);
    // pio (a result of `benchlake pio --np 2` on this machine): no phases.
    let src = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/pio_np2_result.json"
    ));
    let out = run("pio", &[src]).unwrap();
    assert_eq!(
        out.iter().find(|t| t.table == "io_results").unwrap().rows(),
        2
    );
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    v["phases"] = serde_json::json!([]);
    let p = d.path().join("pio-result.json");
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    let e = run("pio", &[&p]).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: phases at byte offset ", p.display()))
            && e.contains(": no phase"),
        "{e}"
    );
    // Cut anywhere: an error naming the file, never a panic or a shorter run.
    let data = std::fs::read(src).unwrap();
    for n in (0..data.len() - 1).step_by(97) {
        let p = cut(d.path(), "pio-result.json", &data, n);
        let e = run("pio", &[&p]).unwrap_err().to_string();
        assert!(e.starts_with(&p.display().to_string()), "{e}");
    }
}

#[test]
fn no_cut_of_a_real_file_panics_or_changes_a_value() {
    // Every prefix of the small real text files: an error naming the file, or
    // (at a record boundary of a format without a closing line) a subset of the
    // intact file's rows. Never a panic.
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, &str); 6] = [
        (
            "counts",
            "counts/a2av_cases_np4/location/alltoallv_locations_comm0_rank0.md",
        ),
        (
            "counts",
            "counts/a2av_cases_np4/backtrace/alltoallv_comm_data_rank0.md",
        ),
        (
            "counts",
            "counts/a2av_cases_np4/counts_notcompact/counts.rank0_call0.md",
        ),
        ("ior", "io/fpp_posix_np4/human.txt"),
        ("mdtest", "io/mdtest_files_dirs_np4/human.txt"),
        ("dimemas", "replay/dimemas/traces/ring_np4.dim"),
    ];
    for (kind, rel) in cases {
        let src = shared(rel);
        let data = std::fs::read(&src).unwrap();
        let name = src.file_name().unwrap().to_str().unwrap();
        let full: usize = run(kind, &[&src]).unwrap().iter().map(|t| t.rows()).sum();
        for n in 0..data.len() {
            let p = cut(d.path(), name, &data, n);
            let r = std::panic::catch_unwind(|| run(kind, &[&p]));
            match r {
                Err(_) => panic!("{kind} {rel} cut at {n} panicked"),
                Ok(Err(e)) => assert!(e.to_string().starts_with(&p.display().to_string()), "{e}"),
                Ok(Ok(out)) => {
                    let rows: usize = out.iter().map(|t| t.rows()).sum();
                    let blank_tail = data[n..].iter().all(u8::is_ascii_whitespace);
                    assert!(
                        rows > 0 && (rows < full || blank_tail),
                        "{kind} {rel} cut at {n}: {rows} rows"
                    );
                    assert_eq!(
                        data[n - 1],
                        b'\n',
                        "{kind} {rel} cut at {n} mid-line accepted"
                    );
                }
            }
        }
    }
}

#[test]
fn dimemas_offsets_block_cut_short_is_an_error() {
    // "s:3:5282" cut to "s:3:528" would send task 3 to byte 528.
    let src = shared("replay/dimemas/traces/ring_np4.dim");
    let data = std::fs::read(&src).unwrap();
    let d = tempfile::tempdir().unwrap();
    let last = data[..data.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    assert_eq!(&data[last..], b"s:3:5282\n");
    for n in [data.len() - 2, data.len() - 1] {
        let p = cut(d.path(), "ring_np4.dim", &data, n);
        expect_err(run("dimemas", &[&p]), &p, "s (offsets)", last as u64);
    }
    assert_eq!(run("dimemas", &[&src]).unwrap()[0].rows(), 168);
}
