"""Node classification with hand-written message passing (the PyG-without-PyG way): a GCN layer with symmetric
degree normalisation through index_add_, a GraphSAGE layer with mean/max aggregation through scatter_reduce
(include_self=False, "amax" / "mean"), a GAT layer with a per-destination edge softmax (scatter_reduce "amax" for
the stabilizer, index_add for the denominator), sum/mean graph readout with scatter_add, on a two-community
stochastic block model graph.

Deterministic: graph, features and weights from NumPy; metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.RandomState(0)
N, FEAT, HID, C = 60, 8, 16, 2
community = np.arange(N) % C
p_in, p_out = 0.2, 0.02
adj = rng.rand(N, N) < np.where(community[:, None] == community[None, :], p_in, p_out)
adj = np.triu(adj, 1)
adj = adj | adj.T
src, dst = np.nonzero(adj)
edge_index = torch.from_numpy(np.stack([src, dst]))  # (2, E), messages flow src -> dst
x = torch.from_numpy((rng.randn(N, FEAT) + community[:, None] * 0.5).astype(np.float32))
y = torch.from_numpy(community)
train_mask = torch.from_numpy(rng.rand(N) < 0.3)


def add_self_loops(edge_index, n):
    loops = torch.arange(n).unsqueeze(0).repeat(2, 1)
    return torch.cat([edge_index, loops], dim=1)


class GCNConv(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.lin = nn.Linear(i, o, bias=False)
        self.bias = nn.Parameter(torch.zeros(o))

    def forward(self, x, edge_index):
        edge_index = add_self_loops(edge_index, x.size(0))
        row, col = edge_index
        deg = torch.zeros(x.size(0)).index_add_(0, col, torch.ones(col.size(0)))
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, col, norm.view(-1, 1) * h[row])
        return out + self.bias


class SAGEConv(nn.Module):
    def __init__(self, i, o, aggr):
        super().__init__()
        self.lin_l = nn.Linear(i, o)
        self.lin_r = nn.Linear(i, o, bias=False)
        self.aggr = aggr

    def forward(self, x, edge_index):
        row, col = edge_index
        index = col.view(-1, 1).expand(-1, x.size(1))
        out = torch.zeros_like(x).scatter_reduce(0, index, x[row], reduce=self.aggr, include_self=False)
        return self.lin_l(out) + self.lin_r(x)


class GATConv(nn.Module):
    def __init__(self, i, o, heads=2):
        super().__init__()
        self.heads, self.o = heads, o
        self.lin = nn.Linear(i, heads * o, bias=False)
        self.att_src = nn.Parameter(torch.zeros(1, heads, o))
        self.att_dst = nn.Parameter(torch.zeros(1, heads, o))

    def forward(self, x, edge_index):
        edge_index = add_self_loops(edge_index, x.size(0))
        row, col = edge_index
        h = self.lin(x).view(-1, self.heads, self.o)
        alpha = (h * self.att_src).sum(-1)[row] + (h * self.att_dst).sum(-1)[col]  # (E, H)
        alpha = F.leaky_relu(alpha, 0.2)
        idx = col.view(-1, 1).expand_as(alpha)
        amax = torch.full((x.size(0), self.heads), float("-inf")).scatter_reduce(0, idx, alpha, "amax")
        alpha = (alpha - amax[col].detach()).exp()
        denom = torch.zeros(x.size(0), self.heads).index_add(0, col, alpha)
        alpha = alpha / denom[col]
        self.last_alpha = alpha
        out = torch.zeros_like(h).index_add_(0, col, h[row] * alpha.unsqueeze(-1))
        return out.mean(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gcn = GCNConv(FEAT, HID)
        self.sage_mean = SAGEConv(HID, HID, "mean")
        self.sage_max = SAGEConv(HID, HID, "amax")
        self.gat = GATConv(2 * HID, HID)
        self.out = nn.Linear(HID, C)

    def forward(self, x, edge_index):
        h = F.relu(self.gcn(x, edge_index))
        h = torch.cat([F.elu(self.sage_mean(h, edge_index)), F.elu(self.sage_max(h, edge_index))], 1)
        h = F.elu(self.gat(h, edge_index))
        return self.out(h), h


model = Net()
init = np.random.RandomState(3)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy(init.uniform(-0.3, 0.3, p.shape).astype(np.float32)))
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
losses = []
for epoch in range(60):
    model.train()
    opt.zero_grad()
    logits, _ = model(x, edge_index)
    loss = F.cross_entropy(logits[train_mask], y[train_mask])
    loss.backward()
    opt.step()
    losses.append(loss.item())

model.eval()
with torch.no_grad():
    logits, h = model(x, edge_index)
    acc = (logits.argmax(1)[~train_mask] == y[~train_mask]).float().mean().item()
    # attention over each destination's incoming edges sums to one
    alpha_sum = torch.zeros(N, 2).index_add_(0, add_self_loops(edge_index, N)[1], model.gat.last_alpha)
    # graph readout: per-community sum and mean of node embeddings via scatter_add
    batch = y.view(-1, 1).expand_as(h)
    pooled_sum = torch.zeros(C, h.size(1)).scatter_add_(0, batch, h)
    counts = torch.bincount(y, minlength=C).clamp(min=1).unsqueeze(1)
    pooled_mean = pooled_sum / counts

print(f"num_edges={edge_index.size(1)}")
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_30={losses[30]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"alpha_sum_err={(alpha_sum - 1).abs().max().item():.6f}")
print(f"pooled_sum={pooled_sum.sum().item():.5f}")
print(f"pooled_mean_norm={pooled_mean.norm().item():.6f}")
print(f"gcn_weight_norm={model.gcn.lin.weight.norm().item():.6f}")
