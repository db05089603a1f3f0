"""A stand-in for CuPy's random API on the CPU, so the device sampling path runs (and is checked) without a GPU.

``fake_cupy()`` returns an array module like ``tests.cupy_surface.cupy_surface_numpy()`` (NumPy restricted to CuPy's
names and keywords) whose ``random`` holds ``Generator``, ``Philox4x3210`` and ``XORWOW`` mimicking CuPy's:

- a ``Generator`` exposes exactly the public methods of ``cupy.random.Generator`` (``normal``, ``permutation`` and
  ``choice`` are missing there, so they are missing here) and binds every call against CuPy's own signature;
- a bit generator keeps its whole state in an ``int8`` array ``_state`` (CuPy keeps the cuRAND states in a device
  array of that name), read before and written after every draw, so state snapshots behave as on the device;
- every array the module returns is a ``DeviceArray`` (a NumPy subclass standing for "lives on the device"): an
  array reaching a tensor as a plain ``ndarray`` was made outside the module, on the host.

>>> xp = fake_cupy()
>>> g = xp.random.Generator(xp.random.Philox4x3210(0))
>>> type(g.random((2,), dtype=np.float32)).__name__
'DeviceArray'
>>> g.normal
Traceback (most recent call last):
AttributeError: cupy.random.Generator has no 'normal'
"""
from __future__ import annotations

import functools
import inspect
import types

import numpy as np
from cupy_surface import cupy_surface_numpy

__all__ = ["DeviceArray", "fake_cupy"]


class DeviceArray(np.ndarray):
    """An array the fake device module produced; ``get()`` is CuPy's explicit device-to-host copy (counted)."""

    host_copies = 0

    def get(self):
        DeviceArray.host_copies += 1
        return np.array(self.view(np.ndarray))


def _device(value):
    return value.view(DeviceArray) if isinstance(value, np.ndarray) else value


class FakePhilox:
    """``cupy.random.Philox4x3210``'s surface over NumPy's Philox; the state lives in ``self._state`` (int8)."""

    _FIELDS = 13  # counter (4), key (2), buffer (4), buffer_pos, has_uint32, uinteger: uint64 words

    def __init__(self, seed=None, *, size=-1):
        seed32 = int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0])  # as CuPy derives its seed
        self._state = np.zeros(self._FIELDS * 8, dtype=np.int8).view(DeviceArray)
        self._store(np.random.Philox(seed32))

    def _store(self, bitgen):
        s = bitgen.state
        words = np.concatenate([s["state"]["counter"], s["state"]["key"], s["buffer"],
                                np.array([s["buffer_pos"], s["has_uint32"], s["uinteger"]], dtype=np.uint64)])
        self._state[...] = words.astype(np.uint64).view(np.int8)

    def _load(self):
        words = np.asarray(self._state).view(np.uint64)
        bitgen = np.random.Philox()
        bitgen.state = {"bit_generator": "Philox", "state": {"counter": words[0:4].copy(), "key": words[4:6].copy()},
                        "buffer": words[6:10].copy(), "buffer_pos": int(words[10]), "has_uint32": int(words[11]),
                        "uinteger": int(words[12])}
        return bitgen


_NUMPY_SPELLING = {
    "random": lambda g, size=None, dtype=np.float64, out=None: g.random(size, dtype=dtype),
    "standard_normal": lambda g, size=None, dtype=np.float64, out=None: g.standard_normal(size, dtype=dtype),
    "integers": lambda g, low, high=None, size=None, dtype=np.int64, endpoint=False: g.integers(
        low, high, size, dtype=dtype, endpoint=endpoint),
    "uniform": lambda g, low=0.0, high=1.0, size=None, dtype=np.float64: g.uniform(low, high, size).astype(dtype),
}


class FakeGenerator:
    """``cupy.random.Generator``: CuPy's method names and signatures, NumPy's sampling underneath."""

    def __init__(self, bit_generator):
        self.bit_generator = bit_generator
        self.calls = []

    def __getattr__(self, name):
        import cupy

        cupy_method = getattr(cupy.random.Generator, name, None)
        if name.startswith("_") or cupy_method is None:
            raise AttributeError(f"cupy.random.Generator has no {name!r}")
        signature = inspect.signature(cupy_method)

        @functools.wraps(cupy_method)
        def draw(*args, **kwargs):
            signature.bind(self, *args, **kwargs)  # CuPy's TypeError for a call CuPy would refuse
            self.calls.append(name)
            bitgen = self.bit_generator._load()
            gen = np.random.Generator(bitgen)
            numpy_draw = _NUMPY_SPELLING.get(name)
            values = numpy_draw(gen, *args, **kwargs) if numpy_draw else getattr(gen, name)(*args, **kwargs)
            self.bit_generator._store(bitgen)
            return _device(np.asarray(values))
        return draw


class _FakeRandom(types.SimpleNamespace):
    pass


class _FakeCupy(types.ModuleType):
    """The array module: CuPy's surface of NumPy, every array result marked as a device array."""

    def __init__(self):
        super().__init__("fake_cupy")
        self.__dict__["_surface"] = cupy_surface_numpy()
        self.__dict__["random"] = _FakeRandom(Generator=FakeGenerator, Philox4x3210=FakePhilox, XORWOW=FakePhilox)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = getattr(self._surface, name)
        if callable(value) and not isinstance(value, type):
            original = value

            def call(*args, **kwargs):
                return _device(original(*args, **kwargs))
            value = functools.wraps(original)(call) if hasattr(original, "__name__") else call
        self.__dict__[name] = value
        return value


def fake_cupy():
    """A fresh fake CuPy module (see the module docstring)."""
    return _FakeCupy()
