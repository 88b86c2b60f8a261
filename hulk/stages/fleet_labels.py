"""The fleet-labels step: teacher labels of samples drawn from the data folder's own fleet.

Reads the inventory, the link table, the logs (when the folder has them; their validated
quarantine is left out as ingest leaves it out), the jobs file and the newest placements
files; draws tonight's samples (`hulk.fleet_samples`), labels those whose content key is not
cached yet (`hulk.fleet_labels`) and writes, under ``DATA/labels/``:

    snapshots/<digest>.parquet   the link tables the samples were drawn from
    labels.json                  the label cache: tonight's labels by content key
    samples.json                 tonight's samples: role, snapshot, machines left out or
                                 drained, jobs, label key (written last: the step's record)

Labels of samples no longer drawn are dropped; a label drawn again is never recomputed. The
samples are labelled through `map_labels(label_task, tasks)`: `map` in this process, or an
executor's map (the nightly flow's Dask workers); the outputs are the same either way.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from hulk import fileio, schemas
from hulk.errors import ConfigError, InputError
from hulk.findings import Finding
from hulk.fleet_labels import LabelCache, frame_digest, label_key, label_sample
from hulk.fleet_samples import (
    ROLES,
    FleetSample,
    LinkSnapshot,
    draw_samples,
    drift_snapshots,
    job_pool,
    log_blocks,
    sample_frames,
)
from hulk.jobs import Job, parse_jobs
from hulk.placements import run_files
from hulk.settings import Settings
from hulk.stages import Summary

if TYPE_CHECKING:
    from hulk.stages import StepResult

LABELS_DIR = "labels"
SNAPSHOTS_DIR = "snapshots"
LABELS_FILE = "labels.json"
SAMPLES_FILE = "samples.json"

LabelTask = tuple[pd.DataFrame, pd.DataFrame, tuple[Job, ...], Settings, str]
MapLabels = Callable[[Callable[[LabelTask], dict], Iterable[LabelTask]], Iterator[dict]]


@dataclass(frozen=True)
class LabelsSummary(Summary):
    samples: int
    by_role: dict[str, int]  # samples per role (train, val, eval)
    cached: int  # labels found in the cache
    labelled: int  # labels the teacher searched this run
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            **{f"{role}_samples": count for role, count in self.by_role.items()},
            "cached": self.cached,
            "labelled": self.labelled,
            "seconds": self.seconds,
        }


def labels_dir(settings: Settings) -> Path:
    return Path(settings.data_dir) / LABELS_DIR


def label_task(task: LabelTask) -> dict[str, Any]:
    """Label one sample (a pure function: any worker may run it)."""
    inventory, links, jobs, settings, key = task
    return label_sample(inventory, links, jobs, settings, key)


def has_logs(data_dir: Path) -> bool:
    """Whether the data folder holds raw logs (else it was imported as a link table)."""
    from hulk.data_folder import data_source

    return data_source(data_dir) == "logs"


def link_snapshots(
    data_dir: Path, inventory: pd.DataFrame, links: pd.DataFrame, settings: Settings, now
) -> list[LinkSnapshot]:
    """Tonight's link snapshots: log blocks, or drifted copies of an imported link table."""
    if not has_logs(data_dir):
        imported = LinkSnapshot("links", links, held_out=True)
        return [*drift_snapshots(links, settings.fleet_samples, settings.seed), imported]
    from hulk.data_folder import validated_quarantine
    from hulk.ingest import link_stats, window_end_for

    logs_dir = data_dir / schemas.LOGS_DIR
    quarantine = validated_quarantine(logs_dir, data_dir / schemas.INVENTORY_FILE, data_dir)
    if quarantine is None:
        raise InputError(
            data_dir / schemas.VALIDATION_DIR,
            "labels.unvalidated",
            "the logs or the inventory changed since they were validated: run `hulk validate` "
            "(or the nightly flow) first",
        )
    end = window_end_for(logs_dir, now).to_pydatetime()
    last_day = (end - dt.timedelta(microseconds=1)).date()
    first_day = last_day - dt.timedelta(days=settings.ingest.window_days - 1)
    fs = settings.fleet_samples
    blocks, held_out = log_blocks(first_day, last_day, fs.window_days, fs.max_windows)
    snapshots: list[LinkSnapshot] = []
    for block in [*blocks, held_out]:
        window = settings.ingest.model_copy(update={"window_days": block.days})
        try:
            table = link_stats(
                logs_dir, inventory, window, quarantine=quarantine, window_end=block.window_end
            )
        except InputError:  # a block without probes (the collectors were down): no snapshot
            continue
        snapshots.append(LinkSnapshot(block.name, table, held_out=block is held_out))
    if not any(s.held_out for s in snapshots):
        snapshots.append(LinkSnapshot("links", links, held_out=True))
    if not any(not s.held_out for s in snapshots):  # logs shorter than two blocks
        snapshots = [*drift_snapshots(links, fs, settings.seed), *snapshots]
    return snapshots


def recent_jobs(placements_dir: Path, count: int) -> tuple[list[Job], list[Finding]]:
    """The jobs of the newest `count` placements files (by run id), oldest first."""
    if count == 0 or not placements_dir.is_dir():
        return [], []
    files = run_files(placements_dir)  # not latest.json (a copy) nor its publication record
    jobs: list[Job] = []
    findings: list[Finding] = []
    for path in files[-count:]:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            specs = [entry["spec"] for entry in doc["jobs"] if isinstance(entry, dict)]
            jobs += parse_jobs({"jobs": specs}, source=path)
        except Exception as exc:  # one unreadable file must not stop the night
            findings.append(
                Finding(
                    "warning",
                    "labels.placements_unreadable",
                    str(path),
                    f"jobs not read from this placements file: {exc}",
                )
            )
    return jobs, findings


@dataclass
class FleetLabelsOutcome:
    """What the step drew and labelled."""

    samples: list[FleetSample]
    keys: list[str]
    cached: int
    labelled: int
    seconds: float
    findings: list[Finding]


def fleet_labels(
    data_dir: Path,
    settings: Settings,
    now: dt.datetime | None = None,
    map_labels: MapLabels = map,
) -> FleetLabelsOutcome:
    """Draw tonight's samples, label what is new, write ``DATA/labels`` (module docstring)."""
    from hulk.data_folder import load_frames
    from hulk.jobs import load_jobs

    started = time.perf_counter()
    now = now or dt.datetime.now(dt.UTC)
    inventory, links = load_frames(data_dir, settings)
    snapshots = link_snapshots(data_dir, inventory, links, settings, now)
    jobs_file = settings.assign.jobs_file
    # Sizes only: a job's length and times do not change its label.
    listed = load_jobs(jobs_file, allow_empty=True) if jobs_file.exists() else []
    upcoming = [job.sizes_only() for job in listed]
    recent, findings = recent_jobs(
        settings.assign.placements_dir, settings.fleet_samples.recent_placements
    )
    samples = draw_samples(
        inventory, snapshots, upcoming, job_pool(upcoming, recent), settings, settings.seed
    )
    if not any(s.role == "train" for s in samples):
        # Checked before the teacher labels anything: the fine-tune would have nothing to learn.
        raise ConfigError(
            f"fleet_samples: none of tonight's {len(samples)} samples is a training sample "
            f"(fleet_samples.val_fraction is {settings.fleet_samples.val_fraction}); lower it "
            "or raise fleet_samples.min_train_samples"
        )
    by_name = {s.name: s for s in snapshots}
    tasks: list[LabelTask] = []
    keys: list[str] = []
    for sample in samples:
        frames = sample_frames(sample, inventory, by_name[sample.snapshot].links)
        key = label_key(*frames, sample.jobs, settings)
        keys.append(key)
        tasks.append((*frames, sample.jobs, settings, key))

    out = labels_dir(settings)
    cache_file = out / LABELS_FILE
    cache = LabelCache.from_text(cache_file.read_text() if cache_file.exists() else None)
    missing: dict[str, LabelTask] = {}
    for task in tasks:
        if task[-1] not in cache:
            missing.setdefault(task[-1], task)
    for key, label in zip(missing, map_labels(label_task, list(missing.values())), strict=True):
        cache[key] = label

    used = {s.snapshot for s in samples}
    files = {name: frame_digest(by_name[name].links)[:20] + ".parquet" for name in used}
    snapshots_dir = out / SNAPSHOTS_DIR
    snapshots_dir.mkdir(parents=True, exist_ok=True)
    for name, file in files.items():
        if not (snapshots_dir / file).exists():  # named by content: an existing one is equal
            fileio.write_parquet(snapshots_dir / file, by_name[name].links)
    for stale in snapshots_dir.glob("*.parquet"):
        if stale.name not in files.values():
            stale.unlink()
    fileio.write_text(cache_file, cache.to_text(keep=sorted(set(keys))))
    index = {
        "format": 1,
        "inventory_sha256": fileio.sha256_file(data_dir / schemas.INVENTORY_FILE),
        "source": "logs" if has_logs(data_dir) else "link table",
        "samples": [
            {**sample.to_dict(), "key": key, "snapshot_file": files[sample.snapshot]}
            for sample, key in zip(samples, keys, strict=True)
        ],
    }
    fileio.write_text(out / SAMPLES_FILE, json.dumps(index, indent=1, sort_keys=True) + "\n")
    return FleetLabelsOutcome(
        samples=samples,
        keys=keys,
        cached=len(set(keys)) - len(missing),
        labelled=len(missing),
        seconds=time.perf_counter() - started,
        findings=findings,
    )


def run(
    data_dir: Path,
    settings: Settings,
    now: dt.datetime | None = None,
    map_labels: MapLabels = map,
) -> StepResult[LabelsSummary]:
    """The labels step: `fleet_labels`, with counts by role, cached and labelled samples."""
    from hulk.stages import StepResult

    outcome = fleet_labels(data_dir, settings, now=now, map_labels=map_labels)
    out = labels_dir(settings)
    return StepResult(
        outputs={"labels": out / LABELS_FILE, "samples": out / SAMPLES_FILE},
        findings=outcome.findings,
        summary=LabelsSummary(
            samples=len(outcome.samples),
            by_role={role: sum(s.role == role for s in outcome.samples) for role in ROLES},
            cached=outcome.cached,
            labelled=outcome.labelled,
            seconds=round(outcome.seconds, 1),
        ),
    )


@dataclass(frozen=True)
class LabelledSample:
    """A sample of the fleet with its frames, jobs (class order) and teacher label."""

    name: str
    role: str
    variant: str
    key: str
    snapshot_file: str
    removed: tuple[int, ...]
    drained: tuple[int, ...]
    inventory: pd.DataFrame
    links: pd.DataFrame
    jobs: tuple[Job, ...]  # in class (size) order
    label: dict[str, Any]


def _unreadable(path: Path, exc: BaseException) -> InputError:
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return InputError(
        path, "labels.readable", f"cannot be read ({detail}): run `hulk stage labels` again"
    )


def load_labelled(data_dir: Path, settings: Settings) -> list[LabelledSample]:
    """Tonight's samples with their labels, as the fleet-labels step wrote them.

    Raises `InputError` when the step has not run, ran on another inventory, or its files
    cannot be read (``labels.readable``).
    """
    from hulk.data_folder import load_frames
    from hulk.features import order_jobs

    out = labels_dir(settings)
    index_file = out / SAMPLES_FILE
    if not index_file.exists():
        raise InputError(index_file, "labels.exists", "no fleet samples: run `hulk stage labels`")
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
        if not isinstance(index, dict) or not isinstance(index.get("samples"), list):
            raise ValueError("not a samples index")
    except (OSError, ValueError) as exc:
        raise _unreadable(index_file, exc) from None
    inventory_file = data_dir / schemas.INVENTORY_FILE
    if index.get("inventory_sha256") != fileio.sha256_file(inventory_file):
        raise InputError(
            index_file,
            "labels.stale",
            f"the samples were drawn for another {inventory_file.name}: run `hulk stage labels`",
        )
    inventory, _ = load_frames(data_dir, settings)
    try:
        cache = LabelCache.from_text((out / LABELS_FILE).read_text(encoding="utf-8"))
    except OSError as exc:
        raise _unreadable(out / LABELS_FILE, exc) from None
    snapshots: dict[str, pd.DataFrame] = {}
    result = []
    for record in index["samples"]:
        try:
            file = record["snapshot_file"]
            if file not in snapshots:
                snapshots[file] = pd.read_parquet(out / SNAPSHOTS_DIR / file)
        except (KeyError, TypeError) as exc:
            raise _unreadable(index_file, exc) from None
        except Exception as exc:  # missing or damaged: pyarrow's errors have no common base
            raise _unreadable(out / SNAPSHOTS_DIR / str(file), exc) from None
        jobs = parse_jobs({"jobs": record["jobs"]}, source=index_file)
        sample = FleetSample(
            record["name"],
            record["role"],
            record["snapshot"],
            record["variant"],
            tuple(record["removed"]),
            tuple(record["drained"]),
            tuple(jobs),
        )
        frames = sample_frames(sample, inventory, snapshots[file])
        if record["key"] not in cache:
            raise InputError(
                out / LABELS_FILE,
                "labels.missing",
                f"no label for sample {record['name']}: run `hulk stage labels` again",
            )
        ordered = tuple(jobs[j] for j in order_jobs(jobs))
        result.append(
            LabelledSample(
                name=sample.name,
                role=sample.role,
                variant=sample.variant,
                key=record["key"],
                snapshot_file=file,
                removed=sample.removed,
                drained=sample.drained,
                inventory=frames[0],
                links=frames[1],
                jobs=ordered,
                label=cache[record["key"]],
            )
        )
    return result
