"""Weights & Biases: a run uses the dsv version it trained on, as a dataset artifact.

:func:`use_artifact` makes a ``type="dataset"`` artifact of a lineage record: a reference
to ``dsv://DATASET@VERSION_ID`` (W&B keeps references of schemes it does not know as they
are, with the URI as their digest, so two runs of one version share the artifact's
digest), the record as its file ``dsv-lineage.json`` and its metadata (less the listed ids),
and declares it an input of the run: ``run.use_artifact(artifact)``.

Offline (``WANDB_MODE=offline``), W&B refuses ``use_artifact``; the artifact is then
written to the run's offline log the way ``use_artifact`` logs a new artifact online (logged
with ``use_after_commit``), so ``wandb sync`` uploads it as an input of the run. Either way
the run's config gets ``dsv_lineage`` (URI, version, tree, samples seen).

::

    import wandb, dsv.lineage.wandb
    run = wandb.init(project="mnist")
    ...  # train
    dsv.lineage.wandb.use_artifact(dataset)
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional

import wandb

from . import as_record

__all__ = ["artifact", "use_artifact"]


def artifact(record_or_dataset: Any, name: Optional[str] = None) -> "wandb.Artifact":
    """The ``type="dataset"`` W&B artifact of a lineage record (or of what
    :func:`dsv.lineage.record` takes): named ``name`` (default ``DATASET-VERSIONPREFIX``),
    holding a reference to the record's ``dsv://`` URI (entry ``DATASET``) and the record
    as ``dsv-lineage.json``; its metadata is the record less the listed sample ids."""
    record = as_record(record_or_dataset)
    name = name or re.sub(r"[^A-Za-z0-9_.-]", "_", f"{record['dataset']}-{record['version'][:12]}")
    metadata = dict(record)
    if isinstance(metadata.get("samples"), dict):
        metadata["samples"] = {k: v for k, v in metadata["samples"].items() if k != "ids"}
    made = wandb.Artifact(name, type="dataset", metadata=metadata)
    # A scheme W&B does not know is kept as given (no checksum: the URI names exact content).
    made.add_reference(record["uri"], name=record["dataset"], checksum=False)
    with made.new_file("dsv-lineage.json", mode="w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    return made


def use_artifact(record_or_dataset: Any, run: Any = None, name: Optional[str] = None) -> "wandb.Artifact":
    """Declares the lineage record of ``record_or_dataset`` an input of W&B run ``run``
    (default: ``wandb.run``) as the dataset :func:`artifact` makes, and adds ``dsv_lineage``
    to the run's config. Returns the artifact. Raises ``ValueError`` when no run is active."""
    run = run if run is not None else wandb.run
    if run is None:
        raise ValueError("no W&B run is active: call wandb.init() first, or pass run=")
    record = as_record(record_or_dataset)
    record["run_id"] = record.get("run_id") or run.id
    trackers: Dict[str, Any] = dict(record.get("trackers") or {})
    trackers.setdefault("wandb", {"run_id": run.id, "project": getattr(run, "project", None)})
    record["trackers"] = trackers
    made = artifact(record, name)
    if getattr(run, "offline", False):
        # W&B refuses use_artifact offline; this is what use_artifact does with a new
        # artifact online, less waiting for the upload: `wandb sync` marks it used.
        run._log_artifact(made, aliases=[], is_user_created=True, use_after_commit=True)
    else:
        run.use_artifact(made)
    samples = record.get("samples") or {}
    run.config.update(
        {
            "dsv_lineage": {
                "uri": record["uri"],
                "version": record["version"],
                "tree": record["tree"],
                "samples_seen": samples.get("seen"),
            }
        },
        allow_val_change=True,
    )
    return made
