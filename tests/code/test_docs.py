"""The repository documents itself: no pointer outside it, no broken link in its guides.

* No tracked file refers to design files that live outside the repository, or to the ``shared``
  folder beside it. The one exception: tests and bench scripts that read the paper's published
  fleet from that folder's ``datasets/`` when it is there (and skip when it is not) may name it.
* Every relative link of README.md, docs/*.md and bench/README.md points to an existing file,
  and its ``#anchor`` (when it has one) to a heading of that file.
* Every pointer ``docs/<file>.md#<anchor>`` in the tracked files names an existing heading.
* README's step table takes a reader from each step of `hulk.steps.STEPS` to its stage
  module in one link.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Spelled in pieces so that this file does not match its own patterns.
OUTSIDE_DOCS = tuple(name + ".md" for name in ("DESIGN", "CONTRACTS", "STACK"))
SHARED = ".." + "/shared"
DATASET_READERS = ("tests/", "bench/")  # may name the shared datasets folder they read
GUIDES = ("README.md", "bench/README.md", *(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")))

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
_POINTER = re.compile(r"docs/([A-Za-z0-9_-]+\.md)#([A-Za-z0-9_-]+)")
_FENCE = re.compile(r"^(```|~~~)")


def tracked_files() -> list[Path]:
    """The repository's tracked files (every file but .git, .venv and data/ without git)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, text=True
        ).stdout
        names = [name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "data", "__pycache__", ".ruff_cache", ".pytest_cache"}
        names = [
            p.relative_to(REPO).as_posix()
            for p in REPO.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(REPO).parts)
        ]
    return [REPO / name for name in names if (REPO / name).is_file()]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            found.add(slug(match.group(1)))
    return found


def links(path: Path) -> list[str]:
    """Markdown link targets outside code blocks and code spans."""
    targets: list[str] = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        targets += [a or b for a, b in _LINK.findall(line)]
    return targets


def test_no_pointer_outside_the_repository() -> None:
    found = []
    for path in tracked_files():
        text = text_of(path)
        if text is None:
            continue
        name = path.relative_to(REPO).as_posix()
        for number, line in enumerate(text.splitlines(), 1):
            outside_docs = any(doc in line for doc in OUTSIDE_DOCS)
            shared = SHARED in line and not name.startswith(DATASET_READERS)
            if outside_docs or shared:
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "point at docs/ instead:\n" + "\n".join(found)


def test_dataset_readers_name_only_the_dataset() -> None:
    """Files allowed to name the shared folder do so because they read the paper's fleet."""
    for path in tracked_files():
        name = path.relative_to(REPO).as_posix()
        text = text_of(path)
        if text is None or SHARED not in text or not name.startswith(DATASET_READERS):
            continue
        if name.endswith(".md"):
            assert SHARED + "/datasets" in text, name
        else:
            assert re.search(r"[\"']shared[\"']\s*/\s*[\"']datasets[\"']", text) or re.search(
                r"hulk47", text, re.IGNORECASE
            ), f"{name} names {SHARED} but does not read the dataset from it"


@pytest.mark.parametrize("guide", GUIDES)
def test_relative_links_resolve(guide: str) -> None:
    path = REPO / guide
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(REPO)}")
    assert not broken, f"{guide}:\n" + "\n".join(broken)


def test_docs_pointers_name_existing_headings() -> None:
    broken = []
    for path in tracked_files():
        text = text_of(path)
        if text is None:
            continue
        for doc, anchor in _POINTER.findall(text):
            target = REPO / "docs" / doc
            if not target.exists():
                broken.append(f"{path.relative_to(REPO)}: docs/{doc} does not exist")
            elif anchor not in anchors(target):
                broken.append(f"{path.relative_to(REPO)}: docs/{doc} has no heading #{anchor}")
    assert not broken, "\n".join(broken)


def test_readme_links_every_step_to_its_module() -> None:
    from hulk.steps import STEPS

    rows = {
        cells[1].strip(): cells
        for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| ") and len(cells := line.split("|")) > 2
    }
    missing = []
    for step in STEPS:
        module = step.stage.__module__.replace(".", "/") + ".py"
        row = rows.get(step.name)
        if row is None or f"]({module})" not in row[-2]:
            missing.append(f"{step.name}: no README table row linking {module}")
    assert not missing, "\n".join(missing)


def test_docs_exist() -> None:
    for name in ("docs/design.md", "docs/contracts.md", "docs/operations.md", "bench/README.md"):
        assert (REPO / name).is_file(), name
