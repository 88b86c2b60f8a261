"""The pipeline's steps, one module each (`hulk.steps.STEPS` names the function that runs each).

A stage reads its inputs from the data folder (`hulk.data_folder`), calls the library, writes
its outputs atomically and returns a `StepResult`; a stage that finds an error raises before it
writes anything downstream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hulk.findings import Finding

# A library's progress(done, total) callback (the CLI's progress bar), or none.
Progress = Callable[[int, int], None] | None


@dataclass
class StepResult:
    """What a step wrote and what it noticed, for the CLI and flows to report."""

    outputs: dict[str, Path] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]
