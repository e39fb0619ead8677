//! The Fortran bindings on the programs in `programs/` (see their header comments):
//! mpif.h (`fortran.f90`, `fortran2.F90`), `use mpi` (`fortran2.F90` with `-DBL_USE_MPI`)
//! and `use mpi_f08` (`fortran_f08.f90`, `fortran2.F90` with `-DBL_F08`); the Fortran calls are traced like the C ones, with converted
//! handles.
mod common;

#[test]
fn fortran_calls_are_traced() {
    let Some(lib) = common::lib() else { return };
    if !common::mpifort() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::build("fortran.f90", tmp.path());
    let out = tmp.path().join("trace");
    let np = 3;
    common::run(&lib, &exe, np, &out, &[]);
    for r in 0..np {
        let (right, left) = ((r + 1) % np, (r + np - 1) % np);
        let k = common::kernels(&out, r);
        let head: Vec<String> = k.iter().take(4).cloned().collect();
        assert_eq!(
            head,
            vec![
                format!("MPI_Irecv irecv {left} 7 40"),
                format!("MPI_Isend isend {right} 7 40"),
                "MPI_Waitall wait".to_string(),
                "MPI_Waitall wait".to_string(),
            ]
        );
        let p2p: Vec<&String> = k.iter().filter(|x| x.ends_with(" 8 24")).collect();
        let send = format!("MPI_Send isend {right} 8 24");
        let recv = format!("MPI_Recv irecv {left} 8 24");
        let want = if r.is_multiple_of(2) {
            vec![&send, &recv]
        } else {
            vec![&recv, &send]
        };
        assert_eq!(p2p, want, "rank {r}");
        for f in ["MPI_Allreduce", "MPI_Bcast", "MPI_Barrier", "MPI_Alltoallv"] {
            assert!(k.iter().any(|x| x.starts_with(f)), "rank {r}: no {f}");
        }
        let recs = common::bandela(&out, r);
        assert!(recs.contains(&benchlake_formats::bandela::BRecord::CaliperPush(3)));
    }
    // alltoallv counts: rank i sends i+1 integers to everyone
    let text = std::fs::read_to_string(out.join("send-counters.job0.rank0.txt")).unwrap();
    assert!(
        text.contains("Rank(s) 0: 1 1 1 \nRank(s) 1: 2 2 2 \nRank(s) 2: 3 3 3 \n"),
        "{text}"
    );
    common::replay_dimemas(&out, np);
    common::replay_bandela(&out, np);
}

/// `(kind, peer, tag, bytes)` of the send/receive kernels of `routine`.
fn p2p_of(k: &[String], routine: &str) -> Vec<(String, i64, i64, u64)> {
    k.iter()
        .filter_map(|x| {
            let w: Vec<&str> = x.split_whitespace().collect();
            (w.len() == 5 && w[0] == routine).then(|| {
                (
                    w[1].to_string(),
                    w[2].parse().unwrap(),
                    w[3].parse().unwrap(),
                    w[4].parse().unwrap(),
                )
            })
        })
        .collect()
}

/// The bindings added for v-collectives, the other completion routines,
/// Sendrecv and communicator creation (`programs/fortran2.F90`, 4 ranks).
#[test]
fn fortran_v_collectives_completions_and_communicators_are_traced() {
    v_collectives_completions_and_communicators(&[]);
}

/// The same calls through `use mpi` (`programs/fortran2.F90` built with
/// `-DBL_USE_MPI`): the same trace.
#[test]
fn fortran_use_mpi_v_collectives_completions_and_communicators_are_traced() {
    v_collectives_completions_and_communicators(&["-DBL_USE_MPI"]);
}

/// The same calls through `use mpi_f08` (`programs/fortran2.F90` built with
/// `-DBL_F08`): the same trace.
#[test]
fn fortran_f08_v_collectives_completions_and_communicators_are_traced() {
    v_collectives_completions_and_communicators(&["-DBL_F08"]);
}

fn v_collectives_completions_and_communicators(flags: &[&str]) {
    use benchlake_formats::bandela::{BRecord, Kernel};
    let Some(lib) = common::lib() else { return };
    if !common::mpifort() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::build_with("fortran2.F90", tmp.path(), flags);
    let out = tmp.path().join("trace");
    let np = 4usize;
    common::run(&lib, &exe, np, &out, &[]);
    let stats = benchlake_tracer::stats::read(&out.join("bandela_stats")).unwrap();
    let calls = |r: usize, f: &str| {
        let i = stats.routines.iter().position(|x| x == f);
        i.map(|i| stats.routine[r][i].calls).unwrap_or(0)
    };
    for r in 0..np {
        let (right, left) = (((r + 1) % np) as i64, ((r + np - 1) % np) as i64);
        let k = common::kernels(&out, r);
        // Gatherv (linear to root 0): rank i sends 4(i+1) bytes.
        let g = p2p_of(&k, "MPI_Gatherv");
        let mut g: Vec<(String, i64, u64)> = g.into_iter().map(|x| (x.0, x.1, x.3)).collect();
        g.sort();
        if r == 0 {
            let want: Vec<(String, i64, u64)> = (1..np as i64)
                .map(|p| ("irecv".to_string(), p, 4 * (p as u64 + 1)))
                .collect();
            assert_eq!(g, want, "rank 0 Gatherv");
        } else {
            assert_eq!(
                g,
                [("isend".to_string(), 0, 4 * (r as u64 + 1))],
                "rank {r}"
            );
        }
        // Scatterv from root 0: rank i receives 8(i+1) bytes.
        let mut s: Vec<(String, i64, u64)> = p2p_of(&k, "MPI_Scatterv")
            .into_iter()
            .map(|x| (x.0, x.1, x.3))
            .collect();
        s.sort();
        if r == 0 {
            let want: Vec<(String, i64, u64)> = (1..np as i64)
                .map(|p| ("isend".to_string(), p, 8 * (p as u64 + 1)))
                .collect();
            assert_eq!(s, want, "rank 0 Scatterv");
        } else {
            assert_eq!(
                s,
                [("irecv".to_string(), 0, 8 * (r as u64 + 1))],
                "rank {r}"
            );
        }
        // Allgatherv (ring): N-1 blocks to the right, N-1 from the left; every
        // block but the right neighbour's is sent, every block but its own received.
        let a = p2p_of(&k, "MPI_Allgatherv");
        let total: u64 = (1..=np as u64).map(|i| 4 * i).sum();
        let sends: Vec<_> = a.iter().filter(|x| x.0 == "isend").collect();
        let recvs: Vec<_> = a.iter().filter(|x| x.0 == "irecv").collect();
        assert_eq!(sends.len(), np - 1, "rank {r}");
        assert_eq!(recvs.len(), np - 1, "rank {r}");
        assert!(sends.iter().all(|x| x.1 == right) && recvs.iter().all(|x| x.1 == left));
        assert_eq!(
            sends.iter().map(|x| x.3).sum::<u64>(),
            total - 4 * (right as u64 + 1)
        );
        assert_eq!(
            recvs.iter().map(|x| x.3).sum::<u64>(),
            total - 4 * (r as u64 + 1)
        );
        // Sendrecv.
        assert_eq!(
            p2p_of(&k, "MPI_Sendrecv"),
            [
                ("isend".to_string(), right, 14, 24),
                ("irecv".to_string(), left, 14, 24)
            ]
        );
        // Each completion routine completed the exchange's two requests.
        for (tag, routine, done) in [
            (11, "MPI_Waitany", "MPI_Waitany wait"),
            (12, "MPI_Waitsome", "MPI_Waitsome wait"),
            (13, "MPI_Testall", "MPI_Testall test 1"),
            (15, "MPI_Testany", "MPI_Testany test 1"),
            (16, "MPI_Testsome", "MPI_Testsome test 1"),
        ] {
            let mut x: Vec<_> = [p2p_of(&k, "MPI_Irecv"), p2p_of(&k, "MPI_Isend")]
                .concat()
                .into_iter()
                .filter(|x| x.2 == tag)
                .collect();
            x.sort();
            assert_eq!(
                x,
                [
                    ("irecv".to_string(), left, tag, 16),
                    ("isend".to_string(), right, tag, 16)
                ],
                "rank {r} tag {tag}"
            );
            assert_eq!(
                k.iter().filter(|x| *x == done).count(),
                2,
                "rank {r}: {routine}"
            );
            assert!(calls(r, routine) >= 1, "rank {r}: {routine} calls");
        }
        assert_eq!(calls(r, "MPI_Waitany"), 2);
        for f in [
            "MPI_Gatherv",
            "MPI_Scatterv",
            "MPI_Allgatherv",
            "MPI_Sendrecv",
        ] {
            assert_eq!(calls(r, f), 1, "rank {r}: {f}");
        }
        // Communicators: ids from their creation (rank 0 of each is world rank 0:
        // 10^6 + creation count), memberships, and the collectives on them.
        let recs = common::bandela(&out, r);
        let comms: std::collections::BTreeMap<i64, Vec<u32>> = recs
            .iter()
            .filter_map(|x| match x {
                BRecord::Comm { id, ranks } => Some((*id, ranks.clone())),
                _ => None,
            })
            .collect();
        let all: Vec<u32> = (0..np as u32).collect();
        for id in [1_000_001, 1_000_002, 1_000_003] {
            assert_eq!(
                comms.get(&id),
                Some(&all),
                "rank {r}: comm {id} in {comms:?}"
            );
        }
        assert_eq!(
            comms.get(&1_000_004),
            (r % 2 == 0).then_some(&vec![0u32, 2]),
            "rank {r}"
        );
        let mut on: std::collections::BTreeMap<&str, std::collections::BTreeSet<i64>> =
            Default::default();
        for x in &recs {
            if let BRecord::Kernel {
                main_fn, kernel, ..
            } = x
            {
                let c = match kernel {
                    Kernel::Isend { comm, .. }
                    | Kernel::Irecv { comm, .. }
                    | Kernel::Barrier { comm } => *comm,
                    _ => continue,
                };
                on.entry(main_fn.as_str()).or_default().insert(c);
            }
        }
        assert_eq!(on["MPI_Bcast"], [1_000_001].into(), "rank {r}");
        assert_eq!(on["MPI_Allreduce"], [1_000_003].into(), "rank {r}");
        let barriers: std::collections::BTreeSet<i64> = if r % 2 == 0 {
            [1_000_002, 1_000_004].into()
        } else {
            [1_000_002].into()
        };
        assert_eq!(on["MPI_Barrier"], barriers, "rank {r}");
    }
    common::replay_dimemas(&out, np);
    common::replay_bandela(&out, np);
}

/// The `use mpi_f08` bindings (`programs/fortran_f08.f90`, 4 ranks): Open MPI's
/// `mpi_xxx_f08_` entry points bypass the C and mpif.h wrappers, so every record here
/// comes from the f08 wrappers — including calls that leave out the optional
/// `ierror` (`MPI_Init`, `MPI_Wait`, `MPI_Send`, `MPI_Finalize`).
#[test]
fn fortran_f08_calls_are_traced() {
    let Some(lib) = common::lib() else { return };
    if !common::mpifort() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::build("fortran_f08.f90", tmp.path());
    let out = tmp.path().join("trace");
    let np = 4usize;
    common::run(&lib, &exe, np, &out, &[]);
    let stats = benchlake_tracer::stats::read(&out.join("bandela_stats")).unwrap();
    assert_eq!(stats.ranks, np);
    let calls = |r: usize, f: &str| {
        let i = stats.routines.iter().position(|x| x == f);
        i.map(|i| stats.routine[r][i].calls).unwrap_or(0)
    };
    let sorted = |mut v: Vec<(String, i64, i64, u64)>| {
        v.sort();
        v
    };
    let k_of = |kind: &str, peer: i64, tag: i64, bytes: u64| (kind.to_string(), peer, tag, bytes);
    let mut bcast_sent = 0u64;
    for r in 0..np {
        let (right, left) = (((r + 1) % np) as i64, ((r + np - 1) % np) as i64);
        let k = common::kernels(&out, r);
        // Point-to-point: peers, tags and bytes of every call.
        assert_eq!(
            sorted(p2p_of(&k, "MPI_Irecv")),
            [k_of("irecv", left, 7, 40), k_of("irecv", left, 9, 8)],
            "rank {r}"
        );
        assert_eq!(
            sorted(p2p_of(&k, "MPI_Isend")),
            [k_of("isend", right, 7, 40), k_of("isend", right, 9, 8)],
            "rank {r}"
        );
        assert_eq!(p2p_of(&k, "MPI_Send"), [k_of("isend", right, 8, 24)]);
        assert_eq!(p2p_of(&k, "MPI_Recv"), [k_of("irecv", left, 8, 24)]);
        assert_eq!(
            p2p_of(&k, "MPI_Sendrecv"),
            [k_of("isend", right, 14, 24), k_of("irecv", left, 14, 24)]
        );
        // Completions: Waitall completed both requests, each Wait one.
        assert_eq!(k.iter().filter(|x| *x == "MPI_Waitall wait").count(), 2);
        assert_eq!(k.iter().filter(|x| *x == "MPI_Wait wait").count(), 2);
        // Bcast of 20 B from root 0: every other rank receives it once.
        let b = p2p_of(&k, "MPI_Bcast");
        let got: u64 = b.iter().filter(|x| x.0 == "irecv").map(|x| x.3).sum();
        assert_eq!(got, if r == 0 { 0 } else { 20 }, "rank {r} Bcast");
        assert!(b.iter().all(|x| x.3 == 20), "rank {r}: {b:?}");
        bcast_sent += b
            .iter()
            .filter(|x| x.0 == "isend")
            .map(|x| x.3)
            .sum::<u64>();
        // Allreduce of 16 B: every message carries the whole vector.
        let a = p2p_of(&k, "MPI_Allreduce");
        assert!(
            !a.is_empty() && a.iter().all(|x| x.3 == 16),
            "rank {r}: {a:?}"
        );
        // Alltoallv: rank i sends i+1 integers to every other rank.
        let mut v: Vec<(String, i64, u64)> = p2p_of(&k, "MPI_Alltoallv")
            .into_iter()
            .map(|x| (x.0, x.1, x.3))
            .collect();
        v.sort();
        let mut want: Vec<(String, i64, u64)> = (0..np as i64)
            .filter(|&p| p != r as i64)
            .flat_map(|p| {
                [
                    ("irecv".to_string(), p, 4 * (p as u64 + 1)),
                    ("isend".to_string(), p, 4 * (r as u64 + 1)),
                ]
            })
            .collect();
        want.sort();
        assert_eq!(v, want, "rank {r} Alltoallv");
        // Statistics: the call counts, and the bytes of the kernels above.
        for (f, n) in [
            ("MPI_Isend", 2),
            ("MPI_Irecv", 2),
            ("MPI_Wait", 2),
            ("MPI_Waitall", 1),
            ("MPI_Send", 1),
            ("MPI_Recv", 1),
            ("MPI_Sendrecv", 1),
            ("MPI_Bcast", 1),
            ("MPI_Allreduce", 1),
            ("MPI_Alltoallv", 1),
        ] {
            assert_eq!(calls(r, f), n, "rank {r}: {f}");
        }
        let all: Vec<(String, i64, i64, u64)> = k
            .iter()
            .filter_map(|x| {
                let w: Vec<&str> = x.split_whitespace().collect();
                (w.len() == 5).then(|| k_of(w[1], w[2].parse().unwrap(), 0, w[4].parse().unwrap()))
            })
            .collect();
        let sum = |kind: &str| -> u64 { all.iter().filter(|x| x.0 == kind).map(|x| x.3).sum() };
        let rs = &stats.per_rank[r];
        assert_eq!(rs.bytes_sent, sum("isend"), "rank {r} bytes_sent");
        assert_eq!(rs.bytes_received, sum("irecv"), "rank {r} bytes_received");
        assert_eq!(stats.recv[r].iter().sum::<u64>(), rs.bytes_received);
        // the point-to-point bytes from the left neighbour alone: 40 + 8 + 24 + 24
        assert!(
            stats.recv[r][left as usize] >= 96,
            "rank {r}: {:?}",
            stats.recv
        );
    }
    assert_eq!(bcast_sent, 20 * (np as u64 - 1));
    let text = std::fs::read_to_string(out.join("send-counters.job0.rank0.txt")).unwrap();
    assert!(
        text.contains(
            "Rank(s) 0: 1 1 1 1 \nRank(s) 1: 2 2 2 2 \nRank(s) 2: 3 3 3 3 \nRank(s) 3: 4 4 4 4 \n"
        ),
        "{text}"
    );
    common::replay_dimemas(&out, np);
    common::replay_bandela(&out, np);
}
