"""Samples of the data folder's own fleet (hulk.fleet_samples) and their label cache
(hulk.fleet_labels): blocks, variants, roles, stability from night to night, cache keys."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hulk import schemas
from hulk.fleet_labels import LabelCache, frame_digest, label_key, label_sample
from hulk.fleet_samples import (
    Block,
    LinkSnapshot,
    draw_samples,
    drift_snapshots,
    job_pool,
    log_blocks,
    sample_frames,
)
from hulk.generate import expected_links
from hulk.jobs import PRESET_JOBS, preset_jobs
from hulk.presets import build_fleet
from hulk.settings import FleetSamplesSettings, Settings

SEED = 5
FS = FleetSamplesSettings(
    drift_snapshots=3,
    mixes=1,
    subfleets=1,
    drained=1,
    eval_mixes=2,
    max_jobs=3,
    min_train_samples=0,
)
SETTINGS = Settings().model_copy(
    update={
        "fleet_samples": FS,
        "corpus": Settings().corpus.model_copy(update={"max_evaluations": 15}),
    }
)


@pytest.fixture(scope="module")
def fleet() -> tuple[pd.DataFrame, pd.DataFrame]:
    inventory = build_fleet("paper-47", SEED, SETTINGS.generate)
    return inventory, expected_links(inventory, SEED, SETTINGS.generate)


def test_blocks_are_calendar_aligned_and_the_newest_is_held_out() -> None:
    first, last = dt.date(2026, 8, 23), dt.date(2026, 11, 20)
    blocks, held_out = log_blocks(first, last, 7, 100)
    assert held_out.last == last and held_out.days <= 7
    assert all(b.days == 7 for b in blocks) and blocks[0].first >= first
    assert blocks[-1].last + dt.timedelta(days=1) == held_out.first
    assert all((b.first - dt.date(1970, 1, 1)).days % 7 == 0 for b in blocks)
    # One more day: every earlier whole block is still there, unchanged.
    later, _ = log_blocks(first + dt.timedelta(days=1), last + dt.timedelta(days=1), 7, 100)
    assert {b.name for b in blocks[1:]} <= {b.name for b in later}
    # The newest max_blocks only.
    assert log_blocks(first, last, 7, 3)[0] == blocks[-3:]


def test_a_short_log_has_only_the_held_out_block() -> None:
    # 2026-11-19 starts a block (day 20,776 since 1970-01-01 = 2,968 × 7).
    blocks, held_out = log_blocks(dt.date(2026, 11, 19), dt.date(2026, 11, 20), 7, 12)
    assert blocks == [] and held_out == Block(dt.date(2026, 11, 19), dt.date(2026, 11, 20))
    blocks, held_out = log_blocks(dt.date(2026, 11, 17), dt.date(2026, 11, 20), 7, 12)
    assert blocks == [] and held_out.first == dt.date(2026, 11, 19)


def test_drifted_copies_change_latencies_and_drop_some_links(fleet) -> None:
    _, links = fleet
    copies = drift_snapshots(links, FS, SEED)
    assert [c.name for c in copies] == ["drift-00", "drift-01", "drift-02"]
    for copy in copies:
        assert len(copy.links) < len(links)
        merged = copy.links.merge(links, on=["src", "dst"], suffixes=("", "_0"))
        ratio = merged["latency_p50_ms"] / merged["latency_p50_ms_0"]
        assert ratio.std() > 0.05
        assert np.allclose(merged["latency_mean_ms"] / merged["latency_mean_ms_0"], ratio)
    again = drift_snapshots(links, FS, SEED)
    assert all(a.links.equals(b.links) for a, b in zip(copies, again, strict=True))


def _snapshots(links: pd.DataFrame) -> list[LinkSnapshot]:
    return [*drift_snapshots(links, FS, SEED), LinkSnapshot("links", links, held_out=True)]


def test_samples_cover_every_variant_and_role(fleet) -> None:
    inventory, links = fleet
    upcoming = preset_jobs(["GPT-2-1.5B", "BERT-large"])
    samples = draw_samples(
        inventory, _snapshots(links), upcoming, job_pool(upcoming, []), SETTINGS, SEED
    )
    eval_ = [s for s in samples if s.role == "eval"]
    assert {s.snapshot for s in eval_} == {"links"}
    assert [s.variant for s in eval_] == ["upcoming", "fleet", "fleet"]
    assert [j.name for j in eval_[0].jobs] == ["GPT-2-1.5B", "BERT-large"]
    training = [s for s in samples if s.role != "eval"]
    assert {s.role for s in training} <= {"train", "val"}
    assert {s.variant for s in training} == {"fleet", "subfleet", "drained", "upcoming"}
    # The upcoming mix trains on the newest training snapshot only.
    assert [s.snapshot for s in training if s.variant == "upcoming"] == ["drift-02"]
    for sample in samples:
        names = [job.name for job in sample.jobs]
        assert len(names) == len(set(names)) and 1 <= len(names) <= 3
        sub_inventory, sub_links = sample_frames(sample, inventory, links)
        if sample.variant == "subfleet":
            gone = set(inventory.loc[inventory["node_id"].isin(sample.removed), "city"])
            assert gone and not gone & set(sub_inventory["city"])  # whole cities
        if sample.variant == "drained":
            drained = sub_inventory["status"] == schemas.STATUS_DRAINED
            assert drained.sum() == len(sample.drained) > 0
        ids = set(sub_inventory["node_id"])
        assert set(sub_links["src"]) | set(sub_links["dst"]) <= ids


def test_the_same_snapshot_gives_the_same_samples_whatever_else_changes(fleet) -> None:
    inventory, links = fleet
    pool = job_pool([], [])
    first = draw_samples(inventory, _snapshots(links), [], pool, SETTINGS, SEED)
    # A night later: one training snapshot gone, the held-out one changed.
    newer = [*drift_snapshots(links, FS, SEED)[1:], LinkSnapshot("new", links, held_out=True)]
    second = draw_samples(inventory, newer, [], pool, SETTINGS, SEED)
    kept = {s.name: s for s in first if s.snapshot in ("drift-01", "drift-02")}
    assert kept and all(kept[s.name] == s for s in second if s.name in kept)
    other_seed = draw_samples(inventory, _snapshots(links), [], pool, SETTINGS, SEED + 1)
    assert [s.jobs for s in other_seed] != [s.jobs for s in first]


def test_job_pool_joins_upcoming_recent_and_presets_once() -> None:
    upcoming = preset_jobs(["T5-11B"])
    pool = job_pool(upcoming, [*upcoming, PRESET_JOBS["BERT-large"]])
    assert [j.name for j in pool][:2] == ["T5-11B", "BERT-large"]
    assert len(pool) == len(PRESET_JOBS)


def test_label_keys_follow_content(fleet) -> None:
    inventory, links = fleet
    jobs = preset_jobs(["GPT-2-1.5B"])
    key = label_key(inventory, links, jobs, SETTINGS)
    assert key == label_key(inventory.iloc[::-1], links, jobs, SETTINGS)  # row order of machines
    changed = links.copy()
    changed.loc[0, "latency_p50_ms"] += 1.0
    assert label_key(inventory, changed, jobs, SETTINGS) != key
    assert label_key(inventory, links, preset_jobs(["BERT-large"]), SETTINGS) != key
    other_teacher = SETTINGS.model_copy(
        update={"corpus": SETTINGS.corpus.model_copy(update={"max_evaluations": 16})}
    )
    assert label_key(inventory, links, jobs, other_teacher) != key
    assert frame_digest(links) == frame_digest(links.copy())


def test_label_cache_round_trip_and_a_label_is_a_function_of_its_key(fleet) -> None:
    inventory, links = fleet
    jobs = preset_jobs(["GPT-2-1.5B", "BERT-large"])
    key = label_key(inventory, links, jobs, SETTINGS)
    label = label_sample(inventory, links, jobs, SETTINGS, key)
    again = label_sample(inventory, links, jobs, SETTINGS, key)
    assert label["y"] == again["y"] and label["makespan_s"] == again["makespan_s"]
    assert len(label["y"]) == len(inventory) and set(label["y"]) <= {0, 1, 2}
    cache = LabelCache({key: label, "stale": label})
    text = cache.to_text(keep=[key])
    restored = LabelCache.from_text(text)
    assert key in restored and "stale" not in restored and restored[key] == label
    assert LabelCache.from_text("not json").labels == {}
    assert LabelCache.from_text('{"format": 0, "labels": {"a": {}}}').labels == {}


def test_few_snapshots_give_more_samples_each(fleet) -> None:
    inventory, links = fleet
    settings = SETTINGS.model_copy(
        update={"fleet_samples": FS.model_copy(update={"min_train_samples": 20})}
    )
    samples = draw_samples(inventory, _snapshots(links), [], job_pool([], []), settings, SEED)
    training = [s for s in samples if s.role != "eval"]
    # 3 snapshots × (1 + 1 + 1) per round: 3 rounds reach 20 (27 samples).
    assert len(training) == 27
    assert {s.name for s in training if s.snapshot == "drift-00"} >= {
        "drift-00/fleet-2",
        "drift-00/subfleet-2",
        "drift-00/drained-2",
    }


def test_recent_jobs_come_from_run_files_only(tmp_path: Path) -> None:
    import json

    from hulk.jobs import PRESET_JOBS, job_to_dict
    from hulk.stages.fleet_labels import recent_jobs

    def run_file(name: str, job: str) -> None:
        doc = {"jobs": [{"job": job, "spec": job_to_dict(PRESET_JOBS[job])}]}
        (tmp_path / name).write_text(json.dumps(doc))

    run_file("2026-11-27T02-00-00Z-aaaaaa.json", "BERT-large")
    run_file("2026-11-28T02-00-00Z-bbbbbb.json", "T5-11B")
    run_file("latest.json", "T5-11B")  # a copy of the newest run
    # The publication record sorts after the run files: it must not take a run's place.
    (tmp_path / "latest.published.json").write_text(json.dumps({"run_id": "x"}))
    jobs, findings = recent_jobs(tmp_path, 2)
    assert [job.name for job in jobs] == ["BERT-large", "T5-11B"] and findings == []
