"""The pipeline's steps, one module each (`hulk.steps.STEPS` names the function that runs each).

A stage reads its inputs from the data folder (`hulk.data_folder`), calls the library, writes
its outputs atomically and returns a `StepResult` whose summary is the step's own typed
`Summary` (defined in its module); a stage that finds an error raises before it writes anything
downstream.
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
