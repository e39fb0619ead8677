//! Ingest kinds `dimemas` and `bandela` into `mpi_trace_records`.
use arrow::array::{Array, Float64Array, Int32Array, Int64Array, StringArray};
use benchlake_formats::{IngestContext, InputFile, ingest};

#[test]
fn dimemas_ring_trace_rows() {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay/dimemas/traces/ring_np4.dim"
    );
    let out = ingest(
        "dimemas",
        &[InputFile::from_path(p)],
        &IngestContext {
            run_id: "r".into(),
            date: "2026-11-22".into(),
        },
    )
    .expect("ingest");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].table, "mpi_trace_records");
    // Per task: 20 sends, 20 receives, 1 barrier and the trailing burst.
    assert_eq!(out[0].rows(), 4 * 42);
    let b = &out[0].batches[0];
    let s = |n: &str| {
        b.column_by_name(n)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
            .expect(n)
    };
    let (mf, kernel) = (s("main_function"), s("kernel"));
    let comp = b
        .column_by_name("compute_s")
        .and_then(|c| c.as_any().downcast_ref::<Float64Array>().cloned())
        .expect("c");
    let peer = b
        .column_by_name("peer")
        .and_then(|c| c.as_any().downcast_ref::<Int32Array>().cloned())
        .expect("p");
    let bytes = b
        .column_by_name("bytes")
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
        .expect("b");
    assert_eq!((mf.value(0), kernel.value(0)), ("MPI_Send", "send"));
    assert_eq!((peer.value(0), bytes.value(0)), (1, 65536));
    assert!((comp.value(0) - 0.000414826).abs() < 1e-15);
    assert_eq!(
        (mf.value(1), kernel.value(1), peer.value(1)),
        ("MPI_Recv", "recv", 3)
    );
    assert!(
        kernel
            .iter()
            .flatten()
            .filter(|k| *k == "collective")
            .count()
            == 4
    );
}

#[test]
fn bandela_rank_trace_rows() {
    let d = tempfile::tempdir().expect("tmp");
    let p = d.path().join("bandela.0.txt");
    std::fs::write(
        &p,
        "H 0 2 0\nC 0.25\nK 0 MPI_Bcast isend 1 1 -3 40000 4 1\nK 1 MPI_Bcast wait 4\nC 0.5\n",
    )
    .expect("write");
    let out = ingest(
        "bandela",
        &[InputFile::from_path(&p)],
        &IngestContext {
            run_id: "r".into(),
            date: "2026-11-22".into(),
        },
    )
    .expect("ingest");
    assert_eq!(out[0].rows(), 3);
    let b = &out[0].batches[0];
    let kernel = b
        .column_by_name("kernel")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
        .expect("k");
    let comp = b
        .column_by_name("compute_s")
        .and_then(|c| c.as_any().downcast_ref::<Float64Array>().cloned())
        .expect("c");
    assert_eq!(kernel.value(0), "isend");
    assert_eq!(comp.value(0), 0.25);
    assert!(comp.is_null(1));
    assert_eq!((kernel.value(2), comp.value(2)), ("compute", 0.5));
    let bad = d.path().join("bandela.1.txt");
    std::fs::write(&bad, "H 1 2 0\nK 0 f isend 0 1 1 -5 1 0\n").expect("write");
    let e = ingest(
        "bandela",
        &[InputFile::from_path(&bad)],
        &IngestContext {
            run_id: "r".into(),
            date: "2026-11-22".into(),
        },
    )
    .expect_err("bad")
    .to_string();
    assert!(e.contains("isend.bytes") && e.contains("line 2"), "{e}");
}
