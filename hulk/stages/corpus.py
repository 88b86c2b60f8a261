"""The corpus step: generated fleets × job mixes labelled by the teacher (`hulk.corpus`), the
prior's training data; built once and reused while what its samples depend on is unchanged."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hulk import fileio
from hulk.settings import Settings
from hulk.stages import Progress, StepResult, Summary


@dataclass(frozen=True)
class CorpusSummary(Summary):
    reused: bool  # the corpus on disk matched the settings and seed
    seed: int
    samples: dict[str, int]  # per part of the corpus (train, val, ...)
    time_capped: int  # fleets whose search stopped at the time cap

    def to_dict(self) -> dict[str, Any]:
        return {
            "reused": self.reused,
            "seed": self.seed,
            **{f"{name}_samples": count for name, count in self.samples.items()},
            "time_capped": self.time_capped,
        }


def corpus_is_current(settings: Settings, seed: int | None = None) -> bool:
    """Whether a corpus built from these settings and seed is saved (then reused): at
    ``corpus.path``, or in the data folder's corpus cache (then published at the path).

    What its samples depend on is compared (`hulk.corpus.corpus_inputs`, `corpus_key`): not
    where the file is, nor how many processes labelled it.
    """
    seed = settings.seed if seed is None else seed
    return _saved_at_path(settings, seed) or _cached(settings, seed) is not None


def _saved_at_path(settings: Settings, seed: int) -> bool:
    from hulk import corpus as corpora

    path = settings.corpus.path
    if not (path.exists() and corpora.manifest_path(path).exists()):
        return False
    try:
        manifest = json.loads(corpora.manifest_path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return (
        isinstance(manifest, dict)
        and manifest.get("seed") == seed
        and manifest.get("inputs") == corpora.corpus_inputs(settings)
        # The bytes its manifest records: a damaged file is taken from the cache or rebuilt.
        and manifest.get("sha256") == fileio.sha256_file(path)
    )


def _cached(settings: Settings, seed: int) -> Path | None:
    from hulk import corpus as corpora

    return corpora.cached_corpus(settings, seed)


def run(
    settings: Settings,
    seed: int | None = None,
    workers: int | None = None,
    rebuild: bool = False,
    progress: Progress = None,
    outcomes: Mapping[int, dict[str, Any]] | None = None,
    seconds: float = 0.0,
) -> StepResult[CorpusSummary]:
    """The teacher-labelled training corpus at `settings.corpus.path` (+ its manifest).

    Reused while its manifest matches the corpus settings and seed (unless `rebuild`); a corpus
    of the same settings and seed in the data folder's cache (`hulk.corpus.cached_corpus`: keyed
    by content, not by path) is published at the path and reused too. Else it is built: from
    `outcomes` when given (fleet id → `hulk.corpus.label_fleet` result, labelled by any executor,
    e.g. the nightly flow's Dask cluster; `seconds` is their wall time), or here on `workers`
    processes (default ``corpus.workers``). Either way the same `assemble_corpus` +
    `save_corpus` write it, and it is added to the cache.
    """
    from hulk import corpus as corpora

    seed = settings.seed if seed is None else seed
    workers = settings.corpus.workers if workers is None else workers
    path = settings.corpus.path
    at_path = not rebuild and _saved_at_path(settings, seed)
    cached = None if rebuild or at_path else _cached(settings, seed)
    reused = at_path or cached is not None
    if reused:
        if cached is not None:
            corpora.publish_corpus(cached, path)
        built = corpora.load_corpus(path)
    else:
        if outcomes is not None:
            built = corpora.assemble_corpus(settings, seed, outcomes, workers, seconds)
        else:
            built = corpora.build_corpus(settings, seed, workers, progress=progress)
        corpora.save_corpus(built, path)
    corpora.cache_corpus(settings, seed, path, replace=not reused)
    counts = built.manifest.get("counts", {})
    return StepResult(
        outputs={"corpus": path, "manifest": corpora.manifest_path(path)},
        summary=CorpusSummary(
            reused=reused,
            seed=seed,
            samples={name: c.get("samples", 0) for name, c in counts.items()},
            time_capped=built.manifest.get("build", {}).get("time_capped", 0),
        ),
    )
