"""The jobs file at its edges (docs/contracts.md#jobs-file): what Hulk keeps of it is what it
checked, and what it cannot keep is refused with an error naming the file, the job and the field."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hulk.cli import app
from hulk.errors import InputError
from hulk.jobs import Job, format_time, job_to_dict, load_jobs, parse_jobs, utc_time
from tests.code.test_cli_assign import FAST

runner = CliRunner()

# A GPT-2-sized job, as the text of a flow-style mapping: `- {G, key: value}` is a whole job.
G_KEYS = {
    "name": "G",
    "params_b": "1.5",
    "layers": "48",
    "hidden": "1600",
    "seq_len": "1024",
    "global_batch": "512",
    "micro_batch": "8",
}


def flow(**values: str) -> str:
    """G's keys and values, with `values` in place of G's own or after them."""
    return ", ".join(f"{key}: {value}" for key, value in {**G_KEYS, **values}.items())


G = flow()


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


# --- sizes ------------------------------------------------------------------------------------

# The largest job of each kind the file accepts (docs/contracts.md#jobs-file), and the smallest.
LARGEST = {
    "name": "Largest",
    "params_b": 100_000.0,
    "layers": 10_000,
    "hidden": 1_000_000,
    "seq_len": 100_000_000,
    "global_batch": 10_000_000,
    "micro_batch": 10_000_000,
    "priority": 1_000_000,
    "min_memory_gb": 10_000_000.0,
    "iterations": 10**12,
}
SMALLEST = {**LARGEST, "name": "Smallest", "params_b": 1e-9, "micro_batch": 1, "hidden": 1}
SMALLEST |= {"seq_len": 1, "priority": -1_000_000}


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("params_b", "1.0e+300"),
        ("params_b", "1.0e+299"),
        ("params_b", "100000.5"),
        ("params_b", "1.0e-12"),  # no parameter at all once rounded to a count
        ("layers", "1000000000000000000000"),
        ("layers", "10000000"),
        ("layers", "10001"),
        ("hidden", "1000001"),
        ("seq_len", "100000001"),
        ("min_memory_gb", "1.0e+8"),
        ("priority", "1000001"),
        ("priority", "-1000001"),
    ],
)
def test_sizes_beyond_any_training_job_are_refused(tmp_path: Path, field: str, text: str) -> None:
    path = write(tmp_path, flow(**{field: text}))
    refused(path, "jobs.out_of_range", "job 1 ('G')", field)


def test_batches_beyond_any_training_job_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, flow(global_batch="10000001", micro_batch="10000001"))
    message = refused(path, "jobs.out_of_range", "job 1 ('G')", "global_batch")
    assert "field 'micro_batch'" in message


def test_the_largest_and_smallest_accepted_jobs_have_finite_costs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"jobs": [LARGEST, SMALLEST]}))
    largest, smallest = load_jobs(path)
    for job in (largest, smallest):
        sizes = (job.flops_per_iteration, job.activation_bytes, job.state_bytes)
        assert all(math.isfinite(size) and size > 0 for size in sizes), job
        assert job.min_memory_bytes > 0 and job.params >= 1
    # The constructor holds every Job to the same bounds.
    for field in ("params_b", "layers", "hidden", "seq_len", "global_batch", "min_memory_gb"):
        with pytest.raises(ValueError, match=field):
            Job(**{**largest.__dict__, field: LARGEST[field] * 2})
    with pytest.raises(ValueError, match="priority"):
        Job(**{**largest.__dict__, "priority": -1_000_001})
    with pytest.raises(ValueError, match="params_b"):
        Job(**{**largest.__dict__, "params_b": 1e-12})


def test_extreme_jobs_are_one_line_errors_and_the_largest_accepted_ones_are_scheduled(
    tiny: Path, tmp_path: Path
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(FAST))
    assign = ["--params", str(params), "assign", "--data", str(tiny), "--strategy", "teacher"]
    for extra in (
        {"params_b": "1.0e+300"},
        {"layers": "10000000"},
        {"deadline": '"9999-12-31T23:00:00-05:00"'},
    ):
        path = write(tmp_path, flow(**extra))
        for command in (
            ["jobs", "submit", str(path), "--data", str(tiny)],
            [*assign, "--jobs", str(path)],
        ):
            result = runner.invoke(app, command)
            assert result.exit_code == 2, result.output
            assert result.exception is None or isinstance(result.exception, SystemExit)
            assert f"{path}: [jobs." in result.output and "job 1 ('G')" in result.output
    # The largest accepted sizes and the calendar's first and last seconds plan in seconds
    # (too large for the fleet's memory, or too slow to finish in a calendar, they are reported
    # so) and leave a store every command reads.
    deep = {**LARGEST, "name": "Deep", "params_b": 175.0, "min_memory_gb": 1e-300}
    edges = {"submitted_at": "0001-01-01T00:00:00Z", "deadline": "9999-12-31T23:59:59Z"}
    path = tmp_path / "largest.yaml"
    path.write_text(yaml.safe_dump({"jobs": [LARGEST, {**SMALLEST, **edges}, deep]}))
    for _ in range(2):
        result = runner.invoke(app, [*assign, "--jobs", str(path)])
        assert result.exit_code == 0, result.output
    listed = runner.invoke(app, ["jobs", "list", "--data", str(tiny)])
    assert listed.exit_code == 0, listed.output
    assert "Largest" in listed.output and "Smallest" in listed.output


# --- repeated keys ----------------------------------------------------------------------------


def test_a_key_given_twice_in_a_job_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, "name: A, " + G.removeprefix("name: G, "), f"{G}, iterations: 1000, iterations: 5"
    )
    message = refused(path, "jobs.duplicate_key", "job 2 ('G')", "iterations")
    assert "line 3" in message and "job 1" not in message
    result = runner.invoke(app, ["jobs", "submit", str(path), "--data", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"{path}: [jobs.duplicate_key] job 2 ('G'), field 'iterations'" in result.output
    block = tmp_path / "block.yaml"
    lines = ["jobs:", "- name: B", *(f"  {k}: {v}" for k, v in G_KEYS.items() if k != "name")]
    block.write_text("\n".join([*lines, "  layers: 24", ""]), encoding="utf-8")
    refused(block, "jobs.duplicate_key", "job 1 ('B')", "layers")


def test_a_repeated_top_level_key_and_repeats_in_json_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"jobs:\n- {{{G}}}\njobs:\n- {{{flow(name='H')}}}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"jobs\.duplicate_key.*top level, key 'jobs'.*line 3"):
        load_jobs(path)
    record = json.dumps({**_g(), "name": "J"})
    text = '{"jobs": [' + record[:-1] + ', "micro_batch": 16}]}'  # micro_batch twice
    path = tmp_path / "jobs.json"
    path.write_text(text, encoding="utf-8")
    refused(path, "jobs.duplicate_key", "job 1 ('J')", "micro_batch")


def test_yaml_merge_keys_are_no_repeats(tmp_path: Path) -> None:
    (job,) = load_jobs(write(tmp_path, f"<<: {{layers: 24, hidden: 64}}, {G}"))
    assert (job.layers, job.hidden) == (48, 1600)


# --- scientific notation ----------------------------------------------------------------------


def test_numbers_in_scientific_notation_are_numbers_in_every_field(tmp_path: Path) -> None:
    # YAML 1.1 reads an exponent without a dot or a sign (1e6, 1.75e2) as text.
    path = write(
        tmp_path,
        "name: A, params_b: 1.75e2, layers: 9.6e1, hidden: 1.2288E+4, seq_len: 2.048e3, "
        "global_batch: 1.024e3, micro_batch: 1e0, priority: -1e0, min_memory_gb: 2.4e1, "
        "iterations: 1e6",
        f"{flow(name='B', params_b='.5e1')}, min_memory_gb: 1.0e+2, tokens: 1e9",
        f"{flow(name='3e8')}, tokens: '1e9'",  # a name that looks like a number is a name
    )
    a, b, c = load_jobs(path)
    assert (a.params_b, a.min_memory_gb) == (175.0, 24.0)
    sizes = (a.layers, a.hidden, a.seq_len, a.global_batch, a.micro_batch, a.priority)
    assert sizes == (96, 12288, 2048, 1024, 1, -1) and a.iterations == 1_000_000
    assert all(type(n) is int for n in (*sizes, a.iterations))
    assert all(type(x) is float for x in (a.params_b, a.min_memory_gb, b.params_b))
    assert (b.params_b, b.min_memory_gb, b.iterations) == (5.0, 100.0, -(-(10**9) // (512 * 1024)))
    assert c.name == "3e8" and c.iterations == b.iterations
    assert parse_jobs({"jobs": [job_to_dict(a)]}) == [a]


@pytest.mark.parametrize(
    ("field", "text", "rule"),
    [
        ("layers", "4.85e1", "jobs.wrong_type"),  # not a whole number, like 48.5
        ("layers", "48.0", "jobs.wrong_type"),  # integers are still written as integers
        ("layers", '"1e3"', "jobs.wrong_type"),  # and text is not a number, like "48"
        ("layers", "1e5", "jobs.out_of_range"),
        ("iterations", "1e13", "jobs.too_long"),
        ("params_b", "1e-12", "jobs.out_of_range"),
        ("params_b", "-1.5e0", "jobs.not_positive"),
        ("params_b", "1e400", "jobs.not_positive"),  # infinite
    ],
)
def test_numbers_in_scientific_notation_are_judged_like_any_other(
    tmp_path: Path, field: str, text: str, rule: str
) -> None:
    refused(write(tmp_path, flow(**{field: text})), rule, "job 1 ('G')", field)


# --- hulk jobs list --json ----------------------------------------------------------------------


def test_jobs_list_json_prints_one_json_object_a_line(tiny: Path, tmp_path: Path) -> None:
    import dataclasses

    from hulk.job_store import JobStore
    from hulk.stages.scheduling import jobs_db

    names = [f"job-{k}-{'x' * 60}" for k in range(3)]  # records longer than any terminal
    path = write(tmp_path, *(flow(name=name) for name in names))
    assert runner.invoke(app, ["jobs", "submit", str(path), "--data", str(tiny)]).exit_code == 0
    reason = "stopped for shorter work (1.0 h → 0.5 h) …"
    with JobStore(jobs_db(tiny)) as store:
        state = store.get(names[0])
        assert state is not None
        store.put(dataclasses.replace(state, reason=reason), None)
    listed = runner.invoke(
        app, ["jobs", "list", "--data", str(tiny), "--json"], env={"COLUMNS": "40"}
    )
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["job"] for r in records] == names
    assert records[0]["reason"] == reason and listed.output.isascii()


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


def test_a_yaml_syntax_error_is_one_line_saying_where(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - name: a\n    model: [BERT-large\n")
    with pytest.raises(InputError, match=r"jobs\.yaml_syntax") as caught:
        load_jobs(path)
    assert "line 4, column 1" in str(caught.value) and "\n" not in str(caught.value)


# --- presets ----------------------------------------------------------------------------------


def test_a_preset_gives_its_sizes_and_the_job_keeps_its_own(tmp_path: Path) -> None:
    from hulk.jobs import PRESET_JOBS

    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "- {name: mine, preset: GPT-2-1.5B, tokens: 1.0e9, priority: 2}\n"
        "- {name: wide, preset: BERT-large, global_batch: 512, iterations: 10}\n",
        encoding="utf-8",
    )
    mine, wide = load_jobs(path)
    gpt2, bert = PRESET_JOBS["GPT-2-1.5B"], PRESET_JOBS["BERT-large"]
    assert mine == Job(**{**job_to_dict(gpt2), "name": "mine", "priority": 2, "iterations": 1908})
    assert mine.iterations == math.ceil(1e9 / (gpt2.global_batch * gpt2.seq_len))
    assert (wide.global_batch, wide.micro_batch, wide.layers) == (512, bert.micro_batch, 24)
    # What the store and the placements keep is the expanded job: it reads back as itself.
    records = [job_to_dict(job) for job in (mine, wide)]
    assert all("preset" not in record for record in records)
    assert parse_jobs({"jobs": records}) == [mine, wide]


@pytest.mark.parametrize("preset", ["GPT-3", "gpt-2-1.5b", "3", "null", "[BERT-large]"])
def test_a_preset_that_is_no_preset_is_refused_naming_the_known_ones(
    tmp_path: Path, preset: str
) -> None:
    path = write(tmp_path, f"name: P, preset: {preset}, iterations: 5")
    message = refused(path, "jobs.unknown_preset", "job 1 ('P')", "preset")
    assert "known: OPT-175B, T5-11B" in message


def test_a_preset_job_s_own_fields_are_checked_like_any_job_s(tmp_path: Path) -> None:
    # A size the job gives against the preset's: the rule between the fields names the field.
    path = write(tmp_path, "name: P, preset: BERT-large, micro_batch: 1024")
    refused(path, "jobs.micro_batch_too_large", "job 1 ('P')", "micro_batch")
    refused(write(tmp_path, "preset: BERT-large"), "jobs.missing_key", "job 1", "name")
    path = write(tmp_path, "name: P, preset: BERT-large, layerz: 3")
    assert "preset" in refused(path, "jobs.unknown_key", "job 1 ('P')", "layerz")
    path = tmp_path / "twice.yaml"
    path.write_text("jobs:\n- name: P\n  preset: BERT-large\n  preset: T5-11B\n", encoding="utf-8")
    refused(path, "jobs.duplicate_key", "job 1 ('P')", "preset")


def test_a_preset_job_is_submitted_and_listed_with_its_sizes(tiny: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "name: P, preset: BERT-large, iterations: 100")
    submitted = runner.invoke(app, ["jobs", "submit", str(path), "--data", str(tiny)])
    assert submitted.exit_code == 0, submitted.output
    listed = runner.invoke(app, ["jobs", "list", "--data", str(tiny), "--json"])
    assert listed.exit_code == 0, listed.output
    (record,) = [json.loads(line) for line in listed.output.splitlines()]
    assert record["job"] == "P" and record["iterations"] == 100
    from hulk.job_store import JobStore
    from hulk.jobs import PRESET_JOBS
    from hulk.stages.scheduling import jobs_db

    with JobStore(jobs_db(tiny)) as store:
        state = store.get("P")
    bert = PRESET_JOBS["BERT-large"]
    assert state is not None
    assert state.job == Job(**{**job_to_dict(bert), "name": "P", "iterations": 100})


def test_the_contracts_example_jobs_file_is_a_valid_one(tmp_path: Path) -> None:
    contracts = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"
    section = contracts.read_text(encoding="utf-8").split("## Jobs file", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "jobs.yaml"
    path.write_text(example, encoding="utf-8")
    gpt2, bert = load_jobs(path)
    assert (gpt2.name, gpt2.iterations, gpt2.min_memory_gb) == ("GPT-2-1.5B", 20000, 24.0)
    assert (bert.layers, bert.global_batch, bert.iterations) == (24, 512, 7630)
