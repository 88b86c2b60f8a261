"""Algorithm 1 of the Hulk paper: turn per-machine class probabilities into machine groups.

The graph neural network gives every machine a probability for each job of the mix (jobs in
size order, largest first, as `hulk.corpus.order_jobs` sorts them) and for "idle". The groups
are peeled off greedily, one job at a time, largest job first:

1. the job's *core* is the free machines whose most likely class is that job;
2. if the core's GPU memory is below the job's need, free machines are added in order of their
   probability for that job (highest first) until the need is met — machines the model meant
   for a smaller job or for idle included, since a large job that cannot run at all costs more
   than a small job that has to look elsewhere;
3. if the free machines together cannot meet the need, the job may take machines from the
   groups already formed, as long as each of those groups still meets its own job's need
   (surplus the model gave a larger job rather than leave a smaller one waiting), highest
   probability for the waiting job first;
4. if that is still not enough, the job waits (`queued`, with the memory it needs and the
   memory left) and its machines go back to the pool.

Drained machines are never used. A job the whole fleet could never host is not this function's
business: the caller rejects it before (`hulk.teacher.never_fits`). Ties are broken by machine
index, so the result is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GB = 1e9


@dataclass(frozen=True)
class Groups:
    """One entry per job (size order): the fleet indices of its group, or None and why not."""

    members: list[np.ndarray | None]
    reasons: list[str | None]


def groups_from_probabilities(
    proba: np.ndarray,
    need_bytes: np.ndarray,
    memory_bytes: np.ndarray,
    active: np.ndarray,
) -> Groups:
    """Disjoint machine groups meeting each job's memory need (module docstring).

    Args:
        proba: [n, J + 1] class probabilities; column k is the k-th job in size order, the
            last column is idle.
        need_bytes: [J] memory each job needs (its model state), in the same order.
        memory_bytes: [n] GPU memory of each machine.
        active: [n] False for drained machines.
    """
    proba = np.asarray(proba, dtype=float)
    jobs = proba.shape[1] - 1
    if len(need_bytes) != jobs:
        raise ValueError(f"{jobs} job columns in proba but {len(need_bytes)} memory needs")
    memory = np.asarray(memory_bytes, dtype=float)
    free = np.asarray(active, dtype=bool).copy()
    favourite = proba.argmax(axis=1)
    members: list[np.ndarray | None] = []
    reasons: list[str | None] = []
    for job in range(jobs):
        need = float(need_bytes[job])
        core = np.flatnonzero(free & (favourite == job))
        have = memory[core].sum()
        group = list(core)
        if have < need:
            others = np.flatnonzero(free & (favourite != job))
            # Highest probability for this job first; the index breaks ties.
            ranked = others[np.lexsort((others, -proba[others, job]))]
            for machine in ranked:
                if have >= need:
                    break
                group.append(int(machine))
                have += memory[machine]
        if have < need:
            have, group = _borrow(proba, job, need, have, group, members, need_bytes, memory)
        if have < need:
            members.append(None)
            reasons.append(
                f"needs {need / GB:,.0f} GB; {memory[free].sum() / GB:,.0f} GB free "
                "until a running job finishes"
            )
            continue
        chosen = np.sort(np.asarray(group, dtype=np.int64))
        free[chosen] = False
        members.append(chosen)
        reasons.append(None)
    return Groups(members=members, reasons=reasons)


def _borrow(
    proba: np.ndarray,
    job: int,
    need: float,
    have: float,
    group: list[int],
    members: list[np.ndarray | None],
    need_bytes: np.ndarray,
    memory: np.ndarray,
) -> tuple[float, list[int]]:
    """Take surplus machines of earlier groups for `job` (step 3); changes `members` only when
    that meets the job's need."""
    spare = [
        (float(proba[machine, job]), int(machine), donor)
        for donor, owned in enumerate(members)
        if owned is not None
        for machine in owned
    ]
    spare.sort(key=lambda item: (-item[0], item[1]))
    left = {d: float(memory[g].sum()) for d, g in enumerate(members) if g is not None}
    taken: dict[int, list[int]] = {}
    for _, machine, donor in spare:
        if have >= need:
            break
        if left[donor] - memory[machine] >= float(need_bytes[donor]):
            left[donor] -= memory[machine]
            taken.setdefault(donor, []).append(machine)
            group.append(machine)
            have += memory[machine]
    if have >= need:
        for donor, machines in taken.items():
            owned = members[donor]
            assert owned is not None
            members[donor] = owned[~np.isin(owned, machines)]
    else:
        group = group[: len(group) - sum(len(m) for m in taken.values())]
        have = float(memory[group].sum()) if group else 0.0
    return have, group
