"""Word-level LSTM language model on a tiny corpus (after pytorch/examples word_language_model)."""
import math

import torch
import torch.nn as nn

torch.manual_seed(1111)
corpus = ("the cat sat on the mat . the dog sat on the log . the cat saw the dog . "
          "a dog and a cat sat on a mat . the log was on the mat . ") * 8
words = corpus.split()
vocab = sorted(set(words))
word2idx = {w: i for i, w in enumerate(vocab)}
ids = torch.tensor([word2idx[w] for w in words], dtype=torch.long)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).contiguous()  # batch_first: (bsz, seq)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        return decoded.view(-1, decoded.size(-1)), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


bsz, bptt = 4, 8
train_data = batchify(ids, bsz)
model = RNNModel(len(vocab), 16, 32, 2)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
epoch_losses = []
for epoch in range(1, 11):
    model.train()
    total_loss, nb = 0.0, 0
    hidden = model.init_hidden(bsz)
    for i in range(0, train_data.size(1) - 1, bptt):
        seq_len = min(bptt, train_data.size(1) - 1 - i)
        data = train_data[:, i:i + seq_len]
        targets = train_data[:, i + 1:i + 1 + seq_len].reshape(-1)
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        total_loss += loss.item()
        nb += 1
    scheduler.step()
    epoch_losses.append(total_loss / nb)
    print(f"| epoch {epoch:3d} | lr {scheduler.get_last_lr()[0]:.3f} | loss {epoch_losses[-1]:5.2f} "
          f"| ppl {math.exp(epoch_losses[-1]):8.2f}")

model.eval()
with torch.no_grad():
    hidden = model.init_hidden(1)
    inp = torch.tensor([[word2idx["the"]]])
    out = []
    for _ in range(6):
        logits, hidden = model(inp, hidden)
        idx = torch.multinomial(logits.squeeze().div(0.8).exp(), 1)[0]
        inp.fill_(idx)
        out.append(vocab[idx])
print("sample:", " ".join(out))
print(f"initial_loss={epoch_losses[0]:.6f}")
print(f"final_loss={epoch_losses[-1]:.6f}")
