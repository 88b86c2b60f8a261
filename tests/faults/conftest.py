"""A small generated data folder for the command-line fault cases, dated up to yesterday (UTC)
so the commands see it as a night does: the wall clock just after the last day."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hulk.cli import app

runner = CliRunner()


def invoke(*args: object):
    """Run the command line; exceptions are not caught, so a traceback fails the test."""
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def params(tmp_path: Path) -> Path:
    """Two days of hourly latency probes on the paper-47 fleet, the last one yesterday; a small
    teacher search (the fault cases check what is refused and what is written, not the plans)."""
    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    path = tmp_path / "params.yaml"
    settings = {
        "data_dir": str(tmp_path / "data"),
        "generate": {
            "days": 2,
            "end_date": yesterday.isoformat(),
            "probe_interval_s": 3600,
            "throughput_interval_s": 3 * 3600,
        },
        "teacher": {"max_evaluations": 40, "time_budget_s": 20.0, "random_starts": 0},
    }
    path.write_text(yaml.safe_dump(settings))
    return path


@pytest.fixture
def generated(tmp_path: Path, params: Path) -> Path:
    data = tmp_path / "data"
    result = invoke("--params", params, "generate", "--out", data)
    assert result.exit_code == 0, result.output
    return data
