"""Shared fixtures. The paper's fleet is read from ../shared, never copied into the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from hulk.settings import Settings

REPO = Path(__file__).resolve().parents[1]
HULK47 = REPO.parent / "shared" / "datasets" / "hulk-47"


@pytest.fixture(autouse=True)
def isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test in its own empty folder: relative defaults (data/, the MLflow database
    under data/) never touch, or depend on, the developer's own data folder."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
def hulk47() -> Path:
    """The 47-machine fleet published with the paper; skips when ../shared is absent."""
    if not (HULK47 / "node_feature.csv").exists():
        pytest.skip(f"the paper's fleet is not at {HULK47} (../shared/datasets/hulk-47)")
    return HULK47
