"""Serve the deployments of prefect.yaml (``hulk serve`` or ``python -m flows.serve``).

The deployments, their parameters and schedules are read from prefect.yaml, so `prefect deploy`
and this entry point run the same thing. Needs a Prefect server: ``prefect server start`` and
``PREFECT_API_URL=http://127.0.0.1:4200/api``; runs until interrupted.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PREFECT_YAML = ROOT / "prefect.yaml"


def load_entrypoint(entrypoint: str, root: Path = ROOT) -> Any:
    """The flow object of ``path/to/file.py:function`` (relative to the project root)."""
    file, _, name = entrypoint.partition(":")
    module_name = Path(file).with_suffix("").as_posix().replace("/", ".")
    if module_name in sys.modules:
        return getattr(sys.modules[module_name], name)
    spec = importlib.util.spec_from_file_location(module_name, root / file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {entrypoint}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _schedule(record: dict[str, Any]) -> Any:
    from prefect.schedules import Cron, Interval

    options = {"timezone": record.get("timezone"), "active": record.get("active", True)}
    if "cron" in record:
        return Cron(record["cron"], **options)
    if "interval" in record:
        return Interval(record["interval"], **options)
    raise ValueError(f"prefect.yaml: unsupported schedule {record}")


def deployments(path: Path = PREFECT_YAML, params: str | None = None) -> list[Any]:
    """One RunnerDeployment per deployment of prefect.yaml, with its schedules; `params`, when
    given, is the settings file every run reads (instead of prefect.yaml's)."""
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    made = []
    for record in spec["deployments"]:
        flow = load_entrypoint(record["entrypoint"], path.parent)
        parameters = dict(record.get("parameters") or {})
        if params is not None:
            parameters["params"] = params
        made.append(
            flow.to_deployment(
                name=record["name"],
                description=record.get("description"),
                parameters=parameters,
                tags=record.get("tags") or [],
                schedules=[_schedule(s) for s in record.get("schedules") or []],
                concurrency_limit=record.get("concurrency_limit"),
            )
        )
    return made


def main(params: str | None = None) -> None:
    """Serve every deployment of prefect.yaml until interrupted (runs read `params`)."""
    from prefect import serve

    serve(*deployments(params=params))


if __name__ == "__main__":
    main()
