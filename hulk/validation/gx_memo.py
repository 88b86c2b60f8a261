"""Great Expectations without the work it repeats within one validation (GX 1.x, pandas).

Validating one batch, GX's validator (`graph_validate`) rebuilds the same objects again and
again, and they are only read there:

- an expectation's `configuration` (a pydantic dump and a new ``ExpectationConfiguration``)
  for every keyword it looks up: about 2,000 builds a batch for the 14 expectations of the
  logs suite, a fifth of a day partition's time;
- the expectation object behind a configuration (`to_domain_obj`, a pydantic validation),
  once per metric it asks for;
- the rows of a row-conditioned expectation (``DataFrame.query`` over the whole batch, a copy
  of every column), once per metric: five times each.

Inside `lean()` each of these is computed once per object (per configuration, expectation, or
batch frame and condition) for the length of one `graph_validate` call, and handed out again
after; GX's own code computes it, and nothing changes but how often. The memo lives in the
calling thread only and is dropped when the call returns, so no object is shared between two
batches, and an expectation suite's configurations (which GX edits in place with the suite
parameters before `graph_validate`) are never memoized. Frames are safe to hand out twice:
pandas copies on write.

Outside `lean()` GX runs exactly as shipped (so a test can compare a lean validation with
GX's own checkpoint, result for result), and so it does for any GX version but
`CHECKED_VERSION`, the one whose code these shortcuts were read against.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

CHECKED_VERSION = "1.24.1"

_STATE = threading.local()  # .lean: inside `lean()`; .memo: dict while graph_validate runs
_INSTALL_LOCK = threading.Lock()
_installed: bool | None = None  # None: not tried yet; False: another GX version
_T = TypeVar("_T")


@contextmanager
def lean() -> Iterator[bool]:
    """Validations on this thread inside the block compute each repeated object once (see the
    module docstring). Yields whether the shortcuts are on (False for another GX version)."""
    active = install()
    outer = getattr(_STATE, "lean", False)
    _STATE.lean = True
    try:
        yield active
    finally:
        _STATE.lean = outer


def install() -> bool:
    """Wrap the GX methods once per process (each still runs GX's own code; outside `lean()`
    it runs every time, as before). False, and nothing wrapped, for another GX version."""
    global _installed
    with _INSTALL_LOCK:
        if _installed is None:
            _installed = _wrap_gx()
        return _installed


def _wrap_gx() -> bool:
    import great_expectations
    from great_expectations.execution_engine.pandas_execution_engine import (
        PandasExecutionEngine,
    )
    from great_expectations.expectations.expectation import Expectation
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )
    from great_expectations.validator.validator import Validator

    if great_expectations.__version__ != CHECKED_VERSION:
        return False
    build_configuration = Expectation.__dict__["configuration"].fget  # the property's getter
    build_expectation = ExpectationConfiguration.to_domain_obj
    filter_rows = PandasExecutionEngine._apply_row_condition_filter
    graph_validate = Validator.graph_validate
    assert build_configuration is not None

    @functools.wraps(build_configuration)
    def configuration(self: Any) -> Any:
        return _once(("configuration", id(self)), self, lambda: build_configuration(self))

    @functools.wraps(build_expectation)
    def to_domain_obj(self: Any) -> Any:
        return _once(("expectation", id(self)), self, lambda: build_expectation(self))

    @functools.wraps(filter_rows)
    def apply_row_condition_filter(
        self: Any, data: Any, row_condition: Any, domain_kwargs: dict
    ) -> Any:
        # The condition's repr names it (a Condition, its dict or a query string): two
        # spellings of one condition only cost a second query.
        parser = domain_kwargs.get("condition_parser")
        key = ("rows", id(data), repr(row_condition), parser)
        return _once(key, data, lambda: filter_rows(self, data, row_condition, domain_kwargs))

    @functools.wraps(graph_validate)
    def lean_graph_validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_STATE, "lean", False) or getattr(_STATE, "memo", None) is not None:
            return graph_validate(self, *args, **kwargs)
        _STATE.memo = {}
        try:
            return graph_validate(self, *args, **kwargs)
        finally:
            _STATE.memo = None

    Expectation.configuration = property(configuration)  # type: ignore[method-assign,assignment]
    ExpectationConfiguration.to_domain_obj = to_domain_obj  # type: ignore[method-assign]
    PandasExecutionEngine._apply_row_condition_filter = apply_row_condition_filter  # type: ignore[method-assign]
    Validator.graph_validate = lean_graph_validate  # type: ignore[method-assign]
    return True


def _once(key: Hashable, owner: object, compute: Callable[[], _T]) -> _T:
    """`compute()`, or what it gave for `key` earlier in this graph_validate call."""
    memo: dict[Hashable, tuple[object, Any]] | None = getattr(_STATE, "memo", None)
    if memo is None:
        return compute()
    found = memo.get(key)
    if found is None:
        # The owner is held with the value, so its id is not reused while the memo lives.
        found = memo[key] = (owner, compute())
    return found[1]
