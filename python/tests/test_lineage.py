"""dsv.lineage: the record of what a loader read (version, tree, tags, remotes, selection,
order, samples seen, lock hash, tracker run), proven by the real `dsv audit --lineage`
(a tampered record fails with a clear report), and the adapters against the real MLflow
(file store), W&B (offline) and OpenLineage (file transport) libraries."""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import dsv
import dsv.lineage
from conftest import REPO, DSV_BIN, dsv_json, need, run_dsv, write_dataset

torch = need("torch")
import dsv.torch  # noqa: E402


def audit(record_path: Path, store: Path) -> tuple:
    """`dsv --json audit --lineage FILE` with the real binary: (exit code, parsed output)."""
    done = run_dsv("--json", "audit", "--lineage", str(record_path), store=store, check=False)
    text = done.stdout if done.stdout.strip() else done.stderr
    return done.returncode, json.loads(text)


def failed(report: Dict[str, Any]) -> Dict[str, str]:
    return {c["check"]: c["detail"] for c in report["checks"] if not c["ok"]}


def tar_shard(samples: List[int]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in samples:
            for ext, data in (("txt", f"sample {i}".encode()), ("cls", str(i % 3).encode())):
                info = tarfile.TarInfo(f"{i:05d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """A store with `mnist` v1 (60 files) and v2 (labels changed), and `shards` (6 tar
    shards), pushed to a file:// remote `origin`; a lock file pinning mnist@v1."""
    base = tmp_path_factory.mktemp("lineage")
    data = base / "data"
    write_dataset(data, 60)
    run_dsv("init", str(base))
    store = base / ".dsv"
    dsv_json("commit", str(data), "--dataset", "mnist", "-m", "first", "--tag", "v1", store=store)
    (data / "labels.csv").write_text("relabelled\n")
    dsv_json("commit", str(data), "--dataset", "mnist", "-m", "second", "--tag", "v2", store=store)
    shards = base / "shards"
    (shards / "shards").mkdir(parents=True)
    for n in range(6):
        (shards / "shards" / f"{n:03d}.tar").write_bytes(tar_shard(list(range(n * 5, n * 5 + 5))))
    pq = need("pyarrow.parquet")
    (shards / "rows").mkdir()
    for n in range(2):
        table = need("pyarrow").table({"x": list(range(n * 10, n * 10 + 10))})
        pq.write_table(table, shards / "rows" / f"{n}.parquet", row_group_size=4)
    dsv_json("commit", str(shards), "--dataset", "shards", "-m", "tars", "--tag", "v1", store=store)
    url = f"file://{base / 'remote'}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "mnist", store=store)
    run_dsv("push", "shards", store=store)
    lock = base / "dsv.lock"
    lock.write_text(run_dsv("lock", "mnist@v1", store=store).stdout)
    pinned = json.loads(lock.read_text())["datasets"]["mnist"]
    return {"base": base, "store": store, "url": url, "lock": lock, "pinned": pinned}


def trained(project: Dict[str, Any], seen: int = 11) -> tuple:
    """Rank 1 of 2 of a shuffled IterableVersionDataset over train/**, `seen` samples read."""
    version = dsv.Store(project["store"]).version("mnist@v1")
    ds = dsv.torch.IterableVersionDataset(version, include="train/**", shuffle=True, seed=7, rank=1, world_size=2)
    ds.set_epoch(3)
    it = iter(ds)
    read = [next(it)[0] for _ in range(seen)]
    return ds, read


def test_the_record_of_an_iterable_dataset_names_the_version_selection_order_and_samples(project, tmp_path):
    ds, read = trained(project)
    version = ds.version
    record = dsv.lineage.record(ds, lock_file=project["lock"])
    assert record["schema"] == "dsv.lineage/1"
    assert record["uri"] == f"dsv://mnist@{version.id}"
    assert record["version"] == version.id == project["pinned"]["version"]
    assert record["tree"] == project["pinned"]["tree"]
    assert record["tags"] == ["v1"]
    assert [(r["name"], r["url"]) for r in record["remotes"]] == [("origin", project["url"])]
    train = version.files("train/**")
    sizes = {e["path"]: e["size"] for e in version.walk("") if e["type"] == "file"}
    assert record["selection"]["include"] == ["train/**"]
    assert record["selection"]["files"] == len(train) == 54
    assert record["selection"]["bytes"] == sum(sizes[p] for p in train)
    assert record["loader"] == "IterableVersionDataset"
    assert record["order"] == {
        "shuffle": True, "seed": 7, "epoch": 3, "rank": 1, "world_size": 2, "workers": None,
        "equal_per_rank": False, "batch_size": None,
    }
    # The samples are the ones the loader yielded, in order.
    assert record["samples"]["seen"] == 11
    assert record["samples"]["ids"] == read
    assert record["samples"]["digest"] == dsv._dsv.ids_digest(read)
    assert record["lock"]["pins_version"] is True
    assert record["lock"]["blake3"] == dsv._dsv.blake3_hex(project["lock"].read_bytes())
    assert record["run_id"] is None
    # A DataLoader over it records its workers; write/read round-trip.
    # What the loaders' lineage() method runs.
    assert {**dsv.lineage.lineage_method(ds, lock_file=project["lock"]), "created": None} == {**record, "created": None}
    loader = dsv.torch.DataLoader(ds, batch_size=4, num_workers=0)
    assert dsv.lineage.record(loader)["order"]["workers"] == 0
    path = dsv.lineage.write(record, tmp_path / "dsv-lineage.json")
    assert dsv.lineage.read(path) == record
    # The audit checks the lock the record names, when it finds it.
    code, report = audit(path, project["store"])
    assert code == 0 and report["checks"][-1] == {
        "check": "lock", "ok": True, "detail": f"{project['lock']} pins mnist@{version.id[:12]}"
    }, report
    lock = tmp_path / "dsv.lock"
    lock.write_bytes(project["lock"].read_bytes())
    path = dsv.lineage.write(dsv.lineage.record(ds, lock_file=lock), tmp_path / "with-lock.json")
    lock.write_text(run_dsv("lock", "mnist@v2", store=project["store"]).stdout)
    code, report = audit(path, project["store"])
    assert code == 1 and "the lock changed since the run" in failed(report)["lock"]
    # A record naming some other file as its lock (outside input) learns nothing of it.
    secret = tmp_path / "secret.txt"
    secret.write_text("not a lock\n")
    forged = dict(dsv.lineage.read(path))
    forged["lock"] = {**forged["lock"], "path": str(secret)}
    lock.unlink()
    code, report = audit(dsv.lineage.write(forged, tmp_path / "forged-lock.json"), project["store"])
    assert code == 1 and failed(report)["lock"].startswith(f"invalid lock file {secret}:"), report
    assert dsv._dsv.blake3_hex(secret.read_bytes()) not in json.dumps(report)
    with pytest.raises(ValueError, match="samples_seen must be between 0 and 27"):
        dsv.lineage.record(ds, samples_seen=28)
    with pytest.raises(ValueError, match="not str"):
        dsv.lineage.record("mnist@v1")


def test_audit_lineage_proves_a_record_and_names_what_a_tampered_one_gets_wrong(project, tmp_path):
    ds, read = trained(project)
    store = project["store"]
    record = dsv.lineage.record(ds)
    good = dsv.lineage.write(record, tmp_path / "good.json")
    code, report = audit(good, store)
    assert code == 0, report
    assert report["proven"] and report["samples_proven"] and report["samples_seen"] == 11
    assert [c["check"] for c in report["checks"]] == ["version", "dataset", "tree", "uri", "selection", "samples"]
    # The human output, by hand (no cargo-insta here): one line a check.
    human = run_dsv("audit", "--lineage", str(good), store=store).stdout
    assert human.startswith(f"{good} is proven: mnist@{record['version'][:12]} (IterableVersionDataset), 11 samples proven")
    assert "\nok   samples   the first 11 of rank 1 of 2's 27 samples in epoch 3" in human

    def tampered(name: str, change) -> tuple:
        bad = json.loads(json.dumps(record))
        change(bad)
        return audit(dsv.lineage.write(bad, tmp_path / f"{name}.json"), store)

    v2 = dsv.Store(store).version("mnist@v2")

    def other_version(r):
        r["version"], r["uri"] = v2.id, f"dsv://mnist@{v2.id}"

    code, report = tampered("other-version", other_version)
    assert code == 1 and not report["proven"]
    assert "the version's root tree is" in failed(report)["tree"]

    def one_more(r):
        r["samples"]["seen"] += 1
        r["samples"]["ids"] = None

    code, report = tampered("one-more", one_more)
    assert code == 1 and set(failed(report)) == {"samples"}
    assert "the first 12 samples of rank 1 of 2 in epoch 3 have digest" in failed(report)["samples"]

    def other_sample(r):
        r["samples"]["ids"][4] = "test/00000.bin"

    code, report = tampered("other-sample", other_sample)
    assert code == 1 and "differ from the order at sample 4" in failed(report)["samples"]

    def other_epoch(r):
        r["order"]["epoch"] = 4

    code, report = tampered("other-epoch", other_epoch)
    assert code == 1 and set(failed(report)) == {"samples"}

    def too_many(r):
        r["samples"]["seen"] = 28

    code, report = tampered("too-many", too_many)
    assert code == 1 and "but its order has 27" in failed(report)["samples"]

    def wider(r):
        r["selection"]["include"] = ["**"]

    code, report = tampered("wider", wider)
    assert code == 1 and set(failed(report)) == {"selection"}

    # A file that is no record is an error (exit 3), not a finding.
    other = tmp_path / "schema.json"
    other.write_text(json.dumps({**record, "schema": "dsv.lineage/9"}))
    code, error = audit(other, store)
    assert code == 3 and "its schema is \"dsv.lineage/9\", not \"dsv.lineage/1\"" in error["error"]["message"], error
    code, error = audit(tmp_path / "missing.json", store)
    assert code == 6


def test_with_worker_processes_the_record_names_the_samples_the_loop_got(project, tmp_path):
    version = dsv.Store(project["store"]).version("mnist@v1")
    ds = dsv.torch.IterableVersionDataset(version, shuffle=True, seed=11, rank=0, world_size=3)
    loader = dsv.torch.DataLoader(ds, batch_size=3, num_workers=2)
    got: List[str] = []
    for batch in loader:
        got.extend(batch[0])
        if len(got) == 12:
            break
    record = dsv.lineage.record(loader)
    assert record["order"]["workers"] == 2 and record["order"]["batch_size"] == 3
    assert record["samples"]["ids"] == got
    code, report = audit(dsv.lineage.write(record, tmp_path / "workers.json"), project["store"])
    assert code == 0 and report["samples_proven"], report
    # equal_per_rank pads the order (54 files, 4 ranks: 56): the last rank's whole epoch.
    padded = dsv.torch.IterableVersionDataset(
        version, include="train/**", shuffle=True, seed=2, equal_per_rank=True, rank=3, world_size=4
    )
    got = [path for path, _ in padded]
    record = dsv.lineage.record(padded, epoch=0, samples_seen=len(got))
    assert len(got) == 14 and record["samples"]["ids"] == got
    code, report = audit(dsv.lineage.write(record, tmp_path / "padded.json"), project["store"])
    assert code == 0 and report["samples_proven"], report


def test_audit_lineage_fetches_the_version_from_a_remote_the_record_names(project, tmp_path):
    ds, _ = trained(project, seen=5)
    record = dsv.lineage.write(dsv.lineage.record(ds), tmp_path / "dsv-lineage.json")
    # A reviewer's machine: a store of its own with the same bucket as its remote.
    run_dsv("init", str(tmp_path / "reviewer"))
    reviewer = tmp_path / "reviewer" / ".dsv"
    code, report = audit(record, reviewer)
    assert code == 1 and "dsv remote add NAME " + project["url"] in failed(report)["version"]
    run_dsv("remote", "add", "team", project["url"], store=reviewer)
    code, report = audit(record, reviewer)
    assert code == 0, report
    assert report["fetched_from"] == "team" and report["samples_proven"]


def test_tar_shards_parquet_rows_version_dataset_and_version_records_are_audited(project, tmp_path):
    store = dsv.Store(project["store"])
    shards = store.version("shards@v1")
    tar = dsv.torch.TarShardDataset(shards, "shards/*.tar", shuffle=True, seed=5, rank=0, world_size=2)
    tar.set_epoch(1)
    it = iter(tar)
    for _ in range(7):
        next(it)
    record = dsv.lineage.record(tar)
    assert record["selection"]["paths"] == shards.files("shards/*.tar")
    assert record["samples"]["seen"] == 7 and record["order"]["workers"] == 1
    assert record["order"]["rank_shards"] == dsv._dsv.ids_digest(tar.rank_shards())
    code, report = audit(dsv.lineage.write(record, tmp_path / "tar.json"), project["store"])
    assert code == 0 and [c["check"] for c in report["checks"]][-1] == "shards", report
    record["order"]["rank"] = 1
    code, report = audit(dsv.lineage.write(record, tmp_path / "tar-rank.json"), project["store"])
    assert code == 1 and set(failed(report)) == {"shards"}

    rows = dsv.torch.ParquetRowDataset(shards, include="rows/*.parquet", shuffle=True, seed=1)
    it = iter(rows)
    for _ in range(5):
        next(it)
    record = dsv.lineage.record(rows)
    assert record["loader"] == "ParquetRowDataset" and record["selection"]["files"] == 2
    assert record["order"]["row_groups"] == 6 and record["samples"] == {"seen": 5, "unit": "row", "digest": None, "ids": None}
    code, report = audit(dsv.lineage.write(record, tmp_path / "rows.json"), project["store"])
    assert code == 0 and report["checks"][-1]["check"] == "selection", report

    v1 = store.version("mnist@v1")
    for obj, loader in ((dsv.torch.VersionDataset(v1, include="test/**"), "VersionDataset"), (v1, None)):
        record = dsv.lineage.record(obj)
        assert record["loader"] == loader and record["order"] is None
        code, report = audit(dsv.lineage.write(record, tmp_path / "map.json"), project["store"])
        assert code == 0 and report["checks"][-1]["check"] == "selection", report


def test_mlflow_run_inputs_list_the_version(project, tmp_path, monkeypatch):
    mlflow = need("mlflow")
    import dsv.lineage.mlflow as dsv_mlflow
    from mlflow.data import dataset_source_registry as registry

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    ds, _ = trained(project)
    with mlflow.start_run() as run:
        record = dsv.lineage.record(ds)
        assert record["run_id"] == run.info.run_id
        logged = dsv_mlflow.log_input(record, context="training")
    client = mlflow.MlflowClient()
    inputs = client.get_run(run.info.run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    dataset = inputs[0].dataset
    assert dataset.source_type == "dsv" and dataset.name == "mnist@v1"
    assert json.loads(dataset.source)["uri"] == f"dsv://mnist@{ds.version.id}"
    tags = {t.key: t.value for t in inputs[0].tags}
    assert tags["dsv.version"] == ds.version.id and tags["mlflow.data.context"] == "training"
    assert tags["dsv.samples_seen"] == "11"
    # The record is the run's artifact; MLflow reads the source back through the registry.
    saved = json.loads(Path(client.download_artifacts(run.info.run_id, "dsv-lineage.json", str(tmp_path))).read_text())
    assert saved == logged and saved["trackers"]["mlflow"]["run_id"] == run.info.run_id
    source = mlflow.data.get_source(inputs[0])
    assert isinstance(source, dsv_mlflow.DsvDatasetSource)
    monkeypatch.setenv("DSV_STORE", str(project["store"]))
    assert source.load().id == ds.version.id
    assert isinstance(registry.resolve_dataset_source(record["uri"]), dsv_mlflow.DsvDatasetSource)
    # The entry point the package declares, installed as pip would, is what MLflow loads.
    tomllib = need("tomllib")
    declared = tomllib.loads((REPO / "python" / "pyproject.toml").read_text())
    target = declared["project"]["entry-points"]["mlflow.dataset_source"]["dsv"]
    dist = tmp_path / "site" / "dsv_lineage_probe-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dsv-lineage-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[mlflow.dataset_source]\ndsv = {target}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fresh = registry.DatasetSourceRegistry()
    fresh.register_entrypoints()
    assert dsv_mlflow.DsvDatasetSource in fresh.sources


def wandb_records(path: Path) -> List[Any]:
    """The records of a W&B run's offline log (`run-ID.wandb`: a LevelDB-style log of
    32 KiB blocks, each record a protobuf `Record`, possibly split over blocks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, pending, out = path.read_bytes(), 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - (pos % block)
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
        elif kind == 0 and length == 0:
            break
    return out


def test_wandb_offline_run_uses_a_dataset_reference_artifact(project, tmp_path, monkeypatch):
    wandb = need("wandb")
    import dsv.lineage.wandb as dsv_wandb

    for name, value in {
        "WANDB_MODE": "offline", "WANDB_DIR": tmp_path, "WANDB_SILENT": "true",
        "WANDB_DATA_DIR": tmp_path / "data", "WANDB_CACHE_DIR": tmp_path / "cache",
        "WANDB_ARTIFACT_DIR": tmp_path / "artifacts", "WANDB_CONFIG_DIR": tmp_path / "config",
    }.items():
        monkeypatch.setenv(name, str(value))
    ds, _ = trained(project)
    run = wandb.init(project="lineage", dir=tmp_path)
    try:
        assert dsv.lineage.record(ds)["trackers"]["wandb"]["run_id"] == run.id
        made = dsv_wandb.use_artifact(ds)
        run_dir = Path(run.dir).parent
    finally:
        run.finish()
    assert made.type == "dataset"
    log = next(run_dir.glob("run-*.wandb"))
    # W&B's core process writes the log behind finish(): wait for the run's exit record.
    deadline = time.monotonic() + 20
    while not any(r.WhichOneof("record_type") == "exit" for r in wandb_records(log)):
        assert time.monotonic() < deadline, "the offline run's log has no exit record"
        time.sleep(0.1)
    records = wandb_records(log)
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert len(artifacts) == 1
    artifact = artifacts[0]
    assert artifact.type == "dataset" and artifact.use_after_commit and artifact.user_created
    refs = {c.path: c.ref for c in artifact.manifest.contents}
    assert refs["mnist"] == f"dsv://mnist@{ds.version.id}"
    assert "dsv-lineage.json" in refs
    assert json.loads(artifact.metadata)["version"] == ds.version.id
    configs = [r.config for r in records if r.WhichOneof("record_type") == "config"]
    assert any(ds.version.id in item.value_json for c in configs for item in c.update if item.key == "dsv_lineage")


def test_openlineage_input_dataset_has_the_version_facet(project, tmp_path):
    need("openlineage.client")
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.file import FileConfig, FileTransport

    import dsv.lineage.openlineage as dsv_openlineage

    ds, _ = trained(project)
    log = tmp_path / "openlineage.jsonl"
    client = OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(log), append=True)))
    event = dsv_openlineage.emit(ds, client=client, job_name="train-mnist")
    assert event.inputs[0].facets["version"].datasetVersion == ds.version.id
    sent = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert len(sent) == 1 and sent[0]["job"]["name"] == "train-mnist" and sent[0]["eventType"] == "COMPLETE"
    (dataset,) = sent[0]["inputs"]
    assert (dataset["namespace"], dataset["name"]) == ("dsv", "mnist")
    assert dataset["facets"]["version"]["datasetVersion"] == ds.version.id
    assert dataset["facets"]["dsv_lineage"]["uri"] == f"dsv://mnist@{ds.version.id}"
    assert dataset["facets"]["dsv_lineage"]["samples"]["seen"] == 11


def test_write_replaces_a_record_but_not_a_users_file_and_read_refuses_a_fifo(local_store, tmp_path):
    record = dsv.lineage.record(dsv.Store(local_store["store"]).version("mnist@v1"))
    path = dsv.lineage.write(record, tmp_path / "dsv-lineage.json")
    assert dsv.lineage.write(record, path) == path  # an earlier record is replaced
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    with pytest.raises(FileExistsError, match="overwrite=True"):
        dsv.lineage.write(record, notes)
    assert notes.read_text() == '{"mine": true}\n'
    dsv.lineage.write(record, notes, overwrite=True)
    assert dsv.lineage.read(notes)["version"] == record["version"]
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        dsv.lineage.read(fifo)  # refused at once, never waited on
