"""Breadth sweep of torch.utils.data, part 1: default_collate / default_convert / collate(collate_fn_map=...) on
every element kind torch handles or refuses, the tensor-construction errors they surface, and the single-process
DataLoader's options (no batching, sampler conflicts, lengths, warnings, repeated iteration), each compared with
torch 2.13 on the same inputs. Samplers, datasets and workers: test_sweep_data_breadth_samplers.py. (Cases already
in test_data.py / test_data_workers.py are not repeated.)"""
from __future__ import annotations

import array
import collections
import dataclasses
import types
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tdata
from torch.utils.data._utils import collate as torch_collate

import jitorch
import jitorch.utils.data as jdata
from jitorch.utils.data._utils import collate as jt_collate


# -- helpers ------------------------------------------------------------------------------------------------------
def picture(obj):
    """A framework-neutral picture of a result: container types, tensor dtypes/shapes/values, leaves' types."""
    if isinstance(obj, (jitorch.Tensor, torch.Tensor)):
        return ("tensor", type(obj).__name__.replace("Parameter", "Tensor"), str(obj.dtype).split(".")[-1],
                tuple(obj.shape), obj.tolist())
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.tolist())
    if isinstance(obj, collections.abc.Mapping):
        return ("mapping", type(obj).__name__, {k: picture(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple, collections.deque)):
        return (type(obj).__name__, [picture(v) for v in obj])
    return ("leaf", type(obj).__name__, repr(obj))


def result(fn):
    """``fn()``'s picture, or its error as (type, message with jitorch's names read as torch's), with its warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = ("ok", picture(fn()))
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            out = ("error", type(e).__name__, str(e).replace("jitorch._tensor.Tensor", "torch.Tensor"))
    return out, [(w.category.__name__, str(w.message)) for w in caught]


def assert_same(jt_fn, th_fn):
    jt, th = result(jt_fn), result(th_fn)
    assert jt == th


P = collections.namedtuple("P", ["x", "y"])


@dataclasses.dataclass
class Record:
    a: int
    b: float


class ReadOnlyMap(collections.abc.Mapping):
    """A Mapping that is not a MutableMapping: collate rebuilds it from a dict."""

    def __init__(self, d):
        self._d = dict(d)

    def __getitem__(self, k):
        return self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


class DefaultDict(collections.defaultdict):
    pass


class Text(str):
    pass


def samples(fw):
    """Batches (lists of samples) of every kind, built with ``fw`` (jitorch or torch) where tensors appear."""
    return {
        "namedtuple_of_tensors_and_str": [P(fw.ones(2), "a"), P(fw.zeros(2), "b")],
        "namedtuple_of_numpy": [P(np.zeros(2), np.int64(1)), P(np.ones(2), np.int64(2))],
        "namedtuple_then_tuple": [P(1, 2), (1, 2, 3)],
        "dataclass": [Record(1, 2.0), Record(3, 4.0)],
        "str_subclass": [Text("a"), Text("b")],
        "np_str_scalars": [np.str_("a"), np.str_("b")],
        "np_bytes_scalars": [np.bytes_(b"a"), np.bytes_(b"b")],
        "bytearray": [bytearray(b"a"), bytearray(b"b")],
        "np_float64": [np.float64(1.5), np.float64(2)],
        "np_float16": [np.float16(1.5), np.float16(2)],
        "np_uint16": [np.uint16(3), np.uint16(4)],
        "np_complex64": [np.complex64(1 + 2j), np.complex64(3)],
        "np_bool": [np.bool_(True), np.bool_(False)],
        "np_mixed_scalars": [np.int32(1), np.float32(2)],
        "np_scalar_then_int": [np.int32(1), 2],
        "int_then_np_scalar": [1, np.int32(2)],
        "np_arrays_0d": [np.array(1.0), np.array(2.0)],
        "np_arrays_uint32": [np.arange(3, dtype=np.uint32), np.arange(3, dtype=np.uint32)],
        "np_arrays_float16": [np.ones(2, np.float16), np.zeros(2, np.float16)],
        "np_arrays_mixed_dtypes": [np.zeros(2, np.float32), np.zeros(2, np.float64)],
        "np_arrays_mixed_shapes": [np.zeros(2), np.zeros(3)],
        "np_arrays_strided": [np.arange(6.0)[::2], np.arange(6.0)[1::2]],
        "np_arrays_negative_stride": [np.arange(3.0)[::-1], np.arange(3.0)],
        "np_arrays_object": [np.array([1, None], dtype=object), np.array([1, 2], dtype=object)],
        "np_arrays_object_0d": [np.array(1, dtype=object), np.array(2, dtype=object)],
        "np_arrays_bytes": [np.array([b"a"]), np.array([b"b"])],
        "np_array_then_scalar": [np.ones(2), np.float64(1.0)],
        "nested_mixed": [{"a": {"b": [1, "x", 2.0]}, "c": (np.int32(1), [True])},
                         {"a": {"b": [2, "y", 3.0]}, "c": (np.int32(2), [False])}],
        "dict_of_namedtuples": [{"p": P(1, [2.0])}, {"p": P(3, [4.0])}],
        "int_and_str_keys": [{1: 1, "a": 2}, {1: 3, "a": 4}],
        "dict_missing_key": [{"a": 1, "b": 2}, {"a": 3}],
        "empty_containers": [([], {}), ([], {})],
        "read_only_mapping": [ReadOnlyMap({"a": 1}), ReadOnlyMap({"a": 2})],
        "mapping_proxy": [types.MappingProxyType({"a": 1}), types.MappingProxyType({"a": 2})],
        "defaultdict_subclass": [DefaultDict(list, {"a": 1}), DefaultDict(list, {"a": 2})],
        "deque": [collections.deque([1, 2]), collections.deque([3, 4])],
        "array_array": [array.array("i", [1]), array.array("i", [2])],
        "tuple_lengths_differ": [(1, 2), (3,)],
        "tensor_shapes_differ_last": [fw.zeros(2, 3), fw.zeros(2, 3), fw.zeros(3, 2)],
        "tensor_dtypes_differ": [fw.ones(2, dtype=fw.int32), fw.ones(2, dtype=fw.float16)],
        "tensors_empty": [fw.zeros(0), fw.zeros(0)],
        "tensors_bfloat16": [fw.ones(2, dtype=fw.bfloat16), fw.zeros(2, dtype=fw.bfloat16)],
        "parameters": [fw.nn.Parameter(fw.ones(2)), fw.nn.Parameter(fw.zeros(2))],
        "int_then_tensor": [1, fw.tensor(2)],
        "ints_beyond_int64": [2 ** 63, 1],
        "ints_below_int64": [1, -2 ** 63 - 1],
        "int_then_float": [1, 2.5],
        "float_then_int": [1.5, 2],
        "bool_then_int": [True, 2],
        "str_then_int": ["a", 1],
        "none": [None, None],
        "python_complex": [1j, 2j],
        "sets": [{1}, {2}],
        "empty_batch": [],
    }


CASES = list(samples(torch))


# -- default_collate / default_convert ----------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES)
def test_default_collate_matches_torch(case):
    assert_same(lambda: jdata.default_collate(samples(jitorch)[case]),
                lambda: tdata.default_collate(samples(torch)[case]))


@pytest.mark.parametrize("case", CASES)
def test_default_convert_of_a_batch_and_of_one_sample_matches_torch(case):
    assert_same(lambda: jdata.default_convert(samples(jitorch)[case]),
                lambda: tdata.default_convert(samples(torch)[case]))
    assert_same(lambda: jdata.default_convert(samples(jitorch)[case][:1][0] if samples(jitorch)[case] else None),
                lambda: tdata.default_convert(samples(torch)[case][:1][0] if samples(torch)[case] else None))


def test_collate_of_parameters_returns_a_plain_tensor_like_torch():
    jt = jdata.default_collate([jitorch.nn.Parameter(jitorch.ones(2))] * 2)
    th = tdata.default_collate([torch.nn.Parameter(torch.ones(2))] * 2)
    assert type(jt) is jitorch.Tensor and type(th) is torch.Tensor
    assert jt.requires_grad == th.requires_grad and jt.grad_fn is not None


def test_collate_with_a_custom_map_dispatches_like_torch():
    def join(batch, *, collate_fn_map=None):
        return "+".join(batch)

    def tagged(batch, *, collate_fn_map=None):
        return ("int-like", list(batch))

    batch = [("a", 1, True), ("b", 2, False)]
    for fn_map in [{str: join}, {int: tagged}, {(float, int): tagged}, {bool: tagged, int: lambda b, **k: "int"}]:
        assert_same(lambda: jt_collate.collate(batch, collate_fn_map=fn_map),
                    lambda: torch_collate.collate(batch, collate_fn_map=fn_map))
    # No map at all: containers are still walked; the first leaf has nowhere to go.
    assert_same(lambda: jt_collate.collate(batch), lambda: torch_collate.collate(batch))
    # Extending the default map, the way torchvision-style code does.
    extended_jt = {**jt_collate.default_collate_fn_map, str: join}
    extended_th = {**torch_collate.default_collate_fn_map, str: join}
    assert_same(lambda: jt_collate.collate(batch, collate_fn_map=extended_jt),
                lambda: torch_collate.collate(batch, collate_fn_map=extended_th))


@pytest.mark.parametrize("name,arg", [
    ("collate_int_fn", [1, 2]), ("collate_float_fn", [1, 2]), ("collate_str_fn", ["a", "b"]),
    ("collate_numpy_scalar_fn", [np.int8(1), np.int8(2)]), ("collate_numpy_array_fn", [np.array(["a"])]),
])
def test_collate_element_functions_match_torch(name, arg):
    assert_same(lambda: getattr(jt_collate, name)(arg, collate_fn_map=jt_collate.default_collate_fn_map),
                lambda: getattr(torch_collate, name)(arg, collate_fn_map=torch_collate.default_collate_fn_map))


def test_collate_module_constants_match_torch():
    assert jt_collate.default_collate_err_msg_format == torch_collate.default_collate_err_msg_format
    assert jt_collate.np_str_obj_array_pattern.pattern == torch_collate.np_str_obj_array_pattern.pattern
    keys = [k if isinstance(k, tuple) else (k,) for k in jt_collate.default_collate_fn_map]
    th_keys = [k if isinstance(k, tuple) else (k,) for k in torch_collate.default_collate_fn_map]
    assert [[c.__name__ for c in k] for k in keys][1:] == [[c.__name__ for c in k] for k in th_keys][1:]


# -- the tensor-construction errors that collation surfaces -------------------------------------------------------
@pytest.mark.parametrize("data,dtype", [
    ([2 ** 63, 1], None), ([1, 2 ** 63], "int32"), ([[1], [2 ** 63]], None), ([2 ** 63, 1], "uint64"),
    ([2 ** 63, 1], "float32"), ([2 ** 63, 1], "bool"), ([1.5, 2 ** 63], None), ([2.0 ** 63], "int64"),
])
def test_tensor_from_ints_beyond_int64_matches_torch(data, dtype):
    assert_same(lambda: jitorch.tensor(data, dtype=getattr(jitorch, dtype) if dtype else None),
                lambda: torch.tensor(data, dtype=getattr(torch, dtype) if dtype else None))


@pytest.mark.parametrize("data", [
    "a", b"a", np.str_("x"), np.bytes_(b"x"), ["a"], [["a"]], [np.str_("a")], [[b"a"]], (b"a",), [1, "a"],
    ["a", 1], [1.0, b"a"], [[1, 2], [3, "a"]],
], ids=repr)
def test_tensor_from_text_raises_torchs_errors(data):
    assert_same(lambda: jitorch.as_tensor(data), lambda: torch.as_tensor(data))


@pytest.mark.parametrize("array", [np.array(["a"]), np.array([b"a"]), np.array([1, None], dtype=object),
                                   np.zeros(1, "m8[s]"), np.zeros(1, [("a", "i4")])], ids=lambda a: a.dtype.str)
def test_from_numpy_names_unsupported_dtypes_like_torch(array):
    with pytest.raises(TypeError) as th:
        torch.from_numpy(array)
    with pytest.raises(TypeError) as jt:
        jitorch.from_numpy(array)
    # jitorch also lists bfloat16 (ml_dtypes) among the supported types; the named type is torch's.
    assert str(jt.value).split(". The only")[0] == str(th.value).split(". The only")[0]


# -- the single-process DataLoader --------------------------------------------------------------------------------
class _Pairs:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i, i * 0.5


class Pairs(_Pairs, jdata.Dataset):
    pass


class TorchPairs(_Pairs, tdata.Dataset):
    pass


class _Stream:
    def __init__(self, n, length=None):
        self.n, self.length = n, length

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n if self.length is None else self.length

    def __repr__(self):
        return "Stream"


class Stream(_Stream, jdata.IterableDataset):
    pass


class TorchStream(_Stream, tdata.IterableDataset):
    pass


class _Unsized:
    def __iter__(self):
        return iter(range(3))


class Unsized(_Unsized, jdata.IterableDataset):
    pass


class TorchUnsized(_Unsized, tdata.IterableDataset):
    pass


def loaders(make, **kwargs):
    """``make(data module, dataset classes)`` for jitorch and torch, as two zero-argument functions."""
    jt_classes, th_classes = (Pairs, Stream, Unsized), (TorchPairs, TorchStream, TorchUnsized)
    return lambda: make(jdata, *jt_classes), lambda: make(tdata, *th_classes)


def same_epochs(make, epochs=lambda loader: (len(loader), list(loader))):
    jt_make, th_make = loaders(make)
    assert_same(lambda: epochs(jt_make()), lambda: epochs(th_make()))


@pytest.mark.parametrize("kwargs", [
    dict(batch_size=None), dict(batch_size=3, drop_last=True), dict(batch_size=2, drop_last=True),
    dict(batch_size=2, sampler=[6, 5, 1]), dict(batch_size=None, sampler=[3, 1]), dict(batch_size=7),
], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_loader_options_match_torch(kwargs):
    same_epochs(lambda d, Map, It, Unsized: d.DataLoader(Map(7), **kwargs))


def test_loader_without_batching_converts_numpy_like_torch():
    data = [np.arange(2, dtype=np.int16), {"a": np.float32(1.0), "s": "x"}]
    same_epochs(lambda d, *_: d.DataLoader(data, batch_size=None))


def test_empty_dataset_gives_no_batches():
    same_epochs(lambda d, Map, *_: d.DataLoader(Map(0), batch_size=3))


@pytest.mark.parametrize("kwargs", [
    dict(sampler=[0], batch_sampler=[[0]]), dict(batch_sampler=[[0]], batch_size=None), dict(batch_size=0),
    dict(batch_size=-1), dict(batch_size=2.0), dict(batch_size=2, drop_last=1), dict(num_workers=0, timeout=3),
    dict(shuffle=False, sampler=[1, 0]), dict(batch_sampler=[[2, 0], [1]]),
    dict(num_workers=0, prefetch_factor=0), dict(num_workers=0, multiprocessing_context="spawn"),
], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_loader_argument_combinations_match_torch(kwargs):
    same_epochs(lambda d, Map, *_: d.DataLoader(Map(3), **kwargs))


def test_shuffled_loader_without_batching_yields_each_sample_once():
    g = jitorch.Generator().manual_seed(0)
    loader = jdata.DataLoader(Pairs(9), batch_size=None, shuffle=True, generator=g)
    epochs = [[i for i, _ in loader] for _ in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(9)) and epochs[0] != epochs[1]
    assert type(loader.sampler).__name__ == "RandomSampler" and loader.batch_sampler is None


def test_loader_iterates_twice_and_its_iterator_reports_torchs_lengths():
    def epochs(loader):
        it = iter(loader)
        first = next(it)
        return len(loader), len(it), first, list(it), next(it, "end"), list(loader)

    same_epochs(lambda d, Map, *_: d.DataLoader(Map(5), batch_size=2), epochs)
    same_epochs(lambda d, _, It, __: d.DataLoader(It(5), batch_size=2), epochs)


@pytest.mark.parametrize("kwargs", [dict(batch_size=2), dict(batch_size=None), dict(batch_size=2, drop_last=True)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_iterable_dataset_longer_than_its_len_warns_like_torch(kwargs):
    # torch warns once len(loader) has been asked for and more batches than it said arrive; never before.
    same_epochs(lambda d, _, It, __: d.DataLoader(It(5, length=2), **kwargs))
    same_epochs(lambda d, _, It, __: d.DataLoader(It(5, length=2), **kwargs), lambda loader: list(loader))


def test_iterable_dataset_without_len():
    same_epochs(lambda d, *_, Unsized: d.DataLoader(Unsized(), batch_size=2))
    same_epochs(lambda d, *_, Unsized: d.DataLoader(Unsized(), batch_size=2), lambda loader: list(loader))


def test_loader_attributes_match_torch():
    def attributes(loader):
        return (loader.batch_size, loader.drop_last, type(loader.sampler).__name__,
                type(loader.batch_sampler).__name__, loader.prefetch_factor, loader.timeout, loader.in_order,
                loader.pin_memory_device, loader._auto_collation, loader.collate_fn.__name__,
                loader.persistent_workers, loader.multiprocessing_context)

    same_epochs(lambda d, Map, *_: d.DataLoader(Map(5), batch_size=2), attributes)
    same_epochs(lambda d, Map, *_: d.DataLoader(Map(5), batch_size=None), attributes)
    same_epochs(lambda d, _, It, __: d.DataLoader(It(5), num_workers=1, batch_size=3), attributes)
    for name in ["dataset", "sampler", "persistent_workers", "generator", "collate_fn"]:
        same_epochs(lambda d, Map, *_: d.DataLoader(Map(2)), lambda loader: setattr(loader, name, None))


@pytest.mark.parametrize("kwargs", [dict(pin_memory=True), dict(pin_memory=True, pin_memory_device="cuda"),
                                    dict(pin_memory=True, num_workers=1)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_pin_memory_without_an_accelerator_warns_like_torch(kwargs):
    assert not jitorch.runtime.cuda_available() and not torch.cuda.is_available()
    same_epochs(lambda d, Map, *_: d.DataLoader(Map(3), batch_size=2, **kwargs), lambda loader: list(loader))
