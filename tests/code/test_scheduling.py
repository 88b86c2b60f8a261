"""The assign step as a scheduler: state across runs, start and finish times, locks, `hulk jobs`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from hulk.cli import app
from hulk.cost import Fleet
from hulk.data_folder import load_fleet
from hulk.errors import InputError
from hulk.job_store import FINISHED, RUNNING, JobStore
from hulk.jobs import PRESET_JOBS, Job, job_to_dict, load_jobs
from hulk.placements_read import read_placements
from hulk.settings import Settings, load_settings
from hulk.stages import assign as stage
from hulk.stages.scheduling import PlanMemory, drain, jobs_db
from tests.code.test_cli_assign import FAST

T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
runner = CliRunner()


def spec(name: str, preset: str, **extra: object) -> dict:
    return {**job_to_dict(PRESET_JOBS[preset]), "name": name, **extra}


def write_jobs(path: Path, *jobs: dict) -> Path:
    path.write_text(yaml.safe_dump({"jobs": list(jobs)}))
    return path


@pytest.fixture
def settings(params_file: Path) -> Settings:
    return load_settings(params_file)


def assign(data: Path, settings: Settings, jobs: Path, now: dt.datetime) -> dict:
    result = stage.run(
        data, settings, jobs_file=jobs, strategy="teacher", out_dir=data / "pl", now=now
    )
    return json.loads(result.outputs["placements"].read_text())


def by_job(doc: dict) -> dict[str, dict]:
    return {job["job"]: job for job in doc["jobs"]}


def test_a_new_job_never_moves_running_ones(tiny: Path, settings: Settings, tmp_path: Path) -> None:
    jobs = gpt_and_bert(tmp_path)
    first = by_job(assign(tiny, settings, jobs, T0))
    assert {first[j]["action"] for j in first} == {"start"}
    write_jobs(
        jobs,
        spec("gpt", "GPT-2-1.5B", iterations=1_000_000),
        spec("bert", "BERT-large", iterations=1_000_000),
        spec("t5", "T5-11B", iterations=1_000),
    )
    doc = assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15))
    second = by_job(doc)
    for name in ("gpt", "bert"):
        assert second[name]["action"] == "keep"
        assert second[name]["nodes"] == first[name]["nodes"]
        assert second[name]["replicas"] == first[name]["replicas"]
        assert second[name]["start_at"] == "2026-11-24T09:00:00Z"
    assert second["t5"]["action"] in ("start", "wait")
    # A quiet run after it plans nothing anew.
    quiet = assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=30))
    assert quiet["queue"]["plans_made"] == 0
    assert doc["queue"]["submitted"] == ["t5"]
    fleet = load_fleet(tiny, settings)[0]
    read_placements(tiny / "pl" / "latest.json", fleet)  # still a valid placements file


def test_a_finished_job_frees_its_machines(tiny: Path, settings: Settings, tmp_path: Path) -> None:
    jobs = write_jobs(
        tmp_path / "jobs.yaml",
        spec("short", "BERT-large", iterations=100),
        spec("long", "GPT-2-1.5B", iterations=1_000_000),
    )
    first = by_job(assign(tiny, settings, jobs, T0))
    finish = dt.datetime.fromisoformat(first["short"]["finish_at"].replace("Z", "+00:00"))
    expected = T0 + dt.timedelta(seconds=100 * first["short"]["estimate"]["iteration_s"])
    assert abs((finish - expected).total_seconds()) <= 1
    doc = assign(tiny, settings, jobs, finish + dt.timedelta(minutes=1))
    assert doc["queue"]["finished"] == ["short"]
    assert "short" not in by_job(doc)  # the file lists the jobs still to run
    with JobStore(jobs_db(tiny)) as store:
        done = store.get("short")
        assert done is not None and done.state == FINISHED
        assert (
            done.finished_at is not None and abs((done.finished_at - finish).total_seconds()) <= 1
        )
    # Its machines are free: a job added now may take them.
    write_jobs(
        jobs,
        spec("short", "BERT-large", iterations=100),
        spec("long", "GPT-2-1.5B", iterations=1_000_000),
        spec("next", "BERT-large", iterations=100),
    )
    later = by_job(assign(tiny, settings, jobs, finish + dt.timedelta(minutes=2)))
    assert later["next"]["action"] == "start"
    assert not set(later["next"]["nodes"]) & set(later["long"]["nodes"])


def gpt_and_bert(tmp_path: Path) -> Path:
    """A jobs file of two long jobs: GPT-2-1.5B ("gpt") and BERT-large ("bert")."""
    return write_jobs(
        tmp_path / "jobs.yaml",
        spec("gpt", "GPT-2-1.5B", iterations=1_000_000),
        spec("bert", "BERT-large", iterations=1_000_000),
    )


def test_a_job_marked_finished_between_runs_is_the_next_runs_finished_job(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    jobs = gpt_and_bert(tmp_path)
    assign(tiny, settings, jobs, T0)
    with JobStore(jobs_db(tiny)) as store:
        store.finish("bert", T0 + dt.timedelta(minutes=5))
    second = assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15))
    assert second["queue"]["finished"] == ["bert"]
    assert list(by_job(second)) == ["gpt"]
    third = assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=30))
    assert third["queue"]["finished"] == []  # told once


def report_silent(data: Path, machine: int) -> None:
    """The validation report of a day in which `machine` stopped reporting."""
    report = data / "validation" / "report.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    stale = {"severity": "warning", "rule": "logs.stale_machine", "machines": [machine]}
    report.write_text(json.dumps({"findings": [stale]}))


def test_a_machine_that_stopped_reporting_moves_only_its_job(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    jobs = gpt_and_bert(tmp_path)
    first = by_job(assign(tiny, settings, jobs, T0))
    silent = first["gpt"]["nodes"][0]
    report_silent(tiny, silent)
    result = stage.run(
        tiny, settings, jobs_file=jobs, strategy="teacher", out_dir=tiny / "pl",
        now=T0 + dt.timedelta(minutes=15),
    )  # fmt: skip
    second = by_job(json.loads(result.outputs["placements"].read_text()))
    assert second["bert"]["action"] == "keep" and second["bert"]["nodes"] == first["bert"]["nodes"]
    assert second["gpt"]["action"] in ("restart", "wait")
    assert silent not in second["gpt"]["nodes"] + second["gpt"]["planned_nodes"]
    assert [w.rule for w in result.warnings] == ["assign.drained_not_reporting"]
    assert str(silent) in result.warnings[0].message
    if second["gpt"]["action"] == "restart":  # the job's history says why it moved
        with JobStore(jobs_db(tiny)) as store:
            detail = store.events("gpt")[-1]["detail"]
        assert f"machine(s) [{silent}] of its run left the pool" in detail
    assert result.summary.queue is not None and result.summary.queue.drained == [silent]


def test_a_machine_added_since_the_last_ingest_is_drained_until_it_is_measured(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    import pandas as pd

    inventory = pd.read_csv(tiny / "machines.csv")
    newcomer = inventory.iloc[[0]].assign(node_id=6, memory_gb=1280.0)  # the largest machine
    pd.concat([inventory, newcomer]).to_csv(tiny / "machines.csv", index=False)
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1_000))
    result = stage.run(
        tiny, settings, jobs_file=jobs, strategy="teacher", out_dir=tiny / "pl", now=T0
    )
    doc = by_job(json.loads(result.outputs["placements"].read_text()))
    assert doc["bert"]["action"] == "start" and 6 not in doc["bert"]["nodes"]
    assert [w.rule for w in result.warnings] == ["assign.drained_unmeasured"]
    assert "[6]" in result.warnings[0].message and "links.parquet" in result.warnings[0].message
    assert result.summary.queue is not None and result.summary.queue.drained == [6]


def test_the_last_validations_record_says_which_machines_are_silent(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # `hulk ingest` validated newer logs itself: its record, not the older report, is the
    # fleet as it is (machine 1 reports again, machine 4 went silent).
    report_silent(tiny, 1)
    (tiny / "validation" / "validated.json").write_text(json.dumps({"stale_machines": [4]}))
    jobs = gpt_and_bert(tmp_path)
    result = stage.run(
        tiny, settings, jobs_file=jobs, strategy="teacher", out_dir=tiny / "pl", now=T0
    )
    assert result.summary.queue is not None and result.summary.queue.drained == [4]
    assert [w.rule for w in result.warnings] == ["assign.drained_not_reporting"]
    assert result.warnings[0].file == str(tiny / "validation" / "validated.json")


def test_a_run_at_the_same_clock_with_nothing_changed_gives_the_same_estimates(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # A job restarts elsewhere (its machine stopped reporting) and pays the checkpoint's
    # transfer; the store keeps when it computes again. A second run at the same clock reads
    # back that very instant: every estimate is the same, to the byte.
    jobs = gpt_and_bert(tmp_path)
    first = by_job(assign(tiny, settings, jobs, T0))
    report_silent(tiny, first["gpt"]["nodes"][0])
    later = T0 + dt.timedelta(minutes=15)
    moved, again = assign(tiny, settings, jobs, later), assign(tiny, settings, jobs, later)
    assert by_job(moved)["gpt"]["action"] == "restart"
    assert by_job(moved)["gpt"]["overhead_s"] > settings.scheduler.restart_overhead_s
    with JobStore(jobs_db(tiny)) as store:  # its history says why it moved
        restarted = [e for e in store.events("gpt") if e["event"] == "restarted"]
    assert len(restarted) == 1
    assert (
        f"machine(s) [{first['gpt']['nodes'][0]}] of its run left the pool"
        in (restarted[0]["detail"])
    )
    assert by_job(again)["gpt"]["action"] == "keep"
    for name in ("gpt", "bert"):
        for key in ("overhead_s", "finish_at", "done_iterations"):
            assert json.dumps(by_job(moved)[name][key]) == json.dumps(by_job(again)[name][key])
    for key in ("mean_completion_s", "makespan_s", "ends_at"):
        assert json.dumps(moved["queue"][key]) == json.dumps(again["queue"][key]), key
    # A running job's start is its first, restarted or not.
    for doc in (moved, again):
        assert by_job(doc)["gpt"]["start_at"] == first["gpt"]["start_at"] == "2026-11-24T09:00:00Z"


@pytest.mark.slow
def test_two_assign_runs_at_once_leave_both_files_and_one_latest(
    tiny: Path, tmp_path: Path, params_file: Path
) -> None:
    params = params_file
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1_000))
    command = [
        sys.executable, "-m", "hulk.cli", "--params", str(params), "assign", "--data", str(tiny),
        "--jobs", str(jobs), "--strategy", "teacher", "--out", str(tiny / "pl"),
    ]  # fmt: skip
    runs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in "ab"
    ]
    for run in runs:
        output, _ = run.communicate(timeout=300)
        assert run.returncode == 0, output.decode()
    files = sorted(p.name for p in (tiny / "pl").glob("*.json"))
    assert len(files) == 3 and "latest.json" in files  # two run files, one latest
    latest = read_placements(tiny / "pl" / "latest.json", load_fleet(tiny, Settings())[0])
    assert latest.doc["run_id"] + ".json" in files
    with JobStore(jobs_db(tiny)) as store:
        assert [s.state for s in store.jobs()] == [RUNNING]
        assert [e["event"] for e in store.events("bert")] == ["submitted", "started"]


def test_a_command_rewriting_the_nightlys_files_waits_for_the_nightly(
    tiny: Path, tmp_path: Path
) -> None:
    from hulk.folder_lock import folder_lock

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**FAST, "scheduler": {"lock_timeout_s": 0.5}}))
    before = sorted(p.name for p in tiny.rglob("*") if ".locks" not in p.parts)
    with folder_lock(tiny, "nightly", 1.0):  # a nightly running on the folder
        graph = runner.invoke(app, ["--params", str(params), "graph", "--data", str(tiny)])
        assert graph.exit_code == 2 and "lock.timeout" in graph.output, graph.output
        # It said it was waiting, for what and how long, before it gave up.
        said = " ".join(graph.output.split())
        assert (
            "note: waiting for" in said and "holds the data folder's nightly lock (pid" in said
        ), said
        assert said.index("note: waiting for") < said.index("lock.timeout")
        assert "up to 0.5 s" in said
        assert sorted(p.name for p in tiny.rglob("*") if ".locks" not in p.parts) == before
        jobs = runner.invoke(app, ["--params", str(params), "jobs", "list", "--data", str(tiny)])
        assert jobs.exit_code == 0, jobs.output  # the job store is the assign lock's


def test_a_whole_fleet_system_leaves_the_published_schedule_to_running_jobs(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1_000_000))
    assign(tiny, settings, jobs, T0)
    latest = (tiny / "pl" / "latest.json").read_bytes()
    result = stage.run(tiny, settings, jobs_file=jobs, strategy="B", out_dir=tiny / "pl", now=T0)
    assert result.summary.kept_latest == 1 and "latest" not in result.outputs
    assert json.loads(result.outputs["placements"].read_text())["strategy"] == "B"
    assert (tiny / "pl" / "latest.json").read_bytes() == latest


def test_a_replan_leaves_the_published_schedule_and_the_stores_guard_to_running_jobs(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    from hulk.stages import replan

    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1_000_000))
    doc = assign(tiny, settings, jobs, T0)
    latest = tiny / "pl" / "latest.json"
    published = latest.read_bytes()
    lost = by_job(doc)["bert"]["nodes"][0]
    result = replan.run(tiny, settings, placements_file=latest, failed=[lost], now=T0)
    assert result.summary.kept_latest == 1 and "latest" not in result.outputs
    what_if = json.loads(result.outputs["placements"].read_text())
    assert what_if["replan"]["failed"] == [lost] and lost not in what_if["jobs"][0]["nodes"]
    assert latest.read_bytes() == published
    # latest.json still shows the running job, so a lost store is still refused; what-if runs
    # without the store leave that file as it is, so they cannot lift the refusal.
    jobs_db(tiny).rename(tmp_path / "jobs.db")
    stage.run(tiny, settings, jobs_file=jobs, strategy="A", out_dir=tiny / "pl", now=T0)
    replan.run(tiny, settings, placements_file=latest, failed=[lost], now=T0)
    assert latest.read_bytes() == published
    with pytest.raises(InputError, match=r"jobs_db\.missing"):
        assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15))


def test_a_whole_fleet_system_leaves_the_assign_metrics_to_the_published_schedule(
    tiny: Path, tmp_path: Path, params_file: Path
) -> None:
    # The step's metrics describe the placements latest.json holds: a System B run that keeps
    # latest.json (a job runs on the scheduler's placements) leaves them as they were.
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1_000_000))
    args = ["--params", params_file, "assign", "--data", tiny, "--jobs", jobs, "--strategy"]
    scheduled = runner.invoke(app, [str(a) for a in (*args, "teacher")])
    assert scheduled.exit_code == 0, scheduled.output
    metrics = tiny / "metrics" / "details" / "assign.json"
    before = metrics.read_bytes()
    assert json.loads(before)["strategy"] == "teacher"
    system = runner.invoke(app, [str(a) for a in (*args, "B")])
    assert system.exit_code == 0 and "latest.json kept" in system.output, system.output
    assert "assign_metrics" not in system.output  # not written, so not listed as an output
    assert metrics.read_bytes() == before
    with JobStore(jobs_db(tiny)) as store:  # once nothing runs, System B's run is published
        store.finish("bert", dt.datetime.now(dt.UTC))
    published = runner.invoke(app, [str(a) for a in (*args, "B")])
    assert published.exit_code == 0 and "latest.json kept" not in published.output
    assert json.loads(metrics.read_text())["strategy"] == "B"


def test_a_missing_job_store_with_jobs_running_is_refused_and_nothing_written(
    tiny: Path, tmp_path: Path, params_file: Path
) -> None:
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1_000_000))
    args = ["--params", params_file, "assign", "--data", tiny, "--jobs", jobs, "--strategy"]
    # A first run on a folder whose latest.json is System B's (no job runs on it) works.
    assert runner.invoke(app, [str(a) for a in (*args, "B")]).exit_code == 0
    assert not jobs_db(tiny).exists()
    first = runner.invoke(app, [str(a) for a in (*args, "teacher")])
    assert first.exit_code == 0, first.output
    # The store is lost while latest.json shows "bert" running: the run refuses, naming both
    # files and the way out, and writes nothing (no new, empty store either).
    jobs_db(tiny).unlink()
    placements = tiny / "placements"
    before = {p.name: p.read_bytes() for p in placements.iterdir()}
    refused = runner.invoke(app, [str(a) for a in (*args, "teacher")])
    assert refused.exit_code == 2, refused.output
    assert "jobs_db.missing" in refused.output and "Traceback" not in refused.output
    text = " ".join(refused.output.split())
    assert str(jobs_db(tiny)) in text and str(placements / "latest.json") in text
    assert "bert" in text and "backup" in text and "aside" in text
    assert {p.name: p.read_bytes() for p in placements.iterdir()} == before
    assert not jobs_db(tiny).exists()
    # `hulk jobs submit` does not make the new, empty store that run would refuse.
    extra = write_jobs(tmp_path / "extra.yaml", spec("extra", "BERT-large", iterations=100))
    submit = ["--params", params_file, "jobs", "submit", extra, "--data", tiny]
    submitted = runner.invoke(app, [str(a) for a in submit])
    assert submitted.exit_code == 2 and "jobs_db.missing" in submitted.output, submitted.output
    assert not jobs_db(tiny).exists()
    # An empty store (no scheduling run in it) is no better than none.
    JobStore(jobs_db(tiny)).close()
    empty = runner.invoke(app, [str(a) for a in (*args, "teacher")])
    assert empty.exit_code == 2, empty.output
    assert "jobs_db.missing" in empty.output and "it holds no scheduling run" in " ".join(
        empty.output.split()
    )
    assert {p.name: p.read_bytes() for p in placements.iterdir()} == before
    jobs_db(tiny).unlink()
    # Moved aside, the folder starts afresh.
    (placements / "latest.json").rename(tmp_path / "latest-aside.json")
    fresh = runner.invoke(app, [str(a) for a in (*args, "teacher")])
    assert fresh.exit_code == 0, fresh.output
    with JobStore(jobs_db(tiny)) as store:
        again = store.get("bert")
        assert again is not None and again.state == RUNNING


def test_a_store_older_than_latest_json_is_refused(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    jobs = gpt_and_bert(tmp_path)
    assign(tiny, settings, jobs, T0)
    backup = tmp_path / "jobs-backup.db"
    backup.write_bytes(jobs_db(tiny).read_bytes())
    assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15))
    placements = {p.name: p.read_bytes() for p in (tiny / "pl").iterdir()}
    jobs_db(tiny).write_bytes(backup.read_bytes())  # restored from before the newest run
    with pytest.raises(InputError, match=r"jobs_db\.stale.*newest run is of 2026-11-24T09:00:00Z"):
        assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=30))
    assert {p.name: p.read_bytes() for p in (tiny / "pl").iterdir()} == placements


def test_placements_are_published_only_after_the_store_commits(
    tiny: Path, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hulk.stages import scheduling

    jobs = gpt_and_bert(tmp_path)
    first = by_job(assign(tiny, settings, jobs, T0))
    write_jobs(
        jobs,
        spec("gpt", "GPT-2-1.5B", iterations=1_000_000),
        spec("bert", "BERT-large", iterations=1_000_000),
        spec("t5", "T5-11B", iterations=1_000),
    )
    placements = {p.name: p.read_bytes() for p in (tiny / "pl").iterdir()}

    def fails(*args: object) -> None:
        raise RuntimeError("the store cannot record the run")

    # A run that fails before its store commits writes no placements, not even temporaries.
    monkeypatch.setattr(scheduling, "record", fails)
    with pytest.raises(RuntimeError, match="cannot record"):
        assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15))
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in (tiny / "pl").iterdir()} == placements
    with JobStore(jobs_db(tiny)) as store:
        assert store.get("t5") is None and store.last_run() == T0
    # A run killed after its store committed, before its latest.json was renamed into place:
    # the store is a run ahead, and the next run schedules from it and publishes.
    second = by_job(assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15)))
    (tiny / "pl" / "latest.json").write_bytes(placements["latest.json"])
    third = by_job(assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=30)))
    for name in ("gpt", "bert"):
        assert third[name]["action"] == "keep" and third[name]["nodes"] == first[name]["nodes"]
    if second["t5"]["action"] == "start":
        assert third["t5"]["action"] == "keep" and third["t5"]["nodes"] == second["t5"]["nodes"]


def test_an_empty_jobs_file_schedules_the_stores_jobs(tiny: Path, tmp_path: Path) -> None:
    # With `jobs: []` the file lists no upcoming job: the jobs of `hulk jobs submit` still run,
    # and those the file gave are withdrawn. Systems A, B, C need jobs to compare.
    empty = tmp_path / "empty.yaml"
    empty.write_text("jobs: []\n")
    extra = write_jobs(tmp_path / "extra.yaml", spec("extra", "BERT-large", iterations=100))
    assert runner.invoke(app, ["jobs", "submit", str(extra), "--data", str(tiny)]).exit_code == 0
    args = ["assign", "--data", str(tiny), "--jobs", str(empty), "--strategy"]
    ran = runner.invoke(app, [*args, "teacher"])
    assert ran.exit_code == 0, ran.output
    latest = json.loads((tiny / "placements" / "latest.json").read_text())
    assert [(job["job"], job["action"]) for job in latest["jobs"]] == [("extra", "start")]
    compared = runner.invoke(app, [*args, "B"])
    assert compared.exit_code == 2 and "jobs.empty" in compared.output, compared.output


def test_a_damaged_link_table_is_named_and_the_placements_kept(tiny: Path, tmp_path: Path) -> None:
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1_000))
    args = ["assign", "--data", str(tiny), "--jobs", str(jobs), "--strategy", "teacher"]
    assert runner.invoke(app, args).exit_code == 0
    latest = (tiny / "placements" / "latest.json").read_bytes()
    links = tiny / "links.parquet"
    links.write_bytes(links.read_bytes()[:100])  # cut short: no Parquet footer
    damaged = runner.invoke(app, args)
    said = " ".join(damaged.output.split())
    assert damaged.exit_code == 2 and "Traceback" not in said, said
    assert f"{links}: [links.readable] not a readable Parquet file" in said
    assert (tiny / "placements" / "latest.json").read_bytes() == latest


def test_jobs_commands(tiny: Path, tmp_path: Path) -> None:
    jobs = write_jobs(
        tmp_path / "more.yaml",
        spec("extra", "BERT-large", tokens=1e9, deadline="2099-01-01T00:00:00Z"),
    )
    ok = runner.invoke(app, ["jobs", "submit", str(jobs), "--data", str(tiny)])
    assert ok.exit_code == 0, ok.output
    # The same spec again (a retried command) changes nothing; another spec under the name is
    # refused, naming the job's state and the keys that differ.
    again = runner.invoke(app, ["jobs", "submit", str(jobs), "--data", str(tiny)])
    assert again.exit_code == 0, again.output
    assert "already submitted, unchanged: extra" in again.output
    other = write_jobs(
        tmp_path / "other.yaml",
        spec("extra", "BERT-large", tokens=2e9, deadline="2099-01-01T00:00:00Z"),
    )
    refused = runner.invoke(app, ["jobs", "submit", str(other), "--data", str(tiny)])
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2, said
    assert f"{other}: [jobs.name_taken]" in said
    assert "extra (submitted; another spec: iterations differ)" in said
    listed = runner.invoke(app, ["jobs", "list", "--data", str(tiny), "--json"])
    record = json.loads(listed.output)
    assert record["job"] == "extra" and record["state"] == "submitted"
    assert record["deadline"] == "2099-01-01T00:00:00Z"
    table = runner.invoke(app, ["jobs", "list", "--data", str(tiny)])
    assert table.exit_code == 0 and "2099-01-01" in table.output  # its deadline's column
    assert record["iterations"] == -(-int(1e9) // (256 * 512))  # tokens / (batch × seq_len)
    finish = runner.invoke(app, ["jobs", "finish", "extra", "--data", str(tiny)])
    assert finish.exit_code == 2 and "jobs.wrong_state" in finish.output
    cancel = runner.invoke(app, ["jobs", "cancel", "extra", "--data", str(tiny)])
    assert cancel.exit_code == 0, cancel.output
    unknown = runner.invoke(app, ["jobs", "cancel", "nobody", "--data", str(tiny)])
    assert unknown.exit_code == 2 and "jobs.unknown_job" in unknown.output
    history = runner.invoke(app, ["jobs", "history", "extra", "--data", str(tiny)])
    assert "submitted" in history.output and "cancelled" in history.output


def test_a_failed_assign_run_changes_nothing_and_jobs_commands_need_the_folder(
    tiny: Path, tmp_path: Path, params_file: Path
) -> None:
    params = params_file
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1000))
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    args = ["--params", params, "assign", "--data", tiny, "--jobs", jobs, "--strategy", "teacher"]
    failed = runner.invoke(app, [str(a) for a in (*args, "--out", a_file / "placements")])
    assert failed.exit_code == 2, failed.output
    assert "io.not_a_folder" in failed.output and "Traceback" not in failed.output
    onto_file = runner.invoke(app, [str(a) for a in (*args, "--out", a_file)])
    assert onto_file.exit_code == 2 and "io.not_a_folder" in onto_file.output, onto_file.output
    with JobStore(jobs_db(tiny)) as store:
        assert store.get("bert") is None and store.events() == []  # the runs left no trace
    typo = tmp_path / "no-such-folder"
    commands = (["assign", "--jobs", str(jobs)], ["graph"], ["train"], ["nightly"], ["evaluate"])
    for command in (*commands, ["replan", "--fail", "1"], ["publish"]):
        mistyped = runner.invoke(app, [*command, "--data", str(typo)])
        assert mistyped.exit_code == 2 and "data.missing_folder" in mistyped.output, command
        assert not typo.exists()
    listed = runner.invoke(app, ["jobs", "list", "--data", str(typo)])
    assert listed.exit_code == 2 and "data.missing_folder" in listed.output
    assert not typo.exists()
    history = runner.invoke(app, ["jobs", "history", "nobody", "--data", str(tiny)])
    assert history.exit_code == 2 and "jobs.unknown_job" in history.output


def test_the_jobs_file_syncs_into_the_store(tmp_path: Path) -> None:
    a, b = (load_jobs(write_jobs(tmp_path / f"{n}.yaml", spec(n, "BERT-large")))[0] for n in "ab")
    with JobStore(tmp_path / "jobs.db") as store:
        assert store.sync_file([a, b], T0)["submitted"] == ["a", "b"]
        assert store.sync_file([a], T0)["withdrawn"] == ["b"]  # removed from the file
        store.submit([load_jobs(write_jobs(tmp_path / "c.yaml", spec("c", "GPT-2-1.5B")))[0]], T0)
        assert store.sync_file([a], T0)["withdrawn"] == []  # "c" came from the CLI
        assert {s.job.name: s.state for s in store.jobs()} == {
            "a": "submitted",
            "b": "cancelled",
            "c": "submitted",
        }


def test_a_job_the_file_lists_again_is_back_in_line_and_a_name_is_one_job(
    tmp_path: Path,
) -> None:
    a, b = (load_jobs(write_jobs(tmp_path / f"{n}.yaml", spec(n, "BERT-large")))[0] for n in "ab")
    later = T0 + dt.timedelta(hours=1)
    with JobStore(tmp_path / "jobs.db") as store:
        store.sync_file([a, b], T0)
        assert store.sync_file([a], later)["withdrawn"] == ["b"]  # one run on another file
        assert store.sync_file([a, b], later)["resubmitted"] == ["b"]
        back = store.get("b")
        assert back is not None and back.state == "submitted" and back.submitted_at == T0
        store.cancel("b", later)  # cancelled by its users: the file does not bring it back
        assert store.sync_file([a, b], later)["resubmitted"] == []
        cli = load_jobs(write_jobs(tmp_path / "c.yaml", spec("c", "GPT-2-1.5B")))[0]
        store.submit([cli], T0)
        other = load_jobs(write_jobs(tmp_path / "c2.yaml", spec("c", "BERT-large")))[0]
        # The message names the other job's state and the keys that differ.
        taken = r"jobs\.name_taken.*c: the job store holds a submitted job .*\(.*hidden.*\)"
        with pytest.raises(InputError, match=taken):
            store.sync_file([a, other], later, tmp_path / "c2.yaml")
        assert store.get("c").job == cli  # nothing of the failed sync landed
        assert store.sync_file([a, cli], later) == {
            "submitted": [],
            "updated": [],
            "withdrawn": [],
            "resubmitted": [],
        }


def test_reported_progress_and_times_past_any_calendar_are_checked(tmp_path: Path) -> None:
    job = load_jobs(write_jobs(tmp_path / "j.yaml", spec("j", "BERT-large", iterations=1000)))[0]
    with JobStore(tmp_path / "jobs.db") as store:
        store.submit([job], T0)
        state = store.get("j")
        assert state is not None
        store.put(
            dataclasses.replace(state, state=RUNNING, iteration_s=1.0, computing_since=T0), None
        )
        for done in (float("nan"), float("inf"), -1.0, 1001.0):
            with pytest.raises(InputError, match=r"jobs\.bad_progress"):
                store.report_progress("j", done, T0)
        assert store.report_progress("j", 400.0, T0).done_iterations == 400.0
        running = store.get("j")
        assert running is not None
        assert running.estimated_finish() == T0 + dt.timedelta(seconds=600)
        endless = dataclasses.replace(running, iteration_s=1e12)  # 600 × 1e12 s: past year 9999
        assert endless.estimated_finish() is None
        assert endless.to_dict(T0)["estimated_finish"] is None


def test_a_broken_store_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(InputError, match=r"jobs_db\.readable"):
        JobStore(path)


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        ({"iterations": 10, "tokens": 100.0}, "jobs.length_twice"),
        ({"submitted_at": "yesterday"}, "jobs.bad_time"),
        (
            {"submitted_at": "2026-11-24T10:00:00Z", "deadline": "2026-11-24T09:00:00Z"},
            "jobs.deadline_before_submission",
        ),
        ({"iterations": 0}, "jobs.not_positive"),
        ({"iterations": 1.5}, "jobs.wrong_type"),
        ({"submitted_at": "2026-13-45T00:00:00Z"}, "jobs.bad_time"),  # YAML's own timestamp
        ({"iterations": 10**20}, "jobs.too_long"),
        ({"tokens": 1e30}, "jobs.too_long"),
    ],
)
def test_job_lengths_and_times_are_checked(tmp_path: Path, extra: dict, rule: str) -> None:
    path = write_jobs(tmp_path / "jobs.yaml", spec("j", "BERT-large", **extra))
    with pytest.raises(InputError, match=rule):
        load_jobs(path)


def test_tokens_become_iterations_exactly_at_the_limit(tmp_path: Path) -> None:
    # 100 sequences of 1,000 tokens an iteration: 10^17 tokens are the most a job may run
    # (10^12 iterations); one token more, beyond a float's precision, is one iteration more.
    sizes = {"global_batch": 100, "micro_batch": 100, "seq_len": 1_000}
    at_limit = spec("j", "BERT-large", **sizes, tokens=10**17)
    assert load_jobs(write_jobs(tmp_path / "a.yaml", at_limit))[0].iterations == 10**12
    over = write_jobs(tmp_path / "b.yaml", {**at_limit, "tokens": 10**17 + 1})
    with pytest.raises(InputError, match=r"jobs\.too_long"):
        load_jobs(over)
    written = over.read_text().replace("100000000000000001", "100000000000000001e0")
    assert "tokens: 100000000000000001e0" in written
    over.write_text(written)
    with pytest.raises(InputError, match=r"jobs\.too_long"):
        load_jobs(over)


def test_job_times_read_as_utc(tmp_path: Path) -> None:
    path = write_jobs(
        tmp_path / "jobs.yaml",
        spec(
            "j",
            "BERT-large",
            tokens=1.0e9,
            submitted_at="2026-11-24 10:00",
            deadline="2026-11-25T12:00:00+02:00",
        ),
    )
    job = load_jobs(path)[0]
    assert job.submitted_at == dt.datetime(2026, 11, 24, 10, tzinfo=dt.UTC)
    assert job.deadline == dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC)
    assert job.iterations == 7630  # ceil(1e9 / (256 × 512))


def test_yaml_aliases_and_huge_jobs_files_are_refused(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    rows = ["jobs:", "- &a [x, x, x, x, x, x, x, x, x]"]
    rows += [f"- &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    bomb.write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"jobs.yaml_alias.*line 3"):
        load_jobs(bomb)
    huge = tmp_path / "huge.yaml"
    huge.write_text("# " + "x" * 1_100_000 + "\njobs: []\n")
    with pytest.raises(InputError, match=r"jobs\.too_large"):
        load_jobs(huge)


def test_plans_are_remembered_across_runs(tiny: Path, settings: Settings, tmp_path: Path) -> None:
    fleet = load_fleet(tiny, settings)[0]
    job = PRESET_JOBS["GPT-2-1.5B"]
    nodes = np.arange(4)
    with JobStore(tmp_path / "jobs.db") as store:
        first = PlanMemory(fleet, settings, store)
        plan, cost = first(job, nodes)
        assert len(first.new) == 1
        first.save(T0)
    with JobStore(tmp_path / "jobs.db") as store:
        again = PlanMemory(fleet, settings, store)
        assert again(job, nodes) == (plan, cost)
        assert again.new == {} and len(again.used) == 1
        # Another machine set, or the same job under another name and length: the same rule.
        assert again(Job(**{**job.__dict__, "name": "x", "iterations": 5}), nodes) == (plan, cost)
        assert again.new == {}
        again(job, np.arange(3))
        assert len(again.new) == 1
    drained = drain(fleet, [fleet.node_id(0)])
    with JobStore(tmp_path / "jobs.db") as store:
        other = PlanMemory(drained, settings, store)  # another fleet: nothing known
        other(job, nodes)
        assert len(other.new) == 1


def test_a_job_the_fleet_cannot_hold_is_told_why_in_its_own_name(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # Plans are remembered by the job's sizes: the second OPT-175B job (and both in a later run,
    # from the store) must not read the first one's name in its reason.
    jobs = write_jobs(
        tmp_path / "jobs.yaml",
        spec("opt-first", "OPT-175B", iterations=10),
        spec("opt-second", "OPT-175B", iterations=10),
    )
    for minutes in (0, 15):
        doc = by_job(assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=minutes)))
        for name, other in (("opt-first", "opt-second"), ("opt-second", "opt-first")):
            assert doc[name]["action"] == "never"
            assert doc[name]["reason"].startswith(f"{name} needs 2800 GB")
            assert other not in doc[name]["reason"]
    listed = runner.invoke(app, ["jobs", "list", "--data", str(tiny)])
    assert listed.output.count("queued, infeasible") == 2, listed.output


def test_the_scheduler_plans_free_machines_in_the_whole_fleets_windows(tmp_path: Path) -> None:
    # The default fleet (seed 7) with its 998-TFLOP/s machines busy: the scheduler's planner
    # (`scheduler.fleet_windows`) finds GPT-2-1.5B's group among the machines free, as fast as
    # its plan on the whole fleet (which uses none of them); the teacher's planner does not.
    from hulk.generate import expected_links
    from hulk.planner import plan_job
    from hulk.presets import build_fleet

    settings = Settings()
    assert settings.scheduler.fleet_windows
    inventory = build_fleet("paper-47", 7, settings.generate)
    links = expected_links(inventory, 7, settings.generate)
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    job = PRESET_JOBS["GPT-2-1.5B"]
    every = fleet.active_indices()
    free = every[fleet.compute_flops[every] < fleet.compute_flops.max()]
    whole = plan_job(job, fleet, every, settings.planner)[1]
    teacher = plan_job(job, fleet, free, settings.planner)[1]
    off = settings.model_copy(
        update={"scheduler": settings.scheduler.model_copy(update={"fleet_windows": False})}
    )
    with JobStore(tmp_path / "jobs.db") as store:
        scheduler = PlanMemory(fleet, settings, store)
        assert scheduler(job, free)[1].iteration_s <= whole.iteration_s * (1 + 1e-12)
        assert teacher.iteration_s > whole.iteration_s
        # The setting is part of what a remembered plan depends on.
        alone = PlanMemory(fleet, off, store)
        assert alone.key(job, free) != scheduler.key(job, free)
        assert alone(job, free)[1].iteration_s == teacher.iteration_s


def default_fleet_folder(data: Path, seed: int, settings: Settings) -> Path:
    """A data folder of the default fleet (`paper-47`) of `seed`, its links as the generated
    logs' statistics converge to (`hulk.generate.expected_links`)."""
    from hulk import fileio, schemas
    from hulk.generate import expected_links
    from hulk.presets import build_fleet

    inventory = build_fleet("paper-47", seed, settings.generate)
    links = expected_links(inventory, seed, settings.generate)
    fileio.write_csv(data / schemas.INVENTORY_FILE, schemas.conform(inventory, schemas.INVENTORY))
    fileio.write_parquet(data / schemas.LINKS_FILE, schemas.conform(links, schemas.LINKS))
    return data


def test_a_second_run_with_nothing_changed_moves_no_job_the_first_started(
    settings: Settings, tmp_path: Path
) -> None:
    # On the default fleet of seed 9 the teacher's layout of the three jobs starting together
    # is better overall but puts GPT-2-1.5B on machines slower than free ones: a job keeps the
    # strategy's plan only where it finishes no later with it, so the starts are final.
    data = default_fleet_folder(tmp_path / "data", 9, settings)
    names = ["OPT-175B", "T5-11B", "GPT-2-1.5B", "BERT-large"]
    jobs = write_jobs(tmp_path / "jobs.yaml", *(spec(n, n, tokens=1e10) for n in names))
    first = assign(data, settings, jobs, T0)
    started = {j["job"]: j for j in first["jobs"] if j["action"] == "start"}
    assert len(started) >= 2 and first["queue"]["strategy_plans"]
    second = assign(data, settings, jobs, T0 + dt.timedelta(seconds=15))
    assert second["queue"]["moved"] == []
    after = by_job(second)
    for name, job in started.items():
        assert after[name]["action"] == "keep", name
        assert (after[name]["nodes"], after[name]["replicas"]) == (job["nodes"], job["replicas"])


def test_a_long_job_stops_for_a_short_one_and_resumes_from_its_checkpoint(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    longs = [spec(f"long{k}", "BERT-large", iterations=10_000_000) for k in range(6)]
    jobs = write_jobs(tmp_path / "jobs.yaml", *longs)
    first = by_job(assign(tiny, settings, jobs, T0))
    busy = {n for job in first.values() for n in job["nodes"]}
    assert busy == set(range(6))  # every machine holds a long job
    write_jobs(jobs, *longs, spec("short", "BERT-large", iterations=1_000))
    doc = assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15))
    second = by_job(doc)
    stopped = doc["queue"]["moved"]
    assert len(stopped) == 1 and second[stopped[0]]["action"] == "wait"
    assert "stopped so that shorter work runs first" in second[stopped[0]]["reason"]
    assert second["short"]["action"] == "start"
    assert second["short"]["nodes"] == first[stopped[0]]["nodes"]
    with JobStore(jobs_db(tiny)) as store:
        events = [e["event"] for e in store.events(stopped[0])]
        state = store.get(stopped[0])
    assert events[-1] == "preempted"
    assert state is not None and state.replicas == first[stopped[0]]["replicas"]
    assert state.done_iterations > 0
    # Once the short job is done, the stopped one resumes where its checkpoint is.
    finish = dt.datetime.fromisoformat(second["short"]["finish_at"].replace("Z", "+00:00"))
    third = by_job(assign(tiny, settings, jobs, finish + dt.timedelta(minutes=1)))
    back = third[stopped[0]]
    assert back["action"] == "restart" and back["nodes"] == first[stopped[0]]["nodes"]
    assert back["overhead_s"] == settings.scheduler.restart_overhead_s
    assert back["done_iterations"] == pytest.approx(state.done_iterations, abs=0.1)


def test_jobs_started_together_never_share_a_machine_with_a_running_one(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # Short jobs and a wide one (its memory needs two machines) arrive on a busy fleet: the
    # scheduler stops long jobs for them, and the strategy lays out the jobs that start together
    # on the machines those stops free, never on machines a running job still holds.
    longs = [spec(f"long{k}", "BERT-large", iterations=10_000_000) for k in range(5)]
    jobs = write_jobs(tmp_path / "jobs.yaml", *longs)
    assign(tiny, settings, jobs, T0)
    wide = {**spec("wide", "BERT-large", iterations=100), "params_b": 30.0, "layers": 48}
    wide.update(hidden=7168, seq_len=2048, global_batch=512, micro_batch=1)
    shorts = [spec(f"short{k}", "BERT-large", iterations=1_000 * (k + 1)) for k in range(2)]
    write_jobs(jobs, *longs, wide, *shorts)
    doc = assign(tiny, settings, jobs, T0 + dt.timedelta(minutes=15))
    assert doc["queue"]["strategy_plans"] and doc["queue"]["moved"]
    computing = [job for job in doc["jobs"] if job["action"] in ("keep", "start", "move")]
    held = [n for job in computing for n in job["nodes"]]
    assert len(held) == len(set(held)), "two jobs placed on one machine"
    assert {"short0", "short1"} <= {job["job"] for job in computing}
    with JobStore(jobs_db(tiny)) as store:
        running = [n for s in store.jobs([RUNNING]) for n in s.nodes]
    assert sorted(running) == sorted(held)
    stopped = [by_job(doc)[name] for name in doc["queue"]["moved"]]
    assert all(job["action"] in ("move", "wait") for job in stopped)
    for job in stopped:
        if job["action"] == "wait":
            assert "stopped so that shorter work runs first" in job["reason"]


def test_jobs_list_marks_the_deadlines_the_last_schedule_misses(tiny: Path, tmp_path: Path) -> None:
    # Six long jobs hold the six machines (one of them due too soon); a seventh, due within the
    # hour, waits for them: the run counts both deadlines missed, and `hulk jobs list` says so
    # from the estimates the run left (the store's, latest.json's), without scheduling again.
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**FAST, "scheduler": {"preempt_candidates": 0}}))
    settings = load_settings(params)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    soon = (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    longs = [spec(f"long{k}", "BERT-large", iterations=10_000_000) for k in range(5)]
    hurry = spec("hurry", "BERT-large", iterations=10_000_000, deadline=soon)
    jobs = write_jobs(tmp_path / "jobs.yaml", *longs, hurry)
    run = dict(jobs_file=jobs, strategy="teacher", out_dir=tiny / "placements")  # --data's
    stage.run(tiny, settings, now=now, **run)
    # A job the fleet can never hold is "queued, infeasible": the widest state of the table.
    never = spec("OPT-175B-never", "OPT-175B", iterations=1_000)
    late = spec("late", "BERT-large", iterations=1_000, deadline=soon)
    write_jobs(jobs, *longs, hurry, late, never)
    result = stage.run(tiny, settings, now=now + dt.timedelta(minutes=1), **run)
    doc = json.loads(result.outputs["latest"].read_text())
    assert by_job(doc)["late"]["action"] == "wait" and doc["queue"]["missed_deadlines"] == 2
    assert by_job(doc)["late"]["deadline_met"] is False
    args = ["--params", str(params), "jobs", "list", "--data", str(tiny)]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    marked = [line.split()[0] for line in table.output.splitlines() if "✗" in line]
    assert marked == ["hurry", "late"], table.output  # the deadline cells of their rows
    rows = table.output.split("\n  ")[0].splitlines()  # the table, before the reasons
    assert max(len(row) for row in rows) <= 80, table.output  # an 80-column terminal's
    assert "2 deadline(s) missed: hurry, late" in table.output
    listed = json_lines(runner.invoke(app, [*args, "--json"]).output)
    late = next(r for r in listed if r["job"] == "late")
    assert late["estimated_finish"] == by_job(doc)["late"]["finish_at"]
    assert {r["job"]: r["deadline_met"] for r in listed if r["deadline"]} == {
        "hurry": False,
        "late": False,
    }


def test_a_deadline_is_met_only_by_a_known_finish_and_missed_once_past(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # Six jobs without a length hold the six machines; two jobs with a length wait behind
    # them, so no finish but theirs is known. A deadline already past is missed whatever the
    # finish; one to come is neither met nor missed while the finish is unknown.
    past, future = "2020-01-01T00:00:00Z", "2030-01-01T00:00:00Z"
    endless = [
        *(spec(f"endless{k}", "BERT-large") for k in range(4)),
        spec("endless-past", "BERT-large", deadline=past),
        spec("endless-future", "BERT-large", deadline=future),
    ]
    jobs = write_jobs(tmp_path / "jobs.yaml", *endless)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    assign(tiny, settings, jobs, now)
    write_jobs(
        jobs,
        *endless,
        spec("behind-past", "BERT-large", iterations=1_000, deadline=past),
        spec("behind-future", "BERT-large", iterations=1_000, deadline=future),
    )
    doc = assign(tiny, settings, jobs, now + dt.timedelta(minutes=1))
    jobs_in = by_job(doc)
    assert [jobs_in[f"behind-{w}"]["action"] for w in ("past", "future")] == ["wait", "wait"]
    assert all(job["finish_at"] is None for job in doc["jobs"])
    expected = {
        "endless-past": False,
        "endless-future": None,
        "behind-past": False,
        "behind-future": None,
    }
    assert {name: jobs_in[name]["deadline_met"] for name in expected} == expected
    assert doc["queue"]["missed_deadlines"] == 2
    # `hulk jobs list` says the same from the store.
    args = ["jobs", "list", "--data", str(tiny), "--json"]
    listed = json_lines(runner.invoke(app, args).output)
    assert {r["job"]: r["deadline_met"] for r in listed if r["deadline"]} == expected


def test_a_running_job_finishing_past_year_9999_misses_its_deadline_in_both_views(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # No date holds its finish, yet every deadline comes before it: assign counts it missed,
    # and so does `hulk jobs list`.
    endless = spec("endless", "BERT-large", iterations=10**12, deadline="9999-12-31T00:00:00Z")
    doc = assign(
        tiny, settings, write_jobs(tmp_path / "jobs.yaml", endless), dt.datetime.now(dt.UTC)
    )
    assert (
        by_job(doc)["endless"]["action"] == "start" and by_job(doc)["endless"]["finish_at"] is None
    )
    assert by_job(doc)["endless"]["deadline_met"] is False and doc["queue"]["missed_deadlines"] == 1
    listing = runner.invoke(app, ["jobs", "list", "--data", str(tiny), "--json"])
    (record,) = json_lines(listing.output)
    assert (record["state"], record["estimated_finish"], record["deadline_met"]) == (
        "running",
        None,
        False,
    )


def test_a_waiting_job_finishing_past_year_9999_misses_its_deadline_in_both_views(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # Submitted for an hour from now, so it waits with a known start; no date holds its finish.
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    endless = spec(
        "endless",
        "BERT-large",
        iterations=10**12,
        submitted_at=(now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        deadline="9999-12-31T00:00:00Z",
    )
    doc = assign(tiny, settings, write_jobs(tmp_path / "jobs.yaml", endless), now)
    entry = by_job(doc)["endless"]
    assert (entry["action"], entry["finish_at"], entry["deadline_met"]) == ("wait", None, False)
    assert entry["start_at"] is not None
    listing = runner.invoke(app, ["jobs", "list", "--data", str(tiny), "--json"])
    (record,) = json_lines(listing.output)
    assert record["state"] in ("submitted", "queued")
    assert record["estimated_start"] == entry["start_at"]
    assert (record["estimated_finish"], record["deadline_met"]) == (None, False)


def test_jobs_list_counts_a_deadline_missed_once_it_passes_before_the_job_starts(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    # Scheduled half an hour ago to start a minute later (submitted for later) and to be done
    # well before its deadline a quarter of an hour later; no run since, so it never started.
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    then = now - dt.timedelta(minutes=30)
    stamp = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    later = spec(
        "later",
        "BERT-large",
        iterations=1_000,
        submitted_at=stamp(then + dt.timedelta(minutes=1)),
        deadline=stamp(then + dt.timedelta(minutes=15)),
    )
    doc = assign(tiny, settings, write_jobs(tmp_path / "jobs.yaml", later), then)
    assert by_job(doc)["later"]["action"] == "wait"
    assert by_job(doc)["later"]["deadline_met"] is True  # as forecast then
    listing = runner.invoke(app, ["jobs", "list", "--data", str(tiny), "--json"])
    (record,) = json_lines(listing.output)
    assert record["estimated_finish"] < later["deadline"] and record["deadline_met"] is False


def test_the_schedule_table_keeps_every_column_in_80_columns_whatever_the_names(
    tiny: Path, tmp_path: Path
) -> None:
    # Piped output (cron) is 80 columns wide. A long name used to push the machine lists out
    # of the table; the name folds instead.
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(FAST))
    name = "bert-large-finetune-customer-support-v2-nightly"
    jobs = write_jobs(tmp_path / "jobs.yaml", spec(name, "BERT-large", iterations=100_000))
    args = ["--params", params, "assign", "--data", tiny, "--jobs", jobs, "--strategy", "teacher"]
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("job "))
    columns = ("job", "status", "machines", "D×S", "s/iter", "bound", "start", "finish")
    assert tuple(header.split()) == columns
    table = lines[lines.index(header) : lines.index(header) + 4]
    assert all(len(line.rstrip()) <= 80 for line in table), table
    nodes = by_job(json.loads((tiny / "placements" / "latest.json").read_text()))[name]["nodes"]
    assert f" placed  1: {nodes[0]} " in table[2], table  # beside the name's first part


def json_lines(text: str) -> list[dict]:
    """The records `hulk jobs list --json` prints, one JSON object a line."""
    return [json.loads(line) for line in text.splitlines()]


def test_jobs_list_shows_the_last_scheduling_runs_estimates_wherever_it_wrote_its_placements(
    tiny: Path, tmp_path: Path
) -> None:
    # Five long jobs hold the machines; a short one due within the hour waits for them. The run
    # that schedules it writes its placements elsewhere (--out): `hulk jobs list` shows that
    # run's estimate (the store's), not the one of latest.json in the placements folder.
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**FAST, "scheduler": {"preempt_candidates": 0}}))
    now = dt.datetime.now(dt.UTC)
    soon = (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    longs = [spec(f"long{k}", "BERT-large", iterations=10_000_000) for k in range(6)]
    jobs = write_jobs(tmp_path / "jobs.yaml", *longs)
    args = ["--params", params, "assign", "--data", tiny, "--jobs", jobs, "--strategy"]
    first = runner.invoke(app, [str(a) for a in (*args, "teacher")])
    assert first.exit_code == 0, first.output
    write_jobs(jobs, *longs, spec("late", "BERT-large", iterations=1_000, deadline=soon))
    elsewhere = tmp_path / "elsewhere"
    second = runner.invoke(app, [str(a) for a in (*args, "teacher", "--out", elsewhere)])
    assert second.exit_code == 0, second.output
    late = by_job(json.loads((elsewhere / "latest.json").read_text()))["late"]
    assert late["action"] == "wait" and late["finish_at"] and late["deadline_met"] is False
    assert "late" not in by_job(json.loads((tiny / "placements" / "latest.json").read_text()))
    listing = ["--params", str(params), "jobs", "list", "--data", str(tiny)]

    def listed() -> dict:
        result = runner.invoke(app, [*listing, "--json"])
        assert result.exit_code == 0, result.output
        return {r["job"]: r for r in json_lines(result.output)}["late"]

    record = listed()
    assert (record["estimated_finish"], record["deadline_met"]) == (late["finish_at"], False)
    assert (record["state"], record["estimated_start"]) == ("queued", late["start_at"])
    table = runner.invoke(app, listing)
    assert "1 deadline(s) missed: late" in table.output, table.output
    # System B compares, it does not schedule: the store and its estimates stay the scheduler's.
    compared = runner.invoke(app, [str(a) for a in (*args, "B")])
    assert compared.exit_code == 0 and "latest.json kept" in compared.output, compared.output
    assert listed() == record
    # The job it waits for is nearly done: the next run moves the estimate, its reason alone
    # unchanged, and the store follows.
    (holder,) = late["waits_for"]
    progress = ["jobs", "progress", holder, "9999000", "--data", str(tiny)]
    assert runner.invoke(app, progress).exit_code == 0
    third = runner.invoke(app, [str(a) for a in (*args, "teacher", "--out", elsewhere)])
    assert third.exit_code == 0, third.output
    sooner = by_job(json.loads((elsewhere / "latest.json").read_text()))["late"]
    assert sooner["reason"] == late["reason"] and sooner["finish_at"] < late["finish_at"]
    record = listed()
    assert (record["estimated_start"], record["estimated_finish"]) == (
        sooner["start_at"],
        sooner["finish_at"],
    )


def test_a_run_that_cannot_estimate_a_waiting_job_clears_its_estimate(
    tiny: Path, tmp_path: Path
) -> None:
    # A job waits for the long ones with an estimate; the next run finds every machine silent
    # (drained): the job waits for them to return, with no time, and keeps no earlier estimate.
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**FAST, "scheduler": {"preempt_candidates": 0}}))
    settings = load_settings(params)
    longs = [spec(f"long{k}", "BERT-large", iterations=10_000_000) for k in range(6)]
    jobs = write_jobs(tmp_path / "jobs.yaml", *longs)
    run = dict(jobs_file=jobs, strategy="teacher", out_dir=tiny / "placements")
    stage.run(tiny, settings, now=T0, **run)
    write_jobs(jobs, *longs, spec("next", "BERT-large", iterations=1_000))
    stage.run(tiny, settings, now=T0, **run)
    listing = ["--params", str(params), "jobs", "list", "--data", str(tiny), "--json"]

    def listed() -> dict:
        result = runner.invoke(app, listing)
        assert result.exit_code == 0, result.output
        return {r["job"]: r for r in json_lines(result.output)}["next"]

    assert listed()["state"] == "queued" and listed()["estimated_finish"] is not None
    report = tiny / "validation" / "report.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    stale = {"severity": "warning", "rule": "logs.stale_machine", "machines": list(range(6))}
    report.write_text(json.dumps({"findings": [stale]}))
    result = stage.run(tiny, settings, now=T0 + dt.timedelta(minutes=15), **run)
    waits = by_job(json.loads(result.outputs["latest"].read_text()))["next"]
    assert waits["action"] == "wait" and waits["finish_at"] is None, waits
    record = listed()
    assert record["state"] == "queued"
    assert (record["estimated_start"], record["estimated_finish"]) == (None, None)


# The job store as the first Hulk with one wrote it (format 1), to check its migration.
FORMAT_1 = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    reason TEXT,
    nodes TEXT,
    layout TEXT,
    replicas TEXT,
    iteration_s REAL,
    started_at TEXT,
    computing_since TEXT,
    done_iterations REAL NOT NULL DEFAULT 0,
    moves INTEGER NOT NULL DEFAULT 0,
    finished_at TEXT
);
CREATE TABLE IF NOT EXISTS plans (
    key TEXT PRIMARY KEY,
    plan TEXT NOT NULL,
    used_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    job TEXT NOT NULL,
    event TEXT NOT NULL,
    detail TEXT
);
PRAGMA user_version = 1;
"""


def format_1_store(path: Path) -> None:
    """A format-1 store at `path`: a running job, a waiting one, their events and a plan."""
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(FORMAT_1)
    replicas = [{"stages": [{"node": 0, "layer_start": 0, "layer_end": 24}]}]
    rows = [
        ("run", "running", "[0]", "pipeline", json.dumps(replicas), 2.0, "2026-11-24T09:00:00Z"),
        ("wait", "queued", None, None, None, None, None),
    ]
    for name, state, nodes, layout, stages, iteration_s, since in rows:
        db.execute(
            "INSERT INTO jobs (name, spec, source, state, submitted_at, updated_at, reason, nodes,"
            " layout, replicas, iteration_s, started_at, computing_since, done_iterations, moves,"
            " finished_at) VALUES (?, ?, 'jobs-file', ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, 0, 0, NULL)",
            (
                name,
                json.dumps(spec(name, "BERT-large", iterations=1_000), sort_keys=True),
                state,
                "2026-11-24T08:00:00Z",
                "2026-11-24T09:00:00Z",
                nodes,
                layout,
                stages,
                iteration_s,
                since,
                since,
            ),
        )
        db.execute(
            "INSERT INTO events (at, job, event, detail) VALUES (?, ?, 'submitted', NULL)",
            ("2026-11-24T08:00:00Z", name),
        )
    db.execute("INSERT INTO plans VALUES ('key', '{}', '2026-11-24T09:00:00Z')")
    db.commit()
    db.close()


def test_a_store_of_the_first_format_is_migrated_and_a_newer_one_refused(tiny: Path) -> None:
    import sqlite3

    path = jobs_db(tiny)
    format_1_store(path)
    listed = runner.invoke(app, ["jobs", "list", "--data", str(tiny), "--json"])
    assert listed.exit_code == 0, listed.output
    records = {r["job"]: r for r in json_lines(listed.output)}
    assert records["run"]["state"] == "running" and records["run"]["nodes"] == [0]
    assert records["run"]["estimated_finish"] == "2026-11-24T09:33:20Z"  # 1,000 × 2 s
    assert (records["wait"]["estimated_start"], records["wait"]["estimated_finish"]) == (None, None)
    db = sqlite3.connect(path)
    columns = [row[1] for row in db.execute("PRAGMA table_info(jobs)")]
    assert columns[-2:] == ["scheduled_start", "scheduled_finish"]
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 2
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    db.close()
    with JobStore(path) as store:  # the migrated store takes estimates, and keeps its plans
        assert store.cached_plans(["key"]) == {"key": {}}
        waiting = store.get("wait")
        assert waiting is not None
        store.put(dataclasses.replace(waiting, scheduled_finish=T0), None)
    with JobStore(path) as store:
        again = store.get("wait")
        assert again is not None and again.estimated_finish() == T0
    # A store from a newer Hulk is refused, not read or changed.
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 4")
    db.close()
    before = path.read_bytes()
    refused = runner.invoke(app, ["jobs", "list", "--data", str(tiny)])
    assert refused.exit_code == 2 and "jobs_db.format" in refused.output, refused.output
    assert "format 4, written by a newer Hulk" in refused.output
    assert path.read_bytes() == before


def test_a_waiting_jobs_estimate_goes_with_a_change_of_spec_or_state(tmp_path: Path) -> None:
    # The estimates are the last scheduling run's for the job as it then was: a spec changed
    # since, a start, a cancellation or a withdrawal from the jobs file leaves none.
    a, b, c = (
        load_jobs(write_jobs(tmp_path / f"{n}.yaml", spec(n, "BERT-large", iterations=10)))[0]
        for n in "abc"
    )
    estimated = {"scheduled_start": T0, "scheduled_finish": T0 + dt.timedelta(hours=1)}

    def estimate(store: JobStore, name: str) -> None:
        have = store.get(name)
        assert have is not None
        store.put(dataclasses.replace(have, state="queued", **estimated), None)

    def times(store: JobStore, name: str) -> tuple:
        have = store.get(name)
        assert have is not None
        return have.scheduled_start, have.scheduled_finish

    with JobStore(tmp_path / "jobs.db") as store:
        store.sync_file([a, b, c], T0)
        for name in "abc":
            estimate(store, name)
        assert times(store, "a") == (T0, T0 + dt.timedelta(hours=1))
        assert store.get("a").to_dict(T0)["estimated_finish"] == "2026-11-24T10:00:00Z"
        longer = dataclasses.replace(a, iterations=20)
        assert store.sync_file([longer, b, c], T0)["updated"] == ["a"]
        assert times(store, "a") == (None, None)
        assert store.sync_file([longer, c], T0)["withdrawn"] == ["b"]
        assert times(store, "b") == (None, None)
        assert store.sync_file([longer, b, c], T0)["resubmitted"] == ["b"]
        assert times(store, "b") == (None, None)
        have = store.get("c")
        store.put(
            dataclasses.replace(have, state=RUNNING, iteration_s=1.0, computing_since=T0), None
        )
        assert times(store, "c") == (None, None)
        estimate(store, "a")
        store.cancel("a", T0)
        assert times(store, "a") == (None, None)


def test_assign_goes_on_with_the_teacher_when_the_tracking_server_is_down(
    tiny: Path, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    params = tmp_path / "down.yaml"
    down = {**FAST, "mlflow": {"tracking_uri": f"http://127.0.0.1:{port}", "connect_timeout_s": 1}}
    params.write_text(yaml.safe_dump(down))
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1000))
    args = ["--params", params, "assign", "--data", tiny, "--jobs", jobs]
    placed = runner.invoke(app, [str(a) for a in args])
    # The default strategy cannot read the champion: the teacher schedules, and says why.
    assert placed.exit_code == 0, placed.output
    assert "[mlflow.unreachable]" in placed.output and "teacher" in placed.output
    assert json.loads((tiny / "placements" / "latest.json").read_text())["strategy"] == "teacher"
    # Asked for the GNN by name: refused in one line.
    refused = runner.invoke(app, [str(a) for a in (*args, "--strategy", "gnn")])
    assert refused.exit_code == 2 and "[mlflow.unreachable]" in refused.output, refused.output
    assert "Traceback" not in refused.output
