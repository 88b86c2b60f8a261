"""The Great Expectations session: a batch's result is the one its checkpoint gives, and the
per-thread scratch sessions build each suite from the settings it is checked with."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from hulk.settings import Range, ValidateSettings
from hulk.validation import inventory, links, validate_inventory
from hulk.validation._common import Machines
from hulk.validation._gx import GxSession
from tests.data.test_validation import NOW, SETTINGS, make_inventory, make_links


def _links_batch() -> pd.DataFrame:
    """A link table with the columns the links suite reads, one loss rate out of range."""
    machines = Machines.from_inventory(make_inventory())
    frame = make_links(make_inventory())
    frame.loc[1, "loss_rate"] = 1.5
    frame["src_row"] = machines.positions(frame["src"].to_numpy())
    frame["dst_row"] = machines.positions(frame["dst"].to_numpy())
    frame["fiber_floor_ms"] = machines.floor_ms(
        frame["src_row"].to_numpy(), frame["dst_row"].to_numpy(), SETTINGS.fiber_km_per_ms
    )
    return frame


def _comparable(result) -> dict:
    """The result as JSON, without the time GX loaded the batch (the only field that differs
    between two validations of one batch)."""
    value = result.to_json_dict()
    del value["meta"]["batch_markers"]["ge_load_time"]
    return value


@pytest.mark.parametrize(
    ("suite", "checks", "frame"),
    [
        (links.SUITE, links.checks, _links_batch),
        (
            inventory.SUITE,
            lambda: inventory.checks(SETTINGS),
            lambda: make_inventory().assign(gpu_count=[8, 0, 8, 8]),
        ),
    ],
    ids=["links", "inventory"],
)
def test_a_batch_s_result_and_store_key_are_its_checkpoint_s(suite, checks, frame) -> None:
    from great_expectations.core.run_identifier import RunIdentifier

    session = GxSession.ephemeral(NOW)
    batch = frame()
    found = session.validate(suite, checks, batch, "night")
    assert any(check.failed for check in found)  # the comparison covers failures too
    (key,) = session._stored
    ours = session.context.validation_results_store.get(key)

    checkpoint, _ = session._definitions[suite]
    run = checkpoint.run(
        batch_parameters={"dataframe": batch},
        run_id=RunIdentifier(run_name="night", run_time=NOW),
    )
    ((their_key, theirs),) = run.run_results.items()
    assert key == their_key
    theirs.meta["batch_spec"] = ours.meta["batch_spec"]  # the asset is named before storing
    assert _comparable(ours) == _comparable(theirs)


def test_scratch_sessions_build_the_suite_from_the_settings_given() -> None:
    machines = make_inventory()  # compute capability 8.6
    strict = SETTINGS.model_copy(update={"compute_capability": Range(low=9.0, high=12.0)})
    assert validate_inventory(machines, "m.csv", SETTINGS) == []
    assert {f.rule for f in validate_inventory(machines, "m.csv", strict)} == {
        "inventory.compute_capability"
    }
    assert validate_inventory(machines, "m.csv", SETTINGS) == []
    assert validate_inventory(machines, "m.csv", ValidateSettings()) == []


def test_a_scratch_validation_leaves_the_current_project_alone(tmp_path) -> None:
    from great_expectations.data_context.data_context.context_factory import project_manager

    session = GxSession.project(tmp_path, tmp_path / "docs", dt.datetime.now(dt.UTC))
    current = project_manager.get_current_project()
    validate_inventory(make_inventory(), "m.csv", SETTINGS)
    assert project_manager.get_current_project() is current is session.context
