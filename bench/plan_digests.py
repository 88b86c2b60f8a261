"""The stage planner's outputs as digests, for performance work that must not change any plan.

    .venv/bin/python bench/plan_digests.py [--params FILE] [--out FILE] [--pools N]
                                           [--profile 1000] [--skip-strategies]

Computes, on the fleets of bench_gnn.py (generated paper-47, synthetic-200 and synthetic-1000
with fleet seed 1009, their expected links):

* ``planner`` — `hulk.planner.plan_job` of every paper preset job on ``--pools`` machine sets
  per fleet drawn with a fixed seed (random sets of 4–150 machines, whole sites, site pairs
  and the whole fleet up to 200 machines);
* ``teacher`` / ``gnn`` — the teacher (params.yaml ``teacher:``) and the GNN strategy (the
  registry's champion) on the paper's 4- and 6-job mixes of each fleet (skip with
  ``--skip-strategies``).

Each result is reduced to a sha256 of its plans' records (``Plan.to_records``: machines and
layers per stage) and iteration times (``repr`` of the float: every bit counts). Writes the
digests as JSON (``--out``); run it before and after a change and compare the two files with
``diff``. ``--profile 1000`` instead runs the GNN strategy on the 1,000-machine fleet's two
paper mixes under cProfile and prints the top functions by own time and by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

FLEET_SEED = 1009
KINDS = {"paper47": "paper-47", "synthetic200": "synthetic-200", "synthetic1000": "synthetic-1000"}


def _fleet(kind: str, settings):
    from hulk.cost import Fleet
    from hulk.generate import build_fleet, expected_links

    inventory = build_fleet(KINDS[kind], FLEET_SEED, settings.generate)
    links = expected_links(inventory, FLEET_SEED, settings.generate)
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    return inventory, links, fleet


def _digest(fleet, results) -> str:
    """sha256 over (plan records, repr(iteration seconds)) of `results` [(plan, cost)]."""
    h = hashlib.sha256()
    for plan, cost in results:
        records = plan.to_records(fleet) if plan is not None else None
        seconds = cost.iteration_s if cost.feasible else cost.reason
        h.update(json.dumps([records, repr(seconds)], default=str).encode())
    return h.hexdigest()


def _pools(fleet, settings, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    from hulk.planner import site_labels

    n = fleet.n
    sites = site_labels(fleet, settings.planner.site_latency_ms)
    pools = [np.arange(n)] if n <= 200 else []
    labels = np.unique(sites)
    while len(pools) < count:
        kind = len(pools) % 3
        if kind == 0:
            size = int(rng.integers(4, min(n, 150) + 1))
            pools.append(np.sort(rng.choice(n, size, replace=False)))
        elif kind == 1:
            pools.append(np.flatnonzero(sites == rng.choice(labels)))
        else:
            pair = rng.choice(labels, min(2, len(labels)), replace=False)
            pools.append(np.flatnonzero(np.isin(sites, pair)))
    return pools


def planner_digests(settings, count: int) -> dict[str, dict]:
    from hulk.jobs import PRESET_JOBS
    from hulk.planner import plan_job

    out = {}
    for kind in KINDS:
        _, _, fleet = _fleet(kind, settings)
        rng = np.random.default_rng(7)
        pools = _pools(fleet, settings, count, rng)
        started = time.perf_counter()
        results = [
            plan_job(job, fleet, pool, settings.planner)
            for pool in pools
            for job in PRESET_JOBS.values()
        ]
        out[kind] = {
            "planner_calls": len(results),
            "digest": _digest(fleet, results),
            "seconds": time.perf_counter() - started,
        }
        print(f"planner {kind}: {out[kind]}", flush=True)
    return out


def _mixes():
    from hulk.jobs import PAPER_MIX_4, PAPER_MIX_6, preset_jobs

    return [("paper-4", preset_jobs(PAPER_MIX_4)), ("paper-6", preset_jobs(PAPER_MIX_6))]


def strategy_digests(settings, model) -> dict[str, dict]:
    from hulk.features import encode_inputs
    from hulk.gnn import gnn_decide
    from hulk.model import predict_proba
    from hulk.planner import site_labels
    from hulk.teacher import teacher_search

    out = {}
    for kind in KINDS:
        inventory, links, _ = _fleet(kind, settings)
        for name, jobs in _mixes():
            *_, fleet = _fleet(kind, settings)  # fresh: no rings cached by the other side
            teacher = teacher_search(jobs, fleet, settings.teacher, settings.planner, settings.seed)
            rows = [(p.plan, p.cost) for p in teacher.placements if p.plan is not None]
            key = f"teacher {kind} {name}"
            out[key] = {"digest": _digest(fleet, rows), "seconds": teacher.seconds}
            print(f"{key}: {out[key]}", flush=True)

            *_, fleet = _fleet(kind, settings)
            sites = site_labels(fleet, settings.planner.site_latency_ms)
            inputs, order = encode_inputs(inventory, links, jobs, settings)
            proba = predict_proba(model, inputs).numpy()
            decision = gnn_decide(jobs, fleet, proba, order, settings, sites=sites)
            rows = [decision.plans[i] for i in sorted(decision.plans)]
            key = f"gnn {kind} {name}"
            out[key] = {
                "digest": _digest(fleet, rows),
                "queued": sorted(decision.waiting),
                "fallback": decision.fallback_reason,
                "seconds": decision.seconds,
            }
            print(f"{key}: {out[key]}", flush=True)
    return out


def profile_gnn(settings, model) -> None:
    """cProfile of the GNN's decision on synthetic-1000's paper mixes (fresh fleet each)."""
    from hulk.features import encode_inputs
    from hulk.gnn import gnn_decide
    from hulk.model import predict_proba
    from hulk.planner import site_labels

    inventory, links, _ = _fleet("synthetic1000", settings)
    prepared = []
    for _, jobs in _mixes():
        *_, fleet = _fleet("synthetic1000", settings)
        sites = site_labels(fleet, settings.planner.site_latency_ms)
        inputs, order = encode_inputs(inventory, links, jobs, settings)
        prepared.append((jobs, fleet, predict_proba(model, inputs).numpy(), order, sites))
    profiler = cProfile.Profile()
    profiler.enable()
    for jobs, fleet, proba, order, sites in prepared:
        gnn_decide(jobs, fleet, proba, order, settings, sites=sites)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)


def _without_seconds(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "seconds"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--pools", type=int, default=30, help="machine sets per fleet")
    parser.add_argument("--profile", choices=["1000"], default=None)
    parser.add_argument("--skip-strategies", action="store_true")
    args = parser.parse_args()

    import torch

    from hulk.model import model_from_state
    from hulk.registry import load_model_files
    from hulk.settings import load_settings

    torch.set_num_threads(1)
    settings = load_settings(args.params.resolve())
    model = None
    if args.profile or not args.skip_strategies:
        state, config, _ = load_model_files(settings)
        model = model_from_state(config, state)
    if args.profile:
        profile_gnn(settings, model)
        return
    result = {"planner": planner_digests(settings, args.pools)}
    if not args.skip_strategies:
        result["strategies"] = strategy_digests(settings, model)
    if args.out is not None:
        digests = {  # wall times differ run to run: left out of the file
            part: {key: _without_seconds(row) for key, row in rows.items()}
            for part, rows in result.items()
        }
        args.out.write_text(json.dumps(digests, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
