"""jitorch.utils.data in the main process: datasets, samplers, collation and the single-process DataLoader,
compared with torch.utils.data wherever the result is deterministic. Worker processes: test_data_workers.py."""
from __future__ import annotations

import collections
import itertools
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import jitorch
import jitorch.utils.data as jdata
from jitorch.utils.data import _worker
from jitorch.utils.data._utils.collate import collate, default_collate_fn_map


# -- helpers ------------------------------------------------------------------------------------------------------
def structure(obj):
    """A framework-neutral picture of a (collated) batch: container types, tensor dtypes, shapes and values."""
    if isinstance(obj, (jitorch.Tensor, torch.Tensor)):
        return ("tensor", str(obj.dtype).split(".")[-1], tuple(obj.shape), obj.tolist())
    if isinstance(obj, dict):
        return ("dict", type(obj).__name__, {k: structure(v) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return ("namedtuple", type(obj).__name__, [structure(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [structure(v) for v in obj])
    return ("leaf", type(obj).__name__, obj)


def same_error(jt_fn, th_fn):
    """Both raise: same exception type, same message."""
    with pytest.raises(Exception) as th_info:
        th_fn()
    with pytest.raises(Exception) as jt_info:
        jt_fn()
    assert type(jt_info.value) is type(th_info.value), (jt_info.value, th_info.value)
    assert str(jt_info.value) == str(th_info.value)


def both(fn):
    """``fn(framework)`` for jitorch and torch."""
    return fn(jitorch), fn(torch)


Point = collections.namedtuple("Point", ["x", "y"])


class Squares(jdata.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"i": i, "sq": float(i * i), "name": f"s{i}"}


class _Stream:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


class Stream(_Stream, jdata.IterableDataset):
    pass


class TorchStream(_Stream, tdata.IterableDataset):
    pass


# -- datasets -----------------------------------------------------------------------------------------------------
def test_tensor_dataset_indexing_and_size_mismatch():
    ds = jdata.TensorDataset(jitorch.arange(12.0).view(6, 2), jitorch.arange(6))
    x, y = ds[4]
    assert len(ds) == 6 and x.tolist() == [8.0, 9.0] and y.item() == 4
    same_error(lambda: jdata.TensorDataset(jitorch.zeros(3), jitorch.zeros(4)),
               lambda: tdata.TensorDataset(torch.zeros(3), torch.zeros(4)))


def test_concat_subset_stack_and_chain_datasets():
    a, b = list(range(5)), list(range(10, 13))
    jt, th = jdata.ConcatDataset([a, b]), tdata.ConcatDataset([a, b])
    assert len(jt) == len(th) == 8 and jt.cumulative_sizes == th.cumulative_sizes
    assert [jt[i] for i in range(-8, 8)] == [th[i] for i in range(-8, 8)]
    same_error(lambda: jt[-9], lambda: th[-9])
    assert len(Squares(2) + Squares(3)) == 5 and isinstance(Squares(2) + Squares(3), jdata.ConcatDataset)

    sub = jdata.Subset(list("abcdef"), [5, 0, 2])
    assert len(sub) == 3 and [sub[i] for i in range(3)] == ["f", "a", "c"] and sub.__getitems__([2, 1]) == ["c", "a"]

    jt_stack, th_stack = jdata.StackDataset(a, a[::-1]), tdata.StackDataset(a, a[::-1])
    assert jt_stack[1] == th_stack[1] and jt_stack.__getitems__([0, 3]) == th_stack.__getitems__([0, 3])
    jt_kw, th_kw = jdata.StackDataset(x=a, y=a), tdata.StackDataset(x=a, y=a)
    assert jt_kw[2] == th_kw[2] and jt_kw.__getitems__([4, 0]) == th_kw.__getitems__([4, 0])
    same_error(lambda: jdata.StackDataset(a, b), lambda: tdata.StackDataset(a, b))
    same_error(lambda: jdata.StackDataset(), lambda: tdata.StackDataset())

    chain = jdata.ChainDataset([Stream(3), Stream(2)])
    assert list(chain) == [0, 1, 2, 0, 1] and len(chain) == 5
    assert list(Stream(2) + Stream(1)) == [0, 1, 0]


@pytest.mark.parametrize("lengths", [[3, 7], [0.3, 0.3, 0.4], [0.5, 0.5], [1 / 3] * 3])
def test_random_split_lengths_match_torch_and_cover_the_dataset(lengths):
    n = 10
    jt = jdata.random_split(range(n), lengths, generator=jitorch.Generator().manual_seed(1))
    th = tdata.random_split(range(n), lengths, generator=torch.Generator().manual_seed(1))
    assert [len(s) for s in jt] == [len(s) for s in th]
    assert sorted(i for s in jt for i in s.indices) == list(range(n))
    again = jdata.random_split(range(n), lengths, generator=jitorch.Generator().manual_seed(1))
    assert [s.indices for s in again] == [s.indices for s in jt]


def test_random_split_errors_match_torch():
    same_error(lambda: jdata.random_split(range(10), [3, 3]), lambda: tdata.random_split(range(10), [3, 3]))
    same_error(lambda: jdata.random_split(range(10), [1.5, -0.5]), lambda: tdata.random_split(range(10), [1.5, -0.5]))
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        jdata.random_split(range(2), [1.0, 0.0])


# -- samplers -----------------------------------------------------------------------------------------------------
def test_sequential_and_batch_samplers_match_torch():
    for n, bs, drop in itertools.product([0, 1, 7, 8], [1, 3, 4], [False, True]):
        jt = jdata.BatchSampler(jdata.SequentialSampler(range(n)), bs, drop)
        th = tdata.BatchSampler(tdata.SequentialSampler(range(n)), bs, drop)
        assert list(jt) == list(th) and len(jt) == len(th)
    for args in [(0, False), (2.0, False), (True, False), (2, "no")]:
        same_error(lambda: jdata.BatchSampler(range(3), *args), lambda: tdata.BatchSampler(range(3), *args))


def test_random_sampler_permutations_are_seeded_and_fresh_each_epoch():
    g = jitorch.Generator().manual_seed(3)
    sampler = jdata.RandomSampler(range(20), generator=g)
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == list(range(20)) and first != second
    assert list(jdata.RandomSampler(range(20), generator=jitorch.Generator().manual_seed(3))) == first
    jitorch.manual_seed(5)
    unseeded = list(jdata.RandomSampler(range(20)))
    jitorch.manual_seed(5)
    assert list(jdata.RandomSampler(range(20))) == unseeded


def test_random_sampler_num_samples_and_replacement():
    without = list(jdata.RandomSampler(range(5), num_samples=12))
    assert len(without) == 12 and sorted(without[:5]) == sorted(without[5:10]) == list(range(5))
    with_repl = jdata.RandomSampler(range(5), replacement=True, num_samples=3000)
    drawn = list(with_repl)
    assert len(with_repl) == len(drawn) == 3000 and set(drawn) == set(range(5))
    for kwargs in [dict(num_samples=0), dict(num_samples=2.5), dict(replacement=1)]:
        same_error(lambda: jdata.RandomSampler(range(5), **kwargs), lambda: tdata.RandomSampler(range(5), **kwargs))


def test_random_sampler_with_replacement_is_lazy():
    sampler = jdata.RandomSampler(range(7), replacement=True, num_samples=10 ** 10)
    assert len(sampler) == 10 ** 10
    head = list(itertools.islice(iter(sampler), 5000))
    assert len(head) == 5000 and set(head) == set(range(7))
    loader = jdata.DataLoader(list(range(7)), batch_size=4, sampler=sampler)
    assert len(loader) == 10 ** 10 // 4
    batches = list(itertools.islice(loader, 3))
    assert [b.shape[0] for b in batches] == [4, 4, 4]


def test_subset_random_sampler():
    indices = [10, 20, 30, 40]
    out = list(jdata.SubsetRandomSampler(indices, generator=jitorch.Generator().manual_seed(0)))
    assert sorted(out) == indices and len(jdata.SubsetRandomSampler(indices)) == 4


def test_weighted_random_sampler_distribution():
    sampler = jdata.WeightedRandomSampler([0.0, 1.0, 3.0], num_samples=20000,
                                          generator=jitorch.Generator().manual_seed(0))
    counts = np.bincount(list(sampler), minlength=3)
    assert len(sampler) == 20000 and counts[0] == 0
    assert abs(counts[2] / counts[1] - 3.0) < 0.3
    unique = list(jdata.WeightedRandomSampler([1, 1, 1, 5, 5], 4, replacement=False))
    assert len(set(unique)) == 4
    for args in [([1.0, 2.0], 0), ([1.0, 2.0], 2, "yes"), ([[1.0, 2.0]], 2)]:
        same_error(lambda: jdata.WeightedRandomSampler(*args), lambda: tdata.WeightedRandomSampler(*args))


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (9, 3, False), (2, 4, False)])
def test_distributed_sampler(n, replicas, drop_last):
    def shards(mod, shuffle, epoch=0):
        out = []
        for rank in range(replicas):
            s = mod.DistributedSampler(range(n), num_replicas=replicas, rank=rank, shuffle=shuffle,
                                       drop_last=drop_last, seed=7)
            s.set_epoch(epoch)
            out.append(list(s))
            assert len(s) == len(out[-1])
        return out

    assert shards(jdata, False) == shards(tdata, False)
    jt, th = shards(jdata, True), shards(tdata, True)
    assert [len(s) for s in jt] == [len(s) for s in th]
    flat = [i for s in jt for i in s]
    assert set(flat) == set(range(n)) or drop_last
    assert shards(jdata, True) == jt
    same_error(lambda: jdata.DistributedSampler(range(4), num_replicas=2, rank=2),
               lambda: tdata.DistributedSampler(range(4), num_replicas=2, rank=2))


@pytest.mark.parametrize("kwargs", [{}, {"rank": 0}, {"num_replicas": 2}])
def test_distributed_sampler_without_a_process_group_is_a_value_error(kwargs):
    # the missing values come from the default process group, which does not exist: torch's ValueError
    same_error(lambda: jdata.DistributedSampler(range(4), **kwargs),
               lambda: tdata.DistributedSampler(range(4), **kwargs))


# -- collation ----------------------------------------------------------------------------------------------------
def _samples(fw):
    return [
        [fw.tensor([1.0, 2.0]), fw.tensor([3.0, 4.0])],
        [1, 2, 3],
        [1.5, 2.5],
        [True, False],
        ["a", "b"],
        [b"x", b"y"],
        [np.array([1, 2], dtype=np.int32), np.array([3, 4], dtype=np.int32)],
        [np.float32(1.5), np.float32(2.5)],
        [np.int16(3), np.int16(4)],
        [(1, "a", 2.0), (2, "b", 3.0)],
        [[1, 2], [3, 4]],
        [{"x": 1, "y": [fw.ones(2), 2.0]}, {"x": 2, "y": [fw.zeros(2), 3.0]}],
        [collections.OrderedDict(a=1, b=2.0), collections.OrderedDict(a=3, b=4.0)],
        [Point(1, fw.tensor(2)), Point(3, fw.tensor(4))],
        [{"img": np.zeros((2, 2), np.float32), "meta": {"id": 7, "tags": ("p", "q")}}] * 3,
        [fw.tensor(1, dtype=fw.uint8), fw.tensor(2, dtype=fw.uint8)],
    ]


@pytest.mark.parametrize("case", range(len(_samples(torch))))
def test_default_collate_matches_torch(case):
    jt = jdata.default_collate(_samples(jitorch)[case])
    th = tdata.default_collate(_samples(torch)[case])
    assert structure(jt) == structure(th)


@pytest.mark.parametrize("case", range(len(_samples(torch))))
def test_default_convert_matches_torch(case):
    sample = _samples(jitorch)[case][0]
    th_sample = _samples(torch)[case][0]
    assert structure(jdata.default_convert(sample)) == structure(tdata.default_convert(th_sample))


def test_collate_errors_match_torch():
    same_error(lambda: jdata.default_collate([[1, 2], [3]]), lambda: tdata.default_collate([[1, 2], [3]]))
    same_error(lambda: jdata.default_collate([object(), object()]), lambda: tdata.default_collate([object()]))
    strings = [np.array(["a"]), np.array(["b"])]
    same_error(lambda: jdata.default_collate(strings), lambda: tdata.default_collate(strings))
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        jdata.default_collate([jitorch.zeros(2), jitorch.zeros(3)])
    same_error(lambda: jdata.default_collate([jitorch.tensor(1), 2]),
               lambda: tdata.default_collate([torch.tensor(1), 2]))
    same_error(lambda: jitorch.stack([jitorch.ones(1), 3.0]), lambda: torch.stack([torch.ones(1), 3.0]))
    same_error(lambda: jitorch.cat([jitorch.ones(1), [2]]), lambda: torch.cat([torch.ones(1), [2]]))
    same_error(lambda: jdata.default_collate(jitorch.arange(3)), lambda: tdata.default_collate(torch.arange(3)))
    same_error(lambda: jdata.default_collate([jitorch.ones(2), np.ones(2)]),
               lambda: tdata.default_collate([torch.ones(2), np.ones(2)]))


def test_collate_keeps_autograd_and_custom_map():
    w = jitorch.ones(2, requires_grad=True)
    batch = jdata.default_collate([w * 2, w * 3])
    batch.sum().backward()
    assert w.grad.tolist() == [5.0, 5.0]
    custom = {**default_collate_fn_map, str: lambda b, *, collate_fn_map: "|".join(b)}
    assert collate([("a", 1), ("b", 2)], collate_fn_map=custom)[0] == "a|b"


# -- single-process DataLoader ------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True), (4, True), (20, False)])
def test_loader_batches_match_torch(batch_size, drop_last):
    data = [(i, float(i) / 2, f"n{i}") for i in range(10)]
    jt = jdata.DataLoader(data, batch_size=batch_size, drop_last=drop_last)
    th = tdata.DataLoader(data, batch_size=batch_size, drop_last=drop_last)
    assert len(jt) == len(th)
    assert [structure(b) for b in jt] == [structure(b) for b in th]


def test_loader_with_samplers_and_no_batching_matches_torch():
    ds = Squares(9)
    batch_sampler = [[0, 5], [8], [1, 2, 3]]
    for kwargs in [dict(batch_size=None), dict(batch_sampler=batch_sampler), dict(sampler=[4, 0, 2], batch_size=2),
                   dict(batch_size=2, collate_fn=lambda b: [d["i"] for d in b])]:
        jt, th = jdata.DataLoader(ds, **kwargs), tdata.DataLoader(ds, **kwargs)
        assert len(jt) == len(th)
        assert [structure(b) for b in jt] == [structure(b) for b in th]


def test_loader_attributes():
    ds = Squares(5)
    loader = jdata.DataLoader(ds, batch_size=2, shuffle=True)
    assert loader.dataset is ds and loader.batch_size == 2 and loader.num_workers == 0
    assert isinstance(loader.sampler, jdata.RandomSampler) and isinstance(loader.batch_sampler, jdata.BatchSampler)
    assert loader.collate_fn is jdata.default_collate
    assert isinstance(jdata.DataLoader(ds).sampler, jdata.SequentialSampler)
    assert jdata.DataLoader(ds, batch_size=None).collate_fn is jdata.default_convert
    with pytest.raises(ValueError, match="batch_size attribute should not be set after DataLoader is initialized"):
        loader.batch_size = 3


def test_shuffled_loader_is_a_seeded_permutation():
    ds = list(range(23))

    def epoch(**kwargs):
        return [i for b in jdata.DataLoader(ds, batch_size=5, shuffle=True, **kwargs) for i in b.tolist()]

    g = jitorch.Generator().manual_seed(11)
    first = epoch(generator=g)
    assert sorted(first) == ds and first != ds
    assert epoch(generator=g) != first  # the generator moves on: a new order each epoch
    assert epoch(generator=jitorch.Generator().manual_seed(11)) == first
    jitorch.manual_seed(2)
    unseeded = epoch()
    jitorch.manual_seed(2)
    assert epoch() == unseeded


def test_iterable_dataset_loader_matches_torch():
    for kwargs in [dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None)]:
        jt, th = jdata.DataLoader(Stream(8), **kwargs), tdata.DataLoader(TorchStream(8), **kwargs)
        assert len(jt) == len(th)
        assert [structure(b) for b in jt] == [structure(b) for b in th]


BAD_ARGS = [
    dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2), dict(num_workers=1, prefetch_factor=-1),
    dict(persistent_workers=True), dict(sampler=[0, 1], shuffle=True), dict(batch_sampler=[[0]], batch_size=2),
    dict(batch_sampler=[[0]], shuffle=True), dict(batch_sampler=[[0]], drop_last=True),
    dict(batch_size=None, drop_last=True), dict(multiprocessing_context="fork"),
    dict(num_workers=1, multiprocessing_context="nope"), dict(num_workers=1, multiprocessing_context=3),
]


@pytest.mark.parametrize("kwargs", BAD_ARGS, ids=lambda k: ",".join(k))
def test_loader_argument_errors_match_torch(kwargs):
    same_error(lambda: jdata.DataLoader(Squares(4), **kwargs), lambda: tdata.DataLoader(Squares(4), **kwargs))


@pytest.mark.parametrize("kwargs", [dict(shuffle=True), dict(sampler=[0]), dict(batch_sampler=[[0]])],
                         ids=lambda k: ",".join(k))
def test_iterable_dataset_argument_errors_match_torch(kwargs):
    with pytest.raises(ValueError) as jt_info:
        jdata.DataLoader(Stream(3), **kwargs)
    with pytest.raises(ValueError) as th_info:
        tdata.DataLoader(TorchStream(3), **kwargs)
    # The messages embed the sampler's repr; compare up to it.
    assert str(jt_info.value).split("=")[0] == str(th_info.value).split("=")[0]


def test_misc_api():
    assert jdata.get_worker_info() is None
    assert _worker._generate_state(123456789012345, 3) == \
        torch.utils.data._utils.worker._generate_state(123456789012345, 3)
    if not jitorch.runtime.cuda_available():
        with pytest.warns(UserWarning, match="no accelerator is found"):
            next(iter(jdata.DataLoader([1, 2], pin_memory=True)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(jdata.DataLoader(Stream(4), batch_size=2))



def test_private_import_paths_user_code_uses():
    from jitorch.utils.data import _utils
    from jitorch.utils.data._utils.pin_memory import pin_memory
    from jitorch.utils.data.dataloader import _collate_fn_t, _MultiProcessingDataLoaderIter, _worker_init_fn_t

    from jitorch.utils.data._multiprocessing import _MultiProcessingDataLoaderIter as impl

    assert _MultiProcessingDataLoaderIter is impl and _utils.HAS_NUMPY is True
    assert _collate_fn_t is not None and _worker_init_fn_t is not None
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        jitorch.utils.data.dataloader.missing
    batch = pin_memory({"x": jitorch.ones(2), "n": (1, "a")})
    assert batch["x"].tolist() == [1.0, 1.0] and batch["n"] == [1, "a"]
