"""The corpus is cached by its content, not its path (issue 15, item 14).

Changing ``corpus.path`` alone publishes the cached corpus at the new path (same bytes, so the
same sha256 the prior is keyed on) instead of labelling every fleet again; changing what the
samples depend on builds a new one; a cache entry whose bytes changed is not used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hulk import corpus as corpora
from hulk.settings import CorpusSettings, Settings, TeacherSettings
from hulk.stages import corpus as stage

TINY = CorpusSettings(
    fleets=2,
    mixes_per_fleet=1,
    min_machines=10,
    max_machines=16,
    max_cities=4,
    max_jobs=2,
    max_evaluations=10,
    workers=1,
)


def _settings(tmp_path: Path, folder: str, **corpus: object) -> Settings:
    section = TINY.model_copy(update={"path": tmp_path / folder / "corpus.pt", **corpus})
    return Settings().model_copy(
        update={
            "corpus": section,
            "data_dir": tmp_path / "data",
            "teacher": TeacherSettings(random_starts=1, site_starts=2),
        }
    )


@pytest.fixture
def built(tmp_path: Path) -> Settings:
    settings = _settings(tmp_path, "first")
    assert stage.run(settings).summary.reused is False
    return settings


def _no_labelling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the corpus was labelled again")

    monkeypatch.setattr(corpora, "build_corpus", refuse)


def test_moving_the_corpus_reuses_it(
    built: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved = _settings(tmp_path, "elsewhere/deeper")
    assert stage.corpus_is_current(moved)  # the nightly flow does not fan the labelling out
    _no_labelling(monkeypatch)

    result = stage.run(moved)

    assert result.summary.reused is True
    assert moved.corpus.path.read_bytes() == built.corpus.path.read_bytes()
    manifest = json.loads(corpora.manifest_path(moved.corpus.path).read_text())
    first = json.loads(corpora.manifest_path(built.corpus.path).read_text())
    assert manifest == first  # the same corpus, sha256 and file name included
    stamp = moved.corpus.path.stat().st_mtime_ns
    assert stage.run(moved).summary.reused is True  # then reused at its new path, untouched
    assert moved.corpus.path.stat().st_mtime_ns == stamp


def test_other_settings_or_seed_build_another(
    built: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not stage.corpus_is_current(_settings(tmp_path, "first", fleets=3))
    assert not stage.corpus_is_current(built, seed=built.seed + 1)
    assert stage.corpus_is_current(_settings(tmp_path, "first", workers=2))  # not content
    calls = []
    real = corpora.build_corpus
    monkeypatch.setattr(corpora, "build_corpus", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert stage.run(_settings(tmp_path, "second", fleets=3)).summary.reused is False
    assert len(calls) == 1


def test_a_changed_cache_entry_is_not_used(built: Settings, tmp_path: Path) -> None:
    entry = corpora.cached_corpus(built, built.seed)
    assert entry is not None and entry.parent == tmp_path / "data" / corpora.CACHE_DIR
    built.corpus.path.unlink()  # the cache entry is a hard link: replace its bytes, not edit
    entry.write_bytes(entry.read_bytes() + b"tampered")
    moved = _settings(tmp_path, "third")
    assert corpora.cached_corpus(moved, moved.seed) is None
    assert stage.run(moved).summary.reused is False


def test_a_damaged_corpus_is_named_and_taken_again_from_the_cache(
    built: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hulk.errors import InputError

    path = built.corpus.path
    good = path.read_bytes()
    path.unlink()  # the cache entry is a hard link: a new file of other bytes, not an edit
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(InputError, match=r"corpus\.corrupt.*does not match its manifest"):
        corpora.load_corpus(path)  # what training reads: named, not a traceback
    assert corpora.cached_corpus(built, built.seed) is not None  # the cache's copy is whole
    _no_labelling(monkeypatch)
    assert stage.run(built).summary.reused is True
    assert path.read_bytes() == good


@pytest.mark.slow
def test_the_cache_keeps_the_newest_entries(tmp_path: Path) -> None:
    for fleets in range(1, corpora.CACHE_KEEP + 2):
        stage.run(_settings(tmp_path, f"f{fleets}", fleets=fleets))
    cached = sorted((tmp_path / "data" / corpora.CACHE_DIR).glob("*.pt"))
    assert len(cached) == corpora.CACHE_KEEP
    oldest = _settings(tmp_path, "x", fleets=1)
    assert corpora.cached_corpus(oldest, oldest.seed) is None
    newest = _settings(tmp_path, "x", fleets=corpora.CACHE_KEEP + 1)
    assert corpora.cached_corpus(newest, newest.seed) is not None


@pytest.mark.slow
def test_moving_the_corpus_reuses_the_prior(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hulk import train as training
    from hulk.stages import prior

    built = _settings(tmp_path, "first", fleets=8)  # enough fleets for a validation split
    stage.run(built)
    first = prior.run(built, seed=3).summary
    assert first.reused is False
    moved = _settings(tmp_path, "elsewhere", fleets=8)
    stage.run(moved)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the prior was trained again")

    monkeypatch.setattr(training, "train_model", refuse)
    again = prior.run(moved, seed=3).summary
    assert again.reused is True
    assert prior.prior_path(moved).read_bytes() == prior.prior_path(built).read_bytes()
    config, state = prior.load_prior(moved)
    assert config == prior.load_prior(built)[0] and state
    # Another seed is another prior: trained, not taken from the cache.
    monkeypatch.undo()
    assert prior.run(moved, seed=4).summary.reused is False
