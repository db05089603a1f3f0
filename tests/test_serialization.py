"""jitorch.save / jitorch.load: round trips, the weights-only guard, map_location, and the file format itself.

PyTorch interop (torch.save <-> jitorch.load) and safetensors live in test_serialization_interop.py.
"""
from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import jitorch
from jitorch import serialization
from jitorch._torch_zip import ZipWriter
from jitorch.serialization import load, save
from jitorch.runtime import cuda_available

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
          "complex64", "complex128"]


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    save(obj, buf)
    buf.seek(0)
    return load(buf, **load_kwargs)


def same_memory(a, b):
    return np.shares_memory(a._data, b._data)


def sample(dtype, shape=(2, 3)):
    d = getattr(jitorch, dtype)
    values = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 2
    if dtype == "bool":
        values = values > 0
    elif dtype.startswith("complex"):
        values = values + 1j * values[::-1]
    return jitorch.tensor(values.tolist()).to(d) if dtype != "bool" else jitorch.tensor(values.tolist())


class Config:
    """A user class for the safe-globals tests (module level, so pickle can name it)."""

    def __init__(self, depth):
        self.depth = depth


class Exploit:
    """Pickles as a call to ``func(*args)``: what a hostile checkpoint does to run code on load."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


class TinyNet(jitorch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = jitorch.nn.Parameter(jitorch.randn(3, 2))
        self.register_buffer("scale", jitorch.tensor([2.0, 3.0]))

    def forward(self, x):
        return (x @ self.weight) * self.scale


# -- round trips ---------------------------------------------------------------------------------------------------
def test_path_bytesio_and_pathlike_round_trip(tmp_path):
    x = jitorch.randn(4, 5)
    save(x, str(tmp_path / "a.pt"))
    save(x, tmp_path / "b.pt")
    buf = io.BytesIO()
    save(x, buf)
    buf.seek(0)
    for out in (load(str(tmp_path / "a.pt")), load(tmp_path / "b.pt"), load(buf)):
        assert type(out) is jitorch.Tensor and out.dtype == jitorch.float32
        np.testing.assert_array_equal(out.numpy(), x.numpy())
    with open(tmp_path / "a.pt", "rb") as fh:
        np.testing.assert_array_equal(load(fh).numpy(), x.numpy())


def test_nested_containers_and_python_values():
    sd = OrderedDict(w=jitorch.ones(2))
    sd._metadata = OrderedDict({"": {"version": 1}})
    obj = {"sd": sd, "list": [1, 2.5, None, True, "s" * 300, 2 ** 70, -3], "tuple": (jitorch.zeros(1), (1, 2)),
           "set": {1, 2}, "bytes": b"\x00\xff", "bytearray": bytearray(b"ab"), "complex": 1 + 2j,
           "dtype": jitorch.bfloat16, "device": jitorch.device("cuda", 1), "size": jitorch.Size([2, 3])}
    out = roundtrip(obj)
    assert type(out["sd"]) is OrderedDict and out["sd"]._metadata == {"": {"version": 1}}
    assert out["list"] == obj["list"] and out["set"] == {1, 2} and out["bytes"] == b"\x00\xff"
    assert out["bytearray"] == bytearray(b"ab") and out["complex"] == 1 + 2j
    assert out["dtype"] is jitorch.bfloat16 and out["device"] == jitorch.device("cuda:1")
    assert type(out["size"]) is jitorch.Size and out["size"] == (2, 3)
    assert out["tuple"][1] == (1, 2) and out["tuple"][0].tolist() == [0.0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_round_trips(dtype):
    x = sample(dtype)
    out = roundtrip({"x": x, "scalar": x[1, 2]})
    assert out["x"].dtype == x.dtype and out["x"].shape == x.shape
    assert out["x"]._data.tobytes() == x._data.tobytes()
    assert out["scalar"].dim() == 0 and out["scalar"]._data.tobytes() == x[1, 2]._data.tobytes()


def test_strides_zero_d_and_empty_tensors():
    base = jitorch.arange(24.0).view(4, 6)
    obj = {"t": base.t(), "step": base[:, ::2], "expanded": jitorch.arange(3.0).expand(4, 3),
           "zero_d": jitorch.tensor(7, dtype=jitorch.int64), "empty": jitorch.empty(0, 3),
           "empty_int": jitorch.zeros(2, 0, dtype=jitorch.int32)}
    out = roundtrip(obj)
    for name, t in obj.items():
        assert out[name].shape == t.shape and out[name].dtype == t.dtype, name
        assert out[name].stride() == t.stride(), name
        np.testing.assert_array_equal(out[name].numpy(), t.numpy())
    assert out["zero_d"].item() == 7


def test_negative_stride_arrays_are_saved_as_copies():
    x = jitorch.Tensor._make(np.arange(5.0, dtype=np.float32)[::-1])
    out = roundtrip(x)
    assert out.tolist() == [4.0, 3.0, 2.0, 1.0, 0.0]


def test_views_come_back_sharing_memory():
    x = jitorch.arange(12.0)
    obj = {"x": x, "slice": x[2:5], "matrix_t": x.view(3, 4).t(), "again": x}
    out = roundtrip(obj)
    assert out["again"] is out["x"]
    assert same_memory(out["x"], out["slice"]) and same_memory(out["x"], out["matrix_t"])
    out["slice"].add_(100)
    assert out["x"][3].item() == 103.0 and out["matrix_t"][0, 1].item() == 104.0
    # Saving the loaded views again keeps them in one storage.
    buf = io.BytesIO()
    save(out, buf)
    assert len([n for n in zipfile.ZipFile(buf).namelist() if "/data/" in n]) == 1


def test_views_with_different_dtypes_are_refused():
    x = jitorch.arange(4.0)
    with pytest.raises(RuntimeError, match="view the same data as different types"):
        save([x, x.view(jitorch.int32)], io.BytesIO())


def test_parameters_and_requires_grad():
    p = jitorch.nn.Parameter(jitorch.randn(2, 2))
    frozen = jitorch.nn.Parameter(jitorch.ones(2), requires_grad=False)
    leaf = jitorch.ones(3, requires_grad=True)
    out = roundtrip({"p": p, "frozen": frozen, "leaf": leaf, "nonleaf": leaf * 2})
    assert type(out["p"]) is jitorch.nn.Parameter and out["p"].requires_grad
    assert type(out["frozen"]) is jitorch.nn.Parameter and not out["frozen"].requires_grad
    assert out["leaf"].requires_grad and out["leaf"].is_leaf
    assert out["nonleaf"].requires_grad and out["nonleaf"].is_leaf and out["nonleaf"].tolist() == [2.0] * 3
    np.testing.assert_array_equal(out["p"].detach().numpy(), p.detach().numpy())


def test_python_attributes_on_tensors_and_parameters_survive():
    t = jitorch.ones(2)
    t.note = "hello"
    p = jitorch.nn.Parameter(jitorch.zeros(1))
    p.tag = 3
    out = roundtrip([t, p])
    assert out[0].note == "hello" and type(out[0]) is jitorch.Tensor
    assert out[1].tag == 3 and type(out[1]) is jitorch.nn.Parameter


def test_optimizer_state_dict_round_trips():
    w = jitorch.nn.Parameter(jitorch.randn(3, 2))
    opt = jitorch.optim.Adam([w], lr=0.1)
    (w ** 2).sum().backward()
    opt.step()
    out = roundtrip(opt.state_dict())
    assert out["param_groups"] == opt.state_dict()["param_groups"]
    step = out["state"][0]["step"]
    assert step.dim() == 0 and step.item() == 1.0 and step.dtype == jitorch.float32
    w2 = jitorch.nn.Parameter(w.detach().clone())
    opt2 = jitorch.optim.Adam([w2], lr=0.1)
    opt2.load_state_dict(out)
    np.testing.assert_array_equal(opt2.state_dict()["state"][0]["exp_avg"].numpy(),
                                  opt.state_dict()["state"][0]["exp_avg"].numpy())


def test_whole_module_needs_weights_only_false(tmp_path):
    net = TinyNet()
    save(net, tmp_path / "net.pt")
    with pytest.raises(pickle.UnpicklingError, match="(?s)Weights only load failed.*TinyNet"):
        load(tmp_path / "net.pt")
    loaded = load(tmp_path / "net.pt", weights_only=False)
    assert type(loaded) is TinyNet and type(loaded.weight) is jitorch.nn.Parameter
    x = jitorch.randn(4, 3)
    np.testing.assert_allclose(loaded(x).detach().numpy(), net(x).detach().numpy())
    assert load(tmp_path / "net.pt", pickle_module=pickle).scale.tolist() == [2.0, 3.0]


def test_legacy_format_round_trip():
    x = jitorch.arange(6.0)
    buf = io.BytesIO()
    save({"x": x, "v": x[1:3], "p": jitorch.nn.Parameter(jitorch.ones(2))}, buf,
                 _use_new_zipfile_serialization=False)
    assert not buf.getvalue().startswith(b"PK")
    buf.seek(0)
    out = load(buf)
    assert out["v"].tolist() == [1.0, 2.0] and same_memory(out["x"], out["v"])
    assert type(out["p"]) is jitorch.nn.Parameter


def test_mmap_load_is_copy_on_write(tmp_path):
    path = tmp_path / "m.pt"
    save({"x": jitorch.arange(1000.0)}, path)
    before = path.read_bytes()
    out = load(path, mmap=True)
    assert out["x"][999].item() == 999.0
    out["x"].add_(1)
    assert out["x"][0].item() == 1.0 and path.read_bytes() == before
    with pytest.raises(ValueError, match="must be a file path"):
        load(io.BytesIO(before), mmap=True)


# -- weights_only ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("legacy", [False, True])
def test_malicious_pickles_are_refused(tmp_path, legacy):
    marker = tmp_path / "pwned"
    payloads = {"system": Exploit(os.system, f"touch {marker}"),
                "exec": Exploit(exec, f"open({str(marker)!r}, 'w').close()")}
    for name, payload in payloads.items():
        path = tmp_path / f"{name}.pt"
        save({"weights": jitorch.ones(2), "payload": payload}, path, _use_new_zipfile_serialization=not legacy)
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed") as info:
            load(path)
        assert not marker.exists()
        expected = "is blocked" if name == "system" else "Unsupported global: GLOBAL exec was not an allowed global"
        assert expected in str(info.value)
    load(tmp_path / "exec.pt", weights_only=False)
    assert marker.exists()


def test_safe_globals_allow_a_custom_class():
    buf = io.BytesIO()
    save({"config": Config(3), "w": jitorch.ones(1)}, buf)
    name = f"{Config.__module__}.Config"
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=f"Unsupported global: GLOBAL {name}"):
        load(buf)
    with serialization.safe_globals([Config]):
        assert Config in serialization.get_safe_globals()
        buf.seek(0)
        assert load(buf)["config"].depth == 3
    assert Config not in serialization.get_safe_globals()
    serialization.add_safe_globals([Config])
    try:
        buf.seek(0)
        assert load(buf)["config"].depth == 3
    finally:
        serialization.clear_safe_globals()
    assert serialization.get_safe_globals() == []
    buf.seek(0)
    assert serialization.get_unsafe_globals_in_checkpoint(buf) == [name]


def test_weights_only_with_pickle_module_is_refused():
    buf = io.BytesIO()
    save(jitorch.ones(1), buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="Can not safely load weights when explicit pickle_module is specified"):
        load(buf, pickle_module=pickle, weights_only=True)


# -- map_location ----------------------------------------------------------------------------------------------------
def relocated(data: bytes, location: str) -> io.BytesIO:
    """The checkpoint ``data`` with every storage tagged ``location`` (as if saved from that device)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    prefix = src.namelist()[0].split("/")[0]
    writer = ZipWriter(out, prefix)
    for name in src.namelist():
        record = src.read(name)
        if name.endswith("data.pkl"):
            new = location.encode()
            record = record.replace(b"X\x03\x00\x00\x00cpu", b"X" + len(new).to_bytes(4, "little") + new)
        writer.write_record(name[len(prefix) + 1:], record)
    writer.finish()
    out.seek(0)
    return out


def test_map_location_variants():
    buf = io.BytesIO()
    save({"x": jitorch.arange(3.0)}, buf)
    data = buf.getvalue()
    if cuda_available():
        assert load(relocated(data, "cuda:0"))["x"].is_cuda
    else:
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
            load(relocated(data, "cuda:0"))
    seen = []

    def keep_on_cpu(storage, location):
        seen.append(location)
        return storage

    for map_location in ("cpu", jitorch.device("cpu"), {"cuda:0": "cpu"}, keep_on_cpu):
        out = load(relocated(data, "cuda:0"), map_location=map_location)
        assert out["x"].device == jitorch.device("cpu") and out["x"].tolist() == [0.0, 1.0, 2.0]
    assert seen == ["cuda:0"]
    # A callable returning None falls back to the saved location.
    assert load(io.BytesIO(data), map_location=lambda storage, loc: None)["x"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(RuntimeError, match="don't know how to restore data location"):
        load(relocated(data, "mps"))
    with pytest.raises(RuntimeError, match="CUDA"):
        load(io.BytesIO(data), map_location="cuda:7" if cuda_available() else "cuda")


# -- the container -----------------------------------------------------------------------------------------------------
def test_archive_layout_matches_torch(tmp_path):
    path = tmp_path / "model.ckpt.pt"
    save({"a": jitorch.ones(3), "b": jitorch.zeros(2, dtype=jitorch.int64), "e": jitorch.empty(0)}, path)
    raw = path.read_bytes()
    zf = zipfile.ZipFile(path)
    assert zf.namelist() == ["model.ckpt/data.pkl", "model.ckpt/.format_version", "model.ckpt/.storage_alignment",
                             "model.ckpt/byteorder", "model.ckpt/data/0", "model.ckpt/data/1", "model.ckpt/data/2",
                             "model.ckpt/version", "model.ckpt/.data/serialization_id"]
    assert zf.read("model.ckpt/version") == b"3\n" and zf.read("model.ckpt/byteorder") == b"little"
    assert zf.read("model.ckpt/.storage_alignment") == b"64"
    assert len(zf.read("model.ckpt/.data/serialization_id")) == 40
    for info in zf.infolist():
        assert info.compress_type == zipfile.ZIP_STORED
        name_len, extra_len = np.frombuffer(raw[info.header_offset + 26:info.header_offset + 30], dtype="<u2")
        assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0, info.filename
    assert zf.read("model.ckpt/data/1") == np.zeros(2, dtype="<i8").tobytes()
    assert zf.testzip() is None  # CRCs are right
    buf = io.BytesIO()
    save(1, buf)
    assert zipfile.ZipFile(buf).namelist()[0] == "archive/data.pkl"


def test_big_endian_checkpoints_are_byteswapped():
    buf = io.BytesIO()
    x = jitorch.tensor([1.5, -2.0, 3.25], dtype=jitorch.float64)
    save({"x": x, "c": jitorch.tensor([1 + 2j], dtype=jitorch.complex64)}, buf)
    src = zipfile.ZipFile(buf)
    out = io.BytesIO()
    writer = ZipWriter(out, "archive")
    for name in src.namelist():
        record = src.read(name)
        if name == "archive/byteorder":
            record = b"big"
        elif name == "archive/data/0":
            record = np.frombuffer(record, "<f8").astype(">f8").tobytes()
        elif name == "archive/data/1":
            record = np.frombuffer(record, "<c8").astype(">c8").tobytes()
        writer.write_record(name[len("archive/"):], record)
    writer.finish()
    out.seek(0)
    loaded = load(out)
    assert loaded["x"].tolist() == [1.5, -2.0, 3.25] and loaded["c"].tolist() == [1 + 2j]


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_protocols(protocol):
    x = jitorch.arange(4.0)
    buf = io.BytesIO()
    save({"x": x, "v": x[1:], "dtypes": [jitorch.float16, jitorch.float16]}, buf, pickle_protocol=protocol)
    buf.seek(0)
    out = load(buf)
    assert out["v"].tolist() == [1.0, 2.0, 3.0] and same_memory(out["x"], out["v"])
    assert out["dtypes"] == [jitorch.float16, jitorch.float16]


def test_bad_arguments(tmp_path):
    with pytest.raises(AttributeError, match="file-like object with a 'write' attribute"):
        save(jitorch.ones(1), object())
    with pytest.raises(RuntimeError, match="Parent directory .* does not exist"):
        save(jitorch.ones(1), tmp_path / "missing" / "x.pt")
    with pytest.raises(EOFError):
        load(io.BytesIO(b""))
