"""Tensors in shared memory across processes (Hogwild): ``Module.share_memory()`` then workers started by fork,
spawn or forkserver train the parent's parameters in place, and a shared tensor sent through a Queue is the same
memory on both sides, as with torch.multiprocessing. Unshared tensors still travel by value."""
import os

import numpy as np
import pytest

import jitorch
import jitorch.multiprocessing as mp


def _train(model, queue, steps):
    opt = jitorch.optim.SGD(model.parameters(), lr=0.05)  # (0.1 flips the output's sign each step: 6 steps undo)
    for _ in range(steps):
        opt.zero_grad()
        model(jitorch.ones(2, 4)).pow(2).sum().backward()
        opt.step()
    shared, copied = queue.get(), queue.get()
    shared.mul_(2)
    copied.mul_(2)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_update_shared_parameters_and_queued_tensors_in_place(method):
    jitorch.manual_seed(0)
    model = jitorch.nn.Linear(4, 1)
    assert not model.weight.is_shared()
    model.share_memory()
    assert model.weight.is_shared() and model.bias.is_shared() and isinstance(model.weight, jitorch.nn.Parameter)
    before = model.weight.detach().clone()
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    shared, copied = jitorch.ones(3).share_memory_(), jitorch.ones(3)
    workers = [ctx.Process(target=_train, args=(model, queue, 3)) for _ in range(2)]
    for w in workers:
        w.start()
    for _ in workers:
        queue.put(shared)
        queue.put(copied)
    for w in workers:
        w.join()
        assert w.exitcode == 0
    # Both workers' SGD steps landed in the parent's parameters; the queued shared tensor was doubled twice.
    assert not np.allclose(model.weight.detach().numpy(), before.numpy())
    assert shared.tolist() == [4.0, 4.0, 4.0] and copied.tolist() == [1.0, 1.0, 1.0]


def test_a_shared_tensor_keeps_its_values_and_the_segment_goes_with_it():
    t = jitorch.arange(6.0).reshape(2, 3)
    t.requires_grad_(True)
    assert t.share_memory_() is t and t.is_shared() and t.requires_grad
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    (t * 2).sum().backward()
    assert t.grad.tolist() == [[2.0] * 3] * 2
    from jitorch.multiprocessing._shared import _segment_of

    name = _segment_of(t._data).name
    assert os.path.exists(f"/dev/shm/{name}")
    del t
    import gc

    gc.collect()
    assert not os.path.exists(f"/dev/shm/{name}")  # unlinked once its array is freed
