"""GNN evaluation on a corpus split (hulk.gnn_eval): overall figures and by fleet size."""

from __future__ import annotations

import math

import pytest

from hulk.corpus import Corpus, build_corpus
from hulk.gnn_eval import BAND_METRICS, SIZE_BANDS, _case_rows, corpus_cases, evaluate_gnn
from hulk.model import HulkGNN
from hulk.train import train_model
from tests.model.test_corpus import SETTINGS as TINY_SETTINGS

SEED = 5
# The corpus tests' tiny corpus, with fleets spread over two size bands (seed 5: test fleets
# of 45, 47, 58 and 81 machines).
SETTINGS = TINY_SETTINGS.model_copy(
    update={
        "corpus": TINY_SETTINGS.corpus.model_copy(
            update={
                "fleets": 8,
                "mixes_per_fleet": 1,
                "min_machines": 20,
                "max_machines": 160,
                "max_jobs": 3,
                "val_fraction": 0.2,
                "test_fraction": 0.5,
            }
        )
    }
)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return build_corpus(SETTINGS, SEED, workers=1)


@pytest.fixture(scope="module")
def model(corpus: Corpus) -> HulkGNN:
    train = SETTINGS.train.model_copy(update={"epochs": 2})
    return train_model(list(corpus.train), corpus.val, SETTINGS.model, train, SEED).model


@pytest.fixture(scope="module")
def metrics(corpus: Corpus, model: HulkGNN) -> dict[str, float]:
    return evaluate_gnn(model, corpus, SETTINGS, split="test")


@pytest.mark.slow
def test_overall_figures(corpus: Corpus, metrics: dict[str, float]) -> None:
    assert metrics["samples"] == len(corpus.split("test")) > 0
    assert 0.0 <= metrics["node_accuracy"] <= 1.0
    assert 0.0 <= metrics["fallback_rate"] <= 1.0
    assert metrics["speedup"] == pytest.approx(metrics["teacher_seconds"] / metrics["gnn_seconds"])
    # Inference (inputs, forward pass, grouping) is part of the whole decision.
    assert metrics["inference_seconds"] < metrics["gnn_seconds"]


@pytest.mark.slow
def test_figures_by_fleet_size_cover_every_sample(
    corpus: Corpus, metrics: dict[str, float]
) -> None:
    records = [r for r in corpus.manifest["samples"] if r["split"] == "test"]
    machines = [len(s["x"]) for s in corpus.split("test")]
    assert len(machines) == len(records)
    lower, counted = 0.0, 0.0
    for band, upper in SIZE_BANDS:
        expected = sum(lower < n <= upper for n in machines)
        lower = upper
        if not expected:  # an empty band has no keys at all
            assert not any(key.endswith(f"_{band}") for key in metrics)
            continue
        counted += metrics[f"samples_{band}"]
        assert metrics[f"samples_{band}"] == expected
        for key in BAND_METRICS:
            value = metrics[f"{key}_{band}"]
            assert math.isnan(value) or value >= 0, key
    assert counted == metrics["samples"]
    assert sum(key.startswith("samples_") for key in metrics) >= 2  # the split spans bands


@pytest.mark.slow
def test_the_model_s_own_plans_are_scored_before_the_refining_search(
    corpus: Corpus, model: HulkGNN
) -> None:
    """The refining search keeps only faster plans: served ≤ the model's own, per mix; on a
    fleet too large for the search (more than twice `planner.max_pool` active machines) they
    are the same. Test fleets: 45, 47, 58 and 81 machines, some drained."""
    settings = SETTINGS.model_copy(
        update={"planner": SETTINGS.planner.model_copy(update={"max_pool": 25})}
    )
    cases = corpus_cases(corpus, settings)
    rows = _case_rows(model, cases, settings)
    searched = [int(case.active.sum()) <= 50 for case in cases]
    assert any(searched) and not all(searched)
    improved = 0
    for row, small in zip(rows, searched, strict=True):
        assert math.isfinite(row["model_ratio"])
        if row["fallback"]:
            continue
        if small:
            assert row["makespan_ratio"] <= row["model_ratio"] + 1e-12
            improved += row["makespan_ratio"] < row["model_ratio"] - 0.01
        else:
            assert row["makespan_ratio"] == pytest.approx(row["model_ratio"])
    assert improved  # the search found faster plans on a small fleet: they are not the model's


def test_a_job_left_waiting_adds_its_least_time_to_the_makespan() -> None:
    import numpy as np

    from hulk.assign import QUEUED, placed, waiting
    from hulk.cost import lower_bound
    from hulk.gnn_eval import waiting_penalty
    from hulk.jobs import Job
    from hulk.planner import plan_job
    from hulk.settings import Settings
    from tests.fleets import fleet_of

    near = (0.001, 1.25e9)
    fleet = fleet_of([1e14] * 4, [100.0] * 4, {(i, j): near for i in range(4) for j in range(i)})
    big, small = Job("big", 5, 8, 1024, 512, 64, 4), Job("small", 1, 8, 1024, 512, 64, 4)
    plan, cost = plan_job(big, fleet, np.array([0, 1]), Settings().planner)
    placements = [placed(big, fleet, plan, cost), waiting(small, fleet, QUEUED, "no room")]
    active = np.ones(4, bool)
    # The teacher ran both jobs (classes 0 and 1 have machines): the small one is owed.
    jobs, seconds = waiting_penalty(placements, np.array([0, 0, 1, 1]), active, fleet)
    assert jobs == [1] and seconds == pytest.approx(lower_bound(small, fleet, range(4)))
    # The teacher left it waiting too: nothing is owed.
    assert waiting_penalty(placements, np.array([0, 0, 2, 2]), active, fleet) == ([], 0)
