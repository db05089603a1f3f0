"""Checkpoint details against PyTorch: what a plain pickle gives under ``weights_only``, storage offsets and strides
of loaded tensors (empty ones included), layouts in checkpoints, ``Parameter``'s text, and safetensors'
``save_model``/``load_model`` with tied weights.
"""
from __future__ import annotations

import io
import pickle
import warnings

import pytest
import safetensors
import safetensors.torch
import torch

import jitorch
from jitorch import safetensors as jst


def _round_trip(save, load, obj, **kwargs):
    buf = io.BytesIO()
    save(obj, buf)
    buf.seek(0)
    return load(buf, **kwargs)


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("obj", [{"a": 1, "b": [1.5]}, [1, 2], 5])
def test_plain_pickle_under_weights_only_fails_as_in_torch(obj, protocol):
    # torch reads a plain pickle as a legacy checkpoint: the weights-only unpickler has no FRAME (protocol >= 4,
    # framed pickles: UnpicklingError); else the first pickle is no magic number (RuntimeError)
    raw = pickle.dumps(obj, protocol=protocol)
    errors = []
    for lib in (jitorch, torch):
        for weights_only in (True, False):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's note on the protocol
                with pytest.raises((pickle.UnpicklingError, RuntimeError)) as info:
                    lib.load(io.BytesIO(raw), weights_only=weights_only)
            errors.append(type(info.value))
    assert errors[:2] == errors[2:]
    assert pickle.UnpicklingError in errors or protocol == 2 or obj == 5


@pytest.mark.parametrize("direction", ["jitorch->jitorch", "torch->jitorch", "jitorch->torch"])
def test_loaded_views_keep_storage_offset_and_strides(direction):
    src, dst = (jitorch, jitorch) if direction == "jitorch->jitorch" else \
        (torch, jitorch) if direction == "torch->jitorch" else (jitorch, torch)
    base = src.arange(10.0)
    obj = {"base": base, "v": base[3:7], "w": base[2:].view(2, 4)[:, 1:], "e": src.zeros(0, 3),
           "ee": src.zeros(2, 0, 4), "t": src.zeros(3, 4).t(), "lone": base[5:]}
    out = _round_trip(src.save, dst.load, obj)
    assert [out[k].storage_offset() for k in ("base", "v", "w", "lone")] == [0, 3, 3, 5]
    assert {k: tuple(out[k].stride()) for k in ("w", "e", "ee", "t")} == \
        {"w": (4, 1), "e": (3, 1), "ee": (4, 4, 1), "t": (1, 4)}
    assert out["w"].tolist() == [[3.0, 4.0, 5.0], [7.0, 8.0, 9.0]]
    assert out["v"][1:].storage_offset() == 4  # a view of a loaded view counts from the storage too


def test_empty_tensor_strides_are_torchs():
    for shape in ((0, 3), (2, 0, 4), (0,), (3, 0), (0, 0)):
        assert jitorch.zeros(*shape).stride() == torch.zeros(*shape).stride()
        assert jitorch.empty(*shape).stride() == torch.empty(*shape).stride()
    assert jitorch.zeros(2, 3)[:0].stride() == torch.zeros(2, 3)[:0].stride() == (3, 1)


def test_layouts_round_trip_through_checkpoints():
    assert jitorch.zeros(2).layout is jitorch.strided and repr(jitorch.strided) == "jitorch.strided"
    obj_jt = {"layout": jitorch.strided, "sparse": jitorch.sparse_coo, "x": jitorch.ones(1)}
    for weights_only in (True, False):
        back = _round_trip(jitorch.save, jitorch.load, obj_jt, weights_only=weights_only)
        assert back["layout"] is jitorch.strided and back["sparse"] is jitorch.sparse_coo
    from_torch = _round_trip(torch.save, jitorch.load, {"layout": torch.strided, "sparse": torch.sparse_csr})
    assert from_torch["layout"] is jitorch.strided and from_torch["sparse"] is jitorch.sparse_csr
    to_torch = _round_trip(jitorch.save, torch.load, obj_jt)
    assert to_torch["layout"] is torch.strided and to_torch["sparse"] is torch.sparse_coo
    assert pickle.loads(pickle.dumps(jitorch.strided)) is jitorch.strided



class _Tagged(jitorch.Tensor):
    pass


def test_plain_pickle_keeps_user_attributes_like_torch():
    # torch pickles a tensor's __dict__ as its state; jitorch's plain pickle used to drop it.
    for lib, sub in ((torch, None), (jitorch, _Tagged)):
        t = lib.ones(2, requires_grad=True)
        t.meta = {"source": "disk"}
        back = pickle.loads(pickle.dumps(t))
        assert back.meta == {"source": "disk"} and back.requires_grad and back.tolist() == [1.0, 1.0]
        assert not hasattr(pickle.loads(pickle.dumps(lib.ones(1))), "meta")
        if sub is not None:
            s = lib.ones(1).as_subclass(sub)
            s.note = 3
            back = pickle.loads(pickle.dumps(s))
            assert type(back) is sub and back.note == 3

def test_parameter_text_starts_like_torchs():
    for make in (lambda T: T.nn.Parameter(T.ones(2)), lambda T: T.nn.Parameter(T.ones(2), requires_grad=False),
                 lambda T: T.nn.Parameter(T.zeros(1, dtype=T.float64))):
        jt, th = make(jitorch), make(torch)
        for text in (repr, str, "{}".format):
            assert text(jt).startswith("Parameter containing:\n")
            assert text(jt).replace("jitorch", "torch") == text(th)


def _tied(T):
    T.manual_seed(0)
    m = T.nn.Sequential(T.nn.Embedding(4, 3), T.nn.Linear(3, 4, bias=False), T.nn.Linear(4, 2))
    m[1].weight = m[0].weight
    return m


def test_safetensors_save_model_and_load_model_match_safetensors_torch(tmp_path):
    jt_path, th_path = tmp_path / "jt.safetensors", tmp_path / "th.safetensors"
    jst.save_model(_tied(jitorch), jt_path, metadata={"format": "pt"})
    safetensors.torch.save_model(_tied(torch), th_path, metadata={"format": "pt"})
    for path in (jt_path, th_path):  # the same names and metadata, whoever wrote the file
        with safetensors.safe_open(str(path), "np") as f:
            assert sorted(f.keys()) == ["0.weight", "2.bias", "2.weight"]
            assert f.metadata() == {"format": "pt", "1.weight": "0.weight"}
    for path in (jt_path, th_path):  # and each library loads both files into a tied model
        target = _tied(jitorch)
        with jitorch.no_grad():
            target[0].weight.zero_()
        assert jst.load_model(target, path) == safetensors.torch.load_model(_tied(torch), path) == (set(), [])
        assert target[1].weight is target[0].weight and float(target[0].weight.abs().sum()) > 0


def test_safetensors_load_model_reports_keys_like_safetensors_torch(tmp_path):
    path = tmp_path / "m.safetensors"
    jst.save_model(_tied(jitorch), path)
    jt = jst.load_model(jitorch.nn.Linear(3, 4), path, strict=False)
    th = safetensors.torch.load_model(torch.nn.Linear(3, 4), path, strict=False)
    assert (jt[0], sorted(jt[1])) == (th[0], sorted(th[1]))
    with pytest.raises(RuntimeError) as jt_err:
        jst.load_model(jitorch.nn.Linear(3, 4), path)
    with pytest.raises(RuntimeError) as th_err:
        safetensors.torch.load_model(torch.nn.Linear(3, 4), path)
    assert str(jt_err.value) == str(th_err.value)
