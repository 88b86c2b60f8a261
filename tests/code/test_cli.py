"""The command line: the same pipeline functions, clean errors, nothing half-written."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from hulk.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]

# A small, fast window: two days, hourly latency probes; a small teacher search for `assign`
# (the default's 2,000 evaluations take seconds: these tests check the commands, not the plans).
TINY = {
    "generate": {
        "days": 2,
        "probe_interval_s": 3600,
        "throughput_interval_s": 3 * 3600,
    },
    "assign": {"jobs_file": str(REPO / "data" / "jobs" / "upcoming.yaml")},
    "teacher": {"max_evaluations": 40, "time_budget_s": 20.0, "random_starts": 0},
}


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def params(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


@pytest.fixture
def generated(tmp_path: Path, params: Path) -> Path:
    data = tmp_path / "data"
    result = invoke("--params", params, "generate", "--out", data)
    assert result.exit_code == 0, result.output
    return data


def test_every_command_has_help() -> None:
    for command in ("generate", "import-hulk", "ingest", "validate", "graph", "run", "nightly"):
        result = invoke(command, "--help")
        assert result.exit_code == 0
        assert "Usage" in result.output


def test_command_lists_give_each_command_its_summary_whole() -> None:
    """`hulk --help` and `hulk jobs --help` list each command with its docstring's first
    paragraph on one line (Typer keeps the docstring's line breaks, which split it)."""
    import inspect

    from hulk.cli import jobs_app

    for group, args in ((app, ["--help"]), (jobs_app, ["jobs", "--help"])):
        result = runner.invoke(app, args, env={"COLUMNS": "1000"})
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        for info in group.registered_commands:
            assert info.callback is not None and info.callback.__doc__
            name = info.name or info.callback.__name__.replace("_", "-")
            first = " ".join(inspect.cleandoc(info.callback.__doc__).split("\n\n")[0].split())
            assert any(f" {name} " in line and first in line for line in lines), (name, first)


@pytest.mark.slow
def test_version_and_help_text_as_written() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"hulk {version('hulk')}"
    # Square brackets in help text are not read as markup and lost.
    result = runner.invoke(app, ["import-hulk", "--help"], terminal_width=200)
    assert "latency_ms [gbit/s]" in result.output and "Memory[, gpus]" in result.output


def test_progress_without_a_terminal_is_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    from hulk.cli import progress_bar

    with progress_bar("labelling") as progress:  # pytest's stderr is not a terminal
        for done in range(41):
            progress(done, 40)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("labelling: 0/40 (0%), 0 s elapsed")
    assert lines[-1].endswith("labelling: 40/40 (100%), 0 s elapsed")
    assert len(lines) == 11  # every 10 %


@pytest.mark.slow
def test_stages_chain_every_step(tmp_path: Path, params: Path) -> None:
    # `hulk run` is generate + the nightly Prefect flow (tests/flows); the DVC stages run the
    # same steps one by one, without training (the teacher places the jobs).
    data = tmp_path / "data"
    for stage in ("generate", "validate", "ingest", "graph", "assign", "evaluate"):
        result = invoke("--params", params, "stage", stage)
        assert result.exit_code == 0, result.output
    for name in ("machines.csv", "links.parquet", "quarantine.parquet"):
        assert (data / name).exists(), name
    assert (data / "validation" / "docs" / "index.html").exists()
    report = json.loads((data / "validation" / "report.json").read_text())
    assert report["ok"] and report["suites"]["links"]["validated"]
    snapshot = json.loads((data / "graph" / "snapshot.json").read_text())
    assert snapshot["nodes"] == 47 and snapshot["links"] == len(
        pd.read_parquet(data / "links.parquet")
    )
    details = data / "metrics" / "details" / "validate.json"
    assert json.loads(details.read_text())["errors"] == 0
    # Validating the same inputs again (its days now from the cache) gives the same metrics:
    # DVC sees no change where the inputs made none.
    before = details.read_bytes()
    assert invoke("--params", params, "stage", "validate").exit_code == 0
    assert details.read_bytes() == before
    latest = json.loads((data / "placements" / "latest.json").read_text())
    assert latest["schema"] == "hulk.placements/v1" and latest["strategy"] == "teacher"
    # The default jobs have lengths: each starts now or waits for a group it finishes sooner
    # on, and every one has its start and finish.
    assert "placed" in {job["status"] for job in latest["jobs"]}
    for job in latest["jobs"]:
        assert job["status"] in ("placed", "queued") and job["start_at"] and job["finish_at"]
        assert job["status"] == "placed" or job["waits_for"]
    assert (data / "placements" / "latest.png").exists()


@pytest.mark.slow
def test_steps_one_by_one_and_ingest_reuses_validation(generated: Path, params: Path) -> None:
    assert invoke("--params", params, "validate", "--data", generated).exit_code == 0
    assert (generated / "validation" / "validated.json").exists()
    result = invoke("--params", params, "ingest", "--out", generated)
    assert result.exit_code == 0, result.output
    assert invoke("--params", params, "graph", "--data", generated).exit_code == 0
    first = (generated / "links.parquet").read_bytes()
    # Same inputs, same bytes; --data names the folder as for every other step.
    assert invoke("--params", params, "ingest", "--data", generated).exit_code == 0
    assert (generated / "links.parquet").read_bytes() == first


def test_ingest_of_other_logs_keeps_the_rows_it_quarantined(
    generated: Path, params: Path, tmp_path: Path
) -> None:
    out = tmp_path / "mine"
    logs, inventory = generated / "logs", generated / "machines.csv"
    args = ("--params", params, "ingest", "--logs", logs, "--inventory", inventory, "--out", out)
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    quarantine = pd.read_parquet(out / "quarantine.parquet")
    shown = re.search(r"quarantined_rows: (\d+)", result.output)
    assert shown and int(shown[1]) == len(quarantine) > 0, result.output
    # The next ingest of the same logs reuses them rather than validating again; the record
    # names the machines that went silent, for the assign runs.
    record = (out / "validation" / "validated.json").read_bytes()
    assert isinstance(json.loads(record)["stale_machines"], list)
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert (out / "validation" / "validated.json").read_bytes() == record
    assert pd.read_parquet(out / "quarantine.parquet").equals(quarantine)


@pytest.mark.slow
def test_validation_names_log_files_from_the_data_folder_wherever_it_is(
    generated: Path, params: Path, tmp_path: Path
) -> None:
    import shutil

    assert invoke("--params", params, "validate", "--data", generated).exit_code == 0
    quarantine = pd.read_parquet(generated / "quarantine.parquet")
    assert len(quarantine) and quarantine["file"].str.match(r"logs/day=[-\d]+/").all()
    # A copy (its day cache included) validated there, by an absolute path: the same bytes.
    moved = tmp_path / "elsewhere" / "data"
    shutil.copytree(generated, moved)
    result = invoke("--params", params, "validate", "--data", moved.resolve())
    assert result.exit_code == 0, result.output
    for name in ("quarantine.parquet", "validation/validated.json"):
        assert (moved / name).read_bytes() == (generated / name).read_bytes(), name
    report = json.loads((moved / "validation" / "report.json").read_text())
    shown = [e["file"] for f in report["findings"] for e in f["examples"] if "file" in e]
    assert shown and all(name.startswith("logs/") for name in shown)


def test_ingest_refuses_an_inventory_validation_refuses(generated: Path, params: Path) -> None:
    inventory = generated / "machines.csv"
    rows = inventory.read_text().splitlines()
    fields = rows[0].split(",")
    first = rows[1].split(",")
    first[fields.index("memory_gb")] = "inf"  # no memory figure
    inventory.write_text("\n".join([rows[0], ",".join(first), *rows[2:]]) + "\n")
    result = invoke("--params", params, "ingest", "--data", generated)
    assert result.exit_code == 2, result.output
    assert "[inventory.memory_gb]" in result.output
    assert not (generated / "links.parquet").exists()


@pytest.mark.slow
def test_append_day_adds_the_next_partition(generated: Path, params: Path) -> None:
    before = sorted(p.name for p in (generated / "logs").iterdir())
    result = invoke("--params", params, "generate", "--out", generated, "--append-day")
    assert result.exit_code == 0, result.output
    after = sorted(p.name for p in (generated / "logs").iterdir())
    assert after[:-1] == before and after[-1] == "day=2026-11-21"
    assert invoke("--params", params, "ingest", "--out", generated).exit_code == 0


def test_append_day_continues_the_seed_and_settings_the_logs_were_made_with(
    tmp_path: Path, params: Path
) -> None:
    from hulk.generate import write_dataset
    from hulk.presets import build_fleet
    from hulk.settings import load_settings

    data = tmp_path / "data"
    assert invoke("--params", params, "generate", "--out", data, "--seed", 3).exit_code == 0
    made_with = load_settings(params).generate
    # params.yaml changes after the logs were made: the new day still continues them.
    changed = yaml.safe_load(params.read_text())
    changed["generate"]["loss_rate"] = {"low": 0.2, "high": 0.3}
    params.write_text(yaml.safe_dump(changed))
    result = invoke("--params", params, "generate", "--data", data, "--append-day")
    assert result.exit_code == 0, result.output
    assert "seed: 3" in result.output
    longer = tmp_path / "longer"
    end = made_with.end_date + dt.timedelta(days=1)
    inventory = build_fleet(made_with.preset, 3, made_with)
    write_dataset(longer, inventory, 3, made_with, made_with.days + 1, end)
    day = f"logs/day={end.isoformat()}/probes.parquet"
    assert (data / day).read_bytes() == (longer / day).read_bytes()

    other = invoke("--params", params, "generate", "--data", data, "--append-day", "--seed", 5)
    assert other.exit_code == 2 and "[generate.seed]" in other.output, other.output


@pytest.mark.slow
def test_a_new_data_folder_gets_the_demo_jobs_and_assign_schedules_them(tmp_path: Path) -> None:
    from hulk.jobs import PAPER_MIX_4, demo_jobs_file

    # The repository's demo jobs file is what `generate` writes into a new folder.
    assert (REPO / "data" / "jobs" / "upcoming.yaml").read_text() == demo_jobs_file()
    params = tmp_path / "params.yaml"  # jobs_file at its default: it follows --data
    params.write_text(yaml.safe_dump({k: v for k, v in TINY.items() if k != "assign"}))
    data = tmp_path / "new"
    result = invoke("--params", params, "generate", "--data", data)
    assert result.exit_code == 0, result.output
    jobs = data / "jobs" / "upcoming.yaml"
    assert jobs.read_text() == demo_jobs_file()
    for step in ("validate", "ingest", "graph", "assign"):
        result = invoke("--params", params, step, "--data", data)
        assert result.exit_code == 0, f"{step}: {result.output}"
    latest = json.loads((data / "placements" / "latest.json").read_text())
    assert {job["job"] for job in latest["jobs"]} == set(PAPER_MIX_4)
    assert "`hulk publish`, or the assign flow's next run" in " ".join(result.output.split())
    # Placements written elsewhere (--out) are not what `hulk publish` publishes: it says so.
    other = invoke("--params", params, "assign", "--data", data, "--out", tmp_path / "other")
    assert other.exit_code == 0, other.output
    said = " ".join(other.output.split())
    assert "outside the data folder's placements (--out)" in said and "not yet" not in said
    # The user's own jobs file is never replaced.
    jobs.write_text("jobs: []\n")
    assert invoke("--params", params, "generate", "--data", data).exit_code == 0
    assert jobs.read_text() == "jobs: []\n"


def test_append_day_refuses_options_it_cannot_honour(generated: Path, params: Path) -> None:
    for option in (["--days", "3"], ["--preset", "synthetic-200"]):
        args = ("--params", params, "generate", "--data", generated, "--append-day", *option)
        result = invoke(*args)
        assert result.exit_code == 2 and option[0] in result.output, result.output


def test_unknown_params_key_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "params.yaml"
    bad.write_text("generate:\n  dayz: 2\n")
    result = invoke("--params", bad, "validate")
    assert result.exit_code == 2
    assert "generate.dayz: unknown key" in result.output


@pytest.mark.slow
def test_broken_partition_stops_before_the_link_table(generated: Path, params: Path) -> None:
    day = sorted((generated / "logs").iterdir())[-1] / "probes.parquet"
    table = pq.read_table(day).drop_columns(["elapsed_ms"])
    pq.write_table(table, day)
    result = invoke("--params", params, "ingest", "--out", generated)
    assert result.exit_code == 2
    assert "probes.parquet" in result.output and "elapsed_ms" in result.output
    assert "Traceback" not in result.output
    assert not (generated / "links.parquet").exists()


@pytest.mark.slow
def test_bad_row_is_quarantined_and_the_run_goes_on(generated: Path, params: Path) -> None:
    day = sorted((generated / "logs").iterdir())[-1] / "probes.parquet"
    frame = pd.read_parquet(day)
    ok = frame.index[(frame["status"] == "ok") & (frame["elapsed_ms"] > 50)][0]
    frame.loc[ok, "elapsed_ms"] = 0.01  # far machines answering in 10 µs: impossible
    frame = pd.concat([frame, frame.iloc[[0]]])  # and one measurement logged twice
    frame.to_parquet(day, index=False)
    result = invoke("--params", params, "validate", "--data", generated)
    assert result.exit_code == 0, result.output
    assert "logs.faster_than_light" in result.output and "logs.duplicate" in result.output
    quarantine = pd.read_parquet(generated / "quarantine.parquet")
    assert set(quarantine["rule"]) == {"logs.faster_than_light", "logs.duplicate"}
    assert invoke("--params", params, "ingest", "--out", generated).exit_code == 0


@pytest.mark.slow
def test_unknown_machine_in_logs_is_an_error(generated: Path, params: Path) -> None:
    inventory = pd.read_csv(generated / "machines.csv")
    inventory[inventory["node_id"] != 3].to_csv(generated / "machines.csv", index=False)
    result = invoke("--params", params, "validate", "--data", generated)
    assert result.exit_code == 2
    assert "logs.unknown_machine" in result.output and "3" in result.output


def test_import_hulk_bad_file_names_file_and_line(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    edges = tmp_path / "edges.txt"
    nodes.write_text("node,City,Capability,Memory\n0,Beijing,8.6,152\n1,Tokyo,8,320\n")
    edges.write_text("0 1 74\n0 7 80\n")
    out = tmp_path / "out"
    result = invoke("import-hulk", "--nodes", nodes, "--edges", edges, "--out", out)
    assert result.exit_code == 2
    assert "edges.txt" in result.output and "edges.unknown_node" in result.output
    assert "line 2" in result.output
    assert not out.exists()


def test_import_hulk_into_a_folder_with_logs_is_refused(generated: Path, tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    edges = tmp_path / "edges.txt"
    nodes.write_text("node,City,Capability,Memory\n0,Beijing,8.6,152\n1,Tokyo,8,320\n")
    edges.write_text("0 1 74\n")
    before = (generated / "machines.csv").read_bytes()
    result = invoke("import-hulk", "--nodes", nodes, "--edges", edges, "--data", generated)
    assert result.exit_code == 2 and "[import.has_logs]" in result.output, result.output
    assert (generated / "machines.csv").read_bytes() == before
    assert not (generated / "links.parquet").exists()


def test_import_hulk_refuses_a_capability_without_a_peak_figure(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1 74\n")
    out = tmp_path / "out"
    nodes.write_text("node,City,Capability,Memory\n0,Beijing,8.6,152\n1,Tokyo,8,320\n")
    assert invoke("import-hulk", "--nodes", nodes, "--edges", edges, "--out", out).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    # 5.0 is a plausible capability, but params give it no peak TFLOPS: graph would refuse it.
    nodes.write_text("node,City,Capability,Memory\n0,Beijing,5.0,152\n1,Tokyo,8,320\n")
    result = invoke("import-hulk", "--nodes", nodes, "--edges", edges, "--out", out)
    assert result.exit_code == 2, result.output
    assert "nodes.csv" in result.output and "[hardware.peak_tflops]" in result.output
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.slow
def test_import_hulk_then_graph(hulk47: Path, tmp_path: Path) -> None:
    out = tmp_path / "imported"
    result = invoke(
        "import-hulk",
        "--nodes",
        hulk47 / "node_feature.csv",
        "--edges",
        hulk47 / "edge.txt",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "edges.faster_than_light" in result.output
    # A new folder gets the demo's jobs, so that its nightly has jobs to schedule.
    from hulk.jobs import demo_jobs_file

    assert (out / "jobs" / "upcoming.yaml").read_text() == demo_jobs_file()
    assert invoke("graph", "--data", out).exit_code == 0
    assert json.loads((out / "graph" / "snapshot.json").read_text())["nodes"] == 47


def test_graph_without_link_table_is_a_clear_error(generated: Path, params: Path) -> None:
    result = invoke("--params", params, "graph", "--data", generated)
    assert result.exit_code == 2
    assert "hulk ingest" in result.output


def test_a_terminal_without_the_marks_gets_question_marks_not_a_traceback(tmp_path: Path) -> None:
    """An ASCII locale (a cron job, an old terminal) cannot show ✓: the command still ends
    well once its work is done."""
    jobs = tmp_path / "jobs.yaml"
    job = {"name": "probe", "params_b": 0.34, "layers": 24, "hidden": 1024, "seq_len": 512}
    jobs.write_text(
        yaml.safe_dump(
            {"jobs": [job | {"global_batch": 256, "micro_batch": 8, "iterations": 1000}]}
        )
    )
    (tmp_path / "data").mkdir()
    env = os.environ | {"PYTHONIOENCODING": "ascii"}
    command = [sys.executable, "-m", "hulk.cli", "jobs", "submit", str(jobs)]
    done = subprocess.run(
        [*command, "--data", str(tmp_path / "data")], capture_output=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode("ascii") == "? submitted probe\n"


def test_a_params_file_that_is_not_there_is_an_error_not_the_defaults(tmp_path: Path) -> None:
    missing = tmp_path / "parms.yaml"  # mistyped
    result = invoke("--params", missing, "jobs", "list", "--data", tmp_path)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"{missing}: [settings.missing_file] no settings file here: --params names" in said


def test_validate_refuses_a_capability_without_a_peak_figure(generated: Path, params: Path) -> None:
    inventory = pd.read_csv(generated / "machines.csv")
    inventory.loc[0, "compute_capability"] = 6.0  # plausible, but params give no peak TFLOPS
    inventory.to_csv(generated / "machines.csv", index=False)
    result = invoke("--params", params, "validate", "--data", generated)
    assert result.exit_code == 2, result.output
    assert "machines.csv" in result.output and "[hardware.peak_tflops]" in result.output
    assert not (generated / "validation").exists()  # refused before anything is written


def test_a_steps_summary_line_keeps_the_gate_and_shortens_hashes_and_figures() -> None:
    from hulk.cli import _summary_line

    line = _summary_line(
        {
            "version": 2,
            "run_id": "72d5b5f1bdd646dba84f7165a80e6e71",  # MLflow's: kept whole
            "snapshot": "f650c34f102298ddc45e7ab38e0edba057ddb775818202371ac2a43bca75597b",
            "gate/score": 1.00241234,
            "test/node_accuracy": 0.8033,
            "makespan_s": 14.97036121002875,
            "outputs": {"x": "y"},
            "artifacts": {"table": "c76c66a9"},
        }
    )
    assert line == (
        "version: 2, run_id: 72d5b5f1bdd646dba84f7165a80e6e71, snapshot: f650c34f1022, "
        "gate/score: 1.002, makespan_s: 14.97"
    )


def test_an_input_error_is_one_line_whatever_a_library_said() -> None:
    from hulk.errors import InputError

    error = InputError("logs/x.parquet", "logs.readable", "Invalid data\nDeserializing  failed.")
    assert str(error) == "logs/x.parquet: [logs.readable] Invalid data Deserializing failed."


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2026-11-24T09:40:54Z", "11-24 09:40"),
        ("2027-01-01T19:31:00Z", "01-01 19:31"),  # next year, a month away: as near as any
        ("2027-07-01T00:00:00Z", "2027-07-01"),
        ("2025-12-24T09:40:54Z", "2025-12-24"),
        ("9999-12-31T00:00:00Z", "9999-12-31"),
        (None, "-"),
    ],
)
def test_table_times_near_now_show_the_time_and_far_ones_the_date(
    value: str | None, shown: str
) -> None:
    """A table's times are never wider than 11 characters: in December, when finishes fall in
    the next year, the job tables keep fitting 80 columns."""
    from hulk.cli import _utc_short

    now = dt.datetime(2026, 12, 1, 19, 0, tzinfo=dt.UTC)
    assert _utc_short(value, now) == shown and len(shown) <= 11
