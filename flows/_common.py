"""What every flow shares: settings from params.yaml, retry options, the Dask task runner, the
end of a run refused its data folder's lock."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hulk.errors import HulkError, InputError
from hulk.settings import FlowsSettings, Settings, load_settings
from hulk.stages import Summary

if TYPE_CHECKING:
    from prefect.states import State

# Prefect's server writes telemetry at start (and may log a "database is locked" traceback).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Dask's scheduler and nannies log every worker coming and going at INFO: keep the flow's log
# to the steps (warnings still show).
logging.getLogger("distributed").setLevel(logging.WARNING)


class _UserErrorWithoutTraceback(logging.Filter):
    """A `HulkError` (bad input, a missing folder, a refused lock) in a run's log keeps its one
    line, without the traceback Prefect's engines attach to the exception a task or flow run
    ended with: the traceback says nothing to a user and buries the line that does, in the
    terminal and in the run's log in the UI. Any other exception keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], HulkError):
            record.exc_info, record.exc_text = None, None
        return True


for _run_logger in ("prefect.task_runs", "prefect.flow_runs"):
    logging.getLogger(_run_logger).addFilter(_UserErrorWithoutTraceback())


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


def refused(error: InputError) -> State[Any]:
    """The flow run's end when the data folder's lock is refused (`hulk.folder_lock.is_refusal`:
    another run holds it past ``scheduler.lock_timeout_s``) or the folder is not there
    (`hulk.data_folder.require_folder`): `error`'s one line in its log and
    as the ``Failed`` state's message, no traceback. The state holds `error`, so that the flow
    called in-process (the command line, a parent flow) raises it, and the command line reports
    it as every other InputError."""
    from prefect import get_run_logger
    from prefect.states import Failed

    get_run_logger().error("%s", error)
    return Failed(message=str(error), data=error)


def dask_runner(settings: FlowsSettings) -> Any:
    """The Dask task runner of the fan-out steps: an existing cluster, else a local one."""
    from prefect_dask import DaskTaskRunner

    logging.getLogger("distributed").setLevel(logging.WARNING)  # set again: dask resets it
    if settings.dask_address:
        return DaskTaskRunner(address=settings.dask_address)
    return DaskTaskRunner(cluster_kwargs=_local_cluster_kwargs(settings))


def _local_cluster_kwargs(settings: FlowsSettings) -> dict[str, Any]:
    return {
        "n_workers": settings.dask_workers,
        "threads_per_worker": 1,
        "processes": settings.dask_processes,
        "dashboard_address": ":0",  # any free port: never clash with another cluster
    }


@contextmanager
def shared_dask_runners(settings: FlowsSettings) -> Iterator[Callable[[], Any]]:
    """Task runners for the fan-out steps of one run, all on one Dask cluster.

    Yields a function that returns a runner: on `flows.dask_address` when set, else on a local
    cluster started at the first call and closed when the block ends. A local cluster costs
    seconds to start (worker processes, their imports) and more under load, and a nightly
    fans out up to three steps: they share one instead of starting one each.
    """
    from prefect_dask import DaskTaskRunner

    if settings.dask_address:
        yield lambda: dask_runner(settings)
        return
    started: list[Any] = []

    def runner() -> Any:
        if not started:
            from distributed import LocalCluster

            logging.getLogger("distributed").setLevel(logging.WARNING)
            started.append(LocalCluster(**_local_cluster_kwargs(settings)))
        # By address: Prefect runs each flow on a copy of its runner, which keeps the address.
        return DaskTaskRunner(address=started[0].scheduler_address)

    try:
        yield runner
    finally:
        for cluster in started:
            cluster.close()


def brief(summary: Summary) -> dict[str, Any]:
    """A step summary without its long lists (what the flow returns and logs)."""
    return {k: v for k, v in summary.to_dict().items() if not isinstance(v, list | dict)}


_SERVER_START_TIMEOUT_S = 180  # seconds to wait for the temporary Prefect server to answer


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
    # On a fresh machine the server first creates and migrates its database, which takes
    # longer than Prefect's 20-s default wait: the first `make main` would fail.
    server.start(timeout=_SERVER_START_TIMEOUT_S)
    os.environ["PREFECT_API_URL"] = server.api_url
    if server.server_process is not None:
        _stop_with_this_process(server.server_process.pid)
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            try:
                yield server.api_url
            finally:
                # Send the run's last logs while the server is up, a failed run's too: left
                # queued, they would be retried against the stopped server when the process
                # exits ("Error logging to API" after the run's own error).
                APILogWorker.drain_all(timeout=10)
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        with temporary_settings({PREFECT_LOGGING_TO_API_ENABLED: False}):
            server.stop()  # it logs that it stops: to the console only


# The watchdog of a temporary server: a process of its own that outlives this one, waits (pidfd,
# no polling) until this process or the server ends, and then stops the server (SIGTERM, SIGKILL
# after 5 s). `kill -9` of a run leaves no server behind; a normal stop ends the watchdog too.
_WATCHDOG = """
import os, select, signal, sys, time
parent, server = (int(arg) for arg in sys.argv[1:3])
try:
    fds = {os.pidfd_open(server): "server", os.pidfd_open(parent): "parent"}
except ProcessLookupError:  # the server is gone already, or its parent is: stop it anyway
    fds = {}
if fds:
    ready, _, _ = select.select(list(fds), [], [])
    if any(fds[fd] == "server" for fd in ready):
        sys.exit(0)
    server_fd = next(fd for fd, name in fds.items() if name == "server")
    signal.pidfd_send_signal(server_fd, signal.SIGTERM)
    if not select.select([server_fd], [], [], 5)[0]:
        signal.pidfd_send_signal(server_fd, signal.SIGKILL)
else:
    try:
        os.kill(server, signal.SIGTERM)
    except ProcessLookupError:
        pass
"""


_WATCHDOGS: list[Any] = []  # kept, so that Python reaps them instead of warning


def _stop_with_this_process(server_pid: int) -> None:
    """Start the temporary server's watchdog (`_WATCHDOG`): the server dies with this process,
    however this process ends. Prefect's server class exposes no hook for the server process
    itself (no preexec_fn to set PR_SET_PDEATHSIG), so a separate process watches both."""
    import subprocess
    import sys

    _WATCHDOGS.append(
        subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(server_pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C goes to the run, not to the watchdog
        )
    )
