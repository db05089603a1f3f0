"""``NestedTensor``: torch's nested (ragged) tensors as one Tensor subclass over dense jitorch tensors.

Two layouts, as torch's:

- ``jagged`` (the one research code uses): a batch of ``B`` sequences packed into one dense ``values`` tensor and an
  int64 ``offsets`` tensor of ``B + 1`` row starts. ``values`` has the nested tensor's dims without the batch dim,
  the ragged dim holding all sequences back to back: a ``(B, j1, E)`` tensor has ``(sum of lengths, E)`` values;
  after ``transpose(1, 2)`` it is ``(B, E, j1)`` over ``(E, sum)`` values (``_ragged_idx`` says where the ragged
  dim is, 1 or further right). ``lengths`` (a ``narrow`` view) leaves holes between the sequences. The ragged dim's
  size is a `NestedInt` (``j1``), shared by every tensor made from the same offsets. So nested dim ``d >= 1`` is
  values dim ``d - 1``, and most ops are the dense op on ``values`` (`_ops_*`).
- ``strided``: a list of components that may differ in any dim (torch packs them in one buffer; the list is the
  same to every op torch offers on it, each of which runs per component).

Autograd runs on the dense parts: a nested tensor requires grad when its values (components) do, and ``nt.grad`` is
the values' gradient wrapped in the same structure.

>>> import jitorch, jitorch.nested
>>> nt = jitorch.nested.nested_tensor([jitorch.ones(2, 4), jitorch.ones(3, 4)], layout=jitorch.jagged)
>>> nt.shape, nt.values().shape, nt.offsets()
(jitorch.Size([2, j..., 4]), jitorch.Size([5, 4]), tensor([0, 2, 5]))
"""
from __future__ import annotations

from .. import _dtype, _overrides
from .._tensor import Tensor
from ._nested_int import NestedInt, NestedSize
from ._refusals import NO_MEMORY, nested_refusal, refuse_inherited

__all__ = ["NestedTensor", "make_jagged", "make_strided", "jagged_like", "components", "rebuild_nested"]


def _new(cls):
    t = object.__new__(cls)
    _overrides.acquire(methods=False)  # public functions handed one come to __jitorch_function__
    t._nt_counted = True
    if not cls._refusals_installed:
        refuse_inherited(cls)
    return t


def make_jagged(values, offsets, lengths=None, ragged_idx=1, ragged=None, seqlens=None):
    """A jagged ``NestedTensor`` over ``values``/``offsets`` as given (no copies). ``ragged`` is the `NestedInt` to
    share (a result with its input's structure); ``seqlens`` the (min, max) sequence lengths when known."""
    t = _new(NestedTensor)
    t._nt_values, t._nt_offsets, t._nt_lengths, t._nt_ragged_idx = values, offsets, lengths, ragged_idx
    t._nt_ragged = ragged if ragged is not None else NestedInt()
    t._nt_seqlens = seqlens
    t._nt_components = None
    return t


def make_strided(parts):
    """A strided-layout ``NestedTensor`` over the component tensors ``parts`` (no copies)."""
    t = _new(NestedTensor)
    t._nt_values = t._nt_offsets = t._nt_lengths = t._nt_ragged = t._nt_seqlens = None
    t._nt_ragged_idx = None
    t._nt_components = list(parts)
    return t


def jagged_like(nt, values, ragged_idx=None):
    """A jagged tensor with ``nt``'s sequences (offsets, lengths, symbol) over new ``values``."""
    return make_jagged(values, nt._nt_offsets, nt._nt_lengths, nt._nt_ragged_idx if ragged_idx is None else
                       ragged_idx, nt._nt_ragged, nt._nt_seqlens)


def components(nt):
    """``nt``'s sequences as dense tensors (views of the values for the jagged layout)."""
    if nt._nt_components is not None:
        return list(nt._nt_components)
    starts, lengths = nt._bounds()
    axis = nt._nt_ragged_idx - 1
    return [nt._nt_values.narrow(axis, s, n) for s, n in zip(starts, lengths)]


def rebuild_nested(values, offsets_or_parts, lengths, ragged_idx, requires_grad):
    """A pickled nested tensor rebuilt (``NestedTensor.__reduce_ex__``): a leaf with the pickled values."""
    if values is None:
        return make_strided([p.requires_grad_(requires_grad) for p in offsets_or_parts])
    return make_jagged(values.requires_grad_(requires_grad), offsets_or_parts, lengths, ragged_idx)


class NestedTensor(Tensor):
    """A nested tensor (``jitorch.nested.nested_tensor``, ``nested_tensor_from_jagged``, ``as_nested_tensor``)."""

    _data = NO_MEMORY
    _refusals_installed = False

    def __new__(cls, *args, **kwargs):
        raise TypeError("nested tensors are made by jitorch.nested.nested_tensor(list, layout=...), "
                        "as_nested_tensor or nested_tensor_from_jagged(values, offsets)")

    def __del__(self):
        if self.__dict__.pop("_nt_counted", False) and _overrides is not None:  # (None at interpreter exit)
            _overrides.release(methods=False)

    # -- what it is ---------------------------------------------------------------------------------------------
    is_nested = property(lambda self: True)
    is_sparse = property(lambda self: False)
    is_meta = property(lambda self: False)
    is_quantized = property(lambda self: False)
    layout = property(lambda self: _dtype.strided if self._nt_components is not None else _dtype.jagged)
    dtype = property(lambda self: self._first().dtype)
    device = property(lambda self: self._first().device)
    is_cuda = property(lambda self: self._first().is_cuda)
    is_cpu = property(lambda self: self._first().is_cpu)
    itemsize = property(lambda self: self._first().itemsize)

    def _first(self):
        if self._nt_components is None:
            return self._nt_values
        if not self._nt_components:
            raise RuntimeError("an empty strided nested tensor has no components to read a dtype or device from")
        return self._nt_components[0]

    def _layout_name(self):
        return "strided" if self._nt_components is not None else "jagged"

    def _bounds(self):
        """Each sequence's start and length in the values (host ints, read once)."""
        cached = self.__dict__.get("_nt_bounds")
        if cached is None:
            offs = self._nt_offsets.tolist()
            lengths = self._nt_lengths.tolist() if self._nt_lengths is not None else \
                [b - a for a, b in zip(offs, offs[1:])]
            cached = self._nt_bounds = (offs[:len(lengths)], lengths)
        return cached

    @property
    def shape(self):
        if self._nt_components is not None:
            raise RuntimeError("shape: a strided-layout nested tensor has no shape (its components differ in size); "
                               "ask nt.size(dim) for a regular dim, or build it with layout=jitorch.jagged")
        sizes = list(self._nt_values.shape)
        sizes[self._nt_ragged_idx - 1] = self._nt_ragged
        return NestedSize((self._nt_offsets.shape[0] - 1, *sizes))

    def size(self, dim=None):
        if self._nt_components is None:
            return self.shape if dim is None else self.shape[self._wrap(dim, "size")]
        if dim is None:
            return self.shape  # raises, as torch's
        dim = self._wrap(dim, "size")
        if dim == 0:
            return len(self._nt_components)
        sizes = {c.shape[dim - 1] for c in self._nt_components}
        if len(sizes) != 1:
            raise RuntimeError(f"Given dimension {dim} is irregular and does not have a size.")
        return sizes.pop()

    def dim(self):
        if self._nt_components is None:
            return self._nt_values.dim() + 1
        return (self._nt_components[0].dim() if self._nt_components else 0) + 1

    ndim = property(dim)

    def _wrap(self, dim, op):
        n = self.dim()
        if not isinstance(dim, int) or not -n <= dim < n:
            raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
                             f"{dim})")
        return dim % n

    def numel(self):
        parts = self._nt_components if self._nt_components is not None else components(self)
        return sum(p.numel() for p in parts)

    nelement = numel

    def __len__(self):
        return len(self._nt_components) if self._nt_components is not None else self._nt_offsets.shape[0] - 1

    def is_floating_point(self):
        return self._first().is_floating_point()

    def is_complex(self):
        return self._first().is_complex()

    def element_size(self):
        return self._first().element_size()

    def get_device(self):
        return self._first().get_device()

    def is_contiguous(self, memory_format=None):
        if self._nt_components is not None:
            return all(c.is_contiguous() for c in self._nt_components)
        return self._nt_lengths is None and self._nt_values.is_contiguous()

    # -- the jagged parts ---------------------------------------------------------------------------------------
    def values(self):
        """The packed values (the jagged layout: a view that carries gradients back into the nested tensor; the
        strided layout: the components flattened one after another, as torch's buffer)."""
        if self._nt_components is not None:
            from .._movement_join import cat

            return cat([c.reshape(-1) for c in self._nt_components])
        return self._nt_values.view_as(self._nt_values)

    def offsets(self):
        if self._nt_components is not None:
            raise AttributeError("offsets: a strided-layout nested tensor has no offsets (torch: 'Tensor' object "
                                 "has no attribute 'offsets'); build it with layout=jitorch.jagged")
        return self._nt_offsets

    def lengths(self):
        if self._nt_components is not None:
            raise AttributeError("lengths: a strided-layout nested tensor has no lengths; build it with "
                                 "layout=jitorch.jagged")
        return self._nt_lengths

    def _get_max_seqlen(self):
        return max(self._bounds()[1], default=0) if self._nt_seqlens is None else self._nt_seqlens[1]

    def _get_min_seqlen(self):
        return min(self._bounds()[1], default=0) if self._nt_seqlens is None else self._nt_seqlens[0]

    _ragged_idx = property(lambda self: self._nt_ragged_idx)

    def unbind(self, dim=0):
        """The sequences as dense tensors (views of the values), as torch's ``unbind`` (``dim=0`` only)."""
        if dim != 0:
            raise RuntimeError(f"unbind(): only supported for NestedTensor on dim=0, got dim={dim}")
        return tuple(components(self))

    # -- autograd -----------------------------------------------------------------------------------------------
    def _parts(self):
        return self._nt_components if self._nt_components is not None else [self._nt_values]

    @property
    def requires_grad(self):
        return any(p.requires_grad for p in self._parts())

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        for p in self._parts():
            p.requires_grad_(requires_grad)
        return self

    grad_fn = property(lambda self: self._parts()[0].grad_fn if self._parts() else None)
    is_leaf = property(lambda self: all(p.is_leaf for p in self._parts()))

    @property
    def grad(self):
        """The gradient accumulated into a leaf's values (components), in this tensor's structure."""
        grads = [p.grad for p in self._parts()]
        if any(g is None for g in grads):
            return None
        cached = self.__dict__.get("_nt_grad")
        if cached is not None and all(a is b for a, b in zip(cached[0], grads)):
            return cached[1]
        g = make_strided(grads) if self._nt_components is not None else jagged_like(self, grads[0])
        self._nt_grad = (grads, g)
        return g

    @grad.setter
    def grad(self, value):
        if value is None:
            for p in self._parts():
                p.grad = None
            return
        if not isinstance(value, NestedTensor) or value.layout != self.layout:
            raise RuntimeError(f"grad: a nested tensor's .grad must be a nested tensor of its layout "
                               f"({self._layout_name()}), got {type(value).__name__}")
        for p, g in zip(self._parts(), value._parts()):
            p.grad = g

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Backward from a nested result: ``gradient`` is a nested tensor of the same structure."""
        from ..autograd import backward

        if not isinstance(gradient, NestedTensor):
            raise RuntimeError("backward: a nested tensor's backward needs a nested gradient of its structure "
                               "(torch: grad can be implicitly created only for scalar outputs)")
        backward(self._parts(), gradient._parts(), retain_graph=retain_graph, create_graph=create_graph,
                 inputs=inputs)

    def detach(self):
        if self._nt_components is not None:
            return make_strided([c.detach() for c in self._nt_components])
        return jagged_like(self, self._nt_values.detach())

    @property
    def data(self):
        return self.detach()

    # -- printing -----------------------------------------------------------------------------------------------
    def __repr__(self, *, tensor_contents=None):
        from ._print import nested_repr

        return nested_repr(self)

    __str__ = __repr__

    def __format__(self, spec):
        if spec:
            raise TypeError(f"unsupported format string passed to {type(self).__name__}.__format__")
        return repr(self)

    def __bool__(self):
        raise RuntimeError("Boolean value of a nested tensor is ambiguous")

    # -- pickling ------------------------------------------------------------------------------------------------
    def __reduce_ex__(self, protocol):
        if self._nt_components is not None:
            return (rebuild_nested, (None, [c.detach() for c in self._nt_components], None, None,
                                     self.requires_grad))
        lengths = None if self._nt_lengths is None else self._nt_lengths.detach()
        return (rebuild_nested, (self._nt_values.detach(), self._nt_offsets.detach(), lengths,
                                 self._nt_ragged_idx, self.requires_grad))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        if self._nt_components is not None:
            new = make_strided([c.detach().clone() for c in self._nt_components])
        else:
            new = make_jagged(self._nt_values.detach().clone(), self._nt_offsets.clone(),
                              None if self._nt_lengths is None else self._nt_lengths.clone(), self._nt_ragged_idx,
                              seqlens=self._nt_seqlens)
        new.requires_grad_(self.requires_grad and self.is_leaf)
        memo[id(self)] = new
        return new

    # -- public functions handed a nested tensor ----------------------------------------------------------------
    __jitorch_methods__ = False

    @classmethod
    def __jitorch_function__(cls, func, args, kwargs):
        from ._dispatch import FUNCTIONS

        name = _overrides.tensor_method_name(func) or getattr(func, "__name__", str(func))
        impl = FUNCTIONS.get(name)
        if impl is not None:
            return impl(func, args, kwargs)
        first = next((a for a in args if isinstance(a, NestedTensor)), None)
        if first is None:
            first = next(a for a in _flat(args, kwargs) if isinstance(a, NestedTensor))
        raise nested_refusal(name, first._layout_name())


def _flat(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a
