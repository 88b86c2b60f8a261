"""Settings: params.yaml is the single source of tunable numbers, checked on load."""

from __future__ import annotations

from pathlib import Path

import pytest

from hulk.errors import ConfigError
from hulk.settings import Settings, load_settings, settings_from_dict

REPO = Path(__file__).resolve().parents[2]


def test_params_yaml_loads_and_matches_the_code_defaults() -> None:
    # The code's defaults exist for tests; params.yaml must say the same so nothing drifts.
    assert load_settings(REPO / "params.yaml") == Settings()


def test_unknown_key_is_named(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("generate:\n  dayz: 3\n")
    with pytest.raises(ConfigError, match=r"generate\.dayz: unknown key"):
        load_settings(params)


def test_bad_settings_read_file_rule_and_every_problem(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("scheduler:\n  move_gain: -1\n")
    with pytest.raises(ConfigError) as one:
        load_settings(params)
    assert str(one.value) == (
        f"{params}: [settings.invalid] scheduler.move_gain: Input should be greater than or "
        "equal to 0 (got -1)"
    )
    params.write_text("scheduler:\n  move_gain: -1\n  wait_gain: x\ngenerate:\n  dayz: 3\n")
    with pytest.raises(ConfigError) as three:
        load_settings(params)
    head, *problems = str(three.value).splitlines()
    assert head == f"{params}: [settings.invalid] 3 settings are invalid:"
    assert [p.split(":")[0].strip() for p in problems] == [
        "generate.dayz",
        "scheduler.move_gain",
        "scheduler.wait_gain",
    ]
    params.write_text("- a list\n")
    with pytest.raises(ConfigError, match=r"\[settings\.not_a_mapping\]"):
        load_settings(params)


def test_mistyped_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r"ingest\.window_days"):
        settings_from_dict({"ingest": {"window_days": "ninety"}})


def test_out_of_range_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r"validate\.asymmetry_ratio"):
        settings_from_dict({"validate": {"asymmetry_ratio": -1}})


@pytest.mark.parametrize(
    "key, value",
    [
        ("ingest.window_days", 200_000),
        ("validate.stale_after_hours", 1.0e7),
        ("validate.future_skew_s", 1.0e13),
        ("fleet_samples.window_days", 200_000),
    ],
)
def test_a_span_of_time_past_what_timestamps_hold_is_named(key: str, value: float) -> None:
    """Loaded, such values overflowed in validation after minutes of work, with a traceback."""
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*less than or equal"):
        settings_from_dict({section: {name: value}})


@pytest.mark.parametrize("key", ["finetune.lr", "train.lr", "teacher.time_budget_s"])
def test_an_infinite_positive_setting_is_named(key: str) -> None:
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        settings_from_dict({section: {name: float("inf")}})


def test_inverted_range_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"generate\.route_inflation"):
        settings_from_dict({"generate": {"route_inflation": {"low": 3, "high": 1}}})


def test_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("seed: [unclosed\n")
    with pytest.raises(
        ConfigError, match=r"params\.yaml: \[settings\.yaml\] not valid YAML: line 2, column 1"
    ) as e:
        load_settings(params)
    assert "\n" not in str(e.value)  # one line, saying where


@pytest.mark.parametrize(
    "text, where",
    [
        ("train:\n  epochs: 5\ntrain:\n  epochs: 6\n", "line 3"),  # a section given twice
        ("train:\n  epochs: 5\n  epochs: 6\n", "line 3"),
    ],
)
def test_a_key_given_twice_is_refused_not_the_last_kept(
    tmp_path: Path, text: str, where: str
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(text)
    with pytest.raises(ConfigError, match=rf"{where}, column \d+: key '\w+' given more than once"):
        load_settings(params)


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_bytes(b"\xff\xfeseed: 7\n")
    with pytest.raises(ConfigError, match=r"params\.yaml: \[settings\.encoding\] not UTF-8 text"):
        load_settings(params)


def test_partial_file_keeps_other_defaults(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("seed: 11\nvalidate:\n  asymmetry_ratio: 3\n")
    settings = load_settings(params)
    assert settings.seed == 11
    assert settings.validation.asymmetry_ratio == 3.0
    assert settings.ingest.window_days == Settings().ingest.window_days


def test_gnn_planner_changes_only_the_named_planner_settings() -> None:
    settings = settings_from_dict({"assign": {"gnn_planner": {"full_sets": 1}}})
    assert settings.gnn_planner.full_sets == 1
    assert settings.gnn_planner.max_pool == settings.planner.max_pool
    assert settings.planner.full_sets == 8  # the teacher's planner is untouched


def test_gnn_planner_large_changes_the_gnn_planner_on_top() -> None:
    settings = settings_from_dict(
        {
            "assign": {
                "gnn_planner": {"full_sets": 2, "seed_sites": 2},
                "gnn_planner_large": {"full_sets": 1},
            }
        }
    )
    assert settings.gnn_planner_large.full_sets == 1
    assert settings.gnn_planner_large.seed_sites == 2  # from gnn_planner
    assert settings.gnn_planner.full_sets == 2
    assert settings.planner.full_sets == 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed_site": 1}, r"unknown planner key\(s\) \['seed_site'\]"),
        ({"full_sets": 0}, "full_sets"),
    ],
)
@pytest.mark.parametrize("key", ["gnn_planner", "gnn_planner_large"])
def test_bad_gnn_planner_keys_are_named(key: str, change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"assign\.{key}: .*" + message):
        settings_from_dict({"assign": {key: change}})


@pytest.mark.parametrize("seed", [-1, 2**63])
def test_a_seed_numpy_and_torch_cannot_take_is_named(seed: int) -> None:
    with pytest.raises(ConfigError, match=r"seed: Input should be"):
        settings_from_dict({"seed": seed})


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        ({"ingest": {"memory_limit": "banana"}}, r"ingest\.memory_limit", "is not a size"),
        ({"ingest": {"memory_limit": "0GB"}}, r"ingest\.memory_limit", "above zero"),
        ({"ingest": {"memory_limit": "150%"}}, r"ingest\.memory_limit", "at most 100%"),
        ({"mlflow": {"tracking_uri": "foo:bar"}}, r"mlflow\.tracking_uri", "backend must be"),
        ({"mlflow": {"tracking_uri": "sqlite://x.db"}}, r"mlflow\.tracking_uri", "sqlite:///"),
        ({"mlflow": {"tracking_uri": "https:x"}}, r"mlflow\.tracking_uri", "https://host"),
        ({"fleet_samples": {"val_fraction": 1.0}}, r"fleet_samples\.val_fraction", "less than 1"),
        (
            {"corpus": {"val_fraction": 0.5, "test_fraction": 0.5}},
            "corpus",
            "no fleet would train",
        ),
    ],
)
def test_a_setting_that_would_fail_late_is_named_on_load(
    change: dict, key: str, message: str
) -> None:
    # Each of these passed validation and failed minutes later with a traceback (DuckDB,
    # MLflow, an empty training split).
    with pytest.raises(ConfigError, match=rf"{key}.*{message}"):
        settings_from_dict(change)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ingest.memory_limit", "512 MiB"),
        ("ingest.memory_limit", "80%"),
        ("ingest.memory_limit", "2 gigabytes"),
        ("mlflow.tracking_uri", "sqlite:////srv/hulk/mlruns.db"),
        ("mlflow.tracking_uri", "http://mlflow.internal:5000"),
        ("mlflow.tracking_uri", "postgresql+psycopg2://hulk@db/mlflow"),
        ("mlflow.tracking_uri", "databricks://profile"),
    ],
)
def test_the_forms_duckdb_and_mlflow_take_are_accepted(key: str, value: str) -> None:
    section, name = key.split(".")
    assert getattr(getattr(settings_from_dict({section: {name: value}}), section), name) == value


@pytest.mark.parametrize(
    "tiers, problem",
    [
        ([], "the last tier must have max_latency_ms: null"),
        ([{"max_latency_ms": 2, "gbps": 10}], "the last tier must have max_latency_ms: null"),
        (
            [{"max_latency_ms": None, "gbps": 0.3}, {"max_latency_ms": None, "gbps": 1}],
            "only the last tier",
        ),
        (
            [
                {"max_latency_ms": 20, "gbps": 2},
                {"max_latency_ms": 2, "gbps": 10},
                {"max_latency_ms": None, "gbps": 0.3},
            ],
            "must rise from tier to tier",
        ),
    ],
)
def test_bandwidth_tiers_must_cover_every_latency_in_order(tiers: list, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"graph\.bandwidth_tiers: .*{problem}"):
        settings_from_dict({"graph": {"bandwidth_tiers": tiers}})


def test_a_rule_between_a_sections_keys_names_both_values_without_the_section() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_dict({"corpus": {"max_machines": 10}})
    message = str(caught.value)
    assert "corpus: Value error, min_machines (20) exceeds max_machines (10)" in message
    assert "(got {" not in message
