"""Spark users read the lake: pyspark (local[2], Java 17) over the hive-partitioned
tables that `benchlake up --demo` writes, with the same rows DuckDB sees."""
import shutil
import subprocess

import duckdb
import pytest

from conftest import BIN

pyspark = pytest.importorskip("pyspark", reason="pyspark is installed by scripts/test.sh")


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory):
    d = tmp_path_factory.mktemp("spark") / "data"
    r = subprocess.run([BIN, "up", "--demo", "--data", str(d)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return d / "lake"


@pytest.fixture(scope="module")
def spark():
    if shutil.which("java") is None:
        pytest.fail("java is missing: scripts/test.sh installs openjdk-17-jre-headless")
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("benchlake-e2e")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
    yield s
    s.stop()


def test_spark_reads_hive_partitioned_tables(demo_lake, spark):
    for table in ["runs", "io_results", "replays", "node_facts"]:
        path = str(demo_lake / "tables" / table)
        df = spark.read.parquet(path)
        # Spark discovers the hive partition columns itself.
        assert "date" in df.columns and "run_id" in df.columns, df.columns
        n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{path}/**/*.parquet', hive_partitioning=true)").fetchall()[0][0]
        assert df.count() == n > 0, table

    # Same values, not only the same counts: the predicted times of the sweep.
    sp = sorted(round(r["predicted_time_s"], 12) for r in
                spark.read.parquet(str(demo_lake / "tables" / "replays")).select("predicted_time_s").collect())
    dk = sorted(round(r[0], 12) for r in duckdb.sql(
        f"SELECT predicted_time_s FROM read_parquet('{demo_lake}/tables/replays/**/*.parquet', hive_partitioning=true)").fetchall())
    assert sp == dk and len(sp) == 6

    # A query a user would run: pio bandwidth per run and access.
    rows = (spark.read.parquet(str(demo_lake / "tables" / "io_results"))
            .groupBy("run_id", "operation").agg({"bw_mib_s": "max"}).collect())
    assert {r["operation"] for r in rows} == {"write", "read"}
    assert all(r["max(bw_mib_s)"] > 0 for r in rows)
