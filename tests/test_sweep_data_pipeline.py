"""Data-pipeline code as research repos write it, run with ``lib=torch`` and ``lib=jitorch`` on the same NumPy data.

A text dataset whose items are dicts of tensors, NumPy arrays, ints and strings; a collate_fn padding with
``pad_sequence(batch_first=True, padding_value=...)`` and building attention masks; a bucketing batch sampler; worker
processes (``num_workers=2``, ``persistent_workers``, ``prefetch_factor``, ``worker_init_fn`` seeding NumPy from
``initial_seed()``); an ``IterableDataset`` sharded by ``get_worker_info()``; ``ConcatDataset``/``Subset``/
``random_split``; ``default_collate`` of named tuples and nested dicts. Deterministic results are compared across the
libraries. Random orders are not: jitorch promises reproducible streams under a seed, not PyTorch's numbers
(``jitorch._random``), so each library is held to reproducibility and to the properties of its draws.
"""
from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, to_numpy

_rng = np.random.default_rng(0)
LENS = _rng.integers(2, 9, 23)
SEQS = [_rng.integers(1, 50, n) for n in LENS]
FEATS = _rng.standard_normal((23, 4)).astype(np.float32)
PAD = -1
Point = collections.namedtuple("Point", "x y")


def _dataset(lib):
    class TextDataset(lib.utils.data.Dataset):
        def __len__(self):
            return len(SEQS)

        def __getitem__(self, i):
            return {"ids": lib.tensor(SEQS[i]), "feat": FEATS[i], "label": i % 3, "text": f"s{i}", "len": len(SEQS[i])}

    return TextDataset()


def _collate(lib):
    def collate(batch):
        ids = lib.nn.utils.rnn.pad_sequence([b["ids"] for b in batch], batch_first=True, padding_value=PAD)
        mask = ids != PAD
        return {"ids": ids.masked_fill(~mask, 0), "mask": mask, "lengths": mask.sum(1),
                "feat": lib.from_numpy(np.stack([b["feat"] for b in batch])),
                "label": lib.tensor([b["label"] for b in batch]), "text": [b["text"] for b in batch]}

    return collate


def _bucket_sampler(lib):
    class BucketBatchSampler(lib.utils.data.Sampler):
        """Batches of similar lengths, the batch order shuffled: little padding, still random."""

        def __init__(self, lengths, batch_size, generator):
            self.lengths, self.batch_size, self.generator = lengths, batch_size, generator

        def __iter__(self):
            order = sorted(lib.randperm(len(self.lengths), generator=self.generator).tolist(),
                           key=lambda i: self.lengths[i])
            batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
            for j in lib.randperm(len(batches), generator=self.generator).tolist():
                yield batches[j]

        def __len__(self):
            return math.ceil(len(self.lengths) / self.batch_size)

    return BucketBatchSampler


def test_padding_collate_and_default_collate_match_torch():
    def run(lib):
        D = lib.utils.data
        ds = _dataset(lib)
        loader = D.DataLoader(ds, batch_size=5, collate_fn=_collate(lib), drop_last=True)
        plain = D.default_collate([{k: v for k, v in ds[i].items() if k != "ids"} for i in (0, 1, 2)])
        nested = D.default_collate([
            {"p": Point(lib.tensor([1.0, 2.0]), 3), "meta": {"a": np.float32(a), "b": [lib.tensor(b), c], "s": s}}
            for a, b, c, s in ((1.5, 1, 2.0, "x"), (2.5, 7, 4.0, "y"))])
        scalars = (nested["p"].y, nested["meta"]["a"], nested["meta"]["b"][1],
                   D.default_collate([np.arange(3, dtype=np.int32)]))
        return {"batches": [to_numpy(b) for b in loader], "n": len(loader), "plain": to_numpy(plain),
                "plain_types": {k: type(v).__name__ for k, v in plain.items()},
                "nested": to_numpy(nested), "nested_type": type(nested["p"]).__name__,
                "dtypes": [str(t.dtype).split(".")[-1] for t in scalars],
                "convert": to_numpy(D.default_convert({"a": np.ones(2), "b": [np.zeros(1)], "c": "s"}))}

    assert_close_tree(run(torch), run(jitorch), rtol=0, atol=0)


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_bucketed_batches_from_two_workers_are_reproducible_and_cover_the_data(lib):
    D = lib.utils.data

    def epoch(seed):
        sampler = _bucket_sampler(lib)(LENS, 4, lib.Generator().manual_seed(seed))
        loader = D.DataLoader(_dataset(lib), batch_sampler=sampler, collate_fn=_collate(lib), num_workers=2,
                              prefetch_factor=3)
        return [to_numpy(b) for b in loader], len(loader)

    first, n = epoch(3)
    assert_close_tree(first, epoch(3)[0], rtol=0, atol=0)
    assert n == 6 and len(first) == 6
    assert sorted(t for b in first for t in b["text"]) == sorted(f"s{i}" for i in range(23))
    for b in first:  # padded to the batch's longest sequence; the mask marks exactly the real tokens
        assert b["ids"].shape[1] == b["lengths"].max() and (b["mask"].sum(1) == b["lengths"]).all()
        assert all(LENS[int(t[1:])] == n for t, n in zip(b["text"], b["lengths"]))
        assert b["lengths"].max() - b["lengths"].min() <= 2  # buckets: similar lengths together
    assert [b["text"] for b in first] != [b["text"] for b in epoch(4)[0]]


def _worker_init(worker_id):
    import torch as torch_
    import jitorch as jitorch_

    lib = jitorch_ if jitorch_.utils.data.get_worker_info() is not None else torch_
    np.random.seed(lib.initial_seed() % 2 ** 32)


def _noisy_dataset(lib):
    class Noisy(lib.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            info = lib.utils.data.get_worker_info()
            return {"i": i, "noise": np.random.rand(), "seed": lib.initial_seed(), "worker": info.id,
                    "worker_seed": info.seed, "workers": info.num_workers, "draw": lib.rand(1)}

    return Noisy()


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_persistent_workers_seed_numpy_from_initial_seed(lib):
    parent_states = iter(range(100))

    def run(seed):
        np.random.seed(next(parent_states))  # forked workers inherit this: only worker_init_fn makes noise repeat
        lib.manual_seed(seed)
        loader = lib.utils.data.DataLoader(_noisy_dataset(lib), batch_size=3, num_workers=2, persistent_workers=True,
                                           worker_init_fn=_worker_init, prefetch_factor=2, drop_last=True)
        return [[to_numpy(b) for b in loader] for _ in range(2)]

    (e1, e2), (f1, _) = run(0), run(0)
    assert_close_tree(e1, f1, rtol=0, atol=0)  # same seed: same worker seeds, NumPy noise and jitorch draws
    assert [b["i"].tolist() for b in e1] == [[0, 1, 2], [3, 4, 5]]
    assert [b["worker"].tolist() for b in e1] == [[0, 0, 0], [1, 1, 1]]  # in-order batches, round robin
    for b in e1 + e2:
        assert (b["seed"] == b["worker_seed"]).all() and (b["workers"] == 2).all()
    assert e1[1]["worker_seed"][0] == e1[0]["worker_seed"][0] + 1  # base seed + worker id, as torch's
    # Persistent workers keep their seeds and their NumPy state across epochs: new noise, same seeds.
    assert [b["worker_seed"].tolist() for b in e1] == [b["worker_seed"].tolist() for b in e2]
    assert not np.array_equal(e1[0]["noise"], e2[0]["noise"])
    assert run(1)[0][0]["worker_seed"][0] != e1[0]["worker_seed"][0]


def _sharded(lib, n):
    class Shards(lib.utils.data.IterableDataset):
        def __iter__(self):
            info = lib.utils.data.get_worker_info()
            if info is None:
                lo, hi, wid = 0, n, -1
            else:
                per = math.ceil(n / info.num_workers)
                lo, hi, wid = info.id * per, min(info.id * per + per, n), info.id
            for i in range(lo, hi):
                yield {"i": i, "x": lib.full((2,), float(i)), "worker": wid}

    return Shards()


def test_iterable_dataset_sharded_by_worker_info_matches_torch():
    def run(lib):
        D = lib.utils.data
        out = [to_numpy(list(D.DataLoader(_sharded(lib, 11), batch_size=2, num_workers=2, **kw)))
               for kw in ({}, {"drop_last": True})]
        out.append(to_numpy(list(D.DataLoader(_sharded(lib, 5), batch_size=2))))
        out.append(to_numpy(list(D.DataLoader(_sharded(lib, 3), batch_size=None, num_workers=2))))
        chained = D.ChainDataset([_sharded(lib, 2), _sharded(lib, 3)])
        out.append([d["i"] for d in chained])
        with pytest.raises(TypeError, match="has no len"):
            len(D.DataLoader(_sharded(lib, 3), batch_size=2))
        with pytest.raises(ValueError, match="expected unspecified shuffle option"):
            D.DataLoader(_sharded(lib, 3), shuffle=True)
        return out

    assert_close_tree(run(torch), run(jitorch), rtol=0, atol=0)


def test_concat_subset_and_random_split_match_torch_where_deterministic():
    def run(lib):
        D = lib.utils.data
        base = D.TensorDataset(lib.arange(10.0), lib.arange(10) % 3)
        cat = D.ConcatDataset([base, D.Subset(base, [9, 8, 7])])
        parts = D.random_split(base, [0.5, 0.3, 0.2], generator=lib.Generator().manual_seed(5))
        again = D.random_split(base, [5, 3, 2], generator=lib.Generator().manual_seed(5))
        return {"len": len(cat), "items": to_numpy([cat[i] for i in (0, 9, 10, 12, -1)]), "cum": cat.cumulative_sizes,
                "lens": [len(p) for p in parts], "same": [p.indices for p in parts] == [p.indices for p in again],
                "cover": sorted(i for p in parts for i in p.indices),
                "split_item": to_numpy(parts[1][0]) == to_numpy(base[parts[1].indices[0]]),
                "uneven": [len(p) for p in D.random_split(range(10), [0.33, 0.33, 0.34])]}

    assert_close_tree(run(torch), run(jitorch), rtol=0, atol=0)
    for lib in (torch, jitorch):
        with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
            lib.utils.data.random_split(range(10), [3, 3])


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_seeded_samplers_are_reproducible_and_draw_what_they_promise(lib):
    D = lib.utils.data
    weights = [0.1, 0.0, 5.0, 1.0, 2.0]

    def weighted(seed, n=2000, **kw):
        return list(D.WeightedRandomSampler(weights, n, generator=lib.Generator().manual_seed(seed), **kw))

    def shuffled(seed, **kw):
        return list(D.RandomSampler(range(12), generator=lib.Generator().manual_seed(seed), **kw))

    draws = weighted(1)
    assert draws == weighted(1) and draws != weighted(2) and type(draws[0]) is int
    assert 1 not in draws  # zero weight: never drawn
    freq = np.bincount(draws, minlength=5) / len(draws)
    np.testing.assert_allclose(freq, np.array(weights) / sum(weights), atol=0.04)
    assert sorted(weighted(2, n=4, replacement=False)) == [0, 2, 3, 4]
    assert shuffled(0) == shuffled(0) != shuffled(1) and sorted(shuffled(0)) == list(range(12))
    assert sorted(shuffled(0, num_samples=24)) == sorted(list(range(12)) * 2)
    assert len(shuffled(0, replacement=True, num_samples=7)) == 7
    subset = list(D.SubsetRandomSampler([3, 5, 7], generator=lib.Generator().manual_seed(0)))
    assert sorted(subset) == [3, 5, 7]
    # A DataLoader's shuffle and its workers' base seed come from its generator.
    ds = D.TensorDataset(lib.arange(10))

    def loader_order(seed):
        loader = D.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2,
                              generator=lib.Generator().manual_seed(seed))
        return [b[0].tolist() for b in loader]

    assert loader_order(7) == loader_order(7) != loader_order(8)
    with pytest.raises(RuntimeError, match="without replacement"):
        list(D.WeightedRandomSampler([1.0, 2.0], 5, replacement=False))
