"""``jitorch.device`` and the default device.

>>> import jitorch
>>> jitorch.device("cuda:1")
device(type='cuda', index=1)
"""
from __future__ import annotations

import re

from .runtime import array_module_for

__all__ = ["device", "set_default_device", "get_default_device"]

_DEVICE_STRING = re.compile(r"([a-zA-Z_]+)(?::([1-9]\d*|0))?$")


class device:
    """A device: ``device("cpu")``, ``device("cuda")``, ``device("cuda", 0)``, ``device("cuda:0")``."""

    __slots__ = ("type", "index")
    _cache: dict = {}

    def __new__(cls, type_or_str, index=None):
        if isinstance(type_or_str, device):
            return type_or_str
        key = (type_or_str, index)
        hit = cls._cache.get(key)
        if hit is not None:
            return hit
        if isinstance(type_or_str, int):
            kind, idx = "cuda", type_or_str
        else:
            text = str(type_or_str)
            match = _DEVICE_STRING.match(text)
            if match is None:  # c10::Device's grammar: letters, then optionally ':' and an index without sign or 0s
                raise RuntimeError("Device string must not be empty" if not text else
                                   f"Invalid device string: '{text}'")
            kind, idx_text = match.groups()
            idx = int(idx_text) if idx_text else index
        if kind not in ("cpu", "cuda", "meta"):
            raise RuntimeError(f"Expected one of cpu, cuda, meta device type at start of device string: {kind}")
        self = object.__new__(cls)
        object.__setattr__(self, "type", kind)
        object.__setattr__(self, "index", idx)
        cls._cache[key] = self
        return self

    def __setattr__(self, name, value):
        raise AttributeError("device is immutable")

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __reduce__(self):
        return (device, (self.type, self.index))

    def __enter__(self):
        """``with jitorch.device("cuda"):`` makes this the default device of tensors and modules created inside."""
        _previous.append(_default_device)
        set_default_device(self)
        return self

    def __exit__(self, *exc):
        set_default_device(_previous.pop())
        return False

    @property
    def array_module(self):
        return array_module_for(self.type)


CPU = device("cpu")
_default_device = CPU
_previous: list = []  # the defaults that enclosing ``with device(...)`` blocks replaced (devices are shared objects)


def set_default_device(d) -> None:
    """Device that creation functions use when none is given (``None`` restores the CPU)."""
    global _default_device
    _default_device = CPU if d is None else device(d)


def get_default_device() -> device:
    return _default_device


def to_device(d) -> device:
    if d is None:
        return _default_device
    return device(d)
