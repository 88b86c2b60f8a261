"""Pictures of a placement for people: the fleet map coloured by job, and the cost bars.

`fleet_map` draws every machine at its location (longitude, latitude), coloured by the job it
serves (grey: idle, a cross: drained), with the links inside each job's group drawn in the
job's colour, so one sees at a glance whether a job stays inside a region. Machines without a
location are listed in the title. `cost_bars` is `hulk.evaluate.plot_costs` of placements that
are not (yet) a file. Both use matplotlib's Agg canvas (no display) and write atomically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from hulk import fileio
from hulk.cost import Fleet
from hulk.evaluate import Evaluation, evaluate_job, plot_costs
from hulk.placements import JobPlacement

CITY_LABELS = 25  # cities named on the fleet map, most machines first


def cost_bars(
    placements: Sequence[JobPlacement], fleet: Fleet, strategy: str, path: Path, title: str
) -> Path:
    """Compute / communication bars of `placements` against Systems A, B, C (PNG at `path`)."""
    from hulk.assign import makespan, schedule_of

    jobs = [evaluate_job(p, fleet) for p in placements]
    evaluation = Evaluation(jobs, strategy, schedule_of(strategy), makespan(placements, strategy))
    return plot_costs(evaluation, path, title=title)


def fleet_map(
    inventory: pd.DataFrame,
    placements: Sequence[JobPlacement],
    fleet: Fleet,
    path: Path,
    title: str = "Fleet by assigned job",
) -> Path:
    """Machines at their (lon, lat), coloured by job, with each group's links; PNG at `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    frame = inventory.set_index("node_id")
    lon = frame.reindex(fleet.node_ids)["lon"].to_numpy(float)
    lat = frame.reindex(fleet.node_ids)["lat"].to_numpy(float)
    # Machines of one city share a location: spread them on a small ring so each is visible.
    lon, lat = _spread(lon, lat)
    located = np.isfinite(lon) & np.isfinite(lat)

    figure = Figure(figsize=(10, 5.2), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    palette = [
        "#1f77b4",
        "#d62728",
        "#2ca02c",
        "#9467bd",
        "#ff7f0e",
        "#17becf",
        "#8c564b",
        "#e377c2",
        "#bcbd22",
        "#7f7f7f",
    ]
    owner = np.full(fleet.n, -1)
    placed = [p for p in placements if p.status == "placed" and p.nodes]
    for k, placement in enumerate(placed):
        owner[list(placement.nodes)] = k
    idle = located & (owner < 0) & fleet.active
    drained = located & ~fleet.active
    if idle.any():
        ax.scatter(
            lon[idle], lat[idle], s=14, c="#c8c8c8", label=f"idle: {machines(idle.sum())}", zorder=2
        )
    if drained.any():
        label = f"drained: {machines(drained.sum())}"
        ax.scatter(lon[drained], lat[drained], s=18, c="black", marker="x", label=label, zorder=2)
    for k, placement in enumerate(placed):
        colour = palette[k % len(palette)]
        members = [m for m in placement.nodes if located[m]]
        segments = [
            [(lon[a], lat[a]), (lon[b], lat[b])]
            for i, a in enumerate(members)
            for b in members[i + 1 :]
            if math.isfinite(fleet.latency_s[a, b])
        ]
        if segments:
            ax.add_collection(
                LineCollection(segments, colors=colour, linewidths=0.6, alpha=0.35, zorder=1)
            )
        seconds = placement.estimate.iteration_s if placement.estimate else math.nan
        ax.scatter(
            lon[members],
            lat[members],
            s=34,
            c=colour,
            edgecolors="black",
            linewidths=0.4,
            label=f"{placement.job.name}: {machines(len(placement.nodes))}, {seconds:.3g} s/iter",
            zorder=3,
        )
    _label_cities(ax, frame.reindex(fleet.node_ids), CITY_LABELS)
    missing = int((~located).sum())
    suffix = f" ({machines(missing)} without a location not drawn)" if missing else ""
    ax.set(xlabel="longitude", ylabel="latitude", title=title + suffix)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    with fileio.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)
    return path


def machines(count: int) -> str:
    """ "1 machine", "12 machines"."""
    count = int(count)
    return f"{count} machine" if count == 1 else f"{count} machines"


def _label_cities(ax, frame: pd.DataFrame, most: int) -> None:
    """Name the `most` cities with the most machines at their location (a map of thousands
    of machines over a hundred cities would be unreadable with every name)."""
    if "city" not in frame.columns:
        return
    located = frame.dropna(subset=["lon", "lat"])
    by_city = located.groupby("city", sort=True).agg(
        lon=("lon", "mean"), lat=("lat", "mean"), count=("lon", "size")
    )
    biggest = by_city.sort_values("count", ascending=False, kind="stable").head(most)
    for city, row in biggest.iterrows():
        ax.annotate(
            f"{city} ({int(row['count'])})",
            (row["lon"], row["lat"]),
            xytext=(0, 9),
            textcoords="offset points",
            ha="center",
            fontsize=6,
            color="#404040",
            zorder=4,
        )


def _spread(lon: np.ndarray, lat: np.ndarray, radius: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """Machines at the same place are put on a ring of `radius` degrees around it."""
    lon, lat = lon.copy(), lat.copy()
    keys = pd.Series(list(zip(np.round(lon, 3), np.round(lat, 3), strict=True)))
    for _, rows in keys.groupby(keys).groups.items():
        rows = np.asarray(rows)
        if len(rows) < 2 or not np.isfinite(lon[rows[0]]):
            continue
        angle = 2 * np.pi * np.arange(len(rows)) / len(rows)
        scale = radius * min(1.0, math.sqrt(len(rows)) / 3)
        lon[rows] += scale * np.cos(angle)
        lat[rows] += scale * np.sin(angle)
    return lon, lat
