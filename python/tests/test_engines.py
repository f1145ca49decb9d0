"""Engines read `dsv://` for real on a worker with no store (issue 35).

Each test runs in `no_store` (a working directory with no store, a fresh DSV_CACHE, no
DSV_STORE/DSV_REMOTE) and reads dataset `covid` from `engine_remote` (a remote on the
loopback S3 server whose pushing store is gone), asserting the rows against
`engine_tables`. A missing engine skips its test (listed by `need`), never passes it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from conftest import dsv_json, engine_tables, need, run_dsv, write_engine_version

# -- helpers ---------------------------------------------------------------------------------


def expected(version: int):
    """The rows of every CSV/Parquet part of `covid` at tag v1 or v2, in part order."""
    pd = need("pandas")
    return pd.concat(engine_tables(version).values(), ignore_index=True)


def canonical(frame):
    """`frame` with the columns of `engine_tables`, sorted by (country, date), plain dtypes:
    engines differ in row order and string dtypes, not in content."""
    frame = frame[["date", "country", "confirmed"]].copy()
    frame["date"] = frame["date"].astype(str)
    frame["country"] = frame["country"].astype(str)
    frame["confirmed"] = frame["confirmed"].astype("int64")
    return frame.sort_values(["country", "date"]).reset_index(drop=True)


def assert_rows(frame, version: int) -> None:
    pd = need("pandas")
    pd.testing.assert_frame_equal(canonical(frame), canonical(expected(version)), check_dtype=False)


def clone_dirs(cache: Path) -> List[str]:
    """The clone directories of a dsv cache (`CACHE/remotes/KEY`, one per remote)."""
    remotes = cache / "remotes"
    return sorted(p.name for p in remotes.iterdir() if p.is_dir()) if remotes.is_dir() else []


def make_remote(base: Path, versions: List[int]) -> Dict[str, object]:
    """A remote of our own (not the shared fixture's, whose head never moves): dataset `covid`
    with one version per entry of `versions` (tags v1, v2, ...), pushed to a new S3 prefix.
    Returns `url`, `store` (the pushing store, kept to move the head later) and `ids`."""
    run_dsv("init", str(base))
    store = base / ".dsv"
    url = f"s3://dsv-test/engines-own-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    ids = [commit_and_push(store, base / "covid", v) for v in versions]
    return {"url": url, "store": store, "ids": ids}


def commit_and_push(store: Path, data: Path, version: int) -> str:
    """Writes `covid`'s files of tag v`version`, commits them with that tag, pushes."""
    write_engine_version(data, version)
    out = dsv_json("commit", str(data), "--dataset", "covid", "-m", f"v{version}", "--tag", f"v{version}", store=store)
    run_dsv("push", "covid", store=store)
    return out["version"]


# -- pandas ----------------------------------------------------------------------------------


def test_pandas_reads_csv_and_parquet_with_remote_option(engine_remote, no_store):
    pd = need("pandas")
    url = engine_remote["url"]
    options = {"remote": url}
    part = pd.read_csv("dsv://covid@v1/data/part-0.csv", storage_options=options)
    pd.testing.assert_frame_equal(part, engine_tables(1)["part-0"])
    part = pd.read_parquet("dsv://covid@v2/parquet/part-4.parquet", storage_options=options)
    pd.testing.assert_frame_equal(canonical(part), canonical(engine_tables(2)["part-4"]))
    # A directory of Parquet files, as pandas (pyarrow) lists it through fsspec.
    assert_rows(pd.read_parquet("dsv://covid@v1/parquet", storage_options=options), 1)
    # The node's one clone, made in DSV_CACHE.
    assert len(clone_dirs(no_store)) == 1


def test_pandas_reads_with_dsv_remote_from_the_environment(engine_remote, no_store, monkeypatch):
    pd = need("pandas")
    monkeypatch.setenv("DSV_REMOTE", engine_remote["url"])
    part = pd.read_csv("dsv://covid@v1/data/part-3.csv")
    pd.testing.assert_frame_equal(part, engine_tables(1)["part-3"])
    part = pd.read_parquet("dsv://covid/parquet/part-1.parquet")  # the head: v2
    pd.testing.assert_frame_equal(canonical(part), canonical(engine_tables(2)["part-1"]))
    assert len(clone_dirs(no_store)) == 1


def test_a_process_that_changes_dsv_cache_clones_into_the_new_cache(engine_remote, no_store, monkeypatch, tmp_path):
    import fsspec

    url = engine_remote["url"]
    first = fsspec.filesystem("dsv", remote=url).cat_file("covid@v1/data/part-1.csv")
    assert len(clone_dirs(no_store)) == 1
    other = tmp_path / "other-cache"
    monkeypatch.setenv("DSV_CACHE", str(other))
    assert fsspec.filesystem("dsv", remote=url).cat_file("covid@v1/data/part-1.csv") == first
    assert len(clone_dirs(other)) == 1


# -- pyarrow ---------------------------------------------------------------------------------


def test_pyarrow_dataset_and_csv_through_the_file_system(engine_remote, no_store):
    need("pyarrow")
    ds = need("pyarrow.dataset")
    fs_module = need("pyarrow.fs")
    pa_csv = need("pyarrow.csv")
    import fsspec

    from dsv.fsspec import DsvFileSystem

    fs = fs_module.PyFileSystem(fs_module.FSSpecHandler(DsvFileSystem(remote=engine_remote["url"])))
    dataset = ds.dataset("covid@v1/parquet", filesystem=fs, format="parquet")
    assert sorted(Path(f).name for f in dataset.files) == [f"part-{p}.parquet" for p in range(4)]
    table = dataset.to_table()
    assert table.num_rows == 200
    assert sum(table.column("confirmed").to_pylist()) == int(expected(1)["confirmed"].sum())
    assert_rows(table.to_pandas(), 1)
    # v2 through the same file system: another version, 5 parts of 60 rows.
    assert ds.dataset("covid@v2/parquet", filesystem=fs, format="parquet").count_rows() == 300

    with fsspec.open("dsv://covid@v1/data/part-2.csv", "rb", remote=engine_remote["url"]) as f:
        table = pa_csv.read_csv(f)
    assert table.num_rows == 50
    assert table.column("confirmed").to_pylist() == engine_tables(1)["part-2"]["confirmed"].tolist()


# -- DuckDB ----------------------------------------------------------------------------------


def test_duckdb_reads_through_a_registered_file_system(engine_remote, no_store):
    duckdb = need("duckdb")
    need("pandas")
    import fsspec

    fs = fsspec.filesystem("dsv", remote=engine_remote["url"])
    # DuckDB asks every file's modification time: the time its version was made.
    made = fs.modified("covid@v1/data/part-0.csv")
    assert made.timestamp() == fs.version("covid@v1").time and made.tzinfo is not None
    with pytest.raises(FileNotFoundError):
        fs.modified("covid@v1/data/nope.csv")
    con = duckdb.connect()
    con.register_filesystem(fs)
    frame = con.sql("SELECT * FROM read_csv('dsv://covid@v1/data/*.csv')").df()
    assert_rows(frame, 1)
    frame = con.sql("SELECT * FROM read_parquet('dsv://covid@v2/parquet/*.parquet')").df()
    assert_rows(frame, 2)
    total = con.sql("SELECT count(*), sum(confirmed) FROM read_parquet('dsv://covid@v1/parquet/*.parquet')").fetchall()[0]
    assert total == (200, int(expected(1)["confirmed"].sum()))


# -- pickling: a machine that never saw the client's store -------------------------------------

_UNPICKLE = """
import hashlib, os, pickle, sys
fs = pickle.loads(sys.stdin.buffer.read())
data = fs.cat_file("covid/data/part-0.csv")
print(repr(fs.pins))
print(hashlib.sha256(data).hexdigest())
remotes = os.path.join(os.environ["DSV_CACHE"], "remotes")
print(sum(os.path.isdir(os.path.join(remotes, name)) for name in os.listdir(remotes)))
"""


def test_a_pickled_file_system_reads_the_same_bytes_on_another_machine(engine_remote, no_store, tmp_path):
    import hashlib

    import fsspec

    own = make_remote(tmp_path / "origin", [1])
    fs = fsspec.filesystem("dsv", remote=own["url"])
    data = fs.cat_file("covid/data/part-0.csv")  # pins `covid` to the head: v1
    assert fs.pins == {"covid": f"covid@{own['ids'][0]}"}
    state = pickle.dumps(fs)
    # The remote's head moves after the client resolved `covid`.
    moved = commit_and_push(own["store"], tmp_path / "origin" / "covid", 2)

    machine = tmp_path / "machine"
    (machine / "work").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DSV_STORE", "DSV_REMOTE")}
    env["DSV_CACHE"] = str(machine / "cache")
    done = subprocess.run(
        [sys.executable, "-c", _UNPICKLE], input=state, capture_output=True, cwd=machine / "work", env=env
    )
    assert done.returncode == 0, done.stderr.decode()
    pins, digest, clones = done.stdout.decode().split("\n")[:3]
    assert pins == repr(fs.pins)
    assert digest == hashlib.sha256(data).hexdigest()
    assert data == engine_tables(1)["part-0"].to_csv(index=False).encode()
    assert clones == "1"  # it cloned into its own cache, not the client's
    # A file system made afresh resolves `covid` anew: the moved head.
    assert fsspec.filesystem("dsv", remote=own["url"]).version("covid").id == moved


# -- Hugging Face datasets -------------------------------------------------------------------


def test_hugging_face_datasets_loads_csv_parquet_and_streams(engine_remote, no_store, tmp_path):
    datasets = need("datasets")
    options = {"remote": engine_remote["url"]}
    # Not HF_DATASETS_OFFLINE=1: offline mode refuses every non-local URL, dsv:// included.
    cache = str(tmp_path / "hf-cache")
    loaded = datasets.load_dataset("csv", data_files="dsv://covid@v1/data/*.csv", storage_options=options, cache_dir=cache)
    assert_rows(loaded["train"].to_pandas(), 1)
    loaded = datasets.load_dataset(
        "parquet", data_files="dsv://covid@v2/parquet/*.parquet", storage_options=options, cache_dir=cache
    )
    assert_rows(loaded["train"].to_pandas(), 2)
    streamed = datasets.load_dataset(
        "csv", data_files="dsv://covid@v1/data/*.csv", storage_options=options, cache_dir=cache, streaming=True
    )
    rows = list(streamed["train"])
    assert len(rows) == 200 and sum(r["confirmed"] for r in rows) == int(expected(1)["confirmed"].sum())
    # Images (Pillow decodes them from the bytes dsv:// serves). `data_dir=` would not do:
    # datasets takes it as a local path for any URL (s3:// too); a `data_files` glob does.
    images = datasets.load_dataset(
        "imagefolder", data_files="dsv://covid@v1/images/*.png", storage_options=options, cache_dir=cache
    )["train"]
    colours = sorted(image.getpixel((0, 0)) for image in images["image"])
    assert colours == sorted((40 * i, 255 - 40 * i, 7 * i) for i in range(6))


# -- Dask: a LocalCluster of worker processes that share nothing but the storage options -----


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory, engine_remote) -> Iterator[Dict[str, object]]:
    """Two worker processes (spawned, one thread each) whose DSV_CACHE is not the client's and
    whose working directory holds no store: another node, as far as dsv can tell (they get
    the S3 server's AWS_* variables, set by `engine_remote`, as a node's credentials). One per
    module (starting it costs seconds). Returns `client` and `cache` (the workers' DSV_CACHE)."""
    need("dask.dataframe")
    distributed = need("distributed")
    base = tmp_path_factory.mktemp("dask-node")
    cache, work = base / "cache", base / "work"
    work.mkdir()
    env = {"DSV_CACHE": str(cache), "DSV_STORE": "", "DSV_REMOTE": ""}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)  # the spawned workers' working directory
        cluster = distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            local_directory=str(base / "scratch"),
            env=env,
        )
    client = distributed.Client(cluster)
    try:
        yield {"client": client, "cache": cache}
    finally:
        client.close()
        cluster.close()


def _worker_clones(url: str) -> List[str]:
    """On a worker: the clone directories this process opened for remote `url`."""
    import dsv._engine

    return sorted(str(store.path.parent) for store in dsv._engine._STORES.values() if store.remote == url)


def test_dask_reads_csv_and_parquet_on_worker_processes(engine_remote, no_store, dask_cluster):
    dd = need("dask.dataframe")
    client, worker_cache = dask_cluster["client"], dask_cluster["cache"]
    url = engine_remote["url"]
    options = {"remote": url}
    before = set(clone_dirs(worker_cache))
    frame = dd.read_csv("dsv://covid@v1/data/*.csv", storage_options=options)
    assert frame.npartitions == 4
    assert_rows(frame.compute(), 1)
    assert_rows(dd.read_parquet("dsv://covid@v2/parquet", storage_options=options).compute(), 2)
    total = dd.read_csv("dsv://covid@v2/data/*.csv", storage_options=options)["confirmed"].sum().compute()
    assert total == int(expected(2)["confirmed"].sum())
    # Each node made its own clone, once: the client in its DSV_CACHE, the two workers in
    # theirs (one for both processes), and the workers read through theirs.
    assert len(clone_dirs(no_store)) == 1
    opened = {path for paths in client.run(_worker_clones, url).values() for path in paths}
    assert len(opened) == 1, opened  # every worker that read, through the same clone
    (clone,) = opened
    assert Path(clone).parent == worker_cache / "remotes"
    # Exactly one clone directory for this remote in the workers' cache, for both processes.
    assert clone_dirs(worker_cache) == sorted(before | {Path(clone).name})


def test_dask_workers_read_the_version_resolved_when_the_graph_was_built(engine_remote, no_store, dask_cluster, tmp_path):
    dd = need("dask.dataframe")
    import fsspec

    own = make_remote(tmp_path / "origin", [1])
    options = {"remote": own["url"]}
    # `covid` (the head: v1) resolves here, when the graphs are built.
    csv = dd.read_csv("dsv://covid/data/*.csv", storage_options=options, blocksize=None)
    parquet = dd.read_parquet("dsv://covid/parquet", storage_options=options)
    moved = commit_and_push(own["store"], tmp_path / "origin" / "covid", 2)
    assert fsspec.filesystem("dsv", remote=own["url"]).version("covid").id == moved  # the head did move
    # The workers have never seen this remote: they clone it now, after the move, and still
    # read v1 (whole files: v2 has 60 rows per part where v1 has 50).
    assert_rows(csv.compute(), 1)
    assert_rows(parquet.compute(), 1)


# -- writing back: an engine writes files, `dsv import` / `dsv commit` records a version -------


def test_an_engine_writes_parquet_that_dsv_records_and_reads_back(engine_remote, no_store, dask_cluster, tmp_path):
    dd = need("dask.dataframe")
    pd = need("pandas")
    options = {"remote": engine_remote["url"]}
    summary = (
        dd.read_csv("dsv://covid@v1/data/*.csv", storage_options=options)
        .groupby("country")["confirmed"]
        .max()
        .reset_index()
    )
    own = make_remote(tmp_path / "origin", [])
    # Dask's workers write a directory of Parquet files; `dsv commit` records it.
    out = tmp_path / "summary"
    summary.to_parquet(str(out), write_index=False)
    made = dsv_json("commit", str(out), "--dataset", "summary", "-m", "by Dask", "--tag", "v1", store=own["store"])
    run_dsv("push", "summary", store=own["store"])
    back = dd.read_parquet("dsv://summary@v1/", storage_options={"remote": own["url"]}).compute()
    want = expected(1).groupby("country", as_index=False)["confirmed"].max()
    pd.testing.assert_frame_equal(
        back.sort_values("country").reset_index(drop=True)[["country", "confirmed"]].astype({"country": str}),
        want.astype({"country": str}),
        check_dtype=False,
    )
    assert made["version"]

    # pandas writes to a bucket prefix (s3fs); `dsv import` records every object under it.
    s3fs = need("s3fs")
    prefix = f"dsv-test/exports-{uuid.uuid4().hex[:12]}"
    frame = summary.compute()
    frame.to_parquet(f"s3://{prefix}/max.parquet", index=False)
    assert s3fs.S3FileSystem().ls(prefix) == [f"{prefix}/max.parquet"]
    dsv_json("import", f"s3://{prefix}/", "--dataset", "summary", "--tag", "v2", store=own["store"])
    run_dsv("push", "summary", store=own["store"])
    back = pd.read_parquet("dsv://summary@v2/max.parquet", storage_options={"remote": own["url"]})
    pd.testing.assert_frame_equal(back, frame.reset_index(drop=True))
