"""Fixtures the code tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.code.test_cli_assign import FAST


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    """params.yaml with a small teacher search."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(FAST))
    return params
