"""Evaluate a placements file: each job's plan, its cost, the baselines and the lower bound.

`evaluate(placements, fleet)` recomputes every figure from the file's plans on the given fleet
with the cost model (docs/design.md#cost-model) — the plan is what the file promises, the
figures follow from it — and notes where the file's stored estimate disagrees (a different
fleet snapshot, or a file written by another tool). `plot_costs` draws them: per job, one
stacked bar per system (the file's plan, Systems A, B, C), compute below and communication
above, on a log axis (System C is ~1e6 s where the plans take seconds), with the lower bound as
a dashed line. A system that cannot run a job gets no bar but an "infeasible" mark; a job
without machines gets its status as the plan's mark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hulk import fileio
from hulk.assign import plan_cost, schedule_of, whole_fleet_baselines
from hulk.cost import Cost, Fleet, lower_bound, makespan_concurrent
from hulk.placements import PLACED, SEQUENTIAL, SYSTEM_NAMES, JobPlacement
from hulk.placements_read import PlacementsFile

RELATIVE_TOLERANCE = 1e-6  # stored and recomputed estimates agree within this


@dataclass(frozen=True)
class JobEvaluation:
    """One job of a placements file, recomputed on a fleet."""

    job: str
    status: str
    reason: str | None
    node_ids: list[int]
    shape: str  # D×S, TP×n or -
    estimate: Cost | None  # the plan's cost (None without machines)
    lower_bound_s: float | None
    baselines: dict[str, Cost]
    stored: Cost | None  # the estimate the file states

    @property
    def agrees(self) -> bool:
        """The file's estimate matches the recomputed one (both absent counts as agreeing)."""
        if self.estimate is None or self.stored is None:
            return self.estimate is None and self.stored is None
        a, b = self.estimate.iteration_s, self.stored.iteration_s
        if not (math.isfinite(a) and math.isfinite(b)):
            return a == b
        return math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE)


@dataclass(frozen=True)
class Evaluation:
    """A placements file evaluated on a fleet."""

    jobs: list[JobEvaluation]
    strategy: str | None
    schedule: str
    makespan_s: float | None
    notes: list[str] = field(default_factory=list)


def evaluate_job(placement: JobPlacement, fleet: Fleet) -> JobEvaluation:
    """Recompute one job's estimate, lower bound and baselines on `fleet`."""
    job = placement.job
    estimate = bound = None
    if placement.status == PLACED and placement.nodes:
        estimate = plan_cost(job, fleet, placement.nodes, placement.plan, placement.layout)
        bound = lower_bound(job, fleet, placement.nodes)
    return JobEvaluation(
        job=job.name,
        status=placement.status,
        reason=placement.reason,
        node_ids=placement.node_ids(fleet),
        shape=placement.shape,
        estimate=estimate,
        lower_bound_s=bound,
        baselines=whole_fleet_baselines(job, fleet)[0],
        stored=placement.estimate,
    )


def evaluate(placements: PlacementsFile, fleet: Fleet) -> Evaluation:
    """Every job of a (checked) placements file, recomputed on `fleet`, and the makespan."""
    jobs = [evaluate_job(p, fleet) for p in placements.placements]
    strategy = placements.strategy
    schedule = placements.schedule
    if schedule == SEQUENTIAL and strategy in SYSTEM_NAMES:
        times = [
            j.baselines[strategy].iteration_s
            for j, p in zip(jobs, placements.placements, strict=True)
            if p.run_order is not None
        ]
        makespan = math.fsum(times) if times else None
    else:
        costs = [j.estimate for j in jobs if j.estimate is not None]
        makespan = makespan_concurrent(costs) if costs else None
    notes = [
        f"{j.job}: the file's estimate ({_fmt(j.stored)}) differs from the cost model on this "
        f"fleet ({_fmt(j.estimate)})"
        for j in jobs
        if not j.agrees
    ]
    infeasible = [j for j in jobs if j.estimate is not None and not j.estimate.feasible]
    notes += [
        f"{j.job}: the plan cannot run on this fleet: {j.estimate.reason}"
        for j in infeasible
        if j.estimate is not None
    ]
    if schedule_of(strategy or "") != schedule and strategy is not None:
        notes.append(f"strategy {strategy!r} with schedule {schedule!r}")
    return Evaluation(jobs, strategy, schedule, makespan, notes)


def _fmt(cost: Cost | None) -> str:
    if cost is None:
        return "none"
    return f"{cost.iteration_s:.6g} s" if math.isfinite(cost.iteration_s) else "infeasible"


# --- the plot ---------------------------------------------------------------------------------

_COLOURS = {"plan": "#2b8a3e", "A": "#1c7ed6", "B": "#f08c00", "C": "#c92a2a"}


def plot_costs(
    evaluation: Evaluation, path: str | Path, title: str = "Seconds per iteration"
) -> Path:
    """Stacked compute / communication bars per job and system, log scale; PNG at `path`.

    Uses matplotlib's Agg canvas directly (no pyplot, no display, no global backend change);
    the file is written atomically.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    path = Path(path)
    plan_label = _plan_label(evaluation.strategy)
    systems: list[tuple[str, str]] = [("plan", plan_label), *((s, f"System {s}") for s in "ABC")]
    jobs = evaluation.jobs
    bars: list[tuple[float, str, Cost | None, str]] = []
    width = 0.8 / len(systems)
    for j, job in enumerate(jobs):
        for k, (key, _) in enumerate(systems):
            cost = job.estimate if key == "plan" else job.baselines.get(key)
            bars.append((j + (k - (len(systems) - 1) / 2) * width, key, cost, job.status))

    values = [
        v
        for _, _, c, _ in bars
        if c is not None and c.feasible
        for v in (c.compute_s, c.iteration_s)
        if math.isfinite(v) and v > 0
    ]
    values += [j.lower_bound_s for j in jobs if j.lower_bound_s and math.isfinite(j.lower_bound_s)]
    # Floats: a bound past 1e18 s as an int is too large for matplotlib's numpy arrays.
    floor = 10.0 ** math.floor(math.log10(min(values))) / 10 if values else 1e-3
    top = 10.0 ** math.ceil(math.log10(max(values))) * 3 if values else 1.0

    figure = Figure(figsize=(max(6.0, 1.9 * len(jobs) + 2), 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ax.set_yscale("log")
    ax.set_ylim(floor, top)
    ax.set_xlim(-0.5, max(len(jobs), 1) - 0.5)  # a run with no jobs: an empty frame
    if not jobs:
        ax.text(0, math.sqrt(floor * top), "no jobs", ha="center", va="center")
    for x, key, cost, status in bars:
        colour = _COLOURS[key]
        if cost is None or not cost.feasible or not math.isfinite(cost.iteration_s):
            mark = status if key == "plan" and cost is None else "infeasible"
            ax.text(x, floor * 1.6, mark, ha="center", va="bottom", fontsize=7, rotation=90)
            continue
        compute = max(cost.compute_s, floor)
        total = max(cost.iteration_s, compute)
        ax.bar(x, compute - floor, width, bottom=floor, color=colour, edgecolor=colour)
        if total > compute:
            ax.bar(
                x,
                total - compute,
                width,
                bottom=compute,
                color=colour,
                alpha=0.35,
                hatch="//",
                edgecolor=colour,
            )
    for j, job in enumerate(jobs):
        if job.lower_bound_s and math.isfinite(job.lower_bound_s):
            ax.hlines(job.lower_bound_s, j - 0.45, j + 0.45, colors="black", linestyles="dashed")
    ax.set_xticks(range(len(jobs)), [f"{j.job}\n({j.status})" for j in jobs], fontsize=8)
    ax.set_ylabel("seconds per iteration (log scale)")
    ax.set_title(title)
    ax.grid(axis="y", which="major", alpha=0.3)
    handles = [Patch(color=_COLOURS[key], label=label) for key, label in systems]
    handles += [
        Patch(facecolor="white", edgecolor="grey", label="compute (solid)"),
        Patch(facecolor="white", edgecolor="grey", hatch="//", label="communication (hatched)"),
        Patch(facecolor="white", edgecolor="black", linestyle="dashed", label="lower bound"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    with fileio.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=120)
    return path


def _plan_label(strategy: str | None) -> str:
    if strategy in SYSTEM_NAMES:
        return f"plan (System {strategy}, placed job)"
    return f"Hulk plan ({strategy})" if strategy else "Hulk plan"
