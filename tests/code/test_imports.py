"""The planning stack (cost model, planner, teacher, baselines, placements, assignment) imports
without torch: planning with the teacher or the baselines needs no GNN stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLANNING = (
    "hulk.cost",
    "hulk.planner",
    "hulk.teacher",
    "hulk.baselines",
    "hulk.placements",
    "hulk.assign",
    "hulk.jobs",
    "hulk.evaluate",
    "hulk.settings",
    "hulk.hardware",
    "hulk.tours",
)
# A fresh interpreter: the test process has imported torch already (other tests, conftest).
PROBE = f"""
import sys
import hulk, {", ".join(PLANNING)}
print(hulk.__file__)
print(*sorted(m for m in sys.modules
              if m in ("torch", "networkx") or m.startswith(("torch.", "torch_geometric"))))
"""


def test_planning_stack_imports_without_torch() -> None:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
    )
    where, loaded = result.stdout.splitlines()
    assert Path(where).resolve().parent == REPO / "hulk"  # this checkout, not an installed copy
    assert loaded == ""
