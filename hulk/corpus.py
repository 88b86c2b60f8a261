"""The labelled training corpus: generated fleets × job mixes, labelled by the teacher search.

The GNN learns to do in one forward pass what the cost-model teacher (`hulk.teacher`) does by
search: give every machine to a job, or leave it idle. This module builds what it learns from.

**A sample** is one (fleet, job mix) labelled by the teacher: a plain dict that
``torch.load(weights_only=True)`` reads back,

* ``x`` float32 [n, len(NODE_FEATURES)], ``edge_index`` long [2, E], ``edge_attr`` float32
  [E, len(EDGE_FEATURES)] — `hulk.graph.fleet_data`, machines in node_id order, every
  link once per direction;
* ``jobs`` float32 [J, len(JOB_FEATURES)] — `hulk.features.job_features` of the jobs in *size
  order* (`hulk.features.order_jobs`: descending ``min_memory_bytes``, then descending
  ``params``, then name);
* ``y`` long [n] — class k (0 ≤ k < J) for a machine the teacher's plan gives to the k-th job in
  size order, J ("idle") for every other machine: machines the plans leave out, drained
  (failed) machines, and the machines of none of the queued jobs (a queued job has no class
  members);
* ``active`` bool [n] — the machine may be used (status ``active``);
* ``fleet`` int, ``mix`` int — the sample's fleet id (−1 for the real, current fleet) and mix
  number; ``makespan_s`` float — the teacher's fleet makespan (cost model, `hulk.cost`).

Which split a sample belongs to is not in the sample: `Corpus` keeps ``train``, ``val`` and
``test`` lists and a manifest.

A sample's inputs and inference's are encoded by the same code: `hulk.features.encode_inputs`
(graph tensors, job features in size order and the order itself, so class k maps back to
``jobs[order[k]]``).

**Fleets** (`corpus_fleet`), a pure function of (seed, fleet id, settings), so that any fleet of
a corpus can be rebuilt from its manifest:

* ``synthetic`` (share 1 − `paper_share`): the `synthetic-1000` preset (80 data-centre cities,
  heavy-tailed city sizes, per-city hardware leanings) generated with a per-fleet seed; a random
  number of its cities (`cities`, capped by the size), further cities added in random order
  until they hold the fleet's size, then that many machines drawn from them. Sizes are
  log-uniform in [`min_machines`, `max_machines`]. Network policy blocks a share of the
  cross-city pairs drawn from `blocked_pair_fraction`;
* ``paper`` (share `paper_share`): the `paper-47` preset (the published fleet's twelve places
  and hardware mix, shuffled by a per-fleet seed, the paper's blocking policy), each machine's
  hardware redrawn from the synthetic tables with probability `hardware_perturb`, and a random
  subset of [min(`min_machines`, 47), 47] machines kept;
* then a share of the machines drawn from `drained_fraction` is marked ``drained`` (failed),
  node ids are renumbered 0..n−1 (in the preset's order) and the links are
  `hulk.generate.expected_links` (the link table the latency model implies: no logs).

**Job mixes** (`corpus_mix`): `min_jobs`..`max_jobs` jobs, each a preset (`PRESET_JOBS`) or, with
probability `perturb_share`, a perturbed variant: parameters scaled log-uniformly in
`params_scale` (layers and hidden by its cube root), global batch in `batch_scale`, sequence
length and micro batch halved, kept or doubled; with probability `priority_share` a job gets
priority 1. A job the fleet could never host (`hulk.teacher.never_fits`) is drawn again. Names
are unique within a mix: a preset keeps its name, a variant gets ``_v1``, ``_v2`` … (numbered
by the draws of its preset). A preset drawn again is always a variant, so no two jobs of a mix
are the same and every class is well defined.

**Split** (`split_of`): by a sha256 hash of (seed, fleet id), uniform in [0, 1): below
`test_fraction` → test, below `test_fraction + val_fraction` → val, else train. Every mix of a
fleet is in its fleet's split, so no test fleet is ever seen in training, and a fleet keeps its
split when the corpus grows (more fleets) — only the fractions are approximate.

**Labelling** (`build_corpus`) runs one task per fleet (fleet, its mixes, one teacher search per
mix) on a `ProcessPoolExecutor(max_workers=workers)` (spawned processes; ``workers=1`` runs in
this process). The teacher's seed for mix m of fleet f is derived from (seed, f, m) and the
teacher's budget is `CorpusSettings.max_evaluations` (the nightly teacher's other settings), so
the corpus is the same whatever the worker count — as long as the wall-clock safety cap
`CorpusSettings.time_budget_s` never binds (the manifest records each search's ``stopped_by``).

**Files** (`save_corpus` / `load_corpus`): ``<name>.pt`` (torch.save of dicts, lists, tensors,
ints, floats and strings: loadable with ``weights_only=True``) and the manifest
``<name>.json`` beside it, each written atomically; the manifest is written last.

**Cache** (`cache_corpus` / `cached_corpus` / `publish_corpus`): a corpus is also kept under
``DATA/cache/corpus/<key>.pt`` (+ ``.json``), where the key (`corpus_key`) is a hash of what its
samples depend on — the settings of `corpus_inputs`, the seed and the file format — and not of
where it is stored: moving ``corpus.path`` publishes the cached corpus there (a hard link,
else a copy) instead of labelling it again. The newest `CACHE_KEEP` entries are kept.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import pickle
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from hulk import fileio, schemas
from hulk.cost import Fleet
from hulk.errors import ConfigError, InputError
from hulk.features import JOB_FEATURES, encode_inputs
from hulk.generate import expected_links
from hulk.graph import EDGE_FEATURES, NODE_FEATURES
from hulk.jobs import PRESET_JOBS, Job, job_to_dict, parse_jobs
from hulk.presets import CAPABILITY_SHARE, GPU_COUNTS, GPU_MEMORY_GB, PAPER, build_fleet
from hulk.settings import CORPUS_IGNORES_GENERATE, CorpusSettings, Settings, TeacherSettings
from hulk.teacher import IDLE, PLACED, TeacherResult, never_fits, teacher_search

__all__ = [
    "SPLITS",
    "Corpus",
    "FleetSpec",
    "build_corpus",
    "cache_corpus",
    "cached_corpus",
    "corpus_fleet",
    "corpus_inputs",
    "corpus_key",
    "corpus_mix",
    "corpus_teacher",
    "label_mix",
    "load_corpus",
    "manifest_path",
    "mix_jobs",
    "perturbed_job",
    "publish_corpus",
    "sample_seed",
    "save_corpus",
    "split_of",
]

FORMAT = 1  # version of the saved corpus layout
CACHE_DIR = Path("cache") / "corpus"  # under the data folder: corpora by content (module doc)
CACHE_KEEP = 4  # cached corpora kept (the newest; older settings are rarely gone back to)
SPLITS: tuple[str, ...] = ("train", "val", "test")
SYNTHETIC_SOURCE = "synthetic-1000"  # the preset synthetic fleets are cut from
CURRENT_FLEET = -1  # fleet id of a sample of the real, current fleet


# Seed-sequence tags: one independent stream per purpose.
_TAG_FLEET, _TAG_MIX, _TAG_TEACHER = 0x434F5250, 0x4D4958, 0x54454143
_MAX_REDRAWS = 50  # attempts at drawing a job the fleet can host


# --- samples ----------------------------------------------------------------------------------


def corpus_teacher(settings: Settings) -> TeacherSettings:
    """The teacher settings of corpus labelling: the nightly teacher with the corpus budget."""
    return settings.teacher.model_copy(
        update={
            "max_evaluations": settings.corpus.max_evaluations,
            "time_budget_s": settings.corpus.time_budget_s,
        }
    )


def label_mix(
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    jobs: Sequence[Job],
    settings: Settings,
    seed: int,
    teacher: TeacherSettings,
    fleet: int,
    mix: int,
) -> tuple[dict[str, Any], TeacherResult, list[int]]:
    """One (fleet, jobs) labelled by the teacher search with `teacher`: the sample (module
    docstring), the teacher's result and the size order of the jobs. `fleet` is −1 for the
    real, current fleet. Raises the teacher's `InputError` when a job could never run there."""
    inventory = inventory.sort_values("node_id", kind="stable").reset_index(drop=True)
    tensors, order = encode_inputs(inventory, links, jobs, settings)
    cost_fleet = Fleet.from_frames(
        inventory, links, settings.hardware, settings.graph.bandwidth_tiers
    )
    result = teacher_search(list(jobs), cost_fleet, teacher, settings.planner, seed)
    # Teacher labels are input positions (−1 idle); classes are size-order ranks (J idle).
    rank = np.empty(len(jobs) + 1, np.int64)
    rank[np.asarray(order, np.int64)] = np.arange(len(jobs))
    rank[len(jobs)] = len(jobs)
    labels = np.where(result.labels == IDLE, len(jobs), result.labels)
    y = rank[labels]
    sample: dict[str, Any] = {
        **tensors,
        "y": torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
        "fleet": int(fleet),
        "mix": int(mix),
        "makespan_s": float(result.makespan_s),
    }
    return sample, result, order


# --- fleets and mixes -------------------------------------------------------------------------


def _rng(seed: int, tag: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed & (2**63 - 1), tag, *keys]))


def sample_seed(seed: int, fleet: int, mix: int) -> int:
    """The teacher's seed for mix `mix` of fleet `fleet` of the corpus built with `seed`."""
    state = np.random.SeedSequence([seed & (2**63 - 1), _TAG_TEACHER, fleet, mix])
    return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


def split_of(seed: int, fleet: int, settings: CorpusSettings) -> str:
    """The split of a fleet: a hash of (seed, fleet id) against the split fractions."""
    digest = hashlib.sha256(f"hulk-corpus:{seed}:{fleet}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    if u < settings.test_fraction:
        return "test"
    if u < settings.test_fraction + settings.val_fraction:
        return "val"
    return "train"


def _uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(low + (high - low) * rng.random())


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(math.exp(_uniform(rng, math.log(low), math.log(high))))


def _redraw_hardware(frame: pd.DataFrame, rows: np.ndarray, rng: np.random.Generator) -> None:
    """Give machines `rows` new hardware drawn from the synthetic presets' tables."""
    capabilities = np.array(list(CAPABILITY_SHARE))
    share = np.array(list(CAPABILITY_SHARE.values()))
    counts = np.array([count for count, _ in GPU_COUNTS])
    count_share = np.array([weight for _, weight in GPU_COUNTS])
    for row in rows.tolist():
        capability = float(capabilities[rng.choice(len(share), p=share / share.sum())])
        options = GPU_MEMORY_GB[capability]
        per_gpu = np.array([gb for gb, _ in options], dtype=float)
        weights = np.array([w for _, w in options])
        gb = float(per_gpu[rng.choice(len(per_gpu), p=weights / weights.sum())])
        gpus = int(counts[rng.choice(len(counts), p=count_share / count_share.sum())])
        frame.loc[row, ["compute_capability", "memory_gb"]] = [capability, gpus * gb]
        frame.loc[row, "gpu_count"] = gpus


@dataclass(frozen=True)
class FleetSpec:
    """How a corpus fleet was made (the manifest's record of it)."""

    fleet: int
    split: str
    source: str  # "paper-47" | "synthetic-1000"
    preset_seed: int
    machines: int
    active: int
    cities: int
    links: int
    blocked_pair_fraction: float | None  # None: the paper's own blocking policy
    perturbed_machines: int  # paper fleets: machines with redrawn hardware

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def corpus_fleet(
    seed: int, fleet: int, settings: Settings
) -> tuple[pd.DataFrame, pd.DataFrame, FleetSpec]:
    """(inventory, links, spec) of fleet `fleet` of the corpus built with `seed`.

    A pure function of its arguments (module docstring, "Fleets").
    """
    cs = settings.corpus
    rng = _rng(seed, _TAG_FLEET, fleet)
    preset_seed = int(rng.integers(0, 2**31 - 1))
    generate = settings.generate.model_copy(update={"drained_fraction": 0.0})
    perturbed = 0
    blocked: float | None = None
    if rng.random() < cs.paper_share:
        source = PAPER
        base = build_fleet(PAPER, preset_seed, generate)
        changed = np.flatnonzero(rng.random(len(base)) < cs.hardware_perturb)
        _redraw_hardware(base, changed, rng)
        perturbed = len(changed)
        low = min(cs.min_machines, len(base))
        n = int(rng.integers(low, len(base) + 1))
        keep = np.sort(rng.choice(len(base), size=n, replace=False))
    else:
        source = SYNTHETIC_SOURCE
        base = build_fleet(SYNTHETIC_SOURCE, preset_seed, generate)
        n = round(_log_uniform(rng, cs.min_machines, cs.max_machines))
        n = min(max(n, 1), len(base))
        city = base["city"].astype(str).to_numpy()
        names = pd.unique(city)
        most = min(cs.max_cities, len(names), n)
        wanted = int(rng.integers(min(cs.min_cities, most), most + 1))
        order = names[rng.permutation(len(names))]
        sizes = pd.Series(city).value_counts()
        chosen = max(wanted, int(np.searchsorted(np.cumsum(sizes[order].to_numpy()), n)) + 1)
        pool = np.flatnonzero(np.isin(city, order[:chosen]))
        keep = np.sort(rng.choice(pool, size=n, replace=False))
        blocked = round(
            _uniform(rng, cs.blocked_pair_fraction.low, cs.blocked_pair_fraction.high), 4
        )
        generate = generate.model_copy(update={"blocked_pair_fraction": blocked})
    inventory = base.iloc[keep].reset_index(drop=True)
    inventory["node_id"] = np.arange(len(inventory), dtype=np.int64)
    share = _uniform(rng, cs.drained_fraction.low, cs.drained_fraction.high)
    drained = min(round(share * len(inventory)), len(inventory) - 1)
    status = np.full(len(inventory), schemas.STATUS_ACTIVE, dtype=object)
    status[rng.choice(len(inventory), size=drained, replace=False)] = schemas.STATUS_DRAINED
    inventory["status"] = status
    inventory = schemas.conform(inventory, schemas.INVENTORY)
    links = expected_links(inventory, preset_seed, generate)
    spec = FleetSpec(
        fleet=fleet,
        split=split_of(seed, fleet, cs),
        source=source,
        preset_seed=preset_seed,
        machines=len(inventory),
        active=len(inventory) - drained,
        cities=int(inventory["city"].nunique()),
        links=len(links),
        blocked_pair_fraction=blocked,
        perturbed_machines=perturbed,
    )
    return inventory, links, spec


def perturbed_job(base: Job, name: str, rng: np.random.Generator, cs: CorpusSettings) -> Job:
    """A perturbed copy of a job named `name` (module docstring, "Job mixes")."""
    scale = _log_uniform(rng, cs.params_scale.low, cs.params_scale.high)
    shape = scale ** (1.0 / 3.0)
    batch = _log_uniform(rng, cs.batch_scale.low, cs.batch_scale.high)
    global_batch = max(1, round(base.global_batch * batch))
    micro = base.micro_batch * 2.0 ** int(rng.integers(-1, 2))
    return Job(
        name=name,
        params_b=float(f"{base.params_b * scale:.4g}"),
        layers=max(2, round(base.layers * shape)),
        hidden=max(64, round(base.hidden * shape / 64) * 64),
        seq_len=max(128, round(base.seq_len * 2.0 ** int(rng.integers(-1, 2)))),
        global_batch=global_batch,
        micro_batch=int(min(max(1, micro), global_batch)),
    )


def corpus_mix(seed: int, fleet: int, mix: int, settings: Settings, cost_fleet: Fleet) -> list[Job]:
    """The jobs of mix `mix` of fleet `fleet` (module docstring, "Job mixes"), in draw order.

    `cost_fleet` is the fleet they are drawn for: a job it could never host is drawn again.
    """
    cs = settings.corpus
    rng = _rng(seed, _TAG_MIX, fleet, mix)
    count = int(rng.integers(cs.min_jobs, cs.max_jobs + 1))
    presets = list(PRESET_JOBS.values())
    jobs: list[Job] = []
    used: dict[str, int] = {}
    for _ in range(count):
        for _ in range(_MAX_REDRAWS):
            base = presets[int(rng.integers(len(presets)))]
            copies = used.get(base.name, 0) + 1
            # A preset drawn again is always a variant: no two jobs of a mix look the same,
            # so the class of every job is well defined.
            perturb = rng.random() < cs.perturb_share or copies > 1
            priority = 1 if rng.random() < cs.priority_share else 0
            name = f"{base.name}_v{copies}" if perturb else base.name
            job = perturbed_job(base, name, rng, cs) if perturb else base
            job = Job(**{**job_to_dict(job), "name": name, "priority": priority})
            if not never_fits([job], cost_fleet):
                used[base.name] = copies
                jobs.append(job)
                break
    return jobs


# --- the corpus -------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Samples by split and the manifest describing them (module docstring)."""

    train: list[dict[str, Any]] = field(default_factory=list)
    val: list[dict[str, Any]] = field(default_factory=list)
    test: list[dict[str, Any]] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> list[dict[str, Any]]:
        """The samples of split `name` ("train", "val" or "test")."""
        if name not in SPLITS:
            raise KeyError(f"no split {name!r}; splits: {', '.join(SPLITS)}")
        return getattr(self, name)

    def __len__(self) -> int:
        return len(self.train) + len(self.val) + len(self.test)


def _numpy_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """Tensors as numpy arrays, to cross process boundaries plainly."""
    return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in sample.items()}


def _torch_sample(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in sample.items()}


def _mix_record(
    seed: int, fleet: int, mix: int, jobs: Sequence[Job], result: TeacherResult, order: list[int]
) -> dict[str, Any]:
    placements = result.placements
    return {
        "fleet": fleet,
        "mix": mix,
        "seed": sample_seed(seed, fleet, mix),
        # Class k of the sample is jobs[k] here (size order).
        "jobs": [job_to_dict(jobs[j]) for j in order],
        "machines": [len(placements[j].nodes) for j in order],
        "queued": [placements[j].job.name for j in order if placements[j].status != PLACED],
        "makespan_s": float(result.makespan_s),
        "sum_s": float(result.sum_s),
        "evaluations": int(result.evaluations),
        "stopped_by": result.stopped_by,
        "teacher_seconds": round(float(result.seconds), 3),
    }


def label_fleet(seed: int, fleet: int, settings: Settings) -> dict[str, Any]:
    """Build fleet `fleet`, draw its mixes and label each: the task of one worker.

    A pure function of its arguments (timings aside), so any executor may run it: the
    process pool of `build_corpus`, or a Dask cluster; `assemble_corpus` joins the outcomes.
    """
    torch.set_num_threads(1)
    started = time.perf_counter()
    inventory, links, spec = corpus_fleet(seed, fleet, settings)
    cost_fleet = Fleet.from_frames(
        inventory, links, settings.hardware, settings.graph.bandwidth_tiers
    )
    teacher = corpus_teacher(settings)
    samples, records = [], []
    for mix in range(settings.corpus.mixes_per_fleet):
        jobs = corpus_mix(seed, fleet, mix, settings, cost_fleet)
        if not jobs:
            continue
        sample, result, order = label_mix(
            inventory, links, jobs, settings, sample_seed(seed, fleet, mix), teacher, fleet, mix
        )
        samples.append(_numpy_sample(sample))
        records.append({**_mix_record(seed, fleet, mix, jobs, result, order), "split": spec.split})
    return {
        "spec": spec.to_dict(),
        "samples": samples,
        "records": records,
        "seconds": time.perf_counter() - started,
    }


def build_corpus(
    settings: Settings,
    seed: int,
    workers: int,
    progress: Callable[[int, int], None] | None = None,
) -> Corpus:
    """Generate `settings.corpus.fleets` fleets × `mixes_per_fleet` mixes and label them.

    One task per fleet on `workers` processes (1: in this process); the result does not depend
    on `workers` (module docstring, "Labelling"). Calls ``progress(done, total)`` after each
    fleet. Samples are in (fleet, mix) order within each split.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1 (got {workers})")
    started = time.perf_counter()
    total = settings.corpus.fleets
    fleet_ids = list(range(total))
    if not any(split_of(seed, fleet, settings.corpus) == "train" for fleet in fleet_ids):
        # Known before any fleet is labelled: the prior would have nothing to train on.
        raise ConfigError(
            f"corpus: none of the {total} fleets falls in the training split with seed {seed} "
            f"(corpus.val_fraction {settings.corpus.val_fraction}, corpus.test_fraction "
            f"{settings.corpus.test_fraction}); raise corpus.fleets or lower the fractions"
        )
    done: dict[int, dict[str, Any]] = {}

    def finished(fleet: int, outcome: dict[str, Any]) -> None:
        done[fleet] = outcome
        if progress is not None:
            progress(len(done), total)

    if workers == 1:
        for fleet in fleet_ids:
            finished(fleet, label_fleet(seed, fleet, settings))
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = {pool.submit(label_fleet, seed, f, settings): f for f in fleet_ids}
            for future in as_completed(futures):
                finished(futures[future], future.result())

    return assemble_corpus(settings, seed, done, workers, time.perf_counter() - started)


def assemble_corpus(
    settings: Settings,
    seed: int,
    outcomes: Mapping[int, dict[str, Any]],
    workers: int,
    seconds: float,
) -> Corpus:
    """The corpus from every fleet's `label_fleet` outcome (keyed by fleet id), in fleet order.

    `workers` and `seconds` only go into the manifest's ``build`` record (not reproducible).
    """
    missing = sorted(set(range(settings.corpus.fleets)) - set(outcomes))
    if missing:
        raise ValueError(f"no labelling outcome for fleet(s) {missing[:10]}")
    corpus = Corpus()
    fleets, samples = [], []
    busy = 0.0
    for fleet in range(settings.corpus.fleets):
        outcome = outcomes[fleet]
        fleets.append(outcome["spec"])
        busy += outcome["seconds"]
        for sample, record in zip(outcome["samples"], outcome["records"], strict=True):
            corpus.split(record["split"]).append(_torch_sample(sample))
            samples.append(record)
    corpus.manifest = {
        "format": FORMAT,
        "seed": seed,
        # Without its path and worker count: the same corpus wherever it is written, however
        # many processes labelled it (those are in `build`).
        "settings": settings.corpus.model_dump(mode="json", exclude={"path", "workers"}),
        "inputs": corpus_inputs(settings),
        "teacher": corpus_teacher(settings).model_dump(mode="json"),
        "node_features": list(NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
        "job_features": list(JOB_FEATURES),
        "counts": {
            name: {
                "fleets": sum(spec["split"] == name for spec in fleets),
                "samples": len(corpus.split(name)),
            }
            for name in SPLITS
        },
        "fleets": fleets,
        "samples": samples,
        # Not reproducible (timings): everything above is a function of (settings, seed).
        "build": {
            "workers": workers,
            "seconds": round(seconds, 3),
            "task_seconds": round(busy, 3),
            "time_capped": sum(r["stopped_by"] == "time" for r in samples),
        },
    }
    return corpus


def corpus_inputs(settings: Settings) -> dict[str, Any]:
    """The settings a corpus's samples depend on (JSON): the corpus section without its file
    path and worker count, and the teacher, planner, hardware, bandwidth tiers and generator
    settings its fleets and labels come from (`CORPUS_IGNORES_GENERATE` left out)."""
    return {
        "corpus": settings.corpus.model_dump(mode="json", exclude={"path", "workers"}),
        "teacher": corpus_teacher(settings).model_dump(mode="json"),
        "planner": settings.planner.model_dump(mode="json"),
        "hardware": settings.hardware.model_dump(mode="json"),
        "graph": settings.graph.model_dump(mode="json"),
        "generate": settings.generate.model_dump(mode="json", exclude=set(CORPUS_IGNORES_GENERATE)),
    }


# --- files ------------------------------------------------------------------------------------


def manifest_path(path: str | Path) -> Path:
    """The manifest beside a corpus file: ``corpus.pt`` → ``corpus.json``."""
    return Path(path).with_suffix(".json")


def _canonical(value: Any) -> Any:
    """`value` with fresh containers and interned strings: pickle refers back to an object it
    has written (by identity), so equal samples pickle to equal bytes only when they share
    objects alike, wherever they were labelled (here, or unpickled from a worker)."""
    if isinstance(value, dict):
        return {_canonical(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, str):
        return sys.intern(value)
    return value


def save_corpus(corpus: Corpus, path: str | Path) -> Path:
    """Write the corpus (``path``, torch) and its manifest (`manifest_path`), atomically.

    Returns the manifest's path. The tensors file holds only dicts, lists, tensors, ints,
    floats and strings, so ``torch.load(path, weights_only=True)`` reads it.
    """
    path = Path(path)
    payload = {
        "format": FORMAT,
        "node_features": list(NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
        "job_features": list(JOB_FEATURES),
        "splits": {name: corpus.split(name) for name in SPLITS},
    }
    payload = _canonical(payload)
    with fileio.atomic_path(path) as tmp, open(tmp, "wb") as handle:
        # Through a handle, not the path: torch names the archive's folder after the file (the
        # temporary name), a handle gets a fixed one, so equal corpora are equal bytes.
        torch.save(payload, handle)
    manifest = {**corpus.manifest, "file": path.name, "sha256": fileio.sha256_file(path)}
    target = manifest_path(path)
    fileio.write_text(target, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return target


_REBUILD = (
    "the file does not match {what}: `hulk stage corpus` (or the nightly run) takes it from "
    "the data folder's cache or builds it again"
)


def load_corpus(path: str | Path) -> Corpus:
    """Read a corpus written by `save_corpus` (``weights_only=True``; no arbitrary code runs).

    Raises `ValueError` when the file's format or feature names differ from this code's, and
    `InputError` (``corpus.corrupt``) when its bytes are not those its manifest records or
    cannot be read (the corpus step builds it again, or takes it from the cache).
    """
    path = Path(path)
    manifest_file = manifest_path(path)
    manifest = (
        json.loads(manifest_file.read_text(encoding="utf-8")) if manifest_file.exists() else {}
    )
    recorded = manifest.get("sha256") if isinstance(manifest, dict) else None
    if recorded is not None and recorded != fileio.sha256_file(path):
        raise InputError(path, "corpus.corrupt", _REBUILD.format(what="its manifest's sha256"))
    try:
        payload = torch.load(path, weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as exc:
        raise InputError(
            path, "corpus.corrupt", f"not readable ({exc}); " + _REBUILD.format(what="a corpus")
        ) from None
    if payload.get("format") != FORMAT:
        raise ValueError(f"{path}: corpus format {payload.get('format')!r}, expected {FORMAT}")
    expected = {
        "node_features": list(NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
        "job_features": list(JOB_FEATURES),
    }
    for key, names in expected.items():
        if payload.get(key) != names:
            raise ValueError(f"{path}: {key} {payload.get(key)} differ from the code's {names}")
    splits = payload["splits"]
    return Corpus(
        train=list(splits["train"]),
        val=list(splits["val"]),
        test=list(splits["test"]),
        manifest=manifest,
    )


def mix_jobs(record: dict[str, Any]) -> list[Job]:
    """The jobs of a manifest sample record, in class (size) order."""
    return parse_jobs({"jobs": record["jobs"]}, source="corpus manifest")


# --- cache by content -------------------------------------------------------------------------


def corpus_key(settings: Settings, seed: int) -> str:
    """sha256 of what a corpus's samples are a function of: `corpus_inputs`, the seed, the file
    format and the feature names (never its path or the worker count)."""
    content = {
        "format": FORMAT,
        "seed": seed,
        "inputs": corpus_inputs(settings),
        "features": [list(NODE_FEATURES), list(EDGE_FEATURES), list(JOB_FEATURES)],
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _cache_path(settings: Settings, seed: int) -> Path:
    return settings.data_dir / CACHE_DIR / f"{corpus_key(settings, seed)}.pt"


def _matches(path: Path, settings: Settings, seed: int) -> dict[str, Any] | None:
    """The manifest of the corpus at `path` if it was built from these settings and seed and
    the file is the one the manifest describes (its sha256), else None."""
    manifest = manifest_path(path)
    if not (path.is_file() and manifest.is_file()):
        return None
    try:
        record = json.loads(manifest.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict):
        return None
    if record.get("seed") != seed or record.get("inputs") != corpus_inputs(settings):
        return None
    if record.get("sha256") != fileio.sha256_file(path):
        return None
    return record


def cached_corpus(settings: Settings, seed: int) -> Path | None:
    """The cached corpus of these settings and seed (its ``.pt``), or None."""
    path = _cache_path(settings, seed)
    return path if _matches(path, settings, seed) is not None else None


def link_or_copy(source: Path, target: Path) -> None:
    """Put `source`'s bytes at `target` atomically: a hard link when the file system allows
    one (no second copy of the bytes; every write here replaces files, never edits them)."""
    with fileio.atomic_path(target) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)


def cache_corpus(settings: Settings, seed: int, path: str | Path, replace: bool = False) -> Path:
    """Add the corpus saved at `path` to the cache (if not there yet, or `replace`: a corpus
    just built replaces its entry); returns its cache path. Keeps the newest `CACHE_KEEP`."""
    path = Path(path)
    target = _cache_path(settings, seed)
    if replace or _matches(target, settings, seed) is None:
        record = json.loads(manifest_path(path).read_text(encoding="utf-8"))
        link_or_copy(path, target)
        manifest = {**record, "file": target.name}
        fileio.write_text(
            manifest_path(target), json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        )
    # Recency is the manifest's time: the .pt may be a hard link of corpus.path, whose time
    # must not change under DVC's feet.
    manifest_path(target).touch()
    entries = [p for p in target.parent.glob("*.pt") if manifest_path(p).exists()]
    entries.sort(key=lambda p: manifest_path(p).stat().st_mtime_ns, reverse=True)
    for old in entries[CACHE_KEEP:]:
        manifest_path(old).unlink(missing_ok=True)  # the manifest first: a pair never half-valid
        old.unlink(missing_ok=True)
    for orphan in target.parent.glob("*.pt"):  # a .pt whose manifest was never written (a kill)
        if not manifest_path(orphan).exists():
            orphan.unlink(missing_ok=True)
    return target


def publish_corpus(cached: str | Path, path: str | Path) -> Path:
    """Publish a cached corpus at `path` (+ its manifest, written last); returns the manifest's
    path. The bytes, and so the sha256 the prior is keyed on, are the cached ones."""
    cached, path = Path(cached), Path(path)
    record = json.loads(manifest_path(cached).read_text(encoding="utf-8"))
    link_or_copy(cached, path)
    target = manifest_path(path)
    manifest = {**record, "file": path.name}
    fileio.write_text(target, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return target
