r"""The Hulk graph neural network: which job should each machine serve?

One trained model serves any fleet (any number of machines and links) and any mix of 1..8 jobs.
For a fleet graph with node features :math:`x_i` (`hulk.graph.NODE_FEATURES`), edge features
:math:`e_{ij}` (`hulk.graph.EDGE_FEATURES`) and jobs :math:`z_1..z_J` (largest first, width
``job_features`` from the corpus), it gives every machine a distribution over J + 1 classes:
class k < J is "serve the k-th job", class J is "idle".

**Input scaling.** Features are standardised with per-feature means and standard deviations of
the training data, kept as buffers (`x_mean`, `x_std`, `edge_mean`, …) so they travel in the
state_dict: :math:`\hat x = (x - \mu_x) / \sigma_x`, likewise :math:`\hat e` and :math:`\hat z`.
`HulkGNN.fit_scaling` sets them (`hulk.train.train_model` calls it on the training samples).

**Job mix.** Each job is encoded with its rank in the size order, :math:`u_k =
\mathrm{MLP}_u([\hat z_k \| k/8 \| (J-1-k)/8])` (the rank tells class k from class k' when two
jobs are alike, e.g. two copies of a preset; it is what "the k-th job" means); the mix summary
of a graph is

.. math::
    m = W_m \,[\operatorname{mean}_k u_k \,\|\, \max_k u_k \,\|\, \log J] + b_m,

and each job's embedding is put in the context of the others: :math:`q_k = \mathrm{MLP}_q([u_k
\| m])`.

**Links heard.** With ``neighbours`` = k > 0 every machine hears only its k lowest-latency
incoming links (`nearest_links`, on the raw latency feature), in every layer. Fleets measured
all-to-all have a link between almost every pair; a machine's nearest links describe its site
and region, and the mean-state term below carries the rest of the fleet, so the forward pass
grows with machines × k instead of machines².

**Node states.** The mix summary is broadcast into every node's input, :math:`h^0_i = [\hat x_i
\| m]`. The paper's first layer (`EdgeFold`) folds the links into the node states,

.. math::
    h^1_i = \mathrm{LN}\Big(\sigma\big(\phi(h^0_i) + \sum_{j \in \mathcal{N}(i)}
    \psi([h^0_i \| h^0_j \| \hat e_{ij}])\big)\Big),

followed by ``layers`` graph-convolution layers with residual connections and layer norm,
each also hearing its graph's mean state :math:`\bar h^l` (the teacher's choices are
fleet-wide: which site is the fastest *in this fleet*),

.. math::
    h^{l+1}_i = \mathrm{LN}\big(h^l_i + \mathrm{Dropout}(\sigma(\mathrm{Conv}(h^l)_i + W^l_g
    \bar h^l))\big),

where Conv is `GCNConv` (``conv: gcn``: :math:`\Theta\, \hat A h^l`, :math:`\hat A = D^{-1/2}
(A + I) D^{-1/2}`, as in the paper the links' features enter through the first layer only) or
`GATConv` (``conv: gat``: ``heads`` attention heads of width hidden / heads, concatenated, with
the link features in the attention). :math:`\sigma` is ReLU, LN is a per-node `LayerNorm` (it
never mixes machines or graphs, so a sample's output does not depend on its batch).

**Scores.** With :math:`h_i` the last node state and :math:`\bar h` the mean node state of its
graph,

.. math::
    s_{ik} = \mathrm{MLP}_s([h_i \| q_k \| h_i \odot q_k]) \quad (k < J), \qquad
    s_{iJ} = \mathrm{MLP}_{idle}([h_i \| m \| \bar h]),

and :math:`p_i = \mathrm{softmax}(s_{i0}, \dots, s_{iJ})`, trained with cross-entropy against
the teacher's labels. Drained machines are never assigned: `predict_proba` gives them
probability 1 of idle.

**Batches.** Several samples (each with its own J) form one `torch_geometric.data.Batch`
(`make_batch`): graphs are stacked block-diagonally, jobs concatenated with `jobs_batch` saying
whose they are. Job scores are padded to the largest J in the batch; the padded columns get
:math:`-10^9` and idle is always the LAST column (``Jmax``). `batch_targets` maps each sample's
labels (idle = its own J) to that layout.

**Persistence.** `ModelConfig` is a plain dataclass with `to_dict` / `from_dict` (JSON types
only). A model is stored as that config plus its `state_dict` (tensors only, loadable with
``torch.load(weights_only=True)``); no code is ever pickled. `model_from_state(config_dict,
state)` rebuilds it.

**Size.** Memory and time are O(E × hidden), from `EdgeFold`'s messages (the GCN layers use a
sparse product instead): on a 10,000-machine graph with 1.27 M directed links, hidden 64, one
full-batch CPU inference takes ~1 GB beyond the interpreter and a few seconds.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from hulk.graph import EDGE_FEATURES
from hulk.pyg import (
    Batch,
    Data,
    GATConv,
    GCNConv,
    MessagePassing,
    gcn_norm,
    remove_generated_sources,
    scatter,
    to_dense_batch,
    to_torch_csr_tensor,
)

Conv = Literal["gcn", "gat"]
CONVS: tuple[str, ...] = ("gcn", "gat")
LATENCY = EDGE_FEATURES.index("log2_latency_ms")  # column of edge_attr that ranks links
RANK_SCALE = 8.0  # job ranks enter as k / 8: 0..7/8 for the mixes of 1..8 jobs trained on
PAD_LOGIT = -1e9  # logit of a job column that does not exist for a sample (padding)


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a `HulkGNN` (weights come from its state_dict)."""

    node_features: int
    edge_features: int
    job_features: int
    hidden: int = 64
    layers: int = 3
    conv: Conv = "gcn"
    heads: int = 4  # GAT only: attention heads, each hidden / heads wide
    dropout: float = 0.2
    neighbours: int = 0  # links each machine hears: its lowest-latency ones (0: all)

    def __post_init__(self) -> None:
        problems = []
        for name in ("node_features", "edge_features", "job_features", "hidden", "heads"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name} must be a positive integer")
        if not isinstance(self.layers, int) or self.layers < 0:
            problems.append("layers must be a non-negative integer")
        if not isinstance(self.neighbours, int) or self.neighbours < 0:
            problems.append("neighbours must be a non-negative integer")
        if self.conv not in CONVS:
            problems.append(f"conv must be one of {', '.join(CONVS)} (got {self.conv!r})")
        if self.conv == "gat" and self.hidden % self.heads:
            problems.append(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if not 0 <= self.dropout < 1:
            problems.append(f"dropout must lie in [0, 1) (got {self.dropout})")
        if problems:
            raise ValueError("ModelConfig: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (ints, floats, strings)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ModelConfig:
        """Inverse of `to_dict`; an unknown key is an error, a missing one takes the default."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"ModelConfig: unknown key(s) {', '.join(unknown)}")
        return cls(**dict(raw))


class EdgeFold(MessagePassing):
    r"""The paper's first layer: edge information folded into the node states.

    .. math::
        h'_i = \phi(h_i) + \sum_{j \in \mathcal{N}(i)} \psi([h_i \| h_j \| e_{ij}])

    with :math:`\phi(h) = \Theta_\phi h + b_\phi` and :math:`\psi` a two-layer perceptron,

    .. math::
        \psi([h_i \| h_j \| e_{ij}]) = \Theta_2\, r_{ij} + b_2, \qquad
        r_{ij} = \mathrm{ReLU}(\Theta_1 [h_i \| h_j \| e_{ij}] + b_1), \qquad
        \Theta_1 = [\Theta_i \,|\, \Theta_j \,|\, \Theta_e].

    Two exact rearrangements keep the per-edge work at one [E, out] tensor: :math:`\Theta_1` is
    stored split (`psi_i` holds :math:`\Theta_i, b_1`; `psi_j`, `psi_e`), so :math:`\Theta_i h`
    and :math:`\Theta_j h` are computed once per node; and as :math:`\Theta_2` is linear,
    :math:`\sum_j \psi(\cdot) = \Theta_2 \sum_j r_{ij} + \deg(i)\, b_2` is applied once per
    node after the sum (`update`). Messages flow along ``edge_index`` from ``edge_index[0]``
    (j) to ``edge_index[1]`` (i); an undirected link appears in both directions.
    """

    def __init__(self, in_channels: int, edge_dim: int, out_channels: int) -> None:
        super().__init__(aggr="add")
        self.in_channels = in_channels
        self.edge_dim = edge_dim
        self.out_channels = out_channels
        self.phi = nn.Linear(in_channels, out_channels)  # Θ_φ, b_φ
        self.psi_i = nn.Linear(in_channels, out_channels)  # Θ_i, b_1
        self.psi_j = nn.Linear(in_channels, out_channels, bias=False)  # Θ_j
        self.psi_e = nn.Linear(edge_dim, out_channels, bias=False)  # Θ_e
        self.psi_out = nn.Linear(out_channels, out_channels)  # Θ_2, b_2

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        """h' for every node: x [n, in_channels], edge_index [2, E], edge_attr [E, edge_dim]."""
        degree = torch.bincount(edge_index[1], minlength=x.size(0)).to(x.dtype)
        return self.propagate(
            edge_index,
            x=x,
            a=self.psi_i(x),
            b=self.psi_j(x),
            edge_attr=edge_attr,
            degree=degree,
        )

    def message(self, a_i: Tensor, b_j: Tensor, edge_attr: Tensor) -> Tensor:
        r""":math:`r_{ij} = \mathrm{ReLU}(\Theta_i h_i + b_1 + \Theta_j h_j + \Theta_e e_{ij})`,
        the hidden layer of :math:`\psi`, for every edge (j → i)."""
        # In place: one [E, out] buffer (autograd-safe: the linear keeps its inputs, not its
        # output; relu keeps its output).
        return torch.relu_(self.psi_e(edge_attr).add_(a_i).add_(b_j))

    def aggregate(
        self,
        inputs: Tensor,
        index: Tensor,
        ptr: Tensor | None = None,
        dim_size: int | None = None,
    ) -> Tensor:
        r""":math:`\sum_{j \in \mathcal{N}(i)} r_{ij}`: messages summed onto their target i."""
        return scatter(inputs, index, dim=self.node_dim, dim_size=dim_size, reduce="sum")

    def update(self, inputs: Tensor, x: Tensor, degree: Tensor) -> Tensor:
        r""":math:`h'_i = \phi(h_i) + \Theta_2 \sum_j r_{ij} + \deg(i)\, b_2`."""
        summed = inputs @ self.psi_out.weight.T + degree.unsqueeze(1) * self.psi_out.bias
        return self.phi(x) + summed

    def psi(self, h_i: Tensor, h_j: Tensor, edge_attr: Tensor) -> Tensor:
        r""":math:`\psi([h_i \| h_j \| e_{ij}])` evaluated directly (for inspection and tests)."""
        return self.psi_out(torch.relu(self.psi_i(h_i) + self.psi_j(h_j) + self.psi_e(edge_attr)))

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
            f"edge_dim={self.edge_dim})"
        )


def gcn_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""GCN's :math:`\hat A = D^{-1/2} (A + I) D^{-1/2}` as a sparse CSR matrix (row i: target).

    Built once per forward pass and shared by the GCN layers; a sparse-dense product is several
    times faster on CPU than gathering and scattering [E, hidden] messages, in both directions.
    Entries are ordered by (row, column) as PyG's coalescing orders them, with one numpy sort
    of packed keys instead of its general sort; duplicate links (summed by coalescing) take
    PyG's path.
    """
    index, weight = gcn_norm(edge_index, None, num_nodes=num_nodes, add_self_loops=True)
    row, col = index[1].cpu().numpy(), index[0].cpu().numpy()
    e = len(row)
    shift = max(e - 1, 1).bit_length()
    if num_nodes * num_nodes << shift < 2**63:
        cell = row * num_nodes + col
        order = np.sort((cell << shift) | np.arange(e, dtype=np.int64)) & ((1 << shift) - 1)
        cell = cell[order]
        if not (cell[1:] == cell[:-1]).any():
            crow = np.zeros(num_nodes + 1, dtype=np.int64)
            np.cumsum(np.bincount(row, minlength=num_nodes), out=crow[1:])
            taken = torch.from_numpy(order).to(index.device)
            with warnings.catch_warnings():  # as below
                warnings.filterwarnings("ignore", message=r"Sparse (CSR tensor support|invariant)")
                return torch.sparse_csr_tensor(
                    torch.from_numpy(crow).to(index.device),
                    index[0][taken],
                    weight[taken],
                    size=(num_nodes, num_nodes),
                )
    with warnings.catch_warnings():  # "sparse CSR support is in beta", "invariant checks off"
        warnings.filterwarnings("ignore", message=r"Sparse (CSR tensor support|invariant)")
        return to_torch_csr_tensor(index.flip(0), weight, size=(num_nodes, num_nodes))


def nearest_links(edge_index: Tensor, latency: Tensor, k: int) -> Tensor:
    """Positions of the links that carry messages: each target's `k` lowest-latency incoming
    links (ties by position), in their original order.

    Dense fleets have a link between almost every pair; a machine's nearest links say what
    its neighbourhood is, and the mean-state term of every layer carries the rest of the
    fleet. Pruning makes the forward pass linear in machines instead of quadratic.
    """
    # Sorting unique integer keys that carry their position gives the order of stable sorts,
    # and sorting values (numpy) is several times faster than argsort or torch's stable sort.
    # float32 bits map to integers in the same order (negative values — the feature is a
    # logarithm — reversed); adding 0.0 turns −0.0 into 0.0, which compares equal to it.
    e = len(latency)
    bits = (latency.detach().float() + 0.0).cpu().numpy().view(np.int32).astype(np.int64)
    ordered = np.where(bits >= 0, bits, -bits - 2**31 - 1) + 2**31  # 0 .. 2³² − 1
    target_of = edge_index[1].cpu().numpy().astype(np.int64)
    order = _by_target_latency_position(target_of, ordered)
    target = target_of[order]
    counts = np.bincount(target)
    first = np.cumsum(counts) - counts
    within = np.arange(e, dtype=np.int64) - first[target]
    kept = np.sort(order[within < k])
    return torch.from_numpy(kept).to(edge_index.device)


def _by_target_latency_position(
    target: np.ndarray, latency_key: np.ndarray, one_sort: bool | None = None
) -> np.ndarray:
    """Link positions sorted by (target, latency key in 0 .. 2³² − 1, position).

    One sort of (target, latency, position) keys where they fit 63 bits (`one_sort` None:
    decided by the sizes); else (latency, position) then (target, that rank). The position
    takes the low bits of a key, so a mask (not a division) recovers it.
    """
    e = len(target)
    position = np.arange(e, dtype=np.int64)
    shift = max(e - 1, 1).bit_length()  # bits of a position
    mask = (1 << shift) - 1
    if one_sort is None:
        one_sort = (int(target.max()) + 1 if e else 0) << (32 + shift) < 2**63
    if one_sort:
        return np.sort((((target << 32) | latency_key) << shift) | position) & mask
    by_latency = np.sort((latency_key << shift) | position) & mask
    rank = np.empty_like(position)
    rank[by_latency] = position
    return by_latency[np.sort((target << shift) | rank) & mask]  # rank r is link by_latency[r]


def _mlp(in_channels: int, hidden: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_channels, hidden), nn.ReLU(), nn.Linear(hidden, out_channels))


class HulkGNN(nn.Module):
    """Per-machine job classifier conditioned on the job mix (see the module docstring)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden
        for name, width in (
            ("x", config.node_features),
            ("edge", config.edge_features),
            ("job", config.job_features),
        ):
            self.register_buffer(f"{name}_mean", torch.zeros(width))
            self.register_buffer(f"{name}_std", torch.ones(width))

        self.job_encoder = _mlp(config.job_features + 2, h, h)  # + rank from both ends
        self.mix = nn.Linear(2 * h + 1, h)
        self.job_context = _mlp(2 * h, h, h)

        self.fold = EdgeFold(config.node_features + h, config.edge_features, h)
        self.fold_norm = nn.LayerNorm(h)
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        self.globals = nn.ModuleList()  # W_g: each layer also hears its graph's mean state
        for _ in range(config.layers):
            if config.conv == "gcn":
                # The normalised adjacency is built once per forward pass (`gcn_adjacency`).
                self.convs.append(GCNConv(h, h, normalize=False))
            else:
                self.convs.append(
                    GATConv(
                        h,
                        h // config.heads,
                        heads=config.heads,
                        edge_dim=config.edge_features,
                        dropout=config.dropout,
                    )
                )
            self.norms.append(nn.LayerNorm(h))
            self.globals.append(nn.Linear(h, h, bias=False))
        self.dropout = nn.Dropout(config.dropout)

        self.job_score = _mlp(3 * h, h, 1)
        self.idle_score = _mlp(3 * h, h, 1)
        remove_generated_sources()  # PyG's layers leave their generated code in the temp folder

    @torch.no_grad()
    def fit_scaling(self, samples: Sequence[Mapping[str, Tensor]]) -> None:
        """Set the input scaling buffers from the samples' nodes, edges and jobs.

        A feature that never varies (std below 1e-6) keeps std 1: it is only centred.
        """
        for name, key in (("x", "x"), ("edge", "edge_attr"), ("job", "jobs")):
            values = torch.cat([s[key].float() for s in samples if len(s[key])])
            mean = values.mean(0)
            std = values.std(0, unbiased=False) if len(values) > 1 else torch.ones_like(mean)
            std = torch.where(std < 1e-6, torch.ones_like(std), std)
            getattr(self, f"{name}_mean").copy_(mean)
            getattr(self, f"{name}_std").copy_(std)

    def forward(self, batch: Batch) -> Tensor:
        """Logits [N, Jmax + 1] for a `make_batch` batch: jobs padded, idle in the last column."""
        x = (batch.x - self.x_mean) / self.x_std
        edge_index, edge_attr = batch.edge_index, batch.edge_attr
        if self.config.neighbours and edge_index.size(1):
            kept = nearest_links(edge_index, edge_attr[:, LATENCY], self.config.neighbours)
            edge_index, edge_attr = edge_index[:, kept], edge_attr[kept]
        edge_attr = (edge_attr - self.edge_mean) / self.edge_std
        jobs = (batch.jobs - self.job_mean) / self.job_std
        node_batch, job_batch = batch.batch, batch.jobs_batch
        graphs = batch.num_graphs

        # Job mix: per-job encoding, mix summary m per graph, jobs in context q_k.
        n_jobs = batch.num_jobs.to(jobs.dtype)
        first = torch.cumsum(batch.num_jobs, 0) - batch.num_jobs  # each graph's first job
        rank = torch.arange(len(jobs), device=jobs.device) - first[job_batch]
        from_end = batch.num_jobs[job_batch] - 1 - rank
        ranks = torch.stack([rank, from_end], dim=1).to(jobs.dtype) / RANK_SCALE
        u = self.job_encoder(torch.cat([jobs, ranks], dim=1))
        pooled = torch.cat(
            [
                scatter(u, job_batch, dim=0, dim_size=graphs, reduce="mean"),
                scatter(u, job_batch, dim=0, dim_size=graphs, reduce="max"),
                torch.log(n_jobs).unsqueeze(1),
            ],
            dim=1,
        )
        mix = self.mix(pooled)  # [B, h]
        q = self.job_context(torch.cat([u, _of_group(mix, job_batch, graphs)], dim=1))  # [ΣJ, h]

        # Node states: mix broadcast into the input, EdgeFold, then residual convolutions.
        h = torch.cat([x, _of_group(mix, node_batch, graphs)], dim=1)
        h = self.fold_norm(torch.relu(self.fold(h, edge_index, edge_attr)))
        if self.config.conv == "gcn" and self.convs:
            adj_t = gcn_adjacency(edge_index, h.size(0))
        for conv, norm, glob in zip(self.convs, self.norms, self.globals, strict=True):
            gcn = isinstance(conv, GCNConv)
            update = conv(h, adj_t) if gcn else conv(h, edge_index, edge_attr)
            mean_h = scatter(h, node_batch, dim=0, dim_size=graphs, reduce="mean")
            update = update + _of_group(glob(mean_h), node_batch, graphs)
            h = norm(h + self.dropout(torch.relu(update)))

        # Scores: every node against every job of its graph (padded), plus idle last.
        q_dense, job_mask = to_dense_batch(q, job_batch, batch_size=graphs)  # [B, Jmax, h]
        q_node = _of_group(q_dense, node_batch, graphs)  # [N, Jmax, h]
        h_node = h.unsqueeze(1).expand_as(q_node)
        job_logits = self.job_score(torch.cat([h_node, q_node, h_node * q_node], dim=2))
        padded = ~_of_group(job_mask, node_batch, graphs)
        job_logits = job_logits.squeeze(2).masked_fill(padded, PAD_LOGIT)
        mean_h = scatter(h, node_batch, dim=0, dim_size=graphs, reduce="mean")
        idle_logit = self.idle_score(
            torch.cat(
                [h, _of_group(mix, node_batch, graphs), _of_group(mean_h, node_batch, graphs)],
                dim=1,
            )
        )
        return torch.cat([job_logits, idle_logit], dim=1)


def _of_group(values: Tensor, group: Tensor, groups: int) -> Tensor:
    """``values[group]``: each row's value of its graph. With one graph and no gradient (every
    inference), a broadcast view of the same values: a gather copies [N, …] for nothing. Under
    autograd the gather stays, as its backward sums in another order than a view's."""
    if groups == 1 and not torch.is_grad_enabled():
        return values.expand(len(group), *values.shape[1:])
    return values[group]


def model_from_state(config: Mapping[str, Any], state: Mapping[str, Tensor]) -> HulkGNN:
    """Rebuild a stored model: `ModelConfig.to_dict` output + a state_dict, in eval mode.

    With ``state = torch.load(path, weights_only=True)`` nothing but tensors is unpickled.
    Raises `ValueError` when the config is not one or the weights are not its model's.
    """
    try:
        model = HulkGNN(ModelConfig.from_dict(config))
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"config.json is not a model config ({exc})") from None
    try:
        model.load_state_dict(dict(state))
    except RuntimeError as exc:  # missing, unexpected or differently shaped tensors
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[1:3]) or first[0]
        raise ValueError(f"the weights do not fit config.json's model: {detail}") from None
    return model.eval()


def sample_data(sample: Mapping[str, Any]) -> Data:
    """One corpus sample as a PyG `Data` (x, edge_index, edge_attr, jobs, num_jobs, y, active)."""
    jobs = sample["jobs"].float()
    n = sample["x"].shape[0]
    if jobs.ndim != 2 or len(jobs) < 1:
        raise ValueError(f"a sample needs jobs as a [J >= 1, features] tensor (got {jobs.shape})")
    data = Data(
        x=sample["x"].float(),
        edge_index=sample["edge_index"].long(),
        edge_attr=sample["edge_attr"].float(),
        jobs=jobs,
        num_jobs=torch.tensor([len(jobs)]),
        active=sample["active"].bool() if "active" in sample else torch.ones(n, dtype=torch.bool),
    )
    if "y" in sample:
        data.y = sample["y"].long()
    return data


def make_batch(samples: Sequence[Mapping[str, Any] | Data]) -> Batch:
    """Several samples as one `Batch` (block-diagonal graphs, `jobs_batch` for the jobs)."""
    data = [s if isinstance(s, Data) else sample_data(s) for s in samples]
    return Batch.from_data_list(data, follow_batch=["jobs"])


def single_batch(sample: Mapping[str, Any] | Data) -> Batch:
    """`make_batch([sample])` built directly: the same tensors without PyG's general collation,
    which copies every tensor and costs more than the forward pass on a large fleet."""
    data = sample if isinstance(sample, Data) else sample_data(sample)
    n, jobs = data.num_nodes, len(data.jobs)
    return Batch(
        **data.to_dict(),
        batch=torch.zeros(n, dtype=torch.long),
        ptr=torch.tensor([0, n]),
        jobs_batch=torch.zeros(jobs, dtype=torch.long),
        jobs_ptr=torch.tensor([0, jobs]),
    )


def batch_targets(batch: Batch) -> Tensor:
    """Labels in the padded layout of `HulkGNN.forward`: a sample's idle class J → Jmax."""
    j_max = int(batch.num_jobs.max())
    own_j = batch.num_jobs[batch.batch]
    return torch.where(batch.y == own_j, torch.full_like(batch.y, j_max), batch.y)


def check_sample(config: ModelConfig, sample: Mapping[str, Any]) -> None:
    """`ValueError` naming the mismatch when a sample does not fit the model's widths."""
    widths = (
        ("x", config.node_features),
        ("edge_attr", config.edge_features),
        ("jobs", config.job_features),
    )
    for key, width in widths:
        shape = tuple(sample[key].shape)
        if len(shape) != 2 or shape[1] != width:
            raise ValueError(f"sample {key} has shape {shape}; the model expects [*, {width}]")


def predict_proba(model: HulkGNN, sample: Mapping[str, Any]) -> Tensor:
    """Class probabilities [n, J + 1] for one sample (column J: idle); drained machines → idle.

    Runs in eval mode without gradients; the model's previous mode is restored.
    """
    check_sample(model.config, sample)
    was_training = model.training
    if was_training:  # switching modes walks every submodule: only when it is needed
        model.eval()
    try:
        with torch.no_grad():
            batch = single_batch(sample)
            proba = torch.softmax(model(batch), dim=1)  # one sample: Jmax = J, no padding
    finally:
        if was_training:
            model.train()
    drained = ~batch.active
    if drained.any():
        proba[drained] = 0.0
        proba[drained, -1] = 1.0
    return proba
