"""The prior step: the GNN trained on the synthetic corpus, built once and reused.

The prior knows generated fleets (`hulk.corpus`); each night the train step fine-tunes the
champion, or on the first night this prior, on the data folder's own fleet. It is written beside
the corpus:

    prior.pt    the state dict (``torch.load(weights_only=True)``: tensors only)
    prior.json  its record: model config, the corpus's sha256, the model / train settings and
                seed it was trained with, its epochs (written last: the step's record)

and reused while that record matches the corpus file and the settings. Priors are also kept in
the data folder's cache by content (``DATA/cache/prior/<key>.pt`` + ``.json``, the key a hash of
the corpus's sha256, the model / train settings and the seed; the newest `CACHE_KEEP`): moving
``corpus.path`` publishes the cached prior beside the moved corpus instead of training again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hulk import fileio
from hulk.errors import InputError
from hulk.settings import Settings
from hulk.stages import Summary

if TYPE_CHECKING:
    from hulk.stages import StepResult

FORMAT = 1
CACHE_DIR = Path("cache") / "prior"  # under the data folder: priors by content (module doc)
CACHE_KEEP = 4


@dataclass(frozen=True)
class PriorSummary(Summary):
    """Figures of the prior's record (None where an older record lacks one)."""

    reused: bool | None
    train_samples: int | None
    val_samples: int | None
    best_epoch: int | None
    epochs: int | None
    best_val_accuracy: float | None


def prior_path(settings: Settings) -> Path:
    """``prior.pt`` beside the corpus file (its record: ``prior.json``)."""
    return settings.corpus.path.with_name("prior.pt")


def _wanted(settings: Settings, seed: int, corpus_sha256: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "corpus_sha256": corpus_sha256,
        "model": settings.model.model_dump(mode="json"),
        "train": settings.train.model_dump(mode="json"),
        "seed": seed,
    }


def _record(settings: Settings) -> dict[str, Any] | None:
    path = prior_path(settings).with_suffix(".json")
    if not (path.exists() and prior_path(settings).exists()):
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def _corpus_sha256(settings: Settings) -> str:
    from hulk.corpus import manifest_path

    manifest = manifest_path(settings.corpus.path)
    if not manifest.exists():
        raise InputError(manifest, "corpus.exists", "no corpus: run `hulk stage corpus` first")
    return json.loads(manifest.read_text(encoding="utf-8"))["sha256"]


def prior_is_current(settings: Settings, seed: int) -> bool:
    """Whether the saved prior was trained on this corpus with these settings and seed."""
    wanted = _wanted(settings, seed, _corpus_sha256(settings))
    return _current(_record(settings), wanted)


def _current(record: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    return record is not None and {key: record.get(key) for key in wanted} == wanted


def _cache_path(settings: Settings, wanted: dict[str, Any]) -> Path:
    key = hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:24]
    return settings.data_dir / CACHE_DIR / f"{key}.pt"


def _cached(settings: Settings, wanted: dict[str, Any]) -> dict[str, Any] | None:
    """The cached prior's record for `wanted`, when its weights are the ones it describes."""
    path = _cache_path(settings, wanted)
    try:
        record = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not _current(record, wanted) or not path.is_file():
        return None
    return record if fileio.sha256_file(path) == record.get("state_dict_sha256") else None


def _publish(source: Path, record: dict[str, Any], target: Path) -> None:
    """`source`'s weights at `target` (a hard link when possible), then the record (last)."""
    from hulk.corpus import link_or_copy

    link_or_copy(source, target)
    text = json.dumps(record, indent=2, sort_keys=True, allow_nan=False)
    fileio.write_text(target.with_suffix(".json"), text + "\n")


def _remember(settings: Settings, wanted: dict[str, Any], record: dict[str, Any]) -> None:
    """Add the prior at its path to the cache; keep the newest `CACHE_KEEP` entries."""
    target = _cache_path(settings, wanted)
    _publish(prior_path(settings), record, target)
    entries = sorted(
        target.parent.glob("*.json"), key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True
    )
    for old in entries[CACHE_KEEP:]:
        old.with_suffix(".pt").unlink(missing_ok=True)
        old.unlink(missing_ok=True)


def train_prior(settings: Settings, seed: int, rebuild: bool = False) -> dict[str, Any]:
    """The prior's record; trained on the corpus's train split (early-stopped on its val split)
    unless a current one is saved (and not `rebuild`). The record's ``reused`` says which."""
    import torch

    from hulk.corpus import load_corpus
    from hulk.train import train_model

    wanted = _wanted(settings, seed, _corpus_sha256(settings))
    if not rebuild:
        record = _record(settings)
        intact = record is not None and fileio.sha256_file(prior_path(settings)) == record.get(
            "state_dict_sha256"
        )
        if _current(record, wanted) and intact:
            assert record is not None
            if _cached(settings, wanted) is None:  # a prior saved before the cache existed
                _remember(settings, wanted, record)
            return {**record, "reused": True}
        # The same prior, trained for a corpus now elsewhere, or whose prior.pt was damaged
        # since: the cache's copy, checked against its own record, replaces it.
        cached = _cached(settings, wanted)
        if cached is not None:
            _publish(_cache_path(settings, wanted), cached, prior_path(settings))
            return {**cached, "reused": True}
    corpus = load_corpus(settings.corpus.path)
    result = train_model(corpus.train, corpus.val, settings.model, settings.train, seed)
    path = prior_path(settings)
    with fileio.atomic_path(path) as tmp, open(tmp, "wb") as handle:
        # A handle: the archive's folder is not named after tmp, so equal weights, equal bytes.
        torch.save({k: v.detach().cpu() for k, v in result.model.state_dict().items()}, handle)
    record = {
        **wanted,
        "config": result.config.to_dict(),
        "state_dict_sha256": fileio.sha256_file(path),
        "best_epoch": result.best_epoch,
        "epochs": len(result.history),
        "best_val_loss": result.best.val_loss,
        "best_val_accuracy": result.best.val_accuracy,
        "train_samples": len(corpus.train),
        "val_samples": len(corpus.val),
    }
    text = json.dumps(record, indent=2, sort_keys=True, allow_nan=False)
    fileio.write_text(path.with_suffix(".json"), text + "\n")
    _remember(settings, wanted, record)
    return {**record, "reused": False, "seconds": result.seconds}


def load_prior(settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model config, state dict) of the saved prior; `InputError` when there is none or its
    weights do not match their record."""
    import torch

    record = _record(settings)
    path = prior_path(settings)
    if record is None:
        raise InputError(path, "prior.exists", "no prior model: run `hulk stage prior` first")
    if fileio.sha256_file(path) != record.get("state_dict_sha256"):
        raise InputError(
            path,
            "prior.corrupt",
            "the weights do not match prior.json's sha256: run `hulk stage prior`, which takes "
            "the prior again from the data folder's cache or trains it anew",
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    return record["config"], state


def require_current_prior(settings: Settings, seed: int) -> None:
    """`InputError` (``prior.stale``) unless the saved prior was trained on the corpus with
    these model and train settings and this seed: a fine-tune from a prior of other settings
    would train another architecture than params.yaml asks for, without a word."""
    if not prior_is_current(settings, seed):
        raise InputError(
            prior_path(settings).with_suffix(".json"),
            "prior.stale",
            f"the prior was trained on another corpus, with other model or train settings or "
            f"another seed than params.yaml's (seed {seed}): run `hulk stage prior`",
        )


def run(
    settings: Settings, seed: int | None = None, rebuild: bool = False
) -> StepResult[PriorSummary]:
    """The prior step: train (or reuse) the prior; its record as the summary."""
    from hulk.stages import StepResult

    seed = settings.seed if seed is None else seed
    record = train_prior(settings, seed, rebuild)
    path = prior_path(settings)
    return StepResult(
        PriorSummary(
            reused=record.get("reused"),
            train_samples=record.get("train_samples"),
            val_samples=record.get("val_samples"),
            best_epoch=record.get("best_epoch"),
            epochs=record.get("epochs"),
            best_val_accuracy=record.get("best_val_accuracy"),
        ),
        outputs={"prior": path, "record": path.with_suffix(".json")},
    )
