"""``torch.utils.flop_counter``: ``FlopCounterMode`` counts the FLOPs of the matrix products and convolutions run
inside it, per ATen op and per module (``ModuleTracker``), with torch's formulas and torch's totals.

jitorch's dispatcher sees its own rows (``linear``, ``matmul``, ``convolution_weight``...), so each row is first
restated as the ATen calls torch runs for it (`_flop_rows`: ``linear`` with a bias is ``aten.addmm`` on 2-D or
contiguous inputs, a batched ``matmul`` is ``aten.bmm`` unless torch folds it into an ``aten.mm``, a convolution's
gradient rows are ``aten.convolution_backward`` with one output, an ``einsum`` is its pairwise ``aten.bmm``
contractions); the formulas then take torch's arguments. As torch's, matrix-vector products, ``dot`` and ``outer``
count nothing, and neither does attention on the CPU (torch's CPU kernel has no formula). Unlike torch's: ops
jitorch composes from products count them (average pooling and adaptive average pooling run a convolution or
matmuls, ``nn.Bilinear`` a matmul), and RNNs count their input projection only (torch's count a GRU's per-step
products, and nothing of an LSTM on the CPU).

>>> import jitorch
>>> with FlopCounterMode(display=False) as counter:
...     _ = jitorch.nn.Linear(4, 3)(jitorch.ones(2, 4))
>>> counter.get_total_flops(), {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
(48, {'aten.addmm': 48})
"""
from __future__ import annotations

import math
import threading
import warnings
from collections import defaultdict

from .._dispatch_modes import MODES, run_below
from .._tensor import Tensor
from .module_tracker import ModuleTracker

__all__ = ["FlopCounterMode", "register_flop_formula"]


class _AtenOp:
    """An ATen operator's name as a key of the counts (``str`` gives ``'aten.mm'``, as torch's OpOverloadPacket)."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __str__(self):
        return f"aten.{self._name}"

    def __repr__(self):
        return f"<OpOverloadPacket(op='aten.{self._name}')>"

    def __eq__(self, other):
        return isinstance(other, _AtenOp) and other._name == self._name

    def __hash__(self):
        return hash(("aten", self._name))


class _Aten:
    """``flop_counter.aten.mm``: the keys the registry and the counts use (torch's module has ``aten`` too)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AtenOp(name)


aten = _Aten()
flop_registry: dict = {}


def register_flop_formula(targets, get_raw=False):
    """Register ``formula(*arg_shapes, out_shape=..., **kwargs) -> int`` for ATen ops (``aten.mm`` or ``'aten.mm'``),
    as torch's decorator; ``get_raw`` (tensors instead of shapes) is not offered: jitorch's rows give shapes."""
    if get_raw:
        raise NotImplementedError("register_flop_formula(get_raw=True): jitorch passes formulas shapes only")

    def register_fun(formula):
        for target in targets if isinstance(targets, (list, tuple)) else [targets]:
            flop_registry[_as_key(target)] = formula
        return formula

    return register_fun


def _as_key(target):
    if isinstance(target, _AtenOp):
        return target
    name = str(target)
    if not name.startswith("aten."):
        raise ValueError(f"register_flop_formula(targets): expected ATen ops such as aten.mm or 'aten.mm', got "
                         f"{target!r}")
    return _AtenOp(name[len("aten."):])


# -- torch's formulas (on shapes) --------------------------------------------------------------------------------------
@register_flop_formula(aten.mm)
def mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    m, k = a_shape
    _, n = b_shape
    return m * n * 2 * k


@register_flop_formula(aten.addmm)
def addmm_flop(self_shape, a_shape, b_shape, out_shape=None, **kwargs) -> int:
    return mm_flop(a_shape, b_shape)


@register_flop_formula(aten.bmm)
def bmm_flop(a_shape, b_shape, out_shape=None, **kwargs) -> int:
    b, m, k = a_shape
    _, _, n = b_shape
    return b * m * n * 2 * k


@register_flop_formula(aten.baddbmm)
def baddbmm_flop(self_shape, a_shape, b_shape, out_shape=None, **kwargs) -> int:
    return bmm_flop(a_shape, b_shape)


def conv_flop_count(x_shape, w_shape, out_shape, transposed=False) -> int:
    """Multiplications of a convolution, times 2 (the bias ignored): per output point (per input point when
    ``transposed``) one filter's worth, for each batch entry and pair of channels the weight joins."""
    conv_shape = (x_shape if transposed else out_shape)[2:]
    c_out, c_in, *filter_size = w_shape
    return math.prod(conv_shape) * math.prod(filter_size) * x_shape[0] * c_out * c_in * 2


@register_flop_formula(aten.convolution)
def conv_flop(x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed, *args, out_shape=None,
              **kwargs) -> int:
    return conv_flop_count(x_shape, w_shape, out_shape, transposed=transposed)


@register_flop_formula(aten.convolution_backward)
def conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                       _output_padding, _groups, output_mask, out_shape, **kwargs) -> int:
    def t(shape):
        return [shape[1], shape[0]] + list(shape[2:])

    flops = 0
    if output_mask[0]:  # the input's gradient: a transposed convolution of the output's
        flops += conv_flop_count(grad_out_shape, w_shape, out_shape[0], not transposed)
    if output_mask[1]:  # the weight's: a convolution of the input with the output's gradient
        if transposed:
            flops += conv_flop_count(t(grad_out_shape), t(x_shape), t(out_shape[1]), transposed=False)
        else:
            flops += conv_flop_count(t(x_shape), t(grad_out_shape), t(out_shape[1]), transposed=False)
    return flops


def sdpa_flop_count(query_shape, key_shape, value_shape) -> int:
    b, h, s_q, d_q = query_shape
    s_k, d_v = key_shape[2], value_shape[3]
    return bmm_flop((b * h, s_q, d_q), (b * h, d_q, s_k)) + bmm_flop((b * h, s_q, s_k), (b * h, s_k, d_v))


def sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape) -> int:
    b, h, s_q, d_q = query_shape
    s_k, d_v = key_shape[2], value_shape[3]
    return (bmm_flop((b * h, s_q, d_q), (b * h, d_q, s_k)) + bmm_flop((b * h, s_q, d_v), (b * h, d_v, s_k))
            + bmm_flop((b * h, s_k, s_q), (b * h, s_q, d_v)) + bmm_flop((b * h, s_q, s_k), (b * h, s_k, d_q))
            + bmm_flop((b * h, d_q, s_q), (b * h, s_q, s_k)))


@register_flop_formula([aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_flash_attention])
def sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


@register_flop_formula([aten._scaled_dot_product_efficient_attention_backward,
                        aten._scaled_dot_product_flash_attention_backward])
def sdpa_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# -- the counter -------------------------------------------------------------------------------------------------------
_SUFFIXES = ["", "K", "M", "B", "T"]


def _suffix(number):
    # 1.01B reads better as 1001M: the suffix leaves some digits before the point.
    return _SUFFIXES[max(0, min(len(_SUFFIXES) - 1, (len(str(number)) - 2) // 3))]


def _with_suffix(number, suffix):
    return f"{number / 1000 ** _SUFFIXES.index(suffix):.3f}{suffix}"


def _percent(num, denom):
    return "0%" if denom == 0 else f"{num / denom:.2%}"


def _format_table(rows, headers):
    """``tabulate``'s plain table, as torch prints it: a header, dashes, the rows; the first column left-aligned, the
    others right-aligned; columns at least two wider than their header; cells that read as numbers shown as numbers
    (``'120.000'`` as ``120``). Leading spaces are kept (torch asks tabulate to preserve them)."""
    def cell(value):
        try:
            return format(float(value), "g")
        except ValueError:
            return str(value)

    rows = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h) + 2] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(headers), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def _shape_of(t):
    return tuple(t.shape) if isinstance(t, Tensor) else None


class _FlopCounterMode:
    """The dispatcher mode: runs each op beneath itself, then counts it if it ran on the thread that entered the
    counter (torch's modes are per thread). Not transparent: a compiled function runs its ops eagerly under it, so
    they are counted too."""

    def __init__(self, counter):
        self.counter = counter
        self.thread = threading.get_ident()

    def dispatch(self, op, args, attrs):
        from .._dispatch import apply

        out = run_below(self, apply, op, *args, **attrs)
        if threading.get_ident() == self.thread:
            self.counter._count(op.name, args, attrs, out)
        return out

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        from .._dispatch import apply_inplace

        return run_below(self, apply_inplace, op, self_tensor, *args, **attrs)


class FlopCounterMode:
    """A context manager counting the FLOPs run inside it, per module (``ModuleTracker``'s names; ``"Global"`` holds
    them all) and per ATen op; ``display`` prints the table on exit, ``depth`` its deepest module level.

    ``custom_mapping`` maps ATen ops (``flop_counter.aten.mm``) to formulas over argument shapes, replacing or adding
    to the registry. ``mods`` is accepted and ignored, with torch's warning.
    """

    def __init__(self, mods=None, depth: int = 2, display: bool = True, custom_mapping=None) -> None:
        self.flop_counts: dict = defaultdict(lambda: defaultdict(int))
        self.depth = depth
        self.display = display
        self.mode = None
        if mods is not None:
            warnings.warn("mods argument is not needed anymore, you can stop passing it", stacklevel=2)
        self.flop_registry = {**flop_registry, **{_as_key(k): v for k, v in (custom_mapping or {}).items()}}
        self.mod_tracker = ModuleTracker()

    def get_total_flops(self) -> int:
        return sum(self.flop_counts["Global"].values())

    def get_flop_counts(self) -> dict:
        """The counts as ``{module name: {ATen op: flops}}``."""
        return {k: dict(v) for k, v in self.flop_counts.items()}

    def get_table(self, depth=None):
        """The counts as torch's table: each module down to ``depth`` with its total and its ops' shares."""
        depth = self.depth if depth is None else depth
        depth = 999999 if depth is None else depth
        global_flops = self.get_total_flops()
        suffix = _suffix(global_flops)
        subsumed = False

        def process_mod(mod_name, level):
            nonlocal subsumed
            total = sum(self.flop_counts[mod_name].values())
            subsumed |= total >= global_flops
            pad = " " * level
            rows = [[pad + mod_name, _with_suffix(total, suffix), _percent(total, global_flops)]]
            for k, v in self.flop_counts[mod_name].items():
                rows.append([pad + " - " + str(k), _with_suffix(v, suffix), _percent(v, global_flops)])
            return rows

        rows = []
        for mod in sorted(self.flop_counts):
            if mod != "Global" and mod.count(".") + 1 <= depth:
                rows.extend(process_mod(mod, mod.count(".")))
        # "Global" only shows when some FLOPs ran outside every module.
        if "Global" in self.flop_counts and not subsumed:
            for row in rows:
                row[0] = " " + row[0]
            rows = process_mod("Global", 0) + rows
        if not rows:
            rows = [["Global", "0", "0%"]]
        return _format_table(rows, ["Module", "FLOP", "% Total"])

    def __enter__(self):
        self.flop_counts.clear()
        self.mod_tracker.__enter__()
        self.mode = _FlopCounterMode(self)
        MODES.append(self.mode)
        return self

    def __exit__(self, *args):
        MODES.remove(self.mode)
        self.mode = None
        self.mod_tracker.__exit__()
        if self.display:
            print(self.get_table(self.depth))
        return False

    def _count(self, row_name, args, attrs, out):
        from ._flop_rows import aten_calls

        first = out[0] if isinstance(out, (tuple, list)) else out
        for name, shapes, kwargs in aten_calls(row_name, args, attrs, first if isinstance(first, Tensor) else None):
            key = _AtenOp(name)
            formula = self.flop_registry.get(key)
            if formula is None:
                continue
            flops = formula(*shapes, **{"out_shape": _shape_of(first), **kwargs})
            for parent in set(self.mod_tracker.parents):
                self.flop_counts[parent][key] += flops
