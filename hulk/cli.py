"""The `hulk` command line (CONTRACTS.md): one sub-command per pipeline step.

Every command is a thin caller of hulk.pipeline; every option defaults to params.yaml, so the
bare command works on the embedded default data. Bad input ends in a message and exit code 2,
never a traceback.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hulk import pipeline
from hulk.errors import HulkError
from hulk.settings import DEFAULT_PARAMS, Settings, load_settings

# Quiet third-party telemetry before anything imports it.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

app = typer.Typer(
    help="Hulk: place large training jobs on a geo-distributed GPU fleet.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

ParamsOption = Annotated[
    Path, typer.Option("--params", help="Settings file (every tunable number of Hulk).")
]


def _settings(ctx: typer.Context) -> Settings:
    return ctx.obj


@app.callback()
def main(ctx: typer.Context, params: ParamsOption = DEFAULT_PARAMS) -> None:
    try:
        ctx.obj = load_settings(params)
    except HulkError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(exc.exit_code) from None


def reports_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a HulkError into a clear message and a non-zero exit."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except HulkError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(exc.exit_code) from None

    return wrapper


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar driven by a library's progress(done, total) callback."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def report(result: pipeline.StepResult, title: str, started: float) -> None:
    for finding in result.warnings:
        err.print(f"[yellow]{escape(finding.render())}[/yellow]")
    out.print(f"[green]✓[/green] {title} ({time.perf_counter() - started:.1f} s)")
    for key, value in result.summary.items():
        if not isinstance(value, dict):
            out.print(f"    {key}: {escape(str(value))}")
    for key, path in result.outputs.items():
        out.print(f"    {key}: {escape(str(path))}")


@app.command()
@reports_errors
def generate(
    ctx: typer.Context,
    preset: Annotated[
        str | None, typer.Option(help="Fleet preset (params: generate.preset).")
    ] = None,
    days: Annotated[
        int | None, typer.Option(min=1, help="Days of logs (params: generate.days).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (params: seed).")] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Output folder (params: data_dir).")
    ] = None,
) -> None:
    """Generate a synthetic inventory and day-partitioned latency logs."""
    settings = _settings(ctx)
    started = time.perf_counter()
    with progress_bar("generating logs") as bar:
        result = pipeline.generate(
            out_dir or settings.data_dir,
            settings,
            preset=preset,
            days=days,
            seed=seed,
            progress=bar,
        )
    report(result, "generated", started)


@app.command("import-hulk")
@reports_errors
def import_hulk(
    ctx: typer.Context,
    nodes: Annotated[Path, typer.Option(help="Node file: node, City, Capability, Memory[, gpus].")],
    edges: Annotated[Path, typer.Option(help="Edge file: 'src dst latency_ms [gbit/s]' rows.")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Output folder (params: data_dir).")
    ] = None,
) -> None:
    """Import a fleet in the paper's published format (inventory + link table)."""
    settings = _settings(ctx)
    started = time.perf_counter()
    result = pipeline.import_hulk(nodes, edges, out_dir or settings.data_dir, settings)
    report(result, "imported", started)


@app.command()
@reports_errors
def validate(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """Validate the inventory, raw logs and link table a data folder holds."""
    settings = _settings(ctx)
    started = time.perf_counter()
    with progress_bar("validating log partitions") as bar:
        result = pipeline.validate(data or settings.data_dir, settings, progress=bar)
    report(result, "validated", started)


@app.command()
@reports_errors
def ingest(
    ctx: typer.Context,
    logs: Annotated[Path | None, typer.Option(help="Log folder (default: DATA/logs).")] = None,
    inventory: Annotated[
        Path | None, typer.Option(help="Inventory CSV (default: DATA/machines.csv).")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Output folder (params: data_dir).")
    ] = None,
) -> None:
    """Compute the link table over the rolling window from raw latency logs."""
    settings = _settings(ctx)
    data = out_dir or settings.data_dir
    started = time.perf_counter()
    with progress_bar("validating log partitions") as bar:
        result = pipeline.ingest(
            logs or data / "logs",
            inventory or data / "machines.csv",
            data,
            settings,
            progress=bar,
        )
    report(result, "link table", started)


@app.command()
@reports_errors
def graph(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """Build the fleet graph snapshot (networkx + PyTorch Geometric)."""
    settings = _settings(ctx)
    started = time.perf_counter()
    result = pipeline.graph(data or settings.data_dir, settings)
    report(result, "fleet graph", started)


@app.command()
@reports_errors
def run(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """The main job on the embedded default data: generate → validate → ingest → graph."""
    settings = _settings(ctx)
    data = data or settings.data_dir
    total = time.perf_counter()
    started = time.perf_counter()
    with progress_bar("generating logs") as bar:
        result = pipeline.generate(data, settings, progress=bar)
    report(result, "generated", started)
    started = time.perf_counter()
    with progress_bar("validating log partitions") as bar:
        result = pipeline.validate(data, settings, progress=bar)
    report(result, "validated", started)
    started = time.perf_counter()
    result = pipeline.ingest(data / "logs", data / "machines.csv", data, settings)
    report(result, "link table", started)
    started = time.perf_counter()
    result = pipeline.graph(data, settings)
    report(result, "fleet graph", started)
    out.print(f"\nDone in {time.perf_counter() - total:.0f} s. Where to look:")
    for label, path in (
        ("inventory", data / "machines.csv"),
        ("link table", data / "links.parquet"),
        ("quarantine", data / "quarantine.parquet"),
        ("validation", data / "validation" / "report.json"),
        ("data docs", data / "validation" / "docs" / "index.html"),
        ("fleet graph", data / "graph" / "snapshot.json"),
    ):
        out.print(f"    {label:<14} {escape(str(path))}")


if __name__ == "__main__":
    app()
