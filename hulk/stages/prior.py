"""The prior step: the GNN trained on the synthetic corpus, built once and reused.

The prior knows generated fleets (`hulk.corpus`); each night the train step fine-tunes the
champion, or on the first night this prior, on the data folder's own fleet. It is written beside
the corpus:

    prior.pt    the state dict (``torch.load(weights_only=True)``: tensors only)
    prior.json  its record: model config, the corpus's sha256, the model / train settings and
                seed it was trained with, its epochs (written last: the step's record)

and reused while that record matches the corpus file and the settings.
"""

from __future__ import annotations

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
    record = _record(settings)
    if record is None:
        return False
    wanted = _wanted(settings, seed, _corpus_sha256(settings))
    return {key: record.get(key) for key in wanted} == wanted


def train_prior(settings: Settings, seed: int, rebuild: bool = False) -> dict[str, Any]:
    """The prior's record; trained on the corpus's train split (early-stopped on its val split)
    unless a current one is saved (and not `rebuild`). The record's ``reused`` says which."""
    import torch

    from hulk.corpus import load_corpus
    from hulk.train import train_model

    if not rebuild and prior_is_current(settings, seed):
        return {**(_record(settings) or {}), "reused": True}
    wanted = _wanted(settings, seed, _corpus_sha256(settings))
    corpus = load_corpus(settings.corpus.path)
    result = train_model(corpus.train, corpus.val, settings.model, settings.train, seed)
    path = prior_path(settings)
    with fileio.atomic_path(path) as tmp:
        torch.save({k: v.detach().cpu() for k, v in result.model.state_dict().items()}, tmp)
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
        raise InputError(path, "prior.corrupt", "the weights do not match prior.json's sha256")
    state = torch.load(path, map_location="cpu", weights_only=True)
    return record["config"], state


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
