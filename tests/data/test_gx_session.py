"""The Great Expectations session: a batch's result is the one its checkpoint gives (also with
the objects GX repeats computed once, `hulk.validation.gx_memo`), and the per-thread scratch
sessions build each suite from the settings it is checked with."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from hulk.settings import Range, ValidateSettings
from hulk.validation import gx_memo, inventory, links, logs, validate_inventory
from hulk.validation._common import Machines
from hulk.validation._gx import GxSession
from tests.data.test_validation import (
    DAYS,
    NOW,
    SETTINGS,
    append,
    make_days,
    make_inventory,
    make_links,
    row,
)


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


def _logs_batch() -> tuple[pd.DataFrame, dict]:
    """A day of the logs suite with rows that break its rules, the row-conditioned ones too."""
    day = DAYS[1]
    frame = append(
        make_days()[day],
        row(day, status="lost", elapsed_ms=np.nan),
        row(day, status="timeout", elapsed_ms=12.0),
        row(day, elapsed_ms=np.nan),
        row(day, elapsed_ms=-1.0),
        row(day, elapsed_ms=1.0),
        row(day, src=1, dst=1, elapsed_ms=0.3),
        row(DAYS[2]),
    )
    machines = Machines.from_inventory(make_inventory())
    src_row = machines.positions(frame["src"].to_numpy())
    dst_row = machines.positions(frame["dst"].to_numpy())
    frame = frame.assign(
        src_row=src_row,
        dst_row=dst_row,
        is_self_loop=frame["src"] == frame["dst"],
        elapsed_is_infinite=np.isinf(frame["elapsed_ms"]),
        fiber_floor_ms=machines.floor_ms(src_row, dst_row, SETTINGS.fiber_km_per_ms),
        status=frame["status"].astype("category"),
    )
    parameters = {
        "ts_min": pd.Timestamp(day, tz="UTC"),
        "ts_max": pd.Timestamp(DAYS[2], tz="UTC"),
        "elapsed_max": SETTINGS.max_elapsed_ms,
    }
    return frame, parameters


def test_a_lean_log_batch_s_result_is_its_checkpoint_s() -> None:
    """The logs suite (row conditions, suite parameters) validated lean, twice in one session
    (nothing may leak from one batch into the next), gives what GX's own checkpoint gives."""
    from great_expectations.core.run_identifier import RunIdentifier

    assert gx_memo.install()  # the installed GX is the one the shortcuts were checked against
    frame, parameters = _logs_batch()
    other = {**parameters, "ts_min": parameters["ts_min"] - pd.Timedelta(days=1)}
    session = GxSession.ephemeral(NOW)
    rows = []
    for batch, values in ((frame, parameters), (frame.iloc[1:].reset_index(drop=True), other)):
        found = session.validate(logs.SUITE, logs.checks, batch, "night", values, keep=True)
        rows.append({c.rule: c.unexpected_index.tolist() for c in found if c.failed})
        assert {"logs.elapsed_missing", "logs.elapsed_on_failure", "logs.timestamp"} <= set(
            rows[-1]
        )
        ours = session.context.validation_results_store.get(session._stored[-1])
        checkpoint, _ = session._definitions[logs.SUITE]
        run = checkpoint.run(
            batch_parameters={"dataframe": batch},
            expectation_parameters=values,
            run_id=RunIdentifier(run_name="night", run_time=NOW),
        )
        ((_, theirs),) = run.run_results.items()
        theirs.meta["batch_spec"] = ours.meta["batch_spec"]
        assert _comparable(ours) == _comparable(theirs)
    # The second batch lacks the first row: the same rows are found, one position earlier.
    assert rows[1] == {rule: [i - 1 for i in found] for rule, found in rows[0].items()}


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
