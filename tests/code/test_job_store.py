"""The job store (`hulk.job_store`) on real SQLite, through `hulk jobs` and assign runs: what it
keeps of a job the jobs file changes, and what it does with a row it cannot read."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hulk.cli import app
from hulk.errors import InputError
from hulk.job_store import RUNNING, JobStore
from hulk.jobs import Job, load_jobs
from hulk.stages.scheduling import jobs_db
from tests.code.test_scheduling import T0, json_lines, spec, write_jobs

runner = CliRunner()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A data folder holding a job store of three jobs: `wait` (submitted), `run` (running on
    machine 3) and `done` (finished)."""
    folder = tmp_path / "data"
    folder.mkdir()
    jobs = {
        n: load_jobs(write_jobs(tmp_path / f"{n}.yaml", spec(n, "BERT-large", iterations=1000)))[0]
        for n in ("wait", "run", "done")
    }
    with JobStore(jobs_db(folder)) as store:
        store.submit(list(jobs.values()), T0)
        for name in ("run", "done"):
            have = store.get(name)
            assert have is not None
            running = dataclasses.replace(
                have, state=RUNNING, nodes=(3,), iteration_s=1.0, computing_since=T0
            )
            store.put(running, "started", "on [3]")
        store.finish("done", T0 + dt.timedelta(seconds=10))
    return folder


def damage(folder: Path, name: str, column: str, value: object) -> None:
    db = sqlite3.connect(jobs_db(folder))
    db.execute(f"UPDATE jobs SET {column} = ? WHERE name = ?", (value, name))
    db.commit()
    db.close()


def jobs_command(folder: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["jobs", *args, "--data", str(folder)])
    return result.exit_code, " ".join(result.output.split())  # rich folds long lines


DAMAGE = [
    ("spec", "{bad", "not JSON"),
    ("spec", "[1, 2]", "not a JSON dict"),
    ("spec", json.dumps(spec("run", "BERT-large", layers=0)), "jobs.not_positive"),
    (  # a deadline the jobs file refuses
        "spec",
        json.dumps(
            spec("run", "BERT-large", submitted_at="2026-11-27T09:00:00Z", deadline="2026-11-27")
        ),
        "jobs.deadline_before_submission",
    ),
    ("spec", json.dumps(spec("other", "BERT-large")), "the spec of job 'other'"),
    ("started_at", "x", "not an ISO 8601 time: 'x'"),
    ("updated_at", 12, "not an ISO 8601 time: '12'"),
    ("state", "weird", "'weird' is not a state of a job"),
    ("source", "elsewhere", "'elsewhere' is not jobs-file or cli"),
    ("nodes", "[bad", "not JSON"),
    ("nodes", '["a"]', "not a list of machine ids"),
    ("replicas", "{}", "not a JSON list"),
    ("done_iterations", "x", "not a number: 'x'"),
    ("iteration_s", -1.0, "not a finite number ≥ 0"),
    ("moves", "many", "not a count"),
]


@pytest.mark.parametrize(("column", "value", "problem"), DAMAGE)
def test_a_damaged_row_is_a_clear_error_naming_the_store_job_and_column(
    data: Path, column: str, value: object, problem: str
) -> None:
    damage(data, "run", column, value)
    for command in (["list"], ["list", "--all"], ["finish", "run"], ["progress", "run", "5"]):
        code, output = jobs_command(data, *command)
        assert code == 2, (command, output)
        assert "Traceback" not in output and "AssertionError" not in output
        assert f"{jobs_db(data)}: [jobs_db.readable] job 'run', column '{column}'" in output
        assert problem in output, output
        assert "`hulk jobs cancel run` removes the row" in output
    # The damaged row is one the user wants gone: cancelling it removes it, and only it.
    code, output = jobs_command(data, "cancel", "run")
    assert code == 0, output
    with JobStore(jobs_db(data)) as store:
        names = {state.job.name: state.state for state in store.jobs()}
        events = store.events("run")
    assert "its damaged row is removed from the store" in output
    assert names == {"wait": "submitted", "done": "finished"}  # the store reads again
    assert [e["event"] for e in events] == ["submitted", "started", "cancelled"]
    assert f"its row could not be read (column '{column}'" in events[-1]["detail"]
    code, output = jobs_command(data, "history", "run")  # its history stays
    assert code == 0 and "was removed from the store" in output, output


def test_a_damaged_finished_row_stops_only_what_reads_it(data: Path) -> None:
    damage(data, "done", "finished_at", "yesterday")
    code, output = jobs_command(data, "list")  # waiting and running jobs: all readable
    assert code == 0 and "wait" in output and "run" in output, output
    code, output = jobs_command(data, "list", "--all")
    assert code == 2 and "job 'done', column 'finished_at'" in output, output
    with JobStore(jobs_db(data)) as store:
        wait = store.get("wait")
        assert wait is not None
        # A jobs file that does not list it syncs; one that does is told what is wrong.
        assert store.sync_file([wait.job], T0)["submitted"] == []
        done = load_jobs(write_jobs(data / "d.yaml", spec("done", "BERT-large", iterations=1000)))
        with pytest.raises(Exception, match=r"jobs_db\.readable.*'done'.*'finished_at'"):
            store.sync_file([wait.job, *done], T0)
    code, output = jobs_command(data, "cancel", "done")  # whatever its state: it goes
    assert code == 0, output
    assert jobs_command(data, "list", "--all")[0] == 0


def test_tables_that_are_not_a_stores_are_refused_and_left_as_they_were(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    jobs_db(folder).parent.mkdir(parents=True)
    db = sqlite3.connect(jobs_db(folder))
    db.execute("CREATE TABLE jobs (name TEXT)")
    db.commit()
    db.close()
    before = jobs_db(folder).read_bytes()
    code, output = jobs_command(folder, "list")
    assert code == 2 and "[jobs_db.readable] not a job store: table 'jobs' lacks" in output
    assert jobs_db(folder).read_bytes() == before


def test_an_assign_run_refuses_a_damaged_store_until_the_row_is_cancelled(
    tiny: Path, tmp_path: Path, params_file: Path
) -> None:
    jobs = write_jobs(tmp_path / "jobs.yaml", spec("bert", "BERT-large", iterations=1000))
    args = ["--params", params_file, "assign", "--data", tiny, "--jobs", jobs]
    args += ["--strategy", "teacher"]
    first = runner.invoke(app, [str(a) for a in args])
    assert first.exit_code == 0, first.output
    damage(tiny, "bert", "state", "weird")  # it holds machines: it must not vanish
    refused = runner.invoke(app, [str(a) for a in args])
    assert refused.exit_code == 2, refused.output
    assert "[jobs_db.readable] job 'bert', column 'state'" in " ".join(refused.output.split())
    assert jobs_command(tiny, "cancel", "bert")[0] == 0
    again = runner.invoke(app, [str(a) for a in args])  # the file lists it: submitted anew
    assert again.exit_code == 0, again.output
    with JobStore(jobs_db(tiny)) as store:
        bert = store.get("bert")
        assert bert is not None and bert.state == RUNNING


def stopped_after_running(store: JobStore, name: str) -> None:
    """`name` ran 500 iterations on machine 3, then was stopped: its checkpoint is there."""
    have = store.get(name)
    assert have is not None
    replicas = [{"stages": [{"node": 3, "layer_start": 0, "layer_end": 24}]}]
    store.put(
        dataclasses.replace(
            have,
            state="queued",
            reason="stopped so that shorter work runs first",
            replicas=replicas,
            started_at=T0,
            done_iterations=500.0,
            moves=1,
        ),
        "preempted",
    )


def test_a_change_of_spec_that_leaves_the_sizes_keeps_a_waiting_jobs_progress(
    tmp_path: Path,
) -> None:
    def job(**extra: object) -> Job:
        length = {} if "tokens" in extra else {"iterations": 1000}
        path = write_jobs(tmp_path / "j.yaml", spec("a", "BERT-large", **length, **extra))
        return load_jobs(path)[0]

    later = T0 + dt.timedelta(hours=1)
    folder = tmp_path / "data"
    folder.mkdir()
    with JobStore(jobs_db(folder)) as store:
        store.sync_file([job()], T0)
        stopped_after_running(store, "a")
        ran = store.get("a")
        assert ran is not None
        edits = [
            {"priority": 3},
            {"priority": 3, "deadline": "2026-12-01T00:00:00Z"},
            {"priority": 3, "deadline": "2026-12-01", "submitted_at": "2026-11-20T00:00:00Z"},
            {"priority": 3, "deadline": "2026-12-01", "submitted_at": "2026-11-20", "tokens": 1e9},
        ]
        for extra in edits:
            new = job(**extra)
            assert store.sync_file([new], later)["updated"] == ["a"]
            have = store.get("a")
            assert have is not None and have.job == new and have.state == "queued"
            assert (have.done_iterations, have.replicas) == (500.0, ran.replicas)
            assert (have.started_at, have.moves, have.reason) == (T0, 1, ran.reason)
        assert have.submitted_at == dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
        # Other sizes are another model: its progress cannot carry over, and its history says so.
        bigger = job(**edits[-1], layers=48)
        assert store.sync_file([bigger], later)["updated"] == ["a"]
        fresh = store.get("a")
        assert fresh is not None and fresh.job == bigger and fresh.state == "queued"
        assert (fresh.done_iterations, fresh.replicas, fresh.started_at) == (0.0, None, None)
        assert fresh.submitted_at == have.submitted_at  # as the file last gave it
        # Without its submitted_at the job is submitted when the store first saw it, the default.
        unset = job(**{k: v for k, v in edits[-1].items() if k != "submitted_at"}, layers=48)
        assert store.sync_file([unset], later)["updated"] == ["a"]
        released = store.get("a")
        assert released is not None and released.submitted_at == T0
    code, output = jobs_command(folder, "history", "a")
    assert code == 0, output
    assert "updated (spec changed in the jobs file (priority); its progress (500" in output
    assert "iterations) and checkpoint kept)" in output
    assert (
        "updated (spec changed in the jobs file (layers): other sizes, a different model, so its "
        "progress (500 iterations) and checkpoint do not carry over: it starts from iteration 0)"
    ) in output


def test_a_running_jobs_length_changes_at_once_and_its_sizes_are_refused(tmp_path: Path) -> None:
    a = load_jobs(write_jobs(tmp_path / "a.yaml", spec("a", "BERT-large", iterations=1000)))[0]
    with JobStore(tmp_path / "jobs.db") as store:
        store.sync_file([a], T0)
        have = store.get("a")
        assert have is not None
        running = dataclasses.replace(
            have, state=RUNNING, nodes=(3,), iteration_s=1.0, computing_since=T0
        )
        store.put(running, "started", "on [3]")
        later = T0 + dt.timedelta(seconds=100)
        # A longer run and a higher priority: taken at once, machines and progress kept.
        longer = dataclasses.replace(a, iterations=5000, priority=2)
        assert store.sync_file([longer], later)["updated"] == ["a"]
        kept = store.get("a")
        assert kept is not None and kept.job == longer and kept.state == RUNNING
        assert (kept.nodes, kept.computing_since, kept.progress(later)) == ((3,), T0, 100.0)
        assert kept.estimated_finish() == T0 + dt.timedelta(seconds=5000)
        assert store.events("a")[-1]["detail"] == (
            "spec changed in the jobs file (iterations, priority); it runs on, its machines and "
            "progress kept"
        )
        # Other sizes are another model: refused, naming the job and the fields, nothing changed.
        wider = dataclasses.replace(longer, hidden=2048)
        with pytest.raises(InputError, match=r"jobs\.running_resized.*a: it is running.*hidden"):
            store.sync_file([wider], later, tmp_path / "a.yaml")
        same = store.get("a")
        assert same is not None and same.job == longer
        # A length it has already done finishes it at the next run, at the moment it was done.
        shorter = dataclasses.replace(longer, iterations=50)
        assert store.sync_file([shorter], later)["updated"] == ["a"]
        assert store.finish_done(later) == ["a"]
        done = store.get("a")
        assert done is not None and done.state == "finished" and done.done_iterations == 50
        assert done.finished_at == T0 + dt.timedelta(seconds=50)
        assert store.jobs([RUNNING]) == []  # its machines are free


def test_a_waiting_job_whose_progress_covers_its_new_length_is_finished(tmp_path: Path) -> None:
    a = load_jobs(write_jobs(tmp_path / "a.yaml", spec("a", "BERT-large", iterations=1000)))[0]
    later = T0 + dt.timedelta(hours=1)
    with JobStore(tmp_path / "jobs.db") as store:
        store.sync_file([a], T0)
        stopped_after_running(store, "a")  # 500 iterations done
        store.sync_file([dataclasses.replace(a, iterations=600)], later)
        assert store.finish_done(later) == []  # 100 still to do: it waits
        store.sync_file([dataclasses.replace(a, iterations=400)], later)
        assert store.finish_done(later) == ["a"]
        done = store.get("a")
        assert done is not None and done.state == "finished" and done.finished_at == later
        assert (done.done_iterations, done.reason) == (400.0, "length reached")
        assert store.events("a")[-1]["detail"] == "its 400 iterations were already done"


def test_a_withdrawn_job_listed_again_keeps_its_progress_unless_its_sizes_changed(
    tmp_path: Path,
) -> None:
    a, b = (
        load_jobs(write_jobs(tmp_path / f"{n}.yaml", spec(n, "BERT-large", iterations=1000)))[0]
        for n in "ab"
    )
    later = T0 + dt.timedelta(hours=1)
    with JobStore(tmp_path / "jobs.db") as store:
        store.sync_file([a, b], T0)
        stopped_after_running(store, "b")
        assert store.sync_file([a], later)["withdrawn"] == ["b"]
        urgent = dataclasses.replace(b, priority=5)
        assert store.sync_file([a, urgent], later)["resubmitted"] == ["b"]
        back = store.get("b")
        assert back is not None and back.state == "submitted" and back.job == urgent
        assert (back.done_iterations, back.started_at, back.submitted_at) == (500.0, T0, T0)
        assert back.replicas is not None and back.reason is None
        assert store.sync_file([a], later)["withdrawn"] == ["b"]
        other = dataclasses.replace(urgent, hidden=2048)
        assert store.sync_file([a, other], later)["resubmitted"] == ["b"]
        new = store.get("b")
        assert new is not None and new.job == other and new.done_iterations == 0.0
        assert new.replicas is None and new.submitted_at == T0
        detail = store.events("b")[-1]["detail"]
        assert detail.startswith("listed in the jobs file again (hidden): other sizes")
        assert "it starts from iteration 0" in detail


def test_history_is_oldest_first_though_a_run_records_a_finish_after_newer_changes(
    tmp_path: Path,
) -> None:
    # A run finishes a job at the moment its estimate was done, after the run's own jobs-file
    # changes were written: the history still reads in time order.
    folder = tmp_path / "data"
    folder.mkdir()
    first, second = (
        load_jobs(write_jobs(tmp_path / f"{n}.yaml", spec(n, "BERT-large", iterations=20)))[0]
        for n in ("first", "second")
    )
    later = T0 + dt.timedelta(minutes=15)
    with JobStore(jobs_db(folder)) as store:
        store.submit([first], T0)
        have = store.get("first")
        assert have is not None
        running = dataclasses.replace(
            have, state=RUNNING, nodes=(1,), iteration_s=1.0, started_at=T0, computing_since=T0
        )
        store.put(running, "started")
        store.sync_file([first, second], later)  # as a run does first
        assert store.finish_done(later) == ["first"]  # done at T0 + 20 s
    code, output = jobs_command(folder, "history")
    assert code == 0, output
    events = re.findall(r"Z (first|second) (\w+)", output)
    assert events == [
        ("first", "submitted"),
        ("first", "started"),
        ("first", "finished"),
        ("second", "submitted"),
    ], output


def test_progress_never_passes_the_jobs_length(tmp_path: Path) -> None:
    # Between assign runs a job's estimate can be done: it has done its length, no more, in
    # `hulk jobs list`, and in what `cancel` and `finish` keep of it.
    folder = tmp_path / "data"
    folder.mkdir()
    jobs = [
        load_jobs(write_jobs(tmp_path / f"{n}.yaml", spec(n, "BERT-large", iterations=20)))[0]
        for n in ("listed", "cancelled", "finished", "estimated")
    ]
    an_hour_ago = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
    with JobStore(jobs_db(folder)) as store:
        store.submit(jobs, an_hour_ago)
        for job in jobs:
            have = store.get(job.name)
            assert have is not None
            store.put(
                dataclasses.replace(
                    have, state=RUNNING, nodes=(1,), iteration_s=1.0, computing_since=an_hour_ago
                ),
                "started",
            )
        running = store.get("estimated")
        assert running is not None
        end = an_hour_ago + dt.timedelta(seconds=20)
        assert running.estimated_finish() == end
        assert running.progress(end - dt.timedelta(seconds=5)) == 15.0
        assert running.progress(end) == running.progress(end + dt.timedelta(days=1)) == 20.0
        assert running.remaining(end) == 0.0
        assert not running.done_by(end - dt.timedelta(seconds=1)) and running.done_by(end)
    listed = runner.invoke(app, ["jobs", "list", "--json", "--data", str(folder)])
    assert listed.exit_code == 0, listed.output
    assert {r["job"]: r["done_iterations"] for r in json_lines(listed.output)} == {
        job.name: 20.0 for job in jobs
    }
    assert jobs_command(folder, "list")[1].count("20 / 20") == 4
    assert jobs_command(folder, "cancel", "cancelled")[0] == 0
    assert jobs_command(folder, "finish", "finished")[0] == 0
    listed = runner.invoke(app, ["jobs", "list", "--all", "--json", "--data", str(folder)])
    assert {r["job"]: r["nodes"] for r in json_lines(listed.output)} == {
        "listed": [1],
        "estimated": [1],
        "cancelled": [],  # their machines went back to the pool
        "finished": [],
    }
    with JobStore(jobs_db(folder)) as store:
        assert store.finish_done(dt.datetime.now(dt.UTC)) == ["estimated", "listed"]
        done = {s.job.name: (s.state, s.done_iterations) for s in store.jobs()}
        assert done == {
            "listed": ("finished", 20.0),
            "cancelled": ("cancelled", 20.0),
            "finished": ("finished", 20.0),
            "estimated": ("finished", 20.0),
        }
        assert store.get("estimated").finished_at == end  # when its estimate was done


def test_a_jobs_file_job_named_like_a_finished_one_is_the_same_job_or_an_error(
    tiny: Path, tmp_path: Path, params_file: Path
) -> None:
    gpt = spec("gpt", "GPT-2-1.5B", iterations=1000)
    same = write_jobs(tmp_path / "jobs.yaml", gpt)
    args = ["--params", params_file, "assign", "--data", tiny, "--strategy", "teacher"]
    first = runner.invoke(app, [str(a) for a in (*args, "--jobs", same)])
    assert first.exit_code == 0, first.output
    assert jobs_command(tiny, "finish", "gpt")[0] == 0
    # The file still lists the finished job as it was: the same job, which stays finished.
    again = runner.invoke(app, [str(a) for a in (*args, "--jobs", same)])
    assert again.exit_code == 0, again.output
    # Another spec under its name is a new job: refused, not dropped without a word.
    longer = write_jobs(tmp_path / "longer.yaml", {**gpt, "iterations": 2000})
    refused = runner.invoke(app, [str(a) for a in (*args, "--jobs", longer)])
    output = " ".join(refused.output.split())
    assert refused.exit_code == 2, output
    assert f"{longer}: [jobs.name_taken] gpt: the job store holds a finished job" in output
    assert "(iterations)" in output and "give the file's job a new name" in output
    with JobStore(jobs_db(tiny)) as store:
        gpt_state = store.get("gpt")
        assert gpt_state is not None and gpt_state.state == "finished"
        assert gpt_state.job.iterations == 1000
        # A cancelled job, of either source, is the same: its spec, or an error.
        bert = load_jobs(write_jobs(tmp_path / "b.yaml", spec("bert", "BERT-large")))[0]
        store.submit([bert], T0)
        store.cancel("bert", T0)
        # Submitted again, even as it was, a cancelled job is not run again.
        with pytest.raises(InputError, match=r"jobs\.name_taken.*bert \(cancelled\); use a new"):
            store.submit([bert], T0)
        assert store.sync_file([bert], T0) == {
            "submitted": [],
            "updated": [],
            "withdrawn": [],
            "resubmitted": [],
        }
        with pytest.raises(InputError, match=r"jobs\.name_taken.*bert: .* a cancelled job"):
            store.sync_file([dataclasses.replace(bert, priority=1)], T0, tmp_path / "b.yaml")


def test_the_default_jobs_file_syncs_after_its_jobs_finish(tmp_path: Path) -> None:
    # Its jobs give `tokens`: the store keeps the iterations they make, the same job.
    upcoming = load_jobs(Path(__file__).parents[2] / "data" / "jobs" / "upcoming.yaml")
    with JobStore(tmp_path / "jobs.db") as store:
        store.sync_file(upcoming, T0)
        for job in upcoming:
            have = store.get(job.name)
            assert have is not None
            store.put(
                dataclasses.replace(have, state=RUNNING, iteration_s=1.0, computing_since=T0),
                "started",
            )
        assert len(store.finish_done(T0 + dt.timedelta(days=10_000))) == len(upcoming)
        assert not any(store.sync_file(upcoming, T0 + dt.timedelta(days=10_001)).values())
        assert {s.state for s in store.jobs()} == {"finished"}


def test_reading_a_folder_without_a_job_store_creates_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    for command in (["list"], ["list", "--all"], ["list", "--json"], ["history"]):
        code, output = jobs_command(folder, *command)
        assert code == 0, (command, output)
        assert "Traceback" not in output
    assert jobs_command(folder, "list", "--json")[1] == ""  # no job
    for command in (["history", "a"], ["cancel", "a"], ["finish", "a"], ["progress", "a", "1"]):
        code, output = jobs_command(folder, *command)
        assert code == 2 and "[jobs.unknown_job] no job named 'a'" in output, (command, output)
    assert list(folder.rglob("*")) == []  # no store, no lock
    jobs = write_jobs(tmp_path / "a.yaml", spec("a", "BERT-large"))
    code, output = jobs_command(folder, "submit", str(jobs))  # adding a job makes the store
    assert code == 0, output
    assert jobs_db(folder).is_file()
    assert jobs_command(folder, "cancel", "a")[0] == 0


def test_a_job_command_waited_for_is_named_as_the_lock_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The assign lock is taken by `hulk jobs` commands too: whoever waits reads which."""
    import threading

    from hulk.folder_lock import folder_lock

    folder = tmp_path / "data"
    folder.mkdir()
    assert (
        jobs_command(
            folder, "submit", str(write_jobs(tmp_path / "a.yaml", spec("a", "BERT-large")))
        )[0]
        == 0
    )
    said: list[str] = []

    def waiter() -> None:
        try:
            with folder_lock(folder, "assign", 0.2):
                said.append("taken")
        except InputError as exc:
            said.append(str(exc))

    cancel = JobStore.cancel

    def cancel_while_another_waits(self: JobStore, *args: object, **kwargs: object) -> object:
        other = threading.Thread(target=waiter)
        other.start()
        other.join()
        return cancel(self, *args, **kwargs)

    monkeypatch.setattr(JobStore, "cancel", cancel_while_another_waits)
    assert jobs_command(folder, "cancel", "a")[0] == 0
    assert (
        len(said) == 1
        and "[lock.timeout] another run holds the data folder's assign lock" in said[0]
    )
    assert ", hulk jobs cancel, since " in said[0], said


@pytest.mark.parametrize(("done", "shown"), [("1.5", "1.5"), ("2", "2"), ("999.25", "999.25")])
def test_progress_says_what_it_stored(data: Path, done: str, shown: str) -> None:
    code, output = jobs_command(data, "progress", "run", done)
    assert code == 0, output
    assert f"run: {shown} iterations done" in output
    with JobStore(jobs_db(data)) as store:
        stored = store.get("run")
    assert stored is not None and stored.done_iterations == float(done)


def test_a_negative_progress_is_hulks_error_not_an_unknown_option(data: Path) -> None:
    code, output = jobs_command(data, "progress", "run", "-5")
    assert code == 2 and "[jobs.bad_progress] run: iterations done -5" in output, output


def test_a_store_another_process_holds_is_busy_not_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hulk import job_store

    path = tmp_path / "jobs.db"
    JobStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing it
    monkeypatch.setattr(job_store, "BUSY_TIMEOUT_S", 0.1)
    try:
        with pytest.raises(InputError, match=r"jobs_db\.busy.*nothing was changed"):
            JobStore(path).close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
