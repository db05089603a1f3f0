"""``torch.<view>_copy``: each view function's result in fresh contiguous memory (``permute_copy``,
``select_copy``, ``split_copy``...), the forms functionalized programs and export graphs call. Each is its view
followed by a contiguous clone, so gradients flow through both; ``out=`` is honoured as torch's.

Also the top-level in-place spellings torch has beside the methods (``torch.arccosh_(x)`` is ``x.arccosh_()``).

>>> import jitorch
>>> x = jitorch.arange(6.).reshape(2, 3)
>>> y = jitorch.permute_copy(x, (1, 0))
>>> y.tolist(), y.stride(), y.data_ptr() != x.data_ptr()
([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]], (2, 1), True)
"""
from __future__ import annotations

from ._tensor import Tensor
from ._tensor_set import _dtype_word

_VIEWS = {  # name of the copy -> the Tensor method it copies (None: the function of the same name)
    "alias_copy": "view_as_self", "diagonal_copy": "diagonal", "expand_copy": "expand", "permute_copy": "permute",
    "select_copy": "select", "squeeze_copy": "squeeze", "t_copy": "t", "transpose_copy": "transpose",
    "unfold_copy": "unfold", "unsqueeze_copy": "unsqueeze", "view_copy": "view", "as_strided_copy": "as_strided",
    "view_as_real_copy": None, "view_as_complex_copy": None,
}
_SPLITS = {"split_copy": "split", "split_with_sizes_copy": "split_with_sizes", "unbind_copy": "unbind"}
_INPLACE = ("arccosh_", "arcsinh_", "arctanh_", "conj_physical_", "gcd_", "lcm_", "i0_", "ldexp_")

__all__ = [*_VIEWS, *_SPLITS, "detach_copy", "slice_copy", *_INPLACE]


def _fresh(view, out):
    from . import contiguous_format

    result = view.clone(memory_format=contiguous_format)
    if out is None:
        return result
    if not isinstance(out, Tensor):
        raise TypeError(f"out= expects a Tensor, got {type(out).__name__}")
    if out.dtype != result.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_dtype_word(result.dtype)}, but got "
                           f"{_dtype_word(out.dtype)} instead")
    out.resize_(result.shape)
    return out.copy_(result)


def _view_copy(name, method):
    def copy(input, *args, out=None, **kwargs):
        import jitorch

        if method is None:                 # view_as_real / view_as_complex are functions, not methods
            view = getattr(jitorch, name[:-5])(input, *args, **kwargs)
        elif method == "view_as_self":
            view = input.view_as(input)
        elif method == "view" and not (args and isinstance(args[0], jitorch.dtype)):
            view = input.reshape(*args, **kwargs)   # ATen's view_copy takes any input reshape takes (not view's)
        else:
            view = getattr(input, method)(*args, **kwargs)
        return _fresh(view, out)

    copy.__name__ = copy.__qualname__ = name
    copy.__doc__ = (f"``{name[:-5]}`` of ``input`` in new contiguous memory; gradients flow as through the view.")
    return copy


def _split_copy(name, method):
    def copy(input, *args, out=None, **kwargs):
        parts = getattr(input, method)(*args, **kwargs)
        if out is None:
            return tuple(_fresh(p, None) for p in parts)
        if len(out) != len(parts):
            raise RuntimeError(f"{name}: out= holds {len(out)} tensors, the split makes {len(parts)}")
        for target, part in zip(out, parts):
            _fresh(part, target)
        return None

    copy.__name__ = copy.__qualname__ = name
    copy.__doc__ = f"``{method}`` of ``input``, each part in new contiguous memory (a tuple, as torch's)."
    return copy


def slice_copy(input, dim=0, start=None, end=None, step=1, *, out=None):
    """``input`` sliced ``start:end:step`` along ``dim``, in new contiguous memory.

    >>> import jitorch
    >>> slice_copy(jitorch.arange(6).reshape(2, 3), 1, 1, 3).tolist()
    [[1, 2], [4, 5]]
    """
    index = [slice(None)] * input.dim()
    index[dim] = slice(start, end, step)
    return _fresh(input[tuple(index)], out)


def detach_copy(input, *, out=None):
    """A detached copy of ``input`` (torch 2.13 flags its result as requiring grad and then has no derivative for
    it; jitorch returns the detached copy the name promises).

    >>> import jitorch
    >>> detach_copy(jitorch.ones(2, requires_grad=True)).requires_grad
    False
    """
    return _fresh(input.detach(), out)


def _inplace(name):
    def function(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``input.{name}(...)``: in place, as the method."
    return function


globals().update({name: _view_copy(name, method) for name, method in _VIEWS.items()})
globals().update({name: _split_copy(name, method) for name, method in _SPLITS.items()})
globals().update({name: _inplace(name) for name in _INPLACE})
