"""Checkpoints crossing between PyTorch (the oracle) and jitorch, and safetensors files.

torch.save -> jitorch.load and jitorch.save -> torch.load (with torch's default weights_only=True): values, dtypes,
shapes, strides and storage sharing; optimizer state; the legacy format; safetensors both ways.
"""
from __future__ import annotations

import io
import os
import pickle
from collections import OrderedDict

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch

import jitorch
from jitorch import safetensors as jst
from jitorch.serialization import load, save

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
          "complex64", "complex128"]


def torch_sample(dtype):
    values = torch.arange(-3, 9, dtype=torch.float64).reshape(3, 4)
    if dtype == "bool":
        return values > 0
    if dtype.startswith("complex"):
        return torch.complex(values, -values).to(getattr(torch, dtype))
    return values.to(getattr(torch, dtype))


def as_numpy(t):
    """A torch tensor's values as NumPy (bfloat16 through float32)."""
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.detach().numpy()


def assert_matches(jt, tt):
    assert jt.dtype.name == str(tt.dtype).split(".")[1] and tuple(jt.shape) == tuple(tt.shape)
    assert jt.stride() == tt.stride()
    got = jt._data.astype(np.float32) if jt.dtype == jitorch.bfloat16 else jt._data
    np.testing.assert_array_equal(got, as_numpy(tt))


def through(obj, writer, reader, **load_kwargs):
    buf = io.BytesIO()
    writer(obj, buf)
    buf.seek(0)
    return reader(buf, **load_kwargs)


class Exploit:
    def __reduce__(self):
        return os.system, ("echo pwned",)


# -- torch.save -> jitorch.load ---------------------------------------------------------------------------------------
def test_torch_state_dict_loads_in_jitorch(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    model(torch.randn(5, 3))
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    sd = load(tmp_path / "sd.pt")
    assert type(sd) is OrderedDict and list(sd) == list(model.state_dict())
    assert sd._metadata == model.state_dict()._metadata
    for name, tt in model.state_dict().items():
        assert_matches(sd[name], tt)
    assert sd["1.num_batches_tracked"].dtype == jitorch.int64 and sd["1.num_batches_tracked"].dim() == 0


@pytest.mark.parametrize("legacy", [False, True])
def test_torch_views_dtypes_and_objects_load_in_jitorch(legacy):
    x = torch.arange(12.0).view(3, 4)
    obj = {"x": x, "t": x.t(), "row": x[1], "strided": x[:, ::2], "expanded": torch.ones(3).expand(2, 3),
           "param": torch.nn.Parameter(torch.randn(2)), "frozen": torch.nn.Parameter(torch.ones(1), False),
           "dtypes": {d: torch_sample(d) for d in DTYPES}, "dtype": torch.bfloat16, "device": torch.device("cuda", 1),
           "size": torch.Size([2, 3]), "empty": torch.empty(0, 2), "scalar": torch.tensor(5, dtype=torch.int16)}
    out = through(obj, lambda o, f: torch.save(o, f, _use_new_zipfile_serialization=not legacy), load)
    for name in ("x", "t", "row", "strided", "expanded", "empty", "scalar"):
        assert_matches(out[name], obj[name])
    for d in DTYPES:
        assert_matches(out["dtypes"][d], obj["dtypes"][d])
    assert all(np.shares_memory(out["x"]._data, out[n]._data) for n in ("t", "row", "strided"))
    assert type(out["param"]) is jitorch.nn.Parameter and out["param"].requires_grad
    assert type(out["frozen"]) is jitorch.nn.Parameter and not out["frozen"].requires_grad
    assert out["dtype"] is jitorch.bfloat16 and out["device"] == jitorch.device("cuda:1")
    assert type(out["size"]) is jitorch.Size and out["size"] == (2, 3)


def test_torch_optimizer_state_loads_into_jitorch_optimizer():
    w = torch.nn.Parameter(torch.randn(3, 2))
    opt = torch.optim.Adam([w], lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        (w ** 2).sum().backward()
        opt.step()
    state = through(opt.state_dict(), torch.save, load)
    assert state["state"][0]["step"].item() == 2.0 and state["state"][0]["step"].dim() == 0
    jw = jitorch.nn.Parameter(jitorch.tensor(w.detach().numpy()))
    jopt = jitorch.optim.Adam([jw], lr=0.5)
    jopt.load_state_dict(state)
    assert jopt.param_groups[0]["lr"] == 0.01
    assert_matches(jopt.state_dict()["state"][0]["exp_avg_sq"], opt.state_dict()["state"][0]["exp_avg_sq"])


def test_torch_tensor_attributes_and_unsupported_dtypes():
    t = torch.ones(2)
    t.note = "kept"
    out = through({"t": t}, torch.save, load)
    assert out["t"].note == "kept" and out["t"].tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="torch.float8_e4m3fn, a dtype jitorch does not support"):
        through(torch.ones(2, dtype=torch.float8_e4m3fn), torch.save, load)


@pytest.mark.parametrize("name", ["uint16", "uint32", "uint64"])
def test_limited_unsigned_dtypes_round_trip_with_torch(name):
    values = np.array([0, 7, np.iinfo(name).max], dtype=name)
    out = through({"t": torch.from_numpy(values)[1:]}, torch.save, load)
    assert out["t"].dtype is getattr(jitorch, name) and out["t"].tolist() == values[1:].tolist()
    back = through({"t": jitorch.from_numpy(values), "p": jitorch.nn.Parameter(jitorch.from_numpy(values),
                                                                               requires_grad=False)},
                   jitorch.save, torch.load)
    assert back["t"].dtype == getattr(torch, name) and back["t"].tolist() == values.tolist()
    assert back["p"].dtype == getattr(torch, name)


def test_torch_written_exploit_is_refused():
    with pytest.raises(pickle.UnpicklingError, match="(?s)Weights only load failed.*posix.system whose module posix"):
        through({"x": Exploit()}, torch.save, load)


def test_torch_pickled_module_loads_as_jitorch_module():
    linear = torch.nn.Linear(3, 2)
    out = through(linear, torch.save, load, weights_only=False)
    assert type(out).__module__.startswith("jitorch.") and type(out).__name__ == "Linear"
    assert type(out.weight) is jitorch.nn.Parameter
    assert_matches(out.weight.detach(), linear.weight.detach())


# -- jitorch.save -> torch.load ----------------------------------------------------------------------------------------
def test_jitorch_state_dict_loads_into_torch_model(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    sd = OrderedDict((name, jitorch.tensor(t.numpy()) * 0 + i) for i, (name, t) in enumerate(
        model.state_dict().items()))
    save(sd, tmp_path / "j.pt")
    loaded = torch.load(tmp_path / "j.pt")  # torch's default: weights_only=True
    model.load_state_dict(loaded)
    for i, (name, tt) in enumerate(model.state_dict().items()):
        assert torch.equal(tt, torch.full_like(tt, i)), name


def test_jitorch_module_state_dict_and_protocol_4_files_load_in_torch():
    class Net(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = jitorch.nn.Parameter(jitorch.randn(2, 3))
            self.register_buffer("running", jitorch.zeros(2))

    net = Net()
    out = through(net.state_dict(), save, torch.load)
    assert type(out) is OrderedDict and out._metadata == net.state_dict()._metadata
    assert_matches(net.weight.detach(), out["weight"])
    out = through({"x": jitorch.ones(2)}, lambda o, f: save(o, f, pickle_protocol=4), torch.load, weights_only=False)
    assert out["x"].tolist() == [1.0, 1.0]


def test_jitorch_views_dtypes_and_objects_load_in_torch():
    x = jitorch.arange(12.0).view(3, 4)
    p = jitorch.nn.Parameter(jitorch.randn(2))
    p.tag = "param state"
    marked = jitorch.ones(2)
    marked.note = 1
    obj = {"x": x, "t": x.t(), "row": x[1], "strided": x[:, ::2], "expanded": jitorch.ones(3).expand(2, 3),
           "p": p, "marked": marked, "dtypes": {d: jitorch.tensor(as_numpy(torch_sample(d)).tolist()).to(
               getattr(jitorch, d)) for d in DTYPES}, "dtype": jitorch.float16, "device": jitorch.device("cpu"),
           "size": jitorch.Size([4]), "empty": jitorch.empty(0), "scalar": jitorch.tensor(2.5)}
    for legacy in (False, True):
        out = through(obj, lambda o, f: save(o, f, _use_new_zipfile_serialization=not legacy), torch.load)
        for name in ("x", "t", "row", "strided", "expanded", "empty", "scalar"):
            assert_matches(obj[name], out[name])
        for d in DTYPES:
            assert_matches(obj["dtypes"][d], out["dtypes"][d])
        storage = out["x"].untyped_storage().data_ptr()
        assert all(out[n].untyped_storage().data_ptr() == storage for n in ("t", "row", "strided"))
        assert out["row"].storage_offset() == 4
        assert type(out["p"]) is torch.nn.Parameter and out["p"].requires_grad and out["p"].tag == "param state"
        assert out["marked"].note == 1
        assert out["dtype"] is torch.float16 and out["device"] == torch.device("cpu")
        assert type(out["size"]) is torch.Size and out["size"] == (4,)


def test_jitorch_optimizer_state_loads_into_torch_optimizer():
    jw = jitorch.nn.Parameter(jitorch.randn(3, 2))
    jopt = jitorch.optim.Adam([jw], lr=0.01)
    (jw ** 2).sum().backward()
    jopt.step()
    state = through(jopt.state_dict(), save, torch.load)
    w = torch.nn.Parameter(torch.tensor(jw.detach().numpy()))
    opt = torch.optim.Adam([w], lr=0.5)
    opt.load_state_dict(state)
    assert opt.param_groups[0]["lr"] == 0.01 and opt.state_dict()["state"][0]["step"].item() == 1.0
    opt.step()  # torch accepts the loaded state and keeps optimizing


# -- safetensors -----------------------------------------------------------------------------------------------------
SAFE_DTYPES = [d for d in DTYPES if d != "complex128"]


def test_safetensors_round_trip(tmp_path):
    tensors = {d: jitorch.tensor(as_numpy(torch_sample(d)).tolist()).to(getattr(jitorch, d)) for d in SAFE_DTYPES}
    tensors["scalar"] = jitorch.tensor(1.5)
    tensors["empty"] = jitorch.empty(0, 4)
    jst.save_file(tensors, tmp_path / "t.safetensors", metadata={"format": "pt"})
    for out in (jst.load_file(tmp_path / "t.safetensors"), jst.load(jst.save(tensors)),
                load(str(tmp_path / "t.safetensors"))):
        assert sorted(out) == sorted(tensors)
        for name, t in tensors.items():
            assert out[name].dtype == t.dtype and out[name].shape == t.shape
            assert out[name]._data.tobytes() == t._data.tobytes()
        out["bfloat16"].add_(1)  # loaded tensors own writable memory
    with safetensors.safe_open(tmp_path / "t.safetensors", framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}


def test_safetensors_interop_with_torch(tmp_path):
    torch_tensors = {d: torch_sample(d) for d in SAFE_DTYPES}
    safetensors.torch.save_file(torch_tensors, tmp_path / "torch.safetensors")
    out = jst.load_file(tmp_path / "torch.safetensors")
    for d in SAFE_DTYPES:
        assert_matches(out[d], torch_tensors[d])
    jst.save_file(out, tmp_path / "jitorch.safetensors")
    back = safetensors.torch.load_file(tmp_path / "jitorch.safetensors")
    for d in SAFE_DTYPES:
        assert torch.equal(back[d], torch_tensors[d]), d


def test_safetensors_refuses_shared_and_strided_tensors(tmp_path):
    x = jitorch.arange(6.0)
    jst.save_file({"a": x[:3], "b": x[3:]}, tmp_path / "halves.safetensors")  # disjoint views are fine
    with pytest.raises(RuntimeError, match="Some tensors share memory"):
        jst.save_file({"a": x, "b": x[1:3]}, tmp_path / "s.safetensors")
    with pytest.raises(ValueError, match="non contiguous tensor: `t`"):
        jst.save_file({"t": x.view(2, 3).t()}, tmp_path / "s.safetensors")
    with pytest.raises(ValueError, match="expected torch.Tensor"):
        jst.save_file({"n": 3}, tmp_path / "s.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(safetensors.SafetensorError):
        jst.load_file(tmp_path / "bad.safetensors")
