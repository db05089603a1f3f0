"""Streaming data loading as large-corpus training code writes it (after torchtext-era pipelines and webdataset-style
loaders, in plain torch.utils.data): an IterableDataset that shards a token stream across workers with
get_worker_info() and packs fixed-length blocks, a ChainDataset of two streams, a shuffle buffer seeded from
torch.Generator, a map-style TensorDataset with SubsetRandomSampler / SequentialSampler, a custom Sampler yielding
length-sorted chunks and a BatchSampler around it, default_collate on dicts of tensors and namedtuples, a custom
collate_fn padding with pad_sequence(padding_value=...), DataLoader(num_workers=2) with worker_init_fn,
drop_last, and a tiny bag-of-embeddings language model trained on the stream.

The generator seeds drive every shuffle on torch's CPU stream (which jitorch reproduces); worker order is fixed by
DataLoader's round robin, so every metric must match torch.
"""
import collections
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import (BatchSampler, ChainDataset, DataLoader, IterableDataset, Sampler, SequentialSampler,
                              SubsetRandomSampler, TensorDataset, default_collate, get_worker_info)

Pair = collections.namedtuple("Pair", ["x", "y"])
rng = np.random.RandomState(0)
corpus = rng.randint(1, 30, 2000).tolist()


class PackedStream(IterableDataset):
    def __init__(self, tokens, block):
        self.tokens, self.block = tokens, block

    def __iter__(self):
        info = get_worker_info()
        n_blocks = (len(self.tokens) - 1) // self.block
        ids = range(n_blocks) if info is None else range(info.id, n_blocks, info.num_workers)
        for b in ids:
            chunk = torch.tensor(self.tokens[b * self.block: b * self.block + self.block + 1])
            yield {"input": chunk[:-1], "target": chunk[1:]}


class ShuffleBuffer(IterableDataset):
    def __init__(self, source, size, seed):
        self.source, self.size, self.seed = source, size, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        buf = []
        for item in self.source:
            buf.append(item)
            if len(buf) >= self.size:
                yield buf.pop(int(torch.randint(len(buf), (1,), generator=g)))
        while buf:
            yield buf.pop(int(torch.randint(len(buf), (1,), generator=g)))


class ChunkedLengthSampler(Sampler):
    def __init__(self, lengths, chunk, generator):
        self.lengths, self.chunk, self.generator = lengths, chunk, generator

    def __iter__(self):
        order = torch.randperm(len(self.lengths), generator=self.generator).tolist()
        for i in range(0, len(order), self.chunk):
            yield from sorted(order[i:i + self.chunk], key=lambda j: self.lengths[j])

    def __len__(self):
        return len(self.lengths)


def pad_collate(batch):
    seqs = [b[0] for b in batch]
    return pad_sequence(seqs, batch_first=True, padding_value=0), torch.tensor([len(s) for s in seqs]), \
        torch.stack([b[1] for b in batch])


def seed_worker(worker_id):
    np.random.seed(torch.initial_seed() % 2 ** 32)


class BagLM(nn.Module):
    def __init__(self, vocab=30, dim=16, ctx=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.ctx = ctx
        self.out = nn.Linear(dim, vocab)

    def forward(self, x):  # mean of the last `ctx` token embeddings, causally
        e = F.pad(self.emb(x), (0, 0, self.ctx - 1, 0))
        windows = e.unfold(1, self.ctx, 1)  # B, T, dim, ctx
        return self.out(windows.mean(-1))


torch.manual_seed(0)
model = BagLM()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
stream = ChainDataset([PackedStream(corpus[:1000], 24), PackedStream(corpus[1000:], 24)])
loader = DataLoader(ShuffleBuffer(stream, 8, seed=5), batch_size=8, drop_last=True)
losses = []
for epoch in range(2):
    for batch in loader:
        logits = model(batch["input"])
        loss = F.cross_entropy(logits.transpose(1, 2), batch["target"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

worker_loader = DataLoader(PackedStream(corpus, 24), batch_size=4, num_workers=2, worker_init_fn=seed_worker)
worker_firsts = [int(b["input"][0, 0]) for b in worker_loader]

lengths = [3 + (i * 7) % 9 for i in range(40)]
seqs = [torch.tensor(rng.randint(1, 30, L)) for L in lengths]
labels = torch.tensor([s.sum().item() % 2 for s in seqs])
g = torch.Generator().manual_seed(11)
batch_sampler = BatchSampler(ChunkedLengthSampler(lengths, 10, g), batch_size=5, drop_last=False)
padded_lengths = []
for x, lens, yb in DataLoader(list(zip(seqs, labels)), batch_sampler=batch_sampler, collate_fn=pad_collate):
    padded_lengths.append(x.shape[1] * len(lens) - int(lens.sum()))

ds = TensorDataset(torch.arange(20.0).view(10, 2), torch.arange(10))
sub = DataLoader(ds, batch_size=3,
                 sampler=SubsetRandomSampler(list(range(0, 10, 2)), generator=torch.Generator().manual_seed(3)))
sub_order = [int(v) for _, yb in sub for v in yb]
seq = [int(v) for v in next(iter(DataLoader(ds, batch_size=10, sampler=SequentialSampler(ds))))[1]]
collated = default_collate([Pair(torch.ones(2) * i, i) for i in range(3)])
nested = default_collate([{"a": np.float32(i), "b": [i, i + 1]} for i in range(4)])
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"steps={len(losses)}")
print(f"worker_code={sum(v * (i + 1) for i, v in enumerate(worker_firsts))}")
print(f"padding_waste={sum(padded_lengths)}")
print(f"sub_order_code={sum(v * 10 ** i for i, v in enumerate(sub_order))}")
print(f"seq_ok={float(seq == list(range(10)))}")
print(f"namedtuple_ok={float(type(collated).__name__ == 'Pair' and collated.x.shape == (3, 2))}")
print(f"nested_sum={float(nested['a'].sum() + nested['b'][1].sum()):.1f}")
print(f"nested_dtype_ok={float(nested['a'].dtype == torch.float32 and nested['b'][0].dtype == torch.int64)}")
print(f"ppl={math.exp(losses[-1]):.6f}")
