"""What validation found: errors stop the pipeline, warnings are reported and the run goes on."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Literal

from hulk.errors import InputError

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    rule: str  # dotted rule name, e.g. "logs.faster_than_light"
    file: str | None  # the file (or folder) the finding is about
    message: str  # one sentence a user can act on
    count: int = 0  # offending rows (or machines, pairs, days)
    examples: list[dict] = field(default_factory=list)  # a few offending rows as dicts
    # Every machine (node id) the finding is about, when acting on it needs them all (the
    # scheduler drains the machines of logs.stale_machine).
    machines: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        where = f"{self.file}: " if self.file else ""
        head = f"{self.severity.upper()} {where}[{self.rule}] {self.message}"
        return "\n".join([head, *(f"  e.g. {row}" for row in self.examples)])


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def raise_on_errors(findings: Iterable[Finding]) -> None:
    """Turn the first error finding into an InputError (the CLI prints it, exits non-zero)."""
    found = errors(findings)
    if found:
        first = found[0]
        more = f" ({len(found) - 1} more errors in the validation report)" if len(found) > 1 else ""
        raise InputError(first.file, first.rule, first.message + more, first.examples)
