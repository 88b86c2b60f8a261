"""The GNN (hulk.model): EdgeFold's formula, shapes for any job mix, masking, symmetry, storage."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hulk.graph import EDGE_FEATURES, NODE_FEATURES
from hulk.model import (
    EdgeFold,
    HulkGNN,
    ModelConfig,
    _by_target_latency_position,
    batch_targets,
    gcn_adjacency,
    make_batch,
    model_from_state,
    nearest_links,
    predict_proba,
    single_batch,
)

JOB_FEATURES = 5  # the corpus's width may differ: the model takes whatever the samples have


def synthetic_sample(n: int, jobs: int, seed: int = 0, drained: int = 0) -> dict:
    """A sample shaped like hulk.corpus's: random features, a random undirected graph."""
    rng = np.random.default_rng(seed)
    pairs = {tuple(sorted(p)) for p in rng.integers(0, n, size=(3 * n, 2)) if p[0] != p[1]}
    pairs |= {(i, i + 1) for i in range(n - 1)}  # connected
    src, dst = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2).T
    edge_attr = rng.normal(size=(len(src), len(EDGE_FEATURES)))
    active = np.ones(n, bool)
    active[rng.choice(n, size=drained, replace=False)] = False
    y = rng.integers(0, jobs + 1, size=n)
    y[~active] = jobs
    return {
        "x": torch.tensor(rng.normal(size=(n, len(NODE_FEATURES))), dtype=torch.float32),
        "edge_index": torch.tensor(np.stack([np.r_[src, dst], np.r_[dst, src]])),
        "edge_attr": torch.tensor(np.r_[edge_attr, edge_attr], dtype=torch.float32),
        "jobs": torch.tensor(rng.normal(size=(jobs, JOB_FEATURES)), dtype=torch.float32),
        "y": torch.tensor(y),
        "active": torch.tensor(active),
        "fleet": seed,
    }


def small_config(**changes) -> ModelConfig:
    base = {
        "node_features": len(NODE_FEATURES),
        "edge_features": len(EDGE_FEATURES),
        "job_features": JOB_FEATURES,
        "hidden": 16,
        "layers": 2,
        "conv": "gcn",
        "heads": 4,
        "dropout": 0.1,
    }
    return ModelConfig(**{**base, **changes})


def seeded_model(config: ModelConfig, seed: int = 0) -> HulkGNN:
    torch.manual_seed(seed)
    return HulkGNN(config).eval()


# --- EdgeFold -------------------------------------------------------------------------------


def test_edge_fold_computes_the_papers_formula_by_hand() -> None:
    # Path 0 - 1 - 2, each link in both directions; 2 input channels, 1 edge feature, 2 out.
    h = torch.tensor([[1.0, 2.0], [0.5, -1.0], [-2.0, 0.0]])
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    edge_attr = torch.tensor([[0.3], [0.3], [-0.7], [-0.7]])
    layer = EdgeFold(in_channels=2, edge_dim=1, out_channels=2)
    theta_phi = torch.tensor([[1.0, 0.0], [2.0, -1.0]])
    b_phi = torch.tensor([0.1, -0.2])
    theta_i = torch.tensor([[0.5, 1.0], [-1.0, 0.0]])
    b_1 = torch.tensor([0.0, 0.5])
    theta_j = torch.tensor([[1.0, -1.0], [0.0, 2.0]])
    theta_e = torch.tensor([[3.0], [-1.0]])
    theta_2 = torch.tensor([[1.0, 1.0], [0.0, -2.0]])
    b_2 = torch.tensor([0.25, 0.0])
    with torch.no_grad():
        layer.phi.weight.copy_(theta_phi)
        layer.phi.bias.copy_(b_phi)
        layer.psi_i.weight.copy_(theta_i)
        layer.psi_i.bias.copy_(b_1)
        layer.psi_j.weight.copy_(theta_j)
        layer.psi_e.weight.copy_(theta_e)
        layer.psi_out.weight.copy_(theta_2)
        layer.psi_out.bias.copy_(b_2)

    # ψ is a perceptron on the concatenation [h_i, h_j, e_ij] with Θ_1 = [Θ_i | Θ_j | Θ_e].
    theta_1 = torch.cat([theta_i, theta_j, theta_e], dim=1)

    def psi(i: int, j: int, e: torch.Tensor) -> torch.Tensor:
        return theta_2 @ torch.relu(theta_1 @ torch.cat([h[i], h[j], e]) + b_1) + b_2

    neighbours = {0: [(1, edge_attr[0])], 1: [(0, edge_attr[1]), (2, edge_attr[2])], 2: []}
    neighbours[2] = [(1, edge_attr[3])]
    expected = torch.stack(
        [theta_phi @ h[i] + b_phi + sum(psi(i, j, e) for j, e in neighbours[i]) for i in range(3)]
    )
    with torch.no_grad():
        got = layer(h, edge_index, edge_attr)
        direct = layer.psi(h[[0, 1, 1, 2]], h[[1, 0, 2, 1]], edge_attr)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(direct[0], psi(0, 1, edge_attr[0]))


def test_edge_fold_isolated_node_keeps_only_its_own_term() -> None:
    torch.manual_seed(0)
    layer = EdgeFold(3, 2, 4)
    x = torch.randn(3, 3)
    edge_index = torch.tensor([[0, 1], [1, 0]])  # node 2 has no link
    with torch.no_grad():
        out = layer(x, edge_index, torch.randn(2, 2))
        torch.testing.assert_close(out[2], layer.phi(x[2]))


# --- the whole model ------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 8])
def test_one_model_serves_any_job_mix_and_probabilities_sum_to_one(jobs: int) -> None:
    model = seeded_model(small_config())
    sample = synthetic_sample(12, jobs, seed=jobs)
    proba = predict_proba(model, sample)
    assert proba.shape == (12, jobs + 1)
    torch.testing.assert_close(proba.sum(1), torch.ones(12))
    assert (proba >= 0).all()


def test_any_fleet_size() -> None:
    model = seeded_model(small_config())
    for n in (1, 2, 40):
        sample = synthetic_sample(n, 3, seed=n)
        assert predict_proba(model, sample).shape == (n, 4)


def test_drained_machines_are_idle() -> None:
    model = seeded_model(small_config())
    sample = synthetic_sample(15, 4, seed=3, drained=5)
    proba = predict_proba(model, sample)
    drained = ~sample["active"]
    expected = torch.zeros(int(drained.sum()), 5)
    expected[:, 4] = 1.0
    assert torch.equal(proba[drained], expected)
    assert (proba[~drained, :4].sum(1) > 0).all()


@pytest.mark.parametrize("conv", ["gcn", "gat"])
def test_relabelling_the_machines_permutes_the_outputs(conv: str) -> None:
    model = seeded_model(small_config(conv=conv))
    sample = synthetic_sample(20, 3, seed=5, drained=2)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(1))
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(20)
    relabelled = {
        **sample,
        "x": sample["x"][perm],
        "edge_index": inverse[sample["edge_index"]],  # machine perm[k] is now machine k
        "y": sample["y"][perm],
        "active": sample["active"][perm],
    }
    torch.testing.assert_close(
        predict_proba(model, relabelled), predict_proba(model, sample)[perm], atol=1e-5, rtol=1e-4
    )


def test_gat_option_runs_and_trains_a_step() -> None:
    model = seeded_model(small_config(conv="gat", heads=4)).train()
    batch = make_batch([synthetic_sample(10, 2, seed=1), synthetic_sample(7, 5, seed=2)])
    loss = torch.nn.functional.cross_entropy(model(batch), batch_targets(batch))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert predict_proba(model, synthetic_sample(9, 2)).shape == (9, 3)


def test_a_samples_output_does_not_depend_on_its_batch() -> None:
    model = seeded_model(small_config())
    samples = [synthetic_sample(10, 2, seed=1), synthetic_sample(7, 6, seed=2)]
    batch = make_batch(samples)
    with torch.no_grad():
        logits = model(batch)
    assert logits.shape == (17, 7)  # padded to 6 jobs + idle
    # Sample 0 has 2 jobs: its columns 2..5 are padding, its idle is the last column.
    first = torch.softmax(torch.cat([logits[:10, :2], logits[:10, -1:]], dim=1), dim=1)
    torch.testing.assert_close(first, predict_proba(model, samples[0]), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(
        torch.softmax(logits[10:], dim=1), predict_proba(model, samples[1]), atol=1e-5, rtol=1e-4
    )
    assert (torch.softmax(logits[:10], dim=1)[:, 2:6] == 0).all()


def test_batch_targets_move_each_samples_idle_to_the_last_column() -> None:
    samples = [synthetic_sample(6, 2, seed=1), synthetic_sample(5, 4, seed=2)]
    batch = make_batch(samples)
    target = batch_targets(batch)
    y0, y1 = samples[0]["y"], samples[1]["y"]
    assert torch.equal(target[:6], torch.where(y0 == 2, 4, y0))
    assert torch.equal(target[6:], y1)


def test_mix_conditioning_changes_the_prediction() -> None:
    model = seeded_model(small_config())
    sample = synthetic_sample(10, 2, seed=1)
    other = {**sample, "jobs": sample["jobs"] * 3 + 1}
    assert not torch.allclose(predict_proba(model, sample), predict_proba(model, other))


def test_identical_jobs_are_told_apart_by_their_rank() -> None:
    # Two copies of a preset: class 0 is the first copy, class 1 the second.
    model = seeded_model(small_config())
    sample = synthetic_sample(10, 2, seed=1)
    sample["jobs"] = sample["jobs"][[0, 0]]
    proba = predict_proba(model, sample)
    assert not torch.allclose(proba[:, 0], proba[:, 1])


def test_widths_that_do_not_match_are_an_error() -> None:
    model = seeded_model(small_config())
    sample = synthetic_sample(5, 2)
    with pytest.raises(ValueError, match=r"jobs has shape \(2, 3\)"):
        predict_proba(model, {**sample, "jobs": torch.zeros(2, 3)})


# --- configuration and storage --------------------------------------------------------------


def test_config_round_trips_through_json() -> None:
    config = small_config(conv="gat", heads=2, dropout=0.0)
    raw = json.loads(json.dumps(config.to_dict()))
    assert ModelConfig.from_dict(raw) == config


def test_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown key"):
        ModelConfig.from_dict({**small_config().to_dict(), "code": "import os"})
    with pytest.raises(ValueError, match="conv must be one of"):
        small_config(conv="sage")
    with pytest.raises(ValueError, match="multiple of heads"):
        small_config(conv="gat", hidden=10, heads=4)


def test_reloaded_weights_give_identical_outputs() -> None:
    config = small_config(conv="gat", heads=2)
    model = seeded_model(config, seed=3)
    samples = [synthetic_sample(8, 3, seed=s) for s in range(3)]
    model.fit_scaling(samples)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)

    reloaded = model_from_state(json.loads(json.dumps(config.to_dict())), state)
    assert torch.equal(reloaded.x_std, model.x_std)  # the input scaling travels with the weights
    assert torch.equal(predict_proba(reloaded, samples[0]), predict_proba(model, samples[0]))


def test_fit_scaling_standardises_and_leaves_constant_features_unscaled() -> None:
    model = HulkGNN(small_config())
    samples = [synthetic_sample(8, 2, seed=s) for s in range(3)]
    for s in samples:
        s["x"][:, 3] = 8.0  # gpu_count: the same everywhere
    model.fit_scaling(samples)
    x = torch.cat([s["x"] for s in samples])
    torch.testing.assert_close(model.x_mean, x.mean(0))
    assert model.x_std[3] == 1.0
    scaled = (x - model.x_mean) / model.x_std
    torch.testing.assert_close(scaled[:, 0].std(unbiased=False), torch.tensor(1.0))


def test_predict_proba_restores_the_training_mode() -> None:
    model = HulkGNN(small_config()).train()
    predict_proba(model, synthetic_sample(5, 1))
    assert model.training


# --- nearest links --------------------------------------------------------------------------


def test_nearest_links_keep_each_targets_lowest_latency_incoming_links() -> None:
    edge_index = torch.tensor([[1, 2, 3, 0, 0, 2], [0, 0, 0, 1, 3, 1]])
    latency = torch.tensor([5.0, 1.0, 3.0, 2.0, 9.0, 2.0])
    kept = nearest_links(edge_index, latency, 2)
    # Target 0: latencies 5, 1, 3 → keep positions 1, 2; target 1: both (2, 2); target 3: one.
    assert kept.tolist() == [1, 2, 3, 4, 5]
    assert nearest_links(edge_index, latency, 1).tolist() == [1, 3, 4]


def test_nearest_links_match_a_plain_lexicographic_sort_with_ties() -> None:
    rng = np.random.default_rng(5)
    n, e = 40, 900
    edge_index = torch.as_tensor(rng.integers(0, n, (2, e)))
    # Many ties, negative values (the feature is a log), both zeros.
    latency = torch.as_tensor(rng.integers(-6, 6, e) / 2.0, dtype=torch.float32)
    latency[:3] = torch.tensor([-0.0, 0.0, -2.011627674102783])
    for k in (1, 3, 16):
        order = np.lexsort((np.arange(e), latency.numpy(), edge_index[1].numpy()))
        target = edge_index[1].numpy()[order]
        rank = np.arange(e) - np.searchsorted(target, target)
        expected = np.sort(order[rank < k])
        assert nearest_links(edge_index, latency, k).tolist() == expected.tolist()


@pytest.mark.parametrize("drained", [0, 3])
def test_a_single_sample_batch_equals_the_collated_one(drained: int) -> None:
    sample = synthetic_sample(12, 3, seed=2, drained=drained)
    collated, direct = make_batch([sample]), single_batch(sample)
    expected = collated.to_dict()
    assert sorted(direct.to_dict()) == sorted(expected)
    assert direct.num_graphs == collated.num_graphs == 1
    for key, value in expected.items():
        assert torch.equal(direct[key], value), key
    model = seeded_model(small_config())
    with torch.no_grad():
        assert torch.equal(model(direct), model(collated))


@pytest.mark.parametrize("one_sort", [True, False])
def test_both_link_orders_sort_by_target_latency_then_position(one_sort: bool) -> None:
    # Small fleets sort one packed key; large ones (where it would overflow) sort twice.
    rng = np.random.default_rng(8)
    e = 700
    target = rng.integers(0, 30, e)
    latency_key = rng.integers(0, 2**32, e) // 2**29 * 2**29  # a few values: many ties
    expected = np.lexsort((np.arange(e), latency_key, target))
    order = _by_target_latency_position(target, latency_key, one_sort)
    assert order.tolist() == expected.tolist()


@pytest.mark.parametrize("duplicates", [False, True])
def test_gcn_adjacency_equals_pygs_coalesced_csr(duplicates: bool) -> None:
    # The packed-key sort gives PyG's (row, column) order; duplicate links (summed by
    # coalescing) and self-loops go through PyG's own path.
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import to_torch_csr_tensor

    rng = np.random.default_rng(11)
    n = 50
    pairs = rng.integers(0, n, (2, 600))
    if not duplicates:
        pairs = np.unique(pairs, axis=1)[:, rng.permutation(np.unique(pairs, axis=1).shape[1])]
    edge_index = torch.as_tensor(pairs)
    index, weight = gcn_norm(edge_index, None, num_nodes=n, add_self_loops=True)
    expected = to_torch_csr_tensor(index.flip(0), weight, size=(n, n))
    got = gcn_adjacency(edge_index, n)
    assert torch.equal(got.crow_indices(), expected.crow_indices())
    assert torch.equal(got.col_indices(), expected.col_indices())
    assert torch.equal(got.values(), expected.values())


def test_one_graph_and_a_batch_give_the_same_outputs() -> None:
    # A single graph's per-graph values are broadcast, a batch's gathered: the same numbers.
    samples = [synthetic_sample(9, 2, seed=3), synthetic_sample(14, 4, seed=5)]
    model = seeded_model(small_config(neighbours=3))
    with torch.no_grad():
        together = torch.softmax(model(make_batch(samples)), dim=1)
        first = torch.softmax(model(single_batch(samples[0])), dim=1)
    # The first graph's rows, padded to the batch's 4 jobs: its 2 job columns and idle.
    torch.testing.assert_close(together[:9, [0, 1, 4]], first, rtol=1e-5, atol=1e-6)


def test_pruned_model_hears_only_the_nearest_links() -> None:
    sample = synthetic_sample(30, 3, seed=4)
    pruned = seeded_model(small_config(neighbours=2))
    full = seeded_model(small_config(neighbours=0))
    full.load_state_dict(pruned.state_dict())
    # Keeping only the two nearest links changes the outputs; a bound above every degree does not.
    assert not torch.allclose(predict_proba(pruned, sample), predict_proba(full, sample))
    everything = seeded_model(small_config(neighbours=1000))
    everything.load_state_dict(pruned.state_dict())
    torch.testing.assert_close(predict_proba(everything, sample), predict_proba(full, sample))


@pytest.mark.slow  # a fresh interpreter: PyG generates its code once per process
def test_building_a_model_leaves_no_generated_code_in_the_temp_folder(tmp_path) -> None:
    """PyG writes each layer class's generated `propagate` to the temp folder and keeps it;
    a process that builds and runs both kinds of model must leave that folder empty."""
    script = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
from test_model import seeded_model, single_batch, small_config, synthetic_sample
for conv in ("gcn", "gat"):
    model = seeded_model(small_config(conv=conv))
    model.eval()
    with torch.no_grad():
        model(single_batch(synthetic_sample(12, 2)))
import hulk.pyg
generated = [m for m in sys.modules if m.endswith(hulk.pyg.GENERATED_SUFFIXES)]
assert len(generated) >= 3, generated  # EdgeFold's, GCNConv's and GATConv's propagate
"""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    here = str(Path(__file__).parent)
    subprocess.run([sys.executable, "-c", script, here], env=env, check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
