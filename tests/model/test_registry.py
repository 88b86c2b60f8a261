"""hulk.registry against a real MLflow sqlite registry in a temporary folder (no mocks).

One registry serves the whole module (MLflow's migrations take a few seconds on first use):
the `history` fixture trains three versions of a small torch module and promotes each in turn,
and the tests read what it left. Other scenarios use their own registered-model names in the
same database, so they do not disturb it. mlflow itself is imported only inside tests, after
hulk.registry has switched MLflow's telemetry off (it is decided when mlflow is first imported).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch

from hulk import registry
from hulk.errors import InputError
from hulk.settings import MlflowSettings, Settings

PLOT = b"\x89PNG\r\n\x1a\n not really a plot"


def _linear(seed: int) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


EVAL_SET = "a" * 64  # the content hash of the evaluation set the fixture's versions are scored on


def _train(
    settings: Settings, seed: int, ratio: float, plots: Path, eval_set: str = EVAL_SET
) -> registry.RegisteredVersion:
    """Log one 'training run' of a Linear(4, 3) whose plan-cost ratio on `eval_set` is `ratio`."""
    model = _linear(seed)
    version = registry.log_training_run(
        settings,
        params={"lr": 0.003, "epochs": 3, "model": {"hidden": 4, "conv": "gcn"}},
        history=[
            {"epoch": epoch, "train/loss": 1.0 / epoch, "train/accuracy": 0.5 + 0.1 * epoch}
            for epoch in (1, 2, 3)
        ],
        metrics={
            "test/node_accuracy": 0.8,
            "test/makespan_ratio": ratio + 0.01,
            "gate/score": ratio,
            "inference_s": 0.01,
            "teacher_s": 2.0,
        },
        state_dict=model.state_dict(),
        config={"in_features": 4, "out_features": 3, "seed": seed},
        artifacts={"plots/learning_curves.png": plots, "fleet_map": plots},
        tags={"git_commit": "abc123", "seed": seed},
        run_name=f"seed-{seed}",
    )
    scores = {"gate/score": ratio, "test/node_accuracy": 0.8}
    registry.record_evaluation(settings, version.version, eval_set, scores)
    return version


@dataclass(frozen=True)
class History:
    settings: Settings
    versions: list[registry.RegisteredVersion]
    decisions: list[registry.Decision]
    challenger_after_first: int  # the challenger alias right after the first run, before promotion


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    data = tmp_path_factory.mktemp("data")
    settings = Settings(data_dir=data)  # default mlflow section: sqlite:///mlruns.db in data_dir
    plots = data / "curves.png"
    plots.write_bytes(PLOT)
    versions, decisions = [], []
    versions.append(_train(settings, seed=1, ratio=1.10, plots=plots))
    with registry.tracking(settings) as track:
        aliases = track.client.get_registered_model("hulk-gnn").aliases
    decisions.append(registry.promote_if_better(settings, versions[0], EVAL_SET))
    versions.append(_train(settings, seed=2, ratio=1.25, plots=plots))  # worse
    decisions.append(registry.promote_if_better(settings, versions[1], EVAL_SET))
    versions.append(_train(settings, seed=3, ratio=1.05, plots=plots))  # better
    decisions.append(registry.promote_if_better(settings, versions[2], EVAL_SET))
    return History(settings, versions, decisions, int(aliases["challenger"]))


def _version_tags(settings: Settings, version: int) -> dict[str, str]:
    with registry.tracking(settings) as track:
        return track.client.get_model_version(settings.mlflow.registered_model, str(version)).tags


def test_relative_sqlite_path_resolves_against_the_data_folder(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    assert registry.sqlite_path(settings) == tmp_path / "data" / "mlruns.db"
    assert registry.tracking_uri(settings) == f"sqlite:///{tmp_path}/data/mlruns.db"
    assert registry.artifact_location(settings) == tmp_path / "data" / "mlartifacts"
    assert registry.ui_command(settings) == (
        f"mlflow ui --backend-store-uri sqlite:///{tmp_path}/data/mlruns.db --workers 1"
    )


def test_absolute_and_server_uris_are_used_as_written(tmp_path: Path) -> None:
    absolute = Settings(mlflow=MlflowSettings(tracking_uri=f"sqlite:///{tmp_path}/r.db"))
    assert registry.tracking_uri(absolute) == f"sqlite:///{tmp_path}/r.db"
    server = Settings(mlflow=MlflowSettings(tracking_uri="http://127.0.0.1:5000"))
    assert registry.sqlite_path(server) is None
    assert registry.tracking_uri(server) == "http://127.0.0.1:5000"


def test_telemetry_is_off() -> None:
    # MLflow checks this before recording (and so before sending) any usage event.
    from mlflow.telemetry.utils import is_telemetry_disabled

    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert is_telemetry_disabled()


def test_no_registry_means_no_champion_and_creates_nothing(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert not registry.champion_exists(settings)
    with pytest.raises(InputError, match="no champion model yet: run `hulk train`") as caught:
        registry.load_model_files(settings)
    assert caught.value.rule == "registry.no_champion"
    assert list(tmp_path.iterdir()) == []


def test_a_new_version_becomes_the_challenger(history: History) -> None:
    assert [v.version for v in history.versions] == [1, 2, 3]
    assert history.challenger_after_first == 1
    with registry.tracking(history.settings) as track:
        model = track.client.get_registered_model("hulk-gnn")
        version = track.client.get_model_version("hulk-gnn", "3")
    assert model.aliases["challenger"] == 3  # moved by each new run
    assert version.run_id == history.versions[2].run_id
    assert version.source.endswith(f"/{history.versions[2].run_id}/artifacts/model")
    assert version.tags["git_commit"] == "abc123"


def test_first_version_is_promoted_without_a_champion(history: History) -> None:
    first = history.decisions[0]
    assert first.promoted and first.previous_champion is None and first.champion == 1
    assert first.candidate_value == pytest.approx(1.10)
    tags = _version_tags(history.settings, 1)
    assert tags["hulk.promotion.decision"] == "promoted"
    assert tags["hulk.promotion.previous_champion"] == "none"
    assert tags["hulk.promotion.replaced_by"] == "3"


def test_worse_version_is_refused_and_the_champion_stays(history: History) -> None:
    worse = history.decisions[1]
    assert not worse.promoted
    assert (worse.candidate_value, worse.champion_value) == (pytest.approx(1.25), 1.10)
    assert worse.previous_champion == 1 and worse.champion == 1
    tags = _version_tags(history.settings, 2)
    assert tags["hulk.promotion.decision"] == "refused"
    assert tags["hulk.promotion.metric"] == "gate/score"
    assert float(tags["hulk.promotion.candidate_value"]) == pytest.approx(1.25)
    assert float(tags["hulk.promotion.champion_value"]) == pytest.approx(1.10)
    assert tags["hulk.promotion.previous_champion"] == "1"
    assert "worse than champion version 1" in tags["hulk.promotion.reason"]
    with registry.tracking(history.settings) as track:
        run_tags = track.client.get_run(history.versions[1].run_id).data.tags
    assert run_tags["hulk.promotion.decision"] == "refused"


def test_better_version_is_promoted(history: History) -> None:
    better = history.decisions[2]
    assert better.promoted and better.previous_champion == 1 and better.champion == 3
    assert registry.champion_exists(history.settings)
    with registry.tracking(history.settings) as track:
        assert track.client.get_model_version_by_alias("hulk-gnn", "champion").version == 3
    assert _version_tags(history.settings, 3)["hulk.promotion.champion_value"] == "1.1"


def test_load_by_alias_gives_the_identical_tensors(history: History) -> None:
    state_dict, config, info = registry.load_model_files(history.settings)
    expected = _linear(3).state_dict()
    assert state_dict.keys() == expected.keys()
    assert all(torch.equal(state_dict[key], expected[key]) for key in expected)
    assert config == {"in_features": 4, "out_features": 3, "seed": 3}
    assert (info.version, info.alias, info.run_id) == (3, "champion", history.versions[2].run_id)
    assert info.metrics["gate/score"] == pytest.approx(1.05)
    challenger, _, info = registry.load_model_files(history.settings, alias="challenger")
    assert info.version == 3 and torch.equal(challenger["weight"], expected["weight"])


@pytest.mark.parametrize("alias", ["champion", "challenger"])
def test_reading_the_sqlite_registry_directly_gives_what_mlflow_gives(
    history: History, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default backend (sqlite in the data folder, local artifacts) is read without MLflow.
    assert registry._local_version(history.settings, alias) is not None
    direct = registry.load_model_files(history.settings, alias=alias)
    monkeypatch.setattr(registry, "_local_version", lambda settings, alias: None)
    through_mlflow = registry.load_model_files(history.settings, alias=alias)
    assert direct[0].keys() == through_mlflow[0].keys()
    assert all(torch.equal(direct[0][k], through_mlflow[0][k]) for k in direct[0])
    assert direct[1:] == through_mlflow[1:]  # the config and every field of the version info
    assert direct[2].tags and direct[2].metrics


def test_models_alias_uri_downloads_the_version_files(history: History, tmp_path: Path) -> None:
    import mlflow.artifacts

    with registry.tracking(history.settings):
        local = Path(
            mlflow.artifacts.download_artifacts(
                artifact_uri="models:/hulk-gnn@champion", dst_path=str(tmp_path)
            )
        )
    names = {p.name for p in local.iterdir()}
    assert {"config.json", "state_dict.pt", "settings.json"} <= names  # Hulk's own files
    assert {"MLmodel", "requirements.txt", "input_example.json"} <= names  # and MLflow's
    assert json.loads((local / "config.json").read_text())["seed"] == 3


def test_metrics_are_stored_per_epoch_with_steps(history: History) -> None:
    run_id = history.versions[0].run_id
    with registry.tracking(history.settings) as track:
        loss = track.client.get_metric_history(run_id, "train/loss")
        run = track.client.get_run(run_id)
    assert sorted((m.step, m.value) for m in loss) == [
        (1, 1.0),
        (2, 0.5),
        (3, pytest.approx(1 / 3)),
    ]
    assert run.data.metrics["test/node_accuracy"] == pytest.approx(0.8)
    assert run.data.params["model.hidden"] == "4" and run.data.params["lr"] == "0.003"
    assert run.data.tags["seed"] == "1" and run.info.status == "FINISHED"


def test_run_description_is_the_runs_note(history: History) -> None:
    run_id = history.versions[0].run_id
    registry.describe_run(history.settings, run_id, "**gate/score 1.05**")
    with registry.tracking(history.settings) as track:
        run = track.client.get_run(run_id)
    assert run.data.tags["mlflow.note.content"] == "**gate/score 1.05**"  # the UI's description


def test_artifacts_are_present(history: History) -> None:
    run_id = history.versions[0].run_id
    with registry.tracking(history.settings) as track:
        client = track.client
        top = {a.path for a in client.list_artifacts(run_id)}
        model = {a.path for a in client.list_artifacts(run_id, "model")}
        plots = {a.path for a in client.list_artifacts(run_id, "plots")}
        local = Path(client.download_artifacts(run_id, "fleet_map.png"))
    assert top == {"model", "plots", "fleet_map.png"}
    assert {"model/state_dict.pt", "model/config.json", "model/settings.json"} <= model
    assert "model/MLmodel" in model
    assert plots == {"plots/learning_curves.png"}
    assert local.read_bytes() == PLOT
    folder = registry.artifact_location(history.settings)
    assert (folder / run_id / "artifacts" / "model" / "state_dict.pt").is_file()


def test_registry_without_a_champion_says_so(history: History) -> None:
    settings = history.settings.model_copy(
        update={"mlflow": MlflowSettings(registered_model="no-champion")}
    )
    with pytest.raises(InputError, match=r"\[registry\.no_champion\] no champion model yet"):
        registry.load_model_files(settings)
    _train(settings, seed=4, ratio=1.0, plots=Path(__file__))
    assert not registry.champion_exists(settings)
    with pytest.raises(InputError, match="no champion model yet: run `hulk train`"):
        registry.load_model_files(settings)


def test_tampered_weights_are_refused(history: History) -> None:
    settings = history.settings.model_copy(
        update={"mlflow": MlflowSettings(registered_model="tampered")}
    )
    version = _train(settings, seed=5, ratio=1.0, plots=Path(__file__))
    assert registry.promote_if_better(settings, version, EVAL_SET).promoted
    weights = registry.artifact_location(settings) / version.run_id / "artifacts" / "model"
    torch.save({"weight": torch.zeros(3, 4)}, weights / "state_dict.pt")
    with pytest.raises(InputError, match=r"\[registry\.corrupt\]"):
        registry.load_model_files(settings)


def test_missing_candidate_metric_is_refused(history: History) -> None:
    decision = registry.promote_if_better(history.settings, 2, EVAL_SET, metric="no_such_metric")
    assert not decision.promoted and decision.champion == 3
    assert "has no finite no_such_metric on evaluation set" in decision.reason


def test_higher_is_better_direction(history: History) -> None:
    # Version 2's accuracy equals the champion's (0.8): a tie is not worse, so it is promoted.
    settings = history.settings.model_copy(
        update={"mlflow": MlflowSettings(registered_model="by-accuracy")}
    )
    first = _train(settings, seed=6, ratio=1.0, plots=Path(__file__))
    second = _train(settings, seed=7, ratio=2.0, plots=Path(__file__))
    registry.promote_if_better(
        settings, first, EVAL_SET, "test/node_accuracy", lower_is_better=False
    )
    tie = registry.promote_if_better(
        settings, second, EVAL_SET, "test/node_accuracy", lower_is_better=False
    )
    assert tie.promoted and tie.previous_champion == first.version
    assert "(higher is better)" in tie.reason


def test_bad_inputs_fail_before_a_run_is_created(history: History) -> None:
    settings = history.settings
    with registry.tracking(settings) as track:
        before = len(track.client.search_runs([track.experiment_id]))
    good = {"state_dict": _linear(0).state_dict(), "config": {"a": 1}}
    with pytest.raises(ValueError, match="both per-epoch"):
        registry.log_training_run(settings, {}, [{"loss": 1.0}], {"loss": 0.5}, **good)
    with pytest.raises(ValueError, match=r"Out of range float values"):
        registry.log_training_run(
            settings, {}, [], {}, state_dict=good["state_dict"], config={"x": math.nan}
        )
    with pytest.raises(TypeError, match=r"history\[0\]\.loss"):
        registry.log_training_run(settings, {}, [{"loss": "low"}], {}, **good)
    with pytest.raises(ValueError, match="reserved"):
        registry.log_training_run(settings, {}, [], {}, artifacts={"model/x": __file__}, **good)
    with registry.tracking(settings) as track:
        assert len(track.client.search_runs([track.experiment_id])) == before


def test_tracking_restores_the_global_mlflow_state(history: History) -> None:
    import mlflow

    before = (mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI"))
    with registry.tracking(history.settings) as track:
        assert mlflow.get_tracking_uri() == track.tracking_uri
        assert mlflow.get_registry_uri() == track.tracking_uri
        with mlflow.start_run() as run:  # the fluent API lands in the configured experiment
            mlflow.log_metric("x", 1.0, step=2)
        assert run.info.experiment_id == track.experiment_id
    assert (mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")) == before


def test_the_gate_never_compares_figures_of_different_evaluation_sets(history: History) -> None:
    settings = history.settings.model_copy(
        update={"mlflow": MlflowSettings(registered_model="two-sets")}
    )
    champion = _train(settings, seed=8, ratio=1.20, plots=Path(__file__))
    assert registry.promote_if_better(settings, champion, EVAL_SET).promoted
    # Far better, but measured on another set: refused, and the champion stays.
    other = "b" * 64
    challenger = _train(settings, seed=9, ratio=0.90, plots=Path(__file__), eval_set=other)
    refused = registry.promote_if_better(settings, challenger, other)
    assert not refused.promoted and refused.champion == champion.version
    assert "was not scored on evaluation set bbbbbbbbbbbb" in refused.reason
    assert refused.champion_value is None
    # The champion re-evaluated on tonight's set: now the two figures are comparable.
    registry.record_evaluation(settings, champion.version, other, {"gate/score": 1.3})
    promoted = registry.promote_if_better(settings, challenger, other)
    assert promoted.promoted and promoted.champion_value == 1.3
    assert _version_tags(settings, challenger.version)["hulk.promotion.eval_set"] == other


def test_the_experiment_opens_on_the_model_training_view(history: History) -> None:
    # MLflow 3's UI opens an experiment without a kind on its GenAI pages; Hulk's is tagged
    # as model training, on creation and when it existed before without the tag. A kind a
    # user picked in the UI stays.
    settings = history.settings
    with registry.tracking(settings) as track:
        tags = track.client.get_experiment(track.experiment_id).tags
        assert tags[registry.EXPERIMENT_KIND_TAG] == registry.MODEL_TRAINING
        track.client.delete_experiment_tag(track.experiment_id, registry.EXPERIMENT_KIND_TAG)
    with registry.tracking(settings) as track:
        tags = track.client.get_experiment(track.experiment_id).tags
        assert tags[registry.EXPERIMENT_KIND_TAG] == registry.MODEL_TRAINING
        track.client.set_experiment_tag(
            track.experiment_id, registry.EXPERIMENT_KIND_TAG, "genai_development"
        )
    with registry.tracking(settings) as track:
        tags = track.client.get_experiment(track.experiment_id).tags
        assert tags[registry.EXPERIMENT_KIND_TAG] == "genai_development"


@pytest.mark.slow
def test_epochs_keep_their_times_so_the_run_shows_how_long_training_took(history: History) -> None:
    settings = history.settings.model_copy(
        update={"mlflow": MlflowSettings(registered_model="epoch-times")}
    )
    seconds = [1.5, 2.0, 2.5]
    version = registry.log_training_run(
        settings,
        params={},
        history=[
            {"epoch": epoch, "loss": 1.0 / epoch, "seconds": took}
            for epoch, took in zip((1, 2, 3), seconds, strict=True)
        ],
        metrics={"test/node_accuracy": 0.8},
        state_dict=_linear(0).state_dict(),
        config={"seed": 0},
    )
    with registry.tracking(settings) as track:
        run = track.client.get_run(version.run_id)
        loss = sorted(track.client.get_metric_history(version.run_id, "loss"), key=lambda m: m.step)
    ends = [m.timestamp for m in loss]
    assert [b - a for a, b in itertools.pairwise(ends)] == [2000, 2500]
    assert ends[0] - run.info.start_time == 1500
    assert run.info.end_time - run.info.start_time >= 6000  # not the milliseconds of logging


def test_the_ui_link_opens_the_model_training_view(history: History, tmp_path: Path) -> None:
    with registry.tracking(history.settings) as track:
        experiment_id = track.experiment_id
    url = registry.ui_runs_url(history.settings)
    assert url == (
        f"http://127.0.0.1:5000/#/experiments/{experiment_id}?workflowType=machine_learning"
    )
    fresh = Settings(data_dir=tmp_path)  # nothing trained: the list, and no database made
    assert registry.ui_runs_url(fresh).endswith("/#/experiments?workflowType=machine_learning")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_version_loads_as_an_mlflow_pyfunc_model_and_predicts(history: History) -> None:
    import mlflow.pyfunc

    from hulk.features import encode_inputs
    from hulk.jobs import parse_jobs
    from hulk.model import HulkGNN, ModelConfig
    from hulk.serving import fleet_probabilities, input_example

    settings = history.settings.model_copy(
        update={"mlflow": MlflowSettings(registered_model="pyfunc")}
    )
    example = input_example()
    inputs, _ = encode_inputs(
        pd.DataFrame(example["inventory"]),
        pd.DataFrame(example["links"]),
        parse_jobs({"jobs": example["jobs"]}),
        settings,
    )
    torch.manual_seed(0)
    model = HulkGNN(
        ModelConfig(
            node_features=inputs["x"].shape[1],
            edge_features=inputs["edge_attr"].shape[1],
            job_features=inputs["jobs"].shape[1],
            hidden=8,
            layers=1,
        )
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.onceregistry.clear()  # MLflow shows its type-hint warning once per process
        version = registry.log_training_run(
            settings, {}, [], {}, state_dict=model.state_dict(), config=model.config.to_dict()
        )
        with registry.tracking(settings):
            loaded = mlflow.pyfunc.load_model(f"models:/pyfunc/{version.version}")
    # Saving and loading the model says nothing a user has to act on.
    assert not [w for w in caught if "type hint" in str(w.message)]
    with registry.tracking(settings):
        assert loaded.metadata.signature is not None
        predicted = loaded.predict(example)
    assert list(predicted.columns) == ["node_id", "job", "probability"]
    assert sorted(set(predicted["job"])) == ["BERT-large", "idle"]
    by_machine = predicted.groupby("node_id")["probability"].sum()
    assert by_machine.to_numpy() == pytest.approx([1.0, 1.0])
    expected = fleet_probabilities(model, input_example(), settings)
    assert predicted["probability"].to_numpy() == pytest.approx(expected["probability"].to_numpy())
    with pytest.raises(Exception, match="jobs"):
        loaded.predict({"inventory": example["inventory"], "links": example["links"]})


def test_runs_name_their_source_and_commit(history: History) -> None:
    import subprocess

    root = Path(registry.__file__).resolve().parents[1]
    found = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    with registry.tracking(history.settings) as track:
        tags = track.client.get_run(history.versions[0].run_id).data.tags
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"]
    if found.returncode == 0:  # a checkout: the run names its commit
        assert tags["mlflow.source.git.commit"] == found.stdout.strip()
    else:
        assert "mlflow.source.git.commit" not in tags


@pytest.mark.slow
def test_the_training_data_is_logged_as_the_runs_dataset_input(
    history: History, tmp_path: Path
) -> None:
    settings = history.settings.model_copy(
        update={"mlflow": MlflowSettings(registered_model="with-datasets")}
    )
    corpus = registry.TrainingData("corpus", str(tmp_path / "corpus.pt"), "ab" * 32)
    version = registry.log_training_run(
        settings,
        {},
        [],
        {},
        state_dict=_linear(0).state_dict(),
        config={"seed": 0},
        datasets=[corpus],
    )
    with registry.tracking(settings) as track:
        inputs = track.client.get_run(version.run_id).inputs.dataset_inputs
    (logged,) = inputs
    assert logged.dataset.name == "corpus" and logged.dataset.digest == "ab" * 16
    assert str(tmp_path / "corpus.pt") in logged.dataset.source
    assert {(tag.key, tag.value) for tag in logged.tags} == {("mlflow.data.context", "training")}


@pytest.mark.slow
def test_training_metric_names_are_valid_grouped_and_gate_first() -> None:
    """Every name the train step logs passes MLflow's name rule, and the UI's sections (the
    names' prefixes, in alphabetical order) start with the gate."""
    import re

    from hulk.gnn_eval import BAND_METRICS, PART_METRICS, SIZE_BANDS
    from hulk.stages.train import EPOCH_NAMES, GATE_METRIC, run_metric_name

    keys = ["samples", "node_accuracy", "plan_cost_ratio_makespan", "plan_cost_ratio_sum"]
    keys += [f"{key}_{band}" for band, _ in SIZE_BANDS for key in ("samples", *BAND_METRICS)]
    keys += [f"{part}/{key}" for part in ("fleet", "synthetic") for key in PART_METRICS]
    names = [run_metric_name(key) for key in keys] + list(EPOCH_NAMES.values()) + [GATE_METRIC]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[\w\-. :/]+", name, re.ASCII), name  # MLflow's allowed characters
    sections = sorted({name.rpartition("/")[0] for name in names})
    assert sections[0] == "gate" and sections[-1] == "train"
    bands = [s for s in sections if s.startswith("test/by_size/")]
    assert bands == [f"test/by_size/{b}" for b in ("001-050", "051-100", "101-200", "201-more")]


def test_a_tracking_server_that_does_not_answer_is_named_at_once(tmp_path: Path) -> None:
    import http.server
    import socket
    import threading

    def on(uri: str) -> Settings:
        mlflow = MlflowSettings(tracking_uri=uri, connect_timeout_s=0.5)
        return Settings(data_dir=tmp_path, mlflow=mlflow)

    with socket.socket() as closed:  # a port nothing listens on: refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(InputError, match=r"mlflow\.unreachable.*mlflow\.tracking_uri"):
        registry.require_reachable(on(f"http://127.0.0.1:{port}"))
    with socket.socket() as silent:  # accepts, never answers: MLflow would wait minutes
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with pytest.raises(InputError, match=r"did not answer within 0\.5 s"):
            registry.require_reachable(on(f"http://127.0.0.1:{silent.getsockname()[1]}"))
    # Any answer will do, an error status included (a proxy's 401, a server without /health).
    for status in (200, 401):
        handler = type("Answer", (http.server.BaseHTTPRequestHandler,), {})
        handler.do_GET = lambda self, status=status: (  # type: ignore[attr-defined]
            self.send_response(status),
            self.end_headers(),
        )
        handler.log_message = lambda *args: None  # type: ignore[method-assign]
        with http.server.HTTPServer(("127.0.0.1", 0), handler) as server:
            answering = threading.Thread(target=server.handle_request)
            answering.start()
            registry.require_reachable(on(f"http://127.0.0.1:{server.server_address[1]}"))
            answering.join()
    registry.require_reachable(on("sqlite:///mlruns.db"))  # local: nothing to reach


def test_a_training_run_left_running_by_a_dead_process_is_marked_failed(
    history: History, tmp_path: Path
) -> None:
    # Last in the module: it adds a version to the shared registry.
    settings = history.settings
    with registry.tracking(settings) as track:
        dead = track.client.create_run(track.experiment_id, run_name="killed").info.run_id
    plots = tmp_path / "curves.png"
    plots.write_bytes(PLOT)
    version = _train(settings, seed=9, ratio=1.5, plots=plots)
    with registry.tracking(settings) as track:
        assert track.client.get_run(dead).info.status == "FAILED"
        assert track.client.get_run(version.run_id).info.status == "FINISHED"
