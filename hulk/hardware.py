"""What the machines and links of a fleet can do, read from the inventory and the link table.

Sustained compute per machine, effective bandwidth per link (measured, else by latency tier) and
the positions of each link's machines. Shared by the cost model (`hulk.cost`) and the fleet
graph (`hulk.graph`); numpy and pandas only, so the planning stack imports without torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hulk.errors import InputError
from hulk.settings import BandwidthTier, HardwareSettings


def node_compute_tflops(inventory: pd.DataFrame, hardware: HardwareSettings) -> np.ndarray:
    """Sustained TFLOPS per machine: gpu_count × peak(capability) × MFU
    (docs/design.md#cost-model)."""
    # One dictionary look-up per distinct capability (a fleet has a handful), not per machine.
    capability = np.round(inventory["compute_capability"].to_numpy(float), 1)
    distinct, which = np.unique(capability, return_inverse=True)
    table = np.array([hardware.peak_tflops.get(float(c), np.nan) for c in distinct], float)
    peak = table[which.reshape(-1)] if len(capability) else np.zeros(0)
    if np.isnan(peak).any():
        unknown = inventory.loc[np.isnan(peak), ["node_id", "compute_capability"]]
        known = ", ".join(str(c) for c in sorted(hardware.peak_tflops))
        raise InputError(
            None,
            "hardware.peak_tflops",
            f"no peak TFLOPS for compute capability of {len(unknown)} machine(s); "
            f"known: {known}. Add it under hardware.peak_tflops in params.yaml",
            unknown.to_dict("records"),
        )
    return inventory["gpu_count"].to_numpy(float) * peak * hardware.mfu


def require_peak_figures(
    inventory: pd.DataFrame,
    source: Path | str,
    hardware: HardwareSettings,
    plausible: tuple[float, float] = (-np.inf, np.inf),
) -> None:
    """`hardware.peak_tflops` naming `source` unless every machine whose compute capability
    lies in `plausible` (the validation suite reports the others) has a peak figure in params:
    the graph and the cost model cannot value a machine without one. For the steps that take
    an inventory in (validate, import-hulk, replan --add-nodes), before they write anything."""
    if "compute_capability" not in inventory.columns:
        return  # the suites' column checks report it
    capability = pd.to_numeric(inventory["compute_capability"], errors="coerce")
    inside = capability.between(*plausible).fillna(False)
    try:
        node_compute_tflops(inventory.loc[inside], hardware)
    except InputError as exc:
        raise InputError(source, exc.rule, exc.detail, exc.examples) from None


def link_bandwidth_gbps(
    links: pd.DataFrame, tiers: list[BandwidthTier]
) -> tuple[np.ndarray, np.ndarray]:
    """Fitted bandwidth where measured, else the latency tier's; and whether it was measured."""
    fitted = links["beta_gbps"].to_numpy(float)
    measured = fitted > 0  # False for NaN: not measured
    latency = links["latency_p50_ms"].to_numpy(float)
    by_tier = np.full(len(links), np.nan)
    for tier in reversed(tiers):  # tightest tier last so it wins
        limit = np.inf if tier.max_latency_ms is None else tier.max_latency_ms
        by_tier[latency <= limit] = tier.gbps
    by_tier[np.isnan(by_tier)] = tiers[-1].gbps
    return np.where(measured, fitted, by_tier), measured


def link_ends(node_ids: np.ndarray, links: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Positions in `node_ids` (ascending, unique) of each link's `src` and `dst` machines.

    Raises `InputError` (``links.unknown_machine``) listing the links that name a machine
    `node_ids` does not hold.
    """
    src = _positions(node_ids, links["src"].to_numpy(np.int64))
    dst = _positions(node_ids, links["dst"].to_numpy(np.int64))
    known = (src >= 0) & (dst >= 0)
    if not known.all():
        unknown = links.loc[~known, ["src", "dst"]]
        raise InputError(
            None,
            "links.unknown_machine",
            f"{len(unknown)} link(s) name machines that are not in the inventory",
            unknown.to_dict("records"),
        )
    return src, dst


def _positions(sorted_ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each of `values` in `sorted_ids` (ascending, unique); −1 where absent.

    A lookup table when the ids are dense enough (a gather per value), else binary search.
    """
    n = len(sorted_ids)
    if not n:
        return np.full(len(values), -1, np.int64)
    low, high = int(sorted_ids[0]), int(sorted_ids[-1])
    if high - low <= 4 * n + 1024:
        table = np.full(high - low + 1, -1, np.int64)
        table[sorted_ids - low] = np.arange(n)
        inside = (values >= low) & (values <= high)
        return np.where(inside, table[np.where(inside, values - low, 0)], -1)
    at = np.minimum(np.searchsorted(sorted_ids, values), n - 1)
    return np.where(sorted_ids[at] == values, at, -1)
