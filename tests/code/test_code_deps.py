"""DVC's code deps are the files each step runs: read off the imports (`hulk.code_deps`), checked
here against a package written for the purpose and against what Python really imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hulk import steps
from hulk.code_deps import direct_imports, module_files
from hulk.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A package `pkg` using every import form Hulk uses."""
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/top.py", "import os\nfrom pkg import leaf\nfrom pkg.sub import helper\n")
    write(
        tmp_path,
        "pkg/leaf.py",
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import typed_only\nelse:\n    import pkg.runtime\n"
        "def later():\n    from pkg.lazy import thing\n    return thing\n",
    )
    write(tmp_path, "pkg/sub/__init__.py", "from .helper import CONSTANT\n")
    write(tmp_path, "pkg/sub/helper.py", "from ..constants import VALUE\nCONSTANT = VALUE\n")
    for name in ("typed_only", "runtime", "lazy", "constants", "unused"):
        write(tmp_path, f"pkg/{name}.py", "VALUE = thing = 1\n")
    return tmp_path


def test_module_files_follows_every_import_form(package: Path) -> None:
    files = module_files("pkg.top", root=package, package="pkg")
    assert files == (
        "pkg/__init__.py",
        "pkg/constants.py",  # relative, two levels up, through a subpackage
        "pkg/lazy.py",  # inside a function: it runs when the function does
        "pkg/leaf.py",  # `from pkg import leaf`: a submodule
        "pkg/runtime.py",  # the `else` of `if TYPE_CHECKING:` runs
        "pkg/sub/__init__.py",
        "pkg/sub/helper.py",
        "pkg/top.py",
    )  # never typed_only (annotations only), unused, or the standard library


def test_direct_imports_tell_attributes_from_submodules(package: Path) -> None:
    # `from pkg.sub import helper` is a submodule; `from .helper import CONSTANT` an attribute
    assert direct_imports("pkg.top", root=package, package="pkg") == {
        "pkg",
        "pkg.leaf",
        "pkg.sub",
        "pkg.sub.helper",
    }
    assert direct_imports("pkg.sub", root=package, package="pkg") == {"pkg.sub.helper"}


@pytest.mark.parametrize("step", steps.STEPS, ids=lambda step: step.name)
@pytest.mark.slow
def test_code_deps_hold_every_module_the_stage_imports(step: steps.Step) -> None:
    """Python's own record (`sys.modules` after importing the stage module in a fresh
    interpreter) against the code deps of the step's DVC stage."""
    module = step.stage.__module__
    probe = (
        f"import sys, {module}\n"
        "for name, mod in sorted(sys.modules.items()):\n"
        "    if name == 'hulk' or name.startswith('hulk.'):\n"
        "        print(mod.__file__)\n"
    )
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
    ).stdout
    imported = {Path(line).resolve().relative_to(REPO).as_posix() for line in out.split()}
    assert f"{module.replace('.', '/')}.py" in imported
    deps = steps.dvc_stages(Settings())["stages"][step.name]["deps"]
    assert imported <= set(deps), f"missing from {step.name}'s deps: {imported - set(deps)}"
    assert set(step.code) <= set(deps)
