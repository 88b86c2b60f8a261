"""The per-job rows of assign, replan and evaluate read as typed `JobRow`s, field for field."""

from __future__ import annotations

from hulk.stages import BASELINE_SYSTEMS, JobRow, job_rows

ASSIGNED = {
    "job": "GPT-2-1.5B",
    "status": "placed",
    "machines": [3, 4],
    "shape": "1×2",
    "iteration_s": 2.5,
    "lower_bound_s": 2.0,
    "reason": None,
}
SCHEDULED = {**ASSIGNED, "action": "start", "start_at": "2026-11-24T09:40:54Z", "finish_at": None}
EVALUATED = {
    **ASSIGNED,
    "compute_s": 2.25,
    "comm_s": 0.25,
    "A_s": 63.5,
    "B_s": None,
    "C_s": 1.9e5,
    "reason": "waits for the machines of T5-11B",
}


def test_an_assign_row_without_the_scheduler() -> None:
    (row,) = job_rows([ASSIGNED])
    assert row == JobRow("GPT-2-1.5B", "placed", [3, 4], "1×2", 2.5, 2.0, None)
    assert row.times is None and row.baselines_s == {}


def test_a_scheduled_row_keeps_its_times_even_when_unknown() -> None:
    row = JobRow.from_dict(SCHEDULED)
    assert row.times == ("2026-11-24T09:40:54Z", None)


def test_an_evaluated_row_has_its_parts_and_baselines() -> None:
    row = JobRow.from_dict(EVALUATED)
    assert (row.compute_s, row.comm_s) == (2.25, 0.25)
    assert row.baselines_s == {"A": 63.5, "B": None, "C": 1.9e5}
    assert tuple(row.baselines_s) == BASELINE_SYSTEMS
    assert row.reason == "waits for the machines of T5-11B"
