//! SION container: the real probe files written by libsion 1.7.6, corrupted
//! files, and writer → reader round trips.
use std::path::{Path, PathBuf};

use benchlake_formats::FormatError;
use benchlake_formats::error::Position;
use benchlake_formats::sion::{
    ByteOrder, ChunkLayout, SionSet, SionWriteOptions, TaskData, encode_sion_set,
};
use proptest::prelude::*;

fn probe(case: &str) -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/linktest/sion_probes"
    ))
    .join(case)
    .join("probe.sion")
}

/// The probe writer's payload rule: byte k of rank r is (r·31 + k) & 0xff.
fn pattern(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((rank * 31 + k) & 0xff) as u8).collect()
}

#[test]
fn p1_single_file_yields_known_bytes() {
    let set = SionSet::open(&probe("p1_np4_bw_1file_multiblock")).unwrap();
    assert_eq!(set.ntasks(), 4);
    let h = &set.files()[0].header;
    assert_eq!(h.format_version, 5);
    assert_eq!(
        (
            h.sion_version_major,
            h.sion_version_minor,
            h.sion_patch_level
        ),
        (1, 7, 6)
    );
    assert_eq!(h.fsblksize, 4096);
    assert_eq!(h.nfiles, 1);
    assert_eq!(h.filenumber, 0);
    assert_eq!(h.keyval_mode, 50);
    assert_eq!(h.flag1, 214_748_364_800);
    assert_eq!(h.prefix, "probe.sion");
    // Requested 1000, stored aligned to fsblksize (non-collective, format ≥ 4).
    assert_eq!(h.chunksizes, vec![4096; 4]);
    assert_eq!(h.start_of_data, 4096);
    assert_eq!(h.globalskip, 16384);
    assert_eq!(h.maxchunks, 1);
    assert_eq!(h.start_of_varheader, 4096 + 16384);
    assert!(h.mapping.is_empty());
    assert_eq!(h.byte_order, ByteOrder::Little);
    assert!(!h.user_data_big_endian);
    for r in 0..4 {
        let t = set.task(r).unwrap();
        assert_eq!(t.blocks.len(), 1);
        assert_eq!(t.blocks[0].offset, 4096 + 4096 * r as u64);
        assert_eq!(
            t.contiguous().as_ref(),
            pattern(r, 700 + 300 * r).as_slice()
        );
    }
    assert!(set.task(4).is_none());
}

#[test]
fn p2_two_files_with_several_blocks() {
    let set = SionSet::open(&probe("p2_np4_bw_2files_multiblock")).unwrap();
    assert_eq!(set.ntasks(), 4);
    assert_eq!(set.files().len(), 2);
    let f0 = &set.files()[0].header;
    let f1 = &set.files()[1].header;
    assert_eq!((f0.ntasks, f0.filenumber, f0.nfiles), (2, 0, 2));
    assert_eq!((f1.ntasks, f1.filenumber, f1.nfiles), (2, 1, 2));
    assert_eq!(f0.globalranks, vec![0, 1]);
    assert_eq!(f1.globalranks, vec![2, 3]);
    assert_eq!(f0.mapping, vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
    assert!(f1.mapping.is_empty());
    assert_eq!(f0.chunksizes, vec![8192, 8192]);
    assert_eq!(f1.maxchunks, 3);
    assert_eq!(f1.blockcount, vec![2, 3]);
    // Block-major sizes; the unused slot (task 0, block 2) is stored as 0.
    assert_eq!(f1.blocksizes, vec![5000, 5000, 6000, 5000, 0, 5000]);
    assert_eq!(set.location(2), Some((1, 0)));
    let sizes = [3000, 7000, 11000, 15000];
    let blocks: [&[usize]; 4] = [&[3000], &[7000], &[5000, 6000], &[5000, 5000, 5000]];
    for r in 0..4 {
        let t = set.task(r).unwrap();
        let got: Vec<usize> = t.blocks.iter().map(|b| b.data.len()).collect();
        assert_eq!(got, blocks[r], "rank {r}");
        assert_eq!(t.len(), sizes[r] as u64);
        assert_eq!(t.contiguous().as_ref(), pattern(r, sizes[r]).as_slice());
    }
    // Rank 3 is local task 1 of file 1: its blocks are globalskip apart.
    let t3 = set.task(3).unwrap();
    let offs: Vec<u64> = t3.blocks.iter().map(|b| b.offset).collect();
    assert_eq!(
        offs,
        vec![4096 + 8192, 4096 + 8192 + 16384, 4096 + 8192 + 32768]
    );
    assert_eq!(t3.file_offset(5001), 4096 + 8192 + 16384 + 1);
}

#[test]
fn p4_big_endian_user_data_flag() {
    let set = SionSet::open(&probe("p4_np3_endianness_big_flag")).unwrap();
    let h = &set.files()[0].header;
    assert_eq!(h.endianness_bytes, [0, 1, 1, 0]);
    assert_eq!(h.byte_order, ByteOrder::Little);
    assert!(h.user_data_big_endian);
    assert_eq!(set.ntasks(), 3);
    for r in 0..3 {
        let t = set.task(r).unwrap();
        assert_eq!(t.contiguous().as_ref(), pattern(r, 10 + 5 * r).as_slice());
    }
}

#[test]
fn v1_collective_chunks_are_used_as_stored() {
    let p = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/linktest/v1.2p1/np16_a2a_mix/pingpong_results_bin.sion"
    ));
    let set = SionSet::open(p).unwrap();
    let h = &set.files()[0].header;
    assert_eq!(
        h.chunksizes,
        vec![
            1113, 609, 609, 609, 1156, 609, 609, 609, 609, 609, 1051, 609, 609, 609, 609, 1660
        ]
    );
    assert_eq!(h.globalskip, 12288);
    assert_eq!(h.start_of_varheader, 16384);
    let t4 = set.task(4).unwrap();
    assert_eq!(t4.blocks[0].offset, 4096 + 1113 + 3 * 609);
    assert_eq!(t4.len(), 609);
}

// ---------- corrupted files ----------

fn p1_bytes() -> Vec<u8> {
    std::fs::read(probe("p1_np4_bw_1file_multiblock")).unwrap()
}

fn open_bytes(data: Vec<u8>) -> Result<SionSet, FormatError> {
    SionSet::from_bytes(Path::new("bad.sion"), vec![data])
}

fn malformed(err: FormatError) -> (String, Position, String) {
    let text = err.to_string();
    match err {
        FormatError::Malformed { field, pos, .. } => (field, pos, text),
        other => panic!("expected a malformed error, got {other}"),
    }
}

#[test]
fn wrong_magic_is_reported_at_offset_0() {
    let mut d = p1_bytes();
    d[0] = b'X';
    let (field, pos, text) = malformed(open_bytes(d).unwrap_err());
    assert_eq!(field, "magic");
    assert_eq!(pos, Position::Offset(0));
    assert!(
        text.contains("bad.sion") && text.contains("byte offset 0"),
        "{text}"
    );
}

#[test]
fn truncated_files_are_errors() {
    let d = p1_bytes();
    for len in [0, 3, 7, 100, 1076, 4000, 20480, 20543] {
        let err = open_bytes(d[..len].to_vec()).unwrap_err();
        let (_, pos, text) = malformed(err);
        assert!(matches!(pos, Position::Offset(_)), "len {len}: {text}");
    }
}

#[test]
fn absurd_ntasks_is_capped_by_file_size() {
    let mut d = p1_bytes();
    d[24..28].copy_from_slice(&i32::MAX.to_le_bytes());
    let (field, pos, text) = malformed(open_bytes(d).unwrap_err());
    assert_eq!(field, "ntasks");
    assert_eq!(pos, Position::Offset(24));
    assert!(text.contains("2147483647 tasks"), "{text}");
    let mut d = p1_bytes();
    d[24..28].copy_from_slice(&(-4i32).to_le_bytes());
    assert_eq!(malformed(open_bytes(d).unwrap_err()).0, "ntasks");
}

#[test]
fn chunk_size_past_the_end_is_an_error() {
    let mut d = p1_bytes();
    // chunksizes[3] at 1076 + 8·4 + 8·3; make the last task's chunk enormous
    // while keeping META2 where it is.
    let off = 1076 + 32 + 24;
    d[off..off + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());
    // Its block size may not exceed the chunk, so grow block 0 of task 3 too.
    let bs = 20480 + 32 + 8 * 3;
    d[bs..bs + 8].copy_from_slice(&(1i64 << 39).to_le_bytes());
    let (field, pos, text) = malformed(open_bytes(d).unwrap_err());
    assert_eq!(field, "chunksizes");
    assert_eq!(pos, Position::Offset(off as u64));
    assert!(text.contains("past the end"), "{text}");
}

#[test]
fn block_larger_than_its_chunk_is_an_error() {
    let mut d = p1_bytes();
    let bs = 20480 + 32 + 8;
    d[bs..bs + 8].copy_from_slice(&5000i64.to_le_bytes());
    let (field, pos, _) = malformed(open_bytes(d).unwrap_err());
    assert_eq!(field, "blocksizes");
    assert_eq!(pos, Position::Offset(bs as u64));
}

#[test]
fn bad_block_counts_are_errors() {
    for v in [-1i64, 2, i64::MAX] {
        let mut d = p1_bytes();
        let bc = 20480 + 8 * 2;
        d[bc..bc + 8].copy_from_slice(&v.to_le_bytes());
        let (field, pos, text) = malformed(open_bytes(d).unwrap_err());
        assert_eq!(field, "blockcount", "{text}");
        assert_eq!(pos, Position::Offset(bc as u64));
    }
    // An absurd maxchunks is capped by what META2 can hold.
    let mut d = p1_bytes();
    let mc = 1076 + 64;
    d[mc..mc + 4].copy_from_slice(&1_000_000_000i32.to_le_bytes());
    let (field, pos, _) = malformed(open_bytes(d).unwrap_err());
    assert_eq!(field, "maxchunks");
    assert_eq!(pos, Position::Offset(mc as u64));
}

#[test]
fn unsupported_format_version_and_bad_varheader() {
    let mut d = p1_bytes();
    d[16..20].copy_from_slice(&2i32.to_le_bytes());
    assert_eq!(
        malformed(open_bytes(d).unwrap_err()).0,
        "file format version"
    );
    let mut d = p1_bytes();
    let sov = 1076 + 64 + 4;
    d[sov..sov + 8].copy_from_slice(&(1i64 << 50).to_le_bytes());
    let (field, pos, _) = malformed(open_bytes(d).unwrap_err());
    assert_eq!(field, "start_of_varheader");
    assert_eq!(pos, Position::Offset(sov as u64));
}

#[test]
fn missing_second_file_is_an_io_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("set.sion");
    std::fs::copy(probe("p2_np4_bw_2files_multiblock"), &p).unwrap();
    let err = SionSet::open(&p).unwrap_err();
    assert!(err.to_string().contains("set.sion.000001"), "{err}");
}

#[test]
fn duplicate_global_ranks_are_errors() {
    let mut d = p1_bytes();
    d[1076 + 8..1076 + 16].copy_from_slice(&0i64.to_le_bytes());
    let (field, pos, _) = malformed(open_bytes(d).unwrap_err());
    assert_eq!(field, "globalranks");
    assert_eq!(pos, Position::Offset(1084));
}

// ---------- writer ----------

#[test]
fn writer_reproduces_p1_byte_for_byte_layout() {
    let streams: Vec<Vec<u8>> = (0..4).map(|r| pattern(r, 700 + 300 * r)).collect();
    let tasks: Vec<TaskData<'_>> = streams
        .iter()
        .map(|s| TaskData {
            chunksize: 1000,
            blocks: vec![s.as_slice()],
        })
        .collect();
    let opts = SionWriteOptions {
        byte_order: ByteOrder::Little,
        user_data_big_endian: false,
        ..Default::default()
    };
    let files = encode_sion_set(Path::new("probe.sion"), &tasks, &opts).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0], p1_bytes(), "writer output equals libsion's file");
}

#[test]
fn writer_reproduces_p2_two_file_set() {
    let sizes = [3000usize, 7000, 11000, 15000];
    let streams: Vec<Vec<u8>> = (0..4).map(|r| pattern(r, sizes[r])).collect();
    let splits: [&[usize]; 4] = [&[3000], &[7000], &[5000, 6000], &[5000, 5000, 5000]];
    let tasks: Vec<TaskData<'_>> = streams
        .iter()
        .zip(splits)
        .map(|(s, sp)| {
            let mut blocks = Vec::new();
            let mut at = 0;
            for len in sp {
                blocks.push(&s[at..at + len]);
                at += len;
            }
            TaskData {
                chunksize: 5000,
                blocks,
            }
        })
        .collect();
    let opts = SionWriteOptions {
        nfiles: 2,
        byte_order: ByteOrder::Little,
        user_data_big_endian: false,
        ..Default::default()
    };
    let files = encode_sion_set(Path::new("probe.sion"), &tasks, &opts).unwrap();
    let dir = probe("p2_np4_bw_2files_multiblock");
    assert_eq!(files[0], std::fs::read(&dir).unwrap());
    let mut f1 = dir.into_os_string();
    f1.push(".000001");
    assert_eq!(files[1], std::fs::read(f1).unwrap());
}

#[test]
fn writer_collective_layout_matches_v1_np4() {
    let p = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/linktest/v1.2p1/np4_default/pingpong_results_bin.sion"
    ));
    let orig = SionSet::open(p).unwrap();
    let streams: Vec<Vec<u8>> = orig.tasks().map(|t| t.contiguous().into_owned()).collect();
    let tasks: Vec<TaskData<'_>> = streams.iter().map(|s| TaskData::single(s)).collect();
    let opts = SionWriteOptions {
        byte_order: ByteOrder::Little,
        user_data_big_endian: false,
        layout: ChunkLayout::Collective { group_size: 32 },
        ..Default::default()
    };
    let files = encode_sion_set(Path::new("pingpong_results_bin.sion"), &tasks, &opts).unwrap();
    let set = SionSet::from_bytes(Path::new("x"), files).unwrap();
    assert_eq!(set.files()[0].header.chunksizes, vec![553, 337, 337, 2869]);
    assert_eq!(set.files()[0].header.file_len, 8256);
}

fn shape() -> impl Strategy<Value = (Vec<Vec<Vec<u8>>>, u32, u32, bool, bool)> {
    let task = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..4);
    (
        prop::collection::vec(task, 1..9),
        prop::sample::select(vec![1u32, 7, 512, 4096]),
        1u32..4,
        any::<bool>(),
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn writer_reader_round_trip((tasks, fs, nfiles, big, collective) in shape()) {
        let nfiles = nfiles.min(tasks.len() as u32);
        let td: Vec<TaskData<'_>> = tasks
            .iter()
            .map(|blocks| TaskData { chunksize: 64, blocks: blocks.iter().map(|b| b.as_slice()).collect() })
            .collect();
        let opts = SionWriteOptions {
            fsblksize: fs,
            nfiles,
            byte_order: if big { ByteOrder::Big } else { ByteOrder::Little },
            user_data_big_endian: big,
            layout: if collective { ChunkLayout::Collective { group_size: 3 } } else { ChunkLayout::Aligned },
        };
        let files = encode_sion_set(Path::new("rt.sion"), &td, &opts).unwrap();
        prop_assert_eq!(files.len(), nfiles as usize);
        let set = SionSet::from_bytes(Path::new("rt.sion"), files).unwrap();
        prop_assert_eq!(set.ntasks(), tasks.len());
        for (r, blocks) in tasks.iter().enumerate() {
            let t = set.task(r).unwrap();
            let want: Vec<u8> = blocks.concat();
            let got = t.contiguous();
            prop_assert_eq!(got.as_ref(), want.as_slice());
            let n_blocks = blocks.len().max(1);
            prop_assert_eq!(t.blocks.len(), n_blocks);
        }
        let h = &set.files()[0].header;
        prop_assert_eq!(h.byte_order, if big { ByteOrder::Big } else { ByteOrder::Little });
    }

    #[test]
    fn reader_never_panics_on_mutations(pos in 0usize..20544, val in any::<u8>(), cut in 0usize..20544) {
        let mut d = p1_bytes();
        d[pos] = val;
        d.truncate(cut.max(pos + 1));
        if let Ok(set) = open_bytes(d) {
            for t in set.tasks() {
                let _ = t.contiguous();
            }
        }
    }
}

#[test]
fn format_3_chunk_sizes_are_aligned_by_the_reader() {
    // A format-3 writer stored the requested 1000 bytes; the reader aligns.
    let mut d = p1_bytes();
    d[16..20].copy_from_slice(&3i32.to_le_bytes());
    for i in 0..4 {
        let off = 1076 + 32 + 8 * i;
        d[off..off + 8].copy_from_slice(&1000i64.to_le_bytes());
    }
    // Block sizes above the stored request are fine: the aligned chunk holds them.
    let set = open_bytes(d).unwrap();
    let h = &set.files()[0].header;
    assert_eq!(h.chunksizes, vec![1000; 4]);
    assert_eq!(h.effective_chunksizes, vec![4096; 4]);
    for r in 0..4 {
        assert_eq!(
            set.task(r).unwrap().contiguous().as_ref(),
            pattern(r, 700 + 300 * r).as_slice()
        );
    }
}
