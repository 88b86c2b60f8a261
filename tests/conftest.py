"""Shared fixtures. The paper's fleet is read from ../shared, never copied into the repository."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pandas as pd
import pytest

from hulk import fileio, schemas
from hulk.settings import Settings

REPO = Path(__file__).resolve().parents[1]
HULK47 = REPO.parent / "shared" / "datasets" / "hulk-47"


def pytest_configure(config: pytest.Config) -> None:
    """Collect garbage less often: Great Expectations, pydantic and pandas allocate container
    objects by the hundred thousand: at Python's default of a young collection every 700
    allocations the collector took 13% of the validation, ingest and training tests' CPU, at
    20,000 3%.

    Under pytest-xdist, one torch thread per core each worker has: torch's default of one
    thread per core in every worker makes the workers' threads fight over the same cores."""
    gc.set_threshold(20_000, *gc.get_threshold()[1:])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the longest modules first. Each worker collects, and the modules are
    handed out in the order collected (`--dist loadscope --no-loadscope-reorder`, see the
    Makefile). xdist's own order, most tests first, left the modules of a few long tests (`dvc
    repro`, the nightly flow, the Dask cluster) to the end, where one worker ran them for a
    minute or more while the other had nothing left. The `slow` marks stand for the cost:
    modules whose every test is slow first, then those with some slow tests, then the rest;
    within each, most tests first as before. Only whole modules move, never a test inside one;
    a run in one process (no xdist) keeps the files' order."""
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(tests: list[pytest.Item]) -> tuple[int, int]:
        slow = sum(item.get_closest_marker("slow") is not None for item in tests)
        return (0 if slow == len(tests) else 1 if slow else 2, -len(tests))

    items[:] = [item for tests in sorted(modules.values(), key=cost) for item in tests]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Skip the interpreter's last garbage collection: at exit it walks every object torch, PyG,
    Great Expectations and MLflow made (2–3 s a process, each xdist worker too, while the run
    waits), only to free memory the ending process gives back anyway."""
    gc.freeze()


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


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A data folder with six machines: 0–2 in Beijing, 3–5 in Tokyo, every pair linked."""
    return write_tiny(tmp_path / "data")


def write_tiny(data: Path) -> Path:
    """`tiny`'s data folder at `data` (for module-scoped fixtures)."""
    ids = list(range(6))
    beijing = [i < 3 for i in ids]
    inventory = pd.DataFrame(
        {
            "node_id": ids,
            "city": ["Beijing" if b else "Tokyo" for b in beijing],
            "country": ["China" if b else "Japan" for b in beijing],
            "lat": [39.9 if b else 35.7 for b in beijing],
            "lon": [116.4 if b else 139.7 for b in beijing],
            "compute_capability": 8.0,
            "gpu_count": 8,
            "memory_gb": 320.0,
            "status": "active",
        }
    )
    pairs = [(i, j) for i in ids for j in ids if i < j]
    latency = [1.0 if beijing[i] == beijing[j] else 40.0 for i, j in pairs]
    links = pd.DataFrame(
        {
            "src": [p[0] for p in pairs],
            "dst": [p[1] for p in pairs],
            "samples": 100,
            "loss_rate": 0.0,
            "latency_p50_ms": latency,
            "latency_p95_ms": latency,
            "latency_mean_ms": latency,
            "alpha_ms": latency,
            "beta_gbps": float("nan"),
        }
    )
    for column in ("window_start", "window_end"):
        links[column] = pd.Series(pd.NaT, index=links.index, dtype=schemas.LINKS[column])
    fileio.write_csv(data / schemas.INVENTORY_FILE, schemas.conform(inventory, schemas.INVENTORY))
    fileio.write_parquet(data / schemas.LINKS_FILE, schemas.conform(links, schemas.LINKS))
    return data
