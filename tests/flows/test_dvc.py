"""`dvc repro` of the real dvc.yaml in a fresh temporary git repository on tiny params; a second
`dvc repro` runs nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.flows.conftest import JOBS, TINY

pytestmark = pytest.mark.slow  # `make test-fast` leaves these out

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def dvc(*args: str, cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [str(BIN / "dvc"), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_dvc_repro_then_nothing_to_do(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(REPO / "hulk", repo / "hulk", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".gitignore", ".dvcignore"):
        shutil.copy(REPO / name, repo / name)
    (repo / "data" / "jobs").mkdir(parents=True)
    shutil.copy(JOBS, repo / "data" / "jobs" / "upcoming.yaml")
    # DVC reads every listed key from params.yaml: the full file, with tiny numbers.
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    for section, values in TINY.items():
        params[section].update(values)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    dvc("init", "-q", cwd=repo)
    dvc("config", "core.analytics", "false", cwd=repo)

    first = dvc("repro", cwd=repo)
    stages = ("generate", "validate", "ingest", "graph", "corpus", "prior", "labels", "train")
    for stage in (*stages, "assign"):
        assert f"Running stage '{stage}'" in first, stage
    assert (repo / "data" / "placements" / "latest.json").exists()
    assert (repo / "dvc.lock").exists()

    second = dvc("repro", cwd=repo)
    assert "Running stage" not in second
    assert "up to date" in second.lower()
    assert "up to date" in dvc("status", cwd=repo).lower()
    metrics = dvc("metrics", "show", cwd=repo)
    assert "makespan_s" in metrics and "node_accuracy" in metrics
