"""The dense fleet kept in the data folder (`hulk.fleet_cache`): hits, misses, changed files or
settings, broken files, the site model, a folder that refuses the write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from hulk import fileio, schemas
from hulk.code_deps import module_files
from hulk.cost import Fleet
from hulk.data_folder import load_fleet, load_frames
from hulk.errors import InputError
from hulk.fleet_cache import ARRAYS, CACHE_FILE, CODE_FILES, fleet_key
from hulk.settings import Settings, load_settings


def settings_with(tmp_path: Path, **sections: dict) -> Settings:
    tmp_path.mkdir(parents=True, exist_ok=True)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(sections))
    return load_settings(params)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_with(tmp_path)


def built(data: Path, settings: Settings) -> Fleet:
    inventory, links = load_frames(data, settings)
    return Fleet.from_frames(
        inventory, links, settings.hardware, settings.graph.bandwidth_tiers, settings.cost
    )


def same(a: Fleet, b: Fleet) -> bool:
    return a.sites is None and b.sites is None and all(
        np.array_equal(getattr(a, name), getattr(b, name)) and
        getattr(a, name).dtype == getattr(b, name).dtype
        for name in ARRAYS
    )  # fmt: skip


def no_building(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> Fleet:
        raise AssertionError("built the fleet again")

    monkeypatch.setattr(Fleet, "from_frames", refuse)


def test_code_files_are_what_the_cost_model_runs() -> None:
    assert set(CODE_FILES) == set(module_files("hulk.cost"))


def test_a_miss_builds_and_keeps_a_hit_reads(
    tiny: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = built(tiny, settings)
    assert not (tiny / CACHE_FILE).exists()
    first = load_fleet(tiny, settings)[0]
    assert same(first, fresh)
    assert (tiny / CACHE_FILE).exists()
    no_building(monkeypatch)
    again = load_fleet(tiny, settings)[0]
    assert same(again, fresh)
    assert np.isinf(np.diag(again.bandwidth_Bps)).all()  # infinities kept exactly


def test_a_new_link_table_or_settings_build_anew(
    tiny: Path, settings: Settings, tmp_path: Path
) -> None:
    load_fleet(tiny, settings)
    links = pd.read_parquet(tiny / schemas.LINKS_FILE)
    links = links[~((links["src"] == 0) & (links["dst"] == 5))]  # 0–5 now relayed
    fileio.write_parquet(tiny / schemas.LINKS_FILE, links)
    changed = load_fleet(tiny, settings)[0]
    assert same(changed, built(tiny, settings)) and changed.relayed[0, 5]
    with np.load(tiny / CACHE_FILE) as archive:
        assert str(archive["key"]) == fleet_key(tiny, settings)

    other = settings_with(tmp_path / "other", hardware={"mfu": 0.25})
    assert fleet_key(tiny, other) != fleet_key(tiny, settings)
    assert same(load_fleet(tiny, other)[0], built(tiny, other))


@pytest.mark.parametrize("broken", ["bytes", "shape", "dtype", "missing array"])
def test_a_broken_file_is_rebuilt_and_replaced(tiny: Path, settings: Settings, broken: str) -> None:
    load_fleet(tiny, settings)
    path = tiny / CACHE_FILE
    if broken == "bytes":
        path.write_bytes(b"PK\x03\x04 not a zip")
    else:
        with np.load(path) as archive:
            arrays = {name: archive[name] for name in archive.files}
        if broken == "shape":
            arrays["latency_s"] = arrays["latency_s"][:-1]
        elif broken == "dtype":
            arrays["active"] = arrays["active"].astype(float)
        else:
            del arrays["relayed"]
        with path.open("wb") as out:
            np.savez(out, allow_pickle=False, **arrays)
    assert same(load_fleet(tiny, settings)[0], built(tiny, settings))
    with np.load(path) as archive:  # a good file again
        assert set(archive.files) == {"key", *ARRAYS}


def test_site_model_fleets_are_not_kept(tiny: Path, tmp_path: Path) -> None:
    sites = settings_with(tmp_path / "sites", cost={"site_model": "sites"})
    assert load_fleet(tiny, sites)[0].sites is not None
    assert not (tiny / CACHE_FILE).exists()


def test_a_folder_that_refuses_the_write_still_plans(
    tiny: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: object) -> None:
        raise InputError(path, "io.disk_full", "cannot write: the disk is full")

    monkeypatch.setattr(fileio, "atomic_path", full)
    assert same(load_fleet(tiny, settings)[0], built(tiny, settings))
    assert not (tiny / CACHE_FILE).exists()
