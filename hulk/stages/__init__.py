"""The pipeline's steps, one module each (`hulk.steps.STEPS` names the function that runs each).

A stage reads its inputs from the data folder (`hulk.data_folder`), calls the library, writes
its outputs atomically and returns a `StepResult` whose summary is the step's own typed
`Summary` (defined in its module); a stage that finds an error raises before it writes anything
downstream.

The per-job rows of assign, replan and evaluate are `JobRow`s (evaluate's: `EvaluatedRow`s),
and the scheduler's figures a typed block (`hulk.stages.scheduling.QueueBlock`): the CLI, the
flows and the metrics read them by attribute. `Summary.to_dict` turns them back into the
records of the metrics files and the flows' logs, key for key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from hulk.findings import Finding

# A library's progress(done, total) callback (the CLI's progress bar), or none.
Progress = Callable[[int, int], None] | None


class Summary:
    """A step's figures, read by attribute. Subclasses are dataclasses; `to_dict` gives the
    figures under the keys of the metrics files, the CLI lines and the flows' logs (a subclass
    whose keys are not its fields overrides it)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


def plain(value: Any) -> Any:
    """`value` with typed records (anything with a ``to_dict``) as their dicts, in lists too."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


S = TypeVar("S", bound=Summary)


@dataclass
class StepResult(Generic[S]):
    """What a step wrote and what it noticed, for the CLI and flows to report."""

    summary: S
    outputs: dict[str, Path] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


BASELINE_SYSTEMS = ("A", "B", "C")  # the whole-fleet systems of evaluate's rows (`A_s`, …)


@dataclass(frozen=True)
class ScheduledTimes:
    """The scheduler's estimate for one job of an assign run (UTC ISO times, None: unknown)."""

    action: str  # keep | start | restart | move | wait | never
    start_at: str | None
    finish_at: str | None


@dataclass(frozen=True)
class JobRow:
    """One job's line of a placements table (`hulk.stages.assign.placement_rows`: assign,
    replan; with the scheduler's estimates in an assign run that scheduled)."""

    job: str
    status: str  # placed | queued | infeasible
    machines: list[int]  # node ids
    shape: str | None  # D×S
    iteration_s: float | None
    lower_bound_s: float | None
    reason: str | None
    # None: the run did not schedule (whole-fleet systems, replan).
    scheduled: ScheduledTimes | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as the summaries' records have it (`hulk.steps` metrics, the flows' logs)."""
        row: dict[str, Any] = {
            "job": self.job,
            "status": self.status,
            "machines": list(self.machines),
            "shape": self.shape,
            "iteration_s": self.iteration_s,
            "lower_bound_s": self.lower_bound_s,
            "reason": self.reason,
        }
        if self.scheduled is not None:
            row.update(dataclasses.asdict(self.scheduled))
        return row


@dataclass(frozen=True)
class EvaluatedRow(JobRow):
    """A job's line of evaluate's cost table: the plan's parts and Systems A, B, C on the
    whole fleet (`BASELINE_SYSTEMS`; None where a system cannot run the job)."""

    compute_s: float | None = None
    comm_s: float | None = None
    baselines_s: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status": self.status,
            "machines": list(self.machines),
            "shape": self.shape,
            "iteration_s": self.iteration_s,
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "lower_bound_s": self.lower_bound_s,
            **{f"{name}_s": self.baselines_s.get(name) for name in BASELINE_SYSTEMS},
            "reason": self.reason,
        }
