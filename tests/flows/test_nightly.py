"""The nightly and assign flows end to end under a Prefect test server, with real MLflow (sqlite)
and Great Expectations, on tiny params; then a broken log partition stops the nightly run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hulk import registry, steps
from hulk.settings import load_settings
from hulk.stages.generate import append_day
from hulk.stages.train import PARTS
from tests.flows.conftest import tiny_params, write_params

# Prefect (flows.*) is imported in the tests, not here: `make test-fast` collects this module
# only to deselect it, and each test worker would pay for the import.
pytestmark = pytest.mark.slow  # `make test-fast` leaves these out

REPO = Path(__file__).resolve().parents[2]
STEPS = ("validate", "ingest", "graph", "corpus", "prior", "labels", "train", "assign", "evaluate")


@pytest.fixture(scope="module")
def first_run(prefect_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Generate a tiny fleet and run the nightly flow once; every test here starts from it."""
    from flows.nightly import nightly

    root = tmp_path_factory.mktemp("nightly")
    params = write_params(root / "params.yaml", tiny_params(root))
    settings = load_settings(params)
    steps.run("generate", settings)
    state = nightly(params=str(params), return_state=True)
    return {"params": params, "settings": settings, "state": state}


def _artifact(artifact_id: str) -> dict:
    """An artifact as the Prefect API holds it (read by id: this server refuses the client's
    filter query with nulls in it)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.request("GET", "/artifacts/{id}", path_params={"id": artifact_id}).json()


def _assignment_runs(settings) -> list:
    from mlflow import MlflowClient

    uri = registry.tracking_uri(settings)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name(settings.mlflow.assignment_experiment)
    return client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{registry.TAG_KIND}` = 'assignment'"
    )


def test_nightly_runs_every_step_and_publishes(first_run: dict) -> None:
    from flows.assign import ARTIFACT_KEY

    state, settings = first_run["state"], first_run["settings"]
    assert state.is_completed(), state.message
    done = state.result()
    assert list(done) == [*STEPS]
    data = settings.data_dir
    latest = json.loads((data / "placements" / "latest.json").read_text())
    assert latest["schema"] == "hulk.placements/v1" and len(latest["jobs"]) == 4
    assert done["assign"]["run_id"] == latest["run_id"]
    # Teacher labels were fanned out and saved through the corpus step (one sample per fleet).
    manifest = json.loads(settings.corpus.path.with_suffix(".json").read_text())
    assert len(manifest["fleets"]) == 6 and len(manifest["samples"]) == 6
    # The fleet's own samples were labelled (fanned out), nothing was cached yet.
    labels = done["labels"]
    assert labels["labelled"] == labels["samples"] > 0 and labels["cached"] == 0
    assert labels["eval_samples"] > 0 and labels["train_samples"] > 0
    # Fine-tuned from the prior, registered and promoted: the assignment used the champion.
    assert done["train"]["version"] == 1 and done["train"]["promoted"] is True
    assert done["train"]["start"] == "prior"
    assert registry.champion_exists(settings) and latest["strategy"] == "gnn"
    # The training run names what it was trained on: the corpus and the fleet's own samples.
    with registry.tracking(settings) as track:
        inputs = track.client.get_run(done["train"]["run_id"]).inputs.dataset_inputs
    digests = {i.dataset.name: i.dataset.digest for i in inputs}
    assert set(digests) == {"corpus", "fleet-samples"}
    assert digests["corpus"] == manifest["sha256"][:32]
    # Every figure of every step, and DVC's few headline figures, with the published makespan.
    details = data / "metrics" / "details"
    for name in STEPS:
        assert (details / f"{name}.json").exists(), name
    assign_metrics = json.loads((details / "assign.json").read_text())
    assert assign_metrics["makespan_s"] == pytest.approx(latest["makespan_s"])
    assert json.loads((details / "validate.json").read_text())["errors"] == 0
    headline = json.loads((data / "metrics" / "evaluate.json").read_text())
    assert set(headline) == {"makespan_s", "min_speedup"}
    assert headline["makespan_s"] == pytest.approx(latest["makespan_s"])
    # The training run's metrics are grouped for the UI, the gate's score first.
    with registry.tracking(settings) as track:
        run = track.client.get_run(done["train"]["run_id"])
    names = set(run.data.metrics)
    assert {"gate/score", "gate/score_prior", "test/fleet/makespan_ratio"} <= names
    # The gate scores the model's own plans: the mean of the two parts' ratios of them.
    assert {"test/fleet/model_makespan_ratio_prior", "test/synthetic/model_makespan_ratio"} <= names
    assert "test/fleet/makespan_ratio_prior" not in names  # the prior: its own plans only
    parts = [run.data.metrics[f"test/{part}/model_makespan_ratio"] for part in PARTS]
    assert run.data.metrics["gate/score"] == pytest.approx(sum(parts) / 2)
    assert {"train/loss", "train/val_accuracy", "test/node_accuracy"} <= names
    assert all("/" in name for name in names), sorted(n for n in names if "/" not in n)
    assert run.data.tags["mlflow.note.content"].startswith("**gate/score")
    assert (data / "validation" / "docs" / "index.html").exists()
    # The Prefect table artifact and the MLflow copy of the published file.
    table = _artifact(done["assign"]["artifacts"]["table"])
    assert table["key"] == ARTIFACT_KEY and table["type"] == "table"
    assert latest["run_id"] in table["description"]
    rows = json.loads(table["data"])
    assert [row["job"] for row in rows] == [job["job"] for job in latest["jobs"]]
    assert {"machines", "stages", "iteration_s", "A_s", "B_s", "C_s"} <= set(rows[0])
    assert rows[0]["iteration_s"] == pytest.approx(
        latest["jobs"][0]["estimate"]["iteration_s"], rel=1e-3
    )
    runs = _assignment_runs(settings)
    assert [r.data.tags["hulk.placements.run_id"] for r in runs] == [latest["run_id"]]
    with registry.tracking(settings) as track:  # the training experiment has training only
        kinds = {
            r.data.tags.get(registry.TAG_KIND)
            for r in track.client.search_runs([track.experiment_id])
        }
    assert "assignment" not in kinds


def test_assign_flow_publishes_again_with_artifacts(first_run: dict) -> None:
    from flows.assign import assign_flow

    settings = first_run["settings"]
    before = json.loads((settings.data_dir / "placements" / "latest.json").read_text())
    result = assign_flow(params=str(first_run["params"]))
    latest_path = settings.data_dir / "placements" / "latest.json"
    latest = json.loads(latest_path.read_text())
    assert result["run_id"] == latest["run_id"] != before["run_id"]
    assert Path(result["placements"]).read_bytes() == latest_path.read_bytes()
    assert latest["model"]["alias"] == "champion"
    assert latest["run_id"] in _artifact(result["artifacts"]["table"])["description"]
    report = _artifact(result["artifacts"]["report"])
    assert report["type"] == "markdown" and latest["run_id"] in report["data"]
    # The same file, byte for byte, is an artifact of a new MLflow assignment run.
    import mlflow.artifacts

    runs = {r.data.tags["hulk.placements.run_id"]: r for r in _assignment_runs(settings)}
    run = runs[latest["run_id"]]
    assert run.info.run_id == result["mlflow_run_id"]
    local = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id,
        artifact_path=f"placements/{Path(result['placements']).name}",
        tracking_uri=registry.tracking_uri(settings),
    )
    assert Path(local).read_bytes() == latest_path.read_bytes()


def _folder_state(settings) -> dict:
    """What an assign run writes: placements, metrics, job store, MLflow assignment runs."""
    data = settings.data_dir
    files = [*(data / "placements").iterdir(), *(data / "metrics").rglob("assign.json")]
    files += [*(data / "jobs").glob("jobs.db*")]
    return {
        "files": {str(p.relative_to(data)): p.read_bytes() for p in files if p.is_file()},
        "mlflow": sorted(r.info.run_id for r in _assignment_runs(settings)),
    }


def _refused_the_lock(caplog: pytest.LogCaptureFixture, state, data: Path, lock: str) -> str:
    """`state` is a run refused the data folder's `lock` (held by this process), as the nightly
    is refused its own: the lock file and holder in one line, no traceback, no retry."""
    from hulk.errors import InputError
    from hulk.folder_lock import lock_path

    assert state.is_failed()
    assert state.message.startswith(
        f"{lock_path(data, lock)}: [lock.timeout] another run holds the data folder's {lock} lock "
        f"(pid {os.getpid()}, {lock} run, since "
    ), state.message
    with pytest.raises(InputError) as raised:  # what the command line or a parent flow gets
        state.result()
    assert str(raised.value) == state.message
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("prefect.")]
    assert state.message in lines  # the flow run's one line
    assert not [r.getMessage() for r in caplog.records if r.exc_info]  # no traceback
    assert not [line for line in lines if "Retry" in line]  # a refusal is not retried
    return state.message


@pytest.mark.parametrize("retries", [2, 0])  # Prefect logs a traceback of a task without retries
def test_assign_flow_on_a_folder_another_assign_run_holds_fails_in_one_line(
    first_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture, retries: int
) -> None:
    # The 15-minute assign flow while another assign run (or `hulk jobs`) holds the folder's
    # assign lock past scheduler.lock_timeout_s: refused before anything is written.
    from flows.assign import assign_flow
    from hulk.folder_lock import folder_lock

    settings = first_run["settings"]
    root = first_run["params"].parent
    params = tiny_params(root, scheduler={"lock_timeout_s": 0.2}, flows={"retries": retries})
    path = write_params(tmp_path / "params.yaml", params)
    before = _folder_state(settings)
    with folder_lock(settings.data_dir, "assign", 1.0):  # another assign run, in this process
        state = assign_flow(params=str(path), return_state=True)
    _refused_the_lock(caplog, state, settings.data_dir, "assign")
    assert _folder_state(settings) == before  # nothing written


def test_a_publication_killed_midway_is_logged_anew_not_left_running(first_run: dict) -> None:
    # A killed publish leaves its MLflow run RUNNING; the next publication of that placements
    # run deletes it and logs a whole one, and a whole one is reused as it is.
    from mlflow import MlflowClient

    from flows.assign import _assignment_run

    settings = first_run["settings"]
    uri = registry.tracking_uri(settings)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name(settings.mlflow.assignment_experiment)
    tag = {"hulk.placements.run_id": "2026-11-28T00-00-00Z-killed"}
    left = client.create_run(experiment.experiment_id, tags=tag)  # never terminated
    assert _assignment_run(settings, tag["hulk.placements.run_id"]) is None
    assert client.get_run(left.info.run_id).info.lifecycle_stage == "deleted"
    whole = client.create_run(experiment.experiment_id, tags=tag)
    client.set_terminated(whole.info.run_id)
    assert _assignment_run(settings, tag["hulk.placements.run_id"]) == whole.info.run_id
    client.delete_run(whole.info.run_id)  # the folder as the other tests expect it


def test_assign_flow_refused_the_publish_lock_leaves_its_publication_to_the_next_run(
    first_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from flows.assign import PUBLISHED, assign_flow
    from hulk.folder_lock import folder_lock

    settings = first_run["settings"]
    placements = settings.data_dir / "placements"
    root = first_run["params"].parent
    params = tiny_params(root, scheduler={"lock_timeout_s": 0.2})
    path = write_params(tmp_path / "params.yaml", params)
    published = json.loads((placements / PUBLISHED).read_text())["run_id"]
    # Another run publishes (its MLflow run, plot and record) past the timeout: this run placed
    # the jobs (latest.json is its own) and stops before its plot and record.
    with folder_lock(settings.data_dir, "publish", 1.0):
        state = assign_flow(params=str(path), return_state=True)
    _refused_the_lock(caplog, state, settings.data_dir, "publish")
    placed = json.loads((placements / "latest.json").read_text())["run_id"]
    assert placed != published
    assert json.loads((placements / PUBLISHED).read_text())["run_id"] == published
    # Refused it again while completing that publication: nothing written this time.
    caplog.clear()
    before = _folder_state(settings)
    with folder_lock(settings.data_dir, "publish", 1.0):
        state = assign_flow(params=str(path), return_state=True)
    _refused_the_lock(caplog, state, settings.data_dir, "publish")
    assert _folder_state(settings) == before
    # The next run completes it (its MLflow run logged already), then publishes its own.
    result = assign_flow(params=str(first_run["params"]))
    assert f"published {placed}, which latest.json held unpublished" in caplog.text
    runs = [r.data.tags["hulk.placements.run_id"] for r in _assignment_runs(settings)]
    assert runs.count(placed) == 1
    record = json.loads((placements / PUBLISHED).read_text())
    assert record["run_id"] == result["run_id"] != placed


def test_nightly_whose_assign_step_is_refused_its_lock_fails_in_one_line(
    first_run: dict,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The nightly's assign step (the assign subflow) while a 15-minute assign run holds the
    # assign lock: the subflow is refused, and the nightly with it, in the same line. Only that
    # step runs here (the others take no lock, and would train and promote a new model).
    from flows.nightly import nightly
    from hulk.folder_lock import folder_lock

    settings = first_run["settings"]
    monkeypatch.setattr(steps, "nightly_steps", lambda: [steps.BY_NAME["assign"]])
    params = tiny_params(first_run["params"].parent, scheduler={"lock_timeout_s": 0.2})
    path = write_params(tmp_path / "params.yaml", params)
    before = _folder_state(settings)
    with folder_lock(settings.data_dir, "assign", 1.0):
        state = nightly(params=str(path), return_state=True)
    message = _refused_the_lock(caplog, state, settings.data_dir, "assign")
    flows = [r for r in caplog.records if r.name == "prefect.flow_runs"]
    assert [getattr(r, "flow_name", None) for r in flows if r.getMessage() == message] == [
        "assign",
        "nightly",
    ]
    assert _folder_state(settings) == before


def test_a_second_night_labels_only_the_new_samples(first_run: dict) -> None:
    from flows.nightly import nightly

    settings = first_run["settings"]
    before = json.loads((settings.data_dir / "labels" / "samples.json").read_text())
    append_day(settings.data_dir, settings)
    state = nightly(params=str(first_run["params"]), return_state=True)
    assert state.is_completed(), state.message
    done = state.result()
    labels = done["labels"]
    # The block of the day before stays labelled; the new day's blocks are new.
    old_keys = {record["key"] for record in before["samples"]}
    after = json.loads((settings.data_dir / "labels" / "samples.json").read_text())
    new_keys = {record["key"] for record in after["samples"]}
    assert labels["cached"] == len(new_keys & old_keys) > 0
    assert labels["labelled"] == len(new_keys - old_keys) > 0
    cache = json.loads((settings.data_dir / "labels" / "labels.json").read_text())
    assert set(cache["labels"]) == new_keys  # labels no sample uses any more are dropped
    # Warm-started from the champion; both were scored on tonight's evaluation set.
    train = done["train"]
    assert train["version"] == 2 and train["start"] == "champion v1"
    with registry.tracking(settings) as track:
        tags = [
            track.client.get_model_version("hulk-gnn", str(v)).tags for v in (1, train["version"])
        ]
    eval_tag = next(k for k in tags[1] if k.startswith("hulk.eval."))
    assert json.loads(tags[0][eval_tag])["eval_set"] == json.loads(tags[1][eval_tag])["eval_set"]
    assert tags[1]["hulk.promotion.eval_set"].startswith(train["eval_set"])


def test_nightly_on_an_imported_folder_skips_validation_and_ingest(first_run: dict) -> None:
    from flows.nightly import nightly

    settings = first_run["settings"]
    imported = first_run["params"].parent / "imported"
    imported.mkdir()
    for name in ("machines.csv", "links.parquet"):  # what `hulk import-hulk` writes
        (imported / name).write_bytes((settings.data_dir / name).read_bytes())
    params = tiny_params(first_run["params"].parent, assign={"placements_dir": str(imported)})
    params["data_dir"] = str(imported)
    path = write_params(imported / "params.yaml", params)
    state = nightly(params=str(path), return_state=True)
    assert state.is_completed(), state.message
    done = state.result()
    assert list(done) == [name for name in STEPS if name not in ("validate", "ingest")]
    assert done["corpus"]["reused"] and done["prior"]["reused"]
    index = json.loads((imported / "labels" / "samples.json").read_text())
    assert index["source"] == "link table"
    assert {r["snapshot"] for r in index["samples"] if r["role"] == "eval"} == {"links"}
    assert (imported / "latest.json").exists()


def test_nightly_on_a_folder_without_logs_or_links_names_both(
    first_run: dict, tmp_path: Path
) -> None:
    from flows.nightly import nightly

    params = tiny_params(tmp_path)
    path = write_params(tmp_path / "params.yaml", params)
    (tmp_path / "data").mkdir()
    state = nightly(params=str(path), return_state=True)
    assert state.is_failed()
    assert "logs" in state.message and "links.parquet" in state.message


def test_broken_partition_fails_nightly_before_anything_is_published(
    first_run: dict, caplog: pytest.LogCaptureFixture
) -> None:
    from flows.nightly import nightly

    settings = first_run["settings"]
    data = settings.data_dir
    latest_path = data / "placements" / "latest.json"
    published = latest_path.read_bytes()
    placement_files = sorted((data / "placements").glob("*.json"))
    champion = registry.load_model_files(settings)[2].version
    assignment_runs = len(_assignment_runs(settings))
    # A day file without its elapsed_ms column: an InputError naming the file and the column.
    day = sorted((data / "logs").iterdir())[-1] / "probes.parquet"
    pq.write_table(pq.read_table(day).drop_columns(["elapsed_ms"]), day)

    state = nightly(params=str(first_run["params"]), return_state=True)
    assert state.is_failed()
    assert "probes.parquet" in state.message and "elapsed_ms" in state.message
    assert latest_path.read_bytes() == published
    assert sorted((data / "placements").glob("*.json")) == placement_files
    assert registry.load_model_files(settings)[2].version == champion
    assert len(_assignment_runs(settings)) == assignment_runs  # nothing new
    # The runs' logs say it in one line each: bad input gets no traceback.
    told = [r for r in caplog.records if "elapsed_ms" in r.getMessage()]
    assert told and not any(r.exc_info or r.exc_text for r in told)


def test_nightly_on_a_folder_another_nightly_holds_fails_in_one_line(tmp_path: Path) -> None:
    # `hulk nightly` as a user runs it (a temporary Prefect API) while another process holds
    # the folder's nightly lock past scheduler.lock_timeout_s: the lock file and its holder in
    # one line, exit code 2, no traceback, and no log left to fail against the stopped API.
    from hulk.folder_lock import folder_lock, lock_path

    data = tmp_path / "data"
    data.mkdir()
    params = tiny_params(tmp_path, scheduler={"lock_timeout_s": 0.2})
    path = write_params(tmp_path / "params.yaml", params)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"  # a new database, a busy CPU
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    command = [
        sys.executable,
        "-m",
        "hulk.cli",
        "--params",
        str(path),
        "nightly",
        "--data",
        str(data),
    ]
    with folder_lock(data, "nightly", 1.0):  # another nightly, in this process
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 2, output
    message = (
        f"{lock_path(data, 'nightly')}: [lock.timeout] another run holds the data folder's "
        f"nightly lock (pid {os.getpid()}, nightly run, since "
    )
    assert f"error: {message}" in output  # the command line's line
    assert "Finished in state Failed(" in output  # the flow run failed, its message that line
    assert "Traceback" not in output and "Error logging to API" not in output, output
    assert sorted(p.name for p in data.iterdir()) == [".locks"]  # nothing else written


def test_train_on_a_folder_without_its_graph_fails_before_training(
    first_run: dict, tmp_path: Path
) -> None:
    import shutil

    from hulk.errors import InputError

    settings = first_run["settings"]
    copy = tmp_path / "data"
    shutil.copytree(
        settings.data_dir, copy, ignore=shutil.ignore_patterns("graph", "training", "mlruns.db")
    )
    moved = settings.with_data_dir(copy)
    with pytest.raises(InputError, match=r"graph\.stale.*no fleet graph"):
        steps.run("train", moved)
    # Nothing was trained: no learning curve for a model that was never registered.
    assert not (copy / "training").exists() and not (copy / "mlruns.db").exists()


def test_samples_that_leave_nothing_to_train_on_fail_before_any_label(
    first_run: dict, tmp_path: Path
) -> None:
    from hulk.errors import ConfigError
    from hulk.stages.fleet_labels import fleet_labels

    settings = first_run["settings"]
    imported = tmp_path / "imported"  # a link table only: no logs to be validated first
    imported.mkdir()
    for name in ("machines.csv", "links.parquet"):
        (imported / name).write_bytes((settings.data_dir / name).read_bytes())
    held_out = settings.fleet_samples.model_copy(update={"val_fraction": 0.999999})

    def no_labelling(task, tasks):  # the teacher must not be asked for a single label
        raise AssertionError("labelled")

    with pytest.raises(ConfigError, match=r"none of tonight's \d+ samples is a training sample"):
        fleet_labels(
            imported,
            settings.with_data_dir(imported).model_copy(update={"fleet_samples": held_out}),
            map_labels=no_labelling,
        )
    assert not (imported / "labels").exists()


def test_flows_on_a_data_folder_that_is_not_there_fail_in_one_line(
    first_run: dict, tmp_path: Path
) -> None:
    from flows.assign import assign_flow
    from flows.nightly import nightly

    # Without its jobs file the night would train for minutes, then fail at assign.
    (tmp_path / "data").mkdir()
    params = tiny_params(tmp_path, assign={"jobs_file": str(tmp_path / "none.yaml")})
    state = nightly(params=str(write_params(tmp_path / "p.yaml", params)), return_state=True)
    assert state.is_failed() and "[jobs.missing_file]" in state.message
    assert list((tmp_path / "data").iterdir()) == []
    typo = tmp_path / "no-such-folder"
    for flow in (nightly, assign_flow):
        state = flow(params=str(first_run["params"]), data_dir=str(typo), return_state=True)
        assert state.is_failed() and "data.missing_folder" in state.message, flow
        assert not typo.exists()  # no folder, lock or cache grown from the typo
