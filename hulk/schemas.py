"""Column contracts of the files under data/ (docs/contracts.md), in one place.

Each schema maps a column to its pandas dtype. Writers cast to it; validation checks against it.
"""

from __future__ import annotations

import pandas as pd

STATUS_ACTIVE = "active"
STATUS_DRAINED = "drained"
MACHINE_STATUSES = (STATUS_ACTIVE, STATUS_DRAINED)

PROBE_OK = "ok"
PROBE_TIMEOUT = "timeout"
PROBE_UNREACHABLE = "unreachable"
PROBE_STATUSES = (PROBE_OK, PROBE_TIMEOUT, PROBE_UNREACHABLE)

# Inventory: data/machines.csv. lat/lon are empty when the location could not be resolved.
INVENTORY = {
    "node_id": "int64",
    "city": "string",
    "country": "string",
    "lat": "float64",
    "lon": "float64",
    "compute_capability": "float64",
    "gpu_count": "int64",
    "memory_gb": "float64",
    "status": "string",
}

# Raw latency logs: data/logs/day=YYYY-MM-DD/*.parquet (or CSV with the same columns).
LOGS = {
    "ts": "datetime64[us, UTC]",
    "src": "int64",
    "dst": "int64",
    "msg_bytes": "int64",
    "elapsed_ms": "float64",  # null when the probe was lost
    "status": "string",
}
LOG_KEY = ["ts", "src", "dst", "msg_bytes"]

# Link table: data/links.parquet, one row per unordered pair (src < dst).
LINKS = {
    "src": "int64",
    "dst": "int64",
    "samples": "int64",  # latency probes sent over the window, both directions
    "loss_rate": "float64",  # share of those probes lost
    "latency_p50_ms": "float64",
    "latency_p95_ms": "float64",
    "latency_mean_ms": "float64",
    "alpha_ms": "float64",  # fitted intercept of elapsed time against message size
    "beta_gbps": "float64",  # fitted bandwidth; null when it could not be fitted
    "window_start": "datetime64[us, UTC]",
    "window_end": "datetime64[us, UTC]",
}

INVENTORY_FILE = "machines.csv"
LOGS_DIR = "logs"
# What made a generated folder's logs (seed, generate settings): the next day continues them.
GENERATION_FILE = "generation.json"
LINKS_FILE = "links.parquet"
QUARANTINE_FILE = "quarantine.parquet"
VALIDATION_DIR = "validation"
VALIDATED_DAYS = "days"  # under validation/: validated log partitions (hulk.validation.day_cache)
GRAPH_DIR = "graph"


def conform(frame: pd.DataFrame, schema: dict[str, str]) -> pd.DataFrame:
    """Return the schema's columns, in order, cast to their dtypes."""
    return frame[list(schema)].astype(schema)


def empty(schema: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in schema.items()})
