"""``jitorch.cuda.make_graphed_callables``: callables (or modules) whose forward AND backward replay CUDA graphs.

For each callable, as PyTorch does: warm up ``num_warmup_iters`` times on a side stream (running forward and
``autograd.grad`` so lazy state such as cuBLAS handles and kernel compilation happen outside the capture); capture
every forward graph in order, then every backward graph in reverse order, all in ONE memory pool; and return a
function that runs an ``autograd.Function`` whose ``forward`` copies the new inputs into the static ones and replays
the forward graph, and whose ``backward`` copies the incoming gradients into static gradient buffers and replays the
backward graph. Parameters of a module are extra inputs of that Function, so their ``.grad`` accumulate normally.

Outputs and gradients returned are detached views of the graphs' static buffers: the next call overwrites them.

>>> model = jitorch.nn.Linear(8, 4).cuda()                                        # doctest: +SKIP
>>> model = jitorch.cuda.make_graphed_callables(model, (jitorch.randn(2, 8, device="cuda"),))  # doctest: +SKIP
>>> model(x).sum().backward()                                                      # doctest: +SKIP
"""
from __future__ import annotations

from ..utils._pytree import flatten_into, unflatten_from

from .._creation import zeros_like
from .._tensor import Tensor
from ..autograd import Function, grad as _autograd_grad
from ._lazy import has_cuda
from .graphs import CUDAGraph, graph, graph_pool_handle

__all__ = ["make_graphed_callables"]


def _is_module(obj):
    from ..nn import Module

    return isinstance(obj, Module)


def _check_callable(i, fn, args):
    if _is_module(fn):
        hooks = [name for name in ("_backward_hooks", "_forward_hooks", "_forward_pre_hooks")
                 if len(getattr(fn, name, {}) or {})]
        if hooks:
            raise RuntimeError(f"make_graphed_callables: module {i} has registered hooks ({', '.join(hooks)}); "
                               "hooks are not allowed on graphed modules (their Python side effects would run only at "
                               "capture)")
        if any(not _is_cuda(t) for t in list(fn.parameters()) + list(fn.buffers())):
            raise RuntimeError(f"make_graphed_callables: module {i} has CPU parameters or buffers; move it to CUDA "
                               "first (module.cuda())")
    for j, a in enumerate(args):
        if not isinstance(a, Tensor):
            raise TypeError(f"make_graphed_callables: sample_args of callable {i} must contain only Tensors, got "
                            f"{type(a).__name__} at position {j}")
        if not _is_cuda(a):
            raise RuntimeError(f"make_graphed_callables: sample argument {j} of callable {i} is on {a.device}; "
                               "graphed callables take CUDA tensors")


def _is_cuda(t):
    return t.device.type == "cuda"


class _Captured:
    """Static buffers and graphs of one callable."""

    def __init__(self, fn, args, params):
        self.fn, self.args, self.params = fn, tuple(args), tuple(params)
        self.surface = self.args + self.params  # every input of the autograd.Function
        self.fwd, self.bwd = CUDAGraph(), CUDAGraph()
        self.outputs = ()
        self.out_spec = None
        self.grad_outputs = ()
        self.grad_inputs = ()
        self.has_backward = False


def _warm_up(captured, num_warmup_iters, allow_unused):
    for c in captured:
        for _ in range(num_warmup_iters):
            leaves = []
            flatten_into(c.fn(*c.args), leaves)
            outs = tuple(o for o in leaves if isinstance(o, Tensor) and o.requires_grad)
            ins = tuple(t for t in c.surface if t.requires_grad)
            if outs and ins:
                _autograd_grad(outs, ins, grad_outputs=tuple(zeros_like(o) for o in outs),
                               only_inputs=True, allow_unused=allow_unused)
            del leaves, outs


def _capture_forward(c, pool):
    with graph(c.fwd, pool=pool):
        leaves = []
        c.out_spec = flatten_into(c.fn(*c.args), leaves)
    if not all(isinstance(o, Tensor) for o in leaves):
        raise TypeError("make_graphed_callables: a graphed callable must return Tensors (or tuples/lists of them)")
    c.outputs = tuple(leaves)


def _capture_backward(c, pool, allow_unused):
    outs = [o for o in c.outputs if o.requires_grad]
    ins = [t for t in c.surface if t.requires_grad]
    c.grad_outputs = tuple(zeros_like(o) if o.requires_grad else None for o in c.outputs)
    if not outs or not ins:
        c.grad_inputs = (None,) * len(c.surface)
        return
    with graph(c.bwd, pool=pool):
        grads = _autograd_grad(outs, ins, grad_outputs=[g for g in c.grad_outputs if g is not None],
                               only_inputs=True, allow_unused=allow_unused)
    it = iter(grads)
    c.grad_inputs = tuple(next(it) if t.requires_grad else None for t in c.surface)
    c.has_backward = True


def _make_function(c):
    class Graphed(Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, new in zip(c.surface, inputs):
                if new is not static and new.data_ptr() != static.data_ptr():
                    static.copy_(new)
            c.fwd.replay()
            return tuple(o.detach() for o in c.outputs)

        @staticmethod
        def backward(ctx, *grads):
            if not c.has_backward:
                return (None,) * len(c.surface)
            for static, new in zip(c.grad_outputs, grads):
                if static is not None:
                    if new is None:
                        static.zero_()
                    elif new.data_ptr() != static.data_ptr():
                        static.copy_(new)
            c.bwd.replay()
            return tuple(g.detach() if g is not None else None for g in c.grad_inputs)

    def functionalized(*user_args):
        if len(user_args) != len(c.args):
            raise TypeError(f"graphed callable: expected {len(c.args)} arguments as in sample_args, got "
                            f"{len(user_args)}")
        for i, (static, new) in enumerate(zip(c.args, user_args)):
            if not isinstance(new, Tensor) or new.shape != static.shape or new.dtype != static.dtype \
                    or new.device != static.device:
                got = (f"shape {list(new.shape)}, dtype {new.dtype}, device {new.device}" if isinstance(new, Tensor)
                       else type(new).__name__)
                raise RuntimeError(f"graphed callable: argument {i} must match the sample argument (shape "
                                   f"{list(static.shape)}, dtype {static.dtype}, device {static.device}); got {got}")
        outputs = Graphed.apply(*(tuple(user_args) + c.params))
        return unflatten_from(c.out_spec, list(outputs))
    return functionalized


def make_graphed_callables(callables, sample_args, num_warmup_iters=3, allow_unused_input=False, pool=None):
    """Graph each callable's forward and backward (see the module notes); returns one callable or a tuple.

    A module keeps its class: its ``forward`` is replaced by the graphed one while ``module.training`` has the value
    it had at capture, and runs eagerly otherwise.
    """
    if not has_cuda():
        raise RuntimeError("Tried to instantiate dummy base class CUDAGraph")
    single = not isinstance(callables, tuple)
    fns = (callables,) if single else callables
    all_args = (sample_args,) if single else tuple(sample_args)
    if len(fns) != len(all_args):
        raise ValueError(f"make_graphed_callables: {len(fns)} callables but {len(all_args)} sample_args tuples")
    captured = []
    for i, (fn, args) in enumerate(zip(fns, all_args)):
        args = tuple(args)
        _check_callable(i, fn, args)
        params = tuple(fn.parameters()) if _is_module(fn) else ()
        captured.append(_Captured(fn, args, params))
    from . import Stream, stream, synchronize

    pool = graph_pool_handle() if pool is None else pool
    synchronize()
    with stream(Stream()):
        _warm_up(captured, num_warmup_iters, allow_unused_input)
    synchronize()
    for c in captured:
        _capture_forward(c, pool)
    for c in reversed(captured):
        _capture_backward(c, pool, allow_unused_input)
    results = []
    for fn, c in zip(fns, captured):
        graphed = _make_function(c)
        if _is_module(fn):
            training, eager_forward = fn.training, fn.forward

            def forward(*args, _graphed=graphed, _module=fn, _training=training, _eager=eager_forward):
                return _graphed(*args) if _module.training == _training else _eager(*args)
            fn.forward = forward
            results.append(fn)
        else:
            results.append(graphed)
    return results[0] if single else tuple(results)
