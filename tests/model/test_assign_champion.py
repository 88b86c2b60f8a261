"""`hulk assign --strategy gnn` as a process: what it imports, and the champion built only when
the GNN has jobs to lay out (`hulk.stages.assign.Champion`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hulk import registry
from hulk.features import encode_inputs
from hulk.jobs import dump_jobs, preset_jobs
from hulk.model import HulkGNN, ModelConfig
from hulk.settings import Settings
from hulk.stages.assign import load_champion
from tests.conftest import write_tiny

REPO = Path(__file__).resolve().parents[2]

# Never needed by the GNN strategy's run: MLflow (the registry is read with sqlite), Prefect,
# Great Expectations, the plotting and graph libraries. PyG's import of torch.compile's tracer
# is left for first use (`hulk.pyg`).
NOT_ON_THE_PATH = (
    "mlflow",
    "prefect",
    "great_expectations",
    "matplotlib",
    "networkx",
    "torch._dynamo",
)
WATCHED = (*NOT_ON_THE_PATH, "torch", "torch_geometric")

# A fresh interpreter runs the CLI and reports, at exit, which watched modules it imported.
PROBE = """
import atexit, json, sys
watched = json.loads(sys.argv[1])
atexit.register(lambda: print("IMPORTED", json.dumps([m for m in watched if m in sys.modules])))
from hulk.cli import app
app(sys.argv[2:], prog_name="hulk")
"""


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `tiny` (data/) with a freshly initialised GNN of a small shape registered
    as champion, and a jobs file of two jobs that start together on it (jobs.yaml). Built once:
    a new MLflow database takes seconds to migrate; each test works on a copy of it."""
    root = tmp_path_factory.mktemp("champion")
    tiny = write_tiny(root / "data")
    jobs = preset_jobs(["GPT-2-1.5B", "BERT-large"])
    (root / "jobs.yaml").write_text(dump_jobs(jobs))
    settings = Settings().with_data_dir(tiny)
    from hulk.data_folder import load_frames

    inventory, links = load_frames(tiny, settings)
    inputs, _ = encode_inputs(inventory, links, jobs, settings)
    config = ModelConfig(
        node_features=int(inputs["x"].shape[1]),
        edge_features=int(inputs["edge_attr"].shape[1]),
        job_features=int(inputs["jobs"].shape[1]),
        hidden=8,
        layers=2,
    )
    torch.manual_seed(0)
    version = registry.log_training_run(
        settings,
        params={"test": "assign champion"},
        history=[{"epoch": 1, "train/loss": 0.0}],
        metrics={"gate/score": 1.0},
        state_dict=HulkGNN(config).eval().state_dict(),
        config=config.to_dict(),
        run_name="untrained",
    )
    registry.record_evaluation(settings, version.version, "test", {"gate/score": 1.0})
    assert registry.promote_if_better(settings, version, "test").promoted
    return root


@pytest.fixture
def champion_folder(registered: Path, tmp_path: Path) -> tuple[Path, Path, Settings]:
    """This test's own copy of `registered` (the tests write placements and damage weights): the
    data folder, its registry with it, and the jobs file, at the paths a test's own `tiny`
    folder would have."""
    shutil.copytree(registered, tmp_path, dirs_exist_ok=True)
    tiny = tmp_path / "data"
    return tiny, tmp_path / "jobs.yaml", Settings().with_data_dir(tiny)


def _assign_process(data: Path, jobs_file: Path, out: Path) -> tuple[list[str], dict]:
    """One `hulk assign --strategy gnn` process: the watched modules it imported and the
    placements file it wrote."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    args = ["assign", "--data", data, "--jobs", jobs_file, "--strategy", "gnn", "--out", out]
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(WATCHED), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=data.parent,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(s for s in result.stdout.splitlines() if s.startswith("IMPORTED "))
    imported = json.loads(line.removeprefix("IMPORTED "))
    return imported, json.loads((out / "latest.json").read_text())


@pytest.mark.slow  # two fresh interpreters running the CLI
def test_gnn_assign_imports_only_what_it_uses(
    champion_folder: tuple[Path, Path, Settings],
) -> None:
    data, jobs_file, _ = champion_folder
    # First run: both jobs start together, so the GNN lays them out.
    imported, doc = _assign_process(data, jobs_file, data / "placements" / "1")
    assert doc["queue"]["actions"] == {"start": 2}
    assert doc["model"] == {
        "name": "hulk-gnn",
        "version": "1",
        "alias": "champion",
        "fallback": None,
    }
    assert sorted(imported) == ["torch", "torch_geometric"]
    # Second run on the same fleet: both keep their machines, nothing for the GNN to lay out,
    # so neither torch nor PyG is imported; the file still names the champion.
    imported, doc = _assign_process(data, jobs_file, data / "placements" / "2")
    assert doc["queue"]["actions"] == {"keep": 2}
    assert doc["model"]["version"] == "1" and doc["model"]["alias"] == "champion"
    assert imported == []


def _champion_files(settings: Settings) -> Path:
    """The folder of the champion's registered files."""
    files = registry.local_model_files(settings)
    assert files is not None
    return files.folder


def test_a_corrupt_champion_stops_the_run_before_the_model_is_needed(
    champion_folder: tuple[Path, Path, Settings],
) -> None:
    _, _, settings = champion_folder
    (_champion_files(settings) / registry.STATE_DICT_FILE).write_bytes(b"not the registered")
    with pytest.raises(registry.InputError, match=r"\[registry\.corrupt\]"):
        load_champion(settings)


def _edit_config(settings: Settings, **changes: object) -> None:
    path = _champion_files(settings) / registry.CONFIG_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_champion_whose_config_was_edited_is_refused(
    champion_folder: tuple[Path, Path, Settings],
) -> None:
    """config.json's checksum is recorded at registration like the weights': an edit that still
    builds a model (another dropout) would change what the champion computes without a word."""
    _, _, settings = champion_folder
    _edit_config(settings, dropout=0.5)
    with pytest.raises(registry.InputError, match=r"\[registry\.corrupt\].*config\.json"):
        load_champion(settings)


def test_a_champion_whose_config_does_not_fit_its_weights_is_a_bad_version(
    champion_folder: tuple[Path, Path, Settings],
) -> None:
    """A version registered before the config's checksum was: its config is checked against
    the weights when the model is built, one line rather than torch's size-mismatch trace."""
    from mlflow import MlflowClient

    _, _, settings = champion_folder
    client = MlflowClient(registry.tracking_uri(settings))
    client.delete_model_version_tag("hulk-gnn", "1", registry.TAG_CONFIG_SHA256)
    _edit_config(settings, hidden=4)
    champion = load_champion(settings)
    with pytest.raises(registry.InputError, match=r"\[registry\.bad_version\].*do not fit"):
        champion.model()


def test_a_champion_without_its_files_is_a_bad_version(
    champion_folder: tuple[Path, Path, Settings],
) -> None:
    _, _, settings = champion_folder
    shutil.rmtree(_champion_files(settings))
    with pytest.raises(registry.InputError, match=r"\[registry\.bad_version\].*cannot be read"):
        load_champion(settings)


def test_a_damaged_registry_database_leaves_the_run_to_the_teacher(
    champion_folder: tuple[Path, Path, Settings],
) -> None:
    """Placements must not stop on a broken registry: `auto` places with the teacher and says
    why; training, which must write to it, refuses in one line."""
    from typer.testing import CliRunner

    from hulk.cli import app

    data, jobs_file, settings = champion_folder
    db = data / "mlruns.db"
    with open(db, "r+b") as handle:
        handle.write(b"GARBAGE" * 15)
    with pytest.raises(registry.InputError, match=r"\[registry\.readable\]"):
        registry.champion_exists(settings)
    out = data / "placements" / "damaged"
    args = ["assign", "--data", data, "--jobs", jobs_file, "--out", out]
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert "registry.readable" in result.output
    doc = json.loads((out / "latest.json").read_text())
    assert doc["strategy"] == "teacher"


def test_the_champion_is_the_registered_model(champion_folder: tuple[Path, Path, Settings]) -> None:
    _, _, settings = champion_folder
    champion = load_champion(settings)
    state, config, _ = registry.load_model_files(settings)
    model = champion.model()
    assert champion.model() is model  # built once
    assert model.config.to_dict() == config and not model.training
    built = model.state_dict()
    assert built.keys() == state.keys()
    assert all(torch.equal(built[name], state[name]) for name in state)


def test_a_refused_gnn_plan_is_named_in_the_placements_file(
    champion_folder: tuple[Path, Path, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick check refuses the model's plans for the jobs starting together (made to
    here): the teacher's are weighed instead, and `model.fallback` says why."""
    from typer.testing import CliRunner

    from hulk import gnn
    from hulk.cli import app

    data, jobs_file, _ = champion_folder
    monkeypatch.setattr(gnn, "_quick_check", lambda *args, **kwargs: "refused for this test")
    out = data / "placements" / "checked"
    args = ["assign", "--data", data, "--jobs", jobs_file, "--strategy", "gnn", "--out", out]
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "latest.json").read_text())
    assert doc["queue"]["actions"] == {"start": 2}
    assert "refused for this test" in (doc["model"]["fallback"] or "")
    assert "[assign.gnn_fallback]" in result.output  # and the run says so


def test_a_registry_another_process_holds_leaves_the_run_to_the_teacher(
    champion_folder: tuple[Path, Path, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from hulk import registry_read
    from hulk.stages import assign as stage

    data, jobs_file, settings = champion_folder
    database = registry.sqlite_path(settings)
    assert database is not None and database.is_file()
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # a nightly registering its model
    monkeypatch.setattr(registry_read, "BUSY_TIMEOUT_S", 0.1)
    try:
        result = stage.run(data, settings, jobs_file=jobs_file, strategy="auto")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.summary.strategy == "teacher"
    assert [w.rule for w in result.warnings] == ["mlflow.unreachable"]
    assert "held by another process" in result.warnings[0].message
