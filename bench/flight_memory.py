#!/usr/bin/env python3
"""Resident memory of a Flight DoGet of one big LinkTest night (issue 40 item 5).

Starts `benchlake coordinator` (SQLite state, local lake), an agent with the
synthetic LinkTest entry of bench/coordinator_memory.py and a worker,
each a process of its own, lands one run of --ranks ranks
(ranks × (ranks − 1) pair rows in `linktest_timings`), waits for the process
to settle, then streams that run's pairs with pyarrow.flight (`DoGet`,
batches read and dropped as a client that writes them out would) while a
thread samples the process's resident memory every 10 ms. Prints the rows,
the time, the resident memory before, the peak during the stream and their
difference, and exits 1 when the difference exceeds --max-growth-mb.

    python3 bench/flight_memory.py [--bin PATH] [--ranks 2048] [--max-growth-mb 150]

Needs pyarrow (the venv scripts/test.sh makes has it).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coordinator_memory import CATALOG, ROOT, free_port, rss_mb, stop  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "benchlake"))
    ap.add_argument("--ranks", type=int, default=2048)
    ap.add_argument("--max-growth-mb", type=float, default=150.0)
    a = ap.parse_args()
    import pyarrow.flight as flight

    work = Path(tempfile.mkdtemp(prefix="bl-flight-"))
    (work / "cat.toml").write_text(CATALOG.format(ranks=a.ranks))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env["BENCHLAKE_COORDINATOR"] = f"127.0.0.1:{port}"
    # The coordinator in a process of its own (the agent and the worker in
    # theirs), so its resident memory is the commit's and the stream's only.
    data = work / "data"
    data.mkdir()
    coord = f"127.0.0.1:{port}"
    up = subprocess.Popen(
        [a.bin, "coordinator", "--listen", coord, "--state", str(data / "state.db"),
         "--lake", str(data / "lake"), "--http-addr", "127.0.0.1:0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    others = [
        subprocess.Popen([a.bin, "agent", "--coordinator", coord, "--name", "a1", "--catalog",
                          str(work / "cat.toml"), "--work-dir", str(data / "agent"), "--run-as", "root"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([a.bin, "worker", "--coordinator", coord, "--name", "w1", "--lake",
                          str(data / "lake")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    rc = 0
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([a.bin, "agents", "list"], env=env, capture_output=True,
                             text=True).stdout.find("a1") < 0:
            if time.monotonic() > deadline or up.poll() is not None:
                sys.exit("the coordinator or the agent did not come up")
            time.sleep(0.5)
        # Keep draining the log so the process never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in up.stdout], daemon=True).start()
        p = subprocess.run([a.bin, "run", "submit", "synth-linktest", "-p", "seed=1", "--watch"],
                           env=env, capture_output=True, text=True)
        ids = re.findall(r"\b[0-9A-HJKMNP-TV-Z]{26}\b", p.stdout)
        if p.returncode != 0 or not ids:
            sys.exit(f"the run failed (exit {p.returncode}): {p.stdout}{p.stderr}")
        run_id = ids[0]
        time.sleep(5)
        before = rss_mb(up.pid)
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_mb(up.pid))
                time.sleep(0.01)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        client = flight.connect(f"grpc://127.0.0.1:{port}")
        d = flight.FlightDescriptor.for_command(json.dumps({"table": "linktest_timings", "run_id": run_id}))
        t0 = time.monotonic()
        reader = client.do_get(client.get_flight_info(d).endpoints[0].ticket)
        rows = 0
        for chunk in reader:
            rows += chunk.data.num_rows
        secs = time.monotonic() - t0
        done.set()
        t.join()
        growth = peak[0] - before
        want = a.ranks * (a.ranks - 1)
        print(f"DoGet of one {a.ranks}-rank night: {rows:,} rows in {secs:.2f} s; "
              f"RSS before {before:.0f} MB, peak {peak[0]:.0f} MB, growth {growth:.0f} MB")
        if rows != want:
            print(f"expected {want:,} rows", file=sys.stderr)
            rc = 1
        if growth > a.max_growth_mb:
            print(f"growth {growth:.0f} MB is above the bound {a.max_growth_mb:.0f} MB", file=sys.stderr)
            rc = 1
    finally:
        stop([*others, up], work)
    sys.exit(rc)


if __name__ == "__main__":
    main()
