"""Module-level oracle checks: run a jitorch layer and the same PyTorch layer with IDENTICAL weights and data.

``check_module(jt_mod, th_mod, inputs)`` copies torch's parameters and buffers into the jitorch module through NumPy,
runs both forwards (train or eval mode), compares the outputs, backpropagates the same random upstream gradients and
compares the input gradients and every parameter gradient by name.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same

__all__ = ["copy_weights", "check_module", "check_call", "flat_tensors", "same_parameter_names",
           "torch_single_thread"]


@pytest.fixture(autouse=True, scope="module")
def torch_single_thread():
    """Run the oracle on one thread: torch's thread pool spins badly on a shared, loaded CPU (tiny ops take 100 ms),
    and the values do not depend on it. Import this fixture into a test module to apply it there."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def copy_weights(jt_mod, th_mod):
    """Load torch's state into the jitorch module (names and shapes must match exactly)."""
    state = {k: jitorch.tensor(v.detach().numpy().copy()) for k, v in th_mod.state_dict().items()}
    jt_mod.load_state_dict(state, strict=True)


def same_parameter_names(jt_mod, th_mod):
    jt = [(n, tuple(p.shape)) for n, p in jt_mod.named_parameters()]
    th = [(n, tuple(p.shape)) for n, p in th_mod.named_parameters()]
    assert jt == th, f"parameters differ:\n jitorch {jt}\n torch   {th}"


def flat_tensors(out):
    """Tensors of a nested output (tuples/lists), in order; ``None`` entries are skipped."""
    if out is None:
        return []
    if isinstance(out, (jitorch.Tensor, torch.Tensor)):
        return [out]
    items = []
    for o in out:
        items += flat_tensors(o)
    return items


def _leaf(arr, framework, grad):
    if not isinstance(arr, np.ndarray):
        return arr
    t = jitorch.tensor(arr) if framework == "jt" else torch.from_numpy(arr.copy())
    if grad and arr.dtype.kind == "f":
        t.requires_grad_(True)
    return t


def check_module(jt_mod, th_mod, inputs, *, kwargs=None, atol=1e-5, rtol=1e-5, grad_atol=None, grad_rtol=None,
                 train=True, grad=True, copy=True, seed=0):
    """Compare ``jt_mod(*inputs, **kwargs)`` with ``th_mod(...)``: outputs, input grads and parameter grads.

    ``inputs``/``kwargs`` hold NumPy arrays (float ones become leaves requiring grad) or other values passed as-is.
    Returns the two outputs.
    """
    kwargs = kwargs or {}
    if copy:
        copy_weights(jt_mod, th_mod)
    jt_mod.train(train)
    th_mod.train(train)
    jt_args = [_leaf(a, "jt", grad) for a in inputs]
    th_args = [_leaf(a, "th", grad) for a in inputs]
    jt_kw = {k: _leaf(v, "jt", False) for k, v in kwargs.items()}
    th_kw = {k: _leaf(v, "th", False) for k, v in kwargs.items()}
    th_out = th_mod(*th_args, **th_kw)
    jt_out = jt_mod(*jt_args, **jt_kw)
    jt_items, th_items = flat_tensors(jt_out), flat_tensors(th_out)
    assert len(jt_items) == len(th_items), f"{len(jt_items)} outputs != torch's {len(th_items)}"
    for i, (j, t) in enumerate(zip(jt_items, th_items)):
        assert_same(j, t, atol=atol, rtol=rtol, what=f"output {i}")
    if not grad:
        return jt_out, th_out
    rng = np.random.default_rng(seed)
    jt_roots, th_roots, jt_grads, th_grads = [], [], [], []
    for j, t in zip(jt_items, th_items):
        if not t.requires_grad:
            continue
        g = rng.standard_normal(tuple(t.shape))
        jt_roots.append(j)
        th_roots.append(t)
        jt_grads.append(jitorch.tensor(g, dtype=j.dtype))
        th_grads.append(torch.from_numpy(g).to(t.dtype))
    torch.autograd.backward(th_roots, th_grads)
    jitorch.autograd.backward(jt_roots, jt_grads)
    gatol = grad_atol if grad_atol is not None else atol
    grtol = grad_rtol if grad_rtol is not None else rtol
    for k, (j, t) in enumerate(zip(jt_args, th_args)):
        if isinstance(t, torch.Tensor) and t.requires_grad and t.grad is not None:
            assert_same(j.grad, t.grad, atol=gatol, rtol=grtol, what=f"grad of input {k}")
    th_params = dict(th_mod.named_parameters())
    for name, p in jt_mod.named_parameters():
        tp = th_params[name]
        if tp.grad is None:
            assert p.grad is None or not np.any(p.grad.numpy()), f"{name}: only jitorch has a gradient"
            continue
        assert p.grad is not None, f"{name}: torch has a gradient, jitorch has none"
        assert_same(p.grad, tp.grad, atol=gatol, rtol=grtol, what=f"grad of {name}")
    return jt_out, th_out


class _Bound:
    """A module seen through a call: ``check_module`` runs ``fn(*inputs)`` but trains/reads ``module``."""

    def __init__(self, module, fn):
        self.module, self.fn = module, fn

    def __call__(self, *args, **kwargs):
        return self.fn(self.module, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.module, name)


def check_call(jt_mod, th_mod, fn, inputs, **kw):
    """``check_module`` for a custom call ``fn(module, *inputs)`` (e.g. ``mha(x, x, x)`` or ``lstm(x, (h, c))``)."""
    copy_weights(jt_mod, th_mod)
    return check_module(_Bound(jt_mod, fn), _Bound(th_mod, fn), inputs, copy=False, **kw)
