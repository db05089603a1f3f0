"""torch.utils.swap_tensors and torch.__future__'s module-conversion flags, against torch."""
import weakref

import numpy as np
import pytest
import torch

import jitorch


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_swap_tensors_trades_values_types_and_attributes(lib):
    a, b = lib.ones(2), lib.zeros(3, dtype=lib.float64)
    a.tag = "a"
    lib.utils.swap_tensors(a, b)
    assert a.tolist() == [0.0, 0.0, 0.0] and a.dtype == lib.float64 and b.tolist() == [1.0, 1.0]
    assert b.tag == "a" and not hasattr(a, "tag")
    p, q = lib.nn.Parameter(lib.ones(2)), lib.zeros(2)
    lib.utils.swap_tensors(p, q)
    assert type(p) is lib.Tensor and type(q) is lib.nn.Parameter and q.requires_grad and not p.requires_grad
    keep = weakref.ref(q)
    with pytest.raises(RuntimeError, match="Cannot swap t2 because it has weakref associated with it"):
        lib.utils.swap_tensors(p, q)
    del keep


def test_swap_tensors_refuses_non_tensors_by_name():
    with pytest.raises(TypeError, match="swap_tensors: expected t2 to be a Tensor, got int"):
        jitorch.utils.swap_tensors(jitorch.ones(1), 3)


def _convert(lib, mode):
    future = __import__(f"{lib.__name__}.__future__", fromlist=["x"])
    torch_like = lib.nn.Linear(3, 2)
    with lib.no_grad():
        torch_like.weight.copy_(lib.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3) / 10))
        torch_like.bias.zero_()
    before = torch_like.weight
    opt = lib.optim.SGD(torch_like.parameters(), lr=0.1)
    torch_like(lib.ones(1, 3)).sum().backward()
    setter = {"overwrite": future.set_overwrite_module_params_on_conversion,
              "swap": future.set_swap_module_params_on_conversion}.get(mode)
    try:
        if setter:
            setter(True)
        torch_like.double()
    finally:
        if setter:
            setter(False)
    after = torch_like.weight
    opt.step()  # an optimizer built before the conversion steps the objects it holds
    return (after is before, str(after.dtype).rpartition(".")[2], str(after.grad.dtype).rpartition(".")[2],
            type(after).__name__, after.detach().numpy().round(6).tolist(), before.detach().numpy().tolist())


@pytest.mark.parametrize("mode", ["default", "overwrite", "swap"])
def test_module_conversion_modes_match_torch(mode):
    assert _convert(jitorch, mode) == _convert(torch, mode)


def test_flags_read_back():
    import jitorch.__future__ as future
    for setter, getter in ((future.set_overwrite_module_params_on_conversion,
                            future.get_overwrite_module_params_on_conversion),
                           (future.set_swap_module_params_on_conversion, future.get_swap_module_params_on_conversion)):
        setter(True)
        try:
            assert getter() is True
        finally:
            setter(False)
        assert getter() is False


def test_a_graph_that_saved_a_swapped_tensor_refuses_its_backward():
    x = jitorch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    jitorch.utils.swap_tensors(x, jitorch.tensor([10.0, 20.0, 30.0], requires_grad=True))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    assert jitorch.utils.weak.WeakTensorKeyDictionary is not None   # reachable as an attribute, as torch's
