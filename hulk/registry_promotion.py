"""The champion and challenger aliases of the GNN's registered versions, and the gate that moves
the champion: `record_evaluation` tags a version with its figures on one evaluation set, and
`promote_if_better` moves ``champion`` to a version only when its gate score is not worse than
the current champion's on the same set (the decision is recorded in the version's tags)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from hulk.registry_tracking import tracking

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

    from hulk.settings import Settings

CHAMPION = "champion"
CHALLENGER = "challenger"
TAG_PROMOTION = "hulk.promotion"  # .decision .metric .direction .candidate_value ... (see below)
TAG_EVAL = "hulk.eval"  # .<eval set hash, 16 chars>: JSON of a version's figures on that set


class RegisteredVersion(NamedTuple):
    """A registered model version and the training run it came from."""

    version: int
    run_id: str


@dataclass(frozen=True)
class Decision:
    """The outcome of `promote_if_better`, as also recorded in the version's tags."""

    version: int
    promoted: bool
    metric: str
    lower_is_better: bool
    candidate_value: float | None
    champion_value: float | None  # the previous champion's value (None: none, or not logged)
    previous_champion: int | None
    reason: str

    @property
    def champion(self) -> int | None:
        """The champion version after the decision."""
        return self.version if self.promoted else self.previous_champion


def alias_version(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    """The version `alias` points at, or None (also when the registered model does not exist)."""
    from mlflow.exceptions import MlflowException

    try:
        aliases = client.get_registered_model(name).aliases
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    if alias not in aliases:
        return None
    return client.get_model_version(name, str(aliases[alias]))


def _text(value: float | int | None) -> str:
    return "none" if value is None else repr(value)


def eval_tag(eval_set: str) -> str:
    """The version tag holding a version's figures on one evaluation set."""
    return f"{TAG_EVAL}.{eval_set[:16]}"


def record_evaluation(
    settings: Settings, version: int, eval_set: str, metrics: Mapping[str, float]
) -> None:
    """Tag `version` with its figures on the evaluation set whose content hash is `eval_set`.

    The gate (`promote_if_better`) compares two versions only through figures recorded for the
    same set. Non-finite values are recorded as null.
    """
    record = {
        "eval_set": eval_set,
        **{k: (float(v) if math.isfinite(float(v)) else None) for k, v in metrics.items()},
    }
    with tracking(settings) as track:
        track.client.set_model_version_tag(
            track.registered_model,
            str(int(version)),
            eval_tag(eval_set),
            json.dumps(record, sort_keys=True),
        )


def _eval_value(version: ModelVersion, eval_set: str, metric: str) -> tuple[bool, float | None]:
    """(whether the version was scored on the set, its finite value of `metric` there)."""
    raw = version.tags.get(eval_tag(eval_set))
    if raw is None:
        return False, None
    try:
        record = json.loads(raw)
    except json.JSONDecodeError:
        return False, None
    if not isinstance(record, dict) or record.get("eval_set") != eval_set:
        return False, None
    value = record.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return True, None
    return True, float(value)


def _scored_sets(version: ModelVersion) -> list[str]:
    return sorted(key[len(TAG_EVAL) + 1 :] for key in version.tags if key.startswith(TAG_EVAL))


def promote_if_better(
    settings: Settings,
    version: int | RegisteredVersion,
    eval_set: str,
    metric: str = "gate/score",
    lower_is_better: bool = True,
) -> Decision:
    """Make `version` the champion if its `metric` is not worse than the current champion's,
    both measured on the same evaluation set.

    The figures compared are the ones `record_evaluation` recorded on each version for the set
    whose content hash is `eval_set`: figures from different sets are never compared. With no
    champion yet, the version is promoted; a tie promotes too (the newer model wins). It is
    refused when its own value on the set is missing or not finite, and when the champion was
    not scored on the set (re-evaluate it there) or its value is not finite.

    The decision is written as ``hulk.promotion.*`` tags on the model version and on its run:
    decision (promoted / refused), metric, direction, eval_set, candidate_value,
    champion_value, previous_champion, reason, decided_at. A replaced champion gets
    ``hulk.promotion.replaced_by``. Two promotions racing on the same registry are not guarded
    against.
    """
    from mlflow.entities import RunTag

    number = int(version.version if isinstance(version, RegisteredVersion) else version)
    short = eval_set[:12]
    with tracking(settings) as track:
        client, name = track.client, track.registered_model
        candidate = client.get_model_version(name, str(number))
        _, candidate_value = _eval_value(candidate, eval_set, metric)
        current = alias_version(client, name, CHAMPION)
        previous = None if current is None else int(current.version)
        scored, champion_value = (
            (False, None) if current is None else _eval_value(current, eval_set, metric)
        )
        better = "lower" if lower_is_better else "higher"

        if candidate_value is None:
            promoted = False
            reason = f"version {number} has no finite {metric} on evaluation set {short}"
        elif current is None:
            promoted, reason = True, "no champion yet"
        elif previous == number:
            promoted, reason = True, "already the champion"
        elif not scored:
            promoted = False
            others = ", ".join(_scored_sets(current)) or "none"
            reason = (
                f"champion version {previous} was not scored on evaluation set {short} (its "
                f"figures are from set(s) {others}): figures from different sets are not "
                "compared; re-evaluate the champion on this set"
            )
        elif champion_value is None:
            promoted = False
            reason = (
                f"champion version {previous} has no finite {metric} on evaluation set "
                f"{short}: decide by hand"
            )
        else:
            not_worse = (
                candidate_value <= champion_value
                if lower_is_better
                else candidate_value >= champion_value
            )
            relation = "not worse than" if not_worse else "worse than"
            promoted = not_worse
            reason = (
                f"{metric} {candidate_value:.6g} is {relation} champion version {previous}'s "
                f"{champion_value:.6g} on evaluation set {short} ({better} is better)"
            )

        if promoted and previous != number:
            client.set_registered_model_alias(name, CHAMPION, str(number))
            if previous is not None:
                client.set_model_version_tag(
                    name, str(previous), f"{TAG_PROMOTION}.replaced_by", str(number)
                )
        decision = Decision(
            version=number,
            promoted=promoted,
            metric=metric,
            lower_is_better=lower_is_better,
            candidate_value=candidate_value,
            champion_value=champion_value,
            previous_champion=previous,
            reason=reason,
        )
        record = {
            "decision": "promoted" if promoted else "refused",
            "metric": metric,
            "direction": f"{better} is better",
            "eval_set": eval_set,
            "candidate_value": _text(candidate_value),
            "champion_value": _text(champion_value),
            "previous_champion": _text(previous),
            "reason": reason,
            "decided_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        record = {f"{TAG_PROMOTION}.{key}": value for key, value in record.items()}
        for key, value in record.items():  # the registry has no batch call for version tags
            client.set_model_version_tag(name, str(number), key, value)
        if candidate.run_id:
            run_tags = [RunTag(key, value) for key, value in record.items()]
            client.log_batch(candidate.run_id, tags=run_tags, synchronous=True)
    return decision
