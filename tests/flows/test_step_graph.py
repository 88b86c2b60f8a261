"""One definition of the step graph: dvc.yaml is generated from hulk/steps.py, the nightly flow
walks the same steps, and prefect.yaml's deployments load and carry their schedules."""

from __future__ import annotations

from pathlib import Path

import pytest
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


@pytest.mark.slow
def test_the_served_deployments_get_their_scheduled_runs(prefect_server: str) -> None:
    # What the server's scheduler does for `hulk serve`: insert each deployment's upcoming
    # runs. (Prefect's scheduler failed on every tick with SQLAlchemy 2.1, so a served
    # deployment never ran; requirements.lock pins the 2.0 series.)
    from prefect.client.orchestration import get_client

    from flows.serve import deployments

    with get_client(sync_client=True) as client:
        for deployment in deployments(REPO / "prefect.yaml"):
            deployment_id = deployment.apply()
            answer = client.request(
                "POST", "/deployments/{id}/schedule", path_params={"id": str(deployment_id)}
            )
            assert answer.status_code < 300, answer.text
            runs = client.request(
                "POST",
                "/flow_runs/filter",
                json={
                    "limit": 5,
                    "offset": 0,
                    "sort": "EXPECTED_START_TIME_ASC",
                    "flow_runs": {"deployment_id": {"any_": [str(deployment_id)]}},
                },
            ).json()
            assert runs and all(run["state_type"] == "SCHEDULED" for run in runs), deployment.name
        # What `prefect deployment ls` and `prefect flow-run ls` ask: Prefect's client sends
        # no limit (null), which the server refused (422) with FastAPI 0.151 and later.
        listed = {deployment.name for deployment in client.read_deployments()}
        assert listed >= {d.name for d in deployments(REPO / "prefect.yaml")}
        assert client.read_flow_runs()
