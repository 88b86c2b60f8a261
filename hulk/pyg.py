"""PyTorch Geometric as Hulk imports it: the names Hulk uses, without running its datasets.

``import torch_geometric`` runs every subpackage, its datasets too (which pull in its LLM
tools, pandas' whole API and more); Hulk's model, training and inference use none of them.
That one is imported here lazily (`importlib.util.LazyLoader`): the module object exists and
its code runs on its first attribute access, so code that does use a dataset still works as
before, only later. Nothing else changes: the modules PyG's layers and tensors come from are
imported as usual, so the model computes exactly what it computed before.

PyG also imports ``torch._dynamo`` (``torch.compile``'s tracer, about 1 s of CPU, a fifth of a
``hulk assign`` process) for one thing: `torch_geometric.is_torch_instance` looks through a
compiled model's wrapper. Its module imports it only when PyG's "torch ≥ 2.0" flag is set, and
reads the flag again on each call; the module is run here with the flag off (`_FlagOffLoader`,
only while its own code runs), so the eager import is skipped and nothing else changes: the
function reaches ``torch._dynamo`` through ``torch``'s attribute, which imports it on first
use (``torch.__getattr__``, as for any program that never imported it). No stand-in module is
put in ``sys.modules``: loading torch's own modules lazily that way let an unrelated import
(``inspect.getmodule`` walks ``sys.modules``) run them half-way through another of torch's
imports, a circular import.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

# Modules whose code runs on first use rather than at ``import torch_geometric``.
# Only PyG's own datasets: torch's modules are never loaded lazily (module docstring).
LAZY_MODULES = ("torch_geometric.datasets",)
# PyG modules run with ``torch_geometric.typing.WITH_PT20`` off while their own code runs:
# ``torch_geometric.isinstance`` imports ``torch._dynamo`` at import behind it.
FLAG_OFF_MODULES = ("torch_geometric.isinstance",)


class _FlagOffLoader(importlib.abc.Loader):
    """`loader`, with PyG's ``WITH_PT20`` flag off while it runs the module's code."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        import torch_geometric.typing as pyg_typing  # PyG's package imports it first

        flag = pyg_typing.WITH_PT20
        pyg_typing.WITH_PT20 = False
        try:
            self.loader.exec_module(module)
        finally:
            pyg_typing.WITH_PT20 = flag

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, … for tracebacks
        return getattr(self.loader, name)


class _WrappingFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of `wrappers` as the other finders do, with their loader wrapped."""

    def __init__(
        self, wrappers: Mapping[str, Callable[[importlib.abc.Loader], importlib.abc.Loader]]
    ) -> None:
        self.wrappers = dict(wrappers)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        wrap = self.wrappers.get(fullname)
        if wrap is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return spec  # a namespace package or an old-style loader: as it is
                spec.loader = wrap(spec.loader)
                return spec
        return None


@contextmanager
def wrapped_loaders(
    wrappers: Mapping[str, Callable[[importlib.abc.Loader], importlib.abc.Loader]],
) -> Iterator[None]:
    """Within the block, the first import of each module of `wrappers` runs through its
    wrapped loader."""
    finder = _WrappingFinder(wrappers)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def lazy_modules(names: Sequence[str]) -> AbstractContextManager[None]:
    """Within the block, the first import of each of `names` makes a lazy module."""
    return wrapped_loaders(dict.fromkeys(names, importlib.util.LazyLoader))


# PyG's `scatter` asks ``torch.onnx.is_in_onnx_export()`` on every call, so torch imports
# ``torch.onnx`` (about 20 ms) on the model's first forward pass. Its operators register
# themselves through `inspect.getmodule`, which walks ``sys.modules`` and touched the lazy
# datasets module: they ran (about 0.2 s) half-way through torch's import. Imported before PyG,
# torch.onnx never sees them.
import torch.onnx  # noqa: E402, F401

_WRAPPERS: dict[str, Callable[[importlib.abc.Loader], importlib.abc.Loader]] = {
    **dict.fromkeys(LAZY_MODULES, importlib.util.LazyLoader),
    **dict.fromkeys(FLAG_OFF_MODULES, _FlagOffLoader),
}
with wrapped_loaders(_WRAPPERS):  # no-ops for modules imported before
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
    "FLAG_OFF_MODULES",
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
    "wrapped_loaders",
]
