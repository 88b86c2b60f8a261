"""A thin layer over Great Expectations 1.x: one Data Context per validation run.

Every rule that can be phrased as an expectation is one: a `Check` pairs a GX expectation with
the Hulk rule name it stands for (kept in the expectation's `meta`). A `GxSession` owns the Data
Context, one pandas data source ``hulk`` with one dataframe asset, expectation suite and
validation definition per suite (``hulk.inventory``, ``hulk.logs``, ``hulk.links``), and runs a
suite on one batch (an in-memory frame) at a time:

- `GxSession.ephemeral()` keeps everything in memory (the `validate_*` functions on their own
  use one per thread, `scratch_session`, and keep no results in it);
- `GxSession.project(root, docs_dir)` is a file-mode context under ``root/gx``: suites,
  validation definitions and every batch's result are persisted, and `build_docs` renders the
  HTML Data Docs into ``docs_dir``. Results of earlier runs are kept for `history` days (the
  newest days with results; older ones are dropped, and their pages with them), so the docs
  show how the data's quality went night after night; a run renders only its own pages and
  the index.

Warnings tell the truth in the Data Docs: a warning rule (rows that are quarantined while the
run goes on) is an expectation with ``mostly`` = `WARNING_MOSTLY`, so a batch whose few bad rows
were quarantined passes and shows their count, and fails only when more than 1 % of its rows
break the rule; the rule's severity and what Hulk does with its rows are in the expectation's
notes (on the suite's page). Hulk itself still acts on every offending row
(`CheckResult.success` is false as soon as one row breaks a rule). Each result names its data
asset and batch (``logs day=2026-11-20``).

A batch may also be validated elsewhere (another process or machine: the per-day log fan-out):
`GxSession.run` returns a picklable `BatchResult` holding the GX result as its JSON dict, and
`record` stores that result in this session's validation results store under the key the
checkpoint would have used (suite, run name = batch, run time, batch id), so the Data Docs show
it exactly as if it had been validated here.

A batch is validated as its checkpoint would validate it, without GX's per-run freshness
checks (`_run_checkpoint`): a session's suites and definitions change only through it; and
without the objects GX rebuilds many times within one validation (`hulk.validation.gx_memo`).

Results are asked for in the COMPLETE format (the full list of unexpected row indices, so a
rule's offending rows can be quarantined exactly) but without the unexpected *values*, which
keeps the stored results small even when a whole batch fails.

GX's usage statistics are switched off (``GX_ANALYTICS_ENABLED=false`` unless the environment
says otherwise) and so are its progress bars. GX is imported on first use: importing it takes a
few seconds, which commands that never validate should not pay.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import threading
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hulk.findings import Severity
from hulk.validation import gx_memo
from hulk.validation.docs_offline import add_offline_note

if TYPE_CHECKING:
    from great_expectations.data_context import AbstractDataContext
    from great_expectations.expectations import Expectation

DATASOURCE = "hulk"
DOCS_SITE = "hulk"
BATCH_DEFINITION = "whole"
WARNING_MOSTLY = 0.99  # a warning rule fails its batch in the Data Docs above 1 % bad rows
DOCS_HISTORY_DAYS = 30  # days of validation results kept (params validate.docs_history_days)
_NOTES = {
    "error": "**Error** rule: a failure stops the pipeline before anything downstream is written.",
    "warning": "**Warning** rule: the offending rows are quarantined "
    "(quarantine.parquet) and the run goes on; the batch fails here only when more than "
    f"{1 - WARNING_MOSTLY:.0%} of its rows break the rule.",
}


def import_gx() -> Any:
    """Import great_expectations with usage statistics off (unless the environment decides)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    return gx


@dataclass(frozen=True)
class Check:
    """One GX expectation and the Hulk rule (and severity) its failures are reported under."""

    rule: str
    severity: Severity
    expectation: Expectation


def make_check(rule: str, severity: Severity, expectation: Expectation) -> Check:
    """Tag the expectation with its rule (in `meta`) and GX severity, for the Data Docs."""
    from great_expectations.expectations.metadata_types import FailureSeverity

    expectation.meta = {**(expectation.meta or {}), "rule": rule}
    expectation.notes = f"Hulk rule `{rule}`. {_NOTES[severity]}"  # on the suite's page
    critical = severity == "error"
    expectation.severity = FailureSeverity.CRITICAL if critical else FailureSeverity.WARNING
    if not critical and "mostly" in type(expectation).__fields__:
        expectation.mostly = WARNING_MOSTLY  # type: ignore[attr-defined]
    return Check(rule, severity, expectation)


@dataclass
class CheckResult:
    """What one expectation found on one batch."""

    rule: str
    severity: Severity
    success: bool
    unexpected_count: int
    unexpected_index: np.ndarray  # int64 row positions of the batch frame

    @property
    def failed(self) -> bool:
        return not self.success


@dataclass
class BatchResult:
    """One suite's result on one batch, in a form that crosses processes (numpy and JSON)."""

    suite: str
    batch: str  # the run name in the Data Docs
    batch_id: str  # GX's batch identifier (part of the validation result's store key)
    success: bool
    checks: list[CheckResult]
    gx_result: dict[str, Any]  # ExpectationSuiteValidationResult.to_json_dict()
    expectation_ids: list[str]  # the validating suite's expectation ids, in suite order


@dataclass
class SuiteRecord:
    """Per suite: how many batches' results the session has and which did not meet every
    expectation."""

    batches: int = 0
    failed_batches: list[str] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.batches > 0 and not self.failed_batches


class GxError(RuntimeError):
    """An expectation could not be evaluated at all (a bug, never a data problem)."""


class GxSession:
    """One Data Context and the suites validated through it during one run."""

    def __init__(
        self,
        context: AbstractDataContext,
        run_time: dt.datetime,
        examples: int,
        docs_dir: Path | None = None,
    ) -> None:
        self.context = context
        self.run_time = run_time
        self.examples = examples
        self.docs_dir = docs_dir
        self.suites: dict[str, SuiteRecord] = {}
        self._definitions: dict[str, Any] = {}
        self._stored: list[Any] = []  # this run's validation result keys (for the docs)
        # add_or_update: a reopened project (see `project(fresh=False)`) already has it.
        self._datasource = context.data_sources.add_or_update_pandas(DATASOURCE)

    # --- construction -----------------------------------------------------------------------

    @classmethod
    def ephemeral(cls, run_time: dt.datetime | None = None, examples: int = 5) -> GxSession:
        """An in-memory context: nothing is written to disk."""
        gx = import_gx()
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
        )

        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            analytics_enabled=False,
        )
        context = gx.get_context(mode="ephemeral", project_config=config)
        _quiet(context)
        return cls(context, run_time or dt.datetime.now(dt.UTC), examples)

    @classmethod
    def project(
        cls,
        root: Path,
        docs_dir: Path,
        run_time: dt.datetime,
        examples: int = 5,
        *,
        fresh: bool = True,
        history_days: int = DOCS_HISTORY_DAYS,
    ) -> GxSession:
        """A file-mode project under root/gx whose Data Docs site is docs_dir.

        `fresh` starts a validation run: the results of the newest `history_days` days with
        results (before `run_time`'s) are kept, older ones dropped. `fresh=False` reopens the
        project to add a suite's results to this run's (ingest adds the link table's to the
        logs' of `validate`).
        """
        gx = import_gx()
        root, docs_dir = Path(root), Path(docs_dir)
        if not fresh and (root / "gx").is_dir():
            context = gx.get_context(mode="file", project_root_dir=str(root))
            _quiet(context)
            return cls(context, run_time, examples, docs_dir=docs_dir)
        root.mkdir(parents=True, exist_ok=True)
        try:
            context = gx.get_context(mode="file", project_root_dir=str(root))
        except Exception:  # an unreadable project (another GX version): start afresh
            shutil.rmtree(root / "gx", ignore_errors=True)
            shutil.rmtree(docs_dir, ignore_errors=True)
            context = gx.get_context(mode="file", project_root_dir=str(root))
        _quiet(context)
        _prune_results(context, run_time, history_days)
        for site in list(context.list_data_docs_sites()):
            context.delete_data_docs_site(site)
        context.add_data_docs_site(
            site_name=DOCS_SITE,
            site_config={
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    # Relative to the gx folder, so the project survives moving data_dir.
                    "base_directory": os.path.relpath(docs_dir.resolve(), (root / "gx").resolve()),
                },
            },
        )
        return cls(context, run_time, examples, docs_dir=docs_dir)

    # --- validation -------------------------------------------------------------------------

    def validate(
        self,
        suite: str,
        checks: Callable[[], Sequence[Check]],
        frame: pd.DataFrame,
        batch: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        keep: bool = True,
    ) -> list[CheckResult]:
        """Run suite `suite` (built from `checks` on first use) on one batch frame.

        `frame` must have a default RangeIndex: unexpected indices are row positions. `batch`
        names the batch in the Data Docs (the run name of its result). `keep=False` drops the
        GX result once read (see `run`).
        """
        _, _, results = self._validate(suite, checks, frame, batch, parameters, keep)
        return results

    def run(
        self,
        suite: str,
        checks: Callable[[], Sequence[Check]],
        frame: pd.DataFrame,
        batch: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        keep: bool = True,
    ) -> BatchResult:
        """`validate`, returning the whole result so that another session can `record` it.

        `keep=False` drops the result from this session's store once read (a worker's session
        validates many batches and keeps none of them).
        """
        key, outcome, results = self._validate(suite, checks, frame, batch, parameters, keep)
        checkpoint, _ = self._definitions[suite]
        return BatchResult(
            suite=suite,
            batch=batch,
            batch_id=str(key.batch_identifier),
            success=bool(outcome.success),
            checks=results,
            gx_result=outcome.to_json_dict(),
            expectation_ids=_expectation_ids(checkpoint),
        )

    def _validate(
        self,
        suite: str,
        checks: Callable[[], Sequence[Check]],
        frame: pd.DataFrame,
        batch: str,
        parameters: Mapping[str, Any] | None,
        keep: bool,
    ) -> tuple[Any, Any, list[CheckResult]]:
        """The batch's result store key, its GX result and what each expectation found."""
        checkpoint, rules = self._definition(suite, checks)
        key, outcome = _run_checkpoint(checkpoint, frame, parameters or {}, batch, self.run_time)
        if keep:
            _name_asset(outcome, suite, batch)
            self.context.validation_results_store.set(key, outcome)
            self._stored.append(key)
            self._count(suite, batch, bool(outcome.success))
        results = []
        for item in outcome.results:
            config = item.expectation_config
            rule = (config.meta or {}).get("rule", config.type)
            info = item.exception_info or {}
            if info.get("raised_exception"):
                raise GxError(
                    f"{suite} on {batch}: expectation {config.type} ({rule}) could not run: "
                    f"{info.get('exception_message')}"
                )
            result = item.result or {}
            index = np.asarray(result.get("unexpected_index_list") or [], dtype="int64")
            count = max(int(result.get("unexpected_count") or 0), len(index))
            # Hulk acts on every offending row, whatever share of them GX tolerates (`mostly`).
            success = bool(item.success) and count == 0
            results.append(CheckResult(rule, rules[rule], success, count, index))
        return key, outcome, results

    def record(self, result: BatchResult, checks: Callable[[], Sequence[Check]]) -> None:
        """Store a batch's result validated in another session, as if it had run here.

        The suite (built from `checks`) is added to this context if it is not yet, and the
        result is stored under the key `run` would have used; its ids are this context's, so
        that the Data Docs link it to this project's suite and validation definition.
        """
        from great_expectations.core.run_identifier import RunIdentifier
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
            ValidationResultIdentifier,
        )

        checkpoint, _ = self._definition(result.suite, checks)
        store = self.context.validation_results_store
        value = store.deserialize(result.gx_result)
        value.meta["validation_id"] = checkpoint.validation_definitions[0].id
        value.meta["checkpoint_id"] = checkpoint.id
        value.meta["run_id"] = RunIdentifier(run_name=result.batch, run_time=self.run_time)
        # Same checks, same order: the validating suite's k-th expectation is this one's k-th.
        ids = dict(zip(result.expectation_ids, _expectation_ids(checkpoint), strict=True))
        for item in value.results:
            item.expectation_config.id = ids.get(item.expectation_config.id)
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=result.suite),
            run_id=value.meta["run_id"],
            batch_identifier=result.batch_id,
        )
        _name_asset(value, result.suite, result.batch)
        store.store_validation_results(value, key, key.expectation_suite_identifier)
        self._stored.append(key)
        self._count(result.suite, result.batch, result.success)

    def _count(self, suite: str, batch: str, success: bool) -> None:
        record = self.suites.setdefault(suite, SuiteRecord())
        record.batches += 1
        if not success:
            record.failed_batches.append(batch)

    def _definition(self, suite: str, checks: Callable[[], Sequence[Check]]) -> tuple[Any, dict]:
        if suite not in self._definitions:
            gx = import_gx()
            made = list(checks())
            expectation_suite = self.context.suites.add_or_update(
                gx.ExpectationSuite(name=suite, expectations=[c.expectation for c in made])
            )
            asset_name = _asset(suite)
            if asset_name in {a.name for a in self._datasource.assets}:
                self._datasource.delete_asset(asset_name)
            asset = self._datasource.add_dataframe_asset(asset_name)
            batch_definition = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)
            definition = self.context.validation_definitions.add_or_update(
                gx.ValidationDefinition(name=suite, data=batch_definition, suite=expectation_suite)
            )
            # One checkpoint per suite, run once per batch (a checkpoint passes one set of
            # batch parameters to all its definitions). No actions: the Data Docs are built
            # once at the end (`build_docs`), not after every one of 90 partitions.
            checkpoint = self.context.checkpoints.add_or_update(
                gx.Checkpoint(
                    name=suite,
                    validation_definitions=[definition],
                    actions=[],
                    result_format={
                        "result_format": "COMPLETE",
                        "partial_unexpected_count": self.examples,
                        "exclude_unexpected_values": True,
                        "include_unexpected_rows": False,
                        "return_unexpected_index_query": False,
                    },
                )
            )
            self._definitions[suite] = (checkpoint, {c.rule: c.severity for c in made})
        return self._definitions[suite]

    # --- docs -------------------------------------------------------------------------------

    def build_docs(self) -> Path | None:
        """Render the HTML Data Docs: this run's pages and suites, and the index over every
        kept run (pages of dropped results go with them). The index page, or None in memory."""
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
        )

        if self.docs_dir is None:
            return None
        suites = [ExpectationSuiteIdentifier(name=name) for name in self._definitions]
        changed = [*suites, *self._stored]
        if changed:  # (GX reads no identifiers as "every page": nothing ran, nothing to render)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.context.build_data_docs(site_names=[DOCS_SITE], resource_identifiers=changed)
        index = self.docs_dir / "index.html"
        if index.is_file():
            add_offline_note(index)
        return index


def _run_checkpoint(
    checkpoint: Any,
    frame: pd.DataFrame,
    parameters: Mapping[str, Any],
    batch: str,
    run_time: dt.datetime,
) -> tuple[Any, Any]:
    """What `checkpoint.run` returns for one batch (its result's store key and the result),
    without the freshness checks and the store write GX adds around the validation.

    A session adds its suites, validation definitions and checkpoints once and nothing else
    edits them, so the checks (re-serialising all three and comparing them with the stored
    copies, twice per batch) can only pass, yet cost a fifth of a batch's time; the result is
    stored by the caller, once, after naming its asset (GX would store it first, unnamed).
    The result is the checkpoint's, field for field (a test compares the two).
    """
    from great_expectations.constants import DATAFRAME_REPLACEMENT_STR
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )
    from great_expectations.validator.v1_validator import Validator

    (definition,) = checkpoint.validation_definitions
    validator = Validator(
        batch_definition=definition.batch_definition,
        batch_parameters={"dataframe": frame},
        result_format=checkpoint.result_format,
    )
    # Lean: GX builds each configuration, expectation object and row-conditioned frame once
    # per batch instead of once per use (`hulk.validation.gx_memo`; the same result).
    with warnings.catch_warnings(), gx_memo.lean():
        warnings.simplefilter("ignore")
        outcome = validator.validate_expectation_suite(definition.suite, dict(parameters))
    run_id = RunIdentifier(run_name=batch, run_time=run_time)
    outcome.meta["validation_id"] = definition.id
    outcome.meta["checkpoint_id"] = checkpoint.id
    outcome.meta["run_id"] = run_id
    outcome.meta["validation_time"] = run_id.run_time
    outcome.meta["batch_parameters"] = {"dataframe": DATAFRAME_REPLACEMENT_STR}
    key = ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=definition.suite.name),
        run_id=run_id,
        batch_identifier=validator.active_batch_id,
    )
    return key, outcome


def _name_asset(result: Any, suite: str, batch: str) -> None:
    """Name the result's data asset and batch (the Data Docs' "Data asset"), e.g.
    ``logs day=2026-11-20``: a dataframe batch records none itself."""
    spec = result.meta.get("batch_spec")
    if not isinstance(spec, dict):
        spec = {}
    result.meta["batch_spec"] = {**spec, "data_asset_name": f"{_asset(suite)} {batch}"}


def _asset(suite: str) -> str:
    return suite.removeprefix(f"{DATASOURCE}.")


def _prune_results(context: Any, run_time: dt.datetime, days: int) -> None:
    """Keep the results of the newest `days` days with results before `run_time`'s day (that
    run makes the newest), drop the others."""
    store = context.validation_results_store
    keys = store.list_keys()

    def day(key: Any) -> dt.date:
        return key.run_id.run_time.date()

    earlier = sorted({day(k) for k in keys if day(k) < run_time.date()}, reverse=True)
    kept = set(earlier[: max(days - 1, 0)]) | {run_time.date()}
    for key in keys:
        if day(key) not in kept:
            store.remove_key(key)


def _expectation_ids(checkpoint: Any) -> list[str]:
    return [e.id for e in checkpoint.validation_definitions[0].suite.expectations]


_THREAD = threading.local()  # .sessions: this thread's cached sessions, by use
_PROJECT_LOCK = threading.Lock()  # GX's current project is one per process


def worker_session(run_time: dt.datetime, examples: int) -> GxSession:
    """This thread's in-memory session for batches validated on behalf of another session.

    Cached per thread (a new context and suite cost ~40 ms a batch) and made without changing
    the process's current GX project, which the caller's own session may rely on. Batches run
    through it with `run(..., keep=False)`, so it holds no results between them.
    """
    return _thread_session("worker", (run_time, examples), run_time, examples)


def scratch_session(suite: str, suite_key: Hashable, examples: int) -> GxSession:
    """This thread's in-memory session for validating with suite `suite` when nobody keeps
    the GX result (an inventory or link table checked on its own); run with ``keep=False``.

    Cached per thread and suite like `worker_session`, so that checking many tables builds
    the context and the suite once (~80 ms, a third of checking a small table);
    `suite_key` names what the suite's expectations are made from (the settings): another
    key starts a new session.
    """
    now = dt.datetime.now(dt.UTC)
    return _thread_session(f"scratch {suite}", (suite_key, examples), now, examples)


def _thread_session(slot: str, key: Hashable, run_time: dt.datetime, examples: int) -> GxSession:
    sessions: dict[str, tuple[Hashable, GxSession]] = _THREAD.__dict__.setdefault("sessions", {})
    cached = sessions.get(slot)
    if cached is None or cached[0] != key:
        from great_expectations.data_context.data_context.context_factory import project_manager
        from great_expectations.exceptions import DataContextRequiredError

        with _PROJECT_LOCK:
            try:
                current = project_manager.get_current_project()
            except DataContextRequiredError:
                current = None
            cached = sessions[slot] = (key, GxSession.ephemeral(run_time, examples))
            if current is not None:
                project_manager.set_project(current)
    return cached[1]


def _quiet(context: AbstractDataContext) -> None:
    """No usage statistics, and no tqdm progress bars from metric calculations."""
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    context.variables.config.analytics_enabled = False
    if getattr(context, "root_directory", None):  # a file-mode project: persist both
        context.variables.save()
