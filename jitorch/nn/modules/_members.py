"""Iteration over a module's members, bound onto ``Module`` in module.py: ``parameters``, ``buffers``,
``children`` and ``modules`` with their ``named_*`` forms (each shared member once, in registration order).

>>> from jitorch import nn
>>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
>>> [name for name, _ in net.named_parameters()], [name for name, _ in net.named_modules()]
(['0.weight', '0.bias'], ['', '0', '1'])
"""
from __future__ import annotations


def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate=True):
    memo = set()
    modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
    for module_prefix, module in modules:
        for k, v in get_members_fn(module):
            if v is None or v in memo:
                continue
            if remove_duplicate:
                memo.add(v)
            yield module_prefix + ("." if module_prefix else "") + k, v


def parameters(self, recurse=True):
    """Iterator over the parameters (each shared parameter once), in registration order."""
    for _, param in self.named_parameters(recurse=recurse):
        yield param


def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
    """Iterator over ``(dotted name, parameter)``; a tied parameter appears under its first name only."""
    yield from self._named_members(lambda m: m._parameters.items(), prefix=prefix, recurse=recurse,
                                   remove_duplicate=remove_duplicate)


def buffers(self, recurse=True):
    """Iterator over the buffers."""
    for _, buf in self.named_buffers(recurse=recurse):
        yield buf


def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
    """Iterator over ``(dotted name, buffer)``."""
    yield from self._named_members(lambda m: m._buffers.items(), prefix=prefix, recurse=recurse,
                                   remove_duplicate=remove_duplicate)


def children(self):
    """Iterator over the immediate child modules."""
    for _, module in self.named_children():
        yield module


def named_children(self):
    """Iterator over ``(name, child module)``, each child once."""
    memo = set()
    for name, module in self._modules.items():
        if module is not None and module not in memo:
            memo.add(module)
            yield name, module


def modules(self, remove_duplicate=True):
    """Iterator over every module of the tree, ``self`` first (pre-order)."""
    for _, module in self.named_modules(remove_duplicate=remove_duplicate):
        yield module


def named_modules(self, memo=None, prefix="", remove_duplicate=True):
    """Iterator over ``(dotted name, module)`` for the whole tree, ``("", self)`` first."""
    if memo is None:
        memo = set()
    if self in memo:
        return
    if remove_duplicate:
        memo.add(self)
    yield prefix, self
    for name, module in self._modules.items():
        if module is not None:
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)
