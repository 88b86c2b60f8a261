"""Step results are typed (`JobRow`, `EvaluatedRow`, `QueueBlock`, `JobSchedule`) and turn back
into the records the metrics files, the flows' logs and the placements file hold, key for key
and in order."""

from __future__ import annotations

import dataclasses
import json

from hulk.stages import BASELINE_SYSTEMS, EvaluatedRow, JobRow, ScheduledTimes, Summary, plain
from hulk.stages.assign import AssignSummary
from hulk.stages.evaluate import EvaluateSummary
from hulk.stages.scheduling import JobSchedule, QueueBlock

ASSIGNED = JobRow("GPT-2-1.5B", "placed", [3, 4], "1×2", 2.5, 2.0, None)
ASSIGN_KEYS = ["job", "status", "machines", "shape", "iteration_s", "lower_bound_s", "reason"]
QUEUE = QueueBlock(
    now="2026-11-24T09:40:54Z",
    order="shortest-first",
    mean_completion_s=3600.0,
    makespan_s=7200.0,
    ends_at="2026-11-24T11:40:54Z",
    missed_deadlines=0,
    actions={"start": 1, "wait": 1},
    moved=[],
    finished=["short"],
    submitted=["t5"],
    withdrawn=[],
    resubmitted=[],
    drained=[17],
    strategy_plans=False,
    scheduling_s=0.012,
    plans_made=2,
    plans_remembered=0,
)


def test_an_assign_row_without_the_scheduler() -> None:
    record = ASSIGNED.to_dict()
    assert list(record) == ASSIGN_KEYS
    assert record["machines"] == [3, 4] and record["reason"] is None


def test_a_scheduled_row_adds_the_times_even_when_unknown() -> None:
    row = dataclasses.replace(
        ASSIGNED, scheduled=ScheduledTimes("start", "2026-11-24T09:40:54Z", None)
    )
    record = row.to_dict()
    assert list(record) == [*ASSIGN_KEYS, "action", "start_at", "finish_at"]
    assert (record["action"], record["start_at"], record["finish_at"]) == (
        "start",
        "2026-11-24T09:40:54Z",
        None,
    )


def test_an_evaluated_row_has_its_parts_and_every_baseline() -> None:
    row = EvaluatedRow(
        "T5-11B",
        "queued",
        [],
        "-",
        None,
        None,
        "waits for the machines of GPT-2-1.5B",
        compute_s=None,
        comm_s=None,
        baselines_s={"A": 63.5, "C": 1.9e5},  # B cannot run it: absent
    )
    record = row.to_dict()
    assert list(record) == [
        "job",
        "status",
        "machines",
        "shape",
        "iteration_s",
        "compute_s",
        "comm_s",
        "lower_bound_s",
        *(f"{name}_s" for name in BASELINE_SYSTEMS),
        "reason",
    ]
    assert (record["A_s"], record["B_s"], record["C_s"]) == (63.5, None, 1.9e5)


def test_the_queue_block_is_the_files_block_in_its_order() -> None:
    record = QUEUE.to_dict()
    assert list(record)[:3] == ["now", "order", "mean_completion_s"]
    assert list(record)[-2:] == ["plans_made", "plans_remembered"]
    assert record["drained"] == [17] and record["actions"] == {"start": 1, "wait": 1}
    json.dumps(record)  # plain JSON values only


def test_a_job_schedule_is_the_entrys_keys_and_gives_the_rows_times() -> None:
    entry = JobSchedule(
        action="wait",
        start_at="2026-11-24T10:40:54Z",
        finish_at=None,
        overhead_s=0.0,
        waits_for=["GPT-2-1.5B"],
        planned_nodes=[3, 4],
        iterations=None,
        done_iterations=0.0,
        deadline_met=None,
    )
    assert list(entry.to_dict()) == [
        "action",
        "start_at",
        "finish_at",
        "overhead_s",
        "waits_for",
        "planned_nodes",
        "iterations",
        "done_iterations",
        "deadline_met",
    ]
    assert entry.times() == ScheduledTimes("wait", "2026-11-24T10:40:54Z", None)


def test_summaries_give_plain_records_for_metrics_and_logs() -> None:
    summary = AssignSummary("teacher", "run-1", [ASSIGNED], 2.5, queue=QUEUE)
    record = summary.to_dict()
    assert record["jobs"] == [ASSIGNED.to_dict()]
    assert record["queue"] == QUEUE.to_dict()
    json.dumps(record)
    evaluated = EvaluateSummary("run-1", "teacher", "concurrent", [], None).to_dict()
    assert evaluated["jobs"] == []


def test_plain_leaves_values_without_a_record_as_they_are() -> None:
    assert plain([1, "a", None]) == [1, "a", None]
    assert plain({"k": 1}) == {"k": 1}
    assert isinstance(AssignSummary("A", "r", [], None), Summary)


def test_a_remembered_plan_round_trips_through_the_stores_record() -> None:
    from hulk.stages.scheduling import RememberedPlan

    record = {
        "plan": None,
        "cost": {
            "iteration_s": None,
            "compute_s": None,
            "comm_s": None,
            "feasible": False,
            "reason": "too little memory",
        },
    }
    remembered = RememberedPlan.from_record(record)
    assert remembered.to_record() == record
    assert json.dumps(remembered.to_record()) == json.dumps(record)  # same key order


def test_the_markdown_report_writes_whole_seconds_without_a_decimal() -> None:
    from hulk.steps import _seconds_text

    assert [_seconds_text(v) for v in (193400.0, 6874000.0, 2.268, None)] == [
        "193,400",
        "6,874,000",
        "2.268",
        "-",
    ]
