"""Inventory faults: city names without coordinates (issue 15, item 6) and a file that is not
UTF-8 (item 13).

A machine whose lat and lon are both empty gets its city's coordinates, resolved offline the way
`hulk import-hulk` resolves its places (within the row's country when it has one); a city that
does not resolve stays without coordinates and is named by inventory.missing_coordinates. A
non-UTF-8 file is refused naming the file, the rule and the line, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.importer import read_nodes
from hulk.validation import read_inventory, validate_inventory, validate_logs
from tests.data.test_validation import (
    MID,
    NOW,
    SETTINGS,
    WINDOW_DAYS,
    append,
    by_rule,
    check_logs,
    make_days,
    make_inventory,
    row,
    rules,
)
from tests.faults.conftest import digest, invoke


def _inventory_file(tmp_path: Path, places: list[tuple[str, str | None]]) -> Path:
    frame = pd.DataFrame(
        {
            "node_id": range(len(places)),
            "city": [city for city, _ in places],
            "country": [country for _, country in places],
            "lat": np.nan,
            "lon": np.nan,
            "compute_capability": 8.0,
            "gpu_count": 8,
            "memory_gb": 320.0,
            "status": "active",
        }
    )
    path = tmp_path / schemas.INVENTORY_FILE
    fileio.write_csv(path, frame)
    return path


def test_city_names_resolve_like_import_hulk(tmp_path: Path) -> None:
    places = [
        ("Beijing", "China"),
        ("Inner Mongolia", None),
        ("  Neimeng  ", None),
        ("Neimeng", "China"),
        ("Tokyo", None),
    ]
    inventory = read_inventory(_inventory_file(tmp_path, places))

    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "node,City,Capability,Memory\n"
        + "".join(f"{i},{city.strip()},8.0,320\n" for i, (city, _) in enumerate(places))
    )
    imported, _ = read_nodes(nodes)
    np.testing.assert_allclose(inventory[["lat", "lon"]], imported[["lat", "lon"]])
    assert inventory["country"].tolist() == ["China", "China", "China", "China", "Japan"]
    assert inventory["city"].tolist() == [city.strip() for city, _ in places]  # kept as written
    assert validate_inventory(inventory, "machines.csv", SETTINGS) == []


def test_the_country_decides_between_cities_of_one_name(tmp_path: Path) -> None:
    inventory = read_inventory(
        _inventory_file(tmp_path, [("Paris", "France"), ("Paris", "United States")])
    )
    assert inventory.loc[0, "lon"] > 0 > inventory.loc[1, "lon"]  # Paris, Texas


def test_unknown_city_keeps_empty_coordinates_and_is_named(tmp_path: Path) -> None:
    path = _inventory_file(tmp_path, [("Beijing", "China"), ("Atlantis-7", "China")])
    inventory = read_inventory(path)
    assert inventory.loc[1, ["lat", "lon"]].isna().all()
    findings = validate_inventory(inventory, str(path), SETTINGS)
    assert rules(findings) == {"inventory.missing_coordinates"}
    hit = by_rule(findings, "inventory.missing_coordinates")
    assert (hit.severity, hit.count, hit.examples[0]["node_id"]) == ("warning", 1, 1)
    assert "machine(s) 1 " in hit.message


def test_resolved_cities_take_part_in_the_light_check(tmp_path: Path) -> None:
    inventory = make_inventory()
    inventory.loc[[0, 2], ["lat", "lon"]] = np.nan  # Beijing and Tokyo, by name only
    path = tmp_path / "in" / schemas.INVENTORY_FILE
    path.parent.mkdir()
    fileio.write_csv(path, inventory)
    days = make_days()
    days[MID] = append(days[MID], row(MID, elapsed_ms=1.0))  # Beijing → Tokyo in 1 ms
    _, result = check_logs(tmp_path, days, read_inventory(path))
    assert by_rule(result.findings, "logs.faster_than_light").count == 1
    assert result.quarantine["rule"].tolist() == ["logs.faster_than_light"]


@pytest.mark.slow
def test_city_names_on_the_command_line(generated: Path, params: Path) -> None:
    assert invoke("--params", params, "validate").exit_code == 0
    with_coordinates = pd.read_parquet(generated / schemas.QUARANTINE_FILE)
    path = generated / schemas.INVENTORY_FILE
    inventory = pd.read_csv(path)
    inventory.assign(lat="", lon="").to_csv(path, index=False)

    result = invoke("--params", params, "validate")

    assert result.exit_code == 0, result.output
    assert "missing_coordinates" not in result.output
    resolved = read_inventory(path)
    np.testing.assert_allclose(resolved[["lat", "lon"]], inventory[["lat", "lon"]], atol=1e-3)
    pd.testing.assert_frame_equal(
        pd.read_parquet(generated / schemas.QUARANTINE_FILE), with_coordinates
    )


def test_a_column_given_twice_in_the_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / schemas.INVENTORY_FILE
    fileio.write_csv(path, make_inventory().assign(extra="x"))
    text = path.read_text().splitlines()
    text[0] = text[0].replace("extra", "status")  # pandas would keep both, as status.1
    path.write_text("\ufeff" + "\n".join(text) + "\n")
    with pytest.raises(InputError) as caught:
        read_inventory(path)
    assert caught.value.rule == "inventory.schema"
    assert "line 1: column(s) 'status' given more than once" in caught.value.detail


# --- not UTF-8 --------------------------------------------------------------------------------


def test_non_utf8_inventory_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / schemas.INVENTORY_FILE
    fileio.write_csv(path, make_inventory())
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"Beijing", "Montréal".encode("latin-1"))
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(InputError) as caught:
        read_inventory(path)
    error = caught.value
    assert (error.path, error.rule) == (str(path), "inventory.encoding")
    assert "line 3 is not UTF-8: byte 0xe9 at column 8" in error.detail
    assert error.examples == ["line 3: 1,Montr\\xe9al,China,39.9042,116.4074,8.6,8,320.0,active"]


def test_non_utf8_log_csv_names_the_line(tmp_path: Path) -> None:
    days = make_days()
    logs = tmp_path / schemas.LOGS_DIR
    for day, frame in days.items():
        folder = logs / f"day={day.isoformat()}"
        folder.mkdir(parents=True)
        fileio.write_csv(folder / "probes.csv", frame)
    bad = logs / f"day={MID.isoformat()}" / "probes.csv"
    lines = bad.read_bytes().split(b"\n")
    lines[7] = lines[7].replace(b",ok", b",\xff\xfe")
    bad.write_bytes(b"\n".join(lines))
    with pytest.raises(InputError) as caught:
        validate_logs(logs, make_inventory(), SETTINGS, NOW, WINDOW_DAYS)
    error = caught.value
    assert (error.path, error.rule) == (str(bad), "logs.encoding")
    assert "line 8 is not UTF-8: byte 0xff" in error.detail
    assert error.examples[0].startswith("line 8: ") and "\\xff\\xfe" in error.examples[0]


@pytest.mark.slow
def test_non_utf8_inventory_on_the_command_line(generated: Path, params: Path) -> None:
    assert invoke("--params", params, "validate").exit_code == 0
    assert invoke("--params", params, "ingest").exit_code == 0
    outputs = [
        generated / schemas.QUARANTINE_FILE,
        generated / schemas.LINKS_FILE,
        generated / schemas.VALIDATION_DIR / "report.json",
        generated / schemas.VALIDATION_DIR / "validated.json",
    ]
    before = [digest(p) for p in outputs]
    path = generated / schemas.INVENTORY_FILE
    path.write_bytes(path.read_bytes().replace("Brasília".encode(), "Brasília".encode("latin-1")))
    line = (
        path.read_bytes()
        .split(b"\n")
        .index(next(x for x in path.read_bytes().split(b"\n") if b"Bras" in x))
    )

    for command in ("validate", "ingest", "graph"):
        result = invoke("--params", params, command)
        assert result.exit_code == 2, (command, result.output)
        assert f"{path}: [inventory.encoding] line {line + 1} is not UTF-8" in result.output
        assert "Traceback" not in result.output
    assert [digest(p) for p in outputs] == before
