"""scripts/compare_outputs.py: which outputs of two runs are byte-identical, and where the others
differ."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "compare_outputs", REPO / "scripts" / "compare_outputs.py"
)
assert _spec is not None and _spec.loader is not None
compare_outputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_outputs)


def write(root: Path, name: str, content: str | bytes) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def archive(path: Path, folder: str, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(f"{folder}/{name}", data)


def test_compare_sorts_files_and_says_where_they_differ(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    for root, seconds, run in ((before, 1.5, "a" * 32), (after, 2.5, "b" * 32)):
        write(root, "links.parquet", b"same bytes")
        write(root, "corpus.json", json.dumps({"seed": 7, "build": {"seconds": seconds}}))
        write(root, "curve.csv", f"epoch,loss,seconds\n0,0.5,{seconds}\n")
        write(root, f"mlartifacts/{run}/plots/curve.png", b"png")
        archive(root / "prior.pt", f"tmp{run[:6]}", {"data.pkl": b"weights"})
    archive(after / "moved.pt", "x", {"data.pkl": b"one"})
    archive(before / "moved.pt", "y", {"data.pkl": b"two"})
    write(before, "gone.json", "{}")
    write(after, "new.json", "{}")

    result = compare_outputs.compare(before, after)

    assert result["identical"] == ["links.parquet", "mlartifacts/<id>/plots/curve.png"]
    assert result["differing"] == {
        "corpus.json": ".build.seconds",
        "curve.csv": "columns seconds",
        "moved.pt": "members differ: data.pkl",
        "prior.pt": "same members; only the archive's folder name differs",
    }
    assert result["only_before"] == ["gone.json"]
    assert result["only_after"] == ["new.json"]


def test_json_differences_name_the_paths() -> None:
    a = {"jobs": [{"name": "x", "s": 1.0}], "seed": 7, "old": 1}
    b = {"jobs": [{"name": "x", "s": 2.0}], "seed": 7, "new": 1}
    assert compare_outputs.json_differences(a, b) == [
        ".jobs[0].s",
        ".new (in one only)",
        ".old (in one only)",
    ]
    assert compare_outputs.json_differences([1, 2], [1, 2, 3]) == ["(whole document)"]
