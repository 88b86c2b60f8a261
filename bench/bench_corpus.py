"""Benchmark: building the labelled training corpus (hulk.corpus) with the params.yaml defaults.

    .venv/bin/python bench/bench_corpus.py [--workers N] [--seed S] [--fleets F]
                                           [--out /tmp/hulk-bench/corpus.json] [--save DIR]

Builds `build_corpus(settings, seed, workers)` once and reports the wall time, the peak memory
(the largest sum of resident memory over this process and its worker processes, sampled every
0.2 s with psutil, and each process's own high-water mark), the corpus's size (fleets,
samples, machines, edges by split), the teacher's stopping reasons, and the CPU seconds of the
build (this process and its workers: divided by the worker count it estimates the wall time on
otherwise idle cores). With ``--save DIR`` the
corpus is also written (`save_corpus`) and its file size reported. Targets: built within
4 minutes on 2 cores. The machine is shared and noisy: the load average is recorded.

Results go to ``--out`` (default under /tmp, not into the repository).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_SECONDS = 240.0


class MemorySampler(threading.Thread):
    """Samples the resident memory of this process plus its children until stopped."""

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak_total = 0
        self.peak_children = 0
        self._done = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self._done.is_set():
            try:
                children = me.children(recursive=True)
                rss_children = 0
                for child in children:
                    try:
                        rss_children += child.memory_info().rss
                    except psutil.Error:
                        continue
                total = me.memory_info().rss + rss_children
                self.peak_total = max(self.peak_total, total)
                self.peak_children = max(self.peak_children, rss_children)
            except psutil.Error:
                pass
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self.join()


def _vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="default: corpus.workers")
    parser.add_argument("--seed", type=int, default=None, help="default: params.yaml seed")
    parser.add_argument("--fleets", type=int, default=None, help="default: corpus.fleets")
    parser.add_argument("--out", type=Path, default=Path("/tmp/hulk-bench/corpus.json"))
    parser.add_argument("--save", type=Path, default=None, help="also save the corpus here")
    args = parser.parse_args()

    import resource

    started_imports = time.perf_counter()
    from hulk.corpus import SPLITS, build_corpus, save_corpus
    from hulk.settings import load_settings

    import_seconds = time.perf_counter() - started_imports
    settings = load_settings(REPO / "params.yaml")
    if args.fleets is not None:
        fewer = settings.corpus.model_copy(update={"fleets": args.fleets})
        settings = settings.model_copy(update={"corpus": fewer})
    seed = settings.seed if args.seed is None else args.seed
    workers = settings.corpus.workers if args.workers is None else args.workers

    sampler = MemorySampler()
    sampler.start()
    last = [time.perf_counter()]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 10 or done == total:
            print(f"  {done}/{total} fleets, {now - started:.0f} s", flush=True)
            last[0] = now

    def cpu_seconds() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    cpu_before = cpu_seconds()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    corpus = build_corpus(settings, seed, workers, progress=progress)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds() - cpu_before
    sampler.stop()
    children_hwm_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    manifest = corpus.manifest
    by_split = {}
    for name in SPLITS:
        samples = corpus.split(name)
        by_split[name] = {
            "fleets": manifest["counts"][name]["fleets"],
            "samples": len(samples),
            "machines": sum(int(s["x"].shape[0]) for s in samples),
            "directed_edges": sum(int(s["edge_index"].shape[1]) for s in samples),
        }
    records = manifest["samples"]
    stopped: dict[str, int] = {}
    for record in records:
        stopped[record["stopped_by"]] = stopped.get(record["stopped_by"], 0) + 1
    sizes = [spec["machines"] for spec in manifest["fleets"]]
    jobs = [len(record["jobs"]) for record in records]
    result = {
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg()[0],
        },
        "seed": seed,
        "workers": workers,
        "settings": manifest["settings"],
        "import_seconds": round(import_seconds, 2),
        "build_seconds": round(seconds, 2),
        "task_seconds": manifest["build"]["task_seconds"],
        # CPU time of this process and its workers; ÷ workers ≈ the wall time on idle cores.
        "cpu_seconds": round(cpu, 2),
        "idle_estimate_seconds": round(cpu / workers, 2),
        "peak_rss_total_mb": round(sampler.peak_total / 2**20, 1),
        "peak_rss_children_mb": round(sampler.peak_children / 2**20, 1),
        "parent_hwm_mb": round(_vm_hwm_mb(), 1),
        "largest_child_hwm_mb": round(children_hwm_mb, 1),
        "fleet_machines": {"min": min(sizes), "max": max(sizes), "mean": sum(sizes) / len(sizes)},
        "sources": {
            source: sum(spec["source"] == source for spec in manifest["fleets"])
            for source in sorted({spec["source"] for spec in manifest["fleets"]})
        },
        "jobs_per_mix": {"min": min(jobs), "max": max(jobs), "mean": sum(jobs) / len(jobs)},
        "queued_jobs": sum(len(record["queued"]) for record in records),
        "teacher_stopped_by": stopped,
        "teacher_seconds_max": max(record["teacher_seconds"] for record in records),
        "splits": by_split,
        "target_seconds": TARGET_SECONDS,
        "pass": seconds <= TARGET_SECONDS,
    }
    if args.save is not None:
        path = args.save / "corpus.pt"
        save_corpus(corpus, path)
        result["file_mb"] = round(path.stat().st_size / 2**20, 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    verdict = "PASS" if result["pass"] else "FAIL"
    print(f"{verdict}: built in {seconds:.0f} s (target ≤ {TARGET_SECONDS:.0f} s)")


if __name__ == "__main__":
    main()
