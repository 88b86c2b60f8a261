"""The nightly and assign flows end to end under a Prefect test server, with real MLflow (sqlite)
and Great Expectations, on tiny params; then a broken log partition stops the nightly run."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.assign import ARTIFACT_KEY, assign_flow
from flows.nightly import nightly
from hulk import pipeline, registry
from hulk.settings import load_settings
from tests.flows.conftest import tiny_params, write_params


@pytest.fixture(scope="module")
def first_run(prefect_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Generate a tiny fleet and run the nightly flow once; every test here starts from it."""
    root = tmp_path_factory.mktemp("nightly")
    params = write_params(root / "params.yaml", tiny_params(root))
    settings = load_settings(params)
    pipeline.generate(settings.data_dir, settings)
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
    experiment = client.get_experiment_by_name(settings.mlflow.experiment)
    return client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{registry.TAG_KIND}` = 'assignment'"
    )


def test_nightly_runs_every_step_and_publishes(first_run: dict) -> None:
    state, settings = first_run["state"], first_run["settings"]
    assert state.is_completed(), state.message
    done = state.result()
    assert list(done) == ["validate", "ingest", "graph", "corpus", "train", "assign", "evaluate"]
    data = settings.data_dir
    latest = json.loads((data / "placements" / "latest.json").read_text())
    assert latest["schema"] == "hulk.placements/v1" and len(latest["jobs"]) == 4
    assert done["assign"]["run_id"] == latest["run_id"]
    # Teacher labels were fanned out and saved through the corpus step (one sample per fleet).
    manifest = json.loads(settings.corpus.path.with_suffix(".json").read_text())
    assert len(manifest["fleets"]) == 6 and len(manifest["samples"]) == 6
    # Trained, registered and promoted: the assignment then used the champion.
    assert done["train"]["version"] == 1 and done["train"]["promoted"] is True
    assert registry.champion_exists(settings) and latest["strategy"] == "gnn"
    # Metrics of every step for DVC, with the published makespan.
    metrics = data / "metrics"
    for name in ("validate", "ingest", "graph", "corpus", "train", "assign", "evaluate"):
        assert (metrics / f"{name}.json").exists(), name
    assign_metrics = json.loads((metrics / "assign.json").read_text())
    assert assign_metrics["makespan_s"] == pytest.approx(latest["makespan_s"])
    assert json.loads((metrics / "validate.json").read_text())["errors"] == 0
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


def test_assign_flow_publishes_again_with_artifacts(first_run: dict) -> None:
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


def test_broken_partition_fails_nightly_before_anything_is_published(first_run: dict) -> None:
    settings = first_run["settings"]
    data = settings.data_dir
    latest_path = data / "placements" / "latest.json"
    published = latest_path.read_bytes()
    placement_files = sorted((data / "placements").glob("*.json"))
    champion = registry.load_model_files(settings)[2].version
    # A day file without its elapsed_ms column: an InputError naming the file and the column.
    day = sorted((data / "logs").iterdir())[-1] / "probes.parquet"
    pq.write_table(pq.read_table(day).drop_columns(["elapsed_ms"]), day)

    state = nightly(params=str(first_run["params"]), return_state=True)
    assert state.is_failed()
    assert "probes.parquet" in state.message and "elapsed_ms" in state.message
    assert latest_path.read_bytes() == published
    assert sorted((data / "placements").glob("*.json")) == placement_files
    assert registry.load_model_files(settings)[2].version == champion
    assert len(_assignment_runs(settings)) == 2  # the two good runs above, nothing new
