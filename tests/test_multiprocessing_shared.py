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
    t = jitorch.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
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


def _drop_inherited_copy(model):
    model.weight.data = jitorch.zeros(1, 4)  # the child's array goes: the parent's segment must stay


def test_a_forked_child_dropping_its_copy_leaves_the_segment_and_a_read_at_exit_works(tmp_path):
    import subprocess
    import sys

    model = jitorch.nn.Linear(4, 1)
    model.share_memory()
    from jitorch.multiprocessing._shared import _segment_of

    name = _segment_of(model.weight._data).name
    child = mp.get_context("fork").Process(target=_drop_inherited_copy, args=(model,))
    child.start()
    child.join()
    assert child.exitcode == 0 and os.path.exists(f"/dev/shm/{name}")
    # A shared tensor read during interpreter teardown (a __del__) must not find its memory unmapped.
    script = tmp_path / "teardown.py"
    script.write_text("import jitorch\nclass Holder:\n    def __init__(self, t):\n        self.t = t\n"
                      "    def __del__(self):\n        print(float(self.t.sum()))\n"
                      "t = jitorch.ones(1000).share_memory_()\nh = Holder(t)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "1000.0", done.stderr


def test_sharing_a_view_warns_and_a_transposed_tensor_keeps_its_strides():
    base = jitorch.zeros(4)
    with pytest.warns(UserWarning, match="on a view"):
        base[:2].share_memory_()
    t = jitorch.tensor(np.arange(12.0).reshape(3, 4).T.copy(order="F")).t()
    strides = t.stride()
    with pytest.warns(UserWarning):
        t.share_memory_()
    assert t.stride() == strides and t.is_shared()
