"""MLflow: a run's inputs name the dsv version it trained on.

:func:`log_input` logs a lineage record as an input dataset of the active run
(``mlflow.log_input``): a metadata-only dataset (``mlflow.data.meta_dataset.MetaDataset``)
named ``DATASET@TAG`` whose source is a :class:`DsvDatasetSource` (source type ``dsv``, its
JSON the ``dsv://DATASET@VERSION_ID`` URI and the remote), with input tags
``dsv.version``, ``dsv.tree``, ``dsv.uri``, ``dsv.samples_seen``; and the whole record as
the run's artifact ``dsv-lineage.json``.

The source type is registered with MLflow through the ``mlflow.dataset_source`` entry point
of the ``dsv`` package (``dsv = "dsv.lineage.mlflow:DsvDatasetSource"``), so MLflow reads it
back (``mlflow.data.get_source(run.inputs.dataset_inputs[0].dataset)``) in any process where
dsv is installed; :func:`log_input` also registers it itself when the entry point is not
installed (a source checkout).

::

    import mlflow, dsv.lineage.mlflow
    with mlflow.start_run():
        ...  # train
        dsv.lineage.mlflow.log_input(dataset, context="training")
"""

from __future__ import annotations

from typing import Any, Dict, Optional
from urllib.parse import urlparse

import mlflow
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.meta_dataset import MetaDataset

from . import as_record

__all__ = ["DsvDatasetSource", "dataset", "register", "log_input"]


class DsvDatasetSource(DatasetSource):
    """An MLflow dataset source naming a dsv version: ``uri`` (``dsv://DATASET@VERSION_ID``)
    and, when the version was read through a remote, ``remote`` (its URL)."""

    def __init__(self, uri: str, remote: Optional[str] = None) -> None:
        if not self._can_resolve(uri):
            raise ValueError(f"a dsv dataset source is a dsv://DATASET@VERSION URI, not {uri!r}")
        self.uri = uri
        self.remote = remote

    @staticmethod
    def _get_source_type() -> str:
        return "dsv"

    def load(self) -> Any:
        """The ``dsv.Version`` the URI names, from the remote when the source has one, else
        from the store ``DSV_STORE`` or the working directory finds."""
        from .._engine import resolve

        return resolve(urlparse(self.uri).netloc or self.uri[len("dsv://") :], remote=self.remote)

    @staticmethod
    def _can_resolve(raw_source: Any) -> bool:
        return isinstance(raw_source, str) and raw_source.startswith("dsv://") and "@" in raw_source

    @classmethod
    def _resolve(cls, raw_source: Any) -> "DsvDatasetSource":
        return cls(str(raw_source))

    def to_dict(self) -> Dict[str, Any]:
        return {"uri": self.uri, "remote": self.remote}

    @classmethod
    def from_dict(cls, source_dict: Dict[Any, Any]) -> "DsvDatasetSource":
        return cls(str(source_dict["uri"]), source_dict.get("remote"))


def register() -> None:
    """Registers :class:`DsvDatasetSource` with MLflow's dataset source registry, once (the
    entry point does it when the package is installed)."""
    from mlflow.data import dataset_source_registry as registry

    if not any(getattr(s, "__name__", None) == DsvDatasetSource.__name__ and s._get_source_type() == "dsv"
               for s in registry.get_registered_sources()):
        registry.register_dataset_source(DsvDatasetSource)


def dataset(record_or_dataset: Any) -> MetaDataset:
    """The MLflow dataset of a lineage record (or of what :func:`dsv.lineage.record` takes):
    named ``DATASET@TAG`` (the first tag naming the version, else its short id), digest the
    version id's first 12 hex digits, source a :class:`DsvDatasetSource`."""
    record = as_record(record_or_dataset)
    tags = record.get("tags") or []
    name = f"{record['dataset']}@{tags[0] if tags else record['version'][:12]}"
    remote = (record.get("store") or {}).get("remote")
    return MetaDataset(DsvDatasetSource(record["uri"], remote), name=name, digest=record["version"][:12])


def log_input(
    record_or_dataset: Any,
    context: str = "training",
    *,
    tags: Optional[Dict[str, str]] = None,
    log_record: bool = True,
) -> Dict[str, Any]:
    """Logs the lineage record of ``record_or_dataset`` (a record, or what
    :func:`dsv.lineage.record` takes) as an input of the active MLflow run (one is started
    when none is, as ``mlflow.log_input`` does), with ``context`` (``mlflow.data.context``)
    and input tags ``dsv.version``, ``dsv.tree``, ``dsv.uri``, ``dsv.samples_seen`` (and
    ``tags``), and, with ``log_record``, the record as the run's artifact
    ``dsv-lineage.json``. Returns the record as logged (its ``run_id`` the run's)."""
    register()
    record = as_record(record_or_dataset)
    input_tags = {
        "dsv.version": record["version"],
        "dsv.tree": record["tree"],
        "dsv.uri": record["uri"],
    }
    samples = record.get("samples") or {}
    if samples.get("seen") is not None:
        input_tags["dsv.samples_seen"] = str(samples["seen"])
    input_tags.update(tags or {})
    mlflow.log_input(dataset(record), context=context, tags=input_tags)
    run = mlflow.active_run()
    if run is not None:
        record["run_id"] = record.get("run_id") or run.info.run_id
        trackers = dict(record.get("trackers") or {})
        trackers.setdefault("mlflow", {"run_id": run.info.run_id, "experiment_id": run.info.experiment_id})
        record["trackers"] = trackers
        if log_record:
            mlflow.log_dict(record, "dsv-lineage.json")
    return record
