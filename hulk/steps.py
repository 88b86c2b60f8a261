"""The step graph of the nightly pipeline, defined once.

`STEPS` lists every step in order: the stage function that runs it (one module per step under
`hulk.stages`), what it reads (deps) and writes (outs), which params.yaml keys it uses, its
metrics and plots, and whether it touches files or the registry (then a flow retries it). Every
caller runs a step through `run`:

- ``dvc.yaml`` is generated from it (`dvc_yaml`, ``hulk dvc-yaml``); every stage's command is
  ``hulk stage NAME``; its code deps are the files the stage module imports
  (`hulk.code_deps.module_files`), so they cannot drift from the code;
- the Prefect ``nightly`` flow (flows/nightly.py) walks `nightly_steps` in the same order, each
  task calling `run` (the fan-out steps hand their per-fleet results to the same `run`);
- ``hulk stage NAME`` and the named commands (``hulk validate``, ``hulk ingest``, …) run one
  step by hand.

`run` calls the stage function and writes the step's metrics and plot data (small,
deterministic JSON / CSV under ``DATA/metrics``), so the CLI, DVC and Prefect report the same
figures: every figure of a step in ``DATA/metrics/details/NAME.json``, and for the steps with
headline figures (a few a user compares night to night) those alone in ``DATA/metrics/NAME.json``,
DVC's metrics file (``dvc metrics show`` stays one narrow table). Paths follow the settings
(``data_dir``, ``corpus.path``, ``assign.*``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from hulk import fileio, schemas
from hulk.code_deps import module_files
from hulk.data_folder import LEARNING_CURVE_CSV, LEARNING_CURVES_PNG, TRAINING_DIR, VALIDATED
from hulk.placements import LATEST
from hulk.settings import (
    CORPUS_IGNORES_GENERATE,
    AssignSettings,
    GenerateSettings,
    Settings,
)
from hulk.stages import BASELINE_SYSTEMS, ScheduledTimes, StepResult
from hulk.stages import assign as stage_assign
from hulk.stages import corpus as stage_corpus
from hulk.stages import evaluate as stage_evaluate
from hulk.stages import fleet_labels as stage_labels
from hulk.stages import generate as stage_generate
from hulk.stages import graph as stage_graph
from hulk.stages import ingest as stage_ingest
from hulk.stages import prior as stage_prior
from hulk.stages import train as stage_train
from hulk.stages import validate as stage_validate
from hulk.stages.assign import AssignSummary
from hulk.stages.evaluate import EvaluateSummary
from hulk.stages.validate import ValidateSummary

METRICS_DIR = "metrics"
DETAILS_DIR = "details"  # under METRICS_DIR: every figure of each step
ITERATION_TIMES = "iteration_times.csv"  # evaluate's plot data: job, system, iteration_s
PLOT_TEMPLATE_LOG_BARS = "bar_horizontal_log"  # .dvc/plots/<name>.json

# A step's figures from its result; None: the run published nothing its metrics describe, and
# they stay as they were (the step then declares them `persist_metrics`).
Metrics = Callable[[Settings, StepResult[Any]], dict[str, Any] | None]


@dataclass(frozen=True)
class Step:
    """One pipeline step: a DVC stage and a nightly-flow task."""

    name: str
    doc: str
    # The stage function: stage(settings, **options), or with `on_data_folder`
    # stage(data_dir, settings, **options) on the settings' data folder.
    stage: Callable[..., StepResult[Any]]
    deps: Callable[[Settings], list[str]]
    outs: Callable[[Settings], list[str]]
    params: tuple[str, ...]  # params.yaml keys read (a section name: the whole section)
    on_data_folder: bool = True
    metrics: Metrics | None = None  # DATA/metrics/details/NAME.json from the step's result
    headline: tuple[str, ...] = ()  # of those, DATA/metrics/NAME.json: DVC's metrics file
    persist: tuple[str, ...] = ()  # outs DVC must not delete before re-running (published)
    persist_cache: bool = False  # persisted outs also kept in DVC's cache (a label cache)
    # Its metrics files persist (DVC must not delete them before running): a run may leave them.
    persist_metrics: bool = False
    plots: Callable[[Settings], list[str]] = lambda s: []  # plot data (CSV)
    retried: bool = True  # touches files or the registry: a flow retries it with back-off
    nightly: bool = True  # part of the nightly flow (generate only makes the demo's data)

    @property
    def code(self) -> tuple[str, ...]:
        """The library files the step runs (its stage module and what that imports, within
        the package): a change to one re-runs the stage."""
        return module_files(self.stage.__module__)


def _data(settings: Settings, *parts: str) -> str:
    return Path(settings.data_dir, *parts).as_posix()


def metrics_path(settings: Settings, name: str) -> Path:
    """The step's headline figures (DVC's metrics file of the stage)."""
    return Path(settings.data_dir) / METRICS_DIR / f"{name}.json"


def details_path(settings: Settings, name: str) -> Path:
    """Every figure of the step."""
    return Path(settings.data_dir) / METRICS_DIR / DETAILS_DIR / f"{name}.json"


def _latest(settings: Settings) -> str:
    return (settings.assign.placements_dir / LATEST).as_posix()


def _prior(s: Settings) -> str:
    return stage_prior.prior_path(s).as_posix()


def _fleet(s: Settings) -> list[str]:
    return [_data(s, schemas.INVENTORY_FILE), _data(s, schemas.LINKS_FILE)]


# --- each step's metrics: a few figures of its result ---------------------------------------------


def _keys(*names: str) -> Metrics:
    """Metrics: these values of the step's summary (its `to_dict` keys)."""

    def metrics(settings: Settings, result: StepResult[Any]) -> dict[str, Any]:
        values = result.summary.to_dict()
        return {name: values[name] for name in names}

    return metrics


def _all_but(*names: str) -> Metrics:
    """Metrics: the step's summary without these values (run ids, wall-clock seconds)."""

    def metrics(settings: Settings, result: StepResult[Any]) -> dict[str, Any]:
        return {k: v for k, v in result.summary.to_dict().items() if k not in names}

    return metrics


def _validate_metrics(settings: Settings, result: StepResult[ValidateSummary]) -> dict[str, Any]:
    report = json.loads(Path(result.outputs["report"]).read_text())
    counts = report.get("counts", {})
    # Figures of the inputs only: how many days the cache held is the run's history (the
    # report has it), and would make DVC see a change where the inputs made none.
    keys = (
        "machines",
        "log_batches",
        "log_rows",
        "quarantined_rows",
        "errors",
        "warnings",
    )
    return {
        **{key: counts.get(key) for key in keys},
        "quarantined_by_rule": counts.get("quarantined_by_rule", {}),
    }


def _assign_metrics(settings: Settings, result: StepResult[AssignSummary]) -> dict[str, Any] | None:
    """The placements the data folder's latest.json holds: none from a run that did not replace
    it (a System A, B or C run that kept it while jobs run on the scheduler's placements, or a
    run written elsewhere with ``--out``), whose figures would describe another plan."""
    from hulk.placements import LATEST

    latest = result.outputs.get("latest")
    published = Path(settings.assign.placements_dir) / LATEST
    if result.summary.kept_latest or latest is None or latest.resolve() != published.resolve():
        return None
    jobs = result.summary.jobs
    return {
        "strategy": result.summary.strategy,
        "makespan_s": result.summary.makespan_s,
        "jobs": len(jobs),
        "placed": sum(j.status == "placed" for j in jobs),
        "queued": sum(j.status == "queued" for j in jobs),
        "machines_used": sum(len(j.machines) for j in jobs),
    }


def _evaluate_metrics(
    settings: Settings, result: StepResult[EvaluateSummary]
) -> dict[str, Any] | None:
    """Makespan, and per job the plan's iteration time and its speed-up over the best of A/B/C;
    also writes the plot data (job, system, iteration_s). None (the metrics stay as they were)
    for a file other than the published latest.json: the metrics are the published plan's."""
    if not result.summary.is_latest:
        return None
    rows, per_job = [], {}
    for job in result.summary.jobs:
        plan = job.iteration_s
        systems = [(name, job.baselines_s[name]) for name in BASELINE_SYSTEMS]
        baselines = [value for _, value in systems if value is not None]
        best = min(baselines) if baselines else None
        per_job[job.job] = {
            "iteration_s": plan,
            "best_baseline_s": best,
            "speedup": best / plan if best is not None and plan else None,
        }
        for system, value in (("plan", plan), *systems):
            rows.append(
                {
                    "bar": f"{job.job} {system}",
                    "job": job.job,
                    "system": system,
                    "iteration_s": value,
                }
            )
    fileio.write_csv(Path(settings.data_dir) / METRICS_DIR / ITERATION_TIMES, pd.DataFrame(rows))
    speedups = [job["speedup"] for job in per_job.values() if job["speedup"] is not None]
    return {
        "makespan_s": result.summary.makespan_s,
        # The placed job that gains least over the best of A/B/C (1: no better than it).
        "min_speedup": min(speedups) if speedups else None,
        "jobs": per_job,
    }


# The inventory's plausible compute capabilities: every step that reads the fleet checks them
# (`hulk.data_folder.load_frames`), so a narrower range stops it.
INVENTORY_RULES = "validate.compute_capability"

STEPS: tuple[Step, ...] = (
    Step(
        name="generate",
        stage=stage_generate.run,
        doc="synthetic inventory + day-partitioned latency logs (the embedded default)",
        deps=lambda s: [],
        outs=lambda s: [
            _data(s, schemas.INVENTORY_FILE),
            _data(s, schemas.LOGS_DIR),
            _data(s, schemas.GENERATION_FILE),
        ],
        params=("seed", "generate"),
        nightly=False,
    ),
    Step(
        name="validate",
        stage=stage_validate.run,
        metrics=_validate_metrics,
        headline=("quarantined_rows", "warnings"),
        doc="Great Expectations over inventory and logs; quarantine; Data Docs",
        deps=lambda s: [_data(s, schemas.INVENTORY_FILE), _data(s, schemas.LOGS_DIR)],
        outs=lambda s: [
            _data(s, schemas.QUARANTINE_FILE),
            _data(s, schemas.VALIDATION_DIR, VALIDATED),
            _data(s, schemas.VALIDATION_DIR, schemas.VALIDATED_DAYS),
        ],
        persist=(schemas.VALIDATED_DAYS,),
        # `hardware`: every machine's compute capability needs its peak figure.
        params=("validate", "ingest.window_days", "ingest.latency_probe_bytes", "hardware"),
    ),
    Step(
        name="ingest",
        stage=stage_ingest.run,
        metrics=_keys("links", "quarantined_rows"),
        doc="link table over the rolling window, without the quarantined rows",
        deps=lambda s: [
            _data(s, schemas.INVENTORY_FILE),
            _data(s, schemas.LOGS_DIR),
            _data(s, schemas.QUARANTINE_FILE),
            _data(s, schemas.VALIDATION_DIR, VALIDATED),
        ],
        outs=lambda s: [_data(s, schemas.LINKS_FILE)],
        params=("ingest", "validate"),
    ),
    Step(
        name="graph",
        stage=stage_graph.run,
        metrics=_keys("nodes", "links", "connected_components"),
        doc="fleet graph snapshot (networkx + PyTorch Geometric); warms assign's caches",
        # The step also fills the caches the next assign run reads (`hulk.stages.assign_caches`)
        # from the jobs file and `cost:`. They are neither outs nor what its outs depend on:
        # keyed by content, they are also written by the steps that read them (labels, assign,
        # evaluate), so a new jobs file or cost setting re-runs those steps, not this one.
        deps=_fleet,
        outs=lambda s: [_data(s, schemas.GRAPH_DIR)],
        params=("hardware", "graph", INVENTORY_RULES),
    ),
    Step(
        name="corpus",
        stage=stage_corpus.run,
        on_data_folder=False,
        metrics=_all_but("reused", "seed"),
        doc="teacher labels: generated fleets × job mixes, searched with the cost model",
        deps=lambda s: [],
        outs=lambda s: [
            s.corpus.path.as_posix(),
            s.corpus.path.with_suffix(".json").as_posix(),
        ],
        params=(
            "seed",
            "corpus",
            # The generator's network settings its fleets come from, not the demo data's own.
            *(
                f"generate.{name}"
                for name in GenerateSettings.model_fields
                if name not in CORPUS_IGNORES_GENERATE
            ),
            "teacher",
            "planner",
            "hardware",
            "graph",
        ),
    ),
    Step(
        name="prior",
        stage=stage_prior.run,
        on_data_folder=False,
        metrics=_keys("train_samples", "val_samples", "best_epoch"),
        doc="the prior: the GNN trained on the synthetic corpus (reused while it is unchanged)",
        deps=lambda s: [s.corpus.path.as_posix(), s.corpus.path.with_suffix(".json").as_posix()],
        outs=lambda s: [_prior(s), Path(_prior(s)).with_suffix(".json").as_posix()],
        params=("seed", "model", "train"),
    ),
    Step(
        name="labels",
        stage=stage_labels.run,
        # Not how many labels the cache held: the run's history, not its inputs (DVC would see
        # a change in a second run on the same inputs).
        metrics=_all_but("seconds", "cached", "labelled"),
        doc="samples of the data folder's own fleet, teacher-labelled (cached by content)",
        deps=lambda s: [
            *_fleet(s),
            _data(s, schemas.LOGS_DIR),
            _data(s, schemas.QUARANTINE_FILE),
            _data(s, schemas.VALIDATION_DIR, VALIDATED),
            s.assign.jobs_file.as_posix(),
        ],
        outs=lambda s: [_data(s, stage_labels.LABELS_DIR)],
        persist=(stage_labels.LABELS_DIR,),
        persist_cache=True,
        params=(
            "seed",
            "fleet_samples",
            # The corpus's teacher budget and job perturbation (`hulk.corpus.corpus_teacher`,
            # `perturbed_job`), not its fleets or workers.
            "corpus.max_evaluations",
            "corpus.time_budget_s",
            "corpus.params_scale",
            "corpus.batch_scale",
            INVENTORY_RULES,
            "ingest",
            "teacher",
            "planner",
            "hardware",
            "graph",
            "cost",
        ),
    ),
    Step(
        name="train",
        stage=stage_train.finetune,
        metrics=_all_but("run_id", "decision", "eval_set"),
        headline=(stage_train.GATE_METRIC, "test/node_accuracy"),
        doc="fine-tune on the fleet's samples, score with the champion on one set, register, gate",
        deps=lambda s: [
            s.corpus.path.as_posix(),
            _prior(s),
            _data(s, stage_labels.LABELS_DIR),
            *_fleet(s),
            _data(s, schemas.GRAPH_DIR),  # the fleet's graph the model is scored on
        ],
        outs=lambda s: [_data(s, TRAINING_DIR, LEARNING_CURVES_PNG)],
        plots=lambda s: [_data(s, TRAINING_DIR, LEARNING_CURVE_CSV)],
        params=(
            "seed",
            "model",
            "train",
            "finetune",
            "teacher",
            "planner",
            "hardware",
            "graph",
            "cost",
            "mlflow",
            INVENTORY_RULES,
            # The GNN strategy's settings: the gate scores the model through it.
            *(f"assign.{name}" for name in AssignSettings.model_fields if name.startswith("gnn_")),
        ),
    ),
    Step(
        name="assign",
        stage=stage_assign.run,
        metrics=_assign_metrics,
        doc="place the upcoming jobs (champion GNN, else the teacher); publish latest.json",
        deps=lambda s: [
            *_fleet(s),
            s.assign.jobs_file.as_posix(),
            details_path(s, "train").as_posix(),
        ],
        outs=lambda s: [_latest(s)],
        persist=(LATEST,),
        persist_metrics=True,  # with latest.json: a run that keeps it keeps its figures
        params=(
            "seed",
            "assign",
            "scheduler",
            "planner",
            "teacher",
            "hardware",
            "graph",
            "cost",
            "mlflow",
            INVENTORY_RULES,
        ),
    ),
    Step(
        name="evaluate",
        stage=stage_evaluate.run,
        metrics=_evaluate_metrics,
        headline=("makespan_s", "min_speedup"),
        doc="cost table and plot of the published placements against Systems A, B, C",
        deps=lambda s: [_latest(s), *_fleet(s)],
        outs=lambda s: [(s.assign.placements_dir / LATEST).with_suffix(".png").as_posix()],
        plots=lambda s: [_data(s, METRICS_DIR, ITERATION_TIMES)],
        params=("hardware", "graph", "cost", INVENTORY_RULES),
        retried=False,
    ),
)

BY_NAME = {step.name: step for step in STEPS}


def nightly_steps() -> list[Step]:
    """The nightly flow's steps, in the order of `STEPS`."""
    return [step for step in STEPS if step.nightly]


# --- running a step -----------------------------------------------------------------------------


def _write_json(path: Path, record: dict[str, Any]) -> None:
    text = json.dumps(_finite(record), indent=2, sort_keys=True, allow_nan=False)
    fileio.write_text(path, text + "\n")


def _finite(value: Any) -> Any:
    """JSON-safe: non-finite floats become None (DVC and json reject NaN)."""
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run(name: str, settings: Settings, **options: Any) -> StepResult[Any]:
    """Run step `name` on the data folder of `settings` and write its metrics (atomically),
    unless the step's `Metrics` says the run published nothing they describe (``None``: an
    assign run of System A, B or C that kept latest.json); then they stay as they were.

    `options` go to the stage function (``progress``, ``now``; for ``corpus`` also
    ``outcomes`` and ``seconds``: fleets labelled elsewhere; for ``validate`` also
    ``map_days``: how the log partitions are run, e.g. on the flow's Dask workers; the named
    commands' options, e.g. ``hulk ingest --logs``). Raises what the step raises
    (`hulk.errors.HulkError` for bad input) before its metrics are written.
    """
    if name not in BY_NAME:
        raise KeyError(f"no step {name!r}; steps: {', '.join(BY_NAME)}")
    step = BY_NAME[name]
    if step.on_data_folder:
        result = step.stage(Path(settings.data_dir), settings, **options)
    else:
        result = step.stage(settings, **options)
    figures = step.metrics(settings, result) if step.metrics is not None else None
    if figures is not None:  # None: the step's metrics files stay as they were
        path = details_path(settings, name)
        _write_json(path, figures)
        result.outputs[f"{name}_metrics"] = path
        if step.headline:
            path = metrics_path(settings, name)
            _write_json(path, {key: figures.get(key) for key in step.headline})
            result.outputs[f"{name}_headline"] = path
    return result


# --- dvc.yaml -----------------------------------------------------------------------------------

HEADER = """\
# Generated from hulk/steps.py by `hulk dvc-yaml`: edit the step graph there, not here.
# Every stage runs `hulk stage NAME` (hulk.steps.run -> the step's stage function, hulk/stages/).
# Side effects DVC does not track: the MLflow database and artifacts (train registers and
# promotes a model; assign uses the champion), the validation report and Data Docs. Not a dep
# either: the newest placements files, whose jobs labels draws (assign writes them, downstream).
"""


def dvc_stages(settings: Settings) -> dict[str, Any]:
    """The ``dvc.yaml`` document for `settings` (paths) as a dict."""
    stages: dict[str, Any] = {}
    for step in STEPS:
        stage: dict[str, Any] = {"cmd": f"hulk stage {step.name}", "desc": step.doc}
        deps = [*step.code, *step.deps(settings)]
        if deps:
            stage["deps"] = deps
        stage["params"] = list(step.params)
        outs: list[Any] = []
        for out in step.outs(settings):
            if Path(out).name in step.persist:
                outs.append({out: {"persist": True, "cache": step.persist_cache}})
            else:
                outs.append(out)
        # Plot data are small outs kept out of the cache; the top-level `plots` draw them.
        outs += [{p: {"cache": False}} for p in step.plots(settings)]
        kept = {"persist": True} if step.persist_metrics else {}
        if step.metrics is not None:
            outs.append({details_path(settings, step.name).as_posix(): {**kept, "cache": False}})
        stage["outs"] = outs
        if step.headline:
            headline = metrics_path(settings, step.name).as_posix()
            stage["metrics"] = [{headline: {**kept, "cache": False}}]
        stages[step.name] = stage
    curve = _data(settings, TRAINING_DIR, LEARNING_CURVE_CSV)
    times = _data(settings, METRICS_DIR, ITERATION_TIMES)
    return {
        "stages": stages,
        "plots": [
            {
                "learning curve (weighted cross-entropy)": {
                    "template": "linear",
                    "x": "epoch",
                    "y": {curve: ["train_loss", "val_loss"]},
                }
            },
            {
                "node accuracy": {
                    "template": "linear",
                    "x": "epoch",
                    "y": {curve: ["train_accuracy", "val_accuracy"]},
                }
            },
            {
                # Systems A-C run up to 10^6 s where plans take seconds: a log axis
                # (.dvc/plots/bar_horizontal_log.json, DVC's bar_horizontal with a log x scale).
                "seconds per iteration: plan vs Systems A, B, C": {
                    "template": PLOT_TEMPLATE_LOG_BARS,
                    "x": "iteration_s",
                    "y": {times: "bar"},
                    "x_label": "seconds per iteration (log scale)",
                    "y_label": "job, system",
                }
            },
        ],
    }


def dvc_yaml(settings: Settings) -> str:
    """The text of ``dvc.yaml``: a header comment and `dvc_stages`."""
    body = yaml.safe_dump(dvc_stages(settings), sort_keys=False, width=100, allow_unicode=True)
    return HEADER + body


def write_dvc_yaml(settings: Settings, path: Path = Path("dvc.yaml")) -> Path:
    """Write ``dvc.yaml`` atomically (from `dvc_yaml`)."""
    fileio.write_text(path, dvc_yaml(settings))
    return path


# --- dvc.lock after a run outside DVC ----------------------------------------------------------


def record_dvc_lock(settings: Settings, params_file: Path, names: Sequence[str]) -> str:
    """Record the steps `names`, just run outside DVC (``hulk run``, the nightly flow), in
    ``dvc.lock`` as ``dvc repro`` would have: ``dvc commit --force`` of those stages (their
    deps', params' and outs' hashes now; outs cached as DVC caches them). Afterwards
    ``dvc status`` has nothing to report for them and ``dvc repro`` re-runs none of them.

    Only when the run is the DVC project's own: `params_file` is ``params.yaml`` beside
    ``dvc.yaml`` and ``.dvc/`` in the current folder, and ``dvc.yaml`` is the one these
    settings generate (same data folder and paths). Returns a line for the log saying what
    was recorded, or why nothing was.
    """
    root = Path.cwd()
    params_file = Path(params_file)
    if not ((root / ".dvc").is_dir() and (root / "dvc.yaml").is_file()):
        return "dvc.lock: no DVC project in the current folder, nothing recorded"
    if params_file.resolve() != (root / "params.yaml").resolve():
        return f"dvc.lock: the run read {params_file}, not the project's params.yaml: not recorded"
    if (root / "dvc.yaml").read_text(encoding="utf-8") != dvc_yaml(settings):
        return "dvc.lock: dvc.yaml does not describe this run's data folder: not recorded"
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    stages = [name for name in BY_NAME if name in names]  # in pipeline order
    dvc_logger = logging.getLogger("dvc")
    level = dvc_logger.level
    dvc_logger.setLevel(logging.WARNING)  # not a line per stage: the returned line says it
    try:
        with Repo(str(root)) as repo:
            for name in stages:
                repo.commit(name, force=True)
    except DvcException as exc:  # bookkeeping: never fails a run that has published
        return f"dvc.lock: not recorded ({type(exc).__name__}: {exc})"
    finally:
        dvc_logger.setLevel(level)
    return f"dvc.lock: recorded {', '.join(stages)}"


# --- reporting a published placements file --------------------------------------------------------


@dataclass(frozen=True)
class PlacementsRow:
    """One job of a published placements document, as its report shows it."""

    job: str
    status: str
    machines: int  # how many
    replicas: int
    stages: int  # per replica
    iteration_s: float | None  # 4 significant digits; None: no plan
    baselines_s: dict[str, float | None]  # Systems A, B, C on the whole fleet; None: cannot
    scheduled: ScheduledTimes | None  # the scheduler's estimates (UTC); None: not scheduled
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """The row of the assign flow's Prefect table artifact."""
        row: dict[str, Any] = {
            "job": self.job,
            "status": self.status,
            "machines": self.machines,
            "replicas": self.replicas,
            "stages": self.stages,
            "iteration_s": self.iteration_s,
            **{f"{name}_s": self.baselines_s[name] for name in BASELINE_SYSTEMS},
        }
        if self.scheduled is not None:
            row.update(asdict(self.scheduled))
        row["reason"] = self.reason
        return row


def placements_rows(doc: dict[str, Any]) -> list[PlacementsRow]:
    """Per job of a placements document: machines, stages, seconds per iteration vs A/B/C.

    The rows of the assign flow's Prefect table artifact (and its markdown twin in MLflow).
    """
    rows = []
    for job in doc.get("jobs", []):
        replicas = job.get("replicas") or []
        estimate = job.get("estimate") or {}
        baselines = job.get("baselines") or {}
        systems: dict[str, float | None] = {}
        for name in BASELINE_SYSTEMS:
            base = baselines.get(name) or {}
            systems[name] = _round(base.get("iteration_s")) if base.get("feasible") else None
        scheduled = None
        if "action" in job:
            scheduled = ScheduledTimes(job["action"], job.get("start_at"), job.get("finish_at"))
        rows.append(
            PlacementsRow(
                job=job["job"],
                status=job["status"],
                machines=len(job.get("nodes") or []),
                replicas=len(replicas),
                stages=len(replicas[0]["stages"]) if replicas else 0,
                iteration_s=_round(estimate.get("iteration_s")),
                baselines_s=systems,
                scheduled=scheduled,
                reason=job.get("reason"),
            )
        )
    return rows


def _round(value: Any) -> float | None:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(f"{value:.4g}")


def _queue_markdown(queue: Any) -> list[str]:
    if not isinstance(queue, dict):
        return []
    mean = queue.get("mean_completion_s")
    mean_text = "-" if mean is None else f"{mean / 3600:.1f} h"
    return [
        f"- queue: mean completion {mean_text}, last finish {queue.get('ends_at') or '-'}, "
        f"{queue.get('missed_deadlines', 0)} missed deadline(s)"
    ]


def _seconds_text(value: float | None) -> str:
    """A table's seconds: 193,400 rather than 193,400.0 (the values have 4 significant digits)."""
    if value is None:
        return "-"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


def placements_markdown(doc: dict[str, Any]) -> str:
    """A markdown report of a placements document: header, per-job table, makespan."""
    model = doc.get("model") or {}
    model_text = (
        f"{model.get('name')} v{model.get('version')} ({model.get('alias')})" if model else "none"
    )
    lines = [
        f"# Placements {doc.get('run_id')}",
        "",
        f"- strategy: **{doc.get('strategy')}**, model: {model_text}",
        f"- fleet: {doc.get('fleet', {}).get('nodes')} machines, snapshot "
        f"`{str(doc.get('fleet', {}).get('snapshot'))[:12]}`",
        f"- makespan: **{_round(doc.get('makespan_s'))} s** per iteration",
        *_queue_markdown(doc.get("queue")),
        "",
        "Seconds per training iteration; A, B, C are the paper's baselines over the whole fleet.",
        "",
        "| job | status | machines | replicas × stages | plan s | A s | B s | C s |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    rows = placements_rows(doc)
    for row in rows:
        seconds = (row.iteration_s, *(row.baselines_s[name] for name in BASELINE_SYSTEMS))
        cells = [
            row.job,
            row.status,
            str(row.machines),
            f"{row.replicas} × {row.stages}",
            *(_seconds_text(value) for value in seconds),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    times = [
        f"- {row.job}: {row.scheduled.action}, start {row.scheduled.start_at or '-'}, "
        f"finish {row.scheduled.finish_at or '-'}"
        for row in rows
        if row.scheduled is not None
    ]
    if times:
        lines += ["", "Estimated start and finish (UTC):", "", *times]
    reasons = [f"- {row.job}: {row.reason}" for row in rows if row.reason]
    if reasons:
        lines += ["", *reasons]
    return "\n".join(lines) + "\n"
