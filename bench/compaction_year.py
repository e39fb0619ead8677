#!/usr/bin/env python3
"""A year of nightly offline LinkTest ingests, before and after compaction
(issue 40 items 3 and 6): files and bytes per table, the documented DuckDB
queries cold and warm, `benchlake tables compact` itself, and the same
answers after.

    python3 bench/compaction_year.py [--nights 365] [--ranks 1024] [--bin target/release/benchlake] [--old-layout]

Each night is a synthetic LinkTest file (`probe linktest`, seed = night)
ingested with `ingest linktest --run-id --date` into one local lake. The
year is measured as it landed (one file per table per night), then
compacted once (`tables compact`), then measured again; a second
`tables compact` must find nothing to do. With `--old-layout` the landed
year is first rewritten to the layout before 2026-12 (pyarrow: no `date`
column, `date=…/run_id=…/` directories) and moved back with `tables migrate`,
timed, before anything is measured. Exit 1 when an answer changed or
a small table keeps more than 24 files.
"""
import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent


def crockford(n, width):
    digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    s = ""
    for _ in range(width):
        s = digits[n % 32] + s
        n //= 32
    return s


def run_id(i):
    return "01JYEAR" + crockford(i, 19)


def tables(lake):
    out = {}
    for t in sorted((lake / "tables").iterdir()):
        files = list(t.rglob("*.parquet"))
        out[t.name] = (len(files), sum(f.stat().st_size for f in files))
    return out


def queries(lake, last):
    t = f"read_parquet('{lake}/tables/linktest_timings/*/*/*.parquet', hive_partitioning=true)"
    s = f"read_parquet('{lake}/tables/linktest_host_summary/*/*/*.parquet', hive_partitioning=true)"
    return {
        "trend over the summary, every night":
            f"SELECT date, median(median_time_s), sum(slow_pairs) FROM {s} GROUP BY date ORDER BY date",
        "slowest 10 pairs of last night (literal date)":
            f"SELECT run_id, from_rank, to_rank, time_s FROM {t} WHERE date = '{last}' "
            "ORDER BY time_s DESC, from_rank, to_rank LIMIT 10",
        "one node's history from the summary":
            f"SELECT date, run_id, pair_class, pairs, median_time_s FROM {s} WHERE host = 'node0001' ORDER BY ALL",
        "rows per night of the pairs":
            f"SELECT date, count(*) FROM {t} GROUP BY date ORDER BY date",
    }


def measure(lake, last):
    out = {}
    for name, q in queries(lake, last).items():
        t0 = time.perf_counter()
        first = duckdb.connect().sql(q).fetchall()
        cold = time.perf_counter() - t0
        con = duckdb.connect()
        con.sql(q).fetchall()
        warm = []
        for _ in range(3):
            t0 = time.perf_counter()
            con.sql(q).fetchall()
            warm.append(time.perf_counter() - t0)
        out[name] = (cold, statistics.median(warm), first)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--bin", default=str(ROOT / "target/release/benchlake"))
    ap.add_argument("--keep", help="keep the lake in this directory")
    ap.add_argument("--old-layout", action="store_true", help="time `tables migrate` of the year first")
    a = ap.parse_args()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bl-cyear-"))
    lake = work / "lake"
    src = work / "lt.sion"
    start = datetime.date(2026, 1, 1)
    nights = [(start + datetime.timedelta(days=i)).isoformat() for i in range(a.nights)]
    t0 = time.monotonic()
    ingest = []
    for i, night in enumerate(nights):
        subprocess.run([a.bin, "probe", "linktest", "--ranks", str(a.ranks), "--seed", str(i), "--out", str(src)],
                       check=True, capture_output=True)
        t1 = time.perf_counter()
        subprocess.run([a.bin, "ingest", "linktest", str(src), "--out", str(lake), "--run-id", run_id(i),
                        "--date", night], check=True, capture_output=True)
        ingest.append(time.perf_counter() - t1)
    print(f"{a.nights} nights of {a.ranks} ranks ingested in {time.monotonic() - t0:.0f} s "
          f"(ingest median {statistics.median(ingest):.2f} s)")
    if a.old_layout:
        import pyarrow.parquet as pq
        n = 0
        for f in sorted((lake / "tables").rglob("part-*.parquet")):
            table = f.relative_to(lake / "tables").parts[0]
            name = f.stem[len("part-"):]
            date, run, job = name[:10], name[11:37], name[38:]
            d = lake / "tables" / table / f"date={date}" / f"run_id={run}"
            d.mkdir(parents=True, exist_ok=True)
            pq.write_table(pq.read_table(f).drop_columns(["date"]), d / f"part-{job}.parquet",
                           compression="zstd")
            f.unlink()
            n += 1
        for d in sorted((lake / "tables").rglob("month=*"), reverse=True):
            d.rmdir()
        for d in sorted((lake / "tables").rglob("year=*"), reverse=True):
            d.rmdir()
        t1 = time.perf_counter()
        r = subprocess.run([a.bin, "tables", "migrate", "--lake", str(lake)], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr)
        print(f"tables migrate: {n} files of the old layout in {time.perf_counter() - t1:.1f} s ({r.stdout.strip()})")
    before_t = tables(lake)
    before = measure(lake, nights[-1])

    t1 = time.perf_counter()
    r = subprocess.run([a.bin, "tables", "compact", "--lake", str(lake)], capture_output=True, text=True)
    compact_s = time.perf_counter() - t1
    if r.returncode != 0:
        sys.exit(r.stderr)
    summary = r.stdout.strip().splitlines()[-1]
    t1 = time.perf_counter()
    again = subprocess.run([a.bin, "tables", "compact", "--lake", str(lake)], capture_output=True, text=True)
    again_s = time.perf_counter() - t1
    after_t = tables(lake)
    after = measure(lake, nights[-1])

    print(f"\ntables compact: {compact_s:.1f} s ({summary}); again: {again_s:.2f} s ({again.stdout.strip()})\n")
    print("| table | files before | MB before | files after | MB after |")
    print("|---|---:|---:|---:|---:|")
    for t in before_t:
        (fb, bb), (fa, ba) = before_t[t], after_t.get(t, (0, 0))
        print(f"| `{t}` | {fb:,} | {bb / 1e6:.1f} | {fa:,} | {ba / 1e6:.1f} |")
    print("\n| query (DuckDB) | before: cold / warm | after: cold / warm |")
    print("|---|---|---|")
    bad = []
    for name in before:
        cb, wb, rb = before[name]
        ca, wa, ra = after[name]
        if rb != ra:
            bad.append(name)
        print(f"| {name} | {cb:.2f} s / {wb:.3f} s | {ca:.2f} s / {wa:.3f} s |")
    small = {t: n for t, (n, b) in after_t.items() if t != "linktest_timings" and n > 24}
    if bad:
        print(f"answers changed: {bad}")
    if small:
        print(f"small tables over 24 files: {small}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if bad or small or "0 months merged" not in again.stdout else 0)


if __name__ == "__main__":
    main()
