"""GNN training (hulk.train): it learns, it is deterministic, it reports every epoch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hulk.errors import ConfigError
from hulk.model import predict_proba
from hulk.settings import ModelSettings, TrainSettings, settings_from_dict
from hulk.train import (
    TrainResult,
    node_accuracy,
    resolve_idle_weight,
    train_model,
)
from tests.model.test_model import synthetic_sample

MODEL = ModelSettings(hidden=16, layers=1, dropout=0.0)
# 20 epochs: the model of `trained` is at its best by the 10th (97–99% accurate) and only
# overfits after; 40 took twice the time for the same checks.
TRAIN = TrainSettings(epochs=20, batch_size=4, lr=0.01, patience=40, threads=1)


def learnable_sample(seed: int) -> dict:
    """Label: job 0 when feature 0 is positive, else idle (drained machines idle)."""
    rng = np.random.default_rng(seed)
    sample = synthetic_sample(
        int(rng.integers(8, 20)), int(rng.integers(1, 4)), seed=seed, drained=2
    )
    jobs = len(sample["jobs"])
    y = torch.where(sample["x"][:, 0] > 0, 0, jobs)
    sample["y"] = torch.where(sample["active"], y, jobs)
    return sample


@pytest.fixture(scope="module")
def task() -> tuple[list[dict], list[dict]]:
    return [learnable_sample(s) for s in range(48)], [learnable_sample(s) for s in range(100, 106)]


@pytest.fixture(scope="module")
def trained(task: tuple[list[dict], list[dict]]) -> TrainResult:
    train, val = task
    return train_model(train, val, MODEL, TRAIN, seed=3)


def test_training_learns_a_simple_rule(trained: TrainResult, task) -> None:
    train, val = task
    history = trained.history
    assert history[-1].train_loss < 0.5 * history[0].train_loss
    assert trained.best.val_accuracy > 0.9
    assert node_accuracy(trained.model, val) == pytest.approx(trained.best.val_accuracy)
    assert node_accuracy(trained.model, train) > 0.9


def test_node_accuracy_counts_active_machines_by_their_most_likely_class(trained, task) -> None:
    _, val = task
    right = counted = 0
    for sample in val:
        predicted = predict_proba(trained.model, sample).argmax(1)
        active = sample["active"]
        right += int((predicted[active] == sample["y"][active]).sum())
        counted += int(active.sum())
    assert node_accuracy(trained.model, val) == pytest.approx(right / counted)


def test_best_epoch_has_the_lowest_validation_loss(trained: TrainResult) -> None:
    losses = [m.val_loss for m in trained.history]
    assert trained.best_epoch == 1 + int(np.argmin(losses))
    assert trained.best.val_loss == min(losses)
    assert not trained.model.training


def test_same_seed_same_weights_other_seed_other_weights(task) -> None:
    train, val = task
    settings = TRAIN.model_copy(update={"epochs": 3})
    first = train_model(train, val, MODEL, settings, seed=11)
    again = train_model(train, val, MODEL, settings, seed=11)
    other = train_model(train, val, MODEL, settings, seed=12)
    state, state_again = first.model.state_dict(), again.model.state_dict()
    assert state.keys() == state_again.keys()
    assert all(torch.equal(state[k], state_again[k]) for k in state)
    assert [m.train_loss for m in first.history] == [m.train_loss for m in again.history]
    assert not all(torch.equal(state[k], other.model.state_dict()[k]) for k in state)


@pytest.mark.slow
def test_dropout_and_two_threads_stay_deterministic(task) -> None:
    train, val = task
    model = ModelSettings(hidden=16, layers=2, dropout=0.3)
    settings = TRAIN.model_copy(update={"epochs": 2, "threads": 2})
    first = train_model(train[:12], val, model, settings, seed=5).model.state_dict()
    again = train_model(train[:12], val, model, settings, seed=5).model.state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_training_leaves_global_torch_state_as_it_was(task) -> None:
    train, val = task
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_model(train[:4], val[:2], MODEL, TRAIN.model_copy(update={"epochs": 1}), seed=1)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()


def test_on_epoch_gets_every_epochs_metrics(task) -> None:
    train, val = task
    seen: list[tuple[int, dict]] = []
    result = train_model(
        train[:8],
        val,
        MODEL,
        TRAIN.model_copy(update={"epochs": 3}),
        seed=0,
        on_epoch=lambda epoch, metrics: seen.append((epoch, metrics)),
    )
    assert [epoch for epoch, _ in seen] == [1, 2, 3]
    assert set(seen[0][1]) == {
        "train_loss",
        "val_loss",
        "train_accuracy",
        "val_accuracy",
        "seconds",
    }
    assert seen[-1][1] == result.history[-1].metrics()


def test_early_stopping_keeps_the_best_epoch(task) -> None:
    train, val = task
    # A learning rate this large makes the validation loss wander: patience 2 stops it early.
    settings = TRAIN.model_copy(update={"epochs": 30, "patience": 2, "lr": 0.5})
    result = train_model(train, val, MODEL, settings, seed=0)
    if result.stopped_early:
        assert len(result.history) == result.best_epoch + settings.patience
    else:
        assert len(result.history) == settings.epochs
    losses = [m.val_loss for m in result.history]
    assert result.best.val_loss == min(losses)


def test_without_validation_samples_the_training_loss_decides(task) -> None:
    train, _ = task
    result = train_model(train[:6], [], MODEL, TRAIN.model_copy(update={"epochs": 3}), seed=0)
    assert all(math.isnan(m.val_loss) for m in result.history)
    losses = [m.train_loss for m in result.history]
    assert result.best.train_loss == min(losses)


def test_config_widths_come_from_the_samples(trained: TrainResult, task) -> None:
    train, _ = task
    assert trained.config.node_features == train[0]["x"].shape[1]
    assert trained.config.job_features == train[0]["jobs"].shape[1]
    assert trained.config.hidden == MODEL.hidden


def test_balanced_idle_weight() -> None:
    sample = synthetic_sample(6, 2, drained=1)
    sample["y"] = torch.tensor([0, 1, 2, 2, 2, 2])
    sample["active"] = torch.tensor([True, True, True, True, True, False])
    # Active: 2 assigned, 3 idle (the drained machine does not count).
    assert resolve_idle_weight([sample], "balanced") == pytest.approx(2 / 3)
    assert resolve_idle_weight([sample], 0.5) == 0.5


def test_mismatched_sample_widths_are_an_error(task) -> None:
    train, val = task
    bad = {**val[0], "jobs": torch.zeros(2, 7)}
    with pytest.raises(ValueError, match="jobs"):
        train_model(train[:2], [bad], MODEL, TRAIN, seed=0)


def test_gat_heads_must_divide_hidden_in_params() -> None:
    with pytest.raises(ConfigError, match="multiple of heads"):
        settings_from_dict({"model": {"conv": "gat", "hidden": 30, "heads": 4}})
    assert settings_from_dict({"train": {"idle_weight": 2}}).train.idle_weight == 2


def test_warm_start_is_epoch_zero_deterministic_and_kept_when_nothing_beats_it(task) -> None:
    train, val = task
    start = train_model(train, val, MODEL, TRAIN.model_copy(update={"epochs": 3}), seed=4)
    initial = (start.config.to_dict(), start.model.state_dict())
    settings = TRAIN.model_copy(update={"epochs": 3, "lr": 0.001})
    first = train_model(train, val, MODEL, settings, seed=9, initial=initial)
    again = train_model(train, val, MODEL, settings, seed=9, initial=initial)
    # Epoch 0 is the starting model itself, evaluated before any step.
    assert first.history[0].epoch == 0
    assert first.history[0].val_loss == pytest.approx(
        min(m.val_loss for m in start.history if m.epoch == start.best_epoch)
    )
    state, state_again = first.model.state_dict(), again.model.state_dict()
    assert all(torch.equal(state[k], state_again[k]) for k in state)
    # The starting scaling is kept (not refitted on the new samples).
    assert torch.equal(state["x_mean"], initial[1]["x_mean"])
    # A learning rate that only makes it worse: the starting weights come back.
    harmful = TRAIN.model_copy(update={"epochs": 2, "lr": 10.0, "grad_clip": 0.0})
    kept = train_model(train, val, MODEL, harmful, seed=9, initial=initial)
    assert kept.best_epoch == 0 and kept.best.val_loss < kept.history[-1].val_loss
    kept_state = kept.model.state_dict()
    assert all(torch.equal(kept_state[k], initial[1][k]) for k in kept_state)
