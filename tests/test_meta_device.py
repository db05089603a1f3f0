"""The ``meta`` device against torch's: shapes, dtypes, strides and device strings of ops on meta tensors, creation
under a default device, modules built without init work, ``to_empty``/``load_state_dict``, refused reads and errors."""
import copy
import io
import pickle
import warnings

import pytest
import torch

import jitorch
from jitorch import nn
from jitorch.nn import functional as F
from helpers import same_error


def _meta(lib, *size, **kw):
    return lib.empty(*size, device="meta", **kw)


def _facts(t):
    return tuple(t.shape), str(t.dtype).split(".")[-1], str(t.device), tuple(t.stride()), t.requires_grad


SHAPE_CASES = {
    "matmul": lambda L, m: m(3, 4) @ m(4, 5),
    "batched_matmul": lambda L, m: m(2, 3, 4) @ m(4, 5),
    "relu_of_transpose": lambda L, m: L.nn.functional.relu(m(3, 4).t()),
    "view": lambda L, m: m(3, 4).view(2, 6),
    "reshape_copy": lambda L, m: m(3, 4).t().reshape(12),
    "permute": lambda L, m: m(2, 3, 4).permute(2, 0, 1),
    "slice": lambda L, m: m(3, 4)[1:, ::2],
    "expand": lambda L, m: m(3, 1).expand(3, 4),
    "sum_dim": lambda L, m: m(3, 4).sum(1),
    "sum_keepdim": lambda L, m: m(3, 4).sum(0, keepdim=True),
    "mean_all": lambda L, m: m(3, 4).mean(),
    "promotion": lambda L, m: m(3, 4).int() + 1.5,
    "compare": lambda L, m: m(3, 4) > 0,
    "cpu_scalar_joins": lambda L, m: m(3, 4) * L.tensor(2.0),
    "cat": lambda L, m: L.cat([m(3, 4), m(3, 2)], 1),
    "stack": lambda L, m: L.stack([m(3, 4), m(3, 4)]),
    "where": lambda L, m: L.where(m(3, 4) > 0, m(3, 4), 0.0),
    "softmax": lambda L, m: L.nn.functional.softmax(m(3, 4), -1),
    "layer_norm": lambda L, m: L.nn.functional.layer_norm(m(3, 4), (4,)),
    "linear": lambda L, m: L.nn.functional.linear(m(3, 4), m(5, 4), m(5)),
    "conv2d": lambda L, m: L.nn.functional.conv2d(m(2, 3, 8, 8), m(6, 3, 3, 3), padding=1),
    "max_dim": lambda L, m: m(3, 4).max(1)[0],
    "argmax": lambda L, m: m(3, 4).argmax(1),
    "topk_indices": lambda L, m: m(3, 4).topk(2, 1)[1],
    "cumsum": lambda L, m: m(3, 4).cumsum(1),
    "embedding": lambda L, m: L.nn.functional.embedding(m(2, 7, dtype=L.long), m(10, 4)),
    "attention": lambda L, m: L.nn.functional.scaled_dot_product_attention(m(2, 4, 8, 16), m(2, 4, 8, 16),
                                                                           m(2, 4, 8, 16), is_causal=True),
    "cross_entropy": lambda L, m: L.nn.functional.cross_entropy(m(4, 10), m(4, dtype=L.long)),
    "einsum": lambda L, m: L.einsum("bij,bjk->bik", m(2, 3, 4), m(2, 4, 5)),
    "half": lambda L, m: m(3, 4).half() * 2,
    "contiguous": lambda L, m: m(3, 4).t().contiguous(),
    "polar": lambda L, m: L.polar(m(3), m(3)),
    "clone_add_": lambda L, m: m(3, 4).clone().add_(1),
    "uniform_": lambda L, m: m(3, 4).uniform_(),
    "copy_from_cpu": lambda L, m: m(3, 4).copy_(L.ones(3, 4)),
    "zeros_like": lambda L, m: L.zeros_like(m(3, 4).t()),
    "empty_like_to_cpu": lambda L, m: L.empty_like(m(3, 4), device="cpu"),
    "cpu_to_meta": lambda L, m: L.ones(3).to("meta"),
    "arange": lambda L, m: L.arange(5, device="meta"),
    "randn": lambda L, m: L.randn(2, 3, device="meta"),
    "randint": lambda L, m: L.randint(0, 5, (2, 3), device="meta"),
    "tensor": lambda L, m: L.tensor([1, 2], device="meta"),
    "full": lambda L, m: L.full((2,), 3.0, device="meta"),
    "new_zeros": lambda L, m: m(3, 4).new_zeros(2),
    "huge": lambda L, m: L.empty(1 << 40, device="meta") * 2,
    "huge_matmul": lambda L, m: L.empty(1 << 20, 1 << 20, device="meta") @ L.empty(1 << 20, 8, device="meta"),
}


@pytest.mark.parametrize("name", SHAPE_CASES)
def test_ops_on_meta_tensors_give_torchs_shapes_dtypes_strides(name):
    ours = SHAPE_CASES[name](jitorch, lambda *s, **k: _meta(jitorch, *s, **k))
    theirs = SHAPE_CASES[name](torch, lambda *s, **k: _meta(torch, *s, **k))
    assert _facts(ours) == _facts(theirs)


def test_meta_tensor_attributes_and_printing():
    for lib in (jitorch, torch):
        a = _meta(lib, 3, 4)
        assert (a.is_meta, a.is_cpu, a.is_cuda, str(a.device), a.device.type) == (True, False, False, "meta", "meta")
        assert (a.data_ptr(), a.storage_offset(), a[1:].storage_offset(), a.nbytes, a.numel()) == (0, 0, 4, 48, 12)
    for make in (lambda L: _meta(L, 3, 4), lambda L: _meta(L, ()), lambda L: _meta(L, 2, requires_grad=True),
                 lambda L: _meta(L, 2, dtype=L.int32), lambda L: _meta(L, 2, dtype=L.bool),
                 lambda L: _meta(L, 2, requires_grad=True) * 2, lambda L: L.nn.Parameter(_meta(L, 2))):
        assert repr(make(jitorch)).replace("jitorch.", "torch.") == repr(make(torch))


READS = {
    "to_cpu": lambda L, a: a.to("cpu"), "cpu": lambda L, a: a.cpu(), "item": lambda L, a: a[0, 0].item(),
    "item_many": lambda L, a: a.item(), "tolist": lambda L, a: a.tolist(), "numpy": lambda L, a: a.numpy(),
    "bool": lambda L, a: bool(a[0, 0]), "float": lambda L, a: float(a[0, 0]),
    "copy_into_cpu": lambda L, a: L.ones(3, 4).copy_(a),
    "with_cpu": lambda L, a: a + L.ones(3, 4), "cpu_with": lambda L, a: L.ones(3, 4) + a,
    "meta_scalar_with_cpu": lambda L, a: a[0, 0] + L.ones(3, 4),
    "nonzero": lambda L, a: L.nonzero(a), "mask": lambda L, a: a[a > 0],
}


@pytest.mark.parametrize("name", READS)
def test_reads_and_device_mixes_raise_torchs_errors(name):
    fn = READS[name]
    if name in ("nonzero", "mask"):  # torch's message is about its fake kernels' configuration: the type matches
        for lib in (torch, jitorch):
            with pytest.raises(NotImplementedError):
                fn(lib, _meta(lib, 3, 4))
        return
    same_error(lambda lib: fn(lib, _meta(lib, 3, 4)))


def _modules(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 5), lib.nn.LayerNorm(5), lib.nn.BatchNorm1d(5))


def test_default_device_meta_builds_modules_without_init_and_to_empty():
    jitorch.manual_seed(3)
    expected = jitorch.rand(2)
    jitorch.manual_seed(3)
    with jitorch.device("meta"):
        model = _modules(jitorch)
        nn.init.trunc_normal_(jitorch.empty(5, 4))
    assert jitorch.equal(jitorch.rand(2), expected)  # no draw reached the CPU generator
    assert jitorch.empty(2).device.type == "cpu"
    assert {str(t.device) for t in [*model.parameters(), *model.buffers()]} == {"meta"}
    out = model.to_empty(device="cpu")
    assert out is model
    with torch.device("meta"):
        reference = _modules(torch).to_empty(device="cpu")
    ours = [(n, _facts(t), type(t).__name__) for n, t in model.named_parameters()]
    theirs = [(n, _facts(t), type(t).__name__) for n, t in reference.named_parameters()]
    assert ours == theirs
    jitorch.set_default_device("meta")
    try:
        assert nn.Linear(2, 3).weight.is_meta and jitorch.ones(2).is_meta
    finally:
        jitorch.set_default_device(None)
    assert not jitorch.ones(2).is_meta


def test_load_state_dict_into_meta_modules():
    jitorch.manual_seed(0)
    sd = nn.Linear(4, 5).state_dict()
    with jitorch.device("meta"):
        assigned, copied, emptied = nn.Linear(4, 5), nn.Linear(4, 5), nn.Linear(4, 5)
    assigned.load_state_dict(sd, assign=True)
    assert type(assigned.weight) is nn.Parameter and assigned.weight.requires_grad
    assert jitorch.equal(assigned.weight, sd["weight"]) and assigned.bias.device.type == "cpu"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        copied.load_state_dict(sd)
    assert copied.weight.is_meta and "copying from a non-meta parameter" in str(caught[0].message)
    emptied.to_empty(device="cpu").load_state_dict(sd)
    assert jitorch.equal(emptied.weight, sd["weight"]) and jitorch.equal(emptied.bias, sd["bias"])


def test_autograd_through_meta_tensors():
    results = []
    for lib in (jitorch, torch):
        lin = lib.nn.Linear(4, 5, device="meta")
        x = _meta(lib, 2, 4, requires_grad=True)
        y = lib.nn.functional.gelu(lin(x)).sum()
        y.backward()
        results.append([type(y.grad_fn).__name__, _facts(y)] +
                       [_facts(g) for g in (x.grad, lin.weight.grad, lin.bias.grad)])
    assert results[0] == results[1]


def test_meta_ops_do_not_touch_data():
    big = jitorch.empty(1 << 16, 1 << 16, device="meta")  # 16 GiB if it were real
    out = F.softmax(big @ big.t(), -1).sum(0)
    assert out.shape == (1 << 16,) and out.is_meta


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_a_training_step_on_meta_keeps_every_tensor_on_meta(lib):
    # Convolution's backward reuses the forward's window matrix, the optimizers run array kernels and compile runs
    # native code: each must stay on meta (no CPU tensor may appear, no pointer into the read-only pages be written).
    with lib.device("meta"):
        model = lib.nn.Sequential(lib.nn.Conv2d(3, 8, 3), lib.nn.BatchNorm2d(8), lib.nn.ReLU(), lib.nn.Flatten(),
                                  lib.nn.Linear(8 * 6 * 6, 10), lib.nn.LayerNorm(10), lib.nn.GELU())
        x = lib.randn(4, 3, 8, 8)
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(x).sum().backward()
    opt.step()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and g.is_meta for g in grads) and all(p.is_meta for p in model.parameters())
    assert [tuple(g.shape) for g in grads] == [tuple(p.shape) for p in model.parameters()]
    if lib is jitorch:  # torch.compile of meta tensors needs its fake-tensor stack; jitorch runs them eagerly
        for mode in ("default", "reduce-overhead"):
            fn = lib.compile(lambda a: (a * 2).exp().sum(-1), mode=mode)
            out = fn(lib.empty(8, 8, device="meta"))
            assert out.is_meta and tuple(out.shape) == (8,)


def _geometry(t):
    return str(t.device), tuple(t.shape), tuple(t.stride()), t.storage_offset(), str(t.dtype).split(".")[-1], \
        type(t).__name__, t.requires_grad


def test_meta_storages_copies_and_empty_strided_are_torchs():
    # A meta array views the one zero mapping every meta tensor shares: its storage, deepcopy, save and pickle each
    # took that 16 TiB mapping for the tensor's memory (wrong sizes, or a 16 TiB allocation).
    facts = []
    for lib in (torch, jitorch):
        t = _meta(lib, 3, 4)
        storages = [v.untyped_storage() for v in (t, t[1:], t[:, ::2], t.t()[1:])]
        strided = lib.empty_strided((2, 3), (1, 2), dtype=lib.float16, device="meta", requires_grad=True)
        with lib.device("meta"):
            bn = lib.nn.BatchNorm1d(3)
        facts.append([[(s.nbytes(), str(s.device), s.data_ptr()) for s in storages], _geometry(strided),
                      [_geometry(copy.deepcopy(v)) for v in (t[1:, ::2], t.t()[1:], strided.detach())],
                      _geometry(copy.deepcopy(bn).running_mean)])
    assert facts[0] == facts[1]


@pytest.mark.parametrize("writer", [torch, jitorch], ids=["torch_saves", "jitorch_saves"])
def test_meta_tensors_save_load_and_pickle_as_torchs(writer):
    t = _meta(writer, 3, 4, dtype=writer.float16)
    obj = {"t": t, "view": t[1:, ::2], "p": writer.nn.Parameter(_meta(writer, 2)),
           "g": _meta(writer, 2, requires_grad=True)}
    buf = io.BytesIO()
    writer.save(obj, buf)
    loaded = []
    for reader in (torch, jitorch):
        buf.seek(0)
        loaded.append({k: _geometry(v) for k, v in reader.load(buf, weights_only=True).items()})
    assert loaded[0] == loaded[1]
    # Plain pickling writes the same geometry (a view's offset dropped, as torch drops it).
    assert {k: _geometry(v) for k, v in pickle.loads(pickle.dumps(obj)).items()} == loaded[0]


@pytest.mark.parametrize("writer", [torch, jitorch], ids=["torch_saves", "jitorch_saves"])
def test_load_with_map_location_meta_keeps_geometry_and_reads_no_data(writer):
    base = writer.arange(12.0).view(3, 4)
    buf = io.BytesIO()
    writer.save({"w": base, "view": base[1:, ::2], "half": writer.ones(2, dtype=writer.bfloat16)}, buf)
    results = []
    for reader in (torch, jitorch):
        for where in ("meta", reader.device("meta"), {"cpu": "meta"}):
            buf.seek(0)
            results.append({k: _geometry(v) for k, v in reader.load(buf, map_location=where).items()})
    assert all(r == results[0] for r in results[1:]) and results[0]["view"][0] == "meta"
