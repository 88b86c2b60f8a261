"""An inventory `hulk validate` refuses is refused by every command that plans from it (issue 15,
item 7): assign (the scheduler's run and the whole-fleet systems), replan and evaluate stop with
one line naming the file, the field and the rule, exit code 2, and leave the placements, the job
store and the plot as the last good run wrote them.

Planning checks the inventory with the suite's own rules evaluated by pandas
(`hulk.validation.check_inventory`); the first test pins that it finds exactly what the Great
Expectations suite finds, so the two can never drift apart.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hulk import schemas
from hulk.errors import InputError
from hulk.jobs import dump_jobs, preset_jobs
from hulk.settings import Settings
from hulk.validation import check_inventory, require_valid_inventory, validate_inventory
from tests.data.test_validation import SETTINGS, make_inventory
from tests.faults.conftest import digest, invoke

REPO = Path(__file__).resolve().parents[2]


def _broken_inventories() -> dict[str, pd.DataFrame]:
    """One inventory per rule, each breaking it on one or two machines (and a clean one)."""
    good = make_inventory()
    cases = {"clean": good}

    def broken(**changes: tuple[list[int], object]) -> pd.DataFrame:
        frame = good.copy()
        for column, (rows, value) in changes.items():
            frame.loc[rows, column] = value
        return frame

    cases["memory_gb"] = broken(memory_gb=([1], -64.0))
    cases["memory_zero"] = broken(memory_gb=([0, 2], 0.0))
    cases["memory_infinite"] = broken(memory_gb=([1], np.inf))
    cases["gpu_count"] = broken(gpu_count=([3], 0))
    cases["compute_capability"] = broken(compute_capability=([0], 99.0))
    cases["status"] = broken(status=([2], "retired"))
    cases["coordinates"] = broken(lat=([1], 91.0), lon=([2], -200.0))
    cases["missing_value"] = broken(memory_gb=([1], np.nan), status=([3], pd.NA))
    cases["missing_coordinates"] = broken(lat=([0], np.nan), lon=([0], np.nan))
    cases["unique_node_id"] = broken(node_id=([1], int(good.loc[0, "node_id"])))
    cases["several"] = broken(memory_gb=([0], -1.0), gpu_count=([0, 1], -3), status=([2], "x"))
    return {name: schemas.conform(frame, schemas.INVENTORY) for name, frame in cases.items()}


@pytest.mark.parametrize("case", sorted(_broken_inventories()))
def test_planning_finds_what_the_suite_finds(case: str) -> None:
    inventory = _broken_inventories()[case]
    fast = check_inventory(inventory, "machines.csv", SETTINGS)
    assert fast == validate_inventory(inventory, "machines.csv", SETTINGS)
    if case not in ("clean", "missing_coordinates"):
        assert any(f.severity == "error" for f in fast), case


def test_the_first_error_is_refused_naming_file_field_and_rule() -> None:
    inventory = _broken_inventories()["memory_gb"]
    with pytest.raises(InputError) as caught:
        require_valid_inventory(inventory, Path("data/machines.csv"), SETTINGS)
    error = caught.value
    assert (error.path, error.rule) == ("data/machines.csv", "inventory.memory_gb")
    node = int(inventory.loc[1, "node_id"])
    assert error.render().splitlines()[0] == (
        f"data/machines.csv: [inventory.memory_gb] memory_gb must be positive and at most "
        f"1,000,000; machine(s) {node}"
    )
    assert error.examples[0]["memory_gb"] == -64.0
    # A warning (a machine without coordinates) does not stop planning.
    require_valid_inventory(_broken_inventories()["missing_coordinates"], "m.csv", SETTINGS)


# --- on the command line ------------------------------------------------------------------------


def _outputs(data: Path) -> dict[str, str]:
    """Every file under the placements folder and the job store, with its sha256."""
    files = sorted((data / "placements").rglob("*")) + sorted((data / "jobs").glob("jobs.db*"))
    return {str(p.relative_to(data)): digest(p) for p in files if p.is_file()}


def _break_memory(data: Path, row: int) -> tuple[Path, int]:
    path = data / schemas.INVENTORY_FILE
    inventory = pd.read_csv(path)
    inventory.loc[row, "memory_gb"] = -80.0
    inventory.to_csv(path, index=False)
    return path, int(inventory.loc[row, "node_id"])


def _refused(data: Path, commands: list[tuple[object, ...]], path: Path, node: int) -> None:
    """Each command exits 2 with the rule's one line, and writes nothing."""
    before = _outputs(data)
    latest = (data / "placements" / "latest.json").read_bytes()
    for command in commands:
        result = invoke(*command)
        assert result.exit_code == 2, (command, result.output)
        first = result.output.strip().splitlines()[0]
        assert first.endswith(
            f"{path}: [inventory.memory_gb] memory_gb must be positive and at most 1,000,000; "
            f"machine(s) {node}"
        ), (command, result.output)
        assert "Traceback" not in result.output
        assert _outputs(data) == before, command
    assert (data / "placements" / "latest.json").read_bytes() == latest


def test_graph_assign_replan_evaluate_refuse_a_negative_memory_inventory(
    tiny: Path, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(dump_jobs(preset_jobs(["GPT-2-1.5B", "BERT-large"])))
    fast = tmp_path / "params.yaml"
    fast.write_text("teacher: {max_evaluations: 40, time_budget_s: 20.0, random_starts: 0}\n")
    common = ("--params", fast)
    for command in (("assign", "--data", tiny, "--jobs", jobs), ("evaluate", "--data", tiny)):
        result = invoke(*common, *command)
        assert result.exit_code == 0, result.output
    path, node = _break_memory(tiny, 2)
    _refused(
        tiny,
        [
            (*common, "assign", "--data", tiny, "--jobs", jobs),  # the scheduler's run
            (*common, "assign", "--data", tiny, "--jobs", jobs, "--strategy", "B"),  # whole fleet
            (*common, "replan", "--data", tiny, "--fail", 4),
            (*common, "evaluate", "--data", tiny),
            (*common, "graph", "--data", tiny),  # the step before planning refuses it too
        ],
        path,
        node,
    )


def test_fleet_loader_refuses_for_every_planner(tiny: Path) -> None:
    """`load_frames` is where assign, replan, evaluate, the fleet labels and the training run's
    GNN plots read the fleet: the check lives there, so none of them can skip it."""
    from hulk.data_folder import load_fleet, load_frames

    settings = Settings()
    path = tiny / schemas.INVENTORY_FILE
    inventory = pd.read_csv(path)
    inventory.loc[0, "status"] = "retired"
    inventory.to_csv(path, index=False)
    for load in (load_fleet, load_frames):
        with pytest.raises(InputError) as caught:
            load(tiny, settings)
        assert (caught.value.path, caught.value.rule) == (str(path), "inventory.status")


@pytest.mark.slow
def test_a_night_folder_that_validate_refuses_is_refused_by_assign(
    generated: Path, params: Path
) -> None:
    """The case as an operator meets it: after a good night, the inventory is edited."""
    (generated / "jobs").mkdir(exist_ok=True)
    shutil.copyfile(REPO / "data" / "jobs" / "upcoming.yaml", generated / "jobs" / "upcoming.yaml")
    for command in (("validate",), ("ingest",), ("graph",), ("assign",), ("evaluate",)):
        result = invoke("--params", params, *command)
        assert result.exit_code == 0, (command, result.output)
    path, node = _break_memory(generated, 5)
    validated = invoke("--params", params, "validate")
    assert validated.exit_code == 2 and "[inventory.memory_gb]" in validated.output
    _refused(
        generated,
        [
            ("--params", params, "assign"),
            ("--params", params, "assign", "--strategy", "teacher"),
            ("--params", params, "replan", "--fail", node),
            ("--params", params, "evaluate"),
        ],
        path,
        node,
    )
