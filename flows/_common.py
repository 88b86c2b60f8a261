"""What every flow shares: settings from params.yaml, retry options, the Dask task runner."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hulk.errors import HulkError
from hulk.settings import FlowsSettings, Settings, load_settings
from hulk.stages import Summary

# Prefect's server writes telemetry at start (and may log a "database is locked" traceback).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Dask's scheduler and nannies log every worker coming and going at INFO: keep the flow's log
# to the steps (warnings still show).
logging.getLogger("distributed").setLevel(logging.WARNING)


def flow_settings(params: str, data_dir: str | None) -> Settings:
    """params.yaml, with the data folder overridden when a flow run names one."""
    settings = load_settings(Path(params))
    if data_dir:
        settings = settings.with_data_dir(Path(data_dir))
    return settings


def _not_bad_input(task: Any, task_run: Any, state: Any) -> bool:
    """Retry anything but a HulkError: bad input stays bad, the run must fail at once."""
    return not isinstance(state.data, HulkError)


def retry_options(settings: FlowsSettings, retried: bool) -> dict[str, Any]:
    """Task options: retries with exponential back-off for steps touching files or the registry."""
    from prefect.tasks import exponential_backoff

    if not retried or settings.retries == 0:
        return {"retries": 0}
    return {
        "retries": settings.retries,
        "retry_delay_seconds": exponential_backoff(backoff_factor=settings.retry_delay_s),
        "retry_condition_fn": _not_bad_input,
    }


def dask_runner(settings: FlowsSettings) -> Any:
    """The Dask task runner of the fan-out steps: an existing cluster, else a local one."""
    from prefect_dask import DaskTaskRunner

    logging.getLogger("distributed").setLevel(logging.WARNING)  # set again: dask resets it
    if settings.dask_address:
        return DaskTaskRunner(address=settings.dask_address)
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": settings.dask_workers,
            "threads_per_worker": 1,
            "processes": settings.dask_processes,
            "dashboard_address": ":0",  # any free port: never clash with another cluster
        }
    )


def brief(summary: Summary) -> dict[str, Any]:
    """A step summary without its long lists (what the flow returns and logs)."""
    return {k: v for k, v in summary.to_dict().items() if not isinstance(v, list | dict)}


@contextmanager
def prefect_api() -> Iterator[str]:
    """The Prefect API for this process and the processes it starts (Dask workers).

    With PREFECT_API_URL set (a `prefect server start` server, or a test harness) that one;
    else a temporary local server for the block, exported in the environment so that local
    Dask workers report to it too instead of each starting a server of their own.
    """
    url = os.environ.get("PREFECT_API_URL")
    if url:
        yield url
        return
    from prefect.logging.handlers import APILogWorker
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_LOGGING_TO_API_ENABLED,
        temporary_settings,
    )

    server = SubprocessASGIServer()
    server.start()
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            yield server.api_url
            # Send the run's last logs while the server is up: left queued, they would be
            # retried against the stopped server for about a minute when the process exits.
            APILogWorker.drain_all(timeout=10)
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        with temporary_settings({PREFECT_LOGGING_TO_API_ENABLED: False}):
            server.stop()  # it logs that it stops: to the console only
