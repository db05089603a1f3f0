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
from .autograd.grad_mode import enable_grad, is_grad_enabled
from .nn.utils.stateless import call_with as functional_call
from ._vmap import vmap
from ._func_extras import (debug_unwrap, functionalize, replace_all_batch_norm_modules_,  # noqa: F401
                           stack_module_state)
from .utils._pytree import tree_flatten, tree_unflatten, treespec_pprint

__all__ = ["functional_call", "grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "vmap", "stack_module_state", "functionalize", "replace_all_batch_norm_modules_", "debug_unwrap"]

_DEPTH = [0]  # transforms running: only the outermost detaches its results
_OUTER_GRAD = [False]  # whether grad mode was on where the outermost transform was called


def _keeps_graph():
    """Whether results must stay differentiable: for an enclosing transform, or for autograd outside them all (a
    closed-over parameter or an input that requires grad, as in PINN losses and MAML)."""
    return _DEPTH[0] > 1 or _OUTER_GRAD[0]


def _leaf(t):
    if not isinstance(t, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(t)}")
    # An input that requires grad keeps its history (a view), so an enclosing transform or the autograd outside
    # sees through this one; otherwise a new leaf, marked so `_finish` can tell it from the caller's tensors.
    if t.requires_grad and _keeps_graph():
        return t.view_as(t)
    if not (t.is_floating_point() or t.is_complex()):  # torch's words from requires_grad_ on a transform's wrapper
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    leaf = t.detach().requires_grad_(True)
    leaf._func_input = True
    return leaf


def _reaches_outside(t, seen=None):
    """Whether ``t``'s graph reaches a leaf requiring grad that no transform made (torch's levels keep the result
    attached to such a leaf and detach it from the transforms' own inputs). ``seen``: nodes a walk that found
    nothing already covered, shared between the results of one transform (their graphs overlap)."""
    if not t.requires_grad:
        return False
    if t.grad_fn is None:
        return not t.__dict__.get("_func_input", False)
    stack, seen = [t.grad_fn], set() if seen is None else seen
    while stack:
        for edge in stack.pop().next:
            if edge is None:
                continue
            target = edge[0]
            if isinstance(target, Tensor):
                if target.requires_grad and not target.__dict__.get("_func_input", False):
                    return True
            elif id(target) not in seen:
                seen.add(id(target))
                stack.append(target)
    return False


def _detached(tensors, keep):
    """Each tensor, detached unless ``keep`` and its graph reaches the caller's tensors."""
    out, seen = [], set()
    for x in tensors:
        if isinstance(x, Tensor) and not (keep and _reaches_outside(x, seen)):
            x = x.detach()
        elif isinstance(x, Tensor):
            seen = set()  # that walk stopped early: what it saw is not known to be clean
        out.append(x)
    return out


def _finish(tree):
    if _DEPTH[0] > 1:
        return tree
    leaves, spec = tree_flatten(tree)
    return tree_unflatten(_detached(leaves, _OUTER_GRAD[0]), spec)


def _split_aux(where, out, has_aux):
    """``(value, aux)`` of ``f``'s output ``out`` (``aux`` None without ``has_aux``)."""
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{where}: output of function f should be a tuple: (output, aux) if has_aux is True")
    for x in tree_flatten(out[1])[0]:  # torch unwraps aux leaf by leaf and accepts only tensors
        if not isinstance(x, Tensor):
            raise RuntimeError(f"Expected tensors, got unsupported type {type(x)}")
    return out


def _only_tensors(where, outputs):
    for o in outputs:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"{where}: expected f(*primals) to return only tensors, got unsupported type {type(o)}")


def _refuse_complex(where, tensors, what):
    """torch's jacrev/jacfwd refuse complex inputs and outputs (with its wording: "input idx" for outputs too)."""
    for i, t in enumerate(tensors):
        if isinstance(t, Tensor) and t.is_complex():
            raise RuntimeError(f"{where}: Expected all {what} to be real but received complex tensor at flattened "
                               f"input idx: {i}")


def _select(args, argnums):
    if not isinstance(argnums, (int, tuple)):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    nums = (argnums,) if isinstance(argnums, int) else argnums
    for n in nums:
        if not isinstance(n, int):
            raise RuntimeError(f"argnum must be int, got: {type(n)}")
        if not -len(args) <= n < len(args):
            raise RuntimeError(f"Got argnum={n}, but only {len(args)} positional inputs")
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    if len({n % len(args) for n in nums}) != len(nums):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return nums


def _transform(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if _DEPTH[0] == 0:
            _OUTER_GRAD[0] = is_grad_enabled()
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
        value, aux = _split_aux("grad_and_value(f)(*args)", out, has_aux)
        if not isinstance(value, Tensor):
            raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got {type(value)}")
        if value.nelement() != 1:
            raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor "
                               f"with {value.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
        # An output that depends on no input (a count, a constant) has zero gradients, as in torch.
        grads = autograd_grad(value, flat, create_graph=True, allow_unused=True) if value.requires_grad else \
            [None] * len(flat)
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
    value, aux = _split_aux("vjp(f, *primals)", out, has_aux)
    out_leaves, out_spec = tree_flatten(value)
    _only_tensors("vjp(f, *primals)", out_leaves)
    depth, outer = _DEPTH[0], _OUTER_GRAD[0]
    # Only a graph reaching the caller's tensors needs the vjp differentiable outside the transforms.
    seen = set()
    attached = outer and any(isinstance(o, Tensor) and _reaches_outside(o, seen) for o in out_leaves)

    def vjp_fn(cotangents):
        ct_leaves, ct_spec = tree_flatten(cotangents)
        if ct_spec != out_spec:
            raise RuntimeError("Expected pytree structure of cotangents to be the same as pytree structure of "
                               f"outputs to the function. cotangents: {treespec_pprint(ct_spec)}, primal output: "
                               f"{treespec_pprint(out_spec)}")
        keep = depth > 1 or attached or (outer and any(isinstance(c, Tensor) and c.requires_grad
                                                       for c in ct_leaves))
        grads = autograd_grad(out_leaves, leaves, ct_leaves, retain_graph=True, create_graph=keep,
                              allow_unused=True)
        grads = [g if g is not None else _creation.zeros_like(x) for g, x in zip(grads, leaves)]
        if depth == 1:
            grads = _detached(grads, keep)
        return tree_unflatten(grads, spec)

    result = (_finish(value), vjp_fn)
    return (*result, _finish(aux)) if has_aux else result


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False, _name="jacrev"):
    """``f -> d f / d args[argnums]`` over pytrees: for each output leaf, the input arguments' structure (a tuple of
    them when ``argnums`` is a tuple) holding blocks shaped ``output.shape + input.shape``; with ``has_aux``, ``f``
    returns ``(output, aux)`` and the transform ``(jacobian, aux)``.

    >>> import jitorch
    >>> params = {"w": jitorch.tensor([1.0, 2.0]), "b": jitorch.tensor([3.0])}
    >>> jac = jacrev(lambda p: (p["w"] ** 2).sum() * p["b"].sum())(params)
    >>> jac["w"].tolist(), jac["b"].tolist()
    ([6.0, 12.0], [5.0])
    """
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @_transform
    def wrapper(*args, **kwargs):
        nums = _select(args, argnums)
        _refuse_complex(_name, tree_flatten(args)[0], "inputs")
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
            value, seen["aux"] = _split_aux("jacrev(f, ...)(*args)", out, has_aux)
            out_leaves, seen["spec"] = tree_flatten(value)
            _only_tensors("vjp(f, *primals)", out_leaves)
            _refuse_complex(_name, out_leaves, "outputs")
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
    """``jacrev``'s Jacobian (jitorch computes it in reverse mode either way), with torch's signature.

    torch pushes the basis through ``vmap(..., randomness=randomness)``: with the default 'error' a random draw
    inside ``func`` (training-mode dropout, ``randn``) raises vmap's error; 'same' and 'different' let it draw (one
    draw here, which is 'same''s answer).

    >>> import jitorch
    >>> jacfwd(lambda x: x ** 2)(jitorch.tensor([1.0, 2.0]))
    tensor([[2., 0.],
            [0., 4.]])
    """
    jac = jacrev(func, argnums, has_aux=has_aux, _name="jacfwd")
    if randomness in ("different", "same"):
        return jac
    if randomness == "error":
        @functools.wraps(func)
        def refusing_draws(*args, **kwargs):
            from ._vmap import _RandomnessMode

            with _RandomnessMode("error"):
                return jac(*args, **kwargs)
        return refusing_draws

    @functools.wraps(func)
    def refused(*args, **kwargs):  # torch checks it on the call, as vmap's
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")
    return refused


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
    value, aux = _split_aux("jvp(f, primals, tangents)", out, has_aux)
    out_leaves, out_spec = tree_flatten(value)
    _only_tensors("jvp(f, primals, tangents)", out_leaves)
    # Integer outputs (an argmax) have no tangent: zeros, as torch's.
    diff = [o for o in out_leaves if o.is_floating_point() or o.is_complex()]
    seen = set()
    keep = _DEPTH[0] > 1 or (_OUTER_GRAD[0] and (any(_reaches_outside(o, seen) for o in diff) or
                                                 any(t.requires_grad for t in t_leaves)))
    forward = iter(double_vjp(diff, leaves, t_leaves, create_graph=keep) if diff else ())
    forward = [_creation.zeros_like(o) if not (o.is_floating_point() or o.is_complex()) else
               next(forward) for o in out_leaves]
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
    flat_primals, primals_spec = tree_flatten(kept)

    def jvp_fn(*tangents):
        flat_tangents, tangents_spec = tree_flatten(tangents)
        if tangents_spec != primals_spec:
            raise RuntimeError(f"Expected the tangents {tangents_spec} to have the same argspec as the primals "
                               f"{primals_spec}")
        # torch checks each tangent against its primal before running (its jvp graph was traced for these)
        for i, (t, p) in enumerate(zip(flat_tangents, flat_primals)):
            for what in ("shape", "device", "dtype"):
                if getattr(t, what) != getattr(p, what):
                    raise RuntimeError(f"tangent:{i} with {what} {getattr(t, what)} in flattened pytree doesn't "
                                       f"match the {what} {getattr(p, what)} of the corresponding primal.")
        return jvp(func, kept, tangents)[1]
    return value, jvp_fn
