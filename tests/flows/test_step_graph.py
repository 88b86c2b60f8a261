"""One definition of the step graph: dvc.yaml is generated from hulk/steps.py, the nightly flow
walks the same steps, and prefect.yaml's deployments load and carry their schedules."""

from __future__ import annotations

from pathlib import Path

import yaml

from hulk import steps
from hulk.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_committed_dvc_yaml_is_the_generated_one() -> None:
    assert (REPO / "dvc.yaml").read_text(encoding="utf-8") == steps.dvc_yaml(Settings())


def test_every_stage_param_is_a_key_of_params_yaml() -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert list(stages) == [step.name for step in steps.STEPS]
    for name, stage in stages.items():
        assert stage["cmd"] == f"hulk stage {name}"
        for key in stage["params"]:
            node = params
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"{name}: {key}"
                node = node[part]
        for dep in stage.get("deps", []):
            if dep.startswith("hulk/"):
                assert (REPO / dep).exists(), f"{name}: {dep}"


def test_nightly_walks_the_steps_after_generate_in_order() -> None:
    names = [step.name for step in steps.nightly_steps()]
    assert names == [
        "validate",
        "ingest",
        "graph",
        "corpus",
        "prior",
        "labels",
        "train",
        "assign",
        "evaluate",
    ]


def test_prefect_yaml_deployments_load_with_their_schedules() -> None:
    from prefect.flows import Flow

    from flows.serve import deployments, load_entrypoint

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    by_name = {d["name"]: d for d in spec["deployments"]}
    assert by_name["nightly"]["schedules"][0] == {
        "cron": "0 2 * * *",
        "timezone": "UTC",
        "active": True,
    }
    assert by_name["assign"]["schedules"][0]["interval"] == 900
    for record in spec["deployments"]:
        assert isinstance(load_entrypoint(record["entrypoint"]), Flow)
        assert record["work_pool"]["name"] == "hulk-process"
    made = {d.name: d for d in deployments(REPO / "prefect.yaml")}
    assert made["nightly"].schedules[0].schedule.cron == "0 2 * * *"
    assert str(made["nightly"].schedules[0].schedule.timezone) == "UTC"
    assert made["assign"].schedules[0].schedule.interval.total_seconds() == 900
    assert made["nightly"].parameters == {"params": "params.yaml"}
    # `hulk --params FILE serve`: every served run reads that file.
    mine = {d.name: d for d in deployments(REPO / "prefect.yaml", params="/srv/mine.yaml")}
    assert {d.parameters["params"] for d in mine.values()} == {"/srv/mine.yaml"}
