"""A training job's data loop, run by torch.multiprocessing.spawn in tests: one process per
rank, gloo process group, IterableVersionDataset through a DataLoader with worker processes.
Each rank records the paths it consumed per epoch to `out/rank-R.json`."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Dict

import torch.distributed as dist

import dsv
from dsv.torch import DataLoader, IterableVersionDataset


def check_sample(path: str, data: bytes) -> str:
    """The transform: the file must start with its own path (see conftest.content)."""
    if path.endswith(".bin") and not data.startswith(path.encode() + b"\n"):
        raise AssertionError(f"{path}: wrong bytes")
    return path


def run_rank(rank: int, world: int, cfg: Dict[str, Any]) -> None:
    out = Path(cfg["out"])
    dist.init_process_group("gloo", init_method=f"file://{cfg['pg_file']}", rank=rank, world_size=world)
    store = dsv.Store(cfg["store"])
    version = store.version(cfg["revision"])
    dataset = IterableVersionDataset(
        version, shuffle=True, seed=cfg["seed"], equal_per_rank=True, transform=check_sample
    )
    assert (dataset.rank, dataset.world_size) == (rank, world)
    loader = DataLoader(
        dataset,
        batch_size=cfg["batch"],
        num_workers=cfg.get("workers", 2),
        multiprocessing_context=cfg.get("context"),
    )
    state_file = out / f"state-{rank}.json"
    first_epoch = 0
    if cfg.get("resume"):
        state = json.loads(state_file.read_text())
        dataset.load_state_dict(state)
        first_epoch = state["epoch"]
    record: Dict[str, Any] = {"epochs": {}, "len": len(dataset)}
    for epoch in range(first_epoch, cfg["epochs"]):
        dataset.set_epoch(epoch)
        seen = []
        for step, batch in enumerate(loader, start=1):
            seen.extend(batch)
            if cfg.get("checkpoint_at") == step and epoch == 0:
                state_file.write_text(json.dumps(dataset.state_dict()))
                (out / f"checkpointed-{rank}.json").write_text(json.dumps(seen))
            if cfg.get("checkpoint_at") is not None and step == cfg["checkpoint_at"] + 2 and epoch == 0:
                # Work done after the checkpoint, then a crash: lost, must be done again.
                dist.barrier()
                if rank == cfg.get("kill_rank", 0):
                    os.kill(os.getpid(), signal.SIGKILL)
                dist.barrier()  # the others wait here until the job is torn down
        record["epochs"][str(epoch)] = seen
    # Every rank gets as many samples as every other: a collective after the loop never hangs.
    counts = [None] * world
    dist.all_gather_object(counts, {epoch: len(s) for epoch, s in record["epochs"].items()})
    record["all_counts"] = counts
    (out / f"rank-{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()
