"""Pictures of a placement for people: the fleet map coloured by job, and the cost bars.

`fleet_map` draws the fleet on coastlines and country borders (`hulk.outlines`, offline),
zoomed to the machines: at each city a marker per job it serves (grey: idle, a cross:
drained), its area proportional to the machines, and each job's cities joined in the job's
colour, so one sees at a glance whether a job stays inside a region. Machines without a
location are counted in the title. `cost_bars` is `hulk.evaluate.plot_costs` of placements that
are not (yet) a file. Both use matplotlib's Agg canvas (no display) and write atomically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hulk import fileio
from hulk.cost import Fleet
from hulk.evaluate import Evaluation, evaluate_job, plot_costs
from hulk.placements import JobPlacement

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CITY_LABELS = 25  # cities named on the fleet map, most machines first
IDLE, DRAINED = -1, -2  # marker groups besides the jobs (0, 1, …)
PALETTE = (
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
)
SEA, LAND, SHORE, BORDER = "#dfe9f2", "#f3f0e8", "#8c9aa6", "#b9b2a3"
SIZE_MIN, SIZE_MAX = 12.0, 300.0  # marker area, points²: the city-group with most machines
MARGIN_DEG, MARGIN_SHARE = 3.0, 0.08  # the map's margin around the machines: at least
MIN_SPAN = (24.0, 14.0)  # (lon, lat) degrees, the smallest view
SHAPE = (0.5, 0.85)  # the map's drawn height / width, smallest and largest
# Where a city's name may go, in order: (dx, dy) of its offset, horizontal and vertical anchor.
SIDES: tuple[tuple[int, int, str, str], ...] = (
    (0, 1, "center", "bottom"),
    (0, -1, "center", "top"),
    (1, 0, "left", "center"),
    (-1, 0, "right", "center"),
)
CONTINENT_DEG = 90.0  # a view wider than this draws the crude outlines
MAP_WIDTH_IN = 7.2  # the map's axes beside the legend; the figure's height follows the extent


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
    """`fleet_map_figure` as a PNG at `path` (written atomically)."""
    figure = fleet_map_figure(inventory, placements, fleet, title)
    with fileio.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)
    return path


def fleet_map_figure(
    inventory: pd.DataFrame,
    placements: Sequence[JobPlacement],
    fleet: Fleet,
    title: str = "Fleet by assigned job",
) -> Figure:
    """The fleet on a map of coastlines and borders: at each city one marker per job (and for
    idle and drained machines) with its area proportional to its machines there, each job's
    cities joined, the biggest cities named, zoomed to the located machines with a margin."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    frame = inventory.set_index("node_id").reindex(fleet.node_ids)
    lon = frame["lon"].to_numpy(float)
    lat = frame["lat"].to_numpy(float)
    located = np.isfinite(lon) & np.isfinite(lat)
    placed = [p for p in placements if p.status == "placed" and p.nodes]
    group = np.full(fleet.n, IDLE)
    for k, placement in enumerate(placed):
        group[list(placement.nodes)] = k
    group[~fleet.active] = DRAINED

    extent = _extent(lon[located], lat[located])
    west, east, south, north = extent
    # Equirectangular with the middle latitude's scale: shapes read right at any latitude.
    aspect = 1 / max(math.cos(math.radians((south + north) / 2)), 0.2)
    height = MAP_WIDTH_IN * (north - south) * aspect / (east - west) + 1.0
    figure = Figure(figsize=(10, min(max(height, 3.8), 8.0)), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    _draw_outlines(ax, extent)
    city = frame["city"].to_numpy(object) if "city" in frame.columns else None
    markers = _site_markers(lon, lat, located, group, extent, city)
    _draw_links(ax, markers, placed, fleet)
    labels = {IDLE: "idle", DRAINED: "drained"}
    colours = {IDLE: "#bdbdbd", DRAINED: "black"}
    for k, placement in enumerate(placed):
        seconds = placement.estimate.iteration_s if placement.estimate else math.nan
        labels[k] = f"{placement.job.name}: {machines(len(placement.nodes))}, {seconds:.3g} s/iter"
        colours[k] = PALETTE[k % len(PALETTE)]
    for key in [IDLE, DRAINED, *range(len(placed))]:
        rows = markers[markers["group"] == key]
        if rows.empty:
            continue
        label = labels[key]
        if key in (IDLE, DRAINED):  # jobs are counted in full, unlocated machines included
            label += f": {machines(rows['count'].sum())}"
        ax.scatter(
            rows["x"],
            rows["y"],
            s=rows["size"],
            edgecolors="black",
            linewidths=0.5,
            alpha=0.9,
            label=label,
            zorder=3,
            c=colours[key],
            marker="X" if key == DRAINED else "o",
        )
    _label_cities(ax, frame, CITY_LABELS, lift=markers.groupby("city")["lift"].max())
    labels_drawn = list(ax.texts)
    missing = int((~located).sum())
    suffix = f" ({machines(missing)} without a location not drawn)" if missing else ""
    ax.set(xlabel="longitude", ylabel="latitude", title=title + suffix)
    ax.set_xlim(west, east)
    ax.set_ylim(south, north)
    ax.set_aspect(aspect, adjustable="box")
    ax.grid(alpha=0.25, linewidth=0.5)
    legend = ax.legend(
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        title="marker area: machines at a city",
        title_fontsize=7,
    )
    for handle in legend.legend_handles:
        handle.set_sizes([40])  # type: ignore[union-attr]
    _declutter(figure, ax, labels_drawn)
    return figure


def machines(count: int) -> str:
    """ "1 machine", "12 machines"."""
    count = int(count)
    return f"{count} machine" if count == 1 else f"{count} machines"


def _extent(lon: np.ndarray, lat: np.ndarray) -> tuple[float, float, float, float]:
    """(west, east, south, north): the located machines' bounding box with a margin, at least
    MIN_SPAN degrees wide and high (one city shows its surroundings), then widened or heightened
    to a drawn height / width within SHAPE (a fleet spread along a parallel would otherwise be
    a strip); the world without any machine. Never past the poles or the antimeridian."""
    if lon.size == 0:
        return -180.0, 180.0, -60.0, 80.0
    west, east = float(lon.min()), float(lon.max())
    south, north = float(lat.min()), float(lat.max())
    pad_lon = max(MARGIN_DEG, MARGIN_SHARE * (east - west), (MIN_SPAN[0] - (east - west)) / 2)
    pad_lat = max(MARGIN_DEG, MARGIN_SHARE * (north - south), (MIN_SPAN[1] - (north - south)) / 2)
    west, east = west - pad_lon, east + pad_lon
    south, north = south - pad_lat, north + pad_lat
    stretch = 1 / max(math.cos(math.radians((south + north) / 2)), 0.2)
    shape = (north - south) * stretch / (east - west)
    if shape < SHAPE[0]:  # too flat: more latitude
        grow = ((east - west) * SHAPE[0] / stretch - (north - south)) / 2
        south, north = south - grow, north + grow
    elif shape > SHAPE[1]:  # too tall: more longitude
        grow = ((north - south) * stretch / SHAPE[1] - (east - west)) / 2
        west, east = west - grow, east + grow
    return max(west, -180.0), min(east, 180.0), max(south, -85.0), min(north, 85.0)


def _draw_outlines(ax, extent: tuple[float, float, float, float]) -> None:
    """Sea, land, lakes and country borders under everything else (zorder 0); gids `land`,
    `lakes`, `borders`. The outlines are read for a wider box than the extent, since the
    aspect ratio may widen the view."""
    from matplotlib.collections import LineCollection, PolyCollection

    from hulk.outlines import outlines_within

    west, east, south, north = extent
    wide, high = east - west, north - south
    resolution = "c" if wide > CONTINENT_DEG else "l"  # finer detail would be below a pixel
    outlines = outlines_within(
        max(west - wide, -180.0),
        min(east + wide, 180.0),
        max(south - high, -90.0),
        min(north + high, 90.0),
        resolution,
    )
    ax.set_facecolor(SEA)
    ax.add_collection(
        PolyCollection(
            outlines.land, facecolors=LAND, edgecolors=SHORE, linewidths=0.4, zorder=0, gid="land"
        ),
        autolim=False,
    )
    ax.add_collection(
        PolyCollection(
            outlines.lakes, facecolors=SEA, edgecolors=SHORE, linewidths=0.3, zorder=0, gid="lakes"
        ),
        autolim=False,
    )
    ax.add_collection(
        LineCollection(outlines.borders, colors=BORDER, linewidths=0.4, zorder=0, gid="borders"),
        autolim=False,
    )


def _site_markers(
    lon: np.ndarray,
    lat: np.ndarray,
    located: np.ndarray,
    group: np.ndarray,
    extent: tuple[float, float, float, float],
    city: np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per (city, group) of located machines: where its marker goes (`x`, `y`: the
    city's place, or around it on a small ring when several groups share the city), `count`,
    marker `size` (area in points², proportional to `count`), `first` (a member machine's
    index, for the links), `city` and `lift` (points from the city's place to above its
    markers, where its name goes)."""
    index = np.flatnonzero(located)
    machines_at = pd.DataFrame(
        {
            "site_lon": np.round(lon[index], 2),
            "site_lat": np.round(lat[index], 2),
            "group": group[index],
            "machine": index,
            "city": city[index] if city is not None else "",
        }
    )
    rows = (
        machines_at.groupby(["site_lon", "site_lat", "group"], sort=True)
        .agg(count=("machine", "size"), first=("machine", "min"), city=("city", "first"))
        .reset_index()
    )
    if rows.empty:
        return rows.assign(x=[], y=[], size=[], lift=[])
    rows["size"] = np.maximum(SIZE_MAX * rows["count"] / rows["count"].max(), SIZE_MIN)
    radius = np.sqrt(rows["size"]) / 2  # points
    # Degrees per point across the axes (MAP_WIDTH_IN wide), and the latitude's scale.
    west, east, south, north = extent
    per_point = (east - west) / (MAP_WIDTH_IN * 72)
    squeeze = math.cos(math.radians((south + north) / 2))
    site = rows.groupby(["site_lon", "site_lat"], sort=False)
    order = site.cumcount().to_numpy()
    shared = site["group"].transform("size").to_numpy()
    ring = (0.6 * site["size"].transform("max").pow(0.5) / 2).to_numpy() * (shared > 1)
    angle = np.pi / 2 + 2 * np.pi * order / shared
    rows["x"] = rows["site_lon"] + ring * per_point * np.cos(angle)
    rows["y"] = rows["site_lat"] + ring * per_point * squeeze * np.sin(angle)
    rows["lift"] = 2 + ring + radius
    return rows


def _draw_links(ax, markers: pd.DataFrame, placed: Sequence[JobPlacement], fleet: Fleet) -> None:
    """Each job's cities joined in the job's colour, where the fleet has a link between them."""
    from matplotlib.collections import LineCollection

    for k in range(len(placed)):
        rows = markers[markers["group"] == k]
        if len(rows) < 2:
            continue
        first = rows["first"].to_numpy()
        linked = np.isfinite(np.asarray(fleet.latency_s[np.ix_(first, first)], dtype=float))
        x, y = rows["x"].to_numpy(), rows["y"].to_numpy()
        segments = [
            [(x[a], y[a]), (x[b], y[b])]
            for a in range(len(rows))
            for b in range(a + 1, len(rows))
            if linked[a, b]
        ]
        if segments:
            ax.add_collection(
                LineCollection(
                    segments,
                    colors=PALETTE[k % len(PALETTE)],
                    linewidths=1.0,
                    alpha=0.55,
                    zorder=2,
                    gid=f"links:{placed[k].job.name}",
                ),
                autolim=False,
            )


def _label_cities(ax, frame: pd.DataFrame, most: int, lift: pd.Series | None = None) -> None:
    """Name the `most` cities with the most machines at their location (a map of thousands
    of machines over a hundred cities would be unreadable with every name), `lift` points
    above their place (by city; default 9)."""
    if "city" not in frame.columns:
        return
    located = frame.dropna(subset=["lon", "lat"])
    by_city = located.groupby("city", sort=True).agg(
        lon=("lon", "mean"), lat=("lat", "mean"), count=("lon", "size")
    )
    biggest = by_city.sort_values("count", ascending=False, kind="stable").head(most)
    for city, row in biggest.iterrows():
        above = float(lift.get(city, 9.0)) if lift is not None else 9.0
        label = ax.annotate(
            f"{city} ({int(row['count'])})",
            (row["lon"], row["lat"]),
            xytext=(0, above),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=6.5,
            color="#303030",
            zorder=4,
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.6},
            arrowprops={"arrowstyle": "-", "color": "#606060", "linewidth": 0.5, "shrinkB": 0},
        )
        if label.arrow_patch is not None:  # shown by _declutter if it moves the name
            label.arrow_patch.set_visible(False)


def _declutter(figure, ax, labels: list) -> None:
    """Put each city name (most machines first) next to its city where it covers no marker
    and no name placed before it: above, below, right or left of the city's markers, then
    farther out (with a line to the city); where every place is taken, above. Needs the final
    layout, so the figure is drawn once."""
    if not labels:
        return
    figure.draw_without_rendering()  # the final layout, without drawing the pixels
    renderer = figure.canvas.get_renderer()
    taken = _marker_boxes(figure, ax)
    frame = ax.bbox
    for label in labels:
        lift = label.xyann[1]
        options = [
            ((dx * reach, dy * reach), ha, va)
            for reach in (lift, lift + 14.0)
            for dx, dy, ha, va in SIDES
        ]
        for offset, ha, va in [*options, options[0]]:
            label.xyann = offset
            label.set_horizontalalignment(ha)
            label.set_verticalalignment(va)
            box = _text_box(label, renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
            if inside and box.y1 <= frame.y1 and not any(box.overlaps(t) for t in taken):
                break
        if label.arrow_patch is not None:  # a name moved from above its city: a line to it
            label.arrow_patch.set_visible(label.xyann != options[0][0])
        taken.append(_text_box(label, renderer))


def _text_box(label, renderer):
    """An annotation's text on the display, without its line to the city (which an
    annotation's own extent includes, shown or not)."""
    from matplotlib.text import Text

    label.update_positions(renderer)
    return Text.get_window_extent(label, renderer)


def _marker_boxes(figure, ax) -> list:
    """The display boxes of the map's markers (the scatter collections without a gid)."""
    from matplotlib.transforms import Bbox

    boxes = []
    for collection in ax.collections:
        if collection.get_gid():
            continue
        centres = ax.transData.transform(collection.get_offsets())
        sizes = np.broadcast_to(collection.get_sizes(), (len(centres),))
        for (x, y), size in zip(centres, sizes, strict=True):
            r = math.sqrt(size) / 2 * figure.dpi / 72 * 0.85  # a little overlap is fine
            boxes.append(Bbox.from_extents(x - r, y - r, x + r, y + r))
    return boxes
