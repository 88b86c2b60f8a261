"""The GNN's MLflow side: training runs, the model registry, and the champion/challenger aliases.

Everything here is generic over the model: a training run hands over a state dict (names to
tensors) and a JSON-able config, and gets them back the same way. Nothing in the registry is
pickled code, so loading a model never runs code from the registry:

- ``model/state_dict.pt`` — ``torch.save`` of a plain dict of CPU tensors, read back with
  ``torch.load(weights_only=True)``;
- ``model/config.json`` — the model's config (e.g. ``ModelConfig.to_dict()``).

These are plain artifacts of the training run (no MLflow flavour, no ``MLmodel`` file), and each
registered version of ``settings.mlflow.registered_model`` points at that run's ``model`` folder.
Two aliases name versions:

- ``challenger`` — the version the latest ``log_training_run`` registered;
- ``champion`` — the version ``hulk assign`` uses; ``promote_if_better`` moves it, and only to
  a version whose gate score (a plan-cost ratio) is not worse than the current champion's on
  the same evaluation set (``record_evaluation`` tags each version with its figures per set).

Where it lives (params.yaml, section ``mlflow``): by default a sqlite file and an artifact
folder inside the data folder, ``data/mlruns.db`` and ``data/mlartifacts`` — a relative sqlite
path or artifact folder resolves against ``data_dir``, never against the current directory (see
`hulk.settings.MlflowSettings`). The database is created on first use.

To browse runs, metrics, plots and versions, run from the project root::

    mlflow ui --backend-store-uri sqlite:///data/mlruns.db --workers 1

and open the link `ui_runs_url` gives (http://127.0.0.1:5000/#/experiments/<id>?workflowType=
machine_learning: MLflow 3's UI otherwise starts on its GenAI pages; model versions: the
"Models" page, hulk-gnn). `ui_command`
gives the same command with the absolute path of the configured backend, whatever the current
directory. One worker is plenty for one person; MLflow 3's default (4 workers, plus a job runner
with several consumers for server-side GenAI jobs) takes about a minute to answer on a 2-core
machine — ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` in front skips the job runner too.

Three modules: this one (logging a training run, loading a version's files, logging published
placements; it re-exports the others' names), `hulk.registry_tracking` (where the backend is and
the tracking context) and `hulk.registry_promotion` (aliases and the promotion gate).

MLflow's anonymous usage telemetry (on by default since MLflow 3.2) and its artifact download
progress bars are switched off when this module is imported, unless the environment says
otherwise (``MLFLOW_DISABLE_TELEMETRY``, ``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR``).
"""

from __future__ import annotations

import contextlib
import json
import math
import posixpath
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from hulk.errors import InputError
from hulk.fileio import sha256_file

# The backend and the promotion gate live in their own modules; their names are part of this
# module's interface (callers import them from here).
from hulk.registry_promotion import CHALLENGER as CHALLENGER
from hulk.registry_promotion import CHAMPION as CHAMPION
from hulk.registry_promotion import TAG_EVAL as TAG_EVAL
from hulk.registry_promotion import TAG_PROMOTION as TAG_PROMOTION
from hulk.registry_promotion import Decision as Decision
from hulk.registry_promotion import RegisteredVersion as RegisteredVersion
from hulk.registry_promotion import alias_version
from hulk.registry_promotion import eval_tag as eval_tag
from hulk.registry_promotion import promote_if_better as promote_if_better
from hulk.registry_promotion import record_evaluation as record_evaluation
from hulk.registry_tracking import EXPERIMENT_KIND_TAG as EXPERIMENT_KIND_TAG
from hulk.registry_tracking import MODEL_TRAINING as MODEL_TRAINING
from hulk.registry_tracking import UI_VIEW as UI_VIEW
from hulk.registry_tracking import Tracking as Tracking
from hulk.registry_tracking import artifact_location as artifact_location
from hulk.registry_tracking import ensure_experiment, mlflow_client
from hulk.registry_tracking import require_reachable as require_reachable
from hulk.registry_tracking import sqlite_path as sqlite_path
from hulk.registry_tracking import tracking as tracking
from hulk.registry_tracking import tracking_uri as tracking_uri
from hulk.registry_tracking import ui_command as ui_command
from hulk.registry_tracking import ui_runs_url as ui_runs_url

if TYPE_CHECKING:
    import torch
    from mlflow import MlflowClient

    from hulk.registry_read import LocalVersion
    from hulk.settings import Settings

# MLflow's telemetry and progress bars are switched off in hulk/__init__.py, before any import.

MODEL_DIR = "model"
STATE_DICT_FILE = "state_dict.pt"
CONFIG_FILE = "config.json"

# Tags written on model versions (and on their runs). One prefix, so they sort together in the UI.
TAG_STATE_DICT_SHA256 = "hulk.state_dict_sha256"
TAG_CONFIG_SHA256 = "hulk.config_sha256"
SETTINGS_FILE = "settings.json"  # the settings the model's features are built with
FEATURE_SECTIONS = ("hardware", "graph")


# --------------------------------------------------------------------------------------------
# Logging and registering a training run
# --------------------------------------------------------------------------------------------


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts become dotted keys; every value becomes the string MLflow stores."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, prefix=f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def _number(value: object, what: str) -> float:
    if isinstance(value, (str, bytes, bool)):
        raise TypeError(f"{what}: expected a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]  # also 0-d tensors and numpy scalars
    except (TypeError, ValueError):
        raise TypeError(f"{what}: expected a number, got {value!r}") from None


@dataclass(frozen=True)
class TrainingData:
    """A dataset a model was trained on, as MLflow records it on the run."""

    name: str  # e.g. "corpus", "fleet-samples"
    location: str  # a path or URI
    sha256: str  # of its content; MLflow keeps the first 32 hex digits as the digest


def _dataset_input(data: TrainingData) -> Any:
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    with warnings.catch_warnings():  # a local path reads as two equal kinds of source
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(data.location)
    # MLflow's own class for a dataset known by source and digest only (its stubs mark a
    # property abstract that it does define).
    dataset = MetaDataset(source, name=data.name, digest=data.sha256[:32])  # type: ignore[abstract]
    return DatasetInput(
        dataset._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", "training")]
    )


def source_tags() -> dict[str, str]:
    """MLflow's source tags for a run made by this code: the entry point and, in a git
    checkout, the commit (the UI links a run to it; empty when git or the checkout is absent,
    e.g. an installed wheel)."""
    import subprocess
    import sys

    tags = {
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "hulk",
    }
    root = Path(__file__).resolve().parents[1]
    try:
        found = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return tags
    commit = found.stdout.strip()
    if found.returncode == 0 and len(commit) == 40:
        tags["mlflow.source.git.commit"] = commit
    return tags


def _save_pyfunc(path: Path, plain: Path) -> None:
    """An MLflow pyfunc model at `path` (`hulk.serving`, saved as code: nothing pickled) whose
    artifacts are the weights, config and feature settings in `plain`."""
    import importlib.metadata

    # Pinned to what trained the model; explicit, so MLflow does not load the model in a
    # subprocess to guess them.
    packages = ("mlflow", "torch", "torch-geometric", "numpy", "pandas", "pydantic", "networkx")
    requirements = [f"{name}=={importlib.metadata.version(name)}" for name in packages]
    requirements += [f"PyYAML=={importlib.metadata.version('PyYAML')}"]
    _save(path, plain, requirements)


def _save(path: Path, plain: Path, requirements: list[str]) -> None:
    import mlflow.pyfunc

    from hulk import serving

    mlflow.pyfunc.save_model(
        path=str(path),
        python_model=serving.__file__,
        artifacts={
            "state_dict": str(plain / STATE_DICT_FILE),
            "config": str(plain / CONFIG_FILE),
            "settings": str(plain / SETTINGS_FILE),
        },
        code_paths=[str(Path(serving.__file__).parent)],
        signature=serving.signature(),
        input_example=serving.input_example(),
        pip_requirements=requirements,
    )


def _history_metrics(
    history: Sequence[Mapping[str, object]],
) -> list[tuple[str, float, int, int]]:
    """(key, value, step, row index) per epoch; the step is the row's "epoch", else its index."""
    rows = []
    for index, row in enumerate(history):
        step = row.get("epoch", index)
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"history[{index}].epoch: expected an int, got {step!r}")
        for key, value in row.items():
            if key != "epoch":
                rows.append((key, _number(value, f"history[{index}].{key}"), step, index))
    return rows


def _seconds(row: Mapping[str, object], key: str = "seconds") -> float:
    """An epoch's wall time from its history row (0 when it has none)."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return max(float(value), 0.0)


def _epoch_end_ms(
    history: Sequence[Mapping[str, object]], logged_at: int, key: str = "seconds"
) -> list[int]:
    """When each epoch ended (ms since the epoch of Unix time), for a run logged at
    `logged_at` right after training: back from there by the rows' "seconds" (each epoch's
    wall time), so the UI's time axis and the run's duration show the training as it went.
    Rows without "seconds" count as instantaneous."""
    ends, elapsed = [], 0.0
    for row in history:
        elapsed += _seconds(row, key)
        ends.append(elapsed)
    total = elapsed
    return [logged_at - round((total - end) * 1000) for end in ends]


def _check_state_dict(state_dict: Mapping[str, object]) -> dict[str, torch.Tensor]:
    import torch

    plain: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise TypeError(
                f"state_dict[{key!r}]: expected str -> tensor, got {type(value).__name__}"
            )
        plain[key] = value.detach().cpu()
    return plain


def _artifact_name(name: str) -> str:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise ValueError(f"artifact name {name!r}: expected a relative path like 'plots/a.png'")
    if path.parts[0] == MODEL_DIR:
        raise ValueError(f"artifact name {name!r}: {MODEL_DIR}/ is reserved for the model files")
    return path.as_posix()


def _ensure_registered_model(client: MlflowClient, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(
            name,
            description="Hulk's GNN placement model: state dict + JSON config (hulk.registry).",
        )
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


def _end_dead_runs(client: Any, experiment_id: str) -> None:
    """Mark FAILED the training runs still RUNNING: training runs under the data folder's
    nightly lock, so one still running when another starts was left by a process that died
    midway (killed, a full disk), and the UI would show it running for ever."""
    for run in client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'"):
        client.set_terminated(run.info.run_id, status="FAILED")


def log_training_run(
    settings: Settings,
    params: Mapping[str, Any],
    history: Sequence[Mapping[str, object]],
    metrics: Mapping[str, object],
    state_dict: Mapping[str, torch.Tensor],
    config: Mapping[str, Any],
    artifacts: Mapping[str, str | Path] | None = None,
    tags: Mapping[str, object] | None = None,
    run_name: str | None = None,
    datasets: Sequence[TrainingData] = (),
    seconds_key: str = "seconds",
) -> RegisteredVersion:
    """Log one training run, register its model as a new version and make it the challenger.

    Args:
        settings: Where the backend is (``settings.mlflow``, ``settings.data_dir``).
        params: Hyper-parameters and inputs; nested dicts are logged with dotted keys.
        history: One dict of metrics per epoch (``{"epoch": 3, "loss": …, "accuracy": …}``),
            logged with step = the row's ``epoch`` (else its index in the list).
        metrics: Final evaluation metrics (``gate/score``, ``test/makespan_ratio``…; names
            grouped with ``/`` as the UI groups its charts), logged at step 0;
            `promote_if_better` compares one of these. Their names must differ from the
            per-epoch ones, or "the latest value" of a metric would be ambiguous.
        state_dict: The model's weights; saved as ``model/state_dict.pt`` (CPU tensors).
        config: JSON-able model config; saved as ``model/config.json``.
        artifacts: Files to attach, by name in the run: ``{"plots/learning_curves.png": path}``.
            A name without a suffix gets the file's (``{"fleet_map": "x.png"}`` → fleet_map.png).
        tags: Set on the run and on the new model version (values as strings).
        run_name: The run's name in the UI (MLflow makes one up when None).
        datasets: What the model was trained on, logged as the run's dataset inputs (the
            UI's "Datasets" column): a name, where it lives and its content hash.
        seconds_key: The history's column of each epoch's wall time, which dates the epochs'
            metrics and the run's start (rows without it count as instantaneous).

    Returns:
        The new version number and the run id. Everything is checked before the run is
        created; a failure after that marks the run FAILED and re-raises.
    """
    from mlflow.entities import Metric, Param, RunStatus

    # Check everything first, so that a mistake leaves no half-logged run behind.
    series = _history_metrics(history)
    finals = {key: _number(value, f"metrics.{key}") for key, value in metrics.items()}
    clash = sorted({key for key, _, _, _ in series} & finals.keys())
    if clash:
        raise ValueError(f"metrics {clash} are both per-epoch (history) and final (metrics)")
    weights = _check_state_dict(state_dict)
    config_text = json.dumps(config, indent=2, sort_keys=True, allow_nan=False) + "\n"
    files: dict[str, Path] = {}
    for name, source in (artifacts or {}).items():
        source = Path(source)
        if not source.is_file():
            raise FileNotFoundError(f"artifact {name!r}: no file at {source}")
        target = _artifact_name(name)
        if not PurePosixPath(target).suffix:
            target += source.suffix
        files[target] = source
    tag_values = {**source_tags(), **{str(key): str(value) for key, value in (tags or {}).items()}}
    flat_params = _flatten(params)

    import torch

    with tracking(settings) as track:
        client = track.client
        _end_dead_runs(client, track.experiment_id)
        now = int(time.time() * 1000)
        ends = _epoch_end_ms(history, now, seconds_key)
        started = ends[0] - round(_seconds(history[0], seconds_key) * 1000) if history else now
        run = client.create_run(
            track.experiment_id, start_time=started, tags=tag_values, run_name=run_name
        )
        run_id = run.info.run_id
        try:
            logged = [Metric(key, value, ends[row], step) for key, value, step, row in series]
            logged += [Metric(key, value, now, 0) for key, value in finals.items()]
            client.log_batch(
                run_id,
                metrics=logged,
                params=[Param(key, value) for key, value in flat_params.items()],
                synchronous=True,
            )
            if datasets:
                client.log_inputs(run_id, datasets=[_dataset_input(d) for d in datasets])
            with tempfile.TemporaryDirectory(prefix="hulk-run-") as tmp:
                staging = Path(tmp)
                plain = staging / "plain"
                plain.mkdir()
                torch.save(weights, plain / STATE_DICT_FILE)
                (plain / CONFIG_FILE).write_text(config_text, encoding="utf-8")
                features = {key: settings.model_dump(mode="json")[key] for key in FEATURE_SECTIONS}
                (plain / SETTINGS_FILE).write_text(json.dumps(features, indent=2) + "\n")
                model_dir = staging / MODEL_DIR
                _save_pyfunc(model_dir, plain)  # MLflow's model files; Hulk's beside them
                for file in plain.iterdir():
                    shutil.move(file, model_dir / file.name)
                plain.rmdir()
                digests = {
                    TAG_STATE_DICT_SHA256: sha256_file(model_dir / STATE_DICT_FILE),
                    TAG_CONFIG_SHA256: sha256_file(model_dir / CONFIG_FILE),
                }
                for target, source in files.items():
                    (staging / target).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, staging / target)
                client.log_artifacts(run_id, str(staging))

            _ensure_registered_model(client, track.registered_model)
            # The version's source is the run's own artifact folder (not a `runs:/` URI, which
            # MLflow 3 would also accept): the concrete location, as the registry stores it.
            version = client.create_model_version(
                track.registered_model,
                source=posixpath.join(run.info.artifact_uri, MODEL_DIR),
                run_id=run_id,
                tags={**tag_values, **digests},
                description=f"Trained in run {run_id}" + (f" ({run_name})" if run_name else ""),
            )
            client.set_registered_model_alias(track.registered_model, CHALLENGER, version.version)
            client.set_tag(run_id, "hulk.registered_version", str(version.version))
            client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
        except BaseException:
            with contextlib.suppress(Exception):  # the original error is the one to report
                client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
            raise
    return RegisteredVersion(int(version.version), run_id)


def describe_run(settings: Settings, run_id: str, text: str, name: str | None = None) -> None:
    """Set a run's description (markdown; the top of its page in the MLflow UI) and, when
    given, its name (the runs list shows names, not the versions the runs registered)."""
    with tracking(settings) as track:
        track.client.set_tag(run_id, "mlflow.note.content", text)
        if name is not None:
            track.client.update_run(run_id, name=name)


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionInfo:
    """Which registered version was loaded, and what its run recorded."""

    name: str
    version: int
    alias: str
    run_id: str | None
    source: str | None  # MLflow leaves it empty for a version made without a run
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def model_uri(self) -> str:
        """The version's URI, pinned to the number (an alias may move later)."""
        return f"models:/{self.name}/{self.version}"


def _existingmlflow_client(settings: Settings) -> MlflowClient | None:
    """A client for the backend, or None when its sqlite file does not exist (no model then).

    Reading never creates the database: `hulk assign` on a fresh checkout stays fast and
    leaves no empty registry behind.
    """
    db = sqlite_path(settings)
    if db is not None and not db.is_file():
        return None
    require_reachable(settings)  # a dead server: one line now, not minutes of retries
    return mlflow_client(tracking_uri(settings))


def _no_model(alias: str) -> InputError:
    rule = "registry.no_champion" if alias == CHAMPION else "registry.no_alias"
    return InputError(None, rule, f"no {alias} model yet: run `hulk train`")


def _local_version(settings: Settings, alias: str) -> LocalVersion | None:
    """`alias`'s version read without MLflow from a local sqlite registry (`hulk.registry_read`),
    or None when MLflow must answer. Raises the no-model error when the alias is not set."""
    from hulk.registry_read import NoAlias, RegistryBusy, RegistryDamaged, read_alias

    db = sqlite_path(settings)
    if db is None or not db.is_file():
        return None
    tracking_uri(settings)  # re-points a copied data folder's artifact locations first
    try:
        return read_alias(db, settings.mlflow.registered_model, alias)
    except NoAlias:
        raise _no_model(alias) from None
    except RegistryBusy as exc:
        # As a server that does not answer: an assign run places with the teacher meanwhile.
        raise InputError(
            db, "mlflow.unreachable", f"the registry is held by another process ({exc})"
        ) from None
    except RegistryDamaged as exc:
        raise InputError(
            db,
            "registry.readable",
            f"not a readable registry database ({exc}): restore it from a backup (moved "
            "away, the next `hulk train` starts a new registry from the prior)",
        ) from None


def champion_exists(settings: Settings) -> bool:
    """Whether a version carries the champion alias (so `hulk assign` can default to the GNN)."""
    db = sqlite_path(settings)
    if db is not None and not db.is_file():
        return False
    try:
        if _local_version(settings, CHAMPION) is not None:
            return True
    except InputError as exc:
        if exc.rule == "registry.no_champion":
            return False
        raise  # busy (MLflow would wait on the same lock) or damaged
    client = _existingmlflow_client(settings)
    return client is not None and (
        alias_version(client, settings.mlflow.registered_model, CHAMPION) is not None
    )


def load_model_files(
    settings: Settings, alias: str = CHAMPION
) -> tuple[dict[str, torch.Tensor], dict[str, Any], VersionInfo]:
    """The state dict, config and version info of ``models:/<registered model>@<alias>``.

    The alias is resolved once to a version number and that version's files are downloaded,
    so the three always belong together even if the alias moves meanwhile. The state dict is
    read with ``torch.load(weights_only=True)`` onto the CPU and checked against the SHA-256
    recorded at registration; the config is plain JSON. No code is unpickled.

    Raises:
        InputError: rule ``registry.no_champion`` ("no champion model yet: run `hulk train`")
            when no version has the alias (``registry.no_alias`` for other aliases);
            ``registry.bad_version`` when the version's files are missing or not a state dict
            and config; ``registry.corrupt`` when the weights do not match their checksum.
    """
    name = settings.mlflow.registered_model
    local = local_model_files(settings, alias)
    if local is not None:
        return (*local.read(), local.info)

    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    client = _existingmlflow_client(settings)
    found = None if client is None else alias_version(client, name, alias)
    if client is None or found is None:
        raise _no_model(alias)
    uri = tracking_uri(settings)
    run_metrics = client.get_run(found.run_id).data.metrics if found.run_id else {}
    info = VersionInfo(
        name=name,
        version=int(found.version),
        alias=alias,
        run_id=found.run_id,
        source=found.source,
        tags=dict(found.tags),
        metrics=dict(run_metrics),
    )
    # Not `download_artifacts(artifact_uri=model_uri, registry_uri=uri)`: MLflow 3.17 resolves a
    # models:/ URI with the process-wide registry URI whatever `registry_uri` says (and the
    # default one is ./mlflow.db, created on the spot). The version's own location avoids that.
    location = client.get_model_version_download_uri(name, str(found.version))
    with tempfile.TemporaryDirectory(prefix="hulk-model-") as tmp:
        try:
            local_files = Path(
                mlflow.artifacts.download_artifacts(
                    artifact_uri=location, dst_path=tmp, tracking_uri=uri, registry_uri=uri
                )
            )
        except MlflowException as exc:  # the version's folder was removed or moved
            raise InputError(
                found.source,
                "registry.bad_version",
                f"{info.model_uri}: its files cannot be read ({exc.message})",
            ) from None
        return (*_checked_files(local_files, info).read(), info)


@dataclass(frozen=True)
class ModelFiles:
    """A registered version's files in a local folder: present and the weights matching the
    SHA-256 recorded at registration (checked when made, `local_model_files`), read by `read`.
    Checking needs neither torch nor MLflow; reading needs torch."""

    info: VersionInfo
    folder: Path

    def read(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The state dict (``torch.load(weights_only=True)`` onto the CPU) and the config.

        Raises:
            InputError: ``registry.bad_version`` when they are not a state dict and a config.
        """
        import torch

        model_uri = self.info.model_uri
        try:
            state_dict = torch.load(
                self.folder / STATE_DICT_FILE, map_location="cpu", weights_only=True
            )
            config = json.loads((self.folder / CONFIG_FILE).read_text(encoding="utf-8"))
        except Exception as exc:  # weights_only refuses anything but tensors and containers
            raise InputError(
                self.info.source, "registry.bad_version", f"{model_uri}: {exc}"
            ) from None
        if not isinstance(state_dict, dict) or not isinstance(config, dict):
            raise InputError(
                self.info.source,
                "registry.bad_version",
                f"{model_uri}: not a state dict and a config",
            )
        return state_dict, config


def local_model_files(settings: Settings, alias: str = CHAMPION) -> ModelFiles | None:
    """``models:/<registered model>@<alias>``'s files, checked but not read, when the registry
    is a local sqlite file (read without MLflow, `hulk.registry_read`); None when MLflow must
    answer (`load_model_files` then). Raises as `load_model_files` does, but for files that
    match their checksum and are still not a state dict and a config (`ModelFiles.read`)."""
    local = _local_version(settings, alias)
    if local is None:
        return None
    info = VersionInfo(
        name=settings.mlflow.registered_model,
        version=local.version,
        alias=alias,
        run_id=local.run_id,
        source=local.source,
        tags=local.tags,
        metrics=local.metrics,
    )
    return _checked_files(local.folder, info)


def unfit_version(info: VersionInfo, exc: ValueError) -> InputError:
    """``registry.bad_version`` for a version whose config and weights make no model
    (`hulk.model.model_from_state`'s `ValueError`): a version registered before its config's
    checksum was recorded, edited since."""
    return InputError(info.source, "registry.bad_version", f"{info.model_uri}: {exc}")


def _checked_files(folder: Path, info: VersionInfo) -> ModelFiles:
    """A version's folder, its files present and the weights matching the recorded SHA-256."""
    model_uri = info.model_uri
    weights_path, config_path = folder / STATE_DICT_FILE, folder / CONFIG_FILE
    missing = [p.name for p in (weights_path, config_path) if not p.is_file()]
    if missing:
        raise InputError(
            info.source, "registry.bad_version", f"{model_uri} has no {', '.join(missing)}"
        )
    for path, tag in ((weights_path, TAG_STATE_DICT_SHA256), (config_path, TAG_CONFIG_SHA256)):
        expected = info.tags.get(tag)
        if expected is not None and sha256_file(path) != expected:
            raise InputError(
                info.source,
                "registry.corrupt",
                f"{model_uri}: {path.name} does not match the SHA-256 recorded when it was "
                "registered",
            )
    return ModelFiles(info, folder)


# --------------------------------------------------------------------------------------------
# Published placements
# --------------------------------------------------------------------------------------------

TAG_KIND = "hulk.kind"  # "assignment" on the runs `log_placements` creates


def log_placements(
    settings: Settings,
    placements_file: str | Path,
    extra_files: Mapping[str, str | Path] | None = None,
) -> str:
    """Attach a published placements file to MLflow as an artifact of an ``assignment`` run.

    One run per published file in the experiment ``mlflow.assignment_experiment`` (tag
    ``hulk.kind=assignment``), named after the placements' run id, with its strategy, model
    version and makespan: what was published, in its own list (96 runs a day would bury the
    training runs in theirs). `extra_files` (name in the run
    → file, e.g. the flow's markdown table) are attached too. Returns the MLflow run id.
    """
    from mlflow.entities import Metric, Param, RunStatus

    placements_file = Path(placements_file)
    doc = json.loads(placements_file.read_text(encoding="utf-8"))
    files = {f"placements/{placements_file.name}": placements_file}
    for name, source in (extra_files or {}).items():
        files[_artifact_name(name)] = Path(source)
    model = doc.get("model") or {}
    tags = {
        TAG_KIND: "assignment",
        "hulk.placements.run_id": str(doc.get("run_id")),
        "hulk.placements.strategy": str(doc.get("strategy")),
        "hulk.model.version": str(model.get("version")),
    }
    params = {
        "strategy": doc.get("strategy"),
        "model.name": model.get("name"),
        "model.version": model.get("version"),
        "model.fallback": model.get("fallback"),
        "fleet.snapshot": (doc.get("fleet") or {}).get("snapshot"),
        "jobs": len(doc.get("jobs", [])),
    }
    makespan = doc.get("makespan_s")
    with tracking(settings) as track:
        client = track.client
        experiment_id = ensure_experiment(client, settings, settings.mlflow.assignment_experiment)
        run = client.create_run(experiment_id, tags=tags, run_name=f"assign-{doc.get('run_id')}")
        try:
            now = int(time.time() * 1000)
            metrics = []
            if isinstance(makespan, int | float) and math.isfinite(makespan):
                metrics.append(Metric("makespan_s", float(makespan), now, 0))
            client.log_batch(
                run.info.run_id,
                metrics=metrics,
                params=[Param(k, str(v)) for k, v in params.items()],
                synchronous=True,
            )
            with tempfile.TemporaryDirectory(prefix="hulk-placements-") as tmp:
                staging = Path(tmp)
                for target, source in files.items():
                    (staging / target).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, staging / target)
                client.log_artifacts(run.info.run_id, str(staging))
            client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.FINISHED))
        except BaseException:
            with contextlib.suppress(Exception):
                client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.FAILED))
            raise
    return run.info.run_id
