//! Host type 1: the topology plug-in, as a Rust trait and as a C shared library built
//! by this test with the system C compiler (through the `cc` crate) and loaded at run
//! time.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use benchlake_formats::bandela::BandelaInput;
use benchlake_replay::bandela::{BandelaItem, Topology, rank_files, simulate_with};
use benchlake_replay::run_replay;

const INPUT: &str = "NUMBER_OF_HOSTS 1\nHOST_TYPE 1\nINTRA_HOST_BANDWIDTH_PEAK 800\nINTRA_HOST_LATENCY 2\nBLOCK_HOST 0\nNUMBER_OF_PROCS 3\nMPI_RANKS 0-2\nADAPTERS 0\n";

/// Ranks 1 and 2 both read 400 000 bytes from rank 0 at 1 ms (+ 2 latencies).
fn traces(dir: &Path) -> PathBuf {
    let bodies = [
        "K 0 MPI_Send isend 1 1 5 400000 1 0\nK 1 MPI_Send isend 2 1 5 400000 2 0\nK 2 MPI_Send wait 1\nK 3 MPI_Send wait 2\n",
        "C 0.001\nK 0 MPI_Recv irecv 0 1 5 400000 1 0\nK 1 MPI_Recv wait 1\n",
        "C 0.001\nK 0 MPI_Recv irecv 0 1 5 400000 1 0\nK 1 MPI_Recv wait 1\n",
    ];
    for (i, b) in bodies.iter().enumerate() {
        std::fs::write(
            dir.join(format!("bandela.{i}.txt")),
            format!("H {i} 3 0\n{b}"),
        )
        .expect("write");
    }
    let input = dir.join("input");
    std::fs::write(&input, INPUT).expect("input");
    input
}

/// 400 MB/s shared equally by the live transfers; records the calls.
#[derive(Default)]
struct Shared {
    started: Option<(i32, f64)>,
    ended: Option<f64>,
    arrivals: Vec<(i32, i32, i32, usize)>,
    departures: usize,
}

impl Topology for Shared {
    fn start(&mut self, nprocs: i32, buffered_bandwidth: f64) {
        self.started = Some((nprocs, buffered_bandwidth));
    }
    fn end(&mut self, real_time: f64) {
        self.ended = Some(real_time);
    }
    fn arrival(
        &mut self,
        _t: f64,
        receiver: i32,
        sender: i32,
        req_size: i32,
        live: &mut [BandelaItem],
    ) -> f64 {
        self.arrivals.push((receiver, sender, req_size, live.len()));
        let bw = 400.0 / live.len() as f64;
        for it in live.iter_mut() {
            it.old_bandwidth = it.new_bandwidth;
            it.new_bandwidth = bw;
        }
        bw
    }
    fn departure(&mut self, _t: f64, _r: i32, _s: i32, _live: &mut [BandelaItem]) {
        self.departures += 1;
    }
}

#[test]
fn rust_topology_gives_the_receive_bandwidth() {
    let d = tempfile::tempdir().expect("tmp");
    let input = BandelaInput::read(traces(d.path())).expect("input");
    let files = rank_files(d.path()).expect("files");
    let mut topo = Shared::default();
    let r = simulate_with(&files, &input, Some(&mut topo)).expect("replay");
    // Rank 1 starts reading at 1.004 ms alone: 400 MB/s, 1 ms. Rank 2 starts at the same
    // time with one live transfer: 200 MB/s, 2 ms.
    assert!(
        (r.ranks[1].comm.big - 0.001).abs() < 1e-12,
        "{}",
        r.ranks[1].comm.big
    );
    assert!(
        (r.ranks[2].comm.big - 0.002).abs() < 1e-12,
        "{}",
        r.ranks[2].comm.big
    );
    assert!((r.ranks[2].total_s - (0.001 + 4e-6 + 0.002)).abs() < 1e-12);
    assert_eq!(topo.started, Some((3, 1600.0)));
    assert_eq!(topo.arrivals, vec![(1, 0, 400000, 1), (2, 0, 400000, 2)]);
    assert_eq!(topo.departures, 2);
    assert!((topo.ended.expect("end") - r.predicted_time_s).abs() < 1e-15);
}

const PLUGIN_C: &str = r#"
typedef struct bandela_item_ {
  int func; int receiver; int sender;
  double old_bandwidth; double new_bandwidth; void *convenience;
} bandela_item;
static int nprocs_seen = 0;
void numaflex_start(int nprocs, double buffered_bandwidth) { nprocs_seen = nprocs; (void)buffered_bandwidth; }
void numaflex_end(double real_time) { (void)real_time; }
/* 400 MB/s shared equally by the live transfers (nb_live running + the new one). */
double compute_bandwidth_for_arrival(double t, int receiver, int sender, int req_size,
                                     int nb_live, bandela_item *a) {
  (void)t; (void)receiver; (void)sender; (void)req_size;
  double bw = 400.0 / (nb_live + 1) * (nprocs_seen == 3 ? 1.0 : 0.0);
  for (int i = 0; i <= nb_live; i++) { a[i].old_bandwidth = a[i].new_bandwidth; a[i].new_bandwidth = bw; }
  return bw;
}
void compute_bandwidth_for_departure(double t, int receiver, int sender, int nb_live, bandela_item *a) {
  (void)t; (void)receiver; (void)sender; (void)nb_live; (void)a;
}
"#;

#[test]
fn c_plugin_loaded_at_run_time() {
    let d = tempfile::tempdir().expect("tmp");
    let input = traces(d.path());
    let src = d.path().join("topo.c");
    std::fs::write(&src, PLUGIN_C).expect("write c");
    let lib = d.path().join("libtopo.so");
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let compiler = cc::Build::new()
        .target(&target)
        .host(&target)
        .opt_level(1)
        .cargo_metadata(false)
        .try_get_compiler()
        .expect("C compiler");
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success(), "compiling the plug-in failed");
    let mut p = BTreeMap::new();
    p.insert("input".to_string(), input.display().to_string());
    p.insert("topology".to_string(), lib.display().to_string());
    let r = run_replay("bandela", d.path(), &p).expect("replay");
    assert!(
        (r.ranks[1].comm.big - 0.001).abs() < 1e-12,
        "{}",
        r.ranks[1].comm.big
    );
    assert!(
        (r.ranks[2].comm.big - 0.002).abs() < 1e-12,
        "{}",
        r.ranks[2].comm.big
    );
    // Without the plug-in, host type 1 is refused with a clear error.
    p.remove("topology");
    let e = run_replay("bandela", d.path(), &p)
        .expect_err("no plug-in")
        .to_string();
    assert!(e.contains("topology"), "{e}");
    // A library without the four functions is refused.
    p.insert(
        "topology".to_string(),
        "/nonexistent/libtopo.so".to_string(),
    );
    assert!(run_replay("bandela", d.path(), &p).is_err());
}
