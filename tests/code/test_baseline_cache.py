"""Systems A, B, C remembered in the data folder (`hulk.baseline_cache`): hits, misses, a changed
fleet or code, a broken file; and the assign step's placements are the same either way."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from hulk import baseline_cache, fileio, schemas
from hulk.assign import whole_fleet_baselines
from hulk.baseline_cache import CACHE_FILE, CODE_FILES, BaselineMemory
from hulk.code_deps import module_files
from hulk.cost import Cost, Fleet
from hulk.data_folder import load_fleet
from hulk.jobs import PRESET_JOBS, Job
from hulk.placements import fleet_snapshot
from hulk.settings import Settings, load_settings
from hulk.stages import assign as stage
from hulk.stages.scheduling import drain
from tests.code.test_cli_assign import FAST

T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
JOBS = [PRESET_JOBS[name] for name in ("GPT-2-1.5B", "BERT-large", "OPT-175B")]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(FAST))
    return load_settings(params)


@pytest.fixture
def fleet(tiny: Path, settings: Settings) -> Fleet:
    return load_fleet(tiny, settings)[0]


def memory(data: Path, fleet: Fleet) -> BaselineMemory:
    return BaselineMemory(data, fleet, fleet_snapshot(fleet))


def no_computing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(job: Job, fleet: Fleet) -> None:
        raise AssertionError(f"computed {job.name} again")

    monkeypatch.setattr("hulk.assign.whole_fleet_baselines", refuse)


def test_code_files_are_what_the_baselines_run() -> None:
    assert set(CODE_FILES) == set(module_files("hulk.baselines"))


def test_a_miss_computes_and_a_hit_reads(
    tiny: Path, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = memory(tiny, fleet)
    found = {job.name: first(job) for job in JOBS}
    assert found == {job.name: whole_fleet_baselines(job, fleet)[0] for job in JOBS}
    assert not found["OPT-175B"]["A"].feasible  # an infeasible cost and its reason round-trip
    assert first.computed == 3 and not (tiny / CACHE_FILE).exists()
    first.save()
    written = (tiny / CACHE_FILE).read_bytes()

    no_computing(monkeypatch)
    again = memory(tiny, fleet)
    renamed = Job(**{**JOBS[0].__dict__, "name": "other", "priority": 5, "iterations": 9})
    assert again(renamed) == found["GPT-2-1.5B"]  # the sizes count, not the name or length
    assert {job.name: again(job) for job in JOBS} == found
    assert again.computed == 0
    again.save()  # nothing new: the file is left as it was
    assert (tiny / CACHE_FILE).read_bytes() == written


def test_another_fleet_or_code_starts_afresh(
    tiny: Path, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = memory(tiny, fleet)
    first(JOBS[0])
    first.save()
    drained = drain(fleet, [fleet.node_id(0)])
    other = memory(tiny, drained)
    assert other(JOBS[0]) == whole_fleet_baselines(JOBS[0], drained)[0]
    assert other.computed == 1
    other.save()
    doc = json.loads((tiny / CACHE_FILE).read_text())
    assert doc["fleet"] == fleet_snapshot(drained) and len(doc["jobs"]) == 1

    monkeypatch.setattr(baseline_cache, "code_key", lambda: "changed code")
    again = memory(tiny, drained)
    again(JOBS[0])
    assert again.computed == 1


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b"[]",
        b'{"format": 1}',
        "a broken cost",  # filled in below: the right head, a cost that is no cost
        "a missing system",
    ],
)
def test_a_broken_file_is_recomputed_and_replaced(
    tiny: Path, fleet: Fleet, content: bytes | str
) -> None:
    good = memory(tiny, fleet)
    good(JOBS[0])
    good.save()
    path = tiny / CACHE_FILE
    if isinstance(content, str):
        doc = json.loads(path.read_text())
        systems = next(iter(doc["jobs"].values()))
        if content == "a broken cost":
            systems["B"]["iteration_s"] = "fast"
        else:
            del systems["C"]
        content = json.dumps(doc).encode()
    path.write_bytes(content)

    again = memory(tiny, fleet)
    assert again(JOBS[0]) == whole_fleet_baselines(JOBS[0], fleet)[0]
    assert again.computed == 1
    again.save()
    assert memory(tiny, fleet).known == again.known  # a good file again


def test_the_newest_job_sizes_are_kept(
    tiny: Path, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(baseline_cache, "KEEP_JOBS", 2)
    first = memory(tiny, fleet)
    for job in JOBS:
        first(job)
    first.save()
    assert len(memory(tiny, fleet).known) == 2
    kept = memory(tiny, fleet)
    assert set(kept.known) == set(list(first.known)[-2:])


def _assign(data: Path, settings: Settings, jobs: Path, now: dt.datetime) -> dict:
    result = stage.run(
        data, settings, jobs_file=jobs, strategy="teacher", out_dir=data / "pl", now=now
    )
    return json.loads(result.outputs["placements"].read_text())


def _afresh(data: Path) -> None:
    """The next run starts afresh: no job store, and its placements moved aside (a run without
    the store refuses while latest.json shows jobs running)."""
    (data / "jobs" / "jobs.db").unlink()
    (data / "pl" / "latest.json").unlink()


def test_assign_reports_the_same_baselines_from_the_cache(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": [{"name": "gpt", "params_b": 1.5, "layers": 48,
        "hidden": 1600, "seq_len": 1024, "global_batch": 512, "micro_batch": 8}]}))  # fmt: skip
    fresh = _assign(tiny, settings, jobs, T0)
    cache = tiny / CACHE_FILE
    assert json.loads(cache.read_text())["fleet"] == _fleet_key(tiny, settings)
    _afresh(tiny)  # the same run again, now from the cache
    again = _assign(tiny, settings, jobs, T0)
    assert [j["baselines"] for j in again["jobs"]] == [j["baselines"] for j in fresh["jobs"]]

    # A new link table: new baselines, the file now of the new fleet.
    links = pd.read_parquet(tiny / schemas.LINKS_FILE)
    links["latency_p50_ms"] *= 3
    fileio.write_parquet(tiny / schemas.LINKS_FILE, links)
    _afresh(tiny)
    changed = _assign(tiny, settings, jobs, T0)
    fleet = load_fleet(tiny, settings)[0]
    job = Job(name="gpt", params_b=1.5, layers=48, hidden=1600, seq_len=1024,
              global_batch=512, micro_batch=8)  # fmt: skip
    want = {name: cost.to_dict() for name, cost in whole_fleet_baselines(job, fleet)[0].items()}
    assert changed["jobs"][0]["baselines"] == want != fresh["jobs"][0]["baselines"]
    assert json.loads(cache.read_text())["fleet"] == fleet_snapshot(fleet)

    cache.write_text("{ broken")  # a broken file: the run goes on and writes a good one
    _afresh(tiny)
    assert _assign(tiny, settings, jobs, T0)["jobs"][0]["baselines"] == want
    assert json.loads(cache.read_text())["fleet"] == fleet_snapshot(fleet)


def _fleet_key(data: Path, settings: Settings) -> str:
    return fleet_snapshot(load_fleet(data, settings)[0])


def test_costs_round_trip_exactly() -> None:
    cost = Cost(0.1 + 0.2, 1 / 3, 2.5e-17, True, None)
    record = json.loads(json.dumps(cost.to_dict()))
    assert baseline_cache._cost(record) == cost
    assert baseline_cache._cost({**record, "feasible": 1}) is None
    assert baseline_cache._cost({**record, "extra": 1}) is None
