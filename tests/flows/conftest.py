"""Flow tests share one Prefect test server (starting one takes seconds) and tiny params."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "data" / "jobs" / "upcoming.yaml"


# Sections that make a run take seconds: 2 days of hourly probes, 6 small corpus fleets, one-day
# link blocks (day 1 trains, day 2 is held out), a few fleet samples, 2 epochs. Shared by the
# flow tests and the DVC test.
TINY = {
    "generate": {"days": 2, "probe_interval_s": 3600, "throughput_interval_s": 10800},
    "corpus": {
        "fleets": 6,
        "mixes_per_fleet": 1,
        "max_machines": 30,
        "max_jobs": 3,
        "max_evaluations": 20,
        "workers": 1,
    },
    "fleet_samples": {
        "window_days": 1,
        "drift_snapshots": 2,
        "mixes": 1,
        "subfleets": 1,
        "drained": 1,
        "eval_mixes": 1,
        "max_jobs": 3,
        "min_train_samples": 0,
    },
    "train": {"epochs": 2},
    "finetune": {"epochs": 2},
}


def tiny_params(root: Path, **sections: dict) -> dict:
    """Params for a run in seconds (`TINY`).

    Every path is absolute under `root`, so fixtures can outlive the per-test working folder.
    """
    data = root / "data"
    params = {
        "data_dir": str(data),
        **{name: dict(values) for name, values in TINY.items()},
        "assign": {"jobs_file": str(JOBS), "placements_dir": str(data / "placements")},
        # Dask workers as threads of the test process: no process start-up, same results.
        "flows": {"dask_workers": 2, "dask_processes": False, "retry_delay_s": 0.1},
    }
    params["corpus"]["path"] = str(data / "corpus" / "corpus.pt")
    for name, values in sections.items():
        params[name] = {**params.get(name, {}), **values}
    return params


def write_params(path: Path, params: dict) -> Path:
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[str]:
    """One temporary Prefect API for every flow test (exported for any child process)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with prefect_test_harness(server_startup_timeout=60):
        url = PREFECT_API_URL.value()
        previous = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = url
        try:
            yield url
        finally:
            if previous is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = previous
