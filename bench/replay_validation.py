#!/usr/bin/env python3
"""Prediction error of the default replays, uncalibrated and calibrated
(docs/replay.md, "Validation figures"; issue 17).

1. Calibration from this machine's own pair times: `benchlake netprobe`
   (the LinkTest-style TCP probe) between two local ranks at five message
   sizes, fitted by `benchlake replay calibrate --out CAL`.
2. Six MPI kernels (ring, halo, bcast, allreduce, alltoall, mixed) at 2, 4
   and 8 ranks, each run under `mpirun --oversubscribe` with the benchlake
   tracer preloaded, REPEAT times.
3. Per run: the measured time (the slowest rank's computation and
   communication in the traced window, as `trace_comparison` takes it from
   bandela_stats) and the predictions of the traced run's default replays,
   Bandela (one host, the tracer's 2 us / 700 MB/s) and Dimemas (one node,
   same figures), each without and with the calibration, and Dimemas with
   the calibration and a CPU factor (cores / ranks when ranks outnumber
   cores).

Prints a Markdown table of the median signed error per kernel and rank count.
Usage: BENCHLAKE_BIN=... python3 bench/replay_validation.py [REPEAT]
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = os.environ.get("BENCHLAKE_BIN", str(Path.home() / ".cache/benchlake-target/debug/benchlake"))
TARGET = Path(BIN).parent
TRACER = os.environ.get("BENCHLAKE_TRACER_LIB", str(TARGET / "libbenchlake_tracer.so"))
REPEAT = int(sys.argv[1]) if len(sys.argv) > 1 else 3
CORES = os.cpu_count() or 1

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
        raise SystemExit(f"{' '.join(map(str, cmd))}: rc {p.returncode}\n{p.stderr[-2000:]}")
    return p.stdout


def calibrate(work: Path) -> Path:
    """netprobe between two local ranks at five sizes, then replay calibrate."""
    files = []
    for i, size in enumerate([8, 1024, 16384, 131072, 1048576]):
        out = work / f"np{size}.sion"
        ulid = ulid_of(int(time.time() * 1000) + i)
        common = ["--num-tasks=2", "--hosts=127.0.0.1,127.0.0.1", f"--run-id={ulid}",
                  f"--message-size={size}", "--num-messages=200", "--warmup-messages=20",
                  "--serial-retests=0", "--port-base=47100"]
        r1 = subprocess.Popen([BIN, "netprobe", "--rank=1", "--out=/dev/null", *common],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        run([BIN, "netprobe", "--rank=0", f"--out={out}", *common])
        r1.wait(timeout=120)
        files.append(out)
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


def default_input(ranks: int) -> str:
    return ("NUMBER_OF_HOSTS 1\nHOST_TYPE 0\nINTRA_HOST_LATENCY 2\nINTRA_HOST_BANDWIDTH_PEAK 700\n"
            f"INTRA_HOST_BARRIER_LATENCY 10\nBLOCK_HOST 0\nNUMBER_OF_PROCS {ranks}\n"
            f"MPI_RANKS 0-{ranks - 1}\nADAPTERS 0\n")


def predicted(args) -> float:
    return json.loads(run([BIN, "replay", *args, "--json"]))["predicted_time_s"]


def main():
    work = Path(tempfile.mkdtemp(prefix="replay-validation-"))
    cal = calibrate(work)
    doc = json.loads((cal / "calibration.json").read_text())
    p = doc["params"]
    mb10 = float(p["intra_bandwidth"]) * 1048576 / 1e6
    cal_lat_us = float(p["intra_latency"]) * 1e6
    print(f"calibration: intra {cal_lat_us:.2f} us + size / {mb10:.0f} MB/s (10^6 B); params {p}", file=sys.stderr)
    src = work / "kernels.c"
    src.write_text(KERNELS)
    exe = work / "kernels"
    run(["mpicc", "-O1", "-o", str(exe), str(src)])
    variants = ["bandela", "bandela+cal", "dimemas", "dimemas+cal", "dimemas+cal+cpu"]
    results = {}
    for kernel in ["ring", "halo", "bcast", "allreduce", "alltoall", "mixed"]:
        for np_ in [2, 4, 8]:
            for rep in range(REPEAT):
                out = work / f"{kernel}-{np_}-{rep}"
                out.mkdir()
                run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_),
                     "-x", f"LD_PRELOAD={TRACER}", "-x", f"BENCHLAKE_TRACE_DIR={out}",
                     str(exe), kernel])
                meas = measured(out / "bandela_stats")
                traces = out / "bandela"
                traces.mkdir()
                for f in out.glob("bandela.*"):
                    if re.fullmatch(r"bandela\.\d+(\.txt)?", f.name):
                        f.rename(traces / f.name)
                plain_in = out / "default.input"
                plain_in.write_text(default_input(np_))
                cal_in = out / "cal.input"
                cal_in.write_text(default_input(np_)
                                  .replace("INTRA_HOST_LATENCY 2\n", f"INTRA_HOST_LATENCY {cal_lat_us}\n")
                                  .replace("INTRA_HOST_BANDWIDTH_PEAK 700\n", f"INTRA_HOST_BANDWIDTH_PEAK {mb10}\n"))
                dim = next(out.glob("*.dim"))
                base = ["-p", "nodes=1", "-p", f"tasks_per_node={np_}"]
                plain_dim = base + ["-p", "intra_latency=2e-6", "-p", f"intra_bandwidth={700e6 / 1048576}"]
                cpu = max(1.0, np_ / CORES)
                pred = {
                    "bandela": predicted(["bandela", str(traces), "--input", str(plain_in)]),
                    "bandela+cal": predicted(["bandela", str(traces), "--input", str(cal_in)]),
                    "dimemas": predicted(["dimemas", str(dim), *plain_dim]),
                    "dimemas+cal": predicted(["dimemas", str(dim), "--calibration", str(cal), *base]),
                    # Bursts are divided by cpu_ratio: ranks sharing cores run slower.
                    "dimemas+cal+cpu": predicted(["dimemas", str(dim), "--calibration", str(cal), *base,
                                                  "-p", f"cpu_ratio={1 / cpu}"]),
                }
                results.setdefault((kernel, np_), []).append((meas, pred))
                print(f"{kernel} np{np_} #{rep}: measured {meas * 1e3:.3f} ms; "
                      + ", ".join(f"{v} {pred[v] * 1e3:.3f}" for v in variants), file=sys.stderr)
    print(f"\nMedian signed error of the predicted total time, {REPEAT} runs each ({CORES} cores):\n")
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
