"""The corpus step: generated fleets × job mixes labelled by the teacher (`hulk.corpus`), the
prior's training data; built once and reused while what its samples depend on is unchanged."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
    """Whether the saved corpus was built from these settings and seed (then reused).

    What its samples depend on is compared (`hulk.corpus.corpus_inputs`): not where the file
    is, nor how many processes labelled it.
    """
    from hulk import corpus as corpora

    seed = settings.seed if seed is None else seed
    path = settings.corpus.path
    if not (path.exists() and corpora.manifest_path(path).exists()):
        return False
    manifest = json.loads(corpora.manifest_path(path).read_text())
    return manifest.get("seed") == seed and manifest.get("inputs") == corpora.corpus_inputs(
        settings
    )


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

    Reused while its manifest matches the corpus settings and seed (unless `rebuild`). Else it
    is built: from `outcomes` when given (fleet id → `hulk.corpus.label_fleet` result, labelled
    by any executor, e.g. the nightly flow's Dask cluster; `seconds` is their wall time), or
    here on `workers` processes (default ``corpus.workers``). Either way the same
    `assemble_corpus` + `save_corpus` write it.
    """
    from hulk import corpus as corpora

    seed = settings.seed if seed is None else seed
    workers = settings.corpus.workers if workers is None else workers
    path = settings.corpus.path
    reused = not rebuild and corpus_is_current(settings, seed)
    if reused:
        built = corpora.load_corpus(path)
    else:
        if outcomes is not None:
            built = corpora.assemble_corpus(settings, seed, outcomes, workers, seconds)
        else:
            built = corpora.build_corpus(settings, seed, workers, progress=progress)
        corpora.save_corpus(built, path)
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
