"""The pipeline's steps as functions over a data folder.

Each step reads its inputs from files, calls the pure library functions and writes its outputs
atomically. The CLI, the Prefect flows and the DVC stages all call these, so there is one code
path. A step that finds an error raises before writing anything downstream.

Layout of a data folder (docs/design.md#data-folder):
    machines.csv        inventory
    logs/day=…/         raw latency logs, one partition per UTC day
    quarantine.parquet  raw rows kept out of the link table, with the rule that caught them
    validation/         report.json, validated.json, Great Expectations Data Docs (docs/)
    links.parquet       link table over the window
    graph/              fleet graph snapshot
    placements/         `hulk assign` / `hulk replan`: <run-id>.json and latest.json
                        (docs/contracts.md#placements-file)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from hulk import io, schemas
from hulk.errors import InputError
from hulk.findings import Finding, raise_on_errors
from hulk.settings import Settings

if TYPE_CHECKING:
    from hulk.cost import Fleet
    from hulk.validation.logs import MapDays

Progress = Callable[[int, int], None] | None

VALIDATED = "validated.json"
LEARNING_CURVE_CSV = "learning_curve.csv"  # per epoch: train/val loss and accuracy


@dataclass
class StepResult:
    """What a step wrote and what it noticed, for the CLI and flows to report."""

    outputs: dict[str, Path] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


def data_source(data_dir: Path) -> str:
    """What a data folder's fleet comes from: ``"logs"`` (raw latency logs to validate and
    ingest) or ``"link table"`` (imported with ``hulk import-hulk``, validated then).

    Raises `InputError` naming both files when the folder has neither.
    """
    logs = data_dir / schemas.LOGS_DIR
    if logs.is_dir() and any(p.is_file() for p in logs.rglob("*")):
        return "logs"
    links = data_dir / schemas.LINKS_FILE
    if links.is_file():
        return "link table"
    raise InputError(
        data_dir,
        "data.empty",
        f"neither raw logs ({logs}/day=…/) nor a link table ({links}): generate or collect logs, "
        "or import a fleet with `hulk import-hulk`",
    )


def logs_fingerprint(logs_dir: Path, inventory_file: Path) -> str:
    """sha256 over the log files' contents and the inventory: what a validation result is for."""
    digest = hashlib.sha256()
    files = sorted(p for p in logs_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
    for path in [inventory_file, *files]:
        digest.update(
            str(path.relative_to(path.parent if path == inventory_file else logs_dir)).encode()
        )
        digest.update(io.sha256_file(path).encode())
    return digest.hexdigest()


# --- generate ---------------------------------------------------------------------------------


def generate(
    out_dir: Path,
    settings: Settings,
    preset: str | None = None,
    days: int | None = None,
    seed: int | None = None,
    progress: Progress = None,
) -> StepResult:
    from hulk.generate import build_fleet, write_dataset

    gen = settings.generate
    preset = preset or gen.preset
    days = days or gen.days
    seed = settings.seed if seed is None else seed
    inventory = build_fleet(preset, seed, gen)
    parts = write_dataset(out_dir, inventory, seed, gen, days, gen.end_date, progress=progress)
    return StepResult(
        outputs={"inventory": out_dir / schemas.INVENTORY_FILE, "logs": out_dir / schemas.LOGS_DIR},
        summary={"preset": preset, "machines": len(inventory), "days": len(parts), "seed": seed},
    )


def append_day(out_dir: Path, settings: Settings, seed: int | None = None) -> StepResult:
    """Add the day after the latest log partition: what a nightly run sees arrive."""
    from hulk.generate import append_day as append_next_day

    seed = settings.seed if seed is None else seed
    path = append_next_day(out_dir, seed, settings.generate)
    return StepResult(outputs={"partition": path}, summary={"day": path.parent.name, "seed": seed})


# --- import ---------------------------------------------------------------------------------


def import_hulk(
    nodes: Path, edges: Path, out_dir: Path, settings: Settings, now: dt.datetime | None = None
) -> StepResult:
    """Inventory and link table from the paper's published format, validated before writing."""
    from hulk.importer import import_hulk as read_hulk_format
    from hulk.validation import run_validation, validate_inventory, validate_links

    result = read_hulk_format(
        nodes,
        edges,
        default_gpu_count=settings.graph.default_gpu_count,
        validation=settings.validation,
    )
    checked = validate_inventory(result.inventory, str(nodes), settings.validation)
    checked += validate_links(result.links, result.inventory, str(edges), settings.validation)
    raise_on_errors(checked)
    out_dir.mkdir(parents=True, exist_ok=True)
    io.write_csv(out_dir / schemas.INVENTORY_FILE, result.inventory)
    io.write_parquet(out_dir / schemas.LINKS_FILE, result.links)
    io.write_parquet(out_dir / schemas.QUARANTINE_FILE, result.quarantine)
    # The written files go through the same validation as everything else (report, Data Docs);
    # what the importer itself set aside is added to that report.
    report = run_validation(
        out_dir, settings.validation, now or dt.datetime.now(dt.UTC), settings.ingest.window_days
    )
    _add_findings(report.report_path, result.findings)
    return StepResult(
        outputs={
            "inventory": out_dir / schemas.INVENTORY_FILE,
            "links": out_dir / schemas.LINKS_FILE,
            "quarantine": out_dir / schemas.QUARANTINE_FILE,
            "report": report.report_path,
            "docs": report.docs_index,
        },
        findings=result.findings + report.findings,
        summary={
            "machines": len(result.inventory),
            "links": len(result.links),
            "quarantined_rows": len(result.quarantine),
        },
    )


def _add_findings(report_path: Path, findings: list[Finding]) -> None:
    report = json.loads(report_path.read_text())
    report["findings"] = [f.to_dict() for f in findings] + report.get("findings", [])
    counts = report.setdefault("counts", {})
    counts["warnings"] = sum(f["severity"] == "warning" for f in report["findings"])
    counts["errors"] = sum(f["severity"] == "error" for f in report["findings"])
    io.write_text(report_path, json.dumps(report, indent=2, default=str) + "\n")


# --- validate -----------------------------------------------------------------------------------


def validate(
    data_dir: Path,
    settings: Settings,
    now: dt.datetime | None = None,
    progress: Progress = None,
    map_days: MapDays = map,
) -> StepResult:
    """Validate what data_dir holds; raise on errors; record which logs were validated.

    `map_days(validate_log_day, days)` runs the day partitions: `map` (in this process) or an
    executor's map (the nightly flow's Dask tasks); the outputs are the same either way.
    """
    from hulk.ingest import window_end_for
    from hulk.validation import run_validation

    now = now or dt.datetime.now(dt.UTC)
    logs_dir = data_dir / schemas.LOGS_DIR
    report = run_validation(
        data_dir,
        settings.validation,
        now,
        settings.ingest.window_days,
        progress=progress,
        probe_bytes=settings.ingest.latency_probe_bytes,
        window_end=window_end_for(logs_dir, now) if logs_dir.exists() else None,
        map_days=map_days,
    )
    raise_on_errors(report.findings)
    inventory_file = data_dir / schemas.INVENTORY_FILE
    if logs_dir.exists():
        record = {"logs_fingerprint": logs_fingerprint(logs_dir, inventory_file)}
        io.write_text(data_dir / schemas.VALIDATION_DIR / VALIDATED, json.dumps(record) + "\n")
    return StepResult(
        outputs={"report": report.report_path, "docs": report.docs_index},
        findings=report.findings,
        summary={"quarantined_rows": len(report.quarantine)},
    )


# --- ingest -------------------------------------------------------------------------------------


def ingest(
    logs_dir: Path,
    inventory_file: Path,
    out_dir: Path,
    settings: Settings,
    now: dt.datetime | None = None,
    progress: Progress = None,
) -> StepResult:
    """Link table over the window, leaving out quarantined rows; validated before it is written.

    Reuses the quarantine of a previous `validate` of exactly these logs and inventory; otherwise
    validates the raw logs first, so unvalidated rows never reach the link table.
    """
    from hulk.ingest import link_stats, window_end_for
    from hulk.validation import read_inventory, record_link_validation, validate_logs

    now = now or dt.datetime.now(dt.UTC)
    window_end = window_end_for(logs_dir, now)
    inventory = read_inventory(inventory_file)
    findings: list[Finding] = []
    quarantine = _validated_quarantine(logs_dir, inventory_file, out_dir)
    if quarantine is None:
        checked = validate_logs(
            logs_dir,
            inventory,
            settings.validation,
            now,
            settings.ingest.window_days,
            progress=progress,
            probe_bytes=settings.ingest.latency_probe_bytes,
            window_end=window_end,
        )
        findings += checked.findings
        raise_on_errors(findings)
        quarantine = checked.quarantine
    links = link_stats(
        logs_dir, inventory, settings.ingest, quarantine=quarantine, window_end=window_end
    )
    links_path = out_dir / schemas.LINKS_FILE
    findings += record_link_validation(
        out_dir, links, inventory, links_path, settings.validation, now
    )
    raise_on_errors(findings)
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / schemas.INVENTORY_FILE).resolve() != inventory_file.resolve():
        io.write_csv(out_dir / schemas.INVENTORY_FILE, inventory)
    io.write_parquet(links_path, links)
    return StepResult(
        outputs={"links": links_path},
        findings=findings,
        summary={"links": len(links), "quarantined_rows": len(quarantine)},
    )


def _validated_quarantine(
    logs_dir: Path, inventory_file: Path, out_dir: Path
) -> pd.DataFrame | None:
    """The quarantine written by `validate` for these very logs, or None if there is none."""
    record_path = out_dir / schemas.VALIDATION_DIR / VALIDATED
    quarantine_path = out_dir / schemas.QUARANTINE_FILE
    if not (record_path.exists() and quarantine_path.exists()):
        return None
    record = json.loads(record_path.read_text())
    if record.get("logs_fingerprint") != logs_fingerprint(logs_dir, inventory_file):
        return None
    return pd.read_parquet(quarantine_path)


# --- graph --------------------------------------------------------------------------------------


def graph(data_dir: Path, settings: Settings) -> StepResult:
    from hulk.graph import build_fleet_graph, features_sha256, save_fleet_graph, snapshot_id
    from hulk.validation import read_inventory

    inventory_file = data_dir / schemas.INVENTORY_FILE
    links_file = data_dir / schemas.LINKS_FILE
    if not links_file.exists():
        raise InputError(links_file, "links.exists", "no link table: run `hulk ingest` first")
    inventory = read_inventory(inventory_file)
    links = pd.read_parquet(links_file)
    fleet = build_fleet_graph(
        inventory,
        links,
        settings.hardware,
        settings.graph.bandwidth_tiers,
        snapshot=snapshot_id(links_file),
    )
    out_dir = data_dir / schemas.GRAPH_DIR
    features = features_sha256(settings.hardware, settings.graph.bandwidth_tiers)
    record = save_fleet_graph(
        fleet, out_dir, inventory_sha256=io.sha256_file(inventory_file), features=features
    )
    return StepResult(outputs={"graph": out_dir}, summary=record)


# --- assign, evaluate, replan -------------------------------------------------------------------


def load_frames(data_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(inventory, link table) of DIR/machines.csv + DIR/links.parquet."""
    from hulk.validation import read_inventory

    links_file = data_dir / schemas.LINKS_FILE
    if not links_file.exists():
        raise InputError(
            links_file,
            "links.exists",
            "no link table: run `hulk ingest` (or `hulk import-hulk`) first",
        )
    return read_inventory(data_dir / schemas.INVENTORY_FILE), pd.read_parquet(links_file)


def load_fleet(data_dir: Path, settings: Settings) -> tuple[Fleet, pd.DataFrame, pd.DataFrame]:
    """The cost model's fleet from DIR/machines.csv + DIR/links.parquet (and both frames)."""
    from hulk.cost import Fleet

    inventory, links = load_frames(data_dir)
    fleet = Fleet.from_frames(inventory, links, settings.hardware, settings.graph.bandwidth_tiers)
    return fleet, inventory, links


def _placement_rows(placements: list, fleet: Fleet) -> list[dict]:
    return [
        {
            "job": p.job.name,
            "status": p.status,
            "machines": p.node_ids(fleet),
            "shape": p.shape,
            "iteration_s": p.estimate.iteration_s if p.estimate else None,
            "lower_bound_s": p.lower_bound_s,
            "reason": p.reason,
        }
        for p in placements
    ]


def assign(
    data_dir: Path,
    settings: Settings,
    jobs_file: Path | None = None,
    strategy: str | None = None,
    out_dir: Path | None = None,
    seed: int | None = None,
    now: dt.datetime | None = None,
) -> StepResult:
    """Place the jobs of `jobs_file` on the fleet of `data_dir`; write placements atomically.

    Defaults from params.yaml (``assign:`` and ``seed``). Every input is read and checked, and
    the assignment made, before anything is written.
    """
    from hulk import placements as pl
    from hulk.assign import assign as assign_jobs
    from hulk.assign import check_strategy, makespan, schedule_of
    from hulk.jobs import load_jobs

    started = now or pl.utc_now()
    jobs_file = jobs_file or settings.assign.jobs_file
    strategy = strategy or settings.assign.strategy
    if strategy == "auto":  # the GNN once a champion model is registered, else the teacher
        from hulk.registry import champion_exists

        strategy = "gnn" if champion_exists(settings) else "teacher"
    if strategy != "gnn":  # the GNN's own check is loading the champion
        check_strategy(strategy)
    out_dir = out_dir or settings.assign.placements_dir
    seed = settings.seed if seed is None else seed
    jobs = load_jobs(jobs_file)
    fleet, inventory, links = load_fleet(data_dir, settings)
    model_record = None
    if strategy == "gnn":
        placed, model_record = _gnn_assign(data_dir, jobs, fleet, inventory, links, settings, seed)
    else:
        placed = assign_jobs(jobs, fleet, strategy, settings, seed)
    info = pl.fleet_info(fleet, data_dir / schemas.LINKS_FILE, data_dir / schemas.INVENTORY_FILE)
    doc = pl.build_document(
        placed,
        fleet,
        info,
        strategy=strategy,
        schedule=schedule_of(strategy),
        makespan_s=makespan(placed, strategy),
        seed=seed,
        started=started,
        generated_at=now,
        model=model_record,
    )
    path = pl.write_placements(doc, out_dir)
    return StepResult(
        outputs={"placements": path, "latest": out_dir / pl.LATEST},
        summary={
            "strategy": strategy,
            "run_id": doc["run_id"],
            "jobs": _placement_rows(placed, fleet),
            "makespan_s": doc["makespan_s"],
        },
    )


def model_graph(data_dir: Path, settings: Settings):
    """The graph step's tensors of the data folder's fleet (`hulk.graph.load_model_graph`)."""
    from hulk.graph import load_model_graph

    return load_model_graph(
        data_dir / schemas.GRAPH_DIR,
        data_dir / schemas.LINKS_FILE,
        data_dir / schemas.INVENTORY_FILE,
        settings.hardware,
        settings.graph.bandwidth_tiers,
    )


def _gnn_assign(
    data_dir: Path,
    jobs: list,
    fleet: Fleet,
    inventory: pd.DataFrame,
    links: pd.DataFrame,
    settings: Settings,
    seed: int,
) -> tuple[list, dict]:
    """The champion GNN + Algorithm 1 + planner; the teacher's plan when the quick check fails.

    Returns the placements and the placements file's ``model`` record (name, version, alias,
    and ``fallback``: why the teacher's plan was used instead, or null).
    """
    from hulk.gnn import model_placements
    from hulk.model import model_from_state
    from hulk.registry import load_model_files

    state_dict, config, version = load_model_files(settings, alias="champion")
    model = model_from_state(config, state_dict)
    graph = model_graph(data_dir, settings)
    placements, fallback = model_placements(
        model, jobs, fleet, inventory, links, settings, seed, graph=graph
    )
    record = {
        "name": version.name,
        "version": str(version.version),
        "alias": version.alias,
        "fallback": fallback,
    }
    return placements, record


def evaluate(
    placements_file: Path, data_dir: Path, settings: Settings, plot: Path | None = None
) -> StepResult:
    """Cost table of a placements file on the fleet of `data_dir`, and a PNG plot.

    The plot goes to `plot`, by default beside the placements file (``<name>.png``).
    """
    from hulk.assign import changed_fleet_frames
    from hulk.cost import Fleet
    from hulk.evaluate import evaluate as evaluate_file
    from hulk.evaluate import plot_costs, rows
    from hulk.placements import read_placements

    fleet, inventory, links = load_fleet(data_dir, settings)
    checked = read_placements(placements_file, fleet)
    failed = earlier_failures(checked.doc, fleet)
    if failed:  # a re-planned file: its fleet no longer has the failed machines
        fleet = Fleet.from_frames(
            *changed_fleet_frames(inventory, links, failed),
            settings.hardware,
            settings.graph.bandwidth_tiers,
        )
        checked = read_placements(placements_file, fleet)
    evaluation = evaluate_file(checked, fleet)
    findings = [
        Finding("warning", "evaluate.estimate", str(placements_file), note)
        for note in evaluation.notes
    ]
    snapshot = checked.doc.get("fleet", {}).get("snapshot")
    links_sha = io.sha256_file(data_dir / schemas.LINKS_FILE)
    if snapshot != links_sha and "replan" not in checked.doc:
        findings.append(
            Finding(
                "warning",
                "evaluate.snapshot",
                str(placements_file),
                f"the file was made on link table {str(snapshot)[:12]}…, the data folder holds "
                f"{links_sha[:12]}…: figures are recomputed on the data folder's fleet",
            )
        )
    plot = plot or placements_file.with_suffix(".png")
    plot_costs(evaluation, plot, title=f"{placements_file.name}: seconds per iteration")
    return StepResult(
        outputs={"plot": plot},
        findings=findings,
        summary={
            "run_id": checked.doc.get("run_id"),
            "strategy": evaluation.strategy,
            "schedule": evaluation.schedule,
            "jobs": rows(evaluation),
            "makespan_s": evaluation.makespan_s,
        },
    )


def _read_growth(
    nodes: Path | None, edges: Path | None, inventory: pd.DataFrame, settings: Settings
) -> tuple[pd.DataFrame | None, pd.DataFrame | None, list[Finding]]:
    """Added machines and links in the paper's format (as `hulk import-hulk` reads them)."""
    from hulk.importer import read_edges, read_nodes

    added, findings = (None, [])
    if nodes is not None:
        added, findings = read_nodes(nodes, settings.graph.default_gpu_count)
        clash = sorted(set(added["node_id"]) & set(inventory["node_id"]))
        if clash:
            raise InputError(
                nodes,
                "replan.duplicate_node",
                f"--add-nodes: node id(s) {clash} are already machines of the fleet",
            )
    if edges is None:
        return added, None, findings
    everyone = pd.concat([inventory, added]) if added is not None else inventory
    links, _, edge_findings = read_edges(edges, everyone, settings.validation)
    return added, links, findings + edge_findings


def earlier_failures(doc: dict, fleet: Fleet) -> list[int]:
    """Machines a re-planned file's chain already lost (its ``replan.failed``) that `fleet`
    still lists: they stay out of later re-plans and evaluations of that chain."""
    record = doc.get("replan")
    failed = record.get("failed") if isinstance(record, dict) else None
    if not isinstance(failed, list):
        return []
    known = set(fleet.node_ids.tolist())
    return sorted({n for n in failed if isinstance(n, int) and n in known})


def replan(
    data_dir: Path,
    settings: Settings,
    placements_file: Path | None = None,
    failed: list[int] | None = None,
    add_nodes: Path | None = None,
    add_edges: Path | None = None,
    out_dir: Path | None = None,
    seed: int | None = None,
    now: dt.datetime | None = None,
) -> StepResult:
    """Re-plan a placements file after machines fail (`failed` node ids) or are added.

    The fleet before is the data folder's; the fleet after drops the failed machines and their
    links and adds `add_nodes` / `add_edges` (paper format, like `hulk import-hulk`). Machines
    lost in earlier re-plans of the same chain (``replan.failed`` of the file) stay lost: a
    fresh `assign` brings repaired machines back. The new placements go to `out_dir` (default:
    the placements file's folder) as ``<run-id>.json`` and ``latest.json``. Everything is
    checked before anything is written.
    """
    from hulk import placements as pl
    from hulk.assign import changed_fleet_frames, check_failed, makespan, schedule_of
    from hulk.assign import replan as replan_jobs
    from hulk.cost import Fleet

    started = now or pl.utc_now()
    placements_file = placements_file or settings.assign.placements_dir / pl.LATEST
    out_dir = out_dir or placements_file.parent
    fleet_before, inventory, links = load_fleet(data_dir, settings)
    before = pl.read_placements(placements_file, fleet_before)
    failed_now = check_failed(fleet_before, failed or [])
    failed = sorted(set(failed_now) | set(earlier_failures(before.doc, fleet_before)))
    added_nodes, added_links, findings = _read_growth(add_nodes, add_edges, inventory, settings)
    inventory_after, links_after = changed_fleet_frames(
        inventory, links, failed, added_nodes, added_links, source=add_nodes or add_edges
    )
    fleet_after = Fleet.from_frames(
        inventory_after, links_after, settings.hardware, settings.graph.bandwidth_tiers
    )
    strategy = before.strategy or "teacher"
    seed = seed if seed is not None else before.doc.get("seed", settings.seed)
    if not isinstance(seed, int) or isinstance(seed, bool):
        seed = settings.seed
    new, moved = replan_jobs(
        before.placements, fleet_before, fleet_after, failed, strategy, settings, seed
    )
    snapshot = io.sha256_file(data_dir / schemas.LINKS_FILE)
    if add_edges is not None:
        snapshot = hashlib.sha256(f"{snapshot}+{io.sha256_file(add_edges)}".encode()).hexdigest()
    info = pl.fleet_info(fleet_after, snapshot=snapshot)
    record = {
        "from": before.doc.get("run_id"),
        "failed": failed,
        "failed_now": failed_now,
        "added_nodes": [] if added_nodes is None else sorted(added_nodes["node_id"].tolist()),
        "moves": [m.to_dict() for m in moved],
    }
    doc = pl.build_document(
        new,
        fleet_after,
        info,
        strategy=strategy,
        schedule=schedule_of(strategy),
        makespan_s=makespan(new, strategy),
        seed=seed,
        started=started,
        generated_at=now,
        model=before.doc.get("model"),
        extra={"replan": record},
    )
    path = pl.write_placements(doc, out_dir)
    return StepResult(
        outputs={"placements": path, "latest": out_dir / pl.LATEST},
        findings=findings,
        summary={
            "strategy": strategy,
            "run_id": doc["run_id"],
            "from": record["from"],
            "moves": record["moves"],
            "jobs": _placement_rows(new, fleet_after),
            "makespan_s": doc["makespan_s"],
        },
    )


# --- train --------------------------------------------------------------------------------------


def train(
    data_dir: Path,
    settings: Settings,
    seed: int | None = None,
    workers: int = 2,
    rebuild_corpus: bool = False,
    progress: Progress = None,
) -> StepResult:
    """The learning half of a night, by hand: the corpus and the prior (each reused while
    current), the fleet's own samples and their labels (cached by content), then the fine-tune,
    the evaluation on one set with the champion, registration and the gate
    (`hulk.stages.train`)."""
    from hulk.stages import fleet_labels, prior
    from hulk.stages.train import finetune

    seed = settings.seed if seed is None else seed
    built = corpus(settings, seed, workers, rebuild_corpus, progress)
    prior_result = prior.run(settings, seed, rebuild=rebuild_corpus)
    labels = fleet_labels.run(data_dir, settings)
    result = finetune(data_dir, settings, seed)
    result.findings = labels.findings + result.findings
    result.summary = {
        "corpus_reused": built.summary["reused"],
        "prior_reused": prior_result.summary["reused"],
        "labels_cached": labels.summary["cached"],
        "labels_labelled": labels.summary["labelled"],
        **result.summary,
    }
    return result


def corpus_is_current(settings: Settings, seed: int | None = None) -> bool:
    """Whether the saved corpus was built from these settings and seed (then reused).

    What its samples depend on is compared (`hulk.corpus.corpus_inputs`): not where the file
    is, nor how many processes labelled it.
    """
    from hulk import corpus as corpora

    seed = settings.seed if seed is None else seed
    path = settings.corpus.path
    if not (path.exists() and corpora.manifest_path(path).exists()):
        return False
    manifest = json.loads(corpora.manifest_path(path).read_text())
    return manifest.get("seed") == seed and manifest.get("inputs") == corpora.corpus_inputs(
        settings
    )


def corpus(
    settings: Settings,
    seed: int | None = None,
    workers: int = 2,
    rebuild: bool = False,
    progress: Progress = None,
    outcomes: Mapping[int, dict] | None = None,
    seconds: float = 0.0,
) -> StepResult:
    """The teacher-labelled training corpus at `settings.corpus.path` (+ its manifest).

    Reused while its manifest matches the corpus settings and seed (unless `rebuild`). Else it
    is built: from `outcomes` when given (fleet id → `hulk.corpus.label_fleet` result, labelled
    by any executor, e.g. the nightly flow's Dask cluster; `seconds` is their wall time), or
    here on `workers` processes. Either way the same `assemble_corpus` + `save_corpus` write it.
    """
    from hulk import corpus as corpora

    seed = settings.seed if seed is None else seed
    path = settings.corpus.path
    reused = not rebuild and corpus_is_current(settings, seed)
    if reused:
        built = corpora.load_corpus(path)
    else:
        if outcomes is not None:
            built = corpora.assemble_corpus(settings, seed, outcomes, workers, seconds)
        else:
            built = corpora.build_corpus(settings, seed, workers, progress=progress)
        corpora.save_corpus(built, path)
    counts = built.manifest.get("counts", {})
    return StepResult(
        outputs={"corpus": path, "manifest": corpora.manifest_path(path)},
        summary={
            "reused": reused,
            "seed": seed,
            **{f"{name}_samples": c.get("samples", 0) for name, c in counts.items()},
            "time_capped": built.manifest.get("build", {}).get("time_capped", 0),
        },
    )


def _corpus(settings: Settings, seed: int, workers: int, rebuild: bool, progress: Progress):
    """The saved corpus if it was built from these corpus settings and seed, else a new one."""
    from hulk import corpus as corpora

    corpus(settings, seed, workers, rebuild, progress)
    return corpora.load_corpus(settings.corpus.path)
