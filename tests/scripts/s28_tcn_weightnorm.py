"""Temporal convolutional network (after locuslab/TCN's tcn.py, Bai et al. 2018) on the adding problem: dilated
causal Conv1d blocks with Chomp1d, residual 1x1 downsampling, nn.utils.weight_norm on the legacy blocks and
nn.utils.parametrizations.weight_norm on the new ones (their g/v and original0/original1 parameters, state_dict
keys and remove), gradient clipping by value, and a WaveNet-style causal padding via F.pad.

Data and weights come from NumPy; there is no dropout at train time (p=0), so metrics must match torch.
"""
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations, parametrize

warnings.filterwarnings("ignore")  # torch.nn.utils.weight_norm is deprecated


class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.0, legacy=True):
        super().__init__()
        wn = nn.utils.weight_norm if legacy else parametrizations.weight_norm
        self.conv1 = wn(nn.Conv1d(n_inputs, n_outputs, kernel_size, stride=stride, padding=padding, dilation=dilation))
        self.chomp1, self.relu1, self.dropout1 = Chomp1d(padding), nn.ReLU(), nn.Dropout(dropout)
        self.conv2 = wn(nn.Conv1d(n_outputs, n_outputs, kernel_size, stride=stride, padding=padding, dilation=dilation))
        self.chomp2, self.relu2, self.dropout2 = Chomp1d(padding), nn.ReLU(), nn.Dropout(dropout)
        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, num_channels, kernel_size=2, dropout=0.0):
        super().__init__()
        layers = []
        for i in range(len(num_channels)):
            dilation_size = 2 ** i
            in_channels = num_inputs if i == 0 else num_channels[i - 1]
            layers += [TemporalBlock(in_channels, num_channels[i], kernel_size, stride=1, dilation=dilation_size,
                                     padding=(kernel_size - 1) * dilation_size, dropout=dropout, legacy=(i % 2 == 0))]
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


class CausalConv1d(nn.Conv1d):
    """WaveNet's causal conv: left padding only."""

    def forward(self, x):
        pad = (self.kernel_size[0] - 1) * self.dilation[0]
        return super().forward(F.pad(x, (pad, 0)))


class TCN(nn.Module):
    def __init__(self, input_size, output_size, num_channels, kernel_size):
        super().__init__()
        self.tcn = TemporalConvNet(input_size, num_channels, kernel_size=kernel_size)
        self.causal = CausalConv1d(num_channels[-1], num_channels[-1], 3, dilation=2)
        self.linear = nn.Linear(num_channels[-1], output_size)

    def forward(self, x):
        y1 = F.relu(self.causal(self.tcn(x)))
        return self.linear(y1[:, :, -1])


def data_generator(rng, N, seq_length):
    X_num = rng.rand(N, 1, seq_length)
    X_mask = np.zeros([N, 1, seq_length])
    Y = np.zeros([N, 1])
    for i in range(N):
        positions = rng.choice(seq_length, size=2, replace=False)
        X_mask[i, 0, positions] = 1
        Y[i, 0] = X_num[i, 0, positions].sum()
    X = np.concatenate((X_num, X_mask), axis=1)
    return torch.from_numpy(X.astype(np.float32)), torch.from_numpy(Y.astype(np.float32))


rng = np.random.RandomState(0)
model = TCN(2, 1, [8, 8, 8], kernel_size=3)
with torch.no_grad():
    for n, p in model.named_parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.3).astype(np.float32)))
print("param names:", [n for n, _ in model.named_parameters()][:8])
print("state keys:", [k for k in model.state_dict() if "network.1.conv1" in k])
X_train, Y_train = data_generator(rng, 64, 24)
X_test, Y_test = data_generator(rng, 32, 24)
optimizer = torch.optim.Adam(model.parameters(), lr=4e-3)
losses = []
for epoch in range(6):
    for i in range(0, 64, 16):
        x, y = X_train[i:i + 16], Y_train[i:i + 16]
        optimizer.zero_grad()
        output = model(x)
        loss = F.mse_loss(output, y)
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        losses.append(loss.item())
model.eval()
with torch.no_grad():
    test_loss = F.mse_loss(model(X_test), Y_test).item()
    blk = model.tcn.network[1].conv1
    w_param = blk.weight
    norms = torch.linalg.vector_norm(w_param, dim=(1, 2))
    g = blk.parametrizations.weight.original0
    legacy = model.tcn.network[0].conv1
    legacy_w = torch._weight_norm(legacy.weight_v, legacy.weight_g, 0)
    print(f"legacy_recompute_diff_small={int((legacy_w - legacy.weight).abs().max().item() < 1e-6)}")
    print(f"norm_matches_g={int(torch.allclose(norms, g.abs().flatten(), atol=1e-5))}")
parametrize.remove_parametrizations(blk, "weight", leave_parametrized=True)
nn.utils.remove_weight_norm(legacy)
with torch.no_grad():
    test_after_remove = F.mse_loss(model(X_test), Y_test).item()
print("after remove:", sorted(k for k in model.state_dict() if k.startswith("tcn.network.0.conv1") or
                              k.startswith("tcn.network.1.conv1")))
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_12={losses[12]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"test_loss={test_loss:.6f}")
print(f"test_after_remove={test_after_remove:.6f}")
print(f"g_sum={g.sum().item():.6f}")
