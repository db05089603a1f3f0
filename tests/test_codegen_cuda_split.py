"""Two-pass CUDA reductions (`codegen.cuda_split`) for few output points over huge reductions: when they are used,
what the two kernels compute, 64-bit indexing past 2**31 points, and that NVRTC compiles them without warnings."""
import re

import pytest

from jitorch.codegen import nvrtc
from jitorch.codegen.cuda_split import SPLIT, emit_cuda_split, split_needed
from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op, reduced

BIG = 2**31 + 5


def _full(n, dt="f32", reduce="sum", value=None):
    return Kernel((n,), (Buffer(dt, (1,)), Buffer(dt, (0,))), (Store(1, value or load(0, dt), reduce),), 1)


CASES = {
    "sum_f32": _full(1 << 24, value=op("exp", load(0, "f32"))),
    "max_f64": _full(3 << 20, "f64", "max"),
    "bool_any": _full(1 << 22, "bool", "max"),
    "index64_sum_i64": _full(BIG, "i64"),
    # three rows of 2**21: a mean written by a row store, a min, and a pointwise store of the same pass
    "rows_mean_min_and_pointwise": Kernel(
        (3, 1 << 21), (Buffer("f32", (1 << 21, 1)), Buffer("f32", (1, 0)), Buffer("f32", (1, 0)),
                       Buffer("f32", (1 << 21, 1))),
        (Store(None, load(0, "f32"), "sum"), Store(2, load(0, "f32"), "min"),
         Store(3, op("mul", load(0, "f32"), const(2, "f32"))),
         Store(1, op("div", reduced(0, "f32"), const(1 << 21, "f32")), row=True)), 1),
}


def test_split_is_chosen_for_few_outputs_over_huge_reductions_only():
    assert split_needed(CASES["sum_f32"]) and split_needed(CASES["rows_mean_min_and_pointwise"])
    assert not split_needed(_full(1000))  # small: one block per point is fine
    many = Kernel((4096, 1 << 20), (Buffer("f32", (1 << 20, 1)), Buffer("f32", (1, 0))),
                  (Store(1, load(0, "f32"), "sum"),), 1)
    assert not split_needed(many)  # enough output points to fill the GPU
    phased = Kernel((1, 1 << 21), (Buffer("f32", (0, 1)), Buffer("f32", (0, 1))),
                    (Store(None, load(0, "f32"), "max"),
                     Store(1, op("sub", load(0, "f32"), reduced(0, "f32")), phase=1)), 1)
    assert not split_needed(phased)
    with pytest.raises(ValueError, match="single-pass"):
        emit_cuda_split(phased, "k")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_both_passes_compile_with_nvrtc(name, arch):
    kernel = CASES[name]
    split = emit_cuda_split(kernel, name)
    for source, fn in zip((split.partial, split.final), split.names):
        result = nvrtc.compile(source, fn, arch=arch)
        assert result.log == "", f"NVRTC warnings:\n{result.log}\n{nvrtc.number_lines(source)}"
        assert fn in nvrtc.cubin_function_symbols(result.cubin)
        wide = name.startswith("index64")
        assert (f"{64 if wide else 32}-bit indices" in source) and (("long long r" in source) == wide
                                                                    or fn.endswith("final"))
    outputs = kernel.shape[0] if len(kernel.shape) > 1 else 1
    assert [w[2] for w in split.workspaces] == [outputs * SPLIT] * sum(1 for s in kernel.stores if s.reduce)


def _body(source):
    """The kernel function's body (after its parameter list)."""
    kernel = source[source.index('extern "C"'):]
    return kernel[kernel.index(") {"):]


def test_partial_pass_covers_each_point_once_and_final_pass_combines():
    split = emit_cuda_split(CASES["rows_mean_min_and_pointwise"], "k")
    partial, final = _body(split.partial), _body(split.final)
    n = 1 << 21
    chunk = int(re.search(r"lo = c \* (\d+)u;", partial).group(1))
    assert chunk * SPLIT >= n > chunk * (SPLIT - 1)
    # the pointwise store and both accumulations happen in the first pass, none of them in the second
    assert "buf3[ro3] = " in partial and "buf3" not in final
    assert "ws0[p * 256u + c] = acc0;" in partial and "ws1[p * 256u + c] = acc1;" in partial
    assert "acc0 = (acc0 + ws0[p * 256u + c]);" in final and "ws1[p * 256u + c]" in final
    # the row store (the mean, from the combined sum) and the min are written by the second pass only
    assert re.search(r"buf1\[po1\] = ", final) and "buf2[po2] = acc1;" in final
    assert "buf1" not in partial and "buf2" not in partial
