"""Compaction of a lake of offline ingests (`benchlake tables compact`): a
month of nightly LinkTest ingests becomes one file per table; DuckDB (the
documented queries) and Spark read the same rows before and after; a reader
globbing the lake throughout never misses a row; a coordinator's lake and an
old-layout lake are refused; `tables migrate` moves an old lake.

Compaction of a coordinator's lake: compact jobs the coordinator plans, run
by a real worker (one of them killed with SIGKILL between staging and
commit), committed through the state store; a Flight reader throughout sees
every run's rows exactly once."""
import json
import os
import subprocess
import sys
import threading
import time

import duckdb

import pyarrow.flight as flight

from conftest import BIN, Api, free_port

NIGHTS = ["2026-11-%02d" % d for d in range(1, 13)] + ["2026-12-01", "2026-12-02"]


def run_id(i):
    # ULIDs that sort by night (Crockford base32).
    return "01JC0MPACT" + "%016d" % i


def make_lake(tmp_path, ranks=16):
    lake = tmp_path / "lake"
    for i, night in enumerate(NIGHTS):
        f = tmp_path / f"n{i}" / "lt.sion"
        f.parent.mkdir(parents=True)
        subprocess.run([BIN, "probe", "linktest", "--ranks", str(ranks), "--ranks-per-host", "4", "--seed", str(i),
                        "--out", str(f)], check=True, capture_output=True, timeout=60)
        r = subprocess.run([BIN, "ingest", "linktest", str(f), "--out", str(lake), "--run-id", run_id(i),
                            "--date", night], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    return lake


def queries(lake):
    t = f"read_parquet('{lake}/tables/linktest_timings/*/*/*.parquet', hive_partitioning=true)"
    s = f"read_parquet('{lake}/tables/linktest_host_summary/*/*/*.parquet', hive_partitioning=true)"
    return {
        "per_night": f"SELECT date, run_id, count(*), sum(time_s) FROM {t} GROUP BY ALL ORDER BY ALL",
        # docs/linktest.md, "Last night and one node's history".
        "last_night": f"SELECT run_id, from_rank, to_rank, time_s FROM {t} WHERE date = '2026-12-02' "
                      "ORDER BY time_s DESC, from_rank, to_rank LIMIT 10",
        "node_history": f"SELECT date, run_id, pair_class, pairs, median_time_s FROM {s} WHERE host = 'node0001' "
                        "ORDER BY ALL",
        "ranks": f"SELECT run_id, count(*) FROM read_parquet('{lake}/tables/linktest_ranks/**/*.parquet', "
                 "hive_partitioning=true) GROUP BY ALL ORDER BY ALL",
    }


def answers(lake):
    return {k: duckdb.sql(q).fetchall() for k, q in queries(lake).items()}


def parquet_files(lake, table):
    return sorted(p.relative_to(lake / "tables" / table).as_posix() for p in (lake / "tables" / table).rglob("*.parquet"))


SPARK = r'''
import json, sys
from pyspark.sql import SparkSession
lake = sys.argv[1]
s = (SparkSession.builder.master("local[2]").appName("benchlake-compaction")
     .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
     .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
df = s.read.parquet(f"{lake}/tables/linktest_timings")
rows = df.groupBy("run_id").count().collect()
print("SPARK_RESULT " + json.dumps({r["run_id"]: r["count"] for r in rows}))
s.stop()
'''


def spark_counts(lake, tmp_path):
    script = tmp_path / "spark_counts.py"
    script.write_text(SPARK)
    r = subprocess.run([sys.executable, str(script), str(lake)], capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(l for l in r.stdout.splitlines() if l.startswith("SPARK_RESULT "))
    return json.loads(line[len("SPARK_RESULT "):])


def test_a_month_compacts_and_every_reader_reads_the_same_rows(tmp_path):
    lake = make_lake(tmp_path)
    before = answers(lake)
    assert len(before["per_night"]) == len(NIGHTS) and before["last_night"], before
    assert len(parquet_files(lake, "linktest_timings")) == len(NIGHTS)
    spark_before = spark_counts(lake, tmp_path)
    assert spark_before == {r[1]: r[2] for r in before["per_night"]}, spark_before

    # A reader globbing the table throughout.
    total = sum(r[2] for r in before["per_night"])
    seen, stop = [], threading.Event()

    def reader():
        con = duckdb.connect()
        q = f"SELECT count(*) FROM read_parquet('{lake}/tables/linktest_timings/*/*/*.parquet', hive_partitioning=true)"
        while not stop.is_set():
            try:
                seen.append(con.sql(q).fetchall()[0][0])
            except duckdb.Error as e:  # a file deleted between the glob and its read
                seen.append(str(e))

    th = threading.Thread(target=reader)
    th.start()
    try:
        dry = subprocess.run([BIN, "tables", "compact", "--lake", str(lake), "--min-files", "4", "--dry-run"],
                             capture_output=True, text=True, timeout=120)
        assert dry.returncode == 0, dry.stderr
        assert "linktest_timings 2026-11: 12 files" in dry.stdout and "nothing written" in dry.stdout, dry.stdout
        assert len(parquet_files(lake, "linktest_timings")) == len(NIGHTS)
        r = subprocess.run([BIN, "tables", "compact", "--lake", str(lake), "--min-files", "4"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        time.sleep(0.5)
    finally:
        stop.set()
        th.join()
    print(r.stdout)
    # November is one merged file; December (2 nights, under --min-files) is as it was.
    files = parquet_files(lake, "linktest_timings")
    assert len(files) == 3 and files[0].startswith("year=2026/month=11/compacted-2026-11-01-"), files
    assert all(f.startswith("year=2026/month=12/part-") for f in files[1:]), files
    assert answers(lake) == before
    assert spark_counts(lake, tmp_path) == spark_before
    # The reader never missed a row; rows seen twice (the window between a
    # merged file's upload and the deletes, docs/architecture.md) are counted.
    counts = [s for s in seen if isinstance(s, int)]
    errors = [s for s in seen if not isinstance(s, int)]
    assert counts and min(counts) >= total, (min(counts), total)
    doubled = sum(1 for c in counts if c > total)
    print(f"reader: {len(counts)} reads, {doubled} saw rows twice, {len(errors)} failed on a deleted file")
    assert len(errors) + doubled < len(seen), seen[:5]
    # Compacting again: nothing to do.
    again = subprocess.run([BIN, "tables", "compact", "--lake", str(lake), "--min-files", "4"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "0 months merged" in again.stdout, again.stdout + again.stderr


def test_a_coordinators_lake_and_an_old_lake_are_refused_and_migrate_moves_an_old_lake(tmp_path):
    import pyarrow.parquet as pq
    lake = tmp_path / "lake"
    (lake / "tables").mkdir(parents=True)
    (lake / "_coordinator.json").write_text("{}")
    r = subprocess.run([BIN, "tables", "compact", "--lake", str(lake)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "a coordinator serves this lake" in r.stderr, r.stderr
    (lake / "_coordinator.json").unlink()

    # A lake of the layout before 2026-12: no date column, date=/run_id= directories.
    new = make_lake(tmp_path / "src")
    old_rows = {}
    for f in (new / "tables").rglob("part-*.parquet"):
        table = f.relative_to(new / "tables").parts[0]
        name = f.stem[len("part-"):]
        date, run, job = name[:10], name[11:37], name[38:]
        d = lake / "tables" / table / f"date={date}" / f"run_id={run}"
        d.mkdir(parents=True, exist_ok=True)
        t = pq.read_table(f).drop_columns(["date"])
        pq.write_table(t, d / f"part-{job}.parquet")
        old_rows[table] = old_rows.get(table, 0) + t.num_rows
    r = subprocess.run([BIN, "tables", "compact", "--lake", str(lake)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "benchlake tables migrate" in r.stderr, r.stderr
    dry = subprocess.run([BIN, "tables", "migrate", "--lake", str(lake), "--dry-run"], capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0 and "would move" in dry.stdout, dry.stdout + dry.stderr
    m = subprocess.run([BIN, "tables", "migrate", "--lake", str(lake)], capture_output=True, text=True, timeout=300)
    assert m.returncode == 0 and "moved" in m.stdout, m.stdout + m.stderr
    assert not list((lake / "tables").rglob("date=*")), "old directories are gone"
    assert answers(lake) == answers(new)
    for table, n in old_rows.items():
        got = duckdb.sql(f"SELECT count(*) FROM read_parquet('{lake}/tables/{table}/**/*.parquet', "
                         "hive_partitioning=true)").fetchall()[0][0]
        assert got == n, (table, got, n)


def flight_counts(addr, table):
    client = flight.connect(f"grpc://{addr}")
    info = client.get_flight_info(flight.FlightDescriptor.for_path(table))
    t = client.do_get(info.endpoints[0].ticket).read_all()
    counts = {}
    for r in t.column("run_id").to_pylist():
        counts[r] = counts.get(r, 0) + 1
    return counts


def compacted(lake, table):
    files = parquet_files(lake, table)
    return [f for f in files if "/compacted-" in f], [f for f in files if "/part-" in f]


def test_a_coordinator_compacts_its_lake_through_workers_with_a_reader_throughout(cluster, pb, tmp_path):
    http_port = free_port()
    cluster.env.update({
        "BENCHLAKE_COMPACT_MIN_FILES": "3",
        "BENCHLAKE_COMPACT_EVERY_S": "1",
        "BENCHLAKE_HTTP_ADDR": f"127.0.0.1:{http_port}",
    })
    cluster.coordinator()
    del cluster.env["BENCHLAKE_HTTP_ADDR"]  # the coordinator's; agents and workers serve none
    cluster.agent("a1")
    cluster.agent("a2")
    # The first worker waits between staging and commit: it is killed there
    # during the first merge (a watcher kills it once a merged file is staged).
    cluster.worker("w1", extra_env={"BENCHLAKE_FAULT_COMMIT_DELAY_MS": "1500"})
    api = Api(pb, cluster.addr)
    api.wait_agents(2)
    lake = tmp_path / "lake"
    killed = []

    def killer():
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                # (a directory of the tree may go while it is walked)
                staged = [p for p in (lake / "_staging").rglob("*-compacted.parquet")]
            except OSError:
                staged = []
            if staged:
                cluster.kill9("w1")
                job, attempt = staged[0].relative_to(lake / "_staging").parts[:2]
                killed.append((job, attempt, staged[0].name, compacted(lake, "node_facts")[0]))
                cluster.worker("w2")
                return
            time.sleep(0.02)

    kt = threading.Thread(target=killer)
    kt.start()
    runs = []
    for i in range(3):
        r = api.submit("hostinfo", count=2, key=f"c{i}")
        runs.append(r.run_id)
        api.wait(r.run_id, timeout=120)
    kt.join()
    assert killed, cluster.log("w1")[-3000:]
    print("killed w1 with", killed)
    job, attempt, name, merged_then = killed[0]
    assert attempt == "1" and not merged_then, killed

    # A Flight reader throughout: every finished run has its 2 rows, never 4.
    seen, stop, errors = [], threading.Event(), []

    def reader():
        while not stop.is_set():
            try:
                seen.append(flight_counts(cluster.addr, "node_facts"))
            except flight.FlightError as e:
                errors.append(str(e))
            time.sleep(0.02)

    th = threading.Thread(target=reader)
    th.start()
    try:
        for i in range(3, 6):
            r = api.submit("hostinfo", count=2, key=f"c{i}")
            runs.append(r.run_id)
            api.wait(r.run_id, timeout=90)
        # Both merges land: one merged file per table month, no part left.
        # The `runs` part of the last run is committed by its record job,
        # after its `node_facts` rows, so its merge comes a plan later.
        deadline = time.time() + 90
        while time.time() < deadline:
            settled = [compacted(lake, t) for t in ("node_facts", "runs")]
            if all(len(m) == 1 and not p for m, p in settled):
                break
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        stop.set()
        th.join()
    merged, parts = compacted(lake, "node_facts")
    assert len(merged) == 1 and not parts, (merged, parts, cluster.log("coordinator")[-3000:])
    runs_merged, runs_parts = compacted(lake, "runs")
    assert len(runs_merged) == 1 and not runs_parts, (runs_merged, runs_parts)

    assert seen, errors[:3]
    # A run's two nodes commit one row each (two ingest jobs): a read sees 1
    # or 2 rows of a run, never more, and never fewer than an earlier read.
    last = {}
    for counts in seen:
        assert all(n in (1, 2) for n in counts.values()), counts
        assert set(counts) <= set(runs), counts
        for r, n in last.items():
            assert counts.get(r, 0) >= n, (r, n, counts)
        last = counts
    assert not errors, errors[:3]
    print(f"flight reader: {len(seen)} reads, every run once in each")

    # Flight, DuckDB's documented query and the coordinator's log agree.
    assert flight_counts(cluster.addr, "node_facts") == {r: 2 for r in runs}
    rows = duckdb.sql(f"SELECT run_id, count(*) FROM read_parquet('{lake}/tables/node_facts/*/*/*.parquet', "
                      "hive_partitioning=true) GROUP BY ALL").fetchall()
    assert dict(rows) == {r: 2 for r in runs}
    log = cluster.log("coordinator")
    assert log.count("compaction: merged file committed") >= 2, log[-3000:]
    # The killed worker's merge was done again by the other worker once its
    # lease expired, and committed once.
    assert log.count(f"merged file committed job={job}") == 1, log[-3000:]
    assert f"job done job={job} kind=compact" in cluster.log("w2"), cluster.log("w2")[-2000:]
    # The run pages still read their checks (through the merged file).
    show = cluster.cli("run", "show", runs[0])
    assert "SUCCEEDED" in show.stdout, show.stdout
    # The dashboard's run page says where a merged part's rows are now.
    import urllib.request
    page = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/runs/{runs[0]}", timeout=10).read().decode()
    assert "(merged: row groups" in page and merged[0].split("/")[-1] in page, page[-3000:]
