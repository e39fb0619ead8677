//! Every real LinkTest 1.2p1 file decodes to exactly the values libsion + the
//! reference reader recorded in its `*.sionref.json` (timings bit-exact).
use std::path::{Path, PathBuf};

use arrow::array::{Array, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use benchlake_formats::ingest::{IngestContext, InputFile, ingest};
use benchlake_formats::linktest::{self, PayloadFormat, inspect_file, run_tables};
use benchlake_formats::sion::SionSet;
use serde_json::Value;

const CASES: [&str; 4] = [
    "np4_default",
    "np4_alltoall",
    "np8_mix_retest3",
    "np16_a2a_mix",
];

fn case_path(case: &str) -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/linktest/v1.2p1"
    ))
    .join(case)
    .join("pingpong_results_bin.sion")
}

/// Loads the reference JSON with every number turned into a string, so doubles
/// are parsed by Rust's correctly rounded `str::parse` (the `%.17g` text
/// round-trips exactly) rather than by serde_json's fast float path.
fn reference(case: &str) -> Value {
    let mut p = case_path(case).into_os_string();
    p.push(".sionref.json");
    let text = std::fs::read_to_string(p).unwrap();
    let mut out = String::with_capacity(text.len() * 2);
    let mut in_str = false;
    let mut esc = false;
    let mut in_num = false;
    for ch in text.chars() {
        if in_str {
            out.push(ch);
            if esc {
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == '"' {
                in_str = false;
            }
            continue;
        }
        let numeric = ch.is_ascii_digit() || matches!(ch, '-' | '+' | '.' | 'e' | 'E');
        if numeric && !in_num {
            out.push('"');
            in_num = true;
        } else if !numeric && in_num {
            out.push('"');
            in_num = false;
        }
        if ch == '"' {
            in_str = true;
        }
        out.push(ch);
    }
    serde_json::from_str(&out).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_str().unwrap().parse().unwrap()
}
fn i(v: &Value) -> i64 {
    v.as_str().unwrap().parse().unwrap()
}
fn fs(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(f).collect()
}
fn is(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(i).collect()
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn container_metadata_matches_libsion() {
    for case in CASES {
        let j = reference(case);
        let set = SionSet::open(&case_path(case)).unwrap();
        let h = &set.files()[0].header;
        let n = i(&j["ntasks"]) as usize;
        assert_eq!(set.ntasks(), n, "{case}");
        assert_eq!(h.nfiles as i64, i(&j["nfiles"]));
        assert_eq!(h.fsblksize as i64, i(&j["fsblksize"]));
        assert_eq!(i(&j["file_endianness"]), 0);
        assert_eq!(h.byte_order, benchlake_formats::sion::ByteOrder::Little);
        assert_eq!(h.keyval_mode, i(&j["keyval_mode"]));
        assert_eq!(
            h.chunksizes.iter().map(|c| *c as i64).collect::<Vec<_>>(),
            is(&j["chunksizes"]),
            "{case}"
        );
        assert_eq!(h.globalranks, is(&j["globalranks"]));
        assert_eq!(h.maxchunks as i64, i(&j["maxblocks"]));
        assert_eq!(h.globalskip as i64, i(&j["globalskip"]));
        assert_eq!(h.start_of_varheader as i64, i(&j["start_of_varheader"]));
        assert_eq!(
            h.blockcount.iter().map(|c| *c as i64).collect::<Vec<_>>(),
            is(&j["blockcount"])
        );
        let by_block: Vec<Vec<i64>> = j["blocksizes_by_block"]
            .as_array()
            .unwrap()
            .iter()
            .map(is)
            .collect();
        for (b, row) in by_block.iter().enumerate() {
            for (t, size) in row.iter().enumerate() {
                assert_eq!(
                    h.block_size(t, b as u64).map(|s| s as i64),
                    Some(*size),
                    "{case} task {t} block {b}"
                );
            }
        }
        let mut offset = 0i64;
        for (r, entry) in j["payload_index"].as_array().unwrap().iter().enumerate() {
            assert_eq!(i(&entry["rank"]), r as i64);
            assert_eq!(i(&entry["offset"]), offset);
            let len = set.task(r).unwrap().len() as i64;
            assert_eq!(i(&entry["length"]), len, "{case} rank {r}");
            offset += len;
        }
    }
}

#[test]
fn payload_matches_reference_bit_exact() {
    for case in CASES {
        let j = reference(case);
        let v = &j["linktest_v1"];
        let run = linktest::read_file(&case_path(case)).unwrap();
        let n = run.num_tasks;
        assert_eq!(run.format, PayloadFormat::V1);
        assert_eq!(run.version_string(), "1.2p1");
        let st = run.v1_stats.unwrap();
        assert_eq!(
            st.statdata.iter().map(|x| *x as i64).collect::<Vec<_>>(),
            is(&v["statdata_int"]),
            "{case}"
        );
        assert_eq!(bits(&st.stat), bits(&fs(&v["statdata_dp"])), "{case}");
        assert_eq!(run.num_messages as i64, i(&v["number_of_messages"]));
        assert_eq!(run.message_size as i64, i(&v["length_of_message"]));
        assert_eq!(run.flags.all_to_all, i(&v["alltoall"]) != 0);
        assert_eq!(run.flags.serial, i(&v["serial"]) != 0);
        assert_eq!(run.flags.mix_ranks, i(&v["mix"]) != 0);
        let p = &run.permutations[0];
        assert_eq!(run.permutations.len(), 1);
        assert_eq!(p.min_time_s.to_bits(), f(&v["min_time"]).to_bits());
        assert_eq!(p.max_time_s.to_bits(), f(&v["max_time"]).to_bits());
        assert_eq!(p.avg_time_s.to_bits(), f(&v["avg_time"]).to_bits());
        let ranks = v["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), n);
        let mut retests = 0;
        for (r, jr) in ranks.iter().enumerate() {
            assert_eq!(jr["id"].as_str(), Some("LKTST"));
            assert_eq!(is(&jr["version"]), vec![1, 2, 1]);
            assert_eq!(run.ranks[r].hostname, jr["location"].as_str().unwrap());
            assert_eq!(
                run.ranks[r].coords.unwrap().map(i64::from).to_vec(),
                is(&jr["mapping"])
            );
            assert_eq!(
                bits(&p.times[r * n..(r + 1) * n]),
                bits(&fs(&jr["timings"])),
                "{case} rank {r}"
            );
            assert_eq!(
                p.steps[r * n..(r + 1) * n]
                    .iter()
                    .map(|s| *s as i64)
                    .collect::<Vec<_>>(),
                is(&jr["accesspattern"])
            );
            if run.flags.all_to_all {
                let want = fs(&jr["alltoall_timings"]);
                assert_eq!(want[0], 0.0, "index 0 (no step 0) is unused");
                let got: Vec<_> = p.alltoall.iter().filter(|a| a.rank == r).collect();
                assert_eq!(got.len(), n - 1);
                for a in got {
                    assert_eq!(a.time_s.to_bits(), want[a.step.unwrap() as usize].to_bits());
                }
            } else {
                assert!(jr.get("alltoall_timings").is_none());
            }
            if r == 0 {
                let new = fs(&jr["stimings_new"]);
                let old = fs(&jr["stimings_old"]);
                let from = is(&jr["sfrom"]);
                let to = is(&jr["sto"]);
                let used: Vec<usize> = (0..n).filter(|k| from[*k] != to[*k]).collect();
                retests = used.len();
                assert_eq!(p.slow_links.len(), used.len(), "{case}");
                for (s, k) in p.slow_links.iter().zip(used) {
                    assert_eq!((s.from_rank as i64, s.to_rank as i64), (from[k], to[k]));
                    assert_eq!(s.time_s.to_bits(), old[k].to_bits());
                    assert_eq!(s.retest_time_s.unwrap().to_bits(), new[k].to_bits());
                    // The first time of a retested pair is the matrix entry.
                    assert_eq!(
                        s.time_s.to_bits(),
                        p.times[s.from_rank * n + s.to_rank].to_bits()
                    );
                }
            }
            let set = SionSet::open(&case_path(case)).unwrap();
            assert_eq!(set.task(r).unwrap().len() as i64, i(&jr["decoded_bytes"]));
        }
        assert_eq!(run.num_serial_retests as usize, retests);
        assert!(retests > 0, "{case} has retests");
    }
}

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .unwrap()
        .as_any()
        .downcast_ref::<T>()
        .unwrap()
}

#[test]
fn tables_hold_every_pair_once() {
    for case in CASES {
        let j = reference(case);
        let v = &j["linktest_v1"];
        let run = linktest::read_file(&case_path(case)).unwrap();
        let n = run.num_tasks;
        let tables = run_tables(&run, "RUN1", "raw/x.sion").unwrap();
        let names: Vec<_> = tables.iter().map(|t| t.table.as_str()).collect();
        assert_eq!(names, linktest::tables::TABLES);
        for t in &tables {
            benchlake_core::lake::encode_parquet(&t.table, "2026-11-22", &t.batches).unwrap();
        }
        let runs = &tables[0].batches[0];
        assert_eq!(runs.num_rows(), 1);
        assert_eq!(
            col::<StringArray>(runs, "linktest_version").value(0),
            "1.2p1"
        );
        assert_eq!(col::<StringArray>(runs, "mode").value(0), "MPI");
        assert!(col::<StringArray>(runs, "git_hash").is_null(0));
        assert_eq!(col::<Int64Array>(runs, "num_tasks").value(0), n as i64);
        assert_eq!(
            col::<Int64Array>(runs, "num_messages").value(0),
            i(&v["number_of_messages"])
        );
        assert_eq!(
            col::<Int64Array>(runs, "message_size").value(0),
            i(&v["length_of_message"])
        );
        assert!(col::<Int64Array>(runs, "num_warmup_messages").is_null(0));
        assert_eq!(
            col::<BooleanArray>(runs, "all_to_all").value(0),
            i(&v["alltoall"]) != 0
        );
        assert_eq!(
            col::<Float64Array>(runs, "min_time_s").value(0).to_bits(),
            f(&v["min_time"]).to_bits()
        );
        assert_eq!(
            col::<Float64Array>(runs, "avg_time_s").value(0).to_bits(),
            f(&v["avg_time"]).to_bits()
        );
        assert_eq!(
            col::<Float64Array>(runs, "max_time_s").value(0).to_bits(),
            f(&v["max_time"]).to_bits()
        );
        let a2a = col::<Float64Array>(runs, "a2a_max_time_s");
        if i(&v["alltoall"]) != 0 {
            let dp = fs(&v["statdata_dp"]);
            assert_eq!(a2a.value(0).to_bits(), dp[4].to_bits());
            assert_eq!(
                col::<Float64Array>(runs, "a2a_avg_time_s")
                    .value(0)
                    .to_bits(),
                dp[5].to_bits()
            );
        } else {
            assert!(a2a.is_null(0));
        }
        let ranks = &tables[1].batches[0];
        assert_eq!(ranks.num_rows(), n);
        assert_eq!(col::<StringArray>(ranks, "hostname").value(n - 1), "vm");
        assert!(col::<Int32Array>(ranks, "core_id").is_null(0));

        let jr = v["ranks"].as_array().unwrap();
        let mut seen = vec![false; n * n];
        let mut rows = 0;
        for b in &tables[2].batches {
            let from = col::<Int32Array>(b, "from_rank");
            let to = col::<Int32Array>(b, "to_rank");
            let step = col::<Int32Array>(b, "step");
            let time = col::<Float64Array>(b, "time_s");
            assert_eq!(col::<StringArray>(b, "run_id").value(0), "RUN1");
            assert_eq!(
                col::<StringArray>(b, "source").value(b.num_rows() - 1),
                "raw/x.sion"
            );
            for k in 0..b.num_rows() {
                let (fr, tr) = (from.value(k) as usize, to.value(k) as usize);
                assert_ne!(fr, tr);
                assert!(!seen[fr * n + tr]);
                seen[fr * n + tr] = true;
                assert_eq!(time.value(k).to_bits(), f(&jr[fr]["timings"][tr]).to_bits());
                assert_eq!(step.value(k) as i64, i(&jr[fr]["accesspattern"][tr]));
                rows += 1;
            }
        }
        assert_eq!(rows, n * (n - 1), "{case}");
        let a2a_rows: usize = tables[3].rows();
        assert_eq!(a2a_rows, if run.flags.all_to_all { n * (n - 1) } else { 0 });
        let slow = &tables[4].batches[0];
        assert_eq!(slow.num_rows() as u64, run.num_serial_retests);
        assert_eq!(col::<StringArray>(slow, "kind").value(0), "retested");
    }
}

#[test]
fn np8_retests_match_stdout() {
    // stdout of the run: "0: PINGPONG 6 <-> 5: 1st: 19131.7145us … 2nd: 113.9291us".
    let run = linktest::read_file(&case_path("np8_mix_retest3")).unwrap();
    let s = &run.permutations[0].slow_links;
    assert_eq!(s.len(), 3);
    assert_eq!((s[0].from_rank, s[0].to_rank), (6, 5));
    assert!((s[0].time_s * 1e6 - 19131.7145).abs() < 1e-3);
    assert!((s[0].retest_time_s.unwrap() * 1e6 - 113.9291).abs() < 1e-3);
}

#[test]
fn ingest_kind_linktest_reads_all_cases() {
    let inputs: Vec<InputFile> = CASES
        .iter()
        .map(|c| InputFile::from_path(case_path(c)))
        .collect();
    let out = ingest(
        "linktest",
        &inputs,
        &IngestContext {
            run_id: "R".into(),
            date: "2026-11-22".into(),
        },
    )
    .unwrap();
    assert_eq!(out.len(), 5);
    assert_eq!(out[0].rows(), 4);
    assert_eq!(out[1].rows(), 4 + 4 + 8 + 16);
    assert_eq!(out[2].rows(), 12 + 12 + 56 + 240);
    assert!(
        benchlake_formats::kinds()
            .iter()
            .any(|(k, _)| *k == "linktest")
    );
}

#[test]
fn inspect_reports_container_and_header() {
    let ins = inspect_file(&case_path("np16_a2a_mix")).unwrap();
    assert_eq!(ins.ntasks, 16);
    assert_eq!(ins.files[0].sion_version, "1.7p6");
    assert_eq!(ins.files[0].chunksizes[4], 1156);
    let l = ins.linktest.as_ref().unwrap();
    assert_eq!(l.linktest_version, "1.2p1");
    assert_eq!((l.num_messages, l.message_size), (2, 4096));
    assert!(l.flags.all_to_all && l.flags.mix_ranks);
    assert_eq!(ins.ranks[0].bytes, 1113);
    assert_eq!(ins.ranks[15].bytes, 609);
    assert_eq!(ins.ranks[3].hostname.as_deref(), Some("vm"));
    let text = ins.to_text();
    assert!(text.contains("LinkTest 1.2p1"), "{text}");
    assert!(text.contains("all-to-all, mixed ranks"), "{text}");
    let json = serde_json::to_value(&ins).unwrap();
    assert_eq!(json["files"][0]["globalskip"], 12288);
    // A SION file that is not LinkTest still inspects, with the reason.
    let probe = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/linktest/sion_probes/p1_np4_bw_1file_multiblock/probe.sion"
    ));
    let ins = inspect_file(probe).unwrap();
    assert!(ins.linktest.is_none());
    assert!(ins.payload_error.unwrap().contains("LKTST"));
    assert_eq!(ins.ranks[3].bytes, 1600);
}

#[test]
fn truncated_payload_is_an_error_with_file_offset() {
    // Cut rank 3's block by one byte in META2: caught by the length check that
    // runs before the matrix is allocated, at rank 3's chunk.
    let p = case_path("np4_default");
    let mut d = std::fs::read(&p).unwrap();
    let bs = 8192 + 32 + 24;
    d[bs..bs + 8].copy_from_slice(&336i64.to_le_bytes());
    let set = SionSet::from_bytes(Path::new("cut.sion"), vec![d]).unwrap();
    let err = linktest::decode(&set).unwrap_err().to_string();
    assert!(err.contains("rank 3: payload"), "{err}");
    assert!(
        err.contains(&format!("byte offset {}", 4096 + 553 + 337 + 337)),
        "{err}"
    );
    // Cut rank 0 by one byte: its last array (sto, at 537 in the stream) is short.
    let mut d = std::fs::read(&p).unwrap();
    let bs = 8192 + 32;
    d[bs..bs + 8].copy_from_slice(&552i64.to_le_bytes());
    let set = SionSet::from_bytes(Path::new("cut0.sion"), vec![d]).unwrap();
    let err = linktest::decode(&set).unwrap_err().to_string();
    assert!(
        err.contains("rank 0: sto") && err.contains("byte offset 4633"),
        "{err}"
    );
    // Wrong ID.
    let mut d = std::fs::read(&p).unwrap();
    d[4096 + 553] = b'X';
    let set = SionSet::from_bytes(Path::new("id.sion"), vec![d]).unwrap();
    let err = linktest::decode(&set).unwrap_err().to_string();
    assert!(
        err.contains("rank 1: ID") && err.contains("byte offset 4649"),
        "{err}"
    );
}

#[test]
fn huge_rank_count_with_short_streams_is_rejected_before_allocating() {
    use benchlake_formats::sion::{SionWriteOptions, TaskData, encode_sion_set};
    let n = 3000usize;
    let mut r0 = b"LKTST".to_vec();
    for v in [1i32, 2, 1] {
        r0.extend_from_slice(&v.to_le_bytes());
    }
    r0.resize(r0.len() + 256 + 16 + 40 + 80 + 12 * n + 24 * n, 0);
    let tiny = [0u8; 1];
    let mut tasks = vec![TaskData::single(&r0)];
    tasks.extend((1..n).map(|_| TaskData::single(&tiny)));
    let opts = SionWriteOptions {
        fsblksize: 1,
        ..Default::default()
    };
    let files = encode_sion_set(Path::new("big.sion"), &tasks, &opts).unwrap();
    let set = SionSet::from_bytes(Path::new("big.sion"), files).unwrap();
    let err = linktest::decode(&set).unwrap_err().to_string();
    assert!(
        err.contains("rank 1: payload") && err.contains("3000 ranks need at least 36289"),
        "{err}"
    );
}
