"""NumPy restricted to CuPy's surface: a stand-in array module that makes GPU-only breakage fail on the CPU.

Kernels are written once against ``xp`` and must run with both NumPy and CuPy, but a machine without a GPU only ever
runs the NumPy branch: a kernel calling ``xp.linalg.vector_norm`` (NumPy only) or passing ``where=`` to ``xp.sum``
would pass every CPU test and break on the first CUDA tensor. ``cupy_surface_numpy()`` returns a module-like object
that computes with NumPy but hands out a name only when CuPy defines it too, and checks call keywords against CuPy's
signatures.
Setting ``jitorch._dispatch.CPU_XP`` to it runs every kernel through that filter.

The object is named ``"numpy"`` so ``jitorch.runtime.is_cupy`` stays False: runtime helpers that branch on the device
(``scatter_add``, ``special_module``...) take their NumPy branch, which is the only one that can run here.

What it checks:

- names: ``xp.<name>`` (and ``xp.linalg.<name>``, ``xp.lib.stride_tricks.<name>``..., recursively) exists in CuPy;
  dtype-like names (``xp.float32``, ``xp.dtype``, ``xp.bool_``) always pass;
- keywords and positional counts of functions, against ``inspect.signature`` of the CuPy function (unreadable
  signatures, and ``**kwargs`` ones, accept everything);
- ufunc calls accept only the keywords CuPy's ufuncs take (``out``, ``dtype``, ``casting``), and the ufunc methods
  CuPy implements only for some ufuncs (``at``, ``reduce``, ``accumulate``, ``reduceat``) are refused for the others.

What it cannot check: methods of the arrays themselves (``a.sum(...)``, ``a.astype(...)``), since kernels receive
plain NumPy arrays (``cupy_array_method_keywords`` serves a static check of those instead); and NumPy used directly as
``np.<name>`` inside a kernel.

>>> xp = cupy_surface_numpy()
>>> xp.linalg.inv(np.eye(2)).tolist()
[[1.0, 0.0], [0.0, 1.0]]
>>> xp.block
Traceback (most recent call last):
AttributeError: xp.block: exists in NumPy but not in CuPy; kernels must run on both
"""
from __future__ import annotations

import functools
import inspect
import re
import types

import numpy as np

__all__ = ["cupy_surface_numpy", "cupy_surface_special", "CupySurface", "is_surface", "cupy_array_method_keywords"]

# CuPy's ufunc methods (cupy/_core/_kernel.pyx): ``at`` exists only for ufuncs with a scatter kernel, and ``reduce``,
# ``accumulate`` and ``reduceat`` are implemented for add (and multiply) alone; the others raise NotImplementedError.
_UFUNC_METHOD_SUPPORT = {
    "reduce": {"add", "multiply"},
    "accumulate": {"add", "multiply"},
    "reduceat": {"add"},
}
# The keywords ``cupy.ufunc.__call__`` takes; anything else is "Wrong arguments" on the GPU.
_UFUNC_CALL_KEYWORDS = frozenset({"out", "dtype", "casting"})


def _is_dtype_like(value) -> bool:
    """``np.float32``, ``np.bool_``, ``np.dtype``, ``np.generic``... (the scalar types CuPy shares with NumPy)."""
    return value is np.dtype or (isinstance(value, type) and issubclass(value, np.generic))


class _Params:
    """What a CuPy signature accepts: keyword names, the most positional arguments, and whether anything goes."""

    __slots__ = ("keywords", "max_positional")

    def __init__(self, signature):
        self.keywords = set()
        self.max_positional = 0
        for p in signature.parameters.values():
            if p.kind is p.VAR_POSITIONAL:
                self.max_positional = None
            elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and self.max_positional is not None:
                self.max_positional += 1
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                self.keywords.add(p.name)


def _cupy_params(cupy_fn):
    """The ``_Params`` of a CuPy callable, or None when every call must be allowed (no readable signature, or one
    with ``**kwargs`` whose accepted names are only known at run time)."""
    try:
        signature = inspect.signature(cupy_fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return _Params(signature)


def _checked_function(numpy_fn, cupy_fn, path):
    """``numpy_fn``, refusing keywords (and extra positional arguments) that CuPy's version does not take."""
    params = _cupy_params(cupy_fn)
    if params is None:
        return numpy_fn

    @functools.wraps(numpy_fn)
    def call(*args, **kwargs):
        for key in kwargs:
            if key not in params.keywords:
                raise TypeError(f"{path}(): keyword {key!r} is accepted by NumPy but not by CuPy "
                                f"(CuPy takes {sorted(params.keywords)}); kernels must run on both")
        if params.max_positional is not None and len(args) > params.max_positional:
            raise TypeError(f"{path}(): {len(args)} positional arguments, but CuPy's version takes at most "
                            f"{params.max_positional}; kernels must run on both")
        return numpy_fn(*args, **kwargs)

    return call


class _SurfaceUfunc:
    """A NumPy ufunc that accepts only CuPy's call keywords and the methods CuPy implements for it."""

    def __init__(self, numpy_ufunc, cupy_ufunc, path):
        self._numpy, self._cupy, self._path = numpy_ufunc, cupy_ufunc, path
        self.__name__ = numpy_ufunc.__name__
        self.nin, self.nout, self.nargs = numpy_ufunc.nin, numpy_ufunc.nout, numpy_ufunc.nargs

    def __repr__(self):
        return f"<surface ufunc {self._path}>"

    def __call__(self, *args, **kwargs):
        extra = set(kwargs) - _UFUNC_CALL_KEYWORDS
        if extra:
            raise TypeError(f"{self._path}(): keyword(s) {sorted(extra)} accepted by NumPy's ufunc but not by CuPy's "
                            f"(it takes {sorted(_UFUNC_CALL_KEYWORDS)}); kernels must run on both")
        return self._numpy(*args, **kwargs)

    def _method(self, method):
        supported = _UFUNC_METHOD_SUPPORT.get(method)
        if method == "at":
            ok = getattr(self._cupy, "_scatter_op", None) is not None
        elif supported is not None:
            ok = self.__name__ in supported
        else:
            ok = hasattr(self._cupy, method)
        if not ok:
            raise AttributeError(f"{self._path}.{method}: CuPy implements it only for some ufuncs, not "
                                 f"{self.__name__}; kernels must run on both")
        return getattr(self._numpy, method)

    @property
    def at(self):
        return self._method("at")

    @property
    def reduce(self):
        return self._method("reduce")

    @property
    def accumulate(self):
        return self._method("accumulate")

    @property
    def reduceat(self):
        return self._method("reduceat")

    @property
    def outer(self):
        return self._method("outer")


class CupySurface(types.ModuleType):
    """A NumPy module (or submodule) that hands out an attribute only when the CuPy counterpart defines it."""

    def __init__(self, numpy_module, cupy_module, name, path, labels=("NumPy", "CuPy")):
        super().__init__(name)
        # Stored in the instance dict under names neither NumPy nor CuPy use, so ``__getattr__`` never sees them.
        self.__dict__["_surface_numpy"] = numpy_module
        self.__dict__["_surface_cupy"] = cupy_module
        self.__dict__["_surface_path"] = path
        self.__dict__["_surface_labels"] = labels

    def __repr__(self):
        return f"<NumPy restricted to CuPy's surface: {self._surface_path}>"

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):  # dunders (pickling, copy, doctest probes) are no API
            raise AttributeError(name)
        numpy_module, cupy_module, path = self._surface_numpy, self._surface_cupy, self._surface_path
        value = getattr(numpy_module, name)  # NumPy's own AttributeError for names neither module has
        here = f"{path}.{name}"
        if _is_dtype_like(value):
            result = value
        elif not hasattr(cupy_module, name):
            host, device = self._surface_labels
            raise AttributeError(f"{here}: exists in {host} but not in {device}; kernels must run on both")
        elif isinstance(value, types.ModuleType):
            result = CupySurface(value, getattr(cupy_module, name), f"{numpy_module.__name__}.{name}", here,
                                 self._surface_labels)
        elif isinstance(value, np.ufunc):
            result = _SurfaceUfunc(value, getattr(cupy_module, name), here)
        elif callable(value) and not isinstance(value, type):
            result = _checked_function(value, getattr(cupy_module, name), here)
        else:  # classes (ndarray, errors) and constants (inf, pi, newaxis)
            result = value
        self.__dict__[name] = result  # cached: only names that passed get here
        return result


def cupy_surface_numpy():
    """NumPy restricted to the names (and call keywords) CuPy also has; see the module docstring."""
    import cupy

    return CupySurface(np, cupy, "numpy", "xp")


def cupy_surface_special():
    """``scipy.special`` restricted to the names ``cupyx.scipy.special`` also has (what ``special_module`` returns)."""
    import cupyx.scipy.special
    import scipy.special

    return CupySurface(scipy.special, cupyx.scipy.special, "scipy.special", "special", ("SciPy", "CuPy"))


def is_surface(xp) -> bool:
    return isinstance(xp, CupySurface)


def cupy_array_method_keywords(name):
    """The keyword names ``cupy.ndarray.<name>`` takes, read from the signature line CuPy's Cython embeds in the
    docstring (``inspect`` cannot read these methods); None when unreadable or when it takes ``**kwargs``."""
    import cupy

    doc = getattr(getattr(cupy.ndarray, name, None), "__doc__", None) or ""
    match = re.match(r"\s*\w+\.(\w+)\((.*?)\)", doc)
    if match is None or match.group(1) != name:
        return None
    keywords = set()
    for part in match.group(2).split(","):
        part = part.split("=")[0].strip()
        if part.startswith("**"):
            return None
        if part and not part.startswith("*"):
            keywords.add(part.split()[-1])  # "int axis" (a Cython-typed parameter) -> "axis"
    return keywords
