"""A compiling ``torch`` shim: tests/torch_shim's aliasing (``import torch`` gives jitorch), plus every OUTERMOST
``nn.Module`` call routed through ``jitorch.compile(module)``.

An outermost call is one made while no other module call is in progress on this thread: a training step's
``model(x)``, a loss module, an eval or sampling loop's calls. Each module instance gets one compiled wrapper,
made on its first outermost call and cached; the submodules it calls stay inside its traced graph (they run the
plain ``Module.__call__``, which the tracer records). So realistic scripts run compiled forward + backward, graph
breaks, guards, recompiles and eager fallbacks included, without a line changed.

``JITORCH_SHIM_STATS=1`` prints, at exit, to stderr: how many modules were compiled and their compiled entries.
"""
import atexit
import os
import sys
import threading
from pathlib import Path

# The plain shim's aliasing, run in this module's namespace so that it replaces ``torch`` exactly as there.
_PLAIN = Path(__file__).resolve().parents[2] / "torch_shim" / "torch" / "__init__.py"
exec(compile(_PLAIN.read_text(), str(_PLAIN), "exec"))  # noqa: S102 - the sibling shim, one source for both

from jitorch._compile.entry import compile as _compile  # noqa: E402 - after the aliasing, as a script sees it
from jitorch._compile.optimized_module import OptimizedModule as _OptimizedModule  # noqa: E402
from jitorch.nn.modules.module import Module as _Module  # noqa: E402

_plain_call = _Module.__call__
_COMPILER = "jitorch._compile."
_state = threading.local()  # .depth: module calls in progress on this thread
# id(module) -> its OptimizedModule. Keyed by id, not by the module (a Module subclass may define ``__eq__``); the
# wrapper holds its module, so the id stays that module's for the process (a script's modules live that long).
_wrappers: dict = {}


def _wrapper_of(module):
    wrapper = _wrappers.get(id(module))
    if wrapper is None:
        wrapper = _wrappers[id(module)] = _compile(module)
    return wrapper


def _compiling_call(self, *args, **kwargs):
    """``Module.__call__`` under this shim: outermost calls through the module's cached compiled wrapper."""
    depth = getattr(_state, "depth", 0)
    if depth or isinstance(self, _OptimizedModule) or self._compiled_call_impl is not None or \
            sys._getframe(1).f_globals.get("__name__", "").startswith(_COMPILER):
        # Nested calls are traced by the outer compiled call; a module the script compiled itself keeps its own;
        # the compiler calling the module it compiles (a trace, a double backward's eager rerun) means it plainly,
        # and so are the submodule calls inside those.
        target = self
    else:
        target = _wrapper_of(self)
    _state.depth = depth + 1
    try:
        return _plain_call(target, *args, **kwargs)
    finally:
        _state.depth = depth


_Module.__call__ = _compiling_call


def _report():
    lines = [f"jitorch-shim: {len(_wrappers)} modules compiled"]
    for wrapper in _wrappers.values():
        cf = wrapper._compiled_call
        lines.append(f"jitorch-shim:   {type(wrapper._orig_mod).__name__}: {len(cf.entries)} inference, "
                     f"{len(cf.train_entries)} training entries, fell_back={cf._fell_back}")
    print("\n".join(lines), file=sys.stderr)


if os.environ.get("JITORCH_SHIM_STATS"):
    atexit.register(_report)
