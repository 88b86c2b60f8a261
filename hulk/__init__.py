"""Hulk: places large training jobs on a geo-distributed GPU fleet."""

import os

# Third-party telemetry decides at import time; Hulk runs offline, so switch it off before any
# of those packages is imported (an explicit setting in the environment still wins).
for _name, _value in (
    ("MLFLOW_DISABLE_TELEMETRY", "true"),
    ("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false"),
    ("GX_ANALYTICS_ENABLED", "false"),
    ("DO_NOT_TRACK", "1"),
):
    os.environ.setdefault(_name, _value)

__version__ = "0.1.0"
