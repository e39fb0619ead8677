//! The Fortran bindings (mpif.h) on `programs/fortran.f90` (see its header comment):
//! the Fortran calls are traced like the C ones, with converted handles.
mod common;

#[test]
fn fortran_calls_are_traced() {
    let Some(lib) = common::lib() else { return };
    if which("mpifort").is_none() {
        eprintln!("SKIPPED: mpifort (gfortran) is not installed");
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

fn which(cmd: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(cmd))
            .find(|c| c.is_file())
    })
}
