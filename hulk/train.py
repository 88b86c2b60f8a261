r"""Training the Hulk GNN on teacher-labelled samples (`hulk.corpus`).

`train_model(train, val, model_settings, train_settings, seed)` builds a `HulkGNN` whose feature
widths come from the samples, sets its input scaling from the training samples, and minimises
the class-weighted cross-entropy over the ACTIVE machines of each mini-batch,

.. math::
    L = \frac{\sum_i w_{y_i}\, (-\log p_{i, y_i})}{\sum_i w_{y_i}}, \qquad
    w_{\text{idle}} = \texttt{idle\_weight}, \quad w_{\text{job}} = 1,

with Adam (``lr``, ``weight_decay``) on mini-batches of ``batch_size`` samples, gradients
clipped to norm ``grad_clip``. Drained machines are left out of the loss and of the accuracy:
they are idle by rule, never by prediction. ``idle_weight: balanced`` makes the idle machines
weigh as much in total as the assigned ones, :math:`w_{\text{idle}} = N_{\text{job}} /
N_{\text{idle}}` over the training labels.

**Epochs and early stopping.** After every epoch the model is evaluated (eval mode, no
dropout) on the training and validation samples: loss (same weights) and node accuracy. The
best epoch is the one with the lowest validation loss (training loss when there are no
validation samples); training stops after ``patience`` epochs without a better one, or after
``epochs``, and the best epoch's weights are returned. A warm start (``initial``: the nightly
fine-tune from the champion or the prior) is evaluated first as epoch 0 and kept when no
epoch improves on it. ``on_epoch(epoch, metrics)`` is called
after each epoch (1-based) with ``train_loss``, ``val_loss``, ``train_accuracy``,
``val_accuracy`` and ``seconds`` (so a tracker can log them as they come).

**Determinism.** For a seed on CPU the result is identical run after run: torch's RNG is seeded
inside a forked RNG state (the caller's is left as it was), deterministic algorithms are on,
the thread count is fixed (``threads``), and the sample order of each epoch comes from a numpy
Generator seeded with the same seed. Global torch settings are restored afterwards.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from hulk.model import (
    HulkGNN,
    ModelConfig,
    batch_targets,
    check_sample,
    make_batch,
    sample_data,
)
from hulk.pyg import Data
from hulk.settings import ModelSettings, TrainSettings

EVAL_BATCH = 32  # samples per forward pass when evaluating (no gradients)

EpochCallback = Callable[[int, dict[str, float]], None]


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int  # 1-based
    train_loss: float  # evaluated after the epoch (eval mode), not the running batch mean
    val_loss: float  # NaN without validation samples
    train_accuracy: float  # active machines whose most likely class is their label
    val_accuracy: float
    seconds: float  # wall-clock time of the epoch, evaluation included

    def metrics(self) -> dict[str, float]:
        """The numbers without the epoch: what `on_epoch` receives."""
        values = asdict(self)
        del values["epoch"]
        return values


@dataclass
class TrainResult:
    model: HulkGNN  # the best epoch's weights, in eval mode
    config: ModelConfig
    history: list[EpochMetrics]
    best_epoch: int
    idle_weight: float  # the weight actually used (resolved when "balanced")
    stopped_early: bool
    seconds: float

    @property
    def best(self) -> EpochMetrics:
        return next(m for m in self.history if m.epoch == self.best_epoch)


def model_config(samples: Sequence[Mapping[str, Any]], settings: ModelSettings) -> ModelConfig:
    """The model's config: widths from the first sample, shape from the settings."""
    first = samples[0]
    config = ModelConfig(
        node_features=int(first["x"].shape[1]),
        edge_features=int(first["edge_attr"].shape[1]),
        job_features=int(first["jobs"].shape[1]),
        hidden=settings.hidden,
        layers=settings.layers,
        conv=settings.conv,
        heads=settings.heads,
        dropout=settings.dropout,
        neighbours=settings.neighbours,
    )
    for sample in samples:
        check_sample(config, sample)
    return config


def resolve_idle_weight(samples: Sequence[Mapping[str, Any]], setting: str | float) -> float:
    """`idle_weight` as a number: "balanced" → assigned / idle active machines (1 if none)."""
    if setting != "balanced":
        return float(setting)
    idle = assigned = 0
    for sample in samples:
        y, active = sample["y"], _active(sample)
        is_idle = y == len(sample["jobs"])
        idle += int((is_idle & active).sum())
        assigned += int((~is_idle & active).sum())
    return assigned / idle if idle and assigned else 1.0


def _active(sample: Mapping[str, Any]) -> Tensor:
    if "active" in sample:
        return sample["active"].bool()
    return torch.ones(len(sample["x"]), dtype=torch.bool)


def _batch_loss(
    model: HulkGNN, data: Sequence[Data], idle_weight: float
) -> tuple[Tensor, float, int, int]:
    """Weighted loss of one batch, its total weight, correct and counted active machines."""
    batch = make_batch(data)
    logits = model(batch)
    target = batch_targets(batch)
    active = batch.active
    logits, target = logits[active], target[active]
    idle = logits.shape[1] - 1
    weight = torch.where(target == idle, idle_weight, 1.0)
    per_node = F.cross_entropy(logits, target, reduction="none")
    total_weight = float(weight.sum())
    loss = (weight * per_node).sum() / max(total_weight, 1e-12)
    correct = int((logits.argmax(1) == target).sum())
    return loss, total_weight, correct, int(active.sum())


def _chunks(items: Sequence[Data], size: int) -> Iterator[Sequence[Data]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@torch.no_grad()
def _evaluate(model: HulkGNN, data: Sequence[Data], idle_weight: float) -> tuple[float, float]:
    """(weighted loss, node accuracy) over active machines; (NaN, NaN) without samples."""
    was_training = model.training
    model.eval()
    loss_sum = weight_sum = 0.0
    correct = counted = 0
    try:
        for chunk in _chunks(data, EVAL_BATCH):
            loss, weight, right, count = _batch_loss(model, chunk, idle_weight)
            loss_sum += float(loss) * weight
            weight_sum += weight
            correct += right
            counted += count
    finally:
        model.train(was_training)
    mean_loss = loss_sum / weight_sum if weight_sum else math.nan
    return mean_loss, (correct / counted if counted else math.nan)


def node_accuracy(model: HulkGNN, samples: Sequence[Mapping[str, Any]]) -> float:
    """Share of active machines (over all samples) whose most likely class is their label."""
    return _evaluate(model, [sample_data(s) for s in samples], 1.0)[1]


def _deterministic_algorithms(mode: bool) -> None:
    """`torch.use_deterministic_algorithms(mode)` as eager code sees it. The public call also
    sets the flag of ``torch.compile``'s code generator (``torch._inductor.config``), whose
    first import loads the whole compiler stack (about 1.5 s of CPU, more than an assignment's
    model work); Hulk compiles nothing, so until that stack is loaded by someone else only the
    eager flag is set, the same call the public one makes."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=False)


@contextmanager
def deterministic_torch(seed: int, threads: int) -> Iterator[None]:
    """Seeded, deterministic, fixed-thread torch on CPU; global torch state restored after."""
    threads_before = torch.get_num_threads()
    deterministic_before = torch.are_deterministic_algorithms_enabled()
    fill_before = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.set_num_threads(threads)
    _deterministic_algorithms(True)
    # Filling every new tensor with NaN (a debugging aid of deterministic mode) costs time and
    # changes no result: nothing here reads memory it has not written.
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill_before  # type: ignore[attr-defined]
        _deterministic_algorithms(deterministic_before)
        torch.set_num_threads(threads_before)


def train_model(
    train: Sequence[Mapping[str, Any]],
    val: Sequence[Mapping[str, Any]],
    model_settings: ModelSettings,
    train_settings: TrainSettings,
    seed: int,
    on_epoch: EpochCallback | None = None,
    initial: tuple[Mapping[str, Any], Mapping[str, Tensor]] | None = None,
) -> TrainResult:
    """Train a `HulkGNN` on `train`, early-stopped on `val` (see the module docstring).

    `initial` = (config, state dict) warm-starts from a trained model (the nightly fine-tune):
    its architecture and input scaling are kept, `model_settings` are not used.
    """
    if not train:
        raise ValueError("train_model needs at least one training sample")
    started = time.perf_counter()
    if initial is None:
        config = model_config([*train, *val], model_settings)
    else:
        config = ModelConfig.from_dict(initial[0])
        for sample in [*train, *val]:
            check_sample(config, sample)
    idle_weight = resolve_idle_weight(train, train_settings.idle_weight)
    train_data = [sample_data(s) for s in train]
    val_data = [sample_data(s) for s in val]
    order_rng = np.random.default_rng(seed)

    with deterministic_torch(seed, train_settings.threads):
        model = HulkGNN(config)
        if initial is None:
            model.fit_scaling(train)
        else:
            model.load_state_dict(dict(initial[1]))
        optimizer = torch.optim.Adam(
            model.parameters(), lr=train_settings.lr, weight_decay=train_settings.weight_decay
        )
        history: list[EpochMetrics] = []
        best_epoch, best_loss = -1, math.inf
        best_state = copy.deepcopy(model.state_dict())
        stopped_early = False

        def finished_epoch(epoch: int, epoch_start: float) -> bool:
            """Record an epoch; True when the best one so far."""
            nonlocal best_epoch, best_loss, best_state
            train_loss, train_acc = _evaluate(model, train_data, idle_weight)
            val_loss, val_acc = _evaluate(model, val_data, idle_weight)
            metrics = EpochMetrics(
                epoch=epoch,
                train_loss=train_loss,
                val_loss=val_loss,
                train_accuracy=train_acc,
                val_accuracy=val_acc,
                seconds=time.perf_counter() - epoch_start,
            )
            history.append(metrics)
            if on_epoch is not None:
                on_epoch(epoch, metrics.metrics())
            score = val_loss if val_data else train_loss
            if score < best_loss:
                best_epoch, best_loss = epoch, score
                best_state = copy.deepcopy(model.state_dict())
                return True
            return False

        if initial is not None:  # epoch 0: the starting model, kept if no epoch beats it
            finished_epoch(0, time.perf_counter())
        for epoch in range(1, train_settings.epochs + 1):
            epoch_start = time.perf_counter()
            model.train()
            order = order_rng.permutation(len(train_data))
            for start in range(0, len(order), train_settings.batch_size):
                chunk = [train_data[i] for i in order[start : start + train_settings.batch_size]]
                loss, weight, _, _ = _batch_loss(model, chunk, idle_weight)
                if weight == 0:  # only drained machines in this batch
                    continue
                optimizer.zero_grad()
                loss.backward()
                if train_settings.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), train_settings.grad_clip)
                optimizer.step()

            if not finished_epoch(epoch, epoch_start) and (
                epoch - max(best_epoch, 0) >= train_settings.patience
            ):
                stopped_early = True
                break

        if best_epoch < 0:  # every loss was NaN: keep the last weights, say so in best_epoch
            best_epoch = history[-1].epoch
            best_state = copy.deepcopy(model.state_dict())
        model.load_state_dict(best_state)
        model.eval()

    return TrainResult(
        model=model,
        config=config,
        history=history,
        best_epoch=best_epoch,
        idle_weight=idle_weight,
        stopped_early=stopped_early,
        seconds=time.perf_counter() - started,
    )
