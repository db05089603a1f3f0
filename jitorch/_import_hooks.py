"""Third-party modules that meet jitorch tensors, without importing them: a ``sys.meta_path`` finder acting on four
module names only.

einops registers a backend by subclassing ``einops._backends.AbstractBackend`` (it walks ``__subclasses__()`` on
the first tensor of an unknown type), so jitorch's backend (`_einops_backend`) must be defined once that module
exists and before einops meets a jitorch tensor. `install` (end of ``import jitorch``) defines it at once when
einops is already imported; otherwise the finder wraps the loader of ``einops._backends`` so that the backend is
defined right after einops' own module runs. The finder also provides ``einops.layers.jitorch`` (jitorch's
``Rearrange``/``Reduce``/``EinMix``, `_einops_layers`), and, only where PyTorch is not installed, answers
``einops.layers.torch`` with the same layers, and ``safetensors.torch`` with `jitorch.safetensors`, so that
``from einops.layers.torch import Rearrange`` and ``from safetensors.torch import load_file`` run unchanged under
``import jitorch as torch`` (with PyTorch installed those names stay PyTorch's: jitorch never hides a real package).
Checking a name against a set is all the finder costs the other imports; importing einops costs jitorch nothing.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

_BACKENDS = "einops._backends"
_LAYERS = "einops.layers.jitorch"
_TORCH_LAYERS = "einops.layers.torch"
_SAFETENSORS_TORCH = "safetensors.torch"
# The modules answered with a jitorch module's public names; the PyTorch ones only where PyTorch is absent.
_REEXPORTS = {_LAYERS: "jitorch._einops_layers", _TORCH_LAYERS: "jitorch._einops_layers",
              _SAFETENSORS_TORCH: "jitorch.safetensors"}
_NAMES = frozenset((_BACKENDS, *_REEXPORTS))


def _define_backend() -> None:
    from . import _einops_backend  # noqa: F401 - defining the subclass registers it with einops


class _RegisterAfter:
    """``einops._backends``'s own loader, followed by `_define_backend`."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # get_source, get_filename, ... of the real loader
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self._loader
        _define_backend()


class _Reexport:
    """A module holding another module's public names (a module of its own: the source keeps its ``__spec__``)."""

    def __init__(self, source: str):
        self.source = source

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = importlib.import_module(self.source)
        module.__dict__.update({name: getattr(source, name) for name in source.__all__})
        module.__all__ = list(source.__all__)


class _EinopsFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in _NAMES:
            return None
        if fullname == _BACKENDS:
            spec = cls._spec_from_other_finders(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RegisterAfter(spec.loader)
            return spec
        if fullname in (_TORCH_LAYERS, _SAFETENSORS_TORCH) and importlib.util.find_spec("torch") is not None:
            return None
        return importlib.util.spec_from_loader(fullname, _Reexport(_REEXPORTS[fullname]))

    @classmethod
    def _spec_from_other_finders(cls, fullname, path, target):
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is not cls and find_spec is not None:
                spec = find_spec(fullname, path, target)
                if spec is not None:
                    return spec
        return None


def install() -> None:
    if _EinopsFinder not in sys.meta_path:
        sys.meta_path.insert(0, _EinopsFinder)
    if _BACKENDS in sys.modules:
        _define_backend()
