"""Where a data folder's MLflow backend is, and the tracking context every registry call runs in.

The backend (params.yaml ``mlflow``) is a sqlite database and an artifact folder, by default
inside the data folder (`sqlite_path`, `tracking_uri`, `artifact_location`; relative paths
resolve against ``data_dir``); `ui_command` and `ui_runs_url` say how to browse it. `tracking`
binds a client to it and makes sure the experiment exists, without touching MLflow's process
globals beyond the call (`hulk.registry` and `hulk.registry_promotion` run inside it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hulk.errors import InputError
from hulk.registry_folder import repoint_artifacts

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from hulk.settings import Settings


_SQLITE_PREFIX = "sqlite:///"


# --------------------------------------------------------------------------------------------
# Where the backend is
# --------------------------------------------------------------------------------------------


def sqlite_path(settings: Settings) -> Path | None:
    """The database file of a sqlite backend (absolute), or None for any other backend.

    ``sqlite:///mlruns.db`` (three slashes: a relative path) is taken relative to
    ``settings.data_dir``; ``sqlite:////srv/hulk/mlruns.db`` (four: absolute) is used as written.
    """
    uri = settings.mlflow.tracking_uri
    if not uri.startswith(_SQLITE_PREFIX):
        return None
    raw = uri[len(_SQLITE_PREFIX) :].split("?", 1)[0]
    if not raw or raw == ":memory:":
        return None
    path = Path(raw)
    if not path.is_absolute():
        path = settings.data_dir / path
    return path.absolute()


def tracking_uri(settings: Settings) -> str:
    """The tracking (and registry) URI with a relative sqlite path made absolute.

    Any other URI (``http://…``, ``postgresql://…``, an absolute sqlite path) is returned as is.
    """
    uri = settings.mlflow.tracking_uri
    path = sqlite_path(settings)
    if path is None:
        return uri
    repoint_artifacts(path, settings.data_dir, settings.mlflow.artifact_location)  # moved folder
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return f"{_SQLITE_PREFIX}{path.as_posix()}" + (f"?{query}" if query else "")


def artifact_location(settings: Settings) -> Path:
    """The folder new experiments keep artifacts in (relative paths: against data_dir)."""
    path = settings.mlflow.artifact_location
    if not path.is_absolute():
        path = settings.data_dir / path
    return path.absolute()


def require_reachable(settings: Settings) -> None:
    """`mlflow.unreachable` unless a tracking server (an ``http(s)://`` URI) answers within
    ``mlflow.connect_timeout_s``: MLflow itself retries a dead server for minutes without a
    word, and a step would find out only after its work. Any answer counts, an error status
    included (a proxy's 401, an old server without ``/health``); other backends are local or
    fail at once."""
    import urllib.error
    import urllib.request

    uri = settings.mlflow.tracking_uri
    if not uri.lower().startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(
            f"{uri.rstrip('/')}/health", timeout=settings.mlflow.connect_timeout_s
        ):
            pass
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(
            None,
            "mlflow.unreachable",
            f"the tracking server {uri} (mlflow.tracking_uri) did not answer within "
            f"{settings.mlflow.connect_timeout_s:g} s: {reason}",
        ) from exc


def ui_command(settings: Settings) -> str:
    """The shell command that opens the MLflow UI on the configured backend.

    From the project root with the default params this is equivalent to
    ``mlflow ui --backend-store-uri sqlite:///data/mlruns.db --workers 1``; then open
    http://127.0.0.1:5000. Runs keep absolute artifact locations, so the UI finds plots and
    model files wherever it is started from.
    """
    return f"mlflow ui --backend-store-uri {tracking_uri(settings)} --workers 1"


def ui_runs_url(settings: Settings, base: str = "http://127.0.0.1:5000") -> str:
    """The UI's page of Hulk's training runs, in its model-training view.

    MLflow 3's UI keeps one view for all experiments in the browser's storage and starts on
    GenAI (traces); the ``workflowType`` parameter opens the model-training view (runs,
    charts, models). Without the experiment yet (nothing trained), the experiments list.
    """
    path = sqlite_path(settings)
    if path is not None and not path.exists():
        return f"{base}/#/experiments?{UI_VIEW}"
    with tracking(settings) as track:
        return f"{base}/#/experiments/{track.experiment_id}?{UI_VIEW}"


# --------------------------------------------------------------------------------------------
# The tracking context
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tracking:
    """What `tracking` sets up: a client bound to the backend and the experiment's id."""

    client: MlflowClient
    tracking_uri: str
    experiment_id: str
    registered_model: str


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # the experiment's kind in MLflow's UI
UI_VIEW = "workflowType=machine_learning"  # the UI's query that opens its model-training view
MODEL_TRAINING = "custom_model_development"  # the UI's "Model training" view


def mlflow_client(uri: str) -> MlflowClient:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def ensure_experiment(client: MlflowClient, settings: Settings, name: str | None = None) -> str:
    """The id of experiment `name` (default: the training experiment), created if needed."""
    from mlflow.exceptions import MlflowException

    name = settings.mlflow.experiment if name is None else name
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        # The artifact folder is ours to choose only for a local database; a tracking server
        # decides where the artifacts of its experiments go.
        location = None
        if sqlite_path(settings) is not None:
            folder = artifact_location(settings)
            folder.mkdir(parents=True, exist_ok=True)
            location = folder.as_uri()
        try:
            client.create_experiment(
                name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING}
            )
        except MlflowException as exc:  # another process created it meanwhile
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        experiment = client.get_experiment_by_name(name)
        assert experiment is not None
    if experiment.lifecycle_stage != "active":
        raise InputError(
            None,
            "registry.experiment_deleted",
            f"MLflow experiment {name!r} is deleted in {tracking_uri(settings)}: restore it "
            f"(`mlflow experiments restore --experiment-id {experiment.experiment_id}`) or "
            "name another experiment in params.yaml (mlflow.experiment)",
        )
    if EXPERIMENT_KIND_TAG not in experiment.tags:
        # Without the tag MLflow 3's UI opens an experiment on its GenAI pages (traces, "No
        # data"); Hulk's runs are model training. A kind a user chose in the UI is kept.
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
    return experiment.experiment_id


@contextmanager
def _mlflow_globals() -> Iterator[None]:
    """Put back MLflow's process-wide tracking URI, registry URI and experiment on exit.

    MLflow keeps them in module globals and mirrors them into environment variables (for child
    processes); there is no public way to *unset* them, so the globals are read and restored
    directly. Without this a test's temporary database would leak into whatever runs next.
    """
    import mlflow
    import mlflow.tracking._model_registry.utils as registry_utils
    import mlflow.tracking._tracking_service.utils as tracking_utils
    import mlflow.tracking.fluent as fluent

    names = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_ID")
    env = {name: os.environ.get(name) for name in names}
    saved_tracking = getattr(tracking_utils, "_tracking_uri", None)
    saved_registry = getattr(registry_utils, "_registry_uri", None)
    saved_experiment = getattr(fluent, "_active_experiment_id", None)
    try:
        yield
    finally:
        # None is what they were before any was set: MLflow's default again.
        mlflow.set_tracking_uri(saved_tracking)  # type: ignore[arg-type]
        mlflow.set_registry_uri(saved_registry)  # type: ignore[arg-type]
        fluent._active_experiment_id = saved_experiment
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def tracking(settings: Settings) -> Iterator[Tracking]:
    """Point MLflow at the configured backend and experiment for the duration of the block.

    Creates the sqlite database (with MLflow's migrations, a few seconds the first time), the
    artifact folder and the experiment when they do not exist yet. Inside the block MLflow's
    fluent API (``mlflow.start_run``, ``mlflow.log_metric``…) and ``models:/`` URIs use this
    backend and experiment; on exit the previous global tracking URI, registry URI and active
    experiment are put back. The functions of this module use the yielded client explicitly,
    so they do not disturb a run the caller has open.
    """
    import mlflow

    db = sqlite_path(settings)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    require_reachable(settings)  # a dead server: one line now, not minutes of retries
    uri = tracking_uri(settings)
    client = mlflow_client(uri)
    experiment_id = ensure_experiment(client, settings)
    with _mlflow_globals():
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        mlflow.set_experiment(experiment_id=experiment_id)
        yield Tracking(client, uri, experiment_id, settings.mlflow.registered_model)
