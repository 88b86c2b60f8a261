"""Algorithm 1: class probabilities → disjoint groups that meet each job's memory need."""

from __future__ import annotations

import numpy as np
import pytest

from hulk.algorithm1 import GB, groups_from_probabilities

# Five machines of 100 GB; two jobs (size order) and idle.
MEMORY = np.full(5, 100 * GB)
ACTIVE = np.ones(5, bool)


def proba(*rows: list[float]) -> np.ndarray:
    return np.array(rows, dtype=float)


def test_predicted_groups_are_kept_when_they_fit() -> None:
    p = proba(
        [0.8, 0.1, 0.1],
        [0.7, 0.2, 0.1],
        [0.1, 0.8, 0.1],
        [0.1, 0.1, 0.8],
        [0.2, 0.1, 0.7],
    )
    groups = groups_from_probabilities(p, np.array([150, 80]) * GB, MEMORY, ACTIVE)
    assert [g.tolist() for g in groups.members] == [[0, 1], [2]]
    assert groups.reasons == [None, None]


def test_short_group_is_topped_up_by_probability_for_that_job() -> None:
    p = proba(
        [0.8, 0.1, 0.1],  # job 0's core: 100 GB of the 250 it needs
        [0.1, 0.8, 0.1],
        [0.3, 0.1, 0.6],  # idle, but job 0's next best …
        [0.2, 0.1, 0.7],  # … and then this one
        [0.1, 0.1, 0.8],
    )
    groups = groups_from_probabilities(p, np.array([250, 80]) * GB, MEMORY, ACTIVE)
    assert groups.members[0].tolist() == [0, 2, 3]
    assert groups.members[1].tolist() == [1]


def test_larger_job_takes_a_smaller_jobs_machine_and_the_smaller_one_looks_elsewhere() -> None:
    p = proba(
        [0.9, 0.05, 0.05],
        [0.4, 0.5, 0.1],  # meant for job 1, job 0's best remaining choice
        [0.1, 0.2, 0.7],
        [0.1, 0.3, 0.6],
        [0.1, 0.1, 0.8],
    )
    groups = groups_from_probabilities(p, np.array([200, 100]) * GB, MEMORY, ACTIVE)
    assert groups.members[0].tolist() == [0, 1]
    assert groups.members[1].tolist() == [3]  # its highest remaining probability


def test_groups_are_disjoint_and_never_use_drained_machines() -> None:
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=40)
    active = rng.random(40) > 0.2
    memory = rng.choice([64, 96, 320], size=40) * GB
    groups = groups_from_probabilities(p, np.array([900, 500, 200]) * GB, memory, active)
    used = np.concatenate([g for g in groups.members if g is not None])
    assert len(used) == len(set(used.tolist()))
    assert active[used].all()
    for group, need in zip(groups.members, [900, 500, 200], strict=True):
        assert group is None or memory[group].sum() >= need * GB


def test_a_waiting_job_takes_surplus_of_a_larger_group() -> None:
    p = proba(
        [0.6, 0.3, 0.1],
        [0.6, 0.35, 0.05],
        [0.6, 0.2, 0.2],
        [0.6, 0.25, 0.15],
        [0.6, 0.1, 0.3],
    )  # the model gave job 0 all 500 GB; it needs 300
    groups = groups_from_probabilities(p, np.array([300, 200]) * GB, MEMORY, ACTIVE)
    assert groups.members[1].tolist() == [0, 1]  # job 1's two most likely machines
    assert groups.members[0].tolist() == [2, 3, 4]  # still 300 GB


def test_job_that_does_not_fit_what_is_free_waits() -> None:
    p = proba(*[[0.6, 0.3, 0.1]] * 5)
    groups = groups_from_probabilities(p, np.array([400, 200]) * GB, MEMORY, ACTIVE)
    assert groups.members[0].tolist() == [0, 1, 2, 3, 4]  # nothing to spare above 400 GB
    assert groups.members[1] is None
    assert groups.reasons[1] == "needs 200 GB; 0 GB free until a running job finishes"


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match="2 job columns"):
        groups_from_probabilities(np.ones((5, 3)), np.array([1.0]), MEMORY, ACTIVE)
