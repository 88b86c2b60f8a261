"""The ``nightly`` flow: the steps of hulk.steps.STEPS (nightly ones), in that order.

validate → ingest → graph → corpus (teacher labels of generated fleets) → prior → labels (the
fleet's own samples) → train (fine-tune, register in MLflow, gate) → assign (the ``assign``
flow: publish + artifacts) → evaluate. Each task runs one step through `hulk.steps.run`, the
function the DVC stages run too. Three steps fan out on a Dask task runner (one local cluster
for the run, or params ``flows.dask_address``): the corpus's teacher labels over its fleets
(`hulk.corpus.label_fleet`, one task per fleet; their outcomes go to the same corpus step), the
validation over the log's day partitions (the ``validate`` subflow runs the validate step with
one task per partition calling `hulk.validation.logs.validate_log_day`; the step merges their
outcomes in day order and writes what it always writes), and the teacher labels of the fleet's
own samples that are not cached yet (the ``fleet-labels`` subflow, one task per sample).

A data folder imported as a link table (``hulk import-hulk``: no raw logs) skips validate and
ingest with one line in the log (the import validated it) and goes on from the graph.

A validation error (any `hulk.errors.HulkError`) is never retried and fails the run before
anything is published: latest.json and the champion stay as they were, and the flow run's
message names the file and rule.

A data folder whose ``nightly`` lock another run holds past ``scheduler.lock_timeout_s`` (rule
``lock.timeout``; or a lock that cannot be taken at all, ``lock.unwritable``) is an expected
condition, not a crash: the run logs the one line naming the lock file and its holder and ends
``Failed`` with it as its message, without a traceback; called in-process (``hulk nightly``),
the flow raises the `hulk.errors.InputError` for the command line to report. So does a nightly
whose assign step (the ``assign`` subflow) is refused the data folder's ``assign`` or
``publish`` lock: the subflow ends as such (flows/assign.py), and the nightly after it, its
evaluate step not run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import State

from flows._common import brief, flow_settings, refused, retry_options, shared_dask_runners
from flows.assign import assign_flow
from hulk import corpus, steps
from hulk.data_folder import data_source, require_folder
from hulk.errors import InputError
from hulk.folder_lock import folder_lock, is_refusal
from hulk.jobs import require_jobs_file
from hulk.registry_tracking import require_reachable
from hulk.settings import Settings
from hulk.stages.corpus import corpus_is_current


@task(cache_policy=NO_CACHE)
def run_step(name: str, settings: Settings, **options: Any) -> dict[str, Any]:
    """One step of hulk.steps (the DVC stage of the same name runs the same function)."""
    return brief(steps.run(name, settings, **options).summary)


@task(name="label-fleet", cache_policy=NO_CACHE)
def label_fleet(seed: int, fleet: int, settings: Settings) -> dict[str, Any]:
    """Teacher labels of one corpus fleet (a pure function: any worker may run it)."""
    return corpus.label_fleet(seed, fleet, settings)


@flow(name="teacher-labels")
def teacher_labels(params: str = "params.yaml", data_dir: str | None = None) -> dict[int, Any]:
    """Every corpus fleet labelled, one task each, on this flow's task runner (Dask)."""
    settings = flow_settings(params, data_dir)
    futures = {
        fleet: label_fleet.submit(settings.seed, fleet, settings)
        for fleet in range(settings.corpus.fleets)
    }
    return {fleet: future.result() for fleet, future in futures.items()}


Day = TypeVar("Day")
Outcome = TypeVar("Outcome")


@task(name="validate-days", cache_policy=NO_CACHE)
def validate_days(work: Callable[[Day], Outcome], days: list[Day]) -> list[Outcome]:
    """A run of log partitions validated in turn (`validate_log_day`, a pure function: any
    worker may run it)."""
    return [work(day) for day in days]


@flow(name="validate")
def validate(params: str = "params.yaml", data_dir: str | None = None) -> dict[str, Any]:
    """The validate step, its log partitions in runs of `flows.days_per_task` days, one task
    per run on this flow's task runner (Dask)."""
    settings = flow_settings(params, data_dir)
    # The partitions' tasks read the files: they are retried as the step would be.
    retried = steps.BY_NAME["validate"].retried
    days_task = validate_days.with_options(**retry_options(settings.flows, retried))
    size = settings.flows.days_per_task

    def map_days(work: Callable[[Day], Outcome], days: Iterable[Day]) -> Iterator[Outcome]:
        days = list(days)
        runs = [days[start : start + size] for start in range(0, len(days), size)]
        futures = [days_task.submit(work, run) for run in runs]
        # In day order, whatever finishes first.
        return (outcome for future in futures for outcome in future.result())

    return brief(steps.run("validate", settings, map_days=map_days).summary)


@task(name="label-sample", cache_policy=NO_CACHE)
def label_sample(task: Any) -> dict[str, Any]:
    """The teacher label of one of the fleet's samples (a pure function: any worker may run it)."""
    from hulk.stages.fleet_labels import label_task

    return label_task(task)


@flow(name="fleet-labels")
def fleet_labels(params: str = "params.yaml", data_dir: str | None = None) -> dict[str, Any]:
    """The labels step, the samples not cached yet labelled one task each on this flow's task
    runner (Dask)."""
    settings = flow_settings(params, data_dir)

    def map_labels(work: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        futures = [label_sample.submit(task) for task in tasks]
        return (future.result() for future in futures)

    return brief(steps.run("labels", settings, map_labels=map_labels).summary)


@flow(name="nightly", log_prints=True)
def nightly(
    params: str = "params.yaml", data_dir: str | None = None
) -> dict[str, Any] | State[Any]:
    """Validate, ingest, graph, label, train/register/promote, assign/publish, evaluate.

    Returns what each step did; a ``Failed`` state when the data folder's nightly lock, or
    the assign step's lock, cannot be taken (module docstring)."""
    settings = flow_settings(params, data_dir)
    done: dict[str, Any] = {}
    try:
        require_folder(settings.data_dir)
        require_reachable(settings)  # a dead tracking server: now, not after the labelling
        require_jobs_file(settings.assign.jobs_file)  # the night ends by scheduling them
    except InputError as exc:  # a mistyped folder: one line, and no folder grown from it
        return refused(exc)
    with ExitStack() as held:
        # Two nightlies never write the data folder at once; an assign run in between takes
        # only the assign lock (hulk.folder_lock) and uses the champion as it was.
        try:
            timeout = settings.scheduler.lock_timeout_s
            held.enter_context(folder_lock(settings.data_dir, "nightly", timeout))
        except InputError as exc:  # another nightly holds the folder: expected, not a crash
            return refused(exc)
        # The fan-out steps share one Dask cluster (a local one lives as long as the run).
        fan_out_runner = held.enter_context(shared_dask_runners(settings.flows))
        try:
            _nightly_steps(params, data_dir, settings, done, fan_out_runner)
        except InputError as exc:  # the assign subflow was refused its lock, and said so
            if not is_refusal(exc):
                raise
            return refused(exc)
    return done


def _nightly_steps(
    params: str,
    data_dir: str | None,
    settings: Settings,
    done: dict[str, Any],
    fan_out_runner: Callable[[], Any],
) -> None:
    logger = get_run_logger()
    imported = data_source(settings.data_dir) == "link table"
    for step in steps.nightly_steps():
        started = time.perf_counter()
        options = retry_options(settings.flows, step.retried)
        if imported and step.name in ("validate", "ingest"):
            logger.info(
                "%s skipped: %s holds a link table and no raw logs (imported, validated then)",
                step.name,
                settings.data_dir,
            )
            continue
        if step.name == "assign":
            done[step.name] = assign_flow(params, data_dir)
        elif step.name == "validate":
            fan_out = validate.with_options(task_runner=fan_out_runner())
            done[step.name] = fan_out(params, data_dir)
        elif step.name == "labels":
            fan_out = fleet_labels.with_options(task_runner=fan_out_runner())
            done[step.name] = fan_out(params, data_dir)
        elif step.name == "corpus" and not corpus_is_current(settings):
            labels = teacher_labels.with_options(task_runner=fan_out_runner())
            outcomes = labels(params, data_dir)
            seconds = time.perf_counter() - started
            task_ = run_step.with_options(name=step.name, **options)
            done[step.name] = task_(step.name, settings, outcomes=outcomes, seconds=seconds)
        else:
            done[step.name] = run_step.with_options(name=step.name, **options)(step.name, settings)
        seconds = time.perf_counter() - started
        logger.info("%s done in %.1f s: %s", step.name, seconds, done[step.name])
    # In the project's own checkout: dvc.lock records what this run made (`dvc status` agrees).
    logger.info(steps.record_dvc_lock(settings, Path(params), list(done)))
