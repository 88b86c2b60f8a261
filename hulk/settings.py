"""Typed, validated settings loaded from params.yaml.

Every tunable number lives in params.yaml. An unknown key or a value of the wrong type is a
`ConfigError` that names the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from hulk.errors import ConfigError

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

DEFAULT_PARAMS = Path("params.yaml")
DEFAULT_DATA_DIR = Path("data")  # params data_dir; paths under it follow --data

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # finite: inf is no setting
PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Range(Section):
    """A closed interval [low, high] that a generator draws from uniformly."""

    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self


# The generator settings of the demo's own data only, which no corpus reads: the corpus draws
# its fleets from the paper's and the synthetic presets (not `preset`), without logs (not
# `end_date`). Left out of the corpus's key and of its DVC stage's params.
CORPUS_IGNORES_GENERATE = frozenset({"preset", "end_date"})


class GenerateSettings(Section):
    preset: str = "paper-47"
    days: PositiveInt = 90
    # Last day of the generated window (UTC). Fixed, so the same params give the same bytes.
    # Quoted in params.yaml (DVC cannot read a YAML date): an ISO string is accepted.
    end_date: Annotated[dt.date, Field(strict=False)] = dt.date(2026, 11, 20)
    probe_interval_s: PositiveInt = 600
    throughput_interval_s: PositiveInt = 3600
    throughput_sizes_bytes: list[PositiveInt] = [1 << 20, 8 << 20, 64 << 20]
    route_inflation: Range = Range(low=1.3, high=2.2)
    last_mile_ms: Range = Range(low=0.1, high=1.0)
    congestion_amplitude: Fraction = 0.3
    jitter_scale: Fraction = 0.05
    # Pareto shape of the jitter; above 1 so that the mean latency is finite.
    jitter_tail_index: Annotated[float, Field(gt=1)] = 2.5
    loss_rate: Range = Range(low=0.0005, high=0.01)
    outages_per_machine: Annotated[float, Field(ge=0)] = 0.3
    outage_hours: Range = Range(low=1, high=24)
    blocked_pair_fraction: Fraction = 0.1
    drained_fraction: Fraction = 0.0
    # Beyond this many machines a full probe mesh is too much: each machine probes its own city
    # plus a random sample of other machines, up to this many peers in total.
    max_probe_peers: PositiveInt = 64
    # Which pairs probe: "peers" (above: a full mesh, or own city plus random peers) or "sites"
    # (every fleet: each machine probes its own site's machines and one machine in each of
    # `probe_sites` other sites drawn at random), the sparse shape of fleets of 10,000 machines.
    probing: Literal["peers", "sites"] = "peers"
    probe_sites: PositiveInt = 8
    # Collector glitches per day, as real logs have them: half are probes logged twice, half
    # latencies corrupted below light speed. Validation must quarantine exactly these rows.
    glitches_per_day: Annotated[int, Field(ge=0)] = 4

    @field_validator("route_inflation")
    @classmethod
    def _no_shortcut(cls, value: Range) -> Range:
        if value.low < 1:
            raise ValueError(
                f"low ({value.low}) must be at least 1: no route beats the great circle"
            )
        return value

    @field_validator("last_mile_ms", "outage_hours")
    @classmethod
    def _non_negative(cls, value: Range) -> Range:
        if value.low < 0:
            raise ValueError(f"low ({value.low}) must not be negative")
        return value

    @field_validator("loss_rate")
    @classmethod
    def _probability(cls, value: Range) -> Range:
        if value.low < 0 or value.high > 1:
            raise ValueError(f"[{value.low}, {value.high}] must lie within [0, 1]")
        return value


# Latency probes are the 64-byte messages of the logs (docs/contracts.md#latency-logs): the
# generator writes them this size, validation and ingest tell them from throughput probes by it.
LATENCY_PROBE_BYTES = 64


_MEMORY_LIMIT = re.compile(
    r"(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>%|(?:[kmgt]i?)?b|bytes?|(?:kilo|mega|giga|tera)bytes?)",
    re.IGNORECASE,
)


# Bounds on spans of time: past them the window's dates leave what a timestamp can hold, and
# validation would fail with an overflow after minutes of work instead of naming the key.
MAX_WINDOW_DAYS = 3650  # ten years of logs


class IngestSettings(Section):
    window_days: Annotated[int, Field(gt=0, le=MAX_WINDOW_DAYS)] = 90
    latency_probe_bytes: PositiveInt = LATENCY_PROBE_BYTES
    # Duckdb resources; the ingest target is 2 GB peak on 2 cores.
    threads: PositiveInt = 2
    memory_limit: str = "1GB"  # a size ("1GB", "512MiB") or a share of the machine ("50%")
    # Exact quantiles keep every probe of a pair in memory (DuckDB cannot spill them): links
    # are summarised in passes of at most this many machine pairs each (seen in the newest
    # partition), so a 10,000-machine fleet's half a million pairs stay within memory_limit.
    max_pairs_per_pass: PositiveInt = 200_000

    @field_validator("memory_limit")
    @classmethod
    def _duckdb_size(cls, value: str) -> str:
        # DuckDB reads the limit only when ingest starts, after the logs are listed: checked
        # here so that a typo fails on load, naming the key.
        match = _MEMORY_LIMIT.fullmatch(value.strip())
        if match is None:
            raise ValueError(
                f"{value!r} is not a size: a number and a unit (B, KB, MB, GB, TB, KiB, MiB, "
                "GiB, TiB) or a percentage, e.g. '1GB'"
            )
        amount = float(match["amount"])
        if amount <= 0 or (match["unit"] == "%" and amount > 100):
            raise ValueError(f"{value!r}: the limit must be above zero and at most 100%")
        return value


class ValidateSettings(Section):
    # Speed of light in fiber (c / 1.468): nothing reaches the other city faster.
    fiber_km_per_ms: PositiveFloat = 204.2
    # A pair is "strongly asymmetric" when one direction's median exceeds the other's by
    # this factor and by at least `asymmetry_min_ms`.
    asymmetry_ratio: PositiveFloat = 2.0
    asymmetry_min_ms: Annotated[float, Field(ge=0)] = 5.0
    # A machine with no probe in its last `stale_after_hours` of the window stopped reporting.
    stale_after_hours: Annotated[
        float, Field(gt=0, le=24 * MAX_WINDOW_DAYS, allow_inf_nan=False)
    ] = 24.0
    # Clock skew tolerated before a timestamp counts as "in the future" (at most 30 days).
    future_skew_s: Annotated[float, Field(ge=0, le=30 * 86_400, allow_inf_nan=False)] = 300.0
    # An elapsed_ms above this is a broken clock or unit, not a slow link (a probe that waits
    # this long has timed out): quarantined as logs.elapsed_too_large.
    max_elapsed_ms: PositiveFloat = 60_000.0
    # Plausible CUDA compute capability of an inventory machine (Kepler 3.0 .. beyond Blackwell).
    compute_capability: Range = Range(low=3.0, high=12.0)
    # Offending rows (or machines, pairs, days) quoted in one finding.
    examples: PositiveInt = 5
    # Days of validation results the Data Docs keep (the newest days with a run).
    docs_history_days: PositiveInt = 30


class BandwidthTier(Section):
    """Links up to `max_latency_ms` (None: any) get `gbps` when no bandwidth was measured."""

    max_latency_ms: PositiveFloat | None
    gbps: PositiveFloat


class GraphSettings(Section):
    bandwidth_tiers: list[BandwidthTier] = [
        BandwidthTier(max_latency_ms=2, gbps=10),
        BandwidthTier(max_latency_ms=20, gbps=2),
        BandwidthTier(max_latency_ms=100, gbps=1),
        BandwidthTier(max_latency_ms=None, gbps=0.3),
    ]
    default_gpu_count: PositiveInt = 8

    @field_validator("bandwidth_tiers")
    @classmethod
    def _tiers_cover_every_latency(cls, tiers: list[BandwidthTier]) -> list[BandwidthTier]:
        # A link takes the first tier whose bound it is within: the bounds must rise, and the
        # last tier (no bound) must take every longer link, or some would get no bandwidth.
        if not tiers or tiers[-1].max_latency_ms is not None:
            raise ValueError("the last tier must have max_latency_ms: null (every longer link)")
        if any(tier.max_latency_ms is None for tier in tiers[:-1]):
            raise ValueError("only the last tier may have max_latency_ms: null")
        bounds = [float(tier.max_latency_ms or 0) for tier in tiers[:-1]]
        if any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ValueError(f"max_latency_ms must rise from tier to tier (got {bounds})")
        return tiers


class HardwareSettings(Section):
    # Peak dense fp16/bf16 TFLOPS per GPU by CUDA compute capability (docs/design.md#cost-model).
    peak_tflops: dict[float, PositiveFloat] = {
        6.1: 11.3,
        7.0: 125,
        7.5: 65,
        8.0: 312,
        8.6: 71,
        8.9: 165,
        9.0: 989,
    }
    mfu: Annotated[float, Field(gt=0, le=1)] = 0.4  # model FLOPs utilisation actually reached


class CostSettings(Section):
    """How the cost model keeps a fleet's links (hulk.cost.Fleet, hulk.site_links)."""

    # dense: machines × machines matrices; sites: per site pair (hulk.site_links), memory and
    # time growing with machines + sites²; auto: dense up to `dense_max_machines` machines.
    site_model: Literal["auto", "dense", "sites"] = "auto"
    dense_max_machines: PositiveInt = 2000
    # Site model: a measured machine pair whose latency or bandwidth differs from its site
    # pair's figure by more than this factor (either way) keeps its own figures. Pipelines
    # are bound by their slowest link: 2.0 cost 1.5x makespan at 1,000 machines; at 1.25 pairs
    # a fifth apart read alike and the teacher's search went elsewhere (up to 1.08x); at 1.01
    # the 1,000-machine plans are the dense model's (docs/experiments.md). Exceptions grow with
    # the measured pairs only: nearly all of them are kept at that ratio.
    exception_ratio: Annotated[float, Field(gt=1)] = 1.01

    def use_sites(self, machines: int) -> bool:
        """Whether a fleet of `machines` machines is built on the site model."""
        if self.site_model == "auto":
            return machines > self.dense_max_machines
        return self.site_model == "sites"


class SchedulerSettings(Section):
    """The assign run as a scheduler (hulk.scheduler): running jobs, waiting jobs, moves."""

    # A moved or restarted job loses this long (stop, checkpoint load, warm-up) plus the time
    # its checkpoint (this many bytes per parameter: mixed-precision Adam) takes over the links
    # from its old machines to its new ones.
    restart_overhead_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 300.0
    checkpoint_bytes_per_param: PositiveFloat = 16.0
    # A waiting job considers starting now and at this many of the next times machines free up.
    start_candidates: Annotated[int, Field(ge=1)] = 8
    # Plans made anew per run, each job's plan on the whole fleet among them (those are always
    # made; plans remembered from earlier runs are free): bounds a run's time on long queues.
    max_plans_per_run: Annotated[int, Field(ge=0)] = 8
    # A running job is moved only when the schedule's mean completion time drops by more than
    # this share (the move's cost is already in it); at most this many moves per run.
    move_gain: Annotated[float, Field(ge=0)] = 0.01
    max_moves_per_run: Annotated[int, Field(ge=0)] = 3
    # Running jobs that waiting jobs wait for, tried as a move that stops them (they resume
    # later from their checkpoint) so shorter work goes first; 0: running jobs are never stopped
    # for another job.
    preempt_candidates: Annotated[int, Field(ge=0)] = 6
    # A starting job leaves the fastest kind of machine its plan would use when a plan without
    # them takes at most this share longer (they go to the jobs that gain most from them);
    # 0: every job takes its fastest plan.
    leave_fastest_slack: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.1
    # A waiting job waits for a later start only when that finishes it more than this share
    # sooner (in seconds from now) than starting now on the machines free now: the later start
    # is a forecast that shorter work arriving meanwhile pushes back. 0: the earliest finish.
    wait_gain: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.15
    # A job starting with another after it in line may take fewer data-parallel replicas of
    # its plan (halved, as long as its run stays within this share of the plan's) when that
    # and the next job's finishes sum lower: machines a job gains little from serve the jobs
    # waiting after it. 0: every job takes its whole plan.
    share_slack: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0
    # The scheduler's planner also searches the whole fleet's candidate sets restricted to the
    # machines free (`hulk.planner.plan_job`'s `fleet_windows`): with the fastest machines busy,
    # windows grown from the free ones alone miss groups the fleet's windows hold.
    fleet_windows: bool = True
    # Wait this long for any of the data folder's locks (nightly, assign, publish) that another
    # run holds.
    lock_timeout_s: PositiveFloat = 600.0


class PlannerSettings(Section):
    """The stage planner (hulk.planner): how widely it searches one job's machine set."""

    # Machines whose pairwise latency stays within this form one "site" (complete linkage).
    site_latency_ms: PositiveFloat = 20.0
    # Largest machine set searched at once; larger sets are searched in windows this size.
    max_pool: PositiveInt = 48
    # Sites (most compute) and seed machines (most compute nearby) candidate windows grow from.
    seed_sites: PositiveInt = 3
    # Most sites in one grown window.
    window_sites: PositiveInt = 8
    # Windows grown machine by machine from a seed grow by this factor (and end at latency jumps).
    window_growth: Annotated[float, Field(gt=1)] = 4.0
    # Candidate sets laid out every way (the best after a quick one-pipeline screening).
    full_sets: PositiveInt = 8
    # Data-parallel degrees tried per candidate set (spread geometrically up to max_replicas).
    replica_candidates: PositiveInt = 5
    max_replicas: PositiveInt = 64
    # Greedy clean-up of the best plan: rounds, and machines (or sites) tried per round.
    prune_rounds: Annotated[int, Field(ge=0)] = 6
    prune_candidates: PositiveInt = 6


class TeacherSettings(Section):
    """The teacher search (hulk.teacher): machine-to-job assignments with the planner inside."""

    # Stop after this many evaluated assignments: the deterministic stopping rule.
    max_evaluations: PositiveInt = 2000
    # Wall-clock safety cap; results are byte-identical for a seed only if it never binds.
    time_budget_s: PositiveFloat = 60.0
    # Random assignments tried beside the structured starting points.
    random_starts: Annotated[int, Field(ge=0)] = 2
    # Sites (most free compute first) each job is planned on in the best-site start.
    site_starts: Annotated[int, Field(ge=0)] = 16
    # Probability that a move works on the slowest job (else a random placed job).
    bottleneck_bias: Fraction = 0.7
    # A machine given to a job is drawn from the nearest machines (by latency) of its members.
    neighbours: PositiveInt = 8
    # Shares of the move kinds: swap two machines, move a whole site; the rest move one machine.
    swap_share: Fraction = 0.25
    site_share: Fraction = 0.15
    # Simulated annealing: initial temperature as a fraction of the makespan (0: descent only).
    temperature: Annotated[float, Field(ge=0)] = 0.0
    # Restart from the best after this many evaluations without a new best, with this many
    # random moves taken unconditionally (iterated local search).
    restart_after: PositiveInt = 150
    kick_moves: PositiveInt = 3


class AssignSettings(Section):
    # The upcoming jobs (docs/contracts.md#jobs-file) and where `hulk assign` writes placements.
    jobs_file: Annotated[Path, Field(strict=False)] = Path("data/jobs/upcoming.yaml")
    placements_dir: Annotated[Path, Field(strict=False)] = Path("data/placements")
    # gnn | teacher | A | B | C (hulk.assign.STRATEGIES), or auto: gnn once a champion model
    # is registered, teacher until then.
    strategy: Literal["auto", "gnn", "teacher", "A", "B", "C"] = "auto"
    # A GNN makespan above this × the jobs one after another under the best of Systems A, B, C
    # is clearly wrong: the teacher's placements are used instead, and the file says why.
    gnn_fallback_ratio: PositiveFloat = 1.0
    # Algorithm 1's candidate pools (hulk.candidate_pools): the probability group holds this many
    # times the job's layers, each site region that many, and this many site regions are tried.
    gnn_group_slack: Annotated[float, Field(ge=1.0)] = 1.5
    gnn_site_slack: Annotated[float, Field(ge=1.0)] = 2.0
    gnn_site_candidates: Annotated[int, Field(ge=0)] = 2
    # On fleets of more than `gnn_large_fleet` active machines, this many site regions instead:
    # there the planner's search on each pool is most of the decision, so 1 makes the GNN about
    # 15 % faster, but its plans on 1,000-machine fleets were up to 1.29× the teacher's where
    # two regions gave up to 1.11× (docs/experiments.md): two by default, quality first.
    gnn_site_candidates_large: Annotated[int, Field(ge=0)] = 2
    gnn_large_fleet: Annotated[int, Field(ge=1)] = 500
    # After every job is placed, the slowest is offered the idle machines up to this many times.
    gnn_idle_rounds: Annotated[int, Field(ge=0)] = 2
    # On fleets of up to 2 × planner.max_pool active machines, a local search (the teacher's
    # moves) from the GNN's plans evaluates at most this many assignments (0: none) ...
    gnn_refine_evaluations: Annotated[int, Field(ge=0)] = 100
    # ... and this share of its moves on the slowest job draws machines by the model's
    # probabilities (the rest among the nearest machines, as the teacher's moves do).
    gnn_refine_guided: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    # The planner on the GNN's pools: these `planner:` settings changed. The pools are already
    # near the answer (at most planner.max_pool machines, a site region or the model's group),
    # so a narrower search finds the same plans (bench/bench_gnn.py).
    gnn_planner: dict[str, int | float] = {
        "seed_sites": 2,
        "window_sites": 4,
        "full_sets": 2,
        "replica_candidates": 3,
    }
    # ... and these changed on top on fleets of more than `gnn_large_fleet` active machines.
    # There the pools are cut to planner.max_pool machines of a site region or the model's
    # group, the planner's search on them is most of the decision, and single-site windows,
    # one set laid out every way and 3 machines tried per pruning round found the same plans
    # on four 1,000-machine fleets, in about 30 % less time (docs/experiments.md).
    gnn_planner_large: dict[str, int | float] = {
        "window_sites": 1,
        "full_sets": 1,
        "prune_candidates": 3,
    }

    @field_validator("gnn_planner", "gnn_planner_large")
    @classmethod
    def _planner_keys(cls, value: dict[str, int | float]) -> dict[str, int | float]:
        unknown = sorted(set(value) - set(PlannerSettings.model_fields))
        if unknown:
            raise ValueError(f"unknown planner key(s) {unknown}")
        try:  # each value as planner: would take it
            PlannerSettings.model_validate({**PlannerSettings().model_dump(), **value})
        except ValidationError as error:
            problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in error.errors())
            raise ValueError(problems) from None
        return value


class ModelSettings(Section):
    """The GNN's shape (hulk.model.ModelConfig; feature widths come from the data)."""

    hidden: PositiveInt = 64  # width of node states and job embeddings
    layers: Annotated[int, Field(ge=0)] = 3  # graph-convolution layers after the EdgeFold layer
    conv: Literal["gcn", "gat"] = "gcn"
    heads: PositiveInt = 4  # GAT only: attention heads (hidden must be a multiple)
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.2
    # Links each machine hears in message passing: its lowest-latency ones (0: every link).
    neighbours: Annotated[int, Field(ge=0)] = 16

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelSettings:
        if self.conv == "gat" and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self


class TrainSettings(Section):
    """GNN training (hulk.train): Adam on mini-batches, early stopping on the validation loss."""

    epochs: PositiveInt = 60
    batch_size: PositiveInt = 8  # samples (whole fleets) per mini-batch
    lr: PositiveFloat = 0.003
    weight_decay: Annotated[float, Field(ge=0)] = 0.0001
    # Stop after this many epochs without a lower validation loss; the best epoch is kept.
    patience: PositiveInt = 10
    # Loss weight of the idle class (job classes weigh 1); "balanced": idle machines weigh as
    # much in total as assigned ones (from the training labels).
    idle_weight: Literal["balanced"] | PositiveFloat = "balanced"
    grad_clip: Annotated[float, Field(ge=0)] = 5.0  # max gradient norm (0: no clipping)
    # Torch CPU threads while training. 1: on a busy machine two threads stall on each other
    # (measured 5-10x slower per epoch); on an idle one 2 is only ~1.4x faster.
    threads: PositiveInt = 1


class CorpusSettings(Section):
    """The labelled training corpus (hulk.corpus): generated fleets × job mixes, teacher labels."""

    fleets: PositiveInt = 40
    mixes_per_fleet: PositiveInt = 3
    # Fleet sizes: log-uniform in [min_machines, max_machines] (paper fleets: up to 47).
    min_machines: Annotated[int, Field(ge=2)] = 20
    max_machines: PositiveInt = 300
    # Cities a synthetic fleet is cut from (more are added until they hold its size).
    min_cities: PositiveInt = 1
    max_cities: PositiveInt = 40
    # Share of fleets made from paper-47, and its machines' chance of redrawn hardware.
    paper_share: Fraction = 0.25
    hardware_perturb: Fraction = 0.3
    drained_fraction: Range = Range(low=0.0, high=0.15)  # failed machines, per fleet
    blocked_pair_fraction: Range = Range(low=0.0, high=0.3)  # synthetic fleets' policy
    # Jobs per mix: presets, or perturbed variants of them with probability perturb_share.
    min_jobs: PositiveInt = 1
    max_jobs: PositiveInt = 8
    perturb_share: Fraction = 0.5
    params_scale: Range = Range(low=0.25, high=4.0)  # log-uniform factor on params
    batch_scale: Range = Range(low=0.25, high=4.0)  # log-uniform factor on global_batch
    priority_share: Fraction = 0.1  # jobs given priority 1
    # Split by fleet (hash of seed and fleet id); train gets the rest.
    val_fraction: Fraction = 0.15
    test_fraction: Fraction = 0.15
    # Teacher budget for labelling (the nightly teacher's other settings apply). The time cap
    # is a safety net: results are identical for any worker count only if it never binds.
    max_evaluations: PositiveInt = 300
    time_budget_s: PositiveFloat = 120.0
    workers: PositiveInt = 2  # labelling processes
    path: Annotated[Path, Field(strict=False)] = Path("data/corpus/corpus.pt")  # + corpus.json

    @model_validator(mode="after")
    def _consistent(self) -> CorpusSettings:
        if self.min_machines > self.max_machines:
            raise ValueError(
                f"min_machines ({self.min_machines}) exceeds max_machines ({self.max_machines})"
            )
        if self.min_cities > self.max_cities:
            raise ValueError(
                f"min_cities ({self.min_cities}) exceeds max_cities ({self.max_cities})"
            )
        if self.min_jobs > self.max_jobs:
            raise ValueError(f"min_jobs ({self.min_jobs}) exceeds max_jobs ({self.max_jobs})")
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError(
                f"val_fraction + test_fraction ({self.val_fraction} + {self.test_fraction}) "
                "must be below 1: no fleet would train"
            )
        for name in ("drained_fraction", "blocked_pair_fraction"):
            value = getattr(self, name)
            if value.low < 0 or value.high >= 1:
                raise ValueError(f"{name} [{value.low}, {value.high}] must lie within [0, 1)")
        for name in ("params_scale", "batch_scale"):
            if getattr(self, name).low <= 0:
                raise ValueError(f"{name} must be positive")
        return self


class FleetSamplesSettings(Section):
    """Samples of the data folder's own fleet for the nightly fine-tune (hulk.fleet_samples).

    Link tables of shorter windows inside the ingest window (calendar blocks of `window_days`
    days; the newest block is held out for evaluation), or, for a fleet imported without logs,
    drifted copies of its link table; on each, job mixes on the whole fleet, on sub-fleets
    (whole cities removed) and with machines drained as after failures. Every sample is
    labelled by the teacher (the corpus teacher budget) and cached by content.
    """

    # Days per link-table block (aligned on whole days since 1970).
    window_days: Annotated[int, Field(gt=0, le=MAX_WINDOW_DAYS)] = 7
    max_windows: PositiveInt = 12  # newest training blocks used (the held-out block aside)
    drift_snapshots: PositiveInt = 8  # fleets without logs: drifted copies of the link table
    drift: Annotated[float, Field(ge=0)] = 0.25  # log-normal sigma of a link's latency drift
    drift_outage: Fraction = 0.05  # share of links missing from a drifted copy
    mixes: PositiveInt = 2  # job mixes on the whole fleet per training block
    subfleets: Annotated[int, Field(ge=0)] = 1  # mixes on a sub-fleet per training block
    drained: Annotated[int, Field(ge=0)] = 1  # mixes with drained machines per training block
    # The three above are repeated on every training block until there are at least this many
    # training samples in all (few blocks: more samples each).
    min_train_samples: Annotated[int, Field(ge=0)] = 48
    removed_cities: Range = Range(low=0.15, high=0.5)  # share of cities a sub-fleet removes
    drained_fraction: Range = Range(low=0.05, high=0.34)  # machines drained as after failures
    eval_mixes: PositiveInt = 12  # held-out mixes on the newest block (never trained on)
    max_jobs: PositiveInt = 6  # jobs per drawn mix: 1 .. max_jobs
    perturb_share: Fraction = 0.5  # jobs that are perturbed variants (corpus scales)
    recent_placements: Annotated[int, Field(ge=0)] = 20  # newest placements files' jobs joined
    # Training samples held out for early stopping (below 1: some must be left to train on).
    val_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.2


class FinetuneSettings(Section):
    """The nightly fine-tune (hulk.finetune): warm start from the champion (or the prior)."""

    epochs: PositiveInt = 30
    lr: PositiveFloat = 0.001
    patience: PositiveInt = 6
    # Corpus training samples replayed per own-fleet sample, so that the model keeps what the
    # prior knows of other fleets (the fixed synthetic half of the gate's evaluation set).
    replay: Annotated[float, Field(ge=0)] = 1.0


# MLflow backends other than a sqlite file: a tracking server or a database server.
_SERVER_BACKENDS = frozenset({"http", "https", "postgresql", "mysql", "mssql"})


class MlflowSettings(Section):
    """Training runs and the model registry (hulk.registry).

    Relative paths resolve against `data_dir`, not the current directory, so the registry is
    found from anywhere: the default ``sqlite:///mlruns.db`` (three slashes: relative) is
    data/mlruns.db and `artifact_location` data/mlartifacts. An absolute sqlite path (four
    slashes, ``sqlite:////srv/hulk/mlruns.db``) or a server URI (``http://…``) is used as written;
    `artifact_location` applies to a sqlite backend only, when the experiment is created.
    """

    tracking_uri: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9+.-]*:")] = (
        "sqlite:///mlruns.db"
    )
    artifact_location: Annotated[Path, Field(strict=False)] = Path("mlartifacts")
    experiment: Annotated[str, Field(min_length=1)] = "hulk"
    # Published placements (a run every 15 minutes) go to their own experiment, so they do not
    # bury the training runs.
    assignment_experiment: Annotated[str, Field(min_length=1)] = "hulk-assignments"
    registered_model: Annotated[str, Field(min_length=1)] = "hulk-gnn"
    # A tracking server must answer within this before a step starts work it would log there.
    connect_timeout_s: PositiveFloat = 10.0

    @field_validator("tracking_uri")
    @classmethod
    def _mlflow_backend(cls, value: str) -> str:
        # MLflow reads the URI only when a step first logs, after the work: checked on load.
        scheme, _, rest = value.partition(":")
        base = scheme.lower().split("+", 1)[0]
        if base == "sqlite" and not rest.startswith("///"):
            raise ValueError(
                f"{value!r}: a sqlite backend is sqlite:///relative.db or sqlite:////absolute.db"
            )
        if base in _SERVER_BACKENDS and not rest.startswith("//"):
            raise ValueError(f"{value!r}: a {base} backend is {base}://host…")
        if base != "sqlite" and base not in _SERVER_BACKENDS and base != "databricks":
            raise ValueError(
                f"{value!r}: the backend must be sqlite:///…, http(s)://…, databricks://… or a "
                "database server (postgresql, mysql, mssql)"
            )
        return value


class FlowsSettings(Section):
    """The Prefect flows (flows/): where their fan-out runs and how failing steps are retried."""

    # An existing Dask scheduler ("tcp://host:8786") for the fan-out steps (teacher labels over
    # many fleets, per-day log validation); None: a local cluster started for the run.
    dask_address: str | None = None
    # Local cluster only: worker processes (one thread each; the labelling is CPU-bound).
    dask_workers: PositiveInt = 2
    # Local cluster only: False runs the workers as threads of the flow's process (tests).
    dask_processes: bool = True
    # Retries of the steps that touch files or the registry, with exponential back-off from
    # retry_delay_s (a validation error is never retried: it fails the run at once).
    # Log partitions validated per task: a task per day costs more in bookkeeping than the
    # day's validation on a small fleet.
    days_per_task: PositiveInt = 15
    retries: Annotated[int, Field(ge=0)] = 2
    retry_delay_s: Annotated[float, Field(ge=0)] = 2.0


class Settings(Section):
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 7  # what numpy and torch take
    data_dir: Path = DEFAULT_DATA_DIR
    generate: GenerateSettings = GenerateSettings()
    ingest: IngestSettings = IngestSettings()
    validate_: ValidateSettings = Field(default=ValidateSettings(), alias="validate")
    graph: GraphSettings = GraphSettings()
    hardware: HardwareSettings = HardwareSettings()
    cost: CostSettings = CostSettings()
    assign: AssignSettings = AssignSettings()
    planner: PlannerSettings = PlannerSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    teacher: TeacherSettings = TeacherSettings()
    corpus: CorpusSettings = CorpusSettings()
    model: ModelSettings = ModelSettings()
    train: TrainSettings = TrainSettings()
    fleet_samples: FleetSamplesSettings = FleetSamplesSettings()
    finetune: FinetuneSettings = FinetuneSettings()
    mlflow: MlflowSettings = MlflowSettings()
    flows: FlowsSettings = FlowsSettings()

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    @property
    def validation(self) -> ValidateSettings:
        return self.validate_

    def with_data_dir(self, data_dir: Path) -> Settings:
        """These settings on another data folder (``--data DIR``, a flow's ``data_dir``).

        The rule: a path of params.yaml (``assign.jobs_file``, ``assign.placements_dir``,
        ``corpus.path``; by default ``data/jobs/upcoming.yaml``, ``data/placements``,
        ``data/corpus/corpus.pt``) that lies under the params' own ``data_dir`` or, written
        relative, under the default one (``data/``) is re-rooted on `data_dir`, so a copied or
        moved data folder reads and writes only itself, from any working directory. A path
        outside them (another folder, an absolute path elsewhere) and an explicit command-line
        option (``--jobs``, ``--out``) are used as given, relative to the working directory.
        """
        bases = [self.data_dir, self.data_dir.absolute(), DEFAULT_DATA_DIR]

        def moved(path: Path) -> Path:
            for base in bases:
                candidate = path.absolute() if base.is_absolute() else path
                if candidate.is_relative_to(base):
                    return data_dir / candidate.relative_to(base)
            return path

        assign = self.assign.model_copy(
            update={
                "jobs_file": moved(self.assign.jobs_file),
                "placements_dir": moved(self.assign.placements_dir),
            }
        )
        corpus = self.corpus.model_copy(update={"path": moved(self.corpus.path)})
        return self.model_copy(update={"data_dir": data_dir, "assign": assign, "corpus": corpus})

    @property
    def gnn_planner(self) -> PlannerSettings:
        """`planner:` with the GNN strategy's changes (`assign.gnn_planner`)."""
        return PlannerSettings.model_validate(
            {**self.planner.model_dump(), **self.assign.gnn_planner}
        )

    @property
    def gnn_planner_large(self) -> PlannerSettings:
        """`gnn_planner` with the large-fleet changes (`assign.gnn_planner_large`)."""
        return PlannerSettings.model_validate(
            {
                **self.planner.model_dump(),
                **self.assign.gnn_planner,
                **self.assign.gnn_planner_large,
            }
        )


def _describe(error: ErrorDetails) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key"
    if isinstance(error.get("input"), dict):
        # A rule between a section's keys: the message names them and their values already.
        return f"{key}: {error['msg']}"
    return f"{key}: {error['msg']} (got {error.get('input')!r})"


def settings_from_dict(raw: dict, source: str = "params") -> Settings:
    """Build settings from a plain dict, naming every bad key in one error."""
    if not isinstance(raw, dict):
        raise ConfigError(
            "expected a mapping of sections at the top level", "settings.not_a_mapping", source
        )
    # YAML reads 'data_dir: data' as a string; paths are the one lenient field.
    if isinstance(raw.get("data_dir"), str):
        raw = {**raw, "data_dir": Path(raw["data_dir"])}
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        problems = [_describe(e) for e in exc.errors()]
        if len(problems) == 1:
            raise ConfigError(problems[0], "settings.invalid", source) from None
        raise ConfigError(
            f"{len(problems)} settings are invalid:", "settings.invalid", source, problems
        ) from None
    # A data_dir of its own: the paths left at their data/… defaults follow it.
    return settings.with_data_dir(settings.data_dir)


def load_settings(path: str | Path = DEFAULT_PARAMS) -> Settings:
    """Load params.yaml; a missing file gives the defaults."""
    path = Path(path)
    if not path.exists():
        return Settings()
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_ParamsLoader) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: {exc.reason}", "settings.encoding", path) from None
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"not valid YAML: {yaml_error_line(exc)}", "settings.yaml", path
        ) from None
    return settings_from_dict(raw, source=str(path))


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: where, and what is wrong there (its own text spans several
    lines, with the offending line quoted)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).split())
    mark = exc.problem_mark
    parts = [exc.context, exc.problem]
    what = "; ".join(" ".join(str(part).split()) for part in parts if part)
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}"


class _ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: PyYAML would keep the
    last value without a word, and a section given twice would lose the first one's keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<``: YAML's own merge
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.MarkedYAMLError(
                    None,
                    None,
                    f"key {key!r} given more than once (which value is meant?)",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
