"""``jitorch.library.custom_op``: a Python function made an operator, and `CustomOpDef`, the object it returns.

The schema comes from the function's type hints (`_schema.infer_schema`) or ``schema=``; ``mutates_args`` is
required (``()`` for a functional op), as in torch. The op then works with autograd (``register_autograd``), fake
and meta tensors (``register_fake``), other devices (``register_kernel``), ``jitorch.ops.<ns>.<name>``, and as one
node in traced and compiled graphs (see `_registry`).

>>> import jitorch
>>> import numpy as np
>>> @jitorch.library.custom_op("doc_custom::numpy_sin", mutates_args=())
... def numpy_sin(x: jitorch.Tensor) -> jitorch.Tensor:
...     return jitorch.from_numpy(np.sin(x.numpy()))
>>> numpy_sin(jitorch.zeros(2)), numpy_sin
(tensor([0., 0.]), <CustomOpDef(doc_custom::numpy_sin)>)
>>> @numpy_sin.register_fake
... def _(x):
...     return jitorch.empty_like(x)
>>> numpy_sin(jitorch.zeros(3, device="meta")).shape
jitorch.Size([3])
"""
from __future__ import annotations

import contextlib
import logging

from .. import _overrides
from . import _registry
from ._ops import overload_for
from ._schema import infer_schema, parse_schema

__all__ = ["custom_op", "CustomOpDef"]

log = logging.getLogger(__name__)


def custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None, tags=None):
    """Wrap ``fn`` (type-annotated) into the operator ``"namespace::name"``; a decorator when ``fn`` is omitted.

    ``mutates_args``: the names of the Tensor arguments ``fn`` writes in place (``()`` if none, ``"unknown"`` for
    all). ``device_types``: the device types ``fn`` serves (``"cpu"``, ``"cuda"``; default: all). ``schema``: a
    schema string instead of the inferred one, e.g. ``"(Tensor x, int n) -> Tensor"``. ``tags`` are accepted and
    ignored.
    """
    def inner(fn):
        schema_str = infer_schema(fn, mutates_args=mutates_args) if schema is None else schema
        namespace, opname = name.split("::")
        result = CustomOpDef(namespace, opname, schema_str, fn)
        if schema is not None:
            expected = {a.name for a in result._entry.schema.arguments if a.mutable}
            if expected != set(mutates_args):
                raise ValueError(f"Attempted to create a custom op with `mutates_args={mutates_args}` and "
                                 f"`schema={schema}. The schema suggests that the op mutates {expected}which is "
                                 "different from what was provided to us in `mutates_args`. Please make these "
                                 "consistent.")
        result.register_kernel(device_types)(fn)
        return result

    if fn is None:
        return inner
    return inner(fn)


class CustomOpDef:
    """A custom operator made by :func:`custom_op`: call it like the function; register its other behaviours."""

    def __init__(self, namespace, name, schema, fn):
        self._namespace, self._name, self._schema, self._init_fn = namespace, name, schema, fn
        parsed = parse_schema(self._name + schema).with_name(self._qualname)
        if any(a.kwarg_only and a.base == "Tensor" for a in parsed.arguments):
            raise NotImplementedError(f"custom_op with kwarg-only Tensor args. Please make your tensors not "
                                      f"kwarg-only. Got: {self._name + schema}")
        self._entry = _registry.define(self._qualname, parsed, owner=self)
        self._opoverload = overload_for(self._qualname)

    @property
    def _qualname(self):
        return f"{self._namespace}::{self._name}"

    def __repr__(self):
        return f"<CustomOpDef({self._qualname})>"

    def __call__(self, *args, **kwargs):
        if _overrides._live:  # a Proxy among the arguments: symbolic_trace records the overload
            found = _overrides.find_override(args, kwargs)
            if found is not None:
                return type(found).__jitorch_function__(self._opoverload, args, kwargs)
        return self._opoverload(*args, **kwargs)

    def register_kernel(self, device_types, fn=None, /):
        """Register ``fn`` as the implementation for ``device_types`` (``"cpu"``, ``"cuda"``, a list; None: every
        device); a decorator when ``fn`` is omitted."""
        def inner(fn):
            kinds = [device_types] if device_types is None or isinstance(device_types, str) else list(device_types)
            for kind in kinds:
                self._entry.kernels[kind] = fn
            return fn

        if device_types is not None and not any(a.base == "Tensor" for a in self._entry.schema.arguments) \
                and not any(a.base == "Device" for a in self._entry.schema.arguments):
            raise ValueError("Functions without tensor inputs are required to have a `device: torch.device` "
                             "argument")
        if fn is None:
            return inner
        return inner(fn)

    def register_fake(self, fn, /):
        """Register the fake implementation: given inputs that carry no data (fake or meta tensors), it returns
        outputs of the right shapes, dtypes and devices (``x.new_empty(...)``, ``jitorch.empty_like(x)``). Tracing
        with fake tensors, the meta device and ``opcheck`` use it."""
        self._entry.fake = fn
        return fn

    def register_autograd(self, backward, /, *, setup_context=None):
        """Register the backward formula: ``backward(ctx, *grads)`` returns one gradient per input (None for
        non-Tensor inputs, a list for a Tensor list); ``setup_context(ctx, inputs, output)`` (``keyword_only_inputs``
        too when the op has keyword-only arguments) saves what it needs on ``ctx`` during the forward."""
        schema = self._entry.schema
        if schema.is_mutable:
            raise RuntimeError(f"Cannot register autograd formula for non-functional operator {self} with schema "
                               f"{schema}. Please create a functional operator and register an autograd formula for "
                               "that.")
        self._entry.backward, self._entry.setup_context = backward, setup_context

    def register_vmap(self, func=None):
        """Accepted for torch's API; jitorch's ``vmap`` runs a custom op once per sample (its loop fallback), which
        gives the same values, so the rule is kept but not used."""
        def register(func):
            self._vmap_fn = func
            return func
        return register if func is None else register(func)

    @contextlib.contextmanager
    def set_kernel_enabled(self, device_type, enabled=True):
        """Within the block, the kernel registered for ``device_type`` is off (``enabled=False``): the function the op
        was made from runs instead."""
        if device_type not in self._entry.kernels:
            log.warning("Attempted to %s kernel for %s but no kernel was registered for this device type.",
                        "enable" if enabled else "disable", device_type)
        disabled = self._entry.disabled
        was = device_type in disabled
        if enabled:
            disabled.discard(device_type)
        else:
            disabled.add(device_type)
        try:
            yield
        finally:
            if was:
                disabled.add(device_type)
            else:
                disabled.discard(device_type)
