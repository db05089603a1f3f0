"""The unpicklers behind ``jitorch.load``: a restricted one for ``weights_only=True`` and a full one.

Both map the globals ``torch.save`` writes (``torch._utils._rebuild_tensor_v2``, ``torch.FloatStorage``...) onto
jitorch objects; neither ever imports torch. The restricted unpickler resolves a global only if it is on the
allowlist (tensor rebuild functions, dtypes, devices, ``Size``, ``OrderedDict`` and the few builtins PyTorch allows)
or was registered with :func:`add_safe_globals`. Every way a pickle can reach a callable (GLOBAL, STACK_GLOBAL, INST,
OBJ, the extension registry) goes through ``find_class``, so an untrusted file cannot name ``os.system``.

>>> import pickle
>>> u = make_unpickler(__import__("io").BytesIO(pickle.dumps(print)), weights_only=True)
>>> try:
...     u.load()
... except pickle.UnpicklingError as e:
...     print(str(e).split(" was")[0])
Unsupported global: GLOBAL print
"""
from __future__ import annotations

import _compat_pickle
import collections
import importlib
import pickle
import re
from codecs import encode

from ._serialization_rebuild import TORCH_ONLY_DTYPES, StorageType, torch_name

__all__ = ["add_safe_globals", "get_safe_globals", "clear_safe_globals", "safe_globals", "make_unpickler",
           "weights_only_message", "is_allowed_global", "refuse_frames"]

_BLOCKED_MODULES = ("sys", "os", "posix", "nt")
_PYTHON_ALLOWED = {
    "collections.OrderedDict": collections.OrderedDict,
    "collections.Counter": collections.Counter,
    "_codecs.encode": encode,  # how protocol 2 pickles bytes
    "builtins.bytearray": bytearray,
    "builtins.set": set,
    "builtins.complex": complex,
}
_marked_safe_globals: set = set()


def add_safe_globals(safe_globals) -> None:
    """Allow these globals (classes or functions, or ``(obj, "module.name")`` pairs) in ``weights_only`` loads.

    >>> class Config: ...
    >>> add_safe_globals([Config]); Config in get_safe_globals()
    True
    >>> clear_safe_globals()
    """
    global _marked_safe_globals
    _marked_safe_globals = _marked_safe_globals | set(safe_globals)


def get_safe_globals() -> list:
    """The globals registered with :func:`add_safe_globals`."""
    return list(_marked_safe_globals)


def clear_safe_globals() -> None:
    """Forget every global registered with :func:`add_safe_globals`."""
    global _marked_safe_globals
    _marked_safe_globals = set()


class safe_globals:
    """Context manager that allows ``safe_globals`` in ``weights_only`` loads inside its block only.

    >>> class Config: ...
    >>> with safe_globals([Config]):
    ...     Config in get_safe_globals()
    True
    >>> Config in get_safe_globals()
    False
    """

    def __init__(self, safe_globals):
        self.safe_globals = safe_globals

    def __enter__(self):
        add_safe_globals(self.safe_globals)

    def __exit__(self, exc_type, exc, tb):
        global _marked_safe_globals
        _marked_safe_globals = _marked_safe_globals - set(self.safe_globals)


def _user_allowed() -> dict:
    allowed = {}
    for entry in _marked_safe_globals:
        if isinstance(entry, tuple):
            if len(entry) != 2:
                raise ValueError(f"Expected tuple of length 2 (global, str of callable full path), but got tuple of "
                                 f"length: {len(entry)}")
            if type(entry[1]) is not str:
                raise TypeError(f"Expected second item in tuple to be str of callable full path, but got: "
                                f"{type(entry[1])}")
            allowed[entry[1]] = entry[0]
        else:
            allowed[f"{entry.__module__}.{entry.__qualname__}"] = entry
    return allowed


def _python3_name(module: str, name: str) -> tuple[str, str]:
    # Protocol 2 pickles carry Python 2 names for builtins (``__builtin__ set``); read them as Python 3 does.
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def _is_torch(module: str) -> bool:
    return module == "torch" or module.startswith("torch.")


def _torch_global(module: str, name: str):
    path = f"{module}.{name}"
    hit = torch_name(path)
    if hit is None and module == "torch" and (name in TORCH_ONLY_DTYPES or name.endswith("Storage")):
        raise RuntimeError(f"jitorch.load: the checkpoint uses {path}, a dtype jitorch does not support")
    return hit


def is_allowed_global(path: str) -> bool:
    """Whether a weights-only load accepts the global ``path`` (``'collections.OrderedDict'``)."""
    module, _, name = path.rpartition(".")
    if module.split(".")[0] in _BLOCKED_MODULES:
        return False
    return (path in _PYTHON_ALLOWED or path in _user_allowed()
            or (_is_torch(module) and torch_name(path) is not None))


def _restricted_find_class(module: str, name: str):
    module, name = _python3_name(module, name)
    path = f"{module}.{name}"
    if module.split(".")[0] in _BLOCKED_MODULES:
        raise pickle.UnpicklingError(f"Trying to load unsupported GLOBAL {path} whose module {module} is blocked.")
    if path in _PYTHON_ALLOWED:
        return _PYTHON_ALLOWED[path]
    if _is_torch(module):
        hit = _torch_global(module, name)
        if hit is not None:
            return hit
    user = _user_allowed()
    if path in user:
        return user[path]
    shown = path[len("builtins."):] if path.startswith("builtins.") else path
    raise pickle.UnpicklingError(
        f"Unsupported global: GLOBAL {shown} was not an allowed global by default. Please use "
        f"`torch.serialization.add_safe_globals([{shown}])` or the `torch.serialization.safe_globals([{shown}])` "
        "context manager to allowlist this global if you trust this class/function.")


def _jitorch_counterpart(module: str, name: str):
    """``torch.nn.modules.linear.Linear`` -> ``jitorch.nn.modules.linear.Linear`` (or the nearest package's)."""
    parts = ("jitorch" + module[len("torch"):]).split(".")
    while parts:
        try:
            obj = importlib.import_module(".".join(parts))
        except ImportError:
            obj = None
        for attr in name.split("."):
            obj = getattr(obj, attr, None)
        if obj is not None:
            return obj
        parts.pop()
    raise pickle.UnpicklingError(f"jitorch.load: the checkpoint references {module}.{name}, which has no jitorch "
                                 "counterpart")


def make_unpickler(stream, *, weights_only: bool, persistent_load=None, pickle_module=None, **kwargs):
    """An unpickler reading ``stream``; ``persistent_load(pid)`` resolves storages (None: refuse them)."""
    base = pickle.Unpickler if weights_only or pickle_module is None else pickle_module.Unpickler

    class JitorchUnpickler(base):
        def find_class(self, module, name):
            if weights_only:
                return _restricted_find_class(module, name)
            module, name = _python3_name(module, name)
            if _is_torch(module):
                return _torch_global(module, name) or _jitorch_counterpart(module, name)
            return super().find_class(module, name)

        def persistent_load(self, pid):
            if persistent_load is None:
                raise pickle.UnpicklingError("unsupported persistent id encountered")
            return persistent_load(pid)

    return JitorchUnpickler(stream, **kwargs)


def refuse_frames(stream) -> None:
    """torch's weights-only unpickler has no FRAME opcode (149): a pickle of protocol 4 or above (``pickle.dump``'s
    default, framed from its first opcode on) fails there with an ``UnpicklingError``. The legacy loader calls this
    on its first pickle, so a plain pickle (or a protocol-4 legacy file) fails as in torch; zip checkpoints of
    protocol 4 stay readable. Unseekable streams go unchecked."""
    try:
        start = stream.tell()
        head = stream.read(3)
        stream.seek(start)
    except (AttributeError, OSError):
        return
    if len(head) == 3 and head[0] == pickle.PROTO[0] and head[1] >= 4 and head[2] == pickle.FRAME[0]:
        raise pickle.UnpicklingError(f"Unsupported operand {pickle.FRAME[0]}")


def check_storage_pid(pid, weights_only: bool):
    """Validate a persistent id; returns ``(typename, rest)`` with the type name decoded."""
    if type(pid) is not tuple or not pid:
        raise pickle.UnpicklingError(f"persistent_load id must be tuple or int, but got {type(pid)}")
    typename = pid[0].decode("ascii") if isinstance(pid[0], bytes) else pid[0]
    if typename != "storage" and (weights_only or typename != "module"):
        raise pickle.UnpicklingError(f"Only persistent_load of storage is allowed, but got {type(pid[0])}")
    if typename == "storage" and not isinstance(pid[1], StorageType):
        raise pickle.UnpicklingError(f"expected a storage type in a storage persistent id, got {pid[1]!r}")
    return typename, pid[1:]


_UNSAFE_MESSAGE = (
    "jitorch.load defaults to `weights_only=True`, as PyTorch does since 2.6. Re-running `torch.load` with "
    "`weights_only` set to `False` will likely succeed, but it can result in arbitrary code execution. Do it only if "
    "you got the file from a trusted source.")
_DOCS_MESSAGE = ("\n\nCheck the documentation of torch.load to learn more about types accepted by default with "
                 "weights_only https://pytorch.org/docs/stable/generated/torch.load.html.")


def weights_only_message(message: str) -> str:
    """PyTorch's wrapping of a restricted unpickler's error: what failed and the two ways forward."""
    if re.search(r"GLOBAL (\S+) was not an allowed global by default.", message):
        return ("Weights only load failed. This file can still be loaded, to do so you have two options, do those "
                f"steps only if you trust the source of the checkpoint. \n\t(1) {_UNSAFE_MESSAGE}\n\t(2) "
                "Alternatively, to load with `weights_only=True` please check the recommended steps in the following "
                "error message.\n\tWeightsUnpickler error: " + message + _DOCS_MESSAGE)
    updated = f"Weights only load failed. {_UNSAFE_MESSAGE}\n"
    if not re.search(r"whose module (\S+) is blocked", message):
        updated += ("Please file an issue with the following so that we can make `weights_only=True` compatible "
                    "with your use case: WeightsUnpickler error: ")
    return updated + "\n\n" + message + _DOCS_MESSAGE
