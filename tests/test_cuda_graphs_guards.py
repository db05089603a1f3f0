"""CUDA graph capture guards without a GPU (CPU arrays standing in for device memory): forbidden operations, host
copies, replayable random draws, and guards ending a pool capture.
"""
import numpy as np
import pytest

import jitorch
from jitorch import _creation, _random
from jitorch.cuda._graph_hooks import CaptureGuards
from jitorch.ops import movement as movement_ops
from jitorch.runtime.allocator import PoolCapture

from cuda_graphs_helpers import CAPTURE, KiB, make


# -- capture guards (CPU arrays standing in for device memory) -----------------------------------------------------
def fake_device_guards(ended, **kwargs):
    kwargs.setdefault("is_device", lambda a: True)
    kwargs.setdefault("on_device", lambda dev: True)
    kwargs.setdefault("device_empty", lambda shape, dtype, dev: np.full(shape, np.nan).astype(dtype))
    return CaptureGuards(lambda: ended.append(True), **kwargs)


READS = {
    "item": (lambda t: t.sum().item(), "item()"),
    "tolist": (lambda t: t.tolist(), "tolist()"),
    "numpy": (lambda t: t.numpy(), "numpy()"),
    "bool": (lambda t: bool(t.sum() > 0), "bool()"),
    "float": (lambda t: float(t.sum()), "float()"),
    "index": (lambda t: [1, 2, 3][t.long()[0]], "__index__"),
    "print": (lambda t: repr(t), "print/repr"),
    "asarray": (lambda t: np.asarray(t), "numpy.asarray()"),
    "sync": (lambda t: jitorch.cuda.synchronize(), "jitorch.cuda.synchronize()"),
    "stream_sync": (lambda t: jitorch.cuda.Stream.synchronize(None), "Stream.synchronize()"),
    "event_query": (lambda t: jitorch.cuda.Event.query(None), "Event.query()"),
    "to_host": (lambda t: movement_ops.move_array(t._data, "cpu"), "device-to-host copy"),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_forbidden_operation_raises_names_it_and_ends_the_capture(name):
    fn, shown = READS[name]
    ended = []
    guards = fake_device_guards(ended)
    original_item = jitorch.Tensor.item
    guards.install()
    t = jitorch.ones(3)
    with pytest.raises(RuntimeError, match="not permitted while capturing") as info:
        fn(t)
    assert shown in str(info.value) and "capture was ended" in str(info.value)
    assert ended == [True] and not guards.installed
    assert jitorch.Tensor.item is original_item and movement_ops.move_array is _creation.move_array
    assert t.sum().item() == 3.0  # everything is back to normal


def test_host_to_device_copies_are_refused():
    ended = []
    guards = fake_device_guards(ended, is_device=lambda a: False, on_device=lambda dev: False)
    guards.install()
    with pytest.raises(RuntimeError, match="host-to-device copy"):
        _creation.move_array(np.ones(2), "cuda")
    assert ended == [True] and not guards.installed


def test_cpu_tensors_are_untouched_by_a_cuda_capture():
    ended = []
    guards = CaptureGuards(lambda: ended.append(True))  # the real predicates: only CuPy arrays are device arrays
    guards.install()
    try:
        t = jitorch.tensor([1.0, 2.0])
        values = (t.sum().item(), t.tolist(), bool(t[0] > 0), repr(t), jitorch.rand(2).shape)
    finally:
        guards.uninstall()
    assert values[:3] == (3.0, [1.0, 2.0], True) and "tensor" in values[3] and ended == [] and not guards.draws


# With the default generator rand, randn and randint are random rows whose device kernel draws through these same
# hooks; the fake device's arrays are NumPy's, which that kernel draws on the host, so these name their generator.
SAMPLERS = {
    "rand": lambda: jitorch.rand(3, 4, generator=jitorch.default_generator),
    "randn": lambda: jitorch.randn(5, dtype=jitorch.float64, generator=jitorch.default_generator),
    "randint": lambda: jitorch.randint(0, 100, (6,), generator=jitorch.default_generator),
    "randperm": lambda: jitorch.randperm(7),
    "normal_": lambda: jitorch.empty(4).normal_(2.0, 0.5),
    "uniform_": lambda: jitorch.empty(2, 2).uniform_(-1, 1),
    "exponential_": lambda: jitorch.empty(3).exponential_(),
    "cauchy_": lambda: jitorch.empty(3).cauchy_(),  # torch's stream draws cauchy_'s values whole (no transform after)
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_random_draws_replay_the_eager_sequence_and_advance(name):
    sampler = SAMPLERS[name]
    ended = []
    guards = fake_device_guards(ended)
    guards.install()
    try:
        out = sampler()  # at capture: a static buffer, filled only by replay
    finally:
        guards.uninstall()
    assert len(guards.draws) == 1 and ended == []

    def replay():  # the draw refreshes the buffer the graph reads (for in-place samplers a captured copy_ follows)
        for draw in guards.draws:
            draw()
        return guards.draws[0].buffer.astype(out.numpy().dtype)

    jitorch.manual_seed(123)
    replays = [replay() for _ in range(3)]
    jitorch.manual_seed(123)
    eager = [sampler().numpy() for _ in range(3)]
    for r, e in zip(replays, eager):
        assert r.dtype == e.dtype and np.array_equal(r, e)
    assert not np.array_equal(replays[0], replays[1])  # the generator advanced between replays


def test_random_draws_from_an_explicit_generator():
    gen = jitorch.Generator().manual_seed(5)
    ended = []
    guards = fake_device_guards(ended)
    guards.install()
    try:
        out = jitorch.randn(4, generator=gen)
    finally:
        guards.uninstall()
    gen.manual_seed(9)
    guards.draws[0]()
    assert np.array_equal(out.numpy(), jitorch.randn(4, generator=jitorch.Generator().manual_seed(9)).numpy())


@pytest.mark.parametrize("sampler", [lambda: jitorch.empty(4).bernoulli_(0.3),
                                     lambda: jitorch.empty(3, 2).t().cauchy_()])  # a strided draw: transposed
def test_unreplayable_samplers_raise_and_end_the_capture(sampler):
    ended = []
    guards = fake_device_guards(ended)
    guards.install()
    with pytest.raises(NotImplementedError, match="cannot be replayed"):
        sampler()
    assert ended == [True] and not guards.installed and _random._sample.__module__ == "jitorch._random"


def test_draws_with_array_parameters_are_refused():
    ended = []
    guards = fake_device_guards(ended)
    guards.install()
    with pytest.raises(NotImplementedError, match="parameters are arrays"):
        _random._rng(None).poisson(np.ones(3), (3,))
    assert ended == [True] and not guards.installed


def test_guards_with_a_pool_capture_end_both_on_a_forbidden_op():
    """The CUDAGraph composition on the fake device: a forbidden op ends the device capture and the routing."""
    alloc, driver = make()
    cap = PoolCapture(alloc, driver)
    cap.begin(CAPTURE)
    guards = CaptureGuards(cap.abort, is_device=lambda a: True)
    guards.install()
    alloc.malloc(KiB, stream=CAPTURE)
    with pytest.raises(RuntimeError, match="item"):
        jitorch.ones(1).item()
    assert not driver.stream_is_capturing(CAPTURE) and not alloc.capturing()
    assert alloc.pool_use_count(cap.pool_id) == 0 and not cap.capturing
    cap.begin(CAPTURE)  # usable again
    assert cap.end() is not None
