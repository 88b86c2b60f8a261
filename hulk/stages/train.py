"""The train step: the nightly fine-tune on the fleet's own samples, the gate, the registry.

1. **Warm start** from the champion, or from the prior (`hulk.stages.prior`) on the first night
   or when the champion's architecture differs from the prior's (the model settings changed).
2. **Fine-tune** (`hulk.train.train_model`, params ``finetune:``) on the fleet's training samples
   (`hulk.stages.fleet_labels`) plus ``replay`` × as many corpus training samples, early-stopped
   on the fleet's validation samples; the starting model is epoch 0 and kept if no epoch beats it.
3. **One evaluation set** for tonight: the fleet's held-out samples (the newest days, never
   trained on) and the corpus's test split (fixed while the corpus is). Its content hash (the
   label keys of the fleet part, the corpus file's sha256 for the synthetic part) is recorded
   on the run and, with each model's figures, on both versions. The challenger and the
   reference (the champion, re-evaluated tonight; on the first night the prior) are scored on
   it (the reference on its own plans only): ``gate/score`` is the mean of the two parts'
   plan-cost ratios of the model's own plans (GNN makespan before the refining search /
   teacher makespan, lower is better), so the fleet's own samples weigh as much as the
   synthetic ones. The challenger's served plans' ratios (after the refining search small
   fleets get) are logged beside them but do not decide: on a small fleet the search brings
   nearly every mix to within a few percent of the teacher whatever the model, and which
   held-out mix it happens to improve decided the gate, not what the model had learnt
   (docs/experiments.md, "Fleet learning"). The fleet part holds ``fleet_samples.eval_mixes``
   mixes and the upcoming jobs: with 6, one mix's luck still decided, on the model's own
   plans too.
4. **Register** the challenger in MLflow and **promote** it if its ``gate/score`` is not worse
   than the champion's on the same set (`hulk.registry.promote_if_better`). With no champion
   yet the prior is the bar: when the fine-tune scores worse, the prior is registered first
   (a run named ``v1 prior``) and becomes the champion, and the fine-tune is refused against it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hulk import fileio
from hulk.data_folder import (
    LEARNING_CURVE_CSV,
    LEARNING_CURVES_PNG,
    TRAINING_DIR,
    load_fleet,
    model_graph,
)
from hulk.settings import Settings
from hulk.stages import StepResult, Summary


@dataclass(frozen=True)
class TrainSummary(Summary):
    version: int  # the registered model version
    run_id: str  # its MLflow run
    start: str  # what fine-tuning started from (prior or champion)
    promoted: bool
    decision: str  # why it was promoted or not
    eval_set: str  # the evaluation set's hash, shortened
    samples: dict[str, int]  # the fleet's samples per role
    metrics: dict[str, float]  # the run's metrics, rounded

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "run_id": self.run_id,
            "start": self.start,
            "promoted": self.promoted,
            "decision": self.decision,
            "eval_set": self.eval_set,
            **{f"{role}_samples": count for role, count in self.samples.items()},
            **self.metrics,
        }


if TYPE_CHECKING:
    from torch_geometric.data import Data

    from hulk.cost import Fleet
    from hulk.registry import TrainingData

GATE_METRIC = "gate/score"
PARTS = ("fleet", "synthetic")  # the evaluation set's parts
# The evaluation's names (`hulk.gnn_eval`) as logged: shorter, grouped under `test/`.
_SHORT = {
    "plan_cost_ratio_makespan": "makespan_ratio",
    "plan_cost_ratio_model": "model_makespan_ratio",
    "plan_cost_ratio_sum": "sum_ratio",
}
# Fleet-size bands (`hulk.gnn_eval.SIZE_BANDS`) named so that they sort in size order.
_BANDS = {"le50": "001-050", "51to100": "051-100", "101to200": "101-200", "gt200": "201-more"}
# The figures of a model's own decisions, before the refining search (`own_figures`).
OWN_FIGURES = ("samples", "node_accuracy", "plan_cost_ratio_model")
# The per-epoch figures (`hulk.train`) as logged.
EPOCH_NAMES = {
    "train_loss": "train/loss",
    "val_loss": "train/val_loss",
    "train_accuracy": "train/accuracy",
    "val_accuracy": "train/val_accuracy",
    "seconds": "train/epoch_seconds",
}


def part_ratio(part: str) -> str:
    """The name of an evaluation part's plan-cost ratio of the served plans (GNN makespan /
    teacher makespan)."""
    return f"test/{part}/makespan_ratio"


def part_model_ratio(part: str) -> str:
    """The name of an evaluation part's plan-cost ratio of the model's own plans (before the
    refining search): what the gate scores."""
    return f"test/{part}/model_makespan_ratio"


def run_metric_name(key: str) -> str:
    """The training run's name of an evaluation figure (`hulk.gnn_eval`).

    Names are grouped with ``/`` as the MLflow UI groups its charts (one section per prefix,
    sections in alphabetical order): ``test/makespan_ratio`` (the whole evaluation set),
    ``test/fleet/...`` and ``test/synthetic/...`` (its parts), ``test/by_size/001-050/speedup``
    (by fleet size). The gate's score is ``gate/score``, the first section.
    """
    head, _, last = key.rpartition("/")
    if head:  # "<part>/<figure>"
        return f"test/{head}/{_SHORT.get(last, last)}"
    for band, label in _BANDS.items():
        if key.endswith(f"_{band}"):
            figure = key.removesuffix(f"_{band}")
            return f"test/by_size/{label}/{_SHORT.get(figure, figure)}"
    return f"test/{_SHORT.get(key, key)}"


def run_metrics(evaluation: dict[str, float]) -> dict[str, float]:
    """A model's evaluation figures under their run names, with its ``gate/score``."""
    named = {run_metric_name(key): value for key, value in evaluation.items()}
    named[GATE_METRIC] = gate_score(named)
    return named


def _cases(labelled: list, role: str) -> list:
    from hulk.gnn_eval import EvalCase

    cases = []
    for sample in labelled:
        if sample.role != role:
            continue
        active = (sample.inventory.sort_values("node_id")["status"] == "active").to_numpy(bool)
        cases.append(
            EvalCase(
                sample.inventory,
                sample.links,
                list(sample.jobs),
                y=np.asarray(sample.label["y"], dtype=np.int64),
                active=active,
                makespan_s=float(sample.label["makespan_s"]),
                sum_s=float(sample.label["sum_s"]),
                teacher_seconds=float(sample.label["teacher_seconds"]),
                fleet=(sample.snapshot_file, sample.removed, sample.drained),
            )
        )
    return cases


def without_refining(settings: Settings) -> Settings:
    """The settings with the GNN strategy's refining search off: the model's own plans only."""
    assign = settings.assign.model_copy(update={"gnn_refine_evaluations": 0})
    return settings.model_copy(update={"assign": assign})


def own_figures(evaluation: dict[str, float]) -> dict[str, float]:
    """The figures of the model's own decisions (`hulk.gnn_eval` names), what the reference
    model is scored on tonight: its served plans' figures would need the refining search, which
    takes most of an evaluation's time (about 80 % on the default fleet), and decide nothing."""
    return {key: v for key, v in evaluation.items() if key.rpartition("/")[2] in OWN_FIGURES}


def eval_set_hash(fleet_keys: list[str], corpus_sha256: str) -> str:
    """The content hash of an evaluation set: the fleet part's label keys, the corpus file."""
    text = "\n".join(["fleet", *sorted(fleet_keys), "synthetic test split", corpus_sha256])
    return hashlib.sha256(text.encode()).hexdigest()


def gate_score(metrics: dict[str, float]) -> float:
    """The mean of the parts' plan-cost ratios of the model's own plans (a part without a
    finite one is left out); `metrics` by their run names (`run_metric_name`)."""
    parts = [metrics.get(part_model_ratio(part), math.nan) for part in PARTS]
    finite = [value for value in parts if math.isfinite(value)]
    return float(np.mean(finite)) if finite else math.nan


def finetune(
    data_dir: Path,
    settings: Settings,
    seed: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> StepResult[TrainSummary]:
    """Fine-tune, evaluate, register, promote (module docstring). `progress(epoch, epochs)`
    is called after each epoch."""
    from hulk.corpus import load_corpus
    from hulk.fleet_labels import training_sample
    from hulk.gnn_eval import corpus_cases, evaluate_parts
    from hulk.model import model_from_state
    from hulk.registry import (
        champion_exists,
        load_model_files,
        log_training_run,
        record_evaluation,
        require_reachable,
        unfit_version,
    )
    from hulk.stages.fleet_labels import load_labelled
    from hulk.stages.prior import load_prior, prior_path, require_current_prior
    from hulk.train import deterministic_torch, train_model

    require_reachable(settings)  # before the epochs, not when their run is logged
    seed = settings.seed if seed is None else seed
    corpus = load_corpus(settings.corpus.path)
    require_current_prior(settings, seed)
    prior_config, prior_state = load_prior(settings)
    labelled = load_labelled(data_dir, settings)
    upcoming = [s for s in labelled if s.role == "eval" and s.variant == "upcoming"]
    # The pictures of tonight's fleet need the graph step's output: read before training, so
    # that a folder without it fails at once rather than after the epochs.
    current = CurrentFleet.load(data_dir, settings) if upcoming else None

    reference_name, reference = "prior", (prior_config, prior_state)
    start_name, start = "prior", reference
    if champion_exists(settings):
        state, config, info = load_model_files(settings)
        try:  # before the epochs, not when the champion is scored after them
            model_from_state(config, state)
        except ValueError as exc:
            raise unfit_version(info, exc) from None
        reference_name, reference = "champion", (config, state)
        if config == prior_config:  # same architecture: warm start from the champion
            start_name, start = f"champion v{info.version}", (config, state)

    def samples(role: str) -> list[dict[str, Any]]:
        return [
            training_sample(s.inventory, s.links, s.jobs, s.label, settings)
            for s in labelled
            if s.role == role
        ]

    fleet_train, fleet_val = samples("train"), samples("val")
    replay_count = min(len(corpus.train), round(settings.finetune.replay * len(fleet_train)))
    picked = np.random.default_rng([seed, 0x5245504C]).choice(
        len(corpus.train), size=replay_count, replace=False
    )
    replay = [corpus.train[i] for i in sorted(picked.tolist())]
    train_settings = settings.train.model_copy(
        update={
            "epochs": settings.finetune.epochs,
            "lr": settings.finetune.lr,
            "patience": settings.finetune.patience,
        }
    )
    history: list[dict] = []

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        history.append({"epoch": epoch, **metrics})
        if progress is not None:
            progress(epoch, train_settings.epochs)

    result = train_model(
        [*fleet_train, *replay],
        fleet_val,
        settings.model,
        train_settings,
        seed,
        on_epoch=on_epoch,
        initial=start,
    )

    fleet_eval = [s for s in labelled if s.role == "eval"]
    parts = {"fleet": _cases(labelled, "eval"), "synthetic": corpus_cases(corpus, settings)}
    eval_set = eval_set_hash([s.key for s in fleet_eval], corpus.manifest["sha256"])
    # Evaluated (and timed against the teacher) with the training's thread count: the
    # teacher labels ran single-threaded, and two threads stall on a busy machine.
    with deterministic_torch(seed, settings.train.threads):
        metrics = run_metrics(evaluate_parts(result.model, parts, settings))
        reference_model = model_from_state(*reference)
        reference_metrics = run_metrics(
            own_figures(evaluate_parts(reference_model, parts, without_refining(settings)))
        )
    metrics.update(
        {
            "train/seconds": result.seconds,
            "train/best_epoch": float(result.best_epoch),
            "train/best_val_accuracy": result.best.val_accuracy,
        }
    )
    gate_keys = (
        GATE_METRIC,
        *(name(part) for part in PARTS for name in (part_model_ratio, part_ratio)),
    )
    for key in gate_keys:  # tonight's reference beside the challenger: gate/score_champion…
        if key in reference_metrics:
            metrics[f"{key}_{reference_name}"] = reference_metrics[key]

    plots_dir = data_dir / TRAINING_DIR
    plots_dir.mkdir(parents=True, exist_ok=True)
    curve = learning_curve_plot(history, plots_dir / LEARNING_CURVES_PNG)
    curve_data = plots_dir / LEARNING_CURVE_CSV
    fileio.write_csv(curve_data, pd.DataFrame(history))
    artifacts = {"plots/learning_curves.png": curve}
    if current is not None:
        artifacts.update(
            current_fleet_plots(result.model, current, list(upcoming[0].jobs), settings, seed)
        )

    def figures(values: dict[str, float]) -> dict[str, float]:
        return {key: values[key] for key in gate_keys if key in values}

    if reference_name == "prior" and _worse(metrics, reference_metrics):
        # No champion yet: the prior is the bar, as the champion is on later nights. A
        # fine-tune that scores worse does not serve; the prior does, as a version of its own
        # (registered first: the fine-tune stays tonight's challenger).
        kept = log_training_run(
            settings,
            params={"model": prior_config, "seed": seed, "start": "prior", "eval_set": eval_set},
            history=[],
            metrics=reference_metrics,
            state_dict=prior_state,
            config=prior_config,
            tags={"hulk.eval_set": eval_set, "hulk.start": "prior"},
            run_name="prior",
            datasets=_training_data(settings, corpus.manifest["sha256"], [])[:1],  # the corpus
        )
        decide(
            settings,
            kept,
            eval_set,
            figures(reference_metrics),
            lambda made: prior_description(reference_metrics, metrics, made),
            name=f"v{kept.version} prior",
        )
    counts = {role: sum(s.role == role for s in labelled) for role in ("train", "val", "eval")}
    registered = log_training_run(
        settings,
        params={
            "model": result.config.to_dict(),
            "finetune": settings.finetune.model_dump(mode="json"),
            "fleet_samples": settings.fleet_samples.model_dump(mode="json"),
            "corpus": settings.corpus.model_dump(mode="json"),
            "seed": seed,
            "start": start_name,
            "fleet_samples_by_role": counts,
            "replayed_corpus_samples": len(replay),
            "eval_set": eval_set,
        },
        history=[
            {EPOCH_NAMES.get(key, key): value for key, value in row.items()} for row in history
        ],
        metrics=metrics,
        state_dict=result.model.state_dict(),
        config=result.config.to_dict(),
        artifacts=artifacts,
        tags={"hulk.eval_set": eval_set, "hulk.start": start_name},
        run_name=f"finetune-seed{seed}",
        datasets=_training_data(settings, corpus.manifest["sha256"], labelled),
        seconds_key=EPOCH_NAMES["seconds"],
    )

    if reference_name == "champion":
        record_evaluation(settings, info.version, eval_set, figures(reference_metrics))
    decision = decide(
        settings,
        registered,
        eval_set,
        figures(metrics),
        lambda made: run_description(metrics, reference_name, made),
        name=f"v{registered.version} fine-tune from {start_name}",
    )
    return StepResult(
        outputs={
            "prior": prior_path(settings),
            "learning_curves": curve,
            "learning_curve_data": curve_data,
            **{Path(name).stem: path for name, path in artifacts.items()},
        },
        summary=TrainSummary(
            version=registered.version,
            run_id=registered.run_id,
            start=start_name,
            promoted=decision.promoted,
            decision=decision.reason,
            eval_set=eval_set[:12],
            samples=counts,
            metrics={k: round(v, 4) for k, v in metrics.items()},
        ),
    )


def decide(
    settings: Settings,
    version: Any,
    eval_set: str,
    figures: dict[str, float],
    description: Callable[[Any], str],
    name: str,
) -> Any:
    """Record a registered version's figures on tonight's set, promote it if it does at least
    as well as the champion, and describe and name its run by the decision."""
    from hulk.registry import describe_run, promote_if_better, record_evaluation

    record_evaluation(settings, version.version, eval_set, figures)
    decision = promote_if_better(settings, version, eval_set, metric=GATE_METRIC)
    describe_run(settings, version.run_id, description(decision), name=name)
    return decision


def _worse(metrics: dict[str, float], reference: dict[str, float]) -> bool:
    """Whether the challenger's gate figure is worse than a finite one of the reference's."""
    ours, theirs = metrics.get(GATE_METRIC, math.nan), reference.get(GATE_METRIC, math.nan)
    return math.isfinite(theirs) and not (math.isfinite(ours) and ours <= theirs)


def prior_description(prior: dict[str, float], finetune: dict[str, float], decision: Any) -> str:
    """The description of the prior's own run, registered when it beat the first fine-tune."""
    verdict = "promoted to champion" if decision.promoted else "not promoted"
    return (
        f"The prior (trained on the generated corpus), registered on the first night because "
        f"tonight's fine-tune scored worse on the evaluation set: **{GATE_METRIC} "
        f"{prior.get(GATE_METRIC, math.nan):.4g}** against the fine-tune's "
        f"{finetune.get(GATE_METRIC, math.nan):.4g} (lower is better): {verdict} "
        f"({decision.reason}). Later nights fine-tune from it."
    )


def run_description(metrics: dict[str, float], reference: str, decision: Any) -> str:
    """The training run's description (markdown, the top of its page in the MLflow UI): the
    gate's figures first, then the evaluation's headline."""

    def value(key: str) -> str:
        figure = metrics.get(key, math.nan)
        return f"{figure:.4g}" if math.isfinite(figure) else "n/a"

    verdict = "promoted to champion" if decision.promoted else "not promoted"
    lines = [
        f"**{GATE_METRIC} {value(GATE_METRIC)}** against the {reference}'s "
        f"{value(f'{GATE_METRIC}_{reference}')} on tonight's evaluation set (lower is better): "
        f"{verdict} ({decision.reason}).",
        "",
        "| figure | this model | " + reference + " |",
        "|---|---:|---:|",
    ]
    for part in PARTS:  # the reference is scored on its own plans only
        key = part_model_ratio(part)
        lines.append(f"| {key} | {value(key)} | {value(f'{key}_{reference}')} |")
        lines.append(f"| {part_ratio(part)} | {value(part_ratio(part))} | |")
    for key in ("test/node_accuracy", "test/fallback_rate", "test/speedup"):
        lines.append(f"| {key} | {value(key)} | |")
    lines += [
        "",
        "Makespan ratio: GNN makespan / teacher makespan; model_: the model's own plans, which "
        "the gate scores; without it: as served, after the refining search on small fleets. "
        "All figures: Model metrics.",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class CurrentFleet:
    """The data folder's fleet as assign gives it to the model, and where its pictures go."""

    fleet: Fleet
    inventory: pd.DataFrame
    links: pd.DataFrame
    graph: Data
    plots_dir: Path

    @classmethod
    def load(cls, data_dir: Path, settings: Settings) -> CurrentFleet:
        fleet, inventory, links = load_fleet(data_dir, settings)
        graph = model_graph(data_dir, settings)  # the graph step's tensors of this fleet
        return cls(fleet, inventory, links, graph, data_dir / TRAINING_DIR)


def current_fleet_plots(
    model, current: CurrentFleet, jobs: list, settings: Settings, seed: int
) -> dict[str, Path]:
    """The trained model's placements of the upcoming jobs on the current fleet, as pictures:
    the fleet map coloured by job and the compute / communication bars against A, B, C.

    After a fallback the pictures show the teacher's placements, and their titles say so.
    """
    from hulk.gnn import model_placements
    from hulk.plots import cost_bars, fleet_map

    fleet, inventory, plots_dir = current.fleet, current.inventory, current.plots_dir
    placements, fallback = model_placements(
        model, jobs, fleet, inventory, current.links, settings, seed, graph=current.graph
    )
    strategy, who = "gnn", "the new model"
    if fallback is not None:
        strategy, who = "teacher", "the teacher (the new model's plan fell back)"
    return {
        "plots/fleet_map.png": fleet_map(
            inventory,
            placements,
            fleet,
            plots_dir / "fleet_map.png",
            title=f"Current fleet, upcoming jobs placed by {who}",
        ),
        "plots/cost_bars.png": cost_bars(
            placements,
            fleet,
            strategy,
            plots_dir / "cost_bars.png",
            title=f"Upcoming jobs placed by {who}: seconds per iteration",
        ),
    }


def _training_data(settings: Settings, corpus_sha256: str, labelled: list) -> list[TrainingData]:
    """The run's dataset inputs: the corpus (replayed) and the fleet's own samples trained on,
    each by its content hash."""
    from hulk.registry import TrainingData

    keys = sorted(s.key for s in labelled if s.role in ("train", "val"))
    fleet_sha256 = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    labels = Path(settings.data_dir) / "labels"
    return [
        TrainingData("corpus", settings.corpus.path.resolve().as_posix(), corpus_sha256),
        TrainingData("fleet-samples", labels.resolve().as_posix(), fleet_sha256),
    ]


def learning_curve_plot(history: list[dict], path: Path) -> Path:
    """Loss and accuracy per epoch (train and validation) as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3.5))
    FigureCanvasAgg(figure)
    loss, accuracy = figure.subplots(1, 2)
    epochs = [row["epoch"] for row in history]
    for name in ("train", "val"):
        loss.plot(epochs, [row[f"{name}_loss"] for row in history], label=name)
        accuracy.plot(epochs, [row[f"{name}_accuracy"] for row in history], label=name)
    loss.set(xlabel="epoch", ylabel="weighted cross-entropy", title="loss")
    accuracy.set(xlabel="epoch", ylabel="node accuracy", title="accuracy", ylim=(0, 1))
    loss.legend()
    figure.tight_layout()
    with fileio.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)
    return path
