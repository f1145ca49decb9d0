"""Spark over dsv (issue 35): the `dsv` Python data source (`dsv.spark.VersionDataSource`)
on a local[2] session whose Python workers have no store and a cache directory of their
own; partitions are dsv's shards and read the version resolved when the DataFrame is made.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Dict, Iterator

import pytest

from conftest import dsv_json, engine_tables, need, run_dsv, skip_for, write_engine_version


@pytest.fixture(scope="module")
def spark(engine_remote, tmp_path_factory) -> Iterator[object]:
    """A local[2] SparkSession with the dsv data source registered, started after the S3
    variables are in the environment (its Python workers inherit them, PYTHONPATH too) with
    a worker cache directory of its own."""
    need("pyspark")
    sql = need("pyspark.sql")
    need("pyarrow")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        skip_for("engine pyspark", "no Java here (Spark 4 needs Java 17)")
    import dsv.spark

    worker_cache = tmp_path_factory.mktemp("spark-worker-cache")
    saved = {k: os.environ.get(k) for k in ("DSV_CACHE", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ.update({"DSV_CACHE": str(worker_cache), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    try:
        session = (
            sql.SparkSession.builder.master("local[2]")
            .appName("dsv-test")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(dsv.spark.VersionDataSource)
    yield session
    session.stop()


def totals(version: int) -> Dict[str, int]:
    tables = engine_tables(version)
    return {
        "rows": sum(len(t) for t in tables.values()),
        "confirmed": int(sum(int(t["confirmed"].sum()) for t in tables.values())),
    }


def test_spark_reads_parquet_rows_of_v1_in_shards(spark, engine_remote, no_store):
    from pyspark.sql import functions as F

    df = (
        spark.read.format("dsv")
        .option("remote", engine_remote["url"])
        .option("format", "parquet")
        .option("include", "parquet/**")
        .option("numPartitions", "3")
        .load("covid@v1")
    )
    assert df.columns == ["date", "country", "confirmed"]
    assert dict(df.dtypes)["confirmed"] == "bigint"
    assert df.rdd.getNumPartitions() == 3
    want = totals(1)
    row = df.agg(F.count("*").alias("rows"), F.sum("confirmed").alias("confirmed")).collect()[0]
    assert (row["rows"], row["confirmed"]) == (want["rows"], want["confirmed"]) == (200, want["confirmed"])
    per_country = {r["country"]: r["n"] for r in df.groupBy("country").agg(F.count("*").alias("n")).collect()}
    assert per_country == {f"country-{p}": 50 for p in range(4)}

    only = (
        spark.read.format("dsv")
        .option("remote", engine_remote["url"])
        .option("format", "parquet")
        .option("include", "parquet/**")
        .option("columns", "confirmed")
        .load("covid@v1")
    )
    assert only.columns == ["confirmed"]
    assert only.agg(F.sum("confirmed")).collect()[0][0] == want["confirmed"]


def test_spark_reads_files_as_binary_rows(spark, engine_remote, no_store):
    df = spark.read.format("dsv").option("remote", engine_remote["url"]).option("include", "data/*.csv").load("covid@v1")
    assert df.schema.simpleString() == "struct<path:string,bytes:binary>"
    rows = {r["path"]: bytes(r["bytes"]) for r in df.collect()}
    expected = engine_tables(1)
    assert rows == {f"data/part-{p}.csv": expected[f"part-{p}"].to_csv(index=False).encode() for p in range(4)}


def test_spark_rejects_what_it_cannot_read(spark, engine_remote, no_store):
    from pyspark.errors import PySparkException

    reader = spark.read.format("dsv").option("remote", engine_remote["url"])
    with pytest.raises(PySparkException, match="unknown format 'csv'"):
        reader.option("format", "csv").load("covid@v1")
    with pytest.raises(PySparkException, match="UnknownRevision|no tag|v9"):
        spark.read.format("dsv").option("remote", engine_remote["url"]).load("covid@v9")


def make_moving_remote(base: Path) -> Dict[str, object]:
    """Dataset `covid` at v1 pushed to a remote of its own (the shared fixture's head must
    not move); returns the pushing store and data directory, to move the head later."""
    run_dsv("init", str(base))
    store = base / ".dsv"
    data = base / "covid"
    write_engine_version(data, 1)
    v1 = dsv_json("commit", str(data), "--dataset", "covid", "-m", "v1", "--tag", "v1", store=store)["version"]
    url = f"s3://dsv-test/spark-moving-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "covid", store=store)
    return {"url": url, "store": store, "data": data, "v1": v1}


def test_a_dataframe_reads_the_version_resolved_when_it_was_made(spark, tmp_path, no_store):
    import dsv
    from pyspark.sql import functions as F

    moving = make_moving_remote(tmp_path / "origin")
    df = (
        spark.read.format("dsv")
        .option("remote", moving["url"])
        .option("format", "parquet")
        .option("include", "parquet/**")
        .option("numPartitions", "2")
        .load("covid")
    )
    # The head moves after the DataFrame is made and before any partition is read.
    write_engine_version(moving["data"], 2)
    v2 = dsv_json("commit", str(moving["data"]), "--dataset", "covid", "-m", "v2", store=moving["store"])["version"]
    run_dsv("push", "covid", store=moving["store"])
    assert dsv.open_remote(moving["url"], cache=tmp_path / "check").version("covid").id == v2 != moving["v1"]
    want = totals(1)
    row = df.agg(F.count("*").alias("rows"), F.sum("confirmed").alias("confirmed")).collect()[0]
    assert (row["rows"], row["confirmed"]) == (want["rows"], want["confirmed"])
    # A new DataFrame resolves anew: the head is v2 now.
    again = spark.read.format("dsv").option("remote", moving["url"]).option("format", "parquet").option("include", "parquet/**").load("covid")
    assert again.count() == totals(2)["rows"]
