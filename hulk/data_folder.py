"""A data folder as the steps see it: its layout and what they read from it.

Every step of `hulk.stages` works on one data folder (docs/design.md#data-folder):

    machines.csv        inventory
    logs/day=…/         raw latency logs, one partition per UTC day
    quarantine.parquet  raw rows kept out of the link table, with the rule that caught them
    validation/         report.json, validated.json (what was validated, and the quarantine
                        written for it), imported.json (what `hulk import-hulk` found in the
                        files it read), Great Expectations Data Docs (docs/)
    links.parquet       link table over the window
    graph/              fleet graph snapshot
    cache/corpus/       corpora by content (hulk.corpus: reused when corpus.path moves)
    cache/baselines.json  Systems A, B, C per job size of the current fleet (hulk.baseline_cache)
    cache/fleet.npz     the cost model's dense fleet of the current files (hulk.fleet_cache)
    training/           the train step's plots and learning curve
    placements/         `hulk assign` / `hulk replan`: <run-id>.json and latest.json
                        (docs/contracts.md#placements-file)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from hulk import fileio, schemas
from hulk.errors import InputError
from hulk.findings import Finding
from hulk.settings import Settings

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from hulk.cost import Fleet

VALIDATED = "validated.json"  # under validation/: the fingerprint of the validated logs
IMPORTED = "imported.json"  # under validation/: what the import found in its source files
TRAINING_DIR = "training"  # the training run's plots and plot data
LEARNING_CURVE_CSV = "learning_curve.csv"  # under training/: per epoch, loss and accuracy
LEARNING_CURVES_PNG = "learning_curves.png"  # under training/: the plot of that CSV


def require_folder(data_dir: Path) -> None:
    """`data.missing_folder` unless the data folder exists: a command or flow that reads one
    must not grow a new folder (its lock, caches) from a mistyped path."""
    if not data_dir.is_dir():
        raise InputError(
            data_dir,
            "data.missing_folder",
            "no data folder here: give --data the folder `hulk run` or `hulk import-hulk` made",
        )


def holds_logs(data_dir: Path) -> bool:
    """Whether the data folder holds raw log files (``logs/``)."""
    logs = data_dir / schemas.LOGS_DIR
    return logs.is_dir() and any(p.is_file() for p in logs.rglob("*"))


def data_source(data_dir: Path) -> str:
    """What a data folder's fleet comes from: ``"logs"`` (raw latency logs to validate and
    ingest) or ``"link table"`` (imported with ``hulk import-hulk``, validated then).

    Raises `InputError` naming both files when the folder has neither.
    """
    logs = data_dir / schemas.LOGS_DIR
    if holds_logs(data_dir):
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
        digest.update(fileio.sha256_file(path).encode())
    return digest.hexdigest()


STALE_RULE = "logs.stale_machine"


def validated_record(
    logs_dir: Path,
    inventory_file: Path,
    quarantine_path: Path,
    findings: Sequence[Finding] = (),
) -> dict:
    """What validated.json holds: the fingerprint of the logs and inventory a successful
    validation checked, the sha256 of the quarantine it wrote for them, and the machines its
    `findings` found silent in the newest day (``logs.stale_machine``: the assign runs drain
    them until the next validation)."""
    silent = {n for f in findings if f.rule == STALE_RULE for n in f.machines}
    return {
        "logs_fingerprint": logs_fingerprint(logs_dir, inventory_file),
        "quarantine_sha256": fileio.sha256_file(quarantine_path),
        "stale_machines": sorted(int(n) for n in silent),
    }


def imported_record(
    nodes: Path, edges: Path, links_path: Path, findings: Sequence[Finding]
) -> dict:
    """What imported.json holds: the source files of an import, the sha256 of the link table it
    wrote from them, and what the importer found in them (rows quarantined, links merged)."""
    return {
        "nodes": str(nodes),
        "edges": str(edges),
        "links_sha256": fileio.sha256_file(links_path),
        "findings": [f.to_dict() for f in findings],
    }


def imported_findings(data_dir: Path) -> list[Finding]:
    """The import's findings while the folder's link table is still the one the import wrote
    (imported.json's sha256): every later validation reports them beside its own, since only
    the import read the source files. None once the link table changed (an ingest of logs, a
    new import) or without a readable record."""
    record_path = data_dir / schemas.VALIDATION_DIR / IMPORTED
    links_path = data_dir / schemas.LINKS_FILE
    if not (record_path.is_file() and links_path.is_file()):
        return []
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if record["links_sha256"] != fileio.sha256_file(links_path):
            return []
        return [Finding(**finding) for finding in record["findings"]]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return []  # unreadable or of another shape: the link table is validated on its own


def imported_sources(data_dir: Path) -> set[str]:
    """The source files imported.json names (none without a readable record): a link table
    computed from logs replaces the import's, and the findings about those files go with it."""
    try:
        record = json.loads((data_dir / schemas.VALIDATION_DIR / IMPORTED).read_text("utf-8"))
        return {str(record["nodes"]), str(record["edges"])}
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return set()


def validated_quarantine(
    logs_dir: Path, inventory_file: Path, out_dir: Path
) -> pd.DataFrame | None:
    """The quarantine the validate step wrote for these very logs, or None if there is none.

    Both must match: the logs and inventory (a quarantine is only right for the files it was
    computed from) and the quarantine file itself (one written by any other run, or changed by
    hand, is not the one the record vouches for).
    """
    record_path = out_dir / schemas.VALIDATION_DIR / VALIDATED
    quarantine_path = out_dir / schemas.QUARANTINE_FILE
    if not (record_path.exists() and quarantine_path.exists()):
        return None
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # unreadable: validate again rather than trust it
    wanted = validated_record(logs_dir, inventory_file, quarantine_path)
    same = ("logs_fingerprint", "quarantine_sha256")  # what vouches for the quarantine
    if not isinstance(record, dict) or any(record.get(k) != wanted[k] for k in same):
        return None
    return pd.read_parquet(quarantine_path)


def load_frames(data_dir: Path, settings: Settings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(inventory, link table) of DIR/machines.csv + DIR/links.parquet.

    The inventory must pass the inventory rules (`hulk.validation.require_valid_inventory`,
    the rules `hulk validate` runs): every plan is made from this function's frames, so an
    inventory `hulk validate` refuses never reaches a placement.
    """
    from hulk.validation import read_inventory, require_valid_inventory

    links_file = data_dir / schemas.LINKS_FILE
    if not links_file.exists():
        raise InputError(
            links_file,
            "links.exists",
            "no link table: run `hulk ingest` (or `hulk import-hulk`) first",
        )
    inventory_file = data_dir / schemas.INVENTORY_FILE
    inventory = read_inventory(inventory_file)
    require_valid_inventory(inventory, inventory_file, settings.validation)
    try:
        links = pd.read_parquet(links_file)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(
            links_file,
            "links.readable",
            f"not a readable Parquet file ({exc}): run `hulk ingest` (or the nightly) again",
        ) from None
    ids = inventory["node_id"].to_numpy()
    unknown = links.loc[~(links["src"].isin(ids) & links["dst"].isin(ids)), ["src", "dst"]]
    if len(unknown):
        raise InputError(
            links_file,
            "links.unknown_machine",
            f"{len(unknown)} link(s) name machines that are not in {inventory_file.name}: the "
            "link table was computed for another inventory. Run `hulk ingest` (or `hulk "
            "import-hulk`) again; to take a machine out of the fleet, keep its row with status "
            "drained instead (its probes stay in the logs' window for up to "
            "`ingest.window_days`)",
            unknown.head(5).to_dict("records"),
        )
    return inventory, links


def load_fleet(data_dir: Path, settings: Settings) -> tuple[Fleet, pd.DataFrame, pd.DataFrame]:
    """The cost model's fleet from DIR/machines.csv + DIR/links.parquet (and both frames); a
    dense one is kept in DIR/cache/fleet.npz by content (`hulk.fleet_cache`)."""
    from hulk.cost import Fleet
    from hulk.fleet_cache import cached_fleet

    inventory, links = load_frames(data_dir, settings)
    fleet = cached_fleet(
        data_dir,
        settings,
        inventory,
        lambda: Fleet.from_frames(
            inventory, links, settings.hardware, settings.graph.bandwidth_tiers, settings.cost
        ),
    )
    return fleet, inventory, links


def model_graph(data_dir: Path, settings: Settings) -> Data:
    """The graph step's tensors of the data folder's fleet (`hulk.graph.load_model_graph`)."""
    from hulk.graph import load_model_graph

    return load_model_graph(
        data_dir / schemas.GRAPH_DIR,
        data_dir / schemas.LINKS_FILE,
        data_dir / schemas.INVENTORY_FILE,
        settings.hardware,
        settings.graph.bandwidth_tiers,
    )
