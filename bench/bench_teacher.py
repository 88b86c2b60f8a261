"""Benchmark: the teacher search against Systems A, B, C and the lower bound.

    .venv/bin/python bench/bench_teacher.py [--seed S] [--evaluations N] [--big-evaluations N]
                                            [--skip-big]

Scenarios, each run in a fresh subprocess so that its peak memory (VmHWM, interpreter and
imports included; the import-only figure is reported beside it) is its own:

* ``hulk47-mix4`` / ``hulk47-mix6`` — the paper's 47-machine fleet (../shared/datasets/hulk-47,
  read with `hulk.importer.import_hulk`; skipped with a message when absent) with the paper's
  4-job and 6-job mixes (`PAPER_MIX_4`, `PAPER_MIX_6`), teacher settings from params.yaml;
* ``synthetic1000-mix6`` — `hulk.generate.build_fleet('synthetic-1000')` and its
  `expected_links` (no logs), the 6-job mix. ``--big-evaluations`` (default: params.yaml)
  sets its evaluation cap.

For every job: the teacher's iteration time, Systems A/B/C (`hulk.baselines`) and two lower
bounds (work / Σ compute over the job's machines and over the whole fleet). Targets:

* hulk-47: every placed job at least 2× faster than the best feasible of A/B/C;
* hulk-47: the makespan at least 4× shorter than running the jobs one after another under the
  best baseline (the sum over jobs of the best feasible baseline's time);
* hulk-47: the teacher search done within 10 s;
* 1,000 machines: the teacher search done within 60 s and the process under 4 GB.

Prints a table and PASS/FAIL per target; writes bench/out/teacher.json. The machine is shared
and noisy: the load average is recorded with each scenario.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OUT = REPO / "bench" / "out" / "teacher.json"
HULK47 = REPO.parent / "shared" / "datasets" / "hulk-47"
SPEEDUP_PER_JOB = 2.0
SPEEDUP_MAKESPAN = 4.0
SECONDS_47 = 10.0
SECONDS_1000 = 60.0
PEAK_MB_1000 = 4096.0


def _rss_mb() -> float:
    """VmHWM of this process (its own high-water mark), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# --- worker: one scenario in its own process --------------------------------------------------


def _fleet(kind: str, settings):
    from hulk.cost import Fleet

    if kind == "hulk47":
        from hulk.importer import import_hulk

        imported = import_hulk(HULK47 / "node_feature.csv", HULK47 / "edge.txt")
        inventory, links = imported.inventory, imported.links
    else:
        from hulk.generate import build_fleet, expected_links

        inventory = build_fleet("synthetic-1000", settings.seed, settings.generate)
        links = expected_links(inventory, settings.seed, settings.generate)
    return Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)


def worker(scenario: str, seed: int, evaluations: int | None) -> dict:
    from hulk.baselines import baselines
    from hulk.cost import lower_bound
    from hulk.jobs import PAPER_MIX_4, PAPER_MIX_6, preset_jobs
    from hulk.settings import load_settings
    from hulk.teacher import teacher_search

    settings = load_settings(REPO / "params.yaml")
    kind, mix = scenario.split("-")
    jobs = preset_jobs(PAPER_MIX_4 if mix == "mix4" else PAPER_MIX_6)
    imports_mb = _rss_mb()
    started = time.perf_counter()
    fleet = _fleet(kind, settings)
    fleet_seconds = time.perf_counter() - started
    teacher = settings.teacher
    if evaluations is not None:
        teacher = teacher.model_copy(update={"max_evaluations": evaluations})
    result = teacher_search(jobs, fleet, teacher, settings.planner, seed)
    peak_mb = _rss_mb()

    rows = []
    for placement in result.placements:
        job = placement.job
        started = time.perf_counter()
        base = baselines(job, fleet)
        feasible = {name: c.iteration_s for name, c in base.items() if c.feasible}
        best_name = min(feasible, key=lambda name: feasible[name]) if feasible else None
        rows.append(
            {
                "job": job.name,
                "status": placement.status,
                "reason": placement.reason,
                "machines": len(placement.nodes),
                "replicas": placement.plan.data_parallel if placement.plan else 0,
                "stages": [len(r) for r in placement.plan.replicas] if placement.plan else [],
                "teacher_s": _finite(placement.cost.iteration_s),
                "compute_s": _finite(placement.cost.compute_s),
                "comm_s": _finite(placement.cost.comm_s),
                "baselines": {name: _finite(c.iteration_s) for name, c in base.items()},
                "best_baseline": best_name,
                "best_baseline_s": feasible.get(best_name) if best_name else None,
                "lower_bound_group_s": _finite(lower_bound(job, fleet, placement.nodes))
                if placement.nodes
                else None,
                "lower_bound_fleet_s": _finite(lower_bound(job, fleet, fleet.active_indices())),
                "baseline_seconds": time.perf_counter() - started,
            }
        )
    return {
        "scenario": scenario,
        "machines": fleet.n,
        "seed": seed,
        "max_evaluations": teacher.max_evaluations,
        "fleet_seconds": fleet_seconds,
        "teacher_seconds": result.seconds,
        "evaluations": result.evaluations,
        "planner_calls": result.planner_calls,
        "stopped_by": result.stopped_by,
        "start": result.start,
        "makespan_s": result.makespan_s,
        "sum_s": result.sum_s,
        "peak_rss_mb": peak_mb,
        "import_rss_mb": imports_mb,
        "jobs": rows,
    }


def run_worker(scenario: str, seed: int, evaluations: int | None) -> dict:
    cmd = [sys.executable, __file__, "--worker", scenario, "--seed", str(seed)]
    if evaluations is not None:
        cmd += ["--evaluations", str(evaluations)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"{scenario}: worker failed with exit code {done.returncode}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - started
    result["load_average_after"] = os.getloadavg()[0]
    return result


# --- report -----------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    if value is None:
        return f"{'inf':>10s}"
    return f"{value:10.3f}" if value < 1e6 else f"{value:10.3e}"


def _table(result: dict) -> None:
    print(
        f"\n{result['scenario']}: {result['machines']} machines, teacher "
        f"{result['teacher_seconds']:.2f} s ({result['evaluations']} evaluations, "
        f"{result['planner_calls']} planner calls, stopped by {result['stopped_by']}, "
        f"start {result['start']}), fleet built in {result['fleet_seconds']:.2f} s, peak "
        f"{result['peak_rss_mb']:.0f} MiB (imports {result['import_rss_mb']:.0f} MiB), load "
        f"{result['load_average_after']:.1f}"
    )
    head = f"{'job':14s} {'status':7s} {'mach':>4s} {'D':>3s} {'teacher s':>10s}"
    head += f" {'A s':>10s} {'B s':>10s} {'C s':>10s} {'LB grp s':>10s} {'LB all s':>10s}"
    head += f" {'× best':>8s}"
    print(head)
    for row in result["jobs"]:
        base = row["baselines"]
        best = row["best_baseline_s"]
        ratio = best / row["teacher_s"] if best and row["teacher_s"] else None
        line = f"{row['job']:14s} {row['status']:7s} {row['machines']:4d} {row['replicas']:3d}"
        line += f" {_fmt(row['teacher_s'])} {_fmt(base['A'])} {_fmt(base['B'])}"
        line += f" {_fmt(base['C'])} {_fmt(row['lower_bound_group_s'])}"
        line += f" {_fmt(row['lower_bound_fleet_s'])} {ratio:8.1f}" if ratio else " " * 9
        print(line)
    sequential = sum(r["best_baseline_s"] or 0.0 for r in result["jobs"])
    print(
        f"makespan {result['makespan_s']:.2f} s; sum {result['sum_s']:.2f} s; one after another "
        f"under the best baseline {sequential:.2f} s ({sequential / result['makespan_s']:.1f}×)"
    )


def _targets(results: dict[str, dict]) -> list[dict]:
    targets = []
    for name, result in results.items():
        placed = [r for r in result["jobs"] if r["status"] == "placed"]
        if name.startswith("hulk47"):
            worst = min(
                (r["best_baseline_s"] / r["teacher_s"] for r in placed if r["best_baseline_s"]),
                default=math.inf,
            )
            targets.append(
                {
                    "target": f"{name}: every placed job ≥ {SPEEDUP_PER_JOB:.0f}× faster than "
                    "the best feasible of A/B/C",
                    "value": f"smallest {worst:.1f}×",
                    "pass": worst >= SPEEDUP_PER_JOB,
                }
            )
            sequential = sum(r["best_baseline_s"] or 0.0 for r in result["jobs"])
            gain = sequential / result["makespan_s"]
            targets.append(
                {
                    "target": f"{name}: makespan ≥ {SPEEDUP_MAKESPAN:.0f}× shorter than the "
                    "jobs one after another under the best baseline",
                    "value": f"{gain:.1f}× ({result['makespan_s']:.1f} s vs {sequential:.1f} s)",
                    "pass": gain >= SPEEDUP_MAKESPAN,
                }
            )
            targets.append(
                {
                    "target": f"{name}: teacher within {SECONDS_47:.0f} s",
                    "value": f"{result['teacher_seconds']:.2f} s",
                    "pass": result["teacher_seconds"] <= SECONDS_47,
                }
            )
        else:
            targets.append(
                {
                    "target": f"{name}: teacher within {SECONDS_1000:.0f} s",
                    "value": f"{result['teacher_seconds']:.2f} s",
                    "pass": result["teacher_seconds"] <= SECONDS_1000,
                }
            )
            targets.append(
                {
                    "target": f"{name}: peak memory under {PEAK_MB_1000 / 1024:.0f} GB",
                    "value": f"{result['peak_rss_mb']:.0f} MiB",
                    "pass": result["peak_rss_mb"] < PEAK_MB_1000,
                }
            )
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="default: params.yaml seed")
    parser.add_argument("--evaluations", type=int, default=None, help="hulk-47 evaluation cap")
    parser.add_argument("--big-evaluations", type=int, default=None, help="1,000-machine cap")
    parser.add_argument("--skip-big", action="store_true", help="only the paper's fleet")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.seed, args.evaluations)))
        return

    from hulk.settings import load_settings

    seed = args.seed if args.seed is not None else load_settings(REPO / "params.yaml").seed
    scenarios: dict[str, int | None] = {}
    if (HULK47 / "node_feature.csv").exists():
        scenarios["hulk47-mix4"] = args.evaluations
        scenarios["hulk47-mix6"] = args.evaluations
    else:
        print(f"skipping the paper's fleet: {HULK47} (../shared/datasets/hulk-47) is absent")
    if not args.skip_big:
        scenarios["synthetic1000-mix6"] = args.big_evaluations
    results = {}
    for scenario, evaluations in scenarios.items():
        results[scenario] = run_worker(scenario, seed, evaluations)
        _table(results[scenario])
    targets = _targets(results)
    print()
    for target in targets:
        print(f"{'PASS' if target['pass'] else 'FAIL'}  {target['target']}: {target['value']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join([".venv/bin/python", "bench/bench_teacher.py", *sys.argv[1:]]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "scenarios": results,
        "targets": targets,
    }
    OUT.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
