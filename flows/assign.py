"""The ``assign`` flow: placements for the upcoming jobs, published with a report.

Reads the upcoming jobs (params: assign.jobs_file), loads the champion (assign.strategy auto),
writes ``<run-id>.json`` and replaces ``latest.json`` atomically (hulk.steps.run →
hulk.stages.assign), then attaches the per-job table (machines, stages, seconds per iteration
against Systems A/B/C) as a Prefect table artifact and, with its markdown twin, to MLflow
(hulk.registry.log_placements).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows._common import brief, flow_settings, retry_options
from hulk import registry, steps
from hulk.settings import Settings
from hulk.stages import StepResult
from hulk.stages.assign import AssignSummary

ARTIFACT_KEY = "placements"  # the table artifact; the markdown one is ARTIFACT_KEY-report


@task(name="assign", cache_policy=NO_CACHE)
def publish(settings: Settings) -> StepResult[AssignSummary]:
    """Place the jobs and publish latest.json (hulk.steps.run("assign"))."""
    return steps.run("assign", settings)


@task(name="log-placements-to-mlflow", cache_policy=NO_CACHE)
def log_to_mlflow(settings: Settings, placements: str, markdown: str) -> str:
    """The published file (and its report) as artifacts of an MLflow assignment run."""
    with tempfile.TemporaryDirectory(prefix="hulk-report-") as tmp:
        report = Path(tmp) / "placements.md"
        report.write_text(markdown, encoding="utf-8")
        return registry.log_placements(settings, placements, {"report/placements.md": report})


@flow(name="assign", log_prints=True)
def assign_flow(params: str = "params.yaml", data_dir: str | None = None) -> dict[str, Any]:
    """Publish placements for the upcoming jobs with the champion model (else the teacher)."""
    settings = flow_settings(params, data_dir)
    logger = get_run_logger()
    retry = retry_options(settings.flows, retried=True)
    published = publish.with_options(**retry)(settings)
    placements = str(published.outputs["placements"])
    doc = json.loads(Path(placements).read_text(encoding="utf-8"))
    markdown = steps.placements_markdown(doc)
    table = create_table_artifact(
        steps.placements_rows(doc),
        key=ARTIFACT_KEY,
        description=f"Placements {doc['run_id']} ({doc['strategy']}): seconds per iteration "
        "of each job's plan against Systems A, B, C over the whole fleet.",
    )
    report = create_markdown_artifact(markdown, key=f"{ARTIFACT_KEY}-report")
    mlflow_run = log_to_mlflow.with_options(**retry)(settings, placements, markdown)
    logger.info("published %s (latest: %s)", placements, published.outputs["latest"])
    return {
        **brief(published.summary),
        "placements": placements,
        "mlflow_run_id": mlflow_run,
        "artifacts": {"table": str(table), "report": str(report)},
    }
