"""`hulk train` end to end on a tiny corpus: real MLflow (sqlite), then `hulk assign` uses it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hulk.cli import app
from hulk.corpus import manifest_path
from hulk.registry import tracking_uri
from hulk.settings import load_settings
from tests.flows.conftest import tiny_params

# MLflow is imported in the tests, not here: `make test-fast` collects this module
# only to deselect it, and each test worker would pay for the import.
pytestmark = pytest.mark.slow  # `make test-fast` leaves these out

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def tiny_project(tmp_path: Path) -> Path:
    """params.yaml of a tiny corpus and a short training, its data folder in tmp_path."""
    params = tmp_path / "params.yaml"
    tiny = tiny_params(tmp_path, corpus={"max_machines": 40, "max_evaluations": 300, "workers": 1})
    tiny["train"] = {"epochs": 3}
    # The teacher's first plans (before training) need no 2,000-evaluation search.
    tiny["teacher"] = {"max_evaluations": 40, "time_budget_s": 20.0, "random_starts": 0}
    del tiny["assign"]["placements_dir"], tiny["flows"]
    params.write_text(yaml.safe_dump(tiny))
    return params


def test_train_registers_a_champion_that_assign_then_uses(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    data = tmp_path / "data"
    params = tiny_project(tmp_path)
    # Before any training the default strategy is the teacher.
    for stage in ("generate", "validate", "ingest", "graph", "assign"):
        result = invoke("--params", params, "stage", stage)
        assert result.exit_code == 0, result.output
    latest = data / "placements" / "latest.json"
    assert json.loads(latest.read_text())["strategy"] == "teacher"

    result = invoke("--params", params, "train")
    assert result.exit_code == 0, result.output
    # Without --workers the corpus is labelled on params' corpus.workers processes.
    settings = load_settings(params)
    manifest = json.loads(manifest_path(settings.corpus.path).read_text())
    assert manifest["build"]["workers"] == 1
    assert "promoted: True" in result.output and "version: 1" in result.output
    assert (data / "mlruns.db").exists() and (data / "training" / "learning_curves.png").exists()
    # The run carries the learning curves, the current fleet's map and its cost bars.
    client = MlflowClient(tracking_uri(settings))
    version = client.get_model_version_by_alias("hulk-gnn", "champion")
    logged = {Path(a.path).name for a in client.list_artifacts(version.run_id, "plots")}
    assert logged == {"learning_curves.png", "fleet_map.png", "cost_bars.png"}
    # The epochs' metrics are dated by their wall times: the run's time axis and duration are
    # the training's, not the moment it was logged.
    run = client.get_run(version.run_id)
    seconds = client.get_metric_history(version.run_id, "train/epoch_seconds")
    total_ms = round(sum(m.value for m in seconds) * 1000)
    last = max(m.timestamp for m in client.get_metric_history(version.run_id, "train/loss"))
    assert total_ms > 10 and abs(last - run.info.start_time - total_ms) <= 2

    result = invoke("--params", params, "assign", "--data", data, "--out", data / "placements")
    assert result.exit_code == 0, result.output
    doc = json.loads(latest.read_text())
    assert doc["strategy"] == "gnn"
    assert doc["model"]["name"] == "hulk-gnn" and doc["model"]["alias"] == "champion"
    assert doc["model"]["version"] == "1"
    # Placed or queued, every job is accounted for; a fallback says why.
    assert len(doc["jobs"]) == 4
    assert doc["model"]["fallback"] is None or "GNN" in doc["model"]["fallback"]

    # --data names the data folder and the registry in it: another folder has no champion.
    other = tmp_path / "other"
    other.mkdir()
    for name in ("machines.csv", "links.parquet"):
        shutil.copy(data / name, other / name)
    result = invoke(
        "--params", params, "assign", "--data", other, "--strategy", "gnn", "--out", other / "p"
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no champion model yet" in result.output
    assert json.loads(latest.read_text())["strategy"] == "gnn"  # the last good file stands

    # What the train step reads, damaged or stale, stops it in one line before any epoch.
    def train_step() -> str:
        result = invoke("--params", params, "stage", "train")
        assert result.exit_code == 2, result.output
        return " ".join(result.output.split())

    versions = len(client.search_model_versions("name = 'hulk-gnn'"))
    wider = tmp_path / "wider.yaml"
    wider.write_text(yaml.safe_dump({**yaml.safe_load(params.read_text()), "model": {"hidden": 8}}))
    result = invoke("--params", wider, "stage", "train")  # the prior is params.yaml's
    assert result.exit_code == 2 and "[prior.stale]" in result.output, result.output

    snapshot = next((data / "labels" / "snapshots").glob("*.parquet"))
    kept = snapshot.read_bytes()
    snapshot.unlink()
    assert "[labels.readable]" in train_step() and snapshot.name in train_step()
    snapshot.write_bytes(kept)

    config = Path(version.source.removeprefix("file://")) / "config.json"
    kept = config.read_bytes()
    config.write_text(config.read_text().replace('"hidden": ', '"hidden": 1'))
    assert "[registry.corrupt]" in train_step() and "config.json" in train_step()
    config.write_bytes(kept)
    assert len(client.search_model_versions("name = 'hulk-gnn'")) == versions  # nothing trained

    # A damaged prior.pt is taken again from the data folder's cache, not reported reused as
    # it is (training then failed on it every night).
    prior = settings.corpus.path.with_name("prior.pt")
    recorded = json.loads(prior.with_suffix(".json").read_text())["state_dict_sha256"]
    prior.write_bytes(prior.read_bytes()[:100])
    result = invoke("--params", params, "stage", "prior")
    assert result.exit_code == 0, result.output
    assert hashlib.sha256(prior.read_bytes()).hexdigest() == recorded

    # --seed is every step's seed, the fleet's samples' draw among them, as `seed:` would be.
    samples = (data / "labels" / "samples.json").read_bytes()
    result = invoke("--params", params, "train", "--seed", 8)
    assert result.exit_code == 0, result.output
    assert (data / "labels" / "samples.json").read_bytes() != samples


def test_a_first_fine_tune_worse_than_the_prior_leaves_the_prior_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No champion yet: the prior is the bar. A fine-tune scoring worse on the gate (made so
    here: its evaluation is the first of the night, and its score is raised) is registered as
    the challenger, and the prior is registered before it, as the champion."""
    from mlflow import MlflowClient

    from hulk.stages import train as train_stage

    real = train_stage.run_metrics
    calls: list[int] = []

    def worse_first(*args, **kwargs):
        metrics = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:  # the fine-tune's figures, before the prior's
            metrics[train_stage.GATE_METRIC] += 0.5
        return metrics

    monkeypatch.setattr(train_stage, "run_metrics", worse_first)
    params = tiny_project(tmp_path)
    for stage in ("generate", "validate", "ingest", "graph"):
        assert invoke("--params", params, "stage", stage).exit_code == 0

    result = invoke("--params", params, "train")

    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "version: 2" in text and "promoted: False" in text
    assert "worse than champion version 1's" in text
    client = MlflowClient(tracking_uri(load_settings(params)))
    champion = client.get_model_version_by_alias("hulk-gnn", "champion")
    challenger = client.get_model_version_by_alias("hulk-gnn", "challenger")
    assert (str(champion.version), str(challenger.version)) == ("1", "2")
    run = client.get_run(champion.run_id)
    assert run.info.run_name == "v1 prior" and run.data.tags["hulk.start"] == "prior"
    assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["corpus"]  # trained on
    assert client.get_run(challenger.run_id).info.run_name == "v2 fine-tune from prior"
    assert "tonight's fine-tune scored worse" in run.data.tags["mlflow.note.content"]
