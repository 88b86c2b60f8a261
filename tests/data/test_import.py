"""Importing the paper's published fleet format: the real hulk-47 files and small broken ones.

The real files are read from ../shared through the `hulk47` fixture (skipped when absent) and
never copied into the repository.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.importer import QUARANTINE, ImportResult, import_hulk
from hulk.settings import Settings

# --- the real 47-machine fleet ----------------------------------------------------------------

# edge.txt has 617 rows: 2 self-loops (4 4, 14 14) and 18 rows faster than light in fiber
# (Tokyo-Berlin at 4 ms, 17 Quanzhou-California rows at 42 ms) are quarantined, 11 -> 30 is given
# twice (214 and 265 ms) and 13 -> 14 / 14 -> 13 in both directions, each merged into one link:
# 617 - 2 - 18 - 1 - 1 = 595 unordered pairs.
HULK47_LINKS = 595
HULK47_CITIES = {
    "Beijing": "China",
    "Inner Mongolia": "China",
    "Nanjing": "China",
    "Quanzhou": "China",
    "California": "United States",
    "Tokyo": "Japan",
    "Berlin": "Germany",
    "London": "United Kingdom",
    "New Delhi": "India",
    "Paris": "France",
    "Rome": "Italy",
    "Brasília": "Brazil",
}


@pytest.fixture
def hulk47_result(hulk47: Path) -> ImportResult:
    return import_hulk(hulk47 / "node_feature.csv", hulk47 / "edge.txt")


def _rules(result: ImportResult) -> dict[str, list]:
    found: dict[str, list] = {}
    for finding in result.findings:
        found.setdefault(finding.rule, []).append(finding)
    return found


def _link(result: ImportResult, src: int, dst: int) -> pd.Series:
    rows = result.links[(result.links["src"] == src) & (result.links["dst"] == dst)]
    assert len(rows) == 1, (src, dst)
    return rows.iloc[0]


def test_hulk47_has_47_machines_conforming_to_the_inventory_schema(
    hulk47_result: ImportResult,
) -> None:
    inventory = hulk47_result.inventory
    assert list(inventory.columns) == list(schemas.INVENTORY)
    assert inventory.dtypes.astype(str).to_dict() == schemas.INVENTORY
    assert inventory["node_id"].tolist() == list(range(47))
    assert (inventory["gpu_count"] == 8).all()
    assert (inventory["status"] == schemas.STATUS_ACTIVE).all()
    first = inventory.iloc[0]
    assert (first["compute_capability"], first["memory_gb"]) == (8.6, 152.0)
    assert inventory["memory_gb"].max() == 640.0


def test_hulk47_locations_all_resolve(hulk47_result: ImportResult) -> None:
    inventory = hulk47_result.inventory
    assert inventory["lat"].notna().all() and inventory["lon"].notna().all()
    assert dict(zip(inventory["city"], inventory["country"], strict=True)) == HULK47_CITIES
    # "Neimeng " (with its stray space) and "Neimeng" are one place.
    assert set(inventory.loc[inventory["node_id"].between(5, 9), "city"]) == {"Inner Mongolia"}
    assert "nodes.unresolved_location" not in _rules(hulk47_result)


def test_hulk47_links_one_row_per_unordered_pair(hulk47_result: ImportResult) -> None:
    links = hulk47_result.links
    assert list(links.columns) == list(schemas.LINKS)
    assert links.dtypes.astype(str).to_dict() == schemas.LINKS
    assert len(links) == HULK47_LINKS
    assert (links["src"] < links["dst"]).all()
    assert not links.duplicated(["src", "dst"]).any()
    assert (links["samples"] == 0).all() and (links["loss_rate"] == 0).all()
    for column in ("latency_p50_ms", "latency_p95_ms", "alpha_ms"):
        pd.testing.assert_series_equal(links[column], links["latency_mean_ms"], check_names=False)
    assert links["beta_gbps"].isna().all()
    assert links["window_start"].isna().all() and links["window_end"].isna().all()
    # Every machine has at least one link.
    assert set(links["src"]) | set(links["dst"]) == set(range(47))
    assert _link(hulk47_result, 0, 1)["latency_mean_ms"] == 10.0


def test_hulk47_self_loops_are_quarantined_with_a_warning(hulk47_result: ImportResult) -> None:
    quarantine = hulk47_result.quarantine
    assert list(quarantine.columns) == list(QUARANTINE)
    loops = quarantine[quarantine["rule"] == "edges.self_loop"]
    assert sorted(zip(loops["src"], loops["dst"], strict=True)) == [(4, 4), (14, 14)]
    assert loops["file"].str.endswith("edge.txt").all()
    assert (loops["line"] > 0).all()
    assert len(quarantine) == 2 + 18
    (warning,) = _rules(hulk47_result)["edges.self_loop"]
    assert warning.severity == "warning" and warning.count == 2
    assert {(row["src"], row["dst"]) for row in warning.examples} == {(4, 4), (14, 14)}
    assert not ((hulk47_result.links["src"] == 4) & (hulk47_result.links["dst"] == 4)).any()


def test_hulk47_faster_than_light_rows_are_quarantined(hulk47_result: ImportResult) -> None:
    quarantine = hulk47_result.quarantine
    impossible = quarantine[quarantine["rule"] == "edges.faster_than_light"]
    pairs = set(zip(impossible["src"], impossible["dst"], strict=True))
    assert len(impossible) == 18
    assert (25, 30) in pairs  # Tokyo-Berlin in 4 ms: light in fiber needs about 44 ms
    assert (15, 20) in pairs  # Quanzhou-California in 42 ms: at least 52 ms
    assert (impossible["latency_ms"] < 45).all()
    (warning,) = _rules(hulk47_result)["edges.faster_than_light"]
    assert warning.count == 18
    assert _link_missing(hulk47_result, 25, 30)


def _link_missing(result: ImportResult, src: int, dst: int) -> bool:
    links = result.links
    return not ((links["src"] == src) & (links["dst"] == dst)).any()


def test_faster_than_light_row_of_a_small_file(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    edges = tmp_path / "edges.txt"
    nodes.write_text("node,City,Capability,Memory\n0,Beijing,8.6,152\n1,Paris,8,320\n")
    edges.write_text("0 1 3\n")  # Beijing-Paris (8,200 km) in 3 ms
    result = import_hulk(nodes, edges)
    assert result.links.empty
    assert result.quarantine["rule"].tolist() == ["edges.faster_than_light"]
    assert result.quarantine["line"].tolist() == [1]


def test_hulk47_pair_13_14_is_averaged_and_warned(hulk47_result: ImportResult) -> None:
    assert _link(hulk47_result, 13, 14)["latency_mean_ms"] == pytest.approx(7.0)  # 10 and 4
    (warning,) = _rules(hulk47_result)["edges.asymmetric"]
    assert warning.severity == "warning" and warning.count == 1
    assert "13-14" in warning.message
    (example,) = warning.examples
    assert (example["forward_ms"], example["reverse_ms"]) == (10.0, 4.0)


def test_hulk47_repeated_11_30_is_averaged_and_warned(hulk47_result: ImportResult) -> None:
    assert _link(hulk47_result, 11, 30)["latency_mean_ms"] == pytest.approx(239.5)  # 214, 265
    (warning,) = _rules(hulk47_result)["edges.conflicting_duplicate"]
    assert warning.count == 1 and warning.examples[0]["latency_ms"] == [214.0, 265.0]


def test_hulk47_findings_are_warnings_only(hulk47_result: ImportResult) -> None:
    assert {f.severity for f in hulk47_result.findings} == {"warning"}
    assert set(_rules(hulk47_result)) == {
        "edges.self_loop",
        "edges.faster_than_light",
        "edges.asymmetric",
        "edges.conflicting_duplicate",
    }


# --- small files ------------------------------------------------------------------------------

NODES = "node,City,Capability,Memory\n0,Beijing,8.6,152\n1,Tokyo,8,320\n2,Paris,7,384\n"
EDGES = "0 1 74\n0 2 290\n1 2 150\n"


def _files(tmp_path: Path, nodes: str | bytes = NODES, edges: str | bytes = EDGES) -> tuple:
    paths = []
    for name, text in (("node_feature.csv", nodes), ("edge.txt", edges)):
        path = tmp_path / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", newline="")
        paths.append(path)
    return tuple(paths)


def _error(tmp_path: Path, nodes: str | bytes = NODES, edges: str | bytes = EDGES) -> InputError:
    with pytest.raises(InputError) as caught:
        import_hulk(*_files(tmp_path, nodes, edges))
    return caught.value


def _assert_names(error: InputError, path: Path, rule: str, line: int | None) -> None:
    """The message names the file, the rule and (when given) the offending line."""
    message = str(error)
    assert error.rule == rule
    assert str(path) in message
    assert f"[{rule}]" in message
    if line is not None:
        assert f"line {line}:" in message


def test_small_fleet_imports(tmp_path: Path) -> None:
    result = import_hulk(*_files(tmp_path))
    assert result.inventory["city"].tolist() == ["Beijing", "Tokyo", "Paris"]
    assert result.links[["src", "dst"]].values.tolist() == [[0, 1], [0, 2], [1, 2]]
    assert result.findings == [] and result.quarantine.empty
    assert list(result.quarantine.columns) == list(QUARANTINE)


@pytest.mark.parametrize("which", ["nodes", "edges"])
def test_missing_file(tmp_path: Path, which: str) -> None:
    nodes, edges = _files(tmp_path)
    missing = tmp_path / "nope.txt"
    with pytest.raises(InputError) as caught:
        if which == "nodes":
            import_hulk(missing, edges)
        else:
            import_hulk(nodes, missing)
    _assert_names(caught.value, missing, f"{which}.missing_file", None)
    assert "does not exist" in str(caught.value)


@pytest.mark.parametrize("text", ["", "\r\n\r\n", "# no machines\n"])
def test_empty_node_file(tmp_path: Path, text: str) -> None:
    error = _error(tmp_path, nodes=text)
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.empty_file", None)


def test_node_file_with_only_a_header(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes="node,City,Capability,Memory\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.empty_file", 1)


@pytest.mark.parametrize("text", ["", "\n\n", "# measured 2024\n\n", "src dst latency_ms\n"])
def test_empty_edge_file(tmp_path: Path, text: str) -> None:
    error = _error(tmp_path, edges=text)
    _assert_names(error, tmp_path / "edge.txt", "edges.empty_file", None)


def test_missing_columns(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes="node,City,Memory\n0,Beijing,152\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.missing_columns", 1)
    assert "capability" in str(error)


def test_duplicate_columns(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes="node,City,Capability,Memory,city\n0,Beijing,8.6,152,X\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.duplicate_columns", 1)


def test_non_numeric_node_value(tmp_path: Path) -> None:
    nodes = NODES + "3,Rome,eight,152\n4,Rome,8,lots\n"
    error = _error(tmp_path, nodes=nodes)
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.non_numeric", 5)
    assert "line 6:" in str(error)  # every offending line, not just the first
    assert "Capability" in str(error) and "Memory" in str(error)


@pytest.mark.parametrize("value", ["nan", "inf", "", "1.5"])
def test_node_id_must_be_an_integer(tmp_path: Path, value: str) -> None:
    error = _error(tmp_path, nodes=NODES + f"{value},Rome,8,152\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.non_numeric", 5)


def test_node_values_out_of_range(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes=NODES + "3,Rome,8,0\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.out_of_range", 5)


def test_node_row_with_wrong_field_count(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes=NODES + "3,Rome,8\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.field_count", 5)


def test_duplicate_node_ids(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes=NODES + "1,Rome,8,152\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.duplicate_id", 5)
    assert "already on line 3" in str(error)


def test_node_file_not_utf8(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes=b"node,City,Capability,Memory\n0,\xff\xfe,8,1\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.encoding", None)


def test_edge_naming_an_unknown_node(tmp_path: Path) -> None:
    error = _error(tmp_path, edges=EDGES + "# comment\n0 7 30\n")
    _assert_names(error, tmp_path / "edge.txt", "edges.unknown_node", 5)
    assert "no machine 7" in str(error)


@pytest.mark.parametrize("latency", ["0", "-3", "-0.5"])
def test_non_positive_latency(tmp_path: Path, latency: str) -> None:
    error = _error(tmp_path, edges=f"0 1 74\n1 2 {latency}\n")
    _assert_names(error, tmp_path / "edge.txt", "edges.non_positive_latency", 2)


def test_a_latency_no_probe_waits_for_is_refused(tmp_path: Path) -> None:
    error = _error(tmp_path, edges="0 1 74\n1 2 1000000000\n")  # 11 days
    _assert_names(error, tmp_path / "edge.txt", "edges.latency_too_large", 2)
    assert "60000 ms" in str(error)


@pytest.mark.parametrize("row", ["0 1 fast", "0 x 10", "0 1 nan", "0 1 10 lots"])
def test_non_numeric_edge_value(tmp_path: Path, row: str) -> None:
    error = _error(tmp_path, edges=f"0 2 290\n{row}\n")
    _assert_names(error, tmp_path / "edge.txt", "edges.non_numeric", 2)


@pytest.mark.parametrize("row", ["0 1", "0 1 10 5 9"])
def test_edge_row_with_wrong_field_count(tmp_path: Path, row: str) -> None:
    error = _error(tmp_path, edges=f"0 2 290\n\n{row}\n")
    _assert_names(error, tmp_path / "edge.txt", "edges.field_count", 3)


def test_non_positive_bandwidth(tmp_path: Path) -> None:
    error = _error(tmp_path, edges="0 1 74 0\n")
    _assert_names(error, tmp_path / "edge.txt", "edges.non_positive_bandwidth", 1)


def test_error_mentions_the_other_rules_broken(tmp_path: Path) -> None:
    error = _error(tmp_path, nodes=NODES + "3,Rome,x,152\n1,Rome,8,152\n")
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.non_numeric", 5)
    assert "also nodes.duplicate_id (1 line)" in str(error)


def test_error_lists_all_offending_lines(tmp_path: Path) -> None:
    edges = "".join(f"0 {9 + i} 10\n" for i in range(7))
    error = _error(tmp_path, edges=edges)
    assert error.rule == "edges.unknown_node"
    assert len(error.examples) == 7
    assert "(7 lines)" in str(error) and "… and 2 more" in str(error)


# --- formats and extras -----------------------------------------------------------------------


def test_crlf_comments_header_and_case_insensitive_columns(tmp_path: Path) -> None:
    nodes = " # exported fleet\r\n NODE , city ,CAPABILITY, memory \r\n0,  tokyo ,8.6,96\r\n\r\n"
    nodes += "1,BEIJING,8,320\r\n"
    edges = "src dst latency_ms\r\n# measured\r\n0, 1, 74   # trans-Pacific\r\n\r\n"
    result = import_hulk(*_files(tmp_path, nodes, edges))
    assert result.inventory["city"].tolist() == ["Tokyo", "Beijing"]
    assert result.links[["src", "dst", "latency_mean_ms"]].values.tolist() == [[0, 1, 74]]


def test_gpus_column(tmp_path: Path) -> None:
    nodes = "node,City,Capability,Memory,GPUs\n0,Beijing,8.6,152,4\n1,Tokyo,8,320,2\n"
    result = import_hulk(*_files(tmp_path, nodes, "0 1 74\n"))
    assert result.inventory["gpu_count"].tolist() == [4, 2]
    assert result.inventory["gpu_count"].dtype == "int64"


def test_default_gpu_count_without_gpus_column(tmp_path: Path) -> None:
    result = import_hulk(*_files(tmp_path), default_gpu_count=4)
    assert (result.inventory["gpu_count"] == 4).all()


def test_bad_gpus_value(tmp_path: Path) -> None:
    nodes = "node,City,Capability,Memory,gpus\n0,Beijing,8.6,152,4\n1,Tokyo,8,320,0\n"
    error = _error(tmp_path, nodes=nodes)
    _assert_names(error, tmp_path / "node_feature.csv", "nodes.out_of_range", 3)
    assert "gpus 0" in str(error)


def test_bandwidth_column(tmp_path: Path) -> None:
    edges = "0 1 74 2.5\n1 0 74 3.5\n0,2,290,1\n1 2 150\n"
    result = import_hulk(*_files(tmp_path, edges=edges))
    links = result.links.set_index(["src", "dst"])["beta_gbps"]
    bandwidth = links.to_dict()
    assert bandwidth[(0, 1)] == pytest.approx(3.0)  # mean of the two directions
    assert bandwidth[(0, 2)] == 1.0
    assert math.isnan(bandwidth[(1, 2)])
    assert result.findings == []


def test_reverse_direction_is_merged_into_one_link(tmp_path: Path) -> None:
    result = import_hulk(*_files(tmp_path, edges="2 0 290\n1 0 70\n0 1 78\n"))
    links = result.links
    assert links[["src", "dst"]].values.tolist() == [[0, 1], [0, 2]]
    assert links["latency_mean_ms"].tolist() == [74.0, 290.0]
    assert result.findings == []  # 70 vs 78 ms is not strongly asymmetric


def test_exact_duplicate_rows_are_quarantined(tmp_path: Path) -> None:
    result = import_hulk(*_files(tmp_path, edges="0 1 74\n0 1 74\n0 2 290\n0 1 74\n"))
    assert len(result.links) == 2
    assert result.quarantine["line"].tolist() == [2, 4]
    assert set(result.quarantine["rule"]) == {"edges.duplicate"}
    (warning,) = result.findings
    assert (warning.rule, warning.count) == ("edges.duplicate", 2)


def test_only_self_loops_give_an_empty_link_table(tmp_path: Path) -> None:
    result = import_hulk(*_files(tmp_path, edges="0 0 1\n1 1 1\n"))
    assert result.links.empty
    assert result.links.dtypes.astype(str).to_dict() == schemas.LINKS
    assert len(result.quarantine) == 2


def test_unresolved_location_is_a_warning_naming_the_machines(tmp_path: Path) -> None:
    nodes = NODES + "3, Hulkville ,8,152\n4,Hulkville,8,152\n"
    result = import_hulk(*_files(tmp_path, nodes=nodes))
    inventory = result.inventory.set_index("node_id")
    assert inventory.loc[3, "city"] == "Hulkville"  # trimmed original text
    assert pd.isna(inventory.loc[3, "country"])
    assert math.isnan(inventory.loc[3, "lat"]) and math.isnan(inventory.loc[4, "lon"])
    (warning,) = result.findings
    assert warning.rule == "nodes.unresolved_location" and warning.severity == "warning"
    assert "'Hulkville'" in warning.message and "3, 4" in warning.message
    assert warning.count == 2


def test_later_validations_keep_the_imports_findings_while_its_link_table_stands(
    tmp_path: Path, settings: Settings
) -> None:
    """Only the import reads the node and edge files: what it set aside stays in every later
    report of the folder (a nightly validates it again), until the link table is another."""
    from hulk.stages import import_hulk as import_stage
    from hulk.stages import validate as validate_stage

    nodes, edges = _files(tmp_path, edges=EDGES + "1 1 3\n")
    out = tmp_path / "imported"
    imported = import_stage.run(nodes, edges, out, settings)
    assert [f.rule for f in imported.findings] == ["edges.self_loop"]

    def reported() -> list[str]:
        report = json.loads((out / "validation" / "report.json").read_text())
        assert report["counts"]["warnings"] == len(report["findings"])
        return [f["rule"] for f in report["findings"]]

    assert reported() == ["edges.self_loop"]
    again = validate_stage.run(out, settings)
    assert [f.rule for f in again.findings] == ["edges.self_loop"]
    assert reported() == ["edges.self_loop"]
    # Another link table (one link less): the import's findings are about files it no longer
    # comes from.
    links = pd.read_parquet(out / schemas.LINKS_FILE)
    fileio.write_parquet(out / schemas.LINKS_FILE, links.iloc[:-1])
    validate_stage.run(out, settings)
    assert reported() == []
