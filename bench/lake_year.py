#!/usr/bin/env python3
"""A year of nightly runs in the lake, and what its readers meet (issue 40 item 6).

Builds the issue's scenario through a running coordinator, each service a
process of its own (coordinator with SQLite state and a local lake, one agent,
one worker): three nightly schedules, backfilled over --nights nights,

- `synth-hosts`: the facts of --nodes nodes (hostinfo documents, one per node,
  as the built-in `hostinfo` benchmark leaves them on a cluster),
- `synth-linktest`: a synthetic LinkTest of --ranks ranks
  (`benchlake probe linktest`, 48 ranks per host as on the README's layout),
- `pio`: the built-in pio entry, one process, 4 MiB,

then, unless --big-ranks 0, one LinkTest night of --big-ranks ranks submitted
on top (the issue's 6,000-rank night). Then it measures, and prints as
Markdown tables:

- files and bytes per table, and the objects and bytes under `raw/`;
- DuckDB (the Python module) times of the everyday queries of docs/linktest.md,
  "Last night and one node's history" — the trend over the summary, which hosts
  were slow last night, last night's slowest pairs, one node's history (summary
  and pairs) — cold (a new process each, first run) and warm (the median of 3
  more runs in that process);
- a Flight DoGet (pyarrow.flight) of the last LinkTest night's pairs: rows,
  seconds, the coordinator's resident-memory growth;
- every dashboard page (GET through the coordinator's HTTP server): cold (the
  first request after the coordinator was restarted) and warm (the median of 5);
- the coordinator's resident memory after the year.

    python3 bench/lake_year.py [--bin PATH] [--nights 365] [--nodes 600]
        [--ranks 1024] [--big-ranks 6000] [--keep]

Exit status 1 when a target of the issue is missed: every page <= 300 ms cold,
trend and node-history queries <= 1 s, last night's slowest pairs <= 1 s,
files per small table per year <= 24 (scaled to --nights), coordinator
<= 500 MB. It needs duckdb and pyarrow (the test venv has both).

It is also the synthetic-hosts generator of its own catalog:
`lake_year.py --write-hosts N SEED DIR` writes N hostinfo documents to DIR.
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coordinator_memory import ROOT, free_port, rss_mb  # noqa: E402

FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
RANKS_PER_HOST = 48

CATALOG = """\
[[benchmark]]
name = "synth-linktest"
kind = "noop"
description = "synthetic LinkTest (benchlake probe linktest)"
command = ["{{self_exe}}", "probe", "linktest", "--ranks", "{{ranks}}", "--ranks-per-host",
           "{{ranks_per_host}}", "--seed", "{{seed}}", "--out", "{{out_dir}}/pingpong_results_bin.sion"]
launchers = ["local"]
timeout_s = 3600
[[benchmark.output]]
file = "pingpong_results_bin*.sion"
format = "linktest"
required = true
[[benchmark.param]]
name = "ranks"
type = "int"
default = "1024"
min = 2
max = 100000
[[benchmark.param]]
name = "ranks_per_host"
type = "int"
default = "48"
min = 1
max = 1024
[[benchmark.param]]
name = "seed"
type = "int"
default = "0"
min = 0
max = 1000000

[[benchmark]]
name = "synth-hosts"
kind = "noop"
description = "the facts of many nodes (hostinfo documents)"
command = ["{python}", "{script}", "--write-hosts", "{{nodes}}", "{{seed}}", "{{out_dir}}"]
launchers = ["local"]
timeout_s = 600
[[benchmark.output]]
file = "host*.json"
format = "hostinfo"
required = true
[[benchmark.param]]
name = "nodes"
type = "int"
default = "600"
min = 1
max = 100000
[[benchmark.param]]
name = "seed"
type = "int"
default = "0"
min = 0
max = 1000000

{pio}
"""


def write_hosts(n, seed, out):
    """N hostinfo documents (`benchlake probe host`'s format, version 1)."""
    rnd = random.Random(seed)
    now = int(time.time() * 1000)
    for i in range(1, n + 1):
        host = f"node{i:04d}"
        doc = {"version": 1, "hostname": host, "kernel_release": "5.14.0-427.el9.x86_64",
               "kernel_version": "#1 SMP PREEMPT_DYNAMIC", "cpu_model": "AMD EPYC 7742 64-Core Processor",
               "cores": 128, "memory_bytes": 256 << 30, "load_1m": round(rnd.uniform(0, 2), 2),
               "uptime_s": 86400.0 * rnd.uniform(1, 90), "collected_at_ms": now, "node": host}
        (Path(out) / f"host-{host}.json").write_text(json.dumps(doc))


def pio_entry():
    """The built-in catalog's `pio` entry, as the agent ships it."""
    text = (ROOT / "agent" / "src" / "builtin.toml").read_text()
    blocks = text.split("[[benchmark]]\n")
    for b in blocks:
        if re.search(r'^name = "pio"$', b, re.M):
            return "[[benchmark]]\n" + b
    sys.exit("agent/src/builtin.toml has no pio entry")


def scheds_of(a):
    """The year's three nightly schedules: (name, benchmark, cron, params)."""
    return [("hosts", "synth-hosts", "0 1 * * *", [f"nodes={a.nodes}"]),
            ("linktest", "synth-linktest", "0 2 * * *", [f"ranks={a.ranks}", f"ranks_per_host={RANKS_PER_HOST}"]),
            ("pio", "pio", "0 3 * * *", ["block_size=4MiB", "fsync=false"])]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


def tree(root):
    """{name: (files, bytes)} of the directories directly under `root`."""
    out = {}
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        files = [p for p in d.rglob("*") if p.is_file()]
        out[d.name] = (len(files), sum(p.stat().st_size for p in files))
    return out


QUERY_RUNNER = r"""
import duckdb, json, sys, time
qs = json.loads(sys.argv[1])
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
out = {}
for name, sql in qs:
    t = time.monotonic(); rows = con.execute(sql).fetchall(); cold = time.monotonic() - t
    warm = []
    for _ in range(3):
        t = time.monotonic(); con.execute(sql).fetchall(); warm.append(time.monotonic() - t)
    warm.sort()
    out[name] = {"cold": cold, "warm": warm[1], "rows": len(rows), "first": repr(rows[0]) if rows else ""}
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-hosts", nargs=3, metavar=("N", "SEED", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "benchlake"))
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--nodes", type=int, default=600)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--big-ranks", type=int, default=6000, help="one extra LinkTest night of this size (0: none)")
    ap.add_argument("--worker-concurrency", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=6 * 3600)
    ap.add_argument("--compact-every-s", type=int, default=5,
                    help="the coordinator's plan of merges (a year lands in minutes here, not in a year)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (printed)")
    ap.add_argument("--measure", metavar="DIR",
                    help="measure the year a run with --keep built in DIR again (no build; kept)")
    a = ap.parse_args()
    if a.write_hosts:
        n, seed, out = a.write_hosts
        write_hosts(int(n), int(seed), out)
        return
    if not Path(a.bin).is_file():
        sys.exit(f"{a.bin} not found: build it (cargo build --release -p benchlake) or pass --bin")
    import pyarrow.flight as flight

    if a.measure:
        work = Path(a.measure)
        a.keep = True
        if not (work / "state.db").is_file():
            sys.exit(f"{work} holds no year (state.db) to measure")
    else:
        work = Path(tempfile.mkdtemp(prefix="bl-year-"))
    (work / "cat.toml").write_text(CATALOG.format(python=sys.executable, script=Path(__file__).resolve(),
                                                  pio=pio_entry()))
    port, hport = free_port(), free_port()
    addr, http = f"127.0.0.1:{port}", f"http://127.0.0.1:{hport}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env["BENCHLAKE_COORDINATOR"] = addr
    lake = work / "lake"
    procs, logs = {}, []

    def start(name, args):
        log = open(work / f"{name}.log", "a")
        logs.append(log)
        procs[name] = subprocess.Popen([a.bin, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
        return procs[name]

    def cli(*args):
        p = subprocess.run([a.bin, *args], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"benchlake {' '.join(args)} failed: {p.stderr.strip()}")
        return p.stdout

    def start_coordinator():
        c = start("coordinator", ["coordinator", "--listen", addr, "--state", str(work / "state.db"),
                                  "--lake", str(lake), "--http-addr", f"127.0.0.1:{hport}",
                                  "--compact-every-s", str(a.compact_every_s)])
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{http}/readyz", timeout=2).read()
                return c
            except OSError:
                if c.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the coordinator did not start (log: {work / 'coordinator.log'})")
                time.sleep(0.2)

    def runs_of(bench):
        """The runs of `bench`, each with its night (`date`, UTC, from when it was scheduled for)."""
        out = json.loads(cli("run", "list", "--benchmark", bench, "--limit", str(a.nights + 10), "--json"))
        for r in out:
            ms = r.get("scheduled_for_ms") or r.get("submitted_at_ms") or 0
            r["date"] = time.strftime("%Y-%m-%d", time.gmtime(ms / 1000))
        return out

    missed = []
    try:
        coord = start_coordinator()
        start("agent", ["agent", "--name", "year-agent", "--catalog", str(work / "cat.toml"),
                        "--work-dir", str(work / "agent"), "--slots", "2", "--run-as", "root"])
        start("worker", ["worker", "--lake", str(lake), "--scratch", str(work / "scratch"),
                         "--concurrency", str(a.worker_concurrency), "--http-addr", "127.0.0.1:0"])
        deadline = time.monotonic() + 60
        while "ONLINE" not in cli("agents", "list"):
            if time.monotonic() > deadline:
                sys.exit("the agent did not register")
            time.sleep(0.5)

        # The year: three nightly schedules, backfilled.
        t0 = time.monotonic()
        to = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400 * 2))
        if a.measure:
            a.nights = len([r for r in runs_of("synth-linktest") if r.get("schedule_id")])
        scheds = [] if a.measure else scheds_of(a)
        frm = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400 * (2 + a.nights)))
        last = []
        for name, bench, cron, params in scheds:
            cli("schedule", "create", name, bench, "--cron", cron, *[x for p in params for x in ("-p", p)])
            out = json.loads(cli("schedule", "backfill", name, "--from", frm, "--to", to,
                                 "--max-runs", str(a.nights), "--json"))
            last.append(out[-1]["run_id"])
        if scheds:
            print(f"backfill: 3 schedules x {a.nights} nights ({frm} .. {to}) created in "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
        deadline = time.monotonic() + a.timeout_s
        while last:
            if time.monotonic() > deadline:
                sys.exit("timed out before the year had landed")
            last = [r for r in last
                    if json.loads(cli("run", "show", r, "--json"))["run"]["state"] not in FINAL]
            time.sleep(2)
        t_year = time.monotonic() - t0
        states = {}
        for bench in ("synth-hosts", "synth-linktest", "pio"):
            for r in runs_of(bench):
                states[r["state"]] = states.get(r["state"], 0) + 1
        if scheds:
            print(f"the year landed in {t_year:.0f} s ({3 * a.nights / t_year:.2f} runs/s); runs by state: {states}",
                  flush=True)
        else:
            print(f"measuring the year in {work}: {a.nights} nights; runs by state: {states}", flush=True)
        if set(states) - {"SUCCEEDED"}:
            missed.append(f"runs that did not succeed: {states}")

        # Compaction settles: the table files stop changing for three plans.
        t1, stable, before = time.monotonic(), 0, None
        while stable < 3 and time.monotonic() - t1 < a.timeout_s:
            time.sleep(a.compact_every_s + 1)
            now = {t: n for t, (n, _) in tree(lake / "tables").items()}
            stable = stable + 1 if now == before else 0
            before = now
        print(f"compaction settled {time.monotonic() - t1:.0f} s after the year landed", flush=True)

        year_rss = rss_mb(coord.pid)

        # Files and bytes.
        tables, raw = tree(lake / "tables"), tree(lake / "raw")
        print(f"\n| table | files | files a year | MB | median KB per file |\n|---|---:|---:|---:|---:|")
        # The 24 files a year, for --nights nights: compaction keeps a
        # file a month plus fewer than 8 recent ones, so a shorter history is
        # held to its months (+ 1 for a partial one) plus 8, not to a share of 24.
        small_limit = max(24 * a.nights / 365, a.nights / 30 + 1 + 8) if a.nights < 365 else 24
        for t, (n, b) in tables.items():
            sizes = [p.stat().st_size for p in (lake / "tables" / t).rglob("*.parquet")]
            print(f"| {t} | {n:,} | {n * 365 / a.nights:,.0f} | {b / 1e6:.1f} | {statistics.median(sizes) / 1e3 if sizes else 0:.1f} |")
            if t not in ("linktest_timings", "linktest_slow_links") and n > small_limit:
                missed.append(f"{t}: {n} files in {a.nights} nights, {n * 365 / a.nights:.0f} a year (target <= 24)")
        nraw = sum(n for n, _ in raw.values())
        braw = sum(b for _, b in raw.values())
        raw_sizes = [p.stat().st_size for p in (lake / "raw").rglob("*") if p.is_file()]
        print(f"\nraw/: {nraw:,} objects, {braw / 1e6:.1f} MB (median {statistics.median(raw_sizes) if raw_sizes else 0:.0f} B) "
              f"over {len(raw)} runs; tables/: {sum(n for n, _ in tables.values()):,} files, "
              f"{sum(b for _, b in tables.values()) / 1e6:.1f} MB")

        # DuckDB: the everyday queries of docs/linktest.md.
        lt = runs_of("synth-linktest")
        nights = sorted({r["date"] for r in lt if r.get("schedule_id")})
        last_night = nights[-1] if nights else to
        L = str(lake)
        pairs = f"read_parquet('{L}/tables/linktest_timings/*/*/*.parquet', hive_partitioning=true, union_by_name=true)"
        summ = f"read_parquet('{L}/tables/linktest_host_summary/*/*/*.parquet', hive_partitioning=true)"
        queries = [
            ("trend (summary, every night)", f"SELECT date, median(median_time_s), max(max_time_s), sum(slow_pairs) FROM {summ} GROUP BY date ORDER BY date"),
            ("slow hosts last night (summary)", f"SELECT date, run_id, host, slow_pairs, max_time_s FROM {summ} WHERE date = (SELECT max(date) FROM {summ}) ORDER BY slow_pairs DESC, max_time_s DESC LIMIT 10"),
            ("slowest 10 pairs last night", f"SELECT run_id, from_rank, from_host, to_rank, to_host, time_s FROM {pairs} WHERE date = '{last_night}' ORDER BY time_s DESC LIMIT 10"),
            ("node history (summary)", f"SELECT date, run_id, pair_class, pairs, median_time_s, max_time_s, slow_pairs FROM {summ} WHERE host = 'node0001' ORDER BY date, run_id, pair_class"),
            ("node history (pairs, year)", f"SELECT date, max(time_s), count(*) FROM {pairs} WHERE from_host = 'node0001' OR to_host = 'node0001' GROUP BY date ORDER BY date"),
        ]
        # Cold: every query first in a process of its own.
        res = {}
        for name, sql in queries:
            p = subprocess.run([sys.executable, "-c", QUERY_RUNNER, json.dumps([[name, sql]])],
                               capture_output=True, text=True, timeout=3600)
            if p.returncode != 0:
                missed.append(f"query '{name}' failed: {p.stderr.strip()[-300:]}")
                continue
            res.update(json.loads(p.stdout.strip().splitlines()[-1]))
        print("\n| DuckDB query | rows | cold s | warm s |\n|---|---:|---:|---:|")
        for name, _ in queries:
            if name in res:
                r = res[name]
                print(f"| {name} | {r['rows']:,} | {r['cold']:.2f} | {r['warm']:.3f} |")
                if r["cold"] > 1.0 and name != "node history (pairs, year)":
                    missed.append(f"query '{name}': {r['cold']:.2f} s cold (target <= 1 s)")

        big = None
        earlier = [r for r in lt if not r.get("schedule_id") and r["state"] == "SUCCEEDED"]
        if a.measure and a.big_ranks and earlier:
            big = (earlier[0]["run_id"], float("nan"))
            print(f"the {a.big_ranks}-rank night of an earlier measure: {big[0]}", flush=True)
        elif a.big_ranks:
            t = time.monotonic()
            out = cli("run", "submit", "synth-linktest", "-p", f"ranks={a.big_ranks}",
                      "-p", f"ranks_per_host={RANKS_PER_HOST}", "--watch")
            ids = re.findall(r"\b[0-9A-HJKMNP-TV-Z]{26}\b", out)
            big = (ids[0], time.monotonic() - t)
            print(f"{a.big_ranks}-rank night {big[0]}: submitted to landed in {big[1]:.1f} s", flush=True)
        if big:
            # The big night's slowest pairs: the same query, its own date.
            sql = (f"SELECT run_id, from_rank, from_host, to_rank, to_host, time_s FROM {pairs} "
                   f"WHERE date = '{time.strftime('%Y-%m-%d', time.gmtime())}' ORDER BY time_s DESC LIMIT 10")
            p = subprocess.run([sys.executable, "-c", QUERY_RUNNER, json.dumps([["big", sql]])],
                               capture_output=True, text=True, timeout=3600)
            if p.returncode != 0:
                missed.append(f"the {a.big_ranks}-rank night's query failed: {p.stderr.strip()[-300:]}")
            else:
                r = json.loads(p.stdout.strip().splitlines()[-1])["big"]
                print(f"slowest 10 pairs of the {a.big_ranks}-rank night: {r['cold']:.2f} s cold, "
                      f"{r['warm']:.3f} s warm")
                if r["cold"] > 1.0:
                    missed.append(f"the {a.big_ranks}-rank night's slowest pairs: {r['cold']:.2f} s cold (target <= 1 s)")

        # Flight DoGet of the last LinkTest night (and of the big one).
        print("\n| Flight DoGet | rows | s | coordinator RSS growth MB |\n|---|---:|---:|---:|")
        client = flight.connect(f"grpc://{addr}")
        newest = max((r for r in lt if r.get("schedule_id")), key=lambda r: (r["date"], r["run_id"]))
        for label, run_id in [(f"{a.ranks}-rank night", newest["run_id"])] + (
                [(f"{a.big_ranks}-rank night", big[0])] if big else []):
            before, peak, done = rss_mb(coord.pid), [0.0], threading.Event()

            def sample():
                while not done.is_set():
                    peak[0] = max(peak[0], rss_mb(coord.pid))
                    time.sleep(0.01)

            th = threading.Thread(target=sample, daemon=True)
            th.start()
            t = time.monotonic()
            d = flight.FlightDescriptor.for_command(json.dumps({"table": "linktest_timings", "run_id": run_id}))
            rows = sum(c.data.num_rows for c in client.do_get(client.get_flight_info(d).endpoints[0].ticket))
            secs = time.monotonic() - t
            done.set()
            th.join()
            print(f"| {label} | {rows:,} | {secs:.2f} | {max(peak[0] - before, 0):.0f} |")

        # Dashboard pages: cold after a restart of the coordinator, then warm.
        procs["coordinator"].terminate()
        procs["coordinator"].wait(timeout=60)
        coord = start_coordinator()
        # The verdict index reads the year's checks and node_health files at
        # start; until then node pages say so. Its time is a figure of its own.
        t = time.monotonic()
        load_peak = rss_mb(coord.pid)
        while True:
            load_peak = max(load_peak, rss_mb(coord.pid))
            try:
                with urllib.request.urlopen(http + "/nodes/node0001", timeout=600) as r:
                    if b"verdicts-loading" not in r.read():
                        break
            except urllib.error.HTTPError:
                pass  # before 2026-12-07 a node page was a 404 until then
            if time.monotonic() - t > 1800:
                missed.append("the verdict index did not load within 30 min of a restart")
                break
            time.sleep(0.2)
        print(f"\nverdict index read after a restart in {time.monotonic() - t:.1f} s "
              f"(coordinator RSS peak while reading: {load_peak:.0f} MB)", flush=True)
        host_run = runs_of("synth-hosts")[0]["run_id"]
        pio_run = runs_of("pio")[0]["run_id"]
        pages = ["/", "/runs", f"/runs/{newest['run_id']}", f"/api/runs/{newest['run_id']}",
                 f"/runs/{newest['run_id']}/linktest", f"/runs/{host_run}", f"/runs/{pio_run}",
                 "/nodes/node0001", "/io", "/silences", "/audit"]
        if big:
            pages.append(f"/runs/{big[0]}/linktest")
        print("\n| page | cold ms | warm ms (median of 5) |\n|---|---:|---:|")
        for pg in pages:
            times = []
            for _ in range(6):
                t = time.monotonic()
                try:
                    with urllib.request.urlopen(http + pg, timeout=600) as r:
                        r.read()
                except urllib.error.HTTPError as e:
                    missed.append(f"page {pg}: HTTP {e.code}")
                times.append((time.monotonic() - t) * 1000)
            label = pg.replace(newest["run_id"], "LT").replace(host_run, "HOSTS").replace(pio_run, "PIO")
            if big:
                label = label.replace(big[0], "BIG")
            print(f"| {label} | {times[0]:.0f} | {statistics.median(times[1:]):.1f} |")
            if times[0] > 300:
                missed.append(f"page {label}: {times[0]:.0f} ms cold (target <= 300 ms)")
        pages_rss = rss_mb(coord.pid)
        print(f"\ncoordinator RSS after the year: {year_rss:.0f} MB; after the pages (restarted): "
              f"{pages_rss:.0f} MB")
        for label, mb in (("after the year", year_rss), ("while its verdict index was read", load_peak),
                          ("after a restart and every page", pages_rss)):
            if mb > 500:
                missed.append(f"coordinator RSS {label}: {mb:.0f} MB (target <= 500 MB)")
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()
        if a.keep:
            print(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for m in missed:
        print(f"MISSED: {m}", file=sys.stderr)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
