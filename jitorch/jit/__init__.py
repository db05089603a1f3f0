"""``torch.jit`` as a compatibility shim: jitorch has no TorchScript, so ``script`` and ``trace`` return what they
are given (after torch's DeprecationWarning) and the decorators (``ignore``, ``unused``, ``export``...) return the
function itself. Code that scripts a model for speed runs eagerly; use ``jitorch.compile`` to compile it. A scripted or
traced module's ``.save(path)`` and ``jit.save`` pickle the module whole, which ``jit.load`` reads back.

>>> import warnings; warnings.simplefilter("ignore", DeprecationWarning)
>>> import jitorch
>>> f = jitorch.jit.script(lambda x: x * 2)
>>> f(jitorch.tensor([1.0])), jitorch.jit.is_scripting()
(tensor([2.]), False)
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import pickle
import warnings

from ..nn.modules.module import Module

__all__ = ["script", "trace", "trace_module", "ignore", "unused", "export", "interface", "script_method",
           "script_if_tracing", "is_scripting", "is_tracing", "annotate", "isinstance", "fork", "wait", "freeze",
           "optimize_for_inference", "optimized_execution", "enable_onednn_fusion", "onednn_fusion_enabled",
           "set_fusion_strategy", "strict_fusion", "Final", "Attribute", "ScriptModule", "ScriptFunction",
           "RecursiveScriptModule", "TracedModule", "TopLevelTracedModule", "Error", "Future", "save", "load"]

_DEPRECATED = "`torch.jit.{}` is deprecated. Please switch to `torch.compile` or `torch.export`."


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """Returns ``obj`` (no TorchScript in jitorch); a module gains the ``save`` method of a ScriptModule."""
    warnings.warn(_DEPRECATED.format("script"), DeprecationWarning, stacklevel=2)
    return _with_save(obj)


def _with_save(obj):
    # ``scripted.save(path)``, then ``jit.load(path)``: the module pickled whole (see `save`).
    if builtins.isinstance(obj, Module) and "save" not in obj.__dict__:
        object.__setattr__(obj, "save", functools.partial(save, obj))
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
          example_kwarg_inputs=None, _store_inputs=True):
    """Returns ``func`` (no TorchScript in jitorch); a module gains the ``save`` method of a ScriptModule."""
    warnings.warn(_DEPRECATED.format("trace"), DeprecationWarning, stacklevel=2)
    return _with_save(func)


def trace_module(mod, inputs, *args, **kwargs):
    warnings.warn(_DEPRECATED.format("trace_module"), DeprecationWarning, stacklevel=2)
    return _with_save(mod)


def _decorator_or_value(fn=None, **kwargs):
    # ``@ignore`` and ``@ignore(drop=True)`` both leave the function as it is.
    return fn if callable(fn) else (lambda f: f)


ignore = unused = export = interface = script_method = script_if_tracing = _decorator_or_value


def is_scripting():
    return False


def is_tracing():
    return False


def annotate(the_type, the_value):
    return the_value


def isinstance(obj, target_type):  # noqa: A001 - torch.jit.isinstance
    return builtins.isinstance(obj, target_type)


class Future:
    """The result of ``fork``: the call already ran (eagerly), ``wait`` returns it."""

    def __init__(self, value):
        self._value = value

    def wait(self):
        return self._value

    def done(self):
        return True


def fork(func, *args, **kwargs):
    return Future(func(*args, **kwargs))


def wait(future):
    return future.wait()


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    return mod


def optimize_for_inference(mod, other_methods=None):
    return mod


@contextlib.contextmanager
def optimized_execution(should_optimize):
    yield


_onednn = [False]


def enable_onednn_fusion(enabled):
    _onednn[0] = bool(enabled)


def onednn_fusion_enabled():
    return _onednn[0]


def set_fusion_strategy(strategy):
    return [("STATIC", 2), ("DYNAMIC", 10)]


@contextlib.contextmanager
def strict_fusion():
    yield


class _Final:
    def __getitem__(self, item):
        return item


Final = _Final()  # ``x: torch.jit.Final[int]`` annotations


def Attribute(value, type=None):  # noqa: N802 - torch's name
    return value


ScriptModule = RecursiveScriptModule = TracedModule = TopLevelTracedModule = Module


class ScriptFunction:
    """Only for ``isinstance`` checks: nothing jitorch returns is one."""


class Error(RuntimeError):
    pass


_ARCHIVE = "jitorch.jit archive"  # the key marking what `save` writes


def save(m, f, _extra_files=None):
    """``m`` (a module ``script``/``trace`` returned) and ``_extra_files`` written with ``jitorch.save``: the module is
    pickled whole, so `load` needs its class importable (TorchScript's archive carries the code; jitorch has none)."""
    warnings.warn("`torch.jit.save` is deprecated. Please switch to `torch.export`.", DeprecationWarning, stacklevel=2)
    if not builtins.isinstance(m, Module):
        raise RuntimeError("jitorch.jit.save: jitorch has no TorchScript functions; save a module, or the "
                           "state_dict with jitorch.save")
    from ..serialization import save as save_object

    extra = {k: v.encode() if builtins.isinstance(v, str) else bytes(v) for k, v in (_extra_files or {}).items()}
    try:
        save_object({_ARCHIVE: 1, "module": m, "extra_files": extra}, f)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise RuntimeError(f"jitorch.jit.save: {type(m).__name__} is saved by pickling it (jitorch has no "
                           f"TorchScript), which needs its class importable at module level: {e}") from e


def _written_by_save(f):
    """Whether ``f`` (a path or a seekable file) is a zip archive whose pickle holds `save`'s marker, read with
    ``pickletools`` (which runs nothing); the file position is left as it was."""
    import pickletools
    import zipfile

    at = f.tell() if hasattr(f, "tell") else None
    try:
        with zipfile.ZipFile(f) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            return name is not None and any(arg == _ARCHIVE for _, arg, _ in pickletools.genops(archive.read(name)))
    except (zipfile.BadZipFile, ValueError, EOFError):
        return False
    finally:
        if at is not None:
            f.seek(at)


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    """A module `save` wrote (TorchScript archives of torch cannot run: no TorchScript); ``_extra_files``' keys are
    filled with the saved contents (bytes, empty for names not saved), as torch's."""
    import os

    from ..serialization import load as load_object

    warnings.warn("`torch.jit.load` is deprecated. Please switch to `torch.export`.", DeprecationWarning, stacklevel=2)
    if builtins.isinstance(f, (str, os.PathLike)) and not os.path.exists(f):
        raise ValueError(f"The provided filename {f} does not exist")
    # Only a file `save` wrote is unpickled in full (which runs the code its classes name, as torch.load with
    # weights_only=False): a downloaded TorchScript archive or any other file is refused before anything runs.
    if not _written_by_save(f):
        raise RuntimeError("jitorch.jit.load: jitorch cannot run TorchScript archives; load a state_dict instead")
    archive = load_object(f, map_location=map_location, weights_only=False)
    if _extra_files is not None:
        for name in _extra_files:
            _extra_files[name] = archive["extra_files"].get(name, b"")
    return archive["module"]
