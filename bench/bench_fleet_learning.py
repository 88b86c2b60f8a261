"""Does one nightly fine-tune learn a fleet the prior never saw? Side by side, in one run.

For each fleet family the training corpus does not contain, the bench builds a data folder the
way a user would (generated logs, or the paper's import format), runs one night's learning
through the pipeline's own steps (validate → ingest → graph → labels → train: fine-tune from
the prior, gate, register) and then places NEW job mixes — drawn from the same pool as the
fleet's samples, none of them among the labels — with

* the teacher (the nightly search, `assign.strategy: teacher`): the reference makespan;
* the prior alone (the model before the fine-tune);
* the champion after the night (the fine-tuned model, promoted on the first night), as
  assignment runs it (``tuned``) and without the refining search from its plans
  (``unrefined``: `assign.gnn_refine_evaluations: 0`), so that what the model learnt and what
  the search adds are both visible;

and prints, per family, the GNN makespan / teacher makespan of each model's own plans (a mix
whose plan the quick check would reject still counts with its own plan's makespan; the number
of such mixes is printed as ``checks``; a plan that leaves waiting a job the teacher runs
counts as ``inf``). Targets (issue "Nightly retraining that learns the
fleet it serves"): after the night, mean ≤ 1.05 and every mix ≤ 1.15.

Families:
  cloud-16gb-R    homogeneous single-GPU 16 GB machines over R cloud regions (R = 6, 10), five
                  per region, written in the import format (node file + edge file with
                  bandwidth) and imported with `hulk import-hulk`: a folder without raw logs;
  cloud-16gb      the generator's preset (8 regions × 6), with logs;
  two-region-24gb 4-GPU 24 GB machines in two regions (generator, with logs);
  paper-47-drained the paper's fleet with a third of its machines drained (generator, logs).

The corpus and the prior are built once in WORK (or taken from ``--corpus``: an existing
``corpus.pt``, e.g. the one ``make main`` leaves in data/corpus, whose prior is reused too when
it matches). Run from the repository root:

    .venv/bin/python bench/bench_fleet_learning.py [--work /tmp/hulk-fleet-bench] [--mixes 6]
        [--fleet-seed S]   # other fleets of the same families (default: the params seed)
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hulk import pipeline, schemas, steps  # noqa: E402
from hulk.settings import Settings, load_settings  # noqa: E402

MEAN_TARGET, EACH_TARGET = 1.05, 1.15

# Jobs each family's users submit (the upcoming jobs file of its data folder).
FAMILY_JOBS = {
    "cloud": [
        {"name": "GPT-1.3B", "params_b": 1.3, "layers": 24, "hidden": 2048, "seq_len": 2048,
         "global_batch": 512, "micro_batch": 4},
        {"name": "BERT-large", "params_b": 0.34, "layers": 24, "hidden": 1024, "seq_len": 512,
         "global_batch": 256, "micro_batch": 16},
    ],
    "two-region": [
        {"name": "GPT-2-1.5B", "params_b": 1.5, "layers": 48, "hidden": 1600, "seq_len": 1024,
         "global_batch": 512, "micro_batch": 8},
        {"name": "T5-11B", "params_b": 11.0, "layers": 48, "hidden": 1024, "seq_len": 512,
         "global_batch": 2048, "micro_batch": 8},
    ],
    "paper": [
        {"name": "OPT-175B", "params_b": 175.0, "layers": 96, "hidden": 12288, "seq_len": 2048,
         "global_batch": 1024, "micro_batch": 1},
        {"name": "T5-11B", "params_b": 11.0, "layers": 48, "hidden": 1024, "seq_len": 512,
         "global_batch": 2048, "micro_batch": 8},
        {"name": "GPT-2-1.5B", "params_b": 1.5, "layers": 48, "hidden": 1600, "seq_len": 1024,
         "global_batch": 512, "micro_batch": 8},
        {"name": "BERT-large", "params_b": 0.34, "layers": 24, "hidden": 1024, "seq_len": 512,
         "global_batch": 256, "micro_batch": 16},
    ],
}  # fmt: skip


def _settings(base: Settings, work: Path, name: str, seed: int, **generate) -> Settings:
    data = work / name
    return base.model_copy(
        update={
            "seed": seed,
            "data_dir": data,
            "generate": base.generate.model_copy(update=generate),
            "assign": base.assign.model_copy(
                update={"jobs_file": data / "jobs.yaml", "placements_dir": data / "placements"}
            ),
        }
    )


def _write_jobs(settings: Settings, family: str) -> None:
    import yaml

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump({"jobs": FAMILY_JOBS[family]}, sort_keys=False)
    settings.assign.jobs_file.write_text(text, encoding="utf-8")


def _imported_cloud(settings: Settings, regions: int, seed: int) -> None:
    """A cloud fleet written in the paper's format (bandwidth column), then imported."""
    from hulk.generate import expected_links
    from hulk.presets import CLOUD_REGIONS, uniform_fleet

    rng = np.random.default_rng([seed, regions])
    inventory = uniform_fleet(CLOUD_REGIONS[:regions], 5, 7.0, 1, 16, 0.0, rng)
    links = expected_links(inventory, seed, settings.generate)
    source = settings.data_dir.parent / f"{settings.data_dir.name}-import"
    source.mkdir(parents=True, exist_ok=True)
    nodes = pd.DataFrame(
        {
            "node": inventory["node_id"],
            "City": inventory["city"],
            "Capability": inventory["compute_capability"],
            "Memory": inventory["memory_gb"],
            "gpus": inventory["gpu_count"],
        }
    )
    nodes.to_csv(source / "node_feature.csv", index=False)
    lines = [
        f"{row.src} {row.dst} {row.latency_p50_ms:.3f} {row.beta_gbps:.3f}"
        for row in links.itertuples()
    ]
    (source / "edge.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    pipeline.import_hulk(
        source / "node_feature.csv", source / "edge.txt", settings.data_dir, settings
    )


def _generated(settings: Settings) -> None:
    pipeline.generate(settings.data_dir, settings)
    for name in ("validate", "ingest"):
        steps.run(name, settings)


def _night(settings: Settings, workers: int) -> dict:
    """The learning half of one night: graph, the fleet's labels (on `workers` processes),
    train."""

    context = multiprocessing.get_context("spawn")
    steps.run("graph", settings)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        labels = steps.run("labels", settings, map_labels=pool.map).summary.to_dict()
    train = steps.run("train", settings).summary.to_dict()
    return {"labels": labels, "train": train}


def _new_mixes(settings: Settings, count: int, seed: int) -> list[list]:
    """`count` mixes drawn like the fleet's samples (another seed), none among the labels."""
    from hulk.cost import Fleet
    from hulk.fleet_labels import LabelCache, label_key
    from hulk.fleet_samples import draw_mix, job_pool, named_rng
    from hulk.jobs import load_jobs

    inventory, links = pipeline.load_frames(settings.data_dir, settings)
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    upcoming = load_jobs(settings.assign.jobs_file)
    pool = job_pool(upcoming, [])
    cache_file = settings.data_dir / "labels" / "labels.json"
    cache = LabelCache.from_text(cache_file.read_text(encoding="utf-8"))
    mixes: list[list] = []
    k = 0
    while len(mixes) < count:
        rng = named_rng(seed, "bench-mix", f"{settings.data_dir.name}/{k}")
        k += 1
        jobs = list(draw_mix(pool, fleet, rng, settings))
        if jobs and label_key(inventory, links, jobs, settings) not in cache:
            mixes.append(jobs)
    return mixes


def _gnn_makespan(model, jobs, settings: Settings, inventory, links, fleet, sites) -> tuple:
    from hulk.features import encode_inputs
    from hulk.gnn import gnn_decide
    from hulk.model import predict_proba

    inputs, order = encode_inputs(inventory, links, jobs, settings)
    proba = predict_proba(model, inputs).numpy()
    decision = gnn_decide(jobs, fleet, proba, order, settings, sites=sites)
    times = [cost.iteration_s for _, cost in decision.plans.values()]
    makespan = max(times) if times else math.inf
    return makespan, decision.fallback_reason is not None, len(decision.plans), decision.seconds


def _evaluate(settings: Settings, mixes: list[list], seed: int) -> dict:
    from hulk.assign import place_jobs as assign_jobs
    from hulk.cost import Fleet
    from hulk.model import model_from_state
    from hulk.planner import site_labels
    from hulk.registry import load_model_files
    from hulk.stages.prior import load_prior
    from hulk.train import deterministic_torch

    inventory, links = pipeline.load_frames(settings.data_dir, settings)
    inventory = inventory.sort_values("node_id").reset_index(drop=True)
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    sites = site_labels(fleet, settings.planner.site_latency_ms)
    prior = model_from_state(*load_prior(settings))
    state, config, info = load_model_files(settings)
    tuned = model_from_state(config, state)
    unrefined = settings.model_copy(
        update={"assign": settings.assign.model_copy(update={"gnn_refine_evaluations": 0})}
    )
    rows = []
    for jobs in mixes:
        started = time.perf_counter()
        placed = assign_jobs(jobs, fleet, "teacher", settings, seed)
        teacher_s = time.perf_counter() - started
        teacher = max(p.estimate.iteration_s for p in placed if p.estimate is not None)
        teacher_placed = sum(p.status == "placed" for p in placed)
        row = {"jobs": len(jobs), "teacher_s": teacher_s}
        with deterministic_torch(seed, settings.train.threads):
            for name, model, options in (
                ("prior", prior, settings),
                ("unrefined", tuned, unrefined),
                ("tuned", tuned, settings),
            ):
                makespan, rejected, count, seconds = _gnn_makespan(
                    model, jobs, options, inventory, links, fleet, sites
                )
                # A plan that leaves a job waiting which the teacher runs is not comparable
                # by makespan (the waiting job is not in it): it fails outright.
                row[name] = makespan / teacher if count >= teacher_placed else math.inf
                row[f"{name}_rejected"] = rejected
                row[f"{name}_s"] = seconds
        rows.append(row)
    return {"rows": rows, "champion": info.version}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/hulk-fleet-bench"))
    parser.add_argument("--corpus", type=Path, help="an existing corpus.pt (its prior reused)")
    parser.add_argument("--mixes", type=int, default=6, help="new mixes per family")
    parser.add_argument("--days", type=int, default=28, help="days of logs (generated families)")
    parser.add_argument("--workers", type=int, default=2, help="labelling processes")
    parser.add_argument("--families", nargs="*", help="run only these families")
    parser.add_argument(
        "--fleet-seed",
        type=int,
        help="seed of the families' fleets, logs, nights and new mixes (default: params seed; "
        "the corpus and the prior keep the params seed): other fleets of the same families",
    )
    args = parser.parse_args()

    base = load_settings(REPO / "params.yaml")
    seed = base.seed
    fleet_seed = seed if args.fleet_seed is None else args.fleet_seed
    work = args.work
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    corpus_path = args.corpus.resolve() if args.corpus else work / "corpus" / "corpus.pt"
    base = base.model_copy(update={"corpus": base.corpus.model_copy(update={"path": corpus_path})})
    started = time.perf_counter()
    built = pipeline.corpus(base, seed, workers=args.workers)
    from hulk.stages import prior

    prior_summary = prior.run(base).summary
    print(
        f"corpus {'reused' if built.summary.reused else 'built'}, prior "
        f"{'reused' if prior_summary.reused else 'trained'} "
        f"({time.perf_counter() - started:.0f} s)",
        flush=True,
    )

    families = {
        "cloud-16gb-6": ("cloud", lambda s: _imported_cloud(s, 6, fleet_seed), {}),
        "cloud-16gb-10": ("cloud", lambda s: _imported_cloud(s, 10, fleet_seed), {}),
        "cloud-16gb": ("cloud", _generated, {"preset": "cloud-16gb", "days": args.days}),
        "two-region-24gb": (
            "two-region",
            _generated,
            {"preset": "two-region-24gb", "days": args.days},
        ),
        "paper-47-drained": (
            "paper",
            _generated,
            {"preset": "paper-47", "days": args.days, "drained_fraction": 0.34},
        ),
    }
    chosen = args.families or list(families)
    header = (
        f"{'family':<18}{'machines':>9}{'mixes':>6}{'prior mean':>11}{'max':>7}"
        f"{'unrefined':>10}{'max':>7}{'tuned mean':>11}{'max':>7}{'checks':>7}{'labels':>8}"
        f"{'night s':>8}  verdict"
    )
    lines = []
    verdicts = []
    for name in chosen:
        family, build, generate = families[name]
        settings = _settings(base, work, name, fleet_seed, **generate)
        _write_jobs(settings, family)
        build(settings)
        night_started = time.perf_counter()
        night = _night(settings, args.workers)
        night_s = time.perf_counter() - night_started
        mixes = _new_mixes(settings, args.mixes, fleet_seed + 1000)
        result = _evaluate(settings, mixes, fleet_seed)
        rows = result["rows"]
        prior_r = [r["prior"] for r in rows]
        unrefined_r = [r["unrefined"] for r in rows]
        tuned_r = [r["tuned"] for r in rows]
        ok = float(np.mean(tuned_r)) <= MEAN_TARGET and max(tuned_r) <= EACH_TARGET
        verdicts.append(ok)
        machines = len(pd.read_csv(settings.data_dir / schemas.INVENTORY_FILE))
        line = (
            f"{name:<18}{machines:>9}{len(rows):>6}{np.mean(prior_r):>11.3f}{max(prior_r):>7.3f}"
            f"{np.mean(unrefined_r):>10.3f}{max(unrefined_r):>7.3f}"
            f"{np.mean(tuned_r):>11.3f}{max(tuned_r):>7.3f}"
            f"{sum(r['tuned_rejected'] for r in rows):>7}"
            f"{night['labels']['labelled']:>8}{night_s:>8.0f}  {'PASS' if ok else 'FAIL'}"
        )
        lines.append(line)
        print(line, flush=True)
        print(
            "    per mix (jobs: prior / unrefined / tuned): "
            + ", ".join(
                f"{r['jobs']}: {r['prior']:.3f}/{r['unrefined']:.3f}/{r['tuned']:.3f}" for r in rows
            ),
            f"| start {night['train']['start']}, gate {night['train']['decision']}"
            f"| decision s: teacher {np.mean([r['teacher_s'] for r in rows]):.2f}, tuned "
            f"{np.mean([r['tuned_s'] for r in rows]):.2f} (unrefined "
            f"{np.mean([r['unrefined_s'] for r in rows]):.2f}) per mix",
            flush=True,
        )
    print()
    print(header)
    for line in lines:
        print(line)
    print(
        f"\ntargets: tuned mean <= {MEAN_TARGET}, every mix <= {EACH_TARGET}; "
        f"{sum(verdicts)}/{len(verdicts)} families PASS; {time.perf_counter() - started:.0f} s"
    )
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
