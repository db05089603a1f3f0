"""``GraphModule.to_folder``: a GraphModule as an importable, editable Python package.

The folder holds ``module.py`` (a ``jitorch.nn.Module`` class whose ``forward`` is the generated code),
``state_dict.pt`` (``jitorch.save`` of the state dict, loaded last, so editing the weights file takes effect),
``attributes.pkl`` (the submodules, the tensor attributes of the root and the objects the code names that have no
import path, pickled) and ``__init__.py``.

>>> import os, sys, tempfile, jitorch
>>> from jitorch.fx import symbolic_trace
>>> gm = symbolic_trace(jitorch.nn.Sequential(jitorch.nn.Linear(2, 2), jitorch.nn.ReLU()))
>>> folder = os.path.join(tempfile.mkdtemp(), "saved_seq")
>>> gm.to_folder(folder, "Seq")
>>> sys.path.insert(0, os.path.dirname(folder))
>>> from saved_seq import Seq
>>> x = jitorch.randn(3, 2)
>>> bool((Seq()(x) == gm(x)).all())
True
"""
from __future__ import annotations

import os
import pickle

from .._tensor import Tensor

__all__ = ["write_folder"]

_MODULE = '''import math
import operator
import os
import pickle

import jitorch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _attributes():
    with open(os.path.join(_HERE, "attributes.pkl"), "rb") as f:
        return pickle.load(f)  # fresh objects for each instance


globals().update(_attributes()["globals"])


class {name}(jitorch.nn.Module):
    def __init__(self):
        super().__init__()
        attributes = _attributes()
        for name, module in attributes["modules"].items():
            self.add_module(name, module)
        for name, tensor in attributes["parameters"].items():
            self.register_parameter(name, tensor)
        for name, tensor in attributes["buffers"].items():
            self.register_buffer(name, tensor)
        self.__dict__.update(attributes["constants"])
        self.load_state_dict(jitorch.load(os.path.join(_HERE, "state_dict.pt")))

{forward}'''


def write_folder(gm, folder, module_name):
    import jitorch

    if not module_name.isidentifier():
        raise ValueError(f"to_folder: module_name must be a Python identifier, got {module_name!r}")
    os.makedirs(folder, exist_ok=True)
    code = gm.graph.python_code("self")
    names = {"jitorch", "operator", "math"}
    attributes = {
        "globals": {k: v for k, v in code.globals.items() if k not in names},
        "modules": dict(gm._modules),
        "parameters": dict(gm._parameters),
        "buffers": dict(gm._buffers),
        "constants": {k: v for k, v in vars(gm).items() if isinstance(v, Tensor) and not k.startswith("__")},
    }
    forward = "".join(f"    {line}\n" for line in code.src.splitlines())
    with open(os.path.join(folder, "attributes.pkl"), "wb") as f:
        pickle.dump(attributes, f)
    jitorch.save(gm.state_dict(), os.path.join(folder, "state_dict.pt"))
    with open(os.path.join(folder, "module.py"), "w") as f:
        f.write(_MODULE.format(name=module_name, forward=forward))
    with open(os.path.join(folder, "__init__.py"), "w") as f:
        f.write(f"from .module import {module_name}  # noqa: F401\n")
