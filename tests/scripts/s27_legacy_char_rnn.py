"""A char-RNN written in the 2017 style many research repos still carry (after spro/char-rnn.pytorch and the old
word_language_model): autograd.Variable wrappers, repackage_hidden by isinstance(h, Variable), volatile=True for
evaluation, torch.LongTensor / FloatTensor constructors, .data arithmetic for manual SGD, the deprecated
clip_grad_norm, F.softmax without dim, an explicit GRUCell unrolled step by step with teacher forcing.

Deterministic: weights from NumPy, no dropout; metrics must match torch.
"""
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

warnings.simplefilter("ignore")  # the deprecations this style triggers
text = "to be or not to be that is the question whether tis nobler in the mind to suffer " * 4
chars = sorted(set(text))
n_chars = len(chars)


def char_tensor(s):
    tensor = torch.zeros(len(s)).long()
    for c in range(len(s)):
        tensor[c] = chars.index(s[c])
    return Variable(tensor)


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, n_layers=1):
        super(CharRNN, self).__init__()
        self.hidden_size, self.n_layers = hidden_size, n_layers
        self.encoder = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers)
        self.decoder = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden):
        input = self.encoder(input.view(1, -1))
        output, hidden = self.gru(input.view(1, input.size(1), -1), hidden)
        output = self.decoder(output.view(output.size(1), -1))
        return output, hidden

    def init_hidden(self, batch_size):
        return Variable(torch.zeros(self.n_layers, batch_size, self.hidden_size))


def repackage_hidden(h):
    """Wraps hidden states in new Variables, to detach them from their history."""
    if isinstance(h, Variable):
        return Variable(h.data)
    return tuple(repackage_hidden(v) for v in h)


class CellDecoder(nn.Module):
    """A hand-unrolled GRUCell decoder (the tutorial style), trained with teacher forcing."""

    def __init__(self, n, hidden):
        super(CellDecoder, self).__init__()
        self.embed = nn.Embedding(n, hidden)
        self.cell = nn.GRUCell(hidden, hidden)
        self.out = nn.Linear(hidden, n)


def numpy_init(model, seed):
    rng = np.random.RandomState(seed)
    for p in model.parameters():
        p.data = torch.FloatTensor(rng.uniform(-0.2, 0.2, tuple(p.size())).astype(np.float32))


model = CharRNN(n_chars, 32, n_chars, n_layers=2)
numpy_init(model, 0)
criterion = nn.CrossEntropyLoss()
data = char_tensor(text)
chunk_len, batch = 16, 4
starts = np.random.RandomState(1).randint(0, len(text) - chunk_len - 1, size=(30, batch))
losses = []
lr = 0.5
for it in range(30):
    inp = torch.stack([data[s:s + chunk_len] for s in starts[it]], 1)  # (T, B)
    target = torch.stack([data[s + 1:s + 1 + chunk_len] for s in starts[it]], 1)
    hidden = model.init_hidden(batch)
    hidden = repackage_hidden(hidden)
    model.zero_grad()
    loss = 0
    for c in range(chunk_len):
        output, hidden = model(inp[c], hidden)
        loss += criterion(output, target[c])
    loss.backward()
    torch.nn.utils.clip_grad_norm(model.parameters(), 0.5)
    for p in model.parameters():  # manual SGD on .data, as the old examples did
        p.data.add_(p.grad.data, alpha=-lr)
    losses.append(loss.data.item() / chunk_len)

# evaluation with volatile Variables (a no-op now) and greedy generation through softmax without dim
prime = char_tensor("to be")
hidden = model.init_hidden(1)
for p in range(len(prime) - 1):
    _, hidden = model(Variable(prime[p].data.view(1), volatile=True), hidden)
inp = prime[-1].view(1)
generated = []
for _ in range(20):
    output, hidden = model(inp, hidden)
    probs = F.softmax(output.view(-1))
    top_i = probs.data.topk(1)[1][0]
    generated.append(top_i.item())
    inp = Variable(torch.LongTensor([top_i.item()]))
print("generated:", "to be" + "".join(chars[i] for i in generated))

dec = CellDecoder(n_chars, 24)
numpy_init(dec, 2)
opt = torch.optim.Adam(dec.parameters(), lr=0.01)
dec_losses = []
for it in range(20):
    seq = torch.stack([data[s:s + 10] for s in starts[it]], 1)
    h = Variable(torch.zeros(batch, 24))
    loss = 0
    for t in range(9):
        h = dec.cell(dec.embed(seq[t]), h)
        loss = loss + F.cross_entropy(dec.out(h), seq[t + 1])
    opt.zero_grad()
    loss.backward()
    opt.step()
    dec_losses.append(loss.item() / 9)

print(f"initial_loss={losses[0]:.6f}")
print(f"loss_15={losses[15]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"generated_checksum={sum((i + 1) * g for i, g in enumerate(generated))}")
print(f"last_prob={probs.max().item():.6f}")
print(f"decoder_initial={dec_losses[0]:.6f}")
print(f"decoder_final={dec_losses[-1]:.6f}")
