"""Graph attention (after PyG's GATConv and torch_scatter's scatter_softmax, written without those libraries):
edge_index with self-loops added via torch.cat/arange and deduplicated by torch.unique(dim=1), per-edge attention
logits from index_select, LeakyReLU, a numerically stable segment softmax through scatter_reduce("amax",
include_self=False) + exp + index_add_, multi-head concat/mean, attention dropout from torch.manual_seed's stream,
global mean/add pooling per graph with index_add_/scatter_reduce, degree via torch.bincount, and graph classification.

Graphs and weights come from NumPy; dropout masks come from torch.manual_seed's CPU stream (which jitorch
reproduces), so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def add_self_loops(edge_index, num_nodes):
    loops = torch.arange(num_nodes).unsqueeze(0).repeat(2, 1)
    return torch.unique(torch.cat([edge_index, loops], dim=1), dim=1)


def segment_softmax(src, index, num_nodes):
    """softmax of src over the edges that share a target node (torch_scatter.composite.scatter_softmax)."""
    size = (num_nodes,) + src.shape[1:]
    src_max = torch.zeros(size, dtype=src.dtype).scatter_reduce(
        0, index.view(-1, *([1] * (src.dim() - 1))).expand_as(src), src, reduce="amax", include_self=False)
    out = (src - src_max.index_select(0, index)).exp()
    out_sum = torch.zeros(size, dtype=src.dtype).index_add_(0, index, out) + 1e-16
    return out / out_sum.index_select(0, index)


class GATConv(nn.Module):
    def __init__(self, in_channels, out_channels, heads=2, concat=True, negative_slope=0.2, dropout=0.0):
        super().__init__()
        self.heads, self.out_channels, self.concat = heads, out_channels, concat
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(heads * out_channels if concat else out_channels))
        self.negative_slope, self.dropout = negative_slope, dropout

    def forward(self, x, edge_index):
        N, H, C = x.size(0), self.heads, self.out_channels
        x = self.lin(x).view(-1, H, C)
        alpha_src = (x * self.att_src).sum(dim=-1)
        alpha_dst = (x * self.att_dst).sum(dim=-1)
        src, dst = edge_index
        alpha = F.leaky_relu(alpha_src[src] + alpha_dst[dst], self.negative_slope)
        alpha = segment_softmax(alpha, dst, N)
        self.last_alpha = alpha.detach()
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        msg = x.index_select(0, src) * alpha.unsqueeze(-1)
        out = torch.zeros(N, H, C, dtype=x.dtype).index_add_(0, dst, msg)
        out = out.view(-1, H * C) if self.concat else out.mean(dim=1)
        return out + self.bias


class GAT(nn.Module):
    def __init__(self, d_in, hidden, n_cls):
        super().__init__()
        self.conv1 = GATConv(d_in, hidden, heads=4, dropout=0.2)
        self.conv2 = GATConv(4 * hidden, hidden, heads=2, concat=False)
        self.lin = nn.Linear(2 * hidden, n_cls)

    def forward(self, x, edge_index, batch, num_graphs):
        x = F.dropout(x, p=0.1, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.elu(self.conv2(x, edge_index))
        counts = torch.bincount(batch, minlength=num_graphs).clamp(min=1).unsqueeze(1).float()
        mean_pool = torch.zeros(num_graphs, x.size(1)).index_add_(0, batch, x) / counts
        # global_add_pool (global_max_pool would tie: a star's leaves attend to the same centre, and the
        # gradient of tied maxima splits on the last bit of each backend's rounding)
        idx = batch.unsqueeze(1).expand_as(x)
        add_pool = torch.zeros(num_graphs, x.size(1)).scatter_reduce(0, idx, x, reduce="sum", include_self=False)
        return self.lin(torch.cat([mean_pool, add_pool / 4], 1))


rng = np.random.RandomState(0)
graphs = []
for g in range(12):
    n = rng.randint(5, 9)
    label = g % 2
    if label:  # rings
        src = np.arange(n)
        dst = (src + 1) % n
    else:  # stars
        src = np.zeros(n - 1, dtype=np.int64)
        dst = np.arange(1, n)
    ei = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], 1)
    node_deg = np.bincount(ei[1], minlength=n)[:, None] / 4.0  # degree as a feature (PyG's featureless-graph recipe)
    feats = np.concatenate([node_deg, rng.randn(n, 3) * 0.5], 1)
    graphs.append((feats, ei, label))
xs, eis, batch, offset = [], [], [], 0
for gi, (f, ei, _) in enumerate(graphs):
    xs.append(f)
    eis.append(ei + offset)
    batch += [gi] * len(f)
    offset += len(f)
x = torch.from_numpy(np.concatenate(xs).astype(np.float32))
edge_index = add_self_loops(torch.from_numpy(np.concatenate(eis, 1)), x.size(0))
batch = torch.tensor(batch)
y = torch.tensor([lab for _, _, lab in graphs])
deg = torch.bincount(edge_index[1], minlength=x.size(0))

torch.manual_seed(0)
model = GAT(4, 8, 2)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.3).astype(np.float32)))
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
losses = []
for epoch in range(25):
    model.train()
    opt.zero_grad()
    loss = F.cross_entropy(model(x, edge_index, batch, 12), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    pred = model(x, edge_index, batch, 12).argmax(1)
    alpha = model.conv2.last_alpha
    per_node = torch.zeros(x.size(0), 2).index_add_(0, edge_index[1], alpha)
print(f"n_edges={edge_index.size(1)}")
print(f"deg_max={deg.max().item()}")
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_12={losses[12]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={(pred == y).float().mean().item():.6f}")
print(f"alpha_rows_sum_to_one={int(torch.allclose(per_node, torch.ones_like(per_node), atol=1e-5))}")
print(f"alpha_max={alpha.max().item():.6f}")
