"""The recorded graph: one ``Node`` per op application, edges to the nodes that produced its inputs.

A node never references the tensors it produced (that would be a cycle): a saved output is kept as its array plus
the version it had, and rebuilt on unpacking. Saved inputs are the input tensors themselves; their version is
checked on unpacking so an in-place change after the forward pass raises PyTorch's error.

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> (x * 2).grad_fn.name()
'MulBackward0'
>>> [(type(fn).__name__, nr) for fn, nr in (x * 2).grad_fn.next_functions]
[('AccumulateGrad', 0), ('NoneType', 0)]
"""
from __future__ import annotations

import itertools
import weakref

from .._tensor import Tensor
from .grad_mode import GradState
from .saved_hooks import Packed
from .view_creation import ViewCreation  # noqa: F401 - re-exported beside the nodes
from .saved_hooks import _stack as _SAVED_HOOKS
from .saved_hooks import pack as _pack
from .saved_hooks import disable_saved_tensors_hooks, save_on_cpu, saved_tensors_hooks  # noqa: F401 - torch's path
from .graph_task import register_multi_grad_hook  # noqa: F401 - torch's path
from .node_recording import _record, _recording, recording_nodes
from .saved_errors import _FREED_MSG, INFERENCE_SAVED_MSG, _version_error

__all__ = ["Node", "AccumulateGrad", "node_class_for", "named", "recording_nodes", "ViewCreation",
           "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "register_multi_grad_hook",
           "increment_version"]


class PackedInputs(tuple):
    """A node's saved inputs as the active saved-tensor hooks packed them: one type test tells a backward to unpack
    them, so the common path checks nothing per input."""

    __slots__ = ()


class Node:
    """A backward function. ``next`` holds, per input, ``(node_or_leaf_tensor, output_nr)`` or ``None``."""

    op = None  # the OpDef whose backward this node runs (set on the per-op subclasses)
    # Whether ``apply`` is this class's: the engine then calls the row's backward itself, one frame less per node.
    row_backward = False
    # Class-level defaults: a node is created per recorded op, so __init__ stores only what every node has.
    in_meta = None
    _saved_in = None
    _saved_in_versions = None
    _saved_out = None
    _out_meta = None
    _pre_hooks = None
    _hooks = None
    _hooked = False  # set once any hook is registered: the engine then takes the hooks' path for this node
    # A row's node with one output and no hooks: the engine's loop runs it inline (`node_class_for` sets it per
    # class; registering a hook clears it on the node).
    _plain = False
    _freed = False
    # While the engine runs this node for ``autograd.grad(..., inputs)``: per edge, whether a wanted input lies below
    # it (a backward then skips the other gradients, as torch's do: a gradient penalty needs no weight gradients).
    _grad_mask = None

    def __init__(self, next_edges, attrs):
        self.next = next_edges
        self.attrs = attrs
        if _recording:
            _record(self)

    # -- saved values -------------------------------------------------------------------------------------------
    def save_inputs(self, args):
        self._saved_in = args
        versions = []
        for a in args:
            if isinstance(a, Tensor):
                if a._inference:
                    raise RuntimeError(INFERENCE_SAVED_MSG)
                owner = a._ver_owner
                versions.append((owner if owner is not None else a)._ver)
            else:
                versions.append(None)
        if _SAVED_HOOKS:  # packed values are not version-checked (the hooks may have copied or recomputed them)
            self._saved_in = PackedInputs([_pack(a) if isinstance(a, Tensor) else a for a in args])
            self._saved_in_versions = (None,) * len(args)
            return
        self._saved_in_versions = tuple(versions)

    def save_output(self, outs):
        """``outs``: tuple of output tensors; kept as (array, root tensor, version) without a reference cycle."""
        if _SAVED_HOOKS:
            self._saved_out = tuple([_pack(o, self, nr) for nr, o in enumerate(outs)])
            return
        # The shared version counter, not the output: holding the output itself would be a reference cycle, and the
        # output may be modified in place and then dropped before backward.
        saved = []
        for o in outs:  # ``o._version_counter()`` and ``o._version`` inline: a multi-output row saves every output
            root = o._ver_owner if o._ver_owner is not None else o
            counter = root._vc
            if counter is None:
                counter = root._vc = [root._ver]
            saved.append((o._data, counter, root._ver))
        self._saved_out = tuple(saved)

    @property
    def inputs(self):
        saved = self._saved_in
        if saved is None:
            if self._freed:
                raise RuntimeError(_FREED_MSG)
            raise RuntimeError(f"{self.name()}: inputs were not saved for backward (the op's row must declare them)")
        if type(saved) is PackedInputs:  # saved-tensor hooks: unpacked, not version-checked (see save_inputs)
            return tuple([a.unpack() if type(a) is Packed else a for a in saved])
        for a, v in zip(saved, self._saved_in_versions):
            if v is not None:
                owner = a._ver_owner  # ``a._version`` without the property: every backward row reads its inputs here
                if (a if owner is None else owner)._ver != v:
                    raise _version_error(a, v, self.name())
        return saved

    @property
    def outputs(self):
        saved = self._saved_out
        if saved is None:
            raise RuntimeError(_FREED_MSG if self._freed else f"{self.name()}: outputs were not saved for backward")
        return tuple([self._unpack_output(nr, entry) for nr, entry in enumerate(saved)])

    @property
    def out(self):
        saved = self._saved_out
        if saved is None or len(saved) != 1:
            return self.outputs[0]  # (the errors, and every output's version checked)
        return self._unpack_output(0, saved[0])

    def _unpack_output(self, nr, entry):
        if type(entry) is Packed:
            return entry.unpack()
        data, counter, version = entry
        if counter[0] != version:
            raise _version_error(Tensor._make(data), version, self.name(), current=counter[0], producer=self,
                                 output_nr=nr)
        t = Tensor._make(data)
        if GradState.enabled:  # double backward: the saved output must lead back through this node
            t.grad_fn, t._output_nr, t._requires_grad = self, nr, True
        return t

    def output(self, nr):
        """Saved output ``nr`` alone, version-checked alone: a backward that reads only side outputs (batch norm's
        statistics) must not fail because its main output was later changed in place (``ReLU(inplace=True)``)."""
        saved = self._saved_out
        if saved is None:
            raise RuntimeError(_FREED_MSG if self._freed else f"{self.name()}: outputs were not saved for backward")
        return self._unpack_output(nr, saved[nr])

    def release(self):
        self._saved_in = None
        self._saved_out = None
        self._freed = True

    @property
    def needs_input_grad(self):
        return tuple(e is not None for e in self.next)

    def needs_grad(self, i):
        mask = self._grad_mask
        return self.next[i] is not None if mask is None else mask[i]

    # -- PyTorch-visible surface ----------------------------------------------------------------------------
    def _torch_saved_names(self):
        """torch's ``_saved_<name>`` of what this row saves: its tensor inputs by ATen argument name, its result."""
        op = self.op
        if op is None or op.nout != 1:
            return {}
        names = {}
        if op.saves in ("inputs", "both"):
            args = _SAVED_ARG_NAMES.get(type(self).__name__, ("self", "other"))
            count = len(args) if self._saved_in is None else min(len(args), len(self._saved_in))
            names.update({"_saved_" + a: ("in", i) for i, a in enumerate(args[:count])})
        if op.saves in ("outputs", "both") and type(self).__name__ not in _NO_SAVED_RESULT:
            names["_saved_result"] = ("out", 0)
        return names

    def __getattr__(self, name):
        # Only for names not found otherwise (``grad_fn._saved_self``, as the autograd-mechanics docs show).
        where = self._torch_saved_names().get(name) if name.startswith("_saved_") else None
        if where is not None:
            if self._freed:
                raise RuntimeError(_FREED_MSG)
            return self.inputs[where[1]] if where[0] == "in" else self.output(where[1])
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __dir__(self):
        # torch's saved names in, the internal ``_saved_*`` slots out (tools such as torchviz read every
        # ``_saved_`` name of ``dir(grad_fn)``).
        internal = {"_saved_in", "_saved_in_versions", "_saved_out"}
        return sorted((set(super().__dir__()) - internal) | set(self._torch_saved_names()))

    def name(self):
        name = type(self).__name__
        # torch's hand-written C++ nodes are namespaced
        return "torch::autograd::" + name if name in ("CopySlices", "CopyBackwards") else name

    @property
    def next_functions(self):
        result = []
        for edge in self.next:
            if edge is None:
                result.append((None, 0))
            else:
                target, nr = edge
                result.append((target if isinstance(target, Node) else AccumulateGrad.for_leaf(target), nr))
        return tuple(result)

    @property
    def metadata(self):
        """A dict the user may fill (anomaly mode and tracers keep notes on nodes in torch)."""
        meta = self.__dict__.get("_metadata")
        if meta is None:
            meta = self._metadata = {}
        return meta

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` runs after this node; it may return replacement grad_inputs."""
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(fn)
        self._hooked = True
        self._plain = False
        return _RemovableHandle(self._hooks, fn)

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` runs before this node; it may return replacement grad_outputs."""
        return self.add_output_hook(None, fn)

    _retain_hooks = None

    def add_retain_grad_hook(self, output_nr, fn):
        """``retain_grad`` runs after every other hook on the output, as in PyTorch."""
        if self._retain_hooks is None:
            self._retain_hooks = []
        self._retain_hooks.append((output_nr, fn))
        self._hooked = True
        self._plain = False

    def add_output_hook(self, output_nr, fn):
        if self._pre_hooks is None:
            self._pre_hooks = []
        entry = (output_nr, fn)
        self._pre_hooks.append(entry)
        self._hooked = True
        self._plain = False
        return _RemovableHandle(self._pre_hooks, entry)

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"  # torch's: the node type's name and its address

    def __call__(self, *grads):
        return self.apply(grads)

    def apply(self, grads):
        """Gradients of the inputs given the gradients of the outputs (one per output)."""
        backward = self.op.backward
        result = backward(self, *grads)
        return result if type(result) is tuple else (result,)

    # -- engine helpers -------------------------------------------------------------------------------------
    def materialize(self, grads):
        """Fill in zeros for outputs that received no gradient (multi-output nodes only reach here)."""
        if self._out_meta is None:
            return grads
        # Non-differentiable outputs (indices, statistics, an RNN's workspace) never get a gradient, and no backward
        # reads one: filling zeros of their size (attention's probabilities) would be wasted work.
        skip = self.op.nondiff_outputs if self.op is not None else ()  # custom Functions have no row
        filled = None
        for nr, g in enumerate(grads):  # a plain loop: layer norm's backward runs this on every call
            if g is None and nr not in skip:
                from .. import _creation

                shape, dtype, dev = self._out_meta[nr]
                if filled is None:
                    filled = list(grads)
                filled[nr] = _creation.zeros(shape, dtype=dtype, device=dev)
        return grads if filled is None else tuple(filled)


class AccumulateGrad(Node):
    """The node PyTorch shows for a leaf; jitorch's engine accumulates into leaves directly, running this node's hooks
    (pre-hooks get ``(grad,)`` before accumulation, hooks ``((), (grad,))`` after) when it has any."""

    next = ()

    def __init__(self, variable):  # no Node.__init__: the node is made on request, never recorded in a graph
        self.variable = variable

    @staticmethod
    def for_leaf(t):
        """The same node object for a leaf while anyone holds it (the leaf keeps only a weak reference)."""
        node = t._acc_node
        if node is not None:
            return node
        ref = t.__dict__.get("_acc_ref")
        node = ref() if ref is not None else None
        if node is None:
            node = AccumulateGrad(t)
            t._acc_ref = weakref.ref(node)
        return node

    def _pin(self):
        # The graph points at the leaf, not at this node: once it has hooks, the leaf keeps it alive, as torch's
        # graph keeps its AccumulateGrad node alive.
        self.variable._acc_node = self

    def register_hook(self, fn):
        self._pin()
        return Node.register_hook(self, fn)

    def register_prehook(self, fn):
        self._pin()
        return Node.register_prehook(self, fn)

    @property
    def next_functions(self):
        return ()

    def apply(self, grads):
        raise RuntimeError("AccumulateGrad: the engine accumulates into the leaf itself; it cannot be called")

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"


class _RemovableHandle:
    _ids = itertools.count()

    def __init__(self, container, item):
        self._container, self._item = container, item
        self.id = next(self._ids)

    def remove(self):
        if self._container is not None and self._item in self._container:
            self._container.remove(self._item)
        self._container = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_NODE_CLASSES: dict = {}
# The ATen names of saved arguments where they are not ``(self, other)``: ``grad_fn._saved_<name>``.
_SAVED_ARG_NAMES = {"PowBackward0": ("self", "exponent"), "PowBackward1": ("self", "exponent"),
                    "MmBackward0": ("self", "mat2"), "BmmBackward0": ("self", "mat2"),
                    "DotBackward0": ("self", "tensor"), "MvBackward0": ("self", "vec")}
# Rows that save their result where torch's node does not (jitorch's backward reuses it): no ``_saved_result``.
_NO_SAVED_RESULT = {"PowBackward0"}


def node_class_for(op) -> type:
    """One Node subclass per op, named like PyTorch's (``AddBackward0``), created once."""
    cls = _NODE_CLASSES.get(op)
    if cls is None:
        cls = type(op.grad_name, (Node,), {"op": op, "row_backward": True, "_plain": op.nout == 1})
        _NODE_CLASSES[op] = cls
    return cls


_RENAMED: dict = {}


def named(t, name):
    """``t`` with its grad_fn shown under torch's name for the composite that made it (``mean`` records a division:
    ``MeanBackward0``, not ``DivBackward0``). The node keeps its class's behaviour: it becomes a subclass by that
    name. Returns ``t``."""
    if type(t) is not Tensor:  # a deferred (compiled) tensor: its history is made when it is flushed, not here
        return t
    node = t.grad_fn
    if node is not None and type(node).__name__ != name:
        cls = type(node)
        sub = _RENAMED.get((cls, name))
        if sub is None:
            sub = _RENAMED[(cls, name)] = type(name, (cls,), {})
        node.__class__ = sub
    return t


def increment_version(tensor):
    """Bump the version counter of ``tensor`` (or of each tensor of an iterable) as an in-place write would: a custom
    kernel that wrote it behind autograd's back makes graphs that saved it refuse to use the stale value."""
    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        t._bump_version()
