"""Issue 35: a version read on any machine that knows only the remote's URL (`dsv.open_remote`,
`dsv://` with `remote=`): one metadata clone per node however many processes start at once,
a file system that pickles by its storage options and rebuilds where the client's store never
was, and one version per job even while the remote's head moves."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict

import pytest

import dsv
from conftest import CountingProxy, dsv_json, engine_tables, run_dsv, s3_env

fsspec = pytest.importorskip("fsspec")
from dsv.fsspec import DsvFileSystem  # noqa: E402


def make_remote(base: Path, files: Dict[str, bytes], tag: str = "v1") -> Dict[str, object]:
    """Dataset `covid` holding `files`, tagged `tag`, pushed to a new S3 prefix by a store at
    `base` (kept, so a test can push again from it). Returns `url`, `store`, `data`, `version`."""
    run_dsv("init", str(base))
    store = base / ".dsv"
    data = base / "data"
    for path, content in files.items():
        (data / path).parent.mkdir(parents=True, exist_ok=True)
        (data / path).write_bytes(content)
    version = dsv_json("commit", str(data), "--dataset", "covid", "-m", tag, "--tag", tag, store=store)["version"]
    url = f"s3://dsv-test/cluster-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "covid", store=store)
    return {"url": url, "store": store, "data": data, "version": version}


def push_new_head(remote: Dict[str, object], files: Dict[str, bytes], tag: str) -> str:
    """Commits `files` over the data directory as the next version of `covid` (tagged `tag`)
    and pushes it: the remote's head moves. Returns the new version's id."""
    data = remote["data"]
    for path, content in files.items():
        (data / path).parent.mkdir(parents=True, exist_ok=True)
        (data / path).write_bytes(content)
    version = dsv_json("commit", str(data), "--dataset", "covid", "-m", tag, "--tag", tag, store=remote["store"])["version"]
    run_dsv("push", "covid", store=remote["store"])
    return version


def run_python(code: str, cwd: Path, env: Dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with exactly `env` added to this one's environment
    minus any store setting: another machine's worker, as far as dsv can tell."""
    full = {k: v for k, v in os.environ.items() if k not in ("DSV_STORE", "DSV_REMOTE", "DSV_CACHE")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)


FILES_V1 = {f"data/part-{i}.csv": f"date,confirmed\n2020-01-0{i + 1},{i * 7}\n".encode() for i in range(4)}


@pytest.fixture
def moving_remote(tmp_path: Path, s3_endpoint: str) -> Dict[str, object]:
    os.environ.update(s3_env(s3_endpoint))
    return make_remote(tmp_path / "origin", FILES_V1)


def test_open_remote_reads_a_version_with_no_store_and_keeps_one_clone(engine_remote, no_store: Path):
    store = dsv.open_remote(engine_remote["url"])
    assert store.remote == engine_remote["url"]
    v = store.version("covid@v1")
    assert v.id == engine_remote["v1"]
    assert v.read("data/part-0.csv").startswith(b"date,country,confirmed\n")
    # The clone lies in the cache directory, one per remote, and is reused as it is.
    clones = [p for p in (no_store / "remotes").iterdir() if p.is_dir()]
    assert len(clones) == 1 and (clones[0] / ".dsv" / "catalog.db").is_file()
    again = dsv.open_remote(engine_remote["url"])
    assert again.path == store.path
    # Names resolve on the remote: the head is v2 there.
    assert again.version("covid").id == engine_remote["v2"]
    assert not list(Path.cwd().iterdir()), "nothing is written where the worker runs"


def test_a_store_option_that_is_a_url_reads_the_remote(engine_remote, no_store: Path):
    # What a new user tries first (the issue's `NoStore: no dsv store found in s3://...`).
    fs = fsspec.filesystem("dsv", store=engine_remote["url"])
    assert fs.cat_file("covid@v1/data/part-1.csv").startswith(b"date,country,confirmed\n")
    with fsspec.open("dsv://covid@v1/data/part-1.csv", remote=engine_remote["url"]) as f:
        assert f.read(5) == b"date,"


def test_the_environment_names_the_remote_and_the_cache(engine_remote, no_store: Path, monkeypatch):
    monkeypatch.setenv("DSV_REMOTE", engine_remote["url"])
    fs = fsspec.filesystem("dsv")
    assert fs.store.remote == engine_remote["url"]
    assert fs.info("covid@v1/data/part-2.csv")["type"] == "file"
    assert str(fs.store.path).startswith(str(no_store))


def test_find_and_glob_answer_from_one_walk_of_the_listing(engine_remote, no_store: Path):
    fs = DsvFileSystem(remote=engine_remote["url"])
    assert fs.glob("covid@v1/data/*.csv") == [f"covid@v1/data/part-{i}.csv" for i in range(4)]
    assert fs.glob("dsv://covid@v2/**/part-4.*") == ["covid@v2/data/part-4.csv", "covid@v2/parquet/part-4.parquet"]
    top = fs.find("covid@v1", maxdepth=1, withdirs=True)
    assert top == ["covid@v1/data", "covid@v1/images", "covid@v1/parquet"]
    files = fs.find("covid@v1/images", detail=True)
    assert sorted(files) == [f"covid@v1/images/{i}.png" for i in range(6)]
    assert all(info["type"] == "file" and info["size"] > 0 for info in files.values())
    assert fs.find("covid@v1/data/part-0.csv") == ["covid@v1/data/part-0.csv"]
    assert fs.find("covid@v1/no-such-dir") == []
    # walk (fsspec builds it on find/ls) sees every directory once.
    walked = {root: sorted(names) for root, _, names in fs.walk("covid@v1")}
    assert walked["covid@v1/data"] == [f"part-{i}.csv" for i in range(4)]


def test_sixteen_processes_opening_one_remote_at_once_make_one_clone_and_all_read(
    engine_remote, s3_endpoint: str, tmp_path: Path
):
    url = engine_remote["url"]
    proxy = CountingProxy(s3_endpoint)
    try:
        # What one clone downloads: the metadata of the remote, once.
        single = run_python(
            f"import dsv; dsv.open_remote({url!r}).version('covid@v1')",
            cwd=tmp_path,
            env={**s3_env(proxy.url), "DSV_CACHE": str(tmp_path / "one")},
        )
        assert single.returncode == 0, single.stderr
        one_clone = proxy.down
        proxy.reset()

        cache = tmp_path / "node-cache"
        work = tmp_path / "work"
        work.mkdir()
        start = tmp_path / "go"
        code = f"""
import hashlib, json, os, time, dsv
while not os.path.exists({str(start)!r}):
    time.sleep(0.005)
v = dsv.open_remote({url!r}).version("covid@v1")
print(json.dumps({{"id": v.id, "sha": hashlib.sha256(v.read("data/part-{{}}.csv".format(os.getpid() % 4))).hexdigest(), "pid": os.getpid()}}))
"""
        env = {**s3_env(proxy.url), "DSV_CACHE": str(cache)}
        full = {k: v for k, v in os.environ.items() if k not in ("DSV_STORE", "DSV_REMOTE")}
        full.update(env)
        procs = [
            subprocess.Popen([sys.executable, "-c", code], cwd=work, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(16)
        ]
        start.touch()
        outputs = [p.communicate(timeout=180) for p in procs]
        for p, (out, err) in zip(procs, outputs):
            assert p.returncode == 0, err
        expected = {
            i: hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest()
            for i, frame in enumerate(engine_tables(1).values())
        }
        for out, _ in outputs:
            got = json.loads(out)
            assert got["id"] == engine_remote["v1"]
            assert got["sha"] == expected[got["pid"] % 4]
        # One clone on the node, nothing half-made left, and the metadata came down once:
        # sixteen clones would move sixteen times what one does.
        entries = sorted(p.name for p in (cache / "remotes").iterdir())
        assert len([e for e in entries if not e.endswith(".lock")]) == 1, entries
        clone_dir = next(p for p in (cache / "remotes").iterdir() if p.is_dir())
        assert sorted(p.name for p in clone_dir.iterdir()) == [".dsv"]
        data_bytes = sum(len(frame.to_csv(index=False)) for frame in engine_tables(1).values())
        print("bytes down: one clone", one_clone, "sixteen processes", proxy.down, "data", data_bytes)
        assert proxy.down < 2 * one_clone + 4 * data_bytes + 16 * 1024, (proxy.down, one_clone)
    finally:
        proxy.close()
    verify = run_dsv("--json", "verify", store=clone_dir / ".dsv", check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_pickled_file_system_rebuilds_on_a_machine_that_never_saw_the_clients_store(
    engine_remote, no_store: Path, tmp_path: Path
):
    fs = fsspec.filesystem("dsv", remote=engine_remote["url"])
    expected = fs.cat_file("covid@v1/parquet/part-3.parquet")
    assert fs.pins["covid@v1"] == f"covid@{engine_remote['v1']}"
    blob = pickle.dumps(fs)
    assert b"catalog.db" not in blob and str(no_store).encode() not in blob, "no path of this machine travels"
    fs.store.close()
    shutil.rmtree(no_store)  # the client's clone is gone: the worker has only the options
    worker = tmp_path / "worker"
    worker.mkdir()
    (tmp_path / "fs.pickle").write_bytes(blob)
    code = f"""
import hashlib, pickle, sys
fs = pickle.loads(open({str(tmp_path / 'fs.pickle')!r}, 'rb').read())
print(fs.pins["covid@v1"])
sys.stdout.write(hashlib.sha256(fs.cat_file("dsv://covid@v1/parquet/part-3.parquet")).hexdigest())
"""
    done = run_python(code, cwd=worker, env={**engine_remote["env"], "DSV_CACHE": str(tmp_path / "other-node"), "HOME": str(worker)})
    assert done.returncode == 0, done.stderr
    pin, digest = done.stdout.splitlines()
    assert pin == f"covid@{engine_remote['v1']}"
    assert digest == hashlib.sha256(expected).hexdigest()
    assert (tmp_path / "other-node" / "remotes").is_dir()
    assert not list(worker.iterdir()), "nothing is written where the worker runs"


def test_a_job_reads_the_version_resolved_at_its_start_though_the_head_moves(
    moving_remote, no_store: Path, tmp_path: Path
):
    url = moving_remote["url"]
    fs = fsspec.filesystem("dsv", remote=url)
    # The client expands the glob on the head: the job is pinned to v1 from here on.
    paths = fs.glob("covid/data/*.csv")
    assert len(paths) == 4
    blob = pickle.dumps(fs)
    v2 = push_new_head(moving_remote, {"data/part-0.csv": b"date,confirmed\nmoved,1\n", "data/part-9.csv": b"x\n"}, "v2")
    (tmp_path / "fs.pickle").write_bytes(blob)
    code = f"""
import pickle, json
fs = pickle.loads(open({str(tmp_path / 'fs.pickle')!r}, 'rb').read())
print(json.dumps({{"part0": fs.cat_file("covid/data/part-0.csv").decode(), "files": fs.glob("covid/data/*.csv")}}))
"""
    # A worker on a node whose cache was made after the move still reads the pinned version.
    done = run_python(code, cwd=tmp_path, env={"DSV_CACHE": str(tmp_path / "late-node")})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["part0"] == FILES_V1["data/part-0.csv"].decode()
    assert got["files"] == paths
    # The next job resolves anew and sees the moved head.
    later = fsspec.filesystem("dsv", remote=url)
    assert later.cat_file("covid/data/part-0.csv") == b"date,confirmed\nmoved,1\n"
    assert later.pins["covid"] == f"covid@{v2}"
    # And the first job, in this process, still reads its own version.
    assert fs.cat_file("covid/data/part-0.csv") == FILES_V1["data/part-0.csv"]


def test_a_pickled_version_of_a_remote_reopens_by_url_not_by_path(engine_remote, no_store: Path, tmp_path: Path):
    v = dsv.open_remote(engine_remote["url"]).version("covid@v1")
    blob = pickle.dumps(v)
    assert str(no_store).encode() not in blob
    (tmp_path / "v.pickle").write_bytes(blob)
    code = f"""
import pickle
v = pickle.loads(open({str(tmp_path / 'v.pickle')!r}, 'rb').read())
print(v.id, v.revision, v.store.remote, len(v))
"""
    done = run_python(code, cwd=tmp_path, env={**engine_remote["env"], "DSV_CACHE": str(tmp_path / "node-b")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [engine_remote["v1"], "covid@v1", engine_remote["url"], str(len(v))]


def test_a_remote_that_holds_no_dsv_data_says_so(s3_endpoint: str, no_store: Path):
    os.environ.update(s3_env(s3_endpoint))
    url = f"s3://dsv-test/empty-{uuid.uuid4().hex[:8]}"
    store = dsv.open_remote(url)
    with pytest.raises(dsv.Error) as failure:
        store.version("covid@v1")
    assert "covid" in str(failure.value)


def test_storage_options_nested_one_level_too_deep_still_name_the_remote(engine_remote, no_store: Path):
    # dask.bytes.read_bytes takes the options as keywords: `storage_options=` there arrives
    # here nested, and used to fall back to a store search (NoStore).
    fs = DsvFileSystem(storage_options={"remote": engine_remote["url"]})
    assert fs.store.remote == engine_remote["url"]
    with pytest.raises(TypeError, match="as keywords"):
        DsvFileSystem(remote=engine_remote["url"], storage_options={"cache": "/tmp/x"})
