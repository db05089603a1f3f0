"""F.grouped_mm (mixture-of-experts grouped products) against torch: four operand layouts, gradients, dtypes."""
import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
from helpers import check_op, make_array

OFFS = np.array([4, 4, 9, 16], np.int32)      # an empty group too


def _offs(lib):
    return lib.tensor(OFFS)


@pytest.mark.parametrize("shapes", [((16, 8), (4, 8, 8)), ((4, 8, 8), (4, 8, 8)), ((8, 16), (16, 8)),
                                    ((4, 8, 8), (8, 16))], ids=["2d-3d", "3d-3d", "2d-2d", "3d-2d"])
@pytest.mark.parametrize("dtype", ["float32"])     # torch's CPU kernel refuses float64
def test_grouped_products_and_gradients_match_torch(shapes, dtype):
    rng = np.random.default_rng(sum(map(sum, shapes)))
    a, b = (make_array(s, dtype, rng) for s in shapes)
    both_3d = len(shapes[0]) == 3 and len(shapes[1]) == 3

    def run(lib):
        return lambda x, y: lib.nn.functional.grouped_mm(x, y, offs=None if both_3d else _offs(lib))
    check_op(run(jitorch), run(torch), [a, b], atol=1e-5, rtol=1e-5)


def test_bfloat16_inputs_match_torch_and_out_dtype_accumulates_in_float32():
    rng = np.random.default_rng(1)
    a, b = make_array((16, 8), "float32", rng), make_array((4, 8, 8), "float32", rng)
    got = JF.grouped_mm(jitorch.tensor(a).bfloat16(), jitorch.tensor(b).bfloat16(), offs=_offs(jitorch))
    want = torch.nn.functional.grouped_mm(torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16(), offs=_offs(torch))
    assert got.dtype == jitorch.bfloat16 and want.dtype == torch.bfloat16
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=1e-2, atol=1e-2)
    # torch's CPU kernel refuses out_dtype; on jitorch it keeps the float32 products of the bfloat16 values
    wide = JF.grouped_mm(jitorch.tensor(a).bfloat16(), jitorch.tensor(b).bfloat16(), offs=_offs(jitorch),
                         out_dtype=jitorch.float32)
    exact = torch.nn.functional.grouped_mm(torch.tensor(a).bfloat16().float(), torch.tensor(b).bfloat16().float(),
                                           offs=_offs(torch))
    assert wide.dtype == jitorch.float32
    np.testing.assert_allclose(wide.numpy(), exact.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes", [((7, 3), (4, 3, 2)), ((3, 7), (7, 2))])
def test_gradcheck_in_float64(shapes):
    rng = np.random.default_rng(2)
    a, b = (jitorch.tensor(make_array(s, "float64", rng), requires_grad=True) for s in shapes)
    offs = jitorch.tensor([2, 2, 5, 7][:4 if len(shapes[1]) == 3 else 3], dtype=jitorch.int32)
    assert jitorch.autograd.gradcheck(lambda x, y: JF.grouped_mm(x, y, offs=offs), (a, b))


def test_rows_and_columns_past_the_last_offset_are_zero():
    offs = jitorch.tensor([2, 3], dtype=jitorch.int32)
    rows = JF.grouped_mm(jitorch.ones(5, 2), jitorch.ones(2, 2, 3), offs=offs)
    assert rows[3:].abs().sum().item() == 0 and rows[:3].tolist() == [[2.0] * 3] * 3
    cols = JF.grouped_mm(jitorch.ones(2, 4, 2), jitorch.ones(2, 5), offs=offs)
    assert cols[:, 3:].abs().sum().item() == 0 and cols[:, :3].tolist() == [[2.0] * 3] * 4


def test_bad_operands_are_refused_by_name():
    offs = jitorch.tensor([2, 4], dtype=jitorch.int32)
    with pytest.raises(RuntimeError, match="grouped_mm: mat_a and mat_b must be 2-D or 3-D, got 1-D and 3-D"):
        JF.grouped_mm(jitorch.ones(4), jitorch.ones(2, 4, 4), offs=offs)
    with pytest.raises(RuntimeError, match="grouped_mm: offs is required when mat_a is 2-D"):
        JF.grouped_mm(jitorch.ones(4, 4), jitorch.ones(2, 4, 4))
    with pytest.raises(RuntimeError, match="grouped_mm: offs must be None when both operands are 3-D"):
        JF.grouped_mm(jitorch.ones(2, 4, 4), jitorch.ones(2, 4, 4), offs=offs)
    with pytest.raises(RuntimeError, match="grouped_mm: offs must be a 1-D int32 tensor"):
        JF.grouped_mm(jitorch.ones(4, 4), jitorch.ones(2, 4, 4), offs=jitorch.tensor([2, 4]))
    with pytest.raises(RuntimeError, match=r"grouped_mm: offs must be non-decreasing .* got \[3, 2\]"):
        JF.grouped_mm(jitorch.ones(4, 4), jitorch.ones(2, 4, 4), offs=jitorch.tensor([3, 2], dtype=jitorch.int32))
    with pytest.raises(RuntimeError, match="grouped_mm: offs has 2 groups but the 3-D operand has 3"):
        JF.grouped_mm(jitorch.ones(4, 4), jitorch.ones(3, 4, 4), offs=offs)
    with pytest.raises(RuntimeError, match="grouped_mm: mat_a and mat_b must have the same dtype"):
        JF.grouped_mm(jitorch.ones(4, 4), jitorch.ones(2, 4, 4, dtype=jitorch.float64), offs=offs)
    with pytest.raises(RuntimeError, match="grouped_mm: bias is not supported"):
        JF.grouped_mm(jitorch.ones(4, 4), jitorch.ones(2, 4, 4), offs=offs, bias=jitorch.ones(2, 4))
