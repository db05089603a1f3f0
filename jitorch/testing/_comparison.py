"""``assert_close``: torch.testing's comparison, with its default tolerances and its error messages.

Values are compared on the host with NumPy, in the tensors' own dtype (float16/bfloat16 upcast to float32) so the
reported differences are the numbers torch reports.

>>> import jitorch
>>> from jitorch.testing import assert_close
>>> assert_close(jitorch.tensor([1.0, 2.0]), jitorch.tensor([1.0, 2.0 + 1e-7]))
>>> assert_close(jitorch.tensor([1, 2]), jitorch.tensor([1, 3]))
Traceback (most recent call last):
    ...
AssertionError: Tensor-likes are not equal!
<BLANKLINE>
Mismatched elements: 1 / 2 (50.0%)
Greatest absolute difference: 1 at index (1,)
Greatest relative difference: 0.3333333432674408 at index (1,)
"""
from __future__ import annotations

import collections.abc as abc
import math

import numpy as np

__all__ = ["assert_close"]


def _dtype_precisions():
    from .. import _dtype as d

    return {d.float16: (0.001, 1e-5), d.bfloat16: (0.016, 1e-5), d.float32: (1.3e-6, 1e-5), d.float64: (1e-7, 1e-7),
            d.complex64: (1.3e-6, 1e-5), d.complex128: (1e-7, 1e-7)}


def _tolerances(*dtypes, rtol, atol):
    if (rtol is None) ^ (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, "
                         f"but got no {'rtol' if rtol is None else 'atol'}.")
    if rtol is not None:
        return rtol, atol
    table = _dtype_precisions()
    pairs = [table.get(dt, (0.0, 0.0)) for dt in dtypes]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _fmt(value) -> str:
    # torch names dtypes "torch.float32"; jitorch's repr is "jitorch.float32". Keep torch's text so messages match.
    text = str(value)
    return "torch." + text.split(".", 1)[1] if text.startswith("jitorch.") else text


class _Fail(Exception):
    def __init__(self, kind, msg):
        super().__init__(msg)
        self.kind, self.msg = kind, msg


def _host(tensor):
    from .. import _dtype as d

    arr = np.asarray(tensor.detach().cpu().numpy())
    if tensor.dtype in (d.float16, d.bfloat16):
        arr = arr.astype(np.float32)
    return arr


def _isclose(a, b, rtol, atol, equal_nan):
    if a.dtype == np.bool_ or (rtol == 0 and atol == 0 and not np.issubdtype(a.dtype, np.inexact)):
        return a == b
    with np.errstate(all="ignore"):
        kind = a.dtype.type
        close = (a == b) | (np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= kind(atol) + kind(rtol) * np.abs(b)))
    if equal_nan:
        close |= np.isnan(a) & np.isnan(b)
    return close


def _unravel(flat, shape):
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _diff_lines(equality, abs_diff, abs_idx, atol, rel_diff, rel_idx, rtol):
    lines = []
    for name, diff, idx, tol in (("absolute", abs_diff, abs_idx, atol), ("relative", rel_diff, rel_idx, rtol)):
        line = (f"{name.title()} difference: {diff}" if idx is None
                else f"Greatest {name} difference: {diff} at index {idx}")
        lines.append(line if equality else f"{line} (up to {tol} allowed)")
    return "\n".join(lines)


def _scalar_msg(actual, expected, rtol, atol, identifier="Scalars"):
    equality = rtol == 0 and atol == 0
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return (f"{identifier} are not {'equal' if equality else 'close'}!\n\nExpected {expected} but got {actual}.\n"
            + _diff_lines(equality, abs_diff, None, atol, rel_diff, None, rtol))


def _tensor_msg(a, b, matches, rtol, atol):
    equality = rtol == 0 and atol == 0
    total, bad = matches.size, int(matches.size - matches.sum())
    head = f"Tensor-likes are not {'equal' if equality else 'close'}!\n\n"
    head += f"Mismatched elements: {bad} / {total} ({bad / total:.1%})\n"
    fa, fb, fm = a.ravel(), b.ravel(), matches.ravel()
    if not np.issubdtype(fa.dtype, np.inexact):
        fa, fb = fa.astype(np.int64), fb.astype(np.int64)
    with np.errstate(all="ignore"):
        abs_diff = np.abs(fa - fb)
        abs_diff[fm] = 0
        # int / int is a float32 division in torch (the default dtype); floats stay in their own dtype.
        denom = np.abs(fb) if np.issubdtype(fb.dtype, np.inexact) else np.abs(fb).astype(np.float32)
        rel_diff = (abs_diff if np.issubdtype(abs_diff.dtype, np.inexact) else abs_diff.astype(np.float32)) / denom
        rel_diff[fm] = 0
    ia, ir = int(np.argmax(abs_diff)), int(np.argmax(rel_diff))
    if np.isnan(abs_diff).any():
        ia = int(np.argmax(np.isnan(abs_diff)))
    if np.isnan(rel_diff).any():
        ir = int(np.argmax(np.isnan(rel_diff)))
    return head + _diff_lines(equality, abs_diff[ia].item(), _unravel(ia, a.shape), atol, rel_diff[ir].item(),
                              _unravel(ir, a.shape), rtol)


def _compare_tensors(actual, expected, *, rtol, atol, equal_nan, check_device, check_dtype, check_layout,
                     check_stride):
    import jitorch

    if actual.shape != expected.shape:
        raise _Fail(AssertionError, f"The values for attribute 'shape' do not match: "
                                    f"{_fmt(actual.shape)} != {_fmt(expected.shape)}.")
    if check_device and actual.device != expected.device:
        raise _Fail(AssertionError, f"The values for attribute 'device' do not match: "
                                    f"{actual.device} != {expected.device}.")
    if check_dtype and actual.dtype != expected.dtype:
        raise _Fail(AssertionError, f"The values for attribute 'dtype' do not match: "
                                    f"{_fmt(actual.dtype)} != {_fmt(expected.dtype)}.")
    if check_stride and actual.stride() != expected.stride():
        raise _Fail(AssertionError, f"The values for attribute 'stride()' do not match: "
                                    f"{actual.stride()} != {expected.stride()}.")
    rtol, atol = _tolerances(actual.dtype, expected.dtype, rtol=rtol, atol=atol)
    if actual.dtype != expected.dtype:
        common = jitorch.promote_types(actual.dtype, expected.dtype)
        actual, expected = actual.to(common), expected.to(common)
    a, b = _host(actual), _host(expected)
    matches = _isclose(a, b, rtol, atol, equal_nan)
    if bool(np.all(matches)):
        return
    if a.shape == ():
        raise _Fail(AssertionError, _scalar_msg(a.item(), b.item(), rtol, atol))
    raise _Fail(AssertionError, _tensor_msg(a, b, matches, rtol, atol))


def _compare_scalars(actual, expected, *, rtol, atol, equal_nan, check_dtype):
    if check_dtype and type(actual) is not type(expected):
        raise _Fail(AssertionError, f"The (d)types do not match: {type(actual)} != {type(expected)}.")
    # Python numbers compare as float64 (complex128), with that dtype's tolerances.
    rtol, atol = _tolerances(_float64_for(actual, expected), rtol=rtol, atol=atol)
    if actual == expected:
        return
    if equal_nan and isinstance(actual, (float, complex)) and _isnan(actual) and _isnan(expected):
        return
    if not isinstance(actual, bool) and math.isfinite(abs(actual)) and math.isfinite(abs(expected)):
        if abs(actual - expected) <= atol + rtol * abs(expected):
            return
    raise _Fail(AssertionError, _scalar_msg(actual, expected, rtol, atol))


def _isnan(x):
    return x != x


def _float64_for(*values):
    from .. import _dtype as d

    if any(isinstance(v, complex) for v in values):
        return d.complex128
    if any(isinstance(v, bool) for v in values) and all(isinstance(v, bool) for v in values):
        return d.bool
    if all(isinstance(v, int) for v in values):
        return d.int64
    return d.float64


def _is_scalar(x):
    return isinstance(x, (bool, int, float, complex))


def _compare(actual, expected, path, options):
    import jitorch

    if isinstance(actual, np.ndarray):
        actual = jitorch.as_tensor(actual)
    if isinstance(expected, np.ndarray):
        expected = jitorch.as_tensor(expected)
    try:
        if isinstance(actual, jitorch.Tensor) and isinstance(expected, jitorch.Tensor):
            return _compare_tensors(actual, expected, **options)
        if _is_scalar(actual) and _is_scalar(expected):
            return _compare_scalars(actual, expected, rtol=options["rtol"], atol=options["atol"],
                                    equal_nan=options["equal_nan"], check_dtype=options["check_dtype"])
    except _Fail as failure:
        failure.path = path  # reported as "The failure occurred for item [0]['a']"
        raise
    if isinstance(actual, abc.Mapping) and isinstance(expected, abc.Mapping):
        if set(actual) != set(expected):
            missing = sorted(set(expected) - set(actual), key=repr)
            extra = sorted(set(actual) - set(expected), key=repr)
            raise _Fail(AssertionError, f"The keys of the mappings do not match:\nMissing keys in the actual mapping: "
                                        f"{missing}\nExtra keys in the actual mapping: {extra}")
        for key in expected:
            _compare(actual[key], expected[key], path + [key], options)
        return
    sequences = (abc.Sequence,)
    if (isinstance(actual, sequences) and isinstance(expected, sequences) and not isinstance(actual, str)
            and not isinstance(expected, str)):
        if len(actual) != len(expected):
            raise _Fail(AssertionError, f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, path + [i], options)
        return
    raise _Fail(TypeError, f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}.")


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` are close (``|a - e| <= atol + rtol * |e|``).

    Inputs may be tensors, NumPy arrays, Python numbers, or sequences/mappings of them. Default tolerances depend
    on the dtype (float32: ``rtol=1.3e-6, atol=1e-5``; float64: ``1e-7``; integers and bool: exact).
    ``msg`` replaces the message (a callable receives the generated one).
    """
    options = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=check_device, check_dtype=check_dtype,
                   check_layout=check_layout, check_stride=check_stride)
    try:
        _compare(actual, expected, [], options)
    except _Fail as failure:
        text = failure.msg
        if failure.kind is AssertionError:
            if path := _path_of(failure):
                text += f"\n\nThe failure occurred for item {path}"
            if callable(msg):
                text = msg(text)
            elif msg is not None:
                text = msg
        raise failure.kind(text) from None


def _path_of(failure):
    path = getattr(failure, "path", None)
    return "".join(f"[{p!r}]" for p in path) if path else ""
