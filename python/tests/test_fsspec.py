"""The `dsv` fsspec protocol."""

from __future__ import annotations

import fsspec
import pytest

import dsv
from dsv.fsspec import DsvFileSystem


def test_fsspec_open_reads_a_version(local_store, monkeypatch):
    monkeypatch.chdir(local_store["base"])
    files = local_store["files_v1"]
    fsspec.config.conf.clear()
    with fsspec.open("dsv://mnist@v1/labels.csv", "rb") as f:
        assert f.read() == files["labels.csv"]
    with fsspec.open("dsv://mnist@v2/labels.csv", "rt") as f:
        assert f.read() == "relabelled\n"
    with fsspec.open("dsv://mnist@v1/labels.csv", "rb", store=str(local_store["base"])) as f:
        assert f.read(4) == files["labels.csv"][:4]


def test_the_file_system_lists_stats_and_cats(local_store):
    fs = fsspec.filesystem("dsv", store=dsv.Store(local_store["base"]))
    assert isinstance(fs, DsvFileSystem)
    files = local_store["files_v1"]
    assert sorted(fs.ls("mnist@v1", detail=False)) == ["mnist@v1/labels.csv", "mnist@v1/test", "mnist@v1/train"]
    info = fs.info("dsv://mnist@v1/train/2/00002.bin")
    assert info["type"] == "file" and info["size"] == len(files["train/2/00002.bin"])
    assert fs.info("mnist@v1/train")["type"] == "directory"
    assert fs.isdir("mnist@v1/train") and fs.isfile("mnist@v1/labels.csv")
    assert fs.cat_file("mnist@v1/labels.csv", start=2, end=9) == files["labels.csv"][2:9]
    assert fs.cat_file("mnist@v1/labels.csv", start=-5) == files["labels.csv"][-5:]
    found = fs.find("mnist@v1/test")
    assert sorted(found) == sorted(f"mnist@v1/{p}" for p in files if p.startswith("test/"))
    assert fs.exists("mnist@v1/labels.csv") and not fs.exists("mnist@v1/nope")
    assert sorted(fs.glob("mnist@v1/train/1/*.bin")) == sorted(f"mnist@v1/{p}" for p in files if p.startswith("train/1/"))
    with pytest.raises(FileNotFoundError):
        fs.info("mnist@v1/nope")
    with pytest.raises(PermissionError):
        fs.open("mnist@v1/new.txt", "wb")
    with pytest.raises(PermissionError):
        fs.rm("mnist@v1/labels.csv")
    with pytest.raises(dsv.UnknownRevision):
        fs.info("mnist@v7/labels.csv")


def test_the_protocol_is_found_without_importing_dsv(local_store):
    import subprocess
    import sys

    code = (
        "import sys, fsspec\n"
        f"f = fsspec.open('dsv://mnist@v1/labels.csv', store={str(local_store['base'])!r}).open()\n"
        "data = f.read()\n"
        "assert 'dsv' in sys.modules\n"
        "print(len(data))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(done.stdout) == len(local_store["files_v1"]["labels.csv"])
