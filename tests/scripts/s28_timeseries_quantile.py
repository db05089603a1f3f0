"""Probabilistic time-series forecasting as DeepAR / TFT-style repos write it: sliding windows with
Tensor.unfold, missing values as NaN handled with torch.isnan masks, torch.nanmean scaling and torch.nan_to_num,
a GRU encoder whose hidden state is carried and detached across chunks (truncated BPTT), quantile (pinball)
loss over several quantiles, torch.quantile / torch.nanquantile for empirical intervals, torch.bucketize of the
targets into bins for a calibration histogram with torch.histc / bincount, and MASE metrics with a seasonal naive
baseline via torch.roll.

Series and weights come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

QUANTILES = torch.tensor([0.1, 0.5, 0.9])


class QuantileGRU(nn.Module):
    def __init__(self, n_in=3, hidden=16, horizon=4):
        super().__init__()
        self.gru = nn.GRU(n_in, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, horizon * len(QUANTILES))
        self.horizon = horizon

    def forward(self, x, h=None):
        out, h = self.gru(x, h)
        q = self.head(out[:, -1]).view(-1, self.horizon, len(QUANTILES))
        q = torch.cat([q[..., :1], q[..., :1] + F.softplus(q[..., 1:]).cumsum(-1)], dim=-1)  # non-crossing
        return q, h


def pinball_loss(pred, target, quantiles):
    diff = target.unsqueeze(-1) - pred
    loss = torch.maximum(quantiles * diff, (quantiles - 1) * diff)
    mask = ~torch.isnan(target)
    return (loss.nan_to_num(0.0).mean(-1) * mask).sum() / mask.sum()


rng = np.random.RandomState(0)
n_series, T, season = 6, 120, 12
t = np.arange(T)
series = (np.sin(2 * np.pi * t / season)[None] * rng.uniform(0.5, 2, (n_series, 1)) + 0.02 * t[None]
          + rng.uniform(1, 3, (n_series, 1)) + 0.2 * rng.randn(n_series, T))
series[rng.rand(n_series, T) < 0.05] = np.nan
y = torch.from_numpy(series.astype(np.float32))
scale = torch.nanmean(y[:, :96], dim=1, keepdim=True)
y_scaled = y / scale
window, horizon = 24, 4
windows = y_scaled.unfold(dimension=1, size=window + horizon, step=2)  # (series, n_win, 28)
windows = windows[:, : (96 - window - horizon) // 2 + 1].reshape(-1, window + horizon)
past, future = windows[:, :window], windows[:, window:]
phase = torch.arange(window, dtype=torch.float32) % season / season
feats = torch.stack([past.nan_to_num(nan=1.0), torch.isnan(past).float(),
                     torch.sin(2 * np.pi * phase).expand_as(past)], dim=-1)
model = QuantileGRU()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.2).astype(np.float32)))
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
losses = []
order = rng.permutation(len(feats))
for epoch in range(6):
    h = None
    for i in range(0, len(order) - 15, 16):
        idx = torch.from_numpy(np.sort(order[i:i + 16]))
        chunk = feats[idx]
        q1, h = model(chunk[:, :12], h)  # two truncated-BPTT chunks with a carried, detached state
        h = h.detach()
        q, _ = model(chunk[:, 12:], h)
        h = None
        loss = pinball_loss(q, future[idx], QUANTILES)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())

with torch.no_grad():
    last = y_scaled[:, 96 - window:96]
    phase = torch.arange(96 - window, 96, dtype=torch.float32) % season / season
    x_last = torch.stack([last.nan_to_num(nan=1.0), torch.isnan(last).float(),
                          torch.sin(2 * np.pi * phase).expand_as(last)], dim=-1)
    q, _ = model(x_last)
    truth = y_scaled[:, 96:96 + horizon]
    mask = ~torch.isnan(truth)
    coverage = (((truth >= q[..., 0]) & (truth <= q[..., 2])) & mask).sum().float() / mask.sum()
    naive_err = (y_scaled[:, season:96] - torch.roll(y_scaled, season, dims=1)[:, season:96]).abs()
    mase = (q[..., 1] - truth).abs()[mask].mean() / torch.nanmean(naive_err)
    emp = torch.nanquantile(y_scaled[:, :96], QUANTILES, dim=1)
    q_plain = torch.quantile(y_scaled[:, :96].nan_to_num(1.0), torch.tensor([0.25, 0.75]), dim=1,
                             interpolation="midpoint")
    bins = torch.tensor([0.5, 1.0, 1.5])
    bucket = torch.bucketize(truth[mask], bins, right=False)
    hist = torch.histc(truth[mask], bins=5, min=0.0, max=2.5)
print(f"n_windows={len(feats)}")
print(f"nan_count={int(torch.isnan(y).sum().item())}")
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"coverage={coverage.item():.6f}")
print(f"mase={mase.item():.6f}")
print(f"emp_q_sum={emp.sum().item():.6f}")
print(f"iqr_mean={(q_plain[1] - q_plain[0]).mean().item():.6f}")
print(f"bucket_checksum={int((bucket * torch.arange(1, len(bucket) + 1)).sum().item())}")
print(f"hist_checksum={float((hist * torch.arange(1, 6)).sum().item()):.1f}")
print(f"bincount_max={int(torch.bincount(bucket).max().item())}")
