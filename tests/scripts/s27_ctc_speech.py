"""Toy speech recognizer trained with CTC (after the DeepSpeech / torchaudio recipes): frames synthesized from
label sequences with NumPy (each label held for a random number of frames, blanks between), a Conv1d front end,
a bidirectional LSTM over pack_padded_sequence, log_softmax over (T, N, C), nn.CTCLoss with per-utterance input
and target lengths (concatenated 1-D targets for one batch, padded 2-D for another, zero_infinity on an impossible
alignment), and greedy CTC decoding scored by edit distance.

Deterministic: weights from NumPy, no dropout; metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

rng = np.random.RandomState(0)
N_LABELS, BLANK, FEAT = 5, 0, 8  # labels 1..5, blank 0
PROTOS = rng.randn(N_LABELS + 1, FEAT).astype(np.float32) * 2


def synth(n):
    feats, targets, in_lens, tgt_lens = [], [], [], []
    for _ in range(n):
        L = rng.randint(2, 6)
        labels = rng.randint(1, N_LABELS + 1, size=L)
        frames = []
        for lab in labels:
            frames += [BLANK] * rng.randint(0, 3) + [lab] * rng.randint(1, 4)
        frames += [BLANK] * rng.randint(1, 3)
        x = PROTOS[frames] + 0.3 * rng.randn(len(frames), FEAT).astype(np.float32)
        feats.append(torch.from_numpy(x))
        targets.append(torch.from_numpy(labels))
        in_lens.append(len(frames))
        tgt_lens.append(L)
    return feats, targets, torch.tensor(in_lens), torch.tensor(tgt_lens)


class Recognizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(FEAT, 16, kernel_size=3, padding=1)
        self.rnn = nn.LSTM(16, 24, num_layers=2, bidirectional=True)
        self.fc = nn.Linear(48, N_LABELS + 1)

    def forward(self, x, lengths):  # x: (N, T, F)
        x = F.relu(self.conv(x.transpose(1, 2))).permute(2, 0, 1)  # (T, N, 16)
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out)
        return F.log_softmax(self.fc(out), dim=2)  # (T, N, C)


def greedy_decode(log_probs, lengths):
    best = log_probs.argmax(2).t()  # (N, T)
    hyps = []
    for seq, L in zip(best.tolist(), lengths.tolist()):
        out, prev = [], BLANK
        for s in seq[:L]:
            if s != prev and s != BLANK:
                out.append(s)
            prev = s
        hyps.append(out)
    return hyps


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return d[len(b)]


model = Recognizer()
init = np.random.RandomState(7)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy(init.uniform(-0.2, 0.2, p.shape).astype(np.float32)))
ctc = nn.CTCLoss(blank=BLANK, reduction="mean", zero_infinity=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)

losses = []
for step in range(80):
    feats, targets, in_lens, tgt_lens = synth(12)
    x = nn.utils.rnn.pad_sequence(feats, batch_first=True)
    log_probs = model(x, in_lens)
    if step % 2 == 0:
        tgt = torch.cat(targets)  # 1-D concatenated targets
    else:
        tgt = nn.utils.rnn.pad_sequence(targets, batch_first=True)  # (N, S) padded targets
    loss = ctc(log_probs, tgt, in_lens, tgt_lens)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    losses.append(loss.item())

with torch.no_grad():
    feats, targets, in_lens, tgt_lens = synth(24)
    x = nn.utils.rnn.pad_sequence(feats, batch_first=True)
    log_probs = model(x, in_lens)
    per_utt = F.ctc_loss(log_probs, torch.cat(targets), in_lens, tgt_lens, reduction="none")
    hyps = greedy_decode(log_probs, in_lens)
    errors = sum(edit_distance(h, t.tolist()) for h, t in zip(hyps, targets))
    cer = errors / tgt_lens.sum().item()

# an impossible alignment (target longer than the input) is infinite; zero_infinity zeroes loss and gradient
lp = torch.from_numpy(rng.randn(3, 2, N_LABELS + 1).astype(np.float32)).log_softmax(2).requires_grad_()
tg = torch.tensor([[1, 2, 3, 4], [1, 1, 0, 0]])
raw = F.ctc_loss(lp, tg, torch.tensor([3, 3]), torch.tensor([4, 2]), reduction="none")
zl = F.ctc_loss(lp, tg, torch.tensor([3, 3]), torch.tensor([4, 2]), reduction="sum", zero_infinity=True)
zl.backward()

print(f"initial_loss={losses[0]:.6f}")
print(f"loss_20={losses[20]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"eval_loss_sum={per_utt.sum().item():.6f}")
print(f"eval_loss_max={per_utt.max().item():.6f}")
print(f"cer={cer:.6f}")
print(f"impossible_is_inf={int(torch.isinf(raw[0]).item())}")
print(f"possible_loss={raw[1].item():.6f}")
print(f"zero_inf_loss={zl.item():.6f}")
print(f"zero_inf_grad_norm={lp.grad.norm().item():.6f}")
print(f"zero_inf_grad_row0={lp.grad[:, 0].abs().sum().item():.6f}")
