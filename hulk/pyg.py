"""PyTorch Geometric as Hulk imports it: the names Hulk uses, without running its datasets.

``import torch_geometric`` runs every subpackage, its datasets too (which pull in its LLM
tools, pandas' whole API and more); Hulk's model, training and inference use none of them.
That one is imported here lazily (`importlib.util.LazyLoader`): the module object exists and
its code runs on its first attribute access, so code that does use a dataset still works as
before, only later. Nothing else changes: the modules PyG's layers and tensors come from are
imported as usual, so the model computes exactly what it computed before.

PyG also imports ``torch._dynamo`` (``torch.compile``'s tracer) and its ``scatter`` asks
``torch.onnx`` on every call whether an export is running (which loads ``torch.onnx.ops``):
about 3 s of CPU in all, but those register themselves with torch's internals as they load,
and loading them lazily let an unrelated import (``inspect.getmodule`` walks
``sys.modules``) run them half-way through another of torch's imports: a circular import.
They are imported as usual.

Every Hulk module imports PyG through this one (a test checks it), so whichever comes first
makes the import.

PyG's message-passing layers write a generated ``propagate`` module into the temporary folder
the first time a process builds each layer class, and never remove it: a scheduled assign run
every 15 minutes would leave one file per layer class per run. `remove_generated_sources`
deletes them once the layers are built.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

# Modules whose code runs on first use rather than at ``import torch_geometric``.
# Only PyG's own datasets: torch's compiler (``torch._dynamo``) and ONNX operators
# (``torch.onnx.ops``) register themselves with torch's internals as they load, and loading
# them lazily let an unrelated import (``inspect.getmodule`` walks ``sys.modules``) run them
# half-way through another of torch's imports: a circular import.
LAZY_MODULES = ("torch_geometric.datasets",)


class _LazyFinder(importlib.abc.MetaPathFinder):
    """Finds `names` as the other finders do, with their loader wrapped to load lazily."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return spec  # a namespace package or an old-style loader: as it is
                spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


@contextmanager
def lazy_modules(names: Sequence[str]) -> Iterator[None]:
    """Within the block, the first import of each of `names` makes a lazy module."""
    finder = _LazyFinder(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


with lazy_modules(LAZY_MODULES):  # no-ops for modules imported before
    import torch_geometric  # noqa: F401  (the import this module is for)

from torch_geometric.data import Batch, Data  # noqa: E402
from torch_geometric.nn import GATConv, GCNConv, MessagePassing  # noqa: E402
from torch_geometric.nn.conv.gcn_conv import gcn_norm  # noqa: E402
from torch_geometric.utils import scatter, to_dense_batch, to_torch_csr_tensor  # noqa: E402

# Suffixes of the module names PyG gives its generated `propagate` / `edge_updater` code.
GENERATED_SUFFIXES = ("_propagate", "_edge_updater")


def remove_generated_sources() -> list[str]:
    """Delete the source files PyG generated in the temporary folder for this process's layers.

    The modules are already loaded (PyG executes them as it writes them), so the layers work
    as before; only a traceback through them shows no source lines. Returns the removed paths.
    """
    temporary = os.path.realpath(tempfile.gettempdir())
    removed = []
    for name, module in list(sys.modules.items()):
        if not name.endswith(GENERATED_SUFFIXES):
            continue  # by name first: any attribute of a lazy module (datasets) would run it
        path = getattr(module, "__file__", None)
        if not path:
            continue
        if os.path.dirname(os.path.realpath(path)) != temporary:
            continue  # a module of that name that PyG did not generate
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue  # removed when an earlier model was built
        removed.append(path)
    return removed


__all__ = [
    "GENERATED_SUFFIXES",
    "LAZY_MODULES",
    "Batch",
    "Data",
    "GATConv",
    "GCNConv",
    "MessagePassing",
    "gcn_norm",
    "lazy_modules",
    "remove_generated_sources",
    "scatter",
    "to_dense_batch",
    "to_torch_csr_tensor",
]
