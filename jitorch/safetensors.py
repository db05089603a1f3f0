"""safetensors files for jitorch tensors, as ``safetensors.torch`` offers them for PyTorch's.

``save_file``/``save`` write through the ``safetensors`` package (its NumPy-level ``serialize`` API);
``load_file`` reads the file's JSON header and reads each tensor's bytes straight into a writable array, and
``load`` decodes bytes with the package's ``deserialize``. bfloat16 works both ways (as ``BF16``); files are
interchangeable with ``safetensors.torch``. ``save_model``/``load_model`` save and load a module's state dict with
safetensors.torch's handling of tied weights: of the names sharing memory, one (covering all of it) is written and
the others are noted in the metadata and skipped on load.

>>> import jitorch
>>> from jitorch.safetensors import load, save
>>> out = load(save({"w": jitorch.ones(2, dtype=jitorch.bfloat16)}))
>>> out["w"].dtype, out["w"].tolist()
(jitorch.bfloat16, [1.0, 1.0])
"""
from __future__ import annotations

import os

import numpy as np

from ._safetensors_read import _dtype_of, _finish, _invalid, _lib, _read_header, _read_tensor, safe_open
from ._serialization_pickler import _memory_root
from ._tensor import Tensor

__all__ = ["save_file", "load_file", "save", "load", "save_model", "load_model", "safe_open"]


def _address(arr) -> int:
    return arr.__array_interface__["data"][0] if isinstance(arr, np.ndarray) else int(arr.data.ptr)


def _check_shared(tensors: dict) -> None:
    # As safetensors.torch: tensors whose bytes overlap would be written twice and come back unshared.
    spans = {}
    for name, t in tensors.items():
        arr = t._data
        if arr.size:
            root = _memory_root(arr)
            spans.setdefault(id(root), []).append((_address(arr), _address(arr) + arr.nbytes, name))
    failing = []
    for group in spans.values():
        group.sort()
        current, stop = {group[0][2]}, group[0][1]
        for start, end, name in group[1:]:
            if start < stop:
                current.add(name)
            else:
                if len(current) > 1:
                    failing.append(current)
                current = {name}
            stop = max(stop, end)
        if len(current) > 1:
            failing.append(current)
    if failing:
        raise RuntimeError(
            f"\n            Some tensors share memory, this will lead to duplicate memory on disk and potential "
            f"differences when loading them again: {failing}.\n            A potential way to correctly save your "
            "model is to use `save_model`.\n            More information at "
            "https://huggingface.co/docs/safetensors/torch_shared_tensors\n            ")


def _specs(tensors: dict, keep_alive: list) -> dict:
    lib = _lib()
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, Tensor] but received {type(tensors)}")
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor but received {type(t)}")
    _check_shared(tensors)
    specs = {}
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It either means you "
                "are trying to save tensors which are reference of each other in which case it's recommended to save "
                "only the full tensors, and reslice at load time, or simply call `.contiguous()` on your tensor to "
                "pack it before saving.")
        arr = t._host()
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")
        if hasattr(lib, "TensorSpec"):
            keep_alive.append(arr)  # the specs hold raw pointers into these arrays
            specs[name] = lib.TensorSpec(dtype=t.dtype.name, shape=tuple(arr.shape), data_ptr=arr.ctypes.data,
                                         data_len=arr.nbytes)
        else:  # safetensors before 0.8 takes the bytes themselves
            specs[name] = {"dtype": t.dtype.name, "shape": tuple(arr.shape), "data": arr.tobytes()}
    return specs


def save_file(tensors: dict, filename, metadata: dict | None = None) -> None:
    """Write ``{name: tensor}`` to ``filename`` in the safetensors format; ``metadata`` is a ``{str: str}`` dict."""
    keep_alive = []
    _lib().serialize_file(_specs(tensors, keep_alive), os.fspath(filename), metadata=metadata)


def save(tensors: dict, metadata: dict | None = None) -> bytes:
    """The safetensors encoding of ``{name: tensor}`` as bytes."""
    keep_alive = []
    return bytes(_lib().serialize(_specs(tensors, keep_alive), metadata=metadata))


def load(data: bytes) -> dict:
    """Decode safetensors bytes into ``{name: tensor}`` (CPU tensors that own their memory)."""
    arrays = {}
    for name, info in _lib().deserialize(data):
        dtype = _dtype_of(info["dtype"])
        # deserialize returns a fresh bytearray per tensor: a writable buffer the tensor can keep.
        arrays[name] = np.frombuffer(info["data"], dtype=dtype.np).reshape(info["shape"])
    return _finish(arrays, None)


def load_file(filename, device="cpu", *, backend="mmap") -> dict:
    """Read a safetensors file into ``{name: tensor}`` on ``device`` (a name, a device, or a CUDA index).

    ``backend`` is accepted for safetensors.torch's signature: both of its values read the same bytes here.
    """
    if backend not in ("mmap", "pread"):
        raise _invalid(f'backend "{backend}" is invalid (expected one of: "mmap", "pread")')
    if isinstance(device, int):
        device = f"cuda:{device}"
    with open(filename, "rb") as f:
        header, _, data_start = _read_header(f)
        arrays = {name: _read_tensor(f, name, info, data_start)
                  for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])}
    return _finish(arrays, device)


# -- modules: tied weights written once, as safetensors.torch.save_model / load_model ---------------------------------
def _span(arr):
    """``(first byte, one past the last byte)`` that ``arr`` reaches in its allocation."""
    start = _address(arr)
    if not arr.size:
        return start, start
    low = sum((n - 1) * st for n, st in zip(arr.shape, arr.strides) if st < 0)
    high = sum((n - 1) * st for n, st in zip(arr.shape, arr.strides) if st > 0)
    return start + low, start + high + arr.itemsize


def _shared_names(state_dict: dict) -> list:
    """Groups of names whose tensors overlap in memory (safetensors.torch's ``_find_shared_tensors``)."""
    by_root = {}
    for name, t in state_dict.items():
        if t._data.size:
            by_root.setdefault(id(_memory_root(t._data)), []).append(name)
    groups = []
    for names in by_root.values():
        areas = sorted(_span(state_dict[n]._data) + (n,) for n in names)
        groups.append({areas[0][2]})
        stop = areas[0][1]
        for start, end, name in areas[1:]:
            if start >= stop:
                groups.append({name})
            else:
                groups[-1].add(name)
            stop = max(stop, end)
    return [g for g in groups if len(g) > 1]


def _is_complete(t) -> bool:
    arr = t._data
    root = _memory_root(arr)
    return _address(arr) == _address(root) and arr.nbytes == root.nbytes


def _duplicates(state_dict: dict, preferred=()) -> dict:
    """``{kept name: [names dropped as its aliases]}``: of each shared group, the first name (sorted; a
    ``preferred`` one first) whose tensor covers the whole memory is kept."""
    preferred = set(preferred)
    out = {}
    for group in _shared_names(state_dict):
        complete = sorted(n for n in group if _is_complete(state_dict[n]))
        if not complete:
            raise RuntimeError(f"Error while trying to find names to remove to save state dict, but found no suitable "
                               f"name to keep for saving amongst: {group}. None is covering the entire storage. "
                               f"Refusing to save/load the model since you could be storing much more memory than "
                               f"needed.")
        keep = next((n for n in complete if n in preferred), complete[0])
        out[keep] = sorted(n for n in group if n != keep)
    return out


def save_model(model, filename, metadata: dict | None = None, force_contiguous: bool = True) -> None:
    """Save ``model.state_dict()`` to ``filename``, writing tied weights once (the dropped names go into the
    metadata, mapped to the kept one).

    >>> import os, tempfile, jitorch
    >>> m = jitorch.nn.Sequential(jitorch.nn.Linear(2, 2), jitorch.nn.Linear(2, 2))
    >>> m[1].weight = m[0].weight
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_model(m, path); sorted(load_file(path))
    ['0.bias', '0.weight', '1.bias']
    >>> load_model(m, path)
    (set(), [])
    """
    state_dict = model.state_dict()
    for kept, dropped in _duplicates(state_dict).items():
        for name in dropped:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, kept)  # never overwrite the caller's own entries
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(f"{e} Or use save_model(..., force_contiguous=True), read the docs for potential "
                         f"caveats.") from None


def load_model(model, filename, strict: bool = True, device="cpu", *, backend="mmap"):
    """Load a ``save_model`` file into ``model``; names tied to a loaded one count as loaded. Returns ``(missing,
    unexpected)``; with ``strict`` either raises ``RuntimeError``."""
    state_dict = load_file(filename, device=device, backend=backend)
    aliases = _duplicates(model.state_dict(), preferred=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for dropped in aliases.values():
        for name in dropped:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected
