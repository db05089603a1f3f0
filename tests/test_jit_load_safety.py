"""``jit.load`` unpickles only what ``jit.save`` wrote: any other file is refused before its pickle runs anything."""
from __future__ import annotations

import io
import warnings

import pytest

import jitorch

RAN = []


class Planted:
    """A pickle payload: unpickling it calls ``RAN.append``."""

    def __reduce__(self):
        return RAN.append, ("ran",)


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return fn(*args)


def test_a_file_save_did_not_write_is_refused_unrun():
    buffer = io.BytesIO()
    jitorch.save({"payload": Planted()}, buffer)
    buffer.seek(0)
    with pytest.raises(RuntimeError, match="cannot run TorchScript archives"):
        _quiet(jitorch.jit.load, buffer)
    assert RAN == [] and buffer.tell() == 0


def test_what_save_wrote_loads(tmp_path):
    module = jitorch.jit.script(jitorch.nn.Linear(3, 2))
    path = tmp_path / "m.pt"
    _quiet(jitorch.jit.save, module, str(path))
    loaded = _quiet(jitorch.jit.load, str(path))
    x = jitorch.randn(4, 3)
    assert jitorch.equal(loaded(x), module(x))


def test_not_a_zip_is_refused():
    with pytest.raises(RuntimeError, match="cannot run TorchScript archives"):
        _quiet(jitorch.jit.load, io.BytesIO(b"not an archive"))
