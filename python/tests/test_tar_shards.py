"""dsv.torch.TarShardDataset: WebDataset tar shards made of the 10,000 MNIST test PNGs of
shared/data, pushed to the loopback S3 server and read from a clone of the push (no checkout,
no data in the store until read): every sample once over ranks x workers, byte for byte; a
seeded order; resume mid-epoch; malformed shards refused."""

from __future__ import annotations

import collections
import io
import os
import shutil
import tarfile
import uuid
import warnings
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

import dsv
from conftest import REPO, dsv_json, run_dsv, s3_env, skip_for
from dsv._tar import TarShard
from dsv.torch import DataLoader, TarShardDataset

MNIST = Path(os.environ.get("DSV_DATA", REPO.parent / "shared" / "data")) / "mnist-10k-test-png.tar.gz"
# Uneven shards: (first sample, samples, tar format).
SHARD_PLAN = [
    (0, 1300, tarfile.GNU_FORMAT),
    (1300, 700, tarfile.PAX_FORMAT),
    (2000, 1500, tarfile.USTAR_FORMAT),
    (3500, 900, tarfile.PAX_FORMAT),
    (4400, 1111, tarfile.USTAR_FORMAT),
    (5511, 1489, tarfile.GNU_FORMAT),
    (7000, 1000, tarfile.USTAR_FORMAT),
    (8000, 1200, tarfile.PAX_FORMAT),
    (9200, 800, tarfile.USTAR_FORMAT),
]
LONG_DIR = "a-directory-name-long-enough-that-the-member-path-needs-more-than-100-bytes-" * 2


def key_of(index: int) -> str:
    """The sample key of MNIST test image `index`: mostly `000123`; some need a GNU long name
    or a pax path (over 100 bytes, or not ASCII), as real shards' keys sometimes do."""
    if index % 97 == 5:
        return f"{LONG_DIR}/{index:06d}"
    if index % 89 == 7:
        return f"zählung-ß/{index:06d}"
    return f"{index:06d}"


def shard_path(n: int) -> str:
    return f"shards/mnist-{n:04d}.tar"


@pytest.fixture(scope="session")
def mnist() -> List[Tuple[bytes, bytes]]:
    """(png bytes, label as ASCII) of the 10,000 MNIST test images, in file order."""
    if not MNIST.is_file():
        skip_for("data", f"no {MNIST} (set DSV_DATA to the directory holding mnist-10k-test-png.tar.gz)")
    out = []
    with tarfile.open(MNIST) as tf:
        members = sorted((m for m in tf.getmembers() if m.isfile()), key=lambda m: m.name)
        for m in members:
            label = m.name.rsplit("num", 1)[1].split(".")[0]
            out.append((tf.extractfile(m).read(), label.encode()))
    assert len(out) == 10_000
    return out


def write_shards(root: Path, mnist: List[Tuple[bytes, bytes]]) -> None:
    """WebDataset shards: `KEY.png` then `KEY.cls` for each image (as the Skyplane tutorial's
    ImageNet tars hold `.jpg`/`.cls`), in the formats of SHARD_PLAN, plus a file that is not
    a shard."""
    (root / "shards").mkdir(parents=True)
    for n, (first, count, fmt) in enumerate(SHARD_PLAN):
        with tarfile.open(root / shard_path(n), "w", format=fmt, encoding="utf-8") as tf:
            for i in range(first, first + count):
                png, label = mnist[i]
                for ext, data in (("png", png), ("cls", label)):
                    name = f"{key_of(i)}.{ext}"
                    if fmt == tarfile.USTAR_FORMAT and (len(name) > 100 or not name.isascii()):
                        name = f"{i:06d}.{ext}"  # ustar can hold neither: a plain key there
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    info.mtime = 1_700_000_000
                    tf.addfile(info, io.BytesIO(data))
    (root / "README.txt").write_text("9 tar shards of MNIST test PNGs\n")


def expected_key(n: int, i: int) -> str:
    key = key_of(i)
    if SHARD_PLAN[n][2] == tarfile.USTAR_FORMAT and (len(key) + 4 > 100 or not key.isascii()):
        return f"{i:06d}"
    return key


@pytest.fixture(scope="session")
def expected(mnist) -> Dict[str, Tuple[str, bytes, bytes]]:
    """key -> (shard, png, cls) of every sample the shards hold."""
    out = {}
    for n, (first, count, _) in enumerate(SHARD_PLAN):
        for i in range(first, first + count):
            out[expected_key(n, i)] = (shard_path(n), *mnist[i])
    assert len(out) == 10_000
    return out


@pytest.fixture(scope="session")
def tar_remote(tmp_path_factory, s3_proxy, mnist) -> Dict[str, object]:
    """The shards committed as dataset `mnist-tars` (tag v1), pushed to the S3 server by a
    store that is then deleted, and a clone of the push: metadata only."""
    os.environ.update(s3_env(s3_proxy.url))
    base = tmp_path_factory.mktemp("tar-origin")
    data = base / "data"
    write_shards(data, mnist)
    run_dsv("init", str(base))
    store = base / ".dsv"
    dsv_json("commit", str(data), "--dataset", "mnist-tars", "-m", "shards", "--tag", "v1", store=store)
    url = f"s3://dsv-test/py-tar-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "mnist-tars", store=store)
    packed = sum(p.stat().st_size for p in (store / "packs").glob("*.pack"))
    shutil.rmtree(base)
    clone_dir = tmp_path_factory.mktemp("tar-clone") / "clone"
    s3_proxy.reset()
    clone = dsv.clone(url, clone_dir)
    local = sum(p.stat().st_size for p in (clone.path / "packs").glob("*.pack"))
    assert local < packed / 10, "a clone holds no file data"
    return {"store": clone, "packed_bytes": packed, "url": url}


@pytest.fixture()
def version(tar_remote):
    return tar_remote["store"].version("mnist-tars@v1")


def keys_of(batches) -> List[str]:
    return [k for batch in batches for k in batch["__key__"]]


def test_samples_match_the_pngs_byte_for_byte(version, expected, s3_proxy, tar_remote):
    """Read from the remote-only clone, in shard and tar order (no shuffle), each sample is the
    dict of its members' bytes; the data crossed the wire once."""
    seen_shards = []

    def check(sample):
        shard, png, cls = expected[sample["__key__"]]
        assert set(sample) == {"__key__", "__shard__", "png", "cls"}
        assert sample["__shard__"] == shard and sample["png"] == png and sample["cls"] == cls, sample["__key__"]
        seen_shards.append(shard)
        return sample["__key__"]

    ds = TarShardDataset(version, "shards/*.tar", transform=check)
    assert ds.shards == [shard_path(n) for n in range(len(SHARD_PLAN))]
    s3_proxy.reset()
    keys = list(ds)
    order = [expected_key(n, i) for n, (first, count, _) in enumerate(SHARD_PLAN) for i in range(first, first + count)]
    assert keys == order
    assert any(len(k) > 100 for k in keys) and any(not k.isascii() for k in keys)
    assert s3_proxy.down <= tar_remote["packed_bytes"] * 1.1 + 512 * 1024, (s3_proxy.down, tar_remote["packed_bytes"])
    # A list of paths takes them in its order; the second pass reads what the store kept.
    s3_proxy.reset()
    two = TarShardDataset(version, [shard_path(3), shard_path(1)])
    got = [s["__key__"] for s in two]
    assert got == [k for k in order if expected[k][0] in (shard_path(3),)] + [
        k for k in order if expected[k][0] == shard_path(1)
    ]
    assert s3_proxy.down < 64 * 1024


def test_the_parser_agrees_with_tarfile(tmp_path, version):
    """Names, sizes and bytes of the regular members, as tarfile gives them, for GNU long
    names and links, pax records (path, size, a global header), ustar prefixes, directories,
    symlinks and empty files; and for each shard of the version."""
    edge = tmp_path / "edge"
    edge.mkdir()
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        path = edge / f"edge-{fmt}.tar"
        headers = {"comment": "a global pax header"} if fmt == tarfile.PAX_FORMAT else {}
        with tarfile.open(path, "w", format=fmt, pax_headers=headers, encoding="utf-8") as tf:
            d = tarfile.TarInfo("dir")
            d.type = tarfile.DIRTYPE
            tf.addfile(d)
            for name, size in (("dir/" + "p" * 90 + "/prefixed.bin", 700), ("empty.txt", 0), ("x.bin", 513)):
                info = tarfile.TarInfo(name)
                info.size = size
                tf.addfile(info, io.BytesIO(bytes(range(256)) * 3))
            if fmt != tarfile.USTAR_FORMAT:
                info = tarfile.TarInfo("l" * 150 + "/ünïcode.bin")
                info.size = 1025
                tf.addfile(info, io.BytesIO(b"z" * 1025))
                link = tarfile.TarInfo("link-with-a-long-target")
                link.type = tarfile.SYMTYPE
                link.linkname = "t" * 200
                tf.addfile(link)
    run_dsv("init", str(tmp_path))
    dsv_json("commit", str(edge), "--dataset", "edge", "-m", "edge cases", store=tmp_path / ".dsv")
    edges = dsv.Store(tmp_path).version("edge")
    for v, paths in ((edges, edges.files()), (version, version.files("shards/*.tar")[:3])):
        for path in paths:
            with tarfile.open(fileobj=v.open(path)) as tf:
                want = [(m.name, m.size, tf.extractfile(m).read()) for m in tf.getmembers() if m.isreg()]
            with TarShard(v, path, window=4096) as shard:
                got = [(name, size, shard.read(offset, size)) for name, offset, size in shard.members()]
            assert got == want, path
            assert want, path


def collect(ds_for_rank, world: int, workers: int, context: str, batch: int = 64) -> List[str]:
    keys = []
    for rank in range(world):
        loader = DataLoader(ds_for_rank(rank), batch_size=batch, num_workers=workers, multiprocessing_context=context)
        keys += keys_of(loader)
    return keys


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_every_sample_once_over_ranks_and_workers(version, expected, context):
    # 9 shards over 2 ranks x 2 workers (each worker 2 or 3 shards).
    keys = collect(
        lambda r: TarShardDataset(version, "shards/*.tar", shuffle=True, seed=3, rank=r, world_size=2), 2, 2, context
    )
    assert len(keys) == len(expected) and set(keys) == set(expected)
    if context == "spawn":
        return  # spawned workers import torch afresh (seconds each): one layout is enough
    for world, workers in ((3, 2), (1, 3), (4, 1)):
        keys = collect(
            lambda r: TarShardDataset(version, "shards/*.tar", shuffle=True, seed=5, buffer_size=50, rank=r,
                                      world_size=world),
            world, workers, context,
        )
        assert collections.Counter(keys) == collections.Counter(list(expected)), (world, workers)
    # Fewer shards than ranks x workers: the workers without a shard read nothing, and say so.
    few = [shard_path(n) for n in (2, 4, 7, 8)]
    keys, shares = [], []
    for rank in range(3):
        ds = TarShardDataset(version, few, shuffle=True, seed=1, rank=rank, world_size=3)
        shares.append(ds.rank_shards())
        keys += [s["__key__"] for s in ds]
    # 4 shards over 3 ranks: 2, 1 and 1, each shard to exactly one rank.
    assert sorted(map(len, shares)) == [1, 1, 2], shares
    assert sorted(sum(shares, [])) == sorted(few), shares
    assert sorted(keys) == sorted(k for k, v in expected.items() if v[0] in few)
    keys = collect(lambda r: TarShardDataset(version, few, shuffle=True, seed=1, rank=r, world_size=3), 3, 2, "fork")
    assert sorted(keys) == sorted(k for k, v in expected.items() if v[0] in few)
    # A rank with no shard at all (5 ranks, 4 shards) reads nothing and warns.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(TarShardDataset(version, few, rank=4, world_size=5)) == []
    assert any("0 shard(s)" in str(w.message) for w in caught)


def test_order_is_a_function_of_seed_and_epoch(version, expected):
    def epoch_keys(seed, epoch, workers=0, **extra):
        ds = TarShardDataset(version, extra.pop("shards", "shards/*.tar"), shuffle=True, seed=seed, **extra)
        ds.set_epoch(epoch)
        if workers:
            return keys_of(DataLoader(ds, batch_size=100, num_workers=workers))
        return [s["__key__"] for s in ds]

    first = epoch_keys(7, 0)
    assert sorted(first) == sorted(expected)
    assert epoch_keys(7, 0) == first
    assert epoch_keys(7, 1) != first and sorted(epoch_keys(7, 1)) == sorted(first)
    assert epoch_keys(8, 0) != first
    # One shard (its order cannot change): the buffer's draws change with the epoch too.
    one = [epoch_keys(7, e, shards=[shard_path(0)]) for e in (0, 1)]
    assert one[0] != one[1] and sorted(one[0]) == sorted(one[1])
    # With workers too: the same twice, another the next epoch.
    with_workers = epoch_keys(7, 2, workers=2)
    assert epoch_keys(7, 2, workers=2) == with_workers and epoch_keys(7, 3, workers=2) != with_workers
    # The buffer mixes samples within a shard, not only the shard order.
    ds = TarShardDataset(version, "shards/*.tar", shuffle=True, seed=7)
    shard_order = ds.shard_order(0)
    assert shard_order != ds.shard_order(1) and sorted(shard_order) == ds.shards
    unshuffled = [s["__key__"] for s in TarShardDataset(version, shard_order)]
    assert first != unshuffled
    in_place = sum(a == b for a, b in zip(first, unshuffled))
    assert in_place < len(first) // 20, in_place
    # A small buffer keeps samples near their place in the stream; a larger one moves them further.
    def displacement(buffer_size):
        keys = epoch_keys(7, 0, buffer_size=buffer_size)
        where = {k: i for i, k in enumerate(unshuffled)}
        return max(abs(where[k] - i) for i, k in enumerate(keys))
    assert displacement(10) < displacement(1000)


def test_state_dict_resumes_mid_epoch(version, expected):
    def make(**extra):
        ds = TarShardDataset(version, "shards/*.tar", shuffle=True, seed=2, buffer_size=300, rank=1, world_size=2,
                             **extra)
        ds.set_epoch(4)
        return ds

    full = [s["__key__"] for s in make()]
    # In the training process.
    ds = make()
    it = iter(ds)
    head = [next(it)["__key__"] for _ in range(1234)]
    state = ds.state_dict()
    assert state["epoch"] == 4 and state["consumed"] == [1234] and state["samples_seen"] == 1234
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [s["__key__"] for s in resumed] == full
    assert [s["__key__"] for s in resumed] == full, "the next pass over the epoch is whole"

    # Through dsv.torch.DataLoader with two workers: it counts each worker's batches.
    loader_full = keys_of(DataLoader(make(), batch_size=32, num_workers=2))
    assert sorted(loader_full) == sorted(full)
    ds = make()
    consumed = []
    for step, batch in enumerate(DataLoader(ds, batch_size=32, num_workers=2), start=1):
        consumed += batch["__key__"]
        if step == 6:
            state = ds.state_dict()
            break
    assert state["workers"] == 2 and state["consumed"] == [96, 96] and consumed == loader_full[:192]
    again = make()
    again.load_state_dict(state)
    rest = keys_of(DataLoader(again, batch_size=32, num_workers=2))
    assert consumed + rest == loader_full
    # Resuming needs the same worker split; a state of another order is refused.
    other = make()
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="num_workers=2"):
        list(DataLoader(other, batch_size=32, num_workers=3))
    with pytest.raises(ValueError, match="seed"):
        TarShardDataset(version, "shards/*.tar", shuffle=True, seed=9, buffer_size=300, rank=1,
                        world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="rank"):
        TarShardDataset(version, "shards/*.tar", shuffle=True, seed=2, buffer_size=300, rank=0,
                        world_size=2).load_state_dict(state)


def test_persistent_workers_follow_set_epoch_and_resume(version, expected):
    ds = TarShardDataset(version, "shards/*.tar", shuffle=True, seed=4, buffer_size=200)
    loader = DataLoader(ds, batch_size=50, num_workers=2, persistent_workers=True)
    epochs = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        epochs.append(keys_of(loader))
        assert sorted(epochs[-1]) == sorted(expected)
    assert epochs[0] != epochs[1]
    ds.set_epoch(0)
    assert keys_of(loader) == epochs[0]
    # A resume position loaded between passes reaches the running workers.
    ds.load_state_dict({**ds.state_dict(), "epoch": 1, "workers": 2, "consumed": [100, 50]})
    rest = keys_of(loader)
    assert len(rest) == len(expected) - 150 and set(rest) < set(epochs[1])


def broken_tars(good: bytes) -> Dict[str, Tuple[bytes, str]]:
    """Malformed shards made from a good one: name -> (bytes, what the error must say)."""

    def with_size(buf: bytes, size_field: bytes) -> bytes:
        header = bytearray(buf[:512])
        header[124:136] = size_field
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
        return bytes(header) + buf[512:]

    with tarfile.open(fileobj=io.BytesIO(good), mode="r:") as tf:
        members = [tf.next() for _ in range(8)]  # 4 samples: png, cls, png, cls, ...
    bad_sum = bytearray(good)
    bad_sum[0] ^= 0x20
    long_name = io.BytesIO()
    with tarfile.open(fileobj=long_name, mode="w", format=tarfile.GNU_FORMAT) as tf:
        info = tarfile.TarInfo("n" * 300 + ".png")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
    pax_size = io.BytesIO()
    with tarfile.open(fileobj=pax_size, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("x.png")
        info.size, info.pax_headers = 3, {"size": "33"}
        tf.addfile(info, io.BytesIO(b"abc"))
    # "²": str.isdigit takes it, int() raises a bare ValueError (same length in UTF-8 as "33").
    non_ascii_size = pax_size.getvalue().replace(b"size=33\n", "size=\u00b2\n".encode())
    return {
        "non-ascii-pax-size.tar": (non_ascii_size, "not a number"),
        # The 4th sample's PNG cut short: the 3 samples before it are whole.
        "truncated.tar": (good[: members[6].offset_data + 10], "past the end of the file"),
        "cut-header.tar": (good[: members[2].offset + 200], "ends inside a header"),
        "huge-size.tar": (with_size(good, b"77777777777\0"), "past the end of the file"),
        "base256-size.tar": (with_size(good, b"\x80" + b"\0" * 3 + b"\x7f" + b"\xff" * 7), "past the end"),
        "bad-checksum.tar": (bytes(bad_sum), "bad checksum"),
        "not-a-tar.tar": (b"\x89PNG\r\n\x1a\n" + b"\1" * 2000, "does not parse"),
        "empty.tar": (b"", "empty"),
        "huge-long-name.tar": (with_size(long_name.getvalue(), b"77777777777\0"), "GNU long name claims"),
    }


def test_malformed_shards_raise_invalid_tar(tmp_path, version):
    good = version.read(shard_path(2), 0, 512 * 40)
    bad = tmp_path / "bad"
    (bad / "shards").mkdir(parents=True)
    cases = broken_tars(good)
    for name, (data, _) in cases.items():
        (bad / "shards" / name).write_bytes(data)
    run_dsv("init", str(tmp_path))
    dsv_json("commit", str(bad), "--dataset", "bad", "-m", "broken shards", store=tmp_path / ".dsv")
    v = dsv.Store(tmp_path).version("bad")
    for name, (_, says) in cases.items():
        path = f"shards/{name}"
        with pytest.raises(dsv.InvalidTar) as e:
            list(TarShardDataset(v, [path]))
        assert path in str(e.value) and says in str(e.value), str(e.value)
        assert e.value.shard == path and isinstance(e.value, (dsv.Error, ValueError))
    # In a DataLoader worker too, after the samples read before the break.
    loader = DataLoader(TarShardDataset(v, ["shards/truncated.tar"]), batch_size=1, num_workers=1)
    seen = []
    with pytest.raises(dsv.InvalidTar, match="shards/truncated.tar"):
        for batch in loader:
            seen += batch["__key__"]
    # The samples before the break came through (the third ends where the fourth begins).
    assert seen == ["002000", "002001"]
    # Other files are not shards at all.
    with pytest.raises(dsv.NotAFile):
        TarShardDataset(v, ["shards"])
    with pytest.raises(dsv.PathNotFound):
        TarShardDataset(v, ["shards/missing.tar"])
    with pytest.raises(dsv.Error, match="matches"):
        TarShardDataset(v, "nothing/*.tar")
