"""Issue 39 (cross-version deltas): old versions of a table that grows a little each version
are stored as delta frames (forward deltas at commit, reverse deltas at `dsv gc`); the
Python package reads every version byte-identical, from the store and remote-only from a
clone (a delta's bases fetched with it)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import dsv
from conftest import run_dsv

BLOCKS = 48
DAYS = 600


def table(extra: int) -> bytes:
    """The table on day `extra`: BLOCKS blocks of rows, each DAYS + extra rows long (every
    64 KiB block of the file changes from one version to the next)."""
    rows = ["country,day,cases,deaths\n"]
    for country in range(BLOCKS):
        for day in range(DAYS + extra):
            cases = (country * 7919 + day * 104729) % 100003
            deaths = (country * 31 + day * 17) % 997
            rows.append(f"country-{country:03},2020-{day:05},{cases},{deaths}\n")
    return "".join(rows).encode()


def format_2_packs(store: Path) -> List[Path]:
    """The packs of `store` (a `.dsv`) of pack format 2: those holding delta frames (their
    trailer ends with the magic DSVPEND2)."""
    found = []
    for pack in sorted((store / "packs").glob("*.pack")):
        with open(pack, "rb") as f:
            f.seek(-8, 2)
            if f.read(8) == b"DSVPEND2":
                found.append(pack)
    return found


def test_every_version_of_a_delta_chain_reads_byte_identical_here_and_remote_only(tmp_path):
    root = tmp_path / "w"
    run_dsv("init", str(root))
    store = root / ".dsv"
    versions: Dict[str, bytes] = {}
    for day in range(4):
        (root / "data").mkdir(exist_ok=True)
        (root / "data" / "table.csv").write_bytes(table(day))
        run_dsv("commit", str(root / "data"), "--dataset", "ds", "-m", f"day {day}", store=store)
        versions[f"ds~{3 - day}" if day < 3 else "ds"] = table(day)
    # Reverse deltas: the head whole, older versions as deltas against newer ones.
    run_dsv("gc", store=store)
    assert format_2_packs(store), "no pack holds a delta frame: nothing here tests deltas"

    local = dsv.Store(store)
    for revision, expected in versions.items():
        v = local.version(revision)
        assert v.read("table.csv") == expected, revision
        with v.open("table.csv") as f:
            f.seek(1_000_000)
            assert f.read(70_000) == expected[1_000_000:1_070_000], revision

    # Remote-only: a clone of a file:// remote reads each version, fetching the delta
    # frames with their bases.
    remote = tmp_path / "remote"
    run_dsv("remote", "add", "origin", f"file://{remote}", store=store)
    run_dsv("push", store=store)
    clone = dsv.clone(f"file://{remote}", tmp_path / "clone")
    for revision in ["ds~3", "ds", "ds~1"]:
        v = clone.version(revision)
        with v.open("table.csv") as f:
            f.seek(500_000)
            assert f.read(200_000) == versions[revision][500_000:700_000], revision
        assert v.read("table.csv") == versions[revision], revision
