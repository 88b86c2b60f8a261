"""The placements file: built, written atomically, read back, and malformed files rejected."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from hulk import fileio
from hulk import placements as pl
from hulk.baselines import baselines
from hulk.cost import Cost, Fleet, Plan, iteration_time, lower_bound
from hulk.errors import InputError
from hulk.jobs import Job
from hulk.placements import JobPlacement
from hulk.placements_read import read_placements

IDS = [10, 20, 30, 40]  # node ids differ from fleet indices on purpose
NOW = dt.datetime(2026, 11, 21, 2, 0, 0, tzinfo=dt.UTC)

# 1e8 params, 4 layers: 1.6 GB of state, 0.4 GB per layer.
FIRST = Job("first", 0.1, 4, 1000, 1000, 12, 2, priority=1)
SECOND = Job("second", 0.1, 4, 1000, 1000, 12, 2)
WAITING = Job("waiting", 0.1, 4, 1000, 1000, 12, 2)


def tiny_fleet() -> Fleet:
    """Four machines, all linked: 10 ms and 100 MB/s between any two."""
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    return Fleet.from_arrays(
        np.array(IDS),
        np.array([1e14, 2e14, 1e14, 2e14]),
        np.array([2.0, 2.0, 1.0, 1.0]) * 1e9,
        np.ones(4, bool),
        np.array([p[0] for p in pairs]),
        np.array([p[1] for p in pairs]),
        np.full(len(pairs), 0.01),
        np.full(len(pairs), 1e8),
    )


def placed(job: Job, fleet: Fleet, plan: Plan) -> JobPlacement:
    return JobPlacement(
        job=job,
        status=pl.PLACED,
        nodes=plan.nodes,
        plan=plan,
        estimate=iteration_time(job, fleet, plan),
        lower_bound_s=lower_bound(job, fleet, plan.nodes),
        baselines=baselines(job, fleet),
    )


def example(fleet: Fleet) -> list[JobPlacement]:
    """first: pipeline over indices 0, 1; second: pipeline over 2, 3; waiting: queued."""
    return [
        placed(FIRST, fleet, Plan.from_arrays([[0, 1]], [2, 2])),
        placed(SECOND, fleet, Plan.from_arrays([[2, 3]], [2, 2])),
        JobPlacement(WAITING, pl.QUEUED, "no machine left", baselines=baselines(WAITING, fleet)),
    ]


def document(fleet: Fleet, placements: list[JobPlacement] | None = None) -> dict:
    placements = example(fleet) if placements is None else placements
    return pl.build_document(
        placements,
        fleet,
        pl.fleet_info(fleet),
        strategy="teacher",
        schedule=pl.CONCURRENT,
        makespan_s=max(p.estimate.iteration_s for p in placements if p.estimate),
        seed=7,
        started=NOW,
        generated_at=NOW + dt.timedelta(seconds=3),
    )


def write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "placements.json"
    path.write_text(json.dumps(doc))
    return path


# --- building and writing ---------------------------------------------------------------------


def test_document_has_the_contract_shape() -> None:
    fleet = tiny_fleet()
    doc = document(fleet)
    assert doc["schema"] == "hulk.placements/v1"
    assert re.fullmatch(r"2026-11-21T02-00-00Z-[0-9a-f]{6}", doc["run_id"])
    assert doc["generated_at"] == "2026-11-21T02:00:03Z"
    assert doc["model"] is None and doc["strategy"] == "teacher"
    assert doc["fleet"]["nodes"] == 4 and doc["fleet"]["links"] == 6
    assert len(doc["fleet"]["snapshot"]) == 64
    first, second, waiting = doc["jobs"]
    assert set(first) >= {"job", "status", "reason", "nodes", "replicas", "estimate", "baselines"}
    assert first["nodes"] == [10, 20]
    assert first["replicas"] == [
        {
            "stages": [
                {"node": 10, "layer_start": 0, "layer_end": 2},
                {"node": 20, "layer_start": 2, "layer_end": 4},
            ]
        }
    ]
    assert set(first["estimate"]) == {"iteration_s", "compute_s", "comm_s", "lower_bound_s"}
    assert set(first["baselines"]) == {"A", "B", "C"}
    assert first["baselines"]["A"]["feasible"] is True
    # System A cannot run on machines 30 and 40 alone, but baselines use the whole fleet.
    assert waiting["status"] == "queued" and waiting["nodes"] == [] and waiting["estimate"] is None
    assert waiting["baselines"]["B"]["iteration_s"] > 0
    assert doc["makespan_s"] == pytest.approx(
        max(first["estimate"]["iteration_s"], second["estimate"]["iteration_s"])
    )


def test_run_id_hashes_the_inputs() -> None:
    fleet = tiny_fleet()
    again = document(fleet)
    assert document(fleet)["run_id"] == again["run_id"]

    def two_jobs(extra: dict | None = None) -> str:
        return pl.build_document(
            example(fleet)[:2],
            fleet,
            pl.fleet_info(fleet),
            strategy="teacher",
            schedule=pl.CONCURRENT,
            makespan_s=1.0,
            seed=7,
            started=NOW,
            extra=extra,
        )["run_id"]

    other = two_jobs()
    assert other != again["run_id"] and other[:20] == again["run_id"][:20]
    # A scheduling run's queue block counts, but not the time the run took.
    queued = [
        two_jobs({"queue": {"order": order, "scheduling_s": seconds}})
        for order, seconds in (("arrival", 0.1), ("arrival", 0.2), ("shortest-first", 0.1))
    ]
    assert queued[0] == queued[1] != queued[2] and other not in queued


def test_non_finite_numbers_become_null() -> None:
    fleet = tiny_fleet()
    infeasible = Cost.infeasible("machine 30 is too small")
    job = JobPlacement(
        WAITING,
        pl.PLACED,
        nodes=(2,),
        plan=Plan.from_arrays([[2]], [4]),
        estimate=infeasible,
        lower_bound_s=math.inf,
        baselines={"A": infeasible},
    )
    doc = document(fleet, [job])
    entry = doc["jobs"][0]
    assert entry["estimate"] == {
        "iteration_s": None,
        "compute_s": None,
        "comm_s": None,
        "lower_bound_s": None,
    }
    assert entry["baselines"]["A"] == {
        "iteration_s": None,
        "compute_s": None,
        "comm_s": None,
        "feasible": False,
        "reason": "machine 30 is too small",
    }
    assert doc["makespan_s"] is None
    json.loads(pl.dumps(doc))  # strict JSON: no NaN, no Infinity


def test_write_creates_run_file_and_latest(tmp_path: Path) -> None:
    doc = document(tiny_fleet())
    path = pl.write_placements(doc, tmp_path / "placements")
    assert path.name == f"{doc['run_id']}.json"
    latest = tmp_path / "placements" / "latest.json"
    assert latest.read_text() == path.read_text()
    assert json.loads(latest.read_text()) == doc


def test_a_run_id_written_twice_is_a_second_run_file_listed_after_the_first(
    tmp_path: Path,
) -> None:
    doc = document(tiny_fleet())
    out = tmp_path / "placements"
    first = pl.write_placements(doc, out)
    second = pl.write_placements(doc, out)
    assert second.name == f"{doc['run_id']}-2.json"
    assert json.loads(second.read_text())["run_id"] == f"{doc['run_id']}-2"
    (out / "latest.published.json").write_text("{}")
    assert pl.run_files(out) == [first, second]


def test_a_killed_runs_temporary_is_swept_by_a_later_run(tmp_path: Path) -> None:
    out = tmp_path / "placements"
    out.mkdir()
    dead = out / ".2026-11-20T02-00-00Z-abcdef.json.k1x2.tmp"  # its writer was killed
    live = out / ".2026-11-20T02-15-00Z-abcdef.json.k3x4.tmp"  # a writer still at work
    for temporary in (dead, live):
        temporary.write_text("{")
    hour_ago = dead.stat().st_mtime - 2 * fileio.STALE_TEMPORARY_S
    os.utime(dead, (hour_ago, hour_ago))
    pl.write_placements(document(tiny_fleet()), out)
    assert not dead.exists() and live.exists()


def test_failed_write_keeps_the_old_latest(tmp_path: Path, monkeypatch) -> None:
    fleet = tiny_fleet()
    out = tmp_path / "placements"
    first = pl.write_placements(document(fleet), out)
    good = (out / "latest.json").read_text()
    newer = document(fleet, example(fleet)[:2])

    real_replace = os.replace

    def crash_on_latest(src, dst):
        if Path(dst).name == "latest.json":
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "replace", crash_on_latest)
    with pytest.raises(OSError, match="disk full"):
        pl.write_placements(newer, out)
    monkeypatch.undo()
    assert (out / "latest.json").read_text() == good
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary left
    assert first.exists()


def test_unserialisable_document_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "placements"
    doc = document(tiny_fleet())
    pl.write_placements(doc, out)
    before = sorted(p.name for p in out.iterdir())
    bad = copy.deepcopy(doc)
    bad["run_id"] = "2026-11-21T03-00-00Z-bad000"
    bad["makespan_s"] = math.nan
    with pytest.raises(ValueError):
        pl.write_placements(bad, out)
    assert sorted(p.name for p in out.iterdir()) == before


# --- reading ------------------------------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    fleet = tiny_fleet()
    placements = example(fleet)
    path = pl.write_placements(document(fleet, placements), tmp_path)
    read = read_placements(path, fleet)
    assert read.strategy == "teacher" and read.schedule == pl.CONCURRENT
    for want, got in zip(placements, read.placements, strict=True):
        assert got.job == want.job and got.status == want.status and got.reason == want.reason
        assert got.nodes == want.nodes and got.plan == want.plan
        if want.estimate is None:
            assert got.estimate is None
        else:
            assert got.estimate.iteration_s == pytest.approx(want.estimate.iteration_s)
            assert got.lower_bound_s == pytest.approx(want.lower_bound_s)
        assert got.baselines.keys() == want.baselines.keys()
        for name, cost in want.baselines.items():
            assert got.baselines[name].feasible == cost.feasible
            assert got.baselines[name].iteration_s == pytest.approx(cost.iteration_s)


def test_round_trip_with_tensor_layout(tmp_path: Path) -> None:
    fleet = tiny_fleet()
    job = JobPlacement(
        FIRST,
        pl.PLACED,
        nodes=(0, 1, 2, 3),
        estimate=baselines(FIRST, fleet)["C"],
        lower_bound_s=lower_bound(FIRST, fleet, range(4)),
        layout=pl.TENSOR,
        run_order=1,
    )
    path = write(tmp_path, document(fleet, [job]))
    (got,) = read_placements(path, fleet).placements
    assert got.layout == pl.TENSOR and got.nodes == (0, 1, 2, 3) and got.plan is None
    assert got.run_order == 1 and got.shape == "TP×4"


def test_a_file_without_spec_uses_the_jobs_given_or_presets(tmp_path: Path) -> None:
    fleet = tiny_fleet()
    doc = document(fleet)
    for entry in doc["jobs"]:
        del entry["spec"]
    path = write(tmp_path, doc)
    read = read_placements(path, fleet, jobs=[FIRST, SECOND, WAITING])
    assert [p.job for p in read.placements] == [FIRST, SECOND, WAITING]
    with pytest.raises(InputError) as caught:
        read_placements(path, fleet)
    assert caught.value.rule == "placements.unknown_job"


def _set(path: str, value: object) -> Callable[[dict], None]:
    """A mutation setting doc[path] (dotted; integers index lists)."""

    def mutate(doc: dict) -> None:
        *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target = doc
        for part in head:
            target = target[part]
        target[last] = value

    return mutate


def _delete(path: str) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target = doc
        for part in head:
            target = target[part]
        del target[last]

    return mutate


def _stage(job: int, replica: int, stage: int, **values: object) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        doc["jobs"][job]["replicas"][replica]["stages"][stage].update(values)

    return mutate


def _share_machine(doc: dict) -> None:
    # The second job's first stage moves onto machine 10, which serves the first job.
    doc["jobs"][1]["replicas"][0]["stages"][0]["node"] = 10
    doc["jobs"][1]["nodes"] = [10, 40]


def _big_stage(doc: dict) -> None:
    # Machine 30 has 1 GB; three layers of 0.4 GB do not fit.
    stages = doc["jobs"][1]["replicas"][0]["stages"]
    stages[0]["layer_end"] = 3
    stages[1]["layer_start"] = 3


MALFORMED = {
    "schema tag": ("placements.schema", _set("schema", "hulk.placements/v0"), "'schema'"),
    "missing key": ("placements.missing_key", _delete("jobs.0.status"), "'status': missing"),
    "missing top-level key": ("placements.missing_key", _delete("fleet"), "'fleet'"),
    "string node id": ("placements.wrong_type", _set("jobs.0.nodes", ["10", 20]), "'nodes'"),
    "float layer": ("placements.wrong_type", _stage(0, 0, 0, layer_end=2.0), "'layer_end'"),
    "bool time": ("placements.wrong_type", _set("jobs.0.estimate.comm_s", True), "'comm_s'"),
    "jobs not a list": ("placements.wrong_type", _set("jobs", {}), "'jobs'"),
    "unknown status": ("placements.bad_value", _set("jobs.0.status", "running"), "'status'"),
    "negative time": ("placements.bad_value", _set("jobs.0.estimate.iteration_s", -1), "iteration"),
    "unknown system": ("placements.bad_value", _set("jobs.0.baselines.D", {}), "baselines.D"),
    "null system": ("placements.wrong_type", _set("jobs.0.baselines.A", None), "'A'"),
    "null optional key": ("placements.wrong_type", _set("jobs.0.layout", None), "'layout'"),
    "replica not an object": ("placements.wrong_type", _set("jobs.0.replicas", [3]), "replicas[0]"),
    "replica without stages": (
        "placements.coverage",
        _set("jobs.0.replicas.0.stages", []),
        "stages",
    ),
    "stage without node": (
        "placements.missing_key",
        _delete("jobs.0.replicas.0.stages.0.node"),
        "'node'",
    ),
    "bad spec": ("placements.bad_spec", _set("jobs.0.spec.layers", -4), "'layers'"),
    "spec of another job": ("placements.bad_spec", _set("jobs.0.spec.name", "other"), "'other'"),
    "unknown job": ("placements.unknown_job", _delete("jobs.2.spec"), "'waiting'"),
    "duplicate job": ("placements.duplicate_job", _set("jobs.2.job", "first"), "'first'"),
    "placed without machines": (
        "placements.structure",
        lambda d: d["jobs"][0].update(nodes=[], replicas=[]),
        "'nodes'",
    ),
    "queued with machines": ("placements.structure", _set("jobs.2.nodes", [30]), "queued"),
    "nodes differ from stages": ("placements.structure", _set("jobs.0.nodes", [10, 30]), "stages"),
    "gap between stages": ("placements.coverage", _stage(0, 0, 1, layer_start=3), "stages[1]"),
    "overlapping stages": ("placements.coverage", _stage(0, 0, 1, layer_start=1), "stages[1]"),
    "short replica": ("placements.coverage", _stage(0, 0, 1, layer_end=3), "[0, 3)"),
    "unknown node": (
        "placements.unknown_node",
        lambda d: (_stage(0, 0, 1, node=99)(d), _set("jobs.0.nodes", [10, 99])(d)),
        "99",
    ),
    "machine serves two jobs": ("placements.node_shared", _share_machine, "machine 10"),
    "stage too big": ("placements.memory", _big_stage, "machine 30"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_file_is_named(tmp_path: Path, case: str) -> None:
    rule, mutate, mention = MALFORMED[case]
    fleet = tiny_fleet()
    doc = json.loads(pl.dumps(document(fleet)))
    mutate(doc)
    path = write(tmp_path, doc)
    with pytest.raises(InputError) as caught:
        read_placements(path, fleet)
    error = caught.value
    assert error.rule == rule, str(error)
    assert error.path == str(path)
    assert mention in str(error), str(error)
    if "jobs." in case or rule not in ("placements.schema", "placements.missing_key"):
        assert "job" in str(error)


@pytest.mark.parametrize(
    ("text", "mention"),
    [
        ("{not json", "not valid JSON"),
        ('{"makespan_s": NaN}', "NaN is not JSON-safe"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_unreadable_file_is_named(tmp_path: Path, text: str, mention: str) -> None:
    path = tmp_path / "placements.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_placements(path, tiny_fleet())
    assert mention in str(caught.value) and str(path) in str(caught.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist") as caught:
        read_placements(tmp_path / "nope.json", tiny_fleet())
    assert caught.value.rule == "placements.readable"


def test_every_problem_is_listed(tmp_path: Path) -> None:
    fleet = tiny_fleet()
    doc = json.loads(pl.dumps(document(fleet)))
    doc["jobs"][0]["status"] = "running"
    doc["jobs"][1]["nodes"] = ["30", 40]
    with pytest.raises(InputError) as caught:
        read_placements(write(tmp_path, doc), fleet)
    assert "(and 1 more)" in caught.value.detail
    assert len(caught.value.examples) == 2
