"""A ``torch`` shim: with this folder's parent first on ``sys.path``, ``import torch`` gives jitorch.

``import torch.nn.functional as F`` and ``from torch.utils.data import DataLoader`` resolve to the matching
``jitorch.*`` modules: a meta-path finder aliases every ``torch.X.Y`` name onto ``jitorch.X.Y`` in ``sys.modules``.
"""
import importlib
import importlib.abc
import importlib.util
import sys

import jitorch as _jitorch


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module):
        # Already executed; undo the import system's overwrite of ``__spec__`` with the alias spec.
        module.__spec__ = self.real_spec


class _TorchAliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("torch."):
            return None
        real = "jitorch" + fullname[len("torch"):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


if not any(isinstance(f, _TorchAliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _TorchAliasFinder())

# Replace this shim module with jitorch itself; already-imported jitorch submodules get their torch.* aliases.
sys.modules[__name__] = _jitorch
for _name, _mod in list(sys.modules.items()):
    if _name.startswith("jitorch.") and _mod is not None:
        sys.modules.setdefault("torch" + _name[len("jitorch"):], _mod)
