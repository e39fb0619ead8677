//! The Bandela manual's controls on `programs/controls.c` (see its header comment):
//! the window of observation by API (bandela_start/bandela_end, with and without
//! BANDELA_PARTIAL_EXPERIMENT) and by environment (watched routine, barrier start
//! and end counts, show interval), calipers, ignore_next_col and the heartbeat file;
//! each changes the trace (and the Bandela replay) as docs/tracer.md says.
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use benchlake_formats::bandela::{BRecord, Kernel};

/// The traced calls of a rank: (ordinal, routine) in order.
fn calls(dir: &Path, rank: usize) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut v = Vec::new();
    for r in common::bandela(dir, rank) {
        if let BRecord::Kernel { ord, main_fn, .. } = r
            && seen.insert(ord)
        {
            v.push(main_fn);
        }
    }
    v
}

fn traced(np: usize, env: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let lib = common::lib().expect("checked by the caller");
    let tmp = tempfile::tempdir().unwrap();
    let exe = common::build("controls.c", tmp.path());
    let out = tmp.path().join("trace");
    let stdout = common::run(&lib, &exe, np, &out, env);
    (tmp, out, stdout)
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const AR: &str = "MPI_Allreduce";

#[test]
fn api_window_skips_what_bandela_end_closes() {
    if common::lib().is_none() {
        return;
    }
    let (_t, out, _) = traced(2, &[]);
    // Barrier A is traced, Bcast B (between bandela_end and bandela_start) is not
    let mut want = names(&["MPI_Barrier", AR, "MPI_Bcast", "MPI_Barrier"]);
    want.extend(names(&[AR; 6]));
    for r in 0..2 {
        assert_eq!(calls(&out, r), want, "rank {r}");
    }
    common::replay_dimemas(&out, 2);
}

#[test]
fn partial_experiment_starts_at_bandela_start() {
    if common::lib().is_none() {
        return;
    }
    let (_t, out, _) = traced(2, &[("BANDELA_PARTIAL_EXPERIMENT", "YES")]);
    let mut want = names(&[AR, "MPI_Bcast", "MPI_Barrier"]);
    want.extend(names(&[AR; 6]));
    assert_eq!(calls(&out, 0), want);
    assert_eq!(calls(&out, 1), want);
}

#[test]
fn environment_window_by_watched_routine() {
    if common::lib().is_none() {
        return;
    }
    // Allreduce calls: the caliper one is #1, the loop #2..#7. The window opens when
    // #2 returns and closes when #4 returns: #3 and #4 are traced.
    let (_t, out, stdout) = traced(
        3,
        &[
            ("BANDELA_WATCH_ROUT", "MPIALLREDUCE"),
            ("BANDELA_BARRIER_START", "2"),
            ("BANDELA_BARRIER_END", "4"),
            ("BANDELA_SHOW_W", "2"),
            ("BANDELA_HEART_BEAT", "3"),
        ],
    );
    for r in 0..3 {
        assert_eq!(calls(&out, r), names(&[AR, AR]), "rank {r}");
        // heartbeat: one line per 3 watched calls (3 and 6), per-interval times
        let hb = std::fs::read_to_string(out.join(format!("bandela_heartbeat.{r}"))).unwrap();
        let lines: Vec<Vec<&str>> = hb
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines.len(), 2, "{hb}");
        assert_eq!(lines[0][0], "3");
        assert_eq!(lines[1][0], "6");
        for l in &lines {
            let comp: f64 = l[1].parse().unwrap();
            let comm: f64 = l[2].parse().unwrap();
            assert!(comp > 0.0 && comm > 0.0, "{l:?}");
        }
    }
    // show interval: rank 0 prints after watched calls 2, 4, 6
    let shown: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("benchlake-tracer: MPI_Allreduce call"))
        .collect();
    assert_eq!(
        shown,
        vec![
            "benchlake-tracer: MPI_Allreduce call 2",
            "benchlake-tracer: MPI_Allreduce call 4",
            "benchlake-tracer: MPI_Allreduce call 6"
        ]
    );
}

fn input(dir: &Path, extra: &str) -> std::path::PathBuf {
    let p = dir.join(format!("input.{}", extra.len()));
    std::fs::write(
        &p,
        format!(
            "NUMBER_OF_HOSTS 1\nHOST_TYPE 0\nINTRA_HOST_BANDWIDTH_PEAK 800.00\nINTRA_HOST_LATENCY 2.0\nINTRA_HOST_BARRIER_LATENCY 10.00\n{extra}BLOCK_HOST 0\nNUMBER_OF_PROCS 2\nMPI_RANKS 0-1\nADAPTERS 0\n"
        ),
    )
    .unwrap();
    p
}

fn replay(dir: &Path, input: &Path) -> benchlake_replay::ReplayResult {
    let mut p = BTreeMap::new();
    p.insert("input".to_string(), input.display().to_string());
    benchlake_replay::run_replay("bandela", dir, &p).unwrap()
}

#[test]
fn calipers_and_ignore_next_col() {
    if common::lib().is_none() {
        return;
    }
    let (t, out, _) = traced(2, &[]);
    for r in 0..2 {
        let recs = common::bandela(&out, r);
        // caliper 2 brackets the work and the first Allreduce
        let push = recs
            .iter()
            .position(|x| *x == BRecord::CaliperPush(2))
            .unwrap();
        let pop = recs.iter().position(|x| *x == BRecord::CaliperPop).unwrap();
        assert!(push < pop);
        assert!(matches!(recs[push + 1], BRecord::Compute { seconds, .. } if seconds > 0.0));
        let inside: Vec<&BRecord> = recs[push..pop]
            .iter()
            .filter(|x| matches!(x, BRecord::Kernel { main_fn, .. } if main_fn == AR))
            .collect();
        assert_eq!(inside.len(), 4, "one exchange with the other rank");
        // the Bcast after ignore_next_col carries col=1 on each of its kernels
        for k in &recs {
            if let BRecord::Kernel {
                main_fn,
                kernel: Kernel::Isend { col, .. } | Kernel::Irecv { col, .. },
                ..
            } = k
                && main_fn == "MPI_Bcast"
            {
                assert_eq!(*col, Some(1));
            }
        }
        // the Barrier after it is preceded by the meta record
        let bar = recs
            .iter()
            .rposition(|x| matches!(x, BRecord::Kernel { main_fn, .. } if main_fn == "MPI_Barrier"))
            .unwrap();
        assert_eq!(recs[bar - 1], BRecord::IgnoreNextCol(1));
    }
    // the model: a caliper boost of 1000 for caliper 2 shrinks the computation; an
    // ignore index of 1 drops the Bcast
    let base = replay(
        &out,
        &input(
            t.path(),
            "block_max_calipers 2\ncalipers_boost 1 1\nblock_max_ignore_collective 1\nignore_index 0\n",
        ),
    );
    let fast = replay(
        &out,
        &input(
            t.path(),
            "block_max_calipers 2\ncalipers_boost 1 1000\nblock_max_ignore_collective 1\nignore_index 1\n",
        ),
    );
    for r in 0..2 {
        let (b, f) = (&base.ranks[r], &fast.ranks[r]);
        assert!(
            f.computation_s < b.computation_s,
            "rank {r}: {} vs {}",
            f.computation_s,
            b.computation_s
        );
        assert!(b.functions.contains_key("MPI_Bcast"));
        assert!(
            !f.functions.contains_key("MPI_Bcast"),
            "{:?}",
            f.functions.keys()
        );
    }
}
