"""The cache limit (issue 37): a store setting every reader of the store honours. An epoch
over a remote-only version larger than the limit keeps the store within the limit plus one
fetch, every sample right, and data no remote holds is never evicted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dsv
from dsv.torch import IterableVersionDataset

# One fetch of the read engine (a frame or two of the remote's packs, each near 1 MiB): the
# most a store may hold past its limit.
ONE_FETCH = 2 * 1024 * 1024 + 256 * 1024
LIMIT = 3_000_000


def pack_bytes(store: dsv.Store) -> int:
    total = 0
    for pack in (Path(store.path) / "packs").glob("*.pack"):
        try:
            total += pack.stat().st_size
        except FileNotFoundError:
            pass  # evicted since listed
    return total


def test_the_limit_is_a_store_setting_in_bytes_or_a_size(tmp_path, remote_dataset):
    store = dsv.clone(remote_dataset["url"], tmp_path / "clone")
    assert store.cache_limit is None
    store.set_cache_limit("10GiB")
    assert store.cache_limit == 10 * 1024**3
    assert dsv.Store(tmp_path / "clone").cache_limit == 10 * 1024**3
    store.set_cache_limit(LIMIT)
    assert store.cache_limit == LIMIT
    for bad in (0, "lots", 1.5, -1):
        with pytest.raises((ValueError, OverflowError)):
            store.set_cache_limit(bad)
    assert store.cache_limit == LIMIT
    store.set_cache_limit(None)
    assert store.cache_limit is None


def test_an_epoch_over_a_remote_only_version_stays_within_the_limit(tmp_path, remote_dataset, s3_proxy):
    files = remote_dataset["files"]
    assert remote_dataset["packed_bytes"] > 2.5 * LIMIT
    store = dsv.clone(remote_dataset["url"], tmp_path / "clone")
    # Data no remote holds: committed here, never pushed.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "only-here.bin").write_bytes(b"no remote has this\n" * 5000)
    store.commit(mine, dataset="mine", message="local only")
    store.set_cache_limit(LIMIT)
    dataset = IterableVersionDataset(store.version("mnist@v1"))
    s3_proxy.reset()
    peak = 0
    seen = 0
    for path, data in dataset:
        assert data == files[path], path
        seen += 1
        held = pack_bytes(store)
        peak = max(peak, held)
        assert held <= LIMIT + ONE_FETCH, (path, held)
    assert seen == len(files)
    down = s3_proxy.down
    print(f"peak pack bytes {peak}, limit {LIMIT}, data {remote_dataset['packed_bytes']}, downloaded {down}")
    # The remote's frames (about 1 MiB) are the unit of a fetch, and files of one directory
    # may alternate between two frames: some frames are fetched again after an eviction.
    # (Measured 1.0x-1.5x here; a limit under two frames, such as 1.5 MB, thrashes: a
    # limit should hold a few frames per reading process.)
    assert down <= 2.5 * remote_dataset["packed_bytes"], down
    # Two DataLoader workers (processes of their own, one store): still bounded, still right.
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="fork")
    got = {path: data for path, data in loader}
    assert got == files
    assert pack_bytes(store) <= LIMIT + 2 * ONE_FETCH
    # The local-only data is still here, whole.
    assert store.version("mine").read("only-here.bin") == b"no remote has this\n" * 5000


def test_the_node_local_clone_of_open_remote_is_bounded_too(tmp_path, remote_dataset, s3_proxy):
    store = dsv.open_remote(remote_dataset["url"], cache=tmp_path / "cache")
    limit = 3_000_000
    store.set_cache_limit(limit)
    version = store.version("mnist@v1")
    s3_proxy.reset()
    for path in version.files():
        assert version.read(path) == remote_dataset["files"][path]
        assert pack_bytes(store) <= limit + ONE_FETCH
    # Reads in order without a prefetcher: most frames cross the wire once (files of one
    # directory may alternate between frames).
    print(f"downloaded {s3_proxy.down} for {remote_dataset['packed_bytes']}")
    assert s3_proxy.down <= 2 * remote_dataset["packed_bytes"], s3_proxy.down
    assert pack_bytes(store) < remote_dataset["packed_bytes"] / 2
