"""torch.<view>_copy functions, the top-level in-place spellings, torch.sym_*, torch.functional, to_dlpack:
values, strides (always contiguous) and gradients against torch."""
import math

import numpy as np
import pytest
import torch

import jitorch
from helpers import LAYOUTS, check_op, make_array

VIEW_CASES = [
    ("alias_copy", (4, 3, 2), ()), ("diagonal_copy", (4, 3, 2), (0, 0, 1)), ("diagonal_copy", (3, 3), (1,)),
    ("expand_copy", (1, 3, 2), ((5, 3, 2),)), ("permute_copy", (4, 3, 2), ((2, 0, 1),)),
    ("select_copy", (4, 3, 2), (1, -1)), ("slice_copy", (4, 3, 2), (0, 1, 4, 2)), ("slice_copy", (5,), ()),
    ("squeeze_copy", (4, 1, 2), ()), ("squeeze_copy", (4, 1, 2), (1,)), ("t_copy", (3, 5), ()), ("t_copy", (0,), ()),
    ("transpose_copy", (4, 3, 2), (0, 2)), ("unfold_copy", (7, 3), (0, 3, 2)), ("unsqueeze_copy", (4, 3), (1,)),
    ("view_copy", (4, 3), ((-1,),)), ("as_strided_copy", (4, 3), ((2, 2), (1, 3), 1)),
    ("split_copy", (5, 3), (2,)), ("split_with_sizes_copy", (5, 3), ([1, 4],)), ("unbind_copy", (3, 2), (1,)),
    ("permute_copy", (), ((),)), ("alias_copy", (0, 3), ()),
]


def _strides(out):
    return [t.stride() for t in (out if isinstance(out, (tuple, list)) else [out])]


@pytest.mark.parametrize("name,shape,args", VIEW_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("layout", ["contiguous", LAYOUTS[-1]])
def test_view_copies_match_torch_with_contiguous_results(name, shape, args, layout):
    if name in ("view_copy", "as_strided_copy"):
        layout = "contiguous"                   # views of a strided input: torch refuses view, as_strided reads memory
    x = make_array(shape, "float32", np.random.default_rng(len(name)))
    ran = check_op(lambda t: getattr(jitorch, name)(t, *args), lambda t: getattr(torch, name)(t, *args), [x],
                   layout=layout)
    ours, theirs = ran
    assert isinstance(ours, tuple) == isinstance(theirs, tuple)
    assert _strides(ours) == _strides(theirs)


def test_view_copies_own_their_memory_and_take_out():
    x = jitorch.arange(6.).reshape(2, 3)
    y = jitorch.permute_copy(x, (1, 0))
    y[0, 0] = 100.0
    assert x[0, 0].item() == 0.0
    out = jitorch.empty(0)
    assert jitorch.transpose_copy(x, 0, 1, out=out) is out
    np.testing.assert_array_equal(out.numpy(), x.numpy().T)
    parts = [jitorch.empty(1), jitorch.empty(1)]
    assert jitorch.split_copy(x, 1, 0, out=parts) is None
    np.testing.assert_array_equal(parts[1].numpy(), [[3.0, 4.0, 5.0]])
    with pytest.raises(RuntimeError, match="split_copy: out= holds 1 tensors, the split makes 2"):
        jitorch.split_copy(x, 1, 0, out=[jitorch.empty(1)])


def test_view_as_real_and_complex_copies_and_detach_copy():
    z = np.array([1 + 2j, -3 + 0.5j], np.complex64)
    r = jitorch.view_as_real_copy(jitorch.tensor(z))
    np.testing.assert_array_equal(r.numpy(), torch.view_as_real_copy(torch.tensor(z)).numpy())
    c = jitorch.view_as_complex_copy(r)
    np.testing.assert_array_equal(c.numpy(), z)
    leaf = jitorch.ones(3, requires_grad=True)
    d = jitorch.detach_copy(leaf)
    assert not d.requires_grad and d.grad_fn is None
    d += 1
    assert leaf.detach().tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("name,values,extra", [("arccosh_", [1.5, 3.0], ()), ("arcsinh_", [-1.0, 2.0], ()),
                                               ("arctanh_", [-0.5, 0.25], ()), ("i0_", [0.5, -2.0], ()),
                                               ("ldexp_", [1.5, -2.0], (torch.tensor([2, 3]),)),
                                               ("gcd_", [12, 18], (torch.tensor([8, 27]),)),
                                               ("lcm_", [4, 6], (torch.tensor([6, 4]),))])
def test_top_level_inplace_spellings_write_their_input(name, values, extra):
    want = torch.tensor(values)
    got = jitorch.tensor(values)
    jextra = tuple(jitorch.tensor(e.numpy()) for e in extra)
    assert getattr(jitorch, name)(got, *jextra) is got
    getattr(torch, name)(want, *extra)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert str(got.dtype).rpartition(".")[2] == str(want.dtype).rpartition(".")[2]


@pytest.mark.parametrize("name,args", [("sym_max", (2, 3)), ("sym_max", (2, 3.0)), ("sym_max", (3.0, 2)),
                                       ("sym_max", (True, 0)), ("sym_min", (2, 3.0)), ("sym_min", (-1, -1)),
                                       ("sym_int", (3.7,)), ("sym_int", (-3.7,)), ("sym_int", (5,)),
                                       ("sym_float", (3,)), ("sym_not", (True,)), ("sym_sqrt", (2,)),
                                       ("sym_sum", ([1, 2, 3],)), ("sym_sum", ([],)), ("sym_ite", (False, 1, 2))])
def test_sym_functions_give_torchs_values_and_types(name, args):
    got, want = getattr(jitorch, name)(*args), getattr(torch, name)(*args)
    assert got == want and type(got) is type(want)


def test_sym_constrain_range_refuses_as_torch():
    for args, kwargs in [((5,), {"min": 0, "max": 3}), ((-1,), {}), ((1,), {"min": 2})]:
        for fn in ("sym_constrain_range", "sym_constrain_range_for_size"):
            try:
                getattr(torch, fn)(*args, **kwargs)
                want = None
            except RuntimeError as refusal:
                want = str(refusal)
            if want is None:
                assert getattr(jitorch, fn)(*args, **kwargs) is None
            else:
                with pytest.raises(RuntimeError) as got:
                    getattr(jitorch, fn)(*args, **kwargs)
                assert str(got.value) == want
    assert not isinstance(3, jitorch.SymInt) and not isinstance(math.pi, jitorch.SymFloat)


def test_torch_functional_module_and_dlpack_and_out_of_memory_error():
    import torch.functional as theirs

    import jitorch.functional as ours
    assert sorted(ours.__all__) == sorted(theirs.__all__)
    np.testing.assert_array_equal(ours.einsum("ij->i", jitorch.ones(2, 3)).numpy(),
                                  theirs.einsum("ij->i", torch.ones(2, 3)).numpy())
    x = jitorch.arange(4.0)
    shared = torch.from_dlpack(jitorch.to_dlpack(x))
    x[0] = 7.0
    assert shared[0].item() == 7.0
    with pytest.raises(TypeError, match="to_dlpack: expected a Tensor, got list"):
        jitorch.to_dlpack([1])
    assert issubclass(jitorch.OutOfMemoryError, RuntimeError)
    assert jitorch.OutOfMemoryError is jitorch.cuda.OutOfMemoryError


def test_view_copy_takes_inputs_a_view_cannot_and_out_dtype_must_match():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    ours = jitorch.view_copy(jitorch.tensor(x).transpose(0, 1), (20, 3))
    theirs = torch.view_copy(torch.tensor(x).transpose(0, 1), (20, 3))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert jitorch.view_copy(jitorch.ones(2), jitorch.int32).tolist() == torch.view_copy(torch.ones(2),
                                                                                          torch.int32).tolist()
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got double instead"):
        jitorch.permute_copy(jitorch.ones(2, 3), (1, 0), out=jitorch.empty(0, dtype=jitorch.float64))
    assert type(jitorch.sym_max(np.float32(2), 1)) is float
    assert type(jitorch.to_dlpack(jitorch.ones(2, requires_grad=True))).__name__ == "PyCapsule"
