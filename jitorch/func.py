"""``torch.func``'s function transforms that reverse-mode autograd can express: ``functional_call``, ``grad``,
``grad_and_value``, ``vjp``, ``jacrev``/``jacfwd`` and ``hessian``, over pytrees (tuples, lists, dicts) of tensors.

Transforms nest (``grad(grad(f))``): inside another transform each one keeps its graph so the outer one can
differentiate it; the outermost returns plain (detached) tensors, as torch's do. ``vmap`` is not provided.

>>> import jitorch
>>> from jitorch.func import grad
>>> x = jitorch.tensor(1.0)
>>> grad(lambda q: q ** 3)(x), grad(grad(lambda q: q ** 3))(x)
(tensor(3.), tensor(6.))
"""
from __future__ import annotations

import functools

from . import _creation
from ._tensor import Tensor
from .autograd.functional import jacobian
from .autograd.grad_mode import enable_grad
from .nn.utils.stateless import call_with as functional_call
from .utils._pytree import tree_flatten, tree_unflatten

__all__ = ["functional_call", "grad", "grad_and_value", "vjp", "jacrev", "jacfwd", "hessian"]

_DEPTH = [0]  # transforms running: only the outermost detaches its results


def _leaf(t):
    # Inside an outer transform the input keeps its history (a view), so the outer one sees through this one.
    return t.view_as(t) if t.requires_grad and _DEPTH[0] > 1 else t.detach().requires_grad_(True)


def _finish(tree):
    if _DEPTH[0] > 1:
        return tree
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([x.detach() if isinstance(x, Tensor) else x for x in leaves], spec)


def _select(args, argnums):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for n in nums:
        if not -len(args) <= n < len(args):
            raise RuntimeError(f"Got argnums={argnums}, but only {len(args)} positional inputs")
    return nums


def _transform(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        _DEPTH[0] += 1
        try:
            with enable_grad():
                return fn(*args, **kwargs)
        finally:
            _DEPTH[0] -= 1
    return run


def grad_and_value(func, argnums=0, has_aux=False):
    """``f -> (df/dargs[argnums], f(args))`` for ``f`` returning one element (``(value, aux)`` with ``has_aux``)."""
    @_transform
    def wrapper(*args, **kwargs):
        from .autograd import grad as autograd_grad

        nums = _select(args, argnums)
        args = list(args)
        specs, flat = [], []
        for n in nums:
            leaves, spec = tree_flatten(args[n])
            leaves = [_leaf(x) for x in leaves]
            args[n] = tree_unflatten(leaves, spec)
            specs.append((spec, len(leaves)))
            flat += leaves
        out = func(*args, **kwargs)
        value, aux = out if has_aux else (out, None)
        if not isinstance(value, Tensor) or value.nelement() != 1:
            raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got "
                               f"{type(value).__name__}" + (f" with {value.nelement()} elements" if
                                                             isinstance(value, Tensor) else ""))
        grads = autograd_grad(value, flat, create_graph=True, allow_unused=True)
        grads = [g if g is not None else _creation.zeros_like(x) for g, x in zip(grads, flat)]
        trees, start = [], 0
        for spec, n in specs:
            trees.append(tree_unflatten(grads[start:start + n], spec))
            start += n
        result = trees[0] if isinstance(argnums, int) else tuple(trees)
        return _finish((result, (value, aux) if has_aux else value))
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """``f -> df/dargs[argnums]`` (with ``has_aux``: ``(gradient, aux)``)."""
    g = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        gradient, value = g(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient
    return wrapper


@_transform
def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)``; ``vjp_fn(cotangents)`` gives one gradient per primal, as a tuple."""
    from .autograd import grad as autograd_grad

    leaves, spec = tree_flatten(primals)
    leaves = [_leaf(x) for x in leaves]
    out = func(*tree_unflatten(leaves, spec))
    value, aux = out if has_aux else (out, None)
    out_leaves, out_spec = tree_flatten(value)
    depth = _DEPTH[0]

    def vjp_fn(cotangents):
        ct_leaves, _ = tree_flatten(cotangents)
        grads = autograd_grad(out_leaves, leaves, ct_leaves, retain_graph=True, create_graph=depth > 1,
                              allow_unused=True)
        grads = [g if g is not None else _creation.zeros_like(x) for g, x in zip(grads, leaves)]
        return tree_unflatten(grads, spec) if depth > 1 else tuple(
            x.detach() if isinstance(x, Tensor) else x for x in tree_unflatten(grads, spec))

    result = (_finish(value), vjp_fn)
    return (*result, _finish(aux)) if has_aux else result


def jacrev(func, argnums=0, has_aux=False):
    """``f -> d f / d args[argnums]``, each block shaped ``output.shape + input.shape``."""
    if has_aux:
        raise NotImplementedError("jitorch.func.jacrev: has_aux is not supported")

    @_transform
    def wrapper(*args, **kwargs):
        nums = _select(args, argnums)

        def partial(*chosen):
            full = list(args)
            for n, x in zip(nums, chosen):
                full[n] = x
            return func(*full, **kwargs)

        chosen = tuple(_leaf(args[n]) for n in nums)
        jac = jacobian(partial, chosen if not isinstance(argnums, int) else chosen[0], create_graph=True)
        return _finish(jac)
    return wrapper


jacfwd = jacrev  # the same Jacobian; jitorch computes it in reverse mode either way


def hessian(func, argnums=0):
    """``f -> d^2 f / d args[argnums]^2`` (the Jacobian of the Jacobian)."""
    return jacfwd(jacrev(func, argnums), argnums)
