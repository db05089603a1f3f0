"""jitorch.utils.data.DataLoader with worker processes: ordering, seeding, sharding, persistence, failures and the
shared-memory transport. Every multi-worker loader gets a ``timeout`` so that a broken worker fails a test instead of
hanging it; every test checks that no shared-memory block of this process is left in /dev/shm."""
from __future__ import annotations

import dataclasses
import gc
import os
import random
import signal
import time

import numpy as np
import pytest
import torch.utils.data as tdata

import jitorch
import jitorch.utils.data as jdata
from jitorch.utils.data import _shm, _transport
from jitorch.utils.data._worker import _generate_state

TIMEOUT = 30  # seconds; generous: a correct loader answers in milliseconds


def loader(dataset, **kwargs):
    kwargs.setdefault("num_workers", 2)
    return jdata.DataLoader(dataset, timeout=TIMEOUT, **kwargs)


def our_blocks():
    prefix = f"jtdl_{os.getpid():x}_"
    return {n for n in os.listdir("/dev/shm") if n.startswith(prefix)} if os.path.isdir("/dev/shm") else set()


@pytest.fixture(autouse=True)
def no_leaked_shared_memory():
    before = our_blocks()
    yield
    if our_blocks() != before:  # an iterator kept alive by a reference cycle (an exception's traceback) is freed
        gc.collect()
    assert our_blocks() == before


def flat(batches):
    """Batches of (jitorch or torch) tensors as nested lists."""
    return [b.tolist() if hasattr(b, "tolist") else b for b in batches]


class Samples(jdata.Dataset):
    """Index-dependent tensors, arrays, numbers and strings."""

    def __init__(self, n=13):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": jitorch.full((2, 3), float(i)), "a": np.arange(4, dtype=np.int32) * i, "i": i, "s": f"#{i}"}


class WorkerView(jdata.Dataset):
    """What each worker knows: its info, its seeds' first draws, and what ``worker_init_fn`` recorded."""

    init_record = None

    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = jdata.get_worker_info()
        return dict(i=i, id=info.id, num_workers=info.num_workers, seed=info.seed, own_copy=info.dataset is self,
                    pid=os.getpid(), init=self.init_record)


def record_init(worker_id):
    info = jdata.get_worker_info()
    info.dataset.init_record = (worker_id, random.random(), jitorch.rand(1).item(), np.random.rand())


class _Sharded:
    """range(n), each worker taking every num_workers-th item (or everything when ``shard`` is False)."""

    def __init__(self, n, shard=True):
        self.n, self.shard = n, shard

    def __iter__(self):
        info = self.get_worker_info()
        if info is None or not self.shard:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


class Sharded(_Sharded, jdata.IterableDataset):
    get_worker_info = staticmethod(jdata.get_worker_info)


class TorchSharded(_Sharded, tdata.IterableDataset):
    get_worker_info = staticmethod(tdata.get_worker_info)


class Counting(jdata.Dataset):
    """Counts the calls its (per-worker) copy has served: the count survives epochs only with persistent workers."""

    calls = 0

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.calls += 1
        return i, self.calls, os.getpid()


class Faulty(jdata.Dataset):
    def __init__(self, how, at=5):
        self.how, self.at = how, at

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == self.at:
            if self.how == "exit":
                os._exit(7)
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "sleep":
                time.sleep(0.6)
            if self.how == "raise":
                raise ValueError(f"bad sample {i}")
            if self.how == "keyerror":
                raise KeyError(i)
        return i


@dataclasses.dataclass
class Batch:
    images: object
    labels: object
    names: list


def to_batch(samples):
    return Batch(np.stack([np.full((64, 64), s, np.float32) for s in samples]), jitorch.tensor(samples),
                 [str(s) for s in samples])


# -- ordering and collation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [dict(batch_size=3), dict(batch_size=4, drop_last=True), dict(batch_size=None),
                                    dict(batch_size=2, shuffle=True)])
def test_in_order_delivery_equals_single_process(kwargs):
    def run(num_workers):
        g = jitorch.Generator().manual_seed(4)
        extra = dict(num_workers=num_workers, timeout=TIMEOUT) if num_workers else {}
        return [{k: v.tolist() if isinstance(v, jitorch.Tensor) else v for k, v in b.items()}
                for b in jdata.DataLoader(Samples(), generator=g, **kwargs, **extra)]

    assert run(2) == run(0)


def test_out_of_order_delivery_returns_every_batch():
    got = [b.tolist() for b in loader(list(range(20)), batch_size=3, in_order=False)]
    assert sorted(i for b in got for i in b) == list(range(20))


def test_prefetch_factor_bounds_tasks_in_flight():
    it = iter(loader(list(range(40)), batch_size=1, prefetch_factor=3))
    assert it._tasks_outstanding == 6 and it._send_idx == 6
    assert [next(it).item() for _ in range(5)] == [0, 1, 2, 3, 4]


def test_batches_travel_through_shared_memory(monkeypatch):
    payload_sizes = []
    decode = _transport.decode
    monkeypatch.setattr(_transport, "decode", lambda b, *rest: payload_sizes.append(len(b.payload)) or decode(b, *rest))
    default = list(loader(Samples(), batch_size=4))
    custom = list(loader(list(range(10)), batch_size=5, collate_fn=to_batch))
    for b in default:
        assert _shm.block_of(b["x"]._data) is not None and _shm.block_of(b["a"]._data) is not None
    for b in custom:
        assert _shm.block_of(b.images) is not None and _shm.block_of(b.labels._data) is not None
        assert b.images.shape == (5, 64, 64) and b.names == [str(v) for v in b.labels.tolist()]
        assert (b.images[:, 0, 0] == b.labels.numpy()).all()
        b.images[0] += 1  # the batch is an ordinary writable array
    # 80 KB of images per batch, only the structure pickled
    assert len(payload_sizes) == len(default) + len(custom) and max(payload_sizes) < 2000


def test_blocks_are_recycled_without_overwriting_kept_batches():
    dl = loader(Samples(64), batch_size=2, persistent_workers=True)
    names, kept = set(), []
    for epoch in range(3):
        for k, b in enumerate(dl):
            names.add(_shm.block_of(b["x"]._data).mapping.name)
            if k % 5 == 0:
                kept.append(b)  # still viewed: its blocks must not be handed back
    assert len(names) < 40  # 96 batches, a handful of blocks in rotation plus the kept ones
    for b in kept:
        i = b["i"].tolist()
        assert b["x"].tolist() == [[[float(j)] * 3] * 2 for j in i] and b["a"].tolist() == [[0, j, 2 * j, 3 * j]
                                                                                          for j in i]



class Params(jdata.Dataset):
    """Samples that are ``nn.Parameter`` s (with a user attribute) and plain tensors."""

    def __len__(self):
        return 2

    def __getitem__(self, i):
        p = jitorch.nn.Parameter(jitorch.full((2,), float(i)))
        p.tag = f"p{i}"
        return p, jitorch.nn.Parameter(jitorch.ones(1), requires_grad=False), jitorch.tensor(i)


def test_tensor_subclasses_keep_their_type_through_workers():
    # torch's workers keep a Parameter a Parameter (with its attributes); jitorch's used to hand back a plain Tensor.
    for i, (p, frozen, t) in enumerate(loader(Params(), batch_size=None, num_workers=1)):
        assert type(p) is jitorch.nn.Parameter and p.requires_grad and p.tag == f"p{i}" and p.tolist() == [i, i]
        assert type(frozen) is jitorch.nn.Parameter and not frozen.requires_grad
        assert type(t) is jitorch.Tensor and t.item() == i

# -- worker identity and seeding ----------------------------------------------------------------------------------
def test_worker_info_init_fn_and_seeds():
    g = jitorch.Generator().manual_seed(5)
    samples = list(loader(WorkerView(), batch_size=None, worker_init_fn=record_init, generator=g))
    base_seed = jitorch.empty((), dtype=jitorch.int64).random_(generator=jitorch.Generator().manual_seed(5)).item()
    assert [s["i"] for s in samples] == list(range(6)) and [s["id"] for s in samples] == [0, 1] * 3
    assert len({s["pid"] for s in samples} | {os.getpid()}) == 3
    for s in samples:
        wid = s["id"]
        assert s["num_workers"] == 2 and s["own_copy"] and s["seed"] == base_seed + wid
        expected_np = np.random.RandomState(_generate_state(base_seed, wid)).rand()
        expected_jt = jitorch.rand(1, generator=jitorch.Generator().manual_seed(base_seed + wid)).item()
        assert tuple(s["init"]) == (wid, random.Random(base_seed + wid).random(), expected_jt, expected_np)


def test_worker_seeds_change_each_epoch():
    dl = loader(WorkerView(), batch_size=None)
    assert {s["seed"] for s in dl} != {s["seed"] for s in dl}


# -- iterable datasets --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,shard,kwargs", [(11, True, dict(batch_size=2)), (11, True, dict(batch_size=3,
                                                                                            drop_last=True)),
                                            (7, True, dict(batch_size=None)), (5, False, dict(batch_size=2))])
def test_iterable_dataset_sharding_matches_torch(n, shard, kwargs):
    jt = loader(Sharded(n, shard), **kwargs)
    th = tdata.DataLoader(TorchSharded(n, shard), num_workers=2, timeout=TIMEOUT, **kwargs)
    assert flat(jt) == flat(th)


# -- persistent workers -------------------------------------------------------------------------------------------
def test_persistent_workers_keep_processes_and_state():
    dl = loader(Counting(), batch_size=2, persistent_workers=True)
    first = list(dl)
    pids = [w.pid for w in dl._iterator._workers]
    it = iter(dl)
    next(it)  # an epoch abandoned early must not disturb the next one
    second = list(dl)
    assert [w.pid for w in dl._iterator._workers] == pids and all(w.is_alive() for w in dl._iterator._workers)
    assert [b[0].tolist() for b in first] == [b[0].tolist() for b in second] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert min(b[1].min().item() for b in second) > max(b[1].max().item() for b in first)
    fresh = loader(Counting(), batch_size=2)
    assert [b[1].tolist() for b in fresh] == [b[1].tolist() for b in fresh]  # new workers, fresh copies


def test_persistent_workers_with_iterable_dataset():
    dl = loader(Sharded(9), batch_size=2, persistent_workers=True)
    assert [b.tolist() for b in dl] == [b.tolist() for b in dl] == [[0, 2], [1, 3], [4, 6], [5, 7], [8]]


def test_workers_stop_when_iterator_is_dropped():
    it = iter(loader(list(range(100)), batch_size=2))
    workers = list(it._workers)
    assert next(it).tolist() == [0, 1]
    del it
    gc.collect()
    assert not any(w.is_alive() for w in workers)



def test_iterator_shut_down_early_then_stops():
    # What teardown code does (``it._shutdown_workers()``): torch's iterator then raises StopIteration.
    it = iter(loader(list(range(8)), batch_size=2))
    assert next(it).tolist() == [0, 1]
    it._shutdown_workers()
    assert all(not w.is_alive() for w in it._workers)
    with pytest.raises(StopIteration):
        next(it)

# -- failures -----------------------------------------------------------------------------------------------------
def test_worker_exit_raises_clear_error():
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid \d+\) exited unexpectedly with exit code 7"):
        list(loader(Faulty("exit"), batch_size=2))


def test_persistent_loader_recovers_after_a_dead_worker():
    dl = loader(Faulty("exit", at=3), batch_size=2, persistent_workers=True)
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(dl)
    dl.dataset.at = -1  # the dataset copy of new workers no longer fails
    assert [b.tolist() for b in dl] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def test_killed_worker_raises_clear_error():
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid \d+\) is killed by signal: Killed"):
        list(loader(Faulty("kill"), batch_size=2))


def test_worker_exception_is_reraised_with_traceback_and_iteration_continues():
    it = iter(loader(Faulty("raise"), batch_size=2))
    assert next(it).tolist() == [0, 1] and next(it).tolist() == [2, 3]
    with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker process 0") as info:
        next(it)
    assert "bad sample 5" in str(info.value) and "in __getitem__" in str(info.value)
    assert [b.tolist() for b in it] == [[6, 7], [8, 9]]  # like PyTorch, the other batches still come
    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker process 1"):
        list(loader(Faulty("keyerror", at=3), batch_size=2))


def test_worker_init_fn_exception_is_reraised():
    def broken_init(worker_id):
        raise ZeroDivisionError("init failed")

    with pytest.raises(ZeroDivisionError, match="init failed"):
        list(loader(list(range(4)), worker_init_fn=broken_init))


def test_timeout():
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.1 seconds"):
        list(jdata.DataLoader(Faulty("sleep", at=0), num_workers=1, timeout=0.1))


# -- start methods ------------------------------------------------------------------------------------------------
class Arrays(jdata.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return np.full(3, i, np.float32), i


def test_spawn_context():
    # jitorch classes and a list only: a spawned worker unpickles the dataset, and a class from this module would
    # make it import torch.
    dataset = jdata.StackDataset([(np.full(3, i, np.float32), i) for i in range(6)],
                                 jdata.TensorDataset(jitorch.arange(12.0).view(6, 2)))
    got = list(loader(dataset, batch_size=4, multiprocessing_context="spawn"))
    expected = list(jdata.DataLoader(dataset, batch_size=4))

    def lists(batches):
        return [((x.tolist(), y.tolist()), [t.tolist() for t in ts]) for (x, y), ts in batches]

    assert lists(got) == lists(expected)
    assert got[0][0][0].dtype == jitorch.float32 and got[0][0][1].dtype == jitorch.int64



def test_spawn_with_unpicklable_arguments_warns_like_torch():
    dl = loader(list(range(4)), batch_size=2, num_workers=1, multiprocessing_context="spawn",
                collate_fn=lambda b: b)
    with pytest.warns(UserWarning, match="Got pickle error when attempting to start a worker Process"):
        with pytest.raises(AttributeError, match="Can't pickle local object"):
            iter(dl)

def test_torch_multiworker_parity_for_sequential_loading():
    class TorchArrays(tdata.Dataset):
        __len__, __getitem__ = Arrays.__len__, Arrays.__getitem__

    jt = [(x.tolist(), y.tolist()) for x, y in loader(Arrays(), batch_size=4)]
    th = [(x.tolist(), y.tolist()) for x, y in tdata.DataLoader(TorchArrays(), batch_size=4, num_workers=2,
                                                                 timeout=TIMEOUT)]
    assert jt == th
