"""Training jobs: the jobs file, the public presets and sizes.

The jobs file: docs/contracts.md#jobs-file; the presets: docs/design.md#job-presets.

A `Job` describes one model to train. Its derived sizes are the inputs of the cost model
(docs/design.md#cost-model, `hulk.cost`):

* ``params = params_b × 1e9`` parameters (rounded to a whole count);
* ``flops_per_iteration = 6 × params × global_batch × seq_len`` (forward + backward over one
  global batch);
* ``activation_bytes = micro_batch × seq_len × hidden × 2`` (one micro-batch's fp16 activation
  crossing a stage boundary);
* ``state_bytes = 16 × params`` (mixed-precision Adam: weights, gradients, master weights and
  two moments);
* ``min_memory_bytes = min_memory_gb × 1e9`` when the jobs file gives ``min_memory_gb``, else
  ``state_bytes``. Memory is counted in decimal units throughout, as in the inventory's
  ``memory_gb``: 1 GB = 1e9 bytes. The cost model uses `min_memory_bytes` as the job's memory
  need, so with the default both say 16 × params.

The jobs file is YAML with one top-level key, ``jobs``, a list of mappings with the keys
``name, params_b, layers, hidden, seq_len, global_batch, micro_batch`` and optionally
``priority`` (int, default 0; higher is placed first), ``min_memory_gb`` and the job's length and
life for the scheduler (`hulk.scheduler`): ``iterations`` (training iterations to run) or
``tokens`` (converted to ``ceil(tokens / (global_batch × seq_len))`` iterations; not both),
``submitted_at`` and ``deadline`` (ISO 8601 times; a time without a zone is UTC). A job without a
length runs until it is marked finished (`hulk jobs finish`). ``preset`` (the name of one of
`PRESET_JOBS`) gives the job that model's sizes — ``params_b, layers, hidden, seq_len,
global_batch, micro_batch`` — and each of those the job also gives is its own; the job is then
the expanded mapping (the job store and the placements' ``spec`` keep the sizes, not the
preset's name), and a name that is no preset is ``jobs.unknown_preset``. `load_jobs` rejects, as an
`InputError` naming the file, the job (position and name) and the field: unknown keys, missing
keys, keys given twice (``jobs.duplicate_key``), wrong types (``layers: 48.0`` or
``layers: "48"`` is not an integer; an integer is accepted where a number is expected, and a
number written with an exponent, ``1e6``, is a number in every field, an integer where whole),
non-positive or non-finite sizes, sizes and priorities outside `SIZE_LIMITS`, `MIN_PARAMS_B` and
`MAX_PRIORITY` (``jobs.out_of_range``), a ``micro_batch`` larger than ``global_batch``, both
``iterations`` and ``tokens``, a time that is not ISO 8601 (YAML's own timestamps are read as
text and parsed here, so ``2026-13-45`` is a ``jobs.bad_time`` like any other; a date alone is
midnight UTC) or not of years 1 to 9999 in UTC, a ``deadline`` not after ``submitted_at``
(times are kept to the whole second, as the job store writes them: the check is on those),
more than `MAX_ITERATIONS` iterations (``jobs.too_long``: the store keeps iterations as 64-bit
integers), a name outside ``[A-Za-z0-9._-]+`` and duplicate names; YAML aliases and files over
1 MB are refused (rules ``jobs.yaml_alias``, ``jobs.too_large``). Every problem of the file is
listed in the one error (the rules between a job's fields once each of its fields is valid).
An empty list (``jobs: []``) is refused (``jobs.empty``) unless the caller schedules
(``allow_empty``): with the job store, a file with no upcoming jobs is how every one of them is
withdrawn, and the jobs submitted with `hulk jobs submit` still run.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from hulk.errors import InputError

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
GB = 1e9  # bytes per GB: memory is counted in decimal units, like the inventory's memory_gb

FLOPS_PER_PARAM_TOKEN = 6  # forward (2) + backward (4) FLOPs per parameter and token
ACTIVATION_BYTES_PER_VALUE = 2  # fp16 / bf16 activations
STATE_BYTES_PER_PARAM = 16  # mixed-precision Adam state

# The largest size of each kind a job may have, and why. No training job comes near them (the
# largest today: some 2 T parameters, a few hundred layers (1,000 in research), hidden sizes of
# some 25,000, contexts of millions of tokens, batches of thousands of sequences), yet they keep
# what the cost model derives from a job a finite float (at most 6 × 1e14 × 1e7 × 1e8 = 6e29
# FLOPs an iteration, 2e21 bytes of activation) and the planner fast: its work and memory grow
# with `layers` (a price per machine and layer, `hulk.planner`). On paper-47 `hulk assign` of
# the six preset jobs takes 1.8 s at their own depths, 4.3 s at 10,000 layers each and 36 s at
# 100,000; one job of 1,000,000 layers 35 s and 1 GB; of 10,000,000, minutes.
SIZE_LIMITS: dict[str, tuple[int, str]] = {
    "params_b": (100_000, "100 T parameters, 1.6 PB of training state"),
    "layers": (10_000, "the planner's work grows with the layers"),
    "hidden": (1_000_000, "40 times the widest model's"),
    "seq_len": (100_000_000, "100 M tokens a sequence"),
    "global_batch": (10_000_000, "10 M sequences an iteration"),
    "micro_batch": (10_000_000, "10 M sequences, like global_batch"),
    "min_memory_gb": (10_000_000, "10 PB"),
}
# The fewest parameters a job has: params_b is rounded to a whole count of parameters, and the
# cost model and the GNN's features (log10 of it) need at least one.
MIN_PARAMS_B = 1e-9
# Priorities are ranks: a million levels each way is more than any queue uses, and they stay
# exact as the GNN's float32 input.
MAX_PRIORITY = 1_000_000


@dataclass(frozen=True)
class Job:
    """One training job. Sizes are validated on construction (`ValueError` when wrong)."""

    name: str
    params_b: float  # billions of parameters
    layers: int
    hidden: int
    seq_len: int
    global_batch: int  # sequences per iteration
    micro_batch: int  # sequences per micro-batch
    priority: int = 0  # higher is placed first
    min_memory_gb: float | None = None  # None: 16 × params_b
    iterations: int | None = None  # training iterations to run; None: until marked finished
    submitted_at: dt.datetime | None = None  # UTC; None: when the scheduler first saw it
    deadline: dt.datetime | None = None  # UTC; reported as met or missed, never enforced

    def __post_init__(self) -> None:
        problems = _job_problems(self)
        if problems:
            raise ValueError(f"job {self.name!r}: " + "; ".join(problems))

    def sizes_only(self) -> Job:
        """The job without its length and times: what a placement depends on."""
        return Job(
            self.name, self.params_b, self.layers, self.hidden, self.seq_len,
            self.global_batch, self.micro_batch, self.priority, self.min_memory_gb,
        )  # fmt: skip

    @property
    def params(self) -> int:
        """Parameter count."""
        return round(self.params_b * 1e9)

    @property
    def flops_per_iteration(self) -> float:
        """6 × params × global_batch × seq_len FLOPs per training iteration."""
        return float(FLOPS_PER_PARAM_TOKEN * self.params * self.global_batch * self.seq_len)

    @property
    def activation_bytes(self) -> float:
        """One micro-batch's activation at a stage boundary: micro_batch × seq_len × hidden × 2."""
        return float(self.micro_batch * self.seq_len * self.hidden * ACTIVATION_BYTES_PER_VALUE)

    @property
    def state_bytes(self) -> float:
        """Model state of mixed-precision Adam: 16 × params bytes."""
        return float(STATE_BYTES_PER_PARAM * self.params)

    @property
    def min_memory_bytes(self) -> float:
        """Memory the whole model needs: min_memory_gb × 1e9, else 16 × params bytes."""
        if self.min_memory_gb is None:
            return self.state_bytes
        return float(self.min_memory_gb * GB)

    @property
    def micro_batches(self) -> int:
        """Micro-batches per iteration without data parallelism: ceil(global / micro)."""
        return -(-self.global_batch // self.micro_batch)


def model_sizes(job: Job) -> dict[str, float | int]:
    """The sizes that make `job`'s model (not its name, priority, length or times): what a
    jobs-file entry's ``preset`` fills in."""
    sizes: dict[str, float | int] = {
        "params_b": job.params_b,
        "layers": job.layers,
        "hidden": job.hidden,
        "seq_len": job.seq_len,
        "global_batch": job.global_batch,
        "micro_batch": job.micro_batch,
    }
    if job.min_memory_gb is not None:
        sizes["min_memory_gb"] = job.min_memory_gb
    return sizes


def _job_problems(job: Job) -> list[str]:
    problems = []
    if not isinstance(job.name, str) or not NAME_PATTERN.fullmatch(job.name):
        problems.append(f"name {job.name!r} must match [A-Za-z0-9._-]+")
    sizes = model_sizes(job)
    if job.iterations is not None:
        sizes["iterations"] = job.iterations
    problems += [p for key, value in sizes.items() if (p := _size_problem(key, value))]
    if isinstance(job.priority, bool) or not isinstance(job.priority, int):
        problems.append(f"priority must be an integer (got {job.priority!r})")
    elif abs(job.priority) > MAX_PRIORITY:
        problems.append(f"priority must be within ±{MAX_PRIORITY:,} (got {job.priority!r})")
    if not problems and job.micro_batch > job.global_batch:
        problems.append(
            f"micro_batch ({job.micro_batch}) must not exceed global_batch ({job.global_batch})"
        )
    for key in ("submitted_at", "deadline"):
        moment = getattr(job, key)
        if moment is None:
            continue
        if not isinstance(moment, dt.datetime) or moment.tzinfo is None:
            problems.append(f"{key} must be a timezone-aware datetime (got {moment!r})")
        elif not _kept_exactly(moment):
            problems.append(
                f"{key} must be a whole second of years 0001 to 9999 in UTC, as the job store "
                f"keeps it (got {moment!r})"
            )
    if (
        not problems
        and job.submitted_at is not None
        and job.deadline is not None
        and job.deadline <= job.submitted_at
    ):
        problems.append(f"deadline {job.deadline} is not after submitted_at {job.submitted_at}")
    return problems


def _size_problem(key: str, value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key} must be a number (got {value!r})"
    if not math.isfinite(value) or value <= 0:
        return f"{key} must be a positive finite number (got {value!r})"
    if key in SIZE_LIMITS and value > SIZE_LIMITS[key][0]:
        limit, why = SIZE_LIMITS[key]
        return f"{key} must be at most {limit:,} ({why}) (got {value!r})"
    if key == "params_b" and value < MIN_PARAMS_B:
        return f"params_b must be at least {MIN_PARAMS_B:g}, one parameter (got {value!r})"
    return None


def _kept_exactly(moment: dt.datetime) -> bool:
    """Whether `format_time` writes `moment` as text `utc_time` reads back to the same time."""
    try:
        return utc_time(format_time(moment)) == moment
    except OverflowError:  # not a time of years 1 to 9999 in UTC
        return False


def iterations_for_tokens(job: Job, tokens: float | Decimal) -> int:
    """Training iterations that consume `tokens` tokens: ceil(tokens / (global_batch × seq_len)),
    exactly (an integer count of tokens beyond a float's 53 bits is not rounded first)."""
    return max(1, math.ceil(Fraction(tokens) / (job.global_batch * job.seq_len)))


def utc_time(value: object) -> object:
    """An ISO 8601 string or datetime as an aware UTC datetime (no zone: UTC); else unchanged,
    for the validator to reject. A time whose UTC date falls outside years 1 to 9999
    (``0001-01-01T00:00:00+01:00``) is returned unchanged too."""
    original = value
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        try:
            return value.astimezone(dt.UTC)
        except OverflowError:  # before year 1 or past year 9999 in UTC
            return original
    return value


def later(moment: dt.datetime, seconds: float) -> dt.datetime | None:
    """`moment` + `seconds`, or None when that is not a time a datetime holds (past year 9999,
    or not finite): a job of a million years has no finish anyone can be told."""
    if not math.isfinite(seconds):
        return None
    try:
        return moment + dt.timedelta(seconds=seconds)
    except OverflowError:
        return None


def format_time(moment: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds, the year in 4 digits): how files, tables
    and the job store show a time. `utc_time` reads it back to the same time when it has no
    fraction of a second, as every time of a job has (`parse_jobs`)."""
    m = moment.astimezone(dt.UTC)
    # Not strftime's %Y: glibc writes year 10 as "10", which is no ISO 8601 date.
    return f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}Z"


# --- presets (docs/design.md#job-presets) -----------------------------------------------------

PRESET_JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job("OPT-175B", 175.0, 96, 12288, 2048, 1024, 1),
        Job("T5-11B", 11.0, 48, 1024, 512, 2048, 8),
        Job("GPT-2-1.5B", 1.5, 48, 1600, 1024, 512, 8),
        Job("BERT-large", 0.34, 24, 1024, 512, 256, 16),
        Job("RoBERTa-large", 0.355, 24, 1024, 512, 8192, 16),
        Job("XLNet-large", 0.34, 24, 1024, 512, 8192, 16),
    )
}
# The paper's two scenarios: the first four models together; all six together.
PAPER_MIX_4: tuple[str, ...] = ("OPT-175B", "T5-11B", "GPT-2-1.5B", "BERT-large")
PAPER_MIX_6: tuple[str, ...] = (*PAPER_MIX_4, "RoBERTa-large", "XLNet-large")


def preset_jobs(names: Iterable[str]) -> list[Job]:
    """The preset jobs of the given names, in that order (KeyError naming the unknown one)."""
    jobs = []
    for name in names:
        if name not in PRESET_JOBS:
            raise KeyError(f"no preset job {name!r}; known: {', '.join(PRESET_JOBS)}")
        jobs.append(PRESET_JOBS[name])
    return jobs


# --- the jobs file ----------------------------------------------------------------------------

_Positive = Field(gt=0, allow_inf_nan=False)
# Iterations of one job at most: the job store keeps them as 64-bit integers (a trillion
# iterations is millennia of training).
MAX_ITERATIONS = 10**12


def _job_time(value: object) -> dt.datetime:
    """A job's time: `utc_time` to the whole second, as the job store keeps it (`format_time`),
    so a file is judged on the times Hulk keeps (``09:00:00.9`` is ``09:00:00``);
    ``jobs.bad_time`` unless it is an ISO 8601 time of years 1 to 9999 in UTC."""
    moment = utc_time(value)
    if not isinstance(moment, dt.datetime) or moment.utcoffset() != dt.timedelta(0):
        raise PydanticCustomError("bad_time", "not an ISO 8601 time of years 0001 to 9999 in UTC")
    return moment.replace(microsecond=0)


_Time = Annotated[dt.datetime, BeforeValidator(_job_time)]


class _Exponent(float):
    """A number the jobs file writes with an exponent (``1.75e2``, ``1e6``, ``2.4E+1``) and its
    exact value: YAML 1.1 reads the ones without a dot or a sign as text, `_NoAliasLoader` reads
    them all as numbers; an integer field takes one whose exact value is whole (`_integer`)."""

    exact: Decimal
    text: str

    def __new__(cls, text: str) -> _Exponent:
        exact = Decimal(text.replace("_", ""))
        number = super().__new__(cls, float(exact))
        number.exact, number.text = exact, text
        return number


def _exact(written: object, read: float) -> float | Decimal:
    """A number as the file wrote it, when a float would round it (an integer, or one written
    with an exponent); else as read."""
    if isinstance(written, _Exponent):
        return written.exact
    if isinstance(written, int) and not isinstance(written, bool):
        return Decimal(written)
    return read


def _integer(value: object) -> object:
    """An integer written with an exponent (``iterations: 1e6``) as that integer; else unchanged
    (``4.85e1`` stays a float, for the validator to reject as it does ``48.5``)."""
    if isinstance(value, _Exponent) and math.isfinite(value):
        exact = value.exact
        if exact == exact.to_integral_value():
            return int(exact)
    return value


def _name(value: object) -> object:
    """A name YAML 1.2 reads as a number (``3e8``) as the text it is, as YAML 1.1 read it."""
    return value.text if isinstance(value, _Exponent) else value


def _real(value: object) -> object:
    """A number written with an exponent as a plain float."""
    return float(value) if isinstance(value, _Exponent) else value


def _yaml_float(value: object) -> object:
    """``tokens`` as a float, also when written as text (``"1e9"``), as it always was read."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return _real(value)


_Int = BeforeValidator(_integer)
_Real = BeforeValidator(_real)


def _size(key: str) -> Any:
    """A positive size of at most its `SIZE_LIMITS` (``jobs.out_of_range`` above)."""
    return Field(gt=0, le=SIZE_LIMITS[key][0], allow_inf_nan=False)


class _JobModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$"), BeforeValidator(_name)]
    params_b: Annotated[float, _size("params_b"), Field(ge=MIN_PARAMS_B), _Real]
    layers: Annotated[int, _size("layers"), _Int]
    hidden: Annotated[int, _size("hidden"), _Int]
    seq_len: Annotated[int, _size("seq_len"), _Int]
    global_batch: Annotated[int, _size("global_batch"), _Int]
    micro_batch: Annotated[int, _size("micro_batch"), _Int]
    priority: Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY), _Int] = 0
    min_memory_gb: Annotated[float, _size("min_memory_gb"), _Real] | None = None
    iterations: Annotated[int, Field(gt=0, le=MAX_ITERATIONS), _Int] | None = None
    tokens: Annotated[float, _Positive, BeforeValidator(_yaml_float)] | None = None
    submitted_at: _Time | None = None
    deadline: _Time | None = None


_RULES = {
    "extra_forbidden": "jobs.unknown_key",
    "missing": "jobs.missing_key",
    "string_pattern_mismatch": "jobs.bad_name",
    "greater_than": "jobs.not_positive",
    "less_than_equal": "jobs.too_long",
    "finite_number": "jobs.not_positive",
    "datetime_type": "jobs.bad_time",
    "datetime_from_date_parsing": "jobs.bad_time",
    "datetime_parsing": "jobs.bad_time",
    "bad_time": "jobs.bad_time",
}


def _label(index: int, raw: object) -> str:
    name = _name(raw.get("name")) if isinstance(raw, dict) else None
    return f"job {index + 1}" + (f" ({name!r})" if isinstance(name, str) else "")


def _number(value: object) -> float:
    """`value` as a float when it is a number (an int too large for one is +-inf), else nan."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _describe(index: int, raw: object, error: ErrorDetails) -> tuple[str, str]:
    """(rule, message) for one pydantic error of the job at `index` (0-based)."""
    field = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
    field = field.split(".")[0] if field else "(job)"
    kind = error["type"]
    rule = _RULES.get(kind, "jobs.wrong_type")
    where = f"{_label(index, raw)}, field {field!r}"
    got = error.get("input")
    if kind in ("less_than_equal", "greater_than_equal") and field != "iterations":
        # Beyond a size's or the priority's bounds (a size of 0 or less is jobs.not_positive).
        if kind == "greater_than_equal" and field in SIZE_LIMITS and _number(got) <= 0:
            return "jobs.not_positive", f"{where}: Input should be greater than 0 (got {got!r})"
        most = kind == "less_than_equal"
        bound = float(error.get("ctx", {})["le" if most else "ge"])
        shown = f"{int(bound):,}" if bound.is_integer() else f"{bound:g}"
        why = SIZE_LIMITS[field][1] if most and field in SIZE_LIMITS else ""
        why = "one parameter" if field == "params_b" and not most else why
        text = f"{where}: at {'most' if most else 'least'} {shown}"
        return "jobs.out_of_range", text + (f" ({why})" if why else "") + f" (got {got!r})"
    if kind == "extra_forbidden":
        known = ", ".join([*_JobModel.model_fields, "preset"])
        return rule, f"{where}: unknown key (known: {known})"
    if kind == "missing":
        return rule, f"{where}: missing"
    if kind == "string_pattern_mismatch":
        return rule, f"{where}: {error.get('input')!r} must use only letters, digits, '.', '_', '-'"
    return rule, f"{where}: {error['msg']} (got {error.get('input')!r})"


MAX_JOBS_FILE_BYTES = 1_000_000  # a jobs file lists jobs, not data: larger is a mistake


class _AliasRefused(yaml.MarkedYAMLError):
    pass


# A number with an exponent, as YAML 1.2 reads it (YAML 1.1 wants a dot and a signed exponent,
# and reads ``1e6`` or ``1.75e2`` as text): `_Exponent`, for the validator to take as a number.
_EXPONENT_TAG = "tag:hulk,2026:exponent"
_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without aliases (``*name`` can expand a few lines into gigabytes), without
    implicit timestamps (PyYAML builds those itself and fails on ``2026-13-45`` with a bare
    ValueError, so times stay text for `utc_time` and the validator to judge), and with every
    number in scientific notation a number (`_Exponent`)."""

    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, Any]]]] = {
        first: [(_EXPONENT_TAG, _EXPONENT)] * (first in "+-.0123456789")
        + [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _AliasRefused(None, None, "aliases (*name) are not allowed", mark)
        return super().compose_node(parent, index)

    def construct_yaml_map(self, node: yaml.MappingNode) -> Iterator[_Mapping]:
        """A mapping as a `_Mapping` that remembers the keys it repeats: PyYAML keeps the last
        value of a repeated key without a word, and `parse_jobs` refuses them."""
        data = _Mapping()
        yield data
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<``: YAML's own merge
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    data.repeated.append((key, key_node.start_mark.line + 1))
                seen.add(key)
            except TypeError:  # an unhashable key: construct_mapping refuses it
                continue
        data.update(self.construct_mapping(node))


class _Mapping(dict[Any, Any]):
    """A mapping read from YAML, and the keys it gives more than once: (key, line of the repeat)."""

    def __init__(self) -> None:
        super().__init__()
        self.repeated: list[tuple[object, int]] = []


_NoAliasLoader.add_constructor("tag:yaml.org,2002:map", _NoAliasLoader.construct_yaml_map)
_NoAliasLoader.add_constructor(
    _EXPONENT_TAG, lambda loader, node: _Exponent(loader.construct_scalar(node))
)


def _repeated(mapping: object, where: str, what: str = "field") -> list[tuple[str, str]]:
    """``jobs.duplicate_key`` problems for the keys a YAML mapping gives more than once."""
    repeats = mapping.repeated if isinstance(mapping, _Mapping) else []
    return [
        (
            "jobs.duplicate_key",
            f"{where}, {what} {str(key)!r}: given more than once (again on line {line}); "
            "which value is meant?",
        )
        for key, line in repeats
    ]


def _read_yaml(path: Path) -> object:
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise InputError(path, "jobs.missing_file", f"the jobs file {what}")
    size = path.stat().st_size
    if size > MAX_JOBS_FILE_BYTES:
        raise InputError(
            path,
            "jobs.too_large",
            f"{size:,} bytes; a jobs file is at most {MAX_JOBS_FILE_BYTES:,}",
        )
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_NoAliasLoader)
    except UnicodeDecodeError as exc:
        raise InputError(path, "jobs.encoding", f"not UTF-8 text: {exc.reason}") from None
    except _AliasRefused as exc:
        where = f"line {exc.problem_mark.line + 1}" if exc.problem_mark else "the file"
        raise InputError(
            path, "jobs.yaml_alias", f"{where}: YAML aliases (*name) are not allowed"
        ) from None
    except yaml.YAMLError as exc:
        from hulk.settings import yaml_error_line

        raise InputError(
            path, "jobs.yaml_syntax", f"not valid YAML: {yaml_error_line(exc)}"
        ) from None
    except ValueError as exc:  # an explicitly tagged value PyYAML cannot build (!!timestamp)
        raise InputError(path, "jobs.yaml_value", f"a value YAML cannot read: {exc}") from None


def _entries(raw: object, source: str | Path | None, allow_empty: bool) -> list[object]:
    """The list under the file's one top-level key, ``jobs``."""
    if not isinstance(raw, dict) or "jobs" not in raw:
        raise InputError(source, "jobs.structure", "expected a mapping with a 'jobs' list")
    extra = sorted(str(key) for key in raw if key != "jobs")
    if extra:
        raise InputError(source, "jobs.unknown_key", f"unknown top-level key(s): {extra}")
    for rule, message in _repeated(raw, "top level", "key"):
        raise InputError(source, rule, message)
    entries = raw["jobs"]
    if not isinstance(entries, list):
        raise InputError(source, "jobs.structure", f"'jobs' must be a list (got {entries!r})")
    if not entries and not allow_empty:
        raise InputError(source, "jobs.empty", "the jobs file lists no jobs")
    return entries


def _cross_field_problems(model: _JobModel, label: str) -> list[tuple[str, str]]:
    """The rules between the fields of one job whose fields are each valid, all of them."""
    problems = []
    if model.micro_batch > model.global_batch:
        problems.append(
            (
                "jobs.micro_batch_too_large",
                f"{label}, field 'micro_batch': {model.micro_batch} exceeds "
                f"global_batch {model.global_batch}",
            )
        )
    if model.iterations is not None and model.tokens is not None:
        problems.append(
            ("jobs.length_twice", f"{label}, field 'tokens': give iterations or tokens, not both")
        )
    if (
        model.submitted_at is not None
        and model.deadline is not None
        and model.deadline <= model.submitted_at
    ):
        problems.append(
            (
                "jobs.deadline_before_submission",
                f"{label}, field 'deadline': {format_time(model.deadline)} is not after "
                f"submitted_at {format_time(model.submitted_at)}",
            )
        )
    return problems


def parse_jobs(
    raw: object, source: str | Path | None = None, allow_empty: bool = False
) -> list[Job]:
    """Validate the parsed YAML of a jobs file (see the module docstring)."""
    entries = _entries(raw, source, allow_empty)
    problems: list[tuple[str, str]] = []
    jobs: list[Job] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            problems.append(
                ("jobs.structure", f"job {index + 1}: expected a mapping (got {entry!r})")
            )
            continue
        label = _label(index, entry)
        repeated = _repeated(entry, label)
        if repeated:
            problems += repeated
            continue
        # The name is checked on the entry as written, so that a duplicate is reported beside
        # the job's other problems, not only once they are fixed.
        name = entry.get("name")
        duplicate = isinstance(name, str) and name in first_index
        if duplicate:
            problems.append(
                (
                    "jobs.duplicate_name",
                    f"{label}, field 'name': {name!r} is already the name of "
                    f"job {first_index[str(name)] + 1}",
                )
            )
        elif isinstance(name, str):
            first_index[name] = index
        fields_given = dict(entry)
        if "preset" in fields_given:
            preset = fields_given.pop("preset")
            base = PRESET_JOBS.get(preset) if isinstance(preset, str) else None
            if base is None:
                problems.append(
                    (
                        "jobs.unknown_preset",
                        f"{label}, field 'preset': {preset!r} is not a preset "
                        f"(known: {', '.join(PRESET_JOBS)})",
                    )
                )
                continue
            fields_given = {**model_sizes(base), **fields_given}
        try:
            model = _JobModel.model_validate(fields_given)
        except ValidationError as exc:
            problems += [_describe(index, entry, error) for error in exc.errors()]
            continue
        across = _cross_field_problems(model, label)
        problems += across
        if across or duplicate:
            continue
        fields = model.model_dump(exclude={"tokens"})
        job = Job(**fields)
        if model.tokens is not None:
            iterations = iterations_for_tokens(job, _exact(entry["tokens"], model.tokens))
            if iterations > MAX_ITERATIONS:
                problems.append(
                    (
                        "jobs.too_long",
                        f"{label}, field 'tokens': {model.tokens:g} tokens are {iterations:,} "
                        f"iterations; a job runs at most {MAX_ITERATIONS:,}",
                    )
                )
                continue
            job = Job(**{**fields, "iterations": iterations})
        jobs.append(job)
    if problems:
        rule, first = problems[0]
        detail = first if len(problems) == 1 else f"{first} (and {len(problems) - 1} more)"
        examples = [message for _, message in problems] if len(problems) > 1 else []
        raise InputError(source, rule, detail, examples)
    return jobs


def require_jobs_file(path: Path) -> None:
    """`jobs.missing_file` unless the jobs file is there: checked before a run's long steps
    when the run ends by scheduling its jobs."""
    if not path.is_file():
        raise InputError(
            path,
            "jobs.missing_file",
            "the jobs file does not exist (params: assign.jobs_file): the nightly run ends by "
            "scheduling its jobs; `hulk generate` writes the demo's into a new data folder",
        )


def load_jobs(path: str | Path, allow_empty: bool = False) -> list[Job]:
    """Read and validate a jobs file; `InputError` naming file, job and field when it is wrong.
    `allow_empty`: ``jobs: []`` is a file with no jobs, not an error (scheduling runs)."""
    path = Path(path)
    return parse_jobs(_read_yaml(path), source=path, allow_empty=allow_empty)


def job_to_dict(job: Job) -> dict[str, Any]:
    """The jobs-file mapping of one job (``min_memory_gb`` only when set)."""
    record: dict[str, Any] = {
        "name": job.name,
        "params_b": float(job.params_b),
        "layers": job.layers,
        "hidden": job.hidden,
        "seq_len": job.seq_len,
        "global_batch": job.global_batch,
        "micro_batch": job.micro_batch,
        "priority": job.priority,
    }
    if job.min_memory_gb is not None:
        record["min_memory_gb"] = float(job.min_memory_gb)
    # The scheduler's keys only when set, so mixes without them keep their content keys.
    if job.iterations is not None:
        record["iterations"] = job.iterations
    for key in ("submitted_at", "deadline"):
        moment = getattr(job, key)
        if moment is not None:
            record[key] = format_time(moment)
    return record


# The jobs-file keys that change no plan or cost per iteration (who, when, how long, how urgent).
NOT_SIZES = ("name", "priority", "iterations", "submitted_at", "deadline")


def job_sizes(job: Job) -> str:
    """The job's sizes as canonical JSON: what its plans and costs per iteration depend on
    (`job_to_dict` without `NOT_SIZES`), a content key for remembering them."""
    sizes = {k: v for k, v in job_to_dict(job).items() if k not in NOT_SIZES}
    return json.dumps(sizes, sort_keys=True)


# The demo's upcoming jobs (``data/jobs/upcoming.yaml``, and any new data folder's): the paper's
# first scenario, each job a fine-tune of this many tokens.
DEMO_TOKENS = 10_000_000_000
_DEMO_HEADER = """\
# The upcoming jobs: the paper's first scenario, four models together (docs/design.md#job-presets).
# Format: docs/contracts.md#jobs-file. `hulk assign` reads this file by default
# (params: assign.jobs_file). `tokens` gives each job its length (here 10 billion tokens each,
# a fine-tune), so every assign run publishes when it starts and when it will finish.
"""


def demo_jobs_file() -> str:
    """The demo's jobs file: what `hulk generate` writes into a data folder without one."""
    records = [{**job_to_dict(job), "tokens": DEMO_TOKENS} for job in preset_jobs(PAPER_MIX_4)]
    return _DEMO_HEADER + yaml.safe_dump({"jobs": records}, sort_keys=False)


def dump_jobs(jobs: Iterable[Job]) -> str:
    """A jobs file (YAML) that `load_jobs` reads back to the same jobs."""
    return yaml.safe_dump(
        {"jobs": [job_to_dict(job) for job in jobs]}, sort_keys=False, allow_unicode=True
    )
