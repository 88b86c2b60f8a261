"""Run Hulk's pipeline from two checkouts and compare their outputs byte for byte.

A change that should keep behaviour identical (a restructure, a rename) must leave every output
of the default data unchanged. This script makes that a command:

    # the whole pipeline (generate, then the nightly steps through hulk.steps.run) of a
    # checkout, in a fresh folder, with a fixed clock
    python scripts/compare_outputs.py run --checkout /path/to/before --out /tmp/before
    python scripts/compare_outputs.py run --checkout . --out /tmp/after

    # sha256 of every file under a run's data folder
    python scripts/compare_outputs.py digest /tmp/after/data

    # which files are byte-identical, which differ (and for JSON, where), which exist in one only
    python scripts/compare_outputs.py compare /tmp/before/data /tmp/after/data

`run` copies the checkout's params.yaml and jobs file into the output folder and runs there, so
every relative path of params.yaml (data/, the corpus, the MLflow database) lands in it. Each
run imports Hulk from its own checkout (PYTHONPATH), in its own interpreter; the interpreter is
this one's, so both runs use the same installed libraries. The clock is fixed (``--now``) for
the steps that read it, so the placements' run ids and the validation's time rules agree.

Some outputs legitimately differ between two runs of the same code, and `compare` says where:
wall-clock figures (the teacher's seconds in corpus.json and labels/labels.json, training and
inference seconds and the speed-ups made of them in metrics/details/train.json, the
``seconds`` column of training/learning_curve.csv, the scheduler's ``queue.scheduling_s`` in the
placements file, which its run id's hash leaves out), the sha256 of a
``torch.save`` file written by a Hulk before `hulk.graph` and the prior step saved through a
handle (the archive's folder was named after the temporary file it was written through: the
members are compared instead), MLflow's database (random run ids, timestamps;
its artifacts are paired across run ids), and what Great Expectations generates (random ids,
Data Docs pages stamped with the time).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

DEFAULT_NOW = "2026-11-21T02:00:00+00:00"  # the night after the default data's last day
CLOCKED = ("validate", "ingest", "labels", "assign")  # the steps that take `now`


def run_checkout(checkout: Path, out: Path, now: str) -> None:
    """The pipeline of `checkout` on its default data, in the fresh folder `out`."""
    checkout, out = checkout.resolve(), out.resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "data" / "jobs").mkdir(parents=True)
    shutil.copy(checkout / "params.yaml", out / "params.yaml")
    shutil.copy(checkout / "data" / "jobs" / "upcoming.yaml", out / "data" / "jobs")
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, str(Path(__file__).resolve()), "_steps", str(checkout), now]
    subprocess.run(command, cwd=out, env=env, check=True)


def _steps(checkout: str, now: str) -> None:
    """In the output folder, with the checkout's Hulk: generate, then every nightly step."""
    import hulk
    from hulk import steps
    from hulk.settings import load_settings

    if Path(hulk.__file__).resolve().parent != Path(checkout) / "hulk":
        raise SystemExit(f"imported {hulk.__file__}, not the checkout's hulk/")
    settings = load_settings(Path("params.yaml"))
    clock = dt.datetime.fromisoformat(now)
    steps.run("generate", settings)
    for step in steps.nightly_steps():
        options = {"now": clock} if step.name in CLOCKED else {}
        result = steps.run(step.name, settings, **options)
        print(f"{step.name}: {sorted(result.outputs)}", flush=True)


def digests(root: Path) -> dict[str, str]:
    """sha256 of every file under `root`, by path relative to it (sorted)."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        found[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def json_differences(a: Any, b: Any, where: str = "", limit: int = 8) -> list[str]:
    """Paths (``key.sub[3]``) where two JSON values differ, at most `limit` of them."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                found.append(f"{where}.{key} (in one only)")
            else:
                found += json_differences(a[key], b[key], f"{where}.{key}", limit)
            if len(found) >= limit:
                break
        return found[:limit]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        found = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found += json_differences(x, y, f"{where}[{i}]", limit)
            if len(found) >= limit:
                break
        return found[:limit]
    return [] if a == b else [where or "(whole document)"]


def archive_note(a: Path, b: Path) -> str | None:
    """For two zip archives (``torch.save`` files): whether their members are equal once the
    archive's top folder is ignored (torch names it after the file it saves to, and earlier
    Hulks saved to a temporary file with a random name)."""
    try:
        with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
            members_a = {n.partition("/")[2]: za.read(n) for n in za.namelist()}
            members_b = {n.partition("/")[2]: zb.read(n) for n in zb.namelist()}
    except zipfile.BadZipFile:
        return None
    if members_a == members_b:
        return "same members; only the archive's folder name differs"
    return "members differ: " + ", ".join(
        sorted(n for n in set(members_a) | set(members_b) if members_a.get(n) != members_b.get(n))
    )


def csv_note(a: Path, b: Path) -> str | None:
    """For two CSV files with the same header and row count: the columns that differ."""
    with a.open(newline="", encoding="utf-8") as fa, b.open(newline="", encoding="utf-8") as fb:
        rows_a, rows_b = list(csv.reader(fa)), list(csv.reader(fb))
    if not rows_a or rows_a[0] != rows_b[0] or len(rows_a) != len(rows_b):
        return None
    header = rows_a[0]
    columns = {
        header[i]
        for ra, rb in zip(rows_a[1:], rows_b[1:], strict=True)
        for i, (x, y) in enumerate(zip(ra, rb, strict=False))
        if x != y
    }
    return "columns " + ", ".join(sorted(columns))


def difference_note(a: Path, b: Path) -> str | None:
    """Where two differing files differ, when their format says it (JSON, CSV, zip)."""
    if a.suffix == ".json":
        try:
            paths = json_differences(
                json.loads(a.read_text(encoding="utf-8")),
                json.loads(b.read_text(encoding="utf-8")),
                limit=1000,
            )
        except ValueError:
            return None
        # Keys that are hashes (label cache) say little: name the field under them instead.
        shown = sorted({re.sub(r"\.[0-9a-f]{32,}", ".<key>", path) for path in paths})
        return ", ".join(shown[:12]) + (f", … ({len(shown)} paths)" if len(shown) > 12 else "")
    if a.suffix == ".csv":
        return csv_note(a, b)
    if a.suffix == ".pt":
        return archive_note(a, b)
    return None


def compare(before: Path, after: Path) -> dict[str, Any]:
    """Identical files, differing ones (with where they differ), and files in one only."""
    a, b = digests(before), digests(after)
    # Files under a random id (MLflow's run folders) are paired by the rest of their path.
    a_by_id = {_without_ids(n): n for n in set(a) - set(b)}
    b_by_id = {_without_ids(n): n for n in set(b) - set(a)}
    pairs = {n: (n, n) for n in set(a) & set(b)}
    pairs.update({key: (a_by_id[key], b_by_id[key]) for key in set(a_by_id) & set(b_by_id)})
    return {
        "identical": sorted(k for k, (x, y) in pairs.items() if a[x] == b[y]),
        "differing": {
            k: difference_note(before / x, after / y)
            for k, (x, y) in sorted(pairs.items())
            if a[x] != b[y]
        },
        "only_before": sorted(a_by_id[k] for k in set(a_by_id) - set(b_by_id)),
        "only_after": sorted(b_by_id[k] for k in set(b_by_id) - set(a_by_id)),
    }


def _without_ids(name: str) -> str:
    return re.sub(r"(^|/)[0-9a-f]{32}(?=/|$)", r"\1<id>", name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="the pipeline of a checkout in a fresh folder")
    run.add_argument("--checkout", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--now", default=DEFAULT_NOW, help="the fixed clock (ISO 8601, UTC)")
    digest = commands.add_parser("digest", help="sha256 of every file under a folder")
    digest.add_argument("root", type=Path)
    both = commands.add_parser("compare", help="compare two folders file by file")
    both.add_argument("before", type=Path)
    both.add_argument("after", type=Path)
    both.add_argument("--json", action="store_true", help="print the result as JSON")
    steps = commands.add_parser("_steps")  # the child process of `run`
    steps.add_argument("checkout")
    steps.add_argument("now")
    args = parser.parse_args(argv)

    if args.command == "run":
        run_checkout(args.checkout, args.out, args.now)
    elif args.command == "_steps":
        _steps(args.checkout, args.now)
    elif args.command == "digest":
        for name, sha in digests(args.root).items():
            print(f"{sha}  {name}")
    else:
        result = compare(args.before, args.after)
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print(f"identical: {len(result['identical'])} files")
            for name in result["identical"]:
                print(f"  = {name}")
            print(f"differing: {len(result['differing'])} files")
            for name, note in result["differing"].items():
                print(f"  ≠ {name}" + (f"  ({note})" if note else ""))
            for key, mark in (("only_before", "<"), ("only_after", ">")):
                print(f"{key.replace('_', ' in ')}: {len(result[key])} files")
                for name in result[key]:
                    print(f"  {mark} {name}")
        return 1 if result["differing"] or result["only_before"] or result["only_after"] else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
