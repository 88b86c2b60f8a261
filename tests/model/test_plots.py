"""The fleet map and cost bars logged with every training run."""

from __future__ import annotations

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
