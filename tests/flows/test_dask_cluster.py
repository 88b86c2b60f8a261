"""The nightly flow's fan-out on a Dask cluster started by hand (README, "Past one machine"): a
`dask scheduler` and two `dask worker` processes, reached through ``flows.dask_address``. The
corpus's teacher labels and the log validation run there and write the same files as the same
steps run in one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hulk import schemas, steps
from hulk.settings import load_settings
from tests.flows.conftest import tiny_params, write_params

# Prefect (flows.*) is imported in the tests, not here: `make test-fast` collects this module
# only to deselect it, and each test worker would pay for the import.
pytestmark = pytest.mark.slow  # `make test-fast` leaves these out

DASK = str(Path(sys.executable).with_name("dask"))
WORKERS = 2


def _stop(processes: list[subprocess.Popen]) -> None:
    """Terminate `processes` together, then wait for each (a worker takes a second or two to
    close: one after the other, the workers' waits added up)."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def cluster(prefect_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and two single-threaded workers, each a process of its own, as the README
    starts them; the workers report to the flows' Prefect API (PREFECT_API_URL)."""
    root = tmp_path_factory.mktemp("dask")
    address_file = root / "scheduler.json"
    env = {**os.environ, "PREFECT_API_URL": prefect_server}
    started: list[subprocess.Popen] = []
    log = (root / "cluster.log").open("w")
    try:
        started.append(
            subprocess.Popen(
                [
                    DASK,
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(address_file),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        )
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(address_file.read_text())["address"]
        for _ in range(WORKERS):
            started.append(
                subprocess.Popen(
                    [DASK, "worker", address, "--nthreads", "1", "--no-dashboard"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(WORKERS, timeout=120)
            pids = set(client.run(os.getpid).values())
        assert len(pids) == WORKERS and os.getpid() not in pids  # two processes, not this one
        yield address
    finally:
        _stop(started[1:])  # the workers, then the scheduler
        _stop(started[:1])
        log.close()


def _validation_files(data: Path) -> dict[str, bytes]:
    """What validation wrote that must not depend on where it ran: the quarantine, and the
    report without the clock reading it starts from (``now``)."""
    report = json.loads((data / schemas.VALIDATION_DIR / "report.json").read_text())
    report.pop("now")
    return {
        "quarantine": (data / schemas.QUARANTINE_FILE).read_bytes(),
        "report": json.dumps(report, sort_keys=True).encode(),
    }


def _corpus_files(path: Path) -> dict[str, bytes]:
    """The labelled corpus and its manifest without its clock readings (the build's and each
    sample's teacher seconds)."""
    manifest = json.loads(path.with_suffix(".json").read_text())
    manifest.pop("build")
    for sample in manifest["samples"]:
        sample.pop("teacher_seconds")
    return {"corpus": path.read_bytes(), "manifest": json.dumps(manifest, sort_keys=True).encode()}


def test_validation_and_corpus_on_a_hand_started_cluster_match_one_process(
    cluster: str, tmp_path: Path
) -> None:
    from flows._common import dask_runner
    from flows.nightly import teacher_labels, validate

    params = write_params(
        tmp_path / "params.yaml", tiny_params(tmp_path, flows={"dask_address": cluster})
    )
    settings = load_settings(params)
    steps.run("generate", settings)

    # In one process: the steps as `hulk validate` and `hulk stage corpus` run them.
    steps.run("validate", settings)
    steps.run("corpus", settings, workers=1)
    local = {**_validation_files(settings.data_dir), **_corpus_files(settings.corpus.path)}
    (settings.data_dir / schemas.QUARANTINE_FILE).unlink()
    # Without the validated days of that run, so that the cluster validates every day anew.
    shutil.rmtree(settings.data_dir / schemas.VALIDATION_DIR / schemas.VALIDATED_DAYS)

    # On the cluster: the nightly flow's subflows with its task runner (flows.dask_address), on
    # the same folder (the report names its files).
    runner = dask_runner(settings.flows)
    assert runner.address == cluster  # the hand-started scheduler, not a local cluster
    validate.with_options(task_runner=runner)(str(params))
    labels = teacher_labels.with_options(task_runner=dask_runner(settings.flows))
    outcomes = labels(str(params))
    assert sorted(outcomes) == list(range(settings.corpus.fleets))
    steps.run("corpus", settings, outcomes=outcomes, seconds=1.0, rebuild=True)
    remote = {**_validation_files(settings.data_dir), **_corpus_files(settings.corpus.path)}

    assert remote.keys() == local.keys()
    for name in local:
        assert remote[name] == local[name], name


def test_a_run_shares_one_local_cluster_and_closes_it() -> None:
    """The nightly's fan-out steps share one local cluster, closed when the run ends; with
    `flows.dask_address` set, none is started."""
    from flows._common import shared_dask_runners
    from hulk.settings import FlowsSettings

    local = FlowsSettings(dask_workers=1, dask_processes=False)
    with shared_dask_runners(local) as runner:
        first, second = runner(), runner()
        assert first.address == second.address  # one cluster, not one per step
        assert first.duplicate().address == first.address  # the copy a flow run uses
        from distributed import Client

        with Client(first.address) as client:
            assert len(client.scheduler_info()["workers"]) == 1
            assert client.submit(sum, [1, 2]).result() == 3
    with pytest.raises(OSError):  # closed with the run
        Client(first.address, timeout=1)

    remote = FlowsSettings(dask_address="tcp://127.0.0.1:1")
    with shared_dask_runners(remote) as runner:
        assert runner().address == "tcp://127.0.0.1:1"
