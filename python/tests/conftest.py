"""Fixtures: real stores made by the real `dsv` binary, and the loopback S3 server (moto)
that scripts/test-servers runs.

- The binary: `DSV_BIN`, else the newest of `target/{debug,release}/dsv` and
  `python/target/{debug,release}/dsv` in the repository.
- S3: `DSV_TEST_S3_ENDPOINT` when set (scripts/test exports it), else this session starts
  the servers with `scripts/test-servers start` (and stops what it started).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]


# -- cases this machine cannot run -------------------------------------------------------------


def skip_for(requirement: str, lack: Optional[str]) -> None:
    """Skips the calling test when this machine lacks `requirement` (`lack` says what is
    missing; None: nothing is), as tests/it/common's `skip_for` does: a requirement listed in
    DSV_TEST_REQUIRE (a comma list) fails the test instead."""
    if lack is None:
        return
    required = [r.strip() for r in os.environ.get("DSV_TEST_REQUIRE", "").split(",")]
    if requirement in required:
        pytest.fail(f"this machine lacks {requirement} ({lack}); DSV_TEST_REQUIRE requires it")
    pytest.skip(f"{lack} ({requirement})")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Appends each skipped case to DSV_TEST_SKIPS (scripts/test lists them with the
    integration tests' at the end)."""
    path = os.environ.get("DSV_TEST_SKIPS")
    if not path or not report.skipped:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    with open(path, "a") as out:
        out.write(f"SKIPPED {report.nodeid}: {reason.removeprefix('Skipped: ')}\n")


def _find_binary() -> Path:
    env = os.environ.get("DSV_BIN")
    if env:
        return Path(env)
    candidates = [
        REPO / "target" / "debug" / "dsv",
        REPO / "target" / "release" / "dsv",
        REPO / "python" / "target" / "debug" / "dsv",
        REPO / "python" / "target" / "release" / "dsv",
    ]
    found = [c for c in candidates if c.is_file()]
    if not found:
        pytest.exit("no dsv binary: run `cargo build` first, or set DSV_BIN", returncode=2)
    return max(found, key=lambda c: c.stat().st_mtime)


DSV_BIN = _find_binary()


def run_dsv(*args: str, store: Optional[Path] = None, check: bool = True) -> subprocess.CompletedProcess:
    """Runs the dsv binary; returns the completed process (raises on failure with check)."""
    cmd = [str(DSV_BIN)]
    if store is not None:
        cmd += ["--store", str(store)]
    cmd += list(args)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def dsv_json(*args: str, store: Optional[Path] = None) -> object:
    return json.loads(run_dsv("--json", *args, store=store).stdout)


def content(path: str, size: int) -> bytes:
    """The bytes of file `path` in the test datasets: its name, then pseudo-random bytes
    (incompressible, so packs hold several frames), `size` bytes in all."""
    head = path.encode() + b"\n"
    out = bytearray(head)
    counter = 0
    while len(out) < size:
        out += hashlib.blake2b(f"{path}:{counter}".encode(), digest_size=64).digest()
        counter += 1
    return bytes(out[: max(size, len(head))])


def write_dataset(root: Path, count: int, seed: int = 0) -> Dict[str, bytes]:
    """`count` files in nested directories, 200 B to 40 KB each; returns path -> bytes."""
    files = {}
    for i in range(count):
        path = f"train/{i % 7}/{i:05d}.bin" if i % 10 else f"test/{i:05d}.bin"
        size = 200 + (i * 7919 + seed * 104729) % 40_000
        data = content(path, size)
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        files[path] = data
    (root / "labels.csv").write_text("".join(f"{i},{i % 10}\n" for i in range(count)))
    files["labels.csv"] = (root / "labels.csv").read_bytes()
    return files


def store_snapshot(dsv_dir: Path) -> Dict[str, str]:
    """Every file of a store that a change would touch (not locks, SQLite's -wal/-shm, or
    leases), with its hash."""
    out = {}
    for path in sorted(dsv_dir.rglob("*")):
        rel = path.relative_to(dsv_dir).as_posix()
        if not path.is_file() or rel.endswith((".lock", "-wal", "-shm")) or rel.startswith(("leases", "locks")):
            continue
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session")
def local_store(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    """A store with dataset `mnist`: v1 (120 files), v2 (one file changed, one added),
    made with the dsv binary."""
    base = tmp_path_factory.mktemp("local")
    data = base / "data"
    files = write_dataset(data, 120)
    run_dsv("init", str(base), store=None)
    store = base / ".dsv"
    v1 = dsv_json("commit", str(data), "--dataset", "mnist", "-m", "first", "--tag", "v1", store=store)
    (data / "labels.csv").write_text("relabelled\n")
    (data / "extra.txt").write_text("extra\n")
    files_v2 = dict(files)
    files_v2["labels.csv"] = b"relabelled\n"
    files_v2["extra.txt"] = b"extra\n"
    v2 = dsv_json("commit", str(data), "--dataset", "mnist", "-m", "second", "--tag", "v2", store=store)
    empty = base / "empty"
    empty.mkdir()
    (empty / "zero.bin").write_bytes(b"")
    dsv_json("commit", str(empty), "--dataset", "tiny", "-m", "one empty file", store=store)
    return {"base": base, "store": store, "v1": v1, "v2": v2, "files_v1": files, "files_v2": files_v2}


# -- the loopback S3 server ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reachable(endpoint: str) -> bool:
    host, port = endpoint.replace("http://", "").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The moto S3 server's URL (bucket `dsv-test` exists)."""
    endpoint = os.environ.get("DSV_TEST_S3_ENDPOINT")
    started = False
    if endpoint and not _reachable(endpoint):
        endpoint = None  # exported, but gone (another run on this machine stopped it)
    default = f"http://127.0.0.1:{os.environ.get('DSV_TEST_S3_PORT', '5391')}"
    if not endpoint and _reachable(default):
        endpoint = default  # running for another session: used, and left running
    if not endpoint:
        out = subprocess.run(
            [str(REPO / "scripts" / "test-servers"), "start"], capture_output=True, text=True, check=True
        ).stdout
        for line in out.splitlines():
            if line.startswith("export DSV_TEST_S3_ENDPOINT="):
                endpoint = line.split("=", 1)[1]
        started = True
    assert endpoint, "the S3 test server did not start"
    yield endpoint
    if started:
        subprocess.run([str(REPO / "scripts" / "test-servers"), "stop"], check=False)


class CountingProxy:
    """A TCP proxy on loopback in front of the S3 server, counting the bytes it sends back:
    the bytes on the wire that dsv downloads."""

    def __init__(self, target: str) -> None:
        host, port = target.replace("http://", "").split(":")
        self.target = (host, int(port))
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(128)
        self.port = self.server.getsockname()[1]
        self.lock = threading.Lock()
        self.down = 0
        self.up = 0
        self.connections = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._pipe, args=(client, upstream, "up"), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, "down"), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, direction: str) -> None:
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                sink.sendall(data)
                with self.lock:
                    if direction == "down":
                        self.down += len(data)
                    else:
                        self.up += len(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def reset(self) -> None:
        with self.lock:
            self.down = self.up = 0

    def close(self) -> None:
        self.closed = True
        self.server.close()


@pytest.fixture(scope="session")
def s3_proxy(s3_endpoint: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy(s3_endpoint)
    yield proxy
    proxy.close()


def s3_env(endpoint: str) -> Dict[str, str]:
    """The environment a user sets to reach the S3 server (credentials stay out of stores)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test-key-id",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
    }


@pytest.fixture(scope="session")
def remote_dataset(tmp_path_factory: pytest.TempPathFactory, s3_proxy: CountingProxy) -> Dict[str, object]:
    """Dataset `mnist` (403 files, about 8 MB, tag v1) pushed to s3://dsv-test/<unique> by
    a store that is then deleted: the data lives only on the S3 server. The process
    environment points at the server through the counting proxy."""
    os.environ.update(s3_env(s3_proxy.url))
    base = tmp_path_factory.mktemp("origin")
    data = base / "data"
    files = write_dataset(data, 403, seed=3)
    run_dsv("init", str(base))
    store = base / ".dsv"
    commit = dsv_json("commit", str(data), "--dataset", "mnist", "-m", "to push", "--tag", "v1", store=store)
    url = f"s3://dsv-test/py-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "mnist", store=store)
    packed = sum(p.stat().st_size for p in (store / "packs").glob("*.pack"))
    shutil.rmtree(base)
    return {"url": url, "files": files, "version": commit["version"], "packed_bytes": packed}


def sorted_paths(files: Dict[str, bytes]) -> List[str]:
    return sorted(files)


# -- engines (issue 35): a remote that workers with no store read --------------------------


def need(module: str):
    """Imports engine `module` (pandas, dask, ray, pyspark, duckdb, datasets, ...), or skips
    the calling test, listed with its reason (scripts/test installs every engine; a machine
    where the install failed lists the tests it could not run, never passes them)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        skip_for(f"engine {module}", f"{module} is not installed here ({e})")


def engine_tables(version: int) -> Dict[str, object]:
    """The tables of dataset `covid` at tag v1 or v2: four parts of a daily time series
    (`date`, `country`, `confirmed`), 50 rows each at v1; v2 adds 10 rows to each part and a
    fifth part. Returns part name -> pandas DataFrame."""
    pd = need("pandas")
    parts = 4 if version == 1 else 5
    rows = 50 if version == 1 else 60
    out = {}
    for p in range(parts):
        out[f"part-{p}"] = pd.DataFrame(
            {
                "date": [f"2020-{1 + d // 28:02d}-{1 + d % 28:02d}" for d in range(rows)],
                "country": [f"country-{p}"] * rows,
                "confirmed": [p * 1000 + d * d for d in range(rows)],
            }
        )
    return out


def write_engine_version(root: Path, version: int) -> None:
    """Writes dataset `covid`'s files of tag v1 or v2 into `root`: `data/part-N.csv`,
    `parquet/part-N.parquet` (the same rows, row groups of 20 rows), and `images/N.png` (six
    8x8 PNGs)."""
    pq = need("pyarrow.parquet")
    pa = need("pyarrow")
    image = need("PIL.Image")
    if root.exists():
        shutil.rmtree(root)
    for name, frame in engine_tables(version).items():
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "parquet").mkdir(parents=True, exist_ok=True)
        frame.to_csv(root / "data" / f"{name}.csv", index=False)
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), root / "parquet" / f"{name}.parquet", row_group_size=20)
    (root / "images").mkdir(parents=True, exist_ok=True)
    for i in range(6):
        image.new("RGB", (8, 8), (40 * i, 255 - 40 * i, 7 * i)).save(root / "images" / f"{i}.png")


@pytest.fixture(scope="session")
def engine_remote(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> Dict[str, object]:
    """Dataset `covid` with tags v1 and v2 (head v2; see `write_engine_version`) pushed to
    s3://dsv-test/<unique> by a store that is then deleted: a worker that reads it has no
    store, only the URL. The process environment points at the S3 server (credentials stay
    out of stores). Returns `url`, `v1` and `v2` (version ids), and `env` (the variables a
    worker process needs)."""
    env = s3_env(s3_endpoint)
    os.environ.update(env)
    base = tmp_path_factory.mktemp("engines-origin")
    run_dsv("init", str(base))
    store = base / ".dsv"
    data = base / "covid"
    write_engine_version(data, 1)
    v1 = dsv_json("commit", str(data), "--dataset", "covid", "-m", "v1", "--tag", "v1", store=store)["version"]
    write_engine_version(data, 2)
    v2 = dsv_json("commit", str(data), "--dataset", "covid", "-m", "v2", "--tag", "v2", store=store)["version"]
    url = f"s3://dsv-test/engines-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "covid", store=store)
    shutil.rmtree(base)
    return {"url": url, "v1": v1, "v2": v2, "env": env}


@pytest.fixture
def no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A worker's view of the machine: the working directory holds no store, DSV_STORE and
    DSV_REMOTE are unset, and DSV_CACHE is a new empty directory (returned)."""
    work = tmp_path / "work"
    work.mkdir()
    cache = tmp_path / "cache"
    monkeypatch.chdir(work)
    monkeypatch.delenv("DSV_STORE", raising=False)
    monkeypatch.delenv("DSV_REMOTE", raising=False)
    monkeypatch.setenv("DSV_CACHE", str(cache))
    return cache
