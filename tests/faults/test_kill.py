"""What survives a kill (issue 15, item 12): the temporary Prefect server dies with the run that
started it, and a publication cut short after ``latest.json`` (no MLflow run, an old plot) is
completed by the next assign run.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hulk import registry, steps
from hulk.settings import load_settings
from hulk.steps import placements_markdown
from tests.faults.conftest import invoke

# Prefect (flows.*) is imported in the tests, not here: `make test-fast` collects this module
# only to deselect it, and each test worker would pay for the import.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

SERVER = """
import os, sys, time
import psutil
from flows._common import prefect_api
with prefect_api():
    children = psutil.Process().children()
    print("READY", " ".join(str(p.pid) for p in children), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_kill_9_of_a_run_stops_its_temporary_prefect_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    # A new database is migrated first: on a busy machine (tests in parallel) that can take
    # longer than Prefect's default 20 s wait for a temporary server.
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
    run = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert run.stdout is not None
        line = run.stdout.readline()
        assert line.startswith("READY"), line
        children = [int(pid) for pid in line.split()[1:]]
        assert len(children) == 2  # the server and its watchdog
        run.send_signal(signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in children)
    finally:
        run.kill()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """params.yaml of a folder with its graph: ready to assign (a small teacher search: what is
    checked is the publication, not the plan)."""
    data = tmp_path / "data"
    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    params = tmp_path / "params.yaml"
    params.write_text(
        f"data_dir: {data}\ngenerate: {{days: 2, end_date: '{yesterday}', "
        "probe_interval_s: 3600, throughput_interval_s: 10800}\n"
        "assign: {strategy: teacher}\n"
        "teacher: {max_evaluations: 40, time_budget_s: 20.0, random_starts: 0}\n"
    )
    (data / "jobs").mkdir(parents=True)
    shutil.copyfile(REPO / "data" / "jobs" / "upcoming.yaml", data / "jobs" / "upcoming.yaml")
    for args in (("generate", "--out", data), ("validate",), ("ingest",), ("graph",)):
        result = invoke("--params", params, *args)
        assert result.exit_code == 0, result.output
    return params


def _mlflow_runs(settings, run_id: str) -> list:
    with registry.tracking(settings) as track:
        experiment = track.client.get_experiment_by_name(settings.mlflow.assignment_experiment)
        return track.client.search_runs(
            [experiment.experiment_id], filter_string=f"tags.`hulk.placements.run_id` = '{run_id}'"
        )


def test_a_publication_cut_short_is_completed_by_the_next_run(folder: Path) -> None:
    from flows.assign import PUBLISHED, _finish, complete_last_publication, log_to_mlflow

    settings = load_settings(folder)
    placements = settings.assign.placements_dir
    # A whole publication: file, MLflow run, plot, record (what the assign flow does).
    first = steps.run("assign", settings).outputs["placements"]
    _finish(settings, first, None)
    record = json.loads((placements / PUBLISHED).read_text())
    assert record["run_id"] == first.stem and len(_mlflow_runs(settings, first.stem)) == 1
    assert complete_last_publication.fn(settings) is None  # nothing to complete
    # Killed right after "assign finished": a new latest.json, no MLflow run, the old plot.
    plot = placements / "latest.png"
    old_plot = plot.stat().st_mtime_ns
    second = steps.run("assign", settings).outputs["placements"]
    assert json.loads((placements / "latest.json").read_text())["run_id"] == second.stem
    assert _mlflow_runs(settings, second.stem) == []
    # The next run completes it first: its MLflow run, the plot of it, the record.
    assert complete_last_publication.fn(settings) == second.stem
    assert len(_mlflow_runs(settings, second.stem)) == 1
    assert plot.stat().st_mtime_ns > old_plot
    assert json.loads((placements / PUBLISHED).read_text())["run_id"] == second.stem
    assert complete_last_publication.fn(settings) is None
    # Killed after its MLflow run, before the plot: completed without a second MLflow run.
    third = steps.run("assign", settings).outputs["placements"]
    doc = json.loads(third.read_text())
    log_to_mlflow.fn(settings, str(third), placements_markdown(doc))
    assert complete_last_publication.fn(settings) == third.stem
    assert len(_mlflow_runs(settings, third.stem)) == 1
    assert json.loads((placements / PUBLISHED).read_text())["run_id"] == third.stem
    # The earlier runs' MLflow runs are still one each.
    assert len(_mlflow_runs(settings, first.stem)) == len(_mlflow_runs(settings, second.stem)) == 1
    # A run by hand (`hulk assign`) is published with `hulk publish`, once.
    by_hand = invoke("--params", folder, "assign")
    assert by_hand.exit_code == 0 and "hulk publish" in by_hand.output, by_hand.output
    fourth = json.loads((placements / "latest.json").read_text())["run_id"]
    assert _mlflow_runs(settings, fourth) == []
    done = invoke("--params", folder, "publish")
    assert done.exit_code == 0 and f"published {fourth}" in done.output, done.output
    assert len(_mlflow_runs(settings, fourth)) == 1
    assert json.loads((placements / PUBLISHED).read_text())["run_id"] == fourth
    again = invoke("--params", folder, "publish")
    assert again.exit_code == 0 and "published already" in again.output
    assert len(_mlflow_runs(settings, fourth)) == 1


def _publish_lock_taken_elsewhere(settings) -> str:
    """What another thread (as another process) gets asking for the publish lock at once."""
    import threading

    from hulk.errors import InputError
    from hulk.folder_lock import folder_lock

    got: list[str] = []

    def ask() -> None:
        try:
            with folder_lock(settings.data_dir, "publish", 0.0):
                got.append("taken")
        except InputError as exc:
            got.append(exc.rule)

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()
    return got[0]


def test_a_publication_logs_its_mlflow_run_under_the_publish_lock(folder: Path) -> None:
    """Logged outside the lock, a live run's MLflow run could be taken, by a run completing the
    publication, for one a killed publisher left, and deleted under its writer."""
    from flows.assign import PUBLISHED, _finish, log_to_mlflow

    settings = load_settings(folder)
    placements = steps.run("assign", settings).outputs["placements"]
    asked: list[str] = []

    def log(settings, path: str, markdown: str) -> str:
        asked.append(_publish_lock_taken_elsewhere(settings))
        return log_to_mlflow.fn(settings, path, markdown)

    mlflow_run = _finish(settings, placements, log=log)
    assert asked == ["lock.timeout"]
    record = json.loads((settings.assign.placements_dir / PUBLISHED).read_text())
    assert record["mlflow_run_id"] == mlflow_run

    # A run that waited for the lock while another completed its publication leaves it be.
    def fail(*args: object) -> str:
        raise AssertionError("logged twice")

    assert _finish(settings, placements, log=fail) == mlflow_run
    assert len(_mlflow_runs(settings, placements.stem)) == 1


def test_the_evaluate_step_draws_the_published_plot_under_the_publish_lock(
    folder: Path,
) -> None:
    """The nightly's evaluate step (and `hulk stage evaluate`, `dvc repro`) redraws latest.png:
    never while a publication, whose record vouches for the plot it drew, holds the lock."""
    import threading

    from hulk.errors import InputError
    from hulk.folder_lock import folder_lock

    settings = load_settings(folder)
    steps.run("assign", settings)
    plot = settings.assign.placements_dir / "latest.png"
    steps.run("evaluate", settings)
    drawn = plot.read_bytes()
    hurried = settings.model_copy(
        update={"scheduler": settings.scheduler.model_copy(update={"lock_timeout_s": 0.5})}
    )
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with folder_lock(settings.data_dir, "publish", 5.0):
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    try:
        with pytest.raises(InputError) as refused:
            steps.run("evaluate", hurried)
        assert refused.value.rule == "lock.timeout"
    finally:
        release.set()
        holder.join()
    assert plot.read_bytes() == drawn
