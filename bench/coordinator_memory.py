#!/usr/bin/env python3
"""Resident memory of `benchlake up` over many LinkTest runs (issue 40).

Starts `benchlake up` (coordinator, agent and worker in one process, SQLite
state, local lake) with a one-entry catalog whose benchmark writes a
synthetic LinkTest file of --ranks ranks (`benchlake probe linktest`), submits
--runs runs one after another (each waits until its tables have landed,
`run submit --watch`) and prints the process's resident memory (VmRSS) and
the run's wall time after every run, then the medians.

    python3 bench/coordinator_memory.py [--bin PATH] [--runs 40] [--ranks 512]

Exit status 1 when a run fails or the resident memory after the last run
exceeds --max-rss-mb (default 500, the issue's bound), so the figure is a
verdict, not only a print.
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CATALOG = """\
[[benchmark]]
name = "synth-linktest"
kind = "noop"
description = "synthetic LinkTest of {ranks} ranks (benchlake probe linktest)"
command = ["{{self_exe}}", "probe", "linktest", "--ranks", "{ranks}", "--seed", "{{seed}}",
           "--out", "{{out_dir}}/pingpong_results_bin.sion"]
launchers = ["local"]
timeout_s = 600
[[benchmark.output]]
file = "pingpong_results_bin*.sion"
format = "linktest"
required = true
[[benchmark.param]]
name = "seed"
type = "int"
default = "0"
min = 0
max = 1000000
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stop(procs, work):
    """Terminates `procs` (each waited for up to 30 s, then killed) and
    removes the scratch directory `work`."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "benchlake"))
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--max-rss-mb", type=float, default=500.0)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bl-mem-"))
    (work / "cat.toml").write_text(CATALOG.format(ranks=a.ranks))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env["BENCHLAKE_COORDINATOR"] = f"127.0.0.1:{port}"
    up = subprocess.Popen(
        [a.bin, "up", "--data", str(work / "data"), "--catalog", str(work / "cat.toml"),
         "--listen", f"127.0.0.1:{port}", "--http-addr", "127.0.0.1:0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rc = 0
    try:
        for line in up.stdout:
            if line.startswith("benchlake is up"):
                break
        else:
            sys.exit(f"benchlake up ended before it was up (exit {up.wait()})")
        print(f"benchlake up: {a.runs} runs of a synthetic {a.ranks}-rank LinkTest "
              f"({a.ranks * (a.ranks - 1)} pairs each); RSS after start {rss_mb(up.pid):.0f} MB")
        print("| run | wall s | RSS MB |")
        print("|---:|---:|---:|")
        walls, rss = [], []
        for i in range(1, a.runs + 1):
            t0 = time.monotonic()
            p = subprocess.run([a.bin, "run", "submit", "synth-linktest", "-p", f"seed={i}", "--watch"],
                               env=env, capture_output=True, text=True)
            walls.append(time.monotonic() - t0)
            if p.returncode != 0:
                print(p.stdout, p.stderr, file=sys.stderr)
                sys.exit(f"run {i} failed (exit {p.returncode})")
            rss.append(rss_mb(up.pid))
            print(f"| {i} | {walls[-1]:.2f} | {rss[-1]:.0f} |", flush=True)
        half = len(rss) // 2
        growth = (rss[-1] - rss[half - 1]) / max(len(rss) - half, 1) if half else float("nan")
        print(f"median wall {statistics.median(walls):.2f} s; RSS after the last run {rss[-1]:.0f} MB, "
              f"max {max(rss):.0f} MB; growth over the second half {growth:+.1f} MB per run")
        if rss[-1] > a.max_rss_mb:
            print(f"RSS {rss[-1]:.0f} MB is above the bound {a.max_rss_mb:.0f} MB", file=sys.stderr)
            rc = 1
    finally:
        stop([up], work)
    sys.exit(rc)


if __name__ == "__main__":
    main()
