"""Errors that reach the user as a message, never as a traceback."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path


class HulkError(Exception):
    """An error the command line reports as a clean message and a non-zero exit."""

    exit_code = 2


class ConfigError(HulkError):
    """params.yaml (or an option) names an unknown key or holds a value of the wrong type.

    With a `rule`, it reads as an `InputError` does (``FILE: [rule] what is wrong``), every
    problem of `problems` on a line of its own under it."""

    def __init__(
        self,
        message: str,
        rule: str | None = None,
        path: str | Path | None = None,
        problems: Sequence[str] = (),
    ) -> None:
        self.message = message
        self.rule = rule
        self.path = None if path is None else str(path)
        self.problems = list(problems)
        super().__init__(self.render())

    def __reduce__(self) -> tuple:
        return (type(self), (self.message, self.rule, self.path, self.problems))

    def render(self) -> str:
        if self.rule is None:
            return self.message
        where = f"{self.path}: " if self.path else ""
        return "\n".join(
            [f"{where}[{self.rule}] {self.message}", *(f"  {p}" for p in self.problems)]
        )


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
        # One line: a library's own message (pyarrow's, PyYAML's) may span several.
        self.detail = " ".join(str(detail).split())
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


# errno → (rule, reason) of the storage faults a user can cause: a read-only folder, a full disk.
_STORAGE_RULES = {
    errno.EROFS: ("io.read_only", "the file system is read-only"),
    errno.EACCES: ("io.permission_denied", "permission denied"),
    errno.EPERM: ("io.permission_denied", "operation not permitted"),
    errno.ENOSPC: ("io.disk_full", "no space left on device"),
    errno.EDQUOT: ("io.disk_full", "disk quota exceeded"),
    # An output path through a file, or onto a folder: a mistyped --out.
    errno.ENOTDIR: ("io.not_a_folder", "a part of the path is a file, not a folder"),
    errno.EEXIST: ("io.not_a_folder", "a file is where a folder must be made"),
    errno.EISDIR: ("io.is_a_folder", "the path is a folder, not a file"),
}
# The same faults as libraries report them without an errno (sqlite, duckdb, Arrow, torch).
_STORAGE_TEXT = (
    ("no space left on device", errno.ENOSPC),
    ("database or disk is full", errno.ENOSPC),
    ("disk quota exceeded", errno.EDQUOT),
    ("read-only file system", errno.EROFS),
    ("readonly database", errno.EROFS),
    ("permission denied", errno.EACCES),
)


def storage_error(
    exc: BaseException, fallback: str | Path | None = None, path: str | Path | None = None
) -> InputError | None:
    """The `InputError` for a write refused by the storage (rules ``io.read_only``,
    ``io.permission_denied``, ``io.disk_full``), naming the file (`path`, else the one the
    error names, else `fallback`: the data folder), or None when `exc` (or what caused it) is
    no such fault.

    Every output is written atomically (`hulk.fileio`): what was already there stays whole.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = current.errno if isinstance(current, OSError) else None
        if code not in _STORAGE_RULES:
            text = str(current).lower()
            code = next((c for needle, c in _STORAGE_TEXT if needle in text), None)
        if code is not None:
            rule, reason = _STORAGE_RULES[code]
            name = path or getattr(current, "filename", None) or fallback
            return InputError(
                name,
                rule,
                f"cannot write: {reason}; outputs already there are left as they were "
                "(writes are atomic)",
            )
        current = current.__cause__ or current.__context__
    return None
