//! Collectives and communicator creation of `programs/colls.c` (see its header
//! comment) on 3, 4 and 8 ranks: the Bandela expansion of every collective moves
//! exactly the program's bytes between the right ranks, the Dimemas trace holds one
//! collective record per call with the program's sizes, the alltoallv count files
//! parse with benchlake-formats and equal the counts the program used, and both
//! traces replay.
mod common;

use std::collections::BTreeMap;
use std::path::Path;

use benchlake_formats::bandela::{BRecord, Kernel};
use benchlake_formats::counts::compact::{CompactReader, Row};
use benchlake_formats::counts::{meta, ranklist, timings};
use benchlake_formats::dimemas::DimRecord;

/// (comm size, datatype size, calls, matrix rows by comm rank) of a count block.
type Block = (u64, u64, Vec<u64>, Vec<Vec<u64>>);

#[derive(Default, Debug, Clone, PartialEq)]
struct Flow {
    sends: u64,
    sent: u64,
    recvs: u64,
    recvd: u64,
    /// bytes received per source world rank
    from: BTreeMap<u32, u64>,
}

/// Per routine, the messages of one rank's Bandela trace.
fn flows(dir: &Path, rank: usize) -> BTreeMap<String, Flow> {
    let mut m: BTreeMap<String, Flow> = BTreeMap::new();
    for r in common::bandela(dir, rank) {
        if let BRecord::Kernel {
            main_fn, kernel, ..
        } = r
        {
            let f = m.entry(main_fn).or_default();
            match kernel {
                Kernel::Isend { bytes, .. } => {
                    f.sends += 1;
                    f.sent += bytes;
                }
                Kernel::Irecv { peer, bytes, .. } => {
                    f.recvs += 1;
                    f.recvd += bytes;
                    *f.from.entry(peer as u32).or_default() += bytes;
                }
                _ => {}
            }
        }
    }
    m
}

fn check(np: usize) {
    let Some(lib) = common::lib() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::build("colls.c", tmp.path());
    let out = tmp.path().join("trace");
    common::run(&lib, &exe, np, &out, &[]);
    let n = np as u64;
    let fl: Vec<_> = (0..np).map(|r| flows(&out, r)).collect();
    let total = |name: &str, f: fn(&Flow) -> u64| -> u64 {
        fl.iter().map(|m| m.get(name).map_or(0, f)).sum()
    };
    let get = |r: usize, name: &str| fl[r].get(name).cloned().unwrap_or_default();
    let sub_size = |r: usize| -> u64 {
        if r.is_multiple_of(2) {
            n.div_ceil(2)
        } else {
            n / 2
        }
    };
    for r in 0..np {
        let ru = r as u64;
        // Bcast 4000 B from root 1 % N: every other rank receives it exactly once
        let b = get(r, "MPI_Bcast");
        assert_eq!(
            (b.recvs, b.recvd),
            if r == 1 % np { (0, 0) } else { (1, 4000) },
            "bcast rank {r}"
        );
        // Reduce 80 B to root 0: every non-root sends once
        let red = get(r, "MPI_Reduce");
        assert_eq!((red.sends, red.sent), if r == 0 { (0, 0) } else { (1, 80) });
        // Gather 20 B / Gatherv 4(r+1) B to root 0
        let g = get(r, "MPI_Gather");
        let gv = get(r, "MPI_Gatherv");
        if r == 0 {
            assert_eq!((g.recvs, g.recvd), (n - 1, 20 * (n - 1)));
            let want: BTreeMap<u32, u64> =
                (1..np as u32).map(|i| (i, 4 * (i as u64 + 1))).collect();
            assert_eq!(gv.from, want);
        } else {
            assert_eq!((g.sends, g.sent), (1, 20));
            assert_eq!((gv.sends, gv.sent), (1, 4 * (ru + 1)));
        }
        // Scatter 8 B from 0, Scatterv r+1 B from N-1
        let s = get(r, "MPI_Scatter");
        assert_eq!(s.recvd, if r == 0 { 0 } else { 8 });
        let sv = get(r, "MPI_Scatterv");
        if r == np - 1 {
            assert_eq!(sv.sent, (1..n).sum::<u64>());
        } else {
            assert_eq!(sv.from, BTreeMap::from([(np as u32 - 1, ru + 1)]));
        }
        // Allgather 4 B: ring, N-1 steps
        let ag = get(r, "MPI_Allgather");
        assert_eq!((ag.sends, ag.recvs, ag.recvd), (n - 1, n - 1, 4 * (n - 1)));
        // Allgatherv: every block but its own, 2(i+1) B each
        let agv = get(r, "MPI_Allgatherv");
        assert_eq!(
            agv.recvd,
            (0..n)
                .filter(|&i| i != ru)
                .map(|i| 2 * (i + 1))
                .sum::<u64>()
        );
        // Alltoall 8 B to every other rank
        let a = get(r, "MPI_Alltoall");
        assert_eq!(
            (a.sends, a.sent, a.recvd),
            (n - 1, 8 * (n - 1), 8 * (n - 1))
        );
        // Alltoallv: two int calls ((r+j)%3), one char call ((r*j)%2+1), one on sub
        let av = get(r, "MPI_Alltoallv");
        let want_from: BTreeMap<u32, u64> = (0..n)
            .filter(|&j| j != ru)
            .map(|j| {
                let same_sub = j % 2 == ru % 2;
                let b = 2 * 4 * ((ru + j) % 3) + ((ru * j) % 2 + 1) + if same_sub { 4 } else { 0 };
                (j as u32, b)
            })
            .collect();
        assert_eq!(av.from, want_from, "alltoallv rank {r}");
        // Allreduce (24 B on WORLD, 4 B on sub): symmetric exchanges
        let ar = get(r, "MPI_Allreduce");
        assert!(ar.sends >= 1 && ar.recvs >= 1 || sub_size(r) == 1 && np == 1);
        // both barriers are barrier kernels
        let barriers = common::kernels(&out, r)
            .iter()
            .filter(|k| *k == "MPI_Barrier barrier")
            .count();
        assert_eq!(barriers, 2);
    }
    // recursive doubling: as many sends as receives overall, all of 24 or 4 bytes
    assert_eq!(
        total("MPI_Allreduce", |f| f.sends),
        total("MPI_Allreduce", |f| f.recvs)
    );
    assert_eq!(
        total("MPI_Allreduce", |f| f.sent),
        total("MPI_Allreduce", |f| f.recvd)
    );
    assert_eq!(total("MPI_Reduce", |f| f.recvs), n - 1);
    assert_eq!(total("MPI_Bcast", |f| f.sends), n - 1);

    // Dimemas: one collective record per call, with the program's sizes
    let dim = common::dimemas(&out.join("trace.dim"));
    for (r, recs) in dim.iter().enumerate() {
        let ops: Vec<(u32, u64, u64)> = recs
            .iter()
            .filter_map(|x| match x {
                DimRecord::GlobalOp {
                    glop,
                    bytes_send,
                    bytes_recv,
                    ..
                } => Some((*glop, *bytes_send, *bytes_recv)),
                _ => None,
            })
            .collect();
        let ru = r as u64;
        let root0 = r == 0;
        let a2av_int: u64 = (0..n).map(|j| 4 * ((ru + j) % 3)).sum();
        let a2av_char: u64 = (0..n).map(|j| (ru * j) % 2 + 1).sum();
        let want = vec![
            (0, 0, 0),
            (
                1,
                if r == 1 % np { 4000 } else { 0 },
                if r == 1 % np { 0 } else { 4000 },
            ),
            (10, 80, if root0 { 80 } else { 0 }),
            (11, 24, 24),
            (2, 20, if root0 { 20 * n } else { 0 }),
            (
                3,
                4 * (ru + 1),
                if root0 {
                    (1..=n).map(|i| 4 * i).sum()
                } else {
                    0
                },
            ),
            (4, if root0 { 8 * n } else { 0 }, 8),
            (5, if r == np - 1 { (1..=n).sum() } else { 0 }, ru + 1),
            (6, 4, 4 * n),
            (7, 2 * (ru + 1), (1..=n).map(|i| 2 * i).sum()),
            (8, 8 * n, 8 * n),
            (11, 4, 4),
            (0, 0, 0),
            (9, a2av_int, a2av_int),
            (9, a2av_int, a2av_int),
            (9, a2av_char, a2av_char),
            (9, 4 * sub_size(r), 4 * sub_size(r)),
        ];
        assert_eq!(ops, want, "task {r}");
    }
    // communicators: WORLD, the two halves of the split, the dup
    let t = benchlake_formats::dimemas::DimTrace::open(out.join("trace.dim")).unwrap();
    let mut sizes: Vec<usize> = t.comms.iter().map(|c| c.tasks.len()).collect();
    sizes.sort_unstable();
    let mut want = vec![np, np, np.div_ceil(2), np / 2];
    want.sort_unstable();
    assert_eq!(sizes, want);
    common::replay_dimemas(&out, np);
    let b = common::replay_bandela(&out, np);
    // the Bandela model received what the trace says each rank received
    for rr in &b.ranks {
        let r = rr.rank as usize;
        let want: u64 = fl[r].values().map(|f| f.recvd).sum();
        assert_eq!(rr.bytes_received, want, "rank {r}");
    }

    // count files: lead world rank 0 (WORLD and its half), lead 1 (the other half)
    let matrix = |dir: &Path, kind: &str, lead: u32| -> Vec<Block> {
        let mut rd =
            CompactReader::open(&dir.join(format!("{kind}-counters.job0.rank{lead}.txt"))).unwrap();
        let mut blocks = Vec::new();
        while let Some(h) = rd.next_block().unwrap() {
            let mut m = vec![Vec::new(); h.comm_size as usize];
            let mut row = Row::default();
            while rd.next_row(&mut row).unwrap() {
                for rk in ranklist::expand(&row.ranks, 1 << 20).unwrap() {
                    m[rk as usize] = row.counts.clone();
                }
            }
            let calls = ranklist::expand(&h.calls.0, 1 << 20).unwrap();
            blocks.push((h.comm_size, h.datatype_size, calls, m));
        }
        blocks
    };
    let h0 = n.div_ceil(2);
    let want0 = vec![
        (
            n,
            4,
            vec![0, 1],
            (0..n)
                .map(|i| (0..n).map(|j| (i + j) % 3).collect())
                .collect(),
        ),
        (
            n,
            1,
            vec![2],
            (0..n)
                .map(|i| (0..n).map(|j| (i * j) % 2 + 1).collect())
                .collect(),
        ),
        (h0, 4, vec![3], vec![vec![1; h0 as usize]; h0 as usize]),
    ];
    assert_eq!(matrix(&out, "send", 0), want0);
    assert_eq!(matrix(&out, "recv", 0), want0);
    let h1 = n / 2;
    let want1 = vec![(h1, 4, vec![3], vec![vec![1; h1 as usize]; h1 as usize])];
    assert_eq!(matrix(&out, "send", 1), want1);
    // timing files: one value per rank and call
    let mut seen = Vec::new();
    timings::read_file(
        &out.join("alltoallv_execution_times.rank0_comm0_job0.md"),
        |c, r, s| {
            assert!(s >= 0.0);
            seen.push((c, r));
        },
    )
    .unwrap();
    let want: Vec<(u64, u64)> = (0..3).flat_map(|c| (0..n).map(move |r| (c, r))).collect();
    assert_eq!(seen, want);
    assert_eq!(
        meta::read_comm_data(&out.join("alltoallv_comm_data_rank0.md")).unwrap(),
        vec![(0, 0), (1, 0)]
    );
    // the whole directory goes through the counts ingest's file selection
    let files = benchlake_formats::counts::expand_dir(&out).unwrap();
    // 2 count files per lead, 3 timing files, 2 comm-data files
    assert_eq!(files.len(), 2 + 2 + 3 + 2);
}

#[test]
fn collectives_np3() {
    check(3);
}

#[test]
fn collectives_np4() {
    check(4);
}

#[test]
fn collectives_np8() {
    check(8);
}
