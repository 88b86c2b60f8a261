"""Teacher labels of the fleet's own samples, cached by content.

A label is what the teacher search (`hulk.teacher`, with the corpus budget:
`hulk.corpus.corpus_teacher`) makes of one (fleet, job mix): the class of every machine (the
k-th job in size order, or idle) and the plan's makespan. It depends only on what went in, so
it is cached under `label_key`, a sha256 of

* the sample's inventory and link table (their values, machines in node_id order),
* the jobs (every field),
* the teacher, planner, hardware and bandwidth-tier settings and the label seed,

and a night labels only the samples whose key is not in the cache (`LabelCache`): a link-table
block that did not change keeps its labels. The teacher's seed of a sample is derived from the
key, so a label does not depend on which night, worker or role asked for it.

`label_sample` is a pure function of its arguments (timings aside): any executor may run it
(the nightly flow's Dask workers). `training_sample` turns a cached label back into the
tensors of a `hulk.corpus` sample.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hulk.jobs import Job, job_to_dict
from hulk.settings import Settings

FORMAT = 1  # version of the cached label layout


def frame_digest(frame: pd.DataFrame) -> str:
    """sha256 of a frame's column names, dtypes and values (row order matters, index does not)."""
    digest = hashlib.sha256()
    for name in frame.columns:
        digest.update(f"{name}:{frame[name].dtype}".encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def label_key(
    inventory: pd.DataFrame, links: pd.DataFrame, jobs: Sequence[Job], settings: Settings
) -> str:
    """The content key of a sample's label (module docstring)."""
    from hulk.corpus import corpus_teacher

    record = {
        "format": FORMAT,
        "inventory": frame_digest(inventory.sort_values("node_id").reset_index(drop=True)),
        "links": frame_digest(links),
        "jobs": [job_to_dict(job) for job in jobs],
        "teacher": corpus_teacher(settings).model_dump(mode="json"),
        "planner": settings.planner.model_dump(mode="json"),
        "hardware": settings.hardware.model_dump(mode="json"),
        "bandwidth_tiers": [t.model_dump(mode="json") for t in settings.graph.bandwidth_tiers],
        "seed": settings.seed,
    }
    text = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def label_seed(key: str) -> int:
    """The teacher's seed for the sample with this key."""
    return int(key[:15], 16)


def label_sample(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    jobs: Sequence[Job],
    settings: Settings,
    key: str,
) -> dict[str, Any]:
    """Label one sample with the teacher: ``{"y", "makespan_s", "sum_s", ...}`` (JSON-able).

    ``y`` holds the class of each machine in node_id order (size order of the jobs, idle = J).
    """
    import torch

    from hulk.corpus import corpus_teacher, label_mix

    torch.set_num_threads(1)
    started = time.perf_counter()
    sample, result, _ = label_mix(
        inventory, links, jobs, settings, label_seed(key), corpus_teacher(settings), -1, 0
    )
    return {
        "y": sample["y"].tolist(),
        "makespan_s": float(result.makespan_s),
        "sum_s": float(result.sum_s),
        "evaluations": int(result.evaluations),
        "stopped_by": result.stopped_by,
        "teacher_seconds": round(time.perf_counter() - started, 3),
    }


def training_sample(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    jobs: Sequence[Job],
    label: Mapping[str, Any],
    settings: Settings,
) -> dict[str, Any]:
    """The tensors of a labelled sample (as `hulk.corpus` samples: x, edges, jobs, y, active)."""
    import torch

    from hulk.corpus import CURRENT_FLEET
    from hulk.features import encode_inputs

    inventory = inventory.sort_values("node_id", kind="stable").reset_index(drop=True)
    tensors, _ = encode_inputs(inventory, links, jobs, settings)
    y = np.asarray(label["y"], dtype=np.int64)
    if len(y) != len(inventory):
        raise ValueError(f"label of {len(y)} machines for a fleet of {len(inventory)}")
    return {
        **tensors,
        "y": torch.from_numpy(y),
        "fleet": CURRENT_FLEET,
        "mix": 0,
        "makespan_s": float(label["makespan_s"]),
    }


class LabelCache:
    """Labels by key, as one JSON document (``{"format": 1, "labels": {key: label}}``)."""

    def __init__(self, labels: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.labels: dict[str, dict[str, Any]] = dict(labels or {})

    @classmethod
    def from_text(cls, text: str | None) -> LabelCache:
        """The cache of a saved document; an unreadable or older one is an empty cache."""
        if not text:
            return cls()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            return cls()
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            return cls()
        labels = raw.get("labels")
        return cls(labels if isinstance(labels, dict) else {})

    def to_text(self, keep: Sequence[str] | None = None) -> str:
        """The document, keys sorted; with `keep`, only those labels (tonight's)."""
        wanted = self.labels if keep is None else {k: self.labels[k] for k in keep}
        body = {"format": FORMAT, "labels": dict(sorted(wanted.items()))}
        return json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n"

    def __contains__(self, key: object) -> bool:
        return key in self.labels

    def __getitem__(self, key: str) -> dict[str, Any]:
        return self.labels[key]

    def __setitem__(self, key: str, label: dict[str, Any]) -> None:
        self.labels[key] = label
