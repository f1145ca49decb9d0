"""Ray Data over dsv (issue 35): `dsv.ray.read_version`, whose read tasks are dsv's shards
and read the version resolved on the driver, and Ray's own readers through `dsv.fsspec`.

Ray runs on 2 CPUs, started once for the module; its worker processes have no store and a
cache directory of their own (DSV_CACHE at `ray.init`), so each opens the remote as a node
that never saw the driver's clone."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Dict, Iterator

import pytest

from conftest import dsv_json, engine_tables, need, run_dsv, write_engine_version


@pytest.fixture(scope="module")
def ray_cluster(engine_remote, tmp_path_factory) -> Iterator[object]:
    """Ray on 2 CPUs, started after the S3 variables are in the environment (its workers
    inherit them) with a worker cache directory of its own."""
    ray = need("ray")
    need("ray.data")
    worker_cache = tmp_path_factory.mktemp("ray-worker-cache")
    saved = os.environ.get("DSV_CACHE")
    os.environ["DSV_CACHE"] = str(worker_cache)
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            object_store_memory=256 << 20,
        )
    finally:
        if saved is None:
            os.environ.pop("DSV_CACHE", None)
        else:
            os.environ["DSV_CACHE"] = saved
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def frame_sum(version: int) -> Dict[str, int]:
    tables = engine_tables(version)
    return {
        "rows": sum(len(t) for t in tables.values()),
        "confirmed": int(sum(int(t["confirmed"].sum()) for t in tables.values())),
    }


def count_and_sum(ds) -> Dict[str, int]:
    """The rows and the sum of `confirmed` of a Ray dataset, in one pass."""
    from ray.data.aggregate import Count, Sum

    out = ds.aggregate(Count(), Sum("confirmed"))
    return {"rows": out["count()"], "confirmed": out["sum(confirmed)"]}


def test_read_version_parquet_reads_v1_in_shards(ray_cluster, engine_remote, no_store):
    import dsv.ray

    source = dsv.ray.VersionDatasource("covid@v1", remote=engine_remote["url"], include="parquet/**", format="parquet")
    assert source.version.id == engine_remote["v1"]
    assert source.paths == [f"parquet/part-{p}.parquet" for p in range(4)]
    # One task per dsv shard: disjoint, covering every file, capped at the file count.
    tasks = source.get_read_tasks(3)
    assert len(tasks) == 3
    files = [f for t in tasks for f in t.metadata.input_files]
    assert sorted(files) == sorted(f"dsv://covid@{engine_remote['v1']}/{p}" for p in source.paths)
    assert len(source.get_read_tasks(10)) == 4
    stored = sum(source.sizes.values())
    assert source.estimate_inmemory_data_size() >= stored // 10 and stored > 0
    projected = dsv.ray.VersionDatasource(
        "covid@v1", remote=engine_remote["url"], include="parquet/**", format="parquet", columns=["confirmed"]
    )
    assert 0 < projected.estimate_inmemory_data_size() < source.estimate_inmemory_data_size()

    ds = dsv.ray.read_version(
        "covid@v1", remote=engine_remote["url"], include="parquet/**", format="parquet", override_num_blocks=2
    )
    assert count_and_sum(ds) == frame_sum(1)
    assert frame_sum(1)["rows"] == 200
    only = dsv.ray.read_version(
        "covid@v1", remote=engine_remote["url"], include="parquet/**", format="parquet", columns=["confirmed"]
    )
    assert only.columns() == ["confirmed"]
    assert only.sum("confirmed") == frame_sum(1)["confirmed"]


def test_read_version_binary_rows_are_the_files(ray_cluster, engine_remote, no_store):
    import dsv
    import dsv.ray

    ds = dsv.ray.read_version("covid@v1", remote=engine_remote["url"], include="data/*.csv", override_num_blocks=2)
    rows = {r["path"]: r["bytes"] for r in ds.take_all()}
    assert sorted(rows) == [f"data/part-{p}.csv" for p in range(4)]
    expected = engine_tables(1)
    for p in range(4):
        assert rows[f"data/part-{p}.csv"] == expected[f"part-{p}"].to_csv(index=False).encode()
    version = dsv.open_remote(engine_remote["url"]).version("covid@v1")
    assert sum(len(b) for b in rows.values()) == sum(version.stat(p)["size"] for p in rows)


def test_read_version_images(ray_cluster, engine_remote, no_store):
    np = need("numpy")
    need("PIL.Image")
    import dsv.ray

    rows = dsv.ray.read_version("covid@v1", remote=engine_remote["url"], include="images/*.png", format="images").take_all()
    assert sorted(r["path"] for r in rows) == [f"images/{i}.png" for i in range(6)]
    for row in rows:
        i = int(Path(row["path"]).stem)
        assert row["image"].shape == (8, 8, 3)
        assert (np.asarray(row["image"])[0, 0] == [40 * i, 255 - 40 * i, 7 * i]).all()


def test_read_version_rejects_what_it_cannot_read(engine_remote, no_store):
    need("ray")
    import dsv
    import dsv.ray

    with pytest.raises(ValueError, match="unknown format 'csv'"):
        dsv.ray.read_version("covid@v1", remote=engine_remote["url"], format="csv")
    with pytest.raises(ValueError, match="has columns"):
        dsv.ray.read_version("covid@v1", remote=engine_remote["url"], columns=["confirmed"])
    with pytest.raises(dsv.UnknownRevision):
        dsv.ray.read_version("covid@v9", remote=engine_remote["url"])


def make_moving_remote(base: Path) -> Dict[str, object]:
    """Dataset `covid` at v1 pushed to a remote of its own (the shared fixture's head must
    not move); returns the pushing store and data directory, to move the head later."""
    run_dsv("init", str(base))
    store = base / ".dsv"
    data = base / "covid"
    write_engine_version(data, 1)
    v1 = dsv_json("commit", str(data), "--dataset", "covid", "-m", "v1", "--tag", "v1", store=store)["version"]
    url = f"s3://dsv-test/ray-moving-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "covid", store=store)
    return {"url": url, "store": store, "data": data, "v1": v1}


def move_head(moving: Dict[str, object]) -> str:
    """Commits v2 on the pushing store and pushes it: the remote's head moves."""
    write_engine_version(moving["data"], 2)
    v2 = dsv_json("commit", str(moving["data"]), "--dataset", "covid", "-m", "v2", store=moving["store"])["version"]
    run_dsv("push", "covid", store=moving["store"])
    return v2


def test_a_job_reads_the_version_resolved_on_the_driver(ray_cluster, tmp_path, no_store):
    import dsv
    import dsv.ray

    moving = make_moving_remote(tmp_path / "origin")
    ds = dsv.ray.read_version("covid", remote=moving["url"], include="parquet/**", format="parquet", override_num_blocks=2)
    # Ray is lazy: nothing was read yet. The remote's head moves before the tasks run.
    v2 = move_head(moving)
    assert dsv.open_remote(moving["url"], cache=tmp_path / "check").version("covid").id == v2 != moving["v1"]
    assert count_and_sum(ds) == frame_sum(1)


def test_ray_readers_read_dsv_through_fsspec(ray_cluster, engine_remote, no_store):
    pafs = need("pyarrow.fs")
    import ray.data

    import dsv.fsspec

    fs = pafs.PyFileSystem(pafs.FSSpecHandler(dsv.fsspec.DsvFileSystem(remote=engine_remote["url"])))
    # A path with or without the protocol: both name the version's folder.
    assert count_and_sum(ray.data.read_parquet("dsv://covid@v1/parquet", filesystem=fs)) == frame_sum(1)
    images = ray.data.read_images("covid@v1/images", filesystem=fs, include_paths=True).take_all()
    assert len(images) == 6 and all(r["image"].shape == (8, 8, 3) for r in images)
    files = ray.data.read_binary_files("covid@v1/data", filesystem=fs, include_paths=True).take_all()
    expected = engine_tables(1)
    assert {r["path"]: r["bytes"] for r in files} == {
        f"covid@v1/data/part-{p}.csv": expected[f"part-{p}"].to_csv(index=False).encode() for p in range(4)
    }


def test_ray_read_parquet_through_fsspec_keeps_the_version_it_listed(ray_cluster, tmp_path, no_store):
    pafs = need("pyarrow.fs")
    import ray.data

    import dsv
    import dsv.fsspec

    moving = make_moving_remote(tmp_path / "origin")
    fs = pafs.PyFileSystem(pafs.FSSpecHandler(dsv.fsspec.DsvFileSystem(remote=moving["url"])))
    # The driver lists `covid` (the head, v1) now; the files are read after the head moves,
    # by workers that unpickle the file system with its pins.
    ds = ray.data.read_parquet("dsv://covid/parquet", filesystem=fs)
    move_head(moving)
    assert count_and_sum(ds) == frame_sum(1)
