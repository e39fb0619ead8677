#!/usr/bin/env python3
"""Prediction error of the default replays, uncalibrated and calibrated
(docs/replay.md, "Validation figures"; issue 17).

1. Calibration from the machine's own pair times: `benchlake netprobe` (the
   LinkTest-style probe, a size sweep of five message sizes), fitted by
   `benchlake replay calibrate --out CAL`. Under mpirun: two local ranks
   (intra-node) ping-ponging through shared memory, as MPI ranks of one
   host do (netprobe's default for local ranks). Under Slurm (TCP): six ranks, two on each of the three Slurm
   nodes (`srun -N3 -n6`), so both intra- and inter-node pairs are fitted.
2. Six MPI kernels (ring, halo, bcast, allreduce, alltoall, mixed) at 2, 4
   and 8 ranks with the benchlake tracer preloaded, REPEAT times each:
   `--launcher mpirun` (default): `mpirun --oversubscribe` on this host;
   `--launcher slurm`: `srun --mpi=pmix -N2 --overcommit` on a three-node
   Slurm cluster that the script starts on this host under a temporary
   directory (munged, slurmctld, three slurmd n1..n3, as
   cli/tests/common/slurm.rs does; needs root and slurmctld slurmd
   slurm-client munge; SLURM_CONF=... uses a running cluster instead).
   Under Slurm Open MPI runs over TCP on loopback (shared memory crashes
   when the fake nodes share a host), ranks in blocks (n1 holds the first
   half).
3. Per run: the measured time (the slowest rank's computation and
   communication in the traced window, as `trace_comparison` takes it from
   bandela_stats) and the predictions of the traced run's default replays
   built as the worker builds them from the rank map: Bandela (one host
   under mpirun; one host per node, host type 2, under Slurm) and Dimemas
   (one node; `nodes` x `tasks_per_node` under Slurm), with the tracer's
   2 us / 700 MB/s (5 us / 700 MB/s between nodes), each without and with
   the calibration, and with the calibration and a CPU factor (cores /
   ranks when ranks outnumber this host's cores: what the default replays
   of a one-node run now apply; under Slurm the worker applies none, since
   real nodes have their own cores, but the fake nodes share this host's).

Prints a Markdown table of the median signed error per kernel and rank count.
Usage: BENCHLAKE_BIN=... python3 bench/replay_validation.py [REPEAT] [--launcher mpirun|slurm]
       [--ranks 2,4,8] [--kernels ring,halo,...]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = os.environ.get("BENCHLAKE_BIN", str(Path.home() / ".cache/benchlake-target/debug/benchlake"))
TARGET = Path(BIN).parent
TRACER = os.environ.get("BENCHLAKE_TRACER_LIB", str(TARGET / "libbenchlake_tracer.so"))
CORES = os.cpu_count() or 1
KERNEL_NAMES = ["ring", "halo", "bcast", "allreduce", "alltoall", "mixed"]
SIZES = "8,1k,16k,128k,1MiB"
# Open MPI across fake Slurm nodes on one host (reference/operations.md).
SLURM_MPI_ENV = {
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_oob_tcp_if_include": "lo",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    # The three fake nodes share this host's cores, but Slurm gives each two
    # CPUs, so Open MPI does not know its ranks are oversubscribed and
    # busy-polls without yielding (a 4-rank ring took 10 ms per MPI_Sendrecv,
    # against 0.05-1.7 ms with this): what mpirun --oversubscribe sets.
    "OMPI_MCA_mpi_yield_when_idle": "1",
}

KERNELS = r"""
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
static volatile double sink;
static void work(int n) { double x = 0; for (int i = 0; i < n; i++) x += i * 0.5; sink = x; }
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const char *k = argc > 1 ? argv[1] : "ring";
    int iters = 40, m = 16384;
    char *s = calloc((size_t)m * n, 1), *q = calloc((size_t)m * n, 1);
    double v[64] = {0};
    int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int it = 0; it < iters; it++) {
        work(50000 + 5000 * r);
        int mixed = !strcmp(k, "mixed");
        if (!strcmp(k, "ring") || (mixed && it % 3 == 0)) {
            MPI_Sendrecv(s, m, MPI_CHAR, right, 1, q, m, MPI_CHAR, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        if (!strcmp(k, "halo") || (mixed && it % 3 == 1)) {
            MPI_Request rq[4];
            MPI_Irecv(q, m, MPI_CHAR, left, 2, MPI_COMM_WORLD, &rq[0]);
            MPI_Irecv(q + m, m, MPI_CHAR, right, 3, MPI_COMM_WORLD, &rq[1]);
            MPI_Isend(s, m, MPI_CHAR, right, 2, MPI_COMM_WORLD, &rq[2]);
            MPI_Isend(s + m, m, MPI_CHAR, left, 3, MPI_COMM_WORLD, &rq[3]);
            MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
        }
        if (!strcmp(k, "bcast") || (mixed && it % 3 == 2)) {
            MPI_Bcast(s, m, MPI_CHAR, 0, MPI_COMM_WORLD);
        }
        if (!strcmp(k, "allreduce") || mixed) {
            MPI_Allreduce(MPI_IN_PLACE, v, 64, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        if (!strcmp(k, "alltoall") || (mixed && it % 5 == 0)) {
            MPI_Alltoall(s, m / 4, MPI_CHAR, q, m / 4, MPI_CHAR, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(s); free(q);
    MPI_Finalize();
    return 0;
}
"""


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))}: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


class Slurm:
    """A three-node Slurm cluster (n1..n3) on this host under a temporary
    directory: the recipe of reference/operations.md and
    cli/tests/common/slurm.rs. Stopped (by PID) by stop()."""

    NODES = ["n1", "n2", "n3"]

    def __init__(self, root: Path):
        self.dir = root / "slurm"
        self.conf = self.dir / "slurm.conf"
        self.procs = []
        for sub in ["munge", "log", "state", "spool", "tmp"]:
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    def env(self):
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def spawn(self, name, argv):
        log = open(self.dir / "log" / f"{name}.out", "w")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, env=self.env())))

    def wait(self, what, ready, limit=60):
        t = time.time()
        while not ready():
            for name, p in self.procs:
                if p.poll() is not None:
                    raise SystemExit(f"{name} exited ({p.returncode}) waiting for {what}: see {self.dir}/log")
            if time.time() - t > limit:
                raise SystemExit(f"no {what} after {limit} s: see {self.dir}/log")
            time.sleep(0.1)

    def start(self):
        missing = [p for p in ["munged", "mungekey", "slurmctld", "slurmd", "sinfo", "srun"]
                   if not shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
        if missing:
            raise SystemExit(f"Slurm not installed ({', '.join(missing)}): apt-get install slurmctld slurmd slurm-client munge")
        if os.geteuid() != 0:
            raise SystemExit("slurmd must run as root")
        d = self.dir
        key = d / "munge" / "munge.key"
        run(["/usr/sbin/mungekey", "-c", "-f", "-k", str(key)])
        sock = d / "munge" / "munge.socket"
        self.spawn("munged", ["/usr/sbin/munged", "--foreground", "--force", f"--socket={sock}",
                              f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
                              f"--seed-file={d}/munge/munged.seed"])
        self.wait("munged's socket", sock.exists, 10)
        host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
        socks = [socket.socket() for _ in range(4)]
        for x in socks:
            x.bind(("127.0.0.1", 0))
        ports = [x.getsockname()[1] for x in socks]
        for x in socks:
            x.close()
        conf = (f"ClusterName=benchlake\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ports[0]}\n"
                f"SlurmUser=root\nAuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n"
                f"StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\nSlurmdPidFile={d}/slurmd-%n.pid\n"
                f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmctldLogFile={d}/log/slurmctld.log\n"
                f"SlurmdLogFile={d}/log/slurmd-%n.log\nTmpFS={d}/tmp/%n\nProctrackType=proctrack/linuxproc\n"
                "TaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
                "AccountingStorageType=accounting_storage/none\nSelectType=select/cons_tres\n"
                "SelectTypeParameters=CR_Core\nSlurmdParameters=config_overrides\nMpiDefault=none\n"
                "ReturnToService=2\n")
        for n, port in zip(self.NODES, ports[1:]):
            conf += (f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=2 "
                     "RealMemory=2000 State=UNKNOWN\n")
            for sub in ["spool", "tmp"]:
                (d / sub / n).mkdir(parents=True, exist_ok=True)
        conf += f"PartitionName=debug Nodes={','.join(self.NODES)} Default=YES MaxTime=INFINITE State=UP\n"
        self.conf.write_text(conf)
        self.spawn("slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", str(self.conf)])
        for n in self.NODES:
            self.spawn(f"slurmd-{n}", ["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", n])

        def idle():
            o = subprocess.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], capture_output=True, text=True,
                               env=self.env())
            return o.stdout.strip() == "3"
        self.wait("3 idle nodes in sinfo", idle)

    def stop(self):
        # slurmd, slurmctld, then munged: each by the PID we started.
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def netprobe_files(work: Path, slurm) -> list:
    """netprobe's size sweep: 2 local ranks (mpirun mode) or 6 ranks on
    the three Slurm nodes; rank 0 writes one file per size."""
    out = work / "np.sion"
    ulid = ulid_of(int(time.time() * 1000))
    common = [f"--run-id={ulid}", f"--message-sizes={SIZES}", "--num-messages=200",
              "--warmup-messages=20", "--serial-retests=0", "--port-base=47100"]
    if slurm is None:
        run([BIN, "netprobe", "--rank=0", "--hosts=127.0.0.1", "--local-ranks=2", f"--out={out}", *common])
    else:
        hosts = ",".join(["127.0.0.1"] * 6)
        # Each task: its rank from Slurm; the node name netprobe records is
        # SLURMD_NODENAME (n1..n3).
        script = (f'exec "{BIN}" netprobe --rank="$SLURM_PROCID" --hosts={hosts} --out={out} '
                  + " ".join(common))
        run(["srun", "-N3", "-n6", "--overcommit", "sh", "-c", script], env=slurm.env())
    files = sorted(work.glob("np_*B.sion"))
    if len(files) != 5:
        raise SystemExit(f"netprobe wrote {files}")
    return files


def calibrate(work: Path, slurm) -> Path:
    """netprobe's size sweep, then replay calibrate."""
    files = netprobe_files(work, slurm)
    cal = work / "cal"
    print(run([BIN, "replay", "calibrate", *map(str, files), "--out", str(cal)]), file=sys.stderr)
    return cal


def ulid_of(ms: int) -> str:
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    t = ""
    for _ in range(10):
        t = alphabet[ms % 32] + t
        ms //= 32
    rnd = int.from_bytes(os.urandom(10), "big")
    r = ""
    for _ in range(16):
        r = alphabet[rnd % 32] + r
        rnd //= 32
    return t + r


def measured(stats: Path) -> float:
    """The slowest rank's Comput + Wait + Latency + Transfer (bandela_stats)."""
    text = stats.read_text()
    block = text.split(">>>> Request times in seconds <<<<")[1].split("\n\n")[0]
    lines = [l.split() for l in block.strip().splitlines()]
    head = lines[0]
    idx = [head.index(c) for c in ("Comput", "Wait", "Latency", "Transfer")]
    return max(sum(float(row[i]) for i in idx) for row in lines[1:])


def rank_nodes(out: Path, ranks: int) -> list:
    """Each rank's node from the tracer's rank map (bandela_ranks)."""
    nodes = {}
    for line in (out / "bandela_ranks").read_text().splitlines():
        f = line.split()
        if len(f) == 3 and f[0].isdigit():
            nodes[int(f[0])] = f[2]
    if sorted(nodes) != list(range(ranks)):
        raise SystemExit(f"{out}/bandela_ranks: ranks {sorted(nodes)}")
    return [nodes[r] for r in range(ranks)]


def ranges(rs: list) -> str:
    out, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(f"{rs[i]}-{rs[j]}" if j > i else str(rs[i]))
        i = j + 1
    return ",".join(out)


def fmt(v: float) -> str:
    return f"{v:g}"


def bandela_input(nodes: list, intra=(2.0, 700.0), inter=(5.0, 700.0), cpu_boost=None) -> str:
    """The worker's default replaympi input (worker/src/traced.rs,
    default_input_with_cores): one host per node (host type 2 for several),
    latencies in us and bandwidths in MB/s of 10^6 B."""
    hosts = []
    for r, n in enumerate(nodes):
        for h in hosts:
            if h[0] == n:
                h[1].append(r)
                break
        else:
            hosts.append((n, [r]))
    multi = len(hosts) > 1
    t = f"NUMBER_OF_HOSTS {len(hosts)}\nHOST_TYPE {2 if multi else 0}\n"
    if cpu_boost is not None and cpu_boost < 1:
        t += f"cpu_boost {fmt(cpu_boost)}\n"
    t += (f"INTRA_HOST_LATENCY {fmt(intra[0])}\nINTRA_HOST_BANDWIDTH_PEAK {fmt(intra[1])}\n"
          "INTRA_HOST_BARRIER_LATENCY 10\n")
    if multi:
        t += (f"INTER_HOST_LATENCY {fmt(inter[0])}\nINTER_HOST_BANDWIDTH_PEAKS {fmt(inter[1])} -1\n"
              "INTER_HOST_BARRIER_LATENCY 20\n")
    for i, (n, rs) in enumerate(hosts):
        t += f"BLOCK_HOST {i}\nNUMBER_OF_PROCS {len(rs)}\nMPI_RANKS {ranges(rs)}\nADAPTERS {int(multi)}\n"
    return t


def blocks(nodes: list):
    """(nodes, tasks per node) when equal blocks of consecutive ranks sit on
    distinct nodes (the Dimemas placement), else None."""
    b = []
    for n in nodes:
        if b and b[-1][0] == n:
            b[-1][1] += 1
        elif any(x[0] == n for x in b):
            return None
        else:
            b.append([n, 1])
    return (len(b), b[0][1]) if all(x[1] == b[0][1] for x in b) else None


def predicted(args) -> float:
    return json.loads(run([BIN, "replay", *args, "--json"]))["predicted_time_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repeat", nargs="?", type=int, default=3)
    ap.add_argument("--launcher", choices=["mpirun", "slurm"], default="mpirun")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--kernels", default=",".join(KERNEL_NAMES))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="replay-validation-"))
    slurm = None
    if a.launcher == "slurm" and os.environ.get("SLURM_CONF"):
        slurm = type("Given", (), {"env": staticmethod(lambda: dict(os.environ)), "stop": lambda self: None})()
    elif a.launcher == "slurm":
        slurm = Slurm(work)
        slurm.start()
    try:
        measure(a, work, slurm)
    finally:
        if slurm is not None:
            slurm.stop()


def measure(a, work: Path, slurm):
    cal = calibrate(work, slurm)
    doc = json.loads((cal / "calibration.json").read_text())
    p = doc["params"]
    to10 = 1048576 / 1e6
    # The fits in replaympi's units (us, MB of 10^6 B), as the worker applies them.
    cal_intra = (float(p["intra_latency"]) * 1e6, float(p["intra_bandwidth"]) * to10) if "intra_latency" in p else None
    cal_inter = (float(p["latency"]) * 1e6, float(p["bandwidth"]) * to10) if "latency" in p else None
    fits = "; ".join(f"{f['class']} {f['latency_s'] * 1e6:.2f} us + size / {f['bandwidth_mb_s'] * to10:.0f} MB/s "
                     f"(r2 {f['r2']:.2f})" for f in doc["fits"])
    print(f"calibration: {fits}; params {p}", file=sys.stderr)
    src = work / "kernels.c"
    src.write_text(KERNELS)
    exe = work / "kernels"
    run(["mpicc", "-O1", "-o", str(exe), str(src)])
    variants = ["bandela", "bandela+cal", "bandela+cal+cpu", "dimemas", "dimemas+cal", "dimemas+cal+cpu"]
    results = {}
    failed_runs = []
    for kernel in a.kernels.split(","):
        for np_ in [int(x) for x in a.ranks.split(",")]:
            for rep in range(a.repeat):
                out = work / f"{kernel}-{np_}-{rep}"
                out.mkdir()
                if slurm is None:
                    run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_),
                         "-x", f"LD_PRELOAD={TRACER}", "-x", f"BENCHLAKE_TRACE_DIR={out}",
                         str(exe), kernel])
                else:
                    env = {**slurm.env(), **SLURM_MPI_ENV}
                    argv = ["srun", "--mpi=pmix", "-N2", "-n", str(np_), "--overcommit",
                            f"--export=ALL,LD_PRELOAD={TRACER},BENCHLAKE_TRACE_DIR={out}",
                            str(exe), kernel]
                    # Open MPI's TCP wire-up on loopback now and then fails
                    # (connect() EAGAIN when 8 ranks connect at once): such a
                    # run is started again, at most twice, and counted.
                    for attempt in range(3):
                        p = subprocess.run(argv, capture_output=True, text=True, env=env)
                        if p.returncode == 0:
                            break
                        failed_runs.append(f"{kernel} np{np_} #{rep}: {p.stderr.strip().splitlines()[-1:]}")
                        print(f"{kernel} np{np_} #{rep} failed (attempt {attempt + 1}): {p.stderr[-300:]}",
                              file=sys.stderr)
                        shutil.rmtree(out)
                        out.mkdir()
                    else:
                        raise SystemExit(f"{' '.join(argv)}: failed 3 times")
                meas = measured(out / "bandela_stats")
                nodes = rank_nodes(out, np_)
                traces = out / "bandela"
                traces.mkdir()
                for f in out.glob("bandela.*"):
                    if re.fullmatch(r"bandela\.\d+(\.txt)?", f.name):
                        f.rename(traces / f.name)
                one_node = len(set(nodes)) == 1
                # cores / ranks per host when ranks outnumber this host's cores.
                cpu = min(1.0, CORES / np_)
                inputs = {
                    "bandela": bandela_input(nodes),
                    "bandela+cal": bandela_input(nodes, cal_intra or (2.0, 700.0), cal_inter or (5.0, 700.0)),
                    "bandela+cal+cpu": bandela_input(nodes, cal_intra or (2.0, 700.0), cal_inter or (5.0, 700.0),
                                                     cpu_boost=cpu),
                }
                pred = {}
                for v, text in inputs.items():
                    f = out / f"{v}.input"
                    f.write_text(text)
                    pred[v] = predicted(["bandela", str(traces), "--input", str(f)])
                dim = next(out.glob("*.dim"))
                placement = None if one_node else blocks(nodes)
                n_nodes, per_node = placement or (1, np_)
                base = ["-p", f"nodes={n_nodes}", "-p", f"tasks_per_node={per_node}"]
                plain_dim = base + ["-p", "intra_latency=2e-6", "-p", f"intra_bandwidth={700e6 / 1048576}"]
                if n_nodes > 1:
                    plain_dim += ["-p", "latency=5e-6", "-p", f"bandwidth={700e6 / 1048576}"]
                pred["dimemas"] = predicted(["dimemas", str(dim), *plain_dim])
                pred["dimemas+cal"] = predicted(["dimemas", str(dim), "--calibration", str(cal), *base])
                # Bursts are divided by cpu_ratio: ranks sharing cores run slower.
                pred["dimemas+cal+cpu"] = predicted(["dimemas", str(dim), "--calibration", str(cal), *base,
                                                     "-p", f"cpu_ratio={cpu}"])
                results.setdefault((kernel, np_), []).append((meas, pred))
                print(f"{kernel} np{np_} #{rep} on {','.join(sorted(set(nodes)))}: measured {meas * 1e3:.3f} ms; "
                      + ", ".join(f"{v} {pred[v] * 1e3:.3f}" for v in variants), file=sys.stderr)
    if failed_runs:
        print(f"\n{len(failed_runs)} run(s) failed and were started again: " + "; ".join(failed_runs))
    print(f"\nMedian signed error of the predicted total time, {a.repeat} runs each "
          f"({a.launcher}, {CORES} cores; calibration {fits}):\n")
    print("| kernel | ranks | measured (ms) | " + " | ".join(variants) + " |")
    print("|---|---|---|" + "---|" * len(variants))
    for (kernel, np_), rs in results.items():
        meas = statistics.median(m for m, _ in rs)
        errs = []
        for v in variants:
            errs.append(statistics.median((p[v] - m) / m * 100 for m, p in rs))
        print(f"| {kernel} | {np_} | {meas * 1e3:.2f} | " + " | ".join(f"{e:+.0f} %" for e in errs) + " |")


if __name__ == "__main__":
    main()
