"""Breadth sweep of torch.utils.data, part 2: samplers (weighted, subset, batch, random with num_samples and
replacement, distributed with set_epoch), random_split, the dataset combinators, and worker processes (sharding
IterableDatasets with get_worker_info, worker_init_fn, persistence, in_order, start methods, early exit), compared
with torch 2.13. jitorch's random streams are NumPy's, not torch's (jitorch/_random.py says so), so seeded orders
are compared through what they must satisfy (a permutation, a partition, reproducible under the seed, fresh each
epoch) and everything deterministic is compared exactly."""
from __future__ import annotations

import gc
import multiprocessing
import os

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import jitorch
import jitorch.utils.data as jdata

from test_sweep_data_breadth import assert_same, picture

TIMEOUT = 30  # seconds: a broken worker fails the test instead of hanging it


def both(make, check=lambda x: x):
    """``check(make(data module, library))`` for jitorch and torch: same picture, same error, same warnings."""
    assert_same(lambda: check(make(jdata, jitorch)), lambda: check(make(tdata, torch)))


# -- WeightedRandomSampler ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights,num_samples,replacement", [
    ([1.0, 2, 3], 4, False), ([0.0, 0, 0], 2, True), ([0.0, 0, 0], 1, False), ([-1.0, 2], 2, True),
    ([-1.0, 2], 1, True), ([float("nan"), 2], 2, True), ([float("inf"), 2], 2, True), ([2, float("inf"), -1], 2, True),
    ([-1.0, 2], 2, False), ([], 2, True), ([], 1, False), (["a", "b"], 2, True), ([1.0, 2], 2.0, True),
    ([1.0, 2], True, True), ([1.0, 2], -1, True), ([1.0, 2], 2, None),
], ids=str)
def test_weighted_sampler_errors_match_torch(weights, num_samples, replacement):
    both(lambda d, fw: list(d.WeightedRandomSampler(weights, num_samples, replacement=replacement)))


@pytest.mark.parametrize("rows,num_samples,replacement", [
    ([[0.0, 0], [float("inf"), -1]], 2, True), ([[1.0, 1], [0, 0], [-1, 1]], 2, True),
    ([[1.0, 1], [-1, 1], [0, 0]], 2, True), ([[1.0, 1], [0, 0]], 1, True), ([[1.0, 2]], 0, True),
    ([[[1.0]]], 1, True),
], ids=str)
def test_multinomial_checks_rows_in_atens_order(rows, num_samples, replacement):
    both(lambda d, fw: fw.multinomial(fw.tensor(rows, dtype=fw.float64), num_samples, replacement))


def test_weighted_sampler_without_replacement_draws_distinct_positive_weight_indices():
    g = jitorch.Generator().manual_seed(0)
    for _ in range(20):
        drawn = list(jdata.WeightedRandomSampler([0.0, 1, 5, 0, 2, 7], 4, replacement=False, generator=g))
        assert sorted(drawn) == [1, 2, 4, 5]
    full = list(jdata.WeightedRandomSampler([0.0, 1, 0], 3, replacement=False, generator=g))
    assert full[0] == 1 and sorted(full) == [0, 1, 2]  # zero-weight categories come last, as torch's CPU kernel
    both(lambda d, fw: d.WeightedRandomSampler(fw.tensor([1.0, 2.0], dtype=fw.float32), 5),
         lambda s: (str(s.weights.dtype).split(".")[-1], len(s), [type(i).__name__ for i in s]))


# -- RandomSampler, SubsetRandomSampler, BatchSampler -------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [dict(), dict(num_samples=3), dict(replacement=True, num_samples=3)],
                         ids=str)
def test_random_sampler_over_an_empty_dataset_matches_torch(kwargs):
    both(lambda d, fw: list(d.RandomSampler([], **kwargs)))


@pytest.mark.parametrize("n,kwargs", [(10, dict(num_samples=3)), (3, dict(num_samples=8)),
                                      (4, dict(replacement=True)), (4, dict(replacement=True, num_samples=50))],
                         ids=str)
def test_random_sampler_num_samples_and_replacement_properties(n, kwargs):
    draws = [list(jdata.RandomSampler(range(n), generator=jitorch.Generator().manual_seed(s), **kwargs))
             for s in (1, 1, 2)]
    sampler = jdata.RandomSampler(range(n), **kwargs)
    assert len(sampler) == len(draws[0]) == len(tdata.RandomSampler(range(n), **kwargs))
    assert draws[0] == draws[1] and all(type(i) is int and 0 <= i < n for i in draws[0])
    if not kwargs.get("replacement"):  # consecutive whole permutations, then a partial one
        for start in range(0, len(draws[0]), n):
            chunk = draws[0][start:start + n]
            assert len(set(chunk)) == len(chunk)


def test_subset_random_sampler_matches_torch_where_deterministic():
    both(lambda d, fw: d.SubsetRandomSampler(fw.tensor([5, 3, 9])), lambda s: (len(s), sorted(int(i) for i in s)))
    both(lambda d, fw: d.SubsetRandomSampler([]), lambda s: (len(s), list(s)))
    both(lambda d, fw: d.SubsetRandomSampler(range(4)), lambda s: sorted((type(i).__name__, i) for i in s))
    g = jitorch.Generator().manual_seed(4)
    orders = [list(jdata.SubsetRandomSampler([10, 20, 30, 40, 50], generator=g)) for _ in range(2)]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1]) == [10, 20, 30, 40, 50]


def test_batch_sampler_over_plain_iterables_matches_torch():
    both(lambda d, fw: d.BatchSampler([5, 4, 3, 2, 1], 2, False), lambda s: (len(s), list(s)))
    both(lambda d, fw: d.BatchSampler([5, 4, 3, 2, 1], 2, True), lambda s: (len(s), list(s), list(s)))
    both(lambda d, fw: list(d.BatchSampler(iter([1, 2, 3]), 2, False)))
    both(lambda d, fw: d.BatchSampler([1], None, False))
    both(lambda d, fw: d.BatchSampler([1], 1, None))
    both(lambda d, fw: len(d.BatchSampler(iter([1, 2]), 1, False)))


# -- DistributedSampler -------------------------------------------------------------------------------------------
def distributed_epochs(d, n, replicas, shuffle, drop_last, seed):
    """Per epoch, per rank: (len, num_samples, total_size, indices)."""
    epochs = []
    for epoch in range(3):
        ranks = []
        for rank in range(replicas):
            s = d.DistributedSampler(list(range(n)), num_replicas=replicas, rank=rank, shuffle=shuffle,
                                     drop_last=drop_last, seed=seed)
            s.set_epoch(epoch)
            ranks.append((len(s), s.num_samples, s.total_size, list(s)))
        epochs.append(ranks)
    return epochs


@pytest.mark.parametrize("n,replicas,drop_last,seed", [(10, 3, False, 0), (10, 3, True, 5), (11, 4, True, 0),
                                                       (2, 5, False, 1), (0, 2, False, 0), (7, 1, False, 3)], ids=str)
def test_distributed_sampler_partitions_like_torch(n, replicas, drop_last, seed):
    assert distributed_epochs(jdata, n, replicas, False, drop_last, seed) == \
        distributed_epochs(tdata, n, replicas, False, drop_last, seed)
    jt = distributed_epochs(jdata, n, replicas, True, drop_last, seed)
    th = distributed_epochs(tdata, n, replicas, True, drop_last, seed)
    assert [[r[:3] for r in e] for e in jt] == [[r[:3] for r in e] for e in th]
    for epoch in jt:
        flat = [i for r in epoch for i in r[3]]
        if drop_last:  # an exclusive share each, the tail dropped
            assert len(set(flat)) == len(flat) == epoch[0][2]
        else:  # every index, padded with the order's own first indices to a multiple of num_replicas
            assert set(flat) == set(range(n)) and len(flat) == epoch[0][2]
    assert jt == distributed_epochs(jdata, n, replicas, True, drop_last, seed)  # seed + epoch fix the order
    if n > 2:
        assert jt[0] != jt[1]  # set_epoch reshuffles


def test_distributed_sampler_arguments_match_torch():
    for kwargs in [dict(num_replicas=2, rank=-1), dict(num_replicas=0, rank=0), dict(num_replicas=2, rank=1.0)]:
        both(lambda d, fw: list(d.DistributedSampler(range(4), **kwargs)))
    both(lambda d, fw: d.DistributedSampler(range(5), num_replicas=2, rank=1, seed=3),
         lambda s: (s.epoch, s.seed, s.shuffle, s.drop_last, s.rank, s.num_replicas, s.num_samples, s.total_size))


# -- random_split and the dataset combinators ---------------------------------------------------------------------
@pytest.mark.parametrize("lengths", [[0.1] * 10, [0.25, 0.25, 0.5], [0.6, 0.3], [0.5, 0.6], [1.0], [0, 10], [11],
                                     [-1, 11], [0.7, 0.3000001], [np.int64(5), np.int64(5)], (5, 5), [0.05, 0.95]],
                         ids=str)
def test_random_split_lengths_errors_and_warnings_match_torch(lengths):
    both(lambda d, fw: d.random_split(range(10), lengths, generator=fw.Generator().manual_seed(0)),
         lambda parts: ([len(p) for p in parts], sorted(i for p in parts for i in p.indices),
                        [type(p).__name__ for p in parts]))


def test_random_split_with_a_generator_is_reproducible_and_takes_tensor_lengths():
    def split(seed):
        return [p.indices for p in jdata.random_split(range(12), [0.5, 0.25, 0.25],
                                                      generator=jitorch.Generator().manual_seed(seed))]
    assert split(3) == split(3) != split(4)
    both(lambda d, fw: d.random_split(range(4), fw.tensor([2, 2])), lambda parts: [len(p) for p in parts])
    both(lambda d, fw: d.random_split(range(4), [2, 2]),
         lambda parts: [(type(p.indices).__name__, type(p.indices[0]).__name__) for p in parts])


def test_concat_chain_stack_and_subset_edges_match_torch():
    both(lambda d, fw: d.ConcatDataset([[], [1, 2], []]),
         lambda s: (len(s), [s[i] for i in range(len(s))], s.cumulative_sizes))
    both(lambda d, fw: d.ConcatDataset([[1], [2]])[2])
    both(lambda d, fw: d.ConcatDataset(x for x in [[1], [2]]), len)
    both(lambda d, fw: d.ConcatDataset([[1]]) + d.ConcatDataset([[2]]), lambda s: (len(s), len(s.datasets)))
    both(lambda d, fw: d.ConcatDataset([[1], [2]]).cummulative_sizes)
    both(lambda d, fw: list(d.ChainDataset([[1, 2]])))
    both(lambda d, fw: len(d.ChainDataset([[1, 2]])))
    both(lambda d, fw: d.StackDataset([1, 2], x=[3, 4]))
    both(lambda d, fw: d.StackDataset(x=[1, 2], y=[3]))
    both(lambda d, fw: type(d.IterableDataset() + d.IterableDataset()).__name__)
    both(lambda d, fw: len(d.Dataset()))
    both(lambda d, fw: d.Dataset()[0])
    both(lambda d, fw: len(d.TensorDataset()))


def test_subset_of_a_subset_matches_torch():
    def nested(d):
        return d.Subset(d.Subset(list("abcdefg"), [6, 4, 2, 0]), [3, 1])

    both(lambda d, fw: nested(d), lambda s: (len(s), [s[i] for i in range(len(s))], s[-1], s.__getitems__([1, 0])))
    both(lambda d, fw: d.Subset(list("abcd"), fw.tensor([3, 1])), lambda s: (len(s), s[0], s.__getitems__([0, 1])))
    both(lambda d, fw: d.DataLoader(d.Subset(d.Subset(list(range(10)), [9, 7, 5, 3, 1]), [4, 0, 2]), batch_size=2),
         list)


# -- worker processes ---------------------------------------------------------------------------------------------
class _Shards:
    """range(n), each worker taking every num_workers-th item and tagging it with what get_worker_info says."""

    def __init__(self, n, length=None):
        self.n, self.length = n, length

    def __iter__(self):
        info = self.worker_info()
        if info is None:
            return iter([(i, -1, 0) for i in range(self.n)])
        assert info.dataset is self and info.seed is not None
        return iter([(i, info.id, info.num_workers) for i in range(info.id, self.n, info.num_workers)])

    def __len__(self):
        return self.n if self.length is None else self.length

    def __repr__(self):
        return "Shards"


class Shards(_Shards, jdata.IterableDataset):
    worker_info = staticmethod(jdata.get_worker_info)


class TorchShards(_Shards, tdata.IterableDataset):
    worker_info = staticmethod(tdata.get_worker_info)


def workers(make, check=list):
    """``check(make(data module, sharded dataset class))`` with jitorch and with torch."""
    assert_same(lambda: check(make(jdata, Shards)), lambda: check(make(tdata, TorchShards)))


@pytest.mark.parametrize("kwargs", [dict(batch_size=2), dict(batch_size=None), dict(batch_size=2, drop_last=True),
                                    dict(batch_size=3, num_workers=3), dict(batch_size=1, num_workers=4)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_iterable_dataset_split_by_worker_info_matches_torch(kwargs):
    kwargs = {"num_workers": 2, **kwargs}
    workers(lambda d, ds: d.DataLoader(ds(7), timeout=TIMEOUT, **kwargs), lambda loader: (len(loader), list(loader)))


def test_multi_worker_iterable_dataset_longer_than_its_len_warns_like_torch():
    # The warning names the dataset and, with workers, points at per-worker sharding.
    workers(lambda d, ds: d.DataLoader(ds(7, length=2), batch_size=2, num_workers=2, timeout=TIMEOUT),
            lambda loader: (len(loader), list(loader)))


def test_unordered_and_persistent_iterable_loading_match_torch():
    workers(lambda d, ds: d.DataLoader(ds(5), batch_size=2, num_workers=2, in_order=False, timeout=TIMEOUT),
            lambda loader: sorted(map(str, map(picture, loader))))
    workers(lambda d, ds: d.DataLoader(ds(5), batch_size=2, num_workers=2, persistent_workers=True, timeout=TIMEOUT),
            lambda loader: (list(loader), list(loader)))


def record_worker(worker_id):
    info = jdata.get_worker_info()
    info.dataset.ids.append((worker_id, info.id, info.num_workers))


class Recorder(jdata.Dataset):
    """Samples say which worker made them and what worker_init_fn recorded in that worker's copy."""

    def __init__(self):
        self.ids = []

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return i, jdata.get_worker_info().id, list(self.ids), os.getpid()


def test_worker_init_fn_runs_once_per_worker_in_its_own_copy():
    dataset = Recorder()
    batches = list(jdata.DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=record_worker,
                                    timeout=TIMEOUT))
    assert [b[0] for b in batches] == list(range(6)) and dataset.ids == []
    by_worker = {b[1]: (b[2], b[3]) for b in batches}
    # (default_convert turns the recorded tuples into lists, as torch's does)
    assert by_worker[0][0] == [[0, 0, 2]] and by_worker[1][0] == [[1, 1, 2]] and by_worker[0][1] != by_worker[1][1]
    assert all(b[1] == b[0] % 2 for b in batches)  # index batches go to the workers round-robin, as in torch


class _Threads:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return self.threads()


class Threads(_Threads, jdata.Dataset):
    threads = staticmethod(jitorch.get_num_threads)


class TorchThreads(_Threads, tdata.Dataset):
    threads = staticmethod(torch.get_num_threads)


def test_workers_run_one_thread_each_like_torch():
    before = jitorch.get_num_threads()
    jt = list(jdata.DataLoader(Threads(), batch_size=None, num_workers=2, timeout=TIMEOUT))
    th = list(tdata.DataLoader(TorchThreads(), batch_size=None, num_workers=2, timeout=TIMEOUT))
    assert jt == th == [1, 1] and jitorch.get_num_threads() == before  # the main process keeps its setting


def test_non_callable_worker_init_fn_is_reraised_like_torch():
    def first_lines(loader):
        try:
            list(loader)
        except TypeError as e:
            return str(e).split("\n")[0], str(e).strip().split("\n")[-1]
        return None

    workers(lambda d, ds: d.DataLoader(ds(3), num_workers=1, worker_init_fn=3, timeout=TIMEOUT), first_lines)


def test_spawn_context_object_loads_like_fork():
    dataset = jdata.TensorDataset(jitorch.arange(10.0).view(5, 2))
    spawned = jdata.DataLoader(dataset, batch_size=2, num_workers=1, timeout=TIMEOUT,
                               multiprocessing_context=multiprocessing.get_context("spawn"))
    assert spawned.multiprocessing_context.get_start_method() == "spawn"
    assert [b[0].tolist() for b in spawned] == [b[0].tolist() for b in jdata.DataLoader(dataset, batch_size=2)]


def test_breaking_out_of_multi_worker_loops_leaves_no_processes():
    before = set(multiprocessing.active_children())
    loader = jdata.DataLoader(Recorder(), batch_size=1, num_workers=2, timeout=TIMEOUT)
    for _ in loader:
        break
    persistent = jdata.DataLoader(Recorder(), batch_size=1, num_workers=2, persistent_workers=True, timeout=TIMEOUT)
    for _ in persistent:
        break
    assert [b[0].item() for b in persistent] == list(range(6))  # the next epoch starts over, same workers
    del loader, persistent
    gc.collect()
    for child in set(multiprocessing.active_children()) - before:
        child.join(TIMEOUT)
    assert set(multiprocessing.active_children()) <= before
