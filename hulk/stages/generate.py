"""The generate step: a synthetic fleet and its day-partitioned latency logs (the embedded
default data of `hulk run`), and the next day of logs (`hulk generate --append-day`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hulk import schemas
from hulk.errors import InputError
from hulk.settings import Settings
from hulk.stages import Progress, StepResult, Summary


@dataclass(frozen=True)
class GenerateSummary(Summary):
    preset: str
    machines: int
    days: int
    seed: int
    demo_jobs: bool  # the demo's jobs file was written (the folder had none)


@dataclass(frozen=True)
class AppendDaySummary(Summary):
    day: str  # the new partition's folder name
    seed: int


def run(
    out_dir: Path,
    settings: Settings,
    preset: str | None = None,
    days: int | None = None,
    seed: int | None = None,
    progress: Progress = None,
) -> StepResult[GenerateSummary]:
    """Write the inventory and `days` of logs of `preset` (defaults: ``generate:``, ``seed``)."""
    from hulk.generate import build_fleet, write_dataset

    gen = settings.generate
    preset = preset or gen.preset
    days = days or gen.days
    seed = settings.seed if seed is None else seed
    inventory = build_fleet(preset, seed, gen)
    parts = write_dataset(out_dir, inventory, seed, gen, days, gen.end_date, progress=progress)
    outputs = {"inventory": out_dir / schemas.INVENTORY_FILE, "logs": out_dir / schemas.LOGS_DIR}
    demo_jobs = write_demo_jobs(out_dir, settings.assign.jobs_file)
    if demo_jobs:
        outputs["jobs"] = settings.assign.jobs_file
    return StepResult(
        outputs=outputs,
        summary=GenerateSummary(preset, len(inventory), len(parts), seed, demo_jobs),
    )


def write_demo_jobs(data_dir: Path, jobs_file: Path) -> bool:
    """The demo's upcoming jobs (`hulk.jobs.demo_jobs_file`) at `jobs_file` when it lies in the
    data folder and is not there yet, so that a new folder's nightly has jobs to schedule. A
    jobs file that exists (the user's) is never touched. Returns whether it was written."""
    from hulk import fileio
    from hulk.jobs import demo_jobs_file

    inside = jobs_file.resolve().is_relative_to(data_dir.resolve())
    if jobs_file.exists() or not inside:
        return False
    jobs_file.parent.mkdir(parents=True, exist_ok=True)
    fileio.write_text(jobs_file, demo_jobs_file())
    return True


def append_day(
    out_dir: Path, settings: Settings, seed: int | None = None
) -> StepResult[AppendDaySummary]:
    """Add the day after the latest log partition: what a nightly run sees arrive. The day
    continues the folder's own network: the seed and generate settings its logs were made with
    (`hulk.generate.read_generation`), whatever params.yaml says now; a --seed other than that
    one is refused. Logs without that record (a user's own) are refused: a made-up day would
    mix with them."""
    from hulk.generate import append_day as append_next_day
    from hulk.generate import read_generation, require_generated

    generate = settings.generate
    require_generated(out_dir)
    recorded = read_generation(out_dir)
    if recorded is not None:
        made_with, generate = recorded
        if seed is not None and seed != made_with:
            raise InputError(
                out_dir / schemas.GENERATION_FILE,
                "generate.seed",
                f"the logs here were generated with seed {made_with}: a day of seed {seed} "
                "would come from another network",
            )
        seed = made_with
    seed = settings.seed if seed is None else seed
    path = append_next_day(out_dir, seed, generate)
    return StepResult(AppendDaySummary(path.parent.name, seed), outputs={"partition": path})
