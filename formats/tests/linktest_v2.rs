//! LinkTest 2.1.17: a file assembled by hand from the spec's tables decodes to
//! the values put in; the writer places fields at the spec's offsets; writer →
//! reader round trips for many shapes; corrupted payloads give errors with
//! file offsets.
use std::path::Path;

use arrow::array::{Array, Float64Array, Int32Array, StringArray, TimestampMicrosecondArray};
use benchlake_formats::linktest::v2::{self, encode_file};
use benchlake_formats::linktest::{
    AllToAllTime, Flags, LinkTestRun, PayloadFormat, Permutation, RankInfo, SlowLink, decode,
    inspect_set, into_run_tables, run_tables,
};
use benchlake_formats::sion::{
    ByteOrder, ChunkLayout, SionSet, SionWriteOptions, TaskData, encode_sion_set,
};
use proptest::prelude::*;

/// Little-endian byte builder for hand-made payloads.
#[derive(Default)]
struct B(Vec<u8>);
impl B {
    fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.raw(&[v])
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    fn f64(&mut self, v: f64) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    fn padded(&mut self, s: &str, width: usize) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.resize(width, 0);
        self.raw(&v)
    }
}

/// A 3-rank, all-to-all, 2-retest, single-permutation file built byte by byte
/// from the 2.1.17 tables (with the documented decisions).
fn hand_made() -> Vec<Vec<u8>> {
    let n = 3usize;
    let mut streams = Vec::new();
    for r in 0..n {
        let mut b = B::default();
        if r == 0 {
            b.raw(b"LinkTest").u32(2).u32(1).u32(17);
            b.padded("0123456789abcdef0123456789abcdef01234567", 41);
            b.u32(4).padded("MPI", 4);
            // a2a, bidir, unidir, bisection, steprand, serial, nosion, parsion, gpu, multibuf, randbuf, checkbuf, alloc
            for v in [1u8, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 2] {
                b.u8(v);
            }
            b.u64(100)
                .u64(1 << 20)
                .u64(10)
                .u64(2)
                .u64(1)
                .u64(77)
                .u64(0)
                .u64(99);
            b.raw(b"END_HEADER");
        }
        let host = format!("node{:02}", r / 2);
        b.u32(host.len() as u32 + 1).padded(&host, host.len() + 1);
        b.raw(&(r as i32 * 4).to_le_bytes());
        if r == 0 {
            b.padded("2026-11-23 07:00:00", 32);
            b.f64(1e-6).f64(2e-6).f64(3e-6);
            b.f64(4e-5).f64(5e-5).f64(6e-5);
            b.f64(1.5e-6).f64(1.25e-6); // retested
            b.f64(3e-6).f64(2.75e-6); // slowest
            b.u64(2).u64(1); // senders
            b.u64(0).u64(2); // receivers
            b.padded("2026-11-23 07:00:05", 32);
        }
        // Slot k → partner k (< r) or k + 1; time = 1e-6·(10 r + j), step = (r + j) % n + 1.
        for j in (0..n).filter(|j| *j != r) {
            b.f64(1e-6 * (10 * r + j) as f64);
        }
        for j in (0..n).filter(|j| *j != r) {
            b.u64(((r + j) % n + 1) as u64);
        }
        b.f64(1e-4 * (r + 1) as f64);
        b.raw(b"END_BLOCK");
        streams.push(b.0);
    }
    streams
}

/// The one-file little-endian SION container of rank `streams`.
fn container_of(path: &Path, streams: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let tasks: Vec<TaskData<'_>> = streams.iter().map(|s| TaskData::single(s)).collect();
    let opts = SionWriteOptions {
        byte_order: ByteOrder::Little,
        user_data_big_endian: false,
        ..Default::default()
    };
    encode_sion_set(path, &tasks, &opts).unwrap()
}

fn set_of(streams: &[Vec<u8>]) -> SionSet {
    let path = Path::new("pingpong_results_bin.sion");
    SionSet::from_bytes(path, container_of(path, streams)).unwrap()
}

/// [`container_of`] written as `pingpong_results_bin.sion` in `dir` (the
/// input of an ingest, which reads files).
fn file_of(dir: &Path, streams: &[Vec<u8>]) -> std::path::PathBuf {
    let path = dir.join("pingpong_results_bin.sion");
    std::fs::write(&path, &container_of(&path, streams)[0]).unwrap();
    path
}

#[test]
fn hand_made_file_decodes_to_its_values() {
    let set = set_of(&hand_made());
    let run = decode(&set).unwrap();
    assert_eq!(run.format, PayloadFormat::V2);
    assert_eq!(run.version_string(), "2.1.17");
    assert_eq!(
        run.git_hash.as_deref(),
        Some("0123456789abcdef0123456789abcdef01234567")
    );
    assert_eq!(run.mode, "MPI");
    assert_eq!(
        run.flags,
        Flags {
            all_to_all: true,
            unidirectional: true,
            randomize_steps: true,
            parallel_sion: true,
            check_buffers: true,
            ..Flags::default()
        }
    );
    assert_eq!(run.memory_allocator, Some(2));
    assert_eq!((run.num_messages, run.message_size), (100, 1 << 20));
    assert_eq!(run.num_warmup_messages, Some(10));
    assert_eq!(run.num_serial_retests, 2);
    assert_eq!(run.num_multi_buffers, Some(1));
    assert_eq!(run.buffer_seed, Some(77));
    assert_eq!(run.num_randomized_tasks, Some(0));
    assert_eq!(run.task_seed, Some(99));
    assert_eq!(run.ranks[2].hostname, "node01");
    assert_eq!(run.ranks[2].core_id, Some(8));
    assert_eq!(run.permutations.len(), 1);
    let p = &run.permutations[0];
    assert_eq!(p.start_time.as_deref(), Some("2026-11-23 07:00:00"));
    assert_eq!(p.end_time.as_deref(), Some("2026-11-23 07:00:05"));
    assert_eq!(
        (p.min_time_s, p.avg_time_s, p.max_time_s),
        (1e-6, 2e-6, 3e-6)
    );
    assert_eq!(p.a2a, Some([4e-5, 5e-5, 6e-5]));
    for r in 0..3 {
        for j in 0..3 {
            let (t, s) = (p.times[r * 3 + j], p.steps[r * 3 + j]);
            if r == j {
                assert_eq!((t, s), (0.0, 0));
            } else {
                assert_eq!(t, 1e-6 * (10 * r + j) as f64);
                assert_eq!(s as usize, (r + j) % 3 + 1);
            }
        }
    }
    assert_eq!(
        p.alltoall[1],
        AllToAllTime {
            rank: 1,
            step: None,
            time_s: 2e-4
        }
    );
    assert_eq!(
        p.slow_links,
        vec![
            SlowLink {
                from_rank: 2,
                to_rank: 0,
                time_s: 3e-6,
                retest_time_s: Some(1.5e-6)
            },
            SlowLink {
                from_rank: 1,
                to_rank: 2,
                time_s: 2.75e-6,
                retest_time_s: Some(1.25e-6)
            },
        ]
    );

    // Tables.
    let t = run_tables(&run, "R", "f.sion").unwrap();
    let runs = &t[0].batches[0];
    let start = runs
        .column_by_name("start_time")
        .unwrap()
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    // 2026-11-23T07:00:00Z
    assert_eq!(start.value(0), 1_795_417_200_000_000);
    let end = runs
        .column_by_name("end_time")
        .unwrap()
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(end.value(0) - start.value(0), 5_000_000);
    let git = runs
        .column_by_name("git_hash")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(git.value(0).len(), 40);
    assert_eq!(t[2].rows(), 6);
    let a2a = &t[3].batches[0];
    assert_eq!(a2a.num_rows(), 3);
    assert!(a2a.column_by_name("step").unwrap().is_null(0));
    let ranks = &t[1].batches[0];
    let core = ranks
        .column_by_name("core_id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int32Array>()
        .unwrap();
    assert_eq!(core.value(1), 4);
    let slow = &t[4].batches[0];
    let rt = slow
        .column_by_name("retest_time_s")
        .unwrap()
        .as_any()
        .downcast_ref::<Float64Array>()
        .unwrap();
    assert_eq!(rt.value(0), 1.5e-6);
    for out in &t {
        benchlake_core::lake::encode_parquet(&out.table, "2026-11-22", &out.batches).unwrap();
    }
    let text = inspect_set(&set).to_text();
    assert!(
        text.contains("LinkTest 2.1.17 (V2 layout), mode MPI"),
        "{text}"
    );
    assert!(text.contains("node01"), "{text}");
}

#[test]
fn writer_puts_header_fields_at_spec_offsets() {
    let run = decode(&set_of(&hand_made())).unwrap();
    let opts = SionWriteOptions {
        byte_order: ByteOrder::Little,
        user_data_big_endian: false,
        ..Default::default()
    };
    let files = encode_file(&run, Path::new("x.sion"), &opts).unwrap();
    let d = &files[0];
    // a = start of rank 0's chunk = align_up(1088 + 16·3, 4096).
    let a = 4096;
    assert_eq!(&d[a..a + 8], b"LinkTest");
    assert_eq!(&d[a + 8..a + 20], &[2, 0, 0, 0, 1, 0, 0, 0, 17, 0, 0, 0]);
    assert_eq!(&d[a + 20..a + 24], b"0123");
    assert_eq!(d[a + 60], 0, "git hash is 41 bytes, NUL-terminated");
    let b = u32::from_le_bytes(d[a + 61..a + 65].try_into().unwrap()) as usize;
    assert_eq!(b, 4);
    assert_eq!(&d[a + 65..a + 65 + b], b"MPI\0");
    assert_eq!(d[a + 65 + b], 1, "all-to-all flag at 65+a+b");
    assert_eq!(
        u64::from_le_bytes(d[a + 78 + b..a + 86 + b].try_into().unwrap()),
        100
    );
    assert_eq!(&d[a + 142 + b..a + 152 + b], b"END_HEADER");
    // The writer's rank streams equal the hand-made ones byte for byte.
    let set = SionSet::from_bytes(Path::new("x.sion"), files).unwrap();
    for (r, want) in hand_made().iter().enumerate() {
        assert_eq!(
            set.task(r).unwrap().contiguous().as_ref(),
            want.as_slice(),
            "rank {r}"
        );
    }
}

fn err_of(streams: &[Vec<u8>]) -> String {
    decode(&set_of(streams)).unwrap_err().to_string()
}

#[test]
fn corrupted_payloads_are_errors_with_offsets() {
    let good = hand_made();
    // Missing END_BLOCK on rank 2.
    let mut s = good.clone();
    let l = s[2].len();
    s[2][l - 1] = b'X';
    let e = err_of(&s);
    assert!(e.contains("rank 2: END_BLOCK"), "{e}");
    let chunk = |r: usize| set_of(&good).task(r).unwrap().blocks[0].offset as usize;
    let chunk2 = chunk(2);
    assert!(
        e.contains(&format!("byte offset {}", chunk2 + l - 9)),
        "{e}"
    );
    // Broken END_HEADER.
    let mut s = good.clone();
    s[0][142 + 4] = b'x';
    let e = err_of(&s);
    assert!(
        e.contains("rank 0: END_HEADER") && e.contains("byte offset 4242"),
        "{e}"
    );
    // Absurd number of serial retests: caught before allocating.
    let mut s = good.clone();
    s[0][106..114].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = err_of(&s);
    assert!(
        e.contains("serial retests") || e.contains("data chunk"),
        "{e}"
    );
    // Randomized-task count that does not fit the data.
    let mut s = good.clone();
    s[0][130..138].copy_from_slice(&5u64.to_le_bytes());
    let e = err_of(&s);
    assert!(
        e.contains("randomized tasks") && e.contains("1 permutations"),
        "{e}"
    );
    // A slow partner outside the ranks.
    let mut s = good.clone();
    let send0 = 152 + 4 + 8 + 7 + 32 + 48 + 32;
    s[0][send0..send0 + 8].copy_from_slice(&9u64.to_le_bytes());
    let e = err_of(&s);
    assert!(
        e.contains("slow sending partners") && e.contains("rank 9 outside 0..3"),
        "{e}"
    );
    // A truncated rank 1.
    let mut s = good.clone();
    s[1].truncate(30);
    let e = err_of(&s);
    assert!(e.contains("rank 1: data chunk"), "{e}");
    // Hostname length past the end.
    let mut s = good.clone();
    s[1][0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = err_of(&s);
    assert!(
        e.contains("rank 1: hostname") && e.contains(&format!("byte offset {}", chunk(1) + 4)),
        "{e}"
    );
}

#[test]
fn a_step_beyond_i32_is_an_error_at_its_offset_in_both_readers() {
    // Rank 1: hostname length (4), "node00\0" (7), core id (4), two times
    // (16), then its two steps; the second one does not fit i32.
    let mut s = hand_made();
    s[1][39..47].copy_from_slice(&(1u64 << 31).to_le_bytes());
    let at = set_of(&s).task(1).unwrap().blocks[0].offset as usize + 39;
    let want = |e: &str| {
        assert!(
            e.contains("rank 1: access pattern")
                && e.contains(&format!("byte offset {at}"))
                && e.contains("step 2147483648 exceeds i32"),
            "{e}"
        );
    };
    want(&err_of(&s));
    // The streaming ingest (the CLI's) reads the slots straight into its
    // columns and finds the same step.
    let dir = tempfile::tempdir().unwrap();
    let path = file_of(dir.path(), &s);
    let ctx = benchlake_formats::IngestContext {
        run_id: "01JBENCH000000000000000001".into(),
        date: "2026-11-22".into(),
    };
    let input = benchlake_formats::InputFile::from_path(&path);
    let e = benchlake_formats::ingest_encoded("linktest", &[input], &ctx).unwrap_err();
    want(&e.to_string());
}

// ---------- round trip ----------

fn run_strategy() -> impl Strategy<Value = (LinkTestRun, ByteOrder, u32)> {
    (
        1usize..7,
        1usize..4,
        0u64..4,
        any::<[bool; 12]>(),
        any::<bool>(),
        any::<bool>(),
        1u32..3,
    )
        .prop_flat_map(|(n, m, d, fl, big, r_is_m, nfiles)| {
            let pairs = n * n;
            let perm = (
                prop::collection::vec(1e-7f64..1.0, pairs),
                prop::collection::vec(1i32..100_000, pairs),
                prop::collection::vec(1e-6f64..1.0, n),
                prop::collection::vec((0..n, 0..n, 1e-7f64..1.0, 1e-7f64..1.0), 0..=d as usize),
                prop::option::of("[0-9: -]{1,31}"),
                prop::option::of("[0-9: -]{1,31}"),
                any::<[u32; 6]>(),
            );
            (
                Just((n, m, d, fl, big, r_is_m, nfiles)),
                prop::collection::vec(perm, m),
                prop::collection::vec(("[a-z0-9.-]{0,40}", any::<i32>()), n),
                prop::option::of("[0-9a-f]{1,40}"),
                "[A-Za-z]{0,12}",
                any::<[u64; 5]>(),
                any::<u8>(),
            )
        })
        .prop_map(
            |((n, m, d, fl, big, r_is_m, nfiles), perms, hosts, git, mode, nums, alloc)| {
                let flags = Flags {
                    all_to_all: fl[0],
                    bidirectional: fl[1],
                    unidirectional: fl[2],
                    bisection: fl[3],
                    randomize_steps: fl[4],
                    serial: fl[5],
                    no_sion_file: fl[6],
                    parallel_sion: fl[7],
                    gpu_memory: fl[8],
                    multi_buffer: fl[9],
                    randomize_buffers: fl[10],
                    check_buffers: fl[11],
                    mix_ranks: false,
                };
                let permutations = perms
                    .into_iter()
                    .map(|(mut times, mut steps, a2a, slow, st, et, stats)| {
                        for i in 0..n {
                            times[i * n + i] = 0.0;
                            steps[i * n + i] = 0;
                        }
                        Permutation {
                            start_time: st,
                            end_time: et,
                            min_time_s: f64::from(stats[0]),
                            avg_time_s: f64::from(stats[1]),
                            max_time_s: f64::from(stats[2]),
                            a2a: flags.all_to_all.then_some([
                                f64::from(stats[3]),
                                f64::from(stats[4]),
                                f64::from(stats[5]),
                            ]),
                            times,
                            steps,
                            alltoall: if flags.all_to_all {
                                a2a.iter()
                                    .enumerate()
                                    .map(|(r, t)| AllToAllTime {
                                        rank: r,
                                        step: None,
                                        time_s: *t,
                                    })
                                    .collect()
                            } else {
                                Vec::new()
                            },
                            slow_links: slow
                                .into_iter()
                                .filter(|(f, t, _, _)| f != t)
                                .map(|(f, t, a, b)| SlowLink {
                                    from_rank: f,
                                    to_rank: t,
                                    time_s: a,
                                    retest_time_s: Some(b),
                                })
                                .collect(),
                        }
                    })
                    .collect();
                let run = LinkTestRun {
                    format: PayloadFormat::V2,
                    version: [2, 1, 17],
                    git_hash: git,
                    mode,
                    num_tasks: n,
                    num_messages: nums[0],
                    message_size: nums[1],
                    num_warmup_messages: Some(nums[2]),
                    num_serial_retests: d,
                    num_multi_buffers: Some(nums[3]),
                    buffer_seed: Some(nums[4]),
                    num_randomized_tasks: Some(if r_is_m { m as u64 } else { m as u64 - 1 }),
                    task_seed: Some(nums[0] ^ nums[4]),
                    memory_allocator: Some(alloc),
                    flags,
                    v1_stats: None,
                    ranks: hosts
                        .into_iter()
                        .enumerate()
                        .map(|(r, (h, c))| RankInfo {
                            rank: r,
                            hostname: h,
                            core_id: Some(c),
                            coords: None,
                        })
                        .collect(),
                    permutations,
                };
                (
                    run,
                    if big {
                        ByteOrder::Big
                    } else {
                        ByteOrder::Little
                    },
                    nfiles.min(n as u32),
                )
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn v2_writer_reader_round_trip((run, order, nfiles) in run_strategy()) {
        let opts = SionWriteOptions {
            byte_order: order,
            user_data_big_endian: order == ByteOrder::Big,
            nfiles,
            layout: if nfiles == 2 { ChunkLayout::Collective { group_size: 2 } } else { ChunkLayout::Aligned },
            ..Default::default()
        };
        let files = encode_file(&run, Path::new("rt.sion"), &opts).unwrap();
        let set = SionSet::from_bytes(Path::new("rt.sion"), files).unwrap();
        let back = decode(&set).unwrap();
        prop_assert_eq!(&back, &run);
        let tables = run_tables(&back, "R", "rt.sion").unwrap();
        let n = run.num_tasks;
        prop_assert_eq!(tables[2].rows(), n * (n - 1) * run.permutations.len());
        prop_assert_eq!(tables[3].rows(), if run.flags.all_to_all { n * run.permutations.len() } else { 0 });
        // The consuming variant (timing matrices turned into columns in place
        // for one fully measured permutation) gives the same rows, also when a
        // pair was not measured (copying path).
        let mut partial = back.clone();
        if n > 1 {
            partial.permutations[0].times[1] = 0.0;
            partial.permutations[0].steps[1] = 0;
        }
        for r in [back, partial] {
            let want = run_tables(&r, "R", "rt.sion").unwrap();
            let got = into_run_tables(r, "R", "rt.sion").unwrap();
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(&g.table, &w.table);
                let schema = benchlake_core::catalog::schema(&w.table).unwrap();
                prop_assert_eq!(
                    arrow::compute::concat_batches(&schema, &g.batches).unwrap(),
                    arrow::compute::concat_batches(&schema, &w.batches).unwrap()
                );
            }
        }
    }

    #[test]
    fn v2_decoder_never_panics_on_mutations(pos in 0usize..600, val in any::<u8>(), cut in 0usize..600) {
        let mut s = hand_made();
        let len0 = s[0].len();
        let k = pos % len0;
        s[0][k] = val;
        s[0].truncate(cut.max(k + 1));
        let _ = decode(&set_of(&s));
        let _ = v2::ID;
    }

    /// The streaming ingest (slots converted straight into the row group)
    /// and the in-memory one agree on any rank's mutated bytes: both fail
    /// with the same error, or both give the same rows.
    #[test]
    fn streamed_and_in_memory_ingest_agree_on_mutations(
        rank in 0usize..3, pos in 0usize..600, val in any::<u8>(), cut in 0usize..600,
    ) {
        let mut s = hand_made();
        let len = s[rank].len();
        let k = pos % len;
        s[rank][k] = val;
        s[rank].truncate(cut.max(k + 1));
        let dir = tempfile::tempdir().unwrap();
        let path = file_of(dir.path(), &s);
        let ctx = benchlake_formats::IngestContext {
 run_id: "01JBENCH000000000000000001".into(),
 date: "2026-11-22".into(),
 };
        let input = benchlake_formats::InputFile::from_path(&path);
        let streamed = benchlake_formats::ingest_encoded("linktest", std::slice::from_ref(&input), &ctx);
        let in_memory = benchlake_formats::ingest("linktest", std::slice::from_ref(&input), &ctx);
        match (streamed, in_memory) {
            (Ok(g), Ok(w)) => {
                let w = benchlake_core::lake::EncodedTable::encode(&w[2], "2026-11-22").unwrap();
                prop_assert!(g[2].data == w.data, "the timings files differ");
            }
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "streamed {:?}, in memory {:?}", a.map(|_| ()), b.map(|_| ())),
        }
    }
}

/// One `linktest` ingest of many files (real 1.2p1 files, small and large
/// synthetic 2.1.17 files, one with an unmeasured pair, one with two
/// permutations) has, table by table, the rows of `run_tables` of each file
/// in input order; the large files keep batches of their own.
#[test]
fn ingest_of_many_files_has_the_rows_of_each_file_in_order() {
    use benchlake_formats::linktest::synth::synthetic_run;
    use benchlake_formats::{IngestContext, InputFile};
    let dir = tempfile::tempdir().unwrap();
    let real: Vec<std::path::PathBuf> = ["np4_default", "np16_a2a_mix", "np8_mix_retest3"]
        .iter()
        .map(|c| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/data/linktest/v1.2p1")
                .join(c)
                .join("pingpong_results_bin.sion")
        })
        .collect();
    let mut runs: Vec<(std::path::PathBuf, LinkTestRun)> = Vec::new();
    let mut partial = synthetic_run(300, 48, 3);
    partial.permutations[0].times[5] = 0.0;
    partial.permutations[0].steps[5] = 0;
    let mut two = synthetic_run(6, 2, 4);
    let p = two.permutations[0].clone();
    two.permutations.push(p);
    two.num_randomized_tasks = Some(1);
    for (k, run) in [
        synthetic_run(5, 2, 1),
        synthetic_run(300, 48, 2),
        partial,
        two,
        synthetic_run(257, 48, 5),
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.path().join(format!("s{k}.sion"));
        v2::write_file(&run, &path, &SionWriteOptions::default()).unwrap();
        runs.push((path, run));
    }
    // Interleave the real and the synthetic files.
    let mut paths = Vec::new();
    for (i, (p, _)) in runs.iter().enumerate() {
        paths.push(p.clone());
        if let Some(r) = real.get(i) {
            paths.push(r.clone());
        }
    }
    let inputs: Vec<InputFile> = paths.iter().map(InputFile::from_path).collect();
    let got = benchlake_formats::ingest(
        "linktest",
        &inputs,
        &IngestContext {
            run_id: "R".into(),
            date: "2026-11-22".into(),
        },
    )
    .unwrap();
    let mut want: Vec<Vec<arrow::record_batch::RecordBatch>> = vec![Vec::new(); 5];
    for i in &inputs {
        let run = benchlake_formats::linktest::read_file(&i.path).unwrap();
        for (w, t) in want
            .iter_mut()
            .zip(run_tables(&run, "R", &i.source).unwrap())
        {
            w.extend(t.batches);
        }
    }
    assert_eq!(got.len(), 5);
    for (g, w) in got.iter().zip(&want) {
        let schema = benchlake_core::catalog::schema(&g.table).unwrap();
        let g_all = arrow::compute::concat_batches(&schema, &g.batches).unwrap();
        let w_all = arrow::compute::concat_batches(&schema, w).unwrap();
        assert!(g_all.num_rows() > 0, "{}", g.table);
        assert_eq!(g_all, w_all, "{}", g.table);
    }
    // 8 files, one batch for each small table.
    assert_eq!(got[0].batches.len(), 1);
    assert_eq!(got[0].rows(), 8);
    assert_eq!(got[1].batches.len(), 1);
    // 300·299 + 300·299 − 1 + 257·256 rows come in the large files' own batches.
    assert!(got[2].batches.len() >= 4, "{}", got[2].batches.len());
}

/// Rows of a Parquet file, as one batch.
fn parquet_rows<R: parquet::file::reader::ChunkReader + 'static>(
    data: R,
    table: &str,
) -> arrow::record_batch::RecordBatch {
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    let schema = benchlake_core::catalog::schema(table).unwrap();
    arrow::compute::concat_batches(&schema, &batches).unwrap()
}

/// `ingest_encoded("linktest")` (what the CLI writes: pair times streamed into
/// the file a row group at a time) gives the Parquet bytes of `ingest`'s
/// batches for one large file (two row groups), and the same rows for a mix
/// of real 1.2p1 files, a two-permutation file, an unmeasured pair and
/// files whose row groups straddle them.
#[test]
fn encoded_ingest_equals_the_batches_encoded() {
    use benchlake_core::lake::EncodedTable;
    use benchlake_formats::linktest::synth::synthetic_run;
    use benchlake_formats::{IngestContext, InputFile};
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, run: &LinkTestRun| {
        let path = dir.path().join(name);
        v2::write_file(run, &path, &SionWriteOptions::default()).unwrap();
        InputFile::from_path(path)
    };
    let ctx = IngestContext {
        run_id: "01JBENCH000000000000000001".into(),
        date: "2026-11-22".into(),
    };
    // 1,025 ranks: 1,049,600 pair times, one more row group than 2^20.
    let big = write("big.sion", &synthetic_run(1025, 48, 7));
    let got =
        benchlake_formats::ingest_encoded("linktest", std::slice::from_ref(&big), &ctx).unwrap();
    let want = benchlake_formats::ingest("linktest", std::slice::from_ref(&big), &ctx).unwrap();
    assert_eq!(got.len(), 5);
    for (g, w) in got.iter().zip(&want) {
        let w = EncodedTable::encode(w, "2026-11-22").unwrap();
        assert_eq!((&g.table, g.rows), (&w.table, w.rows));
        assert!(g.data == w.data, "{}: the encoded bytes differ", g.table);
    }
    assert_eq!(got[2].rows, 1025 * 1024);

    let mut partial = synthetic_run(700, 48, 3);
    partial.permutations[0].times[9] = 0.0;
    partial.permutations[0].steps[9] = 0;
    let mut two = synthetic_run(6, 2, 4);
    let p = two.permutations[0].clone();
    two.permutations.push(p);
    two.num_randomized_tasks = Some(1);
    let real = |c: &str| {
        InputFile::from_path(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/data/linktest/v1.2p1")
                .join(c)
                .join("pingpong_results_bin.sion"),
        )
    };
    let inputs = vec![
        real("np4_default"),
        write("a.sion", &synthetic_run(900, 48, 1)),
        write("two.sion", &two),
        write("partial.sion", &partial),
        real("np16_a2a_mix"),
        write("b.sion", &synthetic_run(5, 2, 2)),
        real("np8_mix_retest3"),
    ];
    let got = benchlake_formats::ingest_encoded("linktest", &inputs, &ctx).unwrap();
    let want = benchlake_formats::ingest("linktest", &inputs, &ctx).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let w = EncodedTable::encode(w, "2026-11-22").unwrap();
        assert_eq!((&g.table, g.rows), (&w.table, w.rows));
        assert_eq!(
            parquet_rows(g.data.clone(), &g.table),
            parquet_rows(w.data.clone(), &w.table),
            "{}",
            g.table
        );
        // The gathered tables (their run_id and source written from runs)
        // are the bytes of the batches.
        if g.table != "linktest_timings" {
            assert!(g.data == w.data, "{}: the encoded bytes differ", g.table);
        }
    }
    assert!(got[2].rows > 1 << 20, "{}", got[2].rows);

    // Many small real files (the CLI's 1,000-file case, shortened): 300
    // copies make large gathered tables (72,000 rows of linktest_alltoall),
    // every table the bytes of the batches.
    let src = real("np16_a2a_mix");
    let inputs: Vec<InputFile> = (0..300)
        .map(|i| {
            let d = dir.path().join(format!("r{i:04}"));
            std::fs::create_dir(&d).unwrap();
            let p = d.join("pingpong_results_bin.sion");
            std::fs::copy(&src.path, &p).unwrap();
            InputFile::from_path(p)
        })
        .collect();
    let got = benchlake_formats::ingest_encoded("linktest", &inputs, &ctx).unwrap();
    let want = benchlake_formats::ingest("linktest", &inputs, &ctx).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let w = EncodedTable::encode(w, "2026-11-22").unwrap();
        assert_eq!((&g.table, g.rows), (&w.table, w.rows));
        assert!(g.data == w.data, "{}: the encoded bytes differ", g.table);
    }
    let rows: Vec<usize> = got.iter().map(|t| t.rows).collect();
    assert_eq!(rows, [300, 300 * 16, 300 * 240, 300 * 240, 300 * 5]);
    let a2a = parquet_rows(got[3].data.clone(), "linktest_alltoall");
    let source = a2a
        .column_by_name("source")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .unwrap();
    assert_eq!(source.value(0), inputs[0].source);
    assert_eq!(source.value(240 * 299 + 7), inputs[299].source);
    assert_eq!(source.value(240 * 150 - 1), inputs[149].source);
}

/// The streaming ingest reads big-endian files (each slot converted on its
/// way into the row group) to the same rows as the in-memory one, with
/// unmeasured pairs left out, in both byte orders. The table is large (89,700
/// rows): its times go to pages as they come from rank 219 on, straight from
/// the file where the slots allow it, through a copy around an unmeasured pair
/// or a step 0, or from a big-endian file; the bytes are those of the batches.
#[test]
fn streamed_ingest_reads_both_byte_orders() {
    use benchlake_formats::linktest::synth::synthetic_run;
    use benchlake_formats::{IngestContext, InputFile};
    let dir = tempfile::tempdir().unwrap();
    let ctx = IngestContext {
        run_id: "01JBENCH000000000000000001".into(),
        date: "2026-11-22".into(),
    };
    let n = 300;
    let mut run = synthetic_run(n, 4, 11);
    // Pairs 0→1, 0→2, 1→2, 290→5 and 299→298 were not measured.
    for k in [1, 2, n + 2, 290 * n + 5, n * n - 2] {
        run.permutations[0].times[k] = 0.0;
        run.permutations[0].steps[k] = 0;
    }
    // A measured pair at step 0 (kept), once the pages are being made.
    run.permutations[0].steps[250 * n + 7] = 0;
    let mut rows = Vec::new();
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let path = dir.path().join(format!("{order:?}.sion"));
        let opts = SionWriteOptions {
            byte_order: order,
            user_data_big_endian: order == ByteOrder::Big,
            ..Default::default()
        };
        v2::write_file(&run, &path, &opts).unwrap();
        let input = InputFile::from_path(&path);
        let got = benchlake_formats::ingest_encoded("linktest", std::slice::from_ref(&input), &ctx)
            .unwrap();
        let want =
            benchlake_formats::ingest("linktest", std::slice::from_ref(&input), &ctx).unwrap();
        let g = parquet_rows(got[2].data.clone(), &got[2].table);
        let w = parquet_rows(
            benchlake_core::lake::EncodedTable::encode(&want[2], "2026-11-22")
                .unwrap()
                .data,
            &want[2].table,
        );
        assert_eq!(g, w, "{order:?}");
        let w = benchlake_core::lake::EncodedTable::encode(&want[2], "2026-11-22").unwrap();
        assert!(got[2].data == w.data, "{order:?}: the encoded bytes differ");
        assert_eq!(got[2].rows, n * (n - 1) - 5, "{order:?}");
        rows.push(g);
    }
    // The source column names the file; the values are the same.
    for c in ["from_rank", "to_rank", "step", "time_s"] {
        assert_eq!(rows[0].column_by_name(c), rows[1].column_by_name(c), "{c}");
    }
}

/// With a spill directory (the CLI's local lake), a large timings table is
/// written to a temporary file there: the same bytes as in memory, the small
/// tables stay in memory, and a failing ingest leaves no file behind.
#[test]
fn spilled_timings_are_the_same_bytes_and_never_left_behind() {
    use benchlake_formats::linktest::synth::synthetic_run;
    use benchlake_formats::{IngestContext, InputFile};
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    std::fs::create_dir_all(&lake).unwrap();
    let ctx = IngestContext {
        run_id: "01JBENCH000000000000000001".into(),
        date: "2026-11-22".into(),
    };
    let path = dir.path().join("big.sion");
    v2::write_file(
        &synthetic_run(300, 48, 2),
        &path,
        &SionWriteOptions::default(),
    )
    .unwrap();
    let big = InputFile::from_path(&path);
    let temp_files = || {
        std::fs::read_dir(&lake)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };
    let got = benchlake_formats::ingest_encoded_in(
        "linktest",
        std::slice::from_ref(&big),
        &ctx,
        Some(&lake),
    )
    .unwrap();
    let want =
        benchlake_formats::ingest_encoded("linktest", std::slice::from_ref(&big), &ctx).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((&g.table, g.rows), (&w.table, w.rows));
        match &g.spilled {
            Some(f) => {
                assert_eq!(g.table, "linktest_timings");
                assert!(g.data.is_empty());
                let p: &Path = f.path.as_ref();
                assert!(p.starts_with(&lake), "{}", p.display());
                assert_eq!(f.len, w.data.len() as u64);
                assert!(
                    std::fs::read(p).unwrap() == w.data,
                    "the spilled file differs"
                );
            }
            None => assert!(g.data == w.data, "{} differs", g.table),
        }
    }
    assert!(got[2].spilled.is_some());
    assert_eq!(temp_files().len(), 1, "{:?}", temp_files());
    drop(got);
    assert!(temp_files().is_empty(), "{:?}", temp_files());
    // A corrupt file after the large one: the ingest fails, nothing is left.
    let bad = dir.path().join("bad.sion");
    std::fs::write(&bad, b"not a SION file").unwrap();
    let e = benchlake_formats::ingest_encoded_in(
        "linktest",
        &[big, InputFile::from_path(&bad)],
        &ctx,
        Some(&lake),
    )
    .unwrap_err();
    assert!(e.to_string().contains("bad.sion"), "{e}");
    assert!(temp_files().is_empty(), "{:?}", temp_files());
}

/// Pages let go with `SionSet::release` read back unchanged (the mapping is
/// re-read from the file), and a set decodes the same after it.
#[test]
fn released_pages_read_back_unchanged() {
    use benchlake_formats::linktest::synth::synthetic_run;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sion");
    let run = synthetic_run(120, 48, 9);
    v2::write_file(&run, &path, &SionWriteOptions::default()).unwrap();
    assert!(
        std::fs::metadata(&path).unwrap().len() > 64 * 1024,
        "mapped, not read"
    );
    let set = SionSet::open_whole(&path).unwrap();
    let before: Vec<Vec<u8>> = set.tasks().map(|t| t.contiguous().into_owned()).collect();
    set.release(0..set.ntasks());
    set.release(5..7);
    let after: Vec<Vec<u8>> = set.tasks().map(|t| t.contiguous().into_owned()).collect();
    assert_eq!(before, after);
    assert_eq!(decode(&set).unwrap(), run);
}

/// The host columns of large files whose hosts change every row (one rank
/// per host) or every few rows: the streamed ingest writes the bytes of the
/// batches (dictionary indices bit-packed), and they read back as each
/// rank's hostname.
#[test]
fn host_columns_of_one_rank_per_host_stream_as_the_batches_encode() {
    use arrow::array::AsArray;
    use benchlake_core::lake::EncodedTable;
    use benchlake_formats::linktest::synth::{hostname, synthetic_run};
    use benchlake_formats::{IngestContext, InputFile};
    let dir = tempfile::tempdir().unwrap();
    let ctx = IngestContext {
        run_id: "01JBENCH000000000000000001".into(),
        date: "2026-11-22".into(),
    };
    for (ranks, rph) in [(300, 1), (270, 3)] {
        let path = dir.path().join(format!("r{rph}.sion"));
        v2::write_file(
            &synthetic_run(ranks, rph, 5),
            &path,
            &SionWriteOptions::default(),
        )
        .unwrap();
        let input = InputFile::from_path(&path);
        let got = benchlake_formats::ingest_encoded("linktest", std::slice::from_ref(&input), &ctx)
            .unwrap();
        let want =
            benchlake_formats::ingest("linktest", std::slice::from_ref(&input), &ctx).unwrap();
        for (g, w) in got.iter().zip(&want) {
            let w = EncodedTable::encode(w, "2026-11-22").unwrap();
            assert!(
                g.data == w.data,
                "{} ({rph} per host): the encoded bytes differ",
                g.table
            );
        }
        let t = parquet_rows(got[2].data.clone(), "linktest_timings");
        assert_eq!(t.num_rows(), ranks * (ranks - 1));
        let from = t
            .column_by_name("from_rank")
            .unwrap()
            .as_primitive::<arrow::datatypes::Int32Type>();
        let to = t
            .column_by_name("to_rank")
            .unwrap()
            .as_primitive::<arrow::datatypes::Int32Type>();
        let fh = t.column_by_name("from_host").unwrap().as_string::<i32>();
        let th = t.column_by_name("to_host").unwrap().as_string::<i32>();
        for i in 0..t.num_rows() {
            assert_eq!(fh.value(i), hostname(from.value(i) as usize, rph));
            assert_eq!(th.value(i), hostname(to.value(i) as usize, rph));
        }
        // The slow links name their hosts too.
        let s = parquet_rows(got[4].data.clone(), "linktest_slow_links");
        let sh = s.column_by_name("to_host").unwrap().as_string::<i32>();
        assert_eq!(sh.value(0), hostname(ranks - 1, rph));
    }
}
