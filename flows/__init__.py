"""Prefect 3 flows: thin callers of hulk.steps (no step logic here).

- `flows.nightly.nightly`: validate → ingest → graph → teacher labels (Dask fan-out) → train
  (register, promote) → assign (the `assign` flow) → evaluate, in the order of hulk.steps.STEPS;
- `flows.assign.assign_flow`: publish placements for the upcoming jobs with the champion, with a
  Prefect table artifact and the same file in MLflow;
- `flows.serve`: both deployments with the schedules of prefect.yaml (``hulk serve``).
"""
