#!/usr/bin/env python3
"""The measuring half of scripts/bench-cluster (issue 35): read that script's header first.

Run by scripts/bench-cluster with the benchmark's own venv (the package installed from
./python), the S3 server started and the AWS_* variables pointing at it. Subcommands:
    run         the whole benchmark (setup once, then BENCH_ROUNDS rounds, then the summary);
    round       one round of (a)+(b) or (d) in a process of its own (started by `run`);
    open-race   one of the 16 processes of (c) (started by `run`, not by hand).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve()


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def die(message: str) -> None:
    print(f"\nbench-cluster: FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def load() -> str:
    """The load average, for the figures (the machine is shared)."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def dsv_cli(*args: str, cwd: Path | None = None) -> str:
    """Runs the `dsv` command installed with the package (the same build the workers use)."""
    done = subprocess.run(
        [sys.executable, "-m", "dsv", "--no-progress", *args], cwd=cwd, capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        die(f"dsv {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def clone_dirs(cache: Path) -> int:
    """How many remote clones a node's cache holds (one directory per clone)."""
    remotes = cache / "remotes"
    if not remotes.is_dir():
        return 0
    return sum(1 for p in remotes.iterdir() if p.is_dir())


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- data ------------------------------------------------------------------------------------


def generate(tree: Path, files: int, file_mb: int) -> None:
    """BENCH_FILES Parquet files of about BENCH_FILE_MB MB (mixed numeric and string columns,
    snappy), and 16 small files for (c); made once and kept (the generator is seeded)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tree / "parquet").mkdir(parents=True, exist_ok=True)
    (tree / "small").mkdir(parents=True, exist_ok=True)
    for i in range(16):
        path = tree / "small" / f"s-{i:02d}.bin"
        if not path.exists():
            path.write_bytes(np.random.default_rng(1000 + i).bytes(256 * 1024))
    countries = np.array([f"country-{k:03d}" for k in range(200)], dtype=object)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz012345", dtype="S1")
    rows = int(file_mb * 1e6 / 38)  # about 38 bytes a row once encoded; corrected after file 0
    for i in range(files):
        path = tree / "parquet" / f"part-{i:02d}.parquet"
        if path.exists():
            rows = max(1000, int(rows * file_mb * 1e6 / path.stat().st_size))
            continue
        rng = np.random.default_rng(i)
        token = letters[rng.integers(0, 32, (rows, 12), dtype=np.uint8)].view("S12").ravel()
        table = pa.table(
            {
                "id": np.arange(i * rows, (i + 1) * rows, dtype=np.int64),
                "ts": 1_700_000_000_000 + np.cumsum(rng.integers(0, 1000, rows)),
                "x": rng.standard_normal(rows),
                "price": np.round(rng.gamma(2.0, 10.0, rows), 2),
                "qty": rng.integers(0, 1000, rows, dtype=np.int32),
                "country": countries[rng.integers(0, len(countries), rows)],
                "token": pa.array(token).cast(pa.string()),
            }
        )
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp, compression="snappy", row_group_size=max(1, rows // 4))
        os.replace(tmp, path)
        rows = max(1000, int(rows * file_mb * 1e6 / path.stat().st_size))
        say(f"  generated {path.name}: {path.stat().st_size / 1e6:.1f} MB")


# --- (a)/(b): Dask LocalCluster, dsv:// against s3fs ------------------------------------------


def digest(df):
    """Touches every column of a partition (so nothing is projected away): rows, the sum of
    the numeric columns, the characters of the string columns."""
    import pandas as pd

    numeric = df.select_dtypes("number")
    chars = sum(int(df[c].str.len().sum()) for c in ("country", "token"))
    return pd.DataFrame(
        {"rows": [len(df)], "sum": [float(numeric.sum().sum())], "chars": [chars]}
    )


def process_cpu() -> float:
    """CPU seconds (user + system, all threads) this process has used."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu() -> float:
    """CPU seconds the S3 server (s3rver, BENCH_S3RVER_PID) has used."""
    pid = os.environ.get("BENCH_S3RVER_PID")
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_now() -> tuple[float, float]:
    """(CPU seconds of the client and its workers, of the S3 server) so far."""
    from dask.distributed import get_client

    workers = sum(get_client().run(process_cpu).values())
    return workers + process_cpu(), server_cpu()


def dask_full_read(url: str, storage_options: dict) -> tuple[float, tuple, tuple]:
    """Seconds for a full read of every column of `url` (a glob) on the current Dask client,
    from `dd.read_parquet` to the result (the client's metadata pass included); the result's
    check; the CPU seconds the client + workers and the S3 server spent on it (on a shared
    machine, CPU seconds move less with the load than wall time)."""
    import dask.dataframe as dd

    cpu_before = cpu_now()
    start = time.perf_counter()
    ddf = dd.read_parquet(url, storage_options=storage_options)
    out = ddf.map_partitions(
        digest, meta={"rows": "int64", "sum": "float64", "chars": "int64"}
    ).sum().compute()
    seconds = time.perf_counter() - start
    cpu_after = cpu_now()
    cpu = (cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1])
    return seconds, (int(out["rows"]), float(out["sum"]), int(out["chars"])), cpu


def same_read(a: tuple, b: tuple) -> bool:
    """Two full reads gave the same rows, characters and (to rounding) numeric sum."""
    return a[0] == b[0] and a[2] == b[2] and abs(a[1] - b[1]) <= 1e-9 * max(abs(a[1]), 1.0)


def warm_imports() -> None:
    """Runs on every worker before the clock starts: the libraries both peers use are
    imported, so "cold" is the data and the node cache, not Python's imports."""
    import dask.dataframe  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import s3fs  # noqa: F401

    import dsv.fsspec  # noqa: F401


def round_ab(cfg: dict, work: Path, rnd: int) -> dict:
    from dask.distributed import Client, LocalCluster

    cache = work / f"cache-ab-{rnd}"
    os.environ["DSV_CACHE"] = str(cache)  # the workers' node cache: fresh each round (cold)
    dsv_url = "dsv://bench@v1/parquet/*.parquet"
    dsv_opts = {"remote": cfg["remote"]}
    s3_url = f"s3://{cfg['bucket']}/plain/parquet/*.parquet"
    s3_opts: dict = {}
    result: dict = {}
    with LocalCluster(
        n_workers=cfg["workers"], threads_per_worker=1, processes=True, dashboard_address=None,
        silence_logs=logging.CRITICAL,
    ) as cluster, Client(cluster) as client:
        client.run(warm_imports)
        warm_imports()
        # Which peer goes first alternates between rounds, so a change of load hits both.
        order = [("dsv", dsv_url, dsv_opts), ("s3fs", s3_url, s3_opts)]
        if rnd % 2 == 0:
            order.reverse()
        for phase in ("first", "second"):
            for name, url, opts in order:
                la = load()
                seconds, check, cpu = dask_full_read(url, opts)
                result[f"{name}-{phase}"] = seconds
                result[f"{name}-{phase}-cpu"] = cpu
                result[f"{name}-check"] = check
                say(f"  round {rnd} {name:4} {phase:6} read: {seconds:7.2f} s, CPU s: client+workers "
                    f"{cpu[0]:6.1f}, server {cpu[1]:5.1f}  (load {la})")
        # The floor: the same read of the same files from the local disk (page cache), on
        # the same workers: what Parquet decoding and the digest cost with no network at all.
        la = load()
        seconds, check, cpu = dask_full_read(f"{cfg['tree']}/parquet/*.parquet", {})
        result["local"] = seconds
        result["local-cpu"] = cpu
        result["local-check"] = check
        say(f"  round {rnd} local files read:   {seconds:7.2f} s, CPU s: client+workers "
            f"{cpu[0]:6.1f}  (load {la})")
    if not same_read(result["dsv-check"], result["s3fs-check"]) or not same_read(
        result["dsv-check"], result["local-check"]
    ):
        die(f"dsv read {result['dsv-check']}, s3fs read {result['s3fs-check']}")
    result["clones"] = clone_dirs(cache)
    result["cache-bytes"] = du(cache)
    # Each fetch stores its frames as a pack of the node cache (written, fsynced, recorded).
    result["cache-packs"] = sum(1 for _ in cache.glob("remotes/*/.dsv/packs/**/*") if _.is_file())
    shutil.rmtree(cache, ignore_errors=True)
    return result


# --- (c): 16 processes open the remote at once ---------------------------------------------


def open_race(kind: str, url: str, rel: str, expected: str, ready: str, go: str) -> None:
    """One racing process: imports, says it is ready, waits for `go`, then opens the remote
    (dsv.open_remote) or the bucket (s3fs) and reads `rel`; prints a JSON line."""
    if kind == "dsv":
        import dsv
    else:
        import s3fs
    Path(ready).touch()
    while not os.path.exists(go):
        time.sleep(0.002)
    start = time.time()
    if kind == "dsv":
        store = dsv.open_remote(url)
        opened = time.time()
        with store.version("bench@v1").open(rel) as f:
            data = f.read()
    else:
        fs = s3fs.S3FileSystem()
        opened = time.time()
        data = fs.cat(f"{url}/{rel}")
    end = time.time()
    ok = hashlib.sha256(data).hexdigest() == expected
    print(json.dumps({"ok": ok, "start": start, "opened": opened, "end": end}), flush=True)


def race(cfg: dict, work: Path, rnd: int, kind: str, tree: Path) -> dict:
    """(c): 16 processes (subprocess, all imported and waiting) released at once."""
    n = 16
    cache = work / f"cache-c-{rnd}-{kind}"
    gate = work / f"gate-{rnd}-{kind}"
    gate.mkdir()
    env = dict(os.environ, DSV_CACHE=str(cache))
    url = cfg["remote"] if kind == "dsv" else f"s3://{cfg['bucket']}/plain"
    procs = []
    for i in range(n):
        rel = f"small/s-{i:02d}.bin"
        expected = hashlib.sha256((tree / rel).read_bytes()).hexdigest()
        args = [sys.executable, str(HERE), "open-race", kind, url, rel, expected,
                str(gate / f"ready-{i}"), str(gate / "go")]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    while sum(1 for i in range(n) if (gate / f"ready-{i}").exists()) < n:
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.01)
    go = time.time()
    (gate / "go").touch()
    reports, errors = [], []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0 or not out.strip():
            errors.append(f"exit {p.returncode}: {err.strip()[-400:]}")
            continue
        if err.strip():
            errors.append(f"stderr: {err.strip()[-400:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    seconds = max((r["end"] for r in reports), default=go) - go
    result = {
        "seconds": seconds,
        "slowest-open": max((r["opened"] - go for r in reports), default=0.0),
        "correct": sum(1 for r in reports if r["ok"]),
        "errors": errors,
        "clones": clone_dirs(cache),
    }
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(gate, ignore_errors=True)
    return result


# --- (d): FiveThirtyEight versions, Dask through dsv:// against pandas over a checkout ------


def count_rows(data: bytes):
    """Rows pandas reads from one CSV's bytes, or None when pandas cannot read it (skipped
    the same way on both sides)."""
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return len(pd.read_csv(io.BytesIO(data), low_memory=False))
        except Exception:
            return None


def round_d(cfg: dict, work: Path, rnd: int) -> dict:
    import dask
    from dask.bytes import read_bytes
    from dask.distributed import Client, LocalCluster

    result: dict = {"versions": {}}
    # Peer: `dsv clone` + `dsv checkout` of each version, then pandas over the files.
    co = work / f"checkout-{rnd}"
    start = time.perf_counter()
    dsv_cli("clone", cfg["fte_remote"], str(co))
    pandas_counts = {}
    for n in cfg["fte_versions"]:
        out = co / f"v{n}"
        dsv_cli("checkout", f"fte@v{n}", str(out), cwd=co)
        counts = {}
        for path in sorted(out.rglob("*.csv")):
            counts[path.relative_to(out).as_posix()] = count_rows(path.read_bytes())
        pandas_counts[n] = counts
    result["pandas-seconds"] = time.perf_counter() - start
    shutil.rmtree(co, ignore_errors=True)

    # dsv: a LocalCluster of 2 worker processes, run from a directory with no store.
    nostore = work / f"nostore-{rnd}"
    nostore.mkdir()
    cache = work / f"cache-d-{rnd}"
    os.environ["DSV_CACHE"] = str(cache)
    old_cwd = os.getcwd()
    os.chdir(nostore)
    try:
        with LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as cluster, Client(cluster) as client:
            client.run(warm_imports)
            start = time.perf_counter()  # the cluster is up: time the reads, as for the peer
            for n in cfg["fte_versions"]:
                _, blocks, paths = read_bytes(
                    f"dsv://fte@v{n}/**/*.csv",
                    remote=cfg["fte_remote"],  # read_bytes takes the storage options as keywords
                    blocksize=None,
                    sample=False,
                    include_path=True,
                )
                counted = dask.compute(*[dask.delayed(count_rows)(b[0]) for b in blocks])
                prefix = f"fte@v{n}/"
                dask_counts = {
                    p.split(prefix, 1)[1]: c for p, c in zip(paths, counted)
                }
                result["versions"][str(n)] = (pandas_counts[n], dask_counts)
            result["dask-seconds"] = time.perf_counter() - start
    finally:
        os.chdir(old_cwd)
    result["clones"] = clone_dirs(cache)
    shutil.rmtree(cache, ignore_errors=True)
    return result


# --- setup ---------------------------------------------------------------------------------


def setup(cfg: dict, work: Path, data_dir: Path) -> Path:
    import s3fs

    tree = data_dir / "tree"
    say(f"generating the Parquet data in {tree} (kept between runs)")
    generate(tree, cfg["files"], cfg["file_mb"])
    parquet_bytes = sum(p.stat().st_size for p in (tree / "parquet").glob("*.parquet"))
    cfg["parquet_bytes"] = parquet_bytes
    say(f"  {cfg['files']} files, {parquet_bytes / 1e6:.0f} MB")

    fs = s3fs.S3FileSystem()
    if "a" in cfg["only"] or "b" in cfg["only"] or "c" in cfg["only"]:
        store = work / "store"
        store.mkdir()
        dsv_cli("init", "-q", cwd=store)
        say("dsv commit + push of the data (once)")
        start = time.perf_counter()
        dsv_cli("commit", str(tree), "-d", "bench", "--tag", "v1", "-m", "bench data", "-q", cwd=store)
        dsv_cli("remote", "add", "origin", cfg["remote"], cwd=store)
        dsv_cli("push", cwd=store)
        say(f"  {time.perf_counter() - start:.1f} s")
        say("s3fs upload of the same files to s3://BUCKET/plain/ (once)")
        start = time.perf_counter()
        fs.put(str(tree) + "/", f"{cfg['bucket']}/plain/", recursive=True)
        say(f"  {time.perf_counter() - start:.1f} s")
        shutil.rmtree(store)

    if "d" in cfg["only"]:
        say("FiveThirtyEight v1..v4: commit each as fte@vN, push (once)")
        store = work / "fte-store"
        store.mkdir()
        dsv_cli("init", "-q", cwd=store)
        for n in cfg["fte_versions"]:
            tarball = sorted(Path(cfg["data"]).glob(f"fivethirtyeight-v{n}-*.tar.gz"))
            if not tarball:
                die(f"missing fivethirtyeight-v{n}-*.tar.gz in {cfg['data']} (set DSV_DATA)")
            out = work / f"fte-v{n}"
            with tarfile.open(tarball[0]) as tar:
                tar.extractall(out, filter="data")
            (top,) = list(out.iterdir())
            dsv_cli("commit", str(top), "-d", "fte", "--tag", f"v{n}", "-m", tarball[0].name, "-q",
                    cwd=store)
            shutil.rmtree(out)
        dsv_cli("remote", "add", "origin", cfg["fte_remote"], cwd=store)
        dsv_cli("push", cwd=store)
        shutil.rmtree(store)
    return tree


# --- report ----------------------------------------------------------------------------------


def span(values, fmt="{:.2f}") -> str:
    values = list(values)
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def in_child(kind: str, rnd: int, cfg: dict, work: Path) -> dict:
    """Runs one round of (a)+(b) or (d) in a fresh Python process (a fresh client: nothing
    of an earlier round's node cache or open stores carries over); its result as a dict."""
    out = work / f"result-{kind}-{rnd}.json"
    env = dict(os.environ, BENCH_CFG=json.dumps(cfg))
    done = subprocess.run([sys.executable, str(HERE), "round", kind, str(rnd), str(out)], env=env)
    if done.returncode != 0:
        die(f"round {rnd} of ({kind}) failed (exit {done.returncode})")
    return json.loads(out.read_text())


def child_round(kind: str, rnd: str, out: str) -> None:
    cfg = json.loads(os.environ["BENCH_CFG"])
    work = Path(os.environ["BENCH_WORK"])
    result = round_ab(cfg, work, int(rnd)) if kind == "ab" else round_d(cfg, work, int(rnd))
    Path(out).write_text(json.dumps(result))


def run() -> None:
    work = Path(os.environ["BENCH_WORK"])
    data_dir = Path(os.environ["BENCH_DATA_DIR"])
    bucket = os.environ["BENCH_BUCKET"]
    cfg = {
        "bucket": bucket,
        "remote": f"s3://{bucket}/dsv",
        "fte_remote": f"s3://{bucket}/fte",
        "workers": int(os.environ.get("BENCH_WORKERS", "4")),
        "files": int(os.environ.get("BENCH_FILES", "16")),
        "file_mb": int(os.environ.get("BENCH_FILE_MB", "64")),
        "rounds": int(os.environ.get("BENCH_ROUNDS", "3")),
        "only": os.environ.get("BENCH_ONLY", "abcd"),
        "data": os.environ["DSV_DATA"],
        "fte_versions": [1, 2, 3, 4],
    }
    import dask
    import distributed
    import dsv
    import pandas
    import pyarrow
    import s3fs

    say(f"dsv {dsv.__build__}; dask {dask.__version__}, distributed {distributed.__version__}, "
        f"s3fs {s3fs.__version__}, pandas {pandas.__version__}, pyarrow {pyarrow.__version__}")
    tree = setup(cfg, work, data_dir)
    cfg["tree"] = str(tree)
    ab, c_dsv, c_s3, d = [], [], [], []
    for rnd in range(1, cfg["rounds"] + 1):
        say(f"round {rnd} (load {load()})")
        if "a" in cfg["only"] or "b" in cfg["only"]:
            ab.append(in_child("ab", rnd, cfg, work))
        if "c" in cfg["only"]:
            for kind, into in (("dsv", c_dsv), ("s3fs", c_s3)):
                r = race(cfg, work, rnd, kind, tree)
                into.append(r)
                say(f"  round {rnd} 16 processes {kind:4}: {r['seconds']:.2f} s, {r['correct']}/16 "
                    f"correct, {len(r['errors'])} errors, {r['clones']} clone dirs")
        if "d" in cfg["only"]:
            r = in_child("d", rnd, cfg, work)
            d.append(r)
            say(f"  round {rnd} FiveThirtyEight: dask over dsv:// {r['dask-seconds']:.1f} s, "
                f"pandas over checkouts {r['pandas-seconds']:.1f} s, {r['clones']} clone dirs")

    print()
    print(f"bench-cluster: {cfg['rounds']} rounds, ranges min-max; ratio = peer / dsv "
          "(above 1: dsv faster) unless said; load average at the end: " + load())
    fmt = "{:<58} {:>14} {:>14} {:>12}  {}"
    print(fmt.format("measure", "dsv", "peer", "ratio", "target"))
    failed = []
    if ab:
        gb = cfg["parquet_bytes"] / 1e9
        cold = [r["dsv-first"] for r in ab]
        s3_first = [r["s3fs-first"] for r in ab]
        warm = [r["dsv-second"] for r in ab]
        s3_second = [r["s3fs-second"] for r in ab]
        cold_ratio = [r["dsv-first"] / r["s3fs-first"] for r in ab]
        warm_ratio = [r["s3fs-second"] / r["dsv-second"] for r in ab]
        print(fmt.format(f"(a) cold read {gb:.2f} GB Parquet, {cfg['workers']} Dask workers (s)",
                         span(cold), span(s3_first), span(cold_ratio) + " dsv/s3fs",
                         "dsv/s3fs <= 1.0"))
        print(fmt.format("(b) warm re-read, same workers (s)", span(warm), span(s3_second),
                         span(warm_ratio) + "x", ">= 1.5x"))
        print(fmt.format("    reference: the same read from local files (s)",
                         span(r["local"] for r in ab), "", "", "the floor"))
        for phase, label in (("first", "(a)"), ("second", "(b)")):
            for side, key in ((0, "client+workers"), (1, "S3 server")):
                dsv_cpu = [r[f"dsv-{phase}-cpu"][side] for r in ab]
                s3_cpu = [r[f"s3fs-{phase}-cpu"][side] for r in ab]
                ratio = [a / b for a, b in zip(dsv_cpu, s3_cpu) if b > 0]
                print(fmt.format(f"    {label} CPU seconds, {key}", span(dsv_cpu, "{:.1f}"),
                                 span(s3_cpu, "{:.1f}"),
                                 span(ratio) + " dsv/s3fs" if ratio else "", ""))
        print(fmt.format("    local files: CPU seconds, client+workers",
                         span((r["local-cpu"][0] for r in ab), "{:.1f}"), "", "", ""))
        print(fmt.format("    clone dirs per node / cache bytes / packs after (a)+(b)",
                         span((r["clones"] for r in ab), "{}"),
                         span((r["cache-bytes"] / 1e6 for r in ab), "{:.0f} MB"),
                         span((r.get("cache-packs", 0) for r in ab), "{} packs"), ""))
        print(f"    checked: every read gave rows/sum/chars {ab[0]['dsv-check']}")
        if max(cold_ratio) > 1.0:
            failed.append("a")
        if min(warm_ratio) < 1.5:
            failed.append("b")
    if c_dsv:
        print(fmt.format("(c) 16 processes open_remote + read at once (s)",
                         span(r["seconds"] for r in c_dsv), span(r["seconds"] for r in c_s3),
                         span((s["seconds"] / r["seconds"] for r, s in zip(c_dsv, c_s3))) + "x",
                         "1 clone, 16/16, no error"))
        print(fmt.format("    clone dirs / correct reads / errors (dsv)",
                         span((r["clones"] for r in c_dsv), "{}"),
                         span((r["correct"] for r in c_dsv), "{}/16"),
                         span((len(r["errors"]) for r in c_dsv), "{}"), ""))
        for r in c_dsv + c_s3:
            for e in r["errors"][:3]:
                print(f"    error: {e}")
        if any(r["clones"] != 1 or r["correct"] != 16 or r["errors"] for r in c_dsv):
            failed.append("c")
    if d:
        print(fmt.format("(d) FiveThirtyEight v1-v4: Dask 2 workers vs checkout+pandas (s)",
                         span(r["dask-seconds"] for r in d), span(r["pandas-seconds"] for r in d),
                         span((r["pandas-seconds"] / r["dask-seconds"] for r in d)) + "x",
                         "equal rows, 1 clone"))
        equal = True
        for n in cfg["fte_versions"]:
            pc, dc = d[-1]["versions"][str(n)]
            rows_p = sum(v for v in pc.values() if v is not None)
            rows_d = sum(v for v in dc.values() if v is not None)
            skipped_p = sum(1 for v in pc.values() if v is None)
            skipped_d = sum(1 for v in dc.values() if v is None)
            same = all(r["versions"][str(n)][0] == r["versions"][str(n)][1] for r in d)
            equal &= same
            print(fmt.format(f"    fte@v{n}: rows (CSVs read, skipped)",
                             f"{rows_d} ({len(dc) - skipped_d}, {skipped_d})",
                             f"{rows_p} ({len(pc) - skipped_p}, {skipped_p})",
                             "equal" if same else "DIFFER", ""))
            if not same:
                only = sorted(set(pc.items()) ^ set(dc.items()))[:5]
                print(f"      differences: {only}")
        print(fmt.format("    clone dirs per node (client + 2 workers)",
                         span((r["clones"] for r in d), "{}"), "", "", "1"))
        if not equal or any(r["clones"] != 1 for r in d):
            failed.append("d")
    print(f"targets missed: {', '.join(failed) if failed else 'none'}")
    for name in ("c", "d"):
        if name in failed:
            sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "open-race":
        open_race(*sys.argv[2:8])
    elif len(sys.argv) > 1 and sys.argv[1] == "round":
        child_round(*sys.argv[2:5])
    elif len(sys.argv) > 1 and sys.argv[1] == "run":
        run()
    else:
        die("usage: bench-cluster.py run | open-race ... (run scripts/bench-cluster)")
