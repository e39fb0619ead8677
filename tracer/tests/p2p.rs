//! Point-to-point calls of `programs/p2p.c` (see its header comment) traced on 2 to 5
//! ranks: the Bandela kernels, the Dimemas records and the statistics must be
//! exactly the program's communication; both traces replay.
mod common;

use benchlake_formats::dimemas::DimRecord;
use benchlake_formats::dimemas::trace::RecvKind;

fn expected_kernels(r: usize, n: usize) -> Vec<String> {
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let mut v: Vec<String> = Vec::new();
    let send = |v: &mut Vec<String>, f: &str, tag: u32, b: u32| {
        v.push(format!("{f} isend {right} {tag} {b}"));
        v.push(format!("{f} wait"));
    };
    let recv = |v: &mut Vec<String>, tag: u32, b: u32| {
        v.push(format!("MPI_Recv irecv {left} {tag} {b}"));
        v.push("MPI_Recv wait".into());
    };
    if r.is_multiple_of(2) {
        send(&mut v, "MPI_Send", 10, 400);
        recv(&mut v, 10, 400);
    } else {
        recv(&mut v, 10, 400);
        send(&mut v, "MPI_Send", 10, 400);
    }
    v.push(format!("MPI_Irecv irecv {left} 20 8000"));
    v.push(format!("MPI_Irecv irecv {right} 20 8000"));
    v.push(format!("MPI_Isend isend {right} 20 8000"));
    v.push(format!("MPI_Isend isend {left} 20 8000"));
    v.extend(std::iter::repeat_n("MPI_Waitall wait".to_string(), 4));
    // ANY_SOURCE receive: the trace carries the source that matched
    v.push(format!("MPI_Irecv irecv {left} 30 16"));
    v.push(format!("MPI_Isend isend {right} 30 16"));
    v.push("MPI_Wait wait".into());
    v.push("MPI_Test test 1".into());
    v.push(format!("MPI_Sendrecv isend {right} 40 3"));
    v.push(format!("MPI_Sendrecv irecv {left} 40 3"));
    v.push("MPI_Sendrecv wait".into());
    v.push("MPI_Sendrecv wait".into());
    if r.is_multiple_of(2) {
        send(&mut v, "MPI_Ssend", 50, 8);
        recv(&mut v, 50, 8);
    } else {
        recv(&mut v, 50, 8);
        send(&mut v, "MPI_Ssend", 50, 8);
    }
    v
}

fn check(np: usize) {
    let Some(lib) = common::lib() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::build("p2p.c", tmp.path());
    let out = tmp.path().join("trace");
    common::run(&lib, &exe, np, &out, &[]);
    for r in 0..np {
        let mut got = common::kernels(&out, r);
        // unsuccessful MPI_Test calls depend on timing: they are kept in the trace
        // as `test 0` and must all come before the successful one
        let fails = got.iter().filter(|k| *k == "MPI_Test test 0").count();
        got.retain(|k| k != "MPI_Test test 0");
        assert_eq!(
            got,
            expected_kernels(r, np),
            "rank {r} of {np} ({fails} failed tests)"
        );
    }
    // Dimemas: the same messages, as Send/Isend/Recv/Irecv/Wait records
    let dim = common::dimemas(&out.join("trace.dim"));
    assert_eq!(dim.len(), np);
    for (r, recs) in dim.iter().enumerate() {
        let (right, left) = (((r + 1) % np) as u32, ((r + np - 1) % np) as i64);
        let sends: Vec<(u32, u64, i64, u8)> = recs
            .iter()
            .filter_map(|x| match x {
                DimRecord::Send {
                    dst,
                    size,
                    tag,
                    sync,
                    ..
                } => Some((*dst, *size, *tag, *sync)),
                _ => None,
            })
            .collect();
        let left_u = left as u32;
        assert_eq!(
            sends,
            vec![
                (right, 400, 10, 0),
                (right, 8000, 20, 2),
                (left_u, 8000, 20, 2),
                (right, 16, 30, 2),
                (right, 3, 40, 2),
                (right, 8, 50, 1)
            ],
            "task {r}"
        );
        let recvs: Vec<(i64, u64, i64, RecvKind)> = recs
            .iter()
            .filter_map(|x| match x {
                DimRecord::Recv {
                    src,
                    size,
                    tag,
                    kind,
                    ..
                } => Some((*src, *size, *tag, *kind)),
                _ => None,
            })
            .collect();
        let right_i = right as i64;
        assert_eq!(
            recvs,
            vec![
                (left, 400, 10, RecvKind::Recv),
                (left, 8000, 20, RecvKind::Irecv),
                (right_i, 8000, 20, RecvKind::Irecv),
                (left, 8000, 20, RecvKind::Wait),
                (right_i, 8000, 20, RecvKind::Wait),
                (left, 16, 30, RecvKind::Irecv),
                (left, 16, 30, RecvKind::Wait),
                (left, 3, 40, RecvKind::Recv),
                (left, 8, 50, RecvKind::Recv),
            ],
            "task {r}"
        );
    }
    common::replay_dimemas(&out, np);
    let b = common::replay_bandela(&out, np);
    // every rank receives 400 + 16 + 3 + 8 from its left and 8000 from each neighbour
    for rr in &b.ranks {
        assert_eq!(rr.bytes_received, 427 + 16000, "rank {}", rr.rank);
    }
    // statistics: receive matrix and per-routine call counts
    let s = benchlake_tracer::stats::read(&out.join("bandela_stats")).unwrap();
    assert_eq!(s.ranks, np);
    for r in 0..np {
        let (right, left) = ((r + 1) % np, (r + np - 1) % np);
        for c in 0..np {
            let want = if np == 2 && c != r {
                16427
            } else if c == left {
                8427
            } else if c == right {
                8000
            } else {
                0
            };
            assert_eq!(s.recv[r][c], want, "recv[{r}][{c}]");
        }
        assert_eq!(s.per_rank[r].bytes_received, 16427);
        assert_eq!(s.per_rank[r].bytes_sent, 16427);
        // every user send is below MPI_BUFFER_MAX: all buffered
        assert_eq!(s.per_rank[r].bytes_buffered, 16427);
        // Send+Recv 2, Irecv/Isend 4, any-source pair 2, Sendrecv 2, Ssend+Recv 2
        assert_eq!(s.per_rank[r].internal_requests, 12);
        let calls = |name: &str| {
            let i = s.routines.iter().position(|x| x == name).unwrap();
            s.routine[r][i].calls
        };
        assert_eq!(calls("MPI_Send"), 1);
        assert_eq!(calls("MPI_Recv"), 2);
        assert_eq!(calls("MPI_Irecv"), 3);
        assert_eq!(calls("MPI_Isend"), 3);
        assert_eq!(calls("MPI_Waitall"), 1);
        assert_eq!(calls("MPI_Sendrecv"), 1);
        assert!(calls("MPI_Test") >= 1);
        let i = s.routines.iter().position(|x| x == "MPI_Waitall").unwrap();
        assert!(s.routine[r][i].comm_s > 0.0);
        assert!(s.per_rank[r].comput_s > 0.0);
    }
    // The rank map: every rank on this machine, its node the host name
    // (mpirun outside Slurm sets no SLURMD_NODENAME).
    let host = this_host();
    let map = benchlake_formats::bandela::ranks::read(&out.join("bandela_ranks")).unwrap();
    let got: Vec<(u32, &str, &str)> = map
        .iter()
        .map(|m| (m.rank, m.hostname.as_str(), m.node.as_str()))
        .collect();
    let want: Vec<(u32, &str, &str)> = (0..np as u32)
        .map(|r| (r, host.as_str(), host.as_str()))
        .collect();
    assert_eq!(got, want);
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// Under Slurm the node is `SLURMD_NODENAME` (cleaned: a space becomes `_`).
#[test]
fn the_rank_map_names_the_slurm_node() {
    let Some(lib) = common::lib() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::build("p2p.c", tmp.path());
    let out = tmp.path().join("trace");
    common::run(&lib, &exe, 2, &out, &[("SLURMD_NODENAME", "node 7")]);
    let text = std::fs::read_to_string(out.join("bandela_ranks")).unwrap();
    let host = this_host();
    assert_eq!(
        text,
        format!("# benchlake-tracer ranks v1\nranks 2\n0 {host} node_7\n1 {host} node_7\n")
    );
}

#[test]
fn p2p_np2() {
    check(2);
}

#[test]
fn p2p_np3() {
    check(3);
}

#[test]
fn p2p_np5() {
    check(5);
}
