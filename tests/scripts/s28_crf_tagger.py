"""BiLSTM-CRF sequence tagger (after kmkurn/pytorch-crf and the PyTorch "Advanced: Making Dynamic Decisions"
tutorial): packed bidirectional LSTM over padded sentences, a linear-chain CRF whose partition function is the
forward algorithm with torch.logsumexp and torch.where on the mask, the gold-path score by gather/indexing along
time, Viterbi decoding with max over broadcast scores and a backtrace through argmax history, and token-level
accuracy on the unpadded positions.

Weights and data come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence


class CRF(nn.Module):
    def __init__(self, num_tags):
        super().__init__()
        self.num_tags = num_tags
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)

    def forward(self, emissions, tags, mask, reduction="mean"):
        emissions, tags, mask = emissions.transpose(0, 1), tags.transpose(0, 1), mask.transpose(0, 1)
        numerator = self._compute_score(emissions, tags, mask)
        denominator = self._compute_normalizer(emissions, mask)
        llh = numerator - denominator
        return llh.sum() / mask.float().sum() if reduction == "token_mean" else llh.mean()

    def _compute_score(self, emissions, tags, mask):
        seq_length, batch_size = tags.shape
        mask = mask.type_as(emissions)
        score = self.start_transitions[tags[0]]
        score += emissions[0, torch.arange(batch_size), tags[0]]
        for i in range(1, seq_length):
            score += self.transitions[tags[i - 1], tags[i]] * mask[i]
            score += emissions[i, torch.arange(batch_size), tags[i]] * mask[i]
        seq_ends = mask.long().sum(dim=0) - 1
        last_tags = tags[seq_ends, torch.arange(batch_size)]
        score += self.end_transitions[last_tags]
        return score

    def _compute_normalizer(self, emissions, mask):
        seq_length = emissions.size(0)
        score = self.start_transitions + emissions[0]
        for i in range(1, seq_length):
            broadcast_score = score.unsqueeze(2)
            broadcast_emissions = emissions[i].unsqueeze(1)
            next_score = broadcast_score + self.transitions + broadcast_emissions
            next_score = torch.logsumexp(next_score, dim=1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)
        score += self.end_transitions
        return torch.logsumexp(score, dim=1)

    def decode(self, emissions, mask):
        emissions, mask = emissions.transpose(0, 1), mask.transpose(0, 1)
        seq_length, batch_size = mask.shape
        score = self.start_transitions + emissions[0]
        history = []
        for i in range(1, seq_length):
            next_score = score.unsqueeze(2) + self.transitions + emissions[i].unsqueeze(1)
            next_score, indices = next_score.max(dim=1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)
            history.append(indices)
        score += self.end_transitions
        seq_ends = mask.long().sum(dim=0) - 1
        best_tags_list = []
        for idx in range(batch_size):
            _, best_last_tag = score[idx].max(dim=0)
            best_tags = [best_last_tag.item()]
            for hist in reversed(history[: seq_ends[idx]]):
                best_last_tag = hist[idx][best_tags[-1]]
                best_tags.append(best_last_tag.item())
            best_tags.reverse()
            best_tags_list.append(best_tags)
        return best_tags_list


class BiLSTMCRF(nn.Module):
    def __init__(self, vocab, n_tags, emb=16, hidden=16):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
        self.lstm = nn.LSTM(emb, hidden // 2, num_layers=1, bidirectional=True, batch_first=True)
        self.hidden2tag = nn.Linear(hidden, n_tags)
        self.crf = CRF(n_tags)

    def emissions(self, words, lengths):
        packed = pack_padded_sequence(self.embedding(words), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=words.size(1))
        return self.hidden2tag(out)

    def loss(self, words, tags, lengths):
        mask = words != 0
        return -self.crf(self.emissions(words, lengths), tags, mask)


rng = np.random.RandomState(0)
vocab, n_tags = 30, 5
sentences, tag_seqs = [], []
for _ in range(24):
    n = rng.randint(3, 11)
    words = rng.randint(1, vocab, n)
    tags = (words % 4) + (np.roll(words, 1) % 2) * (np.arange(n) > 0)  # depends on the previous word
    sentences.append(torch.from_numpy(words))
    tag_seqs.append(torch.from_numpy(np.minimum(tags, n_tags - 1)))
lengths = torch.tensor([len(s) for s in sentences])
words = pad_sequence(sentences, batch_first=True, padding_value=0)
tags = pad_sequence(tag_seqs, batch_first=True, padding_value=0)
model = BiLSTMCRF(vocab, n_tags)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.2).astype(np.float32)))
    model.embedding.weight[0].zero_()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
losses = []
for epoch in range(20):
    for i in range(0, 24, 8):
        loss = model.loss(words[i:i + 8], tags[i:i + 8], lengths[i:i + 8])
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        losses.append(loss.item())
model.eval()
with torch.no_grad():
    mask = words != 0
    best = model.crf.decode(model.emissions(words, lengths), mask)
    flat_pred = torch.tensor([t for seq in best for t in seq])
    flat_gold = tags[mask]
    token_nll = -model.crf(model.emissions(words, lengths), tags, mask, reduction="token_mean").item()
assert [len(b) for b in best] == lengths.tolist()
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_30={losses[30]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"token_nll={token_nll:.6f}")
print(f"accuracy={(flat_pred == flat_gold).float().mean().item():.6f}")
print(f"decode_checksum={sum((i + 1) * t for i, t in enumerate(flat_pred.tolist()))}")
print(f"transitions_norm={model.crf.transitions.norm().item():.6f}")
