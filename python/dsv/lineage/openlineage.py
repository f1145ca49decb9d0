"""OpenLineage: the dsv version a job read, as an input dataset with the ``version`` facet.

:func:`input_dataset` gives the ``InputDataset`` of a lineage record: namespace ``dsv`` (or
the remote's URL, for a version read through a remote), name the dataset, facets ``version``
(``DatasetVersionDatasetFacet``: the version id) and ``dsv_lineage`` (the URI, tree,
selection and order). :func:`run_event` wraps it in a ``RunEvent`` and :func:`emit` sends
that through an ``OpenLineageClient`` (by default the one the OpenLineage environment
configures: ``OPENLINEAGE_URL``, ``openlineage.yml``).

::

    import dsv.lineage.openlineage
    event = dsv.lineage.openlineage.emit(dataset, job_name="train-mnist")
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import attr
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, Run, RunEvent, RunState
from openlineage.client.facet_v2 import DatasetFacet, dataset_version_dataset
from openlineage.client.uuid import generate_new_uuid

from . import as_record

__all__ = ["DsvLineageDatasetFacet", "input_dataset", "run_event", "emit"]

_SCHEMA_URL = "https://github.com/dsv/dsv/blob/main/docs/python.md#lineage"


@attr.define
class DsvLineageDatasetFacet(DatasetFacet):
    """The dsv part of a lineage record, as an OpenLineage dataset facet (``dsv_lineage``)."""

    uri: str
    tree: str
    selection: Dict[str, Any]
    order: Optional[Dict[str, Any]] = None
    samples: Optional[Dict[str, Any]] = None

    @staticmethod
    def _get_schema() -> str:
        return _SCHEMA_URL


def input_dataset(record_or_dataset: Any, namespace: Optional[str] = None) -> InputDataset:
    """The OpenLineage input dataset of a lineage record (or of what
    :func:`dsv.lineage.record` takes), with the ``version`` facet."""
    record = as_record(record_or_dataset)
    remote = (record.get("store") or {}).get("remote")
    selection = {k: v for k, v in record["selection"].items() if k != "paths"}
    samples = record.get("samples")
    if isinstance(samples, dict):
        samples = {k: v for k, v in samples.items() if k != "ids"}
    return InputDataset(
        namespace=namespace or remote or "dsv",
        name=record["dataset"],
        facets={
            "version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=record["version"]),
            "dsv_lineage": DsvLineageDatasetFacet(
                uri=record["uri"], tree=record["tree"], selection=selection, order=record.get("order"), samples=samples
            ),
        },
    )


def run_event(
    record_or_dataset: Any,
    *,
    job_namespace: str = "dsv",
    job_name: str = "training",
    run_id: Optional[str] = None,
    event_type: RunState = RunState.COMPLETE,
    event_time: Optional[str] = None,
) -> RunEvent:
    """A ``RunEvent`` (default ``COMPLETE``) of job ``job_namespace``/``job_name`` whose
    input is the record's dataset. ``run_id``: an OpenLineage run id (a UUID; default a new
    one)."""
    import datetime

    return RunEvent(
        eventType=event_type,
        eventTime=event_time or datetime.datetime.now(datetime.timezone.utc).isoformat(),
        run=Run(runId=run_id or str(generate_new_uuid())),
        job=Job(namespace=job_namespace, name=job_name),
        inputs=[input_dataset(record_or_dataset)],
    )


def emit(record_or_dataset: Any, client: Optional[OpenLineageClient] = None, **event: Any) -> RunEvent:
    """Sends :func:`run_event` ``(record_or_dataset, **event)`` through ``client`` (default:
    ``OpenLineageClient()``, configured by the environment) and returns the event."""
    made = run_event(record_or_dataset, **event)
    (client or OpenLineageClient()).emit(made)
    return made
