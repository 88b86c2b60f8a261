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


def project(tmp_path: Path) -> Path:
    """A copy of the project (code, dvc.yaml, DVC plot templates, the jobs file) in a new git
    repository with DVC initialised, and the full params.yaml with tiny numbers."""
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
    params["flows"].update(dask_workers=2, dask_processes=False, retry_delay_s=0.1)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    dvc("init", "-q", cwd=repo)
    dvc("config", "core.analytics", "false", cwd=repo)
    shutil.copytree(REPO / ".dvc" / "plots", repo / ".dvc" / "plots")
    return repo


def test_dvc_repro_then_nothing_to_do(tmp_path: Path) -> None:
    repo = project(tmp_path)

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
    assert "makespan_s" in metrics and "gate/score" in metrics
    # The headline figures only: one narrow table.
    assert max(len(line) for line in metrics.splitlines()) < 140, metrics
    dvc("plots", "show", "-o", str(tmp_path / "plots"), cwd=repo)
    html = (tmp_path / "plots" / "index.html").read_text(encoding="utf-8")
    assert '"type": "log"' in html or '"type":"log"' in html


def test_hulk_run_leaves_dvc_up_to_date(
    tmp_path: Path, prefect_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hulk run` (make main) outside DVC records dvc.lock as DVC would: `dvc status` then has
    nothing to do and `dvc repro` re-runs nothing of what the run made."""
    from typer.testing import CliRunner

    from hulk.cli import app

    repo = project(tmp_path)
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(app, ["--params", "params.yaml", "run"])
    assert result.exit_code == 0, result.output
    assert "dvc.lock: recorded generate" in result.output
    assert (repo / "dvc.lock").exists()

    status = dvc("status", cwd=repo)
    assert "up to date" in status.lower(), status
    again = dvc("repro", cwd=repo)
    assert "Running stage" not in again, again
    # A step run again on the same inputs changes none of its outputs DVC tracks: the labels'
    # metrics hold no count of labels the cache held.
    relabelled = CliRunner().invoke(app, ["--params", "params.yaml", "stage", "labels"])
    assert relabelled.exit_code == 0, relabelled.output
    assert "up to date" in dvc("status", cwd=repo).lower()
    # A change DVC tracks re-runs the stages that depend on it, and only those.
    jobs = repo / "data" / "jobs" / "upcoming.yaml"
    jobs.write_text(jobs.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    status = dvc("status", cwd=repo)
    assert "labels" in status and "assign" in status and "graph" not in status, status
    # A day appended by hand is recorded as the generate stage's output: `dvc repro` would
    # validate it, not check the cached logs out over it.
    days = len(list((repo / "data" / "logs").iterdir()))
    appended = CliRunner().invoke(app, ["--params", "params.yaml", "generate", "--append-day"])
    assert appended.exit_code == 0, appended.output
    assert "dvc.lock: recorded generate" in appended.output
    status = dvc("status", cwd=repo)
    assert "validate" in status and "generate:" not in status, status
    assert len(list((repo / "data" / "logs").iterdir())) == days + 1
    # Data of other options than params.yaml's is not recorded as what params.yaml makes.
    other = ["--params", "params.yaml", "generate", "--seed", "99", "--days", "3"]
    regenerated = CliRunner().invoke(app, other)
    assert regenerated.exit_code == 0, regenerated.output
    assert "--days, --seed overrode params.yaml: not recorded" in regenerated.output
    assert "generate:" in dvc("status", cwd=repo)
