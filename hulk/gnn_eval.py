"""How good the GNN's placements are on held-out fleets, measured against the teacher's.

For every sample of a split (test by default), the fleet is rebuilt from the corpus manifest
(`hulk.corpus.corpus_fleet` is a pure function of the corpus seed and fleet id), the model's
probabilities go through the GNN strategy (`hulk.gnn.gnn_placements`: Algorithm 1, planner,
quick check) and the result is compared with the teacher's labels and plans:

* ``node_accuracy`` — active machines whose most likely class is the teacher's label;
* ``plan_cost_ratio_makespan`` — GNN makespan / teacher makespan, averaged over samples where
  the GNN's own plan stood (a fallback uses the teacher's plan: ratio 1 by construction, so
  those samples are counted apart in ``fallback_rate``);
* ``plan_cost_ratio_model`` — the same ratio for the model's own plans (Algorithm 1, the
  planner and the idle offer, `hulk.gnn.GnnDecision.model_plans`), before the refining search
  that fleets of up to twice ``planner.max_pool`` active machines get, and whether or not the
  quick check then fell back: what the model decides, which is what training changes. On a
  small fleet the refining search brings most plans to within a few percent of the teacher's
  whatever the model (docs/experiments.md, "Fleet learning"); on a larger one the two ratios
  are the same;
* ``plan_cost_ratio_sum`` — the same for the sum of iteration times of the placed jobs;
* ``incomplete_rate`` — samples where the GNN leaves waiting a job the teacher runs; such a job
  is taken to start after the others, and at least its compute-bound time on every active
  machine (work / Σ FLOP/s) is added to the GNN's makespan and sum, so a plan that leaves work
  waiting does not look faster than it is;
* ``gnn_seconds`` / ``teacher_seconds`` — time to place the mix (the model's inputs from the
  fleet's frames, its forward pass, Algorithm 1 and the stage planner; after a fallback also
  the teacher's search) against the teacher's search time, and their ratio ``speedup``;
* ``inference_seconds`` / ``inference_speedup`` — the same for the model's inputs, forward
  pass and Algorithm 1 alone (the groups, before the planner lays them out).

Times are summed over the split's samples; the cost model's fleet and its site clustering,
which either strategy needs and a deployment computes once per link table, are left out of
both sides. The same figures by fleet size (`SIZE_BANDS`: machines ≤ 50, 51–100, 101–200,
more) carry the band as a suffix — ``speedup_le50``, ``plan_cost_ratio_makespan_101to200``,
``samples_gt200``… — so versions compare by fleet size in the MLflow UI; a band without a
sample has no keys.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hulk.corpus import Corpus, corpus_fleet, mix_jobs
from hulk.cost import Fleet, lower_bound
from hulk.features import encode_inputs
from hulk.gnn import GnnDecision, gnn_placements
from hulk.jobs import Job
from hulk.model import HulkGNN, predict_proba
from hulk.planner import site_labels
from hulk.settings import Settings

# Fleet-size bands of the per-size metrics: (suffix, most machines).
SIZE_BANDS: tuple[tuple[str, float], ...] = (
    ("le50", 50),
    ("51to100", 100),
    ("101to200", 200),
    ("gt200", math.inf),
)
# The figures repeated per band.
BAND_METRICS = ("plan_cost_ratio_makespan", "fallback_rate", "speedup", "inference_speedup")
# The figures repeated per part of an evaluation set (`evaluate_parts`).
PART_METRICS = (
    "samples",
    "node_accuracy",
    "plan_cost_ratio_makespan",
    "plan_cost_ratio_model",
    "fallback_rate",
)


@dataclass(frozen=True)
class EvalCase:
    """One labelled (fleet, job mix) to place with the model and compare with the teacher."""

    inventory: pd.DataFrame
    links: pd.DataFrame
    jobs: list[Job]  # in class (size) order
    y: np.ndarray  # the teacher's class of each machine (node_id order)
    active: np.ndarray  # bool per machine
    makespan_s: float  # the teacher's
    sum_s: float
    teacher_seconds: float
    fleet: Hashable  # cases with the same fleet share its cost model


def corpus_cases(corpus: Corpus, settings: Settings, split: str = "test") -> list[EvalCase]:
    """The cases of one split of the corpus: fleets rebuilt from the manifest."""
    samples = corpus.split(split)
    records = [r for r in corpus.manifest["samples"] if r["split"] == split]
    if len(records) != len(samples):
        raise ValueError(f"{len(samples)} {split} samples but {len(records)} manifest records")
    seed = int(corpus.manifest["seed"])
    frames: dict[int, tuple[pd.DataFrame, pd.DataFrame]] = {}
    cases = []
    for sample, record in zip(samples, records, strict=True):
        fleet_id = int(record["fleet"])
        if fleet_id not in frames:
            inventory, links, _ = corpus_fleet(seed, fleet_id, settings)
            frames[fleet_id] = inventory, links
        cases.append(
            EvalCase(
                *frames[fleet_id],
                jobs=mix_jobs(record),  # already in class (size) order
                y=sample["y"].numpy(),
                active=sample["active"].numpy().astype(bool),
                makespan_s=float(record["makespan_s"]),
                sum_s=float(record["sum_s"]),
                teacher_seconds=float(record["teacher_seconds"]),
                fleet=("corpus", seed, fleet_id),
            )
        )
    return cases


def evaluate_gnn(
    model: HulkGNN, corpus: Corpus, settings: Settings, split: str = "test"
) -> dict[str, float]:
    """The metrics of the module docstring over one split of the corpus."""
    return evaluate_cases(model, corpus_cases(corpus, settings, split), settings)


def evaluate_cases(
    model: HulkGNN, cases: Sequence[EvalCase], settings: Settings
) -> dict[str, float]:
    """The metrics of the module docstring over some labelled cases."""
    return _metrics(_case_rows(model, cases, settings))


def evaluate_parts(
    model: HulkGNN, parts: Mapping[str, Sequence[EvalCase]], settings: Settings
) -> dict[str, float]:
    """The metrics over every part's cases together, and each part's ``samples``,
    ``node_accuracy``, ``plan_cost_ratio_makespan`` and ``fallback_rate`` as ``<part>/<key>``."""
    rows = {name: _case_rows(model, cases, settings) for name, cases in parts.items()}
    metrics = _metrics([row for part in rows.values() for row in part])
    for name, part in rows.items():
        if part:
            own = _metrics(part)
            for key in PART_METRICS:
                metrics[f"{name}/{key}"] = own[key]
    return metrics


def _case_rows(
    model: HulkGNN, cases: Sequence[EvalCase], settings: Settings
) -> list[dict[str, float]]:
    """Per case: machines, times, ratios, fallback, and its correct / counted machines."""
    fleets: dict[Hashable, Fleet] = {}
    sites: dict[Hashable, np.ndarray] = {}
    rows: list[dict[str, float]] = []
    for case in cases:
        if case.fleet not in fleets:
            fleets[case.fleet] = Fleet.from_frames(
                case.inventory,
                case.links,
                settings.hardware,
                settings.graph.bandwidth_tiers,
                settings.cost,
            )
            sites[case.fleet] = site_labels(fleets[case.fleet], settings.planner.site_latency_ms)
        fleet = fleets[case.fleet]
        jobs = case.jobs
        started = time.perf_counter()
        inputs, _ = encode_inputs(case.inventory, case.links, jobs, settings)  # sample tensors
        proba = predict_proba(model, inputs).numpy()
        model_s = time.perf_counter() - started
        outcome = gnn_placements(
            jobs, fleet, proba, list(range(len(jobs))), settings, sites=sites[case.fleet]
        )
        # The decision, as the teacher's seconds are its search: the A/B/C baselines every
        # placements file reports are computed for either strategy and counted by neither.
        teacher_s = case.teacher_seconds
        predicted = proba.argmax(axis=1)
        row = {
            "machines": float(fleet.n),
            "gnn_s": model_s + outcome.decision.seconds,
            "inference_s": model_s + outcome.decision.grouping_s,
            "teacher_s": teacher_s,
            "fallback": float(outcome.placements is None),
            "makespan_ratio": math.nan,
            "model_ratio": _model_ratio(outcome.decision, case, fleet),
            "sum_ratio": math.nan,
            "correct": float((predicted == case.y)[case.active].sum()),
            "counted": float(case.active.sum()),
        }
        row["incomplete"] = 0.0
        if outcome.placements is None:  # the fallback runs the teacher: the user waits for it
            row["gnn_s"] += teacher_s
        else:
            times = _placed_times(outcome.placements)
            waiting, later = waiting_penalty(outcome.placements, case.y, case.active, fleet)
            row["incomplete"] = float(bool(waiting))
            if case.makespan_s > 0 and times:
                row["makespan_ratio"] = (max(times) + later) / case.makespan_s
            if case.sum_s > 0 and times:
                row["sum_ratio"] = (sum(times) + later) / case.sum_s
        rows.append(row)
    return rows


def _model_ratio(decision: GnnDecision, case: EvalCase, fleet: Fleet) -> float:
    """The makespan ratio of the model's own plans (`GnnDecision.model_plans`), a job the
    teacher runs and they leave waiting counted as in `waiting_penalty`."""
    plans = decision.model_plans
    times = [cost.iteration_s for _, cost in plans.values() if cost.feasible]
    if case.makespan_s <= 0 or not times:
        return math.nan
    taught = {int(k) for k in np.unique(case.y[case.active]) if k < len(case.jobs)}
    later = sum(
        lower_bound(case.jobs[k], fleet, fleet.active_indices()) for k in taught - set(plans)
    )
    return (max(times) + later) / case.makespan_s


def waiting_penalty(
    placements: Sequence[Any], y: np.ndarray, active: np.ndarray, fleet: Fleet
) -> tuple[list[int], float]:
    """(jobs the teacher runs but the GNN leaves waiting, the seconds they add at least).

    `placements` are in class order, `y` the teacher's class of each machine. Such a job starts
    after the others; it takes at least its compute-bound time on every active machine (work /
    Σ FLOP/s), which is what is added.
    """
    taught = {int(k) for k in np.unique(y[active]) if k < len(placements)}
    waiting = [k for k, p in enumerate(placements) if p.status != "placed" and k in taught]
    later = sum(lower_bound(placements[k].job, fleet, fleet.active_indices()) for k in waiting)
    return waiting, later


def _metrics(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    counted = sum(row["counted"] for row in rows)
    metrics = {
        "samples": float(len(rows)),
        "node_accuracy": sum(row["correct"] for row in rows) / counted if counted else math.nan,
        **_summary(rows),
    }
    lower = 0.0
    for band, upper in SIZE_BANDS:
        inside = [row for row in rows if lower < row["machines"] <= upper]
        lower = upper
        if inside:
            metrics[f"samples_{band}"] = float(len(inside))
            for key, value in _summary(inside).items():
                if key in BAND_METRICS:
                    metrics[f"{key}_{band}"] = value
    return metrics


def _summary(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Plan-cost ratios, fallbacks and times of some samples (module docstring)."""
    total_gnn = sum(row["gnn_s"] for row in rows)
    total_teacher = sum(row["teacher_s"] for row in rows)
    total_inference = sum(row["inference_s"] for row in rows)
    return {
        "plan_cost_ratio_makespan": _mean([r["makespan_ratio"] for r in rows]),
        "plan_cost_ratio_model": _mean([r["model_ratio"] for r in rows]),
        "plan_cost_ratio_sum": _mean([r["sum_ratio"] for r in rows]),
        "fallback_rate": sum(r["fallback"] for r in rows) / len(rows) if rows else math.nan,
        "incomplete_rate": sum(r["incomplete"] for r in rows) / len(rows) if rows else math.nan,
        "gnn_seconds": total_gnn,
        "teacher_seconds": total_teacher,
        "speedup": total_teacher / total_gnn if total_gnn > 0 else math.nan,
        "inference_seconds": total_inference,
        "inference_speedup": total_teacher / total_inference if total_inference > 0 else math.nan,
    }


def _placed_times(placements: Sequence[Any]) -> list[float]:
    return [
        p.estimate.iteration_s
        for p in placements
        if p.status == "placed" and p.estimate is not None and p.estimate.feasible
    ]


def _mean(values: list[float]) -> float:
    """The mean of the values that are not NaN (NaN when none is)."""
    kept = [v for v in values if not math.isnan(v)]
    return float(np.mean(kept)) if kept else math.nan
