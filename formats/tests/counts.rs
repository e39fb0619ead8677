//! The alltoallv readers against the real profiler outputs in ../shared/data/counts.
use std::io::Cursor;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, Int32Type, Int64Type};
use arrow::record_batch::RecordBatch;
use benchlake_formats::counts::compact::{CompactReader, Row};
use benchlake_formats::counts::{expand_dir, meta, percall, ranklist, timings};
use benchlake_formats::{FormatError, IngestContext, InputFile, ingest};

fn data() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/counts"
    ))
    .to_path_buf()
}

fn inputs(dir: &Path) -> Vec<InputFile> {
    expand_dir(dir)
        .unwrap()
        .into_iter()
        .map(|(path, source)| InputFile { path, source })
        .collect()
}

fn run(dir: &Path) -> Vec<benchlake_core::lake::TableOutput> {
    ingest(
        "counts",
        &inputs(dir),
        &IngestContext {
            run_id: "r1".into(),
            date: "2026-11-22".into(),
        },
    )
    .unwrap()
}

fn table<'a>(out: &'a [benchlake_core::lake::TableOutput], name: &str) -> &'a [RecordBatch] {
    &out.iter()
        .find(|t| t.table == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .batches
}

fn i64s(b: &[RecordBatch], col: &str) -> Vec<i64> {
    b.iter()
        .flat_map(|b| {
            b.column_by_name(col)
                .unwrap()
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

#[test]
fn every_case_ingests() {
    for case in [
        "a2av_cases_np4",
        "ex_alltoallv_c_np4",
        "a2av_many_np8_c200_k7_noncompact",
    ] {
        let out = run(&data().join(case));
        assert!(out.iter().any(|t| t.table == "alltoallv_calls"), "{case}");
        for t in &out {
            benchlake_core::lake::encode_parquet(&t.table, "2026-11-22", &t.batches).unwrap();
        }
    }
}

#[test]
fn a2av_cases_np4_tables() {
    let out = run(&data().join("a2av_cases_np4"));
    let calls = table(&out, "alltoallv_calls");
    let lead = i64s(calls, "lead_rank");
    let call = i64s(calls, "call_id");
    // 16 calls led by rank 0, 2 by rank 1 (11-12), 1 by rank 2 (14).
    assert_eq!(lead.iter().filter(|l| **l == 0).count(), 16);
    assert_eq!(lead.iter().filter(|l| **l == 1).count(), 2);
    assert_eq!(lead.iter().filter(|l| **l == 2).count(), 1);
    let sdt = i64s(calls, "send_datatype_size");
    let rdt = i64s(calls, "recv_datatype_size");
    let size = i64s(calls, "comm_size");
    let block = i64s(calls, "send_block");
    let at = |l: i64, c: i64| {
        (0..call.len())
            .find(|&i| lead[i] == l && call[i] == c)
            .unwrap()
    };
    // Call 9: 4 x int sent, 2 x 8-byte pair received; call 8: contiguous(3) = 12 B.
    assert_eq!((sdt[at(0, 9)], rdt[at(0, 9)]), (4, 8));
    assert_eq!(sdt[at(0, 8)], 12);
    assert_eq!(size[at(0, 11)], 2);
    // Calls 2 and 13 (WORLD and its dup) share block 1.
    assert_eq!(block[at(0, 2)], 1);
    assert_eq!(block[at(0, 13)], 1);

    let rows = table(&out, "alltoallv_count_rows");
    let b = &rows[0];
    let dirs = b.column_by_name("direction").unwrap().as_string::<i32>();
    let ranks = b.column_by_name("ranks").unwrap().as_list::<i32>();
    let counts = b.column_by_name("counts").unwrap().as_list::<i32>();
    // First send row of lead 0: `Rank(s) 0: 0 3 1 4`.
    assert_eq!(dirs.value(0), "send");
    assert_eq!(
        ranks.value(0).as_primitive::<Int32Type>().values().to_vec(),
        vec![0]
    );
    assert_eq!(
        counts
            .value(0)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec(),
        vec![0, 3, 1, 4]
    );

    let times = table(&out, "alltoallv_call_times");
    let t = &times[0];
    let (l, c, r) = (
        i64s(&times[..1], "lead_rank"),
        i64s(&times[..1], "call_id"),
        i64s(&times[..1], "rank"),
    );
    let exec = t
        .column_by_name("exec_time_s")
        .unwrap()
        .as_primitive::<Float64Type>();
    let late = t
        .column_by_name("late_arrival_s")
        .unwrap()
        .as_primitive::<Float64Type>();
    let i = (0..l.len())
        .find(|&i| l[i] == 0 && c[i] == 11 && r[i] == 1)
        .unwrap();
    assert_eq!(exec.value(i), 0.000028);
    assert!(!late.is_null(i));

    let loc = table(&out, "alltoallv_locations");
    let (ll, lw) = (i64s(loc, "lead_rank"), i64s(loc, "world_rank"));
    let world_of_lead1: Vec<i64> = (0..ll.len())
        .filter(|&i| ll[i] == 1)
        .map(|i| lw[i])
        .collect();
    assert_eq!(world_of_lead1, vec![1, 3]);
    let bt = table(&out, "alltoallv_backtraces");
    assert!(bt.iter().map(|b| b.num_rows()).sum::<usize>() >= 19);
}

/// Every column but `source` of the count tables.
fn without_source(out: &[benchlake_core::lake::TableOutput], name: &str) -> Vec<RecordBatch> {
    let b = arrow::compute::concat_batches(
        &benchlake_core::catalog::schema(name).unwrap(),
        table(out, name),
    )
    .unwrap();
    let idx: Vec<usize> = (0..b.num_columns())
        .filter(|&i| b.schema().field(i).name() != "source")
        .collect();
    vec![b.project(&idx).unwrap()]
}

#[test]
fn compact_and_noncompact_give_the_same_tables() {
    for case in ["a2av_cases_np4", "ex_alltoallv_c_np4"] {
        let c = run(&data().join(case).join("counts"));
        let n = run(&data().join(case).join("counts_notcompact"));
        for t in ["alltoallv_calls", "alltoallv_count_rows"] {
            assert_eq!(without_source(&c, t), without_source(&n, t), "{case} {t}");
        }
    }
}

#[test]
fn compact_reader_streams_blocks() {
    let p = data().join("a2av_cases_np4/counts/recv-counters.job0.rank0.txt");
    let mut r = CompactReader::open(&p).unwrap();
    let mut row = Row::default();
    let mut blocks = 0;
    let mut rows = 0;
    while let Some(h) = r.next_block().unwrap() {
        assert_eq!(h.header_calls, (0, 15));
        if blocks == 0 {
            assert_eq!(ranklist::format(&h.calls.0, ", "), "0-1, 3");
            assert_eq!(h.line, 1);
        }
        while r.next_row(&mut row).unwrap() {
            assert_eq!(row.counts.len() as u64, h.comm_size);
            rows += 1;
        }
        blocks += 1;
    }
    assert_eq!(blocks, 12);
    assert_eq!(rows, 4 + 4 + 2 + 4 + 4 + 1 + 1 + 1 + 1 + 2 + 2 + 1);
}

#[test]
fn other_readers_on_real_files() {
    let d = data().join("a2av_cases_np4");
    let c = percall::read_file(&d.join("counts_notcompact/counts.rank0_call9.md")).unwrap();
    assert_eq!(
        (c.send_datatype_size, c.recv_datatype_size, c.comm_size),
        (4, 8, 4)
    );
    assert_eq!(c.row(true, 3), &[2, 2, 2, 2]);
    let locs =
        meta::read_locations(&d.join("location/alltoallv_locations_comm0_rank0.md")).unwrap();
    assert_eq!(locs[0].world_ranks, vec![0, 1, 2, 3]);
    assert_eq!(locs[0].pids, vec![8442, 8443, 8444, 8446]);
    assert_eq!(ranklist::format(&locs[0].calls.0, ", "), "0-10, 15");
    assert_eq!(locs[0].hosts, vec!["vm"; 4]);
    let bt =
        meta::read_backtrace(&d.join("backtrace/alltoallv_backtrace_rank0_trace1.md")).unwrap();
    assert_eq!(bt.pid, 8395);
    assert_eq!(bt.frames.len(), 7);
    assert_eq!(bt.contexts[0].calls.0, vec![(1, 1)]);
    let cd = meta::read_comm_data(&d.join("location/alltoallv_comm_data_rank0.md")).unwrap();
    assert_eq!(cd, vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    let mut v = Vec::new();
    timings::read_file(
        &d.join("exec_timings/alltoallv_execution_times.rank0_comm1_job0.md"),
        |c, r, t| v.push((c, r, t)),
    )
    .unwrap();
    assert_eq!(
        v,
        vec![
            (11, 0, 0.000002),
            (11, 1, 0.000028),
            (12, 0, 0.000001),
            (12, 1, 0.000071)
        ]
    );
}

fn compact_err(text: &str) -> String {
    let mut r = CompactReader::new(
        Cursor::new(text.as_bytes().to_vec()),
        Path::new("send-counters.job0.rank0.txt"),
    );
    let mut row = Row::default();
    let res: Result<(), FormatError> = (|| {
        while r.next_block()?.is_some() {
            while r.next_row(&mut row)? {}
        }
        Ok(())
    })();
    match res {
        Err(e @ FormatError::Malformed { .. }) => e.to_string(),
        other => panic!("expected a malformed error, got {other:?}"),
    }
}

const HEAD: &str = "# Raw counters\n\nNumber of ranks: 3\nDatatype size: 4\nAlltoallv calls 0-1\nCount: 2 calls - 0-1\n\n\nBEGINNING DATA\n";

#[test]
fn malformed_files_name_file_line_column() {
    let e = compact_err(&format!("{HEAD}Rank(s) 0, 1,2: 1 2 3 \nEND DATA\n"));
    assert!(
        e.contains("send-counters.job0.rank0.txt: rank list at line 10, column 13"),
        "{e}"
    );
    assert!(e.contains("mixed"), "{e}");
    let e = compact_err(&format!("{HEAD}Rank(s) 2-0: 1 2 3 \nEND DATA\n"));
    assert!(
        e.contains("line 10, column 11") && e.contains("descending"),
        "{e}"
    );
    let e = compact_err(&format!("{HEAD}Rank(s) 0-2: 1 2 \nEND DATA\n"));
    assert!(
        e.contains("counts at line 10, column 18") && e.contains("2 counts, expected 3"),
        "{e}"
    );
    let e = compact_err(&format!("{HEAD}Rank(s) 0-2: 1 2 3 4 \nEND DATA\n"));
    assert!(
        e.contains("line 10, column 20") && e.contains("more than 3"),
        "{e}"
    );
    let e = compact_err(&format!("{HEAD}Rank(s) 0-2: 1 2 3 \n"));
    assert!(e.contains("END DATA at line 11, column 1"), "{e}");
    let e = compact_err(&format!("{HEAD}Rank(s) 0-2: 1 2 3 \n{HEAD}"));
    assert!(
        e.contains("END DATA at line 11") && e.contains("before the next block"),
        "{e}"
    );
    let e = compact_err(&format!("{HEAD}Rank(s) 0-2: 1 99999999999 3 \nEND DATA\n"));
    assert!(
        e.contains("line 10, column 16") && e.contains("C int"),
        "{e}"
    );
    let e = compact_err(&format!("{HEAD}Rank(s) 0-2: 1 2 3 \nEND DATA\n").replace(
        "Number of ranks: 3",
        "Number of ranks: 99999999999999999999999",
    ));
    assert!(e.contains("Number of ranks at line 3"), "{e}");
    let e = compact_err(&format!("{HEAD}Rank(s) 0-1: 1 2 3 \nEND DATA\n"));
    assert!(
        e.contains("line 11") && e.contains("rank 2 has none"),
        "{e}"
    );
    let e = compact_err(&format!("{HEAD}Rank(s) 0-3: 1 2 3 \nEND DATA\n"));
    assert!(e.contains("rank 3 out of range"), "{e}");
    let e = compact_err(
        &format!("{HEAD}Rank(s) 0-2: 1 2 3 \nEND DATA\n").replace("2 calls - 0-1", "3 calls - 0-1"),
    );
    assert!(
        e.contains("Count at line 6") && e.contains("says 3 calls but lists 2"),
        "{e}"
    );
    let e = compact_err(
        &format!("{HEAD}Rank(s) 0-2: 1 2 3 \nEND DATA\n")
            .replace("Alltoallv calls", "Allgatherv calls"),
    );
    assert!(
        e.contains("line 5, column 1") && e.contains("only alltoallv"),
        "{e}"
    );
}

#[test]
fn seed_variants_are_accepted() {
    // Bare ',' separator, doubled colon, two spaces after 'calls', no space list.
    let text = "# Raw counters\n\nNumber of ranks: 3\nDatatype size: 8\nAlltoallv calls  0-2\nCount: 2 calls - 0-1\n\n\nBEGINNING DATA\nRank(s) 0,2: : 1 2 0\nRank(s) 1: 0 0 3\nEND DATA\n";
    let mut r = CompactReader::new(Cursor::new(text.as_bytes().to_vec()), Path::new("x"));
    let h = r.next_block().unwrap().unwrap();
    assert_eq!(h.header_calls, (0, 2));
    let mut row = Row::default();
    assert!(r.next_row(&mut row).unwrap());
    assert_eq!(row.ranks, vec![(0, 0), (2, 2)]);
    assert_eq!(row.counts, vec![1, 2, 0]);
    assert!(r.next_row(&mut row).unwrap());
    assert!(!r.next_row(&mut row).unwrap());
    assert!(r.next_block().unwrap().is_none());
}

#[test]
fn malformed_other_files() {
    let p = Path::new("counts.rank0_call0.md");
    let e = percall::read(Cursor::new(b"Send datatype size: 4\nRecv datatype size: 4\nComm size: 2\n\nSend counts\n1 2 \n3 \n".to_vec()), p).unwrap_err().to_string();
    assert!(
        e.contains("line 7, column 3") && e.contains("1 counts, expected 2"),
        "{e}"
    );
    let e = timings::read(
        Cursor::new(b"FORMAT_VERSION: 9\n\n# Call 0\n0.1\nabc\n".to_vec()),
        Path::new("t.md"),
        |_, _, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 5, column 1"), "{e}");
    let l = benchlake_formats::counts::lines::Lines::new(Cursor::new(b"FORMAT_VERSION: 9\n\nCommunicator ID: 0\nCalls: 0\nCOMM_WORLD ranks: 0-1\nPIDs: 5\nHostnames:\n".to_vec()), "loc.md");
    let e = meta::read_locations_from(l).unwrap_err().to_string();
    assert!(
        e.contains("PIDs at line 6") && e.contains("1 PIDs for 2 ranks"),
        "{e}"
    );
}

/// The body of fuzz/fuzz_targets/counts.rs: every reader on arbitrary bytes.
fn all_readers(data: &[u8]) {
    use benchlake_formats::counts::lines::Lines;
    let p = Path::new("fuzz");
    let _ = ranklist::parse(data);
    let _ = ranklist::parse_ordered(data);
    let mut r = CompactReader::new(Cursor::new(data), p);
    let mut row = Row::default();
    'outer: while let Ok(Some(_)) = r.next_block() {
        loop {
            match r.next_row(&mut row) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => break 'outer,
            }
        }
    }
    let _ = percall::read(Cursor::new(data), p);
    let _ = timings::read(Cursor::new(data), p, |_, _, _| {});
    let _ = meta::read_locations_from(Lines::new(Cursor::new(data), p));
    let _ = meta::read_backtrace_from(Lines::new(Cursor::new(data), p));
    let _ = meta::read_comm_data_from(Lines::new(Cursor::new(data), p));
}

proptest::proptest! {
    #[test]
    fn every_reader_survives_arbitrary_bytes(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        all_readers(&data);
    }

    /// Mutations of real files (one byte changed) never panic.
    #[test]
    fn every_reader_survives_mutated_real_files(file in 0usize..6, pos in 0usize..4000, byte in proptest::prelude::any::<u8>()) {
        let d = data().join("a2av_cases_np4");
        let f = [
            "counts/send-counters.job0.rank0.txt",
            "counts_notcompact/counts.rank0_call9.md",
            "exec_timings/alltoallv_execution_times.rank0_comm0_job0.md",
            "location/alltoallv_locations_comm0_rank0.md",
            "backtrace/alltoallv_backtrace_rank0_trace1.md",
            "location/alltoallv_comm_data_rank0.md",
        ][file];
        let mut bytes = std::fs::read(d.join(f)).unwrap();
        let n = bytes.len();
        bytes[pos % n] = byte;
        all_readers(&bytes);
    }
}
