"""The pipeline's steps, one module each (`hulk.steps.STEPS` names the function that runs each).

A stage reads its inputs from the data folder (`hulk.data_folder`), calls the library, writes
its outputs atomically and returns a `StepResult` whose summary is the step's own typed
`Summary` (defined in its module); a stage that finds an error raises before it writes anything
downstream.

The per-job rows of assign, replan and evaluate stay plain dicts in the summaries (they are the
metrics files' and the flows' records as they are); readers take them as `JobRow`s
(`job_rows`), so every field they use is named and typed in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
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
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


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
class JobRow:
    """One job's line of a placements table: a row of `hulk.stages.assign.placement_rows`
    (assign, replan; with the scheduler's estimates in an assign run) or of
    `hulk.evaluate.rows` (with the plan's parts and the baselines)."""

    job: str
    status: str  # placed | queued | infeasible
    machines: list[int]  # node ids
    shape: str | None  # D×S
    iteration_s: float | None
    lower_bound_s: float | None
    reason: str | None
    # The scheduler's (start_at, finish_at), UTC ISO or None each; None: the run did not
    # schedule (whole-fleet systems, replan, evaluate).
    times: tuple[str | None, str | None] | None = None
    compute_s: float | None = None  # evaluate: the plan's compute and communication parts
    comm_s: float | None = None
    baselines_s: dict[str, float | None] = field(default_factory=dict)  # evaluate: A, B, C

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> JobRow:
        return cls(
            job=row["job"],
            status=row["status"],
            machines=list(row["machines"]),
            shape=row["shape"],
            iteration_s=row["iteration_s"],
            lower_bound_s=row["lower_bound_s"],
            reason=row.get("reason"),
            times=(row.get("start_at"), row.get("finish_at")) if "start_at" in row else None,
            compute_s=row.get("compute_s"),
            comm_s=row.get("comm_s"),
            baselines_s={name: row[f"{name}_s"] for name in BASELINE_SYSTEMS if f"{name}_s" in row},
        )


def job_rows(rows: Sequence[Mapping[str, Any]]) -> list[JobRow]:
    """A summary's per-job rows (its ``jobs``), typed."""
    return [JobRow.from_dict(row) for row in rows]
