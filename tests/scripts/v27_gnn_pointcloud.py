"""Geometric deep learning without extension libraries: a two-layer GCN on a random graph (symmetric degree
normalization with index_add_/scatter_add_, and the same layer through torch.sparse.mm), a PointNet-style
classifier with a k-NN edge feature (cdist + topk + gather), and detection utilities (pairwise box IoU, greedy NMS,
box delta encoding/decoding).

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(4)


def numpy_init(module, seed, scale=0.3):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(g.normal(scale=scale, size=tuple(p.shape)).astype(np.float32)))
    return module


# ---- GCN on a two-community graph ----
n_nodes, feat_dim = 40, 8
community = rng.integers(0, 2, n_nodes)
edges = [(i, j) for i in range(n_nodes) for j in range(i + 1, n_nodes)
         if rng.random() < (0.25 if community[i] == community[j] else 0.03)]
edge_index = torch.tensor(edges, dtype=torch.long).t()
edge_index = torch.cat([edge_index, edge_index.flip(0), torch.arange(n_nodes).repeat(2, 1)], dim=1)  # + self loops
x = torch.from_numpy((rng.normal(size=(n_nodes, feat_dim)) + community[:, None] * 0.5).astype(np.float32))
y = torch.from_numpy(community)
train_mask = torch.zeros(n_nodes, dtype=torch.bool)
train_mask[::3] = True


def gcn_norm(edge_index, n):
    row, col = edge_index
    deg = torch.zeros(n).scatter_add_(0, col, torch.ones(col.numel()))
    dinv = deg.pow(-0.5)
    dinv.masked_fill_(dinv == float("inf"), 0)
    return dinv[row] * dinv[col]


class GCNLayer(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.lin = nn.Linear(cin, cout, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x, edge_index, weight):
        h = self.lin(x)
        row, col = edge_index
        out = torch.zeros_like(h).index_add_(0, col, h[row] * weight.unsqueeze(-1))
        return out + self.bias


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNLayer(feat_dim, 16), GCNLayer(16, 2)

    def forward(self, x, edge_index, w):
        return self.conv2(F.dropout(F.relu(self.conv1(x, edge_index, w)), 0.0, self.training), edge_index, w)


w = gcn_norm(edge_index, n_nodes)
gcn = numpy_init(GCN(), 0)
opt = torch.optim.Adam(gcn.parameters(), lr=0.01, weight_decay=5e-4)
with torch.no_grad():
    initial = F.cross_entropy(gcn(x, edge_index, w)[train_mask], y[train_mask]).item()
for _ in range(60):
    opt.zero_grad()
    loss = F.cross_entropy(gcn(x, edge_index, w)[train_mask], y[train_mask])
    loss.backward()
    opt.step()
gcn.eval()
with torch.no_grad():
    out = gcn(x, edge_index, w)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), w, (n_nodes, n_nodes)).coalesce()
    sparse_h = F.relu(torch.sparse.mm(adj, gcn.conv1.lin(x)) + gcn.conv1.bias)
    sparse_out = torch.sparse.mm(adj, gcn.conv2.lin(sparse_h)) + gcn.conv2.bias
print(f"initial_loss={initial:.6f}")
print(f"final_loss={loss.item():.6f}")
print(f"gcn_test_acc={(out.argmax(1) == y)[~train_mask].float().mean().item():.6f}")
print(f"sparse_matches={float(torch.allclose(out, sparse_out, atol=1e-5)):.1f}")
print(f"degree_max={int(torch.bincount(edge_index[1]).max())}")

# ---- PointNet with a k-NN edge feature ----
def make_cloud(label, n=32):
    pts = rng.normal(size=(n, 3))
    if label == 1:
        pts = pts / np.linalg.norm(pts, axis=1, keepdims=True)  # sphere surface vs blob
    return pts.astype(np.float32)


labels = rng.integers(0, 2, 24)
clouds = torch.from_numpy(np.stack([make_cloud(c) for c in labels]))
labels = torch.from_numpy(labels)


def knn_feature(pts, k=4):
    d = torch.cdist(pts, pts)
    idx = d.topk(k + 1, dim=-1, largest=False).indices[..., 1:]  # drop self
    nbrs = torch.gather(pts.unsqueeze(1).expand(-1, pts.shape[1], -1, -1), 2,
                        idx.unsqueeze(-1).expand(-1, -1, -1, pts.shape[-1]))
    return torch.cat([pts, (nbrs - pts.unsqueeze(2)).norm(dim=-1).mean(-1, keepdim=True)], dim=-1)


# No conv bias before the BatchNorm: its gradient is rounding noise that Adam would amplify into full steps.
pointnet = numpy_init(nn.Sequential(nn.Conv1d(4, 16, 1, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
                                    nn.Conv1d(16, 32, 1)), 1)
pn_head = numpy_init(nn.Linear(32, 2), 2)
opt = torch.optim.Adam(list(pointnet.parameters()) + list(pn_head.parameters()), lr=1e-2)
for _ in range(15):
    feats = pointnet(knn_feature(clouds).transpose(1, 2))
    logits = pn_head(torch.max(feats, dim=2)[0])
    loss = F.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"pointnet_loss={loss.item():.6f}")
print(f"pointnet_bn_mean={pointnet[1].running_mean.sum().item():.6f}")


# ---- Detection utilities ----
def box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b - inter)


def nms(boxes, scores, thresh):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i.item())
        if order.numel() == 1:
            break
        ious = box_iou(boxes[i].unsqueeze(0), boxes[order[1:]]).squeeze(0)
        order = order[1:][ious <= thresh]
    return torch.tensor(keep, dtype=torch.long)


def encode(anchors, gt, weights=(10.0, 10.0, 5.0, 5.0)):
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    wx, wy, ww, wh = weights
    return torch.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah, ww * torch.log(gw / aw), wh * torch.log(gh / ah)], 1)


def decode(anchors, deltas, weights=(10.0, 10.0, 5.0, 5.0)):
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
    dx, dy, dw, dh = (deltas[:, i] / w for i, w in enumerate(weights))
    dw, dh = dw.clamp(max=np.log(1000 / 16)), dh.clamp(max=np.log(1000 / 16))
    cx, cy, w, h = ax + dx * aw, ay + dy * ah, aw * torch.exp(dw), ah * torch.exp(dh)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=1)


xy = torch.from_numpy(rng.uniform(0, 50, size=(30, 2)).astype(np.float32))
wh = torch.from_numpy(rng.uniform(5, 20, size=(30, 2)).astype(np.float32))
boxes = torch.cat([xy, xy + wh], 1)
scores = torch.from_numpy(rng.random(30).astype(np.float32))
keep = nms(boxes, scores, 0.3)
iou = box_iou(boxes, boxes)
matched_iou, matched = iou.fill_diagonal_(0).max(dim=1)
deltas = encode(boxes, boxes[matched])
print(f"nms_kept={keep.numel()}")
print(f"nms_kept_sum={keep.sum().item()}")
print(f"iou_mean={matched_iou.mean().item():.6f}")
print(f"decode_err_small={float((decode(boxes, deltas) - boxes[matched]).abs().max().item() < 1e-3):.1f}")
print(f"delta_abs_mean={deltas.abs().mean().item():.6f}")
