"""The GNN as an MLflow pyfunc model: per-machine job probabilities for a fleet and a job mix.

Every registered version of ``hulk-gnn`` carries, beside Hulk's own files (``state_dict.pt``,
``config.json``), an MLflow model written from this file (MLflow's *models from code*: the
file is copied, nothing is pickled). So the standard tools work::

    model = mlflow.pyfunc.load_model("models:/hulk-gnn@champion")
    model.predict({"inventory": [...], "links": [...], "jobs": [...]})

or ``mlflow models serve -m models:/hulk-gnn@champion --env-manager local`` with that
document as the request's ``inputs``. The input holds the fleet as Hulk's inventory rows
(``node_id, lat, lon, compute_capability, gpu_count, memory_gb, status``) and link-table rows
(``src, dst, latency_p50_ms, beta_gbps, loss_rate``), and the jobs as in a jobs file. The
output has one row per machine and class: ``node_id``, ``job`` (a job's name, or ``idle``) and
``probability``: what `hulk.model.predict_proba` gives, before Algorithm 1 and the planner turn
it into placements (those need Hulk itself: `hulk assign`).

The weights load with ``torch.load(weights_only=True)``, as everywhere in Hulk; the features
are built with the hardware and bandwidth-tier settings the model was trained with
(``settings.json`` beside the weights).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mlflow.models
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel

INPUT_KEYS = ("inventory", "links", "jobs")


class FleetProbabilities(PythonModel):
    """`predict`: per-machine class probabilities (module docstring)."""

    def load_context(self, context: Any) -> None:
        import torch

        from hulk.model import model_from_state
        from hulk.settings import Settings

        weights = context.artifacts["state_dict"]
        state = torch.load(weights, map_location="cpu", weights_only=True)
        with open(context.artifacts["config"], encoding="utf-8") as file:
            config = json.load(file)
        with open(context.artifacts["settings"], encoding="utf-8") as file:
            self.settings = Settings.model_validate_json(file.read())
        self.model = model_from_state(config, state)

    # A frame is what MLflow hands over after checking `signature()`, and a type MLflow infers
    # no schema from: without a hint it warns at every load that one should be added.
    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        return fleet_probabilities(self.model, model_input, self.settings)


def fleet_probabilities(model: Any, document: Any, settings: Any) -> pd.DataFrame:
    """(node_id, job, probability) rows for the fleet and jobs of `document` (a mapping of the
    three lists, or a one-row frame of them)."""
    from hulk.features import encode_inputs
    from hulk.jobs import parse_jobs
    from hulk.model import predict_proba

    document = _document(document)
    inventory = pd.DataFrame(document["inventory"])
    links = pd.DataFrame(document["links"])
    if "beta_gbps" not in links:
        links["beta_gbps"] = float("nan")  # no measured bandwidth: the latency tiers decide
    if "loss_rate" not in links:
        links["loss_rate"] = 0.0
    jobs = parse_jobs({"jobs": [dict(job) for job in document["jobs"]]}, source="jobs")
    inputs, order = encode_inputs(inventory, links, jobs, settings)
    proba = predict_proba(model, inputs).numpy()
    names = [jobs[k].name for k in order] + ["idle"]
    node_ids = inventory.sort_values("node_id", kind="stable")["node_id"].to_numpy()
    return pd.DataFrame(
        {
            "node_id": [int(node) for node in node_ids for _ in names],
            "job": [name for _ in node_ids for name in names],
            "probability": proba.reshape(-1).astype(float),
        }
    )


def signature() -> Any:
    """The model's input and output schema (module docstring), for MLflow's model page and
    its checks of each request."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, Object, Property, Schema

    def rows(*fields: tuple[str, str, bool]) -> Array:
        return Array(Object([Property(name, kind, required) for name, kind, required in fields]))

    inventory = rows(
        ("node_id", "long", True),
        ("lat", "double", False),
        ("lon", "double", False),
        ("compute_capability", "double", True),
        ("gpu_count", "long", True),
        ("memory_gb", "double", True),
        ("status", "string", True),
    )
    links = rows(
        ("src", "long", True),
        ("dst", "long", True),
        ("latency_p50_ms", "double", True),
        ("beta_gbps", "double", False),
        ("loss_rate", "double", False),
    )
    jobs = rows(
        ("name", "string", True),
        ("params_b", "double", True),
        ("layers", "long", True),
        ("hidden", "long", True),
        ("seq_len", "long", True),
        ("global_batch", "long", True),
        ("micro_batch", "long", True),
        ("priority", "long", False),
        ("min_memory_gb", "double", False),
    )
    inputs = Schema(
        [ColSpec(inventory, "inventory"), ColSpec(links, "links"), ColSpec(jobs, "jobs")]
    )
    outputs = Schema(
        [ColSpec("long", "node_id"), ColSpec("string", "job"), ColSpec("double", "probability")]
    )
    return ModelSignature(inputs=inputs, outputs=outputs)


def input_example() -> dict[str, list[dict[str, Any]]]:
    """Two machines in two cities and one job: the shape of a request."""
    return {
        "inventory": [
            {"node_id": 0, "lat": 52.52, "lon": 13.40, "compute_capability": 8.0,
             "gpu_count": 8, "memory_gb": 80.0, "status": "active"},
            {"node_id": 1, "lat": 48.86, "lon": 2.35, "compute_capability": 8.0,
             "gpu_count": 8, "memory_gb": 80.0, "status": "active"},
        ],
        "links": [
            {"src": 0, "dst": 1, "latency_p50_ms": 11.0, "beta_gbps": 1.0, "loss_rate": 0.0},
        ],
        "jobs": [
            {"name": "BERT-large", "params_b": 0.34, "layers": 24, "hidden": 1024,
             "seq_len": 512, "global_batch": 256, "micro_batch": 16},
        ],
    }  # fmt: skip


def _document(model_input: Any) -> Mapping[str, Any]:
    """The input as a mapping of the three lists, whichever form pyfunc hands it over in."""
    if isinstance(model_input, pd.DataFrame):  # one row, one column per key
        if len(model_input) != 1:
            raise ValueError("expected one fleet and job mix (one row)")
        model_input = model_input.iloc[0].to_dict()
    if not isinstance(model_input, Mapping) or set(INPUT_KEYS) - set(model_input):
        raise ValueError(f"expected a mapping with {', '.join(INPUT_KEYS)}")
    return {key: _records(model_input[key]) for key in INPUT_KEYS}


def _records(value: Any) -> list[dict[str, Any]]:
    """Plain rows: MLflow's schema check hands values over as numpy scalars, which Hulk's
    strict jobs check rightly refuses as integers."""
    rows = value.to_dict("records") if isinstance(value, pd.DataFrame) else value
    return [
        {key: item.item() if isinstance(item, np.generic) else item for key, item in row.items()}
        for row in rows
    ]


mlflow.models.set_model(FleetProbabilities())
