"""The `hulk` command line (docs/contracts.md#command-line): one sub-command per step.

Every command is a thin caller of a step (`hulk.steps.run`, which also writes the step's metrics,
as DVC and the flows do) or of a `hulk.stages` module; every option defaults to params.yaml, so
the bare command works on the embedded default data. Bad input ends in a message and exit code 2,
never a traceback.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from hulk import steps
from hulk.errors import ConfigError, HulkError, InputError, storage_error
from hulk.settings import DEFAULT_PARAMS, Settings, load_settings
from hulk.stages import BASELINE_SYSTEMS, JobRow, StepResult

if TYPE_CHECKING:
    from hulk.stages.assign import AssignSummary
    from hulk.stages.evaluate import EvaluateSummary
    from hulk.stages.scheduling import QueueBlock

app = typer.Typer(
    help="Hulk: place large training jobs on a geo-distributed GPU fleet.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

# As `seed` in params.yaml: what numpy and torch take.
SeedOption = Annotated[
    int | None, typer.Option(min=0, max=2**63 - 1, help="Random seed (params: seed).")
]
ParamsOption = Annotated[
    Path, typer.Option("--params", help="Settings file (every tunable number of Hulk).")
]


def _settings(ctx: typer.Context, data: Path | None = None) -> Settings:
    """The params; with a data folder given, it is `data_dir` for everything (the MLflow
    registry inside it included, and the params' paths under their `data_dir`:
    `Settings.with_data_dir`), as for the nightly run."""
    settings: Settings = ctx.obj
    return settings if data is None else settings.with_data_dir(data)


def _existing_folder(settings: Settings) -> None:
    """`data.missing_folder` unless the data folder exists: a command that reads one must not
    grow a new folder (its lock, caches) from a mistyped --data."""
    from hulk.data_folder import require_folder

    require_folder(settings.data_dir)


@contextmanager
def _nightly_files(settings: Settings) -> Iterator[None]:
    """The data folder's ``nightly`` lock, for a command that writes what the nightly writes
    (logs, link table, graph, corpus, labels, model): run by hand during a nightly, it waits
    for it (`hulk.folder_lock`). Assign runs take the ``assign`` lock instead."""
    from hulk.folder_lock import folder_lock

    if not settings.data_dir.exists():  # a folder still to be made: no nightly runs on it, and
        yield  # a failed first command must leave no folder behind
        return
    with folder_lock(settings.data_dir, "nightly", settings.scheduler.lock_timeout_s):
        yield


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out.print(f"hulk {version('hulk')}")
        raise typer.Exit()


def _tolerant_output() -> None:
    """Characters the terminal's encoding lacks (``✓``, ``✗``, ``→`` on an ASCII or Latin-1
    locale) print as ``?``: a command whose work is done must not end in a traceback over a
    mark. stderr already escapes them (Python's default there)."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and getattr(sys.stdout, "errors", "strict") == "strict":
        reconfigure(errors="replace")


class _WarningsToStderr(logging.Handler):
    """Hulk's own log warnings (a lock another run holds) as a line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(f"[yellow]note:[/yellow] {escape(record.getMessage())}")


def _show_warnings() -> None:
    logger = logging.getLogger("hulk")
    if not any(isinstance(h, _WarningsToStderr) for h in logger.handlers):
        handler = _WarningsToStderr(logging.WARNING)
        logger.addHandler(handler)
        logger.setLevel(min(logger.getEffectiveLevel(), logging.WARNING))


@app.callback()
def main(
    ctx: typer.Context,
    params: ParamsOption = DEFAULT_PARAMS,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print Hulk's version."
        ),
    ] = False,
) -> None:
    _tolerant_output()
    _show_warnings()
    try:
        given = getattr(ctx.get_parameter_source("params"), "name", None) == "COMMANDLINE"
        if given and not Path(params).is_file():
            # Only the default params.yaml may be absent (the defaults then); a mistyped
            # --params would run every command on the defaults without a word.
            raise ConfigError(
                "no settings file here: --params names a file that is not there (without "
                "--params, ./params.yaml or the defaults)",
                "settings.missing_file",
                params,
            )
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
        except Exception as exc:  # a read-only folder or a full disk: one line, exit code 2
            error = storage_error(exc, _data_folder(args, kwargs))
            if error is None:
                raise
            err.print(f"[red]error:[/red] {escape(str(error))}")
            raise typer.Exit(error.exit_code) from None

    return wrapper


def _data_folder(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Path | None:
    """The data folder a command works on: its --data / --out, else params' data_dir."""
    given = kwargs.get("data") or kwargs.get("out_dir")
    if given is not None:
        return Path(given)
    contexts = [v for v in (*args, *kwargs.values()) if isinstance(v, typer.Context)]
    settings = contexts[0].obj if contexts else None
    return settings.data_dir if isinstance(settings, Settings) else None


def log_line(text: str) -> None:
    """A timestamped progress line on stderr (readable in cron mail and CI logs)."""
    err.print(f"{time.strftime('%H:%M:%S')} {escape(text)}", highlight=False)


def progress_lines(
    label: str, every_s: float = 30.0, step_pct: int = 10
) -> Callable[[int, int], None]:
    """A progress(done, total) callback writing plain log lines: at the first call, every
    `step_pct` percent or `every_s` seconds, and at the end (step, count, percent, elapsed)."""
    started = time.perf_counter()
    last = {"at": -math.inf, "pct": -step_pct}

    def update(done: int, total: int) -> None:
        now = time.perf_counter()
        pct = int(100 * done / total) if total else 0
        end = bool(total) and done >= total
        if end or pct >= last["pct"] + step_pct or now - last["at"] >= every_s:
            last.update(at=now, pct=pct - pct % step_pct)
            count = f"{done}/{total} ({pct}%)" if total else str(done)
            log_line(f"{label}: {count}, {now - started:.0f} s elapsed")

    return update


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar driven by a library's progress(done, total) callback; without a
    terminal (cron, CI), plain log lines instead (`progress_lines`)."""
    if not err.is_terminal:
        yield progress_lines(label)
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def report(
    result: StepResult[Any], title: str, started: float, figures: dict[str, Any] | None = None
) -> None:
    """Warnings, a done line, then the figures (default: the step's summary) and outputs."""
    for finding in result.warnings:
        err.print(f"[yellow]{escape(finding.render())}[/yellow]")
    out.print(f"[green]✓[/green] {title} ({time.perf_counter() - started:.1f} s)")
    for key, value in (result.summary.to_dict() if figures is None else figures).items():
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
    seed: SeedOption = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "--data", help="Output (data) folder (params: data_dir)."),
    ] = None,
    append_day: Annotated[
        bool, typer.Option("--append-day", help="Add the next day to the logs already in --out.")
    ] = False,
) -> None:
    """Generate a synthetic inventory and day-partitioned latency logs."""
    settings = _settings(ctx, out_dir)
    started = time.perf_counter()
    if append_day:
        from hulk.stages.generate import append_day as append_next_day

        given = [name for name, value in (("--preset", preset), ("--days", days)) if value]
        if given:
            raise ConfigError(
                f"{' and '.join(given)}: --append-day adds one day to the folder's own fleet "
                "and network; generate a new window instead"
            )

        with _nightly_files(settings):
            result = append_next_day(settings.data_dir, settings, seed=seed)
        report(result, "appended", started)
    else:
        with _nightly_files(settings), progress_bar("generating logs") as bar:
            result = steps.run(
                "generate",
                settings,
                preset=preset,
                days=days,
                seed=seed,
                progress=bar,
            )
        report(result, "generated", started)
    # The logs are the generate stage's outputs: recorded, `dvc repro` keeps them (an appended
    # day included) instead of checking the cached ones out over them. Not when an option
    # overrode params.yaml: the lock would claim params.yaml makes data it does not.
    overrides = [
        option
        for option, value, param in (
            ("--preset", preset, settings.generate.preset),
            ("--days", days, settings.generate.days),
            ("--seed", seed, settings.seed),
        )
        if value is not None and value != param and not append_day
    ]
    if overrides:
        log_line(f"dvc.lock: {', '.join(overrides)} overrode params.yaml: not recorded")
    else:
        log_line(steps.record_dvc_lock(settings, _params_path(ctx), ["generate"]))


@app.command("import-hulk")
@reports_errors
def import_hulk(
    ctx: typer.Context,
    nodes: Annotated[Path, typer.Option(help="Nodes: node, City, Capability, Memory[, gpus]")],
    edges: Annotated[Path, typer.Option(help="Edges: 'src dst latency_ms \\[gbit/s]' rows")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "--data", help="Output (data) folder (params: data_dir)."),
    ] = None,
) -> None:
    """Import a fleet in the paper's published format (inventory + link table)."""
    settings = _settings(ctx, out_dir)
    started = time.perf_counter()
    from hulk.stages import import_hulk as importer

    with _nightly_files(settings):
        result = importer.run(nodes, edges, settings.data_dir, settings)
    report(result, "imported", started)


@app.command()
@reports_errors
def validate(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """Validate the inventory, raw logs and link table a data folder holds."""
    settings = _settings(ctx, data)
    _existing_folder(settings)
    started = time.perf_counter()
    with _nightly_files(settings), progress_bar("validating log partitions") as bar:
        result = steps.run("validate", settings, progress=bar)
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
        Path | None,
        typer.Option("--out", "--data", help="Output (data) folder (params: data_dir)."),
    ] = None,
) -> None:
    """Compute the link table over the rolling window from raw latency logs."""
    settings = _settings(ctx, out_dir)
    started = time.perf_counter()
    with _nightly_files(settings), progress_bar("validating log partitions") as bar:
        result = steps.run(
            "ingest", settings, logs_dir=logs, inventory_file=inventory, progress=bar
        )
    report(result, "link table", started)


@app.command()
@reports_errors
def graph(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """Build the fleet graph snapshot (networkx + PyTorch Geometric)."""
    settings = _settings(ctx, data)
    _existing_folder(settings)
    started = time.perf_counter()
    with _nightly_files(settings):
        result = steps.run("graph", settings)
    report(result, "fleet graph", started)


@app.command()
@reports_errors
def run(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """The main job on the embedded default: generate the fleet and its logs, then the whole
    nightly flow (validate → ingest → graph → teacher labels → train → assign → evaluate)."""
    settings = _settings(ctx, data)
    total = time.perf_counter()
    with _nightly_files(settings), progress_bar("generating logs") as bar:
        result = steps.run("generate", settings, progress=bar)
    report(result, "generated", total)
    log_line(steps.record_dvc_lock(settings, _params_path(ctx), ["generate"]))
    _run_nightly(ctx, settings.data_dir, total)


@app.command()
@reports_errors
def nightly(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """Run the nightly Prefect flow in this process (a temporary local Prefect API unless
    PREFECT_API_URL names a server), on the data folder's logs."""
    settings = _settings(ctx, data)
    _existing_folder(settings)
    _run_nightly(ctx, settings.data_dir, time.perf_counter())


def _params_path(ctx: typer.Context) -> Path:
    """The --params file given to `hulk` (the flow reads its settings from it)."""
    root = ctx.find_root()
    return Path(root.params.get("params") or DEFAULT_PARAMS)


def _run_nightly(ctx: typer.Context, data: Path, total: float) -> None:
    from flows._common import prefect_api
    from flows.nightly import nightly as nightly_flow
    from hulk.placements import LATEST
    from hulk.registry import ui_command, ui_runs_url

    settings = _settings(ctx, data)
    started = time.perf_counter()
    with prefect_api():
        done = nightly_flow(params=str(_params_path(ctx)), data_dir=str(data))
    assert isinstance(done, dict)  # a run refused its lock raises it (flows.nightly.refused)
    out.print(f"[green]✓[/green] nightly flow ({time.perf_counter() - started:.1f} s)")
    for name, summary in done.items():
        out.print(f"    {name}: {escape(_summary_line(summary))}")
    latest = settings.assign.placements_dir / LATEST
    api = os.environ.get("PREFECT_API_URL")
    out.print(f"\nDone in {time.perf_counter() - total:.0f} s. Where to look:")
    for label, where in (
        ("placements", str(latest)),
        ("cost plot", str(latest.with_suffix(".png"))),
        ("metrics", f"{data / steps.METRICS_DIR}/*.json  (dvc metrics show)"),
        ("data docs", str(data / "validation" / "docs" / "index.html")),
        ("MLflow UI", f"{ui_command(settings)}  → {ui_runs_url(settings)}"),
        (
            "Prefect UI",
            f"{api.removesuffix('/api')} (this run)"
            if api
            else "PREFECT_SERVER_ANALYTICS_ENABLED=false prefect server start  → "
            "http://127.0.0.1:4200 "
            f"(this run used a temporary API over the local Prefect database, {_prefect_home()}: "
            "the server shows it with its artifacts)",
        ),
    ):
        out.print(f"    {label:<12} {escape(where)}")


def _prefect_home() -> str:
    """Where the local Prefect database lives: PREFECT_HOME, else Prefect's default."""
    home = os.environ.get("PREFECT_HOME")
    return home if home else "~/.prefect"


@app.command()
@reports_errors
def stage(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            help=f"A step of hulk/steps.py (a dvc.yaml stage): {', '.join(steps.BY_NAME)}."
        ),
    ],
) -> None:
    """Run one step of the pipeline as dvc.yaml's stage of that name does (and write its
    metrics under DATA/metrics)."""
    if name not in steps.BY_NAME:
        raise InputError(
            None, "stage.unknown", f"no step {name!r}; steps: {', '.join(steps.BY_NAME)}"
        )
    settings = _settings(ctx)
    started = time.perf_counter()
    # assign takes the assign lock itself; evaluate only reads and plots.
    lock = nullcontext() if name in ("assign", "evaluate") else _nightly_files(settings)
    with lock:
        if name in ("generate", "validate", "corpus", "train"):
            with progress_bar(f"{name}") as bar:
                result = steps.run(name, settings, progress=bar)
        else:
            result = steps.run(name, settings)
    report(result, name, started, _brief(result))


@app.command("dvc-yaml")
@reports_errors
def dvc_yaml(
    ctx: typer.Context,
    out_file: Annotated[Path, typer.Option("--out", help="File to write.")] = Path("dvc.yaml"),
    check: Annotated[
        bool, typer.Option("--check", help="Only check that the file is up to date.")
    ] = False,
) -> None:
    """Write dvc.yaml from the step graph of hulk/steps.py (the one definition of the stages)."""
    text = steps.dvc_yaml(_settings(ctx))
    if check:
        current = out_file.read_text(encoding="utf-8") if out_file.exists() else ""
        if current != text:
            raise InputError(
                out_file, "dvc.stale", "differs from hulk/steps.py: run `hulk dvc-yaml`"
            )
        out.print(f"{out_file} is up to date")
        return
    steps.write_dvc_yaml(_settings(ctx), out_file)
    out.print(f"wrote {out_file}")


@app.command()
def serve(ctx: typer.Context) -> None:
    """Serve the nightly and assign deployments with prefect.yaml's schedules (needs a Prefect
    server: `prefect server start`, and PREFECT_API_URL=http://127.0.0.1:4200/api); their runs
    read the --params file."""
    from flows.serve import main as serve_main

    serve_main(params=str(_params_path(ctx).resolve()))


@app.command()
@reports_errors
def train(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
    seed: SeedOption = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Processes labelling the corpus (params: corpus.workers)."),
    ] = None,
    rebuild_corpus: Annotated[
        bool,
        typer.Option("--rebuild-corpus", help="Build the corpus even if a matching one exists."),
    ] = False,
) -> None:
    """Train the GNN on teacher-labelled fleets, evaluate, register in MLflow, promote."""
    from hulk.registry import require_reachable, ui_command, ui_runs_url

    settings = _settings(ctx, data)
    if seed is not None:  # every step's seed, the fleet's samples too, as `seed:` in params
        settings = settings.model_copy(update={"seed": seed})
    _existing_folder(settings)
    require_reachable(settings)  # before the corpus and labels, not after them
    started = time.perf_counter()
    with _nightly_files(settings):
        with progress_bar("labelling corpus fleets") as bar:
            built = steps.run(
                "corpus", settings, seed=seed, workers=workers, rebuild=rebuild_corpus, progress=bar
            )
        log_line("prior: training on the corpus unless it is current")
        prior = steps.run("prior", settings, seed=seed, rebuild=rebuild_corpus)
        log_line("labels: the fleet's samples, teacher-labelled unless cached")
        labels = steps.run("labels", settings)
        log_line(f"labels: {labels.summary.labelled} labelled, {labels.summary.cached} cached")
        with progress_bar("fine-tuning epochs") as bar:
            result = steps.run("train", settings, seed=seed, progress=bar)
    result.findings = labels.findings + result.findings
    figures = {
        "corpus_reused": built.summary.reused,
        "prior_reused": prior.summary.reused,
        "labels_cached": labels.summary.cached,
        "labels_labelled": labels.summary.labelled,
        **result.summary.to_dict(),
    }
    report(result, "trained", started, figures)
    out.print(f"    compare versions: {escape(ui_command(settings))}, then {ui_runs_url(settings)}")


# --- assign, evaluate, replan -------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    """Seconds for a table cell in at most 7 characters ('130.4', '4,129', '6.99e6'); '-' for
    none or infinity."""
    if value is None or not math.isfinite(value):
        return "-"
    if value >= 100_000:
        exponent = math.floor(math.log10(value))
        return f"{value / 10**exponent:.2f}e{exponent}"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def _id_ranges(ids: list[int], limit: int = 6) -> str:
    """Node ids as 'n: a–b, c' (runs of consecutive ids collapsed), '-' when empty."""
    if not ids:
        return "-"
    ordered = sorted(ids)
    runs: list[list[int]] = [[ordered[0], ordered[0]]]
    for node in ordered[1:]:
        if node == runs[-1][1] + 1:
            runs[-1][1] = node
        else:
            runs.append([node, node])
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in runs]
    shown = ", ".join(parts[:limit]) + (", …" if len(parts) > limit else "")
    return f"{len(ids)}: {shown}"


def _placements_table(rows: Sequence[JobRow], title: str, times: bool = True) -> Table:
    """Per job: status, machines, D×S and (with `times`) seconds per iteration and its lower
    bound; the scheduler's start and finish (UTC) when it set them."""
    scheduled = any(row.scheduled is not None for row in rows)
    body: list[list[str]] = []
    for row in rows:
        cells = [escape(row.job), row.status, _id_ranges(row.machines), row.shape or "-"]
        if times:
            cells += [_seconds(row.iteration_s), _seconds(row.lower_bound_s)]
        if scheduled:
            estimate = row.scheduled
            start, finish = (estimate.start_at, estimate.finish_at) if estimate else (None, None)
            cells += [_utc_short(start), _utc_short(finish)]
        body.append(cells)
    headers = ["job", "status", "machines", "D×S"]
    headers += ["s/iter", "bound"] if times else []
    headers += ["start", "finish"] if scheduled else []
    if scheduled:
        title += ", times UTC"
    return _table(title, headers, body, right=("s/iter", "bound"))


def _table(
    title: str,
    headers: Sequence[str],
    body: Sequence[Sequence[str]],
    right: Sequence[str] = (),
    fold: Sequence[str] = ("machines",),
) -> Table:
    """A job table that reads in an 80-column terminal: the `fold` columns (machine lists)
    wrap between words; figures and times never break (each other column as wide as its
    widest cell), nor do names unless a long one would leave no room for the rest: then the
    first column (the job) folds too, so that no column is dropped."""
    texts = [[Text.from_markup(cells[i]).plain for cells in body] for i in range(len(headers))]
    widths = []
    for header, column in zip(headers, texts, strict=True):
        shown = [header, *column]
        if header in fold:
            widths.append(max(len(w) for text in shown for w in text.split()))
        else:
            widths.append(max(len(text) for text in shown))
    spare = out.width - (sum(widths) + 2 * (len(headers) - 1))  # two spaces between columns
    name_folds = spare < 0 and widths[0] + spare >= len(headers[0])
    if name_folds:
        widths[0] += spare
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    for i, (header, width) in enumerate(zip(headers, widths, strict=True)):
        justify: Literal["left", "right"] = "right" if header in right else "left"
        if i == 0 and name_folds:  # held to its share: rich would keep more of a long name
            table.add_column(
                header, overflow="fold", min_width=width, max_width=width, justify=justify
            )
        elif header in fold:
            table.add_column(header, overflow="fold", min_width=width, justify=justify)
        else:
            table.add_column(header, no_wrap=True, min_width=width, justify=justify)
    for cells in body:
        table.add_row(*cells)
    return table


def _utc_short(value: str | None, now: dt.datetime | None = None) -> str:
    """``2026-11-24T09:40:54Z`` as ``11-24 09:40`` when it lies within six months of `now`
    (the nearest such day is meant, as ``ls -l`` shows times), else as the date ``2027-06-01``:
    a table stays as wide in December, when finishes fall in the next year, as in June.
    Unknown as ``-``."""
    if not value:
        return "-"
    moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    near = abs(moment - (now or dt.datetime.now(dt.UTC))) < dt.timedelta(days=182)
    return f"{value[5:10]} {value[11:16]}" if near else value[:10]


def _reasons(rows: Sequence[JobRow]) -> None:
    for row in rows:
        if row.reason:
            out.print(f"  {escape(row.job)}: {escape(row.reason)}")


def _brief(result: StepResult[Any]) -> dict[str, Any]:
    """The summary's one-line values (tables are printed separately; a value the run has not,
    as the queue of a System A run, is left out rather than printed as None)."""
    values = result.summary.to_dict().items()
    return {k: v for k, v in values if v is not None and not isinstance(v, list | dict)}


def _summary_line(summary: dict[str, Any]) -> str:
    """A step's summary in one readable line: the gate's figures of training's metrics (all
    of them: data/metrics/details/, MLflow), sha256 hashes cut to 12 characters, 4 significant
    digits, no nested values (outputs, artifact ids)."""

    def shown(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value):  # sha256
            return value[:12]
        return str(value)

    kept = {
        key: value
        for key, value in summary.items()
        if not isinstance(value, dict | list) and ("/" not in key or key.startswith("gate/"))
    }
    return ", ".join(f"{key}: {shown(value)}" for key, value in kept.items())


def _queue_lines(queue: QueueBlock) -> None:
    """The scheduler's figures under the placements table."""
    actions = ", ".join(f"{n} {a}" for a, n in queue.actions.items()) or "empty"
    mean, missed = queue.mean_completion_s, queue.missed_deadlines
    out.print(
        f"queue: {actions}; mean completion "
        + (f"{mean / 3600:.1f} h" if mean is not None else "- (no job has a finish yet)")
        # The last estimated finish: jobs without a length, or that never start, have none.
        + f"; last finish {queue.ends_at or '-'}"
        + (f"; [red]{missed} deadline(s) missed[/red]" if missed else "")
    )
    changed: dict[str, Sequence[str | int]] = {
        "finished": queue.finished,
        "moved": queue.moved,
        "withdrawn": queue.withdrawn,
        "back from the jobs file": queue.resubmitted,
        "drained": queue.drained,
    }
    for key, values in changed.items():
        if values:
            out.print(f"  {key}: {', '.join(str(v) for v in values)}")


def _makespan(value: float | None, schedule: str) -> None:
    how = (
        "sum over jobs run one after another" if schedule == "sequential" else "slowest placed job"
    )
    out.print(f"makespan: {_seconds(value)} s per iteration ({how})")


@app.command()
@reports_errors
def assign(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
    jobs: Annotated[Path | None, typer.Option(help="Jobs file (params: assign.jobs_file).")] = None,
    strategy: Annotated[
        str | None,
        typer.Option(help="auto | gnn | teacher | A | B | C (params: assign.strategy)."),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Placements folder (params: assign.placements_dir)."),
    ] = None,
    seed: SeedOption = None,
) -> None:
    """Schedule (teacher, gnn) or place (A, B, C) the jobs on the fleet; write
    <run-id>.json and latest.json in the placements folder (--out)."""
    settings = _settings(ctx, data)
    started = time.perf_counter()
    result = steps.run(
        "assign",
        settings,
        jobs_file=jobs,
        strategy=strategy,
        out_dir=out_dir,
        seed=seed,
    )
    elsewhere = out_dir is not None and (
        out_dir.resolve() != settings.assign.placements_dir.resolve()
    )
    _print_assignment(result, started, elsewhere)


@app.command()
@reports_errors
def publish(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
) -> None:
    """Publish the placements latest.json holds as the assign flow does: their MLflow
    assignment run, latest.png and the record latest.published.json (after `hulk assign`)."""
    import json

    from flows.assign import PUBLISHED, _finish, _published_run
    from hulk.placements import LATEST

    settings = _settings(ctx, data)
    _existing_folder(settings)
    folder = settings.assign.placements_dir
    latest = folder / LATEST
    try:
        run_id = json.loads(latest.read_text(encoding="utf-8"))["run_id"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            latest, "publish.no_placements", f"no placements to publish ({exc}): run hulk assign"
        ) from None
    if _published_run(settings) == run_id:
        out.print(f"[green]✓[/green] {escape(run_id)} is published already ({PUBLISHED})")
        return
    run_file = folder / f"{run_id}.json"
    if not run_file.is_file():
        raise InputError(run_file, "publish.no_run_file", f"latest.json names {run_id}: missing")
    mlflow_run = _finish(settings, run_file, None)
    out.print(f"[green]✓[/green] published {escape(run_id)}: MLflow run {mlflow_run}, latest.png")


def _print_assignment(
    result: StepResult[AssignSummary], started: float, elsewhere: bool = False
) -> None:
    """The assign step's tables and lines; `elsewhere`: its placements went to a folder other
    than the data folder's (--out), which `hulk publish` does not publish."""
    from hulk.assign import schedule_of

    summary = result.summary
    out.print(_placements_table(summary.jobs, f"placements ({summary.strategy})"))
    _reasons(summary.jobs)
    _makespan(summary.makespan_s, schedule_of(summary.strategy))
    if summary.queue is not None:
        _queue_lines(summary.queue)
    if summary.queue is not None and not summary.kept_latest and elsewhere:
        out.print(
            "    not published (MLflow run, latest.png): written outside the data folder's "
            "placements (--out), which `hulk publish` and the assign flow publish"
        )
    elif summary.queue is not None and not summary.kept_latest:
        out.print(
            "    not yet published (MLflow run, latest.png): `hulk publish`, or the assign "
            "flow's next run"
        )
    if summary.kept_latest:
        out.print(
            f"latest.json kept: {summary.kept_latest} job(s) run on the scheduler's placements; "
            f"System {summary.strategy}'s are in {result.outputs['placements']}"
        )
    report(result, "assigned", started, _brief(result))


@app.command()
@reports_errors
def evaluate(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(help="Placements file (default: assign.placements_dir/latest.json)."),
    ] = None,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="PNG to write (default: none for a FILE given; latest.png beside latest.json)."
        ),
    ] = None,
) -> None:
    """Cost table of a placements file (plan, estimate, baselines, lower bound), and its plot
    when asked (--plot) or for the data folder's latest.json (latest.png, beside it)."""
    from hulk.placements import LATEST

    settings = _settings(ctx, data)
    _existing_folder(settings)
    started = time.perf_counter()
    result = steps.run("evaluate", settings, placements_file=file, plot=plot)
    _print_evaluation(result, file or settings.assign.placements_dir / LATEST, started)


def _print_evaluation(result: StepResult[EvaluateSummary], file: Path, started: float) -> None:
    summary = result.summary
    rows = summary.jobs
    title = f"{file.name}: strategy {summary.strategy}, {summary.schedule}"
    out.print(_placements_table(rows, title, times=False))
    figures = ("plan", "compute", "comm", "bound", *BASELINE_SYSTEMS)
    body = [
        [
            escape(row.job),
            _seconds(row.iteration_s),
            _seconds(row.compute_s),
            _seconds(row.comm_s),
            _seconds(row.lower_bound_s),
            *(_seconds(row.baselines_s.get(name)) for name in BASELINE_SYSTEMS),
        ]
        for row in rows
    ]
    # As every job table: figures never break; a long name folds if the row needs the room.
    title = "seconds per iteration (plan: compute + comm; A, B, C: whole fleet)"
    out.print(_table(title, ["job", *figures], body, right=figures))
    _reasons(rows)
    _makespan(summary.makespan_s, summary.schedule)
    report(result, "evaluated", started, _brief(result))


def _node_list(text: str | None) -> list[int]:
    """'3,7, 12' → [3, 7, 12]; an InputError naming --fail for anything else."""
    if not text or not text.strip():
        return []
    ids = []
    for part in text.split(","):
        part = part.strip()
        try:
            ids.append(int(part))
        except ValueError:
            raise InputError(
                None, "replan.bad_node_list", f"--fail: {part!r} is not a node id (use N,N,…)"
            ) from None
    return ids


@app.command()
@reports_errors
def replan(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="Data folder (params: data_dir).")] = None,
    placements: Annotated[
        Path | None,
        typer.Option(help="Placements file (default: assign.placements_dir/latest.json)."),
    ] = None,
    fail: Annotated[
        str | None, typer.Option(help="Failed machines: node ids, comma-separated.")
    ] = None,
    add_nodes: Annotated[
        Path | None, typer.Option(help="Added machines: node file as for import-hulk.")
    ] = None,
    add_edges: Annotated[
        Path | None, typer.Option(help="Their measured links: edge file as for import-hulk.")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Placements folder (default: the placements file's)."),
    ] = None,
) -> None:
    """Re-plan after machines fail or are added; write new placements; print what moved."""
    from hulk.assign import schedule_of
    from hulk.placements import LATEST
    from hulk.stages import replan as replanning

    settings = _settings(ctx, data)
    _existing_folder(settings)
    started = time.perf_counter()
    result = replanning.run(
        settings.data_dir,
        settings,
        placements_file=placements or settings.assign.placements_dir / LATEST,
        failed=_node_list(fail),
        add_nodes=add_nodes,
        add_edges=add_edges,
        out_dir=out_dir,
    )
    summary = result.summary
    moves = Table(
        title=f"moves (re-planned from {summary.replanned_from})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("job", "status", "removed", "added"):
        moves.add_column(column, overflow="fold")
    for move in summary.moves:
        status = move.status_before
        if move.status_after != status:
            status = f"{status} → {move.status_after}"
        moves.add_row(
            move.job,
            status,
            _id_ranges(list(move.nodes_removed)),
            _id_ranges(list(move.nodes_added)),
        )
    if summary.moves:
        out.print(moves)
        for move in summary.moves:
            if move.reason:
                out.print(f"  {escape(move.job)}: {escape(move.reason)}")
    else:
        out.print("nothing moved")
    rows = summary.jobs
    out.print(_placements_table(rows, f"placements ({summary.strategy})"))
    _reasons(rows)
    _makespan(summary.makespan_s, schedule_of(summary.strategy))
    if summary.kept_latest:
        out.print(
            f"latest.json kept: {summary.kept_latest} job(s) run on the scheduler's placements, "
            "and this what-if moves none of them for real: an assign run moves the jobs of a "
            "machine once it is drained (status `drained` in machines.csv) or has stopped "
            "reporting in the logs, and decides when waiting jobs start (here they are placed "
            f"on what is free). The what-if is in {result.outputs['placements']}"
        )
    report(result, "re-planned", started, _brief(result))


# --- hulk jobs: the scheduler's job store ----------------------------------------------------

jobs_app = typer.Typer(
    help=(
        "The job store (DATA/jobs/jobs.db): submit, cancel, finish and list jobs, report their "
        "progress, read their history."
    ),
    no_args_is_help=True,
)
app.add_typer(jobs_app, name="jobs")
DataOption = Annotated[Path | None, typer.Option("--data", help="Data folder (params: data_dir).")]


@contextmanager
def _store(ctx: typer.Context, data: Path | None, create: bool = False) -> Iterator[Any]:
    """The data folder's job store, under its assign lock (a run never loses a change). Unless
    `create` (a command that adds jobs), a folder without a store reads as one without jobs,
    and the command creates nothing: no store, no lock. With `create`, a store the next
    scheduling run would refuse (missing, empty or older while ``latest.json`` shows jobs
    running: `check_store_present`) is refused here too, before anything is written."""
    from hulk.folder_lock import folder_lock
    from hulk.job_store import JobStore
    from hulk.stages.scheduling import check_store_present, jobs_db

    settings = _settings(ctx, data)
    _existing_folder(settings)
    path = jobs_db(settings.data_dir)
    lock: AbstractContextManager[Any] = nullcontext()
    if create or path.exists():
        lock = folder_lock(
            settings.data_dir,
            "assign",
            settings.scheduler.lock_timeout_s,
            holder=f"hulk jobs {ctx.info_name}",
        )
    with lock:
        if create:
            check_store_present(settings.data_dir, [settings.assign.placements_dir])
        with JobStore(path, create=create) as store:
            yield store


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


@jobs_app.command("list")
@reports_errors
def jobs_list(
    ctx: typer.Context,
    data: DataOption = None,
    all_jobs: Annotated[
        bool, typer.Option("--all", help="Finished and cancelled jobs too.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines, one per job.")] = False,
) -> None:
    """The jobs and their state: waiting, running (where, since when, estimated finish), and
    the deadlines their estimated finish misses. Every estimate is the store's: a running job's
    follows its progress, a waiting job's is the last scheduling run's (nothing is scheduled
    anew)."""
    from hulk.job_store import QUEUED, RUNNING, SUBMITTED

    now = _now()
    with _store(ctx, data) as store:
        states = store.jobs(None if all_jobs else [SUBMITTED, QUEUED, RUNNING])
    records = [_job_record(state.to_dict(now), now) for state in states]
    if as_json:
        # One compact object a line, written as is: rich would indent it over many lines, or
        # wrap a long one. Escaped to ASCII, it stays exact on a terminal of any encoding.
        import json

        for record in records:
            sys.stdout.write(json.dumps(record) + "\n")
        return
    headers = ["job", "state", "machines", "done", "started", "finish"]
    deadlines = any(r["deadline"] for r in records)
    headers += ["deadline"] if deadlines else []
    body: list[list[str]] = []
    for r in records:
        length = "-" if r["iterations"] is None else f"{r['iterations']:,}"
        # A queued job the fleet can never hold waits for machines to be added: say so here,
        # not only in its reason below.
        never = r["state"] == "queued" and str(r["reason"] or "").startswith("infeasible")
        cells = [
            escape(r["job"]),
            "queued, infeasible" if never else r["state"],
            _id_ranges(r["nodes"]) if r["state"] == "running" else "-",  # only running jobs hold
            f"{r['done_iterations']:,.0f} / {length}",
            _utc_short(r["started_at"]),
            # Estimated until it is done; a cancelled job never finished (history: when).
            _utc_short(r["estimated_finish"] or (r["state"] == "finished" and r["finished_at"])),
        ]
        if deadlines:
            late = r["deadline_met"] is False
            cells.append(_utc_short(r["deadline"]) + (" [red]✗[/red]" if late else ""))
        body.append(cells)
    title = f"jobs at {now:%Y-%m-%d %H:%M}Z (times UTC; a finish to come is estimated)"
    table = _table(title, headers, body, fold=("state", "machines", "done"))
    out.print(table)
    for r in records:
        if r["reason"] and r["state"] != "running":
            out.print(f"  {escape(r['job'])}: {escape(r['reason'])}")
    missed = [r["job"] for r in records if r["deadline_met"] is False]
    if missed:  # as `hulk assign` counts them
        out.print(f"[red]{len(missed)} deadline(s) missed[/red]: {escape(', '.join(missed))}")


def _job_record(record: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """A job of `hulk jobs list`: the store's record and ``deadline_met``: whether its finish
    (done, or estimated: a running job's follows its progress) meets its deadline; false for
    a job not started, or without a finish, whose deadline is past at `now` whatever the last
    run estimated (as `hulk assign` counts it), and for a job whose finish lies past year 9999
    (running, or waiting with a start the last run estimated); None without a deadline, for a
    cancelled job, and without a finish while the deadline is to come."""

    def moment(text: str) -> dt.datetime:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))

    finish = record["estimated_finish"] or record["finished_at"]
    met = None
    if record["deadline"] and record["state"] != "cancelled":
        past = moment(record["deadline"]) < now
        if past and record["state"] not in ("running", "finished"):
            met = False  # not started: its stored finish estimate is stale
        elif finish:
            met = moment(finish) <= moment(record["deadline"])
        elif record["state"] == "running" and record["iterations"] and record["iteration_s"]:
            met = False  # its finish lies past every date a calendar holds, deadlines included
        elif record["state"] in ("submitted", "queued") and record["estimated_start"]:
            # A start and a length, yet no finish: the run's finish lay past year 9999 (it
            # knows neither when the job waits on jobs without a length).
            met = False if record["iterations"] else None
        elif past and record["state"] != "finished":
            met = False
    return record | {"deadline_met": met}


@jobs_app.command("submit")
@reports_errors
def jobs_submit(
    ctx: typer.Context,
    jobs_file: Annotated[Path, typer.Argument(help="A jobs file (docs/contracts.md#jobs-file).")],
    data: DataOption = None,
) -> None:
    """Submit the jobs of a file; the next assign run schedules them."""
    from hulk.jobs import load_jobs

    jobs = load_jobs(jobs_file)
    with _store(ctx, data, create=True) as store:
        names = store.submit(jobs, _now(), file=jobs_file)
    if names:
        out.print(f"[green]✓[/green] submitted {', '.join(names)}")
    unchanged = [job.name for job in jobs if job.name not in names]
    if unchanged:  # the same spec again: a retried submit changes nothing
        out.print(f"[green]✓[/green] already submitted, unchanged: {', '.join(unchanged)}")


@jobs_app.command("cancel")
@reports_errors
def jobs_cancel(ctx: typer.Context, name: str, data: DataOption = None) -> None:
    """Cancel a waiting or running job; its machines return to the pool. A job whose row in
    the store is damaged is removed from it (its history stays)."""
    with _store(ctx, data) as store:
        state = store.cancel(name, _now())
    removed = "" if state is not None else ": its damaged row is removed from the store"
    out.print(f"[green]✓[/green] cancelled {escape(name)}{removed}")


@jobs_app.command("finish")
@reports_errors
def jobs_finish(ctx: typer.Context, name: str, data: DataOption = None) -> None:
    """Mark a running job finished now; its machines return to the pool."""
    with _store(ctx, data) as store:
        store.finish(name, _now())
    out.print(f"[green]✓[/green] finished {escape(name)}")


# A negative number reads as an option to Click; taken as the argument, it gets Hulk's own
# error (jobs.bad_progress) rather than a usage box about an option "-5".
@jobs_app.command("progress", context_settings={"ignore_unknown_options": True})
@reports_errors
def jobs_progress(
    ctx: typer.Context,
    name: str,
    done: Annotated[float, typer.Argument(help="Iterations the job has done.")],
    data: DataOption = None,
) -> None:
    """Report a running job's real progress; its estimated finish follows from there."""
    with _store(ctx, data) as store:
        state = store.report_progress(name, done, _now())
    finish = state.estimated_finish()
    when = f"{finish:%Y-%m-%d %H:%M}Z" if finish else "unknown (no length)"
    if finish is None and state.job.iterations is not None:
        when = "past year 9999"
    shown = f"{int(done):,}" if float(done).is_integer() else f"{done:,}"  # as stored
    out.print(f"[green]✓[/green] {escape(name)}: {shown} iterations done; finish {when}")


@jobs_app.command("history")
@reports_errors
def jobs_history(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="One job (default: all).")] = None,
    data: DataOption = None,
) -> None:
    """Every change of every job (or of one), oldest first."""
    with _store(ctx, data) as store:
        events = store.events(name)
    for e in events:
        detail = f" ({escape(e['detail'])})" if e["detail"] else ""
        out.print(f"{e['at']}  {escape(e['job'])}  {e['event']}{detail}")


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """Give every command of `typer_app` (and of its groups) its docstring's first paragraph on
    one line as its summary: Typer's command list keeps a docstring's line breaks, which broke
    `hulk --help`'s list into ragged half-lines."""
    for info in typer_app.registered_commands:
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            first = inspect.cleandoc(info.callback.__doc__).split("\n\n")[0]
            info.short_help = " ".join(first.split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _one_line_summaries(group.typer_instance)


_one_line_summaries(app)

if __name__ == "__main__":
    app()
