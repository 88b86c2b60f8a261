"""The labelled training corpus (hulk.corpus): determinism, splits, labels, format, files; and
the job encoding it shares with inference (hulk.features)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from hulk import fileio
from hulk.corpus import (
    SPLITS,
    Corpus,
    build_corpus,
    corpus_fleet,
    corpus_mix,
    corpus_teacher,
    label_mix,
    load_corpus,
    manifest_path,
    mix_jobs,
    sample_seed,
    save_corpus,
    split_of,
)
from hulk.cost import Fleet
from hulk.errors import ConfigError
from hulk.features import JOB_FEATURES, encode_inputs, job_features, order_jobs
from hulk.graph import EDGE_FEATURES, NODE_FEATURES
from hulk.jobs import PRESET_JOBS, Job, preset_jobs
from hulk.presets import build_fleet
from hulk.schemas import STATUS_ACTIVE, STATUS_DRAINED
from hulk.settings import CorpusSettings, Settings, TeacherSettings
from hulk.teacher import IDLE, PLACED, teacher_search

SEED = 11
TINY = CorpusSettings(
    fleets=6,
    mixes_per_fleet=2,
    min_machines=10,
    max_machines=40,
    max_cities=6,
    paper_share=0.3,
    drained_fraction={"low": 0.05, "high": 0.2},
    max_jobs=4,
    val_fraction=0.3,
    test_fraction=0.3,
    max_evaluations=25,
    time_budget_s=300.0,
)
SETTINGS = Settings().model_copy(
    update={"corpus": TINY, "teacher": TeacherSettings(random_starts=1, site_starts=4)}
)
SAMPLE_KEYS = {"x", "edge_index", "edge_attr", "jobs", "y", "active", "fleet", "mix", "makespan_s"}


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return build_corpus(SETTINGS, SEED, workers=1)


def _samples(corpus: Corpus) -> list[dict]:
    return [sample for name in SPLITS for sample in corpus.split(name)]


def _assert_same(a: Corpus, b: Corpus) -> None:
    for name in SPLITS:
        left, right = a.split(name), b.split(name)
        assert len(left) == len(right)
        for x, y in zip(left, right, strict=True):
            assert x.keys() == y.keys()
            for key, value in x.items():
                if isinstance(value, torch.Tensor):
                    assert value.dtype == y[key].dtype
                    assert torch.equal(value, y[key]), (name, x["fleet"], x["mix"], key)
                else:
                    assert value == y[key]


# --- determinism ------------------------------------------------------------------------------


@pytest.mark.slow
def test_same_seed_same_corpus_whatever_the_worker_count(corpus: Corpus) -> None:
    calls: list[tuple[int, int]] = []
    # Written elsewhere, on another worker count: the same manifest but for its build record.
    moved = SETTINGS.corpus.model_copy(update={"path": Path("/elsewhere/corpus.pt"), "workers": 2})
    elsewhere = SETTINGS.model_copy(update={"corpus": moved})
    parallel = build_corpus(elsewhere, SEED, workers=2, progress=lambda d, t: calls.append((d, t)))
    _assert_same(corpus, parallel)
    timing = {"teacher_seconds"}
    left = [{k: v for k, v in r.items() if k not in timing} for r in corpus.manifest["samples"]]
    right = [{k: v for k, v in r.items() if k not in timing} for r in parallel.manifest["samples"]]
    assert left == right
    assert corpus.manifest["fleets"] == parallel.manifest["fleets"]
    same = {k: v for k, v in corpus.manifest.items() if k not in {"samples", "build"}}
    assert same == {k: v for k, v in parallel.manifest.items() if k not in {"samples", "build"}}
    assert calls[-1] == (TINY.fleets, TINY.fleets)
    assert [d for d, _ in calls] == list(range(1, TINY.fleets + 1))


def test_teacher_never_stopped_by_the_clock(corpus: Corpus) -> None:
    # Worker-count independence rests on the evaluation cap, never the time cap.
    assert {r["stopped_by"] for r in corpus.manifest["samples"]} <= {"evaluations", "exhausted"}
    assert corpus.manifest["build"]["time_capped"] == 0


def test_another_seed_gives_other_fleets() -> None:
    a = corpus_fleet(1, 0, SETTINGS)[0]
    b = corpus_fleet(2, 0, SETTINGS)[0]
    assert not a.equals(b)
    again = corpus_fleet(1, 0, SETTINGS)[0]
    assert a.equals(again)


# --- splits -----------------------------------------------------------------------------------


def test_split_is_by_fleet(corpus: Corpus) -> None:
    fleets_of = {name: {s["fleet"] for s in corpus.split(name)} for name in SPLITS}
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not fleets_of[a] & fleets_of[b], (a, b)
    for name in SPLITS:
        assert fleets_of[name], f"tiny corpus has no {name} fleet"
        for fleet in fleets_of[name]:
            assert split_of(SEED, fleet, TINY) == name
    specs = {spec["fleet"]: spec["split"] for spec in corpus.manifest["fleets"]}
    assert sorted(specs) == list(range(TINY.fleets))
    for record in corpus.manifest["samples"]:
        assert record["split"] == specs[record["fleet"]]
    counts = corpus.manifest["counts"]
    assert sum(c["samples"] for c in counts.values()) == len(corpus)


def test_split_fractions_are_roughly_kept_and_stable() -> None:
    settings = CorpusSettings(val_fraction=0.2, test_fraction=0.1)
    splits = [split_of(3, fleet, settings) for fleet in range(2000)]
    assert abs(splits.count("test") / 2000 - 0.1) < 0.03
    assert abs(splits.count("val") / 2000 - 0.2) < 0.03
    # A fleet's split depends on (seed, fleet) only: growing the corpus moves no fleet.
    assert splits[:50] == [split_of(3, fleet, settings) for fleet in range(50)]


# --- sample format ----------------------------------------------------------------------------


def test_shapes_and_dtypes(corpus: Corpus) -> None:
    samples = _samples(corpus)
    assert len(samples) == sum(len(r["jobs"]) > 0 for r in corpus.manifest["samples"])
    for sample in samples:
        assert set(sample) == SAMPLE_KEYS
        n = sample["x"].shape[0]
        jobs = sample["jobs"].shape[0]
        assert sample["x"].dtype == torch.float32
        assert sample["x"].shape == (n, len(NODE_FEATURES))
        assert sample["edge_index"].dtype == torch.long
        assert sample["edge_index"].shape[0] == 2
        assert int(sample["edge_index"].max()) < n
        assert sample["edge_attr"].dtype == torch.float32
        assert sample["edge_attr"].shape == (sample["edge_index"].shape[1], len(EDGE_FEATURES))
        assert sample["jobs"].dtype == torch.float32
        assert sample["jobs"].shape == (jobs, len(JOB_FEATURES))
        assert 1 <= jobs <= TINY.max_jobs
        assert sample["y"].dtype == torch.long
        assert sample["y"].shape == (n,)
        assert int(sample["y"].min()) >= 0 and int(sample["y"].max()) <= jobs
        assert sample["active"].dtype == torch.bool
        assert sample["active"].shape == (n,)
        assert torch.equal(sample["active"].float(), sample["x"][:, NODE_FEATURES.index("active")])
        assert isinstance(sample["fleet"], int) and isinstance(sample["mix"], int)
        assert isinstance(sample["makespan_s"], float) and math.isfinite(sample["makespan_s"])
        assert torch.isfinite(sample["x"]).all() and torch.isfinite(sample["jobs"]).all()
        assert TINY.min_machines <= n <= TINY.max_machines


def test_fleets_vary_and_some_machines_are_drained(corpus: Corpus) -> None:
    specs = corpus.manifest["fleets"]
    assert {spec["source"] for spec in specs} == {"paper-47", "synthetic-1000"}
    assert len({spec["machines"] for spec in specs}) > 1
    assert any(spec["active"] < spec["machines"] for spec in specs)
    for sample in _samples(corpus):
        # Drained machines are idle.
        assert (sample["y"][~sample["active"]] == sample["jobs"].shape[0]).all()


def test_jobs_are_in_size_order(corpus: Corpus) -> None:
    memory = JOB_FEATURES.index("log10_min_memory_gb")
    share = JOB_FEATURES.index("memory_share")
    for sample in _samples(corpus):
        column = sample["jobs"][:, memory]
        assert (column[:-1] >= column[1:]).all()
        assert (sample["jobs"][:, share] > 0).all() and (sample["jobs"][:, share] <= 1).all()
        # No two jobs of a mix look the same: every class is well defined.
        assert len(torch.unique(sample["jobs"], dim=0)) == sample["jobs"].shape[0]
    for record in corpus.manifest["samples"]:
        jobs = mix_jobs(record)
        assert order_jobs(jobs) == list(range(len(jobs)))
        assert len({job.name for job in jobs}) == len(jobs)


def test_order_jobs_ties_by_params_then_name() -> None:
    big = Job("big", 10.0, 8, 256, 128, 8, 1)
    same_memory_more_params = Job("b-more", 5.0, 8, 256, 128, 8, 1, min_memory_gb=160.0)
    same_memory_fewer_params = Job("a-fewer", 2.0, 8, 256, 128, 8, 1, min_memory_gb=160.0)
    twin_b = Job("twin-b", 1.0, 8, 256, 128, 8, 1)
    twin_a = Job("twin-a", 1.0, 8, 256, 128, 8, 1)
    jobs = [twin_b, same_memory_fewer_params, twin_a, big, same_memory_more_params]
    # big: 160 GB need by default (16 × 10e9); the two 160 GB jobs: more params first.
    assert [jobs[j].name for j in order_jobs(jobs)] == [
        "big",
        "b-more",
        "a-fewer",
        "twin-a",
        "twin-b",
    ]


def test_job_features_of_a_preset() -> None:
    job = PRESET_JOBS["GPT-2-1.5B"]
    row = job_features([job], active_memory_bytes=job.min_memory_bytes * 4)[0]
    values = dict(zip(JOB_FEATURES, row.tolist(), strict=True))
    assert values["log10_params"] == pytest.approx(math.log10(1.5e9), rel=1e-6)
    assert values["log2_layers"] == pytest.approx(math.log2(48))
    assert values["log2_hidden"] == pytest.approx(math.log2(1600), rel=1e-6)
    assert values["log2_seq_len"] == pytest.approx(10.0)
    assert values["log2_global_batch"] == pytest.approx(9.0)
    assert values["log2_micro_batch"] == pytest.approx(3.0)
    assert values["log10_min_memory_gb"] == pytest.approx(math.log10(24.0), rel=1e-6)
    assert values["memory_share"] == pytest.approx(0.25)
    assert values["log10_flops"] == pytest.approx(math.log10(job.flops_per_iteration), rel=1e-6)
    assert values["priority"] == 0.0
    assert job_features([], 1e12).shape == (0, len(JOB_FEATURES))
    with pytest.raises(ValueError):
        job_features([job], 0.0)


# --- labels -----------------------------------------------------------------------------------


def test_labels_match_a_fresh_teacher_run(corpus: Corpus) -> None:
    teacher = corpus_teacher(SETTINGS)
    assert teacher.max_evaluations == TINY.max_evaluations
    checked = 0
    for name in SPLITS:
        for sample in corpus.split(name)[:1]:
            fleet_id, mix = sample["fleet"], sample["mix"]
            inventory, links, _ = corpus_fleet(SEED, fleet_id, SETTINGS)
            fleet = Fleet.from_frames(
                inventory, links, SETTINGS.hardware, SETTINGS.graph.bandwidth_tiers
            )
            jobs = corpus_mix(SEED, fleet_id, mix, SETTINGS, fleet)
            result = teacher_search(
                jobs, fleet, teacher, SETTINGS.planner, sample_seed(SEED, fleet_id, mix)
            )
            order = order_jobs(jobs)
            idle = len(jobs)
            expected = np.full(fleet.n, idle)
            for k, j in enumerate(order):
                placement = result.placements[j]
                if placement.status == PLACED:
                    assert (sample["y"][list(placement.nodes)] == k).all()
                    expected[list(placement.nodes)] = k
            assert np.array_equal(sample["y"].numpy(), expected)
            assert np.array_equal(result.labels == IDLE, expected == idle)
            assert sample["makespan_s"] == result.makespan_s
            checked += 1
    assert checked == len(SPLITS)


def test_manifest_records_the_teacher_plan(corpus: Corpus) -> None:
    records = {(r["fleet"], r["mix"]): r for r in corpus.manifest["samples"]}
    for sample in _samples(corpus):
        record = records[(sample["fleet"], sample["mix"])]
        counts = torch.bincount(sample["y"], minlength=len(record["jobs"]) + 1)
        assert counts[:-1].tolist() == record["machines"]
        assert record["makespan_s"] == sample["makespan_s"]
        for k, job in enumerate(record["jobs"]):
            if job["name"] in record["queued"]:
                assert counts[k] == 0
    assert corpus.manifest["job_features"] == list(JOB_FEATURES)
    assert corpus.manifest["teacher"]["max_evaluations"] == TINY.max_evaluations


def test_label_mix_on_a_given_fleet() -> None:
    from hulk.generate import expected_links

    generate = SETTINGS.generate.model_copy(update={"drained_fraction": 0.1})
    inventory = build_fleet("paper-47", 5, generate)
    links = expected_links(inventory, 5, generate)
    jobs = preset_jobs(["BERT-large", "T5-11B", "GPT-2-1.5B"])
    teacher = TeacherSettings(max_evaluations=20, random_starts=0, site_starts=2)
    sample, labelled, _ = label_mix(inventory, links, jobs, SETTINGS, 3, teacher, -1, 0)
    assert set(sample) == SAMPLE_KEYS
    assert sample["fleet"] == -1 and sample["mix"] == 0
    # Size order: T5-11B (176 GB), GPT-2-1.5B (24 GB), BERT-large (5.4 GB).
    inputs, order = encode_inputs(inventory, links, jobs, SETTINGS)
    assert [jobs[j].name for j in order] == ["T5-11B", "GPT-2-1.5B", "BERT-large"]
    for key, value in inputs.items():
        assert torch.equal(value, sample[key])
    drained = torch.from_numpy((inventory["status"] == STATUS_DRAINED).to_numpy())
    assert drained.any()
    assert (sample["y"][drained] == 3).all()
    assert not sample["active"][drained].any()
    assert (inventory["status"] == STATUS_ACTIVE).sum() == int(sample["active"].sum())
    fleet = Fleet.from_frames(inventory, links, SETTINGS.hardware, SETTINGS.graph.bandwidth_tiers)
    result = teacher_search(jobs, fleet, teacher, SETTINGS.planner, 3)
    for k, j in enumerate(order):
        assert (sample["y"][list(result.placements[j].nodes)] == k).all()
    assert labelled.makespan_s == result.makespan_s == sample["makespan_s"]


# --- files ------------------------------------------------------------------------------------


def test_save_and_load_round_trip(corpus: Corpus, tmp_path: Path) -> None:
    path = tmp_path / "corpus" / "corpus.pt"
    written = save_corpus(corpus, path)
    assert written == manifest_path(path) == tmp_path / "corpus" / "corpus.json"
    raw = torch.load(path, weights_only=True)
    assert set(raw["splits"]) == set(SPLITS)
    loaded = load_corpus(path)
    _assert_same(corpus, loaded)
    manifest = json.loads(written.read_text())
    assert manifest["file"] == "corpus.pt"
    assert loaded.manifest["fleets"] == corpus.manifest["fleets"]
    assert loaded.manifest["samples"] == corpus.manifest["samples"]
    # No temporary files are left behind.
    assert sorted(p.name for p in path.parent.iterdir()) == ["corpus.json", "corpus.pt"]


def test_load_rejects_other_feature_names(corpus: Corpus, tmp_path: Path) -> None:
    path = tmp_path / "corpus.pt"
    save_corpus(corpus, path)
    raw = torch.load(path, weights_only=True)
    raw["job_features"] = ["something", "else"]
    torch.save(raw, path)
    # As other code would have written it: its manifest records those bytes.
    manifest = manifest_path(path)
    record = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**record, "sha256": fileio.sha256_file(path)}))
    with pytest.raises(ValueError, match="job_features"):
        load_corpus(path)


def test_default_settings_are_consistent() -> None:
    defaults = CorpusSettings()
    assert defaults.max_evaluations < TeacherSettings().max_evaluations
    assert defaults.min_machines <= defaults.max_machines
    with pytest.raises(ValueError):
        CorpusSettings(min_jobs=5, max_jobs=2)
    with pytest.raises(ValueError):
        CorpusSettings(val_fraction=0.6, test_fraction=0.6)


def test_a_corpus_whose_split_leaves_no_training_fleet_fails_before_labelling() -> None:
    corpus = SETTINGS.corpus.model_copy(
        update={"fleets": 2, "val_fraction": 0.5, "test_fraction": 0.49}
    )
    settings = SETTINGS.model_copy(update={"corpus": corpus})
    seed = next(s for s in range(1000) if all(split_of(s, f, corpus) != "train" for f in range(2)))
    with pytest.raises(ConfigError, match=r"corpus: none of the 2 fleets .*training split"):
        build_corpus(settings, seed, workers=1)


def test_the_corpus_key_ignores_the_demo_datas_own_generator_settings() -> None:
    """The corpus's fleets come from the presets' generator without logs: another demo preset
    or end date rebuilds nothing, a network setting does."""
    import datetime as dt

    from hulk.corpus import corpus_inputs
    from hulk.settings import Range

    base = Settings()

    def with_generate(**changes: object) -> Settings:
        return base.model_copy(update={"generate": base.generate.model_copy(update=changes)})

    same = with_generate(preset="two-region-24gb", end_date=dt.date(2027, 1, 1))
    assert corpus_inputs(same) == corpus_inputs(base)
    other = with_generate(route_inflation=Range(low=1.1, high=1.5))
    assert corpus_inputs(other) != corpus_inputs(base)
