"""`hulk assign`, `hulk evaluate`, `hulk replan`: files written atomically, clean errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from hulk import fileio
from hulk.cli import app
from hulk.jobs import PAPER_MIX_4, dump_jobs, job_to_dict, preset_jobs
from tests.conftest import HULK47

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"

# Small searches keep the tests fast; the defaults are for real runs.
FAST = {"teacher": {"max_evaluations": 40, "time_budget_s": 20.0, "random_starts": 0}}


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def params(tmp_path: Path) -> Path:
    """Settings with a small teacher search, when the installed settings know the teacher."""
    from hulk.settings import Settings

    path = tmp_path / "params.yaml"
    fast = {k: v for k, v in FAST.items() if k in Settings.model_fields}
    path.write_text(yaml.safe_dump(fast))
    return path


@pytest.fixture
def jobs_file(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(dump_jobs(preset_jobs(["GPT-2-1.5B", "BERT-large"])))
    return path


def assigned(tiny: Path, jobs_file: Path, params: Path, strategy: str) -> Path:
    out = tiny / "placements"
    result = invoke(
        "--params", params, "assign", "--data", tiny, "--jobs", jobs_file, "--strategy", strategy,
        "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def teacher_available() -> bool:
    try:
        import hulk.teacher  # noqa: F401
    except ImportError:
        return False
    return True


needs_teacher = pytest.mark.skipif(not teacher_available(), reason="hulk.teacher not there yet")


def test_commands_have_help() -> None:
    for command in ("assign", "evaluate", "replan"):
        result = invoke(command, "--help")
        assert result.exit_code == 0 and "Usage" in result.output


def test_assign_writes_run_file_and_latest(tiny: Path, jobs_file: Path, params: Path) -> None:
    out = assigned(tiny, jobs_file, params, "B")
    runs = [p for p in out.glob("*.json") if p.name != "latest.json"]
    assert len(runs) == 1
    assert (out / "latest.json").read_bytes() == runs[0].read_bytes()
    doc = json.loads(runs[0].read_text())
    assert doc["schema"] == "hulk.placements/v1" and doc["strategy"] == "B"
    assert runs[0].stem == doc["run_id"]
    assert doc["fleet"] == {
        "nodes": 6,
        "links": 15,
        "snapshot": fileio.sha256_file(tiny / "links.parquet"),
        "inventory": fileio.sha256_file(tiny / "machines.csv"),
    }
    assert [j["status"] for j in doc["jobs"]] == ["placed", "queued"]
    assert doc["jobs"][0]["nodes"] == list(range(6))


def test_assign_prints_the_placements(tiny: Path, jobs_file: Path, params: Path) -> None:
    result = invoke(
        "--params", params, "assign", "--data", tiny, "--jobs", jobs_file, "--strategy", "C",
        "--out", tiny / "placements",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "GPT-2-1.5B" in result.output and "TP×6" in result.output
    assert "makespan" in result.output and "latest.json" in result.output


def test_gnn_without_a_model_is_a_clear_error(tiny: Path, jobs_file: Path) -> None:
    out = tiny / "placements"
    result = invoke(
        "assign", "--data", tiny, "--jobs", jobs_file, "--strategy", "gnn", "--out", out
    )
    assert result.exit_code == 2
    assert "no champion model yet: run `hulk train`" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("edit", "mention"),
    [
        (lambda jobs: jobs[0].update(colour="red"), "'colour': unknown key"),
        (lambda jobs: jobs[1].update(layers=0), "'layers'"),
        (lambda jobs: jobs[1].update(params_b=-1.5), "'params_b'"),
        (lambda jobs: jobs[1].update(name=jobs[0]["name"]), "jobs.duplicate_name"),
    ],
)
def test_bad_jobs_file_is_named_and_nothing_written(
    tiny: Path, tmp_path: Path, edit, mention: str
) -> None:
    raw = yaml.safe_load(dump_jobs(preset_jobs(["GPT-2-1.5B", "BERT-large"])))
    edit(raw["jobs"])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tiny / "placements"
    result = invoke("assign", "--data", tiny, "--jobs", path, "--strategy", "B", "--out", out)
    assert result.exit_code == 2
    assert "bad.yaml" in result.output and mention in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_assign_without_link_table_is_a_clear_error(tmp_path: Path, jobs_file: Path) -> None:
    result = invoke("assign", "--data", tmp_path, "--jobs", jobs_file, "--strategy", "A")
    assert result.exit_code == 2 and "hulk ingest" in result.output


def test_evaluate_prints_table_and_writes_plot(tiny: Path, jobs_file: Path, params: Path) -> None:
    out = assigned(tiny, jobs_file, params, "A")
    (out / "latest.png").unlink(missing_ok=True)
    result = invoke("evaluate", out / "latest.json", "--data", tiny)
    assert result.exit_code == 0, result.output
    for text in ("GPT-2-1.5B", "BERT-large", "bound", "placed", "queued", "makespan"):
        assert text in result.output
    assert not (out / "latest.png").exists()  # asked to print: nothing beside the file read
    elsewhere = tiny / "plots" / "costs.png"
    result = invoke("evaluate", out / "latest.json", "--data", tiny, "--plot", elsewhere)
    assert result.exit_code == 0, result.output
    assert elsewhere.read_bytes().startswith(PNG)


def test_evaluating_another_file_leaves_the_published_plans_metrics(
    tiny: Path, jobs_file: Path, params: Path
) -> None:
    out = assigned(tiny, jobs_file, params, "A")  # published: latest.json
    assert invoke("--params", params, "evaluate", "--data", tiny).exit_code == 0
    metrics = tiny / "metrics"
    published = {p: p.read_bytes() for p in metrics.rglob("*") if p.is_file()}
    assert metrics / "evaluate.json" in published
    other = tiny / "elsewhere"
    result = invoke(
        "--params", params, "assign", "--data", tiny, "--jobs", jobs_file, "--strategy", "C",
        "--out", other,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (run_file,) = [p for p in other.glob("*.json") if p.name != "latest.json"]
    assert invoke("--params", params, "evaluate", run_file, "--data", tiny).exit_code == 0
    assert {p: p.read_bytes() for p in metrics.rglob("*") if p.is_file()} == published
    # The published file named by its path is the published plan.
    assert (
        invoke("--params", params, "evaluate", out / "latest.json", "--data", tiny).exit_code == 0
    )


def test_evaluate_tables_fit_80_columns_without_cutting_a_figure(
    tiny: Path, tmp_path: Path, params: Path
) -> None:
    jobs = tmp_path / "long.yaml"
    long_name = [{**job_to_dict(job), "name": f"{job.name}-finetune-customer-support-v2"}
                 for job in preset_jobs(["GPT-2-1.5B", "BERT-large"])]  # fmt: skip
    jobs.write_text(yaml.safe_dump({"jobs": long_name}))
    out = assigned(tiny, jobs, params, "C")
    result = runner.invoke(
        app, ["evaluate", str(out / "latest.json"), "--data", str(tiny)], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    assert "…" not in result.output, result.output
    starts = ("job ", "─", "GPT-2", "BERT", "-support")  # the tables' lines
    tables = [line for line in result.output.splitlines() if line.startswith(starts)]
    assert len(tables) >= 10, result.output
    assert all(len(line.rstrip()) <= 80 for line in tables), result.output


def test_evaluate_malformed_file_names_the_field(tiny: Path, jobs_file: Path, params: Path) -> None:
    out = assigned(tiny, jobs_file, params, "B")
    doc = json.loads((out / "latest.json").read_text())
    doc["jobs"][0]["replicas"][0]["stages"][1]["layer_start"] += 1
    bad = out / "bad.json"
    bad.write_text(json.dumps(doc))
    result = invoke("evaluate", bad, "--data", tiny)
    assert result.exit_code == 2
    assert "bad.json" in result.output and "placements.coverage" in result.output
    assert "GPT-2-1.5B" in result.output and "stages[1]" in result.output
    assert not bad.with_suffix(".png").exists()


@pytest.mark.parametrize(
    ("start", "finish", "mention"),
    [
        ("garbage", None, "'garbage' is not a UTC time"),
        ("2026-11-24T09:00:00Z", "2026-11-24T08:00:00Z", "is before start_at"),
        ("2026-02-30T09:00:00Z", None, "is not a UTC time"),
    ],
)
def test_evaluate_refuses_scheduler_times_that_are_no_times(
    tiny: Path, jobs_file: Path, params: Path, start: str, finish: str | None, mention: str
) -> None:
    out = assigned(tiny, jobs_file, params, "teacher")
    doc = json.loads((out / "latest.json").read_text())
    assert invoke("evaluate", out / "latest.json", "--data", tiny).exit_code == 0
    doc["jobs"][0]["start_at"] = start
    doc["jobs"][0]["finish_at"] = finish
    bad = out / "bad.json"
    bad.write_text(json.dumps(doc))
    result = invoke("evaluate", bad, "--data", tiny)
    assert result.exit_code == 2, result.output
    assert "placements.bad_value" in result.output and mention in " ".join(result.output.split())


def _concurrent_file(tiny: Path, tmp_path: Path) -> Path:
    """Placements with GPT-2 on Beijing (0–2) and BERT on Tokyo (3–5), made with the planner."""
    from hulk import placements as pl
    from hulk.assign import makespan, placed
    from hulk.data_folder import load_fleet
    from hulk.planner import plan_job
    from hulk.settings import Settings

    settings = Settings()
    fleet, _, _ = load_fleet(tiny, settings)
    gpt, bert = preset_jobs(["GPT-2-1.5B", "BERT-large"])
    placements = []
    for job, nodes in ((gpt, [0, 1, 2]), (bert, [3, 4, 5])):
        plan, cost = plan_job(job, fleet, nodes, settings.planner)
        placements.append(placed(job, fleet, plan, cost))
    doc = pl.build_document(
        placements,
        fleet,
        pl.fleet_info(fleet, tiny / "links.parquet"),
        strategy="teacher",
        schedule=pl.CONCURRENT,
        makespan_s=makespan(placements, "teacher"),
        seed=7,
    )
    return pl.write_placements(doc, tmp_path / "placements")


def test_replan_moves_only_the_job_on_the_failed_machine(tiny: Path, tmp_path: Path) -> None:
    path = _concurrent_file(tiny, tmp_path)
    before = json.loads(path.read_text())
    lost = before["jobs"][0]["nodes"][0]
    result = invoke("replan", "--data", tiny, "--placements", path, "--fail", lost)
    assert result.exit_code == 0, result.output
    assert "GPT-2-1.5B" in result.output.split("placements (")[0]  # in the moves table
    after = json.loads((path.parent / "latest.json").read_text())
    assert after["run_id"] != before["run_id"] and path.exists()
    assert after["replan"]["from"] == before["run_id"] and after["replan"]["failed"] == [lost]
    assert [m["job"] for m in after["replan"]["moves"]] == ["GPT-2-1.5B"]
    assert lost not in after["jobs"][0]["nodes"] and after["jobs"][0]["status"] == "placed"
    keep = ("job", "status", "reason", "nodes", "replicas")
    assert {k: after["jobs"][1][k] for k in keep} == {k: before["jobs"][1][k] for k in keep}
    assert after["jobs"][1]["estimate"] == before["jobs"][1]["estimate"]
    # The file records the inventory it was made on, as an assign run's does.
    inventory = hashlib.sha256((tiny / "machines.csv").read_bytes()).hexdigest()
    assert after["fleet"]["inventory"] == inventory


def test_replan_waits_for_an_assign_run_before_it_publishes(tiny: Path, tmp_path: Path) -> None:
    from hulk.folder_lock import folder_lock

    path = _concurrent_file(tiny, tmp_path)
    latest = (path.parent / "latest.json").read_bytes()
    lost = json.loads(path.read_text())["jobs"][0]["nodes"][0]
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**FAST, "scheduler": {"lock_timeout_s": 0.3}}))
    with folder_lock(tiny, "assign", 1.0):  # an assign run writing the placements
        args = ("--params", params, "replan", "--data", tiny, "--placements", path)
        result = invoke(*args, "--fail", lost)
        assert result.exit_code == 2 and "lock.timeout" in result.output, result.output
        assert (path.parent / "latest.json").read_bytes() == latest


def test_replan_with_added_machines(tiny: Path, tmp_path: Path) -> None:
    path = _concurrent_file(tiny, tmp_path)
    nodes = tmp_path / "new_nodes.csv"
    nodes.write_text("node,City,Capability,Memory\n9,Tokyo,8.0,320\n")
    edges = tmp_path / "new_edges.txt"
    edges.write_text("9 3 1.0\n9 4 1.0\n9 0 40\n")
    result = invoke(
        "replan", "--data", tiny, "--placements", path, "--fail", "3",
        "--add-nodes", nodes, "--add-edges", edges,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    after = json.loads((path.parent / "latest.json").read_text())
    assert after["replan"]["added_nodes"] == [9] and after["fleet"]["nodes"] == 6
    assert after["jobs"][1]["status"] == "placed" and 3 not in after["jobs"][1]["nodes"]
    # Every first machine lost: a job runs on the added one, which the data folder's fleet
    # lacks; the file says why it cannot be read there.
    edges.write_text("9 5 1.0\n")
    result = invoke("replan", "--data", tiny, "--placements", path, "--fail", "0,1,2,3,4",
                    "--add-nodes", nodes, "--add-edges", edges)  # fmt: skip
    assert result.exit_code == 0, result.output
    alone = json.loads((path.parent / "latest.json").read_text())
    assert any(job["nodes"] == [9] for job in alone["jobs"])
    result = invoke("evaluate", path.parent / "latest.json", "--data", tiny)
    assert result.exit_code == 2 and "placements.added_machines" in result.output
    assert "machine(s) [9] added" in " ".join(result.output.split())


def test_machines_lost_earlier_in_a_chain_stay_lost(tiny: Path, tmp_path: Path) -> None:
    path = _concurrent_file(tiny, tmp_path)
    latest = path.parent / "latest.json"
    assert invoke("replan", "--data", tiny, "--placements", path, "--fail", "0").exit_code == 0
    result = invoke("replan", "--data", tiny, "--placements", latest, "--fail", "3")
    assert result.exit_code == 0, result.output
    doc = json.loads(latest.read_text())
    assert doc["replan"]["failed"] == [0, 3] and doc["replan"]["failed_now"] == [3]
    result = invoke("replan", "--data", tiny, "--placements", latest, "--fail", "3")
    assert result.exit_code == 0 and "replan.already_failed" in result.output, result.output
    assert doc["fleet"]["nodes"] == 4
    assert not {0, 3} & {n for j in doc["jobs"] for n in j["nodes"]}
    result = invoke("evaluate", latest, "--data", tiny)
    assert result.exit_code == 0, result.output
    assert "differs" not in result.output


@pytest.mark.parametrize(
    ("fail", "mention"),
    [
        ("3,42", "--fail: node id(s) [42]"),
        ("3,x", "--fail: 'x' is not a node id"),
        ("", "[replan.nothing] nothing to re-plan"),
    ],
)
def test_replan_bad_failed_machine_writes_nothing(
    tiny: Path, tmp_path: Path, fail: str, mention: str
) -> None:
    path = _concurrent_file(tiny, tmp_path)
    listing = sorted(p.name for p in path.parent.iterdir())
    latest = (path.parent / "latest.json").read_bytes()
    result = invoke("replan", "--data", tiny, "--placements", path, "--fail", fail)
    assert result.exit_code == 2
    assert mention in result.output
    assert sorted(p.name for p in path.parent.iterdir()) == listing
    assert (path.parent / "latest.json").read_bytes() == latest


def test_replan_of_a_file_made_on_another_inventory_warns(
    tiny: Path, jobs_file: Path, params: Path
) -> None:
    out = assigned(tiny, jobs_file, params, "B")
    doc = json.loads((out / "latest.json").read_text())
    inventory = tiny / "machines.csv"
    frame = pd.read_csv(inventory)
    frame.loc[0, "memory_gb"] *= 2  # another fleet under the same node ids
    frame.to_csv(inventory, index=False)
    lost = doc["jobs"][0]["nodes"][0]
    result = invoke("--params", params, "replan", "--data", tiny, "--fail", lost)
    assert result.exit_code == 0, result.output
    assert "replan.inventory" in result.output and doc["fleet"]["inventory"][:12] in result.output


@pytest.mark.parametrize(
    ("node", "rule"),
    [
        ("2,Tokyo,8.0,320", "replan.duplicate_node"),  # a machine of the fleet already
        ("9,Tokyo,5.0,320", "hardware.peak_tflops"),  # params give no peak TFLOPS for 5.0
    ],
)
def test_replan_refuses_an_added_node_naming_its_file(
    tiny: Path, tmp_path: Path, node: str, rule: str
) -> None:
    path = _concurrent_file(tiny, tmp_path)
    before = (path.parent / "latest.json").read_bytes()
    nodes = tmp_path / "new_nodes.csv"
    nodes.write_text(f"node,City,Capability,Memory\n{node}\n")
    edges = tmp_path / "new_edges.txt"
    edges.write_text(f"{node.split(',')[0]} 3 1.0\n")
    result = invoke(
        "replan", "--data", tiny, "--placements", path, "--add-nodes", nodes, "--add-edges", edges
    )
    assert result.exit_code == 2
    assert "new_nodes.csv" in result.output and rule in result.output
    assert (path.parent / "latest.json").read_bytes() == before


@needs_teacher
def test_assign_with_the_teacher(tiny: Path, jobs_file: Path, params: Path) -> None:
    out = assigned(tiny, jobs_file, params, "teacher")
    doc = json.loads((out / "latest.json").read_text())
    assert doc["strategy"] == "teacher" and doc["schedule"] == "concurrent"
    placed = [j for j in doc["jobs"] if j["status"] == "placed"]
    assert placed
    used = [n for j in placed for n in j["nodes"]]
    assert len(used) == len(set(used))
    assert invoke("evaluate", out / "latest.json", "--data", tiny).exit_code == 0


# --- the paper's fleet ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hulk-47 imported once with `hulk import-hulk` (skips when ../shared is absent)."""
    if not (HULK47 / "node_feature.csv").exists():
        pytest.skip(f"the paper's fleet is not at {HULK47}")
    out = tmp_path_factory.mktemp("hulk47") / "data"
    result = invoke(
        "import-hulk", "--nodes", HULK47 / "node_feature.csv", "--edges", HULK47 / "edge.txt",
        "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    jobs = out.parent / "jobs.yaml"
    jobs.write_text(dump_jobs(preset_jobs(PAPER_MIX_4)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("system", ["A", "B", "C"])
def test_hulk47_baselines_assign_and_evaluate(paper: Path, system: str) -> None:
    out = paper.parent / f"placements-{system}"
    result = invoke(
        "assign", "--data", paper, "--jobs", paper.parent / "jobs.yaml", "--strategy", system,
        "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "latest.json").read_text())
    assert doc["fleet"]["nodes"] == 47
    statuses = {j["job"]: j["status"] for j in doc["jobs"]}
    if system == "A":  # no machine holds OPT-175B's 2800 GB
        assert statuses["OPT-175B"] == "infeasible"
    else:
        assert statuses["OPT-175B"] == "placed"
    assert sum(s == "placed" for s in statuses.values()) == 1
    plot = out / "costs.png"
    result = invoke("evaluate", out / "latest.json", "--data", paper, "--plot", plot)
    assert result.exit_code == 0, result.output
    assert plot.read_bytes().startswith(PNG)


@pytest.mark.slow
def test_hulk47_replan_of_a_whole_fleet_system(paper: Path) -> None:
    out = paper.parent / "placements-replan"
    jobs = paper.parent / "jobs.yaml"
    result = invoke("assign", "--data", paper, "--jobs", jobs, "--strategy", "B", "--out", out)
    assert result.exit_code == 0, result.output
    result = invoke("replan", "--data", paper, "--placements", out / "latest.json", "--fail", "0,1")
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "latest.json").read_text())
    assert doc["fleet"]["nodes"] == 45
    assert not {0, 1} & {n for j in doc["jobs"] for n in j["nodes"]}
    assert doc["replan"]["moves"][0]["nodes_removed"] == [0, 1]


@needs_teacher
@pytest.mark.slow
def test_hulk47_teacher_assign_evaluate_replan(paper: Path, tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(FAST))
    out = paper.parent / "placements-teacher"
    jobs = paper.parent / "jobs.yaml"
    result = invoke(
        "--params", params, "assign", "--data", paper, "--jobs", jobs, "--out", out
    )  # the default strategy: teacher
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "latest.json").read_text())
    assert doc["strategy"] == "teacher"
    assert invoke("evaluate", out / "latest.json", "--data", paper).exit_code == 0
    placed = [j for j in doc["jobs"] if j["status"] == "placed"]
    lost = placed[0]["nodes"][0]
    result = invoke(
        "--params", params, "replan", "--data", paper, "--placements", out / "latest.json",
        "--fail", lost,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # The assign run's jobs are running: latest.json stays theirs, the re-plan is its own file.
    assert "latest.json kept" in result.output
    assert json.loads((out / "latest.json").read_text()) == doc
    (after,) = [
        json.loads(p.read_text())
        for p in out.glob("*.json")
        if p.name != "latest.json" and "replan" in json.loads(p.read_text())
    ]
    moved = {m["job"] for m in after["replan"]["moves"]}
    assert placed[0]["job"] in moved
    for before_job, after_job in zip(doc["jobs"], after["jobs"], strict=True):
        if before_job["job"] not in moved:
            assert after_job["nodes"] == before_job["nodes"]
            assert after_job["replicas"] == before_job["replicas"]


def test_the_cost_plot_draws_iterations_of_any_length(tmp_path: Path) -> None:
    """A System C baseline of a huge job can take 1e20 s an iteration: the plot still draws."""
    from hulk.cost import Cost
    from hulk.evaluate import Evaluation, JobEvaluation, plot_costs

    slow = Cost(1e20, 4e19, 6e19)
    job = JobEvaluation(
        "huge", "placed", None, [0], "1×1", Cost(2.0, 1.0, 1.0), 1.0, {"C": slow}, None
    )
    path = plot_costs(Evaluation([job], "teacher", "concurrent", 2.0), tmp_path / "costs.png")
    assert path.read_bytes().startswith(b"\x89PNG")


def test_a_link_table_of_another_inventory_is_named(
    tiny: Path, jobs_file: Path, params: Path
) -> None:
    inventory = tiny / "machines.csv"
    frame = pd.read_csv(inventory)
    frame.iloc[1:].to_csv(inventory, index=False)  # a machine gone since the last ingest
    for command in (("assign", "--jobs", jobs_file, "--strategy", "A"), ("graph",)):
        result = invoke("--params", params, *command, "--data", tiny)
        assert result.exit_code == 2, result.output
        text = " ".join(result.output.split())
        assert "links.parquet: [links.unknown_machine]" in text and "hulk ingest" in text
