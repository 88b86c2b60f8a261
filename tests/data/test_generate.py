"""The data generator: fleet presets, the latency model, and day-partitioned probe logs."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from hulk import generate as gen
from hulk import schemas
from hulk.errors import ConfigError, InputError
from hulk.geo import haversine_km, normalise
from hulk.presets import PRESETS, build_fleet
from hulk.settings import GenerateSettings, Range, Settings
from hulk.stages.generate import append_day as append_day_step

SEED = 7
DAY = dt.date(2026, 11, 20)
PAPER_COUNTS = {
    "beijing": 5,
    "inner mongolia": 5,
    "nanjing": 5,
    "quanzhou": 5,
    "california": 5,
    "tokyo": 5,
    "berlin": 3,
    "london": 1,
    "new delhi": 3,
    "paris": 4,
    "rome": 5,
    "brasilia": 1,
}


def fast(**update) -> GenerateSettings:
    """Coarse probing keeps the tests quick: hourly latency probes, half-hourly throughput.
    No collector glitches: these tests check the physical model (glitches have their own)."""
    base = {
        "probe_interval_s": 3600,
        "throughput_interval_s": 1800,
        "days": 2,
        "glitches_per_day": 0,
    }
    return GenerateSettings().model_copy(update={**base, **update})


@pytest.fixture(scope="module")
def paper() -> pd.DataFrame:
    return build_fleet("paper-47", SEED, GenerateSettings())


@pytest.fixture(scope="module")
def paper_logs(paper: pd.DataFrame) -> pd.DataFrame:
    """Two days of paper-47 probes with coarse intervals."""
    settings = fast()
    days = [gen.generate_day(paper, DAY - dt.timedelta(days=k), SEED, settings) for k in (1, 0)]
    return pd.concat(days, ignore_index=True)


def unordered(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(a=np.minimum(frame.src, frame.dst), b=np.maximum(frame.src, frame.dst))


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


# --- presets --------------------------------------------------------------------------------


def test_paper_47_has_the_papers_cities_and_hardware(paper: pd.DataFrame) -> None:
    assert len(paper) == 47
    assert list(paper.node_id) == list(range(47))
    assert paper.dtypes.astype(str).to_dict() == schemas.INVENTORY
    counts = paper.city.map(normalise).value_counts().to_dict()
    assert counts == PAPER_COUNTS
    assert set(paper.compute_capability) <= {6.1, 7.0, 7.5, 8.0, 8.6}
    assert paper.memory_gb.between(64, 640).all()
    assert {64, 640} <= set(paper.memory_gb)
    assert paper.lat.notna().all() and paper.lon.notna().all()
    assert (paper.status == schemas.STATUS_ACTIVE).all()
    assert set(paper.loc[paper.city == "California", "country"]) == {"United States"}


@pytest.mark.parametrize(
    ("preset", "machines", "cities"),
    [("synthetic-200", 200, 40), ("synthetic-1000", 1000, 80), ("synthetic-10000", 10000, 120)],
)
def test_synthetic_presets_sizes_and_hardware(preset: str, machines: int, cities: int) -> None:
    fleet = build_fleet(preset, SEED, GenerateSettings())
    assert len(fleet) == machines
    assert fleet.node_id.is_unique
    assert fleet.city.nunique() == cities
    assert fleet.country.nunique() >= 20
    assert fleet.dtypes.astype(str).to_dict() == schemas.INVENTORY
    assert set(fleet.compute_capability) <= {6.1, 7.0, 7.5, 8.0, 8.6, 8.9, 9.0}
    assert set(fleet.gpu_count) <= {4, 8, 16}
    assert (fleet.gpu_count == 8).mean() > 0.6
    assert set(fleet.memory_gb / fleet.gpu_count) <= {16, 24, 32, 40, 48, 80}
    sizes = fleet.city.value_counts()
    assert sizes.iloc[0] >= 3 * sizes.median()  # heavy-tailed: a few hubs, many small sites
    assert fleet.lat.between(-60, 70).all() and (fleet.lat < 0).any()  # both hemispheres


def test_presets_are_seeded(paper: pd.DataFrame) -> None:
    assert build_fleet("paper-47", SEED, GenerateSettings()).equals(paper)
    other = build_fleet("paper-47", SEED + 1, GenerateSettings())
    assert not other.memory_gb.equals(paper.memory_gb)
    assert sorted(other.memory_gb) == sorted(paper.memory_gb)  # the same mix, shuffled


def test_drained_fraction_marks_machines() -> None:
    fleet = build_fleet("paper-47", SEED, GenerateSettings(drained_fraction=0.25))
    assert (fleet.status == schemas.STATUS_DRAINED).sum() == round(0.25 * 47)
    assert set(fleet.status) == {schemas.STATUS_ACTIVE, schemas.STATUS_DRAINED}


def test_unknown_preset_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="paper-48") as caught:
        build_fleet("paper-48", SEED, GenerateSettings())
    assert all(name in str(caught.value) for name in PRESETS)


# --- logs: shape and physics ----------------------------------------------------------------


def test_day_schema_order_and_schedule(paper: pd.DataFrame) -> None:
    settings = fast()
    day = gen.generate_day(paper, DAY, SEED, settings)
    assert day.dtypes.astype(str).to_dict() == schemas.LOGS
    assert day.equals(day.sort_values(schemas.LOG_KEY, kind="stable").reset_index(drop=True))
    assert not day.duplicated(schemas.LOG_KEY).any()
    start = pd.Timestamp(DAY, tz="UTC")
    assert day.ts.min() >= start and day.ts.max() < start + pd.Timedelta(days=1)
    assert set(day.status) <= set(schemas.PROBE_STATUSES)
    assert (day.elapsed_ms.notna() == (day.status == schemas.PROBE_OK)).all()
    pairs = 47 * 46
    per_size = day.groupby("msg_bytes").size().to_dict()
    assert per_size == {
        64: pairs * 24,
        1 << 20: pairs * 16,
        8 << 20: pairs * 16,
        64 << 20: pairs * 16,
    }
    # Probes are spread over a minute after each interval boundary, not all at one instant.
    first_hour = day[(day.msg_bytes == 64) & (day.ts < start + pd.Timedelta(hours=1))]
    assert len(first_hour) == pairs
    assert first_hour.ts.nunique() > pairs * 0.9
    assert first_hour.ts.max() - first_hour.ts.min() > pd.Timedelta(seconds=50)


def test_glitches_are_repeats_and_impossible_latencies(paper: pd.DataFrame) -> None:
    clean = gen.generate_day(paper, DAY, SEED, fast())
    glitchy = gen.generate_day(paper, DAY, SEED, fast(glitches_per_day=6))
    assert len(glitchy) == len(clean) + 3
    assert glitchy.duplicated(schemas.LOG_KEY).sum() == 3
    assert glitchy.equals(
        glitchy.sort_values(schemas.LOG_KEY, kind="stable").reset_index(drop=True)
    )
    first = glitchy.drop_duplicates(schemas.LOG_KEY).reset_index(drop=True)
    changed = first.elapsed_ms.ne(clean.elapsed_ms) & clean.elapsed_ms.notna()
    assert changed.sum() == 3
    assert np.allclose(first.elapsed_ms[changed], (clean.elapsed_ms[changed] / 100).round(3))


def test_no_probe_beats_the_fiber_floor(paper: pd.DataFrame, paper_logs: pd.DataFrame) -> None:
    ok = paper_logs[paper_logs.status == schemas.PROBE_OK]
    at = paper.set_index("node_id")
    km = haversine_km(at.lat[ok.src], at.lon[ok.src], at.lat[ok.dst], at.lon[ok.dst])
    assert (ok.elapsed_ms.to_numpy() >= km / gen.FIBER_KM_PER_MS).all()
    same_city = ok[
        (at.city[ok.src].to_numpy() == at.city[ok.dst].to_numpy()) & (ok.msg_bytes == 64)
    ]
    assert len(same_city) > 0
    assert (same_city.elapsed_ms >= 0.2).all()  # two last miles of at least 0.1 ms
    assert 0.2 < same_city.elapsed_ms.median() < 2.0
    assert same_city.elapsed_ms.quantile(0.95) < 3.0


def test_blocked_pairs_only_produce_unreachable(paper_logs: pd.DataFrame) -> None:
    pairs = unordered(paper_logs).groupby(["a", "b"]).status
    unreachable = pairs.apply(lambda s: (s == schemas.PROBE_UNREACHABLE).mean())
    assert set(unreachable.round(9)) == {0.0, 1.0}  # a pair is blocked for every probe, or never
    assert len(unreachable) == 47 * 46 // 2
    assert 0.35 < unreachable.mean() < 0.55  # like the paper's fleet: ~45% of pairs without edge


def test_outages_produce_timeouts(paper: pd.DataFrame) -> None:
    quiet = fast(loss_rate=Range(low=0.0, high=0.0), outages_per_machine=0.0)
    day = gen.generate_day(paper, DAY, SEED, quiet)
    assert (day.status != schemas.PROBE_TIMEOUT).all()  # no loss, no outage: nothing times out

    stormy = quiet.model_copy(update={"outages_per_machine": 8.0})  # ~4 outages per machine-day
    day = gen.generate_day(paper, DAY, SEED, stormy)
    timeouts = day[day.status == schemas.PROBE_TIMEOUT]
    assert len(timeouts) > 0
    # Every timeout lies in an outage window of one of its endpoints, and vice versa.
    down = np.zeros(len(day), dtype=bool)
    ts = day.ts.astype("int64").to_numpy()
    for back in range(2):
        windows = gen._outages(SEED, stormy, 47, DAY - dt.timedelta(days=back))
        for machine, begin, end in zip(*windows, strict=True):
            touches = (day.src == machine) | (day.dst == machine)
            down |= touches.to_numpy() & (ts >= begin) & (ts < end)
    reachable = (day.status != schemas.PROBE_UNREACHABLE).to_numpy()
    assert ((day.status == schemas.PROBE_TIMEOUT).to_numpy() == (down & reachable)).all()


def test_every_machine_has_a_reachable_peer(paper: pd.DataFrame, paper_logs: pd.DataFrame) -> None:
    ok = paper_logs[paper_logs.status == schemas.PROBE_OK]
    graph = nx.Graph(zip(ok.src, ok.dst, strict=True))
    assert set(graph.nodes) == set(paper.node_id)
    assert nx.is_connected(graph)


@pytest.mark.parametrize(("blocked", "peers"), [(0.1, 64), (0.97, 4)])
def test_sampled_probe_graph_stays_connected(blocked: float, peers: int) -> None:
    settings = GenerateSettings(
        preset="synthetic-200", blocked_pair_fraction=blocked, max_probe_peers=peers
    )
    fleet = build_fleet("synthetic-200", SEED, settings)
    links = gen.expected_links(fleet, SEED, settings)
    graph = nx.Graph(zip(links.src, links.dst, strict=True))
    assert set(graph.nodes) == set(fleet.node_id)
    assert nx.is_connected(graph)


@pytest.mark.slow
def test_large_fleets_probe_own_city_plus_a_sample() -> None:
    settings = fast()  # preset stays "paper-47": the policy follows the inventory, not the name
    fleet = build_fleet("synthetic-200", SEED, settings)
    day = gen.generate_day(fleet, DAY, SEED, settings)
    probes = day[day.msg_bytes == 64][["src", "dst"]].drop_duplicates()
    city = fleet.set_index("node_id").city
    peers = probes.groupby("src").dst.apply(set)
    for node, dsts in peers.items():
        mates = set(fleet.node_id[(fleet.city == city[node]) & (fleet.node_id != node)])
        assert mates <= dsts  # every machine of its own city
        assert len(dsts) <= max(settings.max_probe_peers, len(mates)) + 2  # + connectivity fixes
    assert len(probes) < 0.5 * 200 * 199  # far from a full mesh
    assert peers.map(len).median() == settings.max_probe_peers
    # Cross-city pairs are blocked at blocked_pair_fraction (not by the paper fleet's policy).
    cross = day[city[day.src].to_numpy() != city[day.dst].to_numpy()]
    pairs = unordered(cross).groupby(["a", "b"]).status.first()
    blocked = (pairs == schemas.PROBE_UNREACHABLE).mean()
    assert blocked == pytest.approx(settings.blocked_pair_fraction, abs=0.04)


def test_site_probing_covers_own_site_plus_a_sample_of_other_sites() -> None:
    from hulk.generate_network import build_network, prepare_inventory

    settings = fast(probing="sites", probe_sites=3, blocked_pair_fraction=0.0)
    fleet = prepare_inventory(build_fleet("synthetic-200", SEED, settings))
    net = build_network(fleet, SEED, settings)
    city = fleet["city"].to_numpy()
    other_sites = set()
    for machine in range(len(fleet)):
        peers = net.dst[net.src == machine]
        mates = np.flatnonzero((city == city[machine]) & (np.arange(len(fleet)) != machine))
        assert set(mates) <= set(peers)  # every machine of its own site
        away = peers[city[peers] != city[machine]]
        assert len(away) == len(set(city[away])) == 3  # one machine in each of 3 other sites
        other_sites.add(tuple(sorted(set(city[away]))))
    assert len(other_sites) > len(fleet) / 2  # drawn per machine, not one list for all
    assert len(net.src) == sum(len(net.dst[net.src == m]) for m in range(len(fleet)))
    # The same links again, and the same day of probes.
    again = build_network(fleet, SEED, settings)
    assert np.array_equal(again.src, net.src) and np.array_equal(again.dst, net.dst)
    first = gen.generate_day(fleet, DAY, SEED, settings)
    pd.testing.assert_frame_equal(gen.generate_day(fleet, DAY, SEED, settings), first)
    probed = first[["src", "dst"]].drop_duplicates()
    assert len(probed) == len(net.src)  # every probed pair probes within the day


def test_sites_preset_is_equal_sites_in_the_first_cities() -> None:
    settings = fast()
    fleet = build_fleet("sites-10000", SEED, settings)
    sizes = fleet.groupby(["city", "country"]).size()
    assert len(fleet) == 10_000 and len(sizes) == 100 and (sizes == 100).all()
    assert fleet["node_id"].tolist() == list(range(10_000))
    pd.testing.assert_frame_equal(build_fleet("sites-10000", SEED, settings), fleet)


def test_inventory_without_coordinates_is_rejected(paper: pd.DataFrame) -> None:
    broken = paper.copy()
    broken.loc[3, "lat"] = np.nan
    with pytest.raises(InputError, match="coordinates"):
        gen.generate_day(broken, DAY, SEED, fast())


# --- determinism and the dataset on disk ----------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path, paper: pd.DataFrame) -> None:
    settings = fast()
    first = gen.write_dataset(tmp_path / "a", paper, SEED, settings, 2, DAY)
    gen.write_dataset(tmp_path / "b", paper, SEED, settings, 2, DAY)
    gen.write_dataset(tmp_path / "c", paper, SEED + 1, settings, 2, DAY)
    a, b, c = (tree_bytes(tmp_path / name) for name in "abc")
    assert a == b
    assert sorted(a) == sorted(c)
    parquet = [name for name in a if name.endswith(".parquet")]
    assert len(parquet) == 2 and all(a[name] != c[name] for name in parquet)
    assert [p.parent.name for p in first] == ["day=2026-11-19", "day=2026-11-20"]


def test_append_day_equals_a_longer_window(tmp_path: Path, paper: pd.DataFrame) -> None:
    settings = fast()
    gen.write_dataset(tmp_path / "short", paper, SEED, settings, 2, DAY)
    appended = gen.append_day(tmp_path / "short", SEED, settings)
    assert appended.parent.name == "day=2026-11-21"
    gen.write_dataset(tmp_path / "long", paper, SEED, settings, 3, DAY + dt.timedelta(days=1))
    assert tree_bytes(tmp_path / "short") == tree_bytes(tmp_path / "long")


def test_rewriting_keeps_exactly_the_new_window(tmp_path: Path, paper: pd.DataFrame) -> None:
    settings = fast()
    gen.write_dataset(tmp_path, paper, SEED, settings, 2, DAY)
    calls: list[tuple[int, int]] = []
    gen.write_dataset(
        tmp_path,
        paper,
        SEED,
        settings,
        2,
        DAY + dt.timedelta(days=5),
        progress=lambda done, total: calls.append((done, total)),
    )
    days = sorted(p.name for p in (tmp_path / schemas.LOGS_DIR).iterdir())
    assert days == ["day=2026-11-24", "day=2026-11-25"]
    assert calls == [(1, 2), (2, 2)]
    machines = pd.read_csv(tmp_path / schemas.INVENTORY_FILE)
    assert list(machines.columns) == list(schemas.INVENTORY) and len(machines) == 47


@pytest.mark.parametrize("own", ["inventory", "logs"])
def test_a_folder_of_data_it_did_not_generate_is_never_overwritten(
    tmp_path: Path, paper: pd.DataFrame, own: str
) -> None:
    gen.write_dataset(tmp_path, paper, SEED, fast(), 2, DAY)
    (tmp_path / schemas.GENERATION_FILE).unlink()  # as a user's own folder has none
    if own == "inventory":
        shutil.rmtree(tmp_path / schemas.LOGS_DIR)
        machines = tmp_path / schemas.INVENTORY_FILE  # the user's: not the generated one
        machines.write_text(machines.read_text().replace(",active", ",drained", 1))
    else:
        (tmp_path / schemas.INVENTORY_FILE).unlink()
    before = tree_bytes(tmp_path)
    for write in (
        lambda: gen.write_dataset(tmp_path, paper, SEED, fast(), 1, DAY + dt.timedelta(days=3)),
        lambda: append_day_step(tmp_path, Settings()),
    ):
        with pytest.raises(InputError) as caught:
            write()
        assert caught.value.rule == "generate.not_generated"
        assert "generating here would replace them" in str(caught.value)
        assert tree_bytes(tmp_path) == before


def test_a_folder_generated_before_the_record_was_kept_is_generated_again(
    tmp_path: Path, paper: pd.DataFrame
) -> None:
    gen.write_dataset(tmp_path, paper, SEED, fast(), 2, DAY)
    (tmp_path / schemas.GENERATION_FILE).unlink()  # its inventory is the one generate writes
    gen.write_dataset(tmp_path, paper, SEED, fast(), 2, DAY + dt.timedelta(days=1))
    assert (tmp_path / schemas.GENERATION_FILE).is_file()


def test_a_generation_that_did_not_finish_is_never_taken_for_one(
    tmp_path: Path, paper: pd.DataFrame
) -> None:
    """Killed after its first day, a new generation leaves its inventory and that day beside
    the older generation's days: the record says so until the last day is written, so a day is
    never appended to the mix under the old record's seed."""
    gen.write_dataset(tmp_path, paper, SEED, fast(), 3, DAY)

    def killed(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gen.write_dataset(tmp_path, paper, SEED + 1, fast(), 3, DAY, progress=killed)
    for read in (
        lambda: gen.read_generation(tmp_path),
        lambda: append_day_step(tmp_path, Settings()),
    ):
        with pytest.raises(InputError) as caught:
            read()
        assert caught.value.rule == "generate.incomplete"
    gen.write_dataset(tmp_path, paper, SEED + 1, fast(), 3, DAY)  # generating again mends it
    assert gen.read_generation(tmp_path) == (SEED + 1, fast())


def test_append_day_needs_partitions(tmp_path: Path, paper: pd.DataFrame) -> None:
    with pytest.raises(InputError, match=str(tmp_path)):
        gen.append_day(tmp_path, SEED, fast())


# --- the model's expected link table --------------------------------------------------------


def test_expected_links_agree_with_generated_medians(paper: pd.DataFrame, paper_logs) -> None:
    links = gen.expected_links(paper, SEED, fast())
    assert links.dtypes.astype(str).to_dict() == schemas.LINKS
    assert (links.src < links.dst).all() and (links.samples == 0).all()
    assert links.window_start.isna().all()
    probes = unordered(paper_logs[paper_logs.msg_bytes == 64])
    measured = probes.groupby(["a", "b"]).agg(
        p50=("elapsed_ms", "median"),
        ok=("elapsed_ms", "count"),
        lost=("status", lambda s: (s == schemas.PROBE_TIMEOUT).mean()),
        reachable=("status", lambda s: (s != schemas.PROBE_UNREACHABLE).all()),
    )
    # Exactly the reachable pairs have a row.
    reachable = set(measured.index[measured.reachable])
    assert set(zip(links.src, links.dst, strict=True)) == reachable
    joined = links.join(measured, on=["src", "dst"])
    error = (joined.p50 / joined.latency_p50_ms - 1).abs()
    assert error.median() < 0.02
    # Outages leave some pairs with a few hours only (a biased slice of the daily cycle).
    assert error[joined.ok >= 0.9 * joined.ok.max()].max() < 0.06
    assert (links.latency_p95_ms > links.latency_p50_ms).all()
    assert joined.lost.mean() == pytest.approx(links.loss_rate.mean(), rel=0.5)


def test_alpha_and_beta_are_recoverable_from_probe_sizes(paper: pd.DataFrame, paper_logs) -> None:
    links = gen.expected_links(paper, SEED, fast()).set_index(["src", "dst"])
    ok = unordered(paper_logs[paper_logs.status == schemas.PROBE_OK])
    medians = ok.groupby(["a", "b", "msg_bytes"]).elapsed_ms.median().reset_index()
    fits = {}
    for pair, rows in medians.groupby(["a", "b"]):
        slope, intercept = np.polyfit(rows.msg_bytes.astype(float), rows.elapsed_ms, 1)
        fits[pair] = (intercept, 8e-6 / slope)
    fitted = pd.DataFrame.from_dict(fits, orient="index", columns=["alpha", "beta"])
    fitted.index = pd.MultiIndex.from_tuples(fitted.index, names=["src", "dst"])
    joined = links.join(fitted, how="inner")
    assert len(joined) == len(links)
    beta_error = (joined.beta / joined.beta_gbps - 1).abs()
    alpha_error = (joined.alpha - joined.alpha_ms).abs() / joined.alpha_ms
    assert beta_error.median() < 0.01 and beta_error.max() < 0.05
    assert alpha_error.median() < 0.03 and alpha_error.max() < 0.2
    # α is physical: never below the fiber floor, and a 64-byte probe is never faster than it.
    assert (joined.alpha_ms < joined.latency_p50_ms).all()
