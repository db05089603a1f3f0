"""``torch.func``'s function transforms that reverse-mode autograd can express: ``functional_call``, ``grad``,
``grad_and_value``, ``vjp``, ``jacrev``/``jacfwd`` and ``hessian``, over pytrees (tuples, lists, dicts) of tensors.

Transforms nest (``grad(grad(f))``): inside another transform each one keeps its graph so the outer one can
differentiate it; the outermost returns plain (detached) tensors, as torch's do. ``jvp`` and ``linearize`` take
the forward-mode product by the double-vjp trick (the vjp is linear in its cotangent, so differentiating it against
the cotangent gives J v); ``vmap`` runs the function once per sample (`jitorch._vmap`).

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
from .autograd.functional import double_vjp, jacobian
from .autograd.grad_mode import enable_grad
from .nn.utils.stateless import call_with as functional_call
from ._vmap import vmap
from .utils._pytree import tree_flatten, tree_unflatten

__all__ = ["functional_call", "grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "vmap", "stack_module_state"]

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


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """``f -> d f / d args[argnums]`` over pytrees: for each output leaf, the input arguments' structure (a tuple of
    them when ``argnums`` is a tuple) holding blocks shaped ``output.shape + input.shape``; with ``has_aux``, ``f``
    returns ``(output, aux)`` and the transform ``(jacobian, aux)``.

    >>> import jitorch
    >>> params = {"w": jitorch.tensor([1.0, 2.0]), "b": jitorch.tensor([3.0])}
    >>> jac = jacrev(lambda p: (p["w"] ** 2).sum() * p["b"].sum())(params)
    >>> jac["w"].tolist(), jac["b"].tolist()
    ([6.0, 12.0], [5.0])
    """
    @_transform
    def wrapper(*args, **kwargs):
        nums = _select(args, argnums)
        specs, flat = [], []
        for n in nums:
            leaves, spec = tree_flatten(args[n])
            specs.append((spec, len(leaves)))
            flat += [_leaf(x) for x in leaves]
        seen = {}

        def flat_fn(*leaves):
            full, start = list(args), 0
            for n, (spec, count) in zip(nums, specs):
                full[n] = tree_unflatten(list(leaves[start:start + count]), spec)
                start += count
            out = func(*full, **kwargs)
            if has_aux and not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError("jacrev(f, ...)(*args): output of function f should be a tuple: (output, aux) "
                                   "if has_aux is True")
            value, seen["aux"] = out if has_aux else (out, None)
            out_leaves, seen["spec"] = tree_flatten(value)
            if not all(isinstance(o, Tensor) for o in out_leaves):
                raise RuntimeError("jacrev(f, ...)(*args): Expected f(*args) to return only tensors, got unsupported "
                                   f"type {next(type(o).__name__ for o in out_leaves if not isinstance(o, Tensor))}")
            return tuple(out_leaves)

        blocks = jacobian(flat_fn, tuple(flat), create_graph=True)  # [output leaf][input leaf]
        per_output = []
        for row in blocks:
            trees, start = [], 0
            for spec, count in specs:
                trees.append(tree_unflatten(list(row[start:start + count]), spec))
                start += count
            per_output.append(trees[0] if isinstance(argnums, int) else tuple(trees))
        result = tree_unflatten(per_output, seen["spec"])
        return _finish((result, seen["aux"]) if has_aux else result)
    return wrapper


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """``jacrev``'s Jacobian (jitorch computes it in reverse mode either way), with torch's signature."""
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    """``f -> d^2 f / d args[argnums]^2`` (the Jacobian of the Jacobian)."""
    return jacfwd(jacrev(func, argnums), argnums)


def _check_pairs(where, primals, tangents):
    for what, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, tuple):
            raise RuntimeError(f"{where}: Expected {what} to be a tuple. E.g. it should be valid to call f(*{what}).")
    p_leaves, p_spec = tree_flatten(primals)
    t_leaves, t_spec = tree_flatten(tangents)
    if p_spec != t_spec:
        raise RuntimeError(f"{where}: Expected primals and tangents to have the same python structure. For example, "
                           "if primals is a tuple of 3 tensors, tangents also must be.")
    for p, t in zip(p_leaves, t_leaves):
        if not isinstance(p, Tensor) or not isinstance(t, Tensor):
            raise RuntimeError(f"{where}: Expected primals and tangents to only contain Tensors, got "
                               f"{type(p).__name__} and {type(t).__name__}")
        if p.shape != t.shape:  # torch's words (from setting the dual tensor's forward gradient)
            raise RuntimeError("Trying to set a forward gradient that has a different size than that of the original "
                               f"Tensor, this is not supported. Tensor is of size {list(p.shape)} while the given "
                               f"forward gradient is of size {list(t.shape)}.")
    return p_leaves, p_spec, t_leaves


@_transform
def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J tangents)``: the Jacobian-vector product (forward mode), and ``aux`` with ``has_aux``.

    >>> import jitorch
    >>> jvp(lambda x: x ** 2, (jitorch.tensor([1.0, 3.0]),), (jitorch.tensor([1.0, 1.0]),))
    (tensor([1., 9.]), tensor([2., 6.]))
    """

    leaves, spec, t_leaves = _check_pairs("jvp(f, primals, tangents)", primals, tangents)
    leaves = [_leaf(x) for x in leaves]
    out = func(*tree_unflatten(leaves, spec))
    value, aux = out if has_aux else (out, None)
    out_leaves, out_spec = tree_flatten(value)
    if not all(isinstance(o, Tensor) for o in out_leaves):
        raise RuntimeError("jvp(f, primals, tangents): Expected f(*primals) to return only tensors")
    forward = double_vjp(out_leaves, leaves, t_leaves, create_graph=_DEPTH[0] > 1)
    forward = [f if f is not None else _creation.zeros_like(o) for f, o in zip(forward, out_leaves)]
    result = (_finish(value), _finish(tree_unflatten(forward, out_spec)))
    return (*result, _finish(aux)) if has_aux else result


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)`` where ``jvp_fn(*tangents)`` is ``jvp(func, primals, tangents)[1]``.

    >>> import jitorch
    >>> out, jvp_fn = linearize(jitorch.sin, jitorch.tensor([0.0, 1.0]))
    >>> jvp_fn(jitorch.tensor([1.0, 1.0]))
    tensor([1.0000, 0.5403])
    """
    kept = tuple(p.detach() if isinstance(p, Tensor) else p for p in primals)
    value = jvp(func, kept, tuple(_creation.zeros_like(p) for p in kept))[0]

    def jvp_fn(*tangents):
        return jvp(func, kept, tangents)[1]
    return value, jvp_fn


def stack_module_state(models):
    """``(params, buffers)``: each parameter and buffer of same-structured ``models`` stacked along a new first
    dimension, by name (for ``vmap`` over ``functional_call``, ensembling). The stacked parameters are new leaves.

    >>> import jitorch
    >>> params, buffers = stack_module_state([jitorch.nn.Linear(3, 2) for _ in range(4)])
    >>> params["weight"].shape, params["weight"].requires_grad
    (jitorch.Size([4, 2, 3]), True)
    """
    from ._movement import stack

    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if any(m.training != models[0].training for m in models):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    names = [n for n, _ in models[0].named_parameters()]
    if any([n for n, _ in m.named_parameters()] != names for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    params = {n: stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_(
        dict(models[0].named_parameters())[n].requires_grad) for n in names}
    buffers = {n: stack([dict(m.named_buffers())[n] for m in models]) for n, _ in models[0].named_buffers()}
    return params, buffers
