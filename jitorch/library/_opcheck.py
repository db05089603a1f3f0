"""``jitorch.library.opcheck``: checks that an operator's registrations agree with what its kernel does.

- ``test_schema``: the kernel writes only the arguments the schema declares mutable (and returns no input: the
  call's own aliasing check);
- ``test_autograd_registration``: with inputs that require grad, the op has an autograd registration (a custom op,
  ``register_autograd``, a CompositeImplicitAutograd or Autograd kernel), or none of its outputs requires grad;
- ``test_faketensor``: the fake implementation, run on fake tensors, gives the real outputs' shapes, dtypes and
  devices;
- ``test_aot_dispatch_dynamic`` (and ``_static``): under ``jitorch.compile`` the outputs, the mutated inputs and the
  gradients (when inputs require grad) equal eager's.

>>> import jitorch
>>> @jitorch.library.custom_op("doc_opcheck::mul2", mutates_args=())
... def mul2(x: jitorch.Tensor) -> jitorch.Tensor:
...     return x * 2
>>> opcheck(mul2, (jitorch.ones(3),), test_utils=("test_schema", "test_faketensor"), raise_exception=False)
{'test_schema': 'SUCCESS', 'test_faketensor': RuntimeError('There was no fake impl registered for ...')}
"""
from __future__ import annotations

from .._tensor import Tensor
from ..utils._pytree import tree_leaves, tree_map_only

__all__ = ["opcheck", "OpCheckError", "MetadataMismatchError"]

DEFAULT_TEST_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
ALL_TEST_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
                  "test_aot_dispatch_dynamic")


class OpCheckError(Exception):
    """A check of `opcheck` failed (its cause is the check's own exception)."""


class MetadataMismatchError(RuntimeError):
    """The fake implementation's outputs differ from the real ones in shape, dtype or device."""


def _map(value, fn):
    return tree_map_only(Tensor, fn, value)


def _leaves(value):
    return [t for t in tree_leaves(value) if isinstance(t, Tensor)]


def _clone(value):
    return _map(value, lambda t: t.detach().clone().requires_grad_(t.requires_grad))


def _same(a, b):
    import numpy as np

    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.detach().cpu().numpy(),
                                                                        b.detach().cpu().numpy(), equal_nan=True)


def test_schema(op, args, kwargs, **_):
    import jitorch

    args, kwargs = _clone(args), _clone(kwargs)
    entry = op._entry
    from ._registry import bind

    values = bind(entry, args, kwargs)
    before = [[t.detach().clone() for t in _leaves(v)] for v in values]
    with jitorch.no_grad():
        op(*args, **kwargs)
    for a, v, old in zip(entry.schema.arguments, values, before):
        if not a.mutable and any(not _same(t, o) for t, o in zip(_leaves(v), old)):
            raise RuntimeError(f"Argument {a.name} is not defined as mutable but was mutated")


def test_autograd_registration(op, args, kwargs, **_):
    entry = op._entry
    tensors = list(_leaves((args, kwargs)))
    if not any(t.requires_grad for t in tensors):
        return  # nothing to test without inputs that require grad
    if entry.owner is not None or entry.backward is not None or {"implicit", "autograd"} & set(entry.kernels):
        return
    inputs = {id(t) for t in tensors}
    if any(t.requires_grad and id(t) not in inputs for t in _leaves(op(*args, **kwargs))):
        raise AssertionError(
            f"{op.name()}: at least one output of this operator has requires_grad=True but the operator does not have "
            "an autograd kernel defined at an autograd key (e.g. DispatchKey::Autograd). This could mean that you "
            "have incorrectly registered an autograd kernel to a non-Autograd DispatchKey, which may lead to silently "
            "incorrect results. If your operator consists of regular PyTorch operations, consider not using an "
            "operator at all or registering your operator as CompositeImplicitAutograd. If you have an "
            "autograd.Function registered to a backend (CPU/CUDA/XPU) key, the correct location for it is the "
            "Autograd key.")


def _fake_run(op, args, kwargs):
    """The op's outputs on fake twins of the arguments (its fake implementation runs)."""
    import jitorch
    from ..fx._fake import FakeTensorMode

    with jitorch.no_grad(), FakeTensorMode() as mode:
        return op(*_map(args, mode.from_real), **_map(kwargs, mode.from_real))


def test_faketensor(op, args, kwargs, **_):
    import jitorch

    with jitorch.no_grad():
        real = op(*_clone(args), **_clone(kwargs))
    fake = _fake_run(op, args, kwargs)
    for r, f in zip(_leaves(real), _leaves(fake)):
        for what, a, b in (("Shapes", r.shape, f.shape), ("Dtypes", r.dtype, f.dtype), ("Devices", r.device,
                                                                                          f.device)):
            if a != b:
                raise MetadataMismatchError(f"When comparing the output of {op} on FakeTensor and concrete Tensors, "
                                            f"found mismatched tensor metadata: {what} {a} and {b} are not equal!")


def _run(fn, args, kwargs):
    """Outputs, the inputs afterwards, and the gradients of the inputs that require grad (ones as cotangents)."""
    import jitorch

    args, kwargs = _clone(args), _clone(kwargs)
    out = fn(*args, **kwargs)
    inputs = [t for t in _leaves((args, kwargs)) if t.requires_grad]
    outs = [o for o in _leaves(out) if o.requires_grad]
    grads = ()
    if inputs and outs:
        grads = jitorch.autograd.grad(outs, inputs, [jitorch.ones_like(o) for o in outs], allow_unused=True)
    return list(_leaves(out)), list(_leaves((args, kwargs))), grads


def test_aot_dispatch_dynamic(op, args, kwargs, rtol=None, atol=None):
    import jitorch

    # torch's compile traces with fake tensors, so it needs a fake implementation (it does not compare its shapes:
    # test_faketensor does); jitorch's traces real ones, but an op ready for torch.compile is what this certifies.
    _fake_run(op, args, kwargs)
    eager = _run(op, args, kwargs)
    compiled = _run(jitorch.compile(lambda *a, **k: op(*a, **k)), args, kwargs)
    for what, e, c in zip(("outputs", "inputs after the call", "gradients"), eager, compiled):
        if len(e) != len(c):
            raise AssertionError(f"{op}: eager gave {len(e)} {what}, compiled {len(c)}")
        for x, y in zip(e, c):
            if (x is None) != (y is None):
                raise AssertionError(f"{op}: a gradient is None in one of eager and compiled runs only")
            if x is not None:
                jitorch.testing.assert_close(y, x, rtol=rtol, atol=atol, msg=lambda m, w=what: f"{op}: compiled {w} "
                                             f"differ from eager: {m}")


_TESTS = {"test_schema": test_schema, "test_autograd_registration": test_autograd_registration,
          "test_faketensor": test_faketensor, "test_aot_dispatch_static": test_aot_dispatch_dynamic,
          "test_aot_dispatch_dynamic": test_aot_dispatch_dynamic}


def opcheck(op, args, kwargs=None, *, test_utils=DEFAULT_TEST_UTILS, raise_exception=True, atol=None, rtol=None):
    """Run the checks ``test_utils`` (see the module docstring) on ``op(*args, **kwargs)``. Returns ``{check:
    "SUCCESS" or its exception}``; with ``raise_exception`` the first failure raises `OpCheckError`."""
    from ._custom_op import CustomOpDef
    from ._ops import OpOverload, OpOverloadPacket

    if (rtol is None) ^ (atol is None):
        raise ValueError("opcheck(op, ...): if you specify one of rtol/atol, you must specify both")
    kwargs = {} if kwargs is None else kwargs
    if isinstance(op, CustomOpDef):
        op = op._opoverload
    if isinstance(op, OpOverloadPacket):
        overloads = op.overloads()
        if len(overloads) != 1:
            raise ValueError(f"opcheck(op, ...): {op} has overloads {overloads}; pass one (e.g. {op}.default)")
        op = getattr(op, overloads[0])
    if not isinstance(op, OpOverload):
        raise ValueError(f"opcheck(op, ...): op must be instance of torch._ops.OpOverload, e.g. "
                         f"torch.ops.aten.sin.default, got {type(op)}")
    if test_utils == "ALL":
        test_utils = ALL_TEST_UTILS
    if isinstance(test_utils, str):
        test_utils = (test_utils,)
    if not isinstance(test_utils, (tuple, list)) or not set(test_utils) <= set(ALL_TEST_UTILS):
        raise ValueError(f"opcheck(op, ..., test_utils={test_utils}), expected test_utils to be subset of "
                         f"{ALL_TEST_UTILS} but it was not")
    results = {}
    for name in test_utils:
        try:
            _TESTS[name](op, args, kwargs, rtol=rtol, atol=atol)
            results[name] = "SUCCESS"
        except Exception as ex:  # noqa: BLE001 - each check's failure is its result
            if raise_exception:
                raise OpCheckError(f"opcheck(op, ...): {name} failed with {ex} (scroll up for stack trace)") from ex
            results[name] = ex
    return results
