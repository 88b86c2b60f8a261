"""Offline gazetteer and distances: free-text locations resolve to the right place, or to None."""

from __future__ import annotations

import numpy as np
import pytest

from hulk.geo import fiber_floor_ms, haversine_km, normalise, resolve_location

# The twelve locations of the paper's fleet, as written in node_feature.csv.
HULK47_LOCATIONS = [
    ("Beijing", "Beijing", "CN", "city"),
    ("Neimeng ", "Inner Mongolia", "CN", "region"),
    ("Neimeng", "Inner Mongolia", "CN", "region"),
    ("Nanjing", "Nanjing", "CN", "city"),
    ("Quanzhou", "Quanzhou", "CN", "city"),
    ("California", "California", "US", "region"),
    ("Tokyo", "Tokyo", "JP", "city"),
    ("Berlin", "Berlin", "DE", "city"),
    ("London", "London", "GB", "city"),
    ("New Delhi", "New Delhi", "IN", "city"),
    ("Paris", "Paris", "FR", "city"),
    ("Rome", "Rome", "IT", "city"),
    ("Brasilia", "Brasília", "BR", "city"),
]


@pytest.mark.parametrize(("text", "name", "code", "kind"), HULK47_LOCATIONS)
def test_hulk47_locations_resolve(text: str, name: str, code: str, kind: str) -> None:
    place = resolve_location(text)
    assert place is not None, text
    assert (place.name, place.country_code, place.kind) == (name, code, kind)


def test_quanzhou_is_the_fujian_port_not_the_guangxi_county() -> None:
    place = resolve_location("Quanzhou")
    assert place is not None
    assert place.lat == pytest.approx(24.91, abs=0.1)
    assert place.lon == pytest.approx(118.59, abs=0.1)


@pytest.mark.parametrize(
    ("text", "name", "code"),
    [
        ("  tokyo", "Tokyo", "JP"),
        ("BEIJING", "Beijing", "CN"),
        ("São Paulo", "São Paulo", "BR"),
        ("Sao Paulo", "São Paulo", "BR"),
        ("Frankfurt", "Frankfurt am Main", "DE"),
        ("Japan", "Japan", "JP"),
        ("Germany", "Germany", "DE"),
        ("Virginia", "Virginia", "US"),
        ("Ohio", "Ohio", "US"),
        ("Inner Mongolia", "Inner Mongolia", "CN"),
        ("inner   MONGOLIA", "Inner Mongolia", "CN"),
        ("Bombay", "Mumbai", "IN"),
        ("Peking", "Beijing", "CN"),
        ("Brasília", "Brasília", "BR"),
        ("Zurich", "Zürich", "CH"),
        ("Washington", "Washington", "US"),
        ("Nevada", "Nevada", "US"),
        ("Netherlands", "The Netherlands", "NL"),
        ("UK", "United Kingdom", "GB"),
        ("Brasil", "Brazil", "BR"),
        ("Deutschland", "Germany", "DE"),
    ],
)
def test_common_variants_resolve(text: str, name: str, code: str) -> None:
    place = resolve_location(text)
    assert place is not None, text
    assert (place.name, place.country_code) == (name, code)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        # A country's name is the country, not a small town elsewhere that shares it.
        ("India", "IN"),  # not Inđija, Serbia (alternate name "India")
        ("Mexico", "MX"),  # not Mexico, Pampanga (Philippines)
        ("Jamaica", "JM"),  # not Jamaica, Queens
    ],
)
def test_country_names_beat_towns_of_the_same_name(text: str, code: str) -> None:
    place = resolve_location(text)
    assert place is not None
    assert (place.country_code, place.kind) == (code, "country")


def test_countries_sit_at_their_capital() -> None:
    japan, tokyo = resolve_location("Japan"), resolve_location("Tokyo")
    assert japan is not None and tokyo is not None
    assert (japan.lat, japan.lon) == (tokyo.lat, tokyo.lon)
    singapore = resolve_location("Singapore")
    assert singapore is not None and singapore.kind == "city"


@pytest.mark.parametrize(
    ("text", "name", "code", "lat"),
    [
        ("London, Ontario", "London", "CA", 42.98),
        ("London, UK", "London", "GB", 51.51),
        ("Paris, TX", "Paris", "US", 33.66),
        ("Paris (FR)", "Paris", "FR", 48.85),
        ("Tokyo, JP", "Tokyo", "JP", 35.69),
        ("Frankfurt, Germany", "Frankfurt am Main", "DE", 50.12),
        ("Portland, Oregon", "Portland", "US", 45.52),
        ("Portland, ME", "Portland", "US", 43.66),
        ("Washington, D.C.", "Washington", "US", 38.90),
    ],
)
def test_qualified_names_pick_the_city_in_that_place(
    text: str, name: str, code: str, lat: float
) -> None:
    place = resolve_location(text)
    assert place is not None, text
    assert (place.name, place.country_code) == (name, code)
    assert place.lat == pytest.approx(lat, abs=0.05)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "Narnia",
        "Mordor",
        "Blorptown",
        "Hulkville",
        "qwerty",
        "xyz",
        # Alternate names of three letters or fewer are codes, never matched:
        "abc",  # IATA code of Albacete
        "lon",
        "ber",
        "NY",
        # A qualifier that cannot be read, or names another country, is no guess.
        "Paris, Narnia",
        "Paris, Japan",
    ],
)
def test_unknown_names_return_none(text: str) -> None:
    assert resolve_location(text) is None


def test_normalise_strips_case_accents_and_spaces() -> None:
    assert normalise("  São   Paulo ") == "sao paulo"
    assert normalise("BRASÍLIA") == "brasilia"
    assert normalise("Neimeng ") == "neimeng"


def test_london_paris_is_about_344_km() -> None:
    london, paris = resolve_location("London"), resolve_location("Paris")
    assert london is not None and paris is not None
    distance = float(haversine_km(london.lat, london.lon, paris.lat, paris.lon))
    assert distance == pytest.approx(344, abs=3)


def test_haversine_known_values_and_arrays() -> None:
    assert float(haversine_km(0, 0, 0, 0)) == 0.0
    # A quarter of the equator and pole to pole.
    quarter = np.pi / 2 * 6371.0088
    assert float(haversine_km(0, 0, 0, 90)) == pytest.approx(quarter, rel=1e-9)
    assert float(haversine_km(90, 0, -90, 0)) == pytest.approx(2 * quarter, rel=1e-9)
    # Symmetric, and elementwise on arrays.
    lat1, lon1 = np.array([51.5, 48.85]), np.array([-0.13, 2.35])
    lat2, lon2 = np.array([48.85, 35.69]), np.array([2.35, 139.69])
    forward, backward = haversine_km(lat1, lon1, lat2, lon2), haversine_km(lat2, lon2, lat1, lon1)
    assert forward.shape == (2,)
    np.testing.assert_allclose(forward, backward)


def test_fiber_floor_is_distance_over_speed() -> None:
    np.testing.assert_allclose(fiber_floor_ms([0.0, 204.2, 2042.0], 204.2), [0.0, 1.0, 10.0])
