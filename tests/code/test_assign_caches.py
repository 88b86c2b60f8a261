"""The graph step fills the caches the next assign run reads (`hulk.stages.assign_caches`): that
run then builds no fleet and computes no baseline, a changed fleet is filled anew, drained
machines and the job store's jobs count as the scheduler counts them, and what cannot be filled
is a warning."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from hulk import fileio, schemas, steps
from hulk.assign import whole_fleet_baselines
from hulk.baseline_cache import CACHE_FILE as BASELINES
from hulk.baseline_cache import BaselineMemory
from hulk.data_folder import load_fleet
from hulk.fleet_cache import CACHE_FILE as FLEET
from hulk.fleet_cache import fleet_key
from hulk.job_store import JobStore
from hulk.jobs import PRESET_JOBS, Job, dump_jobs, job_sizes
from hulk.placements import fleet_snapshot
from hulk.settings import Settings, load_settings
from hulk.stages import assign as stage
from hulk.stages.assign_caches import RULE
from hulk.stages.scheduling import STALE_RULE, drain, jobs_db
from tests.code.test_cli_assign import FAST

T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
FILE_JOBS = [PRESET_JOBS[name] for name in ("GPT-2-1.5B", "BERT-large")]


@pytest.fixture
def settings(tiny: Path, tmp_path: Path) -> Settings:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(FAST))
    settings = load_settings(params).with_data_dir(tiny)
    settings.assign.jobs_file.parent.mkdir(parents=True, exist_ok=True)
    settings.assign.jobs_file.write_text(dump_jobs(FILE_JOBS))
    return settings


def cached_baselines(data: Path) -> dict:
    return json.loads((data / BASELINES).read_text())


def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, building a fleet or a baseline the records report fails the test (the
    teacher's own group search reports none: the records' baselines are the cache's)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("fleet built again")

    def save(memory: BaselineMemory) -> None:
        assert memory.computed == 0, "baselines computed again"

    monkeypatch.setattr("hulk.cost.Fleet.from_frames", refuse)
    monkeypatch.setattr(BaselineMemory, "save", save)


def assign(data: Path, settings: Settings) -> dict:
    result = stage.run(data, settings, strategy="teacher", out_dir=data / "pl", now=T0)
    return json.loads(result.outputs["placements"].read_text())


def test_the_first_assign_after_the_graph_step_builds_nothing(
    tiny: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = steps.run("graph", settings)
    assert result.outputs["fleet_cache"] == tiny / FLEET
    assert result.outputs["baseline_cache"] == tiny / BASELINES
    assert not result.findings
    fleet = load_fleet(tiny, settings)[0]
    doc = cached_baselines(tiny)
    assert doc["fleet"] == fleet_snapshot(fleet)
    assert set(doc["jobs"]) == {job_sizes(job) for job in FILE_JOBS}

    nothing_built(monkeypatch)
    placed = assign(tiny, settings)
    want = {
        job.name: {k: c.to_dict() for k, c in whole_fleet_baselines(job, fleet)[0].items()}
        for job in FILE_JOBS
    }
    assert {j["job"]: j["baselines"] for j in placed["jobs"]} == want


def test_a_new_link_table_is_warmed_anew(
    tiny: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps.run("graph", settings)
    before = cached_baselines(tiny)
    links = pd.read_parquet(tiny / schemas.LINKS_FILE)
    links["latency_p50_ms"] *= 3
    fileio.write_parquet(tiny / schemas.LINKS_FILE, links)
    steps.run("graph", settings)

    fleet = load_fleet(tiny, settings)[0]
    after = cached_baselines(tiny)
    assert after["fleet"] == fleet_snapshot(fleet) != before["fleet"]
    assert after["jobs"] != before["jobs"]
    job = FILE_JOBS[0]
    want = {k: c.to_dict() for k, c in whole_fleet_baselines(job, fleet)[0].items()}
    assert after["jobs"][job_sizes(job)] == want
    with np.load(tiny / FLEET) as kept:
        assert str(kept["key"]) == fleet_key(tiny, settings)
    nothing_built(monkeypatch)
    assign(tiny, settings)


def test_drained_machines_and_the_stores_jobs_count_as_the_scheduler_counts_them(
    tiny: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tiny / schemas.VALIDATION_DIR / "report.json"
    report.parent.mkdir(parents=True)
    finding = {"rule": STALE_RULE, "machines": [4]}
    report.write_text(json.dumps({"findings": [finding]}))
    submitted = Job(name="by-hand", params_b=0.35, layers=24, hidden=1024, seq_len=512,
                    global_batch=256, micro_batch=8)  # fmt: skip
    with JobStore(jobs_db(tiny)) as store:
        store.submit([submitted], T0)
    steps.run("graph", settings)

    drained = drain(load_fleet(tiny, settings)[0], [4])
    doc = cached_baselines(tiny)
    assert doc["fleet"] == fleet_snapshot(drained)
    assert set(doc["jobs"]) == {job_sizes(job) for job in [*FILE_JOBS, submitted]}
    nothing_built(monkeypatch)
    placed = assign(tiny, settings)
    assert len(placed["jobs"]) == 3 and all(4 not in job["nodes"] for job in placed["jobs"])


def test_what_cannot_be_filled_is_a_warning(tiny: Path, settings: Settings) -> None:
    settings.assign.jobs_file.write_text("jobs: [{name: broken}]\n")
    result = steps.run("graph", settings)
    assert (tiny / schemas.GRAPH_DIR / "snapshot.json").is_file()
    assert [(f.severity, f.rule) for f in result.findings] == [("warning", RULE)]
    assert str(settings.assign.jobs_file) in result.findings[0].message
    assert "baseline_cache" not in result.outputs


def test_a_site_model_fleet_is_left_to_the_assign_run(tiny: Path, settings: Settings) -> None:
    sites = settings.model_copy(
        update={"cost": settings.cost.model_copy(update={"site_model": "sites"})}
    )
    result = steps.run("graph", sites)
    assert not (tiny / "cache").exists()
    assert set(result.outputs) == {"graph", "graph_metrics"}
