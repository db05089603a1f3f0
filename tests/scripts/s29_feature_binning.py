"""Tensor-only data preprocessing and evaluation as tabular / calibration code writes it: quantile bin edges by
torch.quantile (linear and "nearest" interpolation, nanquantile with missing values), torch.bucketize (right=True and
False) and torch.searchsorted with a sorter and side="right", target encoding by torch.unique(return_inverse=True,
return_counts=True) and index_add_, unique_consecutive run lengths, frequency-rank encoding by bincount + argsort
(stable), torch.histc histograms and torch.histogram with explicit edges and density=True, the expected calibration
error of a trained logistic model by bucketize + bincount(weights=...), torch.cummax/cummin for a drawdown, kthvalue
and torch.mode, and rank-based (Spearman) correlation from argsort-of-argsort.

Everything is deterministic (NumPy data, manual_seed weights), so every metric must match torch.
"""
import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.RandomState(0)
n = 500
age = torch.tensor(np.round(rng.gamma(5, 8, n)), dtype=torch.float32)
income = torch.tensor(rng.lognormal(10, 0.6, n), dtype=torch.float32)
city = torch.tensor(rng.choice(7, n, p=[0.3, 0.2, 0.15, 0.15, 0.1, 0.05, 0.05]), dtype=torch.long)
income_missing = income.clone()
income_missing[torch.from_numpy(rng.rand(n) < 0.1)] = float("nan")
logit = 0.04 * (age - 40) + 0.8 * (torch.log(income) - 10) + torch.tensor([0.5, -0.3, 0.2, 0, -0.5, 1.0, -1.0])[city]
label = torch.from_numpy((rng.rand(n) < torch.sigmoid(logit).numpy()).astype(np.float32))

# Quantile binning.
qs = torch.linspace(0, 1, 6)[1:-1]
age_edges = torch.quantile(age, qs)
age_edges_nearest = torch.quantile(age, qs, interpolation="nearest")
income_edges = torch.nanquantile(income_missing, qs)
age_bin = torch.bucketize(age, age_edges)
age_bin_right = torch.bucketize(age, age_edges, right=True)
income_bin = torch.bucketize(torch.nan_to_num(income_missing, nan=float(income_edges[1])), income_edges)

# searchsorted with an unsorted table and its sorter.
table = age_edges[torch.tensor([2, 0, 3, 1])]
sorter = torch.argsort(table)
pos = torch.searchsorted(table, age, side="right", sorter=sorter)

# Target encoding with smoothing.
uniq, inverse, counts = torch.unique(city, return_inverse=True, return_counts=True)
sums = torch.zeros(len(uniq)).index_add_(0, inverse, label)
prior, k = label.mean(), 20.0
encoding = ((sums + k * prior) / (counts + k))[inverse]

# Run lengths of the sorted ages and frequency-rank encoding.
vals, run_counts = torch.unique_consecutive(torch.sort(age).values, return_counts=True)
freq = torch.bincount(city, minlength=7)
rank_of_city = torch.argsort(torch.argsort(freq, descending=True, stable=True))

# Histograms.
h = torch.histc(age, bins=10, min=0, max=100)
hist, edges = torch.histogram(income.log().double(), bins=torch.linspace(8, 12, 9, dtype=torch.float64), density=True)

# Logistic regression on one-hot + binned features, then calibration.
features = torch.cat([F.one_hot(age_bin, 5), F.one_hot(income_bin, 5), F.one_hot(city, 7),
                      encoding[:, None]], 1).float()
torch.manual_seed(0)
model = torch.nn.Linear(features.shape[1], 1)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=30, line_search_fn="strong_wolfe")
losses = []


def closure():
    opt.zero_grad()
    loss = F.binary_cross_entropy_with_logits(model(features).squeeze(1), label)
    loss.backward()
    losses.append(loss.item())
    return loss


opt.step(closure)
with torch.no_grad():
    prob = torch.sigmoid(model(features).squeeze(1))
bin_edges = torch.linspace(0, 1, 11)[1:-1]
conf_bin = torch.bucketize(prob, bin_edges)
bin_count = torch.bincount(conf_bin, minlength=10).float()
bin_conf = torch.bincount(conf_bin, weights=prob, minlength=10)
bin_acc = torch.bincount(conf_bin, weights=label, minlength=10)
ece = ((bin_conf - bin_acc).abs().sum() / n).item()

# Drawdown, order statistics, Spearman.
equity = torch.cumsum(torch.tensor(rng.randn(100) * 0.01 + 0.001, dtype=torch.float64), 0)
peak, peak_idx = torch.cummax(equity, 0)
trough, _ = torch.cummin(equity, 0)
kth, kth_idx = torch.kthvalue(age, 50)
mode_val, mode_idx = torch.mode(city)


def ranks(x):
    # stable=True: ages tie, and an unstable sort may order ties as it likes (torch's std::sort vs a stable one).
    return torch.argsort(torch.argsort(x, stable=True)).double()


spearman = torch.corrcoef(torch.stack([ranks(age), ranks(prob)]))[0, 1]
print(f"age_edges_sum={age_edges.sum().item():.5f}")
print(f"age_edges_nearest_sum={age_edges_nearest.sum().item():.5f}")
print(f"income_edges_1={income_edges[1].item():.3f}")
print(f"bin_diff={(age_bin != age_bin_right).sum().item()}")
print(f"bin_hist={int((torch.bincount(age_bin) * torch.arange(1, 6)).sum())}")
print(f"pos_sum={pos.sum().item()}")
print(f"encoding_mean={encoding.mean().item():.6f}")
print(f"n_unique_age={len(vals)}")
print(f"longest_run={run_counts.max().item()}")
print(f"city_rank_code={int((rank_of_city * torch.arange(7)).sum())}")
print(f"histc_peak={h.max().item():.1f}")
print(f"hist_density_max={hist.max().item():.6f}")
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"ece={ece:.6f}")
print(f"empty_bins={(bin_count == 0).sum().item()}")
print(f"max_drawdown={(peak - equity).max().item():.8f}")
print(f"peak_idx_last={peak_idx[-1].item()}")
print(f"trough_last={trough[-1].item():.8f}")
print(f"kth={kth.item():.1f}")
print(f"mode={mode_val.item()}")
print(f"spearman={spearman.item():.6f}")
