"""The Hulk files a module runs: its imports within the package, followed transitively.

DVC re-runs a stage when one of its deps changes, so a stage's code deps must be every file its
step can execute. Listing them by hand drifts; `module_files` reads them off the source instead
(`ast`, nothing is imported): every ``import hulk.x`` / ``from hulk.x import y`` /
``from . import y`` at module level or inside a function (Hulk imports heavy modules lazily,
and those run too), the ``__init__.py`` of every package on the way, but not imports under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path

PACKAGE = "hulk"
ROOT = Path(__file__).resolve().parent.parent  # the folder holding the package


def module_path(module: str, root: Path = ROOT) -> Path | None:
    """The file of a dotted module name under `root` (package: its ``__init__.py``), or None."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, except those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


@cache  # every step's walk (`module_files`) passes through mostly the same modules
def direct_imports(module: str, root: Path = ROOT, package: str = PACKAGE) -> frozenset[str]:
    """The modules of `package` that `module`'s source imports (without following them)."""
    path = module_path(module, root)
    if path is None:
        return frozenset()
    is_package = path.name == "__init__.py"
    parts = module.split(".")
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            if node.level:  # relative: from the module's package, `level` - 1 further up
                anchor = parts if is_package else parts[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            # `from pkg import name`: name is a submodule when it has a file, else an attribute
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            if (name == package or name.startswith(package + ".")) and module_path(name, root):
                found.add(name)
    return frozenset(found)


def _with_packages(module: str) -> list[str]:
    """`module` and the packages importing it runs first (``hulk``, ``hulk.stages``, …)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


@cache
def module_files(module: str, root: Path = ROOT, package: str = PACKAGE) -> tuple[str, ...]:
    """Files (``hulk/x.py``, relative to `root`, sorted) that importing and running `module`
    can execute: the module, everything it imports within `package` transitively, and the
    packages' ``__init__.py`` on the way."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        for name in _with_packages(current):
            if name in seen or module_path(name, root) is None:
                continue
            seen.add(name)
            todo.extend(direct_imports(name, root, package))
    files = {module_path(name, root) for name in seen}
    return tuple(sorted(p.relative_to(root).as_posix() for p in files if p is not None))


def source_digest(files: Sequence[str], root: Path = ROOT) -> str:
    """sha256 over the names and bytes of `files` (relative to `root`): what a cache of results
    computed by that code is keyed by, so that a changed Hulk starts it afresh. Callers list
    the files (`module_files` parses every source, too slow for each run) and a test checks
    the list against `module_files`."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode())
        digest.update((root / name).read_bytes())
    return digest.hexdigest()
