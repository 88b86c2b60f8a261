"""A read-only data folder and a full disk (issue 15, item 11): one line naming the file and the
rule, exit code 2, no traceback, and the folder exactly as it was.

Both faults are real, not simulated. Read-only: ``chmod -R a-w`` when the tests do not run as
root; as root (where chmod stops no write) a read-only bind mount of the folder in a user and
mount namespace (``unshare -rm``; EROFS). Full disk: a copy of the folder on a small tmpfs mounted
in such a namespace and filled up before the command runs (ENOSPC). Without user namespaces the
tests are skipped with that reason.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.conftest import invoke

pytestmark = pytest.mark.slow

HULK = str(Path(sys.executable).with_name("hulk"))
REPO = Path(__file__).resolve().parents[2]
HULK47 = REPO.parent / "shared" / "datasets" / "hulk-47"
# In the namespace: $0 the folder; then the command. Lists every file with its sha256 before and
# after, so the test sees whether anything changed. Lock files (DATA/.locks, empty unless held)
# are the folder's bookkeeping, not outputs: taking a lock may create one.
LIST = 'find "$0" -type f ! -name .filler ! -path "*/.locks/*" | sort | xargs -r sha256sum'
RUN = f'{LIST}; echo ==; "$@"; echo "rc=$?"; echo ==; {LIST}'
READ_ONLY = f'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" || exit 99; {RUN}'
FULL = (
    'src=$0; m=$1; shift; mount -t tmpfs -o size=64m tmpfs "$m" || exit 99; cp -a "$src"/. "$m"/;'
    ' dd if=/dev/zero of="$m/.filler" bs=64k >/dev/null 2>&1;'
    f'(cd "$m" && {LIST.replace(chr(36) + "0", ".")}); echo ==; "$@"; echo "rc=$?"; echo ==;'
    f' (cd "$m" && {LIST.replace(chr(36) + "0", ".")})'
)


def _namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder after a good night: validated, ingested, graph, placements and their plot (by a
    small teacher search: the faults below are about what is written, not about the plans)."""
    import datetime as dt

    root = tmp_path_factory.mktemp("storage")
    data = root / "data"
    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    params = root / "params.yaml"
    params.write_text(
        f"data_dir: {data}\ngenerate: {{days: 2, end_date: '{yesterday}', "
        "probe_interval_s: 3600, throughput_interval_s: 10800}\n"
        "teacher: {max_evaluations: 40, time_budget_s: 20.0, random_starts: 0}\n"
    )
    (data / "jobs").mkdir(parents=True)
    shutil.copyfile(REPO / "data" / "jobs" / "upcoming.yaml", data / "jobs" / "upcoming.yaml")
    for args in (
        ("generate", "--out", data),
        ("validate",),
        ("ingest",),
        ("graph",),
        ("assign", "--strategy", "teacher"),
        ("evaluate",),
    ):
        result = invoke("--params", params, *args)
        assert result.exit_code == 0, result.output
    return data


def _split(output: str) -> tuple[str, str, int, str]:
    before, run, after = output.split("==\n")
    lines = run.rstrip("\n").split("\n")
    code = int(lines[-1].removeprefix("rc="))
    return before, "\n".join(lines[:-1]), code, after


def _check(output: str, rules: tuple[str, ...], where: Path) -> None:
    before, message, code, after = _split(output)
    assert "Traceback" not in message, message
    last = message.strip().splitlines()[-1]
    assert code == 2, message
    assert last.startswith(f"error: {where}"), message
    assert any(f"[{rule}]" in last for rule in rules), message
    assert before == after  # nothing written, the last good outputs intact


def _read_only(folder: Path, *args: object) -> str:
    """Run hulk on `folder` made read-only (chmod as a user, a read-only mount as root)."""
    command = [HULK, *(str(a) for a in args)]
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
        for path in modes:
            path.chmod(stat.S_IMODE(modes[path]) & ~0o222)
        try:
            run = subprocess.run(
                ["sh", "-c", RUN, str(folder), *command],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        finally:
            for path, mode in modes.items():
                path.chmod(stat.S_IMODE(mode))
        return run.stdout
    if not _namespaces():
        pytest.skip(
            "running as root, where chmod does not stop writes, and user namespaces "
            "(unshare -rm, for a read-only mount) are not available"
        )
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", READ_ONLY, str(folder), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert run.returncode != 99, run.stdout
    return run.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("validate", "--data"),
        ("ingest", "--out"),
        ("graph", "--data"),
        ("assign", "--strategy", "teacher", "--data"),
        ("evaluate", "--data"),
        ("replan", "--fail", "15,16", "--data"),
    ],
    ids=lambda args: args[0],
)
def test_read_only_folder(good: Path, args: tuple[str, ...]) -> None:
    output = _read_only(good, *args, good)
    rules = ("io.read_only", "io.permission_denied", "lock.unwritable")
    _check(output.replace(_stderr_noise, ""), rules, good)


# Great Expectations logs this line itself before the error (its project config).
_stderr_noise = "Could not save project config to disk: OSError(30, 'Read-only file system')\n"


def _full_disk(source: Path, mount: Path, *args: object) -> str:
    """Run hulk with a copy of `source` at `mount`, on a full tmpfs."""
    if not _namespaces():
        pytest.skip("user namespaces (unshare -rm, for a small tmpfs) are not available")
    mount.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", FULL, str(source), str(mount), HULK, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert run.returncode != 99, run.stdout
    return run.stdout


@pytest.mark.parametrize("command", ["assign", "evaluate"])
def test_full_disk(good: Path, tmp_path: Path, command: str) -> None:
    mount = tmp_path / "full"
    extra = ("--strategy", "teacher") if command == "assign" else ()
    output = _full_disk(good, mount, command, *extra, "--data", mount)
    _check(output, ("io.disk_full",), mount)


def test_full_disk_import_hulk(tmp_path: Path) -> None:
    if not (HULK47 / "node_feature.csv").exists():
        pytest.skip(f"the paper's fleet is not at {HULK47}")
    empty, mount = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    output = _full_disk(
        empty,
        mount,
        "import-hulk",
        "--nodes",
        HULK47 / "node_feature.csv",
        "--edges",
        HULK47 / "edge.txt",
        "--out",
        mount,
    )
    _check(output, ("io.disk_full",), mount)


def _without_root_override() -> list[str]:
    """The prefix that runs a command without root's right to write any file (so that a chmod
    binds it, as it binds every other user), or none when not root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip(
            "running as root, where chmod does not stop writes, and no setpriv to drop that"
        )
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.mark.parametrize("unwritable", ["file", "folder"])
def test_a_job_store_this_user_may_not_write(tmp_path: Path, unwritable: str) -> None:
    """SQLite calls every refused write "readonly": a store whose file (or folder, where its
    journal goes) this user may not write is named, as a permission, not a read-only disk."""
    prefix = _without_root_override()
    data = tmp_path / "data"
    data.mkdir()
    jobs = tmp_path / "a.yaml"
    jobs.write_text("jobs:\n- {name: a, preset: BERT-large, iterations: 100}\n")
    assert invoke("jobs", "submit", jobs, "--data", data).exit_code == 0
    store = data / "jobs" / "jobs.db"
    before = store.read_bytes()
    target = store if unwritable == "file" else store.parent
    mode = stat.S_IMODE(target.stat().st_mode)
    target.chmod(mode & ~0o222)
    try:
        run = subprocess.run(
            [*prefix, HULK, "jobs", "cancel", "a", "--data", str(data)],
            capture_output=True,
            text=True,
            env=os.environ | {"COLUMNS": "400"},
        )
    finally:
        target.chmod(mode)
    said = " ".join(run.stderr.split())
    assert run.returncode == 2, said
    assert "Traceback" not in said
    assert f"error: {target}: [io.permission_denied] cannot write the job store" in said, said
    assert store.read_bytes() == before
