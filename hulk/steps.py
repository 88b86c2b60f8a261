"""The step graph of the nightly pipeline, defined once.

`STEPS` lists every step in order: what it reads (deps), writes (outs), which params.yaml keys it
uses, its metrics and plots, and whether it touches files or the registry (then a flow retries
it). Three callers use this one definition:

- ``dvc.yaml`` is generated from it (`dvc_yaml`, ``hulk dvc-yaml``); every stage's command is
  ``hulk stage NAME``, which calls `run`;
- the Prefect ``nightly`` flow (flows/nightly.py) walks `nightly_steps` in the same order, each
  task calling `run` (the fan-out steps hand their per-fleet results to the same `run`);
- ``hulk stage NAME`` runs one step by hand.

Each step holds its runner (`Step.runner`: one library call — a `hulk.pipeline` function or a
`hulk.stages` module's — and the step's metrics); `run` calls it and writes the metrics and
plot data (small, deterministic JSON / CSV under ``DATA/metrics``), so DVC and Prefect report
the same figures. Paths follow the settings (``data_dir``, ``corpus.path``, ``assign.*``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from hulk import io, pipeline, schemas
from hulk.settings import Settings
from hulk.stages import fleet_labels as stage_labels
from hulk.stages import prior as stage_prior
from hulk.stages import train as stage_train

METRICS_DIR = "metrics"
ITERATION_TIMES = "iteration_times.csv"  # evaluate's plot data: job, system, iteration_s


@dataclass(frozen=True)
class Step:
    """One pipeline step: a DVC stage and a nightly-flow task."""

    name: str
    doc: str
    # Runs the step on the data folder of the settings: (result, its metrics or None).
    runner: Callable[..., tuple[pipeline.StepResult, dict[str, Any] | None]]  # `StepOutput`
    deps: Callable[[Settings], list[str]]
    outs: Callable[[Settings], list[str]]
    params: tuple[str, ...]  # params.yaml keys read (a section name: the whole section)
    code: tuple[str, ...]  # library files the step runs: a change re-runs the stage
    metrics: bool = True  # writes DATA/metrics/NAME.json
    persist: tuple[str, ...] = ()  # outs DVC must not delete before re-running (published)
    persist_cache: bool = False  # persisted outs also kept in DVC's cache (a label cache)
    plots: Callable[[Settings], list[str]] = lambda s: []  # plot data (CSV)
    retried: bool = True  # touches files or the registry: a flow retries it with back-off
    nightly: bool = True  # part of the nightly flow (generate only makes the demo's data)


def _data(settings: Settings, *parts: str) -> str:
    return Path(settings.data_dir, *parts).as_posix()


def metrics_path(settings: Settings, name: str) -> Path:
    return Path(settings.data_dir) / METRICS_DIR / f"{name}.json"


def _latest(settings: Settings) -> str:
    return (settings.assign.placements_dir / "latest.json").as_posix()


def _prior(s: Settings) -> str:
    return s.corpus.path.with_name("prior.pt").as_posix()


def _fleet(s: Settings) -> list[str]:
    return [_data(s, schemas.INVENTORY_FILE), _data(s, schemas.LINKS_FILE)]


# --- what each step runs: one library call and its metrics ---------------------------------------

StepOutput = tuple[pipeline.StepResult, dict[str, Any] | None]


def _keys(summary: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: summary[name] for name in names}


def _run_generate(settings: Settings, **options: Any) -> StepOutput:
    return pipeline.generate(Path(settings.data_dir), settings, **options), None


def _run_validate(settings: Settings, **options: Any) -> StepOutput:
    result = pipeline.validate(Path(settings.data_dir), settings, **options)
    return result, _validate_metrics(settings, result)


def _run_ingest(settings: Settings, **options: Any) -> StepOutput:
    data = Path(settings.data_dir)
    result = pipeline.ingest(
        data / schemas.LOGS_DIR, data / schemas.INVENTORY_FILE, data, settings, **options
    )
    return result, _keys(result.summary, "links", "quarantined_rows")


def _run_graph(settings: Settings, **options: Any) -> StepOutput:
    result = pipeline.graph(Path(settings.data_dir), settings)
    return result, _keys(result.summary, "nodes", "links", "connected_components")


def _run_corpus(settings: Settings, **options: Any) -> StepOutput:
    result = pipeline.corpus(settings, workers=settings.corpus.workers, **options)
    return result, {k: v for k, v in result.summary.items() if k not in ("reused", "seed")}


def _run_prior(settings: Settings, **options: Any) -> StepOutput:
    result = stage_prior.run(settings)
    return result, _keys(result.summary, "train_samples", "val_samples", "best_epoch")


def _run_labels(settings: Settings, **options: Any) -> StepOutput:
    result = stage_labels.run(Path(settings.data_dir), settings, **options)
    return result, {k: v for k, v in result.summary.items() if k != "seconds"}


def _run_train(settings: Settings, **options: Any) -> StepOutput:
    result = stage_train.finetune(Path(settings.data_dir), settings, **options)
    return result, _train_metrics(settings, result)


def _run_assign(settings: Settings, **options: Any) -> StepOutput:
    result = pipeline.assign(Path(settings.data_dir), settings, **options)
    return result, _assign_metrics(settings, result)


def _run_evaluate(settings: Settings, **options: Any) -> StepOutput:
    latest = settings.assign.placements_dir / "latest.json"
    result = pipeline.evaluate(latest, Path(settings.data_dir), settings, **options)
    return result, _evaluate_metrics(settings, result)


STEPS: tuple[Step, ...] = (
    Step(
        name="generate",
        runner=_run_generate,
        doc="synthetic inventory + day-partitioned latency logs (the embedded default)",
        deps=lambda s: [],
        outs=lambda s: [_data(s, schemas.INVENTORY_FILE), _data(s, schemas.LOGS_DIR)],
        params=("seed", "generate"),
        code=("hulk/generate.py", "hulk/presets.py", "hulk/geo.py"),
        metrics=False,
        nightly=False,
    ),
    Step(
        name="validate",
        runner=_run_validate,
        doc="Great Expectations over inventory and logs; quarantine; Data Docs",
        deps=lambda s: [_data(s, schemas.INVENTORY_FILE), _data(s, schemas.LOGS_DIR)],
        outs=lambda s: [
            _data(s, schemas.QUARANTINE_FILE),
            _data(s, schemas.VALIDATION_DIR, pipeline.VALIDATED),
        ],
        params=("validate", "ingest.window_days", "ingest.latency_probe_bytes"),
        code=("hulk/validation",),
    ),
    Step(
        name="ingest",
        runner=_run_ingest,
        doc="link table over the rolling window, without the quarantined rows",
        deps=lambda s: [
            _data(s, schemas.INVENTORY_FILE),
            _data(s, schemas.LOGS_DIR),
            _data(s, schemas.QUARANTINE_FILE),
            _data(s, schemas.VALIDATION_DIR, pipeline.VALIDATED),
        ],
        outs=lambda s: [_data(s, schemas.LINKS_FILE)],
        params=("ingest", "validate"),
        code=("hulk/ingest.py", "hulk/validation"),
    ),
    Step(
        name="graph",
        runner=_run_graph,
        doc="fleet graph snapshot (networkx + PyTorch Geometric)",
        deps=_fleet,
        outs=lambda s: [_data(s, schemas.GRAPH_DIR)],
        params=("hardware", "graph"),
        code=("hulk/graph.py", "hulk/hardware.py"),
    ),
    Step(
        name="corpus",
        runner=_run_corpus,
        doc="teacher labels: generated fleets × job mixes, searched with the cost model",
        deps=lambda s: [],
        outs=lambda s: [
            s.corpus.path.as_posix(),
            s.corpus.path.with_suffix(".json").as_posix(),
        ],
        params=("seed", "corpus", "generate", "teacher", "planner", "hardware", "graph"),
        code=(
            "hulk/corpus.py",
            "hulk/teacher.py",
            "hulk/planner.py",
            "hulk/cost.py",
            "hulk/hardware.py",
            "hulk/tours.py",
        ),
    ),
    Step(
        name="prior",
        runner=_run_prior,
        doc="the prior: the GNN trained on the synthetic corpus (reused while it is unchanged)",
        deps=lambda s: [s.corpus.path.as_posix(), s.corpus.path.with_suffix(".json").as_posix()],
        outs=lambda s: [_prior(s), Path(_prior(s)).with_suffix(".json").as_posix()],
        params=("seed", "model", "train"),
        code=("hulk/stages/prior.py", "hulk/train.py", "hulk/model.py"),
    ),
    Step(
        name="labels",
        runner=_run_labels,
        doc="samples of the data folder's own fleet, teacher-labelled (cached by content)",
        deps=lambda s: [
            *_fleet(s),
            _data(s, schemas.LOGS_DIR),
            _data(s, schemas.QUARANTINE_FILE),
            _data(s, schemas.VALIDATION_DIR, pipeline.VALIDATED),
            s.assign.jobs_file.as_posix(),
        ],
        outs=lambda s: [_data(s, "labels")],
        persist=("labels",),
        persist_cache=True,
        params=(
            "seed",
            "fleet_samples",
            "corpus",
            "ingest",
            "teacher",
            "planner",
            "hardware",
            "graph",
        ),
        code=(
            "hulk/stages/fleet_labels.py",
            "hulk/fleet_samples.py",
            "hulk/fleet_labels.py",
            "hulk/teacher.py",
            "hulk/planner.py",
            "hulk/cost.py",
        ),
    ),
    Step(
        name="train",
        runner=_run_train,
        doc="fine-tune on the fleet's samples, score with the champion on one set, register, gate",
        deps=lambda s: [
            s.corpus.path.as_posix(),
            _prior(s),
            _data(s, "labels"),
            *_fleet(s),
        ],
        outs=lambda s: [_data(s, "training", "learning_curves.png")],
        plots=lambda s: [_data(s, "training", pipeline.LEARNING_CURVE_CSV)],
        params=(
            "seed",
            "model",
            "train",
            "finetune",
            "teacher",
            "planner",
            "hardware",
            "graph",
            "mlflow",
            "assign.gnn_fallback_ratio",
        ),
        code=(
            "hulk/stages/train.py",
            "hulk/train.py",
            "hulk/model.py",
            "hulk/gnn_eval.py",
            "hulk/gnn.py",
            "hulk/algorithm1.py",
            "hulk/registry.py",
        ),
    ),
    Step(
        name="assign",
        runner=_run_assign,
        doc="place the upcoming jobs (champion GNN, else the teacher); publish latest.json",
        deps=lambda s: [
            *_fleet(s),
            s.assign.jobs_file.as_posix(),
            metrics_path(s, "train").as_posix(),
        ],
        outs=lambda s: [_latest(s)],
        persist=("latest.json",),
        params=("seed", "assign", "planner", "teacher", "hardware", "graph", "mlflow"),
        code=("hulk/assign.py", "hulk/gnn.py", "hulk/algorithm1.py", "hulk/placements.py"),
    ),
    Step(
        name="evaluate",
        runner=_run_evaluate,
        doc="cost table and plot of the published placements against Systems A, B, C",
        deps=lambda s: [_latest(s), *_fleet(s)],
        outs=lambda s: [(s.assign.placements_dir / "latest.png").as_posix()],
        plots=lambda s: [_data(s, METRICS_DIR, ITERATION_TIMES)],
        params=("hardware", "graph"),
        code=(
            "hulk/evaluate.py",
            "hulk/cost.py",
            "hulk/hardware.py",
            "hulk/tours.py",
            "hulk/baselines.py",
        ),
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
    io.write_text(path, text + "\n")


def _finite(value: Any) -> Any:
    """JSON-safe: non-finite floats become None (DVC and json reject NaN)."""
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _validate_metrics(settings: Settings, result: pipeline.StepResult) -> dict[str, Any]:
    report = json.loads(Path(result.outputs["report"]).read_text())
    counts = report.get("counts", {})
    keys = ("machines", "log_batches", "log_rows", "quarantined_rows", "errors", "warnings")
    return {
        **{key: counts.get(key) for key in keys},
        "quarantined_by_rule": counts.get("quarantined_by_rule", {}),
    }


def _train_metrics(settings: Settings, result: pipeline.StepResult) -> dict[str, Any]:
    return {k: v for k, v in result.summary.items() if k not in ("run_id", "decision", "eval_set")}


def _assign_metrics(settings: Settings, result: pipeline.StepResult) -> dict[str, Any]:
    jobs = result.summary["jobs"]
    return {
        "strategy": result.summary["strategy"],
        "makespan_s": result.summary["makespan_s"],
        "jobs": len(jobs),
        "placed": sum(j["status"] == "placed" for j in jobs),
        "queued": sum(j["status"] == "queued" for j in jobs),
        "machines_used": sum(len(j["machines"]) for j in jobs),
    }


def _evaluate_metrics(settings: Settings, result: pipeline.StepResult) -> dict[str, Any]:
    """Makespan, and per job the plan's iteration time and its speed-up over the best of A/B/C;
    also writes the plot data (job, system, iteration_s)."""
    rows, per_job = [], {}
    for job in result.summary["jobs"]:
        plan = job["iteration_s"]
        baselines = [job[f"{name}_s"] for name in "ABC" if job[f"{name}_s"] is not None]
        best = min(baselines) if baselines else None
        per_job[job["job"]] = {
            "iteration_s": plan,
            "best_baseline_s": best,
            "speedup": best / plan if best is not None and plan else None,
        }
        for system, value in (("plan", plan), *((n, job[f"{n}_s"]) for n in "ABC")):
            rows.append(
                {
                    "bar": f"{job['job']} {system}",
                    "job": job["job"],
                    "system": system,
                    "iteration_s": value,
                }
            )
    io.write_csv(Path(settings.data_dir) / METRICS_DIR / ITERATION_TIMES, pd.DataFrame(rows))
    return {"makespan_s": result.summary["makespan_s"], "jobs": per_job}


def run(name: str, settings: Settings, **options: Any) -> pipeline.StepResult:
    """Run step `name` on the data folder of `settings` and write its metrics.

    `options` go to the pipeline function (``progress``, ``now``; for ``corpus`` also
    ``outcomes`` and ``seconds``: fleets labelled elsewhere; for ``validate`` also
    ``map_days``: how the log partitions are run, e.g. on the flow's Dask workers). Raises
    what the step raises (`hulk.errors.HulkError` for bad input) before its metrics are written.
    """
    if name not in BY_NAME:
        raise KeyError(f"no step {name!r}; steps: {', '.join(BY_NAME)}")
    result, metrics = BY_NAME[name].runner(settings, **options)
    if metrics is not None:
        path = metrics_path(settings, name)
        _write_json(path, metrics)
        result.outputs[f"{name}_metrics"] = path
    return result


# --- dvc.yaml -----------------------------------------------------------------------------------

HEADER = """\
# Generated from hulk/steps.py by `hulk dvc-yaml`: edit the step graph there, not here.
# Every stage runs `hulk stage NAME` (hulk.steps.run -> the step's runner: one library call).
# Side effects DVC does not track: the MLflow database and artifacts (train registers and
# promotes a model; assign uses the champion), the validation report and Data Docs.
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
        stage["outs"] = outs
        if step.metrics:
            stage["metrics"] = [{metrics_path(settings, step.name).as_posix(): {"cache": False}}]
        stages[step.name] = stage
    curve = _data(settings, "training", pipeline.LEARNING_CURVE_CSV)
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
                "seconds per iteration: plan vs Systems A, B, C": {
                    "template": "bar_horizontal",
                    "x": "iteration_s",
                    "y": {times: "bar"},
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
    io.write_text(path, dvc_yaml(settings))
    return path


# --- reporting a published placements file --------------------------------------------------------


def placements_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per job of a placements document: machines, stages, seconds per iteration vs A/B/C.

    The rows of the assign flow's Prefect table artifact (and its markdown twin in MLflow).
    """
    rows = []
    for job in doc.get("jobs", []):
        replicas = job.get("replicas") or []
        stages = len(replicas[0]["stages"]) if replicas else 0
        estimate = job.get("estimate") or {}
        baselines = job.get("baselines") or {}
        row = {
            "job": job["job"],
            "status": job["status"],
            "machines": len(job.get("nodes") or []),
            "replicas": len(replicas),
            "stages": stages,
            "iteration_s": _round(estimate.get("iteration_s")),
        }
        for name in ("A", "B", "C"):
            base = baselines.get(name) or {}
            row[f"{name}_s"] = _round(base.get("iteration_s")) if base.get("feasible") else None
        row["reason"] = job.get("reason")
        rows.append(row)
    return rows


def _round(value: Any) -> float | None:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(f"{value:.4g}")


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
        "",
        "Seconds per training iteration; A, B, C are the paper's baselines over the whole fleet.",
        "",
        "| job | status | machines | replicas × stages | plan s | A s | B s | C s |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in placements_rows(doc):
        cells = [
            row["job"],
            row["status"],
            str(row["machines"]),
            f"{row['replicas']} × {row['stages']}",
            *(
                "-" if row[key] is None else f"{row[key]:,}"
                for key in ("iteration_s", "A_s", "B_s", "C_s")
            ),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    reasons = [f"- {row['job']}: {row['reason']}" for row in placements_rows(doc) if row["reason"]]
    if reasons:
        lines += ["", *reasons]
    return "\n".join(lines) + "\n"
