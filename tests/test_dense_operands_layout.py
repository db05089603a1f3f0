"""The native pointwise kernels that copy their operands dense first (`native_eager.dense_operands`: fmod/remainder,
lerp/addcmul, add with alpha, the `special_formula` rows) give torch's values and torch's result layout: the layout
of the first operand that has the result's shape and is not expanded (an expanded first operand does not decide)."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same

_A = np.abs(np.random.default_rng(0).standard_normal((40, 30))).astype(np.float32) * 0.5 + 0.1
_ROW = np.abs(np.random.default_rng(1).standard_normal((1, 30))).astype(np.float32) * 0.5 + 0.1


def _operand(lib, kind):
    if kind == "expanded":
        return lib.tensor(_ROW).expand(40, 30)
    if kind == "transposed":
        return lib.tensor(np.ascontiguousarray(_A.T)).t()
    if kind == "row":
        return lib.tensor(_ROW)
    return lib.tensor(_A)


_OPS = {
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "lerp": lambda lib, a, b: lib.lerp(a, b, 0.3),
    "addcmul": lambda lib, a, b: lib.addcmul(a, b, b, value=0.5),
    "add_alpha": lambda lib, a, b: lib.add(a, b, alpha=0.25),
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "erfinv": lambda lib, a, b: lib.erfinv(a),
}


@pytest.mark.parametrize("name", sorted(_OPS))
@pytest.mark.parametrize("kinds", [("expanded", "transposed"), ("transposed", "expanded"), ("transposed", "row"),
                                   ("expanded", "contiguous"), ("row", "transposed")])
def test_values_and_layout_match_torch(name, kinds):
    fn = _OPS[name]
    got = fn(jitorch, *(_operand(jitorch, k) for k in kinds))
    want = fn(torch, *(_operand(torch, k) for k in kinds))
    # (the special-function formulas are ATen's within an ulp or two; the others are bit for bit)
    assert_same(got, want, rtol=1e-6 if name in ("xlogy", "erfinv") else 0.0)
    assert got.stride() == want.stride()


@pytest.mark.parametrize("name", ["fmod", "remainder"])
def test_transposed_dividend_by_a_non_finite_number(name):
    # the kernel refuses a non-finite constant: NumPy's path computes it (it used to fail putting None back in order)
    for divisor in (float("inf"), float("-inf"), float("nan")):
        got = getattr(jitorch, name)(_operand(jitorch, "transposed"), divisor)
        want = getattr(torch, name)(_operand(torch, "transposed"), divisor)
        assert_same(got, want)
