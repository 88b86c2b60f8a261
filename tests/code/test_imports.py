"""The planning stack (cost model, planner, teacher, baselines, placements, assignment) imports
without torch: planning with the teacher or the baselines needs no GNN stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def _imports_of(path: Path) -> set[str]:
    """Modules a source file imports at run time (not under ``if TYPE_CHECKING:``)."""
    import ast

    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        stack.extend(ast.iter_child_nodes(node))
    return found


def test_pyg_is_imported_through_hulk_pyg_only() -> None:
    # hulk.pyg makes the import that keeps PyG's unused parts lazy; a direct import first
    # would load them all.
    direct = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "hulk").rglob("*.py")
        if path.name != "pyg.py"
        and any(m.split(".")[0] == "torch_geometric" for m in _imports_of(path))
    )
    assert direct == []


# The model's output with PyG imported by hulk.pyg (lazily) or in full before it. The lazy run
# also shows that PyG's datasets are not loaded by importing and running the model, yet are
# there when asked for: one fresh interpreter answers both (each start imports torch and PyG).
OUTPUT_PROBE = """
import hashlib, sys
full = sys.argv[1] == "full"
if full:
    import torch_geometric, torch_geometric.datasets, torch._dynamo, torch.onnx.ops
    torch_geometric.datasets.KarateClub, torch._dynamo.OptimizedModule, torch.onnx.ops.__name__
from hulk.train import deterministic_torch
from hulk.model import predict_proba
from tests.model.test_model import seeded_model, small_config, synthetic_sample
digest = hashlib.sha256()
for conv in ("gcn", "gat"):
    model = seeded_model(small_config(conv=conv))
    with deterministic_torch(0, 1):
        digest.update(predict_proba(model, synthetic_sample(40, 3)).numpy().tobytes())
print(digest.hexdigest())
if not full:
    print("torch._dynamo" in sys.modules)
    print("torch_geometric.datasets.karate" in sys.modules)
    import torch_geometric.datasets
    print(torch_geometric.datasets.KarateClub.__name__)
"""


def _python(code: str, *args: str) -> str:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    )
    return result.stdout


@pytest.fixture(scope="module")
def lazy_run() -> list[str]:
    """What the probe prints with PyG imported lazily: digest, torch._dynamo loaded, karate
    loaded, KarateClub."""
    return _python(OUTPUT_PROBE, "lazy").splitlines()


def test_pyg_s_datasets_load_on_first_use(lazy_run: list[str]) -> None:
    _, _, loaded, used = lazy_run
    assert loaded == "False"  # not run at import, nor by using the model
    assert used == "KarateClub"  # and still there when asked for


@pytest.mark.slow  # a second fresh interpreter, importing PyG in full
def test_model_outputs_are_the_same_with_pyg_imported_in_full(lazy_run: list[str]) -> None:
    (full,) = _python(OUTPUT_PROBE, "full").splitlines()
    assert lazy_run[0] == full and len(full) == 64


def test_torch_compile_s_tracer_is_not_imported_with_the_model(lazy_run: list[str]) -> None:
    assert lazy_run[1] == "False"  # not by importing PyG, nor by using the model


# PyG's `is_torch_instance` still looks through a compiled model's wrapper, importing
# torch.compile's tracer on first use; PyG's own flag is as PyG set it.
COMPILER_PROBE = """
import hulk.model
import torch, torch_geometric
compiled = torch.compile(torch.nn.Linear(2, 2))  # a wrapper; nothing compiles until called
print(torch_geometric.is_torch_instance(compiled, torch.nn.Linear))
print(torch_geometric.typing.WITH_PT20)
"""


@pytest.mark.slow  # a fresh interpreter importing torch.compile's tracer
def test_pyg_s_is_torch_instance_still_sees_through_compiled_models() -> None:
    assert _python(COMPILER_PROBE).split() == ["True", "True"]
