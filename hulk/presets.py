"""Fleet presets: synthetic machine inventories (schemas.INVENTORY) to generate logs for.

- `paper-47` mirrors the 47-machine fleet published with the Hulk paper: the same twelve
  locations with the same machine counts (Beijing 5, Inner Mongolia 5, Nanjing 5, Quanzhou 5,
  California 5, Tokyo 5, Berlin 3, London 1, New Delhi 3, Paris 4, Rome 5, Brasilia 1) and the
  same mix of hardware (compute capability 6.1 … 8.6, 64–640 GB of GPU memory per machine),
  shuffled over the machines by the seed.
- `synthetic-200`, `synthetic-1000`, `synthetic-10000` spread 200 / 1,000 / 10,000 machines over
  40 / 80 / 120 real data-centre cities on every inhabited continent. City sizes are heavy-tailed
  (Pareto weights: a few large hubs, many small sites), and each city leans towards some GPU
  generations (capabilities 6.1 … 9.0). A machine has mostly 8 GPUs (sometimes 4 or 16) of one
  model, and `memory_gb = gpu_count × per-GPU memory` (16/24/32/40/48/80 GB by model).
- `cloud-16gb` (48 single-GPU 16 GB machines, 6 in each of 8 cloud regions) and
  `two-region-24gb` (40 machines of 4 × 24 GB, 20 in Frankfurt and 20 in Ashburn) are uniform
  fleets of one kind of machine: families the training corpus does not contain, for trying
  how well the nightly fine-tune learns a fleet the prior never saw.
- `sites-10000` is an organisation's fleet at scale: 10,000 machines in 100 sites of 100 (the
  first 100 data-centre cities), hardware drawn as for the synthetic presets. Generate it with
  ``generate.probing: sites`` and sparse probe intervals (`bench/params-sites-10000.yaml`):
  each machine then probes its own site and a sample of other sites, about 1.1 million probed
  pairs instead of 100 million.

Locations are resolved offline through `hulk.geo.resolve_location`; machines of one city share
its coordinates. `node_id`s run from 0 in city order. A `drained_fraction` share of the machines
(chosen by the seed) is marked `drained`. The same (preset, seed, settings) give the same frame.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hulk import schemas
from hulk.errors import ConfigError
from hulk.geo import Location, resolve_location
from hulk.settings import GenerateSettings

PAPER = "paper-47"
PRESETS: tuple[str, ...] = (
    PAPER,
    "synthetic-200",
    "synthetic-1000",
    "synthetic-10000",
    "cloud-16gb",
    "two-region-24gb",
    "sites-10000",
)

# paper-47: (location, machines), in the order of the published node_feature.csv.
PAPER_CITIES: tuple[tuple[str, int], ...] = (
    ("Beijing", 5),
    ("Inner Mongolia", 5),
    ("Nanjing", 5),
    ("Quanzhou", 5),
    ("California", 5),
    ("Tokyo", 5),
    ("Berlin", 3),
    ("London", 1),
    ("New Delhi", 3),
    ("Paris", 4),
    ("Rome", 5),
    ("Brasilia", 1),
)

# paper-47 hardware: (compute capability, gpu_count, GB per GPU, machines). The counts follow
# the published fleet's capability/memory mix (47 machines in total).
PAPER_HARDWARE: tuple[tuple[float, int, int, int], ...] = (
    (6.1, 8, 8, 4),  # 64 GB, e.g. 8 × Tesla P4
    (6.1, 8, 16, 4),  # 128 GB, e.g. 8 × Quadro P5000
    (7.0, 12, 32, 10),  # 384 GB, 12 × V100 32 GB
    (7.5, 6, 24, 2),  # 144 GB, 6 × Quadro RTX 6000
    (8.0, 8, 40, 5),  # 320 GB, 8 × A100 40 GB
    (8.0, 8, 80, 2),  # 640 GB, 8 × A100 80 GB
    (8.6, 4, 24, 11),  # 96 GB, 4 × A10
    (8.6, 8, 24, 9),  # 192 GB, 8 × RTX 3090 / A10
)

# Data-centre cities (name, ISO country code), interleaved by continent so that every prefix
# used by a preset spans the world. The code guards against the gazetteer picking a namesake.
DATACENTER_CITIES: tuple[tuple[str, str], ...] = (
    ("Ashburn", "US"), ("Frankfurt", "DE"), ("Singapore", "SG"), ("Beijing", "CN"),
    ("Sao Paulo", "BR"), ("Tokyo", "JP"), ("Sydney", "AU"), ("Johannesburg", "ZA"),
    ("Dallas", "US"), ("London", "GB"), ("Mumbai", "IN"), ("Shanghai", "CN"),
    ("Amsterdam", "NL"), ("San Jose", "US"), ("Seoul", "KR"), ("Dubai", "AE"),
    ("Toronto", "CA"), ("Paris", "FR"), ("Hong Kong", "HK"), ("Santiago", "CL"),
    ("Chicago", "US"), ("Dublin", "IE"), ("Shenzhen", "CN"), ("Osaka", "JP"),
    ("Melbourne", "AU"), ("Stockholm", "SE"), ("Chennai", "IN"), ("Queretaro", "MX"),
    ("Los Angeles", "US"), ("Madrid", "ES"), ("Jakarta", "ID"), ("Hangzhou", "CN"),
    ("Lagos", "NG"), ("Montreal", "CA"), ("Milan", "IT"), ("Taipei", "TW"),
    ("Bogota", "CO"), ("Seattle", "US"), ("Warsaw", "PL"), ("Hyderabad", "IN"),
    ("Guangzhou", "CN"), ("Tel Aviv", "IL"), ("Phoenix", "US"), ("Zurich", "CH"),
    ("Kuala Lumpur", "MY"), ("Buenos Aires", "AR"), ("Atlanta", "US"), ("Helsinki", "FI"),
    ("Bangkok", "TH"), ("Nairobi", "KE"), ("Chengdu", "CN"), ("Perth", "AU"),
    ("Columbus", "US"), ("Oslo", "NO"), ("Pune", "IN"), ("Rio de Janeiro", "BR"),
    ("Vienna", "AT"), ("Manila", "PH"), ("New York", "US"), ("Copenhagen", "DK"),
    ("Riyadh", "SA"), ("Auckland", "NZ"), ("Marseille", "FR"), ("Hohhot", "CN"),
    ("Miami", "US"), ("Berlin", "DE"), ("Ho Chi Minh City", "VN"), ("Cape Town", "ZA"),
    ("Vancouver", "CA"), ("Munich", "DE"), ("Bengaluru", "IN"), ("Lima", "PE"),
    ("Portland", "US"), ("Brussels", "BE"), ("Doha", "QA"), ("Wuhan", "CN"),
    ("Denver", "US"), ("Prague", "CZ"), ("Busan", "KR"), ("Cairo", "EG"),
    ("Salt Lake City", "US"), ("Lisbon", "PT"), ("Guiyang", "CN"), ("Mexico City", "MX"),
    ("Houston", "US"), ("Barcelona", "ES"), ("Brisbane", "AU"), ("Casablanca", "MA"),
    ("Boston", "US"), ("Hamburg", "DE"), ("New Delhi", "IN"), ("Nanjing", "CN"),
    ("Las Vegas", "US"), ("Manchester", "GB"), ("Abu Dhabi", "AE"), ("Fortaleza", "BR"),
    ("Minneapolis", "US"), ("Budapest", "HU"), ("Hanoi", "VN"), ("Accra", "GH"),
    ("Kansas City", "US"), ("Bucharest", "RO"), ("Tianjin", "CN"), ("Jeddah", "SA"),
    ("Charlotte", "US"), ("Athens", "GR"), ("Kolkata", "IN"), ("Adelaide", "AU"),
    ("Omaha", "US"), ("Dusseldorf", "DE"), ("Xi'an", "CN"), ("Istanbul", "TR"),
    ("Calgary", "CA"), ("Rome", "IT"), ("Fukuoka", "JP"), ("Durban", "ZA"),
    ("Des Moines", "US"), ("Sofia", "BG"), ("Chongqing", "CN"), ("Guadalajara", "MX"),
)  # fmt: skip

# synthetic-N: (machines, cities).
SYNTHETIC_SIZES: dict[str, tuple[int, int]] = {
    "synthetic-200": (200, 40),
    "synthetic-1000": (1000, 80),
    "synthetic-10000": (10000, 120),
}

# sites-N: (sites, machines per site): equal sites in the first data-centre cities.
SITE_SIZES: dict[str, tuple[int, int]] = {"sites-10000": (100, 100)}

# Uniform fleets, one kind of machine (families the training corpus does not contain):
# (regions as (city, ISO country code), machines per region, capability, GPUs, GB per GPU).
CLOUD_REGIONS: tuple[tuple[str, str], ...] = (
    ("Ashburn", "US"), ("Frankfurt", "DE"), ("Tokyo", "JP"), ("Singapore", "SG"),
    ("London", "GB"), ("Sydney", "AU"), ("Sao Paulo", "BR"), ("Seattle", "US"),
    ("Mumbai", "IN"), ("Paris", "FR"),
)  # fmt: skip
UNIFORM_PRESETS: dict[str, tuple[tuple[tuple[str, str], ...], int, float, int, int]] = {
    # Single-GPU 16 GB machines (V100 16 GB) in 8 cloud regions, 6 per region.
    "cloud-16gb": (CLOUD_REGIONS[:8], 6, 7.0, 1, 16),
    # 4 × 24 GB machines (A10) in two regions an ocean apart, 20 per region.
    "two-region-24gb": ((("Frankfurt", "DE"), ("Ashburn", "US")), 20, 8.6, 4, 24),
}

# Synthetic hardware: fleet-wide share of each compute capability, and the GPU models behind it
# as (GB per GPU, share). 6.1 P40/P5000, 7.0 V100, 7.5 T4/RTX 6000/RTX 8000, 8.0 A100,
# 8.6 A10/A40, 8.9 L4/L40S, 9.0 H100.
CAPABILITY_SHARE: dict[float, float] = {
    6.1: 0.05,
    7.0: 0.12,
    7.5: 0.08,
    8.0: 0.30,
    8.6: 0.15,
    8.9: 0.12,
    9.0: 0.18,
}
GPU_MEMORY_GB: dict[float, tuple[tuple[int, float], ...]] = {
    6.1: ((24, 0.7), (16, 0.3)),
    7.0: ((32, 0.7), (16, 0.3)),
    7.5: ((16, 0.6), (24, 0.2), (48, 0.2)),
    8.0: ((40, 0.4), (80, 0.6)),
    8.6: ((24, 0.5), (48, 0.5)),
    8.9: ((24, 0.4), (48, 0.6)),
    9.0: ((80, 1.0),),
}
GPU_COUNTS: tuple[tuple[int, float], ...] = ((8, 0.80), (4, 0.12), (16, 0.08))
CITY_SIZE_TAIL = 1.5  # Pareto shape of city weights: smaller is more concentrated
CITY_RANK_NOISE = 0.7  # how loosely the largest sites follow the order of the city list
CITY_HARDWARE_CONCENTRATION = 4.0  # Dirichlet concentration of a city's capability mix


def _resolve(name: str, country_code: str | None = None) -> Location:
    location = resolve_location(name)
    if location is None or (country_code and location.country_code != country_code):
        raise ConfigError(f"preset location {name!r} does not resolve in the offline gazetteer")
    return location


def _frame(
    locations: list[Location], capability, gpu_count, memory_gb, drained_fraction: float, rng
) -> pd.DataFrame:
    n = len(locations)
    status = np.full(n, schemas.STATUS_ACTIVE, dtype=object)
    drained = round(drained_fraction * n)
    if drained:
        status[rng.choice(n, size=drained, replace=False)] = schemas.STATUS_DRAINED
    frame = pd.DataFrame(
        {
            "node_id": np.arange(n, dtype=np.int64),
            "city": [loc.name for loc in locations],
            "country": [loc.country for loc in locations],
            "lat": [loc.lat for loc in locations],
            "lon": [loc.lon for loc in locations],
            "compute_capability": np.asarray(capability, dtype=float),
            "gpu_count": np.asarray(gpu_count, dtype=np.int64),
            "memory_gb": np.asarray(memory_gb, dtype=float),
            "status": status,
        }
    )
    return schemas.conform(frame, schemas.INVENTORY)


def _paper_fleet(rng: np.random.Generator, settings: GenerateSettings) -> pd.DataFrame:
    locations = [_resolve(name) for name, count in PAPER_CITIES for _ in range(count)]
    kinds = np.repeat(np.arange(len(PAPER_HARDWARE)), [h[3] for h in PAPER_HARDWARE])
    kinds = rng.permutation(kinds)
    table = np.array([h[:3] for h in PAPER_HARDWARE], dtype=float)
    capability, gpus, per_gpu = table[kinds].T
    return _frame(
        locations, capability, gpus.astype(np.int64), gpus * per_gpu, settings.drained_fraction, rng
    )


def _weighted(rng: np.random.Generator, options, size: int) -> np.ndarray:
    values = np.array([value for value, _ in options])
    weights = np.array([weight for _, weight in options], dtype=float)
    return values[rng.choice(len(values), size=size, p=weights / weights.sum())]


def _synthetic_fleet(
    machines: int, cities: int, rng: np.random.Generator, settings: GenerateSettings
) -> pd.DataFrame:
    sites = [_resolve(name, code) for name, code in DATACENTER_CITIES[:cities]]
    # Heavy-tailed city sizes: Pareto weights, at least one machine per city. The largest
    # weights go, roughly, to the cities listed first (the big hubs of each continent).
    weights = np.sort(rng.pareto(CITY_SIZE_TAIL, size=cities) + 1.0)[::-1]
    rank = np.argsort(np.arange(1, cities + 1) * rng.lognormal(0.0, CITY_RANK_NOISE, cities))
    weights = weights[np.argsort(rank)]
    counts = 1 + rng.multinomial(machines - cities, weights / weights.sum())
    return _city_hardware(sites, counts, rng, settings)


def _city_hardware(
    sites: list[Location], counts: np.ndarray, rng: np.random.Generator, settings: GenerateSettings
) -> pd.DataFrame:
    """`counts[i]` machines in `sites[i]`, each city leaning towards some GPU generations."""
    machines = int(counts.sum())
    capabilities = np.array(list(CAPABILITY_SHARE))
    share = np.array(list(CAPABILITY_SHARE.values()))
    capability = np.empty(machines)
    start = 0
    for count in counts:
        # Each site leans towards some GPU generations around the fleet-wide mix.
        mix = rng.dirichlet(share * CITY_HARDWARE_CONCENTRATION / share.max())
        capability[start : start + count] = capabilities[rng.choice(len(mix), count, p=mix)]
        start += count
    per_gpu = np.empty(machines)
    for cap, options in GPU_MEMORY_GB.items():
        chosen = capability == cap
        per_gpu[chosen] = _weighted(rng, options, int(chosen.sum()))
    gpu_count = _weighted(rng, GPU_COUNTS, machines).astype(np.int64)
    locations = [site for site, count in zip(sites, counts, strict=True) for _ in range(count)]
    return _frame(
        locations, capability, gpu_count, gpu_count * per_gpu, settings.drained_fraction, rng
    )


def uniform_fleet(
    regions: tuple[tuple[str, str], ...],
    per_region: int,
    capability: float,
    gpus: int,
    gb_per_gpu: int,
    drained_fraction: float,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """`per_region` identical machines in each region (node ids in region order)."""
    locations = [_resolve(name, code) for name, code in regions for _ in range(per_region)]
    n = len(locations)
    return _frame(
        locations,
        np.full(n, capability),
        np.full(n, gpus, dtype=np.int64),
        np.full(n, float(gpus * gb_per_gpu)),
        drained_fraction,
        rng,
    )


def build_fleet(preset: str, seed: int, settings: GenerateSettings) -> pd.DataFrame:
    """The inventory of a preset fleet (schemas.INVENTORY), the same for the same inputs."""
    if preset not in PRESETS:
        raise ConfigError(
            f"generate.preset (--preset): unknown fleet preset {preset!r}; valid presets: "
            + ", ".join(PRESETS)
        )
    # One stream per (seed, preset): "FLEET" tag, then the preset's position.
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x464C454554, PRESETS.index(preset)]))
    if preset == PAPER:
        return _paper_fleet(rng, settings)
    if preset in UNIFORM_PRESETS:
        return uniform_fleet(*UNIFORM_PRESETS[preset], settings.drained_fraction, rng)
    if preset in SITE_SIZES:
        sites, per_site = SITE_SIZES[preset]
        places = [_resolve(name, code) for name, code in DATACENTER_CITIES[:sites]]
        return _city_hardware(places, np.full(sites, per_site), rng, settings)
    machines, cities = SYNTHETIC_SIZES[preset]
    return _synthetic_fleet(machines, cities, rng, settings)
