"""Locks on a data folder, so that two runs never write it at the same time.

An advisory ``fcntl`` lock on a file in the folder: the kernel releases it when the process ends,
however it ends (``kill -9`` included), so a crashed run never leaves the folder locked. The
lock file holds the holder's pid and start time, for the message of whoever waits. It works
for runs outside Prefect (the CLI, cron, DVC) and inside it alike.

Three locks over disjoint parts of the folder (docs/design.md, "No run tramples another"):
``nightly`` (the fleet's data, graph, labels and model: the nightly flow, and the commands that
write those by hand), ``assign`` (the scheduler's state and the published placements: every
assign run, the nightly's included, and `hulk jobs`; taken by the assign step itself, so that
every caller holds it) and ``publish`` (the rest of a publication after latest.json: its MLflow
run, plot and record). An assign run never waits for a nightly: it reads files that are replaced
atomically and the champion as it was when it started. A process never takes a lock it holds:
``flock`` on a second descriptor would wait for the process's own lock. The one nested use (the
evaluate step draws a publication's plot under the publish lock it takes itself, also when the
publication holds it) asks for it with ``nested=True``: held by the same thread, it is held on.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hulk.errors import InputError, storage_error

_log = logging.getLogger(__name__)
LOCK_DIR = ".locks"
# The rules of `folder_lock`'s refusals: the lock stays taken, or its file cannot be made.
REFUSAL_RULES = ("lock.timeout", "lock.unwritable")
_held = threading.local()  # the lock files this thread holds (`folder_lock` nests)


def lock_path(data_dir: Path, name: str) -> Path:
    return Path(data_dir) / LOCK_DIR / f"{name}.lock"


def is_refusal(exc: BaseException | None) -> bool:
    """Whether `exc` is `folder_lock` refusing a lock (`REFUSAL_RULES`): another run holds the
    folder, an expected condition that a flow run reports in one line (flows._common.refused)."""
    return isinstance(exc, InputError) and exc.rule in REFUSAL_RULES


@contextmanager
def folder_lock(
    data_dir: Path,
    name: str,
    timeout_s: float,
    poll_s: float = 0.2,
    *,
    nested: bool = False,
    holder: str | None = None,
) -> Iterator[None]:
    """Hold the data folder's lock `name` for the block; wait up to `timeout_s` for it (a
    warning on this module's logger when the wait begins, naming the lock and its holder).
    With `nested`, a lock this thread already holds is held on instead. `holder` says what
    takes it (default: "NAME run"), written beside the pid for whoever waits for it: the assign
    lock is also taken by `hulk jobs` commands and `hulk replan`.

    Raises `InputError` (rule ``lock.timeout``) naming the lock file and its holder when it
    stays taken, ``lock.unwritable`` when the lock file cannot be made (`is_refusal`).
    """
    path = lock_path(data_dir, name)
    held: set[Path] = _held.__dict__.setdefault("paths", set())
    key = path.resolve()
    if nested and key in held:  # this thread's own lock: held on
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise InputError(
            path, "lock.unwritable", f"cannot create the lock file: {exc.strerror}"
        ) from None
    try:
        deadline = time.monotonic() + timeout_s
        told = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                held_by = os.pread(handle, 200, 0).decode(errors="replace").strip()
                if not told and timeout_s > 0:
                    # Said once, so that a command waiting minutes for a nightly is not taken
                    # for a hung one (the CLI prints this logger's warnings).
                    _log.warning(
                        "waiting for %s: another run holds the data folder's %s lock (%s); up "
                        "to %g s",
                        path,
                        name,
                        held_by or "holder unknown",
                        timeout_s,
                    )
                    told = True
                if time.monotonic() >= deadline:
                    raise InputError(
                        path,
                        "lock.timeout",
                        f"another run holds the data folder's {name} lock "
                        f"({held_by or 'holder unknown'}); waited {timeout_s:g} s",
                    ) from None
                time.sleep(poll_s)
        label = holder or f"{name} run"
        stamp = f"pid {os.getpid()}, {label}, since {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
        try:
            os.ftruncate(handle, 0)
            os.pwrite(handle, stamp.encode(), 0)
        except OSError as exc:  # a full disk: named, not a traceback
            raise (storage_error(exc, path=path) or exc) from None
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            os.ftruncate(handle, 0)
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)
