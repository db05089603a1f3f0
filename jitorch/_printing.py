"""Render NumPy arrays exactly the way PyTorch 2.x's ``repr(tensor)`` does.

This module deliberately knows nothing about jitorch's ``Tensor``: the caller
passes the raw data plus the dtype name and any trailing items (``grad_fn``,
``requires_grad``, ``device``), so printing can be tested against real PyTorch
in isolation. The logic mirrors ``torch/_tensor_str.py``, print options
(``set_printoptions``: precision, threshold, edgeitems, linewidth, sci_mode,
profiles) included.

Example:

    >>> import numpy as np
    >>> print(format_tensor(np.array([[1.0, 2.5], [-3.0, 1e5]], dtype=np.float32),
    ...                     dtype_name="float32"))
    tensor([[ 1.0000e+00,  2.5000e+00],
            [-3.0000e+00,  1.0000e+05]])
    >>> format_tensor(np.array([1, 2], dtype=np.int32), dtype_name="int32",
    ...               suffixes=["requires_grad=True"])
    'tensor([1, 2], dtype=jitorch.int32, requires_grad=True)'
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["format_tensor", "set_printoptions", "get_printoptions", "printoptions"]


class _PrintOptions:
    # NOTE: a plain class, not a dataclass: tests load this file by path, outside any package.
    def __init__(self):
        self.precision, self.threshold, self.edgeitems, self.linewidth = 4, 1000, 3, 80
        self.sci_mode = None  # None: chosen per tensor from its values


OPTIONS = _PrintOptions()
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """Print options of tensor reprs, as ``torch.set_printoptions``: a ``profile`` (``"default"``, ``"short"``,
    ``"full"``) first, then the options given; ``sci_mode`` is always set (None: chosen from the values).

    >>> import jitorch
    >>> jitorch.set_printoptions(precision=2, sci_mode=False)
    >>> jitorch.tensor([1.23456, 1e-10])
    tensor([1.23, 0.00])
    >>> jitorch.set_printoptions(profile="default")
    """
    if profile in _PROFILES:
        (OPTIONS.precision, OPTIONS.threshold, OPTIONS.edgeitems, OPTIONS.linewidth) = _PROFILES[profile]
    if precision is not None:
        OPTIONS.precision = precision
    if threshold is not None:
        OPTIONS.threshold = threshold
    if edgeitems is not None:
        OPTIONS.edgeitems = edgeitems
    if linewidth is not None:
        OPTIONS.linewidth = linewidth
    OPTIONS.sci_mode = sci_mode


def get_printoptions() -> dict:
    """The current options, as keywords ``set_printoptions`` takes."""
    return dict(vars(OPTIONS))


@contextlib.contextmanager
def printoptions(**kwargs):
    """``set_printoptions(**kwargs)`` inside the block only."""
    old = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**old)


class _Formatter:
    """Chooses one number style and column width for a whole tensor.

    ``values`` must be a float64 array for floating data (so Python float
    formatting sees the exact stored value, like torch's ``.item()``), or an
    integer/bool array otherwise.
    """

    def __init__(self, values: np.ndarray) -> None:
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1

        flat = values.reshape(-1)
        if not self.floating:
            for value in flat.tolist():
                self.max_width = max(self.max_width, len(f"{value}"))
            return

        # Zeros and non-finite values never influence the style or the width;
        # torch only looks at the nonzero finite ones.
        nonzero_finite = flat[np.isfinite(flat) & (flat != 0)]
        if nonzero_finite.size == 0:
            return
        magnitudes = np.abs(nonzero_finite)
        smallest, largest = float(magnitudes.min()), float(magnitudes.max())
        self.int_mode = bool(np.all(nonzero_finite == np.ceil(nonzero_finite)))
        if OPTIONS.sci_mode is None:
            self.sci_mode = largest / smallest > 1000.0 or largest > 1.0e8 or smallest < 1.0e-4
        else:
            self.sci_mode = bool(OPTIONS.sci_mode)
        precision = OPTIONS.precision

        for value in nonzero_finite.tolist():
            if self.sci_mode:
                width = len(f"{value:.{precision}e}")
            elif self.int_mode:
                # +1 for the trailing "." that marks integral floats.
                width = len(f"{value:.0f}") + 1
            else:
                width = len(f"{value:.{precision}f}")
            self.max_width = max(self.max_width, width)

    def format(self, value) -> str:
        if not self.floating:
            text = f"{value}"
        elif self.sci_mode:
            text = f"{value:{self.max_width}.{OPTIONS.precision}e}"
        elif self.int_mode:
            text = f"{value:.0f}"
            if math.isfinite(value):
                text += "."
        else:
            text = f"{value:.{OPTIONS.precision}f}"
        # rjust never truncates: nan/inf may exceed max_width, as in torch.
        return text.rjust(self.max_width)


def _format_value(value, real_fmt: _Formatter, imag_fmt: _Formatter | None) -> str:
    if imag_fmt is None:
        return real_fmt.format(value)
    real_text = real_fmt.format(value.real)
    imag_text = (imag_fmt.format(value.imag) + "j").lstrip()
    # The imaginary part carries its own sign when negative (or "-0").
    if imag_text[0] in "+-":
        return real_text + imag_text
    return real_text + "+" + imag_text


def _vector_str(vec: np.ndarray, indent: int, summarize: bool,
                real_fmt: _Formatter, imag_fmt: _Formatter | None) -> str:
    # Each element takes its width plus ", "; complex adds the imag part + "j".
    element_length = real_fmt.max_width + 2
    if imag_fmt is not None:
        element_length += imag_fmt.max_width + 1
    per_line = max(1, math.floor((OPTIONS.linewidth - indent) / element_length))

    def fmt(values: np.ndarray) -> list[str]:
        return [_format_value(v, real_fmt, imag_fmt) for v in values.tolist()]

    edge = OPTIONS.edgeitems
    if summarize and not edge:
        items = ["..."]
    elif summarize and vec.shape[0] > 2 * edge:
        # " ..." counts as an ordinary element when splitting into lines.
        items = fmt(vec[:edge]) + [" ..."] + fmt(vec[vec.shape[0] - edge:])
    else:
        items = fmt(vec)

    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested_str(arr: np.ndarray, indent: int, summarize: bool,
                real_fmt: _Formatter, imag_fmt: _Formatter | None) -> str:
    if arr.ndim == 0:
        return _format_value(arr.item(), real_fmt, imag_fmt)
    if arr.ndim == 1:
        return _vector_str(arr, indent, summarize, real_fmt, imag_fmt)

    def sub(i: int) -> str:
        return _nested_str(arr[i], indent + 1, summarize, real_fmt, imag_fmt)

    n, edge = arr.shape[0], OPTIONS.edgeitems
    if summarize and n > 2 * edge:
        slices = [sub(i) for i in range(edge)] + ["..."]
        slices += [sub(i) for i in range(n - edge, n)]
    else:
        slices = [sub(i) for i in range(n)]
    # Deeper nesting separates blocks with more blank lines, as torch does.
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _summarized(arr: np.ndarray) -> np.ndarray:
    """Only the elements that will actually be printed when summarizing.

    The formatter must see just these, otherwise hidden values could change
    the column width or trigger scientific mode.
    """
    edge = OPTIONS.edgeitems
    picks = [np.r_[0:edge, size - edge:size] if size > 2 * edge else np.arange(size) for size in arr.shape]
    return arr[np.ix_(*picks)] if arr.ndim else arr


def _to_printable(arr: np.ndarray) -> np.ndarray:
    """Widen to float64/complex128 so Python's formatting sees exact values.

    Covers float16 and ml_dtypes.bfloat16 (whose NumPy kind is 'V'), which
    torch also widens before formatting; every such value is exact in float64.
    """
    kind = arr.dtype.kind
    if kind in "biu":
        return arr
    if kind == "c":
        return arr.astype(np.complex128)
    if kind != "f":
        arr = arr.astype(np.float32)
    return arr.astype(np.float64)


def _add_suffixes(text: str, suffixes: Sequence[str], indent: int) -> str:
    parts = [text]
    # Off by two relative to the visible line length; kept to match torch.
    last_line_len = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        # Measured as torch's "dtype=torch.<name>", so items wrap onto the lines torch puts them on.
        width = len(suffix.replace("jitorch.", "torch."))
        if last_line_len + width + 2 > OPTIONS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + width
        else:
            parts.append(", " + suffix)
            last_line_len += width + 2
    parts.append(")")
    return "".join(parts)



def bracketed_values(arr, indent):
    """The bracketed values of a non-empty ``arr`` as torch's ``_tensor_str`` writes them (no suffixes), lines after
    the first indented by ``indent``: summarized past the print threshold, one formatter per real/imaginary part."""
    summarize = arr.size > OPTIONS.threshold
    data = _to_printable(arr)
    shown = _summarized(data) if summarize else data
    if data.dtype.kind == "c":
        real_fmt, imag_fmt = _Formatter(shown.real), _Formatter(shown.imag)
    else:
        real_fmt, imag_fmt = _Formatter(shown), None
    return _nested_str(data, indent, summarize, real_fmt, imag_fmt)


def format_tensor(arr: np.ndarray, *, dtype_name: str, default_float: str = "float32",
                  default_int: str = "int64", suffixes: Sequence[str] = (),
                  prefix: str = "tensor(") -> str:
    """Return PyTorch's ``repr`` of a CPU tensor holding ``arr``'s values.

    ``dtype_name`` is the jitorch dtype (e.g. ``"bfloat16"``) shown in the
    ``dtype=jitorch.<name>`` suffix when it is not the default for its kind.
    ``suffixes`` are preformatted trailing items; ``device=...`` items are
    moved before the dtype item because torch prints the device first.
    """
    arr = np.asarray(arr)
    indent = len(prefix)
    default_complex = "complex128" if default_float == "float64" else "complex64"
    device_items = [s for s in suffixes if s.startswith("device=")]
    other_items = [s for s in suffixes if not s.startswith("device=")]
    dtype_item = f"dtype=jitorch.{dtype_name}"

    items = list(device_items)
    if arr.size == 0:
        # No values to reveal the dtype, so torch shows it unless it is the
        # default float; the shape is shown unless it is plainly (0,).
        if arr.ndim != 1:
            items.append("size=" + str(tuple(int(s) for s in arr.shape)))
        if dtype_name != default_float:
            items.append(dtype_item)
        body = "[]"
    else:
        if not OPTIONS.edgeitems:  # nothing of the values is shown past the threshold, so the shape is
            items.append("size=" + str(tuple(int(s) for s in arr.shape)))
        if dtype_name not in (default_float, default_complex, default_int, "bool"):
            items.append(dtype_item)
        body = bracketed_values(arr, indent)
    items += other_items
    return _add_suffixes(prefix + body, items, indent)
