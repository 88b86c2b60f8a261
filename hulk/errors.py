"""Errors that reach the user as a message, never as a traceback."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class HulkError(Exception):
    """An error the command line reports as a clean message and a non-zero exit."""

    exit_code = 2


class ConfigError(HulkError):
    """params.yaml (or an option) names an unknown key or holds a value of the wrong type."""


class InputError(HulkError):
    """Input data breaks a rule: names the file, the rule and a few offending rows."""

    def __init__(
        self,
        path: str | Path | None,
        rule: str,
        detail: str,
        examples: Sequence[object] = (),
    ) -> None:
        self.path = None if path is None else str(path)
        self.rule = rule
        self.detail = detail
        self.examples = list(examples)
        super().__init__(self.render())

    def __reduce__(self) -> tuple:
        """Pickle by the constructor's arguments: a worker process's error reaches the caller."""
        return (type(self), (self.path, self.rule, self.detail, self.examples))

    def render(self) -> str:
        where = f"{self.path}: " if self.path else ""
        lines = [f"{where}[{self.rule}] {self.detail}"]
        lines += [f"  e.g. {example}" for example in self.examples[:5]]
        if len(self.examples) > 5:
            lines.append(f"  … and {len(self.examples) - 5} more")
        return "\n".join(lines)
