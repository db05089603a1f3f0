"""A Neural Turing Machine on the copy task (after loudinthecloud/pytorch-ntm and MarkPKCollier/NeuralTuringMachine):
content addressing by F.cosine_similarity between a key and every memory row (broadcast over the batch), key
strength through softplus, interpolation with the previous weighting, circular shift by a 3-tap convolution
written with torch.cat wrap-around and F.conv1d on a circularly padded weighting (F.pad(mode="circular")),
sharpening by pow/sum, erase/add memory writes with torch.ger-style outer products (torch.einsum and
Tensor.outer), an LSTM controller, memory initialised from a buffer and expanded per batch with .clone(),
RMSprop with momentum and clip_grad_norm_, and the bits-per-sequence cost with BCE-with-logits.

Sequences from NumPy, weights from torch.manual_seed: every metric must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N, M = 12, 6  # memory rows, row width


def address(key, beta, gate, shift, gamma, w_prev, memory):
    sim = F.cosine_similarity(memory + 1e-16, key.unsqueeze(1) + 1e-16, dim=-1)
    w_c = F.softmax(beta * sim, dim=1)
    w_g = gate * w_c + (1 - gate) * w_prev
    padded = F.pad(w_g.unsqueeze(1), (1, 1), mode="circular")  # B, 1, N + 2
    w_s = torch.cat([F.conv1d(padded[i:i + 1], shift[i].flip(0).view(1, 1, 3)) for i in range(len(shift))]).squeeze(1)
    w = w_s ** gamma
    return w / (w.sum(1, keepdim=True) + 1e-16)


class Head(nn.Module):
    def __init__(self, ctrl, write):
        super().__init__()
        self.write = write
        self.fc = nn.Linear(ctrl, M + 1 + 1 + 3 + 1 + (2 * M if write else 0))

    def forward(self, h, w_prev, memory):
        o = self.fc(h)
        k, beta, g, s, gamma = torch.split(o[:, :M + 6], [M, 1, 1, 3, 1], dim=1)
        w = address(torch.tanh(k), F.softplus(beta), torch.sigmoid(g), F.softmax(s, 1), 1 + F.softplus(gamma),
                    w_prev, memory)
        if self.write:
            e, a = torch.sigmoid(o[:, M + 6:2 * M + 6]), torch.tanh(o[:, 2 * M + 6:])
            erase = torch.einsum("bn,bm->bnm", w, e)
            memory = memory * (1 - erase) + torch.stack([wi.outer(ai) for wi, ai in zip(w, a)])
        return w, memory


class NTM(nn.Module):
    def __init__(self, n_in=5, n_out=4, ctrl=24):
        super().__init__()
        self.controller = nn.LSTMCell(n_in + M, ctrl)
        self.read_head, self.write_head = Head(ctrl, False), Head(ctrl, True)
        self.out = nn.Linear(ctrl + M, n_out)
        self.register_buffer("mem_bias", torch.full((N, M), 1e-6))
        self.ctrl = ctrl

    def forward(self, seq):
        T, B, _ = seq.shape
        memory = self.mem_bias.expand(B, N, M).clone()
        h = c = torch.zeros(B, self.ctrl)
        read = torch.zeros(B, M)
        w_r = w_w = F.one_hot(torch.zeros(B, dtype=torch.long), N).float()
        outs = []
        for t in range(T):
            h, c = self.controller(torch.cat([seq[t], read], 1), (h, c))
            w_r, _ = self.read_head(h, w_r, memory)
            w_w, memory = self.write_head(h, w_w, memory)
            read = torch.bmm(w_r.unsqueeze(1), memory).squeeze(1)
            outs.append(self.out(torch.cat([h, read], 1)))
        return torch.stack(outs), w_w


def copy_batch(rng, B=8, L=4, width=4):
    bits = rng.randint(0, 2, (L, B, width)).astype(np.float32)
    inp = np.zeros((2 * L + 1, B, width + 1), np.float32)
    inp[:L, :, :width] = bits
    inp[L, :, width] = 1.0  # delimiter
    return torch.from_numpy(inp), torch.from_numpy(bits)


torch.manual_seed(0)
ntm = NTM()
opt = torch.optim.RMSprop(ntm.parameters(), lr=3e-3, momentum=0.9, alpha=0.95)
rng = np.random.RandomState(0)
losses, costs = [], []
for step in range(12):
    inp, target = copy_batch(rng)
    out, w = ntm(inp)
    pred = out[-target.shape[0]:]
    loss = F.binary_cross_entropy_with_logits(pred, target)
    opt.zero_grad()
    loss.backward()
    gn = nn.utils.clip_grad_norm_(ntm.parameters(), 10.0)
    opt.step()
    losses.append(loss.item())
    costs.append(((pred.detach() > 0).float() - target).abs().sum().item() / target.shape[1])
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"bit_cost_last={costs[-1]:.6f}")
print(f"grad_norm_last={gn.item():.6f}")
print(f"write_weight_entropy={-(w * (w + 1e-12).log()).sum(1).mean().item():.6f}")
