"""Spark users read the lake: pyspark (local[2], Java 17) over the hive-partitioned
tables that `benchlake up --demo` writes, with the same rows DuckDB sees.

Spark runs in a separate interpreter: the test session has grpc loaded, and grpc's
fork handlers can kill the JVM launcher that pyspark forks (JAVA_GATEWAY_EXITED)."""
import json
import shutil
import subprocess
import sys

import duckdb
import pytest

from conftest import BIN, require_under_ci

SPARK = r'''
import json, sys
from pyspark.sql import SparkSession
lake = sys.argv[1]
s = (SparkSession.builder.master("local[2]").appName("benchlake-e2e")
     .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
     .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
out = {"tables": {}}
for t in ["runs", "io_results", "replays", "node_facts"]:
    df = s.read.parquet(f"{lake}/tables/{t}")
    out["tables"][t] = {"columns": df.columns, "count": df.count()}
out["predicted"] = [r["predicted_time_s"] for r in s.read.parquet(f"{lake}/tables/replays").select("predicted_time_s").collect()]
rows = s.read.parquet(f"{lake}/tables/io_results").groupBy("run_id", "operation").agg({"bw_mib_s": "max"}).collect()
out["io"] = [[r["operation"], r["max(bw_mib_s)"]] for r in rows]
s.stop()
print("SPARK_RESULT " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory):
    d = tmp_path_factory.mktemp("spark") / "data"
    r = subprocess.run([BIN, "up", "--demo", "--data", str(d)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return d / "lake"


def test_spark_reads_hive_partitioned_tables(demo_lake, tmp_path):
    import importlib.util
    if not require_under_ci(importlib.util.find_spec("pyspark") is not None,
                            "pyspark is missing: scripts/test.sh installs it"):
        pytest.skip("pyspark is installed by scripts/test.sh")
    if shutil.which("java") is None:
        pytest.fail("java is missing: scripts/test.sh installs openjdk-17-jre-headless")
    script = tmp_path / "spark_read.py"
    script.write_text(SPARK)
    r = subprocess.run([sys.executable, str(script), str(demo_lake)], capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(l for l in r.stdout.splitlines() if l.startswith("SPARK_RESULT "))
    out = json.loads(line[len("SPARK_RESULT "):])

    for table, got in out["tables"].items():
        # Spark discovers the hive partition columns (year, month) itself;
        # date and run_id are columns of every file.
        assert {"date", "run_id", "year", "month"} <= set(got["columns"]), got["columns"]
        n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{demo_lake}/tables/{table}/**/*.parquet', "
                       "hive_partitioning=true)").fetchall()[0][0]
        assert got["count"] == n > 0, table

    # Same values, not only the same counts: the predicted times of the sweep.
    sp = sorted(round(x, 12) for x in out["predicted"])
    dk = sorted(round(r[0], 12) for r in duckdb.sql(
        f"SELECT predicted_time_s FROM read_parquet('{demo_lake}/tables/replays/**/*.parquet', hive_partitioning=true)").fetchall())
    # The sweep's 6 points, plus the two default replays (Bandela and Dimemas)
    # of the traced demo run when the machine has MPI (the demo skips that run
    # otherwise).
    traced = require_under_ci((demo_lake / "tables" / "trace_comparison").exists(),
                              "the demo ran no traced run (MPI or the tracer library missing)")
    assert sp == dk and len(sp) == 6 + 2 * traced

    # A query a user would run: pio bandwidth per run and operation.
    assert {op for op, _ in out["io"]} == {"write", "read"}
    assert all(bw > 0 for _, bw in out["io"])
