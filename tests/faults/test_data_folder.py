"""A data folder is self-contained (issue 15, item 1): a copied or moved folder works on its own
and never touches the original.

The params' paths under ``data_dir`` (jobs file, placements folder, corpus) follow ``--data``
(`Settings.with_data_dir`); the MLflow registry's absolute artifact locations are re-pointed at
the folder in use when it was copied or moved (`hulk.registry_folder`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from hulk import registry
from hulk.settings import Settings, settings_from_dict
from tests.faults.conftest import digest, invoke

REPO = Path(__file__).resolve().parents[2]


def test_params_paths_under_data_dir_follow_the_data_folder(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    moved = Settings().with_data_dir(copy)  # params.yaml's defaults: data/…
    assert moved.data_dir == copy
    assert moved.assign.jobs_file == copy / "jobs" / "upcoming.yaml"
    assert moved.assign.placements_dir == copy / "placements"
    assert moved.corpus.path == copy / "corpus" / "corpus.pt"
    # An absolute data_dir: paths under it follow, paths elsewhere stay as given.
    original = tmp_path / "orig"
    settings = settings_from_dict(
        {
            "data_dir": str(original),
            "assign": {
                "jobs_file": str(original / "jobs" / "mine.yaml"),
                "placements_dir": str(tmp_path / "shared" / "placements"),
            },
            "corpus": {"path": "corpora/corpus.pt"},
        }
    )
    moved = settings.with_data_dir(copy)
    assert moved.assign.jobs_file == copy / "jobs" / "mine.yaml"
    assert moved.assign.placements_dir == tmp_path / "shared" / "placements"
    assert moved.corpus.path == Path("corpora/corpus.pt")


def _train(settings: Settings, seed: int) -> registry.RegisteredVersion:
    torch.manual_seed(seed)
    return registry.log_training_run(
        settings,
        params={"seed": seed},
        history=[{"epoch": 1, "loss": 1.0}],
        metrics={"accuracy": 0.5},
        state_dict=torch.nn.Linear(4, 3).state_dict(),
        config={"seed": seed},
    )


def _weights(folder: Path) -> set[str]:
    """The runs (by folder) whose model weights are stored under `folder`."""
    return {p.relative_to(folder).parts[0] for p in folder.rglob(registry.STATE_DICT_FILE)}


@pytest.mark.slow
def test_a_copied_and_moved_registry_uses_only_its_own_artifacts(tmp_path: Path) -> None:
    original = tmp_path / "orig"
    first = _train(Settings().with_data_dir(original), seed=1)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    # The original moves away: anything the copy still read from it would fail.
    parked = tmp_path / "parked"
    original.rename(parked)
    copied = Settings().with_data_dir(copy)
    _, config, info = registry.load_model_files(copied, alias=registry.CHALLENGER)
    assert info.version == first.version and config == {"seed": 1}
    assert info.source is not None and info.source.startswith((copy / "mlartifacts").as_uri())
    # Training on the copy writes into the copy only.
    before = _weights(parked)
    second = _train(copied, seed=2)
    assert not original.exists() and _weights(parked) == before
    assert len(_weights(copy / "mlartifacts")) == 2
    _, config, info = registry.load_model_files(copied, alias=registry.CHALLENGER)
    assert info.version == second.version and config == {"seed": 2}
    # The original, back in place, still loads its own version from its own folder.
    parked.rename(original)
    _, config, info = registry.load_model_files(
        Settings().with_data_dir(original), alias=registry.CHALLENGER
    )
    assert info.version == first.version and config == {"seed": 1}
    assert info.source is not None and info.source.startswith(original.as_uri())


@pytest.mark.slow
def test_assign_on_a_copy_from_another_directory(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hulk assign --data DIR` with the default params from another directory reads DIR's jobs
    file and writes DIR's placements; a project's own data/ in the working directory is not
    touched."""
    for command, option in (("validate", "--data"), ("ingest", "--out"), ("graph", "--data")):
        result = invoke(command, option, generated)
        assert result.exit_code == 0, result.output
    data = tmp_path / "copy"
    shutil.copytree(generated, data)
    (data / "jobs").mkdir(exist_ok=True)
    shutil.copyfile(REPO / "data" / "jobs" / "upcoming.yaml", data / "jobs" / "upcoming.yaml")
    project = tmp_path / "project"  # a working directory with a data folder of its own
    (project / "data" / "jobs").mkdir(parents=True)
    one_job = yaml.safe_load((data / "jobs" / "upcoming.yaml").read_text())
    one_job["jobs"] = one_job["jobs"][:1]
    (project / "data" / "jobs" / "upcoming.yaml").write_text(yaml.safe_dump(one_job))
    monkeypatch.chdir(project)
    jobs_digest = digest(project / "data" / "jobs" / "upcoming.yaml")
    result = invoke("assign", "--data", data, "--strategy", "teacher")
    assert result.exit_code == 0, result.output
    latest = json.loads((data / "placements" / "latest.json").read_text())
    assert len(latest["jobs"]) == 4  # the copy's jobs file, not the project's one job
    assert sorted(p.name for p in (project / "data").rglob("*")) == ["jobs", "upcoming.yaml"]
    assert digest(project / "data" / "jobs" / "upcoming.yaml") == jobs_digest
    assert not (generated / "placements").exists()
    # From a directory without params.yaml or data/: the same.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = invoke("assign", "--data", data, "--strategy", "teacher")
    assert result.exit_code == 0, result.output
    assert list(elsewhere.iterdir()) == []
    assert len(list((data / "placements").glob("20*.json"))) == 2
