#!/usr/bin/env python3
"""The dashboard's LinkTest page of one big run, cold, through the real HTTP
server (issue 40 item 5).

Starts `benchlake coordinator` (SQLite state, local lake), an agent with the
synthetic LinkTest entry of bench/coordinator_memory.py and a worker, each a
process of its own, lands one run of --ranks ranks (`benchlake probe
linktest`, 48 ranks per host; ranks × (ranks − 1) pairs; the ingest writes
`linktest_host_summary`), stops the agent and the worker, then --repeat
times: restarts the coordinator (its view cache empty: a cold load) and
times

- `GET /runs/ID/linktest` (the page from the per-host summary), first and again;
- `GET /runs/ID/linktest?matrix=1` (the pair view, streamed from the pairs),
  first and again, with the coordinator's resident memory before and its
  peak during the request (sampled every 10 ms);
- the matrix image and a zoomed window's image (`matrix.png?r0=…&span=…`)
  and its hover.

Prints each repetition and the medians as Markdown tables; exit status 1
when a request fails, the page's median cold load exceeds --max-page-ms
(1,000) or the pair view's median growth exceeds --max-growth-mb (200).

    python3 bench/linktest_page.py [--bin PATH] [--ranks 6000] [--repeat 5] [--no-matrix]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coordinator_memory import CATALOG, ROOT, free_port, rss_mb, stop  # noqa: E402


def halt(procs):
    """Terminates `procs` (each waited for up to 30 s, then killed)."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def get(url, timeout=600):
    """(seconds, status, body) of one GET over a new connection."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
            return time.monotonic() - t0, r.status, body
    except urllib.error.HTTPError as e:
        return time.monotonic() - t0, e.code, e.read()


class Peak:
    """Samples a process's resident memory every 10 ms while in a `with`."""

    def __init__(self, pid):
        self.pid, self.peak, self.done = pid, 0.0, threading.Event()

    def __enter__(self):
        self.before = rss_mb(self.pid)
        self.peak = self.before
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        return self

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.01)

    def __exit__(self, *exc):
        self.done.set()
        self.t.join()
        self.peak = max(self.peak, rss_mb(self.pid))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "benchlake"))
    ap.add_argument("--ranks", type=int, default=6000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-matrix", action="store_true", help="only the summary page")
    ap.add_argument("--max-page-ms", type=float, default=1000.0)
    ap.add_argument("--max-growth-mb", type=float, default=200.0)
    ap.add_argument("--keep", help="keep the lake and state in this directory (and reuse them)")
    a = ap.parse_args()

    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bl-ltpage-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "cat.toml").write_text(CATALOG.format(ranks=a.ranks))
    port, hport = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env["BENCHLAKE_COORDINATOR"] = f"127.0.0.1:{port}"
    data = work / "data"
    data.mkdir(exist_ok=True)
    coord, http = f"127.0.0.1:{port}", f"http://127.0.0.1:{hport}"

    def start_coordinator():
        p = subprocess.Popen(
            [a.bin, "coordinator", "--listen", coord, "--state", str(data / "state.db"),
             "--lake", str(data / "lake"), "--http-addr", f"127.0.0.1:{hport}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{http}/readyz", timeout=2).read()
                return p
            except OSError:
                if time.monotonic() > deadline or p.poll() is not None:
                    sys.exit("the coordinator did not come up")
                time.sleep(0.2)

    rc = 0
    run_file = work / "run_id"
    up = start_coordinator()
    procs = [up]
    try:
        if run_file.exists():
            run_id = run_file.read_text().strip()
        else:
            others = [
                subprocess.Popen([a.bin, "agent", "--coordinator", coord, "--name", "a1", "--catalog",
                                  str(work / "cat.toml"), "--work-dir", str(data / "agent"),
                                  "--run-as", "root"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                subprocess.Popen([a.bin, "worker", "--coordinator", coord, "--name", "w1", "--lake",
                                  str(data / "lake")],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            ]
            procs += others
            deadline = time.monotonic() + 60
            while subprocess.run([a.bin, "agents", "list"], env=env, capture_output=True,
                                 text=True).stdout.find("a1") < 0:
                if time.monotonic() > deadline:
                    sys.exit("the agent did not come up")
                time.sleep(0.5)
            t0 = time.monotonic()
            p = subprocess.run([a.bin, "run", "submit", "synth-linktest", "-p", "seed=1", "--watch"],
                               env=env, capture_output=True, text=True)
            ids = re.findall(r"\b[0-9A-HJKMNP-TV-Z]{26}\b", p.stdout)
            if p.returncode != 0 or not ids:
                sys.exit(f"the run failed (exit {p.returncode}): {p.stdout}{p.stderr}")
            run_id = ids[0]
            run_file.write_text(run_id)
            print(f"run {run_id}: {a.ranks} ranks, {a.ranks * (a.ranks - 1):,} pairs, landed in "
                  f"{time.monotonic() - t0:.0f} s")
            halt(others)
            procs = [up]
        lake = data / "lake" / "tables"
        for t in ("linktest_timings", "linktest_host_summary"):
            files = list((lake / t).rglob(f"part-*-{run_id}-*.parquet"))
            print(f"{t}: {len(files)} file(s), {sum(f.stat().st_size for f in files) / 1e6:.1f} MB")

        page = f"{http}/runs/{run_id}/linktest"
        rows = []
        for i in range(a.repeat):
            if i > 0:
                halt([up])
                up = start_coordinator()
                procs = [up]
            r = {"rss0": rss_mb(up.pid)}
            r["page"], code, body = get(page)
            if code != 200 or b"lt-matrix-link" not in body:
                print(f"the page answered {code} without the summary", file=sys.stderr)
                rc = 1
            r["page_bytes"] = len(body)
            r["page2"], _, _ = get(page)
            if not a.no_matrix:
                with Peak(up.pid) as pk:
                    r["matrix"], code, body = get(page + "?matrix=1")
                if code != 200 or b"lt-matrix-svg" not in body:
                    print(f"?matrix=1 answered {code}: {body[:300]!r}", file=sys.stderr)
                    rc = 1
                m = re.search(rb"view derived in (\d+) ms \((\d+) passes", body)
                r["passes"] = int(m.group(2)) if m else 0
                r["before"], r["peak"] = pk.before, pk.peak
                r["matrix_bytes"] = len(body)
                r["matrix2"], _, _ = get(page + "?matrix=1")
                r["png"], code, body = get(f"{page}/matrix.png?perm=0")
                if code != 200 or not body.startswith(b"\x89PNG"):
                    rc = 1
                span = max(a.ranks // 8, 32)
                zq = f"perm=0&r0={a.ranks // 2}&c0={a.ranks // 4}&span={span}"
                with Peak(up.pid) as zk:
                    r["zoom"], code, body = get(f"{page}/matrix.png?{zq}")
                if code != 200 or not body.startswith(b"\x89PNG"):
                    print(f"zoom answered {code}", file=sys.stderr)
                    rc = 1
                if i == 0:
                    (work / "zoom.png").write_bytes(body)
                r["zoom_growth"] = zk.peak - zk.before
                r["hover"], code, body = get(
                    f"{http}/api/runs/{run_id}/linktest/pair?{zq}&from={a.ranks // 2 + 3}&to={a.ranks // 4 + 5}")
                if code != 200:
                    print(f"hover answered {code}: {body[:200]!r}", file=sys.stderr)
                    rc = 1
            r["rss_end"] = rss_mb(up.pid)
            rows.append(r)
            print(f"rep {i + 1}: page {r['page'] * 1e3:.1f} ms (again {r['page2'] * 1e3:.1f} ms)"
                  + ("" if a.no_matrix else
                     f"; ?matrix=1 {r['matrix']:.2f} s, {r['passes']} passes, RSS {r['before']:.0f} → "
                     f"peak {r['peak']:.0f} MB (+{r['peak'] - r['before']:.0f}), again {r['matrix2'] * 1e3:.1f} ms; "
                     f"zoom {r['zoom'] * 1e3:.0f} ms (+{r['zoom_growth']:.0f} MB), hover {r['hover'] * 1e3:.1f} ms"),
                  flush=True)
        med = lambda k: statistics.median(x[k] for x in rows)  # noqa: E731
        print(f"\n{a.ranks} ranks, medians of {a.repeat} (coordinator restarted before each):\n")
        print("| request | median | max |\n|---|---|---|")
        def line(name, k, scale=1e3, unit="ms"):
            print(f"| {name} | {med(k) * scale:.1f} {unit} | {max(x[k] for x in rows) * scale:.1f} {unit} |")
        line("`/runs/ID/linktest`, first (cold)", "page")
        line("`/runs/ID/linktest` again", "page2")
        if not a.no_matrix:
            line("`?matrix=1`, first (cold)", "matrix", 1, "s")
            line("`?matrix=1` again", "matrix2")
            line("`matrix.png`", "png")
            line(f"zoomed window image (span {max(a.ranks // 8, 32)}), first", "zoom")
            line("its hover", "hover")
            growth = [x["peak"] - x["before"] for x in rows]
            print(f"\n?matrix=1: resident memory before {med('before'):.0f} MB, peak {med('peak'):.0f} MB, "
                  f"growth median {statistics.median(growth):.0f} MB (max {max(growth):.0f}); "
                  f"{rows[0]['passes']} passes; zoom growth median "
                  f"{statistics.median(x['zoom_growth'] for x in rows):.0f} MB; page {rows[0]['page_bytes']:,} B, "
                  f"pair view {rows[0]['matrix_bytes']:,} B")
            if statistics.median(growth) > a.max_growth_mb:
                print(f"growth above {a.max_growth_mb:.0f} MB", file=sys.stderr)
                rc = 1
        if med("page") * 1e3 > a.max_page_ms:
            print(f"the page's cold load is above {a.max_page_ms:.0f} ms", file=sys.stderr)
            rc = 1
    finally:
        if a.keep:
            halt(procs)
        else:
            stop(procs, work)
    sys.exit(rc)


if __name__ == "__main__":
    main()
