"""A data pipeline the way training repos build one: a map-style Dataset returning dicts, random_split / Subset /
ConcatDataset, a custom length-bucketing BatchSampler, a padding collate_fn, DataLoader with num_workers=2,
persistent_workers, worker_init_fn and get_worker_info, an IterableDataset sharded across workers, and
WeightedRandomSampler.

Everything printed is independent of the order the backend's RNG picks, so the metrics match under every backend.
"""
import math
from collections import namedtuple

import numpy as np
import torch
from torch.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, Sampler,
                              SequentialSampler, Subset, WeightedRandomSampler, default_collate, get_worker_info,
                              random_split)

Pair = namedtuple("Pair", ["features", "target"])


class Sequences(Dataset):
    """Variable-length integer sequences; item i has length 3 + i % 5."""

    def __init__(self, n, offset=0):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        length = 3 + i % 5
        tokens = torch.arange(length) + self.offset + i
        return {"tokens": tokens, "length": length, "label": torch.tensor(float(i % 2))}


class BucketBatchSampler(Sampler):
    """Batches of indices with similar lengths (sorted by length inside chunks), like NLP bucketing."""

    def __init__(self, lengths, batch_size):
        self.lengths, self.batch_size = lengths, batch_size

    def __iter__(self):
        order = sorted(range(len(self.lengths)), key=lambda i: (self.lengths[i], i))
        for start in range(0, len(order), self.batch_size):
            yield order[start:start + self.batch_size]

    def __len__(self):
        return math.ceil(len(self.lengths) / self.batch_size)


def pad_collate(batch):
    lengths = torch.tensor([b["length"] for b in batch])
    tokens = torch.nn.utils.rnn.pad_sequence([b["tokens"] for b in batch], batch_first=True, padding_value=-1)
    mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    return {"tokens": tokens, "mask": mask, "label": torch.stack([b["label"] for b in batch])}


def seed_worker(worker_id):
    info = get_worker_info()
    assert info is not None and info.id == worker_id and info.num_workers == 2
    np.random.seed(1000 + worker_id)


class Shards(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(wid, self.n, nw):
            yield Pair(torch.full((2,), float(i)), i * i)


if __name__ == "__main__":
    full = ConcatDataset([Sequences(30), Sequences(20, offset=100)])
    assert len(full) == 50 and full[35]["tokens"][0].item() == 105
    train, val = random_split(full, [0.8, 0.2], generator=torch.Generator().manual_seed(42))
    assert len(train) == 40 and len(val) == 10
    assert sorted(train.indices + val.indices) == list(range(50))
    head = Subset(full, range(0, 50, 5))

    lengths = [full[i]["length"] for i in range(len(full))]
    loader = DataLoader(full, batch_sampler=BucketBatchSampler(lengths, 8), collate_fn=pad_collate,
                        num_workers=2, persistent_workers=True, worker_init_fn=seed_worker, pin_memory=False)
    for epoch in range(2):  # persistent workers serve both epochs
        token_sum, pad_count, label_sum, batches = 0, 0, 0.0, 0
        for batch in loader:
            token_sum += batch["tokens"][batch["mask"]].sum().item()
            pad_count += (~batch["mask"]).sum().item()
            label_sum += batch["label"].sum().item()
            batches += 1
    print(f"bucket_batches={batches}")
    print(f"bucket_token_sum={token_sum}")
    print(f"bucket_pad_count={pad_count}")
    print(f"label_sum={label_sum:.1f}")

    # Shuffled, split-up training set: the totals do not depend on which RNG shuffled it.
    train_loader = DataLoader(train, batch_size=6, shuffle=True, drop_last=True, collate_fn=pad_collate,
                              generator=torch.Generator().manual_seed(0))
    seen = sum(b["label"].numel() for b in train_loader)
    print(f"train_seen={seen}")
    print(f"train_batches={len(train_loader)}")
    head_loader = DataLoader(head, batch_size=4, sampler=SequentialSampler(head), collate_fn=pad_collate)
    print(f"head_first_tokens={sum(b['tokens'][:, 0].sum().item() for b in head_loader)}")

    # default_collate on dicts of numbers and namedtuples, as the default DataLoader does.
    collated = default_collate([{"x": 1, "y": np.float32(2.5), "z": torch.ones(2)} for _ in range(3)])
    print(f"collate_dtypes_ok={int(collated['x'].dtype == torch.int64 and collated['y'].dtype == torch.float32)}")
    stream = DataLoader(Shards(10), batch_size=2, num_workers=2)
    total_feat, total_target, nb = 0.0, 0, 0
    for pair in stream:
        assert isinstance(pair, Pair) and pair.features.shape[1:] == (2,)
        total_feat += pair.features.sum().item()
        total_target += int(pair.target.sum())
        nb += 1
    print(f"stream_batches={nb}")
    print(f"stream_feature_sum={total_feat:.1f}")
    print(f"stream_target_sum={total_target}")

    weights = [0.0 if i % 3 == 0 else 1.0 for i in range(len(full))]
    sampler = WeightedRandomSampler(weights, num_samples=40, replacement=True)
    drawn = list(sampler)
    print(f"weighted_zero_weight_drawn={sum(1 for i in drawn if i % 3 == 0)}")
    print(f"weighted_len={len(drawn)}")
    batches = list(BatchSampler(SequentialSampler(range(10)), batch_size=4, drop_last=False))
    print(f"batch_sampler_last={len(batches[-1])}")
