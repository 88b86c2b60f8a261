"""The jobs file at its edges (docs/contracts.md#jobs-file): what Hulk keeps of it is what it
checked, and what it cannot keep is refused with an error naming the file, the job and the field."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hulk.cli import app
from hulk.errors import InputError
from hulk.jobs import format_time, job_to_dict, load_jobs, parse_jobs, utc_time

runner = CliRunner()

# A GPT-2-sized job, in flow style: `{G, key: value}` is a whole job.
G = "name: G, params_b: 1.5, layers: 48, hidden: 1600, seq_len: 1024, global_batch: 512, "
G += "micro_batch: 8"


def write(tmp_path: Path, *jobs: str, name: str = "jobs.yaml") -> Path:
    path = tmp_path / name
    path.write_text("jobs:\n" + "".join(f"- {{{job}}}\n" for job in jobs), encoding="utf-8")
    return path


def refused(path: Path, rule: str, job: str, field: str) -> str:
    """The message of the `InputError` loading `path` raises: its rule, naming file, job, field."""
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    message = str(caught.value)
    assert caught.value.rule == rule, message
    assert str(path) in message and job in message and f"field {field!r}" in message, message
    return message


# --- times ------------------------------------------------------------------------------------


def test_times_are_whole_seconds_so_a_deadline_is_judged_as_it_is_stored(tmp_path: Path) -> None:
    # 09:00:00.1 and 09:00:00.9 are both kept as 09:00:00: the deadline is not after submission.
    path = write(tmp_path, f'{G}, submitted_at: "2026-11-27T09:00:00.1Z", deadline: '
                 '"2026-11-27T09:00:00.9Z"')  # fmt: skip
    refused(path, "jobs.deadline_before_submission", "job 1 ('G')", "deadline")
    path = write(tmp_path, f'{G}, submitted_at: "2026-11-27T09:00:00.7Z", deadline: '
                 '"2026-11-27T09:00:01.2+00:00"')  # fmt: skip
    (job,) = load_jobs(path)
    assert job.submitted_at == dt.datetime(2026, 11, 27, 9, 0, 0, tzinfo=dt.UTC)
    assert job.deadline == dt.datetime(2026, 11, 27, 9, 0, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00Z",
        "0001-01-01T01:00:00+01:00",  # year 1's first second, in UTC
        "0010-01-01",
        "0999-12-31T23:59:59.999999Z",
        "1000-01-01T00:00:00",
        "1969-12-31T23:59:59-00:30",
        "2026-11-27 09:00",
        "2026-11-27T09:00:00.5+05:45",
        "2026-W48-5",  # an ISO week date
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59.999999-00:00",
        "9999-12-31T23:00:00+05:00",
    ],
)
def test_every_accepted_time_is_written_and_read_back_unchanged(text: str) -> None:
    (job,) = parse_jobs({"jobs": [{**_g(), "submitted_at": text}]}, source="f.yaml")
    moment = job.submitted_at
    assert moment is not None and moment.microsecond == 0 and moment.utcoffset() == dt.timedelta()
    written = format_time(moment)
    assert len(written) == 20 and written.endswith("Z"), written  # YYYY-MM-DDTHH:MM:SSZ
    assert utc_time(written) == moment
    # The job store keeps a job as its jobs-file mapping and reads it back with parse_jobs.
    assert parse_jobs({"jobs": [job_to_dict(job)]}) == [job]


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00+01:00",  # 31 Dec of year 0 in UTC
        "9999-12-31T23:00:00-05:00",  # year 10000 in UTC
        "0000-01-01T00:00:00Z",
        "10000-01-01T00:00:00Z",
        "yesterday",
    ],
)
@pytest.mark.parametrize("field", ["submitted_at", "deadline"])
def test_times_outside_the_calendar_are_refused(tmp_path: Path, text: str, field: str) -> None:
    path = write(tmp_path, f'{G}, {field}: "{text}"')
    message = refused(path, "jobs.bad_time", "job 1 ('G')", field)
    assert repr(text) in message


def test_a_submitted_job_of_year_10_stays_readable(tiny: Path, tmp_path: Path) -> None:
    path = write(tmp_path, f'{G}, iterations: 100, submitted_at: "0010-01-01T00:00:00Z"')
    submitted = runner.invoke(app, ["jobs", "submit", str(path), "--data", str(tiny)])
    assert submitted.exit_code == 0, submitted.output
    listed = runner.invoke(app, ["jobs", "list", "--data", str(tiny), "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"submitted_at": "0010-01-01T00:00:00Z"' in listed.output


def _g() -> dict:
    return {
        "name": "G",
        "params_b": 1.5,
        "layers": 48,
        "hidden": 1600,
        "seq_len": 1024,
        "global_batch": 512,
        "micro_batch": 8,
    }
