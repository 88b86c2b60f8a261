"""Column checks of Parquet files from their footers, shared by every reader of a table.

A rule set maps each required column to what it must be and a test of its Arrow type. A file
that is not Parquet, lacks a column or stores one in an unusable type is an `InputError`
naming the file, the column and the rule ``<table>.readable`` or ``<table>.schema``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hulk import schemas
from hulk.errors import InputError

ColumnRule = tuple[str, Callable[[pa.DataType], bool]]  # (what it must be, test of its type)


def is_string(kind: pa.DataType) -> bool:
    """Strings, plain or dictionary-encoded."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or kind == pa.string_view()


def is_number(kind: pa.DataType) -> bool:
    """A float or integer column, or one with no value at all (Arrow's null type)."""
    return pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_null(kind)


def is_timestamp(kind: pa.DataType) -> bool:
    """A timestamp column, or one with no value at all."""
    return pa.types.is_timestamp(kind) or pa.types.is_null(kind)


LOG_RULES: dict[str, ColumnRule] = {
    "ts": ("a timestamp", pa.types.is_timestamp),
    "src": ("an integer", pa.types.is_integer),
    "dst": ("an integer", pa.types.is_integer),
    "msg_bytes": ("an integer", pa.types.is_integer),
    "elapsed_ms": ("a number", is_number),  # a file whose probes were all lost has no value
    "status": ("a string", is_string),
}
assert tuple(LOG_RULES) == tuple(schemas.LOGS)

_BY_DTYPE: dict[str, ColumnRule] = {
    "int64": ("an integer", pa.types.is_integer),
    "float64": ("a number", is_number),
    "datetime64[us, UTC]": ("a timestamp", is_timestamp),
}
LINK_RULES: dict[str, ColumnRule] = {
    column: _BY_DTYPE[dtype] for column, dtype in schemas.LINKS.items()
}


def checked_schema(path: Path, rules: Mapping[str, ColumnRule], table: str) -> pa.Schema:
    """The file's schema once every column of `rules` is present with an accepted type."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(path, f"{table}.readable", f"not a readable Parquet file: {exc}") from None
    for column, (expected, accepts) in rules.items():
        index = schema.get_field_index(column)
        if index < 0:
            raise InputError(
                path,
                f"{table}.schema",
                f"column {column!r} is missing (required: {', '.join(rules)})",
            )
        kind = schema.field(index).type
        if not accepts(kind):
            raise InputError(
                path, f"{table}.schema", f"column {column!r} must be {expected}, found {kind}"
            )
    return schema
