"""``torch.jit`` as a compatibility shim: jitorch has no TorchScript, so ``script`` and ``trace`` return what they
are given (after torch's DeprecationWarning) and the decorators (``ignore``, ``unused``, ``export``...) return the
function itself. Code that scripts a model for speed runs eagerly; use ``jitorch.compile`` to compile it.

>>> import warnings; warnings.simplefilter("ignore", DeprecationWarning)
>>> import jitorch
>>> f = jitorch.jit.script(lambda x: x * 2)
>>> f(jitorch.tensor([1.0])), jitorch.jit.is_scripting()
(tensor([2.]), False)
"""
from __future__ import annotations

import contextlib
import warnings

from ..nn.modules.module import Module

__all__ = ["script", "trace", "trace_module", "ignore", "unused", "export", "interface", "script_method",
           "script_if_tracing", "is_scripting", "is_tracing", "annotate", "isinstance", "fork", "wait", "freeze",
           "optimize_for_inference", "optimized_execution", "enable_onednn_fusion", "onednn_fusion_enabled",
           "set_fusion_strategy", "strict_fusion", "Final", "Attribute", "ScriptModule", "ScriptFunction",
           "RecursiveScriptModule", "TracedModule", "TopLevelTracedModule", "Error", "Future", "save", "load"]

_DEPRECATED = "`torch.jit.{}` is deprecated. Please switch to `torch.compile` or `torch.export`."


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """Returns ``obj`` unchanged (no TorchScript in jitorch)."""
    warnings.warn(_DEPRECATED.format("script"), DeprecationWarning, stacklevel=2)
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
          example_kwarg_inputs=None, _store_inputs=True):
    """Returns ``func`` unchanged (no TorchScript in jitorch)."""
    warnings.warn(_DEPRECATED.format("trace"), DeprecationWarning, stacklevel=2)
    return func


def trace_module(mod, inputs, *args, **kwargs):
    warnings.warn(_DEPRECATED.format("trace_module"), DeprecationWarning, stacklevel=2)
    return mod


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
    import builtins

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


def save(m, f, _extra_files=None):
    raise RuntimeError("jitorch.jit.save: jitorch has no TorchScript; save the state_dict with jitorch.save")


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    raise RuntimeError("jitorch.jit.load: jitorch cannot run TorchScript archives; load a state_dict instead")
